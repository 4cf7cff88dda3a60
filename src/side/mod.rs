//! One side's RDMA resources for any test: device, PD, one memory region,
//! a CQ per worker thread, the QPs, and how they connect to the peer's.
//!
//! The region holds, per QP, an **exposed** area (what the peer's
//! operations address: the target of its writes, the source of its reads)
//! and, when this side initiates, a **working** area (the source of our
//! writes, the landing area of our reads). The peer learns only the
//! exposed areas (address, length, rkey); the region grants the peer only
//! the access the test needs ([`engine::bench::spec::Access`]).

//!
//! Its parts, by what they do:
//!
//! - this module: the [`Side`] and its resources (PD, region, CQs, QPs:
//!   [`Side::create`]) and where things are in the region;
//! - [`layout`]: what a side needs ([`Layout`]: QPs, threads, sizes,
//!   rings) and the memory and access that follow from it;
//! - [`connection`]: connecting to the peer's QPs, by QP exchange or
//!   rdma_cm, and what the peer is told ([`Side::qp_infos`]);
//! - [`data`]: the data in the region — the pattern a reader checks, the
//!   zeroing, the receive rings, the checks of what arrived.

mod connection;
mod data;
mod layout;

use std::ops::Range;
use std::sync::Arc;

use anyhow::Context as _;
use verbs::{AccessFlags, BoundQueuePair, CompletionQueue, MemoryRegion, QueuePairCaps};

use crate::exit::UsageError;
use crate::setup::Port;

use connection::random_psns;

pub use data::post_receive;
pub use layout::{Layout, access_flags};

/// Refuses, naming the device's limit, what the device cannot create:
/// more QPs than `max_qp`, a send queue or receive ring deeper than
/// `max_qp_wr`.
fn refuse_beyond_device(
    port: &Port,
    dev: &verbs::DeviceAttributes,
    layout: &Layout,
) -> Result<(), UsageError> {
    let name = port.ctx.name();
    let max_qp = u32::try_from(dev.max_qp).unwrap_or(0);
    if max_qp > 0 && layout.qps > max_qp {
        return Err(UsageError(format!(
            "-q/--qp: {} QPs; {name} allows {max_qp} (max_qp)",
            layout.qps
        )));
    }
    let max_wr = u32::try_from(dev.max_qp_wr).unwrap_or(0);
    if max_wr > 0 && layout.tx_depth > max_wr {
        return Err(UsageError(format!(
            "-t/--tx-depth: tx depth {}; {name} allows {max_wr} work requests per queue (max_qp_wr)",
            layout.tx_depth
        )));
    }
    if max_wr > 0 && layout.rx_depth > max_wr {
        return Err(UsageError(format!(
            "-r/--rx-depth: rx depth {}; {name} allows {max_wr} work requests per queue (max_qp_wr)",
            layout.rx_depth
        )));
    }
    Ok(())
}

/// One QP of `layout` on `cq`, bound to `region`.
fn create_qp(
    port: &Port,
    pd: &verbs::ProtectionDomain,
    cq: &CompletionQueue,
    caps: &QueuePairCaps,
    layout: &Layout,
    region: &Arc<MemoryRegion>,
) -> anyhow::Result<BoundQueuePair> {
    let qp = pd
        .create_rc_qp_on(cq, cq, caps, layout.post_path)
        .map_err(|e| match &e {
            verbs::Error::Verb {
                verb: "ibv_create_qp" | "ibv_create_qp_ex",
                os_error,
            } if os_error.raw_os_error() == Some(nix::libc::EINVAL) && layout.inline_size > 0 => {
                anyhow::Error::new(crate::exit::InlineRefused(format!(
                    "-I/--inline-size: {} refused a QP with {} bytes of inline data \
                 (or tx depth {}): {e}",
                    port.ctx.name(),
                    layout.inline_size,
                    layout.tx_depth
                )))
            }
            _ => anyhow::Error::new(e).context("creating a queue pair"),
        })?;
    Ok(BoundQueuePair::new(qp, Arc::clone(region))?)
}

