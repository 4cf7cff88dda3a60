//! One side's RDMA resources for any test: device, PD, one memory region,
//! a CQ per worker thread, the QPs, and how they connect to the peer's.
//!
//! The region holds, per QP, an **exposed** area (what the peer's
//! operations address: the target of its writes, the source of its reads)
//! and, when this side initiates, a **working** area (the source of our
//! writes, the landing area of our reads). The peer learns only the
//! exposed areas (address, length, rkey); the region grants the peer only
//! the access the test needs ([`engine::bench::spec::Access`]).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::net::SocketAddr;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use engine::bench::config::ring_offset;
use engine::bench::spec::{Access, fill_pattern, pattern_byte};
use engine::proto::wire::{CmTag, QpInfo};
use verbs::{
    AccessFlags, BoundQueuePair, CmId, CompletionQueue, ConnectOptions, ConnectParams, Endpoint,
    Gid, LocalSge, MemoryRegion, Mtu, QueuePairCaps,
};

use crate::exit::UsageError;
use crate::oob::PeerWatch;
use crate::setup::{CmEnd, Port};

/// How long a server waits for a connection request before it looks
/// whether its client is still there.
const WATCH_SLICE: Duration = Duration::from_millis(200);

/// Tries of one QP's rdma_connect whose local port is found in use.
const CONNECT_ATTEMPTS: u32 = 5;

/// The listener's next connection request tagged for `want`, within
/// `timeout`; requests with another tag (another program, another
/// session, a stale retry) are turned away with a note and the wait goes
/// on to the same deadline. A client gone meanwhile (`watch`) ends the
/// wait at once.
fn next_request(
    listener: &CmId,
    want: CmTag,
    timeout: Duration,
    watch: &PeerWatch,
) -> anyhow::Result<CmId> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let request = match listener.next_request(left.min(WATCH_SLICE)) {
            Ok(r) => r,
            Err(verbs::Error::Timeout { .. }) if !left.is_zero() => {
                if watch.should_stop() {
                    return Err(watch.reason());
                }
                continue;
            }
            Err(e) => {
                return Err(anyhow::Error::new(e).context(format!(
                    "waiting for the client's rdma_cm connection of QP {} of {}",
                    want.qp, want.qps
                )));
            }
        };
        if CmTag::decode(&request.private_data) == Some(want) {
            return Ok(request.id);
        }
        let from = request
            .id
            .peer_addr()
            .map_or_else(|| "an unknown address".to_owned(), |a| a.to_string());
        eprintln!(
            "note: turned away an rdma_cm connection request from {from} that is not this \
             session's QP {} of {} ({} bytes of private data)",
            want.qp,
            want.qps,
            request.private_data.len()
        );
        // Best effort: the request's id is destroyed either way.
        let _ = request.id.reject();
    }
}

/// What a side creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Queue pairs.
    pub qps: u32,
    /// Worker threads (one CQ each).
    pub threads: u32,
    /// Send queue depth per QP.
    pub tx_depth: u32,
    /// Inline limit requested per QP.
    pub inline_size: u32,
    /// Bytes of each per-QP area.
    pub area: u64,
    /// Whether this side initiates operations (then it has a working area
    /// per QP).
    pub initiates: bool,
    /// What the peer may do to our exposed areas.
    pub access: Access,
    /// Whether the memory is on huge pages (`--use_hugepages`).
    pub huge_pages: bool,
    /// Receives kept posted per QP (perftest's `-r/--rx-depth`) on a side
    /// that receives SENDs or RDMA WRITEs with immediate; 0 for none.
    pub rx_depth: u32,
    /// Bytes each receive can hold (0: empty receives, for RDMA WRITE
    /// with immediate, whose data lands by address).
    pub recv_len: u32,
    /// How work is posted: `ibv_wr_*` (perftest's default, where the
    /// device has it) or `ibv_post_send` (`--use_old_post_send`).
    pub post_path: verbs::PostPath,
}

impl Layout {
    /// Bytes registered: an exposed area per QP, plus a working area per
    /// QP when initiating.
    pub fn memory(&self) -> u64 {
        engine::bench::config::memory_for(self.area, self.qps, self.initiates)
    }

