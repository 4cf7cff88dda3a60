//! The bandwidth loop, generic over the operation it posts (a [`BwOp`]:
//! RDMA WRITE, with or without immediate, READ, SEND, fetch-and-add,
//! compare-and-swap). Each worker thread drives a contiguous group of QPs
//! spread over as few CQs as the device's `max_cqe` allows (polled in
//! turn); on a side that receives (the target of SENDs and writes with
//! immediate) the same loop checks, counts and re-posts the receives
//! ([`Plan`]). What it may post and when it is done is
//! [`engine::bench::sched::BwScheduler`]'s decision, so the
//! loop itself only moves its prepared work requests (ids, ring offsets,
//! signal flags: [`PreparedSends`]), posts, polls and reads the
//! clock: when completions arrive and once every
//! [`POLLS_PER_CLOCK_CHECK`] empty polls. Nothing in it allocates, locks
//! or formats. Per-thread state (the scheduler's counters) lives on each
//! worker's own stack and heap: no counter is shared between threads.

use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use engine::bench::config::{BwConfig, Ring, ring_offset, ring_slots};
use engine::bench::sched::{
    BwScheduler, DurationWindow, Window, is_recv, recv_slot, wr_id, wr_id_qp,
};
use engine::proto::wire::QpInfo;
use engine::results::bw::{Measurement, Timeline};
use verbs::{
    BoundQueuePair, CompletionQueue, LocalSge, MemoryRegion, Op, PreparedSends, SendWr,
    WorkCompletion,
};

use engine::bench::spec::{TestSpec, Verb};
use engine::fabric::link::{self, CounterSnapshot, ExpectRate, LinkRate, VerdictInput};
use engine::format::perftest_json::OutputFigure;
use engine::format::report::Report;
use engine::format::table::{RESULT_LINE, Table, TableStyle};
use engine::results::bw::{BwResult, shown_figures};
use engine::results::record::{DataCheck, Figures, RunContext};
use engine::results::verdict::{Limits, VerdictRecord};

use super::credit::{GRANT_FLAG, QpCredits, is_grant};
use super::{Measure, Shown, SizeCtx, receive_failed, wrong_size};
use crate::oob::PeerWatch;
use crate::options::RunOptions;
use crate::output::{FigureLines, Stdout};
use crate::setup::Port;
use crate::side::{Layout, Side};
use engine::bench::plan::{Plan, Receiving, Role};
use engine::format::banner::BannerInfo;

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
    /// Whether its payload may be sent inline (not for reads and
    /// atomics, whose local memory the device writes).
    const INLINE: bool;
    /// Message `index` of a QP: the operation on the peer's exposed area
    /// at `remote_addr`.
    fn op(self, remote_addr: u64, rkey: u32, index: u64) -> Op;
    /// The compare and swap operands of message `index`, for an operation
    /// whose operands change from message to message.
    #[inline]
    fn operands(self, _index: u64) -> Option<(u64, u64)> {
        None
    }
}

/// RDMA WRITE from our working area into the peer's exposed area (with
/// immediate: each also consumes one of the peer's receives).
#[derive(Debug, Clone, Copy)]
pub struct WriteOp {
    /// `--write_with_imm`.
    pub imm: bool,
}

impl BwOp for WriteOp {
    const NAME: &'static str = "RDMA WRITE";
    const INLINE: bool = true;
    #[inline]
    fn op(self, remote_addr: u64, rkey: u32, _index: u64) -> Op {
        Op::Write {
            remote_addr,
            rkey,
            // perftest's immediate is 0.
            imm: self.imm.then_some(0),
        }
    }
}

/// RDMA READ from the peer's exposed area into our working area.
#[derive(Debug, Clone, Copy)]
pub struct ReadOp;

impl BwOp for ReadOp {
    const NAME: &'static str = "RDMA READ";
    const INLINE: bool = false;
    #[inline]
    fn op(self, remote_addr: u64, rkey: u32, _index: u64) -> Op {
        Op::Read { remote_addr, rkey }
    }
}

/// SEND from our working area into the peer's next receive.
#[derive(Debug, Clone, Copy)]
pub struct SendOp;

impl BwOp for SendOp {
    const NAME: &'static str = "SEND";
    const INLINE: bool = true;
    #[inline]
    fn op(self, _remote_addr: u64, _rkey: u32, _index: u64) -> Op {
        Op::Send { imm: None }
    }
}

/// Atomic fetch-and-add of 1 (perftest's `ATOMIC_ADD_VALUE`) on the
/// peer's 8-byte word; the old value lands in our working area.
#[derive(Debug, Clone, Copy)]
pub struct FetchAddOp;

impl BwOp for FetchAddOp {
    const NAME: &'static str = "atomic fetch-and-add";
    const INLINE: bool = false;
    #[inline]
    fn op(self, remote_addr: u64, rkey: u32, _index: u64) -> Op {
        Op::FetchAdd {
            remote_addr,
            rkey,
            add: 1,
        }
    }
}

/// Atomic compare-and-swap as a chain: message `i` of a QP targets word
/// `i % W` of the peer's ring of `W` words ([`atomic_words`]), which the
/// `i / W` operations before it on that word have counted up to `i / W`:
/// it swaps `i / W` for `i / W + 1`. Each word ends holding the number of
/// operations on it, as with fetch-and-add, and a compare that failed
/// would show as a word left short (perftest compares 0 and swaps 0,
/// which checks nothing).
#[derive(Debug, Clone, Copy)]
pub struct CmpSwapOp;

