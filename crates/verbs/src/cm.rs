//! The RDMA connection manager (librdmacm, perftest's `-R`): an
//! [`EventChannel`] and the [`CmId`]s whose events it carries, every wait
//! on it bounded by a deadline.
//!
//! rdma_cm addresses a peer by IP address and port and finds the device,
//! port and path itself (`rdma_resolve_addr`, `rdma_resolve_route`); on
//! iWARP it is the only way to connect a queue pair (the iWARP connection
//! manager moves it to RTS). Its events arrive on a channel whose file
//! descriptor this module makes non-blocking and sleeps on with `poll(2)`
//! until a deadline: no call here blocks without a bound.
//!
//! Ownership follows the crate's rule: a [`CmId`] holds an `Arc` of its
//! channel, so the channel is destroyed after its last id
//! (`rdma_destroy_event_channel` requires it).

use std::ffi::CStr;
use std::fmt;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_sys as ffi;

use crate::context::Context;
use crate::cq::CompletionQueue;
use crate::error::{Error, Result, check_ptr, errno_of};
use crate::pd::ProtectionDomain;
use crate::qp::{QueuePair, QueuePairCaps};

/// A connection-manager event channel (`rdma_create_event_channel`).
pub struct EventChannel {
    raw: NonNull<ffi::rdma_event_channel>,
}

// SAFETY: librdmacm is thread-safe (its calls lock what they share); the
// channel is only freed in `Drop`, once, after the last `Arc`.
unsafe impl Send for EventChannel {}
// SAFETY: see `Send`.
unsafe impl Sync for EventChannel {}

impl fmt::Debug for EventChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventChannel")
            .field("fd", &self.fd())
            .finish()
    }
}

impl Drop for EventChannel {
    fn drop(&mut self) {
        // SAFETY: `raw` came from `rdma_create_event_channel`; every id on
        // it holds an `Arc` of this channel, so none is left.
        unsafe { ffi::rdma_destroy_event_channel(self.raw.as_ptr()) };
    }
}

impl EventChannel {
    /// A new channel, its descriptor non-blocking.
    ///
    /// # Errors
    /// [`Error::Verb`] when librdmacm cannot create one (e.g. `rdma_ucm`
    /// not loaded: `ENODEV`).
    pub fn new() -> Result<Arc<Self>> {
        // SAFETY: no arguments; returns a channel or null with errno set.
        let raw = unsafe { ffi::rdma_create_event_channel() };
        let channel = Self {
            raw: check_ptr("rdma_create_event_channel", raw)?,
        };
        let fd = channel.fd();
        // SAFETY: `fd` is the channel's open descriptor; F_GETFL/F_SETFL
        // only read and set its status flags.
        let rc = unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags < 0 {
                flags
            } else {
                libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK)
            }
        };
        if rc < 0 {
            return Err(Error::Verb {
                verb: "fcntl(O_NONBLOCK) on the rdma_cm event channel",
                os_error: std::io::Error::last_os_error(),
            });
        }
        Ok(Arc::new(channel))
    }

    /// The channel's file descriptor (readable when an event is queued).
    pub fn fd(&self) -> RawFd {
        // SAFETY: `raw` is a live channel while `self` is.
        unsafe { (*self.raw.as_ptr()).fd }
    }

    /// The next event, waiting at most until `deadline`; `what` names the
    /// step in a timeout.
    fn next(&self, what: &'static str, started: Instant, deadline: Instant) -> Result<CmEvent> {
        loop {
            let mut event: *mut ffi::rdma_cm_event = std::ptr::null_mut();
            // SAFETY: a live channel whose descriptor is non-blocking, and
            // a valid out-pointer; on success `event` is an event we own
            // until `rdma_ack_cm_event`.
            let rc = unsafe { ffi::rdma_get_cm_event(self.raw.as_ptr(), &mut event) };
            if rc == 0 {
                // SAFETY: `event` is the valid event just returned; its
                // fields are copied out before it is acknowledged (and
                // freed) once.
                let copied = unsafe {
                    let e = &*event;
                    let kind = CmEventKind::from_raw(e.event);
                    let conn = e.param.conn;
                    // A connection request's data lives in the event
                    // (`private_data_len` bytes, a `u8`: at most 255).
                    let private_data =
                        if kind == CmEventKind::ConnectRequest && !conn.private_data.is_null() {
                            std::slice::from_raw_parts(
                                conn.private_data.cast::<u8>(),
                                usize::from(conn.private_data_len),
                            )
                            .to_vec()
                        } else {
                            Vec::new()
                        };
                    CmEvent {
                        kind,
                        status: e.status,
                        id: e.id,
                        private_data,
                    }
                };
                // SAFETY: as above: acknowledged once, not used after.
                unsafe { ffi::rdma_ack_cm_event(event) };
                return Ok(copied);
            }
            let errno = errno_of(rc);
            if errno != libc::EAGAIN && errno != libc::EWOULDBLOCK && errno != libc::EINTR {
                return Err(crate::error::from_errno("rdma_get_cm_event", errno));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Timeout {
                    what,
                    waited: now - started,
                });
            }
            let ms = (deadline - now).as_millis().clamp(1, i32::MAX as u128) as i32;
            let mut pfd = libc::pollfd {
                fd: self.fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, its count 1; poll only writes
            // `revents`. A failure (EINTR) loops back to the next try.
            unsafe { libc::poll(&mut pfd, 1, ms) };
        }
    }
}

