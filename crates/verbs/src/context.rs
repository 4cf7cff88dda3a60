//! Devices, the device context, and their attributes (device, port, GID table).

use std::ffi::CStr;
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_sys as ffi;

use crate::cq::CompletionQueue;
use crate::error::{Error, Result, check, check_ptr, errno_of, from_errno};
use crate::extended::{PortAttrEx, VerbsContext};
use crate::pd::ProtectionDomain;

// rdma-sys 0.3's bindgen allowlist (`ibv_.*`) skips these exported symbols
// because of their leading underscore; they are part of libibverbs'
// stable ABI since rdma-core v32 (IBVERBS_1.11).
unsafe extern "C" {
    fn _ibv_query_gid_ex(
        context: *mut ffi::ibv_context,
        port_num: u32,
        gid_index: u32,
        entry: *mut ffi::ibv_gid_entry,
        flags: u32,
        entry_size: usize,
    ) -> libc::c_int;
    fn _ibv_query_gid_table(
        context: *mut ffi::ibv_context,
        entries: *mut ffi::ibv_gid_entry,
        max_entries: usize,
        flags: u32,
        entry_size: usize,
    ) -> libc::ssize_t;
}

/// One RDMA device as listed by `ibv_get_device_list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Kernel name, e.g. `mlx5_0` or `rxe0`.
    pub name: String,
    /// Node GUID in host byte order.
    pub guid: u64,
}

/// Lists the RDMA devices present on this host.
///
/// An empty list is not an error here; [`Context::open`] reports
/// [`Error::NoDevices`] when asked for a device and there is none.
///
/// # Errors
/// [`Error::NoDevices`] when the kernel has no RDMA support (see
/// [`device_list`]); [`Error::Verb`] when `ibv_get_device_list` fails
/// otherwise.
#[doc(alias = "ibv_get_device_list")]
pub fn devices() -> Result<Vec<DeviceInfo>> {
    let mut n: libc::c_int = 0;
    let list = device_list(&mut n)?;
    let mut out = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
    for i in 0..usize::try_from(n).unwrap_or(0) {
        // SAFETY: the list holds `n` valid device pointers until freed.
        let dev = unsafe { *list.as_ptr().add(i) };
        out.push(DeviceInfo {
            // SAFETY: `dev` is a valid device from the list.
            name: unsafe { device_name(dev) },
            // SAFETY: as above.
            guid: u64::from_be(unsafe { ffi::ibv_get_device_guid(dev) }),
        });
    }
    // SAFETY: `list` came from `ibv_get_device_list` and is freed once.
    unsafe { ffi::ibv_free_device_list(list.as_ptr()) };
    Ok(out)
}

/// `ibv_get_device_list`, its count in `n`; the caller frees the list.
/// Failing with `ENOSYS`, libibverbs found no RDMA in the kernel (no
/// `class/infiniband_verbs`): that is [`Error::NoDevices`] when the
/// kernel's device directory holds no device either (with a device there,
/// the verbs interface alone is missing, and the errno says so).
fn device_list(n: &mut libc::c_int) -> Result<NonNull<*mut ffi::ibv_device>> {
    // SAFETY: `n` is a valid out-pointer; the caller frees the list.
    let list = unsafe { ffi::ibv_get_device_list(n) };
    check_ptr("ibv_get_device_list", list).map_err(|e| match e {
        Error::Verb { ref os_error, .. }
            if os_error.raw_os_error() == Some(libc::ENOSYS)
                && !std::fs::read_dir(crate::error::kernel_device_dir())
                    .is_ok_and(|mut d| d.next().is_some()) =>
        {
            Error::no_devices()
        }
        e => e,
    })
}

