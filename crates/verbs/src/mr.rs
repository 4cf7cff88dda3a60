//! Memory regions over buffers this crate owns.

use std::alloc::Layout;
use std::fmt;
use std::ops::{BitOr, BitOrAssign, Range};
use std::ptr::NonNull;

use rdma_sys as ffi;

use crate::error::{Error, Result, check_ptr};
use crate::pd::ProtectionDomain;

/// Access rights of a memory region (`ibv_access_flags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AccessFlags(u32);

impl AccessFlags {
    /// Local reads only.
    pub const NONE: Self = Self(0);
    /// The local HCA may write (needed for receives and for any remote
    /// access that writes).
    pub const LOCAL_WRITE: Self = Self(ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0);
    /// Peers may RDMA-WRITE into the region.
    pub const REMOTE_WRITE: Self = Self(ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0);
    /// Peers may RDMA-READ from the region.
    pub const REMOTE_READ: Self = Self(ffi::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0);

    /// The raw bit mask.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// Whether every flag of `other` is set in `self`.
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for AccessFlags {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

impl BitOrAssign for AccessFlags {
    fn bitor_assign(&mut self, rhs: Self) {
        self.0 |= rhs.0;
    }
}

/// Where a peer may write: address, length and rkey of a remote region (or
/// a part of one), as exchanged out of band.
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
        Ok(Self {
            addr: self.addr + range.start,
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
/// With [`AccessFlags::REMOTE_WRITE`] a peer can change the bytes at any
/// time, outside Rust's view. Read them through [`MemoryRegion::as_slice`]
/// only once the peer has said (out of band, or by the flag protocol of a
/// test) that its writes are complete, and use
/// [`MemoryRegion::read_volatile`] to poll a byte a peer is about to write.
pub struct MemoryRegion {
    // Drop order: `Drop` deregisters `mr`, then frees `buf`; `pd` (a field)
    // drops last, so the domain outlives the registration.
    mr: NonNull<ffi::ibv_mr>,
    buf: NonNull<u8>,
    layout: Layout,
    len: usize,
    access: AccessFlags,
    pd: ProtectionDomain,
}

// SAFETY: the region owns its buffer and registration; libibverbs allows
// `ibv_dereg_mr` from any thread. Access to the bytes goes through `&self`
// (reads) and `&mut self` (writes) like any owned buffer.
unsafe impl Send for MemoryRegion {}
// SAFETY: shared references only read the buffer or the keys.
unsafe impl Sync for MemoryRegion {}

impl fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
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

impl MemoryRegion {
    pub(crate) fn allocate(pd: ProtectionDomain, len: usize, access: AccessFlags) -> Result<Self> {
        if len == 0 {
            return Err(Error::InvalidArgument(
                "memory region length must be at least 1 byte".into(),
            ));
        }
        if access.contains(AccessFlags::REMOTE_WRITE) && !access.contains(AccessFlags::LOCAL_WRITE)
        {
            // The verbs spec requires it and providers answer EINVAL.
            return Err(Error::InvalidArgument(
                "REMOTE_WRITE access requires LOCAL_WRITE".into(),
            ));
        }
        let page = page_size();
        let size = len.div_ceil(page) * page;
        let layout = Layout::from_size_align(size, page).map_err(|_| {
            Error::InvalidArgument(format!("memory region of {len} bytes is too large"))
        })?;
        // SAFETY: `layout` has a non-zero size.
        let buf = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) }).ok_or_else(|| {
            Error::InvalidArgument(format!("cannot allocate {len} bytes for a memory region"))
        })?;
        // SAFETY: valid PD; `buf` points to `size` ≥ `len` bytes we own and
        // keep alive until after `ibv_dereg_mr` in `Drop`.
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
                buf,
                layout,
                len,
                access,
                pd,
            }),
            Err(e) => {
                // SAFETY: allocated above with `layout`, not registered.
                unsafe { std::alloc::dealloc(buf.as_ptr(), layout) };
                Err(e)
            }
        }
    }

    /// Length in bytes (as registered).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: regions have at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Start address, as the device sees it.
    pub fn addr(&self) -> u64 {
        self.buf.as_ptr() as u64
    }

    /// Local key, for work requests that read or write this region.
    pub fn lkey(&self) -> u32 {
        // SAFETY: `mr` is a valid registration until `Drop`.
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

    /// What a peer needs to write into this region.
    pub fn remote(&self) -> RemoteMemory {
        RemoteMemory {
            addr: self.addr(),
            len: self.len as u64,
            rkey: self.rkey(),
        }
    }

    /// The bytes. See the type's note on memory shared with the device.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `buf` holds `len` initialised (zeroed) bytes owned by us.
        unsafe { std::slice::from_raw_parts(self.buf.as_ptr(), self.len) }
    }

    /// The bytes, for filling before a send.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as for `as_slice`, and `&mut self` excludes other Rust
        // access.
        unsafe { std::slice::from_raw_parts_mut(self.buf.as_ptr(), self.len) }
    }

    /// Reads one byte with a volatile load, for polling a byte a peer
    /// RDMA-writes (the compiler may not cache it).
    ///
    /// # Panics
    /// When `offset >= len`.
    #[inline]
    pub fn read_volatile(&self, offset: usize) -> u8 {
        assert!(
            offset < self.len,
            "offset {offset} beyond region of {} bytes",
            self.len
        );
        // SAFETY: in bounds (checked above) of a live allocation we own.
        unsafe { std::ptr::read_volatile(self.buf.as_ptr().add(offset)) }
    }

    /// Writes one byte with a volatile store.
    ///
    /// # Panics
    /// When `offset >= len`.
    #[inline]
    pub fn write_volatile(&mut self, offset: usize, value: u8) {
        assert!(
            offset < self.len,
            "offset {offset} beyond region of {} bytes",
            self.len
        );
        // SAFETY: in bounds of a live allocation we own; `&mut self`.
        unsafe { std::ptr::write_volatile(self.buf.as_ptr().add(offset), value) }
    }

    /// A scatter/gather entry for `range` of this region, bounds-checked.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `range` is outside the region or
    /// longer than 4 GiB − 1.
    pub fn sge(&self, range: Range<usize>) -> Result<LocalSge> {
        if range.start > range.end || range.end > self.len {
            return Err(Error::InvalidArgument(format!(
                "local range {}..{} outside memory region of {} bytes",
                range.start, range.end, self.len
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

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: `mr` is our registration; deregistered once. A work
        // request still in flight against it completes with an error on the
        // device side, never touching freed memory, because the device loses
        // access at deregistration.
        let rc = unsafe { ffi::ibv_dereg_mr(self.mr.as_ptr()) };
        if rc == 0 {
            // SAFETY: allocated in `allocate` with `self.layout`; no longer
            // registered, so the device cannot access it.
            unsafe { std::alloc::dealloc(self.buf.as_ptr(), self.layout) };
        } else {
            // Leak the buffer rather than free memory the device may still
            // write into.
            crate::drop_failed("ibv_dereg_mr", rc);
        }
    }
}

/// A local scatter/gather entry: a bounds-checked range of a
/// [`MemoryRegion`] with its lkey. Plain data; posting it is the unsafe
/// step (see [`crate::QueuePair::post_send`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
