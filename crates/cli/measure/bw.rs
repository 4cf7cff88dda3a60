//! The bandwidth loop, generic over the operation it posts (RDMA WRITE or
//! READ today; SEND and atomics are further [`BwOp`]s). Each worker thread
//! drives a contiguous group of QPs sharing one CQ; what it may post and
//! when it is done is [`engine::sched::BwScheduler`]'s decision, so the
//! loop itself only builds work requests, posts, polls and reads the
//! clock: when completions arrive and once every
//! [`POLLS_PER_CLOCK_CHECK`] empty polls. Nothing in it allocates, locks
//! or formats. Per-thread state (the scheduler's counters) lives on each
//! worker's own stack and heap: no counter is shared between threads.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use engine::bw::Measurement;
use engine::config::{BwConfig, ring_offset};
use engine::sched::{BwScheduler, DurationWindow, Timeline, Window, wr_id, wr_id_qp};
use engine::wire::QpInfo;
use verbs::{BoundQueuePair, CompletionQueue, LocalSge, Op, SendBatch, SendWr, WorkCompletion};

use crate::side::Side;

/// Empty polls between two clock reads.
pub const POLLS_PER_CLOCK_CHECK: u32 = 4096;
/// Completions taken per poll.
const POLL_BATCH: usize = 32;
/// Timeline samples kept per thread for the peak figure.
const MAX_SAMPLES: usize = 4096;

/// An operation the bandwidth loop posts.
pub trait BwOp: Copy + Send + Sync {
    /// Its name in errors, e.g. `RDMA READ`.
    const NAME: &'static str;
    /// The work request of one message: `local` is this side's working
    /// area slice, `remote_addr`/`rkey` the peer's exposed area.
    fn wr(
        self,
        wr_id: u64,
        local: LocalSge,
        remote_addr: u64,
        rkey: u32,
        signaled: bool,
        inline: bool,
    ) -> SendWr;
}

/// RDMA WRITE from our working area into the peer's exposed area.
#[derive(Debug, Clone, Copy)]
pub struct WriteOp;

impl BwOp for WriteOp {
    const NAME: &'static str = "RDMA WRITE";
    #[inline]
    fn wr(
        self,
        wr_id: u64,
        local: LocalSge,
        remote_addr: u64,
        rkey: u32,
        signaled: bool,
        inline: bool,
    ) -> SendWr {
        SendWr {
            wr_id,
            local,
            op: Op::Write {
                remote_addr,
                rkey,
                imm: None,
            },
            signaled,
            inline,
        }
    }
}

/// RDMA READ from the peer's exposed area into our working area.
#[derive(Debug, Clone, Copy)]
pub struct ReadOp;

impl BwOp for ReadOp {
    const NAME: &'static str = "RDMA READ";
    #[inline]
    fn wr(
        self,
        wr_id: u64,
        local: LocalSge,
        remote_addr: u64,
        rkey: u32,
        signaled: bool,
        _inline: bool,
    ) -> SendWr {
        SendWr {
            wr_id,
            local,
            op: Op::Read { remote_addr, rkey },
            signaled,
            inline: false,
        }
    }
}

