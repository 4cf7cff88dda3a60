//! Reliable-connected queue pairs: creation, connection (INIT → RTR → RTS)
//! and posting RDMA WRITE work requests.

use std::fmt;
use std::ptr::NonNull;

use rdma_sys as ffi;

use crate::context::{Gid, Mtu};
use crate::cq::CompletionQueue;
use crate::error::{Error, Result, check_ptr, errno_of};
use crate::mr::{AccessFlags, LocalSge, RemoteMemory};
use crate::pd::ProtectionDomain;

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
    /// GRH traffic class.
    pub traffic_class: u8,
    /// Service level.
    pub service_level: u8,
    /// What the peer may do to our memory through this QP.
    pub access: AccessFlags,
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
            service_level: 0,
            access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
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

const PSN_MASK: u32 = 0x00ff_ffff;

/// Attempts at the RTR transition when address resolution times out.
const RTR_ATTEMPTS: u32 = 4;

/// An RDMA WRITE work request: plain data, safe to build.
///
/// Posting it ([`QueuePair::post_send`]) is the unsafe step: that is where
/// the device starts reading the local memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdmaWrite {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Local source bytes.
    pub local: LocalSge,
    /// Remote destination address.
    pub remote_addr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Ask for a completion (`IBV_SEND_SIGNALED`).
    pub signaled: bool,
    /// Copy the payload into the work request (`IBV_SEND_INLINE`).
    pub inline: bool,
    /// Immediate data (host order), making it RDMA WRITE with immediate,
    /// which consumes a receive on the peer.
    pub imm: Option<u32>,
}

impl RdmaWrite {
    /// A signaled, non-inline write of `local` to the start of `remote`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `local` is longer than `remote`.
    pub fn new(wr_id: u64, local: LocalSge, remote: RemoteMemory) -> Result<Self> {
        if u64::from(local.length) > remote.len {
            return Err(Error::InvalidArgument(format!(
                "write of {} bytes does not fit the remote range of {} bytes",
                local.length, remote.len
            )));
        }
        Ok(Self {
            wr_id,
            local,
            remote_addr: remote.addr,
            rkey: remote.rkey,
            signaled: true,
            inline: false,
            imm: None,
        })
    }

    /// Sets whether a completion is generated.
    #[must_use]
    pub fn signaled(mut self, signaled: bool) -> Self {
        self.signaled = signaled;
        self
    }

    /// Sets whether the payload is sent inline.
    #[must_use]
    pub fn inline(mut self, inline: bool) -> Self {
        self.inline = inline;
        self
    }

    /// Adds immediate data.
    #[must_use]
    pub fn with_imm(mut self, imm: u32) -> Self {
        self.imm = Some(imm);
        self
    }

    /// Fills `wr` (whose `sg_list` the caller points at `sge`).
    fn fill(&self, wr: &mut ffi::ibv_send_wr, sge: &mut ffi::ibv_sge) {
        *sge = self.local.to_raw();
        wr.wr_id = self.wr_id;
        wr.next = std::ptr::null_mut();
        wr.num_sge = i32::from(self.local.length > 0);
        wr.opcode = if self.imm.is_some() {
            ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM
        } else {
            ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE
        };
        let mut flags = 0;
        if self.signaled {
            flags |= ffi::ibv_send_flags::IBV_SEND_SIGNALED.0;
        }
        if self.inline {
            flags |= ffi::ibv_send_flags::IBV_SEND_INLINE.0;
        }
        wr.send_flags = flags;
        wr.imm_data_invalidated_rkey_union.imm_data = self.imm.unwrap_or(0).to_be();
        wr.wr.rdma = ffi::rdma_t {
            remote_addr: self.remote_addr,
            rkey: self.rkey,
        };
    }
}

