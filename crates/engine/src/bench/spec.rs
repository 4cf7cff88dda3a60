//! What a test is, as data: a [`Verb`] measured by a [`Metric`] gives a
//! [`TestSpec`], which knows its name, its perftest title, its defaults,
//! its `rtt_factor` and the memory access each side must grant. The
//! binaries are one `TestSpec` each; the session runner, the flags and the
//! banner come from it.
//!
//! Adding a verb: one [`Verb`] arm here (name, title, defaults, access,
//! `rtt_factor`), one operation in the `verbs` crate, and one measured
//! loop (or a parameter of the generic bandwidth loop) in the CLI.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The RDMA operation a test measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verb {
    /// RDMA WRITE.
    Write,
    /// RDMA WRITE with immediate (consumes a receive on the target).
    WriteImm,
    /// RDMA READ.
    Read,
    /// SEND (two-sided: consumes a posted receive).
    Send,
    /// Atomic fetch-and-add on 8 bytes.
    FetchAdd,
    /// Atomic compare-and-swap on 8 bytes.
    CmpSwap,
}

/// What a test reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Bandwidth and message rate (perftest's `_bw`).
    Bw,
    /// Latency of single operations (perftest's `_lat`).
    Lat,
}

/// Memory access one side grants the peer on its exposed area. Local
/// write is always granted: the device writes the landing areas of reads,
/// receives and atomics, and the latency flag areas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Access {
    /// The peer may RDMA-WRITE.
    pub remote_write: bool,
    /// The peer may RDMA-READ.
    pub remote_read: bool,
    /// The peer may run atomics.
    pub remote_atomic: bool,
}

/// Per-test defaults, perftest's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Defaults {
    /// Message size without `-s`, bytes.
    pub size: u64,
    /// Iterations without `-n` (messages per QP, or round trips).
    pub iters: u64,
    /// Send queue depth without `-t`.
    pub tx_depth: u32,
    /// Inline size tried without `-I` (0: none).
    pub inline: u32,
}

/// One test: a verb and a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TestSpec {
    /// The operation.
    pub verb: Verb,
    /// What is reported.
    pub metric: Metric,
}

/// Every test this build can run (the others are named but refused).
pub const IMPLEMENTED: [TestSpec; 8] = [
    TestSpec::WRITE_BW,
    TestSpec::WRITE_LAT,
    TestSpec::READ_BW,
    TestSpec::READ_LAT,
    TestSpec::SEND_BW,
    TestSpec::SEND_LAT,
    TestSpec::FETCH_ADD_BW,
    TestSpec::CMP_SWAP_BW,
];

impl TestSpec {
    /// `write_bw` (`ib_write_bw`).
    pub const WRITE_BW: Self = Self::new(Verb::Write, Metric::Bw);
    /// `write_lat` (`ib_write_lat`).
    pub const WRITE_LAT: Self = Self::new(Verb::Write, Metric::Lat);
    /// `read_bw` (`ib_read_bw`).
    pub const READ_BW: Self = Self::new(Verb::Read, Metric::Bw);
    /// `read_lat` (`ib_read_lat`).
    pub const READ_LAT: Self = Self::new(Verb::Read, Metric::Lat);
    /// `send_bw` (`ib_send_bw`).
    pub const SEND_BW: Self = Self::new(Verb::Send, Metric::Bw);
    /// `send_lat` (`ib_send_lat`).
    pub const SEND_LAT: Self = Self::new(Verb::Send, Metric::Lat);
    /// `atomic_bw -A FETCH_AND_ADD` (`ib_atomic_bw`'s default).
    pub const FETCH_ADD_BW: Self = Self::new(Verb::FetchAdd, Metric::Bw);
    /// `atomic_bw -A CMP_AND_SWAP`.
    pub const CMP_SWAP_BW: Self = Self::new(Verb::CmpSwap, Metric::Bw);

    /// Whether the test runs atomics.
    pub fn is_atomic(self) -> bool {
        matches!(self.verb, Verb::FetchAdd | Verb::CmpSwap)
    }

    /// The same test with the atomic `verb` (for `-A`); other tests stay.
    pub fn with_atomic(self, verb: Verb) -> Self {
        if self.is_atomic() && matches!(verb, Verb::FetchAdd | Verb::CmpSwap) {
            Self::new(verb, self.metric)
        } else {
            self
        }
    }

    /// Whether the passive side receives: SENDs consume its receives, as
    /// do RDMA WRITEs with immediate (`write_with_imm`).
    pub fn receives(self, write_with_imm: bool) -> bool {
        self.verb == Verb::Send || (self.verb == Verb::Write && write_with_imm)
    }