/// # Safety
/// `dev` must be a valid `ibv_device` pointer.
unsafe fn device_name(dev: *mut ffi::ibv_device) -> String {
    // SAFETY: the caller passes a valid device; its name is a NUL-terminated
    // string that lives as long as the device list.
    let name = unsafe { ffi::ibv_get_device_name(dev) };
    if name.is_null() {
        return String::new();
    }
    // SAFETY: non-null, NUL-terminated, owned by libibverbs.
    unsafe { CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned()
}

pub(crate) struct ContextInner {
    raw: NonNull<ffi::ibv_context>,
    /// The extended half of `raw`, looked up once at open.
    vctx: Option<VerbsContext>,
    name: String,
    /// For a context librdmacm opened (a [`crate::CmId`]'s device): the id
    /// that keeps librdmacm holding it open. Such a context is librdmacm's
    /// to close, never ours.
    cm: Option<Arc<crate::cm::CmIdInner>>,
}

// SAFETY: libibverbs is thread-safe: every verb may be called on a context
// and the objects created from it from any thread (rdma-core documents this
// in libibverbs' man pages and providers lock shared state). The pointer is
// only freed in `Drop`, which runs once, after the last `Arc` is gone.
unsafe impl Send for ContextInner {}
// SAFETY: see `Send`: concurrent verbs on one context are allowed.
unsafe impl Sync for ContextInner {}

impl Drop for ContextInner {
    fn drop(&mut self) {
        if self.cm.is_some() {
            // librdmacm's context: it closes it when no id uses the
            // device any more (after `cm`, dropped next, goes).
            return;
        }
        // SAFETY: `raw` came from `ibv_open_device`; every child holds an
        // `Arc` to this inner, so none is alive any more.
        let rc = unsafe { ffi::ibv_close_device(self.raw.as_ptr()) };
        crate::drop_failed("ibv_close_device", rc);
    }
}

/// An open device: the root of every other resource.
///
/// Cloning is cheap (an `Arc`); the device closes when the last clone and
/// the last child (protection domain, completion queue, …) are gone.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.inner.name)
            .finish()
    }
}

impl Context {
    /// Opens the device called `name`.
    ///
    /// # Errors
    /// [`Error::NoDevices`] when there is no device at all,
    /// [`Error::NoSuchDevice`] (listing the devices that exist) when none has
    /// that name, [`Error::Verb`] when `ibv_open_device` fails.
    #[doc(alias = "ibv_open_device")]
    pub fn open(name: &str) -> Result<Self> {
        let mut n: libc::c_int = 0;
        // Freed before returning.
        let list = device_list(&mut n)?;
        let count = usize::try_from(n).unwrap_or(0);
        let mut names = Vec::with_capacity(count);
        let mut opened = None;
        for i in 0..count {
            // SAFETY: the list holds `count` valid device pointers.
            let dev = unsafe { *list.as_ptr().add(i) };
            // SAFETY: `dev` is valid.
            let dev_name = unsafe { device_name(dev) };
            if dev_name == name && opened.is_none() {
                // SAFETY: `dev` is valid while the list is; the context
                // outlives the list (documented by ibv_open_device(3)).
                opened = Some(check_ptr("ibv_open_device", unsafe {
                    ffi::ibv_open_device(dev)
                }));
            }
            names.push(dev_name);
        }
        // SAFETY: freed once; an opened context stays valid.
        unsafe { ffi::ibv_free_device_list(list.as_ptr()) };
        match opened {
            Some(raw) => {
                let raw = raw?;
                // SAFETY: `raw` was just opened by `ibv_open_device`; it is
                // closed only when `ContextInner` drops, and the
                // `VerbsContext` lives inside it.
                let vctx = unsafe { VerbsContext::of(raw) };
                Ok(Self {
                    inner: Arc::new(ContextInner {
                        raw,
                        vctx,
                        name: name.to_owned(),
                        cm: None,
                    }),
                })
            }
            None if names.is_empty() => Err(Error::no_devices()),
            None => Err(Error::NoSuchDevice {
                name: name.to_owned(),
                available: names,
            }),
        }
    }

    /// The context librdmacm opened for the device `id` resolved to,
    /// kept open by holding `id`.
    ///
    /// # Safety
    /// `raw` must be `id`'s `verbs` context (non-null), and `name` its
    /// device's name.
    pub(crate) unsafe fn of_cm(
        raw: NonNull<ffi::ibv_context>,
        name: String,
        id: Arc<crate::cm::CmIdInner>,
    ) -> Self {
        // SAFETY: `raw` is a live context (the caller's contract), kept
        // open by librdmacm while `id` exists, which the returned value
        // holds.
        let vctx = unsafe { VerbsContext::of(raw) };
        Self {
            inner: Arc::new(ContextInner {
                raw,
                vctx,
                name,
                cm: Some(id),
            }),
        }
    }

    /// The device name this context was opened with.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The device's transport (`ibv_device.transport_type`): InfiniBand
    /// (IB and RoCE alike) or iWARP, whose queue pairs connect only through
    /// the iWARP connection manager (rdma_cm).
    pub fn transport(&self) -> Transport {
        // SAFETY: `raw` is a live context (alive while `self` is); its
        // `device` points at the `ibv_device` it was opened from, which
        // libibverbs keeps for as long as any context of it is open.
        let code = unsafe { (*(*self.as_raw()).device).transport_type };
        Transport::from_raw(code)
    }

