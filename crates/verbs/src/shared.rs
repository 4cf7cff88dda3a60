//! Byte access to memory that the device and peers may write at any time.
//!
//! A registered buffer is written by the device (receives, RDMA READ
//! responses, atomic results) and, with remote access, by peers, whenever
//! the work executes: outside Rust's view and with no synchronisation Rust
//! knows about. A `&[u8]` or `&mut [u8]` over such memory would promise the
//! compiler that the bytes do not change (or that only Rust changes them),
//! so [`SharedBytes`] never creates one. Every access is an atomic
//! operation on an aligned 8-byte word ([`AtomicU64`]), through a raw
//! pointer:
//!
//! - Atomic accesses to memory that changes underneath (as shared memory
//!   between processes does) are the pattern Rust supports for this: the
//!   compiler may not assume the value stays put, and concurrent Rust
//!   threads cannot race.
//! - *One* access size only. Rust's memory model (C++20's) makes racing
//!   atomic accesses of different sizes undefined when one of them writes,
//!   so byte and word operations are all done on whole `u64` words: a byte
//!   load loads its word; a byte store is a compare-and-swap loop on its
//!   word, so a concurrent store to a neighbouring byte of the same word,
//!   by another thread or by the device, is not lost.
//! - Bulk copies store whole words where the range covers them and merge
//!   (compare-and-swap) the partial words at the edges.

use std::ops::Range;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// Bytes in the access unit.
pub(crate) const WORD: usize = 8;

/// `len` bytes starting at an 8-byte aligned address, accessed only through
/// atomic operations on the `u64` words that overlap them.
///
/// Invariant (established by [`SharedBytes::new`]'s contract): `base` is
/// 8-byte aligned and valid for reads and writes of
/// `len.div_ceil(WORD) * WORD` bytes for as long as `self` exists, and Rust
/// code accesses those bytes only through `SharedBytes` (no reference to
/// them exists, no non-atomic access happens) while it does.
pub(crate) struct SharedBytes {
    base: NonNull<u8>,
    len: usize,
    words: usize,
}

// SAFETY: the value is an address and a length; it touches the bytes only
// with atomic operations (the type's invariant), which cannot data-race
// whichever threads make them, and it holds no thread-bound state.
unsafe impl Send for SharedBytes {}
// SAFETY: as for `Send`: every `&self` method accesses the bytes through
// `u64` atomics only, so concurrent calls from several threads are
// race-free.
unsafe impl Sync for SharedBytes {}

impl SharedBytes {
    /// # Safety
    /// `base` must be 8-byte aligned and valid for reads and writes of
    /// `len.div_ceil(8) * 8` bytes until the returned value is dropped, and
    /// until then Rust code must access those bytes only through the
    /// returned value (no references to them, no non-atomic accesses).
    pub(crate) unsafe fn new(base: NonNull<u8>, len: usize) -> Self {
        debug_assert_eq!(base.as_ptr() as usize % WORD, 0, "unaligned base");
        Self {
            base,
            len,
            words: len.div_ceil(WORD),
        }
    }

