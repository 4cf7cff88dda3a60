//! Protection domains.

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_sys as ffi;

use crate::context::Context;
use crate::cq::CompletionQueue;
use crate::error::{Result, check_ptr};
use crate::mr::{AccessFlags, MemoryRegion};
use crate::qp::{PostPath, QueuePair, QueuePairCaps};

pub(crate) struct PdInner {
    pub(crate) raw: NonNull<ffi::ibv_pd>,
    pub(crate) context: Context,
}

// SAFETY: libibverbs verbs on a PD are thread-safe (see `ContextInner`);
// the pointer is freed only in `Drop`.
unsafe impl Send for PdInner {}
// SAFETY: as for `Send`.
unsafe impl Sync for PdInner {}

impl Drop for PdInner {
    fn drop(&mut self) {
        // SAFETY: `raw` came from `ibv_alloc_pd`; every MR and QP created in
        // this PD holds an `Arc` to it, so none is alive (else `EBUSY`).
        // `context` is a field and is dropped after this, so the device is
        // still open here.
        let rc = unsafe { ffi::ibv_dealloc_pd(self.raw.as_ptr()) };
        crate::drop_failed("ibv_dealloc_pd", rc);
    }
}

/// A protection domain: memory regions and queue pairs in the same domain
/// may work together.
///
/// Cheap to clone; keeps its [`Context`] alive; freed after the last clone,
/// memory region and queue pair that use it are dropped.
#[derive(Clone)]
pub struct ProtectionDomain {
    pub(crate) inner: Arc<PdInner>,
}

impl fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProtectionDomain")
            .field("device", &self.inner.context.name())
            .finish()
    }
}

impl ProtectionDomain {
    pub(crate) fn new(context: Context) -> Result<Self> {
        // SAFETY: valid, open context.
        let raw = check_ptr("ibv_alloc_pd", unsafe {
            ffi::ibv_alloc_pd(context.as_raw())
        })?;
        Ok(Self {
            inner: Arc::new(PdInner { raw, context }),
        })
    }

    /// The device context this domain belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.context
    }

    /// The raw `ibv_pd`; valid as long as `self` is.
    pub fn as_raw(&self) -> *mut ffi::ibv_pd {
        self.inner.raw.as_ptr()
    }

    /// Allocates a zeroed, page-aligned buffer of `len` bytes and registers
    /// it with `access`.
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`] for a zero length, a length too
    /// large to round up to whole pages, or [`AccessFlags::REMOTE_WRITE`] /
    /// [`AccessFlags::REMOTE_ATOMIC`] without [`AccessFlags::LOCAL_WRITE`]
    /// (the verbs specification forbids them); [`crate::Error::Verb`]
    /// naming `ibv_reg_mr`.
    #[doc(alias = "ibv_reg_mr")]
    pub fn allocate(&self, len: usize, access: AccessFlags) -> Result<MemoryRegion> {
        MemoryRegion::allocate(self.clone(), len, access)
    }

    /// As [`ProtectionDomain::allocate`], on huge pages (see
    /// [`crate::HUGE_PAGE`]); fails when none are reserved.
    ///
    /// # Errors
    /// As [`ProtectionDomain::allocate`], and [`crate::Error::InvalidArgument`]
    /// when the huge pages cannot be mapped.
    pub fn allocate_huge(&self, len: usize, access: AccessFlags) -> Result<MemoryRegion> {
        MemoryRegion::allocate_huge(self.clone(), len, access)
    }

    /// Creates an RC queue pair in the RESET state.
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`] for a zero send queue depth;
    /// [`crate::Error::Verb`] naming `ibv_create_qp` (e.g. depths above the
    /// device's limits) or `ibv_query_qp`.
    #[doc(alias = "ibv_create_qp")]
    pub fn create_rc_qp(
        &self,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        caps: &QueuePairCaps,
    ) -> Result<QueuePair> {
        QueuePair::create_rc(
            self.clone(),
            send_cq.clone(),
            recv_cq.clone(),
            caps,
            PostPath::Classic,
        )
    }

    /// Creates an RC queue pair in the RESET state that posts on `path`.
    ///
    /// [`PostPath::Extended`] creates it with `ibv_create_qp_ex`, asking
    /// for the send ops of every [`crate::Op`], so that
    /// [`QueuePair::post_send`] and [`QueuePair::post_batch`] (and
    /// [`crate::BoundQueuePair`]'s) post through `ibv_wr_*`. It falls back
    /// to a classic QP, which [`QueuePair::post_path`] then reports, when
    /// the context has no extended op table or no `create_qp_ex`, when the
    /// provider answers `EOPNOTSUPP`, or when it leaves a needed builder
    /// unset. [`PostPath::Classic`] is [`ProtectionDomain::create_rc_qp`].
    ///
    /// # Errors
    /// As [`ProtectionDomain::create_rc_qp`]; on the extended path
    /// [`crate::Error::Verb`] may name `ibv_create_qp_ex`.
    #[doc(alias = "ibv_create_qp_ex")]
    pub fn create_rc_qp_on(
        &self,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        caps: &QueuePairCaps,
        path: PostPath,
    ) -> Result<QueuePair> {
        QueuePair::create_rc(self.clone(), send_cq.clone(), recv_cq.clone(), caps, path)
    }
}