    /// The raw `ibv_context`; valid as long as `self` is.
    pub fn as_raw(&self) -> *mut ffi::ibv_context {
        self.inner.raw.as_ptr()
    }

    /// Whether libibverbs opened this device with the extended op table
    /// (`struct verbs_context`, marked by `abi_compat ==
    /// __VERBS_ABI_IS_EXTENDED`): the way to `ibv_create_qp_ex` and the
    /// length-aware `ibv_query_port`. True for every current provider.
    pub fn extended_verbs(&self) -> bool {
        self.inner.vctx.is_some()
    }

    pub(crate) fn verbs_context(&self) -> Option<VerbsContext> {
        self.inner.vctx
    }

    /// Device-wide limits and identity.
    ///
    /// # Errors
    /// [`Error::Verb`] naming `ibv_query_device`.
    #[doc(alias = "ibv_query_device")]
    pub fn query_device(&self) -> Result<DeviceAttributes> {
        // SAFETY: `ibv_device_attr` is plain old data; all-zero is valid.
        let mut attr: ffi::ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: valid context and out-pointer.
        let rc = unsafe { ffi::ibv_query_device(self.as_raw(), &mut attr) };
        check("ibv_query_device", rc)?;
        // SAFETY: the kernel NUL-terminates `fw_ver` within its 64 bytes.
        let fw = unsafe { CStr::from_ptr(attr.fw_ver.as_ptr()) };
        Ok(DeviceAttributes {
            fw_ver: fw.to_string_lossy().into_owned(),
            node_guid: u64::from_be(attr.node_guid),
            vendor_id: attr.vendor_id,
            vendor_part_id: attr.vendor_part_id,
            max_qp: attr.max_qp,
            max_qp_wr: attr.max_qp_wr,
            max_sge: attr.max_sge,
            max_cq: attr.max_cq,
            max_cqe: attr.max_cqe,
            max_mr: attr.max_mr,
            max_mr_size: attr.max_mr_size,
            max_pd: attr.max_pd,
            max_qp_rd_atom: attr.max_qp_rd_atom,
            max_qp_init_rd_atom: attr.max_qp_init_rd_atom,
            atomic_cap: AtomicCap::from_raw(attr.atomic_cap),
            phys_port_cnt: attr.phys_port_cnt,
            max_pkeys: attr.max_pkeys,
        })
    }

    /// Attributes of port `port` (1-based).
    ///
    /// As rdma-core's `ibv_query_port` inline (`___ibv_query_port`): through
    /// the extended op table's `query_port`, given the size of an
    /// `ibv_port_attr` that ends with `active_speed_ex`, or, on a context
    /// without one, through the exported compat `ibv_query_port`, which
    /// fills the older prefix.
    ///
    /// # Errors
    /// [`Error::NoSuchPort`] when the port does not exist, [`Error::Verb`]
    /// naming `ibv_query_port` otherwise.
    #[doc(alias = "ibv_query_port")]
    pub fn query_port(&self, port: u8) -> Result<PortAttributes> {
        let mut ex = PortAttrEx::zeroed();
        let rc = match self.inner.vctx.and_then(|v| v.query_port()) {
            // SAFETY: `query` is this open context's own extended
            // `query_port` (found by `VerbsContext`); `ex` is a zeroed,
            // writable buffer of exactly the length passed, alive across
            // the call; libibverbs writes at most that many bytes (it
            // zeroes and fills a shorter struct of its own, or copies that
            // many bytes of a longer one).
            Some(query) => unsafe {
                query(
                    self.as_raw(),
                    port,
                    (&raw mut ex).cast(),
                    std::mem::size_of::<PortAttrEx>(),
                )
            },
            // SAFETY: valid context; `ex` is zeroed (as verbs.h's inline
            // does before this call) and larger than the compat struct,
            // of which the exported symbol fills only the prefix.
            None => unsafe { ffi::ibv_query_port(self.as_raw(), port, (&raw mut ex).cast()) },
        };
        let attr = ex.attr;
        if rc != 0 {
            let errno = errno_of(rc);
            if errno == libc::EINVAL {
                let port_count = self.query_device()?.phys_port_cnt;
                if port == 0 || port > port_count {
                    return Err(Error::NoSuchPort {
                        device: self.inner.name.clone(),
                        port,
                        port_count,
                    });
                }
            }
            return Err(from_errno("ibv_query_port", errno));
        }
        Ok(PortAttributes {
            port,
            state: PortState::from_raw(attr.state),
            max_mtu: Mtu::from_raw(attr.max_mtu),
            active_mtu: Mtu::from_raw(attr.active_mtu),
            gid_tbl_len: attr.gid_tbl_len,
            max_msg_sz: attr.max_msg_sz,
            lid: attr.lid,
            active_width: attr.active_width,
            active_speed: attr.active_speed,
            active_speed_ex: if ex.active_speed_ex != 0 {
                ex.active_speed_ex
            } else {
                u32::from(attr.active_speed)
            },
            active_speed_ex_reported: ex.active_speed_ex != 0,
            phys_state: attr.phys_state,
            link_layer: LinkLayer::from_raw(attr.link_layer),
        })
    }