/// What the connection manager reported (`rdma_cm_event_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmEventKind {
    /// `RDMA_CM_EVENT_ADDR_RESOLVED`.
    AddrResolved,
    /// `RDMA_CM_EVENT_ADDR_ERROR`: no local device or no way to the address.
    AddrError,
    /// `RDMA_CM_EVENT_ROUTE_RESOLVED`.
    RouteResolved,
    /// `RDMA_CM_EVENT_ROUTE_ERROR`.
    RouteError,
    /// `RDMA_CM_EVENT_CONNECT_REQUEST`.
    ConnectRequest,
    /// `RDMA_CM_EVENT_CONNECT_RESPONSE`.
    ConnectResponse,
    /// `RDMA_CM_EVENT_CONNECT_ERROR`.
    ConnectError,
    /// `RDMA_CM_EVENT_UNREACHABLE`.
    Unreachable,
    /// `RDMA_CM_EVENT_REJECTED`.
    Rejected,
    /// `RDMA_CM_EVENT_ESTABLISHED`.
    Established,
    /// `RDMA_CM_EVENT_DISCONNECTED`.
    Disconnected,
    /// `RDMA_CM_EVENT_DEVICE_REMOVAL`.
    DeviceRemoval,
    /// `RDMA_CM_EVENT_TIMEWAIT_EXIT`.
    TimewaitExit,
    /// Another event (multicast, address change), with its code.
    Other(u32),
}

impl CmEventKind {
    fn from_raw(code: ffi::rdma_cm_event_type::Type) -> Self {
        use ffi::rdma_cm_event_type as t;
        match code {
            t::RDMA_CM_EVENT_ADDR_RESOLVED => Self::AddrResolved,
            t::RDMA_CM_EVENT_ADDR_ERROR => Self::AddrError,
            t::RDMA_CM_EVENT_ROUTE_RESOLVED => Self::RouteResolved,
            t::RDMA_CM_EVENT_ROUTE_ERROR => Self::RouteError,
            t::RDMA_CM_EVENT_CONNECT_REQUEST => Self::ConnectRequest,
            t::RDMA_CM_EVENT_CONNECT_RESPONSE => Self::ConnectResponse,
            t::RDMA_CM_EVENT_CONNECT_ERROR => Self::ConnectError,
            t::RDMA_CM_EVENT_UNREACHABLE => Self::Unreachable,
            t::RDMA_CM_EVENT_REJECTED => Self::Rejected,
            t::RDMA_CM_EVENT_ESTABLISHED => Self::Established,
            t::RDMA_CM_EVENT_DISCONNECTED => Self::Disconnected,
            t::RDMA_CM_EVENT_DEVICE_REMOVAL => Self::DeviceRemoval,
            t::RDMA_CM_EVENT_TIMEWAIT_EXIT => Self::TimewaitExit,
            other => Self::Other(other),
        }
    }