    /// Bytes of device queue rings (send, receive, completion) this
    /// layout's QPs and CQs are estimated to take ([`engine::bench::config::ring_bytes`],
    /// and [`engine::bench::config::recv_ring_bytes`] for a receive ring).
    pub fn rings(&self) -> u64 {
        engine::bench::config::ring_bytes(self.qps, self.threads, self.tx_depth, self.inline_size)
            .saturating_add(engine::bench::config::recv_ring_bytes(
                self.qps,
                self.rx_depth,
            ))
    }

    fn qps_of_thread(&self, t: u32) -> Range<u32> {
        engine::bench::config::share(self.qps, self.threads, t)
    }

    /// Completion-queue entries one QP needs: its send queue and its
    /// receive ring.
    pub fn cq_entries_per_qp(&self) -> u64 {
        u64::from(self.tx_depth) + u64::from(self.rx_depth)
    }
}

/// The remote access a QP grants its peer (`qp_access_flags`).
fn qp_access(a: Access) -> AccessFlags {
    let mut f = AccessFlags::NONE;
    if a.remote_write {
        f |= AccessFlags::REMOTE_WRITE;
    }
    if a.remote_read {
        f |= AccessFlags::REMOTE_READ;
    }
    if a.remote_atomic {
        f |= AccessFlags::REMOTE_ATOMIC;
    }
    f
}

/// The region's access: the QP's, and local write always (the device
/// writes our landing and flag areas).
pub fn access_flags(a: Access) -> AccessFlags {
    qp_access(a) | AccessFlags::LOCAL_WRITE
}

/// Random 24-bit PSNs, as perftest draws them with `lrand48`.
fn random_psns(n: usize) -> Vec<u32> {
    let mut h = RandomState::new().build_hasher();
    h.write_usize(n);
    let mut x = h.finish() | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x & 0x00ff_ffff) as u32
        })
        .collect()
}

/// Refuses, naming the device's limit, what the device cannot create:
/// more QPs than `max_qp`, a send queue or receive ring deeper than
/// `max_qp_wr`.
fn refuse_beyond_device(
    port: &Port,
    dev: &verbs::DeviceAttributes,
    layout: &Layout,
) -> Result<(), UsageError> {
    let name = port.ctx.name();
    let max_qp = u32::try_from(dev.max_qp).unwrap_or(0);
    if max_qp > 0 && layout.qps > max_qp {
        return Err(UsageError(format!(
            "-q/--qp: {} QPs; {name} allows {max_qp} (max_qp)",
            layout.qps
        )));
    }
    let max_wr = u32::try_from(dev.max_qp_wr).unwrap_or(0);
    if max_wr > 0 && layout.tx_depth > max_wr {
        return Err(UsageError(format!(
            "-t/--tx-depth: tx depth {}; {name} allows {max_wr} work requests per queue (max_qp_wr)",
            layout.tx_depth
        )));
    }
    if max_wr > 0 && layout.rx_depth > max_wr {
        return Err(UsageError(format!(
            "-r/--rx-depth: rx depth {}; {name} allows {max_wr} work requests per queue (max_qp_wr)",
            layout.rx_depth
        )));
    }
    Ok(())
}

/// One QP of `layout` on `cq`, bound to `region`.
fn create_qp(
    port: &Port,
    pd: &verbs::ProtectionDomain,
    cq: &CompletionQueue,
    caps: &QueuePairCaps,
    layout: &Layout,
    region: &Arc<MemoryRegion>,
) -> anyhow::Result<BoundQueuePair> {
    let qp = pd
        .create_rc_qp_on(cq, cq, caps, layout.post_path)
        .map_err(|e| match &e {
            verbs::Error::Verb {
                verb: "ibv_create_qp" | "ibv_create_qp_ex",
                os_error,
            } if os_error.raw_os_error() == Some(nix::libc::EINVAL) && layout.inline_size > 0 => {
                anyhow::Error::new(crate::exit::InlineRefused(format!(
                    "-I/--inline-size: {} refused a QP with {} bytes of inline data \
                 (or tx depth {}): {e}",
                    port.ctx.name(),
                    layout.inline_size,
                    layout.tx_depth
                )))
            }
            _ => anyhow::Error::new(e).context("creating a queue pair"),
        })?;
    Ok(BoundQueuePair::new(qp, Arc::clone(region))?)
}

/// The SGE of receive slot `slot` in the area at `base`: slots of
/// `recv_len` bytes on the ring of [`ring_offset`].
#[inline]
fn recv_sge(base: u64, recv_len: u32, lkey: u32, slot: u32) -> LocalSge {
    LocalSge {
        addr: base + ring_offset(u64::from(recv_len), u64::from(slot)),
        length: recv_len,
        lkey,
    }
}