impl BwOp for CmpSwapOp {
    const NAME: &'static str = "atomic compare-and-swap";
    const INLINE: bool = false;
    #[inline]
    fn op(self, remote_addr: u64, rkey: u32, index: u64) -> Op {
        let (compare, swap) = chain_operands(index);
        Op::CmpSwap {
            remote_addr,
            rkey,
            compare,
            swap,
        }
    }
    #[inline]
    fn operands(self, index: u64) -> Option<(u64, u64)> {
        Some(chain_operands(index))
    }
}

/// Compare-and-swap message `index`'s operands in [`CmpSwapOp`]'s chain.
#[inline]
fn chain_operands(index: u64) -> (u64, u64) {
    let compare = index / atomic_words();
    (compare, compare + 1)
}

/// The 8-byte words of a QP's exposed area an atomic test cycles through
/// (perftest's: one per cache line of a page).
#[inline]
pub fn atomic_words() -> u64 {
    ring_slots(ATOMIC_SIZE)
}

/// The size of an atomic operation.
pub const ATOMIC_SIZE: u64 = 8;

/// A duration-mode phase closes, on each QP whose peer receives, with a
/// zero-length SEND (every message size is 1 byte or more, so it is told
/// apart by its length; no immediate data, which iWARP has not): every
/// message before it on the QP has been received (RC delivers in order).
/// This bit marks its `wr_id` (never a scheduler's: bit 62).
const END_FLAG: u64 = 1 << 62;

/// Measures one message size: every worker thread drives its QPs, all
/// start together.
///
/// # Errors
/// A failed completion (naming QPN and status), a post failure, a
/// received message of another size, or no progress within `timeout`.
#[allow(clippy::too_many_arguments)]
pub fn measure<O: BwOp>(
    op: O,
    plan: Plan,
    side: &Side,
    cfg: &BwConfig,
    size: u64,
    remote: &[QpInfo],
    timeout: Duration,
    watch: &PeerWatch,
    system_cpu: bool,
    mut credits: Option<&mut [QpCredits]>,
) -> anyhow::Result<(Measurement, Vec<(u32, u64)>)> {
    let start = StartGate::default();
    let wall = Instant::now();
    let cpu_before = cpu_time_ns();
    let (not_started, outcomes, system_cpu_pct) = std::thread::scope(|s| {
        let mut handles = Vec::with_capacity(cfg.threads as usize);
        let mut not_started = None;
        for t in 0..cfg.threads {
            let range = cfg.qps_of_thread(t);
            let start = &start;
            // This thread's QPs' credits: the front of what is left.
            let mine = credits.take().map(|c| {
                let (mine, rest) = c.split_at_mut(range.len().min(c.len()));
                credits = Some(rest);
                mine
            });
            let spawned = std::thread::Builder::new()
                .name(format!("worker-{t}"))
                .spawn_scoped(s, move || {
                    let (lo, hi) = (range.start as usize, range.end as usize);
                    let worker = Worker {
                        op,
                        plan,
                        qps: &side.qps[lo..hi],
                        cqs: side.cqs_of_thread(t as usize),
                        working: (lo..hi).map(|q| side.working(q)).collect(),
                        exposed: (lo..hi).map(|q| side.exposed(q)).collect(),
                        remote: &remote[lo..hi],
                        lkey: side.lkey(),
                        region: side.region(),
                    };
                    worker.run(cfg, size, timeout, start, watch, mine)
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    not_started = Some((t, e));
                    break;
                }
            }
        }
        // Every worker starts together, or none does: a thread that could
        // not be created must not leave the others waiting for it.
        start.open(not_started.is_none());
        let system_cpu_pct = match cfg.duration {
            Some(d) if system_cpu && not_started.is_none() => sample_system_cpu(d, &handles),
            _ => None,
        };
        let outcomes: Vec<anyhow::Result<ThreadOutcome>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a worker thread panicked")))
            })
            .collect();
        (not_started, outcomes, system_cpu_pct)
    });
    if let Some((t, e)) = not_started {
        bail!(
            "cannot start worker thread {} of {} (--threads): {e}",
            t + 1,
            cfg.threads
        );
    }
    let cpu_ns = cpu_time_ns().saturating_sub(cpu_before);
    let wall_ns = wall.elapsed().as_nanos() as u64;
    let mut first = None::<Instant>;
    let mut last = None::<Instant>;
    let mut messages = 0u64;
    let mut operations = 0u64;
    let mut peak = 0.0;
    let mut have_peak = true;
    let mut window_ns = 0u64;
    let mut received = Vec::with_capacity(cfg.qps as usize);
    for o in outcomes {
        let o = o?;
        received.extend_from_slice(&o.received);
        first = Some(first.map_or(o.begin, |f| f.min(o.begin)));
        last = Some(last.map_or(o.end, |l| l.max(o.end)));
        messages = messages.saturating_add(o.messages);
        operations = operations.saturating_add(o.operations);
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
    let m = Measurement {
        size,
        iterations: if cfg.duration.is_some() {
            messages / u64::from(cfg.qps).max(1)
        } else {
            cfg.iters
        },
        table_iterations: if cfg.duration.is_some() {
            messages
        } else {
            cfg.iters.saturating_mul(u64::from(cfg.qps))
        },
        messages,
        elapsed_ns,
        peak_msgs_per_sec: have_peak.then_some(peak),
        cpu_ns,
        wall_ns,
        system_cpu_pct,
        operations,
    };
    Ok((m, received))
}

