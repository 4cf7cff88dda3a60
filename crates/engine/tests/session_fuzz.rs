//! Fuzzing of what a server does with a client's bytes, host-only, up to
//! the point where a device is needed.
//!
//! That path is: [`read_message`] on the stream; for a `Hello`, the
//! server's own state machine ([`ServerSession::hello`]: the `config`
//! decoded into [`BwConfig`] (bandwidth tests) or [`LatConfig`] (latency
//! tests), validated, the offered QP count against the configuration's),
//! then the registered-memory estimate. [`server_path`] drives it for
//! both configuration types.
//!
//! wire_props.rs already checks that the codec round-trips and that
//! `decode` and `read_message` agree on damaged input. Here instead:
//!
//! - (a) valid Hello frames, damaged by structure-aware mutations
//!   (numbers in the JSON replaced by extreme literals, field names
//!   swapped, lengths changed, frames spliced, duplicated and appended),
//!   read in a loop: every byte a read consumes is predicted from the
//!   header alone ([`expect_at`]), no read asks for more than the frame,
//!   and whatever validates is inside every cap ([`bw_caps`],
//!   [`lat_caps`]) with memory and ring estimates (what `serve` compares
//!   with `--max-mem`) that checked arithmetic agrees with;
//! - (b) arbitrary JSON values as the `config` of a Hello: extreme
//!   numbers, wrong types, nesting, long arrays, under the configuration's
//!   own field names;
//! - (c) byte streams of up to 64 KiB holding several frames, noise,
//!   headers that claim more than [`MAX_PAYLOAD`] and cut frames: the read
//!   loop ends, and a header claiming too much is refused after its 12
//!   bytes, before any payload is read.
//!
//! Case counts: 2048 for (a), 2048 for (b), 384 for (c), or
//! `PROPTEST_CASES` for all of them (a longer local run).

mod support;

use support::header;

use std::io::{self, Cursor, Read};
use std::time::Duration;

use engine::bench::config::LatConfig;
use engine::bench::config::{
    self, BwConfig, CQ_ENTRY_BYTES, DurationMode, MAX_CQ_MOD, MAX_DURATION_S, MAX_ITERS, MAX_OUTS,
    MAX_QPS, MAX_SEND_QUEUE_ENTRIES, MAX_SIZE, MAX_SIZES, MAX_THREADS, MAX_TX_DEPTH, MIN_ITERS,
    RING_BYTES, SQ_ENTRY_BYTES, TestConfig,
};
use engine::proto::session::ServerSession;
use engine::proto::wire::{
    self, HEADER_LEN, MAGIC, MAX_PAYLOAD, Message, PROTOCOL_VERSION, QpInfo, SideInfo, WireError,
    encode, read_message,
};
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Value, json};

// --- the server's path -------------------------------------------------------

/// How far a configuration got on the server's path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// `serde_json::from_value` refused it.
    Malformed,
    /// `validate` refused it.
    Invalid,
    /// Valid, but the client offers another number of QPs.
    WrongQps,
    /// The hello describes other than one device side.
    Sides,
    /// The server goes on to open the device.
    Accepted,
}

/// What the server concludes from one message, for each kind of server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Outcome {
    bw: Verdict,
    lat: Verdict,
}

/// The server's handling of one message; `None` for anything but a Hello.
/// Every check on an accepted configuration is an assertion.
fn server_path(msg: &Message) -> Result<Option<Outcome>, TestCaseError> {
    let Message::Hello { qps, .. } = msg else {
        return Ok(None);
    };
    prop_assert!(qps.len() <= wire::MAX_QPS);
    Ok(Some(Outcome {
        bw: serve_bw(msg)?,
        lat: serve_lat(msg)?,
    }))
}

/// The server's state machine on a Hello, for a server of `C`'s tests (of
/// the test the Hello asks for, so the name check passes): the decoded
/// configuration, or the verdict read from the refusal's reason.
fn server_hello<C: TestConfig>(msg: &Message) -> Result<Result<C, Verdict>, TestCaseError> {
    let Message::Hello { test, sides, .. } = msg else {
        return Err(TestCaseError::fail("not a hello"));
    };
    let mut server = ServerSession::new(Duration::from_secs(15), u64::MAX);
    let refusal = match server.hello::<C>(msg.clone(), test) {
        Ok(Ok(hello)) => {
            prop_assert_eq!(sides.len(), 1);
            return Ok(Ok(hello.config));
        }
        Ok(Err(refusal)) => refusal.reason,
        Err(e) => {
            return Err(TestCaseError::fail(format!(
                "a hello taken for another message: {e}"
            )));
        }
    };
    prop_assert!(!refusal.is_empty());
    // Any count but one is refused, for that reason (the name is right).
    let sides_refused = refusal.starts_with("this build runs one device per side; ");
    prop_assert_eq!(sides_refused, sides.len() != 1, "{}", refusal);
    if sides_refused {
        return Ok(Err(Verdict::Sides));
    }
    if refusal.starts_with("malformed configuration: ") {
        return Ok(Err(Verdict::Malformed));
    }
    if let Some(why) = refusal.strip_prefix("invalid configuration: ") {
        // A ConfigError names its flag: "FLAG: MESSAGE".
        prop_assert!(why.contains(": "), "{}", why);
        return Ok(Err(Verdict::Invalid));
    }
    prop_assert!(refusal.contains("offers"), "{}", refusal);
    Ok(Err(Verdict::WrongQps))
}

fn serve_bw(msg: &Message) -> Result<Verdict, TestCaseError> {
    let cfg: BwConfig = match server_hello(msg)? {
        Ok(c) => c,
        Err(verdict) => return Ok(verdict),
    };
    bw_caps(&cfg)?;
    bw_memory(&cfg)?;
    Ok(Verdict::Accepted)
}

fn serve_lat(msg: &Message) -> Result<Verdict, TestCaseError> {
    let cfg: LatConfig = match server_hello(msg)? {
        Ok(c) => c,
        Err(verdict) => return Ok(verdict),
    };
    lat_caps(&cfg)?;
    lat_memory(&cfg)?;
    Ok(Verdict::Accepted)
}

