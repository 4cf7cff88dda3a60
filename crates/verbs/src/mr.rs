//! Memory regions over buffers this crate owns.

use std::alloc::Layout;
use std::fmt;
use std::ops::{BitOr, BitOrAssign, Range};
use std::ptr::NonNull;
use std::sync::atomic::Ordering;

use rdma_sys as ffi;

use crate::error::{Error, Result, check_ptr};
use crate::pd::ProtectionDomain;
use crate::shared::{SharedBytes, WORD};

/// Access rights of a memory region (`ibv_access_flags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AccessFlags(u32);

impl AccessFlags {
    /// Local reads only.
    pub const NONE: Self = Self(0);
    /// The local HCA may write: needed for receives, for RDMA READ and
    /// atomic results landing here, and for remote writes and atomics.
    pub const LOCAL_WRITE: Self = Self(ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0);
    /// Peers may RDMA-WRITE into the region.
    pub const REMOTE_WRITE: Self = Self(ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0);
    /// Peers may RDMA-READ from the region.
    pub const REMOTE_READ: Self = Self(ffi::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0);
    /// Peers may run RDMA atomics (fetch-and-add, compare-and-swap) on the
    /// region. Requires [`AccessFlags::LOCAL_WRITE`].
    pub const REMOTE_ATOMIC: Self = Self(ffi::ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC.0);

    /// The raw bit mask.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Whether every flag of `other` is set in `self`.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// The flags of both (`|`, usable in constants).
    #[must_use]
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }
}

impl BitOr for AccessFlags {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        self.union(rhs)
    }
}

impl BitOrAssign for AccessFlags {
    fn bitor_assign(&mut self, rhs: Self) {
        self.0 |= rhs.0;
    }
}

/// Memory on a peer: address, length and rkey of a remote region (or a part
/// of one), as exchanged out of band; the target of RDMA WRITE, READ and
/// atomics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteMemory {
    /// Virtual address on the peer.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Remote key.
    pub rkey: u32,
}

impl RemoteMemory {
    /// The part `range` of this remote memory, bounds-checked.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `range` is not inside `0..len`.
    pub fn slice(&self, range: Range<u64>) -> Result<Self> {
        if range.start > range.end || range.end > self.len {
            return Err(Error::InvalidArgument(format!(
                "remote range {}..{} outside remote region of {} bytes",
                range.start, range.end, self.len
            )));
        }
        let addr = self.addr.checked_add(range.start).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "remote address {:#x} + {} overflows",
                self.addr, range.start
            ))
        })?;
        Ok(Self {
            addr,
            len: range.end - range.start,
            rkey: self.rkey,
        })
    }
}

/// A registered buffer that this region owns: page-aligned, zeroed at
/// allocation, deregistered and freed on drop.
///
/// This is the zero-copy buffer: the device reads and writes it in place.
/// Keeps its [`ProtectionDomain`] (and so the device) alive.
///
/// # Memory shared with the device
/// The bytes change outside Rust's view: a receive, an RDMA READ or an
/// atomic posted from this region makes the device write it when the work
/// executes, and with [`AccessFlags::REMOTE_WRITE`] or
/// [`AccessFlags::REMOTE_ATOMIC`] a peer can write it at any time. So no
/// method hands out a reference (`&[u8]`, `&mut [u8]`) to the bytes, which
/// would promise Rust that they do not change, or that only the holder
/// changes them. Every access goes through `&self` instead, as atomic
/// operations on the aligned 8-byte words that hold the bytes, through raw
/// pointers:
///
/// - [`read_volatile`](Self::read_volatile) /
///   [`write_volatile`](Self::write_volatile): one byte, relaxed;
///   [`load_acquire`](Self::load_acquire) /
///   [`store_release`](Self::store_release): one byte, ordered (the flag of
///   a ping-pong: data read after an acquire load of the flag is not read
///   before it, also on weakly ordered CPUs such as aarch64);
/// - [`fill`](Self::fill), [`write_bytes`](Self::write_bytes),
///   [`read_into`](Self::read_into): ranges, copied word by word;
/// - [`read_u64`](Self::read_u64) / [`write_u64`](Self::write_u64): one
///   aligned word, one atomic access (the target of RDMA atomics).
///
/// One access size is used throughout, because racing atomic accesses of
/// different sizes are undefined in Rust's memory model: a byte store is a
/// compare-and-swap on its word, so a concurrent write of a neighbouring
/// byte, by another thread or by the device, is not lost. Concurrent Rust
/// threads therefore cannot race on the bytes, and the region can be
/// shared (`Arc`) between a [`crate::BoundQueuePair`] that posts from it
/// and code that fills or checks it.
///
/// What a value read *means* is the protocol's business: a copy taken
/// while the device or a peer is writing may hold a mix of old and new
/// words. Read a received payload after its completion has been polled,
/// the peer's writes after it has said (out of band) that they are done,
/// or the data of a flag protocol after an acquire load has seen the flag.
pub struct MemoryRegion {
    // Drop order: `Drop` deregisters `mr`, then frees the buffer; `pd` (a
    // field) drops last, so the domain outlives the registration.
    mr: NonNull<ffi::ibv_mr>,
    bytes: SharedBytes,
    backing: Backing,
    access: AccessFlags,
    pd: ProtectionDomain,
}