/// perftest's `--cpu_util` figure over the measurement window of a
/// duration run that starts now: `/proc/stat` read when the first margin
/// has passed and when the window closes. `None` when the workers end
/// first (a failure) or a signal stops the run.
fn sample_system_cpu<T>(
    d: engine::bench::config::DurationMode,
    workers: &[std::thread::ScopedJoinHandle<'_, T>],
) -> Option<f64> {
    let (total, margin) = d.spans();
    let t0 = Instant::now();
    let wait_until = |t: Instant| loop {
        let now = Instant::now();
        if now >= t {
            return true;
        }
        if workers.iter().all(|w| w.is_finished()) || crate::stop::requested().is_some() {
            return false;
        }
        std::thread::sleep((t - now).min(Duration::from_millis(50)));
    };
    if !wait_until(t0 + margin) {
        return None;
    }
    let before = super::read_proc_stat()?;
    if !wait_until(t0 + total.saturating_sub(margin)) {
        return None;
    }
    Some(engine::results::bw::system_cpu_util(
        before,
        super::read_proc_stat()?,
    ))
}

/// The start line of the worker threads: opened once every one of them
/// exists, or called off when one could not be created.
#[derive(Debug, Default)]
struct StartGate {
    go: Mutex<Option<bool>>,
    opened: Condvar,
}

impl StartGate {
    fn open(&self, go: bool) {
        *self.go.lock().unwrap_or_else(PoisonError::into_inner) = Some(go);
        self.opened.notify_all();
    }

    /// Waits until the gate is opened or called off; `true` to start.
    fn wait(&self) -> bool {
        let mut go = self.go.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(g) = *go {
                return g;
            }
            go = self.opened.wait(go).unwrap_or_else(PoisonError::into_inner);
        }
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
    /// Every operation completed (or message received), margins included.
    operations: u64,
    /// Per QP: the receive slot of its last message, and its messages.
    received: Vec<(u32, u64)>,
}

struct Worker<'a, O> {
    op: O,
    plan: Plan,
    qps: &'a [BoundQueuePair],
    /// This thread's CQs (its QPs spread over them; polled in turn).
    cqs: &'a [CompletionQueue],
    working: Vec<u64>,
    exposed: Vec<u64>,
    remote: &'a [QpInfo],
    lkey: u32,
    /// The region (for the credit words).
    region: &'a MemoryRegion,
}

#[cold]
fn completion_failed(name: &str, qpn: u32, wc: &WorkCompletion) -> anyhow::Error {
    anyhow::anyhow!(
        "{name} on QPN {qpn:#x} completed with {} (message {}): the peer may be gone or refusing access",
        wc.status(),
        wc.wr_id() & engine::bench::sched::COUNT_MASK
    )
}