    /// The start address.
    pub(crate) fn base(&self) -> NonNull<u8> {
        self.base
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The `index`th word.
    ///
    /// # Panics
    /// When `index` is not below the number of words.
    #[inline]
    fn word(&self, index: usize) -> &AtomicU64 {
        assert!(index < self.words, "word {index} beyond {}", self.words);
        // SAFETY: `index < words` (asserted), so the word lies inside the
        // `words * WORD` bytes the invariant makes valid for reads and
        // writes while `self` (and so the returned borrow) lives; it is
        // 8-byte aligned because `base` is and `index * WORD` is a multiple
        // of 8 (`AtomicU64` has alignment 8 on every target that has it).
        // Every Rust access to these bytes goes through this function as a
        // `u64` atomic (the invariant), so no non-atomic or mixed-size
        // access can conflict with one made through the returned reference.
        unsafe { AtomicU64::from_ptr(self.base.as_ptr().add(index * WORD).cast::<u64>()) }
    }

    /// Loads byte `offset`.
    ///
    /// # Panics
    /// When `offset >= len`.
    #[inline]
    pub(crate) fn load(&self, offset: usize, order: Ordering) -> u8 {
        self.check_byte(offset);
        self.word(offset / WORD).load(order).to_ne_bytes()[offset % WORD]
    }

    /// Stores byte `offset`, leaving the other bytes of its word as they
    /// are at the moment of the store (compare-and-swap on the word).
    /// `order` is the ordering of the successful exchange (`Relaxed` or
    /// `Release`).
    ///
    /// # Panics
    /// When `offset >= len`.
    #[inline]
    pub(crate) fn store(&self, offset: usize, value: u8, order: Ordering) {
        self.check_byte(offset);
        let k = offset % WORD;
        self.merge(offset / WORD, order, |bytes| bytes[k] = value);
    }

    /// Changes word `index` by `edit` atomically: a compare-and-swap loop,
    /// so bytes `edit` leaves alone keep whatever was last stored there.
    #[inline]
    fn merge(&self, index: usize, order: Ordering, mut edit: impl FnMut(&mut [u8; WORD])) {
        let word = self.word(index);
        let mut current = word.load(Ordering::Relaxed);
        loop {
            let mut bytes = current.to_ne_bytes();
            edit(&mut bytes);
            match word.compare_exchange_weak(
                current,
                u64::from_ne_bytes(bytes),
                order,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => current = now,
            }
        }
    }

    #[inline]
    fn check_byte(&self, offset: usize) {
        assert!(
            offset < self.len,
            "offset {offset} beyond memory region of {} bytes",
            self.len
        );
    }

    fn check_range(&self, range: &Range<usize>) -> Result<()> {
        if range.start > range.end || range.end > self.len {
            return Err(Error::InvalidArgument(format!(
                "byte range {}..{} outside memory region of {} bytes",
                range.start, range.end, self.len
            )));
        }
        Ok(())
    }

    fn range_at(&self, offset: usize, len: usize) -> Result<Range<usize>> {
        let end = offset.checked_add(len).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "byte range of {len} bytes at offset {offset} overflows"
            ))
        })?;
        let range = offset..end;
        self.check_range(&range)?;
        Ok(range)
    }

    /// Visits `range` word by word: `f(word index, bytes lo..hi of that
    /// word, position of byte lo in the range)`.
    #[inline]
    fn for_each_word(&self, range: Range<usize>, mut f: impl FnMut(usize, usize, usize, usize)) {
        let mut offset = range.start;
        while offset < range.end {
            let index = offset / WORD;
            let lo = offset % WORD;
            let hi = (range.end - index * WORD).min(WORD);
            f(index, lo, hi, offset - range.start);
            offset += hi - lo;
        }
    }

    /// Sets every byte of `range` to `byte`.
    pub(crate) fn fill(&self, range: Range<usize>, byte: u8) -> Result<()> {
        self.check_range(&range)?;
        let whole = u64::from_ne_bytes([byte; WORD]);
        self.for_each_word(range, |index, lo, hi, _| {
            if lo == 0 && hi == WORD {
                self.word(index).store(whole, Ordering::Relaxed);
            } else {
                self.merge(index, Ordering::Relaxed, |b| b[lo..hi].fill(byte));
            }
        });
        Ok(())
    }

    /// Copies `src` to `offset..offset + src.len()`.
    pub(crate) fn write_bytes(&self, offset: usize, src: &[u8]) -> Result<()> {
        let range = self.range_at(offset, src.len())?;
        self.for_each_word(range, |index, lo, hi, at| {
            let part = &src[at..at + (hi - lo)];
            if lo == 0 && hi == WORD {
                let mut bytes = [0; WORD];
                bytes.copy_from_slice(part);
                self.word(index)
                    .store(u64::from_ne_bytes(bytes), Ordering::Relaxed);
            } else {
                self.merge(index, Ordering::Relaxed, |b| {
                    b[lo..hi].copy_from_slice(part)
                });
            }
        });
        Ok(())
    }

    /// Copies `offset..offset + dst.len()` into `dst`.
    pub(crate) fn read_into(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        let range = self.range_at(offset, dst.len())?;
        self.for_each_word(range, |index, lo, hi, at| {
            let bytes = self.word(index).load(Ordering::Relaxed).to_ne_bytes();
            dst[at..at + (hi - lo)].copy_from_slice(&bytes[lo..hi]);
        });
        Ok(())
    }

    fn check_u64(&self, offset: usize) -> Result<usize> {
        if offset & (WORD - 1) != 0 {
            return Err(Error::InvalidArgument(format!(
                "offset {offset} of a u64 is not 8-byte aligned"
            )));
        }
        if offset.checked_add(WORD).is_none_or(|end| end > self.len) {
            return Err(Error::InvalidArgument(format!(
                "u64 at offset {offset} beyond memory region of {} bytes",
                self.len
            )));
        }
        Ok(offset / WORD)
    }

    /// The native-endian `u64` at 8-byte aligned `offset`, one atomic load.
    pub(crate) fn read_u64(&self, offset: usize) -> Result<u64> {
        let index = self.check_u64(offset)?;
        Ok(self.word(index).load(Ordering::Relaxed))
    }

    /// Stores a native-endian `u64` at 8-byte aligned `offset`, one atomic
    /// store.
    pub(crate) fn write_u64(&self, offset: usize, value: u64) -> Result<()> {
        let index = self.check_u64(offset)?;
        self.word(index).store(value, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Backing storage for a `SharedBytes` in tests: 8-byte aligned words,
    /// touched by nothing but the `SharedBytes` made from it.
    struct Backing {
        words: Box<[AtomicU64]>,
    }

    impl Backing {
        fn new(words: usize) -> Self {
            Self {
                words: (0..words).map(|_| AtomicU64::new(0)).collect(),
            }
        }

        fn shared(&self, len: usize) -> SharedBytes {
            assert!(len.div_ceil(WORD) <= self.words.len());
            let base = NonNull::new(self.words.as_ptr().cast::<u8>().cast_mut()).unwrap();
            // SAFETY: `words` is 8-byte aligned (`AtomicU64`), holds at
            // least `len.div_ceil(8)` words (asserted) and lives as long as
            // `self`, which every test keeps alive longer than the
            // `SharedBytes`; `AtomicU64` permits mutation through a shared
            // pointer, and the tests access it only through the returned
            // value, which uses `u64` atomics as well.
            unsafe { SharedBytes::new(base, len) }
        }
    }

    fn bytes(s: &SharedBytes) -> Vec<u8> {
        let mut v = vec![0; s.len()];
        s.read_into(0, &mut v).unwrap();
        v
    }

    #[test]
    fn single_bytes_round_trip_and_leave_neighbours_alone() {
        let b = Backing::new(3);
        let s = b.shared(21);
        for i in 0..21 {
            s.store(i, i as u8 + 1, Ordering::Relaxed);
        }
        s.store(9, 0xee, Ordering::Release);
        for i in 0..21 {
            let want = if i == 9 { 0xee } else { i as u8 + 1 };
            assert_eq!(s.load(i, Ordering::Relaxed), want, "byte {i}");
            assert_eq!(s.load(i, Ordering::Acquire), want, "byte {i}");
        }
    }

    #[test]
    #[should_panic(expected = "offset 21 beyond memory region of 21 bytes")]
    fn byte_load_past_the_end_panics() {
        let b = Backing::new(3);
        b.shared(21).load(21, Ordering::Relaxed);
    }

    #[test]
    #[should_panic(expected = "offset 21 beyond memory region of 21 bytes")]
    fn byte_store_past_the_end_panics() {
        let b = Backing::new(3);
        b.shared(21).store(21, 1, Ordering::Relaxed);
    }

    #[test]
    fn write_bytes_and_read_into_at_every_alignment() {
        let b = Backing::new(8);
        let s = b.shared(61);
        for start in 0..20 {
            for len in 0..=(61 - start).min(30) {
                s.fill(0..61, 0x11).unwrap();
                let src: Vec<u8> = (0..len).map(|i| (i * 7 + start) as u8 | 0x80).collect();
                s.write_bytes(start, &src).unwrap();
                let all = bytes(&s);
                assert_eq!(&all[start..start + len], &src[..], "{start}+{len}");
                assert!(all[..start].iter().all(|&x| x == 0x11), "{start}+{len}");
                assert!(
                    all[start + len..].iter().all(|&x| x == 0x11),
                    "{start}+{len}"
                );
                let mut back = vec![0; len];
                s.read_into(start, &mut back).unwrap();
                assert_eq!(back, src);
            }
        }
    }

    #[test]
    fn fill_covers_exactly_its_range() {
        let b = Backing::new(4);
        let s = b.shared(27);
        s.fill(3..22, 0xab).unwrap();
        let all = bytes(&s);
        for (i, &x) in all.iter().enumerate() {
            assert_eq!(x, if (3..22).contains(&i) { 0xab } else { 0 }, "byte {i}");
        }
        s.fill(5..5, 0xff).unwrap();
        assert_eq!(bytes(&s), all, "an empty fill changed something");
    }

    #[test]
    fn ranges_outside_the_region_are_refused_and_change_nothing() {
        let b = Backing::new(2);
        let s = b.shared(13);
        s.fill(0..13, 7).unwrap();
        let refused = |r: Result<()>| {
            let e = r.unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
            e.to_string()
        };
        let msg = refused(s.fill(10..14, 0));
        assert!(msg.contains("10..14") && msg.contains("13 bytes"), "{msg}");
        #[allow(clippy::reversed_empty_ranges)]
        refused(s.fill(5..4, 0));
        refused(s.write_bytes(12, &[1, 2]));
        refused(s.write_bytes(14, &[]));
        let msg = refused(s.write_bytes(usize::MAX, &[1]));
        assert!(msg.contains("overflows"), "{msg}");
        refused(s.read_into(11, &mut [0; 3]));
        refused(s.read_into(usize::MAX, &mut [0; 2]));
        assert!(bytes(&s).iter().all(|&x| x == 7), "a refused call wrote");
        // The end itself is a valid empty range.
        s.write_bytes(13, &[]).unwrap();
        s.read_into(13, &mut []).unwrap();
        s.fill(13..13, 0).unwrap();
    }

    #[test]
    fn u64_access_is_aligned_and_bounded() {
        let b = Backing::new(3);
        let s = b.shared(20);
        s.write_u64(8, 0x0102_0304_0506_0708).unwrap();
        assert_eq!(s.read_u64(8).unwrap(), 0x0102_0304_0506_0708);
        let mut raw = [0; 8];
        s.read_into(8, &mut raw).unwrap();
        assert_eq!(u64::from_ne_bytes(raw), 0x0102_0304_0506_0708);
        assert!(s.read_u64(4).unwrap_err().to_string().contains("aligned"));
        assert!(
            s.write_u64(3, 1)
                .unwrap_err()
                .to_string()
                .contains("aligned")
        );
        // Bytes 16..20 exist, but a u64 at 16 would reach 24.
        assert!(s.read_u64(16).unwrap_err().to_string().contains("beyond"));
        assert!(s.write_u64(16, 1).is_err());
        assert!(s.read_u64(usize::MAX - 7).is_err());
        assert_eq!(s.read_u64(0).unwrap(), 0);
    }

    #[test]
    fn byte_stores_from_two_threads_to_one_word_lose_nothing() {
        let b = Backing::new(1);
        let s = b.shared(8);
        std::thread::scope(|scope| {
            for half in 0..2 {
                let s = &s;
                scope.spawn(move || {
                    for round in 0..20_000u32 {
                        for k in half * 4..half * 4 + 4 {
                            s.store(k, (round as u8).wrapping_add(k as u8), Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        let last = 19_999u32 as u8;
        for k in 0..8 {
            assert_eq!(s.load(k, Ordering::Relaxed), last.wrapping_add(k as u8));
        }
    }
}