/// Where a region's buffer comes from, and so how it is freed.
#[derive(Debug, Clone, Copy)]
enum Backing {
    /// The global allocator, with this layout.
    Heap(Layout),
    /// An anonymous `MAP_HUGETLB` mapping of this many bytes.
    HugePages(usize),
}

/// Bytes of one huge page as mapped by [`MemoryRegion`]'s huge-page
/// backing (the default huge page size on x86-64 and arm64 with 4 KiB
/// base pages; perftest rounds its huge-page buffers to the same).
pub const HUGE_PAGE: usize = 2 << 20;

// SAFETY: the region owns its buffer and its registration, neither tied to
// the thread that made them: libibverbs allows `ibv_dereg_mr` from any
// thread, and the buffer is ordinary memory (heap or an anonymous mapping)
// freed as it was obtained.
unsafe impl Send for MemoryRegion {}
// SAFETY: every `&self` method either reads fields fixed at registration
// (length, access, and `lkey`/`rkey` of the `ibv_mr`, which libibverbs
// never changes afterwards) or accesses the buffer through `SharedBytes`,
// whose accesses are all `u64` atomics (no reference into the buffer is
// ever created), so concurrent calls from several threads cannot
// data-race.
unsafe impl Sync for MemoryRegion {}

impl fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len())
            .field("lkey", &format_args!("{:#x}", self.lkey()))
            .field("rkey", &format_args!("{:#x}", self.rkey()))
            .field("access", &self.access)
            .finish()
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

/// Refuses access combinations the verbs specification forbids (providers
/// answer `EINVAL`): remote writes and remote atomics need local write.
fn check_access(access: AccessFlags) -> Result<()> {
    if access.contains(AccessFlags::LOCAL_WRITE) {
        return Ok(());
    }
    for (flag, name) in [
        (AccessFlags::REMOTE_WRITE, "REMOTE_WRITE"),
        (AccessFlags::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
    ] {
        if access.contains(flag) {
            return Err(Error::InvalidArgument(format!(
                "{name} access requires LOCAL_WRITE"
            )));
        }
    }
    Ok(())
}

/// The layout of a region's buffer: `len` rounded up to whole pages (with
/// checked arithmetic), page-aligned. `page` is a power of two ≥ 8 on
/// every system, so the size is a whole number of 8-byte words.
fn buffer_layout(len: usize, page: usize) -> Result<Layout> {
    if len == 0 {
        return Err(Error::InvalidArgument(
            "memory region length must be at least 1 byte".into(),
        ));
    }
    let page = page.max(WORD);
    let size = len.checked_next_multiple_of(page).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "memory region of {len} bytes is too large: rounding it up to whole \
             {page}-byte pages overflows"
        ))
    })?;
    Layout::from_size_align(size, page).map_err(|_| {
        Error::InvalidArgument(format!(
            "memory region of {len} bytes is too large (or page size {page} is not a power of two)"
        ))
    })
}

