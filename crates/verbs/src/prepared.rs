//! Send work requests prepared once and posted many times
//! ([`PreparedSends`]): perftest's way of posting in its bandwidth loop,
//! where `ctx->wr[]` is built once per size and each post only moves the
//! addresses (`increase_loc_addr`/`increase_rem_addr`) and the signal flag
//! (perftest `src/perftest_resources.c`, `run_iter_bw`).
//!
//! Building a [`crate::SendWr`] and pushing it into a [`crate::SendBatch`]
//! fills a whole `ibv_send_wr` and re-checks the request for every
//! message; a [`PreparedSends`] is checked once, when it is made, and
//! afterwards only a message's offset in its window (one compare) is.

use std::fmt;

use rdma_sys as ffi;

use crate::error::{Error, Result};
use crate::wr::{Op, SendWr};

/// A fixed list of send work requests of one kind (one operation, length,
/// inline choice and peer), posted together with one `ibv_post_send` (or
/// one `ibv_wr_start`/`ibv_wr_complete`), and re-posted with only each
/// request's id, offset and signal flag changed ([`PreparedSends::set`]).
///
/// Every request names `length` bytes at some offset `o` of a local
/// *window* `[base, base + window)`, and, for RDMA WRITE, READ and the
/// atomics, the same offset `o` of the remote range starting at the
/// template's remote address. The window is fixed when the list is made;
/// [`crate::BoundQueuePair::post_prepared`] checks it against the bound
/// region once per post, and [`PreparedSends::set`] keeps each request
/// inside it.
pub struct PreparedSends {
    // Invariant: `wrs.len() == sges.len() == count >= 1`; `wrs[i]` is the
    // template as `SendWr::fill` built it, with `wr_id`, the signal flag
    // and the remote address changed by `set`, and for compare-and-swap
    // the operands by `set_compare_swap`; `sges[i]` is the template's SGE
    // with `addr = base + o` for an `o <= max_offset`. The `sg_list` and
    // `next` pointers are set at post time only, as in `SendBatch`.
    pub(crate) wrs: Box<[ffi::ibv_send_wr]>,
    pub(crate) sges: Box<[ffi::ibv_sge]>,
    /// Start of the local window.
    base: u64,
    /// Bytes of the local window.
    window: u64,
    lkey: u32,
    /// The largest offset a request may have: `window - length`.
    max_offset: u64,
    /// Remote address at offset 0 (WRITE, READ, atomics).
    remote: u64,
    /// Whether the requests name a remote address (all but SEND).
    has_remote: bool,
    /// The template's flags without `IBV_SEND_SIGNALED`.
    flags: u32,
    kind: Kind,
    /// Inline payload length, 0 when not inline.
    pub(crate) max_inline: u32,
    /// Whether the device writes the local ranges (READ, atomics).
    pub(crate) writes_local: bool,
}

/// What a list's requests are, as far as moving them goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// WRITE, READ or SEND.
    Transfer,
    /// Fetch-and-add: offsets 8-byte aligned, operands fixed.
    FetchAdd,
    /// Compare-and-swap: offsets 8-byte aligned, operands per request.
    CmpSwap,
}

// SAFETY: the raw pointers inside the stored `ibv_send_wr`s are null or
// point into the list's own heap storage (set at post time), which moves
// with it; nothing refers to thread-local state.
unsafe impl Send for PreparedSends {}

impl fmt::Debug for PreparedSends {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreparedSends")
            .field("len", &self.wrs.len())
            .field("base", &format_args!("{:#x}", self.base))
            .field("window", &self.window)
            .field("kind", &self.kind)
            .finish()
    }
}