/// One side's resources.
#[derive(Debug)]
pub struct Side {
    /// QPs, in order, each bound to the region.
    pub qps: Vec<BoundQueuePair>,
    cqs: Vec<CompletionQueue>,
    /// Per worker thread, the range of `cqs` its QPs complete on.
    thread_cqs: Vec<Range<usize>>,
    region: Arc<MemoryRegion>,
    psns: Vec<u32>,
    layout: Layout,
    /// The device's `max_qp_rd_atom` (reads a QP may serve at once).
    pub max_rd_atom: u32,
    /// The device's `max_qp_init_rd_atom` (reads a QP may have in flight).
    pub max_init_rd_atom: u32,
    /// Entries of the port's P_Key table.
    max_pkeys: u16,
    /// Device and port.
    pub port: Port,
    /// The protection domain (QPs made at connection time are made on it).
    pd: verbs::ProtectionDomain,
    /// What each QP asks of the device.
    caps: QueuePairCaps,
    /// Under rdma_cm, before connecting: per QP still to make, the index
    /// of its CQ in `cqs` (the connection manager makes a QP on the id it
    /// connects; empty once connected, and always without rdma_cm).
    pending: Vec<usize>,
}

impl Side {
    /// Registers memory and creates CQs and QPs for `layout`.
    ///
    /// # Errors
    /// A usage error naming `-I/--inline-size` when the device refuses the
    /// inline size, or `-t/--tx-depth` when the CQ would be too deep;
    /// device errors otherwise.
    pub fn create(port: Port, layout: &Layout) -> anyhow::Result<Self> {
        let dev = port.ctx.query_device()?;
        let pd = port.ctx.alloc_pd()?;
        let bytes = layout.memory();
        let len = usize::try_from(bytes).context("memory size")?;
        let mut access = access_flags(layout.access);
        if layout.access.remote_read && port.ctx.transport() == verbs::Transport::Iwarp {
            // iWARP's READ response lands in the reader's memory as a
            // tagged write to the sink's STag: the sink needs remote write
            // (RFC 5040; perftest adds it for READ tests on iWARP).
            access |= AccessFlags::REMOTE_WRITE;
        }
        let region = Arc::new(
            if layout.huge_pages {
                pd.allocate_huge(len, access)
            } else {
                pd.allocate(len, access)
            }
            .with_context(|| format!("registering {bytes} bytes on {}", port.ctx.name()))?,
        );
        refuse_beyond_device(&port, &dev, layout)?;
        // As perftest: the ibv_wr_* API only on the devices it lists (and
        // not with --use_old_post_send); ibv_post_send everywhere else.
        let layout = &Layout {
            post_path: match layout.post_path {
                // librdmacm makes its QPs with `ibv_create_qp`.
                _ if port.cm.is_some() => verbs::PostPath::Classic,
                verbs::PostPath::Extended
                    if engine::bench::spec::perftest_posts_with_wr_api(
                        dev.vendor_id,
                        dev.vendor_part_id,
                    ) =>
                {
                    verbs::PostPath::Extended
                }
                _ => verbs::PostPath::Classic,
            },
            ..*layout
        };
        let per_qp = layout.cq_entries_per_qp();
        let max_cqe = u64::try_from(dev.max_cqe).unwrap_or(0);
        let caps = QueuePairCaps {
            max_send_wr: layout.tx_depth,
            max_recv_wr: layout.rx_depth.max(1),
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: layout.inline_size,
        };
        // Per thread, its QPs over as many CQs as the device's max_cqe
        // requires (perftest makes one CQ and fails beyond max_cqe).
        let mut cqs = Vec::with_capacity(layout.threads as usize);
        let mut thread_cqs = Vec::with_capacity(layout.threads as usize);
        let mut qps = Vec::with_capacity(layout.qps as usize);
        let mut pending = Vec::new();
        for t in 0..layout.threads {
            let n = layout.qps_of_thread(t).len() as u32;
            let groups = engine::bench::config::cq_groups(n, per_qp, max_cqe).ok_or_else(|| {
                UsageError(format!(
                    "-t/--tx-depth: one QP with tx depth {} and {} receives needs a CQ of {} entries; \
                     {} allows {} (max_cqe)",
                    layout.tx_depth,
                    layout.rx_depth,
                    per_qp + 1,
                    port.ctx.name(),
                    dev.max_cqe
                ))
            })?;
            let first = cqs.len();
            for k in groups {
                let cq = port.ctx.create_cq((per_qp * u64::from(k) + 1) as u32)?;
                for _ in 0..k {
                    if port.cm.is_some() {
                        pending.push(cqs.len());
                    } else {
                        qps.push(create_qp(&port, &pd, &cq, &caps, layout, &region)?);
                    }
                }
                cqs.push(cq);
            }
            thread_cqs.push(first..cqs.len());
        }
        if let Some(&cq) = pending.first() {
            // rdma_cm makes the QPs only when connecting: one made here
            // and dropped refuses now, as without rdma_cm, what the device
            // would refuse then (an inline size beyond siw's 80 B).
            drop(create_qp(&port, &pd, &cqs[cq], &caps, layout, &region)?);
        }
        let side = Self {
            // Under rdma_cm the connection manager draws them (shown as 0).
            psns: if pending.is_empty() {
                random_psns(qps.len())
            } else {
                vec![0; pending.len()]
            },
            qps,
            cqs,
            thread_cqs,
            region,
            layout: *layout,
            max_rd_atom: u32::try_from(dev.max_qp_rd_atom).unwrap_or(0),
            max_init_rd_atom: u32::try_from(dev.max_qp_init_rd_atom).unwrap_or(0),
            max_pkeys: dev.max_pkeys,
            port,
            pd,
            caps,
            pending,
        };
        if layout.access.remote_read {
            side.fill_pattern()?;
        }
        Ok(side)
    }