/// Posts the receive of `slot` on `qp`, the `q`th QP of its worker thread,
/// into the exposed area at `base` (`recv_len` 0: an empty receive).
///
/// # Errors
/// As [`BoundQueuePair::post_recv`].
#[inline]
pub fn post_receive(
    qp: &BoundQueuePair,
    q: usize,
    base: u64,
    recv_len: u32,
    lkey: u32,
    slot: u32,
) -> verbs::Result<()> {
    let id = engine::bench::sched::recv_wr_id(q, slot);
    if recv_len == 0 {
        qp.qp().post_recv_empty(id)
    } else {
        qp.post_recv(id, recv_sge(base, recv_len, lkey, slot))
    }
}

/// One side's resources.
#[derive(Debug)]
pub struct Side {
    /// QPs, in order, each bound to the region.
    pub qps: Vec<BoundQueuePair>,
    cqs: Vec<CompletionQueue>,
    /// Per worker thread, the range of `cqs` its QPs complete on.
    thread_cqs: Vec<Range<usize>>,
    region: Arc<MemoryRegion>,
    psns: Vec<u32>,
    layout: Layout,
    /// The device's `max_qp_rd_atom` (reads a QP may serve at once).
    pub max_rd_atom: u32,
    /// The device's `max_qp_init_rd_atom` (reads a QP may have in flight).
    pub max_init_rd_atom: u32,
    /// Entries of the port's P_Key table.
    max_pkeys: u16,
    /// Device and port.
    pub port: Port,
    /// The protection domain (QPs made at connection time are made on it).
    pd: verbs::ProtectionDomain,
    /// What each QP asks of the device.
    caps: QueuePairCaps,
    /// Under rdma_cm, before connecting: per QP still to make, the index
    /// of its CQ in `cqs` (the connection manager makes a QP on the id it
    /// connects; empty once connected, and always without rdma_cm).
    pending: Vec<usize>,
}

impl Side {
    /// Registers memory and creates CQs and QPs for `layout`.
    ///
    /// # Errors
    /// A usage error naming `-I/--inline-size` when the device refuses the
    /// inline size, or `-t/--tx-depth` when the CQ would be too deep;
    /// device errors otherwise.
    pub fn create(port: Port, layout: &Layout) -> anyhow::Result<Self> {
        let dev = port.ctx.query_device()?;
        let pd = port.ctx.alloc_pd()?;
        let bytes = layout.memory();
        let len = usize::try_from(bytes).context("memory size")?;
        let mut access = access_flags(layout.access);
        if layout.access.remote_read && port.ctx.transport() == verbs::Transport::Iwarp {
            // iWARP's READ response lands in the reader's memory as a
            // tagged write to the sink's STag: the sink needs remote write
            // (RFC 5040; perftest adds it for READ tests on iWARP).
            access |= AccessFlags::REMOTE_WRITE;
        }
        let region = Arc::new(
            if layout.huge_pages {
                pd.allocate_huge(len, access)
            } else {
                pd.allocate(len, access)
            }
            .with_context(|| format!("registering {bytes} bytes on {}", port.ctx.name()))?,
        );
        refuse_beyond_device(&port, &dev, layout)?;
        // As perftest: the ibv_wr_* API only on the devices it lists (and
        // not with --use_old_post_send); ibv_post_send everywhere else.
        let layout = &Layout {
            post_path: match layout.post_path {
                // librdmacm makes its QPs with `ibv_create_qp`.
                _ if port.cm.is_some() => verbs::PostPath::Classic,
                verbs::PostPath::Extended
                    if engine::bench::spec::perftest_posts_with_wr_api(
                        dev.vendor_id,
                        dev.vendor_part_id,
                    ) =>
                {
                    verbs::PostPath::Extended
                }
                _ => verbs::PostPath::Classic,
            },
            ..*layout
        };
        let per_qp = layout.cq_entries_per_qp();
        let max_cqe = u64::try_from(dev.max_cqe).unwrap_or(0);
        let caps = QueuePairCaps {
            max_send_wr: layout.tx_depth,
            max_recv_wr: layout.rx_depth.max(1),
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: layout.inline_size,
        };
        // Per thread, its QPs over as many CQs as the device's max_cqe
        // requires (perftest makes one CQ and fails beyond max_cqe).
        let mut cqs = Vec::with_capacity(layout.threads as usize);
        let mut thread_cqs = Vec::with_capacity(layout.threads as usize);
        let mut qps = Vec::with_capacity(layout.qps as usize);
        let mut pending = Vec::new();
        for t in 0..layout.threads {
            let n = layout.qps_of_thread(t).len() as u32;
            let groups = engine::bench::config::cq_groups(n, per_qp, max_cqe).ok_or_else(|| {
                UsageError(format!(
                    "-t/--tx-depth: one QP with tx depth {} and {} receives needs a CQ of {} entries; \
                     {} allows {} (max_cqe)",
                    layout.tx_depth,
                    layout.rx_depth,
                    per_qp + 1,
                    port.ctx.name(),
                    dev.max_cqe
                ))
            })?;
            let first = cqs.len();
            for k in groups {
                let cq = port.ctx.create_cq((per_qp * u64::from(k) + 1) as u32)?;
                for _ in 0..k {
                    if port.cm.is_some() {
                        pending.push(cqs.len());
                    } else {
                        qps.push(create_qp(&port, &pd, &cq, &caps, layout, &region)?);
                    }
                }
                cqs.push(cq);
            }
            thread_cqs.push(first..cqs.len());
        }
        if let Some(&cq) = pending.first() {
            // rdma_cm makes the QPs only when connecting: one made here
            // and dropped refuses now, as without rdma_cm, what the device
            // would refuse then (an inline size beyond siw's 80 B).
            drop(create_qp(&port, &pd, &cqs[cq], &caps, layout, &region)?);
        }
        let side = Self {
            // Under rdma_cm the connection manager draws them (shown as 0).
            psns: if pending.is_empty() {
                random_psns(qps.len())
            } else {
                vec![0; pending.len()]
            },
            qps,
            cqs,
            thread_cqs,
            region,
            layout: *layout,
            max_rd_atom: u32::try_from(dev.max_qp_rd_atom).unwrap_or(0),
            max_init_rd_atom: u32::try_from(dev.max_qp_init_rd_atom).unwrap_or(0),
            max_pkeys: dev.max_pkeys,
            port,
            pd,
            caps,
            pending,
        };
        if layout.access.remote_read {
            side.fill_pattern()?;
        }
        Ok(side)
    }

