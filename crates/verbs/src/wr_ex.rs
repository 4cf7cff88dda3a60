//! The extended post path: send work requests through the `ibv_wr_*`
//! builders of an `ibv_qp_ex`, as perftest posts by default.
//!
//! A request is translated from the very `ibv_send_wr` and `ibv_sge` that
//! [`crate::SendWr`] fills for `ibv_post_send` ([`ExWr::from_classic`]), so
//! both paths post the same thing: opcode, `wr_id`, send flags (signaled,
//! inline), scatter/gather entry, remote address and rkey, immediate data
//! (already in network order) and atomic operands. A whole list is posted
//! inside one `ibv_wr_start` / `ibv_wr_complete` critical section.

use std::ptr::NonNull;

use rdma_sys as ffi;

/// The `ibv_wr_*` builder of one request, with its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Builder {
    /// `ibv_wr_rdma_write(qp, rkey, remote_addr)`.
    RdmaWrite { rkey: u32, remote_addr: u64 },
    /// `ibv_wr_rdma_write_imm(qp, rkey, remote_addr, imm_data)`; `imm_be`
    /// in network order.
    RdmaWriteImm {
        rkey: u32,
        remote_addr: u64,
        imm_be: u32,
    },
    /// `ibv_wr_rdma_read(qp, rkey, remote_addr)`.
    RdmaRead { rkey: u32, remote_addr: u64 },
    /// `ibv_wr_send(qp)`.
    Send,
    /// `ibv_wr_send_imm(qp, imm_data)`; `imm_be` in network order.
    SendImm { imm_be: u32 },
    /// `ibv_wr_atomic_fetch_add(qp, rkey, remote_addr, add)`.
    FetchAdd {
        rkey: u32,
        remote_addr: u64,
        add: u64,
    },
    /// `ibv_wr_atomic_cmp_swp(qp, rkey, remote_addr, compare, swap)`.
    CmpSwap {
        rkey: u32,
        remote_addr: u64,
        compare: u64,
        swap: u64,
    },
}

/// The data setter of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Data {
    /// `ibv_wr_set_sge(qp, lkey, addr, length)`.
    Sge { lkey: u32, addr: u64, length: u32 },
    /// `ibv_wr_set_inline_data(qp, addr, length)`: copied at the call.
    Inline { addr: u64, length: u32 },
    /// `ibv_wr_set_sge_list(qp, 0, NULL)`: no payload (the classic
    /// request's `num_sge` of 0).
    Empty,
}

/// One request as the extended path posts it: `qpx->wr_id`,
/// `qpx->wr_flags`, a builder and a data setter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExWr {
    pub(crate) wr_id: u64,
    /// The classic request's `send_flags`, unchanged (`IBV_SEND_INLINE`
    /// included, as perftest passes it; providers that take inline from
    /// the setter ignore it).
    pub(crate) wr_flags: u32,
    pub(crate) builder: Builder,
    pub(crate) data: Data,
}

