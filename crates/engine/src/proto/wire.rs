//! The out-of-band handshake codec: versioned, length-framed JSON messages
//! exchanged over the TCP control connection before, during and after a
//! test.
//!
//! A frame is a 12-byte header followed by the payload:
//!
//! | bytes | field | value |
//! |---|---|---|
//! | 0..4 | magic | `b"RDPF"` ([`MAGIC`]) |
//! | 4..6 | protocol version | u16 big-endian ([`PROTOCOL_VERSION`]) |
//! | 6 | message kind | u8, see [`Message::kind`] |
//! | 7 | flags | u8, must be 0 |
//! | 8..12 | payload length | u32 big-endian, at most [`MAX_PAYLOAD`] |
//!
//! The payload is the message body as UTF-8 JSON: an object holding the
//! variant's fields (`{}` for [`Message::Heartbeat`] and [`Message::Bye`]).
//! GIDs travel as 32 lowercase hex digits.
//!
//! Two families of messages share the frame, each a [`Framed`] type that
//! knows its own kinds: the pair protocol's [`Message`] (this module) and
//! cluster mode's rank ↔ coordinator messages
//! ([`crate::cluster::messages::ClusterMessage`]). A kind of the other family
//! is an unknown kind to a reader.
//!
//! Decoding never trusts the peer: the header is checked field by field
//! (magic, version, flags, length, kind) before any payload is read or
//! allocated, the JSON must match the kind exactly (unknown fields are
//! rejected, as both sides speak the same version), and every list is
//! bounded. No input panics. After any error other than
//! [`WireError::Closed`] the connection is out of step and should be
//! dropped.

use std::io::{self, Read, Write};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::results::record::SideRecord;

/// The first four bytes of every frame.
pub const MAGIC: [u8; 4] = *b"RDPF";
/// The protocol version this build speaks; both sides must agree exactly.
/// Version 2: `Hello` and `Accept` carry `sides`, a list of [`SideInfo`]
/// (one per device), where version 1 carried one `side`. Version 3:
/// `Hello` says how the queue pairs connect ([`QpConnection`]), `Accept`
/// carries the server's rdma_cm port when they connect through rdma_cm.
/// Kinds 10 and up (cluster mode, [`crate::cluster::messages`]) came without
/// a new version: they change no existing message, and a peer that does
/// not know them refuses them as unknown kinds.
pub const PROTOCOL_VERSION: u16 = 3;
/// Largest accepted payload, in bytes.
/// 4 MiB: a `Hello` or `Accept` with `MAX_QPS` queue pairs at their widest
/// (about 145 bytes of JSON each, 2.4 MB) fits.
pub const MAX_PAYLOAD: u32 = 4 << 20;
/// Length of the frame header, in bytes.
pub const HEADER_LEN: usize = 12;
/// Largest accepted number of queue pairs in one message.
pub const MAX_QPS: usize = 16384;
/// Largest accepted number of device sides (`sides`) in one `Hello` or
/// `Accept`; at least one is required.
/// 64: a node has at most 8 to 16 rails (RDMA NICs, some of them
/// dual-port), so 64 leaves room for every port of every device of the
/// biggest nodes while keeping what a peer can make us hold small: a side
/// is at most a few hundred bytes of JSON (a device name is at most 64
/// bytes), so 64 of them add tens of KB to a `Hello`, far inside
/// [`MAX_PAYLOAD`].
pub const MAX_SIDES: usize = 64;

/// Longest error reason kept from a malformed payload, in bytes.
const MAX_REASON: usize = 200;

const KIND_HELLO: u8 = 1;
const KIND_ACCEPT: u8 = 2;
const KIND_REJECT: u8 = 3;
const KIND_BARRIER: u8 = 4;
const KIND_HEARTBEAT: u8 = 5;
const KIND_DONE: u8 = 6;
const KIND_ERROR: u8 = 7;
const KIND_BYE: u8 = 8;
const KIND_BUSY: u8 = 9;

/// What one side tells the other about one of its queue pairs and the
/// memory region the peer may write into.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QpInfo {
    /// Queue pair number.
    pub qpn: u32,
    /// Initial packet sequence number.
    pub psn: u32,
    /// Local identifier (0 on RoCE).
    pub lid: u16,
    /// GID (raw bytes, network order); hex on the wire.
    #[serde(with = "gid_hex")]
    pub gid: [u8; 16],
    /// Remote key of the memory region.
    pub rkey: u32,
    /// Virtual address of the memory region.
    pub addr: u64,
    /// Length of the memory region, in bytes.
    pub len: u64,
}

/// What one side tells the other about its device and port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SideInfo {
    /// Device name, e.g. `mlx5_0`.
    pub device: String,
    /// Port number (1-based).
    pub port: u8,
    /// GID index in use, when one is (RoCE, or IB with `-x`).
    pub gid_index: Option<u32>,
    /// GID in use (all zero when none); hex on the wire.
    #[serde(with = "gid_hex")]
    pub gid: [u8; 16],
    /// Active path MTU in bytes.
    pub mtu: u32,
    /// `IB` or `Ethernet`.
    pub link_layer: String,
    /// Negotiated link rate as the kernel prints it, when known.
    pub rate: Option<String>,
    /// The device's `max_qp_rd_atom`: most RDMA READs or atomics one of
    /// its QPs can have outstanding (as initiator or responder).
    #[serde(default)]
    pub max_rd_atom: u32,
}

/// How the two sides connect their queue pairs (the client's choice, which
/// the server follows, as the rest of the configuration).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QpConnection {
    /// Each side moves its QPs to RTS itself, from the QP numbers, PSNs
    /// and GIDs of [`QpInfo`] (perftest's default).
    #[default]
    QpExchange,
    /// Through the RDMA connection manager (perftest's `-R`): the client
    /// connects each QP to the server's rdma_cm listener (the port in
    /// `Accept`); [`QpInfo`] then carries only the memory (QP numbers,
    /// PSNs and GIDs are the connection manager's).
    RdmaCm,
}

/// Bytes of [`CmTag`] on the wire: rdma_cm's private data of each
/// connect (16 fits every transport whole).
pub const CM_TAG_LEN: usize = 16;

/// What an rdmaperf client says with each rdma_cm connect (its private
/// data): QP `qp` of `qps`, for the listener on `port`. The server
/// accepts the requests of its session in order and turns away any other
/// (a request from another program, or one of another session).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmTag {
    /// The QP's index, from 0.
    pub qp: u32,
    /// The session's number of QPs.
    pub qps: u32,
    /// The server's rdma_cm port the client was told.
    pub port: u16,
}

impl CmTag {
    /// The private data: [`MAGIC`], `qp`, `qps`, `port` (big-endian), two
    /// zero bytes.
    pub fn encode(self) -> [u8; CM_TAG_LEN] {
        let mut b = [0u8; CM_TAG_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4..8].copy_from_slice(&self.qp.to_be_bytes());
        b[8..12].copy_from_slice(&self.qps.to_be_bytes());
        b[12..14].copy_from_slice(&self.port.to_be_bytes());
        b
    }

