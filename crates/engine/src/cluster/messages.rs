//! Cluster mode's messages between a rank and the coordinator (rank 0),
//! in [`crate::proto::wire`]'s frames (the same header, version and JSON body;
//! kinds 10 and up, which the pair protocol does not know).
//!
//! Every message is bounded whatever the job's size: the coordinator
//! sends no table of ranks. [`ClusterMessage::Start`] carries the test
//! configuration only (one encoding serves every rank), and each round's
//! [`ClusterMessage::Round`] carries the one partner's [`Contact`] — what
//! that pair needs (its address, a pair port and an rdma_cm address per
//! rail). Rank 0 alone keeps every rank's [`Identity`], for the report.
//!
//! | kind | message | direction |
//! |---|---|---|
//! | 10 | `cluster_join` | rank → coordinator |
//! | 13 | `cluster_report` | rank → coordinator |
//! | 14 | `cluster_end` | coordinator → rank |
//! | 15 | `cluster_start` | coordinator → rank |
//! | 16 | `cluster_round` | coordinator → rank |
//!
//! Kinds 11 (the table of every rank) and 12 (a round naming the partner
//! by rank, to be looked up in the table) are retired: a peer of an older
//! build sends or expects them and is refused as speaking an unknown kind
//! (the join's version check names the mismatch first).

use serde::{Deserialize, Serialize};

use super::pair_test::PairTest;
use super::rails::MAX_RAILS;
use super::rendezvous::{Identity, MAX_HOST_LEN};
use super::schedule::Rank;
use super::verdict::Measurement;
use crate::fabric::link::CounterRise;
use crate::proto::wire::{Framed, WireError};

const KIND_JOIN: u8 = 10;
const KIND_REPORT: u8 = 13;
const KIND_END: u8 = 14;
const KIND_START: u8 = 15;
const KIND_ROUND: u8 = 16;

/// Most measurements in one cluster report: a pair's two directions on
/// up to 64 rails, with room to spare.
pub const MAX_REPORT_MEASUREMENTS: usize = 256;

/// Most error counters a `cluster_report` may say rose (a port has a few
/// dozen).
pub const MAX_REPORT_PORT_ERRORS: usize = 256;

/// Largest payload of a cluster message, bytes: what one connection can
/// make rank 0 hold of a frame not yet whole. 256 KiB: a report at its
/// caps (256 directions with their latency percentiles, about 400 bytes
/// of JSON each, and 256 counters of about 80) is about 120 KB; a join
/// with [`MAX_RAILS`] rails about 10 KB.
pub const MAX_CLUSTER_PAYLOAD: u32 = 256 << 10;

/// Where a rank reaches its partner's tests in one round: what the pair
/// needs of the partner's identity, and nothing else.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contact {
    /// The partner's rank.
    pub rank: Rank,
    /// The address its pair listeners are reached at.
    pub address: String,
    /// Its pair listeners' TCP ports, rail 0 first: one per rail it tests
    /// on (1 to [`MAX_RAILS`]).
    pub ports: Vec<u16>,
    /// Per rail, the address rdma_cm reaches that rail at, when the pair
    /// connects through rdma_cm with several rails (else empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rail_addresses: Vec<Option<String>>,
}

impl Contact {
    /// The contact of the rank `id` describes, for a test over rdma_cm
    /// (`rdma_cm`: each rail's own address) or not.
    pub fn of(id: &Identity, rdma_cm: bool) -> Self {
        let rails = id.rail_count();
        Self {
            rank: id.rank,
            address: id.address.clone(),
            ports: (0..rails).filter_map(|k| id.rail_port(k)).collect(),
            rail_addresses: if rdma_cm && rails > 1 {
                (0..rails as usize)
                    .map(|k| id.rails.get(k).and_then(|r| r.address.clone()))
                    .collect()
            } else {
                Vec::new()
            },
        }
    }

    /// How many rails it tests on.
    pub fn rail_count(&self) -> u32 {
        self.ports.len().max(1) as u32
    }

    /// Rail `k`'s pair port.
    pub fn port(&self, rail: u32) -> Option<u16> {
        self.ports.get(rail as usize).copied()
    }

    /// The address rail `k`'s test connects to: its own under rdma_cm
    /// with several rails, else the partner's address.
    pub fn address_on(&self, rail: u32) -> &str {
        self.rail_addresses
            .get(rail as usize)
            .and_then(Option::as_deref)
            .unwrap_or(&self.address)
    }
}

