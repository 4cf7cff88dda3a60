//! Work requests: what is posted on a queue pair's send queue ([`SendWr`],
//! [`SendBatch`]) and receive queue ([`RecvBatch`]).
//!
//! Plain data, safe to build and bounds-checked where the arguments allow;
//! posting them ([`crate::QueuePair::post_send`] and friends, or the safe
//! [`crate::BoundQueuePair`]) is where the device starts using memory.

use std::fmt;

use rdma_sys as ffi;

use crate::error::{Error, Result};
use crate::mr::{LocalSge, RemoteMemory};

/// Bytes an RDMA atomic operates on.
const ATOMIC_LEN: u32 = 8;

/// What a send work request does.
///
/// Immediate data is in host order; it is sent in network order and
/// consumes a receive on the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// RDMA WRITE of the local bytes to `remote_addr` (with immediate:
    /// `IBV_WR_RDMA_WRITE_WITH_IMM`). The device reads the local memory.
    Write {
        /// Remote destination address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Immediate data, host order.
        imm: Option<u32>,
    },
    /// RDMA READ of `remote_addr` into the local bytes. The device
    /// *writes* the local memory.
    Read {
        /// Remote source address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// SEND of the local bytes into the peer's next receive (with
    /// immediate: `IBV_WR_SEND_WITH_IMM`). The device reads the local
    /// memory.
    Send {
        /// Immediate data, host order.
        imm: Option<u32>,
    },
    /// Atomic fetch-and-add of `add` to the 8-byte word at `remote_addr`;
    /// the device writes the word's previous value into the 8 local bytes.
    FetchAdd {
        /// Remote address, 8-byte aligned.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Value added.
        add: u64,
    },
    /// Atomic compare-and-swap of the 8-byte word at `remote_addr`: it
    /// becomes `swap` if it equals `compare`; the device writes its
    /// previous value into the 8 local bytes.
    CmpSwap {
        /// Remote address, 8-byte aligned.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Expected value.
        compare: u64,
        /// New value.
        swap: u64,
    },
}

impl Op {
    /// Whether the device writes the local memory of the request: RDMA
    /// READ and the atomics (which need a region with
    /// [`crate::AccessFlags::LOCAL_WRITE`]).
    pub fn writes_local(self) -> bool {
        matches!(
            self,
            Self::Read { .. } | Self::FetchAdd { .. } | Self::CmpSwap { .. }
        )
    }

    fn is_atomic(self) -> bool {
        matches!(self, Self::FetchAdd { .. } | Self::CmpSwap { .. })
    }

    fn remote_addr(self) -> Option<u64> {
        match self {
            Self::Write { remote_addr, .. }
            | Self::Read { remote_addr, .. }
            | Self::FetchAdd { remote_addr, .. }
            | Self::CmpSwap { remote_addr, .. } => Some(remote_addr),
            Self::Send { .. } => None,
        }
    }
}

/// One send-queue work request: plain data, safe to build.
///
/// The constructors check what can be checked from their arguments; the
/// fields are public, and what must hold for posting (no inline READ or
/// atomic, 8-byte atomics) is checked again when it is posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The local bytes: source of WRITE and SEND, destination of READ and
    /// of an atomic's previous value.
    pub local: LocalSge,
    /// What to do.
    pub op: Op,
    /// Ask for a completion (`IBV_SEND_SIGNALED`).
    pub signaled: bool,
    /// Copy the payload into the work request (`IBV_SEND_INLINE`); WRITE
    /// and SEND only.
    pub inline: bool,
}

fn fits(what: &str, local: LocalSge, remote: RemoteMemory) -> Result<()> {
    if u64::from(local.length) > remote.len {
        return Err(Error::InvalidArgument(format!(
            "{what} of {} bytes does not fit the remote range of {} bytes",
            local.length, remote.len
        )));
    }
    Ok(())
}