    /// The tag in a request's private data (InfiniBand pads it with
    /// zeros: the bytes beyond are ignored); `None` when it is not one.
    pub fn decode(data: &[u8]) -> Option<Self> {
        let b = data.get(..CM_TAG_LEN)?;
        if b[0..4] != MAGIC || b[14..16] != [0, 0] {
            return None;
        }
        let word = |at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let tag = Self {
            qp: word(4),
            qps: word(8),
            port: u16::from_be_bytes([b[12], b[13]]),
        };
        (tag.qp < tag.qps).then_some(tag)
    }
}

/// One handshake message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Message {
    /// Kind 1, client to server: the test the client wants to run, its
    /// configuration (opaque JSON, so that the codec does not depend on
    /// the configuration types), its devices and ports and its queue pairs.
    Hello {
        /// Test name, e.g. `write_bw`.
        test: String,
        /// The test configuration.
        config: Value,
        /// The client's devices and ports, one entry per device:
        /// 1..=[`MAX_SIDES`] entries.
        sides: Vec<SideInfo>,
        /// The client's queue pairs.
        qps: Vec<QpInfo>,
        /// How the queue pairs connect.
        #[serde(default)]
        connection: QpConnection,
    },
    /// Kind 2, server to client: the server runs the test.
    Accept {
        /// The server's devices and ports, one entry per device:
        /// 1..=[`MAX_SIDES`] entries.
        sides: Vec<SideInfo>,
        /// The server's queue pairs, one per client queue pair.
        qps: Vec<QpInfo>,
        /// The path MTU both sides use, in bytes.
        mtu: u32,
        /// The port of the server's rdma_cm listener, on the address the
        /// client reached, when the QPs connect through rdma_cm.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cm_port: Option<u16>,
    },
    /// Kind 3, server to client: the server will not run the test.
    Reject {
        /// Why, for the user.
        reason: String,
    },
    /// Kind 4: both sides reached `phase`.
    Barrier {
        /// Phase number.
        phase: u32,
    },
    /// Kind 5: still alive.
    Heartbeat,
    /// Kind 6: this side finished `phase`, with its result when it has one.
    Done {
        /// Phase number.
        phase: u32,
        /// This side's result (opaque JSON). On the wire `None` is an
        /// absent field and `Some(Value::Null)` is `null`, so both
        /// round-trip.
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "present"
        )]
        result: Option<Value>,
    },
    /// Kind 7: this side failed; the test is over.
    Error {
        /// What went wrong, for the user.
        message: String,
    },
    /// Kind 8: orderly goodbye before closing the connection.
    Bye,
    /// Kind 9, server to client: the server is running another client's
    /// test; this connection is closed after this message.
    Busy {
        /// What the server is busy with, for the user.
        reason: String,
    },
}

/// A field that is present, even as `null`, is `Some`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

impl Message {
    /// The kind byte of this message in the frame header.
    pub fn kind(&self) -> u8 {
        match self {
            Self::Hello { .. } => KIND_HELLO,
            Self::Accept { .. } => KIND_ACCEPT,
            Self::Reject { .. } => KIND_REJECT,
            Self::Barrier { .. } => KIND_BARRIER,
            Self::Heartbeat => KIND_HEARTBEAT,
            Self::Done { .. } => KIND_DONE,
            Self::Error { .. } => KIND_ERROR,
            Self::Bye => KIND_BYE,
            Self::Busy { .. } => KIND_BUSY,
        }
    }

    /// Lowercase name of this message, e.g. `hello`, for errors such as
    /// "expected accept, got barrier".
    pub fn name(&self) -> &'static str {
        match kind_name(self.kind()) {
            Some(name) => name,
            None => "unknown",
        }
    }
}

/// Text a peer sent (an error, a reason, a test name), made safe to
/// print on a terminal: every control character (escape sequences, bells,
/// newlines) becomes `?`, and beyond `max_chars` characters the rest is
/// replaced by a count of the bytes left out.
pub fn printable(text: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_chars * 4));
    for (n, (i, c)) in text.char_indices().enumerate() {
        if n == max_chars {
            out.push_str(&format!("… ({} more bytes)", text.len() - i));
            break;
        }
        out.push(if c.is_control() { '?' } else { c });
    }
    out
}

/// How many characters of a peer's text are shown.
pub const MAX_PEER_TEXT: usize = 500;

/// Lowercase name of a message kind (`1` → `hello`), or `None` when the
/// kind is not one this version knows.
pub fn kind_name(kind: u8) -> Option<&'static str> {
    Some(match kind {
        KIND_HELLO => "hello",
        KIND_ACCEPT => "accept",
        KIND_REJECT => "reject",
        KIND_BARRIER => "barrier",
        KIND_HEARTBEAT => "heartbeat",
        KIND_DONE => "done",
        KIND_ERROR => "error",
        KIND_BYE => "bye",
        KIND_BUSY => "busy",
        _ => return None,
    })
}

/// A family of messages carried in this module's frames: the pair
/// protocol's [`Message`], cluster mode's
/// [`crate::cluster::messages::ClusterMessage`]. Each knows its own kinds and
/// bounds; the framing, the header checks and the JSON body are shared.
pub trait Framed: Serialize + DeserializeOwned + Sized {
    /// The kind byte of this message in the frame header.
    fn kind(&self) -> u8;
    /// The lowercase name of one of this family's kinds, `None` for a
    /// kind it does not know.
    fn kind_name(kind: u8) -> Option<&'static str>;
    /// Checks every bounded list of the message.
    ///
    /// # Errors
    /// [`WireError::TooMany`] or [`WireError::TooFew`] naming the list.
    fn check_limits(&self) -> Result<(), WireError>;
    /// The message of a kind without fields (`{}` on the wire), if
    /// `kind` is one.
    fn unit(kind: u8) -> Option<Self>;

    /// The largest payload this family accepts, in bytes, checked from
    /// the header before anything is read (at most [`MAX_PAYLOAD`]).
    fn max_payload() -> u32 {
        MAX_PAYLOAD
    }
}

impl Framed for Message {
    fn kind(&self) -> u8 {
        Message::kind(self)
    }

    fn kind_name(kind: u8) -> Option<&'static str> {
        kind_name(kind)
    }

    fn check_limits(&self) -> Result<(), WireError> {
        check_limits(self)
    }

    fn unit(kind: u8) -> Option<Self> {
        match kind {
            KIND_HEARTBEAT => Some(Self::Heartbeat),
            KIND_BYE => Some(Self::Bye),
            _ => None,
        }
    }
}

