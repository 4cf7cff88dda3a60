//! The RDMA WRITE bandwidth test: resources of one side, connecting them
//! to the peer's, and the measured posting/polling loop.
//!
//! Each worker thread owns a contiguous group of QPs and one CQ they share.
//! Inside the loop nothing allocates, locks or formats: work requests are
//! plain structs in a preallocated batch, completions land in a fixed
//! array, the clock is read when completions arrive and once every
//! [`POLLS_PER_CLOCK_CHECK`] empty polls.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use engine::bw::{Measurement, Sample, peak_rate};
use engine::config::{BwConfig, ring_offset};
use engine::wire::QpInfo;
use verbs::{
    AccessFlags, BoundQueuePair, CompletionQueue, ConnectOptions, Endpoint, Gid, LocalSge, Mtu,
    QueuePair, QueuePairCaps, RdmaWrite, WcStatus, WorkCompletion, WriteBatch,
};

use crate::UsageError;
use crate::setup::Port;

/// Empty polls between two clock reads.
pub const POLLS_PER_CLOCK_CHECK: u32 = 4096;
/// Completions taken per poll.
const POLL_BATCH: usize = 32;
/// Timeline samples kept per thread for the peak figure.
const MAX_SAMPLES: usize = 4096;
const QP_SHIFT: u32 = 40;
const COUNT_MASK: u64 = (1 << QP_SHIFT) - 1;

/// One side's resources: device, PD, one MR holding a target area per QP
/// (what the peer writes into) and, when this side sends, a source area per
/// QP; a CQ per worker thread; the QPs.
#[derive(Debug)]
pub struct BwSide {
    /// QPs, in order, each bound to the MR; QP `q` uses target area `q`
    /// and source area `q`.
    pub qps: Vec<BoundQueuePair>,
    cqs: Vec<CompletionQueue>,
    mr_addr: u64,
    lkey: u32,
    rkey: u32,
    psns: Vec<u32>,
    area: u64,
    qp_count: u64,
    /// Device and port.
    pub port: Port,
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

/// What a side creates: QPs spread over threads (one CQ each), their
/// queue sizes, and the per-QP memory areas.
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
    /// Whether this side sends (then it also has a source area per QP).
    pub sends: bool,
}

impl Layout {
    /// The layout of a bandwidth test.
    pub fn for_bw(cfg: &BwConfig, sends: bool) -> Self {
        Self {
            qps: cfg.qps,
            threads: cfg.threads,
            tx_depth: cfg.tx_depth,
            inline_size: cfg.inline_size,
            area: cfg.buffer_per_qp(),
            sends,
        }
    }

    /// Bytes registered: a target area per QP, plus a source area per QP
    /// when sending.
    pub fn memory(&self) -> u64 {
        engine::config::memory_for(self.area, self.qps, self.sends)
    }

    fn qps_of_thread(&self, t: u32) -> std::ops::Range<u32> {
        engine::config::share(self.qps, self.threads, t)
    }
}