/// The caps every test shares (`validate_run`, `validate_outs`), restated.
fn run_caps(
    sizes: &[u64],
    iters: u64,
    duration: Option<DurationMode>,
    mtu: Option<u32>,
    outs: u32,
) -> Result<(), TestCaseError> {
    prop_assert!(
        !sizes.is_empty() && sizes.len() <= MAX_SIZES,
        "{} sizes",
        sizes.len()
    );
    for &s in sizes {
        prop_assert!((1..=MAX_SIZE).contains(&s), "size {}", s);
    }
    match duration {
        None => prop_assert!((MIN_ITERS..=MAX_ITERS).contains(&iters), "iters {}", iters),
        Some(d) => {
            prop_assert!(
                d.seconds.is_finite() && d.seconds > 0.0 && d.seconds <= MAX_DURATION_S,
                "seconds {}",
                d.seconds
            );
            prop_assert!(
                d.margin.is_finite() && d.margin >= 0.0,
                "margin {}",
                d.margin
            );
            prop_assert!(2.0 * d.margin < d.seconds, "{:?}", d);
            prop_assert_eq!(sizes.len(), 1);
            let (run, margin) = d.spans();
            let day = Duration::from_secs_f64(MAX_DURATION_S);
            prop_assert!(
                run <= day && margin <= run,
                "{:?} -> {:?} {:?}",
                d,
                run,
                margin
            );
        }
    }
    if let Some(m) = mtu {
        prop_assert!([256, 512, 1024, 2048, 4096].contains(&m), "mtu {}", m);
    }
    prop_assert!(outs <= MAX_OUTS, "outs {}", outs);
    Ok(())
}

fn bw_caps(c: &BwConfig) -> Result<(), TestCaseError> {
    run_caps(&c.sizes, c.iters, c.duration, c.mtu, c.outs)?;
    prop_assert!((1..=MAX_QPS).contains(&c.qps), "qps {}", c.qps);
    prop_assert!((1..=MAX_THREADS.min(c.qps)).contains(&c.threads), "{:?}", c);
    prop_assert!((1..=MAX_TX_DEPTH).contains(&c.tx_depth), "{:?}", c);
    prop_assert!(
        u64::from(c.qps) * u64::from(c.tx_depth) <= MAX_SEND_QUEUE_ENTRIES,
        "{:?}",
        c
    );
    prop_assert!(
        (1..=MAX_CQ_MOD.min(c.tx_depth)).contains(&c.cq_mod),
        "{:?}",
        c
    );
    prop_assert!((1..=c.tx_depth).contains(&c.post_list), "{:?}", c);
    if c.duration.is_none() {
        prop_assert_eq!(c.iters % u64::from(c.post_list), 0);
    }
    // The threads' shares of the QPs: contiguous, non-empty, all covered.
    let mut next = 0;
    for t in 0..c.threads {
        let r = c.qps_of_thread(t);
        prop_assert!(
            r.start == next && r.end > r.start,
            "thread {} gets {:?}",
            t,
            r
        );
        next = r.end;
    }
    prop_assert_eq!(next, c.qps);
    Ok(())
}

fn lat_caps(c: &LatConfig) -> Result<(), TestCaseError> {
    run_caps(&c.sizes, c.iters, c.duration, c.mtu, c.outs)
}

/// [`config::ring_bytes`] with checked arithmetic: `None` on overflow.
fn checked_rings(qps: u32, cqs: u32, tx_depth: u32, inline_size: u32) -> Option<u64> {
    let blocks = u64::from(inline_size).div_ceil(SQ_ENTRY_BYTES);
    let sq_entry = blocks
        .checked_mul(SQ_ENTRY_BYTES)?
        .checked_add(SQ_ENTRY_BYTES)?;
    let entries = u64::from(qps).checked_mul(u64::from(tx_depth))?;
    let sq = entries.checked_mul(sq_entry)?;
    let rq = u64::from(qps).checked_mul(SQ_ENTRY_BYTES)?;
    let cq = entries
        .checked_add(u64::from(cqs))?
        .checked_mul(CQ_ENTRY_BYTES)?;
    sq.checked_add(rq)?.checked_add(cq)
}

/// What `serve` compares with `--max-mem`: registered memory plus the
/// rings, each exact (the engine saturates; it must never have to).
fn need(memory: Option<u64>, rings: Option<u64>) -> Option<u64> {
    memory?.checked_add(rings?)
}

/// `area × qps × areas` with checked arithmetic: `None` on overflow.
fn checked_memory(area: u64, qps: u32, sends: bool) -> Option<u64> {
    area.checked_mul(u64::from(qps))?
        .checked_mul(if sends { 2 } else { 1 })
}

fn bw_memory(c: &BwConfig) -> Result<(), TestCaseError> {
    let max = c.sizes.iter().copied().max().unwrap_or(0);
    let area = max.max(RING_BYTES);
    prop_assert_eq!(c.buffer_per_qp(), area);
    for sends in [false, true] {
        let exact = checked_memory(area, c.qps, sends);
        prop_assert!(exact.is_some(), "memory of {:?} overflows", c);
        prop_assert_eq!(Some(c.memory_needed(sends)), exact);
        prop_assert_eq!(Some(config::memory_for(area, c.qps, sends)), exact);
        prop_assert!(exact <= checked_memory(MAX_SIZE, MAX_QPS, true));
    }
    // The server's side: QPs, one CQ per thread, its inline size.
    let rings = checked_rings(c.qps, c.threads, c.tx_depth, c.inline_size);
    prop_assert!(rings.is_some(), "rings of {:?} overflow", c);
    prop_assert_eq!(
        Some(config::ring_bytes(
            c.qps,
            c.threads,
            c.tx_depth,
            c.inline_size
        )),
        rings
    );
    for sends in [false, true] {
        prop_assert!(need(checked_memory(area, c.qps, sends), rings).is_some());
    }
    Ok(())
}