fn atomic_target(local: LocalSge, remote: RemoteMemory) -> Result<()> {
    if local.length != ATOMIC_LEN {
        return Err(Error::InvalidArgument(format!(
            "an atomic needs an 8-byte local buffer, not {} bytes",
            local.length
        )));
    }
    if remote.addr & 7 != 0 {
        return Err(Error::InvalidArgument(format!(
            "atomic remote address {:#x} is not 8-byte aligned",
            remote.addr
        )));
    }
    if remote.len < 8 {
        return Err(Error::InvalidArgument(format!(
            "atomic remote range of {} bytes is shorter than 8",
            remote.len
        )));
    }
    Ok(())
}

impl SendWr {
    fn new(wr_id: u64, local: LocalSge, op: Op) -> Self {
        Self {
            wr_id,
            local,
            op,
            signaled: true,
            inline: false,
        }
    }

    /// A signaled, non-inline RDMA WRITE of `local` to the start of
    /// `remote`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `local` is longer than `remote`.
    pub fn write(wr_id: u64, local: LocalSge, remote: RemoteMemory) -> Result<Self> {
        fits("write", local, remote)?;
        Ok(Self::new(
            wr_id,
            local,
            Op::Write {
                remote_addr: remote.addr,
                rkey: remote.rkey,
                imm: None,
            },
        ))
    }

    /// As [`SendWr::write`], with immediate data (host order), which
    /// consumes a receive on the peer.
    ///
    /// # Errors
    /// As [`SendWr::write`].
    pub fn write_with_imm(
        wr_id: u64,
        local: LocalSge,
        remote: RemoteMemory,
        imm: u32,
    ) -> Result<Self> {
        fits("write", local, remote)?;
        Ok(Self::new(
            wr_id,
            local,
            Op::Write {
                remote_addr: remote.addr,
                rkey: remote.rkey,
                imm: Some(imm),
            },
        ))
    }

    /// A signaled RDMA READ of the start of `remote` into `local`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `local` is longer than `remote`.
    pub fn read(wr_id: u64, local: LocalSge, remote: RemoteMemory) -> Result<Self> {
        fits("read", local, remote)?;
        Ok(Self::new(
            wr_id,
            local,
            Op::Read {
                remote_addr: remote.addr,
                rkey: remote.rkey,
            },
        ))
    }

    /// A signaled, non-inline SEND of `local`.
    pub fn send(wr_id: u64, local: LocalSge) -> Self {
        Self::new(wr_id, local, Op::Send { imm: None })
    }

    /// A signaled, non-inline SEND of `local` with immediate data (host
    /// order).
    pub fn send_with_imm(wr_id: u64, local: LocalSge, imm: u32) -> Self {
        Self::new(wr_id, local, Op::Send { imm: Some(imm) })
    }

    /// A signaled atomic fetch-and-add of `add` to the word at the start of
    /// `remote`; its previous value lands in `local`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] unless `local` is 8 bytes long and
    /// `remote` is 8-byte aligned and at least 8 bytes long.
    pub fn fetch_add(wr_id: u64, local: LocalSge, remote: RemoteMemory, add: u64) -> Result<Self> {
        atomic_target(local, remote)?;
        Ok(Self::new(
            wr_id,
            local,
            Op::FetchAdd {
                remote_addr: remote.addr,
                rkey: remote.rkey,
                add,
            },
        ))
    }

    /// A signaled atomic compare-and-swap on the word at the start of
    /// `remote`; its previous value lands in `local`.
    ///
    /// # Errors
    /// As [`SendWr::fetch_add`].
    pub fn cmp_swap(
        wr_id: u64,
        local: LocalSge,
        remote: RemoteMemory,
        compare: u64,
        swap: u64,
    ) -> Result<Self> {
        atomic_target(local, remote)?;
        Ok(Self::new(
            wr_id,
            local,
            Op::CmpSwap {
                remote_addr: remote.addr,
                rkey: remote.rkey,
                compare,
                swap,
            },
        ))
    }