    /// The layout it was created with.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// How the QPs post (the device may not have the extended path the
    /// layout asked for: then `ibv_post_send`).
    pub fn post_path(&self) -> verbs::PostPath {
        self.qps
            .first()
            .map_or(verbs::PostPath::Classic, |q| q.qp().post_path())
    }

    /// Per QP: what the peer needs to address our exposed area.
    ///
    /// # Errors
    /// When a QP's endpoint cannot be queried.
    pub fn qp_infos(&self) -> anyhow::Result<Vec<QpInfo>> {
        if !self.pending.is_empty() {
            // Not made yet (rdma_cm): the memory alone; the connection
            // manager has the QP numbers, PSNs and GIDs.
            return Ok((0..self.pending.len())
                .map(|q| QpInfo {
                    qpn: 0,
                    psn: 0,
                    lid: 0,
                    gid: self.port.gid,
                    rkey: self.region.rkey(),
                    addr: self.exposed(q),
                    len: self.layout.area,
                })
                .collect());
        }
        // The port's LID and GID once for all QPs (a query per QP costs a
        // device call and a sysfs read each: seconds for thousands).
        let Some(first) = self.qps.first() else {
            return Ok(Vec::new());
        };
        let ep = first
            .qp()
            .endpoint(self.port.port, self.port.gid_index, self.psns[0])?;
        Ok(self
            .qps
            .iter()
            .enumerate()
            .map(|(q, qp)| QpInfo {
                qpn: qp.qp().qpn(),
                psn: self.psns[q],
                lid: ep.lid,
                gid: ep.gid.0,
                rkey: self.region.rkey(),
                addr: self.exposed(q),
                len: self.layout.area,
            })
            .collect())
    }