impl MemoryRegion {
    pub(crate) fn allocate(pd: ProtectionDomain, len: usize, access: AccessFlags) -> Result<Self> {
        check_access(access)?;
        let layout = buffer_layout(len, page_size())?;
        // SAFETY: `buffer_layout` never returns a zero size (`len ≥ 1`).
        let buf = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) }).ok_or_else(|| {
            Error::InvalidArgument(format!("cannot allocate {len} bytes for a memory region"))
        })?;
        Self::register(pd, buf, len, access, Backing::Heap(layout))
    }

    /// As [`MemoryRegion::allocate`], on huge pages: an anonymous
    /// `MAP_HUGETLB` mapping rounded up to [`HUGE_PAGE`]s (zeroed by the
    /// kernel). There is no fallback to ordinary pages, as in perftest's
    /// `--use_hugepages`.
    pub(crate) fn allocate_huge(
        pd: ProtectionDomain,
        len: usize,
        access: AccessFlags,
    ) -> Result<Self> {
        check_access(access)?;
        buffer_layout(len, page_size())?;
        let mapped = len.checked_next_multiple_of(HUGE_PAGE).ok_or_else(|| {
            Error::InvalidArgument(format!("memory region of {len} bytes is too large"))
        })?;
        // SAFETY: a fresh anonymous private mapping: no address hint, no
        // file; the kernel checks the length and flags.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            return Err(Error::InvalidArgument(format!(
                "cannot allocate {mapped} bytes of {} MiB huge pages for a memory region ({e}); \
                 reserve them first (/proc/sys/vm/nr_hugepages)",
                HUGE_PAGE >> 20
            )));
        }
        let buf = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| Error::InvalidArgument("mmap returned a null mapping".into()))?;
        Self::register(pd, buf, len, access, Backing::HugePages(mapped))
    }

    /// Registers `len` bytes at `buf` (from `backing`, which it then owns).
    fn register(
        pd: ProtectionDomain,
        buf: NonNull<u8>,
        len: usize,
        access: AccessFlags,
        backing: Backing,
    ) -> Result<Self> {
        // SAFETY: valid PD; `buf` points to ≥ `len` bytes (the layout's
        // size or the mapping's length) we own and keep alive until after
        // `ibv_dereg_mr` in `Drop`.
        let mr = unsafe {
            ffi::ibv_reg_mr(
                pd.as_raw(),
                buf.as_ptr().cast(),
                len,
                access.bits() as libc::c_int,
            )
        };
        match check_ptr("ibv_reg_mr", mr) {
            Ok(mr) => Ok(Self {
                mr,
                // SAFETY: `buf` is aligned to the page size (≥ 8: heap
                // layouts are page-aligned, mappings start on a huge page)
                // and valid for reads and writes of the layout's size or the
                // mapping's length, a multiple of the page size and so
                // ≥ `len.div_ceil(8) * 8`, until `Drop` frees it after the
                // `SharedBytes` is last used. This type never creates a
                // reference into the buffer nor accesses it other than
                // through the `SharedBytes`.
                bytes: unsafe { SharedBytes::new(buf, len) },
                backing,
                access,
                pd,
            }),
            Err(e) => {
                // SAFETY: obtained by the caller from `backing`, not
                // registered, not shared.
                unsafe { backing.free(buf) };
                Err(e)
            }
        }
    }

    /// Length in bytes (as registered).
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Always false: regions have at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Start address, as the device sees it.
    pub fn addr(&self) -> u64 {
        self.bytes.base().as_ptr() as u64
    }

    /// Local key, for work requests that read or write this region.
    pub fn lkey(&self) -> u32 {
        // SAFETY: `mr` is a valid registration until `Drop`; libibverbs
        // writes `lkey` at registration only.
        unsafe { self.mr.as_ref().lkey }
    }

    /// Remote key, for peers.
    pub fn rkey(&self) -> u32 {
        // SAFETY: as for `lkey`.
        unsafe { self.mr.as_ref().rkey }
    }

    /// The access flags it was registered with.
    pub fn access(&self) -> AccessFlags {
        self.access
    }

    /// The protection domain it belongs to.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// What a peer needs to write into (or read, or run atomics on) this
    /// region.
    pub fn remote(&self) -> RemoteMemory {
        RemoteMemory {
            addr: self.addr(),
            len: self.len() as u64,
            rkey: self.rkey(),
        }
    }

    /// Loads byte `offset` (a relaxed atomic load, which the compiler may
    /// not cache: for polling a byte a peer RDMA-writes). The name is
    /// historical; see the type's note on memory shared with the device.
    ///
    /// # Panics
    /// When `offset >= len`.
    #[inline]
    pub fn read_volatile(&self, offset: usize) -> u8 {
        self.bytes.load(offset, Ordering::Relaxed)
    }

    /// Loads byte `offset` with acquire ordering: for the polled flag of a
    /// ping-pong, so that data read after the flag is seen is not read
    /// before it (which weakly ordered CPUs such as aarch64 may do for a
    /// relaxed load).
    ///
    /// # Panics
    /// When `offset >= len`.
    #[inline]
    pub fn load_acquire(&self, offset: usize) -> u8 {
        self.bytes.load(offset, Ordering::Acquire)
    }

    /// Stores byte `offset` (relaxed; a compare-and-swap on the byte's
    /// 8-byte word, so concurrent writes of its neighbours are kept).
    ///
    /// # Panics
    /// When `offset >= len`.
    #[inline]
    pub fn write_volatile(&self, offset: usize, value: u8) {
        self.bytes.store(offset, value, Ordering::Relaxed);
    }

    /// Stores byte `offset` with release ordering: earlier stores to the
    /// region are visible to a thread that sees this one with
    /// [`load_acquire`](Self::load_acquire).
    ///
    /// # Panics
    /// When `offset >= len`.
    #[inline]
    pub fn store_release(&self, offset: usize, value: u8) {
        self.bytes.store(offset, value, Ordering::Release);
    }

    /// Sets every byte of `range` to `byte`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `range` is not inside the region
    /// (nothing is written then).
    pub fn fill(&self, range: Range<usize>, byte: u8) -> Result<()> {
        self.bytes.fill(range, byte)
    }

    /// Copies `src` into the region at `offset`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `offset..offset + src.len()` is not
    /// inside the region (nothing is written then).
    pub fn write_bytes(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.bytes.write_bytes(offset, src)
    }

    /// Copies the region's bytes at `offset` into `dst`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `offset..offset + dst.len()` is not
    /// inside the region.
    pub fn read_into(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.bytes.read_into(offset, dst)
    }

    /// The native-endian `u64` at `offset`, read with one atomic load: the
    /// target or the result of an RDMA atomic.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `offset` is not a multiple of 8 or
    /// the word does not fit in the region.
    pub fn read_u64(&self, offset: usize) -> Result<u64> {
        self.bytes.read_u64(offset)
    }

    /// Stores a native-endian `u64` at `offset` with one atomic store.
    ///
    /// # Errors
    /// As [`read_u64`](Self::read_u64).
    pub fn write_u64(&self, offset: usize, value: u64) -> Result<()> {
        self.bytes.write_u64(offset, value)
    }

    /// A scatter/gather entry for `range` of this region, bounds-checked.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `range` is outside the region or
    /// longer than 4 GiB − 1.
    pub fn sge(&self, range: Range<usize>) -> Result<LocalSge> {
        if range.start > range.end || range.end > self.len() {
            return Err(Error::InvalidArgument(format!(
                "local range {}..{} outside memory region of {} bytes",
                range.start,
                range.end,
                self.len()
            )));
        }
        let length = u32::try_from(range.end - range.start).map_err(|_| {
            Error::InvalidArgument("a single scatter/gather entry is at most 4 GiB".into())
        })?;
        Ok(LocalSge {
            addr: self.addr() + range.start as u64,
            length,
            lkey: self.lkey(),
        })
    }

    /// The raw `ibv_mr`; valid as long as `self` is.
    pub fn as_raw(&self) -> *mut ffi::ibv_mr {
        self.mr.as_ptr()
    }
}