    /// One GID table entry.
    ///
    /// # Errors
    /// [`Error::NoSuchGid`] when the index is empty or beyond the table
    /// (`ENODATA`/`EINVAL`), [`Error::Verb`] otherwise.
    #[doc(alias = "ibv_query_gid_ex")]
    pub fn gid(&self, port: u8, gid_index: u32) -> Result<GidEntry> {
        // SAFETY: `ibv_gid_entry` is plain old data; all-zero is valid.
        let mut entry: ffi::ibv_gid_entry = unsafe { std::mem::zeroed() };
        // SAFETY: valid context; `entry` is an out-pointer of the size passed.
        let rc = unsafe {
            _ibv_query_gid_ex(
                self.as_raw(),
                u32::from(port),
                gid_index,
                &mut entry,
                0,
                std::mem::size_of::<ffi::ibv_gid_entry>(),
            )
        };
        if rc != 0 {
            let errno = errno_of(rc);
            if errno == libc::ENODATA || errno == libc::EINVAL {
                return Err(Error::NoSuchGid {
                    device: self.inner.name.clone(),
                    port,
                    gid_index,
                });
            }
            return Err(from_errno("ibv_query_gid_ex", errno));
        }
        Ok(GidEntry::from_raw(&entry))
    }

    /// Every valid GID of every port, in table order.
    ///
    /// # Errors
    /// [`Error::Verb`] naming `ibv_query_gid_table`.
    #[doc(alias = "ibv_query_gid_table")]
    pub fn gid_table(&self) -> Result<Vec<GidEntry>> {
        let ports = self.query_device()?.phys_port_cnt;
        let mut capacity = 0usize;
        for port in 1..=ports {
            capacity += usize::try_from(self.query_port(port)?.gid_tbl_len).unwrap_or(0);
        }
        let mut raw: Vec<ffi::ibv_gid_entry> = Vec::with_capacity(capacity.max(1));
        // SAFETY: valid context; `raw` has room for `capacity` entries of
        // the size passed; the verb writes at most `capacity` entries and
        // returns how many.
        let n = unsafe {
            _ibv_query_gid_table(
                self.as_raw(),
                raw.as_mut_ptr(),
                capacity,
                0,
                std::mem::size_of::<ffi::ibv_gid_entry>(),
            )
        };
        if n < 0 {
            let errno = errno_of(i32::try_from(n).unwrap_or(-1));
            return Err(from_errno("ibv_query_gid_table", errno));
        }
        let n = usize::try_from(n).unwrap_or(0).min(capacity);
        // SAFETY: the verb initialised the first `n` entries.
        unsafe { raw.set_len(n) };
        Ok(raw.iter().map(GidEntry::from_raw).collect())
    }

    /// Allocates a protection domain on this device.
    ///
    /// # Errors
    /// [`Error::Verb`] naming `ibv_alloc_pd`.
    #[doc(alias = "ibv_alloc_pd")]
    pub fn alloc_pd(&self) -> Result<ProtectionDomain> {
        ProtectionDomain::new(self.clone())
    }

    /// Creates a completion queue with at least `min_entries` entries.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for 0 entries, [`Error::Verb`] naming
    /// `ibv_create_cq` (e.g. `EINVAL` above the device's `max_cqe`).
    #[doc(alias = "ibv_create_cq")]
    pub fn create_cq(&self, min_entries: u32) -> Result<CompletionQueue> {
        CompletionQueue::new(self.clone(), min_entries)
    }
}

