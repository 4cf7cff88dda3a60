//! A queue pair bound to one memory region, which makes posting safe.

use std::fmt;
use std::sync::Arc;

use rdma_sys as ffi;

use crate::error::{Error, Result};
use crate::mr::{AccessFlags, LocalSge, MemoryRegion};
use crate::prepared::PreparedSends;
use crate::qp::{ConnectOptions, Endpoint, QueuePair};
use crate::wr::{RecvBatch, SendBatch, SendWr};

/// A queue pair bound to the memory region all its work uses, which makes
/// posting safe:
///
/// - every request is checked (a few integer compares, no allocation) to
///   name only bytes inside that region, with its lkey, and requests that
///   make the device write local memory (RDMA READ, atomics, receives)
///   are refused unless the region has [`AccessFlags::LOCAL_WRITE`];
/// - the region is held by an `Arc`, so it stays allocated and registered
///   while the QP exists: the QP is declared first and drops first,
///   destroying it (and so ending its work) before this handle on the
///   region goes;
/// - the QP never leaves: there is no `&mut QueuePair` to swap it out
///   through, only [`BoundQueuePair::connect`];
/// - the region's bytes are accessed only atomically and never through a
///   reference (see [`MemoryRegion`]), so the device and a peer may write
///   them at any time without Rust code racing them, and the region can be
///   shared freely (fill or check it through [`BoundQueuePair::region`]).
pub struct BoundQueuePair {
    // `qp` is declared first: fields drop in order, so the QP (and any
    // outstanding work) goes before this handle on the region does.
    qp: QueuePair,
    region: Arc<MemoryRegion>,
    lo: u64,
    hi: u64,
    lkey: u32,
    local_write: bool,
}

impl fmt::Debug for BoundQueuePair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BoundQueuePair")
            .field("qp", &self.qp)
            .field("region", &self.region)
            .finish()
    }
}

impl BoundQueuePair {
    /// Binds `qp` to `region`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the region belongs to another
    /// protection domain than the queue pair.
    pub fn new(qp: QueuePair, region: Arc<MemoryRegion>) -> Result<Self> {
        if region.pd().as_raw() != qp.pd().as_raw() {
            return Err(Error::InvalidArgument(
                "the memory region belongs to another protection domain than the queue pair".into(),
            ));
        }
        Ok(Self {
            lo: region.addr(),
            hi: region.addr() + region.len() as u64,
            lkey: region.lkey(),
            local_write: region.access().contains(AccessFlags::LOCAL_WRITE),
            qp,
            region,
        })
    }

    /// The queue pair.
    pub fn qp(&self) -> &QueuePair {
        &self.qp
    }

    /// The region all its work uses.
    pub fn region(&self) -> &Arc<MemoryRegion> {
        &self.region
    }

    /// Connects the queue pair; see [`QueuePair::connect`].
    ///
    /// # Errors
    /// As [`QueuePair::connect`].
    pub fn connect(&mut self, opts: &ConnectOptions, remote: &Endpoint) -> Result<()> {
        self.qp.connect(opts, remote)
    }

    /// The queue pair's endpoint for the peer; see [`QueuePair::endpoint`].
    ///
    /// # Errors
    /// As [`QueuePair::endpoint`].
    pub fn endpoint(&self, port: u8, gid_index: Option<u32>, psn: u32) -> Result<Endpoint> {
        self.qp.endpoint(port, gid_index, psn)
    }

    #[inline]
    fn inside(&self, sge: &ffi::ibv_sge) -> bool {
        sge.lkey == self.lkey
            && sge.addr >= self.lo
            && sge
                .addr
                .checked_add(u64::from(sge.length))
                .is_some_and(|end| end <= self.hi)
    }

    #[inline]
    fn may_write_local(&self, writes: bool) -> Result<()> {
        if writes && !self.local_write {
            return Err(no_local_write());
        }
        Ok(())
    }

    /// Posts one send work request from the bound region, on the queue
    /// pair's [`crate::PostPath`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], with nothing posted, when the local
    /// range is not inside the bound region or a READ or atomic targets a
    /// region without `LOCAL_WRITE`; otherwise as [`QueuePair::post_send`].
    #[inline]
    pub fn post_send(&self, wr: &SendWr) -> Result<()> {
        if !self.inside(&wr.local.to_raw()) {
            return Err(outside_region());
        }
        self.may_write_local(wr.op.writes_local() && wr.local.length > 0)?;
        // SAFETY: `wr.local` lies inside `self.region` (checked just above:
        // address range and lkey), and `QueuePair::post_send` refuses,
        // before posting, every request under which the device would touch
        // more than `wr.local` (an atomic must name exactly its 8 bytes).
        // The region stays allocated and registered for as long as the QP
        // exists (`self` holds an `Arc` to it and drops the QP first), so
        // until every completion. If the device writes it (READ, atomic),
        // it has `LOCAL_WRITE` (checked above), and Rust code can reach its
        // bytes only through `MemoryRegion`'s atomic accessors, which
        // tolerate concurrent device writes: no reference to them exists.
        unsafe { self.qp.post_send(wr) }
    }