impl BwSide {
    /// Registers memory and creates CQs and QPs for `cfg`.
    ///
    /// # Errors
    /// A usage error naming `-I/--inline-size` when the device refuses the
    /// inline size, or `-t/--tx-depth` when the CQ would be too deep;
    /// device errors otherwise.
    pub fn create(port: Port, cfg: &Layout) -> anyhow::Result<Self> {
        let dev = port.ctx.query_device()?;
        let pd = port.ctx.alloc_pd()?;
        let bytes = cfg.memory();
        let len = usize::try_from(bytes).context("memory size")?;
        let mr = Arc::new(
            pd.allocate(len, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
                .with_context(|| format!("registering {bytes} bytes on {}", port.ctx.name()))?,
        );
        let mut cqs = Vec::with_capacity(cfg.threads as usize);
        for t in 0..cfg.threads {
            let n = cfg.qps_of_thread(t).len() as u64;
            let depth = u64::from(cfg.tx_depth) * n + 1;
            if depth > dev.max_cqe as u64 {
                return Err(UsageError(format!(
                    "-t/--tx-depth: {} QPs × tx depth {} on one thread needs a CQ of {depth} entries; \
                     {} allows {} (use more --threads or a smaller -t)",
                    n,
                    cfg.tx_depth,
                    port.ctx.name(),
                    dev.max_cqe
                ))
                .into());
            }
            cqs.push(port.ctx.create_cq(depth as u32)?);
        }
        let caps = QueuePairCaps {
            max_send_wr: cfg.tx_depth,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: cfg.inline_size,
        };
        let mut qps = Vec::with_capacity(cfg.qps as usize);
        for t in 0..cfg.threads {
            for _ in cfg.qps_of_thread(t) {
                let qp = pd
                    .create_rc_qp(&cqs[t as usize], &cqs[t as usize], &caps)
                    .map_err(|e| match &e {
                        verbs::Error::Verb {
                            verb: "ibv_create_qp",
                            source,
                        } if source.raw_os_error() == Some(nix::libc::EINVAL)
                            && cfg.inline_size > 0 =>
                        {
                            anyhow::Error::new(UsageError(format!(
                                "-I/--inline-size: {} refused a QP with {} bytes of inline data \
                                 (or tx depth {}): {e}",
                                port.ctx.name(),
                                cfg.inline_size,
                                cfg.tx_depth
                            )))
                        }
                        _ => anyhow::Error::new(e).context("creating a queue pair"),
                    })?;
                qps.push(BoundQueuePair::new(qp, Arc::clone(&mr))?);
            }
        }
        Ok(Self {
            psns: random_psns(qps.len()),
            mr_addr: mr.addr(),
            lkey: mr.lkey(),
            rkey: mr.rkey(),
            qps,
            cqs,
            area: cfg.area,
            qp_count: u64::from(cfg.qps),
            port,
        })
    }

    /// Per QP: what the peer needs to write into our target area.
    pub fn qp_infos(&self) -> anyhow::Result<Vec<QpInfo>> {
        self.qps
            .iter()
            .enumerate()
            .map(|(q, qp)| {
                let ep = qp
                    .qp()
                    .endpoint(self.port.port, self.port.gid_index, self.psns[q])?;
                Ok(QpInfo {
                    qpn: ep.qpn,
                    psn: ep.psn,
                    lid: ep.lid,
                    gid: ep.gid.0,
                    rkey: self.rkey,
                    addr: self.target(q),
                    len: self.area,
                })
            })
            .collect()
    }

    /// Connects QP `q` to the peer's QP `q`.
    ///
    /// # Errors
    /// When the peer sent a different number of QPs, or a transition fails.
    /// `qp_timeout` is the local ACK timeout exponent (perftest's `-u`).
    pub fn connect(&mut self, remote: &[QpInfo], mtu: Mtu, qp_timeout: u8) -> anyhow::Result<()> {
        if remote.len() != self.qps.len() {
            bail!(
                "peer offers {} QPs, we have {}",
                remote.len(),
                self.qps.len()
            );
        }
        for (q, qp) in self.qps.iter_mut().enumerate() {
            let r = &remote[q];
            if r.len < self.area {
                bail!(
                    "peer QP {q} (QPN {:#x}) offers {} bytes, the test needs {}",
                    r.qpn,
                    r.len,
                    self.area
                );
            }
            let opts = ConnectOptions {
                port: self.port.port,
                gid_index: self.port.gid_index,
                timeout: qp_timeout,
                mtu,
                psn: self.psns[q],
                ..ConnectOptions::default()
            };
            let ep = Endpoint {
                qpn: r.qpn,
                psn: r.psn,
                lid: r.lid,
                gid: Gid(r.gid),
            };
            qp.qp_mut()
                .connect(&opts, &ep)
                .with_context(|| format!("connecting QP {q} to peer QPN {:#x}", r.qpn))?;
        }
        Ok(())
    }

    /// Local address of QP `q`'s source area.
    pub fn source(&self, q: usize) -> u64 {
        self.mr_addr + self.source_offset(q) as u64
    }

    /// Local address of QP `q`'s target area (where the peer writes).
    pub fn target(&self, q: usize) -> u64 {
        self.mr_addr + self.target_offset(q) as u64
    }

    /// Offset of QP `q`'s target area in the memory region.
    pub fn target_offset(&self, q: usize) -> usize {
        (q as u64 * self.area) as usize
    }

    /// Offset of QP `q`'s source area in the memory region.
    pub fn source_offset(&self, q: usize) -> usize {
        ((self.qp_count + q as u64) * self.area) as usize
    }

    /// Local key of the memory region.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// The first QP and the first CQ, borrowed together (single-QP tests).
    pub fn first_mut(&mut self) -> (&mut BoundQueuePair, &CompletionQueue) {
        (&mut self.qps[0], &self.cqs[0])
    }

    /// Measures one message size: every worker thread drives its QPs,
    /// all start together.
    ///
    /// # Errors
    /// A failed completion (naming QPN and status), a post failure, or no
    /// progress within `timeout`.
    pub fn run(
        &self,
        cfg: &BwConfig,
        size: u64,
        remote: &[QpInfo],
        timeout: Duration,
    ) -> anyhow::Result<Measurement> {
        let start = Barrier::new(cfg.threads as usize);
        let wall = Instant::now();
        let cpu_before = cpu_time_ns();
        let outcomes: Vec<anyhow::Result<ThreadOutcome>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..cfg.threads)
                .map(|t| {
                    let range = cfg.qps_of_thread(t);
                    let start = &start;
                    s.spawn(move || {
                        let (lo, hi) = (range.start as usize, range.end as usize);
                        let worker = Worker {
                            qps: &self.qps[lo..hi],
                            cq: &self.cqs[t as usize],
                            sources: (lo..hi).map(|q| self.source(q)).collect(),
                            remote: &remote[lo..hi],
                            lkey: self.lkey,
                        };
                        worker.run(cfg, size, timeout, start)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a worker thread panicked")))
                })
                .collect()
        });
        let cpu_ns = cpu_time_ns().saturating_sub(cpu_before);
        let wall_ns = wall.elapsed().as_nanos() as u64;
        let mut first = None::<Instant>;
        let mut last = None::<Instant>;
        let mut messages = 0;
        let mut peak = 0.0;
        let mut have_peak = true;
        let mut window_ns = 0u64;
        for o in outcomes {
            let o = o?;
            first = Some(first.map_or(o.begin, |f| f.min(o.begin)));
            last = Some(last.map_or(o.end, |l| l.max(o.end)));
            messages += o.messages;
            window_ns = window_ns.max(o.elapsed_ns);
            match o.peak {
                Some(p) => peak += p,
                None => have_peak = false,
            }
        }
        if cfg.duration.is_some() && (messages == 0 || window_ns == 0) {
            bail!(
                "no message completed inside the measurement window of {size}-byte writes \
                 (duration minus both margins): lengthen -D/--duration or shorten -f/--margin"
            );
        }
        let elapsed_ns = if cfg.duration.is_some() {
            window_ns
        } else {
            match (first, last) {
                (Some(f), Some(l)) => l.duration_since(f).as_nanos() as u64,
                _ => 0,
            }
        };
        Ok(Measurement {
            size,
            iterations: if cfg.duration.is_some() {
                messages / u64::from(cfg.qps).max(1)
            } else {
                cfg.iters
            },
            messages,
            elapsed_ns,
            peak_msgs_per_sec: have_peak.then_some(peak),
            cpu_ns,
            wall_ns,
        })
    }
}