impl PreparedSends {
    /// `count` copies of `template`, each free to move within the local
    /// window of `window` bytes starting at `template.local.addr` (and the
    /// same offsets of the remote range at the template's remote address).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `count` is 0, the window is shorter
    /// than the template's length or wraps the address space, or the
    /// template is one posting refuses (an inline READ or atomic, an
    /// atomic not of 8 bytes or at an unaligned remote address).
    pub fn new(template: &SendWr, count: usize, window: u64) -> Result<Self> {
        if count == 0 {
            return Err(Error::InvalidArgument(
                "a prepared list needs at least one work request".into(),
            ));
        }
        if let Some(why) = template.refusal() {
            return Err(Error::InvalidArgument(why.into()));
        }
        let length = u64::from(template.local.length);
        if window < length || template.local.addr.checked_add(window).is_none() {
            return Err(Error::InvalidArgument(format!(
                "a window of {window} bytes at {:#x} cannot hold {length}-byte requests",
                template.local.addr
            )));
        }
        let (kind, remote) = match template.op {
            Op::Send { .. } => (Kind::Transfer, None),
            Op::Write { remote_addr, .. } | Op::Read { remote_addr, .. } => {
                (Kind::Transfer, Some(remote_addr))
            }
            Op::FetchAdd { remote_addr, .. } => (Kind::FetchAdd, Some(remote_addr)),
            Op::CmpSwap { remote_addr, .. } => (Kind::CmpSwap, Some(remote_addr)),
        };
        let (wrs, sges): (Vec<_>, Vec<_>) = (0..count).map(|_| template.raw_parts()).unzip();
        let flags = wrs[0].send_flags & !ffi::ibv_send_flags::IBV_SEND_SIGNALED.0;
        Ok(Self {
            wrs: wrs.into_boxed_slice(),
            sges: sges.into_boxed_slice(),
            base: template.local.addr,
            window,
            lkey: template.local.lkey,
            max_offset: window - length,
            remote: remote.unwrap_or(0),
            has_remote: remote.is_some(),
            flags,
            kind,
            max_inline: if template.inline {
                template.local.length
            } else {
                0
            },
            writes_local: template.op.writes_local() && length > 0,
        })
    }

    /// Number of work requests in the list (all are posted each time).
    #[allow(clippy::len_without_is_empty)] // never empty
    pub fn len(&self) -> usize {
        self.wrs.len()
    }

    /// The local window: start address, bytes and lkey.
    pub(crate) fn window(&self) -> (u64, u64, u32) {
        (self.base, self.window, self.lkey)
    }

    /// Sets request `k`: its id, its offset in the local window (and in
    /// the remote range), and whether it asks for a completion.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], leaving the request as it was, when `k`
    /// is not below [`PreparedSends::len`], the request would reach past
    /// the window, or an atomic's offset is not 8-byte aligned.
    #[inline]
    pub fn set(&mut self, k: usize, wr_id: u64, offset: u64, signaled: bool) -> Result<()> {
        if offset > self.max_offset {
            return Err(self.outside_window(offset));
        }
        if self.kind != Kind::Transfer && offset & 7 != 0 {
            return Err(unaligned_atomic(offset));
        }
        let (Some(wr), Some(sge)) = (self.wrs.get_mut(k), self.sges.get_mut(k)) else {
            return Err(no_such_request(k, self.wrs.len()));
        };
        wr.wr_id = wr_id;
        wr.send_flags = if signaled {
            self.flags | ffi::ibv_send_flags::IBV_SEND_SIGNALED.0
        } else {
            self.flags
        };
        sge.addr = self.base + offset;
        if self.has_remote {
            // Both union members a list's requests use (`rdma` for WRITE
            // and READ, `atomic` for the atomics) begin with the remote
            // address (`remote_addr_shares_its_place`): one store serves
            // every kind, leaving the rkey and atomic operands as they are.
            wr.wr.rdma.remote_addr = self.remote.wrapping_add(offset);
        }
        Ok(())
    }

    /// Sets the operands of request `k` of a compare-and-swap list.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the list is not of
    /// compare-and-swaps or `k` is not below [`PreparedSends::len`].
    #[inline]
    pub fn set_compare_swap(&mut self, k: usize, compare: u64, swap: u64) -> Result<()> {
        if self.kind != Kind::CmpSwap {
            return Err(Error::InvalidArgument(
                "compare-and-swap operands set on a list of other requests".into(),
            ));
        }
        let n = self.wrs.len();
        let wr = self.wrs.get_mut(k).ok_or_else(|| no_such_request(k, n))?;
        wr.wr.atomic.compare_add = compare;
        wr.wr.atomic.swap = swap;
        Ok(())
    }