fn lat_memory(c: &LatConfig) -> Result<(), TestCaseError> {
    let max = c.sizes.iter().copied().max().unwrap_or(0);
    let rounded = max
        .div_ceil(config::CACHE_LINE)
        .checked_mul(config::CACHE_LINE);
    prop_assert!(rounded.is_some(), "buffer of {:?} overflows", c);
    let buffer = rounded.unwrap_or(0).max(config::CACHE_LINE);
    prop_assert_eq!(c.buffer(), buffer);
    prop_assert!(buffer >= max && buffer <= MAX_SIZE);
    for sends in [false, true] {
        let exact = checked_memory(buffer, 1, sends);
        prop_assert!(exact.is_some());
        prop_assert_eq!(Some(config::memory_for(buffer, 1, sends)), exact);
    }
    // One QP, one CQ, a one-deep send queue.
    let rings = checked_rings(1, 1, 1, c.inline_size);
    prop_assert_eq!(Some(config::ring_bytes(1, 1, 1, c.inline_size)), rings);
    prop_assert!(need(checked_memory(buffer, 1, true), rings).is_some());
    Ok(())
}

// --- reading a stream ----------------------------------------------------------

/// What `read_message` must do with the bytes left in the stream, decided
/// from the header alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Closed,
    Truncated,
    Magic,
    Version,
    Flags,
    TooLarge,
    Kind,
    /// The header is good and the payload is all there: the message, or a
    /// payload error.
    Payload,
}

/// What reading one message from `rest` must give, how many bytes it must
/// consume, and the payload length the header was trusted with (0 when
/// it was not).
fn expect_at(rest: &[u8]) -> (Expect, usize, usize) {
    if rest.is_empty() {
        return (Expect::Closed, 0, 0);
    }
    if rest.len() < MAGIC.len() {
        return (Expect::Truncated, rest.len(), 0);
    }
    if rest[..MAGIC.len()] != MAGIC {
        return (Expect::Magic, MAGIC.len(), 0);
    }
    if rest.len() < HEADER_LEN {
        return (Expect::Truncated, rest.len(), 0);
    }
    if u16::from_be_bytes([rest[4], rest[5]]) != PROTOCOL_VERSION {
        return (Expect::Version, HEADER_LEN, 0);
    }
    if rest[7] != 0 {
        return (Expect::Flags, HEADER_LEN, 0);
    }
    let len = u32::from_be_bytes([rest[8], rest[9], rest[10], rest[11]]);
    if len > MAX_PAYLOAD {
        return (Expect::TooLarge, HEADER_LEN, 0);
    }
    if wire::kind_name(rest[6]).is_none() {
        return (Expect::Kind, HEADER_LEN, 0);
    }
    let len = len as usize;
    if rest.len() - HEADER_LEN < len {
        return (Expect::Truncated, rest.len(), len);
    }
    (Expect::Payload, HEADER_LEN + len, len)
}

fn agrees(expect: Expect, got: &Result<Message, WireError>) -> bool {
    match got {
        Ok(_) => expect == Expect::Payload,
        Err(WireError::Closed) => expect == Expect::Closed,
        Err(WireError::Truncated) => expect == Expect::Truncated,
        Err(WireError::BadMagic { .. }) => expect == Expect::Magic,
        Err(WireError::VersionMismatch { .. }) => expect == Expect::Version,
        Err(WireError::BadFlags(_)) => expect == Expect::Flags,
        Err(WireError::TooLarge { len, max }) => {
            // The cap is the frame kind's own (a cluster table's is larger).
            expect == Expect::TooLarge && *len > *max && *max == MAX_PAYLOAD
        }
        Err(WireError::UnknownKind(_)) => expect == Expect::Kind,
        Err(WireError::Malformed { .. } | WireError::TooMany { .. } | WireError::TooFew { .. }) => {
            expect == Expect::Payload
        }
        Err(_) => false,
    }
}

/// A reader that counts what it hands out and the largest read asked of it.
struct Probe<R> {
    inner: R,
    delivered: usize,
    max_ask: usize,
}

impl<R: Read> Read for Probe<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.max_ask = self.max_ask.max(buf.len());
        let n = self.inner.read(buf)?;
        self.delivered += n;
        Ok(n)
    }
}

/// What a stream gave.
#[derive(Debug, Default)]
struct Run {
    /// Messages read before the first error.
    messages: usize,
    /// The server's conclusions about the Hellos among them.
    hellos: Vec<Outcome>,
    /// The error that ended the loop.
    last: Option<Expect>,
}

/// Reads messages from `bytes` until the first error, as the server's
/// session loop would, and runs every Hello through [`server_path`].
/// Checks every read against [`expect_at`]: same result, same number of
/// bytes consumed, no read asked for more than the frame still needs.
fn read_all(bytes: &[u8]) -> Result<Run, TestCaseError> {
    let mut probe = Probe {
        inner: Cursor::new(bytes),
        delivered: 0,
        max_ask: 0,
    };
    let mut run = Run::default();
    loop {
        let pos = probe.delivered;
        prop_assert!(pos <= bytes.len());
        let (expect, consumes, trusted) = expect_at(&bytes[pos..]);
        probe.max_ask = 0;
        let got = read_message(&mut probe);
        let used = probe.delivered - pos;
        prop_assert!(
            agrees(expect, &got),
            "at {}: expected {:?}, got {:?}",
            pos,
            expect,
            got
        );
        prop_assert_eq!(
            used,
            consumes,
            "at {}: {:?} consumed {} bytes",
            pos,
            got,
            used
        );
        prop_assert_eq!(probe.inner.position() as usize, probe.delivered);
        // The header is read in two parts (4 + 8 bytes); the payload never
        // in reads longer than the length the header claimed.
        let bound = (HEADER_LEN - MAGIC.len()).max(trusted);
        prop_assert!(
            probe.max_ask <= bound,
            "asked {} > {}",
            probe.max_ask,
            bound
        );
        prop_assert!(probe.max_ask <= MAX_PAYLOAD as usize);
        match got {
            Ok(msg) => {
                run.messages += 1;
                prop_assert!(run.messages <= bytes.len() / HEADER_LEN);
                if let Some(outcome) = server_path(&msg)? {
                    run.hellos.push(outcome);
                }
            }
            Err(e) => {
                prop_assert!(!e.to_string().is_empty());
                if let WireError::Malformed { reason, .. } = &e {
                    // Peer text in an error is clipped (200 bytes + "…").
                    prop_assert!(reason.len() <= 203, "{} bytes of reason", reason.len());
                }
                run.last = Some(expect);
                return Ok(run);
            }
        }
    }
}

// --- generators -------------------------------------------------------------------

const MTUS: [u32; 5] = [256, 512, 1024, 2048, 4096];

