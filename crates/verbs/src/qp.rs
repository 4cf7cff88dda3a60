//! Reliable-connected queue pairs: creation, connection (INIT → RTR → RTS)
//! and posting work requests.

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_sys as ffi;

use crate::context::{Gid, Mtu};
use crate::cq::CompletionQueue;
use crate::error::{Error, Result, check_ptr, errno_of};
use crate::mr::{AccessFlags, LocalSge};
use crate::pd::ProtectionDomain;
use crate::prepared::PreparedSends;
use crate::wr::{RecvBatch, SendBatch, SendWr};
use crate::wr_ex;

/// How a queue pair posts send work requests.
///
/// perftest posts through the `ibv_wr_*` builders by default and keeps
/// `ibv_post_send` behind `--use_old_post_send`; both post the same work.
/// [`ProtectionDomain::create_rc_qp_on`] asks for one, and
/// [`QueuePair::post_path`] says which one a queue pair got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PostPath {
    /// `ibv_post_send` with a linked list of `ibv_send_wr`.
    #[default]
    Classic,
    /// `ibv_wr_start`, one `ibv_wr_*` builder and data setter per request
    /// (`qpx->wr_id` and `qpx->wr_flags` set for each), `ibv_wr_complete`,
    /// on a QP created by `ibv_create_qp_ex` with the send ops of every
    /// [`crate::Op`].
    Extended,
}

impl fmt::Display for PostPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Classic => "ibv_post_send",
            Self::Extended => "ibv_wr_*",
        })
    }
}

/// The send ops an extended QP is created with: every [`crate::Op`].
const SEND_OPS: u64 = {
    use ffi::ibv_qp_create_send_ops_flags as f;
    (f::IBV_QP_EX_WITH_RDMA_WRITE.0
        | f::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM.0
        | f::IBV_QP_EX_WITH_RDMA_READ.0
        | f::IBV_QP_EX_WITH_SEND.0
        | f::IBV_QP_EX_WITH_SEND_WITH_IMM.0
        | f::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD.0
        | f::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP.0) as u64
};

/// Queue sizes and limits of a queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuePairCaps {
    /// Send queue depth (outstanding send work requests).
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send work request.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive work request.
    pub max_recv_sge: u32,
    /// Largest inline payload in bytes.
    pub max_inline_data: u32,
}

impl Default for QueuePairCaps {
    /// perftest's write_bw defaults: 128 deep, one SGE, no inline.
    fn default() -> Self {
        Self {
            max_send_wr: 128,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }
    }
}

impl QueuePairCaps {
    fn to_raw(self) -> ffi::ibv_qp_cap {
        ffi::ibv_qp_cap {
            max_send_wr: self.max_send_wr,
            max_recv_wr: self.max_recv_wr,
            max_send_sge: self.max_send_sge,
            max_recv_sge: self.max_recv_sge,
            max_inline_data: self.max_inline_data,
        }
    }

    fn from_raw(raw: &ffi::ibv_qp_cap) -> Self {
        Self {
            max_send_wr: raw.max_send_wr,
            max_recv_wr: raw.max_recv_wr,
            max_send_sge: raw.max_send_sge,
            max_recv_sge: raw.max_recv_sge,
            max_inline_data: raw.max_inline_data,
        }
    }
}

/// What a peer needs to connect to a queue pair: exchanged out of band.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// Queue pair number (24 bits).
    pub qpn: u32,
    /// Initial packet sequence number of the sender (24 bits).
    pub psn: u32,
    /// Local identifier of the port (0 on RoCE).
    pub lid: u16,
    /// GID of the chosen index (all-zero when not used, on InfiniBand
    /// without a GRH).
    pub gid: Gid,
}

/// Local side of a connection: which port and GID to use and the
/// transport parameters. Defaults follow perftest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectOptions {
    /// Local port (1-based).
    pub port: u8,
    /// Local GID index; required on RoCE, optional (GRH) on InfiniBand.
    pub gid_index: Option<u32>,
    /// Path MTU; must not exceed the port's active MTU.
    pub mtu: Mtu,
    /// Our send-queue PSN (24 bits); the peer's `Endpoint::psn` must equal
    /// it.
    pub psn: u32,
    /// Local ACK timeout exponent, 4.096 µs × 2^timeout (0..=31).
    pub timeout: u8,
    /// Transport retries (0..=7).
    pub retry_cnt: u8,
    /// Receiver-not-ready retries (0..=7, 7 = infinite).
    pub rnr_retry: u8,
    /// Minimum RNR NAK timer code (0..=31).
    pub min_rnr_timer: u8,
    /// GRH hop limit (1..=255).
    pub hop_limit: u8,
    /// GRH traffic class (the DSCP and ECN bits on RoCE).
    pub traffic_class: u8,
    /// GRH flow label (20 bits).
    pub flow_label: u32,
    /// Service level.
    pub service_level: u8,
    /// Index into the port's P_Key table.
    pub pkey_index: u16,
    /// What the peer may do to our memory through this QP (add
    /// [`AccessFlags::REMOTE_ATOMIC`] to be the target of atomics).
    pub access: AccessFlags,
    /// RDMA READs and atomics this QP may have outstanding as initiator
    /// (`max_rd_atomic`, set at RTS; perftest's `-o/--outs`). At least 1,
    /// at most the device's `max_qp_init_rd_atom`.
    pub max_rd_atomic: u8,
    /// RDMA READs and atomics the peer may have outstanding against this
    /// QP (`max_dest_rd_atomic`, set at RTR). At least 1, at most the
    /// device's `max_qp_rd_atom`; should be at least the peer's
    /// `max_rd_atomic`.
    pub max_dest_rd_atomic: u8,
}

