//! The operations the bandwidth loop posts ([`BwOp`]): RDMA WRITE, with
//! or without immediate, READ, SEND, fetch-and-add, compare-and-swap.

use engine::bench::config::ring_slots;
use verbs::Op;

/// An operation the bandwidth loop posts.
pub trait BwOp: Copy + Send + Sync {
    /// Its name in errors, e.g. `RDMA READ`.
    const NAME: &'static str;
    /// Whether its payload may be sent inline (not for reads and
    /// atomics, whose local memory the device writes).
    const INLINE: bool;
    /// Message `index` of a QP: the operation on the peer's exposed area
    /// at `remote_addr`.
    fn op(self, remote_addr: u64, rkey: u32, index: u64) -> Op;
    /// The compare and swap operands of message `index`, for an operation
    /// whose operands change from message to message.
    #[inline]
    fn operands(self, _index: u64) -> Option<(u64, u64)> {
        None
    }
}

/// RDMA WRITE from our working area into the peer's exposed area (with
/// immediate: each also consumes one of the peer's receives).
#[derive(Debug, Clone, Copy)]
pub struct WriteOp {
    /// `--write_with_imm`.
    pub imm: bool,
}

impl BwOp for WriteOp {
    const NAME: &'static str = "RDMA WRITE";
    const INLINE: bool = true;
    #[inline]
    fn op(self, remote_addr: u64, rkey: u32, _index: u64) -> Op {
        Op::Write {
            remote_addr,
            rkey,
            // perftest's immediate is 0.
            imm: self.imm.then_some(0),
        }
    }
}

/// RDMA READ from the peer's exposed area into our working area.
#[derive(Debug, Clone, Copy)]
pub struct ReadOp;

impl BwOp for ReadOp {
    const NAME: &'static str = "RDMA READ";
    const INLINE: bool = false;
    #[inline]
    fn op(self, remote_addr: u64, rkey: u32, _index: u64) -> Op {
        Op::Read { remote_addr, rkey }
    }
}

/// SEND from our working area into the peer's next receive.
#[derive(Debug, Clone, Copy)]
pub struct SendOp;

impl BwOp for SendOp {
    const NAME: &'static str = "SEND";
    const INLINE: bool = true;
    #[inline]
    fn op(self, _remote_addr: u64, _rkey: u32, _index: u64) -> Op {
        Op::Send { imm: None }
    }
}

/// Atomic fetch-and-add of 1 (perftest's `ATOMIC_ADD_VALUE`) on the
/// peer's 8-byte word; the old value lands in our working area.
#[derive(Debug, Clone, Copy)]
pub struct FetchAddOp;

impl BwOp for FetchAddOp {
    const NAME: &'static str = "atomic fetch-and-add";
    const INLINE: bool = false;
    #[inline]
    fn op(self, remote_addr: u64, rkey: u32, _index: u64) -> Op {
        Op::FetchAdd {
            remote_addr,
            rkey,
            add: 1,
        }
    }
}

/// Atomic compare-and-swap as a chain: message `i` of a QP targets word
/// `i % W` of the peer's ring of `W` words ([`atomic_words`]), which the
/// `i / W` operations before it on that word have counted up to `i / W`:
/// it swaps `i / W` for `i / W + 1`. Each word ends holding the number of
/// operations on it, as with fetch-and-add, and a compare that failed
/// would show as a word left short (perftest compares 0 and swaps 0,
/// which checks nothing).
#[derive(Debug, Clone, Copy)]
pub struct CmpSwapOp;

impl BwOp for CmpSwapOp {
    const NAME: &'static str = "atomic compare-and-swap";
    const INLINE: bool = false;
    #[inline]
    fn op(self, remote_addr: u64, rkey: u32, index: u64) -> Op {
        let (compare, swap) = chain_operands(index);
        Op::CmpSwap {
            remote_addr,
            rkey,
            compare,
            swap,
        }
    }
    #[inline]
    fn operands(self, index: u64) -> Option<(u64, u64)> {
        Some(chain_operands(index))
    }
}

/// Compare-and-swap message `index`'s operands in [`CmpSwapOp`]'s chain.
#[inline]
fn chain_operands(index: u64) -> (u64, u64) {
    let compare = index / atomic_words();
    (compare, compare + 1)
}

/// The 8-byte words of a QP's exposed area an atomic test cycles through
/// (perftest's: one per cache line of a page).
#[inline]
pub fn atomic_words() -> u64 {
    ring_slots(ATOMIC_SIZE)
}

/// The size of an atomic operation.
pub const ATOMIC_SIZE: u64 = 8;