fn sizes() -> impl Strategy<Value = Vec<u64>> {
    prop_oneof![
        4 => (1..=MAX_SIZE).prop_map(|s| vec![s]),
        1 => Just(vec![1]),
        1 => Just(vec![MAX_SIZE]),
        1 => Just(config::sweep_sizes()),
        2 => prop::collection::vec(1..=MAX_SIZE, 1..=MAX_SIZES),
    ]
}

/// `None`, or a valid duration mode: up to a day, a margin below half.
fn duration() -> impl Strategy<Value = Option<DurationMode>> {
    let seconds = prop_oneof![
        4 => 0.001..=MAX_DURATION_S,
        1 => Just(MAX_DURATION_S),
        1 => Just(1e-9),
    ];
    prop_oneof![
        3 => Just(None),
        1 => (seconds, 0.0..0.45f64).prop_map(|(seconds, f)| Some(DurationMode {
            seconds,
            margin: seconds * f,
        })),
    ]
}

/// Valid bandwidth configurations, from tiny to every cap at once (the big
/// QP counts with shallow queues: at most 4 Mi send-queue entries).
// `..Default::default()` keeps this compiling when a field is added.
#[allow(clippy::needless_update)]
fn valid_bw() -> impl Strategy<Value = BwConfig> {
    let shape = prop_oneof![
        3 => (1u32..=8, 1..=MAX_TX_DEPTH),
        1 => (1..=MAX_QPS, 1u32..=256),
        1 => Just((MAX_QPS, 256)),
    ];
    (shape, sizes(), duration())
        .prop_flat_map(|((qps, tx_depth), sizes, duration)| {
            (
                Just((qps, tx_depth, sizes, duration)),
                1..=qps.min(MAX_THREADS),
                1..=tx_depth.min(MAX_CQ_MOD),
                1..=tx_depth,
            )
        })
        .prop_flat_map(|(fixed, threads, cq_mod, post_list)| {
            let pl = u64::from(post_list);
            let k = prop_oneof![
                3 => MIN_ITERS.div_ceil(pl)..=(100_000 / pl).max(MIN_ITERS.div_ceil(pl)),
                1 => MIN_ITERS.div_ceil(pl)..=MAX_ITERS / pl,
                1 => Just(MAX_ITERS / pl),
            ];
            (
                Just((fixed, threads, cq_mod, post_list)),
                k,
                prop::option::of(prop::sample::select(MTUS.to_vec())),
                0..=MAX_OUTS,
                0u32..=1024,
                any::<bool>(),
            )
        })
        .prop_map(
            |(
                ((qps, tx_depth, sizes, duration), threads, cq_mod, post_list),
                k,
                mtu,
                outs,
                inline_size,
                bidirectional,
            )| {
                let duration = if sizes.len() == 1 { duration } else { None };
                BwConfig {
                    iters: k * u64::from(post_list),
                    sizes,
                    duration,
                    qps,
                    threads,
                    tx_depth,
                    cq_mod,
                    post_list,
                    inline_size,
                    bidirectional,
                    mtu,
                    outs,
                    ..BwConfig::default()
                }
            },
        )
}

// `..Default::default()` keeps this compiling when a field is added.
#[allow(clippy::needless_update)]
fn valid_lat() -> impl Strategy<Value = LatConfig> {
    (
        sizes(),
        prop_oneof![3 => MIN_ITERS..=100_000, 1 => MIN_ITERS..=MAX_ITERS, 1 => Just(MAX_ITERS)],
        duration(),
        0u32..=1024,
        prop::option::of(prop::sample::select(MTUS.to_vec())),
        0..=MAX_OUTS,
    )
        .prop_map(|(sizes, iters, duration, inline_size, mtu, outs)| {
            let duration = if sizes.len() == 1 { duration } else { None };
            LatConfig {
                sizes,
                iters,
                duration,
                inline_size,
                mtu,
                outs,
                ..LatConfig::default()
            }
        })
}

fn side() -> SideInfo {
    SideInfo {
        device: "rxe0".into(),
        port: 1,
        gid_index: Some(1),
        gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 169, 254, 77, 2],
        mtu: 1024,
        link_layer: "Ethernet".into(),
        rate: Some("2.5 Gb/sec (1X SDR)".into()),
        max_rd_atom: 16,
    }
}

fn qp_infos(n: usize, seed: u64) -> Vec<QpInfo> {
    (0..n as u64)
        .map(|i| {
            let x = splitmix(seed ^ i);
            QpInfo {
                qpn: x as u32 & 0xff_ffff,
                psn: (x >> 24) as u32 & 0xff_ffff,
                lid: 0,
                gid: side().gid,
                rkey: (x >> 32) as u32,
                addr: x,
                len: 1 << 16,
            }
        })
        .collect()
}

fn hello(test: &str, config: Value, qps: usize, seed: u64) -> Message {
    Message::Hello {
        test: test.into(),
        config,
        sides: vec![side()],
        qps: qp_infos(qps, seed),
        connection: Default::default(),
    }
}

/// A valid Hello, as a frame, with the outcome the server must reach: a
/// bandwidth configuration with as many QPs as it asks for (up to 8; a
/// bigger one is offered fewer), or a latency configuration with one QP.
fn valid_hello() -> impl Strategy<Value = (Vec<u8>, Outcome)> {
    prop_oneof![
        (valid_bw(), any::<u64>()).prop_map(|(c, seed)| {
            let offered = if c.qps <= 8 { c.qps as usize } else { 3 };
            let msg = hello("write_bw", serde_json::to_value(&c).unwrap(), offered, seed);
            let bw = if offered == c.qps as usize {
                Verdict::Accepted
            } else {
                Verdict::WrongQps
            };
            // A bandwidth configuration has no place for a latency server
            // to refuse it: its extra fields are ignored.
            let lat = if offered == 1 {
                Verdict::Accepted
            } else {
                Verdict::WrongQps
            };
            (encode(&msg).unwrap(), Outcome { bw, lat })
        }),
        (valid_lat(), any::<u64>()).prop_map(|(c, seed)| {
            let msg = hello("write_lat", serde_json::to_value(&c).unwrap(), 1, seed);
            let outcome = Outcome {
                bw: Verdict::Malformed, // no qps, threads, tx_depth ...
                lat: Verdict::Accepted,
            };
            (encode(&msg).unwrap(), outcome)
        }),
    ]
}