    #[cold]
    fn outside_window(&self, offset: u64) -> Error {
        Error::InvalidArgument(format!(
            "offset {offset} of a {}-byte request reaches past its prepared window of {} bytes",
            self.window - self.max_offset,
            self.window
        ))
    }
}

#[cold]
fn unaligned_atomic(offset: u64) -> Error {
    Error::InvalidArgument(format!(
        "an atomic's offset must be 8-byte aligned, not {offset}"
    ))
}

#[cold]
fn no_such_request(k: usize, len: usize) -> Error {
    Error::InvalidArgument(format!("work request {k} of a prepared list of {len}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mr::{LocalSge, RemoteMemory};

    const LOCAL: LocalSge = LocalSge {
        addr: 0x10_0000,
        length: 64,
        lkey: 0x11,
    };
    const REMOTE: RemoteMemory = RemoteMemory {
        addr: 0x20_0000,
        len: 4096,
        rkey: 0x22,
    };

    fn message(e: Error) -> String {
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        e.to_string()
    }

    /// What `SendWr::raw_parts` makes of the same request: a prepared
    /// request must be that, byte for byte in every field the device reads.
    fn filled(wr: &SendWr) -> (ffi::ibv_send_wr, ffi::ibv_sge) {
        wr.raw_parts()
    }

    fn same(a: &ffi::ibv_send_wr, b: &ffi::ibv_send_wr) {
        assert_eq!(a.wr_id, b.wr_id);
        assert_eq!(a.opcode, b.opcode);
        assert_eq!(a.send_flags, b.send_flags);
        assert_eq!(a.num_sge, b.num_sge);
        // SAFETY: test-only reads of the integer-only union members.
        unsafe {
            assert_eq!(
                a.imm_data_invalidated_rkey_union.imm_data,
                b.imm_data_invalidated_rkey_union.imm_data
            );
            assert_eq!(a.wr.atomic.remote_addr, b.wr.atomic.remote_addr);
            assert_eq!(a.wr.atomic.rkey, b.wr.atomic.rkey);
            if matches!(
                a.opcode,
                ffi::ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP
                    | ffi::ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD
            ) {
                assert_eq!(a.wr.atomic.compare_add, b.wr.atomic.compare_add);
                assert_eq!(a.wr.atomic.swap, b.wr.atomic.swap);
            }
        }
    }

    fn at(offset: u64) -> (LocalSge, RemoteMemory) {
        (
            LocalSge {
                addr: LOCAL.addr + offset,
                ..LOCAL
            },
            RemoteMemory {
                addr: REMOTE.addr + offset,
                ..REMOTE
            },
        )
    }

    #[test]
    fn a_set_request_is_the_request_built_at_that_offset() {
        let template = SendWr::write(0, LOCAL, REMOTE).unwrap().inline(true);
        let mut p = PreparedSends::new(&template, 4, 4096).unwrap();
        assert_eq!(p.len(), 4);
        assert_eq!(p.max_inline, 64);
        assert!(!p.writes_local);
        for (k, off) in [(0, 0), (1, 64), (2, 4032), (3, 128)] {
            p.set(k, 100 + k as u64, off, k % 2 == 1).unwrap();
            let (l, r) = at(off);
            let want = SendWr::write(100 + k as u64, l, r)
                .unwrap()
                .inline(true)
                .signaled(k % 2 == 1);
            let (wr, sge) = filled(&want);
            same(&p.wrs[k], &wr);
            assert_eq!(
                (p.sges[k].addr, p.sges[k].length, p.sges[k].lkey),
                (sge.addr, sge.length, sge.lkey)
            );
        }
    }

    #[test]
    fn reads_sends_and_atomics_are_set_like_their_built_requests() {
        let cases = [
            (
                SendWr::read(0, LOCAL, REMOTE).unwrap(),
                (|off| {
                    let (l, r) = at(off);
                    SendWr::read(7, l, r).unwrap()
                }) as fn(u64) -> SendWr,
                true,
            ),
            (
                SendWr::send_with_imm(0, LOCAL, 9),
                |off| SendWr::send_with_imm(7, at(off).0, 9),
                false,
            ),
        ];
        for (template, built, writes) in cases {
            let mut p = PreparedSends::new(&template, 1, 4096).unwrap();
            assert_eq!(p.writes_local, writes);
            p.set(0, 7, 192, true).unwrap();
            let (wr, sge) = filled(&built(192));
            same(&p.wrs[0], &wr);
            assert_eq!(p.sges[0].addr, sge.addr);
        }
        let eight = LocalSge { length: 8, ..LOCAL };
        let fa = SendWr::fetch_add(0, eight, REMOTE, 1).unwrap();
        let mut p = PreparedSends::new(&fa, 2, 4096).unwrap();
        assert!(p.writes_local);
        p.set(1, 3, 64, false).unwrap();
        let (l, r) = at(64);
        let l = LocalSge { length: 8, ..l };
        same(
            &p.wrs[1],
            &filled(&SendWr::fetch_add(3, l, r, 1).unwrap().signaled(false)).0,
        );
        let cs = SendWr::cmp_swap(0, eight, REMOTE, 0, 1).unwrap();
        let mut p = PreparedSends::new(&cs, 1, 4096).unwrap();
        p.set_compare_swap(0, 5, 6).unwrap();
        p.set(0, 4, 128, true).unwrap();
        let (l, r) = at(128);
        let l = LocalSge { length: 8, ..l };
        same(
            &p.wrs[0],
            &filled(&SendWr::cmp_swap(4, l, r, 5, 6).unwrap()).0,
        );
    }

    #[test]
    fn remote_addr_shares_its_place() {
        // `set` stores the remote address through `wr.rdma` for atomics
        // too: both members must begin with it.
        use std::mem::offset_of;
        assert_eq!(offset_of!(ffi::rdma_t, remote_addr), 0);
        assert_eq!(offset_of!(ffi::atomic_t, remote_addr), 0);
    }

    #[test]
    fn a_request_never_leaves_its_window() {
        let template = SendWr::write(0, LOCAL, REMOTE).unwrap();
        let mut p = PreparedSends::new(&template, 2, 4096).unwrap();
        p.set(0, 1, 4032, true).unwrap();
        let e = message(p.set(0, 2, 4033, true).unwrap_err());
        assert!(e.contains("offset 4033") && e.contains("4096 bytes"), "{e}");
        // Left as it was.
        assert_eq!((p.wrs[0].wr_id, p.sges[0].addr), (1, LOCAL.addr + 4032));
        assert!(p.set(0, 2, u64::MAX, true).is_err());
        let e = message(p.set(2, 2, 0, true).unwrap_err());
        assert!(e.contains("work request 2 of a prepared list of 2"), "{e}");
    }

    #[test]
    fn what_posting_refuses_is_refused_when_prepared() {
        let w = SendWr::write(0, LOCAL, REMOTE).unwrap();
        assert!(message(PreparedSends::new(&w, 0, 4096).unwrap_err()).contains("at least one"));
        let e = message(PreparedSends::new(&w, 1, 63).unwrap_err());
        assert!(e.contains("window of 63 bytes"), "{e}");
        let top = SendWr {
            local: LocalSge {
                addr: u64::MAX - 8,
                ..LOCAL
            },
            ..w
        };
        assert!(PreparedSends::new(&top, 1, 4096).is_err());
        let inline_read = SendWr::read(0, LOCAL, REMOTE).unwrap().inline(true);
        let e = message(PreparedSends::new(&inline_read, 1, 4096).unwrap_err());
        assert!(e.contains("inline is refused"), "{e}");
        let eight = LocalSge { length: 8, ..LOCAL };
        let fa = SendWr::fetch_add(0, eight, REMOTE, 1).unwrap();
        let mut p = PreparedSends::new(&fa, 1, 4096).unwrap();
        let e = message(p.set(0, 1, 12, true).unwrap_err());
        assert!(e.contains("8-byte aligned, not 12"), "{e}");
        assert!(message(p.set_compare_swap(0, 1, 2).unwrap_err()).contains("compare-and-swap"));
    }
}