    /// librdmacm's name for it (`rdma_event_str`), e.g.
    /// `RDMA_CM_EVENT_ADDR_ERROR`.
    pub fn name(self) -> String {
        use ffi::rdma_cm_event_type as t;
        let code = match self {
            Self::AddrResolved => t::RDMA_CM_EVENT_ADDR_RESOLVED,
            Self::AddrError => t::RDMA_CM_EVENT_ADDR_ERROR,
            Self::RouteResolved => t::RDMA_CM_EVENT_ROUTE_RESOLVED,
            Self::RouteError => t::RDMA_CM_EVENT_ROUTE_ERROR,
            Self::ConnectRequest => t::RDMA_CM_EVENT_CONNECT_REQUEST,
            Self::ConnectResponse => t::RDMA_CM_EVENT_CONNECT_RESPONSE,
            Self::ConnectError => t::RDMA_CM_EVENT_CONNECT_ERROR,
            Self::Unreachable => t::RDMA_CM_EVENT_UNREACHABLE,
            Self::Rejected => t::RDMA_CM_EVENT_REJECTED,
            Self::Established => t::RDMA_CM_EVENT_ESTABLISHED,
            Self::Disconnected => t::RDMA_CM_EVENT_DISCONNECTED,
            Self::DeviceRemoval => t::RDMA_CM_EVENT_DEVICE_REMOVAL,
            Self::TimewaitExit => t::RDMA_CM_EVENT_TIMEWAIT_EXIT,
            Self::Other(code) => code,
        };
        // SAFETY: `rdma_event_str` returns a static string for any code
        // ("UNKNOWN EVENT" for one it does not know), never null.
        unsafe { CStr::from_ptr(ffi::rdma_event_str(code)) }
            .to_string_lossy()
            .into_owned()
    }
}

/// One event, copied out of librdmacm's (which is acknowledged at once).
#[derive(Debug, Clone)]
struct CmEvent {
    kind: CmEventKind,
    /// 0, a negative errno, or (REJECTED) the peer's reject reason.
    status: i32,
    /// The id it is for (compared, never dereferenced here).
    id: *mut ffi::rdma_cm_id,
    /// A connection request's private data (at most 255 bytes: its
    /// length is a `u8`); empty for other events.
    private_data: Vec<u8>,
}

/// A connection-manager identifier (`rdma_create_id`, RDMA_PS_TCP): one
/// side of one reliable connection (or a listener), with its own event
/// channel. Cheap to clone: the id lives until its last clone, and every
/// QP made on it ([`CmId::create_qp`]) and every context from it
/// ([`CmId::context`]) holds it too.
#[derive(Clone)]
pub struct CmId {
    inner: Arc<CmIdInner>,
}

/// The id itself; destroyed once, after everything that holds it.
pub(crate) struct CmIdInner {
    raw: NonNull<ffi::rdma_cm_id>,
    channel: Arc<EventChannel>,
}

// SAFETY: librdmacm is thread-safe; the id is freed only in `Drop`.
unsafe impl Send for CmIdInner {}
// SAFETY: see `Send`.
unsafe impl Sync for CmIdInner {}

impl Drop for CmIdInner {
    fn drop(&mut self) {
        // SAFETY: `raw` came from `rdma_create_id` (or a connect request)
        // and is destroyed once; its QP, if any, went first (the QP holds
        // this inner); its channel (`self.channel`) is still alive here and
        // goes after.
        let rc = unsafe { ffi::rdma_destroy_id(self.raw.as_ptr()) };
        crate::drop_failed("rdma_destroy_id", rc);
    }
}

impl CmIdInner {
    pub(crate) fn as_raw(&self) -> *mut ffi::rdma_cm_id {
        self.raw.as_ptr()
    }

    /// The id's device context (`cm_id->verbs`), once resolved or bound.
    pub(crate) fn verbs(&self) -> Option<*mut ffi::ibv_context> {
        // SAFETY: a live id; reading a pointer field.
        let verbs = unsafe { (*self.raw.as_ptr()).verbs };
        (!verbs.is_null()).then_some(verbs)
    }