/// A connected QP's path, read back from the device ([`QueuePair::path`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathAttr {
    /// Service level.
    pub service_level: u8,
    /// Whether packets carry a GRH (RoCE always; InfiniBand with a GID
    /// index); the next three fields mean something only then.
    pub global: bool,
    /// GRH traffic class.
    pub traffic_class: u8,
    /// GRH flow label.
    pub flow_label: u32,
    /// GRH hop limit.
    pub hop_limit: u8,
    /// P_Key index.
    pub pkey_index: u16,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            port: 1,
            gid_index: None,
            mtu: Mtu::Mtu1024,
            psn: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            service_level: 0,
            pkey_index: 0,
            access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
        }
    }
}

/// Queue pair state (`ibv_qp_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    /// Freshly created.
    Reset,
    /// Initialised.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drain.
    Sqd,
    /// Send queue error.
    Sqe,
    /// Error: work is flushed.
    Err,
    /// A value this crate does not know.
    Unknown(u32),
}

impl QpState {
    fn from_raw(raw: u32) -> Self {
        use ffi::ibv_qp_state as s;
        match raw {
            s::IBV_QPS_RESET => Self::Reset,
            s::IBV_QPS_INIT => Self::Init,
            s::IBV_QPS_RTR => Self::Rtr,
            s::IBV_QPS_RTS => Self::Rts,
            s::IBV_QPS_SQD => Self::Sqd,
            s::IBV_QPS_SQE => Self::Sqe,
            s::IBV_QPS_ERR => Self::Err,
            other => Self::Unknown(other),
        }
    }
}

/// A created QP: its handle, its extended view when it posts through
/// `ibv_wr_*`, and the caps the create verb wrote back.
type Created = (
    NonNull<ffi::ibv_qp>,
    Option<NonNull<ffi::ibv_qp_ex>>,
    ffi::ibv_qp_cap,
);

const PSN_MASK: u32 = 0x00ff_ffff;

/// Attempts at the RTR transition when address resolution times out.
const RTR_ATTEMPTS: u32 = 4;

/// A reliable-connected queue pair.
///
/// Owns the `ibv_qp` and keeps its protection domain and both completion
/// queues alive (a CQ cannot be destroyed while a QP uses it). Drop destroys
/// the QP first, then releases the parents.
///
/// # Thread safety
/// `Send + Sync`: libibverbs serialises posting on one QP internally, so
/// several threads may post; the usual design is one QP per thread.
pub struct QueuePair {
    // Field order does not matter for destruction: `Drop` destroys `raw`
    // before any field (and so any parent) is released.
    raw: NonNull<ffi::ibv_qp>,
    /// The extended view of `raw` (inside the same provider object, freed
    /// with it) when posts go through `ibv_wr_*`: set only for a QP made by
    /// `ibv_create_qp_ex` with [`SEND_OPS`] whose provider filled every
    /// builder the extended path calls ([`wr_ex::has_builders`]).
    ex: Option<NonNull<ffi::ibv_qp_ex>>,
    caps: QueuePairCaps,
    device: String,
    pd: ProtectionDomain,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    /// For a QP librdmacm created on a connection-manager id
    /// (`rdma_create_qp`): that id, destroyed after the QP
    /// (`rdma_destroy_qp` clears the id's pointer to it).
    cm: Option<Arc<crate::cm::CmIdInner>>,
}

// SAFETY: see the type's thread-safety section: libibverbs allows every
// verb on a QP from any thread (the `ibv_wr_*` critical section included:
// the provider locks it); the pointers are freed only in `Drop`.
unsafe impl Send for QueuePair {}
// SAFETY: as for `Send`; `&self` methods are verbs libibverbs makes safe
// to call concurrently.
unsafe impl Sync for QueuePair {}

impl fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueuePair")
            .field("device", &self.device)
            .field("qpn", &format_args!("{:#x}", self.qpn()))
            .field("caps", &self.caps)
            .field("post_path", &self.post_path())
            .finish()
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        if let Some(id) = &self.cm {
            // SAFETY: this QP is `id`'s (`create_on_cm`), destroyed once,
            // here, with the id still alive (held by `self.cm`); the PD
            // and CQs are fields, still alive.
            unsafe { ffi::rdma_destroy_qp(id.as_raw()) };
            return;
        }
        // SAFETY: `raw` came from `ibv_create_qp` or `ibv_create_qp_ex`
        // and is destroyed once (`ex`, part of the same object, is not used
        // after);
        // the PD and CQs are fields, still alive here. Outstanding work is
        // flushed by the provider.
        let rc = unsafe { ffi::ibv_destroy_qp(self.raw.as_ptr()) };
        crate::drop_failed("ibv_destroy_qp", rc);
    }
}