#[cold]
fn not_an_immediate(qpn: u32, wc: &WorkCompletion) -> anyhow::Error {
    anyhow::anyhow!(
        "QPN {qpn:#x} completed a receive with opcode {:?} where RDMA WRITEs with immediate were expected",
        wc.opcode()
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

#[cold]
fn receive_stalled(timeout: Duration, received: u64, expected: Option<u64>) -> anyhow::Error {
    match expected {
        Some(e) => anyhow::anyhow!(
            "no message for {timeout:?} (--timeout) after {received} of {e}: \
             the peer or the link stopped responding"
        ),
        None => anyhow::anyhow!(
            "no message for {timeout:?} (--timeout) after {received}, and not every QP's \
             end of phase: the peer or the link stopped responding"
        ),
    }
}

/// What a side's receives have seen in a size's run.
#[derive(Debug, Default)]
struct Received {
    /// Messages (not counting end-of-phase SENDs).
    count: u64,
    /// QPs whose end-of-phase SEND arrived.
    ends: usize,
    /// Our own end-of-phase SENDs completed.
    ends_acked: usize,
    first: Option<Instant>,
    last_at: Option<Instant>,
    /// Per QP: the slot of its last message and how many it received.
    last: Vec<(u32, u64)>,
}

impl<O: BwOp> Worker<'_, O> {
    /// Message `i` of QP `q`: its ring slot here and at the peer.
    #[inline]
    fn request(
        &self,
        q: usize,
        i: u64,
        size: u64,
        length: u32,
        signaled: bool,
        inline: bool,
    ) -> SendWr {
        let off = ring_offset(size, i);
        SendWr {
            wr_id: wr_id(q, i),
            local: LocalSge {
                addr: self.working[q] + off,
                length,
                lkey: self.lkey,
            },
            op: self
                .op
                .op(self.remote[q].addr + off, self.remote[q].rkey, i),
            signaled,
            inline,
        }
    }

    /// A failed completion as the error naming its QPN and status.
    #[inline]
    fn succeeded(&self, wc: &WorkCompletion) -> anyhow::Result<()> {
        if wc.is_success() {
            return Ok(());
        }
        let q = wr_id_qp(wc.wr_id() & !(END_FLAG | GRANT_FLAG)).min(self.qps.len() - 1);
        Err(completion_failed(O::NAME, self.qps[q].qp().qpn(), wc))
    }

    /// A receive completion: checked (status, size or kind), counted and
    /// posted again in the same slot.
    #[inline]
    fn received(
        &self,
        wc: &WorkCompletion,
        r: Receiving,
        size: u64,
        seen: &mut Received,
    ) -> anyhow::Result<bool> {
        let q = wr_id_qp(wc.wr_id()).min(self.qps.len() - 1);
        let qp = &self.qps[q];
        if !wc.is_success() {
            return Err(receive_failed(qp.qp().qpn(), wc));
        }
        let end = wc.opcode() == verbs::WcOpcode::Recv && wc.byte_len() == 0;
        if end {
            seen.ends += 1;
        } else if r.sends {
            if u64::from(wc.byte_len()) != size {
                return Err(wrong_size(qp.qp().qpn(), size, wc.byte_len()));
            }
        } else if wc.opcode() != verbs::WcOpcode::RecvRdmaWithImm {
            return Err(not_an_immediate(qp.qp().qpn(), wc));
        }
        let slot = recv_slot(wc.wr_id());
        crate::side::post_receive(qp, q, self.exposed[q], r.recv_len, self.lkey, slot)?;
        if !end {
            seen.last[q] = (slot, seen.last[q].1 + 1);
        }
        Ok(!end)
    }

    /// perftest's `--perform_warm_up`: a tx depth of signaled requests on
    /// every QP, all completed, before anything is timed.
    #[allow(clippy::too_many_arguments)]
    fn warm_up(
        &self,
        cfg: &BwConfig,
        size: u64,
        length: u32,
        inline: bool,
        timeout: Duration,
        watch: &PeerWatch,
        wcs: &mut [WorkCompletion],
    ) -> anyhow::Result<()> {
        let per_qp = u64::from(cfg.tx_depth);
        for (q, qp) in self.qps.iter().enumerate() {
            for i in 0..per_qp {
                qp.post_send(&self.request(q, i, size, length, true, inline))
                    .context("posting the warm-up (--perform_warm_up)")?;
            }
        }
        let want = per_qp * self.qps.len() as u64;
        let (mut done, mut last) = (0u64, Instant::now());
        while done < want {
            let mut got = 0;
            for cq in self.cqs {
                let n = cq.poll(wcs)?;
                for wc in &wcs[..n] {
                    self.succeeded(wc)?;
                }
                got += n;
            }
            done += got as u64;
            if got > 0 {
                last = Instant::now();
            } else if watch.should_stop() {
                return Err(watch.reason());
            } else if last.elapsed() > timeout {
                return Err(stalled(O::NAME, timeout, want, done));
            }
        }
        Ok(())
    }

    /// Posts the end-of-phase SEND on every QP that has not had it, and
    /// whose credits (if counted) allow one more SEND; returns how many
    /// it posted.
    fn post_ends(
        &self,
        posted: &mut [bool],
        mut credits: Option<&mut [QpCredits]>,
    ) -> anyhow::Result<usize> {
        let mut n = 0;
        for (q, qp) in self.qps.iter().enumerate() {
            if posted[q] {
                continue;
            }
            if let Some(c) = credits.as_deref_mut()
                && !c[q].may_send(self.region, 1)?
            {
                continue;
            }
            qp.post_send(&SendWr {
                wr_id: END_FLAG | wr_id(q, 0),
                local: LocalSge {
                    addr: self.working[q],
                    length: 0,
                    lkey: self.lkey,
                },
                op: Op::Send { imm: None },
                signaled: true,
                inline: false,
            })
            .context("posting the end of the phase")?;
            if let Some(c) = credits.as_deref_mut() {
                c[q].sent(1)?;
            }
            posted[q] = true;
            n += 1;
        }
        Ok(n)
    }

    fn run(
        &self,
        cfg: &BwConfig,
        size: u64,
        timeout: Duration,
        start: &StartGate,
        watch: &PeerWatch,
        mut credits: Option<&mut [QpCredits]>,
    ) -> anyhow::Result<ThreadOutcome> {
        let n = self.qps.len();
        let plan = self.plan;
        let inline = O::INLINE && size <= u64::from(cfg.inline_size);
        let length = u32::try_from(size).context("message size")?;
        let mut sched = BwScheduler::new(
            Window {
                // A side that does not send posts nothing.
                iters: if plan.sends {
                    cfg.duration.is_none().then_some(cfg.iters)
                } else {
                    Some(0)
                },
                tx_depth: cfg.tx_depth,
                cq_mod: engine::bench::config::signal_interval(cfg.cq_mod, cfg.post_list, size),
                post_list: cfg.post_list,
            },
            n,
        );
        let post_list = u64::from(cfg.post_list);
        // Each QP's requests, built and checked once for this size; a
        // post only moves their offsets (the ring) and signal flags.
        let ring = Ring::for_size(size);
        let window = ring.span(size);
        let mut lists = (0..n)
            .map(|q| {
                let template = self.request(q, 0, size, length, true, inline);
                PreparedSends::new(&template, cfg.post_list as usize, window)
            })
            .collect::<Result<Vec<_>, _>>()
            .context("preparing the work requests")?;
        let mut wcs: Vec<WorkCompletion> = vec![WorkCompletion::default(); POLL_BATCH];
        let mut timeline = Timeline::with_capacity(MAX_SAMPLES);
        let mut window = cfg.duration.map(|d| {
            let (total, margin) = d.spans();
            let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
            DurationWindow::new(ns(total), ns(margin))
        });
        // What this side's figures count: its completed operations, or
        // (receiving only) the messages it received.
        let counts_receives = !plan.sends && plan.recv.is_some();
        let expected = match (plan.recv, cfg.duration) {
            (Some(_), None) => Some(cfg.iters.saturating_mul(n as u64)),
            _ => None,
        };
        let ends_wanted = plan.sends && plan.peer_receives && cfg.duration.is_some();
        let mut seen = Received {
            last: vec![(0, 0); n],
            ..Received::default()
        };
        let mut ends_posted = vec![false; n];
        let mut ends_left = if ends_wanted { n } else { 0 };

        if !start.wait() {
            bail!("not started: another worker thread could not be created");
        }
        if cfg.warm_up && plan.sends {
            self.warm_up(cfg, size, length, inline, timeout, watch, &mut wcs)?;
        }
        let begin = Instant::now();
        let mut last_progress = begin;
        let mut end = begin;
        let mut empty_polls = 0u32;
        let mut next_cq = 0usize;
        loop {
            for (q, list) in lists.iter_mut().enumerate() {
                loop {
                    // Counted credits (SENDs on iWARP): a whole batch's,
                    // or nothing on this QP for now.
                    if let Some(c) = credits.as_deref_mut()
                        && !c[q].may_send(self.region, post_list)?
                    {
                        break;
                    }
                    let Some(first) = sched.next_batch(q) else {
                        break;
                    };
                    for (k, i) in (first..first + post_list).enumerate() {
                        list.set(k, wr_id(q, i), ring.offset(i), sched.signaled(i))?;
                        if let Some((compare, swap)) = self.op.operands(i) {
                            list.set_compare_swap(k, compare, swap)?;
                        }
                    }
                    self.qps[q].post_prepared(list)?;
                    sched.posted(q);
                    if let Some(c) = credits.as_deref_mut() {
                        c[q].sent(post_list)?;
                    }
                }
            }

            let cq = &self.cqs[next_cq];
            next_cq = if next_cq + 1 == self.cqs.len() {
                0
            } else {
                next_cq + 1
            };
            let got = cq.poll(&mut wcs)?;
            if got > 0 {
                empty_polls = 0;
                let now = Instant::now();
                for wc in &wcs[..got] {
                    let id = wc.wr_id();
                    if is_recv(id) {
                        let Some(r) = plan.recv else {
                            bail!("a receive completed on a side that posted none");
                        };
                        if self.received(wc, r, size, &mut seen)? {
                            seen.count += 1;
                            seen.first.get_or_insert(now);
                            seen.last_at = Some(now);
                        }
                        if let Some(c) = credits.as_deref_mut() {
                            let q = wr_id_qp(id).min(n - 1);
                            c[q].reposted(&self.qps[q], q, self.region)?;
                        }
                    } else if is_grant(id) {
                        self.succeeded(wc)?;
                        let q = wr_id_qp(id & !GRANT_FLAG).min(n - 1);
                        if let Some(c) = credits.as_deref_mut() {
                            c[q].written(&self.qps[q], q, self.region)?;
                        }
                    } else if id & END_FLAG != 0 {
                        self.succeeded(wc)?;
                        seen.ends_acked += 1;
                    } else {
                        self.succeeded(wc)?;
                        sched.complete(id)?;
                    }
                }
                if watch.should_stop() {
                    return Err(watch.reason());
                }
                last_progress = now;
                let count = if counts_receives {
                    seen.count
                } else {
                    sched.completed_total()
                };
                // A receiving side's count begins with its first message
                // (perftest's server); in duration mode its window runs
                // on its own clock from the start, which is before the
                // sender's (the server starts as it sends the barrier), so
                // the sender's end of phase arrives after the window.
                let since = if counts_receives && window.is_none() {
                    seen.first.unwrap_or(now)
                } else {
                    begin
                };
                if !counts_receives || seen.count > 0 {
                    end = now;
                }
                let t = (now - since).as_nanos() as u64;
                timeline.record(t, count);
                if let Some(w) = &mut window {
                    w.observe(t, count);
                    if sched.is_posting() && !w.keep_posting(t) {
                        sched.stop_posting();
                    }
                }
            } else {
                empty_polls += 1;
                if empty_polls >= POLLS_PER_CLOCK_CHECK {
                    empty_polls = 0;
                    if watch.should_stop() {
                        return Err(watch.reason());
                    }
                    let now = Instant::now();
                    if let Some(w) = &window
                        && sched.is_posting()
                        && !w.keep_posting((now - begin).as_nanos() as u64)
                    {
                        sched.stop_posting();
                    }
                    if now - last_progress > timeout {
                        return Err(if sched.is_done() && plan.recv.is_some() {
                            receive_stalled(timeout, seen.count, expected)
                        } else {
                            stalled(
                                O::NAME,
                                timeout,
                                sched.posted_total(),
                                sched.completed_total(),
                            )
                        });
                    }
                }
            }
            let sent = sched.is_done();
            if sent && ends_left > 0 {
                ends_left -= self.post_ends(&mut ends_posted, credits.as_deref_mut())?;
            }
            let sends_done = sent && (!ends_wanted || seen.ends_acked == n);
            let receives_done = match (plan.recv, expected) {
                (None, _) => true,
                (Some(_), Some(e)) => seen.count >= e,
                (Some(_), None) => seen.ends == n,
            };
            let grants_done = credits
                .as_deref()
                .is_none_or(|c| c.iter().all(QpCredits::settled));
            if sends_done && receives_done && grants_done {
                break;
            }
            // Duration mode ends at its total time, as perftest's: the work
            // still in flight is not waited for (tx depth × QPs × 8 MiB is
            // gigabytes, minutes on a slow link); the window is complete.
            // Both sides exchange their results before anything is freed.
            // Not with --run_infinitely: the next period's scheduler starts
            // from an empty send queue on these same QPs, so this one drains
            // (a real NIC would refuse the overflow; soft-RoCE forgives it);
            // nor where the peer counts every operation (its receives, an
            // atomic target).
            if let Some(w) = &window
                && !cfg.endless
                && !plan.drain
                && plan.recv.is_none()
                && !sched.is_posting()
                && w.measured().is_some()
            {
                break;
            }
        }

        if counts_receives && let Some(w) = &mut window {
            // The sender closed the phase (every QP's end of phase came)
            // before this side's clock reached the window's end: the
            // window ends at the last message.
            let last = seen.last_at.unwrap_or(end);
            w.close_at((last - begin).as_nanos() as u64, seen.count);
        }
        let begin = if counts_receives && window.is_none() {
            seen.first.unwrap_or(begin)
        } else {
            begin
        };
        let (messages, elapsed_ns) = match &window {
            None if counts_receives => (seen.count, (end - begin).as_nanos() as u64),
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
            operations: if counts_receives {
                seen.count
            } else {
                sched.completed_total()
            },
            received: seen.last,
        })
    }
}