/// A reusable list of RDMA WRITE work requests posted with one
/// `ibv_post_send` (perftest's `--post_list`). Its storage is allocated once
/// at construction; pushing and posting allocate nothing.
pub struct WriteBatch {
    wrs: Vec<ffi::ibv_send_wr>,
    sges: Vec<ffi::ibv_sge>,
    capacity: usize,
    max_length: u32,
    any_inline: bool,
}

impl fmt::Debug for WriteBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteBatch")
            .field("len", &self.wrs.len())
            .field("capacity", &self.capacity)
            .finish()
    }
}

/// Returned by [`WriteBatch::push`] when the batch is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("write batch is full ({capacity} work requests)")]
pub struct BatchFull {
    /// The batch's capacity.
    pub capacity: usize,
}

impl WriteBatch {
    /// An empty batch with room for `capacity` work requests.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            wrs: Vec::with_capacity(capacity),
            sges: Vec::with_capacity(capacity),
            capacity,
            max_length: 0,
            any_inline: false,
        }
    }

    /// Appends a work request.
    ///
    /// # Errors
    /// [`BatchFull`] when the batch already holds `capacity` requests.
    pub fn push(&mut self, write: &RdmaWrite) -> Result<(), BatchFull> {
        if self.wrs.len() == self.capacity {
            return Err(BatchFull {
                capacity: self.capacity,
            });
        }
        // SAFETY: `ibv_send_wr`/`ibv_sge` are plain old data; all-zero is
        // valid (null pointers, zero integers).
        let (mut wr, mut sge) = unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        write.fill(&mut wr, &mut sge);
        self.wrs.push(wr);
        self.sges.push(sge);
        self.max_length = self.max_length.max(write.local.length);
        self.any_inline |= write.inline;
        Ok(())
    }

    /// Removes every work request, keeping the storage.
    pub fn clear(&mut self) {
        self.wrs.clear();
        self.sges.clear();
        self.max_length = 0;
        self.any_inline = false;
    }

    /// Number of work requests in the batch.
    pub fn len(&self) -> usize {
        self.wrs.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.wrs.is_empty()
    }
}

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
    caps: QueuePairCaps,
    device: String,
    pd: ProtectionDomain,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
}