    /// Posts a batch of send work requests from the bound region (one
    /// `ibv_post_send`, or one `ibv_wr_start`/`ibv_wr_complete`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], with nothing posted, when a local range
    /// is not inside the bound region or a READ or atomic targets a region
    /// without `LOCAL_WRITE`; otherwise as [`QueuePair::post_batch`].
    #[inline]
    pub fn post_batch(&self, batch: &mut SendBatch) -> Result<()> {
        if !batch.sges.iter().all(|s| self.inside(s)) {
            return Err(outside_region());
        }
        self.may_write_local(batch.writes_local)?;
        // SAFETY: as in `post_send`, for every request of the batch: each
        // SGE was checked above, `batch.writes_local` records whether any
        // request makes the device write its (non-empty) local range, and
        // `QueuePair::post_batch` refuses a batch holding a request
        // `post_send` would refuse.
        unsafe { self.qp.post_batch(batch) }
    }

    /// Posts every request of a prepared list whose window lies in the
    /// bound region: one range check for the whole list, which keeps each
    /// request inside its window ([`PreparedSends::set`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], with nothing posted, when the list's
    /// window is not inside the bound region or its requests make the
    /// device write local memory (READ, atomics) and the region lacks
    /// `LOCAL_WRITE`; otherwise as [`QueuePair::post_prepared`].
    #[inline]
    pub fn post_prepared(&self, list: &mut PreparedSends) -> Result<()> {
        let (base, window, lkey) = list.window();
        let inside = lkey == self.lkey
            && base >= self.lo
            && base.checked_add(window).is_some_and(|end| end <= self.hi);
        if !inside {
            return Err(outside_region());
        }
        self.may_write_local(list.writes_local)?;
        // SAFETY: as in `post_send`, for every request of the list: each
        // names `length` bytes at an offset of at most `window - length`
        // from `base` (`PreparedSends`' invariant, kept by `set`), so lies
        // in the window, which lies in `self.region` with its lkey
        // (checked above); `writes_local` records whether the device
        // writes those ranges; `QueuePair::post_prepared` relies on
        // `PreparedSends::new` having refused what `post_send` refuses.
        unsafe { self.qp.post_prepared(list) }
    }

    /// Posts one receive into `local`, a range of the bound region.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], with nothing posted, when `local` is not
    /// inside the bound region, or names memory and the region lacks
    /// `LOCAL_WRITE`; otherwise as [`QueuePair::post_recv`].
    pub fn post_recv(&self, wr_id: u64, local: LocalSge) -> Result<()> {
        if !self.inside(&local.to_raw()) {
            return Err(outside_region());
        }
        self.may_write_local(local.length > 0)?;
        // SAFETY: the device writes at most `local`, which lies inside the
        // region (checked above); the region has `LOCAL_WRITE` if `local`
        // is not empty (checked above), stays registered until the QP is
        // destroyed (as in `post_send`), and is accessed by Rust only
        // atomically.
        unsafe { self.qp.post_recv(wr_id, Some(local)) }
    }

    /// Posts a batch of receives into the bound region (a receive ring).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], with nothing posted, when a receive's
    /// range is not inside the bound region, or some receive names memory
    /// and the region lacks `LOCAL_WRITE`; otherwise as
    /// [`QueuePair::post_recv_batch`].
    pub fn post_recv_batch(&self, batch: &mut RecvBatch) -> Result<()> {
        if !batch.sges.iter().all(|s| self.inside(s)) {
            return Err(outside_region());
        }
        self.may_write_local(batch.writes_local)?;
        // SAFETY: as in `post_recv`, for every receive of the batch: each
        // SGE was checked above and `batch.writes_local` records whether
        // any receive names memory.
        unsafe { self.qp.post_recv_batch(batch) }
    }
}

#[cold]
fn outside_region() -> Error {
    Error::InvalidArgument(
        "work request's local range is outside the queue pair's bound memory region".into(),
    )
}

#[cold]
fn no_local_write() -> Error {
    Error::InvalidArgument(
        "RDMA READ, atomics and receives write local memory: the bound memory region \
         needs LOCAL_WRITE access"
            .into(),
    )
}