/// The data check of an atomic target: its words hold, summed over every
/// QP, exactly the operations the client completed (each fetch-and-add
/// adds 1; each compare-and-swap of the chain counts its word up by 1, and
/// one whose compare failed would leave it short).
fn check_atomics(side: &Side, client: &BwResult) -> anyhow::Result<DataCheck> {
    let words = atomic_words();
    let mut sum = 0u64;
    for q in 0..side.qps.len() {
        sum = sum.wrapping_add(side.atomic_sum(q, words)?);
    }
    if sum != client.operations {
        bail!(
            "data check failed: the target's words sum to {sum}, the client completed {} atomic operations",
            client.operations
        );
    }
    Ok(DataCheck {
        bytes_checked: words * ATOMIC_SIZE * side.qps.len() as u64,
    })
}

/// `--expect-rate`: the port's rate and error counters, read before and
/// after the run.
#[derive(Debug)]
struct LinkWatch {
    expect: ExpectRate,
    rate: Option<LinkRate>,
    before: CounterSnapshot,
    port: crate::sysfs::PortView,
    min_efficiency: f64,
}

/// The bandwidth tests (`write_bw`, `read_bw`).
pub struct BwMeasure {
    spec: TestSpec,
    cfg: BwConfig,
    role: Role,
    style: TableStyle,
    output: Option<OutputFigure>,
    limits: Limits,
    /// `--use_hugepages`.
    huge_pages: bool,
    /// `ibv_wr_*`, or `ibv_post_send` with `--use_old_post_send`.
    post_path: verbs::PostPath,
    /// `--report-both` with `-b`: each size's own and peer figures.
    report_both: Option<Vec<(BwResult, BwResult)>>,
    expect: Option<ExpectRate>,
    sysfs: crate::sysfs::Sysfs,
    min_efficiency: f64,
    watch: Option<LinkWatch>,
    best_gbps: f64,
    check: Option<DataCheck>,
    /// The port is iWARP: a SEND test counts receive credits.
    iwarp: bool,
    /// Per QP, the receive credits (made at the first size, kept: the
    /// counts run on across sizes).
    credits: Option<Vec<QpCredits>>,
}