impl ExWr {
    /// The extended form of a classic request as [`crate::SendWr`]'s `fill`
    /// builds it (`wr` and its one `sge`; `wr.sg_list` and `wr.next` are
    /// ignored). `None` for an opcode this crate never builds.
    #[inline]
    pub(crate) fn from_classic(wr: &ffi::ibv_send_wr, sge: &ffi::ibv_sge) -> Option<Self> {
        use ffi::ibv_wr_opcode as code;
        // `fill` writes `imm_data` for every request, `wr.rdma` for the
        // RDMA opcodes and `wr.atomic` for the atomic ones; each union read
        // below reads only the member its opcode's request was given.
        // SAFETY: `imm_data` is written for every request (a plain `u32`).
        let imm_be = unsafe { wr.imm_data_invalidated_rkey_union.imm_data };
        let builder = match wr.opcode {
            code::IBV_WR_RDMA_WRITE | code::IBV_WR_RDMA_WRITE_WITH_IMM | code::IBV_WR_RDMA_READ => {
                // SAFETY: see above: an RDMA opcode, so `wr.rdma` was written.
                let ffi::rdma_t { remote_addr, rkey } = unsafe { wr.wr.rdma };
                match wr.opcode {
                    code::IBV_WR_RDMA_WRITE => Builder::RdmaWrite { rkey, remote_addr },
                    code::IBV_WR_RDMA_WRITE_WITH_IMM => Builder::RdmaWriteImm {
                        rkey,
                        remote_addr,
                        imm_be,
                    },
                    _ => Builder::RdmaRead { rkey, remote_addr },
                }
            }
            code::IBV_WR_SEND => Builder::Send,
            code::IBV_WR_SEND_WITH_IMM => Builder::SendImm { imm_be },
            code::IBV_WR_ATOMIC_FETCH_AND_ADD | code::IBV_WR_ATOMIC_CMP_AND_SWP => {
                // SAFETY: see above: an atomic opcode, so `wr.atomic` was
                // written.
                let a = unsafe { wr.wr.atomic };
                if wr.opcode == code::IBV_WR_ATOMIC_FETCH_AND_ADD {
                    Builder::FetchAdd {
                        rkey: a.rkey,
                        remote_addr: a.remote_addr,
                        add: a.compare_add,
                    }
                } else {
                    Builder::CmpSwap {
                        rkey: a.rkey,
                        remote_addr: a.remote_addr,
                        compare: a.compare_add,
                        swap: a.swap,
                    }
                }
            }
            _ => return None,
        };
        let inline = wr.send_flags & ffi::ibv_send_flags::IBV_SEND_INLINE.0 != 0;
        let data = match (wr.num_sge, inline) {
            (0, _) => Data::Empty,
            (_, true) => Data::Inline {
                addr: sge.addr,
                length: sge.length,
            },
            (_, false) => Data::Sge {
                lkey: sge.lkey,
                addr: sge.addr,
                length: sge.length,
            },
        };
        Some(Self {
            wr_id: wr.wr_id,
            wr_flags: wr.send_flags,
            builder,
            data,
        })
    }
}

/// Whether the provider filled every `ibv_qp_ex` member the extended path
/// calls (the `ibv_wr_*` inlines call them unchecked).
///
/// # Safety
/// `qpx` must be the live `ibv_qp_ex` of a queue pair (from
/// `ibv_qp_to_qp_ex`).
pub(crate) unsafe fn has_builders(qpx: NonNull<ffi::ibv_qp_ex>) -> bool {
    // SAFETY: the caller passes a live `ibv_qp_ex`; its members are plain
    // values written by the provider at creation; only read here.
    let q = unsafe { qpx.as_ref() };
    q.wr_start.is_some()
        && q.wr_complete.is_some()
        && q.wr_abort.is_some()
        && q.wr_rdma_write.is_some()
        && q.wr_rdma_write_imm.is_some()
        && q.wr_rdma_read.is_some()
        && q.wr_send.is_some()
        && q.wr_send_imm.is_some()
        && q.wr_atomic_fetch_add.is_some()
        && q.wr_atomic_cmp_swp.is_some()
        && q.wr_set_sge.is_some()
        && q.wr_set_sge_list.is_some()
        && q.wr_set_inline_data.is_some()
}