/// The configurations' field names, and the duration's.
const FIELDS: [&str; 14] = [
    "sizes",
    "iters",
    "duration",
    "qps",
    "threads",
    "tx_depth",
    "cq_mod",
    "post_list",
    "inline_size",
    "bidirectional",
    "mtu",
    "outs",
    "seconds",
    "margin",
];

/// JSON literals that sit on or just past a cap, or overflow a type.
const LITERALS: [&str; 36] = [
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775808",
    "4294967295",
    "4294967296",
    "-1",
    "-0",
    "0",
    "0.0",
    "1",
    "4",
    "5",
    "1e308",
    "-1e308",
    "1e309",
    "5e-324",
    "1.5",
    "86400",
    "86400.00000000001",
    "43200",
    "8388608",
    "8388609",
    "1099511627776",
    "1099511627777",
    "16384",
    "16385",
    "15000",
    "15001",
    "1024",
    "1025",
    "255",
    "256",
    "null",
    "\"NaN\"",
    "[]",
    "{}",
];

/// One structure-aware way to damage a stream of frames.
#[derive(Debug, Clone)]
enum Mutation {
    /// Flip one bit.
    Flip(Index, u8),
    /// Overwrite one byte.
    Set(Index, u8),
    /// Insert a few bytes.
    Insert(Index, Vec<u8>),
    /// Remove up to n bytes.
    Remove(Index, usize),
    /// Cut the stream.
    Truncate(Index),
    /// Copy up to n bytes from one place to another.
    Duplicate(Index, usize, Index),
    /// Keep the stream up to one point, then the other frame from another.
    Splice(Index, Index),
    /// Append the other frame whole.
    Append,
    /// Replace the i-th number of the first frame's JSON with a literal,
    /// keeping its length field right.
    Number(Index, usize),
    /// Replace the i-th field name of the first frame with another one,
    /// keeping its length field right.
    Rename(Index, usize),
    /// Set the first frame's length field.
    SetLen(u32),
    /// Add to the first frame's length field (wrapping).
    AddLen(i32),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        2 => (any::<Index>(), 0u8..8).prop_map(|(i, b)| Mutation::Flip(i, b)),
        1 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        1 => (any::<Index>(), prop::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
        1 => (any::<Index>(), 1usize..16).prop_map(|(i, n)| Mutation::Remove(i, n)),
        1 => any::<Index>().prop_map(Mutation::Truncate),
        1 => (any::<Index>(), 1usize..64, any::<Index>())
            .prop_map(|(a, n, b)| Mutation::Duplicate(a, n, b)),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Mutation::Splice(a, b)),
        1 => Just(Mutation::Append),
        6 => (any::<Index>(), 0..LITERALS.len()).prop_map(|(i, l)| Mutation::Number(i, l)),
        2 => (any::<Index>(), 0..FIELDS.len()).prop_map(|(i, f)| Mutation::Rename(i, f)),
        1 => prop_oneof![
            any::<u32>(),
            Just(MAX_PAYLOAD),
            Just(MAX_PAYLOAD + 1),
            Just(u32::MAX),
            Just(0)
        ]
        .prop_map(Mutation::SetLen),
        1 => (-16i32..16).prop_map(Mutation::AddLen),
    ]
}

/// Adds `delta` to the length field of the frame at the start of `bytes`.
fn add_len(bytes: &mut [u8], delta: i64) {
    if bytes.len() >= HEADER_LEN {
        let old = u32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        let new = (i64::from(old) + delta) as u32;
        bytes[8..12].copy_from_slice(&new.to_be_bytes());
    }
}