/// Process CPU time (user + system, all threads) in nanoseconds.
pub fn cpu_time_ns() -> u64 {
    use nix::sys::resource::{UsageWho, getrusage};
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(u) => {
            let tv = |t: nix::sys::time::TimeVal| {
                t.tv_sec() as u64 * 1_000_000_000 + t.tv_usec() as u64 * 1000
            };
            tv(u.user_time()) + tv(u.system_time())
        }
        Err(_) => 0,
    }
}

struct ThreadOutcome {
    begin: Instant,
    end: Instant,
    messages: u64,
    /// Measured span of this thread (duration mode), ns.
    elapsed_ns: u64,
    peak: Option<f64>,
}

struct Worker<'a> {
    qps: &'a [BoundQueuePair],
    cq: &'a CompletionQueue,
    sources: Vec<u64>,
    remote: &'a [QpInfo],
    lkey: u32,
}

/// Appends a timeline sample without allocating: when full, halves the
/// resolution (keeps every other sample) and doubles the spacing.
fn record(samples: &mut Vec<Sample>, min_gap: &mut u64, t: u64, count: u64) {
    if let Some(&(last_t, _)) = samples.last()
        && t - last_t < *min_gap
    {
        return;
    }
    if samples.len() == samples.capacity() {
        let kept = samples.len() / 2;
        for i in 0..kept {
            samples[i] = samples[2 * i];
        }
        samples.truncate(kept);
        *min_gap = (*min_gap).max(1) * 2;
    }
    samples.push((t, count));
}

#[cold]
fn completion_failed(qp: &QueuePair, status: WcStatus, wr_id: u64) -> anyhow::Error {
    anyhow::anyhow!(
        "RDMA WRITE on QPN {:#x} completed with {status} (message {}): the peer may be gone or refusing access",
        qp.qpn(),
        wr_id & COUNT_MASK
    )
}

#[cold]
fn stalled(timeout: Duration, posted: u64, completed: u64) -> anyhow::Error {
    anyhow::anyhow!(
        "no completion for {timeout:?} (--timeout) with {} of {posted} posted writes outstanding: \
         the peer or the link stopped responding",
        posted - completed
    )
}