/// Posts `wrs[i]` with `sges[i]`, for every `i`, inside one
/// `ibv_wr_start` / `ibv_wr_complete`. Returns `ibv_wr_complete`'s result:
/// 0, or an errno, in which case nothing of the list was posted (the
/// provider aborts the whole posting). An untranslatable request (none is
/// ever built) aborts the list and returns `EINVAL`.
///
/// # Safety
/// - `qpx` is the live `ibv_qp_ex` of a queue pair created with the
///   send ops of every request's opcode, and [`has_builders`] returned
///   true for it.
/// - Every request passed the checks [`crate::QueuePair::post_send`]
///   makes before posting (its `refusal`, the inline limit).
/// - The caller upholds [`crate::QueuePair::post_send`]'s contract on the
///   memory each SGE names.
#[inline]
pub(crate) unsafe fn post_list(
    qpx: NonNull<ffi::ibv_qp_ex>,
    wrs: &[ffi::ibv_send_wr],
    sges: &[ffi::ibv_sge],
) -> i32 {
    debug_assert_eq!(wrs.len(), sges.len(), "work request batch out of step");
    let q = qpx.as_ptr();
    // SAFETY: a live `ibv_qp_ex` whose `wr_start` is set (caller). The
    // provider locks the QP from here to `ibv_wr_complete`/`ibv_wr_abort`
    // (ibv_wr_post(3), "Concurrency"; we create no QP with a thread
    // domain), so the writes to `wr_id`/`wr_flags` below, although made
    // through `&self` of a `Sync` queue pair, are ordered with other
    // threads' by that lock.
    unsafe { ffi::ibv_wr_start(q) };
    for (wr, sge) in wrs.iter().zip(sges) {
        let Some(x) = ExWr::from_classic(wr, sge) else {
            // SAFETY: inside the critical section `ibv_wr_start` opened;
            // `wr_abort` is set (caller); it discards the requests built so
            // far and leaves the section.
            unsafe { ffi::ibv_wr_abort(q) };
            return libc::EINVAL;
        };
        // SAFETY: inside the critical section, on a live `ibv_qp_ex` whose
        // builders and setters used here are all set (caller, via
        // `has_builders`), for an opcode the QP was created for (caller).
        // The builder and setter copy their arguments into the send queue
        // entry before returning (the inline setter copies the payload, as
        // `IBV_SEND_INLINE` does); the device later reads or writes only
        // what the SGE names, which passed `post_send`'s checks and whose
        // memory the caller keeps valid as for `ibv_post_send`.
        unsafe {
            (*q).wr_id = x.wr_id;
            (*q).wr_flags = x.wr_flags;
            match x.builder {
                Builder::RdmaWrite { rkey, remote_addr } => {
                    ffi::ibv_wr_rdma_write(q, rkey, remote_addr);
                }
                Builder::RdmaWriteImm {
                    rkey,
                    remote_addr,
                    imm_be,
                } => ffi::ibv_wr_rdma_write_imm(q, rkey, remote_addr, imm_be),
                Builder::RdmaRead { rkey, remote_addr } => {
                    ffi::ibv_wr_rdma_read(q, rkey, remote_addr);
                }
                Builder::Send => ffi::ibv_wr_send(q),
                Builder::SendImm { imm_be } => ffi::ibv_wr_send_imm(q, imm_be),
                Builder::FetchAdd {
                    rkey,
                    remote_addr,
                    add,
                } => ffi::ibv_wr_atomic_fetch_add(q, rkey, remote_addr, add),
                Builder::CmpSwap {
                    rkey,
                    remote_addr,
                    compare,
                    swap,
                } => ffi::ibv_wr_atomic_cmp_swp(q, rkey, remote_addr, compare, swap),
            }
            match x.data {
                Data::Sge { lkey, addr, length } => ffi::ibv_wr_set_sge(q, lkey, addr, length),
                Data::Inline { addr, length } => {
                    ffi::ibv_wr_set_inline_data(q, addr as *mut libc::c_void, length as usize);
                }
                Data::Empty => ffi::ibv_wr_set_sge_list(q, 0, std::ptr::null()),
            }
        }
    }
    // SAFETY: closes the critical section opened above, on the same live
    // QP; `wr_complete` is set (caller).
    unsafe { ffi::ibv_wr_complete(q) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mr::{LocalSge, RemoteMemory};
    use crate::wr::{SendWr, zeroed_send_wr};

    const LOCAL: LocalSge = LocalSge {
        addr: 0x10_0000,
        length: 8,
        lkey: 0x11,
    };
    const REMOTE: RemoteMemory = RemoteMemory {
        addr: 0x20_0040,
        len: 4096,
        rkey: 0x22,
    };

    fn ex(wr: &SendWr) -> ExWr {
        let (raw, sge) = wr.raw_parts();
        ExWr::from_classic(&raw, &sge).expect("every SendWr translates")
    }

    const SIGNALED: u32 = ffi::ibv_send_flags::IBV_SEND_SIGNALED.0;
    const INLINE: u32 = ffi::ibv_send_flags::IBV_SEND_INLINE.0;
    const SGE: Data = Data::Sge {
        lkey: LOCAL.lkey,
        addr: LOCAL.addr,
        length: 8,
    };

    #[test]
    fn writes_translate_to_rdma_write_with_the_same_flags_and_sge() {
        assert_eq!(
            ex(&SendWr::write(7, LOCAL, REMOTE).unwrap()),
            ExWr {
                wr_id: 7,
                wr_flags: SIGNALED,
                builder: Builder::RdmaWrite {
                    rkey: 0x22,
                    remote_addr: 0x20_0040
                },
                data: SGE,
            }
        );
        let big = LocalSge {
            length: 4096,
            ..LOCAL
        };
        let x = ex(&SendWr::write(8, big, REMOTE)
            .unwrap()
            .signaled(false)
            .inline(true));
        assert_eq!((x.wr_id, x.wr_flags), (8, INLINE), "unsignaled, inline");
        assert_eq!(
            x.data,
            Data::Inline {
                addr: LOCAL.addr,
                length: 4096
            },
            "inline data comes from the setter"
        );
        let x = ex(&SendWr::write_with_imm(9, LOCAL, REMOTE, 0x0102_0304).unwrap());
        assert_eq!(
            x.builder,
            Builder::RdmaWriteImm {
                rkey: 0x22,
                remote_addr: 0x20_0040,
                imm_be: 0x0102_0304u32.to_be()
            },
            "immediate in network order, as ibv_post_send gets it"
        );
        assert_eq!((x.wr_flags, x.data), (SIGNALED, SGE));
    }

    #[test]
    fn read_send_and_atomics_translate_to_their_builders() {
        let x = ex(&SendWr::read(1, LOCAL, REMOTE).unwrap());
        assert_eq!(
            (x.builder, x.data, x.wr_flags),
            (
                Builder::RdmaRead {
                    rkey: 0x22,
                    remote_addr: 0x20_0040
                },
                SGE,
                SIGNALED
            )
        );
        let x = ex(&SendWr::send(2, LOCAL).inline(true));
        assert_eq!((x.builder, x.wr_flags), (Builder::Send, SIGNALED | INLINE));
        assert_eq!(
            x.data,
            Data::Inline {
                addr: LOCAL.addr,
                length: 8
            }
        );
        let x = ex(&SendWr::send_with_imm(3, LOCAL, 9));
        assert_eq!(
            x.builder,
            Builder::SendImm {
                imm_be: 9u32.to_be()
            }
        );
        let x = ex(&SendWr::fetch_add(4, LOCAL, REMOTE, 0xabc).unwrap());
        assert_eq!(
            (x.wr_id, x.builder, x.data),
            (
                4,
                Builder::FetchAdd {
                    rkey: 0x22,
                    remote_addr: 0x20_0040,
                    add: 0xabc
                },
                SGE
            )
        );
        let x = ex(&SendWr::cmp_swap(5, LOCAL, REMOTE, 11, 22).unwrap());
        assert_eq!(
            x.builder,
            Builder::CmpSwap {
                rkey: 0x22,
                remote_addr: 0x20_0040,
                compare: 11,
                swap: 22
            }
        );
    }

    #[test]
    fn an_empty_payload_sets_an_empty_sge_list() {
        let empty = LocalSge { length: 0, ..LOCAL };
        assert_eq!(ex(&SendWr::send(6, empty)).data, Data::Empty);
        assert_eq!(ex(&SendWr::send(6, empty).inline(true)).data, Data::Empty);
        let x = ex(&SendWr::write_with_imm(6, empty, REMOTE, 1).unwrap());
        assert_eq!(x.data, Data::Empty);
    }

    #[test]
    fn a_batch_translates_request_by_request() {
        let mut b = crate::SendBatch::with_capacity(3);
        b.push(&SendWr::write(1, LOCAL, REMOTE).unwrap().signaled(false))
            .unwrap();
        b.push(&SendWr::read(2, LOCAL, REMOTE).unwrap()).unwrap();
        b.push(&SendWr::send_with_imm(3, LOCAL, 5)).unwrap();
        let got: Vec<ExWr> = b
            .wrs
            .iter()
            .zip(&b.sges)
            .map(|(w, s)| ExWr::from_classic(w, s).unwrap())
            .collect();
        assert_eq!(got.iter().map(|x| x.wr_id).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(got[0].wr_flags, 0);
        assert!(matches!(got[1].builder, Builder::RdmaRead { .. }));
        assert_eq!(
            got[2].builder,
            Builder::SendImm {
                imm_be: 5u32.to_be()
            }
        );
    }

    #[test]
    fn an_opcode_this_crate_never_builds_does_not_translate() {
        let mut raw = zeroed_send_wr();
        raw.opcode = ffi::ibv_wr_opcode::IBV_WR_LOCAL_INV;
        let sge = LocalSge::default().to_raw();
        assert_eq!(ExWr::from_classic(&raw, &sge), None);
    }
}