    /// Sets whether a completion is generated.
    #[must_use]
    pub fn signaled(mut self, signaled: bool) -> Self {
        self.signaled = signaled;
        self
    }

    /// Sets whether the payload is sent inline (refused at post time for
    /// READ and atomics).
    #[must_use]
    pub fn inline(mut self, inline: bool) -> Self {
        self.inline = inline;
        self
    }

    /// Why this request must not be posted, if it must not: checked at
    /// post time, since the fields are public.
    #[inline]
    pub(crate) fn refusal(&self) -> Option<&'static str> {
        if self.inline && self.op.writes_local() {
            return Some(
                "inline is refused for RDMA READ and atomics: the device writes their local memory",
            );
        }
        if self.op.is_atomic() {
            if self.local.length != ATOMIC_LEN {
                return Some("an atomic needs an 8-byte local buffer");
            }
            if self.op.remote_addr().is_some_and(|a| a & 7 != 0) {
                return Some("an atomic's remote address must be 8-byte aligned");
            }
        }
        None
    }

    /// The request as libibverbs takes it: a zeroed `ibv_send_wr` filled
    /// in, and its SGE (the caller points `sg_list` at the SGE and links
    /// `next`).
    pub(crate) fn raw_parts(&self) -> (ffi::ibv_send_wr, ffi::ibv_sge) {
        let mut wr = zeroed_send_wr();
        let sge = self.local.to_raw();
        self.fill(&mut wr);
        (wr, sge)
    }

    fn fill(&self, wr: &mut ffi::ibv_send_wr) {
        use ffi::ibv_wr_opcode as code;
        wr.wr_id = self.wr_id;
        wr.next = std::ptr::null_mut();
        wr.num_sge = i32::from(self.local.length > 0);
        let mut flags = 0;
        if self.signaled {
            flags |= ffi::ibv_send_flags::IBV_SEND_SIGNALED.0;
        }
        if self.inline {
            flags |= ffi::ibv_send_flags::IBV_SEND_INLINE.0;
        }
        wr.send_flags = flags;
        let mut imm_data = None;
        match self.op {
            Op::Write {
                remote_addr,
                rkey,
                imm,
            } => {
                wr.opcode = if imm.is_some() {
                    code::IBV_WR_RDMA_WRITE_WITH_IMM
                } else {
                    code::IBV_WR_RDMA_WRITE
                };
                wr.wr.rdma = ffi::rdma_t { remote_addr, rkey };
                imm_data = imm;
            }
            Op::Read { remote_addr, rkey } => {
                wr.opcode = code::IBV_WR_RDMA_READ;
                wr.wr.rdma = ffi::rdma_t { remote_addr, rkey };
            }
            Op::Send { imm } => {
                wr.opcode = if imm.is_some() {
                    code::IBV_WR_SEND_WITH_IMM
                } else {
                    code::IBV_WR_SEND
                };
                imm_data = imm;
            }
            Op::FetchAdd {
                remote_addr,
                rkey,
                add,
            } => {
                wr.opcode = code::IBV_WR_ATOMIC_FETCH_AND_ADD;
                wr.wr.atomic = ffi::atomic_t {
                    remote_addr,
                    compare_add: add,
                    swap: 0,
                    rkey,
                };
            }
            Op::CmpSwap {
                remote_addr,
                rkey,
                compare,
                swap,
            } => {
                wr.opcode = code::IBV_WR_ATOMIC_CMP_AND_SWP;
                wr.wr.atomic = ffi::atomic_t {
                    remote_addr,
                    compare_add: compare,
                    swap,
                    rkey,
                };
            }
        }
        wr.imm_data_invalidated_rkey_union.imm_data = imm_data.unwrap_or(0).to_be();
    }
}