// SAFETY: see the type's thread-safety section: libibverbs allows every
// verb on a QP from any thread; the pointer is freed only in `Drop`.
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
            .finish()
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        // SAFETY: `raw` came from `ibv_create_qp` and is destroyed once;
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
    ) -> Result<Self> {
        if caps.max_send_wr == 0 {
            return Err(Error::InvalidArgument(
                "queue pair send queue depth (max_send_wr) must be at least 1".into(),
            ));
        }
        // SAFETY: plain old data; all-zero is valid.
        let mut init: ffi::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = send_cq.as_raw();
        init.recv_cq = recv_cq.as_raw();
        init.cap = caps.to_raw();
        init.qp_type = ffi::ibv_qp_type::IBV_QPT_RC;
        init.sq_sig_all = 0;
        // SAFETY: valid PD and CQs (all held by the returned value); `init`
        // is a valid attribute block the verb reads and updates.
        let raw = check_ptr("ibv_create_qp", unsafe {
            ffi::ibv_create_qp(pd.as_raw(), &mut init)
        })?;
        let device = pd.context().name().to_owned();
        let mut qp = Self {
            raw,
            caps: QueuePairCaps::from_raw(&init.cap),
            device,
            pd,
            send_cq,
            recv_cq,
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
                source: std::io::Error::from_raw_os_error(errno_of(rc)),
            })
        }
    }

    /// Checks the options against the device and the peer before touching
    /// the QP: rxe forgives a path MTU above the active MTU and a zero hop
    /// limit, real NICs do not, so both are refused here.
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
            (remote.qpn <= PSN_MASK, "peer QPN must fit in 24 bits"),
        ];
        if let Some((_, msg)) = checks.iter().find(|(ok, _)| !ok) {
            return Err(Error::InvalidArgument((*msg).into()));
        }
        Ok(global)
    }

    /// Moves a fresh queue pair RESET → INIT → RTR → RTS, connected to
    /// `remote`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for options the hardware would refuse
    /// (MTU above the active MTU, missing GID on RoCE, out-of-range timers);
    /// [`Error::NoSuchPort`]/[`Error::NoSuchGid`]; [`Error::ModifyQp`]
    /// naming the state that could not be reached.
    #[doc(alias = "ibv_modify_qp")]
    pub fn connect(&mut self, opts: &ConnectOptions, remote: &Endpoint) -> Result<()> {
        use ffi::ibv_qp_attr_mask as m;
        let global = self.validate(opts, remote)?;

        // SAFETY: plain old data; all-zero is valid.
        let mut attr: ffi::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ffi::ibv_qp_state::IBV_QPS_INIT;
        attr.pkey_index = 0;
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
        attr.max_dest_rd_atomic = 1;
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
                Err(Error::ModifyQp { ref source, .. })
                    if attempt < RTR_ATTEMPTS && source.raw_os_error() == Some(libc::ETIMEDOUT) =>
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
        attr.max_rd_atomic = 1;
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

    /// Posts one RDMA WRITE.
    ///
    /// # Safety
    /// Unless the write is inline, the local bytes it names must stay
    /// allocated and registered (its [`crate::MemoryRegion`] alive) and must
    /// not be written until a completion for it, or for a later signaled
    /// request on this QP, has been polled. The remote side is the peer's
    /// business: a bad rkey or range ends in an error completion, not in
    /// local memory unsafety.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an inline payload above the QP's
    /// inline limit; [`Error::Post`] when `ibv_post_send` refuses (e.g.
    /// `ENOMEM` when the send queue is full).
    #[inline]
    #[doc(alias = "ibv_post_send")]
    pub unsafe fn post_send(&self, write: &RdmaWrite) -> Result<()> {
        self.check_inline(write.inline, write.local.length)?;
        // SAFETY: plain old data; all-zero is valid.
        let (mut wr, mut sge): (ffi::ibv_send_wr, ffi::ibv_sge) =
            unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        write.fill(&mut wr, &mut sge);
        wr.sg_list = &mut sge;
        let mut bad = std::ptr::null_mut();
        // SAFETY: valid QP; `wr` and `sge` live across the call (the
        // provider copies them into the send queue before returning); the
        // caller upholds the contract on the memory `sge` names.
        let rc = unsafe { ffi::ibv_post_send(self.as_raw(), &mut wr, &mut bad) };
        if rc != 0 {
            return Err(self.post_failed("ibv_post_send", rc));
        }
        Ok(())
    }

    /// Posts every work request of `batch` with one `ibv_post_send`.
    ///
    /// # Safety
    /// As for [`QueuePair::post_send`], for every request in the batch.
    ///
    /// # Errors
    /// As for [`QueuePair::post_send`]. On `Err` some leading requests may
    /// have been posted (libibverbs reports the first bad one); treat the
    /// QP as unusable.
    #[inline]
    pub unsafe fn post_batch(&self, batch: &mut WriteBatch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        if batch.any_inline {
            self.check_inline(true, batch.max_length)?;
        }
        let n = batch.wrs.len();
        let sges = batch.sges.as_mut_ptr();
        for (i, wr) in batch.wrs.iter_mut().enumerate() {
            // SAFETY: `i < n == sges.len()`; both vectors are not resized
            // while the pointers are in use.
            wr.sg_list = unsafe { sges.add(i) };
        }
        let wrs = batch.wrs.as_mut_ptr();
        for i in 0..n - 1 {
            // SAFETY: `i + 1 < n`; pointers into the live vector.
            unsafe { (*wrs.add(i)).next = wrs.add(i + 1) };
        }
        // SAFETY: `n ≥ 1`.
        unsafe { (*wrs.add(n - 1)).next = std::ptr::null_mut() };
        let mut bad = std::ptr::null_mut();
        // SAFETY: valid QP; a well-formed, null-terminated list of `n`
        // requests and their SGEs, alive across the call; the caller
        // upholds the memory contract.
        let rc = unsafe { ffi::ibv_post_send(self.as_raw(), wrs, &mut bad) };
        if rc != 0 {
            return Err(self.post_failed("ibv_post_send", rc));
        }
        Ok(())
    }

    /// Posts a receive, needed on the target of RDMA WRITE with immediate
    /// (the immediate consumes one receive; `local` may be `None` for a
    /// zero-length receive).
    ///
    /// # Safety
    /// The memory `local` names must stay allocated and registered, and not
    /// be accessed, until the receive's completion has been polled.
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
        // SAFETY: valid QP; `wr` and `sge` live across the call; the caller
        // upholds the memory contract.
        let rc = unsafe { ffi::ibv_post_recv(self.as_raw(), &mut wr, &mut bad) };
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
        // SAFETY: no scatter/gather entry, so the device writes no memory.
        unsafe { self.post_recv(wr_id, None) }
    }

    #[cold]
    fn post_failed(&self, verb: &'static str, rc: i32) -> Error {
        Error::Post {
            verb,
            qpn: self.qpn(),
            source: std::io::Error::from_raw_os_error(errno_of(rc)),
        }
    }
}