/// Device-wide attributes from `ibv_query_device`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceAttributes {
    /// Firmware version string.
    pub fw_ver: String,
    /// Node GUID, host byte order.
    pub node_guid: u64,
    /// IEEE vendor id (`0xffffff` on rxe).
    pub vendor_id: u32,
    /// Vendor part id.
    pub vendor_part_id: u32,
    /// Maximum number of queue pairs.
    pub max_qp: i32,
    /// Maximum work requests per queue.
    pub max_qp_wr: i32,
    /// Maximum scatter/gather entries per work request.
    pub max_sge: i32,
    /// Maximum number of completion queues.
    pub max_cq: i32,
    /// Maximum entries per completion queue.
    pub max_cqe: i32,
    /// Maximum number of memory regions.
    pub max_mr: i32,
    /// Largest registrable region in bytes.
    pub max_mr_size: u64,
    /// Maximum number of protection domains.
    pub max_pd: i32,
    /// Maximum outstanding RDMA reads/atomics per QP as target (the limit
    /// of [`crate::ConnectOptions::max_dest_rd_atomic`]).
    pub max_qp_rd_atom: i32,
    /// Maximum outstanding RDMA reads/atomics per QP as initiator (the
    /// limit of [`crate::ConnectOptions::max_rd_atomic`]).
    pub max_qp_init_rd_atom: i32,
    /// Whether and how atomically the device runs RDMA atomics.
    pub atomic_cap: AtomicCap,
    /// Number of physical ports.
    pub phys_port_cnt: u8,
    /// Entries of each port's P_Key table.
    pub max_pkeys: u16,
}

/// Atomic support of a device (`ibv_atomic_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicCap {
    /// No RDMA atomics.
    None,
    /// Atomic with respect to other atomics through this device only
    /// (`IBV_ATOMIC_HCA`; not with CPU accesses).
    Hca,
    /// Atomic with respect to every access, CPU ones included
    /// (`IBV_ATOMIC_GLOB`).
    Glob,
    /// A value this crate does not know.
    Unknown(u32),
}

impl AtomicCap {
    fn from_raw(raw: ffi::ibv_atomic_cap::Type) -> Self {
        use ffi::ibv_atomic_cap as c;
        match raw {
            c::IBV_ATOMIC_NONE => Self::None,
            c::IBV_ATOMIC_HCA => Self::Hca,
            c::IBV_ATOMIC_GLOB => Self::Glob,
            other => Self::Unknown(other),
        }
    }

    /// Whether the device runs RDMA atomics at all.
    pub fn is_supported(self) -> bool {
        !matches!(self, Self::None)
    }
}

impl fmt::Display for AtomicCap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => f.write_str("none"),
            Self::Hca => f.write_str("HCA"),
            Self::Glob => f.write_str("global"),
            Self::Unknown(v) => write!(f, "unknown({v})"),
        }
    }
}

/// Logical port state (`ibv_port_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortState {
    /// Reserved value 0.
    Nop,
    /// Link down.
    Down,
    /// Link up, not yet configured by the subnet manager.
    Init,
    /// Configured, not yet active.
    Armed,
    /// Ready to carry traffic.
    Active,
    /// Active, deferring.
    ActiveDefer,
    /// A value this crate does not know.
    Unknown(u32),
}

impl PortState {
    fn from_raw(raw: u32) -> Self {
        match raw {
            0 => Self::Nop,
            1 => Self::Down,
            2 => Self::Init,
            3 => Self::Armed,
            4 => Self::Active,
            5 => Self::ActiveDefer,
            other => Self::Unknown(other),
        }
    }
}

impl fmt::Display for PortState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Nop => f.write_str("NOP"),
            Self::Down => f.write_str("DOWN"),
            Self::Init => f.write_str("INIT"),
            Self::Armed => f.write_str("ARMED"),
            Self::Active => f.write_str("ACTIVE"),
            Self::ActiveDefer => f.write_str("ACTIVE_DEFER"),
            Self::Unknown(v) => write!(f, "UNKNOWN({v})"),
        }
    }
}

/// A device's transport ([`Context::transport`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// InfiniBand semantics: InfiniBand and RoCE (soft-RoCE included).
    InfiniBand,
    /// iWARP (soft-iWARP `siw`, Chelsio, iWARP-mode irdma).
    Iwarp,
    /// Another transport (usNIC, unknown, ...), with libibverbs' code.
    Other(i32),
}