    /// Connects QP `q` to the peer's QP `q`, with `outs` outstanding
    /// reads both ways (0 for tests that post none: the verbs default).
    ///
    /// # Errors
    /// When the peer sent a different number of QPs, an area too small or
    /// one that wraps the address space, or a transition fails.
    /// `qp_timeout` is the local ACK timeout exponent (perftest's `-u`);
    /// `path` the service level, traffic class and flow labels both sides
    /// set; `pkey_index` this side's P_Key index (beyond the port's table:
    /// 0, with a note, as perftest).
    pub fn connect(
        &mut self,
        remote: &[QpInfo],
        mtu: Mtu,
        qp_timeout: u8,
        outs: u32,
        path: &engine::bench::config::PathConfig,
        pkey_index: u16,
    ) -> anyhow::Result<()> {
        let pkey_index = if pkey_index > 0 && pkey_index >= self.max_pkeys {
            eprintln!(
                "note: --pkey_index {pkey_index} is beyond the {} entries of {}'s P_Key table; using 0 (as perftest)",
                self.max_pkeys,
                self.port.ctx.name()
            );
            0
        } else {
            pkey_index
        };
        self.check_remote(remote, self.qps.len())?;
        let (init, dest) = self.read_depths(outs);
        for (q, qp) in self.qps.iter_mut().enumerate() {
            let r = &remote[q];
            let opts = ConnectOptions {
                port: self.port.port,
                gid_index: self.port.gid_index,
                timeout: qp_timeout,
                mtu,
                psn: self.psns[q],
                access: qp_access(self.layout.access),
                max_rd_atomic: init,
                max_dest_rd_atomic: dest,
                service_level: path.sl,
                traffic_class: path.traffic_class,
                flow_label: path.flow_label(q),
                pkey_index,
                ..ConnectOptions::default()
            };
            let ep = Endpoint {
                qpn: r.qpn,
                psn: r.psn,
                lid: r.lid,
                gid: Gid(r.gid),
            };
            qp.connect(&opts, &ep)
                .with_context(|| format!("connecting QP {q} to peer QPN {:#x}", r.qpn))?;
        }
        self.post_receive_rings()
    }

    /// Refuses a peer that offers other than `ours` QPs, or an area too
    /// small or one that wraps the address space.
    fn check_remote(&self, remote: &[QpInfo], ours: usize) -> anyhow::Result<()> {
        if remote.len() != ours {
            bail!("peer offers {} QPs, we have {ours}", remote.len());
        }
        for (q, r) in remote.iter().enumerate() {
            if r.len < self.layout.area || r.addr.checked_add(r.len).is_none() {
                bail!(
                    "peer QP {q} (QPN {:#x}) offers {} bytes at {:#x}, the test needs {}",
                    r.qpn,
                    r.len,
                    r.addr,
                    self.layout.area
                );
            }
        }
        Ok(())
    }

    /// Outstanding reads as initiator and as responder: `outs` within
    /// each of the device's limits (0 means unreported), at least 1.
    fn read_depths(&self, outs: u32) -> (u8, u8) {
        let clamp = |limit: u32| {
            let n = if limit == 0 { outs } else { outs.min(limit) };
            u8::try_from(n.max(1)).unwrap_or(u8::MAX)
        };
        (clamp(self.max_init_rd_atom), clamp(self.max_rd_atom))
    }