    /// The layout it was created with.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// How the QPs post (the device may not have the extended path the
    /// layout asked for: then `ibv_post_send`).
    pub fn post_path(&self) -> verbs::PostPath {
        self.qps
            .first()
            .map_or(verbs::PostPath::Classic, |q| q.qp().post_path())
    }

    /// Offset of QP `q`'s exposed area in the region.
    pub fn exposed_offset(&self, q: usize) -> usize {
        (q as u64 * self.layout.area) as usize
    }

    /// Offset of QP `q`'s working area in the region.
    pub fn working_offset(&self, q: usize) -> usize {
        ((u64::from(self.layout.qps) + q as u64) * self.layout.area) as usize
    }

    /// Address of QP `q`'s exposed area.
    pub fn exposed(&self, q: usize) -> u64 {
        self.region.addr() + self.exposed_offset(q) as u64
    }

    /// Address of QP `q`'s working area.
    pub fn working(&self, q: usize) -> u64 {
        self.region.addr() + self.working_offset(q) as u64
    }

    /// Local key of the region.
    pub fn lkey(&self) -> u32 {
        self.region.lkey()
    }

    /// The region (its bytes through volatile/atomic access only).
    pub fn region(&self) -> &MemoryRegion {
        &self.region
    }

    /// Worker thread `t`'s first CQ (a latency test's only one).
    pub fn cq(&self, t: usize) -> &CompletionQueue {
        &self.cqs[self.thread_cqs[t].start]
    }

    /// Worker thread `t`'s CQs, in the order of its QPs (each holds a
    /// contiguous share of them).
    pub fn cqs_of_thread(&self, t: usize) -> &[CompletionQueue] {
        &self.cqs[self.thread_cqs[t].clone()]
    }
}