#[cold]
fn inline_too_long(length: u32, max: u32) -> Error {
    Error::InvalidArgument(format!(
        "inline write of {length} bytes exceeds the queue pair's inline limit of {max} bytes"
    ))
}

/// A queue pair bound to the memory region it sends from, which makes
/// posting safe: every request is checked to lie inside that region (and
/// carry its lkey) before it reaches the device, the region is held by an
/// `Arc` so no `&mut` access can write it while the device reads, and the
/// queue pair is destroyed (flushing its work) before the region can be
/// released.
pub struct BoundQueuePair {
    // `qp` is declared first: fields drop in order, so the QP (and any
    // outstanding work) goes before this handle on the region does.
    qp: QueuePair,
    source: std::sync::Arc<crate::MemoryRegion>,
    lo: u64,
    hi: u64,
    lkey: u32,
}

impl fmt::Debug for BoundQueuePair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BoundQueuePair")
            .field("qp", &self.qp)
            .field("source", &self.source)
            .finish()
    }
}

impl BoundQueuePair {
    /// Binds `qp` to `source`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the region belongs to another
    /// protection domain than the queue pair.
    pub fn new(qp: QueuePair, source: std::sync::Arc<crate::MemoryRegion>) -> Result<Self> {
        if source.pd().as_raw() != qp.pd().as_raw() {
            return Err(Error::InvalidArgument(
                "the source memory region belongs to another protection domain".into(),
            ));
        }
        Ok(Self {
            lo: source.addr(),
            hi: source.addr() + source.len() as u64,
            lkey: source.lkey(),
            qp,
            source,
        })
    }

    /// The queue pair.
    pub fn qp(&self) -> &QueuePair {
        &self.qp
    }

    /// The queue pair, mutably (to connect it).
    pub fn qp_mut(&mut self) -> &mut QueuePair {
        &mut self.qp
    }

    /// The region it sends from.
    pub fn source(&self) -> &std::sync::Arc<crate::MemoryRegion> {
        &self.source
    }

    /// The region's bytes, mutably, when this is its only owner (to fill
    /// them between writes). Bytes changed while a write is in flight go
    /// out changed: wait for the completion first. Only the bytes are
    /// handed out, never the region itself, so it cannot be replaced
    /// under the bounds the posts are checked against.
    pub fn source_bytes_mut(&mut self) -> Option<&mut [u8]> {
        std::sync::Arc::get_mut(&mut self.source).map(crate::MemoryRegion::as_mut_slice)
    }

    #[inline]
    fn inside(&self, sge: &ffi::ibv_sge) -> bool {
        sge_inside(sge, self.lkey, self.lo, self.hi)
    }