    /// Under rdma_cm (`-R`): makes each QP on a connection manager id of
    /// its own and connects it, in order, each step within `timeout`. A
    /// client (`server`: the server's rdma_cm address and port) resolves
    /// each id from its port's local address and connects; a server takes
    /// its listener's requests, accepting the one tagged for the next QP
    /// of this session ([`CmTag`]) and turning any other away. `remote`
    /// is the peer's memory, one per QP, as [`Side::connect`] checks it.
    ///
    /// # Errors
    /// A port not found through rdma_cm; the checks of [`Side::connect`];
    /// what the connection manager reports (rejected, unreachable, a
    /// silent peer at the bound); a server's client gone (`watch`).
    pub fn connect_cm(
        &mut self,
        remote: &[QpInfo],
        server: Option<SocketAddr>,
        outs: u32,
        timeout: Duration,
        watch: &PeerWatch,
    ) -> anyhow::Result<()> {
        let end = self
            .port
            .cm
            .clone()
            .context("this side's port was not found through rdma_cm")?;
        let pending = std::mem::take(&mut self.pending);
        self.check_remote(remote, pending.len())?;
        let qps = u32::try_from(pending.len()).context("QP count")?;
        let (initiator_depth, responder_resources) = self.read_depths(outs);
        // A client's ids all resolve from its first id's local address,
        // so every QP lands on that device.
        let src = match &end {
            CmEnd::Active(probe) => probe.local_addr().map(|mut a| {
                a.set_port(0);
                a
            }),
            CmEnd::Passive(_) => None,
        };
        for (q, &cq) in (0u32..).zip(&pending) {
            let cq = &self.cqs[cq];
            let mut attempt = 1;
            let qp = loop {
                let (id, port) = match (&end, server) {
                    (CmEnd::Active(_), Some(server)) => {
                        let id = CmId::new()?;
                        id.resolve(src, server, timeout).with_context(|| {
                            format!("rdma_cm cannot resolve {server} for QP {q}")
                        })?;
                        (id, server.port())
                    }
                    (CmEnd::Passive(listener), None) => {
                        let port = listener.local_port();
                        let want = CmTag { qp: q, qps, port };
                        (next_request(listener, want, timeout, watch)?, port)
                    }
                    _ => {
                        bail!("an rdma_cm client connects to a server's address; a server accepts")
                    }
                };
                let qp = id.create_qp(&self.pd, cq, cq, &self.caps)?;
                let params = ConnectParams {
                    responder_resources,
                    initiator_depth,
                    private_data: CmTag { qp: q, qps, port }.encode(),
                };
                let connected = match end {
                    CmEnd::Active(_) => id.connect(params, timeout),
                    CmEnd::Passive(_) => id.accept(params, timeout),
                };
                match connected {
                    Ok(()) => break qp,
                    // On iWARP the active side's port is a kernel TCP
                    // port: one the connection manager picked may still be
                    // in TIME_WAIT from an earlier connection (seen after
                    // ~150 back-to-back sessions). A new id picks another;
                    // the refused connect never reached the server.
                    Err(e) if e.is_address_in_use("rdma_connect") && attempt < CONNECT_ATTEMPTS => {
                        eprintln!(
                            "note: rdma_connect of QP {q} found its local port in use; \
                             again with a new port (attempt {} of {CONNECT_ATTEMPTS})",
                            attempt + 1
                        );
                        attempt += 1;
                    }
                    Err(e) => {
                        return Err(anyhow::Error::new(e)
                            .context(format!("connecting QP {q} of {qps} through rdma_cm")));
                    }
                }
            };
            self.qps
                .push(BoundQueuePair::new(qp, Arc::clone(&self.region))?);
            if q == 0 {
                crate::stop::pause_point("cm-connect");
            }
        }
        self.post_receive_rings()
    }

    /// Posts every QP's ring of `rx_depth` receives (a side that receives;
    /// a connected QP, so none is lost to a reset). Each worker's loop
    /// posts a receive again in its slot as it completes.
    fn post_receive_rings(&self) -> anyhow::Result<()> {
        for t in 0..self.layout.threads {
            let range = self.layout.qps_of_thread(t);
            for g in range.clone() {
                let g = g as usize;
                for slot in 0..self.layout.rx_depth {
                    post_receive(
                        &self.qps[g],
                        g - range.start as usize,
                        self.exposed(g),
                        self.layout.recv_len,
                        self.lkey(),
                        slot,
                    )
                    .with_context(|| format!("posting receive {slot} of QP {g}"))?;
                }
            }
        }
        Ok(())
    }

    /// Consumes what a previous size left in the CQs: receives of messages
    /// that came after a side stopped counting (posted again) and nothing
    /// else; returns how many receives it found.
    ///
    /// # Errors
    /// A failed receive or post.
    pub fn drain_receives(&self) -> anyhow::Result<u64> {
        let mut wcs = vec![verbs::WorkCompletion::default(); 32];
        let mut found = 0u64;
        for t in 0..self.layout.threads as usize {
            let range = self.layout.qps_of_thread(t as u32);
            for cq in self.cqs_of_thread(t) {
                loop {
                    let n = cq.poll(&mut wcs)?;
                    if n == 0 {
                        break;
                    }
                    for wc in &wcs[..n] {
                        if !engine::bench::sched::is_recv(wc.wr_id()) {
                            continue;
                        }
                        if !wc.is_success() {
                            bail!("a receive completed with {} between sizes", wc.status());
                        }
                        let q = engine::bench::sched::wr_id_qp(wc.wr_id());
                        let g = range.start as usize + q;
                        if g >= range.end as usize {
                            bail!("a receive of an unknown QP completed");
                        }
                        post_receive(
                            &self.qps[g],
                            q,
                            self.exposed(g),
                            self.layout.recv_len,
                            self.lkey(),
                            engine::bench::sched::recv_slot(wc.wr_id()),
                        )?;
                        found += 1;
                    }
                }
            }
        }
        Ok(found)
    }

