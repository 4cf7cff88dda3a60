//! Connecting one side's QPs to the peer's: by QP exchange
//! ([`Side::connect`]) or through rdma_cm ([`Side::connect_cm`]), and what
//! the peer is told of ours ([`Side::qp_infos`]).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use engine::proto::wire::{CmTag, QpInfo};
use verbs::{BoundQueuePair, CmId, ConnectOptions, ConnectParams, Endpoint, Gid, Mtu};

use crate::oob::PeerWatch;
use crate::setup::CmEnd;

use super::Side;
use super::layout::qp_access;

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

/// Random 24-bit PSNs, as perftest draws them with `lrand48`.
pub(super) fn random_psns(n: usize) -> Vec<u32> {
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

impl Side {
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
}