/// Measures one message size: every worker thread drives its QPs, all
/// start together.
///
/// # Errors
/// A failed completion (naming QPN and status), a post failure, or no
/// progress within `timeout`.
pub fn measure<O: BwOp>(
    op: O,
    side: &Side,
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
                        op,
                        qps: &side.qps[lo..hi],
                        cq: side.cq(t as usize),
                        working: (lo..hi).map(|q| side.working(q)).collect(),
                        remote: &remote[lo..hi],
                        lkey: side.lkey(),
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
    let mut messages = 0u64;
    let mut peak = 0.0;
    let mut have_peak = true;
    let mut window_ns = 0u64;
    for o in outcomes {
        let o = o?;
        first = Some(first.map_or(o.begin, |f| f.min(o.begin)));
        last = Some(last.map_or(o.end, |l| l.max(o.end)));
        messages = messages.saturating_add(o.messages);
        window_ns = window_ns.max(o.elapsed_ns);
        match o.peak {
            Some(p) => peak += p,
            None => have_peak = false,
        }
    }
    if cfg.duration.is_some() && (messages == 0 || window_ns == 0) {
        bail!(
            "no message completed inside the measurement window of {size}-byte {}s \
             (duration minus both margins): lengthen -D/--duration or shorten -f/--margin",
            O::NAME
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

struct Worker<'a, O> {
    op: O,
    qps: &'a [BoundQueuePair],
    cq: &'a CompletionQueue,
    working: Vec<u64>,
    remote: &'a [QpInfo],
    lkey: u32,
}

#[cold]
fn completion_failed(name: &str, qpn: u32, wc: &WorkCompletion) -> anyhow::Error {
    anyhow::anyhow!(
        "{name} on QPN {qpn:#x} completed with {} (message {}): the peer may be gone or refusing access",
        wc.status(),
        wc.wr_id() & engine::sched::COUNT_MASK
    )
}

#[cold]
fn stalled(name: &str, timeout: Duration, posted: u64, completed: u64) -> anyhow::Error {
    anyhow::anyhow!(
        "no completion for {timeout:?} (--timeout) with {} of {posted} posted {name}s outstanding: \
         the peer or the link stopped responding",
        posted - completed
    )
}

impl<O: BwOp> Worker<'_, O> {
    fn run(
        &self,
        cfg: &BwConfig,
        size: u64,
        timeout: Duration,
        start: &Barrier,
    ) -> anyhow::Result<ThreadOutcome> {
        let n = self.qps.len();
        let inline = size <= u64::from(cfg.inline_size);
        let length = u32::try_from(size).context("message size")?;
        let mut sched = BwScheduler::new(
            Window {
                iters: cfg.duration.is_none().then_some(cfg.iters),
                tx_depth: cfg.tx_depth,
                cq_mod: cfg.cq_mod,
                post_list: cfg.post_list,
            },
            n,
        );
        let post_list = u64::from(cfg.post_list);
        let mut batch = SendBatch::with_capacity(cfg.post_list as usize);
        let mut wcs: Vec<WorkCompletion> = vec![WorkCompletion::default(); POLL_BATCH];
        let mut timeline = Timeline::with_capacity(MAX_SAMPLES);
        let mut window = cfg.duration.map(|d| {
            let ns =
                |s: f64| Duration::try_from_secs_f64(s).map_or(u64::MAX, |d| d.as_nanos() as u64);
            DurationWindow::new(ns(d.seconds), ns(d.margin))
        });

        start.wait();
        let begin = Instant::now();
        let mut last_progress = begin;
        let mut end = begin;
        let mut empty_polls = 0u32;
        loop {
            for q in 0..n {
                while let Some(first) = sched.next_batch(q) {
                    batch.clear();
                    for i in first..first + post_list {
                        let off = ring_offset(size, i);
                        let wr = self.op.wr(
                            wr_id(q, i),
                            LocalSge {
                                addr: self.working[q] + off,
                                length,
                                lkey: self.lkey,
                            },
                            self.remote[q].addr + off,
                            self.remote[q].rkey,
                            sched.signaled(i),
                            inline,
                        );
                        // Capacity is post_list: cannot be full.
                        let _ = batch.push(&wr);
                    }
                    self.qps[q].post_batch(&mut batch)?;
                    sched.posted(q);
                }
            }

            let got = self.cq.poll(&mut wcs)?;
            if got > 0 {
                empty_polls = 0;
                for wc in &wcs[..got] {
                    if !wc.is_success() {
                        let q = wr_id_qp(wc.wr_id()).min(n - 1);
                        return Err(completion_failed(O::NAME, self.qps[q].qp().qpn(), wc));
                    }
                    sched.complete(wc.wr_id())?;
                }
                let now = Instant::now();
                last_progress = now;
                end = now;
                let t = (now - begin).as_nanos() as u64;
                timeline.record(t, sched.completed_total());
                if let Some(w) = &mut window {
                    w.observe(t, sched.completed_total());
                    if sched.is_posting() && !w.keep_posting(t) {
                        sched.stop_posting();
                    }
                }
            } else {
                empty_polls += 1;
                if empty_polls >= POLLS_PER_CLOCK_CHECK {
                    empty_polls = 0;
                    let now = Instant::now();
                    if let Some(w) = &window
                        && sched.is_posting()
                        && !w.keep_posting((now - begin).as_nanos() as u64)
                    {
                        sched.stop_posting();
                    }
                    if now - last_progress > timeout {
                        return Err(stalled(
                            O::NAME,
                            timeout,
                            sched.posted_total(),
                            sched.completed_total(),
                        ));
                    }
                }
            }
            if sched.is_done() {
                break;
            }
        }

        let (messages, elapsed_ns) = match &window {
            None => (sched.completed_total(), (end - begin).as_nanos() as u64),
            Some(w) => w.measured().ok_or_else(|| {
                anyhow::anyhow!(
                    "the run ended before its measurement window (duration too short for the margins?)"
                )
            })?,
        };
        Ok(ThreadOutcome {
            begin,
            end,
            messages,
            elapsed_ns,
            peak: timeline.peak(),
        })
    }
}