    /// The id's QP (`cm_id->qp`), null until `rdma_create_qp`.
    pub(crate) fn qp(&self) -> *mut ffi::ibv_qp {
        // SAFETY: a live id; reading a pointer field.
        unsafe { (*self.raw.as_ptr()).qp }
    }
}

impl fmt::Debug for CmId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmId")
            .field("device", &self.device_name())
            .field("port", &self.port())
            .finish()
    }
}

/// Bytes of private data a connect or accept carries: the most every
/// transport delivers whole (56 on InfiniBand and RoCE, the CM's REQ;
/// iWARP's MPA carries more), so 16 fits everywhere.
pub const PRIVATE_DATA_LEN: usize = 16;

/// What a connecting or accepting side offers for RDMA READ and atomics
/// (`rdma_conn_param`), and the private data the peer receives with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectParams {
    /// READs and atomics this side lets the peer have outstanding on it.
    pub responder_resources: u8,
    /// READs and atomics this side keeps outstanding on the peer.
    pub initiator_depth: u8,
    /// Carried to the peer: a connect's reaches the listener with the
    /// request ([`ConnectRequest::private_data`]; InfiniBand pads it).
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl ConnectParams {
    /// `param` reads the private data through a pointer into `self`:
    /// `self` must outlive the call that takes `param`.
    fn as_raw(&self) -> ffi::rdma_conn_param {
        ffi::rdma_conn_param {
            private_data: self.private_data.as_ptr().cast(),
            private_data_len: PRIVATE_DATA_LEN as u8,
            responder_resources: self.responder_resources,
            initiator_depth: self.initiator_depth,
            flow_control: 1,
            // As perftest: 7 retries each (7 = infinite RNR retry on IB).
            retry_count: 7,
            rnr_retry_count: 7,
            srq: 0,
            qp_num: 0,
        }
    }
}

/// A socket address as the `sockaddr` storage librdmacm reads.
fn sockaddr_of(addr: SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: all-zero is a valid `sockaddr_storage`.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*a.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: `sockaddr_storage` is larger than and aligned for
            // every socket address type; this writes a `sockaddr_in` at
            // its start.
            unsafe { std::ptr::write((&raw mut storage).cast(), sin) };
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo().to_be(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above, for a `sockaddr_in6`.
            unsafe { std::ptr::write((&raw mut storage).cast(), sin6) };
        }
    }
    storage
}