    /// The binary that runs the test: the spec's name, `atomic_bw` for
    /// both atomic bandwidth tests (perftest's `ib_atomic_bw -A`).
    pub fn binary(self) -> &'static str {
        match (self.verb, self.metric) {
            (Verb::FetchAdd | Verb::CmpSwap, Metric::Bw) => "atomic_bw",
            (Verb::FetchAdd | Verb::CmpSwap, Metric::Lat) => "atomic_lat",
            _ => self.name(),
        }
    }

    /// The test of `verb` measured by `metric`.
    pub const fn new(verb: Verb, metric: Metric) -> Self {
        Self { verb, metric }
    }

    /// The binary's name and the handshake's test name, e.g. `read_bw`.
    pub fn name(self) -> &'static str {
        match (self.verb, self.metric) {
            (Verb::Write, Metric::Bw) => "write_bw",
            (Verb::Write, Metric::Lat) => "write_lat",
            (Verb::WriteImm, Metric::Bw) => "write_imm_bw",
            (Verb::WriteImm, Metric::Lat) => "write_imm_lat",
            (Verb::Read, Metric::Bw) => "read_bw",
            (Verb::Read, Metric::Lat) => "read_lat",
            (Verb::Send, Metric::Bw) => "send_bw",
            (Verb::Send, Metric::Lat) => "send_lat",
            (Verb::FetchAdd, Metric::Bw) => "fetch_add_bw",
            (Verb::FetchAdd, Metric::Lat) => "fetch_add_lat",
            (Verb::CmpSwap, Metric::Bw) => "cmp_swap_bw",
            (Verb::CmpSwap, Metric::Lat) => "cmp_swap_lat",
        }
    }

    /// The test named `name` (as [`TestSpec::name`] spells it).
    pub fn from_name(name: &str) -> Option<Self> {
        const VERBS: [Verb; 6] = [
            Verb::Write,
            Verb::WriteImm,
            Verb::Read,
            Verb::Send,
            Verb::FetchAdd,
            Verb::CmpSwap,
        ];
        VERBS
            .iter()
            .flat_map(|&v| [Self::new(v, Metric::Bw), Self::new(v, Metric::Lat)])
            .find(|s| s.name() == name)
    }

    /// Whether this build runs the test.
    pub fn is_implemented(self) -> bool {
        IMPLEMENTED.contains(&self)
    }

    /// perftest's banner title, e.g. `RDMA_Read BW Test`.
    pub fn title(self) -> String {
        let verb = match self.verb {
            Verb::Write | Verb::WriteImm => "RDMA_Write",
            Verb::Read => "RDMA_Read",
            Verb::Send => "Send",
            // perftest prints "Atomic " and then the type.
            Verb::FetchAdd => "Atomic FETCH_AND_ADD",
            Verb::CmpSwap => "Atomic CMP_AND_SWAP",
        };
        let metric = match self.metric {
            Metric::Bw => "BW",
            Metric::Lat => "Latency",
        };
        format!("{verb} {metric} Test")
    }

    /// The operation's name in error messages, e.g. `RDMA READ`.
    pub fn op_name(self) -> &'static str {
        match self.verb {
            Verb::Write => "RDMA WRITE",
            Verb::WriteImm => "RDMA WRITE with immediate",
            Verb::Read => "RDMA READ",
            Verb::Send => "SEND",
            Verb::FetchAdd => "atomic fetch-and-add",
            Verb::CmpSwap => "atomic compare-and-swap",
        }
    }

    /// perftest's `rtt_factor`: how many one-way trips a latency sample
    /// holds and so what it is divided by. A read or an atomic completes
    /// when its response is back (one operation is a full round trip:
    /// 1); a write or send ping-pong sample is two operations (2).
    pub fn rtt_factor(self) -> u32 {
        match self.verb {
            Verb::Read | Verb::FetchAdd | Verb::CmpSwap => 1,
            Verb::Write | Verb::WriteImm | Verb::Send => 2,
        }
    }

    /// Whether the peer's CPU takes no part in the operation (reads and
    /// atomics): its data then flows from the passive side's exposed area
    /// into the initiator's landing area.
    pub fn data_to_initiator(self) -> bool {
        matches!(self.verb, Verb::Read | Verb::FetchAdd | Verb::CmpSwap)
    }

    /// What a side grants the peer on its exposed area (a write test
    /// exposes no readable memory, a read test no writable memory).
    pub fn access(self) -> Access {
        match self.verb {
            Verb::Write | Verb::WriteImm => Access {
                remote_write: true,
                ..Access::default()
            },
            Verb::Read => Access {
                remote_read: true,
                ..Access::default()
            },
            Verb::FetchAdd | Verb::CmpSwap => Access {
                remote_atomic: true,
                ..Access::default()
            },
            Verb::Send => Access::default(),
        }
    }

    /// perftest's defaults for the test.
    pub fn defaults(self) -> Defaults {
        let atomic = matches!(self.verb, Verb::FetchAdd | Verb::CmpSwap);
        match self.metric {
            Metric::Bw => Defaults {
                size: if atomic { 8 } else { 65536 },
                // perftest's DEF_ITERS is 1000; ib_write_bw raises it to
                // 5000 (DEF_ITERS_WB).
                iters: match self.verb {
                    Verb::Write | Verb::WriteImm => 5000,
                    _ => 1000,
                },
                tx_depth: 128,
                inline: 0,
            },
            Metric::Lat => Defaults {
                size: if atomic { 8 } else { 2 },
                iters: 1000,
                tx_depth: 1,
                // perftest's DEF_INLINE_WRITE / DEF_INLINE_SEND; a read
                // or an atomic carries no payload to inline.
                inline: match self.verb {
                    Verb::Write | Verb::WriteImm => 220,
                    Verb::Send => 236,
                    Verb::Read | Verb::FetchAdd | Verb::CmpSwap => 0,
                },
            },
        }
    }

    /// Whether the test posts outstanding reads or atomics, so the
    /// `-o/--outs` limit applies.
    pub fn uses_outstanding_reads(self) -> bool {
        self.data_to_initiator()
    }
}