/// Why a message could not be sent or received.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The connection failed (other than by timing out).
    #[error("handshake connection failed: {0}")]
    Io(#[source] io::Error),
    /// The socket's read or write timeout expired.
    #[error("timed out waiting for the peer")]
    Timeout,
    /// The peer closed the connection between two messages.
    #[error("peer closed the connection")]
    Closed,
    /// The frame ended early: the peer closed the connection in the middle
    /// of a message, or (for [`decode`]) the buffer holds only part of one.
    #[error("truncated message: the frame ended before its header or payload was complete")]
    Truncated,
    /// The first four bytes are not [`MAGIC`].
    #[error(
        "bad magic {} from the peer, expected \"RDPF\"{}",
        show_bytes(.found),
        hint_suffix(*.hint)
    )]
    BadMagic {
        /// The four bytes found.
        found: [u8; 4],
        /// What the bytes look like, when recognised (e.g. "peer speaks
        /// perftest's protocol, not rdmaperf's").
        hint: Option<&'static str>,
    },
    /// The peer speaks another protocol version.
    #[error("peer speaks rdmaperf protocol version {theirs}, we speak {ours}")]
    VersionMismatch {
        /// [`PROTOCOL_VERSION`].
        ours: u16,
        /// The peer's.
        theirs: u16,
    },
    /// The flags byte is not zero.
    #[error("frame flags {0:#04x} are not zero (no flags are defined in this protocol version)")]
    BadFlags(u8),
    /// The payload length exceeds [`MAX_PAYLOAD`].
    #[error("frame payload of {len} bytes exceeds the maximum of {max} bytes")]
    TooLarge {
        /// The length claimed (or needed, when encoding).
        len: u32,
        /// [`MAX_PAYLOAD`].
        max: u32,
    },
    /// The kind byte names no message this version knows.
    #[error("unknown message kind {0}")]
    UnknownKind(u8),
    /// The payload is not valid JSON for its kind.
    #[error("malformed {name} message: {reason}")]
    Malformed {
        /// The kind byte.
        kind: u8,
        /// The kind's name.
        name: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A list is longer than its bound.
    #[error("too many {what}: {count} (at most {max})")]
    TooMany {
        /// What the list holds, e.g. `queue pairs`.
        what: &'static str,
        /// Its length.
        count: usize,
        /// The bound.
        max: usize,
    },
    /// A list is shorter than its bound (an empty `sides`).
    #[error("too few {what}: {count} (at least {min})")]
    TooFew {
        /// What the list holds, e.g. `device sides`.
        what: &'static str,
        /// Its length.
        count: usize,
        /// The bound.
        min: usize,
    },
}

impl From<io::Error> for WireError {
    /// Socket timeouts (`WouldBlock`, `TimedOut`) become
    /// [`WireError::Timeout`], an early end of file
    /// [`WireError::Truncated`], anything else [`WireError::Io`].
    fn from(e: io::Error) -> Self {
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Self::Timeout,
            io::ErrorKind::UnexpectedEof => Self::Truncated,
            _ => Self::Io(e),
        }
    }
}

fn show_bytes(b: &[u8; 4]) -> String {
    let hex: Vec<String> = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{} ({:?})", hex.join(" "), String::from_utf8_lossy(b))
}

fn hint_suffix(hint: Option<&'static str>) -> String {
    hint.map(|h| format!(": {h}")).unwrap_or_default()
}

/// What four bytes that are not [`MAGIC`] look like, when recognisable.
fn recognise(found: &[u8; 4]) -> Option<&'static str> {
    // perftest opens with its version string ("6.21", NUL-padded) and then
    // sends its keys as hex fields separated by ':' ("0000:000000:…").
    let perftest_byte = |b: &u8| b.is_ascii_hexdigit() || matches!(b, b':' | b'.' | 0);
    if found[0].is_ascii_hexdigit() && found.iter().all(perftest_byte) {
        return Some("peer speaks perftest's protocol, not rdmaperf's");
    }
    if [b"GET ", b"POST", b"PUT ", b"HEAD", b"HTTP"].contains(&found) {
        return Some("peer speaks HTTP, not rdmaperf's protocol");
    }
    if found == b"SSH-" {
        return Some("peer speaks SSH, not rdmaperf's protocol");
    }
    if found[0] == 0x16 && found[1] == 0x03 {
        return Some("peer speaks TLS, not rdmaperf's protocol");
    }
    None
}

fn check_magic(found: [u8; 4]) -> Result<(), WireError> {
    if found == MAGIC {
        Ok(())
    } else {
        Err(WireError::BadMagic {
            found,
            hint: recognise(&found),
        })
    }
}

/// Checks a whole header of a frame of family `M`; returns the kind and
/// the payload length.
fn parse_header<M: Framed>(h: &[u8; HEADER_LEN]) -> Result<(u8, u32), WireError> {
    check_magic([h[0], h[1], h[2], h[3]])?;
    let version = u16::from_be_bytes([h[4], h[5]]);
    if version != PROTOCOL_VERSION {
        return Err(WireError::VersionMismatch {
            ours: PROTOCOL_VERSION,
            theirs: version,
        });
    }
    let (kind, flags) = (h[6], h[7]);
    if flags != 0 {
        return Err(WireError::BadFlags(flags));
    }
    let len = u32::from_be_bytes([h[8], h[9], h[10], h[11]]);
    let max = M::max_payload().min(MAX_PAYLOAD);
    if len > max {
        return Err(WireError::TooLarge { len, max });
    }
    if M::kind_name(kind).is_none() {
        return Err(WireError::UnknownKind(kind));
    }
    Ok((kind, len))
}

/// Checks every bounded list of a message.
fn check_limits(msg: &Message) -> Result<(), WireError> {
    let (Message::Hello { sides, qps, .. } | Message::Accept { sides, qps, .. }) = msg else {
        return Ok(());
    };
    if sides.is_empty() {
        return Err(WireError::TooFew {
            what: "device sides",
            count: 0,
            min: 1,
        });
    }
    for (what, count, max) in [
        ("device sides", sides.len(), MAX_SIDES),
        ("queue pairs", qps.len(), MAX_QPS),
    ] {
        if count > max {
            return Err(WireError::TooMany { what, count, max });
        }
    }
    Ok(())
}

/// Cuts a reason (which may quote peer input) to [`MAX_REASON`] bytes.
fn clip(mut reason: String) -> String {
    if reason.len() > MAX_REASON {
        let mut end = MAX_REASON;
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
        reason.push('…');
    }
    reason
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Decodes the payload of a frame of family `M` whose header said `kind`.
fn decode_payload<M: Framed>(kind: u8, payload: &[u8]) -> Result<M, WireError> {
    let Some(name) = M::kind_name(kind) else {
        return Err(WireError::UnknownKind(kind));
    };
    let malformed = |reason: String| WireError::Malformed {
        kind,
        name,
        reason: clip(reason),
    };
    let body: Value = serde_json::from_slice(payload).map_err(|e| malformed(e.to_string()))?;
    let Value::Object(fields) = body else {
        return Err(malformed(format!(
            "expected a JSON object, got {}",
            json_type(&body)
        )));
    };
    let msg = match M::unit(kind) {
        Some(unit) => {
            if let Some(field) = fields.keys().next() {
                return Err(malformed(format!(
                    "unknown field `{field}`, expected no fields"
                )));
            }
            unit
        }
        None => {
            let mut wrapped = serde_json::Map::new();
            wrapped.insert(name.to_owned(), Value::Object(fields));
            serde_json::from_value(Value::Object(wrapped)).map_err(|e| malformed(e.to_string()))?
        }
    };
    msg.check_limits()?;
    Ok(msg)
}

/// The JSON payload of a message.
fn encode_payload<M: Framed>(msg: &M) -> Result<Vec<u8>, WireError> {
    let kind = msg.kind();
    let name = M::kind_name(kind).unwrap_or("unknown");
    let malformed = |reason: String| WireError::Malformed { kind, name, reason };
    let body = match serde_json::to_value(msg).map_err(|e| malformed(e.to_string()))? {
        // Struct variants serialise as {"name": {fields}}: send the fields.
        Value::Object(mut outer) => outer
            .remove(name)
            .ok_or_else(|| malformed("no body after serialisation".to_owned()))?,
        // Unit variants serialise as "name": send an empty object.
        Value::String(_) => Value::Object(serde_json::Map::new()),
        other => return Err(malformed(format!("serialised as {}", json_type(&other)))),
    };
    serde_json::to_vec(&body).map_err(|e| malformed(e.to_string()))
}

/// Encodes one message (of either family) as a complete frame (header
/// and payload).
///
/// # Errors
/// [`WireError::TooMany`] when a list exceeds its bound,
/// [`WireError::TooLarge`] when the payload exceeds [`MAX_PAYLOAD`].
pub fn encode<M: Framed>(msg: &M) -> Result<Vec<u8>, WireError> {
    msg.check_limits()?;
    let payload = encode_payload(msg)?;
    let len = match u32::try_from(payload.len()) {
        Ok(len) if len <= M::max_payload().min(MAX_PAYLOAD) => len,
        _ => {
            return Err(WireError::TooLarge {
                len: u32::try_from(payload.len()).unwrap_or(u32::MAX),
                max: M::max_payload().min(MAX_PAYLOAD),
            });
        }
    };
    let mut frame = Vec::with_capacity(HEADER_LEN + payload.len());
    frame.extend_from_slice(&MAGIC);
    frame.extend_from_slice(&PROTOCOL_VERSION.to_be_bytes());
    frame.push(msg.kind());
    frame.push(0);
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&payload);
    Ok(frame)
}