/// The socket address at `sa`, when it is IPv4 or IPv6 (an unset one,
/// family 0, is `None`).
///
/// # Safety
/// `sa` points to a `sockaddr_storage`-sized socket address.
unsafe fn socket_addr_at(sa: *const libc::sockaddr) -> Option<SocketAddr> {
    // SAFETY: the caller's; each cast reads the layout its family names,
    // inside the storage.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET => {
                let sin = &*sa.cast::<libc::sockaddr_in>();
                Some(SocketAddr::new(
                    std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)).into(),
                    u16::from_be(sin.sin_port),
                ))
            }
            libc::AF_INET6 => {
                let sin6 = &*sa.cast::<libc::sockaddr_in6>();
                Some(SocketAddr::V6(std::net::SocketAddrV6::new(
                    sin6.sin6_addr.s6_addr.into(),
                    u16::from_be(sin6.sin6_port),
                    u32::from_be(sin6.sin6_flowinfo),
                    sin6.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

/// A connection request to a listener ([`CmId::next_request`]).
#[derive(Debug)]
pub struct ConnectRequest {
    /// The requesting connection's id, on a channel of its own: accept
    /// ([`CmId::accept`]) or reject ([`CmId::reject`]) it.
    pub id: CmId,
    /// The private data the peer connected with (InfiniBand pads it to
    /// 56 bytes with zeros; at most 255).
    pub private_data: Vec<u8>,
}

impl CmId {
    /// A new id for a reliable connection, on a channel of its own.
    ///
    /// # Errors
    /// [`Error::Verb`] when librdmacm refuses (no `rdma_ucm`: `ENODEV`).
    pub fn new() -> Result<Self> {
        let channel = EventChannel::new()?;
        let mut raw: *mut ffi::rdma_cm_id = std::ptr::null_mut();
        // SAFETY: a live channel and a valid out-pointer; no user context.
        let rc = unsafe {
            ffi::rdma_create_id(
                channel.raw.as_ptr(),
                &mut raw,
                std::ptr::null_mut(),
                ffi::rdma_port_space::RDMA_PS_TCP,
            )
        };
        if rc != 0 {
            return Err(crate::error::from_errno("rdma_create_id", errno_of(rc)));
        }
        Ok(Self {
            inner: Arc::new(CmIdInner {
                raw: check_ptr("rdma_create_id", raw)?,
                channel,
            }),
        })
    }

    fn raw(&self) -> *mut ffi::rdma_cm_id {
        self.inner.as_raw()
    }

    /// Resolves `dst` to a local device, port and path (from `src` when
    /// given: binding the source address picks the device), waiting at
    /// most `timeout` for the two steps together.
    ///
    /// # Errors
    /// [`Error::Cm`] naming the step and what the connection manager
    /// reported (`RDMA_CM_EVENT_ADDR_ERROR` for an address no local device
    /// reaches, with its errno); [`Error::Timeout`]; [`Error::Verb`] when a
    /// call is refused outright.
    pub fn resolve(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<()> {
        let started = Instant::now();
        let deadline = started + timeout;
        let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
        let mut src_raw = src.map(sockaddr_of);
        let mut dst_raw = sockaddr_of(dst);
        // The kernel (drivers/infiniband/core/addr.c, 6.1) retries an
        // address whose neighbour entry is not yet valid when a neighbour
        // update wakes it, or else only at the request's timeout; an ARP
        // reply that comes back before the request is queued (a veth or a
        // bridge answers at once) wakes nothing, and a single attempt with
        // the whole budget waits out all of it (measured: siw across
        // network namespaces, every first contact). So: short attempts,
        // growing, each a new rdma_resolve_addr after the kernel's
        // ETIMEDOUT, until the budget is spent.
        for attempt in 0.. {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let attempt_ms = resolve_attempt(attempt, remaining).as_millis().max(1) as i32;
            // SAFETY: a live id; `src_raw` (or null) and `dst_raw` are
            // valid socket addresses that live across the call, which
            // copies them. Once the id is bound the kernel ignores `src`.
            let rc = unsafe {
                ffi::rdma_resolve_addr(
                    self.raw(),
                    src_raw.as_mut().map_or(std::ptr::null_mut(), |s| {
                        (s as *mut libc::sockaddr_storage).cast()
                    }),
                    (&raw mut dst_raw).cast(),
                    attempt_ms,
                )
            };
            if rc != 0 {
                return Err(crate::error::from_errno("rdma_resolve_addr", errno_of(rc)));
            }
            match self.expect(
                CmEventKind::AddrResolved,
                "rdma_resolve_addr",
                "the connection manager to resolve the address",
                started,
                deadline,
            ) {
                Err(Error::Cm { status, .. })
                    if status == -libc::ETIMEDOUT && Instant::now() < deadline => {}
                other => {
                    other?;
                    break;
                }
            }
        }
        // SAFETY: a live id whose address is resolved.
        let rc = unsafe { ffi::rdma_resolve_route(self.raw(), ms) };
        if rc != 0 {
            return Err(crate::error::from_errno("rdma_resolve_route", errno_of(rc)));
        }
        self.expect(
            CmEventKind::RouteResolved,
            "rdma_resolve_route",
            "the connection manager to resolve the route",
            started,
            deadline,
        )
    }

    /// Waits for `want` on this id; another event is the error.
    fn expect(
        &self,
        want: CmEventKind,
        step: &'static str,
        what: &'static str,
        started: Instant,
        deadline: Instant,
    ) -> Result<()> {
        let event = self.inner.channel.next(what, started, deadline)?;
        if event.kind == want && event.id == self.raw() {
            return Ok(());
        }
        Err(Error::Cm {
            step,
            event: event.kind.name(),
            status: event.status,
        })
    }

    /// The device context the id resolved (or was bound) to: the one
    /// librdmacm opened, on which [`CmId::create_qp`]'s protection domain
    /// and completion queues must be made. It holds the id.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] before the id is resolved or bound.
    pub fn context(&self) -> Result<Context> {
        let verbs = self.inner.verbs().ok_or_else(|| {
            Error::InvalidArgument(
                "the connection manager id has no device yet: resolve or bind it first".into(),
            )
        })?;
        let name = self.device_name().unwrap_or_default();
        // SAFETY: `verbs` is this id's non-null context and `name` its
        // device's name; the context keeps the id (and so librdmacm's hold
        // on the device) alive.
        Ok(unsafe {
            Context::of_cm(
                NonNull::new(verbs).expect("checked non-null"),
                name,
                Arc::clone(&self.inner),
            )
        })
    }

    /// A reliable-connected QP on this id (`rdma_create_qp`), made on
    /// `pd` (of [`CmId::context`]'s device) with its completion queues;
    /// the connection manager moves it to RTS when the id connects or
    /// accepts. It posts through `ibv_post_send`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `pd` is of another device context;
    /// [`Error::Verb`] when the provider refuses the QP.
    pub fn create_qp(
        &self,
        pd: &ProtectionDomain,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        caps: &QueuePairCaps,
    ) -> Result<QueuePair> {
        QueuePair::create_on_cm(
            Arc::clone(&self.inner),
            pd.clone(),
            send_cq.clone(),
            recv_cq.clone(),
            caps,
        )
    }

    /// A listener on `addr` (port 0: one the kernel picks, see
    /// [`CmId::local_port`]).
    ///
    /// # Errors
    /// [`Error::Verb`] when the address cannot be bound (`EADDRINUSE`,
    /// `EADDRNOTAVAIL`: no RDMA device has it) or listened on.
    pub fn listen(addr: SocketAddr, backlog: i32) -> Result<Self> {
        let id = Self::bind(addr)?;
        // SAFETY: a live, bound id.
        let rc = unsafe { ffi::rdma_listen(id.raw(), backlog) };
        crate::error::check("rdma_listen", rc)?;
        Ok(id)
    }

    /// A new id bound to the local address `addr` (`rdma_bind_addr`): it
    /// is then on the device that has the address ([`CmId::device_name`];
    /// none for an address no RDMA device has, e.g. a wildcard).
    ///
    /// # Errors
    /// [`Error::Verb`] when the address cannot be bound (`EADDRINUSE`,
    /// `EADDRNOTAVAIL`).
    pub fn bind(addr: SocketAddr) -> Result<Self> {
        let id = Self::new()?;
        let mut raw_addr = sockaddr_of(addr);
        // SAFETY: a live id and a valid socket address that lives across
        // the call, which copies it.
        let rc = unsafe { ffi::rdma_bind_addr(id.raw(), (&raw mut raw_addr).cast()) };
        crate::error::check("rdma_bind_addr", rc)?;
        Ok(id)
    }

    /// The id's local address (bound, resolved, or of a request: the
    /// address the peer reached), if it has one.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        // SAFETY: a live id; its route's source address is a
        // `sockaddr_storage`-sized union (family 0 until set).
        unsafe { socket_addr_at(&raw const (*self.raw()).route.addr.src_addr_union.src_addr) }
    }

    /// The id's peer address (resolved, or of a request: the peer's), if
    /// it has one.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        // SAFETY: as `local_addr`, for the destination.
        unsafe { socket_addr_at(&raw const (*self.raw()).route.addr.dst_addr_union.dst_addr) }
    }

    /// The source GID of the id's route (on RoCE the GID of its local
    /// address; all zero before the id is bound or resolved).
    pub fn source_gid(&self) -> crate::Gid {
        // SAFETY: a live id; `ibaddr` is the route's only union member.
        crate::Gid(unsafe { (*self.raw()).route.addr.addr.ibaddr.sgid.raw })
    }

    /// Turns a connection request down (`rdma_reject`, no private data).
    ///
    /// # Errors
    /// [`Error::Verb`] when librdmacm refuses.
    pub fn reject(&self) -> Result<()> {
        // SAFETY: a live id from a connection request; no private data.
        let rc = unsafe { ffi::rdma_reject(self.raw(), std::ptr::null(), 0) };
        crate::error::check("rdma_reject", rc)
    }

    /// The local port the id is bound to (host order).
    pub fn local_port(&self) -> u16 {
        // SAFETY: a live id; returns the port in network order.
        u16::from_be(unsafe { ffi::rdma_get_src_port(self.raw()) })
    }

    /// The next connection request to this listener, as an id of its own
    /// (on a channel of its own) with the peer's private data, waiting at
    /// most `timeout`.
    ///
    /// # Errors
    /// [`Error::Timeout`]; [`Error::Cm`] for another event.
    pub fn next_request(&self, timeout: Duration) -> Result<ConnectRequest> {
        let started = Instant::now();
        let event = self
            .inner
            .channel
            .next("a connection request", started, started + timeout)?;
        if event.kind != CmEventKind::ConnectRequest {
            return Err(Error::Cm {
                step: "rdma_listen",
                event: event.kind.name(),
                status: event.status,
            });
        }
        let raw = NonNull::new(event.id).ok_or_else(|| Error::Cm {
            step: "rdma_listen",
            event: "a connection request without an id".into(),
            status: 0,
        })?;
        // Owned from here: destroyed on every path below.
        let orphan = CmIdInner {
            raw,
            channel: Arc::clone(&self.inner.channel),
        };
        let channel = EventChannel::new()?;
        // SAFETY: a live id whose events are all acknowledged (`next`
        // acknowledges at once) and a live channel; afterwards its events
        // arrive on `channel`.
        let rc = unsafe { ffi::rdma_migrate_id(orphan.as_raw(), channel.raw.as_ptr()) };
        crate::error::check("rdma_migrate_id", rc)?;
        // Its events now arrive on `channel`: it holds that one instead
        // of the listener's (whose clone drops here).
        let mut owned = orphan;
        owned.channel = channel;
        Ok(ConnectRequest {
            id: Self {
                inner: Arc::new(owned),
            },
            private_data: event.private_data,
        })
    }

    /// Connects (the active side) the id's QP to the peer it resolved,
    /// waiting at most `timeout` for the connection to be established.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] without a QP; [`Error::Cm`] when the
    /// peer rejects or cannot be reached (`RDMA_CM_EVENT_REJECTED`,
    /// `_UNREACHABLE`, `_CONNECT_ERROR`); [`Error::Timeout`].
    pub fn connect(&self, params: ConnectParams, timeout: Duration) -> Result<()> {
        self.establish("rdma_connect", ffi::rdma_connect, params, timeout)
    }

    /// Accepts (the passive side) the connection this id was requested
    /// for, waiting at most `timeout` for it to be established.
    ///
    /// # Errors
    /// As [`CmId::connect`].
    pub fn accept(&self, params: ConnectParams, timeout: Duration) -> Result<()> {
        self.establish("rdma_accept", ffi::rdma_accept, params, timeout)
    }

    /// `call` (`rdma_connect` or `rdma_accept`), then the wait for
    /// `ESTABLISHED`.
    fn establish(
        &self,
        step: &'static str,
        call: unsafe extern "C" fn(*mut ffi::rdma_cm_id, *mut ffi::rdma_conn_param) -> i32,
        params: ConnectParams,
        timeout: Duration,
    ) -> Result<()> {
        self.has_qp()?;
        let started = Instant::now();
        let mut param = params.as_raw();
        // SAFETY: `call` is `rdma_connect` (on a live, resolved id) or
        // `rdma_accept` (on a live id from a connection request), each
        // with a QP (checked above); `param` is valid and lives across the
        // call, which copies it.
        let rc = unsafe { call(self.raw(), &mut param) };
        crate::error::check(step, rc)?;
        self.expect(
            CmEventKind::Established,
            step,
            "the connection to be established",
            started,
            started + timeout,
        )
    }

    fn has_qp(&self) -> Result<()> {
        if self.inner.qp().is_null() {
            return Err(Error::InvalidArgument(
                "the connection manager id has no QP: create_qp first".into(),
            ));
        }
        Ok(())
    }

    /// The device the id resolved to (`cm_id->verbs`), if resolved.
    pub fn device_name(&self) -> Option<String> {
        // SAFETY: a live id; `verbs` is null until an address is resolved
        // or bound, then a context librdmacm keeps open while the id uses
        // it, whose `device` is valid as long as the context is.
        unsafe {
            let verbs = (*self.raw()).verbs;
            if verbs.is_null() || (*verbs).device.is_null() {
                return None;
            }
            let name = ffi::ibv_get_device_name((*verbs).device);
            (!name.is_null()).then(|| CStr::from_ptr(name).to_string_lossy().into_owned())
        }
    }

    /// The port the id resolved to (`cm_id->port_num`; 0 before).
    pub fn port(&self) -> u8 {
        // SAFETY: a live id; reading a plain integer field.
        unsafe { (*self.raw()).port_num }
    }
}

/// How long the kernel may try to resolve an address in attempt
/// `attempt` (0-based) with `remaining` of the budget left: 250 ms,
/// doubling to 2 s, never past the budget (see [`CmId::resolve`]).
fn resolve_attempt(attempt: u32, remaining: Duration) -> Duration {
    let step = Duration::from_millis(250) * (1u32 << attempt.min(3));
    step.min(remaining)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_attempts_grow_from_a_quarter_second_to_two_and_stay_in_the_budget() {
        let ms = |a, left| resolve_attempt(a, Duration::from_millis(left)).as_millis();
        let steps: Vec<u128> = (0..6).map(|a| ms(a, 60_000)).collect();
        assert_eq!(steps, [250, 500, 1000, 2000, 2000, 2000]);
        assert_eq!(ms(0, 100), 100);
        assert_eq!(ms(5, 1500), 1500);
        assert_eq!(ms(u32::MAX, 60_000), 2000);
    }

    #[test]
    fn event_kinds_map_both_ways_and_carry_librdmacm_names() {
        use ffi::rdma_cm_event_type as t;
        for (code, kind) in [
            (t::RDMA_CM_EVENT_ADDR_RESOLVED, CmEventKind::AddrResolved),
            (t::RDMA_CM_EVENT_ADDR_ERROR, CmEventKind::AddrError),
            (t::RDMA_CM_EVENT_ROUTE_ERROR, CmEventKind::RouteError),
            (t::RDMA_CM_EVENT_REJECTED, CmEventKind::Rejected),
            (t::RDMA_CM_EVENT_ESTABLISHED, CmEventKind::Established),
            (t::RDMA_CM_EVENT_TIMEWAIT_EXIT, CmEventKind::TimewaitExit),
        ] {
            assert_eq!(CmEventKind::from_raw(code), kind);
        }
        assert_eq!(CmEventKind::AddrError.name(), "RDMA_CM_EVENT_ADDR_ERROR");
        assert_eq!(CmEventKind::from_raw(99), CmEventKind::Other(99));
    }

    #[test]
    fn socket_addresses_are_laid_out_as_the_kernel_reads_them() {
        let v4 = sockaddr_of("169.254.2.1:18515".parse().unwrap());
        // SAFETY: test-only read of the `sockaddr_in` just written.
        let sin: libc::sockaddr_in = unsafe { std::ptr::read((&raw const v4).cast()) };
        assert_eq!(i32::from(sin.sin_family), libc::AF_INET);
        assert_eq!(u16::from_be(sin.sin_port), 18515);
        assert_eq!(sin.sin_addr.s_addr.to_ne_bytes(), [169, 254, 2, 1]);
        let v6 = sockaddr_of("[fe80::1%3]:7".parse().unwrap());
        // SAFETY: as above, a `sockaddr_in6`.
        let sin6: libc::sockaddr_in6 = unsafe { std::ptr::read((&raw const v6).cast()) };
        assert_eq!(i32::from(sin6.sin6_family), libc::AF_INET6);
        assert_eq!(u16::from_be(sin6.sin6_port), 7);
        assert_eq!(sin6.sin6_scope_id, 3);
        assert_eq!(sin6.sin6_addr.s6_addr[0..2], [0xfe, 0x80]);
    }
}
