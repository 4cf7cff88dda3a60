//! Property tests of the handshake codec: every message round-trips, and no
//! input — random bytes, random JSON behind a valid header, or a valid
//! frame with bytes flipped, cut or inserted — makes `decode` or
//! `read_message` panic; both always agree.

mod support;

use support::header;

use std::io::{self, Cursor, Read};

use engine::proto::wire::{
    HEADER_LEN, MAGIC, MAX_PAYLOAD, MAX_SIDES, Message, PROTOCOL_VERSION, QpInfo, SideInfo,
    WireError, decode, encode, read_message,
};
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::Value;

/// JSON values whose numbers survive a text round trip exactly.
fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-4000i32..4000).prop_map(|n| Value::from(f64::from(n) / 4.0)),
        "\\PC{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::btree_map("[a-z_]{0,8}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn qp() -> impl Strategy<Value = QpInfo> {
    (
        any::<u32>(),
        any::<u32>(),
        any::<u16>(),
        any::<[u8; 16]>(),
        any::<u32>(),
        any::<u64>(),
        any::<u64>(),
    )
        .prop_map(|(qpn, psn, lid, gid, rkey, addr, len)| QpInfo {
            qpn,
            psn,
            lid,
            gid,
            rkey,
            addr,
            len,
        })
}

fn side() -> impl Strategy<Value = SideInfo> {
    (
        "\\PC{0,16}",
        any::<u8>(),
        any::<Option<u32>>(),
        any::<[u8; 16]>(),
        any::<u32>(),
        "\\PC{0,10}",
        proptest::option::of("\\PC{0,24}"),
    )
        .prop_map(
            |(device, port, gid_index, gid, mtu, link_layer, rate)| SideInfo {
                device,
                port,
                gid_index,
                gid,
                mtu,
                link_layer,
                rate,
                max_rd_atom: 16,
            },
        )
}

/// Lists of sides of every length a message may hold: mostly short, and
/// the bound.
fn sides() -> impl Strategy<Value = Vec<SideInfo>> {
    prop_oneof![
        4 => prop::collection::vec(side(), 1..4),
        1 => prop::collection::vec(side(), MAX_SIDES..=MAX_SIDES),
    ]
}

fn message() -> impl Strategy<Value = Message> {
    let qps = || prop::collection::vec(qp(), 0..8);
    prop_oneof![
        ("\\PC{0,16}", json(), sides(), qps()).prop_map(|(test, config, sides, qps)| {
            Message::Hello {
                test,
                config,
                sides,
                qps,
                connection: Default::default(),
            }
        }),
        (sides(), qps(), any::<u32>()).prop_map(|(sides, qps, mtu)| Message::Accept {
            sides,
            qps,
            mtu,
            cm_port: None,
        }),
        any::<String>().prop_map(|reason| Message::Reject { reason }),
        any::<u32>().prop_map(|phase| Message::Barrier { phase }),
        Just(Message::Heartbeat),
        (any::<u32>(), proptest::option::of(json()))
            .prop_map(|(phase, result)| Message::Done { phase, result }),
        any::<String>().prop_map(|message| Message::Error { message }),
        Just(Message::Bye),
        any::<String>().prop_map(|reason| Message::Busy { reason }),
    ]
}

/// A reader that hands out its bytes in chunks of the given sizes.
struct Chunked {
    data: Vec<u8>,
    pos: usize,
    sizes: Vec<usize>,
    turn: usize,
}

impl Read for Chunked {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let size = self.sizes.get(self.turn % self.sizes.len().max(1)).copied();
        self.turn += 1;
        let want = size.unwrap_or(usize::MAX).max(1).min(buf.len());
        let n = want.min(self.data.len() - self.pos);
        buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// Which error it is, treating a clean close of an empty stream like the
/// truncation `decode` reports for an empty buffer.
fn class(e: &WireError) -> &'static str {
    match e {
        WireError::Io(_) => "io",
        WireError::Timeout => "timeout",
        WireError::Closed | WireError::Truncated => "truncated",
        WireError::BadMagic { .. } => "magic",
        WireError::VersionMismatch { .. } => "version",
        WireError::BadFlags(_) => "flags",
        WireError::TooLarge { .. } => "too large",
        WireError::UnknownKind(_) => "kind",
        WireError::Malformed { .. } => "malformed",
        WireError::TooMany { .. } => "too many",
        WireError::TooFew { .. } => "too few",
    }
}

/// Runs both decoders over `bytes` (the stream one in uneven chunks) and
/// checks that they agree. Neither may panic.
fn both_agree(bytes: &[u8], sizes: Vec<usize>) -> Result<(), TestCaseError> {
    let from_buf = decode(bytes);
    let mut stream = Chunked {
        data: bytes.to_vec(),
        pos: 0,
        sizes,
        turn: 0,
    };
    let from_stream = read_message(&mut stream);
    match (&from_buf, &from_stream) {
        (Ok((a, used)), Ok(b)) => {
            prop_assert_eq!(a, b);
            prop_assert!(*used >= HEADER_LEN && *used <= bytes.len());
            prop_assert_eq!(*used, stream.pos);
        }
        (Err(a), Err(b)) => prop_assert_eq!(class(a), class(b), "{:?} vs {:?}", a, b),
        _ => prop_assert!(
            false,
            "decode {:?} but read_message {:?}",
            from_buf,
            from_stream
        ),
    }
    if let Err(e) = &from_buf {
        // Every error renders without panicking.
        prop_assert!(!e.to_string().is_empty());
    }
    Ok(())
}

/// One way to damage a frame.
#[derive(Debug, Clone)]
enum Mutation {
    Set(Index, u8),
    Flip(Index, u8),
    Insert(Index, u8),
    Remove(Index),
    Cut(Index),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        (any::<Index>(), 0u8..8).prop_map(|(i, bit)| Mutation::Flip(i, bit)),
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        any::<Index>().prop_map(Mutation::Remove),
        any::<Index>().prop_map(Mutation::Cut),
    ]
}