    /// Every QP's path as the device reports it once connected.
    ///
    /// # Errors
    /// When the device cannot be queried.
    pub fn paths(&self) -> anyhow::Result<Vec<verbs::PathAttr>> {
        self.qps
            .iter()
            .map(|q| q.qp().path().context("reading back a QP's path"))
            .collect()
    }

    /// Offset of QP `q`'s exposed area in the region.
    pub fn exposed_offset(&self, q: usize) -> usize {
        (q as u64 * self.layout.area) as usize
    }

    /// Offset of QP `q`'s working area in the region.
    pub fn working_offset(&self, q: usize) -> usize {
        ((u64::from(self.layout.qps) + q as u64) * self.layout.area) as usize
    }

    /// Address of QP `q`'s exposed area.
    pub fn exposed(&self, q: usize) -> u64 {
        self.region.addr() + self.exposed_offset(q) as u64
    }

    /// Address of QP `q`'s working area.
    pub fn working(&self, q: usize) -> u64 {
        self.region.addr() + self.working_offset(q) as u64
    }

    /// Local key of the region.
    pub fn lkey(&self) -> u32 {
        self.region.lkey()
    }

    /// The region (its bytes through volatile/atomic access only).
    pub fn region(&self) -> &MemoryRegion {
        &self.region
    }

    /// Worker thread `t`'s first CQ (a latency test's only one).
    pub fn cq(&self, t: usize) -> &CompletionQueue {
        &self.cqs[self.thread_cqs[t].start]
    }

    /// Worker thread `t`'s CQs, in the order of its QPs (each holds a
    /// contiguous share of them).
    pub fn cqs_of_thread(&self, t: usize) -> &[CompletionQueue] {
        &self.cqs[self.thread_cqs[t].clone()]
    }

    /// Stores the read pattern in every exposed area.
    fn fill_pattern(&self) -> anyhow::Result<()> {
        let area = usize::try_from(self.layout.area).context("area size")?;
        let mut buf = vec![0u8; area];
        // Every QP's area, made yet or not (rdma_cm makes them later).
        for q in 0..self.layout.qps as usize {
            fill_pattern(q, 0, &mut buf);
            self.region.write_bytes(self.exposed_offset(q), &buf)?;
        }
        Ok(())
    }

    /// Zeroes the first `len` bytes of QP `q`'s exposed and working areas.
    ///
    /// # Errors
    /// When `len` exceeds an area.
    pub fn zero(&self, q: usize, len: u64) -> anyhow::Result<()> {
        let len = usize::try_from(len.min(self.layout.area)).context("length")?;
        let e = self.exposed_offset(q);
        self.region.fill(e..e + len, 0)?;
        if self.layout.initiates {
            let w = self.working_offset(q);
            self.region.fill(w..w + len, 0)?;
        }
        Ok(())
    }

    /// Zeroes every working area (before a read test's size, so that its
    /// data check sees only what the reads brought).
    ///
    /// # Errors
    /// As [`Side::zero`].
    pub fn zero_working(&self) -> anyhow::Result<()> {
        let area = usize::try_from(self.layout.area).context("area size")?;
        for q in 0..self.qps.len() {
            let w = self.working_offset(q);
            self.region.fill(w..w + area, 0)?;
        }
        Ok(())
    }

    /// Before a SEND test's size: every message slot of every working
    /// area holds the sender's pattern, restarting at each slot (byte `k`
    /// of every message of QP `q` is `pattern_byte(q, k)`, wherever the
    /// receiver's ring puts it).
    ///
    /// # Errors
    /// When `size` exceeds an area.
    pub fn fill_send_pattern(&self, size: u64) -> anyhow::Result<()> {
        let len = usize::try_from(size).context("message size")?;
        let mut buf = vec![0u8; len];
        for q in 0..self.qps.len() {
            fill_pattern(q, 0, &mut buf);
            for i in 0..engine::bench::config::ring_slots(size) {
                let off = self.working_offset(q) + ring_offset(size, i) as usize;
                self.region.write_bytes(off, &buf)?;
            }
        }
        Ok(())
    }