impl Transport {
    fn from_raw(code: ffi::ibv_transport_type::Type) -> Self {
        use ffi::ibv_transport_type as t;
        match code {
            t::IBV_TRANSPORT_IB => Self::InfiniBand,
            t::IBV_TRANSPORT_IWARP => Self::Iwarp,
            other => Self::Other(other),
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // As ibv_devinfo names them.
            Self::InfiniBand => f.write_str("InfiniBand"),
            Self::Iwarp => f.write_str("iWARP"),
            Self::Other(code) => write!(f, "transport {code}"),
        }
    }
}

/// Link layer of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkLayer {
    /// Unspecified (reported by old drivers for InfiniBand).
    Unspecified,
    /// InfiniBand.
    InfiniBand,
    /// Ethernet (RoCE, including soft-RoCE).
    Ethernet,
    /// A value this crate does not know.
    Unknown(u8),
}

impl LinkLayer {
    // `IBV_LINK_LAYER_*` are constants of an unnamed C enum that rdma-sys
    // does not bind; values from <infiniband/verbs.h>.
    fn from_raw(raw: u8) -> Self {
        match raw {
            0 => Self::Unspecified,
            1 => Self::InfiniBand,
            2 => Self::Ethernet,
            other => Self::Unknown(other),
        }
    }

    /// Whether addressing needs a GRH (global route) – true on RoCE.
    pub fn is_ethernet(self) -> bool {
        self == Self::Ethernet
    }
}

impl fmt::Display for LinkLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unspecified | Self::InfiniBand => f.write_str("IB"),
            Self::Ethernet => f.write_str("Ethernet"),
            Self::Unknown(v) => write!(f, "unknown({v})"),
        }
    }
}

/// Path MTU (`ibv_mtu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256,
    /// 512 bytes.
    Mtu512,
    /// 1024 bytes.
    Mtu1024,
    /// 2048 bytes.
    Mtu2048,
    /// 4096 bytes.
    Mtu4096,
}

impl Mtu {
    /// From the `ibv_mtu` enum value (1..=5); unknown values clamp to 256.
    pub fn from_raw(raw: u32) -> Self {
        match raw {
            2 => Self::Mtu512,
            3 => Self::Mtu1024,
            4 => Self::Mtu2048,
            5 => Self::Mtu4096,
            _ => Self::Mtu256,
        }
    }

    /// The `ibv_mtu` enum value.
    pub fn to_raw(self) -> u32 {
        match self {
            Self::Mtu256 => 1,
            Self::Mtu512 => 2,
            Self::Mtu1024 => 3,
            Self::Mtu2048 => 4,
            Self::Mtu4096 => 5,
        }
    }

    /// From a size in bytes; only 256, 512, 1024, 2048 and 4096 exist.
    pub fn from_bytes(bytes: u32) -> Option<Self> {
        match bytes {
            256 => Some(Self::Mtu256),
            512 => Some(Self::Mtu512),
            1024 => Some(Self::Mtu1024),
            2048 => Some(Self::Mtu2048),
            4096 => Some(Self::Mtu4096),
            _ => None,
        }
    }

    /// Size in bytes.
    pub fn bytes(self) -> u32 {
        256 << (self.to_raw() - 1)
    }
}

impl fmt::Display for Mtu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bytes())
    }
}

/// Port attributes from `ibv_query_port`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PortAttributes {
    /// Port number (1-based).
    pub port: u8,
    /// Logical state.
    pub state: PortState,
    /// Largest MTU the port supports.
    pub max_mtu: Mtu,
    /// MTU currently in effect (on RoCE: from the netdev's MTU).
    pub active_mtu: Mtu,
    /// Length of the GID table.
    pub gid_tbl_len: i32,
    /// Largest message in bytes.
    pub max_msg_sz: u32,
    /// Local identifier (0 on RoCE).
    pub lid: u16,
    /// Raw `active_width` (1 = 1X, 2 = 4X, 4 = 8X, 8 = 12X, 16 = 2X).
    pub active_width: u8,
    /// Raw `active_speed` (1 SDR, 2 DDR, 4 QDR, 8 FDR10, 16 FDR, 32 EDR,
    /// 64 HDR, 128 NDR). Cannot say XDR: see
    /// [`PortAttributes::active_speed_ex`].
    pub active_speed: u8,
    /// The active speed in the wider code of `active_speed_ex` (the values
    /// of `active_speed`, and 256 XDR): the value libibverbs reported
    /// through the extended `query_port` when it reported one (an rdma-core
    /// whose `ibv_port_attr` has the field, on a kernel that fills it: so
    /// XDR ports are seen), else
    /// `active_speed` (older libraries or kernels leave the field 0, and
    /// then no speed beyond NDR exists to report). Never 0 for a port with
    /// a speed.
    pub active_speed_ex: u32,
    /// Whether [`PortAttributes::active_speed_ex`] came from the device
    /// (nonzero `active_speed_ex` reported), rather than from
    /// `active_speed`.
    pub active_speed_ex_reported: bool,
    /// Raw physical state (5 = LinkUp).
    pub phys_state: u8,
    /// Link layer.
    pub link_layer: LinkLayer,
}