/// The byte ranges of the first frame's payload that look like JSON
/// numbers (runs of digits, signs, dots and exponents with a digit).
fn numbers(bytes: &[u8]) -> Vec<(usize, usize)> {
    let end = if bytes.len() >= HEADER_LEN {
        let len = u32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize;
        bytes.len().min(HEADER_LEN.saturating_add(len))
    } else {
        return vec![];
    };
    let in_number = |b: u8| b.is_ascii_digit() || b"-+.eE".contains(&b);
    let mut out = vec![];
    let mut i = HEADER_LEN;
    while i < end {
        if in_number(bytes[i]) && !bytes[i - 1].is_ascii_alphanumeric() && bytes[i - 1] != b'"' {
            let start = i;
            while i < end && in_number(bytes[i]) {
                i += 1;
            }
            if bytes[start..i].iter().any(u8::is_ascii_digit) {
                out.push((start, i));
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Where the quoted field names of the first frame are.
fn names(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut out = vec![];
    for f in FIELDS {
        let quoted = format!("\"{f}\"");
        let q = quoted.as_bytes();
        for i in HEADER_LEN.min(bytes.len())..bytes.len().saturating_sub(q.len() - 1) {
            if &bytes[i..i + q.len()] == q {
                out.push((i, i + q.len()));
            }
        }
    }
    out.sort_unstable();
    out
}

fn replace(bytes: &mut Vec<u8>, (start, end): (usize, usize), with: &[u8]) {
    bytes.splice(start..end, with.iter().copied());
    add_len(bytes, with.len() as i64 - (end - start) as i64);
}

fn apply(bytes: &mut Vec<u8>, other: &[u8], m: &Mutation) {
    let n = bytes.len();
    match m {
        Mutation::Flip(i, bit) if n > 0 => bytes[i.index(n)] ^= 1 << bit,
        Mutation::Set(i, b) if n > 0 => bytes[i.index(n)] = *b,
        Mutation::Insert(i, b) => {
            let at = i.index(n + 1);
            bytes.splice(at..at, b.iter().copied());
        }
        Mutation::Remove(i, k) if n > 0 => {
            let at = i.index(n);
            bytes.drain(at..(at + k).min(n));
        }
        Mutation::Truncate(i) => bytes.truncate(i.index(n + 1)),
        Mutation::Duplicate(a, k, b) if n > 0 => {
            let from = a.index(n);
            let piece = bytes[from..(from + k).min(n)].to_vec();
            let at = b.index(n + 1);
            bytes.splice(at..at, piece);
        }
        Mutation::Splice(a, b) => {
            bytes.truncate(a.index(n + 1));
            bytes.extend_from_slice(&other[b.index(other.len() + 1)..]);
        }
        Mutation::Append => bytes.extend_from_slice(other),
        Mutation::Number(i, lit) => {
            let found = numbers(bytes);
            if !found.is_empty() {
                replace(
                    bytes,
                    found[i.index(found.len())],
                    LITERALS[*lit].as_bytes(),
                );
            }
        }
        Mutation::Rename(i, f) => {
            let found = names(bytes);
            if !found.is_empty() {
                let to = format!("\"{}\"", FIELDS[*f]);
                replace(bytes, found[i.index(found.len())], to.as_bytes());
            }
        }
        Mutation::SetLen(len) if n >= HEADER_LEN => {
            bytes[8..12].copy_from_slice(&len.to_be_bytes())
        }
        Mutation::AddLen(d) => add_len(bytes, i64::from(*d)),
        _ => {}
    }
}

/// Extreme JSON numbers (serde_json has no NaN or infinity: those become
/// strings here, as a peer would have to send them).
fn extreme_number() -> impl Strategy<Value = Value> {
    let fixed: Vec<Value> = vec![
        json!(u64::MAX),
        json!(i64::MIN),
        json!(-1),
        json!(0),
        json!(1),
        json!(5),
        json!(u32::MAX),
        json!(u64::from(u32::MAX) + 1),
        json!(MAX_ITERS),
        json!(MAX_ITERS + 1),
        json!(MAX_SIZE),
        json!(MAX_SIZE + 1),
        json!(MAX_QPS),
        json!(MAX_QPS + 1),
        json!(MAX_TX_DEPTH),
        json!(MAX_TX_DEPTH + 1),
        json!(MAX_THREADS + 1),
        json!(MAX_CQ_MOD + 1),
        json!(MAX_OUTS + 1),
        json!(1e308),
        json!(-1e308),
        json!(f64::MIN_POSITIVE),
        json!(5e-324),
        json!(-0.0),
        json!(0.5),
        json!(MAX_DURATION_S),
        json!(f64::from_bits(MAX_DURATION_S.to_bits() + 1)),
        json!(MAX_DURATION_S / 2.0),
        json!(4096),
        json!(1500),
    ];
    prop_oneof![
        4 => prop::sample::select(fixed),
        1 => any::<u64>().prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        2 => (0u64..300).prop_map(Value::from),
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => extreme_number(),
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::from),
        1 => prop::sample::select(vec![
            "NaN", "Infinity", "-inf", "1e400", "18446744073709551616", "", "65536", "0x10",
        ])
        .prop_map(Value::from),
    ]
}

fn field_name() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(FIELDS.to_vec()).prop_map(str::to_owned),
        1 => "[a-z_]{0,10}",
    ]
}

/// Arbitrary JSON under the configurations' field names.
fn config_json() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(3, 40, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::from),
            prop::collection::btree_map(field_name(), inner, 0..10)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            (extreme_number(), 0usize..200).prop_map(|(v, n)| Value::from(vec![v; n])),
        ]
    })
}

/// A change to one field of a configuration.
#[derive(Debug, Clone)]
enum Patch {
    Set(String, Value),
    Remove(String),
}

fn patch() -> impl Strategy<Value = Patch> {
    let duration = (
        prop::option::of(extreme_number()),
        prop::option::of(extreme_number()),
    )
        .prop_map(|(s, m)| {
            let mut o = serde_json::Map::new();
            if let Some(s) = s {
                o.insert("seconds".into(), s);
            }
            if let Some(m) = m {
                o.insert("margin".into(), m);
            }
            Value::Object(o)
        });
    let long_sizes = (extreme_number(), 0usize..3000).prop_map(|(v, n)| Value::from(vec![v; n]));
    prop_oneof![
        12 => typed_patch(),
        6 => (field_name(), leaf()).prop_map(|(f, v)| Patch::Set(f, v)),
        2 => duration.prop_map(|d| Patch::Set("duration".into(), d)),
        1 => long_sizes.prop_map(|s| Patch::Set("sizes".into(), s)),
        1 => prop::collection::vec(extreme_number(), 0..70)
            .prop_map(|s| Patch::Set("sizes".into(), Value::from(s))),
        1 => (field_name(), config_json()).prop_map(|(f, v)| Patch::Set(f, v)),
        1 => field_name().prop_map(Patch::Remove),
    ]
}

/// A `u32` field's value on, around and far beyond its cap.
fn u32_edge(cap: u32) -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(vec![0, 1, cap - 1, cap, cap + 1, u32::MAX]),
        0..=cap + 2,
        any::<u32>(),
    ]
    .prop_map(Value::from)
}

/// A `u64` value on, around and far beyond the given caps.
fn u64_edge(low: u64, cap: u64) -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(vec![0, low - 1, low, cap, cap + 1, u64::MAX]),
        low..=cap,
        any::<u64>(),
    ]
    .prop_map(Value::from)
}

/// Seconds on and around the duration's limits (finite: JSON has no NaN).
fn f64_edge() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(vec![
            0.0,
            -0.0,
            5e-324,
            1e-9,
            0.5,
            1.0,
            2.0,
            MAX_DURATION_S / 2.0,
            MAX_DURATION_S,
            f64::from_bits(MAX_DURATION_S.to_bits() + 1),
            1e308,
            -1.0,
        ]),
        0.0..=MAX_DURATION_S,
        any::<f64>().prop_filter("finite", |f| f.is_finite()),
    ]
    .prop_map(Value::from)
}

/// A field set to a value of its own type, near its cap: what gets past
/// `from_value` to `validate`.
fn typed_patch() -> impl Strategy<Value = Patch> {
    let set = |f: &'static str| move |v: Value| Patch::Set(f.into(), v);
    let size = u64_edge(1, MAX_SIZE);
    let duration = prop_oneof![
        1 => Just(Value::Null),
        4 => (f64_edge(), f64_edge()).prop_map(|(s, m)| json!({"seconds": s, "margin": m})),
    ];
    let mtu = prop_oneof![
        Just(Value::Null),
        prop::sample::select(vec![0u32, 128, 256, 1024, 1500, 4096, 4097, 8192, u32::MAX])
            .prop_map(Value::from),
    ];
    prop_oneof![
        u32_edge(MAX_QPS).prop_map(set("qps")),
        u32_edge(MAX_THREADS).prop_map(set("threads")),
        u32_edge(MAX_TX_DEPTH).prop_map(set("tx_depth")),
        u32_edge(MAX_CQ_MOD).prop_map(set("cq_mod")),
        u32_edge(MAX_TX_DEPTH).prop_map(set("post_list")),
        u32_edge(MAX_OUTS).prop_map(set("outs")),
        u32_edge(1024).prop_map(set("inline_size")),
        mtu.prop_map(set("mtu")),
        u64_edge(MIN_ITERS, MAX_ITERS).prop_map(set("iters")),
        prop::collection::vec(size, 0..=MAX_SIZES + 2)
            .prop_map(|v| Patch::Set("sizes".into(), Value::from(v))),
        duration.prop_map(set("duration")),
    ]
}