    /// Zeroes every exposed area's first `len` bytes (a receiver's ring,
    /// an atomic target's words) before a size.
    ///
    /// # Errors
    /// When `len` exceeds an area.
    pub fn zero_exposed(&self, len: u64) -> anyhow::Result<()> {
        let len = usize::try_from(len.min(self.layout.area)).context("length")?;
        for q in 0..self.qps.len() {
            let e = self.exposed_offset(q);
            self.region.fill(e..e + len, 0)?;
        }
        Ok(())
    }

    /// The data check of a SEND test's receiver: on QP `q`, the slots of
    /// its last `count` receives (the ring is consumed in slot order,
    /// ending at `last_slot`) hold the sender's pattern in their first
    /// `size` bytes. Each distinct slot is compared once (a slot reused
    /// holds the last message put there). Returns the bytes compared.
    ///
    /// # Errors
    /// The first differing byte, naming QP, slot, offset, expected and
    /// found.
    pub fn check_received(
        &self,
        q: usize,
        size: u64,
        last_slot: u32,
        count: u64,
    ) -> anyhow::Result<u64> {
        let (rx, recv_len) = (self.layout.rx_depth, u64::from(self.layout.recv_len));
        if rx == 0 || count == 0 {
            return Ok(0);
        }
        let touched = count.min(u64::from(rx)) as u32;
        let distinct = engine::bench::config::ring_slots(recv_len).min(u64::from(touched)) as u32;
        let len = usize::try_from(size).context("message size")?;
        let mut buf = vec![0u8; len];
        let mut want = vec![0u8; len];
        fill_pattern(q, 0, &mut want);
        let mut checked = 0;
        // The last `distinct` slots consumed, newest first: their offsets
        // are all different (the ring of offsets repeats every
        // ring_slots(recv_len) slots).
        for back in 0..distinct {
            let slot = (last_slot + rx - back % rx) % rx;
            let off = ring_offset(recv_len, u64::from(slot));
            self.region
                .read_into(self.exposed_offset(q) + off as usize, &mut buf)?;
            if let Some(k) = first_difference(&buf, &want) {
                bail!(
                    "data check failed: QP {q}'s receive in slot {slot} has {:#04x} at byte {k} \
                     of its {size}-byte message, the sender's pattern {:#04x}",
                    buf[k],
                    pattern_byte(q, k as u64)
                );
            }
            checked += size;
        }
        Ok(checked)
    }

    /// The sum of the `words` 8-byte words of QP `q`'s exposed area that
    /// an atomic test targets (one per cache line: [`ring_offset`] of 8).
    ///
    /// # Errors
    /// When the words lie beyond the area.
    pub fn atomic_sum(&self, q: usize, words: u64) -> anyhow::Result<u64> {
        let mut sum = 0u64;
        for i in 0..words {
            let off = self.exposed_offset(q) + ring_offset(8, i) as usize;
            sum = sum.wrapping_add(self.region.read_u64(off)?);
        }
        Ok(sum)
    }

    /// The data check of a read test: QP `q`'s working area holds the
    /// peer's pattern in every range of `ranges` (offsets within the
    /// area). Returns the bytes compared.
    ///
    /// # Errors
    /// The first differing byte, naming QP, offset, expected and found.
    pub fn check_pattern(
        &self,
        q: usize,
        ranges: impl Iterator<Item = Range<u64>>,
    ) -> anyhow::Result<u64> {
        let base = self.working_offset(q);
        let (mut buf, mut want) = (Vec::new(), Vec::new());
        let mut checked = 0;
        for r in ranges {
            let len = usize::try_from(r.end - r.start).context("range")?;
            buf.resize(len, 0);
            want.resize(len, 0);
            self.region.read_into(base + r.start as usize, &mut buf)?;
            fill_pattern(q, r.start, &mut want);
            if let Some(i) = first_difference(&buf, &want) {
                let off = r.start + i as u64;
                bail!(
                    "data check failed: QP {q} byte {off} is {:#04x}, the peer's pattern has {:#04x} \
                     (the read did not deliver the peer's memory)",
                    buf[i],
                    pattern_byte(q, off)
                );
            }
            checked += len as u64;
        }
        Ok(checked)
    }
}

/// The index of the first byte where `got` and `want` differ: one slice
/// comparison (memcmp) in the common case that they agree.
fn first_difference(got: &[u8], want: &[u8]) -> Option<usize> {
    if got == want {
        return None;
    }
    got.iter().zip(want).position(|(g, w)| g != w)
}