impl Backing {
    /// Frees `buf`.
    ///
    /// # Safety
    /// `buf` came from this backing (the global allocator with this layout,
    /// or `mmap` with this length), is not registered, and is not accessed
    /// afterwards.
    unsafe fn free(self, buf: NonNull<u8>) {
        match self {
            // SAFETY: the caller's contract: allocated with `layout`.
            Self::Heap(layout) => unsafe { std::alloc::dealloc(buf.as_ptr(), layout) },
            Self::HugePages(len) => {
                // SAFETY: the caller's contract: our mapping of `len` bytes.
                let rc = unsafe { libc::munmap(buf.as_ptr().cast(), len) };
                if rc != 0 {
                    crate::drop_failed("munmap", rc);
                }
            }
        }
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: `mr` is our registration; deregistered once. A work
        // request still in flight against it completes with an error on the
        // device side, never touching freed memory, because the device loses
        // access at deregistration.
        let rc = unsafe { ffi::ibv_dereg_mr(self.mr.as_ptr()) };
        if rc == 0 {
            // SAFETY: obtained from `self.backing`; no longer registered,
            // so the device cannot access it; `&mut self` means no
            // `SharedBytes` access is in progress, and none follows (the
            // field is never used again).
            unsafe { self.backing.free(self.bytes.base()) };
        } else {
            // Leak the buffer rather than free memory the device may still
            // write into.
            crate::drop_failed("ibv_dereg_mr", rc);
        }
    }
}