/// Returned by [`SendBatch::push`] and [`RecvBatch::push`] when the batch
/// is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("work request batch is full ({capacity} work requests)")]
pub struct BatchFull {
    /// The batch's capacity.
    pub capacity: usize,
}

/// A zeroed `ibv_send_wr`.
pub(crate) fn zeroed_send_wr() -> ffi::ibv_send_wr {
    // SAFETY: `ibv_send_wr` is plain old data (integers, raw pointers and
    // unions of those); all-zero is a valid value (null pointers, zero
    // integers).
    unsafe { std::mem::zeroed() }
}

/// A reusable list of send work requests posted with one `ibv_post_send`,
/// or one `ibv_wr_start`/`ibv_wr_complete` on the extended post path
/// (perftest's `--post_list`). Its storage is allocated once, at
/// construction; pushing, clearing and posting allocate nothing.
pub struct SendBatch {
    // Invariant: `wrs.len() == sges.len() <= capacity <= both vectors'
    // allocated capacity`, so pushing never reallocates. The `sg_list` and
    // `next` pointers of `wrs` are set at post time only (by the classic
    // path; the extended one reads `wrs[i]` with `sges[i]` and no pointer).
    pub(crate) wrs: Vec<ffi::ibv_send_wr>,
    pub(crate) sges: Vec<ffi::ibv_sge>,
    capacity: usize,
    /// Longest inline payload in the batch.
    pub(crate) max_inline: u32,
    /// Whether some request makes the device write local memory (a READ
    /// or an atomic with a non-empty local entry).
    pub(crate) writes_local: bool,
    /// Why the batch must not be posted: the first refused request's
    /// reason.
    pub(crate) refusal: Option<&'static str>,
}

// SAFETY: the raw pointers inside the stored `ibv_send_wr`s are null or
// point into the batch's own heap storage (set at post time), which moves
// with it; nothing refers to thread-local state.
unsafe impl Send for SendBatch {}

impl fmt::Debug for SendBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendBatch")
            .field("len", &self.wrs.len())
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl SendBatch {
    /// An empty batch with room for `capacity` work requests.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            wrs: Vec::with_capacity(capacity),
            sges: Vec::with_capacity(capacity),
            capacity,
            max_inline: 0,
            writes_local: false,
            refusal: None,
        }
    }

    /// Appends a work request. One that must not be posted (an inline READ
    /// or atomic, an atomic not of 8 bytes) is kept, and makes posting the
    /// batch fail with [`Error::InvalidArgument`] before anything reaches
    /// the device.
    ///
    /// # Errors
    /// [`BatchFull`] when the batch already holds `capacity` requests.
    pub fn push(&mut self, wr: &SendWr) -> Result<(), BatchFull> {
        if self.wrs.len() == self.capacity {
            return Err(BatchFull {
                capacity: self.capacity,
            });
        }
        let (raw, sge) = wr.raw_parts();
        self.wrs.push(raw);
        self.sges.push(sge);
        if wr.inline {
            self.max_inline = self.max_inline.max(wr.local.length);
        }
        self.writes_local |= wr.op.writes_local() && wr.local.length > 0;
        if self.refusal.is_none() {
            self.refusal = wr.refusal();
        }
        Ok(())
    }

    /// Removes every work request, keeping the storage.
    pub fn clear(&mut self) {
        self.wrs.clear();
        self.sges.clear();
        self.max_inline = 0;
        self.writes_local = false;
        self.refusal = None;
    }

    /// Number of work requests in the batch.
    pub fn len(&self) -> usize {
        self.wrs.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.wrs.is_empty()
    }

    /// Room for how many work requests.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

/// A reusable list of receive work requests posted with one
/// `ibv_post_recv`: a receive ring for SEND tests. Allocates only at
/// construction.
pub struct RecvBatch {
    // Invariant: as for `SendBatch`.
    pub(crate) wrs: Vec<ffi::ibv_recv_wr>,
    pub(crate) sges: Vec<ffi::ibv_sge>,
    capacity: usize,
    /// Whether some receive names memory (a non-empty entry).
    pub(crate) writes_local: bool,
}