impl fmt::Display for TestSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `vendor_part_id`s of the devices on which perftest posts with the
/// `ibv_wr_*` API by default (`verify_params_with_device_context`:
/// Connect-IB, ConnectX-4 to ConnectX-10, MLX5GENVF, BlueField 1-4, EFA,
/// HNS; ids from its `ib_dev_name`); every other device, soft-RoCE
/// included, gets `ibv_post_send`.
const WR_API_PARTS: [u32; 35] = [
    4113, 4115, 4116, 4117, 4118, 4119, 4120, 4121, 4122, 4123, 4124, 4125, 4126, 4127, 4129, 4131,
    4133, 4135, 41682, 41683, 41686, 41692, 41695, 61344, 61345, 61346, 61347, 61348, 41506, 41507,
    41508, 41509, 41510, 41512, 41519,
];

/// Yunsilicon's vendor id: perftest uses the `ibv_wr_*` API on all of its
/// devices.
const YUNSILICON: u32 = 0x1f67;

/// Whether perftest posts with the `ibv_wr_*` API by default on the device
/// with these ids (otherwise it silently uses `ibv_post_send`).
pub fn perftest_posts_with_wr_api(vendor_id: u32, vendor_part_id: u32) -> bool {
    // perftest looks at the part id for every vendor it does not match
    // first (Chelsio, Intel, 0x209b, Nebula 0x1f0f, 0x1dd8 have their own).
    vendor_id == YUNSILICON
        || (![5157, 0x8086, 0x209b, 0x1f0f, 0x1dd8].contains(&vendor_id)
            && WR_API_PARTS.contains(&vendor_part_id))
}

/// The byte a side that exposes data for reading stores at `offset` of
/// QP `qp`'s exposed area, and so what the reader must find there: not
/// periodic in any power of two below 251, and different per QP.
#[inline]
pub fn pattern_byte(qp: usize, offset: u64) -> u8 {
    ((offset.wrapping_add(qp as u64 * 37)) % 251) as u8 ^ 0x5a
}

/// The period of [`pattern_byte`] in the offset.
pub const PATTERN_PERIOD: usize = 251;