impl BwMeasure {
    fn plan(&self, role: Role) -> Plan {
        Plan::of(self.spec, &self.cfg, role)
    }

    /// Whether SENDs are paced by receive credits: on iWARP, which has no
    /// receiver-not-ready retry ([`super::credit`]).
    fn counts_credits(&self) -> bool {
        self.iwarp && self.spec.verb == Verb::Send
    }

    /// The data check of a read: every ring slot the size's reads landed
    /// in holds the peer's pattern.
    fn check_reads(&self, side: &Side, size: u64, per_qp: u64) -> anyhow::Result<DataCheck> {
        let touched = ring_slots(size).min(per_qp.max(1));
        let mut bytes_checked = 0;
        for q in 0..side.qps.len() {
            let slots = (0..touched).map(|i| ring_offset(size, i)..ring_offset(size, i) + size);
            bytes_checked += side.check_pattern(q, slots)?;
        }
        Ok(DataCheck { bytes_checked })
    }
}

impl std::fmt::Debug for BwMeasure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BwMeasure")
            .field("spec", &self.spec)
            .finish()
    }
}

impl Measure for BwMeasure {
    type Config = BwConfig;
    type Outcome = BwResult;

    fn new(spec: TestSpec, opts: &RunOptions, cfg: BwConfig, role: Role) -> anyhow::Result<Self> {
        let out = &opts.output;
        let style = TableStyle {
            unit: out.unit,
            // perftest measures no peak on a send server (one that only
            // receives), and says so.
            peak: out.shows_peak(&cfg)
                && !(role == Role::Server
                    && spec.receives(cfg.write_with_imm)
                    && !cfg.bidirectional),
            // perftest's CPU column exists in duration mode only.
            cpu_column: out.cpu_column(cfg.duration.is_some()),
        };
        let report_both = (out.report_both && cfg.bidirectional).then(Vec::new);
        Ok(Self {
            spec,
            cfg,
            role,
            report_both,
            huge_pages: opts.local.huge_pages,
            post_path: opts.local.post_path,
            style,
            output: out.figure,
            limits: Limits::new(opts.verdicts.limit_bw, opts.verdicts.limit_msgrate),
            expect: opts.verdicts.expect_rate,
            sysfs: opts.local.sysfs.clone(),
            min_efficiency: opts.verdicts.min_efficiency,
            watch: None,
            best_gbps: 0.0,
            check: None,
            iwarp: false,
            credits: None,
        })
    }