fn apply(frame: &mut Vec<u8>, m: &Mutation) {
    if frame.is_empty() {
        return;
    }
    match m {
        Mutation::Set(i, b) => {
            let i = i.index(frame.len());
            frame[i] = *b;
        }
        Mutation::Flip(i, bit) => {
            let i = i.index(frame.len());
            frame[i] ^= 1 << bit;
        }
        Mutation::Insert(i, b) => frame.insert(i.index(frame.len() + 1), *b),
        Mutation::Remove(i) => {
            frame.remove(i.index(frame.len()));
        }
        Mutation::Cut(i) => frame.truncate(i.index(frame.len())),
    }
}

/// 512 cases a test, or `PROPTEST_CASES` for a longer local run.
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(512);
    ProptestConfig::with_cases(cases)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn every_message_round_trips(msg in message(), trailing in prop::collection::vec(any::<u8>(), 0..16)) {
        let frame = encode(&msg).unwrap();
        prop_assert_eq!(frame[6], msg.kind());
        let mut with_trailing = frame.clone();
        with_trailing.extend_from_slice(&trailing);
        prop_assert_eq!(decode(&with_trailing).unwrap(), (msg.clone(), frame.len()));
        prop_assert_eq!(read_message(&mut Cursor::new(&with_trailing)).unwrap(), msg);
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
        sizes in prop::collection::vec(0usize..16, 0..4),
    ) {
        both_agree(&bytes, sizes)?;
    }

    #[test]
    fn arbitrary_bytes_after_the_magic_never_panic(
        rest in prop::collection::vec(any::<u8>(), 0..256),
        sizes in prop::collection::vec(0usize..16, 0..4),
    ) {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&rest);
        both_agree(&bytes, sizes)?;
    }

    #[test]
    fn arbitrary_payload_behind_a_valid_header_never_panics(
        kind in 0u8..10,
        payload in prop::collection::vec(any::<u8>(), 0..256),
        sizes in prop::collection::vec(0usize..64, 0..4),
    ) {
        let mut bytes = header(PROTOCOL_VERSION, kind, 0, payload.len() as u32);
        bytes.extend_from_slice(&payload);
        both_agree(&bytes, sizes)?;
    }

    #[test]
    fn arbitrary_json_of_every_kind_never_panics(
        kind in 0u8..10,
        body in json(),
        sizes in prop::collection::vec(0usize..64, 0..4),
    ) {
        let payload = serde_json::to_vec(&body).unwrap();
        let mut bytes = header(PROTOCOL_VERSION, kind, 0, payload.len() as u32);
        bytes.extend_from_slice(&payload);
        both_agree(&bytes, sizes)?;
    }

    #[test]
    fn arbitrary_header_fields_never_panic(
        version in any::<u16>(),
        kind in any::<u8>(),
        flags in any::<u8>(),
        len in prop_oneof![any::<u32>(), 0..=MAX_PAYLOAD + 1, Just(u32::MAX)],
        payload in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut bytes = header(version, kind, flags, len);
        bytes.extend_from_slice(&payload);
        both_agree(&bytes, vec![])?;
    }

    #[test]
    fn a_side_count_outside_one_to_max_sides_is_refused_at_decode(
        msg in message(),
        count in prop_oneof![Just(0usize), MAX_SIDES + 1..MAX_SIDES + 4],
        sizes in prop::collection::vec(0usize..64, 0..4),
    ) {
        // The JSON a peer would send (encoding refuses these lists).
        let mut msg = msg;
        let (Message::Hello { sides, .. } | Message::Accept { sides, .. }) = &mut msg else {
            return Ok(());
        };
        let one = sides[0].clone();
        *sides = vec![one; count];
        let Value::Object(mut outer) = serde_json::to_value(&msg).unwrap() else {
            panic!("a struct variant serialises as an object");
        };
        let payload = serde_json::to_vec(&outer.remove(msg.name()).unwrap()).unwrap();
        let mut bytes = header(PROTOCOL_VERSION, msg.kind(), 0, payload.len() as u32);
        bytes.extend_from_slice(&payload);
        let e = decode(&bytes).unwrap_err();
        match e {
            WireError::TooFew { what: "device sides", count: 0, min: 1 } => prop_assert_eq!(count, 0),
            WireError::TooMany { what: "device sides", count: c, max: MAX_SIDES } => {
                prop_assert_eq!(c, count)
            }
            other => prop_assert!(false, "{:?}", other),
        }
        both_agree(&bytes, sizes)?;
    }

    #[test]
    fn mutated_valid_frames_never_panic(
        msg in message(),
        mutations in prop::collection::vec(mutation(), 1..6),
        sizes in prop::collection::vec(0usize..64, 0..4),
    ) {
        let mut frame = encode(&msg).unwrap();
        for m in &mutations {
            apply(&mut frame, m);
        }
        both_agree(&frame, sizes)?;
    }

    #[test]
    fn mutated_payloads_with_fixed_lengths_never_panic(
        msg in message(),
        mutations in prop::collection::vec(mutation(), 1..6),
    ) {
        // Damage only the JSON and then repair the length, so that the
        // damage reaches the JSON decoder rather than the framing checks.
        let frame = encode(&msg).unwrap();
        let mut payload = frame[HEADER_LEN..].to_vec();
        for m in &mutations {
            apply(&mut payload, m);
        }
        let mut bytes = header(PROTOCOL_VERSION, msg.kind(), 0, payload.len() as u32);
        bytes.extend_from_slice(&payload);
        both_agree(&bytes, vec![])?;
    }
}
