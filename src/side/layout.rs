//! What one side needs: its [`Layout`] (QPs, threads, sizes, rings), and
//! the memory and access that follow from it.

use std::ops::Range;

use engine::bench::spec::Access;
use verbs::AccessFlags;

/// What a side creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Queue pairs.
    pub qps: u32,
    /// Worker threads (one CQ each).
    pub threads: u32,
    /// Send queue depth per QP.
    pub tx_depth: u32,
    /// Inline limit requested per QP.
    pub inline_size: u32,
    /// Bytes of each per-QP area.
    pub area: u64,
    /// Whether this side initiates operations (then it has a working area
    /// per QP).
    pub initiates: bool,
    /// What the peer may do to our exposed areas.
    pub access: Access,
    /// Whether the memory is on huge pages (`--use_hugepages`).
    pub huge_pages: bool,
    /// Receives kept posted per QP (perftest's `-r/--rx-depth`) on a side
    /// that receives SENDs or RDMA WRITEs with immediate; 0 for none.
    pub rx_depth: u32,
    /// Bytes each receive can hold (0: empty receives, for RDMA WRITE
    /// with immediate, whose data lands by address).
    pub recv_len: u32,
    /// How work is posted: `ibv_wr_*` (perftest's default, where the
    /// device has it) or `ibv_post_send` (`--use_old_post_send`).
    pub post_path: verbs::PostPath,
}

impl Layout {
    /// Bytes registered: an exposed area per QP, plus a working area per
    /// QP when initiating.
    pub fn memory(&self) -> u64 {
        engine::bench::config::memory_for(self.area, self.qps, self.initiates)
    }

    /// Bytes of device queue rings (send, receive, completion) this
    /// layout's QPs and CQs are estimated to take ([`engine::bench::config::ring_bytes`],
    /// and [`engine::bench::config::recv_ring_bytes`] for a receive ring).
    pub fn rings(&self) -> u64 {
        engine::bench::config::ring_bytes(self.qps, self.threads, self.tx_depth, self.inline_size)
            .saturating_add(engine::bench::config::recv_ring_bytes(
                self.qps,
                self.rx_depth,
            ))
    }

    /// The QPs worker thread `t` drives: an even share, in order.
    pub(super) fn qps_of_thread(&self, t: u32) -> Range<u32> {
        engine::bench::config::share(self.qps, self.threads, t)
    }

    /// Completion-queue entries one QP needs: its send queue and its
    /// receive ring.
    pub fn cq_entries_per_qp(&self) -> u64 {
        u64::from(self.tx_depth) + u64::from(self.rx_depth)
    }
}

/// The remote access a QP grants its peer (`qp_access_flags`).
pub(super) fn qp_access(a: Access) -> AccessFlags {
    let mut f = AccessFlags::NONE;
    if a.remote_write {
        f |= AccessFlags::REMOTE_WRITE;
    }
    if a.remote_read {
        f |= AccessFlags::REMOTE_READ;
    }
    if a.remote_atomic {
        f |= AccessFlags::REMOTE_ATOMIC;
    }
    f
}

/// The region's access: the QP's, and local write always (the device
/// writes our landing and flag areas).
pub fn access_flags(a: Access) -> AccessFlags {
    qp_access(a) | AccessFlags::LOCAL_WRITE
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(qps: u32, threads: u32, initiates: bool) -> Layout {
        Layout {
            qps,
            threads,
            tx_depth: 128,
            inline_size: 0,
            area: 1 << 16,
            initiates,
            access: Access::default(),
            huge_pages: false,
            rx_depth: 512,
            recv_len: 0,
            post_path: verbs::PostPath::Classic,
        }
    }

    #[test]
    fn every_qp_belongs_to_exactly_one_thread_in_order() {
        for (qps, threads) in [(1, 1), (4, 2), (5, 2), (7, 3), (1024, 8)] {
            let l = layout(qps, threads, true);
            let all: Vec<u32> = (0..threads).flat_map(|t| l.qps_of_thread(t)).collect();
            assert_eq!(
                all,
                (0..qps).collect::<Vec<_>>(),
                "{qps} QPs on {threads} threads"
            );
            let sizes: Vec<usize> = (0..threads).map(|t| l.qps_of_thread(t).len()).collect();
            let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            assert!(max - min <= 1, "{sizes:?}");
        }
    }

    #[test]
    fn an_initiator_registers_a_working_area_per_qp_beside_the_exposed_one() {
        assert_eq!(layout(4, 1, false).memory(), 4 << 16);
        assert_eq!(layout(4, 1, true).memory(), 8 << 16);
        // A QP's completions: its sends and its receives.
        assert_eq!(layout(4, 1, true).cq_entries_per_qp(), 128 + 512);
    }

    #[test]
    fn the_region_grants_the_peer_only_what_the_test_needs_and_itself_local_write() {
        let none = Access::default();
        assert_eq!(qp_access(none), AccessFlags::NONE);
        assert_eq!(access_flags(none), AccessFlags::LOCAL_WRITE);
        let read = Access {
            remote_read: true,
            ..none
        };
        assert_eq!(qp_access(read), AccessFlags::REMOTE_READ);
        let all = Access {
            remote_write: true,
            remote_read: true,
            remote_atomic: true,
        };
        assert_eq!(
            access_flags(all),
            AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC
                | AccessFlags::LOCAL_WRITE
        );
    }
}
