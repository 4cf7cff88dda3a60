//! Completion queues and work completions.

use std::ffi::CStr;
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Instant;

use rdma_sys as ffi;

use crate::context::Context;
use crate::error::{Error, Result, check_ptr, errno_of, from_errno};

pub(crate) struct CqInner {
    pub(crate) raw: NonNull<ffi::ibv_cq>,
    context: Context,
}

// SAFETY: libibverbs allows polling and destroying a CQ from any thread;
// providers lock the CQ internally. Freed only in `Drop`.
unsafe impl Send for CqInner {}
// SAFETY: as for `Send`.
unsafe impl Sync for CqInner {}

impl Drop for CqInner {
    fn drop(&mut self) {
        // SAFETY: `raw` came from `ibv_create_cq`; every queue pair using it
        // holds an `Arc` to this inner, so none is attached (else `EBUSY`).
        let rc = unsafe { ffi::ibv_destroy_cq(self.raw.as_ptr()) };
        crate::drop_failed("ibv_destroy_cq", rc);
    }
}

/// A completion queue.
///
/// Cheap to clone (an `Arc`); keeps its [`Context`] alive; queue pairs that
/// use it keep it alive in turn, because destroying a CQ that a QP still
/// uses fails with `EBUSY`.
#[derive(Clone)]
pub struct CompletionQueue {
    pub(crate) inner: Arc<CqInner>,
}

impl fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("device", &self.inner.context.name())
            .field("cqe", &self.capacity())
            .finish()
    }
}

/// How many polls between two clock reads in [`CompletionQueue::poll_until`].
const POLLS_PER_CLOCK_CHECK: u32 = 1024;

impl CompletionQueue {
    pub(crate) fn new(context: Context, min_entries: u32) -> Result<Self> {
        let cqe = i32::try_from(min_entries)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "completion queue size {min_entries} must be between 1 and {}",
                    i32::MAX
                ))
            })?;
        // SAFETY: valid context; no completion channel; no user context.
        let raw = unsafe {
            ffi::ibv_create_cq(
                context.as_raw(),
                cqe,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        let raw = check_ptr("ibv_create_cq", raw)?;
        Ok(Self {
            inner: Arc::new(CqInner { raw, context }),
        })
    }

    /// Number of entries the provider actually allocated (≥ requested).
    pub fn capacity(&self) -> i32 {
        // SAFETY: valid CQ until drop; `cqe` is written at creation only.
        unsafe { self.inner.raw.as_ref().cqe }
    }

    /// The raw `ibv_cq`; valid as long as `self` is.
    pub fn as_raw(&self) -> *mut ffi::ibv_cq {
        self.inner.raw.as_ptr()
    }

    /// Polls up to `out.len()` completions into `out`, returning how many
    /// were written. Never blocks, never allocates.
    ///
    /// A failed work request is still a completion (its status is data, see
    /// [`WorkCompletion::status`]); an `Err` means polling itself failed.
    ///
    /// # Errors
    /// [`Error::Verb`] naming `ibv_poll_cq`.
    #[inline]
    #[doc(alias = "ibv_poll_cq")]
    pub fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize> {
        let n = i32::try_from(out.len()).unwrap_or(i32::MAX);
        // SAFETY: valid CQ; `WorkCompletion` is `repr(transparent)` over
        // `ibv_wc`, so `out` is `n` writable `ibv_wc`s.
        let rc =
            unsafe { ffi::ibv_poll_cq(self.as_raw(), n, out.as_mut_ptr().cast::<ffi::ibv_wc>()) };
        if rc < 0 {
            return Err(poll_failed(rc));
        }
        Ok(rc as usize)
    }

    /// Polls until at least one completion arrives or `deadline` passes;
    /// reads the clock only every 1024 empty polls.
    ///
    /// # Errors
    /// [`Error::Timeout`] when the deadline passes with nothing polled,
    /// [`Error::Verb`] when polling fails.
    pub fn poll_until(&self, out: &mut [WorkCompletion], deadline: Instant) -> Result<usize> {
        let started = Instant::now();
        let mut spins = 0u32;
        loop {
            let n = self.poll(out)?;
            if n > 0 {
                return Ok(n);
            }
            spins += 1;
            if spins == POLLS_PER_CLOCK_CHECK {
                spins = 0;
                let now = Instant::now();
                if now >= deadline {
                    return Err(Error::Timeout {
                        what: "a completion",
                        waited: now - started,
                    });
                }
            }
        }
    }
}

#[cold]
fn poll_failed(rc: i32) -> Error {
    from_errno("ibv_poll_cq", errno_of(rc))
}

/// Status of a work completion (`ibv_wc_status`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct WcStatus(pub u32);