/// One message between a rank and the coordinator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum ClusterMessage {
    /// Kind 10, a rank to the coordinator: who it is.
    #[serde(rename = "cluster_join")]
    Join {
        /// Its identity (boxed: the largest of the messages' fields).
        identity: Box<Identity>,
    },
    /// Kind 15, the coordinator to every rank: the gathering is over;
    /// the test each pair runs and how many ranks take part. The same
    /// bytes go to every rank.
    #[serde(rename = "cluster_start")]
    Start {
        /// The test each pair runs.
        config: PairTest,
        /// Ranks present.
        present: u32,
        /// Ranks that never came.
        missing: u32,
    },
    /// Kind 16, the coordinator to one rank: round `round` starts; its
    /// partner in it (none: it sits the round out), and whether it serves.
    #[serde(rename = "cluster_round")]
    Round {
        /// The round, from 0.
        round: u32,
        /// Its partner this round, and where to reach it.
        partner: Option<Contact>,
        /// Whether it serves first (its partner connects first).
        serve: bool,
    },
    /// Kind 13, a rank to the coordinator: what it measured in a round.
    /// At most [`MAX_REPORT_MEASUREMENTS`] measurements and
    /// [`MAX_REPORT_PORT_ERRORS`] counters.
    #[serde(rename = "cluster_report")]
    Report {
        /// The round.
        round: u32,
        /// Its measurements (as the pair's client), or none.
        measurements: Vec<Measurement>,
        /// Its port's error counters that rose since it joined (every
        /// report says all of them: the last one counts).
        #[serde(default)]
        port_errors: Vec<CounterRise>,
    },
    /// Kind 14, the coordinator to a rank: the run is over (or, sent at
    /// once, this rank was refused).
    #[serde(rename = "cluster_end")]
    End {
        /// The run's exit code.
        exit_code: u8,
        /// The rank's own verdict line, for its stdout.
        line: String,
    },
}

impl ClusterMessage {
    /// Lowercase name of this message, e.g. `cluster_round`.
    pub fn name(&self) -> &'static str {
        <Self as Framed>::kind_name(Framed::kind(self)).unwrap_or("unknown")
    }
}

impl Framed for ClusterMessage {
    fn kind(&self) -> u8 {
        match self {
            Self::Join { .. } => KIND_JOIN,
            Self::Start { .. } => KIND_START,
            Self::Round { .. } => KIND_ROUND,
            Self::Report { .. } => KIND_REPORT,
            Self::End { .. } => KIND_END,
        }
    }