/// Valid configurations with a few fields changed, or arbitrary JSON.
fn hostile_config() -> impl Strategy<Value = Value> {
    let base = prop_oneof![
        valid_bw().prop_map(|c| serde_json::to_value(c).unwrap()),
        valid_lat().prop_map(|c| serde_json::to_value(c).unwrap()),
    ];
    prop_oneof![
        4 => (base, prop::collection::vec(patch(), 1..4)).prop_map(|(mut v, patches)| {
            if let Value::Object(o) = &mut v {
                for p in patches {
                    match p {
                        Patch::Set(f, x) => {
                            o.insert(f, x);
                        }
                        Patch::Remove(f) => {
                            o.remove(&f);
                        }
                    }
                }
            }
            v
        }),
        1 => config_json(),
    ]
}

/// A stream of bytes deterministic in its seed (cheap: no proptest value
/// per byte, so 64 KiB streams cost little).
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    let mut x = seed;
    while out.len() < len {
        x = splitmix(x);
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A piece of a byte stream.
#[derive(Debug, Clone)]
enum Segment {
    /// A valid frame.
    Frame(Vec<u8>),
    /// Seeded noise.
    Noise(u64, usize),
    /// A header that claims more than MAX_PAYLOAD, then noise (which must
    /// never be read).
    Claims(u8, u32, u64, usize),
    /// A header with any fields, then noise.
    AnyHeader(u16, u8, u8, u32, u64, usize),
    /// A valid frame cut short.
    Cut(Vec<u8>, Index),
}

fn other_message() -> impl Strategy<Value = Message> {
    prop_oneof![
        Just(Message::Heartbeat),
        Just(Message::Bye),
        any::<u32>().prop_map(|phase| Message::Barrier { phase }),
        (any::<u32>(), prop::option::of(config_json()))
            .prop_map(|(phase, result)| Message::Done { phase, result }),
        "\\PC{0,300}".prop_map(|message| Message::Error { message }),
        "\\PC{0,300}".prop_map(|reason| Message::Reject { reason }),
    ]
}

fn segment() -> impl Strategy<Value = Segment> {
    let frame = prop_oneof![
        3 => valid_hello().prop_map(|(f, _)| f),
        1 => (hostile_config(), 0usize..4, any::<u64>())
            .prop_map(|(c, n, seed)| encode(&hello("write_bw", c, n, seed)).unwrap_or_default()),
        2 => other_message().prop_map(|m| encode(&m).unwrap()),
    ]
    .boxed();
    prop_oneof![
        30 => frame.clone().prop_map(Segment::Frame),
        1 => (any::<u64>(), 0usize..2048).prop_map(|(s, n)| Segment::Noise(s, n)),
        1 => (1u8..10, MAX_PAYLOAD + 1..=u32::MAX, any::<u64>(), 0usize..2048)
            .prop_map(|(k, len, s, n)| Segment::Claims(k, len, s, n)),
        1 => (
            prop_oneof![Just(PROTOCOL_VERSION), any::<u16>()],
            any::<u8>(),
            prop_oneof![Just(0u8), any::<u8>()],
            prop_oneof![any::<u32>(), 0..=MAX_PAYLOAD, Just(MAX_PAYLOAD)],
            any::<u64>(),
            0usize..2048,
        )
            .prop_map(|(v, k, f, len, s, n)| Segment::AnyHeader(v, k, f, len, s, n)),
        1 => (frame, any::<Index>()).prop_map(|(f, i)| Segment::Cut(f, i)),
    ]
}

const MAX_STREAM: usize = 64 * 1024;

fn stream(segments: &[Segment]) -> Vec<u8> {
    let mut out = vec![];
    for s in segments {
        match s {
            Segment::Frame(f) => out.extend_from_slice(f),
            Segment::Noise(seed, n) => out.extend(noise(*seed, *n)),
            Segment::Claims(kind, len, seed, n) => {
                out.extend(header(PROTOCOL_VERSION, *kind, 0, *len));
                out.extend(noise(*seed, *n));
            }
            Segment::AnyHeader(v, k, f, len, seed, n) => {
                out.extend(header(*v, *k, *f, *len));
                out.extend(noise(*seed, *n));
            }
            Segment::Cut(f, i) => out.extend_from_slice(&f[..i.index(f.len() + 1)]),
        }
        if out.len() >= MAX_STREAM {
            break;
        }
    }
    out.truncate(MAX_STREAM);
    out
}

fn cases(default: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    ProptestConfig::with_cases(cases)
}

// --- the properties ---------------------------------------------------------------

proptest! {
    #![proptest_config(cases(2048))]

    /// (a) Damaged valid Hello frames.
    #[test]
    fn mutated_hello_frames_stay_within_caps(
        (frame, outcome) in valid_hello(),
        (other, _) in valid_hello(),
        mutations in prop::collection::vec(mutation(), 1..5),
    ) {
        // Undamaged, the frame gets where the server opens the device.
        let clean = read_all(&frame)?;
        prop_assert_eq!(clean.messages, 1);
        prop_assert_eq!(&clean.hellos, &vec![outcome]);
        prop_assert_eq!(clean.last, Some(Expect::Closed));

        let mut bytes = frame;
        for m in &mutations {
            apply(&mut bytes, &other, m);
        }
        read_all(&bytes)?;
    }
}

proptest! {
    #![proptest_config(cases(2048))]

    /// (b) Arbitrary JSON as the configuration.
    #[test]
    fn arbitrary_configs_are_refused_or_within_caps(
        config in hostile_config(),
        offered in prop_oneof![Just(1usize), 0usize..10],
        seed in any::<u64>(),
    ) {
        // Directly, as `server_hello` gets it after decoding ...
        let direct = server_path(&hello("write_bw", config.clone(), offered, seed))?;
        // ... and through the wire, as a server reads it.
        match encode(&hello("write_bw", config, offered, seed)) {
            Ok(frame) => {
                let run = read_all(&frame)?;
                prop_assert_eq!(run.messages, 1);
                prop_assert_eq!(run.hellos.first().copied(), direct);
            }
            Err(e) => prop_assert!(matches!(e, WireError::TooLarge { .. }), "{:?}", e),
        }
    }
}

proptest! {
    #![proptest_config(cases(384))]

    /// (c) Byte streams of up to 64 KiB, several frames each.
    #[test]
    fn byte_streams_end_and_never_read_past_a_claimed_length(
        segments in prop::collection::vec(segment(), 1..40),
    ) {
        let bytes = stream(&segments);
        let run = read_all(&bytes)?;
        // The loop always ends with an error; a stream of whole frames
        // ends with a clean close.
        prop_assert!(run.last.is_some());
        if segments.iter().all(|s| matches!(s, Segment::Frame(f) if !f.is_empty()))
            && bytes.len() < MAX_STREAM
        {
            prop_assert_eq!(run.messages, segments.len());
            prop_assert_eq!(run.last, Some(Expect::Closed));
        }
    }
}

// --- fixed cases -------------------------------------------------------------------

/// A header claiming one byte more than MAX_PAYLOAD, with all those bytes
/// actually behind it: refused after the 12 header bytes, nothing of the
/// payload read.
#[test]
fn a_claim_above_max_payload_is_refused_before_its_payload() {
    for len in [MAX_PAYLOAD + 1, u32::MAX] {
        let mut bytes = header(PROTOCOL_VERSION, 1, 0, len);
        bytes.resize(HEADER_LEN + MAX_PAYLOAD as usize + 1, b' ');
        let mut cursor = Cursor::new(&bytes);
        let e = read_message(&mut cursor).unwrap_err();
        assert!(
            matches!(e, WireError::TooLarge { len: l, .. } if l == len),
            "{e:?}"
        );
        assert_eq!(cursor.position(), HEADER_LEN as u64);
    }
    // Exactly MAX_PAYLOAD is read (and then refused as JSON).
    let mut bytes = header(PROTOCOL_VERSION, 1, 0, MAX_PAYLOAD);
    bytes.resize(HEADER_LEN + MAX_PAYLOAD as usize + 5, b' ');
    let mut cursor = Cursor::new(&bytes);
    let e = read_message(&mut cursor).unwrap_err();
    assert!(matches!(e, WireError::Malformed { .. }), "{e:?}");
    assert_eq!(
        cursor.position(),
        (HEADER_LEN + MAX_PAYLOAD as usize) as u64
    );
}

/// The defaults get through the whole path, and a configuration on every
/// cap at once is accepted with an exact memory estimate.
#[test]
fn defaults_and_every_cap_at_once_are_accepted() {
    let run = |c: Value, qps| {
        let frame = encode(&hello("t", c, qps, 7)).unwrap();
        read_all(&frame).unwrap();
        let mut r = Cursor::new(&frame);
        server_path(&read_message(&mut r).unwrap())
            .unwrap()
            .unwrap()
    };
    let bw = serde_json::to_value(BwConfig::default()).unwrap();
    assert_eq!(run(bw, 1).bw, Verdict::Accepted);
    let lat = serde_json::to_value(LatConfig::default()).unwrap();
    assert_eq!(run(lat, 1).lat, Verdict::Accepted);

    let max = BwConfig {
        sizes: vec![MAX_SIZE; MAX_SIZES],
        iters: MAX_ITERS,
        qps: MAX_QPS,
        threads: MAX_THREADS,
        tx_depth: 256,
        cq_mod: 256,
        post_list: 256,
        outs: MAX_OUTS,
        mtu: Some(4096),
        ..BwConfig::default()
    };
    max.validate().unwrap();
    assert_eq!(max.memory_needed(true), 2 * MAX_SIZE * u64::from(MAX_QPS));
    // MAX_QPS QPs cannot all be offered in one frame (MAX_PAYLOAD), so
    // the server stops at the QP count.
    assert_eq!(
        run(serde_json::to_value(&max).unwrap(), 1).bw,
        Verdict::WrongQps
    );
}

/// Every QP count `validate` accepts is one a client can offer and a server
/// can answer: a QP's entry takes 121 bytes of JSON (typical values) to 145
/// (every field at its widest), so MAX_QPS of them need ~2.4 MB (this failed
/// with the earlier 1 MiB MAX_PAYLOAD, which held only ~7200). It still fits
/// with MAX_SIDES sides, each with a device name of 64 bytes (the kernel's
/// longest).
#[test]
fn every_valid_qp_count_fits_in_one_hello_and_accept() {
    let c = BwConfig {
        qps: MAX_QPS,
        tx_depth: 256,
        ..BwConfig::default()
    };
    c.validate().unwrap();
    let widest = QpInfo {
        qpn: 0xff_ffff,
        psn: 0xff_ffff,
        lid: u16::MAX,
        gid: [0xff; 16],
        rkey: u32::MAX,
        addr: u64::MAX,
        len: MAX_SIZE,
    };
    let qps = vec![widest; MAX_QPS as usize];
    let widest_side = SideInfo {
        device: "d".repeat(64),
        gid_index: Some(u32::MAX),
        gid: [0xff; 16],
        mtu: u32::MAX,
        rate: Some("800 Gb/sec (8X XDR)".into()),
        max_rd_atom: u32::MAX,
        ..side()
    };
    let sides = vec![widest_side; wire::MAX_SIDES];
    let hello = Message::Hello {
        test: "write_bw".into(),
        config: serde_json::to_value(&c).unwrap(),
        sides: sides.clone(),
        qps: qps.clone(),
        connection: Default::default(),
    };
    let accept = Message::Accept {
        sides,
        qps,
        mtu: 4096,
        cm_port: None,
    };
    for msg in [hello, accept] {
        let frame = encode(&msg);
        assert!(
            frame.is_ok(),
            "{} with {MAX_QPS} QPs: {}",
            msg.name(),
            frame.unwrap_err()
        );
    }
}