impl QueuePair {
    pub(crate) fn create_rc(
        pd: ProtectionDomain,
        send_cq: CompletionQueue,
        recv_cq: CompletionQueue,
        caps: &QueuePairCaps,
        path: PostPath,
    ) -> Result<Self> {
        refuse_empty_send_queue(caps)?;
        let created = match path {
            PostPath::Extended => Self::create_ex(&pd, &send_cq, &recv_cq, caps)?,
            PostPath::Classic => None,
        };
        let (raw, ex, granted) = match created {
            Some(created) => created,
            None => {
                let mut init = rc_init_attr(&send_cq, &recv_cq, caps);
                // SAFETY: valid PD and CQs (all held by the returned
                // value); `init` is a valid attribute block the verb reads
                // and updates.
                let raw = check_ptr("ibv_create_qp", unsafe {
                    ffi::ibv_create_qp(pd.as_raw(), &mut init)
                })?;
                (raw, None, init.cap)
            }
        };
        let device = pd.context().name().to_owned();
        let mut qp = Self {
            raw,
            ex,
            caps: QueuePairCaps::from_raw(&granted),
            device,
            pd,
            send_cq,
            recv_cq,
            cm: None,
        };
        // `ibv_create_qp` writes back inline/SGE caps but may leave the
        // depths as requested; `ibv_query_qp` reports what was allocated.
        let (attr, _) = qp.query(ffi::ibv_qp_attr_mask::IBV_QP_CAP)?;
        qp.caps = QueuePairCaps {
            max_send_wr: attr.cap.max_send_wr.max(caps.max_send_wr),
            max_recv_wr: attr.cap.max_recv_wr.max(caps.max_recv_wr),
            max_send_sge: attr.cap.max_send_sge.max(qp.caps.max_send_sge),
            max_recv_sge: attr.cap.max_recv_sge.max(qp.caps.max_recv_sge),
            max_inline_data: qp.caps.max_inline_data,
        };
        Ok(qp)
    }

    /// A reliable-connected QP that librdmacm creates on `id`
    /// (`rdma_create_qp`), posting through `ibv_post_send`; the connection
    /// manager moves it to RTS when the id connects.
    pub(crate) fn create_on_cm(
        id: Arc<crate::cm::CmIdInner>,
        pd: ProtectionDomain,
        send_cq: CompletionQueue,
        recv_cq: CompletionQueue,
        caps: &QueuePairCaps,
    ) -> Result<Self> {
        refuse_empty_send_queue(caps)?;
        if id.verbs() != Some(pd.context().as_raw()) {
            return Err(Error::InvalidArgument(
                "the protection domain belongs to another device context than the \
                 connection manager id's"
                    .into(),
            ));
        }
        let mut init = rc_init_attr(&send_cq, &recv_cq, caps);
        // SAFETY: a live id resolved to the PD's device (checked above),
        // live PD and CQs (held by the returned value), and a valid
        // attribute block the call reads and updates.
        let rc = unsafe { ffi::rdma_create_qp(id.as_raw(), pd.as_raw(), &mut init) };
        crate::error::check("rdma_create_qp", rc)?;
        let raw = check_ptr("rdma_create_qp", id.qp())?;
        let device = pd.context().name().to_owned();
        Ok(Self {
            raw,
            ex: None,
            caps: QueuePairCaps::from_raw(&init.cap),
            device,
            pd,
            send_cq,
            recv_cq,
            cm: Some(id),
        })
    }