impl PortAttributes {
    /// Whether the port is ready for traffic.
    pub fn is_active(&self) -> bool {
        matches!(self.state, PortState::Active | PortState::ActiveDefer)
    }
}

/// A 128-bit global identifier, raw network-order bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// Whether every byte is zero (an empty table slot).
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    /// The IPv4 address when this is an IPv4-mapped GID (`::ffff:a.b.c.d`).
    pub fn ipv4(&self) -> Option<std::net::Ipv4Addr> {
        std::net::Ipv6Addr::from(self.0).to_ipv4_mapped()
    }

    /// Whether this is an IPv6 link-local address (`fe80::/10`).
    pub fn is_link_local(&self) -> bool {
        self.0[0] == 0xfe && (self.0[1] & 0xc0) == 0x80
    }

    pub(crate) fn to_raw(self) -> ffi::ibv_gid {
        ffi::ibv_gid { raw: self.0 }
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&std::net::Ipv6Addr::from(self.0), f)
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

/// What kind of address a GID table entry is (`ibv_gid_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GidType {
    /// InfiniBand (or RoCE v1, which shares the value on IB ports).
    Ib,
    /// RoCE v1 (Ethernet, no IP header).
    RoceV1,
    /// RoCE v2 (UDP/IP encapsulated).
    RoceV2,
    /// A value this crate does not know.
    Unknown(u32),
}

impl fmt::Display for GidType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ib => f.write_str("IB"),
            Self::RoceV1 => f.write_str("RoCE v1"),
            Self::RoceV2 => f.write_str("RoCE v2"),
            Self::Unknown(v) => write!(f, "unknown({v})"),
        }
    }
}

/// One valid GID table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    /// The address.
    pub gid: Gid,
    /// Its index in the port's table.
    pub gid_index: u32,
    /// The port it belongs to.
    pub port: u8,
    /// IB, RoCE v1 or RoCE v2.
    pub gid_type: GidType,
    /// ifindex of the netdev behind it (0 on InfiniBand).
    pub ndev_ifindex: u32,
}

impl GidEntry {
    fn from_raw(raw: &ffi::ibv_gid_entry) -> Self {
        // SAFETY: `ibv_gid` is a union of byte views; every bit pattern is
        // a valid `[u8; 16]`.
        let bytes = unsafe { raw.gid.raw };
        Self {
            gid: Gid(bytes),
            gid_index: raw.gid_index,
            port: u8::try_from(raw.port_num).unwrap_or(u8::MAX),
            // `enum ibv_gid_type` values from <infiniband/verbs.h>.
            gid_type: match raw.gid_type {
                0 => GidType::Ib,
                1 => GidType::RoceV1,
                2 => GidType::RoceV2,
                other => GidType::Unknown(other),
            },
            ndev_ifindex: raw.ndev_ifindex,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transports_are_told_apart_and_named_as_ibv_devinfo_names_them() {
        use ffi::ibv_transport_type as t;
        assert_eq!(
            Transport::from_raw(t::IBV_TRANSPORT_IB),
            Transport::InfiniBand
        );
        assert_eq!(
            Transport::from_raw(t::IBV_TRANSPORT_IWARP),
            Transport::Iwarp
        );
        assert_eq!(
            Transport::from_raw(t::IBV_TRANSPORT_USNIC),
            Transport::Other(t::IBV_TRANSPORT_USNIC)
        );
        assert_eq!(Transport::Iwarp.to_string(), "iWARP");
        assert_eq!(Transport::InfiniBand.to_string(), "InfiniBand");
    }
}