/// Fills `out` with QP `qp`'s pattern from offset `start` on: byte `i`
/// is `pattern_byte(qp, start + i)`. One period is computed, the rest
/// copied in doubling blocks (memcpy), so 8 MiB costs little even in a
/// debug build under emulation, where a byte at a time took seconds.
pub fn fill_pattern(qp: usize, start: u64, out: &mut [u8]) {
    let first = out.len().min(PATTERN_PERIOD);
    for (i, b) in out[..first].iter_mut().enumerate() {
        *b = pattern_byte(qp, start + i as u64);
    }
    // `filled` stays a whole number of periods until the end, so the
    // block copied to it continues the pattern.
    let mut filled = first;
    while filled < out.len() {
        let n = filled.min(out.len() - filled);
        out.copy_within(0..n, filled);
        filled += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_filled_in_blocks_is_the_pattern_byte_by_byte() {
        for qp in [0, 1, 7] {
            for start in [0u64, 1, 250, 251, 1 << 20, 1 << 40] {
                for len in [0, 1, 250, 251, 252, 502, 503, 4096, 70_001] {
                    let mut out = vec![0u8; len];
                    fill_pattern(qp, start, &mut out);
                    let want = (0..len as u64).map(|i| pattern_byte(qp, start + i));
                    assert!(
                        out.iter().copied().eq(want),
                        "qp {qp} start {start} len {len}"
                    );
                }
            }
        }
    }

    #[test]
    fn names_round_trip_and_match_perftest_titles() {
        for v in [
            Verb::Write,
            Verb::WriteImm,
            Verb::Read,
            Verb::Send,
            Verb::FetchAdd,
            Verb::CmpSwap,
        ] {
            for m in [Metric::Bw, Metric::Lat] {
                let s = TestSpec::new(v, m);
                assert_eq!(TestSpec::from_name(s.name()), Some(s));
            }
        }
        assert_eq!(TestSpec::from_name("ib_read_bw"), None);
        assert_eq!(TestSpec::READ_BW.title(), "RDMA_Read BW Test");
        assert_eq!(TestSpec::READ_LAT.title(), "RDMA_Read Latency Test");
        assert_eq!(TestSpec::WRITE_BW.title(), "RDMA_Write BW Test");
        assert_eq!(TestSpec::WRITE_LAT.title(), "RDMA_Write Latency Test");
        assert_eq!(TestSpec::SEND_BW.title(), "Send BW Test");
        assert_eq!(
            TestSpec::FETCH_ADD_BW.title(),
            "Atomic FETCH_AND_ADD BW Test"
        );
        assert_eq!(TestSpec::CMP_SWAP_BW.title(), "Atomic CMP_AND_SWAP BW Test");
        assert_eq!(TestSpec::CMP_SWAP_BW.binary(), "atomic_bw");
        assert_eq!(
            TestSpec::FETCH_ADD_BW.with_atomic(Verb::CmpSwap),
            TestSpec::CMP_SWAP_BW
        );
        assert_eq!(
            TestSpec::SEND_BW.with_atomic(Verb::CmpSwap),
            TestSpec::SEND_BW
        );
    }

    #[test]
    fn rtt_factor_and_access_follow_perftest() {
        assert_eq!(TestSpec::READ_LAT.rtt_factor(), 1);
        assert_eq!(TestSpec::WRITE_LAT.rtt_factor(), 2);
        assert_eq!(TestSpec::new(Verb::Send, Metric::Lat).rtt_factor(), 2);
        assert_eq!(TestSpec::new(Verb::FetchAdd, Metric::Lat).rtt_factor(), 1);
        let w = TestSpec::WRITE_BW.access();
        assert!(w.remote_write && !w.remote_read && !w.remote_atomic);
        let r = TestSpec::READ_BW.access();
        assert!(r.remote_read && !r.remote_write && !r.remote_atomic);
        let a = TestSpec::new(Verb::CmpSwap, Metric::Bw).access();
        assert!(a.remote_atomic && !a.remote_write && !a.remote_read);
        assert_eq!(
            TestSpec::new(Verb::Send, Metric::Bw).access(),
            Access::default()
        );
    }

    #[test]
    fn defaults_are_perftests() {
        assert_eq!(TestSpec::WRITE_BW.defaults().size, 65536);
        assert_eq!(TestSpec::READ_BW.defaults().iters, 1000);
        assert_eq!(TestSpec::WRITE_BW.defaults().iters, 5000);
        assert_eq!(TestSpec::WRITE_LAT.defaults().inline, 220);
        assert_eq!(TestSpec::READ_LAT.defaults().inline, 0);
        assert_eq!(TestSpec::READ_LAT.defaults().size, 2);
    }

    #[test]
    fn the_wr_api_is_perftests_default_on_its_listed_devices_only() {
        // ConnectX-6 Dx, BlueField-3, EFA, HNS, Yunsilicon: ibv_wr_*.
        for (v, p) in [
            (0x02c9, 4125),
            (0x15b3, 41692),
            (0x1d0f, 61345),
            (0x19e5, 41519),
        ] {
            assert!(perftest_posts_with_wr_api(v, p), "{v:#x} {p}");
        }
        assert!(perftest_posts_with_wr_api(0x1f67, 0x1021));
        // ConnectX-3 (mlx4), soft-RoCE (vendor 0xffffff, part 0), Intel.
        for (v, p) in [(0x02c9, 4103), (0xff_ffff, 0), (0x8086, 4125)] {
            assert!(!perftest_posts_with_wr_api(v, p), "{v:#x} {p}");
        }
    }

    #[test]
    fn pattern_differs_between_neighbours_and_qps() {
        assert_ne!(pattern_byte(0, 0), pattern_byte(0, 1));
        assert_ne!(pattern_byte(0, 0), pattern_byte(1, 0));
        assert_ne!(pattern_byte(0, 0), pattern_byte(0, 256));
        assert_eq!(pattern_byte(3, 1000), pattern_byte(3, 1000));
    }
}