    /// Exclusive access to the region together with the right to post,
    /// when this is the region's only owner: for protocols that write a
    /// byte and post in a loop (latency ping-pong) without re-checking
    /// ownership every time.
    pub fn exclusive(&mut self) -> Option<ExclusivePoster<'_>> {
        let (lo, hi, lkey) = (self.lo, self.hi, self.lkey);
        let region = std::sync::Arc::get_mut(&mut self.source)?;
        Some(ExclusivePoster {
            qp: &self.qp,
            region,
            lo,
            hi,
            lkey,
        })
    }

    /// Posts one RDMA WRITE from the bound region.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the source range is not inside the
    /// bound region; otherwise as [`QueuePair::post_send`].
    #[inline]
    pub fn post_send(&self, write: &RdmaWrite) -> Result<()> {
        if !self.inside(&write.local.to_raw()) {
            return Err(outside_region());
        }
        // SAFETY: the source range lies inside `self.source` (checked just
        // above: address range and lkey), which `self` keeps alive and
        // registered for as long as the QP exists (the QP is dropped
        // first), and which nobody can write through Rust while shared in
        // an `Arc`.
        unsafe { self.qp.post_send(write) }
    }

    /// Posts a batch of RDMA WRITEs from the bound region.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when a source range is not inside the
    /// bound region (nothing is posted then); otherwise as
    /// [`QueuePair::post_batch`].
    #[inline]
    pub fn post_batch(&self, batch: &mut WriteBatch) -> Result<()> {
        if !batch.sges.iter().all(|s| self.inside(s)) {
            return Err(outside_region());
        }
        // SAFETY: as in `post_send`, for every request of the batch.
        unsafe { self.qp.post_batch(batch) }
    }
}

#[inline]
fn sge_inside(sge: &ffi::ibv_sge, lkey: u32, lo: u64, hi: u64) -> bool {
    sge.lkey == lkey
        && sge.addr >= lo
        && sge
            .addr
            .checked_add(u64::from(sge.length))
            .is_some_and(|end| end <= hi)
}

/// A [`BoundQueuePair`]'s queue pair and its region, borrowed together:
/// the region can be written and work posted from it, safely, for as long
/// as the borrow lasts.
#[derive(Debug)]
pub struct ExclusivePoster<'a> {
    qp: &'a QueuePair,
    region: &'a mut crate::MemoryRegion,
    lo: u64,
    hi: u64,
    lkey: u32,
}

impl ExclusivePoster<'_> {
    /// The queue pair.
    pub fn qp(&self) -> &QueuePair {
        self.qp
    }

    /// The region.
    pub fn region(&self) -> &crate::MemoryRegion {
        self.region
    }

    /// Writes one byte of the region with a volatile store (the flag of a
    /// ping-pong).
    ///
    /// # Panics
    /// When `offset` is beyond the region.
    #[inline]
    pub fn write_volatile(&mut self, offset: usize, value: u8) {
        self.region.write_volatile(offset, value);
    }

    /// The region's bytes, mutably (never the region itself, which must
    /// not be replaced under the posts' bounds).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.region.as_mut_slice()
    }

    /// Posts one RDMA WRITE from the region.
    ///
    /// # Errors
    /// As [`BoundQueuePair::post_send`].
    #[inline]
    pub fn post_send(&self, write: &RdmaWrite) -> Result<()> {
        if !sge_inside(&write.local.to_raw(), self.lkey, self.lo, self.hi) {
            return Err(outside_region());
        }
        // SAFETY: the source range lies inside `self.region` (checked
        // above), which the borrow keeps alive and registered; the QP it
        // is posted on belongs to the same `BoundQueuePair`, which drops
        // the QP before the region.
        unsafe { self.qp.post_send(write) }
    }
}

#[cold]
fn outside_region() -> Error {
    Error::InvalidArgument(
        "work request source is outside the queue pair's bound memory region".into(),
    )
}