    fn config(&self) -> &BwConfig {
        &self.cfg
    }
    fn config_mut(&mut self) -> &mut BwConfig {
        &mut self.cfg
    }

    fn layout(&self, role: Role) -> Layout {
        let plan = self.plan(role);
        let credits = self.counts_credits();
        let mut access = self.spec.access();
        // The peer writes its grants into a sender's credit words.
        access.remote_write |= credits && plan.sends;
        Layout {
            qps: self.cfg.qps,
            threads: self.cfg.threads,
            // A receiver's grant writes have send-queue room of their own.
            tx_depth: self.cfg.tx_depth
                + if credits && plan.recv.is_some() {
                    engine::bench::credit::GRANT_WRITES
                } else {
                    0
                },
            inline_size: self.cfg.inline_size,
            area: super::credit::area(self.cfg.buffer_per_qp(), credits),
            initiates: plan.sends,
            access,
            huge_pages: self.huge_pages,
            post_path: self.post_path,
            rx_depth: plan.recv.map_or(0, |_| self.cfg.rx_depth),
            recv_len: plan.recv.map_or(0, |r| r.recv_len),
        }
    }

    /// `--write_with_imm`.
    fn immediate(&self, _role: Role) -> Option<&'static str> {
        self.cfg.write_with_imm.then_some("--write_with_imm")
    }

    fn on_port(&mut self, port: &Port) {
        self.iwarp = port.ctx.transport() == verbs::Transport::Iwarp;
        if let Some(expect) = self.expect {
            let view = self.sysfs.port(port.ctx.name(), port.port);
            self.watch = Some(LinkWatch {
                expect,
                rate: view.rate().ok(),
                before: view.error_counters(),
                port: view,
                min_efficiency: self.min_efficiency,
            });
        }
    }

    /// As the default, refusing first (exit 2) a post list that receive
    /// credits could never cover.
    fn create_side(&mut self, port: Port, role: Role) -> anyhow::Result<Side> {
        if self.counts_credits() {
            super::credit::interval(&self.cfg)?;
        }
        Side::create(port, &self.layout(role))
    }

    fn banner(&self, role: Role, info: &mut BannerInfo) {
        let c = &self.cfg;
        let plan = self.plan(role);
        info.qps = c.qps;
        info.tx_depth = plan.sends.then_some(c.tx_depth);
        info.post_list = c.post_list;
        info.rx_depth = plan.recv.map(|_| c.rx_depth);
        info.cq_mod = c.cq_mod;
        info.poll_batch = POLL_BATCH as u32;
        info.bidirectional = c.bidirectional;
        info.inline_size = c.inline_size;
        info.extra.push(format!(" Threads         : {}", c.threads));
    }

    fn context(&self, ctx: RunContext) -> RunContext {
        RunContext {
            direction: Some(if self.cfg.bidirectional {
                "bidirectional"
            } else {
                "unidirectional"
            }),
            measured_on: match (
                self.plan(self.role).peer_receives,
                self.cfg.bidirectional,
                self.role,
            ) {
                (false, _, _) => None,
                (true, true, _) => Some("both sides' senders"),
                (true, false, Role::Client) => Some("sender"),
                (true, false, Role::Server) => Some("receiver"),
            },
            ..ctx
        }
    }

    fn table(&self, _role: Role) -> Option<Box<dyn Report>> {
        Some(match self.output {
            Some(f) => Box::new(FigureLines::new(f, self.style)),
            None => Box::new(Table::new(Stdout, self.style)),
        })
    }

    fn table_style(&self) -> TableStyle {
        self.style
    }

    fn prepare(&mut self, side: &Side, size: u64) -> anyhow::Result<()> {
        if self.spec.verb == Verb::Read && side.layout().initiates {
            side.zero_working()?;
        }
        if let Some(r) = self.plan(self.role).recv {
            // Messages that came after the last size stopped counting.
            side.drain_receives()?;
            if r.sends {
                side.zero_exposed(u64::from(r.recv_len).max(engine::bench::config::RING_BYTES))?;
            }
        }
        if self.spec.verb == Verb::Send && side.layout().initiates {
            side.fill_send_pattern(size)?;
        }
        if self.spec.is_atomic() && self.role == Role::Server {
            // The target's words count the operations of this size.
            side.zero_exposed(engine::bench::config::RING_BYTES)?;
        }
        Ok(())
    }

    fn run_size(&mut self, ctx: SizeCtx<'_>) -> anyhow::Result<Option<BwResult>> {
        let plan = self.plan(ctx.role);
        if !plan.sends && plan.recv.is_none() {
            return Ok(None);
        }
        let SizeCtx {
            side,
            remote,
            size,
            timeout,
            ch,
            ..
        } = ctx;
        if self.counts_credits() && self.credits.is_none() {
            let messages = self.cfg.buffer_per_qp();
            self.credits = Some(QpCredits::for_side(side, remote, &self.cfg, messages)?);
        }
        let cfg = &self.cfg;
        let cpu = self.style.cpu_column;
        let credits = &mut self.credits;
        macro_rules! run {
            ($op:expr) => {
                ch.with_heartbeat(|w| {
                    measure(
                        $op,
                        plan,
                        side,
                        cfg,
                        size,
                        remote,
                        timeout,
                        w,
                        cpu,
                        credits.as_deref_mut(),
                    )
                })?
            };
        }
        let (measured, received) = match self.spec.verb {
            Verb::Write => run!(WriteOp {
                imm: cfg.write_with_imm
            }),
            Verb::Read => run!(ReadOp),
            Verb::Send => run!(SendOp),
            Verb::FetchAdd => run!(FetchAddOp),
            Verb::CmpSwap => run!(CmpSwapOp),
            Verb::WriteImm => anyhow::bail!(
                "{} has no bandwidth loop of its own (write_bw --write_with_imm)",
                self.spec.op_name()
            ),
        }?;
        if self.spec.verb == Verb::Read {
            let per_qp = measured.messages / u64::from(cfg.qps).max(1);
            // The passive peer hears heartbeats through the check too.
            let check = ch.with_heartbeat(|_| self.check_reads(side, size, per_qp))??;
            self.check = Some(check);
        }
        if plan.recv.is_some_and(|r| r.sends) {
            let bytes_checked = ch.with_heartbeat(|_| -> anyhow::Result<u64> {
                let mut bytes_checked = 0;
                for (q, &(slot, count)) in received.iter().enumerate() {
                    bytes_checked += side.check_received(q, size, slot, count)?;
                }
                Ok(bytes_checked)
            })??;
            self.check = Some(DataCheck { bytes_checked });
        }
        let mut result = BwResult::from_measurement(&measured);
        if !plan.sends {
            // A receiving side's own figures (perftest's send server).
            result.operations = measured.operations;
        }
        Ok(Some(result))
    }

    fn shown(
        &mut self,
        side: &Side,
        role: Role,
        _size: u64,
        mine: Option<&BwResult>,
        peer: Option<BwResult>,
    ) -> anyhow::Result<Option<Shown>> {
        if role == Role::Server && self.spec.is_atomic() {
            let client = peer.as_ref().context("the client sent no result")?;
            self.check = Some(check_atomics(side, client)?);
        }
        let (figures, peer_result) =
            shown_figures(role, &self.cfg, mine, peer).map_err(|e| anyhow::anyhow!(e))?;
        if let (Some(both), Some(m), Some(p)) = (&mut self.report_both, mine, &peer_result)
            && role == Role::Client
        {
            both.push((*m, *p));
        }
        self.best_gbps = self.best_gbps.max(figures.bw_avg_gbps);
        self.limits
            .observe(self.style.bandwidths(&figures).1, figures.msg_rate_mpps);
        Ok(Some(Shown {
            figures: Figures::Bw(figures),
            peer_result,
            histogram: None,
            data_check: self.check.take(),
            clock: None,
        }))
    }

    /// `--report-both`: perftest's "Local results" and "Remote results"
    /// tables after the summed one.
    fn after_table(&mut self, out: &mut crate::output::Output) -> std::io::Result<()> {
        let Some(both) = self.report_both.take().filter(|b| !b.is_empty()) else {
            return Ok(());
        };
        if self.output.is_some() {
            return Ok(());
        }
        let style = self.style;
        out.dump(|w| {
            for (title, pick) in [("Local", 0), ("Remote", 1)] {
                writeln!(w, "{RESULT_LINE}\n {title} results: \n{RESULT_LINE}")?;
                writeln!(w, "{}", Table::<Vec<u8>>::header(style))?;
                for (mine, peer) in &both {
                    let r = if pick == 0 { mine } else { peer };
                    writeln!(w, "{}", Table::<Vec<u8>>::row(r, style))?;
                }
            }
            writeln!(w, "{RESULT_LINE}")?;
            w.flush()
        })
    }

    fn verdicts(&mut self, _side: &Side) -> Vec<VerdictRecord> {
        // perftest checks its limits where a side measured (both sides of
        // a bidirectional run); the runner asks only the client for its
        // verdicts, so here the client judges.
        let mut verdicts = if self.plan(self.role).sends {
            self.limits.verdicts(self.style.unit.label())
        } else {
            Vec::new()
        };
        let Some(w) = self.watch.take() else {
            return verdicts;
        };
        let after = w.port.error_counters();
        verdicts.push(VerdictRecord::Link(link::evaluate(&VerdictInput {
            expect: w.expect,
            negotiated: w.rate,
            min_efficiency: w.min_efficiency,
            measured_gbps: self.best_gbps,
            directions: if self.cfg.bidirectional { 2 } else { 1 },
            rises: link::rises(&w.before, &after),
        })));
        verdicts
    }
}

#[cfg(test)]
mod tests {
    use super::StartGate;

    #[test]
    fn a_called_off_start_releases_every_waiting_worker() {
        for go in [true, false] {
            let gate = StartGate::default();
            let seen: Vec<bool> = std::thread::scope(|s| {
                let waiters: Vec<_> = (0..3).map(|_| s.spawn(|| gate.wait())).collect();
                gate.open(go);
                waiters.into_iter().map(|w| w.join().unwrap()).collect()
            });
            assert_eq!(seen, vec![go; 3]);
        }
    }
}
