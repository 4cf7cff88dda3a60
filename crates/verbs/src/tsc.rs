//! The CPU's time-stamp counter, for timestamps cheaper than a clock read
//! (perftest's `get_cycles`). Not an RDMA verb: it lives here because this
//! is the one crate allowed `unsafe`, and reading the counter is an
//! intrinsic the standard library marks `unsafe`.
//!
//! The counter counts at a rate this module does not know; callers
//! calibrate it against a clock (see `rdmaperf`'s `--clock tsc`). Whether
//! it is usable as a clock at all (constant rate, synchronised across
//! CPUs: the `constant_tsc` and `nonstop_tsc` flags on Linux) is the
//! caller's judgement.

/// Whether this build can read a time-stamp counter (x86_64 only).
pub const AVAILABLE: bool = cfg!(target_arch = "x86_64");

/// Reads the time-stamp counter (`rdtsc`).
///
/// Not serialising: the read may be reordered with nearby instructions by
/// a few nanoseconds, as perftest's `get_cycles` is.
#[cfg(target_arch = "x86_64")]
#[inline]
pub fn read() -> u64 {
    // SAFETY: `rdtsc` exists on every x86_64 CPU, reads a register into
    // the return value and touches no memory. (A kernel can make it fault
    // with PR_SET_TSC; that is a signal, not undefined behaviour.)
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Reads the time-stamp counter; `None` on architectures without one here.
#[inline]
pub fn try_read() -> Option<u64> {
    #[cfg(target_arch = "x86_64")]
    {
        Some(read())
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn counter_moves_forward() {
        let a = super::read();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = super::read();
        assert!(b > a, "TSC did not advance: {a} then {b}");
    }
}