impl WcStatus {
    /// Success.
    pub const SUCCESS: Self = Self(ffi::ibv_wc_status::IBV_WC_SUCCESS);
    /// Local protection error (bad lkey or range).
    pub const LOC_PROT_ERR: Self = Self(ffi::ibv_wc_status::IBV_WC_LOC_PROT_ERR);
    /// The work request was flushed because the QP is in the error state.
    pub const WR_FLUSH_ERR: Self = Self(ffi::ibv_wc_status::IBV_WC_WR_FLUSH_ERR);
    /// Remote access error (bad rkey, range or rights on the peer).
    pub const REM_ACCESS_ERR: Self = Self(ffi::ibv_wc_status::IBV_WC_REM_ACCESS_ERR);
    /// Transport retries exhausted (peer gone or unreachable).
    pub const RETRY_EXC_ERR: Self = Self(ffi::ibv_wc_status::IBV_WC_RETRY_EXC_ERR);
    /// Receiver-not-ready retries exhausted.
    pub const RNR_RETRY_EXC_ERR: Self = Self(ffi::ibv_wc_status::IBV_WC_RNR_RETRY_EXC_ERR);

    /// libibverbs' name for the status (`ibv_wc_status_str`), e.g.
    /// `"remote access error"`.
    pub fn as_str(self) -> &'static str {
        // SAFETY: `ibv_wc_status_str` accepts any value and returns a
        // pointer to a static NUL-terminated string ("unknown" for values
        // it does not know).
        let s = unsafe { CStr::from_ptr(ffi::ibv_wc_status_str(self.0)) };
        s.to_str().unwrap_or("unknown")
    }

    /// Whether this is [`WcStatus::SUCCESS`].
    pub fn is_success(self) -> bool {
        self == Self::SUCCESS
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.as_str(), self.0)
    }
}

impl fmt::Debug for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WcStatus({self})")
    }
}

/// What kind of work a completion reports (`ibv_wc_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcOpcode {
    /// A send finished.
    Send,
    /// An RDMA WRITE finished (requester side).
    RdmaWrite,
    /// An RDMA READ finished.
    RdmaRead,
    /// An atomic compare-and-swap finished.
    CompSwap,
    /// An atomic fetch-and-add finished.
    FetchAdd,
    /// A receive consumed a send.
    Recv,
    /// A receive consumed an RDMA WRITE with immediate.
    RecvRdmaWithImm,
    /// Anything else, raw.
    Other(u32),
}

/// One work completion, layout-identical to `ibv_wc` so that a slice of
/// them is polled into directly.
#[repr(transparent)]
pub struct WorkCompletion(ffi::ibv_wc);

impl Default for WorkCompletion {
    fn default() -> Self {
        // SAFETY: `ibv_wc` is plain old data; all-zero is a valid value.
        Self(unsafe { std::mem::zeroed() })
    }
}

impl Clone for WorkCompletion {
    fn clone(&self) -> Self {
        // SAFETY: `ibv_wc` is plain old data (integers and a union of
        // integers); a bitwise copy is a valid value.
        Self(unsafe { std::ptr::read(&self.0) })
    }
}

/// `IBV_WC_WITH_IMM` from `enum ibv_wc_flags` (<infiniband/verbs.h>).
const WC_WITH_IMM: u32 = 1 << 1;

impl WorkCompletion {
    /// The caller's work request id.
    #[inline]
    pub fn wr_id(&self) -> u64 {
        self.0.wr_id
    }

    /// Completion status; a failed request is data, not an `Err`.
    #[inline]
    pub fn status(&self) -> WcStatus {
        WcStatus(self.0.status)
    }

    /// Whether the work request succeeded.
    #[inline]
    pub fn is_success(&self) -> bool {
        self.status().is_success()
    }

    /// Vendor-specific error syndrome (0 on rxe).
    pub fn vendor_err(&self) -> u32 {
        self.0.vendor_err
    }

    /// The opcode. Only meaningful on success.
    pub fn opcode(&self) -> WcOpcode {
        use ffi::ibv_wc_opcode as op;
        match self.0.opcode {
            op::IBV_WC_SEND => WcOpcode::Send,
            op::IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
            op::IBV_WC_RDMA_READ => WcOpcode::RdmaRead,
            op::IBV_WC_COMP_SWAP => WcOpcode::CompSwap,
            op::IBV_WC_FETCH_ADD => WcOpcode::FetchAdd,
            op::IBV_WC_RECV => WcOpcode::Recv,
            op::IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
            other => WcOpcode::Other(other),
        }
    }

    /// Bytes received (receive completions).
    pub fn byte_len(&self) -> u32 {
        self.0.byte_len
    }

    /// Immediate data in host byte order, when the completion carries any.
    pub fn imm_data(&self) -> Option<u32> {
        if self.0.wc_flags & WC_WITH_IMM != 0 {
            // SAFETY: with IBV_WC_WITH_IMM set the union holds `imm_data`.
            Some(u32::from_be(unsafe {
                self.0.imm_data_invalidated_rkey_union.imm_data
            }))
        } else {
            None
        }
    }

    /// Number of the local queue pair the work belonged to.
    pub fn qp_num(&self) -> u32 {
        self.0.qp_num
    }
}

impl fmt::Debug for WorkCompletion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkCompletion")
            .field("wr_id", &self.wr_id())
            .field("status", &self.status())
            .field("opcode", &self.opcode())
            .field("qp_num", &format_args!("{:#x}", self.qp_num()))
            .field("byte_len", &self.byte_len())
            .finish()
    }
}

const _: () = assert!(size_of::<WorkCompletion>() == size_of::<ffi::ibv_wc>());