    /// Creates the QP with `ibv_create_qp_ex` and the send ops of every
    /// [`crate::Op`], through the context's extended op table. `Ok(None)`
    /// when that path is not there: no extended table or no
    /// `create_qp_ex` in it, or the provider answers `EOPNOTSUPP` (e.g. it
    /// takes no `send_ops_flags`); the caller then creates a classic QP.
    /// The QP it returns posts through `ibv_wr_*` only if
    /// `ibv_qp_to_qp_ex` gives its extended view and the provider filled
    /// every builder used; otherwise it is returned without one and posts
    /// classically (`ibv_post_send` works on any QP).
    fn create_ex(
        pd: &ProtectionDomain,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        caps: &QueuePairCaps,
    ) -> Result<Option<Created>> {
        let ctx = pd.context();
        let Some(create) = ctx.verbs_context().and_then(|v| v.create_qp_ex()) else {
            return Ok(None);
        };
        use ffi::ibv_qp_init_attr_mask as mask;
        // SAFETY: plain old data; all-zero is valid (null pointers, no
        // optional member asked for beyond `comp_mask`).
        let mut init: ffi::ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
        init.send_cq = send_cq.as_raw();
        init.recv_cq = recv_cq.as_raw();
        init.cap = caps.to_raw();
        init.qp_type = ffi::ibv_qp_type::IBV_QPT_RC;
        init.sq_sig_all = 0;
        init.comp_mask = (mask::IBV_QP_INIT_ATTR_PD | mask::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS).0;
        init.pd = pd.as_raw();
        init.send_ops_flags = SEND_OPS;
        // SAFETY: `create` is the context's own `create_qp_ex` (found by
        // `VerbsContext`, valid while the context is open, which `pd`
        // keeps it); the context, PD and CQs are live and held by the
        // returned value; `init` is a fully initialised attribute block of
        // the bindings' size whose `comp_mask` names only members set
        // here, and lives across the call, which reads it and writes back
        // the granted caps.
        let raw = unsafe { create(ctx.as_raw(), &mut init) };
        let raw = match check_ptr("ibv_create_qp_ex", raw) {
            Ok(raw) => raw,
            Err(Error::Unsupported { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        // SAFETY: `raw` is a live QP just created by libibverbs; the call
        // only looks at it.
        let qpx = unsafe { ffi::ibv_qp_to_qp_ex(raw.as_ptr()) };
        let ex = NonNull::new(qpx).filter(|&qpx| {
            // SAFETY: a non-null `ibv_qp_to_qp_ex` result is the live
            // extended view of `raw`.
            unsafe { wr_ex::has_builders(qpx) }
        });
        Ok(Some((raw, ex, init.cap)))
    }

    /// Whether send work requests go through `ibv_post_send` or the
    /// `ibv_wr_*` builders. A QP asked for on [`PostPath::Extended`] is
    /// [`PostPath::Classic`] when the device or its provider has no
    /// extended path (see [`ProtectionDomain::create_rc_qp_on`]).
    pub fn post_path(&self) -> PostPath {
        if self.ex.is_some() {
            PostPath::Extended
        } else {
            PostPath::Classic
        }
    }

    /// Queue pair number.
    pub fn qpn(&self) -> u32 {
        // SAFETY: valid QP until drop; `qp_num` is set at creation.
        unsafe { self.raw.as_ref().qp_num }
    }

    /// The granted queue sizes and inline limit.
    pub fn caps(&self) -> QueuePairCaps {
        self.caps
    }

    /// The protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// The send completion queue.
    pub fn send_cq(&self) -> &CompletionQueue {
        &self.send_cq
    }

    /// The receive completion queue.
    pub fn recv_cq(&self) -> &CompletionQueue {
        &self.recv_cq
    }

    /// The raw `ibv_qp`; valid as long as `self` is.
    pub fn as_raw(&self) -> *mut ffi::ibv_qp {
        self.raw.as_ptr()
    }

    fn query(
        &self,
        mask: ffi::ibv_qp_attr_mask,
    ) -> Result<(ffi::ibv_qp_attr, ffi::ibv_qp_init_attr)> {
        // SAFETY: plain old data; all-zero is valid.
        let mut attr: ffi::ibv_qp_attr = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut init: ffi::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        // SAFETY: valid QP and out-pointers.
        let rc = unsafe { ffi::ibv_query_qp(self.as_raw(), &mut attr, mask.0 as i32, &mut init) };
        crate::error::check("ibv_query_qp", rc)?;
        Ok((attr, init))
    }

    /// Current state, from `ibv_query_qp`.
    ///
    /// # Errors
    /// [`Error::Verb`] naming `ibv_query_qp`.
    #[doc(alias = "ibv_query_qp")]
    pub fn state(&self) -> Result<QpState> {
        let (attr, _) = self.query(ffi::ibv_qp_attr_mask::IBV_QP_STATE)?;
        Ok(QpState::from_raw(attr.qp_state))
    }

    /// The path a connected QP uses, as the device reports it
    /// (`ibv_query_qp`). A device reports what it keeps: soft-RoCE keeps
    /// no service level (RoCE packets carry none) and reports 0.
    ///
    /// # Errors
    /// [`Error::Verb`] naming `ibv_query_qp`.
    #[doc(alias = "ibv_query_qp")]
    pub fn path(&self) -> Result<PathAttr> {
        use ffi::ibv_qp_attr_mask as m;
        let (attr, _) = self.query(m::IBV_QP_AV | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PATH_MTU)?;
        let global = attr.ah_attr.is_global != 0;
        Ok(PathAttr {
            service_level: attr.ah_attr.sl,
            global,
            traffic_class: attr.ah_attr.grh.traffic_class,
            flow_label: attr.ah_attr.grh.flow_label,
            hop_limit: attr.ah_attr.grh.hop_limit,
            pkey_index: attr.pkey_index,
        })
    }

    /// This QP's endpoint for the peer: QPN, `psn`, and the LID and GID of
    /// `port`/`gid_index` (GID all-zero when `gid_index` is `None`).
    ///
    /// # Errors
    /// [`Error::NoSuchPort`], [`Error::NoSuchGid`] or [`Error::Verb`].
    pub fn endpoint(&self, port: u8, gid_index: Option<u32>, psn: u32) -> Result<Endpoint> {
        let ctx = self.pd.context();
        let port_attr = ctx.query_port(port)?;
        let gid = match gid_index {
            Some(i) => ctx.gid(port, i)?.gid,
            None => Gid::default(),
        };
        Ok(Endpoint {
            qpn: self.qpn(),
            psn: psn & PSN_MASK,
            lid: port_attr.lid,
            gid,
        })
    }

    fn modify(
        &mut self,
        attr: &mut ffi::ibv_qp_attr,
        mask: u32,
        target: &'static str,
    ) -> Result<()> {
        // SAFETY: valid QP; `attr` is a fully initialised attribute block
        // and `mask` names only fields we set.
        let rc = unsafe { ffi::ibv_modify_qp(self.as_raw(), attr, mask as i32) };
        if rc == 0 {
            Ok(())
        } else {
            Err(Error::ModifyQp {
                target,
                qpn: self.qpn(),
                os_error: std::io::Error::from_raw_os_error(errno_of(rc)),
            })
        }
    }

    /// Checks the options against the device and the peer before touching
    /// the QP: rxe forgives a path MTU above the active MTU, a zero hop
    /// limit and zero outstanding reads/atomics, real NICs do not, so they
    /// are refused here.
    fn validate(&self, opts: &ConnectOptions, remote: &Endpoint) -> Result<bool> {
        let ctx = self.pd.context();
        let port = ctx.query_port(opts.port)?;
        if opts.mtu > port.active_mtu {
            return Err(Error::InvalidArgument(format!(
                "path MTU {} exceeds the active MTU {} of {} port {}",
                opts.mtu,
                port.active_mtu,
                ctx.name(),
                opts.port
            )));
        }
        let global = port.link_layer.is_ethernet() || opts.gid_index.is_some();
        if global {
            let Some(gid_index) = opts.gid_index else {
                return Err(Error::InvalidArgument(format!(
                    "{} port {} is RoCE (Ethernet link layer): a GID index is required",
                    ctx.name(),
                    opts.port
                )));
            };
            ctx.gid(opts.port, gid_index)?;
            if remote.gid.is_zero() {
                return Err(Error::InvalidArgument(format!(
                    "peer QPN {:#x} sent an all-zero GID; a global route needs its GID",
                    remote.qpn
                )));
            }
            if opts.hop_limit == 0 {
                return Err(Error::InvalidArgument(
                    "GRH hop limit must be at least 1".into(),
                ));
            }
        }
        let checks = [
            (opts.timeout <= 31, "ACK timeout exponent must be 0..=31"),
            (opts.retry_cnt <= 7, "retry count must be 0..=7"),
            (opts.rnr_retry <= 7, "RNR retry count must be 0..=7"),
            (opts.min_rnr_timer <= 31, "minimum RNR timer must be 0..=31"),
            (opts.service_level <= 15, "service level must be 0..=15"),
            (
                opts.flow_label <= 0xF_FFFF,
                "flow label must fit in 20 bits",
            ),
            (remote.qpn <= PSN_MASK, "peer QPN must fit in 24 bits"),
        ];
        if let Some((_, msg)) = checks.iter().find(|(ok, _)| !ok) {
            return Err(Error::InvalidArgument((*msg).into()));
        }
        let dev = ctx.query_device()?;
        check_rd_atomic(opts, &dev, ctx.name())?;
        Ok(global)
    }

    /// Moves a fresh queue pair RESET → INIT → RTR → RTS, connected to
    /// `remote`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for options the hardware would refuse
    /// (MTU above the active MTU, missing GID on RoCE, out-of-range timers,
    /// `max_rd_atomic`/`max_dest_rd_atomic` of 0 or above the device's
    /// limits), with the QP untouched;
    /// [`Error::NoSuchPort`]/[`Error::NoSuchGid`]; [`Error::ModifyQp`]
    /// naming the state that could not be reached.
    #[doc(alias = "ibv_modify_qp")]
    pub fn connect(&mut self, opts: &ConnectOptions, remote: &Endpoint) -> Result<()> {
        use ffi::ibv_qp_attr_mask as m;
        let global = self.validate(opts, remote)?;

        // SAFETY: plain old data; all-zero is valid.
        let mut attr: ffi::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ffi::ibv_qp_state::IBV_QPS_INIT;
        attr.pkey_index = opts.pkey_index;
        attr.port_num = opts.port;
        attr.qp_access_flags = opts.access.bits();
        let mask = m::IBV_QP_STATE | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PORT | m::IBV_QP_ACCESS_FLAGS;
        self.modify(&mut attr, mask.0, "INIT")?;

        // SAFETY: as above.
        let mut attr: ffi::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ffi::ibv_qp_state::IBV_QPS_RTR;
        attr.path_mtu = opts.mtu.to_raw();
        attr.dest_qp_num = remote.qpn;
        attr.rq_psn = remote.psn & PSN_MASK;
        attr.max_dest_rd_atomic = opts.max_dest_rd_atomic;
        attr.min_rnr_timer = opts.min_rnr_timer;
        attr.ah_attr.dlid = remote.lid;
        attr.ah_attr.sl = opts.service_level;
        attr.ah_attr.port_num = opts.port;
        if global {
            attr.ah_attr.is_global = 1;
            attr.ah_attr.grh.dgid = remote.gid.to_raw();
            attr.ah_attr.grh.sgid_index = u8::try_from(opts.gid_index.unwrap_or(0))
                .map_err(|_| Error::InvalidArgument("GID index must be 0..=255".into()))?;
            attr.ah_attr.grh.hop_limit = opts.hop_limit;
            attr.ah_attr.grh.traffic_class = opts.traffic_class;
            attr.ah_attr.grh.flow_label = opts.flow_label;
        }
        let mask = m::IBV_QP_STATE
            | m::IBV_QP_AV
            | m::IBV_QP_PATH_MTU
            | m::IBV_QP_DEST_QPN
            | m::IBV_QP_RQ_PSN
            | m::IBV_QP_MAX_DEST_RD_ATOMIC
            | m::IBV_QP_MIN_RNR_TIMER;
        // On RoCE the kernel resolves the peer's MAC during this transition
        // (ARP/ND with a 1 s timer); a busy host or a cold neighbour cache
        // can time it out. The QP stays in INIT then, so retrying is valid.
        let mut attempt = 1;
        loop {
            match self.modify(&mut attr, mask.0, "RTR") {
                Err(Error::ModifyQp { ref os_error, .. })
                    if attempt < RTR_ATTEMPTS
                        && os_error.raw_os_error() == Some(libc::ETIMEDOUT) =>
                {
                    attempt += 1;
                }
                other => break other?,
            }
        }

        // SAFETY: as above.
        let mut attr: ffi::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ffi::ibv_qp_state::IBV_QPS_RTS;
        attr.timeout = opts.timeout;
        attr.retry_cnt = opts.retry_cnt;
        attr.rnr_retry = opts.rnr_retry;
        attr.sq_psn = opts.psn & PSN_MASK;
        attr.max_rd_atomic = opts.max_rd_atomic;
        let mask = m::IBV_QP_STATE
            | m::IBV_QP_TIMEOUT
            | m::IBV_QP_RETRY_CNT
            | m::IBV_QP_RNR_RETRY
            | m::IBV_QP_SQ_PSN
            | m::IBV_QP_MAX_QP_RD_ATOMIC;
        self.modify(&mut attr, mask.0, "RTS")
    }

    #[inline]
    fn check_inline(&self, inline: bool, length: u32) -> Result<()> {
        if inline && length > self.caps.max_inline_data {
            return Err(inline_too_long(length, self.caps.max_inline_data));
        }
        Ok(())
    }

    /// Posts one send work request (RDMA WRITE, READ, SEND or an atomic),
    /// with `ibv_post_send` or, on the [`PostPath::Extended`] path, inside
    /// one `ibv_wr_start`/`ibv_wr_complete` (the same request either way).
    ///
    /// # Safety
    /// The memory `wr.local` names must stay allocated and registered (its
    /// [`crate::MemoryRegion`] alive) until the request's completion, or
    /// that of a later signaled request on this QP, has been polled, or
    /// the QP has been destroyed:
    /// - WRITE and SEND (unless inline, when the payload is copied at post
    ///   time and the memory is free at once): the device *reads* it, so
    ///   bytes changed meanwhile may go out old or new.
    /// - READ and the atomics: the device *writes* it (`local.length`
    ///   bytes; 8 for an atomic). It must be registered with
    ///   [`crate::AccessFlags::LOCAL_WRITE`] (else the completion reports
    ///   a local protection error), and until the completion Rust code may
    ///   access it only in ways that tolerate a concurrent foreign write:
    ///   no reference to it may exist and no non-atomic access may happen.
    ///   A `MemoryRegion`'s own accessors always satisfy this.
    ///
    /// The remote side is the peer's business: a bad rkey, range or right
    /// ends in an error completion, not in local memory unsafety.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], with nothing posted, for an inline
    /// payload above the QP's inline limit, an inline READ or atomic, or an
    /// atomic whose local entry is not 8 bytes or whose remote address is
    /// not 8-byte aligned; [`Error::Post`] when `ibv_post_send` (or
    /// `ibv_wr_complete`) refuses (e.g. `ENOMEM` when the send queue is
    /// full).
    #[inline]
    #[doc(alias = "ibv_post_send")]
    #[doc(alias = "ibv_wr_start")]
    pub unsafe fn post_send(&self, wr: &SendWr) -> Result<()> {
        if let Some(why) = wr.refusal() {
            return Err(refused(why));
        }
        self.check_inline(wr.inline, wr.local.length)?;
        let (mut raw, mut sge) = wr.raw_parts();
        if let Some(qpx) = self.ex {
            // SAFETY: `qpx` is this QP's live extended view, created with
            // the send ops of every `Op` and checked by `has_builders`
            // (`ex`'s invariant); the request passed the checks above; the
            // caller upholds the contract on the memory `wr.local` names.
            let rc = unsafe {
                wr_ex::post_list(qpx, std::slice::from_ref(&raw), std::slice::from_ref(&sge))
            };
            if rc != 0 {
                return Err(self.post_failed("ibv_wr_complete", rc));
            }
            return Ok(());
        }
        raw.sg_list = &mut sge;
        let mut bad = std::ptr::null_mut();
        // SAFETY: valid QP (alive while `self` is); `raw` is one fully
        // initialised request (`next` null, `sg_list` pointing at `sge`,
        // `num_sge` 0 or 1), and both live across the call, which copies
        // them into the send queue before returning. The request passed the
        // checks above, so the device writes at most `wr.local` (8 bytes
        // for an atomic); the caller upholds the contract on that memory.
        let rc = unsafe { ffi::ibv_post_send(self.as_raw(), &mut raw, &mut bad) };
        if rc != 0 {
            return Err(self.post_failed("ibv_post_send", rc));
        }
        Ok(())
    }

    /// Posts every work request of `batch` with one `ibv_post_send`, or,
    /// on the [`PostPath::Extended`] path, inside one
    /// `ibv_wr_start`/`ibv_wr_complete`.
    ///
    /// # Safety
    /// As for [`QueuePair::post_send`], for every request in the batch.
    ///
    /// # Errors
    /// As for [`QueuePair::post_send`] (a refused request refuses the whole
    /// batch, with nothing posted). On [`Error::Post`] from `ibv_post_send`
    /// some leading requests may have been posted (libibverbs reports the
    /// first bad one); treat the QP as unusable. `ibv_wr_complete` posts
    /// all or nothing.
    #[inline]
    pub unsafe fn post_batch(&self, batch: &mut SendBatch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        if let Some(why) = batch.refusal {
            return Err(refused(why));
        }
        // SAFETY: every request passed the checks `post_send` makes
        // (`refusal`, recorded at push and checked above; the inline length
        // is checked by `post_list`); `wrs[i]`/`sges[i]` are request `i`
        // as `fill` built it; the caller upholds the memory contract.
        unsafe { self.post_list(&mut batch.wrs, &mut batch.sges, batch.max_inline) }
    }

    /// Posts every work request of a [`PreparedSends`] list, as
    /// [`QueuePair::post_batch`] posts a batch.
    ///
    /// # Safety
    /// As for [`QueuePair::post_send`], for every request in the list.
    ///
    /// # Errors
    /// As for [`QueuePair::post_batch`].
    #[inline]
    pub unsafe fn post_prepared(&self, list: &mut PreparedSends) -> Result<()> {
        // SAFETY: `PreparedSends::new` refused a template `post_send` would
        // refuse, and `set` keeps each request that template at another
        // offset (atomics aligned), so each request passes `post_send`'s
        // checks but the inline length, which `post_list` checks; the
        // caller upholds the memory contract.
        unsafe { self.post_list(&mut list.wrs, &mut list.sges, list.max_inline) }
    }

    /// Posts `wrs[i]` with `sges[i]`, all together.
    ///
    /// # Safety
    /// Every request passed the checks [`QueuePair::post_send`] makes but
    /// the inline length (checked here against `max_inline`, the longest
    /// inline payload among them), `wrs[i]` is request `i` as `fill` built
    /// it with its SGE in `sges[i]`, and the caller upholds `post_send`'s
    /// memory contract for each.
    #[inline]
    unsafe fn post_list(
        &self,
        wrs: &mut [ffi::ibv_send_wr],
        sges: &mut [ffi::ibv_sge],
        max_inline: u32,
    ) -> Result<()> {
        self.check_inline(true, max_inline)?;
        if let Some(qpx) = self.ex {
            // SAFETY: `qpx` is this QP's live extended view (`ex`'s
            // invariant: created with the send ops of every `Op` and
            // checked by `has_builders`); the requests are as the caller
            // promises, the inline length checked above.
            let rc = unsafe { wr_ex::post_list(qpx, wrs, sges) };
            if rc != 0 {
                return Err(self.post_failed("ibv_wr_complete", rc));
            }
            return Ok(());
        }
        let head = link_list(wrs, sges);
        let mut bad = std::ptr::null_mut();
        // SAFETY: valid QP; `head` heads a list of the requests, request
        // `i` linked to `i + 1` and the last to null (`link_list`), each
        // pointing at its own initialised SGE; all are borrowed across the
        // call, which copies them before returning. The requests are as
        // the caller promises, the inline length checked above.
        let rc = unsafe { ffi::ibv_post_send(self.as_raw(), head, &mut bad) };
        if rc != 0 {
            return Err(self.post_failed("ibv_post_send", rc));
        }
        Ok(())
    }

    /// Posts a receive (`local` may be `None` for a zero-length receive,
    /// e.g. the one RDMA WRITE with immediate consumes).
    ///
    /// # Safety
    /// The device *writes* the memory `local` names when a message
    /// arrives: it must be registered with
    /// [`crate::AccessFlags::LOCAL_WRITE`] and stay allocated and
    /// registered until the receive's completion has been polled (or the
    /// QP destroyed), and until then Rust code may access it only in ways
    /// that tolerate a concurrent foreign write (no reference to it, no
    /// non-atomic access; a [`crate::MemoryRegion`]'s accessors always
    /// qualify).
    ///
    /// # Errors
    /// [`Error::Post`] when `ibv_post_recv` refuses.
    #[doc(alias = "ibv_post_recv")]
    pub unsafe fn post_recv(&self, wr_id: u64, local: Option<LocalSge>) -> Result<()> {
        let mut sge = local.map(LocalSge::to_raw);
        let mut wr = ffi::ibv_recv_wr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: sge
                .as_mut()
                .map_or(std::ptr::null_mut(), |s| s as *mut ffi::ibv_sge),
            num_sge: i32::from(sge.is_some()),
        };
        let mut bad = std::ptr::null_mut();
        // SAFETY: valid QP; `wr` is one request (`next` null) whose
        // `sg_list` is null with `num_sge` 0 or points at `sge` with 1;
        // both live across the call, which copies them; the caller upholds
        // the contract on the memory `sge` names.
        let rc = unsafe { ffi::ibv_post_recv(self.as_raw(), &mut wr, &mut bad) };
        if rc != 0 {
            return Err(self.post_failed("ibv_post_recv", rc));
        }
        Ok(())
    }

    /// Posts every receive of `batch` with one `ibv_post_recv`.
    ///
    /// # Safety
    /// As for [`QueuePair::post_recv`], for every receive in the batch.
    ///
    /// # Errors
    /// [`Error::Post`] when `ibv_post_recv` refuses; some leading receives
    /// may have been posted then.
    #[doc(alias = "ibv_post_recv")]
    pub unsafe fn post_recv_batch(&self, batch: &mut RecvBatch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let wrs = link_list(&mut batch.wrs, &mut batch.sges);
        let mut bad = std::ptr::null_mut();
        // SAFETY: valid QP; a null-terminated list of the batch's receives
        // linked by `link_list`, each pointing at its own initialised SGE (`num_sge` 0 for
        // an empty one), alive in `batch` across the call, which copies
        // them; the caller upholds the memory contract for each.
        let rc = unsafe { ffi::ibv_post_recv(self.as_raw(), wrs, &mut bad) };
        if rc != 0 {
            return Err(self.post_failed("ibv_post_recv", rc));
        }
        Ok(())
    }

    /// Posts a zero-length receive, for the target of RDMA WRITE with
    /// immediate (the immediate consumes one receive and carries its data in
    /// the completion). Safe: it names no memory.
    ///
    /// # Errors
    /// [`Error::Post`] when `ibv_post_recv` refuses.
    pub fn post_recv_empty(&self, wr_id: u64) -> Result<()> {
        // SAFETY: no scatter/gather entry, so the device writes no memory;
        // the contract is about the memory a receive names.
        unsafe { self.post_recv(wr_id, None) }
    }

    #[cold]
    fn post_failed(&self, verb: &'static str, rc: i32) -> Error {
        Error::Post {
            verb,
            qpn: self.qpn(),
            os_error: std::io::Error::from_raw_os_error(errno_of(rc)),
        }
    }
}

/// `max_rd_atomic` and `max_dest_rd_atomic` must be at least 1 (hardware
/// refuses 0 on an RC QP that reads; rxe may not) and within the device's
/// limits (a limit reported as 0 or less is taken as unknown).
fn check_rd_atomic(
    opts: &ConnectOptions,
    dev: &crate::DeviceAttributes,
    device: &str,
) -> Result<()> {
    for (value, name, limit, limit_name, role) in [
        (
            opts.max_rd_atomic,
            "max_rd_atomic",
            dev.max_qp_init_rd_atom,
            "max_qp_init_rd_atom",
            "outstanding RDMA READs/atomics this side initiates",
        ),
        (
            opts.max_dest_rd_atomic,
            "max_dest_rd_atomic",
            dev.max_qp_rd_atom,
            "max_qp_rd_atom",
            "outstanding RDMA READs/atomics the peer may have against this side",
        ),
    ] {
        if value == 0 {
            return Err(Error::InvalidArgument(format!(
                "{name} ({role}) must be at least 1"
            )));
        }
        if limit > 0 && i32::from(value) > limit {
            return Err(Error::InvalidArgument(format!(
                "{name} {value} exceeds the {limit_name} of {limit} of {device}"
            )));
        }
    }
    Ok(())
}

/// A work request libibverbs chains through `next`, with its SGE list.
trait Chained {
    fn set_links(&mut self, sge: *mut ffi::ibv_sge, next: *mut Self);
}

impl Chained for ffi::ibv_send_wr {
    fn set_links(&mut self, sge: *mut ffi::ibv_sge, next: *mut Self) {
        self.sg_list = sge;
        self.next = next;
    }
}

impl Chained for ffi::ibv_recv_wr {
    fn set_links(&mut self, sge: *mut ffi::ibv_sge, next: *mut Self) {
        self.sg_list = sge;
        self.next = next;
    }
}

/// Points request `i` of `wrs` at SGE `i` of `sges` and at request `i + 1`
/// (the last at null), and returns the head of that list. Every pointer
/// comes from the one `as_mut_ptr` of each slice, which this call borrows
/// exclusively, so the list is valid while both stay borrowed and
/// unmoved (across the post that reads it).
///
/// # Panics
/// When the two slices differ in length (a batch out of step).
fn link_list<W: Chained>(wrs: &mut [W], sges: &mut [ffi::ibv_sge]) -> *mut W {
    assert_eq!(wrs.len(), sges.len(), "work request batch out of step");
    let n = wrs.len();
    let w = wrs.as_mut_ptr();
    let s = sges.as_mut_ptr();
    for i in 0..n {
        let next = if i + 1 < n {
            w.wrapping_add(i + 1)
        } else {
            std::ptr::null_mut()
        };
        // SAFETY: `i < n`, the length of both slices (asserted above), so
        // `w.add(i)` and `s.add(i)` are in bounds of initialised elements;
        // both slices are borrowed exclusively by this call and reached only
        // through `w` and `s` while it runs.
        unsafe { (*w.add(i)).set_links(s.add(i), next) }
    }
    w
}

/// A reliable-connected QP's creation attributes: both CQs, `caps`, and
/// completions only for signaled requests.
fn rc_init_attr(
    send_cq: &CompletionQueue,
    recv_cq: &CompletionQueue,
    caps: &QueuePairCaps,
) -> ffi::ibv_qp_init_attr {
    // SAFETY: plain old data; all-zero is valid (null pointers, no SRQ).
    let mut init: ffi::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
    init.send_cq = send_cq.as_raw();
    init.recv_cq = recv_cq.as_raw();
    init.cap = caps.to_raw();
    init.qp_type = ffi::ibv_qp_type::IBV_QPT_RC;
    init.sq_sig_all = 0;
    init
}

/// A QP needs room for at least one send work request.
fn refuse_empty_send_queue(caps: &QueuePairCaps) -> Result<()> {
    if caps.max_send_wr == 0 {
        return Err(Error::InvalidArgument(
            "queue pair send queue depth (max_send_wr) must be at least 1".into(),
        ));
    }
    Ok(())
}

#[cold]
fn inline_too_long(length: u32, max: u32) -> Error {
    Error::InvalidArgument(format!(
        "inline payload of {length} bytes exceeds the queue pair's inline limit of {max} bytes"
    ))
}

#[cold]
fn refused(why: &'static str) -> Error {
    Error::InvalidArgument(why.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(init: i32, target: i32) -> crate::DeviceAttributes {
        crate::DeviceAttributes {
            fw_ver: String::new(),
            node_guid: 0,
            vendor_id: 0,
            vendor_part_id: 0,
            max_qp: 1,
            max_qp_wr: 1,
            max_sge: 1,
            max_cq: 1,
            max_cqe: 1,
            max_mr: 1,
            max_mr_size: 1,
            max_pd: 1,
            max_qp_rd_atom: target,
            max_qp_init_rd_atom: init,
            atomic_cap: crate::AtomicCap::Hca,
            phys_port_cnt: 1,
            max_pkeys: 1,
        }
    }

    fn refusal(opts: &ConnectOptions, dev: &crate::DeviceAttributes) -> String {
        let e = check_rd_atomic(opts, dev, "mlx5_0").unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        e.to_string()
    }

    #[test]
    fn outstanding_reads_default_to_one_and_must_be_within_the_device_limits() {
        let dev = device(16, 8);
        let mut opts = ConnectOptions::default();
        assert_eq!((opts.max_rd_atomic, opts.max_dest_rd_atomic), (1, 1));
        check_rd_atomic(&opts, &dev, "mlx5_0").unwrap();
        opts.max_rd_atomic = 0;
        let e = refusal(&opts, &dev);
        assert!(
            e.contains("max_rd_atomic") && e.contains("at least 1"),
            "{e}"
        );
        opts.max_rd_atomic = 17;
        let e = refusal(&opts, &dev);
        assert!(
            e.contains("max_rd_atomic 17") && e.contains("max_qp_init_rd_atom of 16"),
            "{e}"
        );
        assert!(e.contains("mlx5_0"), "{e}");
        opts.max_rd_atomic = 16;
        opts.max_dest_rd_atomic = 0;
        assert!(refusal(&opts, &dev).contains("max_dest_rd_atomic"));
        opts.max_dest_rd_atomic = 9;
        assert!(refusal(&opts, &dev).contains("max_qp_rd_atom of 8"));
        opts.max_dest_rd_atomic = 8;
        check_rd_atomic(&opts, &dev, "mlx5_0").unwrap();
        // A limit the device does not report does not refuse anything.
        opts.max_rd_atomic = 200;
        check_rd_atomic(&opts, &device(0, 8), "rxe0").unwrap();
    }
}