// SAFETY: as for `SendBatch`: the pointers in the stored `ibv_recv_wr`s
// are null or point into the batch's own storage.
unsafe impl Send for RecvBatch {}

impl fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecvBatch")
            .field("len", &self.wrs.len())
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl RecvBatch {
    /// An empty batch with room for `capacity` receives.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            wrs: Vec::with_capacity(capacity),
            sges: Vec::with_capacity(capacity),
            capacity,
            writes_local: false,
        }
    }

    /// Appends a receive of up to `local.length` bytes into `local` (a
    /// zero-length entry receives no payload, e.g. for RDMA WRITE with
    /// immediate).
    ///
    /// # Errors
    /// [`BatchFull`] when the batch already holds `capacity` receives.
    pub fn push(&mut self, wr_id: u64, local: LocalSge) -> Result<(), BatchFull> {
        if self.wrs.len() == self.capacity {
            return Err(BatchFull {
                capacity: self.capacity,
            });
        }
        self.wrs.push(ffi::ibv_recv_wr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: std::ptr::null_mut(),
            num_sge: i32::from(local.length > 0),
        });
        self.sges.push(local.to_raw());
        self.writes_local |= local.length > 0;
        Ok(())
    }

    /// Removes every receive, keeping the storage.
    pub fn clear(&mut self) {
        self.wrs.clear();
        self.sges.clear();
        self.writes_local = false;
    }

    /// Number of receives in the batch.
    pub fn len(&self) -> usize {
        self.wrs.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.wrs.is_empty()
    }

    /// Room for how many receives.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCAL: LocalSge = LocalSge {
        addr: 0x10_0000,
        length: 8,
        lkey: 0x11,
    };
    const REMOTE: RemoteMemory = RemoteMemory {
        addr: 0x20_0000,
        len: 4096,
        rkey: 0x22,
    };

    fn filled(wr: &SendWr) -> (ffi::ibv_send_wr, ffi::ibv_sge) {
        wr.raw_parts()
    }

    fn message(e: Error) -> String {
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        e.to_string()
    }

    #[test]
    fn write_and_read_must_fit_the_remote_range() {
        let long = LocalSge {
            length: 4097,
            ..LOCAL
        };
        let e = message(SendWr::write(1, long, REMOTE).unwrap_err());
        assert!(
            e.contains("write of 4097 bytes") && e.contains("4096"),
            "{e}"
        );
        let e = message(SendWr::read(1, long, REMOTE).unwrap_err());
        assert!(e.contains("read of 4097 bytes"), "{e}");
        assert!(SendWr::write_with_imm(1, long, REMOTE, 5).is_err());
        let exact = LocalSge {
            length: 4096,
            ..LOCAL
        };
        let r = SendWr::read(3, exact, REMOTE).unwrap();
        assert_eq!(
            r.op,
            Op::Read {
                remote_addr: REMOTE.addr,
                rkey: REMOTE.rkey
            }
        );
        assert!(r.signaled && !r.inline);
        assert_eq!(r.refusal(), None);
    }

    #[test]
    fn atomics_need_8_local_bytes_and_an_aligned_8_byte_target() {
        for length in [0, 4, 7, 9, 16] {
            let local = LocalSge { length, ..LOCAL };
            let e = message(SendWr::fetch_add(1, local, REMOTE, 1).unwrap_err());
            assert!(e.contains("8-byte local buffer"), "{length}: {e}");
            assert!(SendWr::cmp_swap(1, local, REMOTE, 0, 1).is_err());
        }
        for addr in [REMOTE.addr + 1, REMOTE.addr + 4] {
            let remote = RemoteMemory { addr, ..REMOTE };
            let e = message(SendWr::fetch_add(1, LOCAL, remote, 1).unwrap_err());
            assert!(e.contains("not 8-byte aligned"), "{e}");
            assert!(SendWr::cmp_swap(1, LOCAL, remote, 0, 1).is_err());
        }
        let short = RemoteMemory { len: 7, ..REMOTE };
        let e = message(SendWr::cmp_swap(1, LOCAL, short, 0, 1).unwrap_err());
        assert!(e.contains("shorter than 8"), "{e}");
        let ok = SendWr::fetch_add(1, LOCAL, REMOTE.slice(8..16).unwrap(), 3).unwrap();
        assert_eq!(ok.refusal(), None);
    }

    #[test]
    fn posting_refuses_inline_reads_and_atomics_and_hand_built_bad_atomics() {
        let read = SendWr::read(1, LOCAL, REMOTE).unwrap().inline(true);
        assert!(read.refusal().unwrap().contains("inline"));
        let fa = SendWr::fetch_add(1, LOCAL, REMOTE, 1).unwrap().inline(true);
        assert!(fa.refusal().unwrap().contains("inline"));
        let write = SendWr::write(1, LOCAL, REMOTE).unwrap().inline(true);
        assert_eq!(write.refusal(), None);
        assert_eq!(SendWr::send(1, LOCAL).inline(true).refusal(), None);
        // Fields are public: a hand-built atomic is checked at post time.
        let mut bad = SendWr::cmp_swap(1, LOCAL, REMOTE, 0, 1).unwrap();
        bad.local.length = 4;
        assert!(bad.refusal().unwrap().contains("8-byte local"));
        bad.local.length = 8;
        bad.op = Op::FetchAdd {
            remote_addr: 0x1003,
            rkey: 1,
            add: 1,
        };
        assert!(bad.refusal().unwrap().contains("aligned"));
    }

    #[test]
    fn fill_maps_each_op_to_its_opcode_and_fields() {
        use ffi::ibv_wr_opcode as code;
        let signaled = ffi::ibv_send_flags::IBV_SEND_SIGNALED.0;
        let inline = ffi::ibv_send_flags::IBV_SEND_INLINE.0;

        let (w, sge) = filled(&SendWr::write(7, LOCAL, REMOTE).unwrap());
        assert_eq!(w.opcode, code::IBV_WR_RDMA_WRITE);
        assert_eq!((w.wr_id, w.num_sge, w.send_flags), (7, 1, signaled));
        assert_eq!(
            (sge.addr, sge.length, sge.lkey),
            (LOCAL.addr, 8, LOCAL.lkey)
        );
        // SAFETY: `fill` wrote the `rdma` member for a write.
        let rdma = unsafe { w.wr.rdma };
        assert_eq!((rdma.remote_addr, rdma.rkey), (REMOTE.addr, REMOTE.rkey));
        assert!(w.next.is_null());

        let wr = SendWr::write_with_imm(1, LOCAL, REMOTE, 0x0102_0304)
            .unwrap()
            .signaled(false)
            .inline(true);
        let (w, _) = filled(&wr);
        assert_eq!(w.opcode, code::IBV_WR_RDMA_WRITE_WITH_IMM);
        assert_eq!(w.send_flags, inline);
        // SAFETY: the union's only member that `fill` writes is `imm_data`.
        let imm = unsafe { w.imm_data_invalidated_rkey_union.imm_data };
        assert_eq!(imm, 0x0102_0304u32.to_be(), "immediate in network order");

        let (w, _) = filled(&SendWr::read(2, LOCAL, REMOTE).unwrap());
        assert_eq!(w.opcode, code::IBV_WR_RDMA_READ);
        // SAFETY: `fill` wrote the `rdma` member for a read.
        let rdma = unsafe { w.wr.rdma };
        assert_eq!((rdma.remote_addr, rdma.rkey), (REMOTE.addr, REMOTE.rkey));

        let (w, _) = filled(&SendWr::send(3, LOCAL));
        assert_eq!(w.opcode, code::IBV_WR_SEND);
        let (w, _) = filled(&SendWr::send_with_imm(3, LOCAL, 9));
        assert_eq!(w.opcode, code::IBV_WR_SEND_WITH_IMM);
        // SAFETY: the union's only member that `fill` writes is `imm_data`.
        let imm = unsafe { w.imm_data_invalidated_rkey_union.imm_data };
        assert_eq!(imm, 9u32.to_be());

        let (w, _) = filled(&SendWr::fetch_add(4, LOCAL, REMOTE, 0xabc).unwrap());
        assert_eq!(w.opcode, code::IBV_WR_ATOMIC_FETCH_AND_ADD);
        // SAFETY: `fill` wrote the `atomic` member for an atomic.
        let a = unsafe { w.wr.atomic };
        assert_eq!(
            (a.remote_addr, a.compare_add, a.swap, a.rkey),
            (REMOTE.addr, 0xabc, 0, REMOTE.rkey)
        );

        let (w, _) = filled(&SendWr::cmp_swap(5, LOCAL, REMOTE, 11, 22).unwrap());
        assert_eq!(w.opcode, code::IBV_WR_ATOMIC_CMP_AND_SWP);
        // SAFETY: as above.
        let a = unsafe { w.wr.atomic };
        assert_eq!(
            (a.remote_addr, a.compare_add, a.swap, a.rkey),
            (REMOTE.addr, 11, 22, REMOTE.rkey)
        );

        let empty = LocalSge { length: 0, ..LOCAL };
        let (w, _) = filled(&SendWr::send(6, empty));
        assert_eq!(w.num_sge, 0, "an empty payload names no memory");
    }

    #[test]
    fn send_batch_tracks_what_posting_checks() {
        let mut b = SendBatch::with_capacity(3);
        assert!(b.is_empty());
        b.push(&SendWr::write(1, LOCAL, REMOTE).unwrap().inline(true))
            .unwrap();
        let big = LocalSge {
            length: 4096,
            ..LOCAL
        };
        b.push(&SendWr::write(2, big, REMOTE).unwrap()).unwrap();
        assert_eq!(b.max_inline, 8, "only inline requests count");
        assert!(!b.writes_local && b.refusal.is_none());
        b.push(&SendWr::read(3, LOCAL, REMOTE).unwrap().inline(true))
            .unwrap();
        assert!(b.writes_local);
        assert!(b.refusal.unwrap().contains("inline"));
        assert_eq!(
            b.push(&SendWr::send(4, LOCAL)),
            Err(BatchFull { capacity: 3 })
        );
        assert_eq!(b.len(), 3);
        let storage = b.wrs.as_ptr();
        b.clear();
        assert!(b.is_empty() && b.refusal.is_none() && !b.writes_local);
        assert_eq!(b.max_inline, 0);
        for i in 0..3 {
            b.push(&SendWr::send(i, LOCAL)).unwrap();
        }
        assert_eq!(b.wrs.as_ptr(), storage, "refilling reallocated");
    }

    #[test]
    fn recv_batch_is_bounded_and_marks_memory_it_names() {
        let mut b = RecvBatch::with_capacity(2);
        b.push(1, LocalSge { length: 0, ..LOCAL }).unwrap();
        assert!(!b.writes_local);
        assert_eq!(b.wrs[0].num_sge, 0);
        b.push(2, LOCAL).unwrap();
        assert!(b.writes_local);
        assert_eq!(b.push(3, LOCAL), Err(BatchFull { capacity: 2 }));
        assert_eq!(
            BatchFull { capacity: 2 }.to_string(),
            "work request batch is full (2 work requests)"
        );
        b.clear();
        assert!(b.is_empty() && !b.writes_local);
        assert_eq!(b.capacity(), 2);
    }
}