/// Encodes one message and sends it with a single `write_all`, then
/// flushes.
///
/// # Errors
/// Those of [`encode`]; [`WireError::Timeout`] when the socket's write
/// timeout expires; [`WireError::Io`] for other write failures.
pub fn write_message<M: Framed, W: Write>(w: &mut W, msg: &M) -> Result<(), WireError> {
    let frame = encode(msg)?;
    w.write_all(&frame)?;
    w.flush()?;
    Ok(())
}

/// Reads until `buf` is full or the stream ends; returns the bytes read.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> Result<usize, WireError> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(filled)
}

/// Reads one message of the pair protocol from a stream: [`read_frame`]
/// for [`Message`].
///
/// # Errors
/// Those of [`read_frame`].
pub fn read_message<R: Read>(r: &mut R) -> Result<Message, WireError> {
    read_frame(r)
}

/// Reads one message of family `M` from a stream.
///
/// The magic is checked as soon as its four bytes arrive, the rest of the
/// header before the payload is read, and the payload buffer grows only
/// as bytes arrive (never from the claimed length alone).
///
/// # Errors
/// [`WireError::Closed`] when the stream ends before the first byte of a
/// frame; [`WireError::Truncated`] when it ends within one;
/// [`WireError::Timeout`] when the socket's read timeout expires (bytes
/// of a partly read frame are lost, so only a timeout before the first
/// byte leaves the connection usable); any header or payload error
/// described on [`WireError`].
pub fn read_frame<M: Framed, R: Read>(r: &mut R) -> Result<M, WireError> {
    let mut header = [0u8; HEADER_LEN];
    let (magic, rest) = header.split_at_mut(MAGIC.len());
    match read_full(r, magic)? {
        0 => return Err(WireError::Closed),
        n if n < MAGIC.len() => return Err(WireError::Truncated),
        _ => {}
    }
    check_magic([magic[0], magic[1], magic[2], magic[3]])?;
    if read_full(r, rest)? < rest.len() {
        return Err(WireError::Truncated);
    }
    let (kind, len) = parse_header::<M>(&header)?;
    let len = len as usize; // ≤ M::max_payload() ≤ MAX_PAYLOAD
    let mut payload = Vec::with_capacity(len.min(64 * 1024));
    r.take(len as u64).read_to_end(&mut payload)?;
    if payload.len() < len {
        return Err(WireError::Truncated);
    }
    decode_payload(kind, &payload)
}

/// What a frame starting at `bytes` is, from its header alone: its kind's
/// name and its whole length (header and payload), or `None` while fewer
/// than [`HEADER_LEN`] bytes are there or when the header is not valid.
/// Lets a reader that must not consume other messages (a heartbeat thread
/// draining beats) look before it reads.
pub fn peek_header(bytes: &[u8]) -> Option<(&'static str, usize)> {
    let header = bytes.first_chunk::<HEADER_LEN>()?;
    let (kind, len) = parse_header::<Message>(header).ok()?;
    Some((kind_name(kind)?, HEADER_LEN + len as usize))
}

/// Decodes one frame of the pair protocol: [`decode_frame`] for
/// [`Message`].
///
/// # Errors
/// Those of [`decode_frame`].
pub fn decode(frame: &[u8]) -> Result<(Message, usize), WireError> {
    decode_frame(frame)
}

/// Decodes one frame of family `M` from the start of `frame`; returns the
/// message and the number of bytes it took (any bytes after it are left
/// alone).
///
/// # Errors
/// [`WireError::Truncated`] when `frame` holds only part of a frame (a
/// bad magic is reported as soon as four bytes are there); any header or
/// payload error described on [`WireError`].
pub fn decode_frame<M: Framed>(frame: &[u8]) -> Result<(M, usize), WireError> {
    if let Some(magic) = frame.first_chunk::<4>() {
        check_magic(*magic)?;
    }
    let Some(header) = frame.first_chunk::<HEADER_LEN>() else {
        return Err(WireError::Truncated);
    };
    let (kind, len) = parse_header::<M>(header)?;
    let end = HEADER_LEN + len as usize;
    let Some(payload) = frame.get(HEADER_LEN..end) else {
        return Err(WireError::Truncated);
    };
    Ok((decode_payload(kind, payload)?, end))
}

/// The frames arriving on a non-blocking connection, one message at a
/// time: bytes are fed in as they come ([`FrameReader::feed`]), whole
/// frames taken out ([`FrameReader::take`]). The header is checked as
/// soon as it is there, so a peer cannot make it hold more than one
/// frame of at most its family's [`Framed::max_payload`] bytes beyond what it has decoded
/// (when the caller takes every whole frame after each feed); an idle
/// reader holds no buffer.
#[derive(Debug, Default)]
pub struct FrameReader {
    bytes: Vec<u8>,
    start: usize,
}

impl FrameReader {
    /// Capacity kept between frames; a larger buffer is given back.
    const KEEP: usize = 4096;

    /// Bytes that arrived.
    pub fn feed(&mut self, data: &[u8]) {
        self.bytes.extend_from_slice(data);
    }

    /// Whether bytes of a frame not yet whole are held.
    pub fn partial(&self) -> bool {
        self.start < self.bytes.len()
    }