/// A local scatter/gather entry: a bounds-checked range of a
/// [`MemoryRegion`] with its lkey. Plain data; posting it is the unsafe
/// step (see [`crate::QueuePair::post_send`]). The default is all zero (an
/// empty entry naming no memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LocalSge {
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the region.
    pub lkey: u32,
}

impl LocalSge {
    pub(crate) fn to_raw(self) -> ffi::ibv_sge {
        ffi::ibv_sge {
            addr: self.addr,
            length: self.length,
            lkey: self.lkey,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_write_and_remote_atomic_need_local_write() {
        let a = AccessFlags::REMOTE_ATOMIC;
        let e = check_access(a).unwrap_err().to_string();
        assert!(
            e.contains("REMOTE_ATOMIC access requires LOCAL_WRITE"),
            "{e}"
        );
        let e = check_access(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ).unwrap_err();
        assert!(e.to_string().contains("REMOTE_WRITE"), "{e}");
        check_access(AccessFlags::LOCAL_WRITE | a | AccessFlags::REMOTE_WRITE).unwrap();
        check_access(AccessFlags::REMOTE_READ).unwrap();
        check_access(AccessFlags::NONE).unwrap();
    }

    #[test]
    fn buffer_length_rounds_up_to_whole_pages() {
        let l = buffer_layout(1, 4096).unwrap();
        assert_eq!((l.size(), l.align()), (4096, 4096));
        assert_eq!(buffer_layout(4096, 4096).unwrap().size(), 4096);
        assert_eq!(buffer_layout(4097, 4096).unwrap().size(), 8192);
        assert_eq!(buffer_layout(3, 65536).unwrap().size(), 65536);
        // A page below the word size still gives whole words.
        assert_eq!(buffer_layout(9, 1).unwrap().size(), 16);
    }

    #[test]
    fn buffer_length_overflow_is_refused_not_wrapped() {
        for len in [usize::MAX, usize::MAX - 4094, usize::MAX / 2 + 2] {
            let e = buffer_layout(len, 4096).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
            assert!(e.to_string().contains("too large"), "{len}: {e}");
        }
        let e = buffer_layout(0, 4096).unwrap_err().to_string();
        assert!(e.contains("at least 1 byte"), "{e}");
        let e = buffer_layout(10, 3000).unwrap_err().to_string();
        assert!(e.contains("power of two"), "{e}");
    }

    #[test]
    fn remote_slices_are_bounds_checked() {
        let r = RemoteMemory {
            addr: 0x1000,
            len: 64,
            rkey: 7,
        };
        assert_eq!(
            r.slice(8..16).unwrap(),
            RemoteMemory {
                addr: 0x1008,
                len: 8,
                rkey: 7
            }
        );
        assert!(r.slice(60..65).is_err());
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = r.slice(9..8);
        assert!(reversed.is_err());
    }
}