impl Worker<'_> {
    fn run(
        &self,
        cfg: &BwConfig,
        size: u64,
        timeout: Duration,
        start: &Barrier,
    ) -> anyhow::Result<ThreadOutcome> {
        let n = self.qps.len();
        let post_list = u64::from(cfg.post_list);
        let tx_depth = u64::from(cfg.tx_depth);
        let cq_mod = u64::from(cfg.cq_mod);
        let inline = size <= u64::from(cfg.inline_size);
        let length = u32::try_from(size).context("message size")?;
        let iters = if cfg.duration.is_some() {
            u64::MAX
        } else {
            cfg.iters
        };
        let mut scnt = vec![0u64; n];
        let mut ccnt = vec![0u64; n];
        let mut last_signaled = vec![true; n];
        let mut batch = WriteBatch::with_capacity(cfg.post_list as usize);
        let mut wcs: Vec<WorkCompletion> = vec![WorkCompletion::default(); POLL_BATCH];
        let mut samples: Vec<Sample> = Vec::with_capacity(MAX_SAMPLES);
        let mut min_gap = 0u64;
        let (margin, total) = match cfg.duration {
            Some(d) => (
                Duration::from_secs_f64(d.margin),
                Duration::from_secs_f64(d.seconds),
            ),
            None => (Duration::ZERO, Duration::ZERO),
        };
        let mut window_start: Option<(Instant, u64)> = None;
        let mut window_end: Option<(Instant, u64)> = None;
        let mut posting = true;
        let mut completed_total = 0u64;
        let mut posted_total = 0u64;

        start.wait();
        let begin = Instant::now();
        let mut last_progress = begin;
        let mut end = begin;
        let mut empty_polls = 0u32;
        loop {
            // Post while each QP has room in its send window.
            for q in 0..n {
                let may_post = |scnt: u64, ccnt: u64, last_signaled: bool| {
                    scnt < iters
                        && scnt + post_list - ccnt <= tx_depth
                        && (posting || !last_signaled)
                };
                while may_post(scnt[q], ccnt[q], last_signaled[q]) {
                    batch.clear();
                    for k in 0..post_list {
                        let i = scnt[q] + k;
                        let off = ring_offset(size, i);
                        let signaled = (i + 1) % cq_mod == 0 || i + 1 == iters;
                        let wr = RdmaWrite {
                            wr_id: ((q as u64) << QP_SHIFT) | (i + 1),
                            local: LocalSge {
                                addr: self.sources[q] + off,
                                length,
                                lkey: self.lkey,
                            },
                            remote_addr: self.remote[q].addr + off,
                            rkey: self.remote[q].rkey,
                            signaled,
                            inline,
                            imm: None,
                        };
                        // Capacity is post_list: cannot be full.
                        let _ = batch.push(&wr);
                        last_signaled[q] = signaled;
                    }
                    self.qps[q].post_batch(&mut batch)?;
                    scnt[q] += post_list;
                    posted_total += post_list;
                }
            }

            let got = self.cq.poll(&mut wcs)?;
            if got > 0 {
                empty_polls = 0;
                for wc in &wcs[..got] {
                    let q = (wc.wr_id() >> QP_SHIFT) as usize;
                    if !wc.is_success() {
                        return Err(completion_failed(
                            self.qps[q.min(n - 1)].qp(),
                            wc.status(),
                            wc.wr_id(),
                        ));
                    }
                    let upto = wc.wr_id() & COUNT_MASK;
                    completed_total += upto - ccnt[q];
                    ccnt[q] = upto;
                }
                let now = Instant::now();
                last_progress = now;
                end = now;
                record(
                    &mut samples,
                    &mut min_gap,
                    (now - begin).as_nanos() as u64,
                    completed_total,
                );
                if cfg.duration.is_some() {
                    let t = now - begin;
                    if window_start.is_none() && t >= margin {
                        window_start = Some((now, completed_total));
                    }
                    if window_end.is_none() && t >= total - margin {
                        window_end = Some((now, completed_total));
                    }
                    if posting && t >= total {
                        posting = false;
                    }
                }
            } else {
                empty_polls += 1;
                if empty_polls >= POLLS_PER_CLOCK_CHECK {
                    empty_polls = 0;
                    let now = Instant::now();
                    if cfg.duration.is_some() && posting && now - begin >= total {
                        posting = false;
                    }
                    if now - last_progress > timeout {
                        return Err(stalled(timeout, posted_total, completed_total));
                    }
                }
            }

            let all_done = if cfg.duration.is_some() {
                !posting && scnt == ccnt
            } else {
                ccnt.iter().all(|&c| c == iters)
            };
            if all_done {
                break;
            }
        }

        let (messages, elapsed_ns) = match (cfg.duration, window_start, window_end) {
            (None, ..) => (completed_total, (end - begin).as_nanos() as u64),
            (Some(_), Some((ta, ca)), Some((tb, cb))) => (cb - ca, (tb - ta).as_nanos() as u64),
            (Some(_), ..) => bail!(
                "the run ended before its measurement window (duration too short for the margins?)"
            ),
        };
        let run_ns = samples.last().map_or(0, |s| s.0);
        let peak = peak_rate(&samples, run_ns / 20);
        Ok(ThreadOutcome {
            begin,
            end,
            messages,
            elapsed_ns,
            peak,
        })
    }
}