    /// The next whole message, `Ok(None)` while it is incomplete.
    ///
    /// # Errors
    /// Any header or payload error of [`decode_frame`] but
    /// [`WireError::Truncated`]: the connection is then out of step.
    pub fn take<M: Framed>(&mut self) -> Result<Option<M>, WireError> {
        match decode_frame::<M>(&self.bytes[self.start..]) {
            Ok((msg, used)) => {
                self.start += used;
                if self.start == self.bytes.len() {
                    if self.bytes.capacity() > Self::KEEP {
                        self.bytes = Vec::new();
                    } else {
                        self.bytes.clear();
                    }
                    self.start = 0;
                } else if self.start > Self::KEEP {
                    self.bytes.drain(..self.start);
                    self.start = 0;
                }
                Ok(Some(msg))
            }
            Err(WireError::Truncated) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// GIDs as 32 lowercase hex digits.
mod gid_hex {
    use std::fmt;

    use serde::de::{self, Visitor};
    use serde::{Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(gid: &[u8; 16], s: S) -> Result<S::Ok, S::Error> {
        let mut text = String::with_capacity(32);
        for b in gid {
            text.push_str(&format!("{b:02x}"));
        }
        s.serialize_str(&text)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 16], D::Error> {
        d.deserialize_str(GidVisitor)
    }

    struct GidVisitor;

    impl Visitor<'_> for GidVisitor {
        type Value = [u8; 16];

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a GID as 32 hex digits")
        }

        fn visit_str<E: de::Error>(self, s: &str) -> Result<[u8; 16], E> {
            let bad = || E::invalid_value(de::Unexpected::Str(super::short(s)), &self);
            let digits = s.as_bytes();
            if digits.len() != 32 {
                return Err(bad());
            }
            let mut gid = [0u8; 16];
            for (byte, pair) in gid.iter_mut().zip(digits.chunks_exact(2)) {
                let hi = (pair[0] as char).to_digit(16).ok_or_else(bad)?;
                let lo = (pair[1] as char).to_digit(16).ok_or_else(bad)?;
                *byte = (hi * 16 + lo) as u8;
            }
            Ok(gid)
        }
    }
}

/// At most 40 bytes of peer text, for error messages.
fn short(s: &str) -> &str {
    let mut end = s.len().min(40);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl From<&SideInfo> for SideRecord {
    fn from(s: &SideInfo) -> Self {
        Self {
            device: s.device.clone(),
            port: s.port,
            gid_index: s.gid_index,
            gid: crate::fabric::gid::to_ipv6_string(&s.gid),
            mtu: s.mtu,
            link_layer: s.link_layer.clone(),
            rate: s.rate.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn gid(last: u8) -> [u8; 16] {
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[15] = last;
        g
    }

    fn side() -> SideInfo {
        SideInfo {
            device: "mlx5_0".into(),
            port: 1,
            gid_index: Some(3),
            gid: gid(1),
            mtu: 4096,
            link_layer: "Ethernet".into(),
            rate: Some("400 Gb/sec (4X NDR)".into()),
            max_rd_atom: 16,
        }
    }

    fn qp(n: u32) -> QpInfo {
        QpInfo {
            qpn: 0x100 + n,
            psn: 0xabcdef,
            lid: 0,
            gid: gid(2),
            rkey: 0xdead_beef,
            addr: u64::MAX - 7,
            len: 1 << 20,
        }
    }

    fn all_variants() -> Vec<Message> {
        vec![
            Message::Hello {
                test: "write_bw".into(),
                config: serde_json::json!({"size": 65536, "iters": 5000, "bidir": false, "x": [1.5, null]}),
                sides: vec![side()],
                qps: vec![qp(0), qp(1)],
                connection: Default::default(),
            },
            Message::Accept {
                sides: vec![
                    SideInfo {
                        gid_index: None,
                        rate: None,
                        link_layer: "IB".into(),
                        ..side()
                    },
                    SideInfo {
                        device: "mlx5_1".into(),
                        port: 2,
                        ..side()
                    },
                ],
                qps: vec![qp(7)],
                mtu: 1024,
                cm_port: Some(40_001),
            },
            Message::Hello {
                test: "send_bw".into(),
                config: serde_json::json!({}),
                sides: vec![side()],
                qps: vec![qp(0)],
                connection: QpConnection::RdmaCm,
            },
            Message::Reject {
                reason: "no such test \"ü\"".into(),
            },
            Message::Barrier { phase: 3 },
            Message::Heartbeat,
            Message::Done {
                phase: 2,
                result: Some(serde_json::json!({"bw_gbps": 381.2})),
            },
            Message::Done {
                phase: 9,
                result: None,
            },
            Message::Done {
                phase: 10,
                result: Some(Value::Null),
            },
            Message::Error {
                message: "ibv_reg_mr failed".into(),
            },
            Message::Bye,
            Message::Busy {
                reason: "running write_bw for 169.254.0.2:40000".into(),
            },
        ]
    }

    /// A frame with the given header fields around `payload`.
    fn frame(version: u16, kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = MAGIC.to_vec();
        f.extend_from_slice(&version.to_be_bytes());
        f.push(kind);
        f.push(flags);
        f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// A stream that returns its bytes and then an error of `kind`.
    struct Failing {
        data: Cursor<Vec<u8>>,
        kind: io::ErrorKind,
    }

    impl Read for Failing {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            match self.data.read(buf)? {
                0 => Err(io::Error::from(self.kind)),
                n => Ok(n),
            }
        }
    }

    /// A stream that hands out one byte per read, with an interruption
    /// before each.
    struct Trickle {
        data: Vec<u8>,
        pos: usize,
        interrupt: bool,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.interrupt = !self.interrupt;
            if self.interrupt {
                return Err(io::ErrorKind::Interrupted.into());
            }
            if self.pos == self.data.len() || buf.is_empty() {
                return Ok(0);
            }
            buf[0] = self.data[self.pos];
            self.pos += 1;
            Ok(1)
        }
    }

    #[test]
    fn every_variant_round_trips_through_decode_and_read_message() {
        for msg in all_variants() {
            let bytes = encode(&msg).unwrap();
            assert_eq!(&bytes[..4], b"RDPF");
            assert_eq!(bytes[6], msg.kind());
            assert_eq!(
                bytes.len(),
                HEADER_LEN + u32::from_be_bytes(bytes[8..12].try_into().unwrap()) as usize
            );
            assert_eq!(decode(&bytes).unwrap(), (msg.clone(), bytes.len()));
            assert_eq!(read_message(&mut Cursor::new(&bytes)).unwrap(), msg);
        }
    }

    #[test]
    fn a_cm_tag_round_trips_padded_and_anything_else_is_none() {
        let tag = CmTag {
            qp: 3,
            qps: 4,
            port: 40_001,
        };
        let bytes = tag.encode();
        assert_eq!(&bytes[..4], b"RDPF");
        assert_eq!(CmTag::decode(&bytes), Some(tag));
        // InfiniBand's REQ pads the private data to 56 bytes.
        let mut padded = bytes.to_vec();
        padded.resize(56, 0);
        assert_eq!(CmTag::decode(&padded), Some(tag));
        // Short, another program's, a QP beyond the count, trailing junk
        // in the reserved bytes.
        assert_eq!(CmTag::decode(&bytes[..15]), None);
        assert_eq!(CmTag::decode(&[0; 56]), None);
        assert_eq!(CmTag::decode(b"perftest-private"), None);
        let beyond = CmTag { qp: 4, ..tag }.encode();
        assert_eq!(CmTag::decode(&beyond), None);
        let mut junk = bytes;
        junk[15] = 1;
        assert_eq!(CmTag::decode(&junk), None);
    }

    #[test]
    fn kinds_and_names_are_stable() {
        let got: Vec<(u8, &str)> = all_variants()
            .iter()
            .map(|m| (m.kind(), m.name()))
            .collect();
        assert_eq!(
            got,
            [
                (1, "hello"),
                (2, "accept"),
                (1, "hello"),
                (3, "reject"),
                (4, "barrier"),
                (5, "heartbeat"),
                (6, "done"),
                (6, "done"),
                (6, "done"),
                (7, "error"),
                (8, "bye"),
                (9, "busy"),
            ]
        );
        assert_eq!(kind_name(0), None);
        // Kinds 10 and up are cluster mode's (`cluster::messages`).
        assert_eq!(kind_name(10), None);
    }

    #[test]
    fn payload_is_the_body_as_json_with_hex_gids() {
        let bytes = encode(&Message::Barrier { phase: 4 }).unwrap();
        assert_eq!(&bytes[HEADER_LEN..], br#"{"phase":4}"#);
        assert_eq!(&bytes[4..8], &[0, 3, 4, 0]);
        let bytes = encode(&Message::Heartbeat).unwrap();
        assert_eq!(&bytes[HEADER_LEN..], b"{}");
        // A result of None is an absent field; Some(null) is null.
        let bytes = encode(&Message::Done {
            phase: 1,
            result: None,
        })
        .unwrap();
        assert_eq!(&bytes[HEADER_LEN..], br#"{"phase":1}"#);
        let bytes = encode(&Message::Done {
            phase: 1,
            result: Some(Value::Null),
        })
        .unwrap();
        assert_eq!(&bytes[HEADER_LEN..], br#"{"phase":1,"result":null}"#);
        let bytes = encode(&Message::Accept {
            sides: vec![side()],
            qps: vec![],
            mtu: 4096,
            cm_port: None,
        })
        .unwrap();
        let text = std::str::from_utf8(&bytes[HEADER_LEN..]).unwrap();
        assert!(
            text.contains(r#""gid":"fe800000000000000000000000000001""#),
            "{text}"
        );
        assert!(text.contains(r#""sides":[{"device":"mlx5_0","#), "{text}");
    }

    #[test]
    fn messages_read_back_to_back_from_one_stream() {
        let mut stream = Vec::new();
        for msg in all_variants() {
            write_message(&mut stream, &msg).unwrap();
        }
        let mut r = Cursor::new(stream.clone());
        for msg in all_variants() {
            assert_eq!(read_message(&mut r).unwrap(), msg);
        }
        assert!(matches!(read_message(&mut r), Err(WireError::Closed)));

        let mut buf = &stream[..];
        for msg in all_variants() {
            let (got, used) = decode(buf).unwrap();
            assert_eq!(got, msg);
            buf = &buf[used..];
        }
        assert!(buf.is_empty());
    }

    #[test]
    fn read_message_survives_short_reads_and_interruptions() {
        let msg = all_variants().remove(0);
        let mut r = Trickle {
            data: encode(&msg).unwrap(),
            pos: 0,
            interrupt: false,
        };
        assert_eq!(read_message(&mut r).unwrap(), msg);
    }

    #[test]
    fn bad_magic_names_the_bytes() {
        let mut f = encode(&Message::Bye).unwrap();
        f[..4].copy_from_slice(b"XYZW");
        let e = decode(&f).unwrap_err();
        assert!(matches!(e, WireError::BadMagic { found, hint: None } if &found == b"XYZW"));
        let text = e.to_string();
        assert!(text.contains("58 59 5a 57"), "{text}");
        assert!(text.contains("\"XYZW\""), "{text}");
        assert!(text.contains("RDPF"), "{text}");
        assert!(matches!(
            read_message(&mut Cursor::new(&f)),
            Err(WireError::BadMagic { hint: None, .. })
        ));
    }

    #[test]
    fn bad_magic_recognises_perftest() {
        // perftest's key exchange ("lid:out_reads:qpn:psn:rkey:vaddr…") and
        // its version string, NUL-padded.
        for bytes in [
            &b"0000:000000:000111:a3b4c5:00001234:00007f"[..],
            &b"6.21\0\0\0\0\0\0\0\0\0\0\0\0"[..],
            &b"5.5\0\0\0\0\0\0\0\0\0\0\0\0\0"[..],
        ] {
            for e in [
                decode(bytes).unwrap_err(),
                read_message(&mut Cursor::new(bytes)).unwrap_err(),
            ] {
                let text = e.to_string();
                assert!(
                    text.contains("peer speaks perftest's protocol, not rdmaperf's"),
                    "{text}"
                );
            }
        }
        // Only four bytes are needed to tell.
        assert!(matches!(
            decode(b"0000"),
            Err(WireError::BadMagic { hint: Some(_), .. })
        ));
        // Other protocols are named too.
        let e = decode(b"GET / HTTP/1.1\r\n").unwrap_err();
        assert!(e.to_string().contains("HTTP"), "{e}");
        let e = decode(b"SSH-2.0-OpenSSH_9.6\r\n").unwrap_err();
        assert!(e.to_string().contains("SSH"), "{e}");
        let e = decode(&[0x16, 0x03, 0x01, 0x02, 0, 0, 0, 0, 0, 0, 0, 0]).unwrap_err();
        assert!(e.to_string().contains("TLS"), "{e}");
    }

    #[test]
    fn version_mismatch_names_both_versions() {
        let f = frame(7, 4, 0, br#"{"phase":1}"#);
        let e = decode(&f).unwrap_err();
        assert!(matches!(
            e,
            WireError::VersionMismatch { ours: 3, theirs: 7 }
        ));
        assert_eq!(
            e.to_string(),
            "peer speaks rdmaperf protocol version 7, we speak 3"
        );
        assert!(matches!(
            read_message(&mut Cursor::new(&f)),
            Err(WireError::VersionMismatch { theirs: 7, .. })
        ));
    }

    #[test]
    fn a_version_1_hello_with_one_side_is_a_version_mismatch_not_a_json_error() {
        // What a version 1 client sends: one `side`, not `sides`. The
        // header alone refuses it, before its JSON is looked at.
        let v1 = br#"{"test":"write_bw","config":{},"side":{"device":"d","port":1,"gid_index":null,"gid":"00000000000000000000000000000000","mtu":1024,"link_layer":"IB","rate":null},"qps":[]}"#;
        let f = frame(1, 1, 0, v1);
        for e in [
            decode(&f).unwrap_err(),
            read_message(&mut Cursor::new(&f)).unwrap_err(),
        ] {
            assert!(
                matches!(e, WireError::VersionMismatch { ours: 3, theirs: 1 }),
                "{e:?}"
            );
            assert_eq!(
                e.to_string(),
                "peer speaks rdmaperf protocol version 1, we speak 3"
            );
        }
        // The same body under this version is malformed: `side` is gone.
        let e = decode(&frame(PROTOCOL_VERSION, 1, 0, v1)).unwrap_err();
        assert!(e.to_string().contains("unknown field `side`"), "{e}");
    }

    #[test]
    fn nonzero_flags_are_rejected() {
        let f = frame(PROTOCOL_VERSION, 4, 0x80, br#"{"phase":1}"#);
        let e = decode(&f).unwrap_err();
        assert!(matches!(e, WireError::BadFlags(0x80)));
        assert!(e.to_string().contains("0x80"), "{e}");
        assert!(matches!(
            read_message(&mut Cursor::new(&f)),
            Err(WireError::BadFlags(0x80))
        ));
    }

    #[test]
    fn too_large_is_rejected_from_the_header_alone() {
        // A 12-byte header claiming 4 GiB - 1: rejected without reading
        // (or allocating) any payload.
        let mut f = frame(PROTOCOL_VERSION, 1, 0, b"");
        f[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(f.len(), HEADER_LEN);
        let e = decode(&f).unwrap_err();
        assert!(matches!(
            e,
            WireError::TooLarge {
                len: u32::MAX,
                max: MAX_PAYLOAD
            }
        ));
        let text = e.to_string();
        assert!(
            text.contains("4294967295") && text.contains("4194304"),
            "{text}"
        );
        assert!(matches!(
            read_message(&mut Cursor::new(&f)),
            Err(WireError::TooLarge { .. })
        ));
        // One byte over the limit is too large; exactly the limit is not.
        f[8..12].copy_from_slice(&(MAX_PAYLOAD + 1).to_be_bytes());
        assert!(matches!(decode(&f), Err(WireError::TooLarge { .. })));
        f[8..12].copy_from_slice(&MAX_PAYLOAD.to_be_bytes());
        assert!(matches!(decode(&f), Err(WireError::Truncated)));
    }

    #[test]
    fn a_header_is_peeked_without_its_payload() {
        let beat = encode(&Message::Heartbeat).unwrap();
        assert_eq!(peek_header(&beat), Some(("heartbeat", beat.len())));
        let err = encode(&Message::Error {
            message: "x".repeat(5000),
        })
        .unwrap();
        assert_eq!(peek_header(&err[..HEADER_LEN]), Some(("error", err.len())));
        assert_eq!(peek_header(&err[..HEADER_LEN - 1]), None);
        assert_eq!(peek_header(b"GET / HTTP/1.1\r\n"), None);
    }

    #[test]
    fn unknown_kinds_are_rejected() {
        for kind in [0u8, 15, 255] {
            let f = frame(PROTOCOL_VERSION, kind, 0, b"{}");
            let e = decode(&f).unwrap_err();
            assert!(matches!(e, WireError::UnknownKind(k) if k == kind));
            assert_eq!(e.to_string(), format!("unknown message kind {kind}"));
            assert!(matches!(
                read_message(&mut Cursor::new(&f)),
                Err(WireError::UnknownKind(_))
            ));
        }
    }

    #[test]
    fn malformed_payloads_are_rejected_with_the_kind_named() {
        let cases: &[(u8, &[u8], &str)] = &[
            (4, b"{\"phase\":", "EOF"),
            (4, b"not json", "expected"),
            (4, b"\xff\xfe", ""),
            (4, b"[1]", "expected a JSON object, got an array"),
            (4, b"{\"phase\":-1}", "invalid value"),
            (4, b"{\"phase\":4294967296}", "invalid value"),
            (4, b"{\"phase\":1,\"extra\":2}", "unknown field `extra`"),
            (4, b"{}", "missing field `phase`"),
            (4, b"{\"phase\":1} trailing", "trailing"),
            (5, b"{\"x\":1}", "unknown field `x`"),
            (8, b"null", "got null"),
            (3, b"{\"reason\":7}", "invalid type"),
            (2, br#"{"sides":[{"device":"d","port":300,"gid_index":null,"gid":"00000000000000000000000000000000","mtu":1,"link_layer":"IB","rate":null}],"qps":[],"mtu":1}"#, "invalid value"),
            (2, br#"{"sides":[{"device":"d","port":1,"gid_index":null,"gid":"zz000000000000000000000000000000","mtu":1,"link_layer":"IB","rate":null}],"qps":[],"mtu":1}"#, "32 hex digits"),
            (2, br#"{"sides":[{"device":"d","port":1,"gid_index":null,"gid":"00","mtu":1,"link_layer":"IB","rate":null}],"qps":[],"mtu":1}"#, "32 hex digits"),
            (2, br#"{"sides":[{"device":"d","port":1,"gid_index":null,"gid":[0,0],"mtu":1,"link_layer":"IB","rate":null}],"qps":[],"mtu":1}"#, "32 hex digits"),
            // One side, not in a list; a list holding something else.
            (2, br#"{"sides":{"device":"d","port":1,"gid_index":null,"gid":"00000000000000000000000000000000","mtu":1,"link_layer":"IB","rate":null},"qps":[],"mtu":1}"#, "expected a sequence"),
            (2, br#"{"sides":[7],"qps":[],"mtu":1}"#, "invalid type"),
            (2, br#"{"side":{"device":"d","port":1,"gid_index":null,"gid":"00000000000000000000000000000000","mtu":1,"link_layer":"IB","rate":null},"qps":[],"mtu":1}"#, "unknown field `side`"),
        ];
        for &(kind, payload, needle) in cases {
            let f = frame(PROTOCOL_VERSION, kind, 0, payload);
            let e = decode(&f).unwrap_err();
            assert!(
                matches!(&e, WireError::Malformed { kind: k, .. } if *k == kind),
                "{e:?}"
            );
            let text = e.to_string();
            let name = kind_name(kind).unwrap();
            assert!(
                text.starts_with(&format!("malformed {name} message: ")),
                "{text}"
            );
            assert!(text.contains(needle), "{text} lacks {needle}");
            assert!(matches!(
                read_message(&mut Cursor::new(&f)),
                Err(WireError::Malformed { .. })
            ));
        }
    }

    #[test]
    fn malformed_reasons_quoting_peer_text_are_clipped() {
        let field = "a".repeat(10_000);
        let payload = format!("{{\"phase\":1,\"{field}\":0}}");
        let e = decode(&frame(PROTOCOL_VERSION, 4, 0, payload.as_bytes())).unwrap_err();
        let WireError::Malformed { reason, .. } = e else {
            panic!("{e:?}")
        };
        assert!(
            reason.len() <= MAX_REASON + '…'.len_utf8(),
            "{}",
            reason.len()
        );
        assert_eq!(clip("é".repeat(200)).len(), MAX_REASON + '…'.len_utf8());
    }

    #[test]
    fn too_many_qps_are_rejected_both_ways() {
        let qps = vec![qp(0); MAX_QPS + 1];
        let hello = Message::Hello {
            test: "write_bw".into(),
            config: Value::Null,
            sides: vec![side()],
            qps: qps.clone(),
            connection: Default::default(),
        };
        let e = encode(&hello).unwrap_err();
        assert!(matches!(
            e,
            WireError::TooMany {
                what: "queue pairs",
                count: 16385,
                max: 16384
            }
        ));
        assert_eq!(e.to_string(), "too many queue pairs: 16385 (at most 16384)");

        // The decoding check, on the payload directly (encoding refuses).
        let accept = Message::Accept {
            sides: vec![side()],
            qps,
            mtu: 4096,
            cm_port: None,
        };
        let payload = encode_payload(&accept).unwrap();
        assert!(matches!(
            decode_payload::<Message>(2, &payload),
            Err(WireError::TooMany { count: 16385, .. })
        ));
        // At the bound it is fine.
        let at_bound = Message::Accept {
            sides: vec![side()],
            qps: vec![qp(0); MAX_QPS],
            mtu: 4096,
            cm_port: None,
        };
        let payload = encode_payload(&at_bound).unwrap();
        assert_eq!(decode_payload::<Message>(2, &payload).unwrap(), at_bound);
    }

    /// A hello and an accept with `n` sides.
    fn with_sides(n: usize) -> [Message; 2] {
        [
            Message::Hello {
                test: "write_bw".into(),
                config: Value::Null,
                sides: vec![side(); n],
                qps: vec![qp(0)],
                connection: Default::default(),
            },
            Message::Accept {
                sides: vec![side(); n],
                qps: vec![qp(0)],
                mtu: 4096,
                cm_port: None,
            },
        ]
    }

    #[test]
    fn no_sides_and_too_many_sides_are_refused_both_ways() {
        for (n, text) in [
            (0, "too few device sides: 0 (at least 1)"),
            (MAX_SIDES + 1, "too many device sides: 65 (at most 64)"),
        ] {
            for msg in with_sides(n) {
                // Encoding refuses it; decoding too (the payload made
                // directly), from a buffer and from a stream.
                let payload = encode_payload(&msg).unwrap();
                let f = frame(PROTOCOL_VERSION, msg.kind(), 0, &payload);
                for e in [
                    encode(&msg).unwrap_err(),
                    decode(&f).unwrap_err(),
                    read_message(&mut Cursor::new(&f)).unwrap_err(),
                ] {
                    assert!(
                        matches!(
                            e,
                            WireError::TooFew {
                                what: "device sides",
                                ..
                            } | WireError::TooMany {
                                what: "device sides",
                                ..
                            }
                        ),
                        "{e:?}"
                    );
                    assert_eq!(e.to_string(), text);
                }
            }
        }
        // One, and the bound, are fine.
        for n in [1, MAX_SIDES] {
            for msg in with_sides(n) {
                let f = encode(&msg).unwrap();
                assert_eq!(decode(&f).unwrap(), (msg, f.len()));
            }
        }
    }

    #[test]
    fn oversized_messages_are_not_encoded() {
        let e = encode(&Message::Error {
            message: "x".repeat(MAX_PAYLOAD as usize),
        })
        .unwrap_err();
        assert!(matches!(e, WireError::TooLarge { len, max: MAX_PAYLOAD } if len > MAX_PAYLOAD));
    }

    #[test]
    fn truncated_frames_are_reported_as_truncated() {
        let f = encode(&all_variants().remove(0)).unwrap();
        for cut in [1, 3, 4, 11, 12, HEADER_LEN + 1, f.len() - 1] {
            assert!(
                matches!(decode(&f[..cut]), Err(WireError::Truncated)),
                "cut {cut}"
            );
            assert!(
                matches!(
                    read_message(&mut Cursor::new(&f[..cut])),
                    Err(WireError::Truncated)
                ),
                "cut {cut}"
            );
        }
        assert!(matches!(decode(&[]), Err(WireError::Truncated)));
        // Extra bytes after a frame are not consumed.
        let mut two = f.clone();
        two.extend_from_slice(b"RD");
        assert_eq!(decode(&two).unwrap().1, f.len());
    }

    #[test]
    fn clean_close_before_a_header_is_closed() {
        let e = read_message(&mut Cursor::new(Vec::new())).unwrap_err();
        assert!(matches!(e, WireError::Closed));
        assert_eq!(e.to_string(), "peer closed the connection");
    }

    #[test]
    fn socket_timeouts_become_timeout() {
        let f = encode(&Message::Heartbeat).unwrap();
        for kind in [io::ErrorKind::WouldBlock, io::ErrorKind::TimedOut] {
            // Before the first byte, within the header, within the payload.
            for cut in [0, 5, f.len() - 1] {
                let mut r = Failing {
                    data: Cursor::new(f[..cut].to_vec()),
                    kind,
                };
                let e = read_message(&mut r).unwrap_err();
                assert!(matches!(e, WireError::Timeout), "{kind:?} at {cut}: {e:?}");
                assert_eq!(e.to_string(), "timed out waiting for the peer");
            }
        }
        let mut r = Failing {
            data: Cursor::new(Vec::new()),
            kind: io::ErrorKind::ConnectionReset,
        };
        let e = read_message(&mut r).unwrap_err();
        assert!(matches!(&e, WireError::Io(io) if io.kind() == io::ErrorKind::ConnectionReset));
        assert!(
            e.to_string().starts_with("handshake connection failed: "),
            "{e}"
        );
    }

    #[test]
    fn write_message_sends_one_frame_and_maps_write_timeouts() {
        struct Sink {
            writes: usize,
            flushed: bool,
            data: Vec<u8>,
        }
        impl Write for Sink {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                self.writes += 1;
                self.data.extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                self.flushed = true;
                Ok(())
            }
        }
        let mut sink = Sink {
            writes: 0,
            flushed: false,
            data: Vec::new(),
        };
        write_message(&mut sink, &Message::Barrier { phase: 1 }).unwrap();
        assert_eq!((sink.writes, sink.flushed), (1, true));
        assert_eq!(sink.data, encode(&Message::Barrier { phase: 1 }).unwrap());

        struct Stuck;
        impl Write for Stuck {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::ErrorKind::WouldBlock.into())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        assert!(matches!(
            write_message(&mut Stuck, &Message::Bye),
            Err(WireError::Timeout)
        ));
    }

    #[test]
    fn gid_hex_accepts_uppercase_and_round_trips_every_byte() {
        let mut g = [0u8; 16];
        for (i, b) in g.iter_mut().enumerate() {
            *b = (i as u8) * 17;
        }
        let q = QpInfo { gid: g, ..qp(0) };
        let json = serde_json::to_string(&q).unwrap();
        assert!(json.contains("00112233445566778899aabbccddeeff"), "{json}");
        assert_eq!(serde_json::from_str::<QpInfo>(&json).unwrap(), q);
        let upper = json.replace("aabbccddeeff", "AABBCCDDEEFF");
        assert_eq!(serde_json::from_str::<QpInfo>(&upper).unwrap(), q);
        // Non-ASCII of the right byte length is rejected, not sliced.
        let odd = json.replace("00112233445566778899aabbccddeeff", "ééééééééééééééé00");
        assert!(serde_json::from_str::<QpInfo>(&odd).is_err());
    }
}

#[cfg(test)]
mod peer_text {
    use super::*;

    #[test]
    fn peer_text_is_printable_and_capped_before_it_reaches_a_terminal() {
        assert_eq!(printable("no such device", 64), "no such device");
        // An escape sequence that would clear the screen, a bell, a NUL.
        assert_eq!(printable("a\x1b[2Jb\x07c\0d", 64), "a?[2Jb?c?d");
        assert_eq!(printable("line\nnext\ttab", 64), "line?next?tab");
        let long = "x".repeat(10_000);
        let shown = printable(&long, 200);
        assert!(shown.starts_with(&"x".repeat(200)));
        assert!(shown.ends_with("… (9800 more bytes)"), "{shown}");
        assert_eq!(printable("héllo ✓", 64), "héllo ✓");
    }
}