    fn kind_name(kind: u8) -> Option<&'static str> {
        Some(match kind {
            KIND_JOIN => "cluster_join",
            KIND_START => "cluster_start",
            KIND_ROUND => "cluster_round",
            KIND_REPORT => "cluster_report",
            KIND_END => "cluster_end",
            _ => return None,
        })
    }

    fn check_limits(&self) -> Result<(), WireError> {
        let lists: &[(&'static str, usize, usize)] = match self {
            Self::Report {
                measurements,
                port_errors,
                ..
            } => &[
                ("measurements", measurements.len(), MAX_REPORT_MEASUREMENTS),
                ("port errors", port_errors.len(), MAX_REPORT_PORT_ERRORS),
            ],
            Self::Round {
                partner: Some(c), ..
            } => &[
                ("partner ports", c.ports.len(), MAX_RAILS),
                ("partner rail addresses", c.rail_addresses.len(), MAX_RAILS),
            ],
            _ => &[],
        };
        for &(what, count, max) in lists {
            if count > max {
                return Err(WireError::TooMany { what, count, max });
            }
        }
        if let Self::Round {
            partner: Some(c), ..
        } = self
        {
            if c.ports.is_empty() {
                return Err(WireError::TooFew {
                    what: "partner ports",
                    count: 0,
                    min: 1,
                });
            }
            let texts = std::iter::once(&c.address).chain(c.rail_addresses.iter().flatten());
            if let Some(t) = texts
                .into_iter()
                .find(|t| t.is_empty() || t.len() > MAX_HOST_LEN)
            {
                return Err(WireError::TooMany {
                    what: "bytes in a partner address",
                    count: t.len(),
                    max: MAX_HOST_LEN,
                });
            }
        }
        Ok(())
    }

    fn unit(_kind: u8) -> Option<Self> {
        None
    }

    fn max_payload() -> u32 {
        MAX_CLUSTER_PAYLOAD
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::rails::Rail;
    use crate::cluster::verdict::{Outcome, PairLatency};
    use crate::proto::wire::{
        FrameReader, HEADER_LEN, MAGIC, Message, PROTOCOL_VERSION, decode, decode_frame, encode,
    };

    fn identity(rank: Rank) -> Identity {
        Identity {
            rail_ports: vec![41_000 + rank as u16],
            topology_addr: None,
            rank,
            size: 3,
            version: "0.1.0".into(),
            host: format!("node-{rank}"),
            pair_port: 40_000 + rank as u16,
            address: "169.254.10.1".into(),
            device: "rxe0:1".into(),
            rate_gbps: Some(2.5),
            rails: ["rxe0", "rxe1"]
                .iter()
                .enumerate()
                .map(|(k, d)| Rail {
                    address: Some(format!("169.254.2{k}.1")),
                    device: (*d).into(),
                    port: 1,
                    active: true,
                    link_layer: Some("Ethernet".into()),
                    rate_gbps: Some(2.5),
                    numa_node: None,
                    port_guid: None,
                })
                .collect(),
        }
    }

    fn test_config() -> PairTest {
        PairTest {
            size: 65_536,
            duration_s: 2,
            qps: 1,
            rdma_cm: false,
            timeout_s: 10,
            latency: false,
            lat_iters: 1_000,
            percentile: "median".into(),
            simulate: false,
            simulate_ms: 0,
        }
    }

    fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&MAGIC);
        f.extend_from_slice(&PROTOCOL_VERSION.to_be_bytes());
        f.push(kind);
        f.push(0);
        f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn samples() -> Vec<ClusterMessage> {
        vec![
            ClusterMessage::Join {
                identity: Box::new(identity(1)),
            },
            ClusterMessage::Start {
                config: test_config(),
                present: 3,
                missing: 1,
            },
            ClusterMessage::Round {
                round: 4,
                partner: Some(Contact::of(&identity(2), true)),
                serve: true,
            },
            ClusterMessage::Round {
                round: 5,
                partner: None,
                serve: false,
            },
            ClusterMessage::Report {
                round: 4,
                measurements: vec![
                    Measurement {
                        round: 4,
                        from: 1,
                        to: 0,
                        rail: 1,
                        outcome: Outcome::Measured {
                            msg_rate_mpps: None,
                            bw_gbps: 391.5,
                            lat_us: Some(2.25),
                            latency: Some(Box::new(PairLatency {
                                iterations: 1000,
                                min_us: 1.9,
                                avg_us: 2.3,
                                p50_us: 2.25,
                                p90_us: 2.5,
                                p99_us: 3.5,
                                p99_9_us: 7.0,
                                p99_99_us: 9.0,
                                max_us: 12.5,
                            })),
                        },
                    },
                    Measurement {
                        round: 4,
                        from: 0,
                        to: 1,
                        rail: 0,
                        outcome: Outcome::Error {
                            error: "timed out after 10 s".into(),
                        },
                    },
                ],
                port_errors: vec![CounterRise {
                    name: "hw_counters/out_of_seq_request".into(),
                    before: 0,
                    after: 4,
                }],
            },
            ClusterMessage::End {
                exit_code: 3,
                line: "rank 1 on node-b: FAIL".into(),
            },
        ]
    }

    #[test]
    fn every_message_round_trips_through_a_frame_and_the_streaming_reader() {
        let mut reader = FrameReader::default();
        let mut all = Vec::new();
        for msg in samples() {
            let bytes = encode(&msg).unwrap();
            assert_eq!(bytes[6], Framed::kind(&msg), "{}", msg.name());
            assert_eq!(decode_frame::<ClusterMessage>(&bytes).unwrap().0, msg);
            all.extend_from_slice(&bytes);
        }
        // Fed a byte at a time, then all at once: the same messages.
        let mut got = Vec::new();
        for b in &all {
            reader.feed(std::slice::from_ref(b));
            while let Some(m) = reader.take::<ClusterMessage>().unwrap() {
                got.push(m);
            }
        }
        assert_eq!(got, samples());
        assert!(!reader.partial());
    }

    #[test]
    fn kinds_and_names_are_stable() {
        let got: Vec<(u8, &str)> = samples()
            .iter()
            .map(|m| (Framed::kind(m), m.name()))
            .collect();
        assert_eq!(
            got,
            [
                (10, "cluster_join"),
                (15, "cluster_start"),
                (16, "cluster_round"),
                (16, "cluster_round"),
                (13, "cluster_report"),
                (14, "cluster_end"),
            ]
        );
        for retired_or_pair in [1, 9, 11, 12, 17] {
            assert_eq!(<ClusterMessage as Framed>::kind_name(retired_or_pair), None);
        }
    }

    #[test]
    fn a_round_message_is_the_same_size_whatever_the_job() {
        // What grows with N is the round number and the rank: a few bytes.
        let small = encode(&ClusterMessage::Round {
            round: 1,
            partner: Some(Contact::of(&identity(2), false)),
            serve: true,
        })
        .unwrap();
        let big = encode(&ClusterMessage::Round {
            round: 16_382,
            partner: Some(Contact::of(
                &Identity {
                    rank: 16_383,
                    ..identity(2)
                },
                false,
            )),
            serve: true,
        })
        .unwrap();
        assert!(
            big.len() < small.len() + 16,
            "{} vs {}",
            big.len(),
            small.len()
        );
        assert!(big.len() < 200, "{}", big.len());
    }

    #[test]
    fn the_two_families_do_not_read_each_other() {
        let round = encode(&ClusterMessage::Round {
            round: 0,
            partner: None,
            serve: false,
        })
        .unwrap();
        assert!(matches!(decode(&round), Err(WireError::UnknownKind(16))));
        let bye = encode(&Message::Bye).unwrap();
        assert!(matches!(
            decode_frame::<ClusterMessage>(&bye),
            Err(WireError::UnknownKind(8))
        ));
        // The retired table (kind 11) is unknown.
        assert!(matches!(
            decode_frame::<ClusterMessage>(&frame(11, b"{}")),
            Err(WireError::UnknownKind(11))
        ));
    }

    #[test]
    fn lists_beyond_their_caps_and_stray_fields_are_refused() {
        let report = ClusterMessage::Report {
            round: 0,
            measurements: vec![
                Measurement {
                    round: 0,
                    from: 0,
                    to: 1,
                    rail: 0,
                    outcome: Outcome::PeerMissing,
                };
                MAX_REPORT_MEASUREMENTS + 1
            ],
            port_errors: Vec::new(),
        };
        assert!(matches!(
            encode(&report),
            Err(WireError::TooMany {
                what: "measurements",
                count: 257,
                max: 256
            })
        ));
        // Decoding checks the same bound (a peer's frame, built by hand).
        let body = serde_json::to_vec(&serde_json::json!({
            "round": 0,
            "measurements": vec![serde_json::json!({"round": 0, "from": 0, "to": 1, "outcome": {"outcome": "peer_missing"}}); 257],
        }))
        .unwrap();
        assert!(matches!(
            decode_frame::<ClusterMessage>(&frame(13, &body)),
            Err(WireError::TooMany {
                what: "measurements",
                ..
            })
        ));
        let mut c = Contact::of(&identity(1), false);
        c.ports = vec![1; MAX_RAILS + 1];
        assert!(matches!(
            encode(&ClusterMessage::Round {
                round: 0,
                partner: Some(c.clone()),
                serve: false
            }),
            Err(WireError::TooMany {
                what: "partner ports",
                ..
            })
        ));
        c.ports.clear();
        assert!(matches!(
            encode(&ClusterMessage::Round {
                round: 0,
                partner: Some(c),
                serve: false
            }),
            Err(WireError::TooFew { .. })
        ));
        for bad in [
            br#"{"identity":{"rank":0,"size":2,"version":"x","host":"h","pair_port":1,"address":"a","device":"d","extra":1}}"#
                .as_slice(),
            br#"{"identity":{"rank":0,"size":2,"version":"x","host":"h"}}"#,
        ] {
            assert!(matches!(
                decode_frame::<ClusterMessage>(&frame(10, bad)),
                Err(WireError::Malformed {
                    kind: 10,
                    name: "cluster_join",
                    ..
                })
            ));
        }
        let unknown_outcome =
            br#"{"round":0,"measurements":[{"round":0,"from":0,"to":1,"outcome":{"outcome":"great"}}]}"#;
        assert!(matches!(
            decode_frame::<ClusterMessage>(&frame(13, unknown_outcome)),
            Err(WireError::Malformed { kind: 13, .. })
        ));
        // A header claiming more than a cluster message may be is refused
        // before anything is held.
        let mut big = frame(13, b"{}");
        big[8..12].copy_from_slice(&(MAX_CLUSTER_PAYLOAD + 1).to_be_bytes());
        let mut r = FrameReader::default();
        r.feed(&big);
        assert!(matches!(
            r.take::<ClusterMessage>(),
            Err(WireError::TooLarge {
                max: MAX_CLUSTER_PAYLOAD,
                ..
            })
        ));
        // A half frame is waited for, never an error; a bad header is one.
        let mut r = FrameReader::default();
        r.feed(&frame(13, b"{}")[..HEADER_LEN - 1]);
        assert!(r.take::<ClusterMessage>().unwrap().is_none());
        let mut r = FrameReader::default();
        r.feed(b"GET / HTTP/1.1\r\n");
        assert!(matches!(
            r.take::<ClusterMessage>(),
            Err(WireError::BadMagic { .. })
        ));
    }

    #[test]
    fn a_contact_gives_each_rail_its_port_and_rdma_cm_address() {
        let id = identity(2);
        let plain = Contact::of(&id, false);
        assert_eq!(plain.ports, vec![40_002, 41_002]);
        assert_eq!(plain.address_on(1), "169.254.10.1");
        let cm = Contact::of(&id, true);
        assert_eq!(cm.address_on(0), "169.254.20.1");
        assert_eq!(cm.address_on(1), "169.254.21.1");
        assert_eq!(cm.port(1), Some(41_002));
        assert_eq!(cm.port(2), None);
    }
}
