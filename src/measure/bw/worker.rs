//! One worker thread's measured loop of a message size: a [`Worker`]
//! posts on its QPs what the scheduler allows, polls its CQs in turn,
//! checks every completion (receives re-posted, credits granted, ends of
//! phase) and reads the clock only when completions arrive and every
//! [`POLLS_PER_CLOCK_CHECK`] empty polls.

use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use engine::bench::config::{BwConfig, Ring, ring_offset};
use engine::bench::plan::{Plan, Receiving};
use engine::bench::sched::{
    BwScheduler, DurationWindow, Window, is_recv, recv_slot, wr_id, wr_id_qp,
};
use engine::proto::wire::QpInfo;
use engine::results::bw::Timeline;
use verbs::{
    BoundQueuePair, CompletionQueue, LocalSge, MemoryRegion, Op, PreparedSends, SendWr,
    WorkCompletion,
};

use super::ops::BwOp;
use crate::measure::credit::{GRANT_FLAG, QpCredits, is_grant};
use crate::measure::{receive_failed, wrong_size};
use crate::oob::PeerWatch;
use crate::side::Side;

/// Empty polls between two clock reads.
pub const POLLS_PER_CLOCK_CHECK: u32 = 4096;
/// Completions taken per poll.
pub(super) const POLL_BATCH: usize = 32;
/// Timeline samples kept per thread for the peak figure.
const MAX_SAMPLES: usize = 4096;

/// A duration-mode phase closes, on each QP whose peer receives, with a
/// zero-length SEND (every message size is 1 byte or more, so it is told
/// apart by its length; no immediate data, which iWARP has not): every
/// message before it on the QP has been received (RC delivers in order).
/// This bit marks its `wr_id` (never a scheduler's: bit 62).
const END_FLAG: u64 = 1 << 62;

/// The messages a worker posts: their size, their SGE's length, and
/// whether they go inline.
#[derive(Debug, Clone, Copy)]
struct Shape {
    size: u64,
    length: u32,
    inline: bool,
}

/// What the measured loop of one message size runs: this side's plan,
/// its QPs and the peer's, the configuration and the bound on silence.
#[derive(Debug, Clone, Copy)]
pub struct SizeRun<'a> {
    /// What this side posts and receives.
    pub plan: Plan,
    /// This side's QPs, CQs and memory.
    pub side: &'a Side,
    /// The test's configuration.
    pub cfg: &'a BwConfig,
    /// The message size.
    pub size: u64,
    /// The peer's QPs, one per ours.
    pub remote: &'a [QpInfo],
    /// `--timeout`: the longest wait without progress.
    pub timeout: Duration,
    /// perftest's `--cpu_util`: sample the system's CPU over the window.
    pub system_cpu: bool,
}

/// The start line of the worker threads: opened once every one of them
/// exists, or called off when one could not be created.
#[derive(Debug, Default)]
pub(super) struct StartGate {
    go: Mutex<Option<bool>>,
    opened: Condvar,
}

impl StartGate {
    pub(super) fn open(&self, go: bool) {
        *self.go.lock().unwrap_or_else(PoisonError::into_inner) = Some(go);
        self.opened.notify_all();
    }

    /// Waits until the gate is opened or called off; `true` to start.
    pub(super) fn wait(&self) -> bool {
        let mut go = self.go.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(g) = *go {
                return g;
            }
            go = self.opened.wait(go).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// One worker thread's figures.
pub(super) struct ThreadOutcome {
    pub(super) begin: Instant,
    pub(super) end: Instant,
    pub(super) messages: u64,
    /// Measured span of this thread (duration mode), ns.
    pub(super) elapsed_ns: u64,
    pub(super) peak: Option<f64>,
    /// Every operation completed (or message received), margins included.
    pub(super) operations: u64,
    /// Per QP: the receive slot of its last message, and its messages.
    pub(super) received: Vec<(u32, u64)>,
}

pub(super) struct Worker<'a, O> {
    pub(super) op: O,
    pub(super) plan: Plan,
    pub(super) qps: &'a [BoundQueuePair],
    /// This thread's CQs (its QPs spread over them; polled in turn).
    pub(super) cqs: &'a [CompletionQueue],
    pub(super) working: Vec<u64>,
    pub(super) exposed: Vec<u64>,
    pub(super) remote: &'a [QpInfo],
    pub(super) lkey: u32,
    /// The region (for the credit words).
    pub(super) region: &'a MemoryRegion,
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
    fn request(&self, q: usize, i: u64, shape: Shape, signaled: bool) -> SendWr {
        let Shape {
            size,
            length,
            inline,
        } = shape;
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
    fn warm_up(
        &self,
        run: &SizeRun<'_>,
        shape: Shape,
        watch: &PeerWatch,
        wcs: &mut [WorkCompletion],
    ) -> anyhow::Result<()> {
        let timeout = run.timeout;
        let per_qp = u64::from(run.cfg.tx_depth);
        for (q, qp) in self.qps.iter().enumerate() {
            for i in 0..per_qp {
                qp.post_send(&self.request(q, i, shape, true))
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

    /// This thread's run of one size: prepared, started with the others,
    /// posted and polled until its plan is done, then summed up.
    pub(super) fn run(
        &self,
        run: &SizeRun<'_>,
        start: &StartGate,
        watch: &PeerWatch,
        mut credits: Option<&mut [QpCredits]>,
    ) -> anyhow::Result<ThreadOutcome> {
        let cfg = run.cfg;
        let shape = Shape {
            size: run.size,
            length: u32::try_from(run.size).context("message size")?,
            inline: O::INLINE && run.size <= u64::from(cfg.inline_size),
        };
        let mut st = self.prepare(run, shape)?;
        if !start.wait() {
            bail!("not started: another worker thread could not be created");
        }
        if cfg.warm_up && self.plan.sends {
            self.warm_up(run, shape, watch, &mut st.wcs)?;
        }
        let begin = Instant::now();
        let mut last_progress = begin;
        let mut end = begin;
        let mut empty_polls = 0u32;
        let mut next_cq = 0usize;
        loop {
            self.post_ready(&mut st, &mut credits)?;

            let cq = &self.cqs[next_cq];
            next_cq = if next_cq + 1 == self.cqs.len() {
                0
            } else {
                next_cq + 1
            };
            let got = cq.poll(&mut st.wcs)?;
            if got > 0 {
                empty_polls = 0;
                let now = Instant::now();
                self.take_completions(&mut st, got, now, run.size, &mut credits)?;
                if watch.should_stop() {
                    return Err(watch.reason());
                }
                last_progress = now;
                st.record_progress(now, begin, &mut end);
            } else {
                empty_polls += 1;
                if empty_polls >= POLLS_PER_CLOCK_CHECK {
                    empty_polls = 0;
                    if watch.should_stop() {
                        return Err(watch.reason());
                    }
                    let now = Instant::now();
                    st.stop_posting_after_window(now, begin);
                    if now - last_progress > run.timeout {
                        return Err(st.stall(run.timeout, self.plan));
                    }
                }
            }
            if self.finished(&mut st, &mut credits)? {
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
            if let Some(w) = &st.window
                && !cfg.endless
                && !self.plan.drain
                && self.plan.recv.is_none()
                && !st.sched.is_posting()
                && w.measured().is_some()
            {
                break;
            }
        }
        st.outcome(begin, end)
    }

    /// A size's per-thread state, built before the start: the scheduler,
    /// each QP's requests (built and checked once for this size; a post
    /// only moves their offsets, the ring, and signal flags), the window.
    fn prepare(&self, run: &SizeRun<'_>, shape: Shape) -> anyhow::Result<ThreadRun> {
        let (cfg, size) = (run.cfg, run.size);
        let n = self.qps.len();
        let plan = self.plan;
        let sched = BwScheduler::new(
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
        let ring = Ring::for_size(size);
        let span = ring.span(size);
        let lists = (0..n)
            .map(|q| {
                let template = self.request(q, 0, shape, true);
                PreparedSends::new(&template, cfg.post_list as usize, span)
            })
            .collect::<Result<Vec<_>, _>>()
            .context("preparing the work requests")?;
        let window = cfg.duration.map(|d| {
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
        Ok(ThreadRun {
            sched,
            post_list: u64::from(cfg.post_list),
            ring,
            lists,
            wcs: vec![WorkCompletion::default(); POLL_BATCH],
            timeline: Timeline::with_capacity(MAX_SAMPLES),
            window,
            counts_receives,
            expected,
            ends_wanted,
            seen: Received {
                last: vec![(0, 0); n],
                ..Received::default()
            },
            ends_posted: vec![false; n],
            ends_left: if ends_wanted { n } else { 0 },
            op_name: O::NAME,
        })
    }

    /// Posts on every QP as much as the scheduler (and the counted
    /// credits) allow.
    #[inline]
    fn post_ready(
        &self,
        st: &mut ThreadRun,
        credits: &mut Option<&mut [QpCredits]>,
    ) -> anyhow::Result<()> {
        let post_list = st.post_list;
        for (q, list) in st.lists.iter_mut().enumerate() {
            loop {
                // Counted credits (SENDs on iWARP): a whole batch's,
                // or nothing on this QP for now.
                if let Some(c) = credits.as_deref_mut()
                    && !c[q].may_send(self.region, post_list)?
                {
                    break;
                }
                let Some(first) = st.sched.next_batch(q) else {
                    break;
                };
                for (k, i) in (first..first + post_list).enumerate() {
                    list.set(k, wr_id(q, i), st.ring.offset(i), st.sched.signaled(i))?;
                    if let Some((compare, swap)) = self.op.operands(i) {
                        list.set_compare_swap(k, compare, swap)?;
                    }
                }
                self.qps[q].post_prepared(list)?;
                st.sched.posted(q);
                if let Some(c) = credits.as_deref_mut() {
                    c[q].sent(post_list)?;
                }
            }
        }
        Ok(())
    }

    /// The `got` completions polled at `now`: receives checked, counted
    /// and re-posted, credit grants and ends of phase noted, operations
    /// completed in the scheduler.
    #[inline]
    fn take_completions(
        &self,
        st: &mut ThreadRun,
        got: usize,
        now: Instant,
        size: u64,
        credits: &mut Option<&mut [QpCredits]>,
    ) -> anyhow::Result<()> {
        let n = self.qps.len();
        for wc in &st.wcs[..got] {
            let id = wc.wr_id();
            if is_recv(id) {
                let Some(r) = self.plan.recv else {
                    bail!("a receive completed on a side that posted none");
                };
                if self.received(wc, r, size, &mut st.seen)? {
                    st.seen.count += 1;
                    st.seen.first.get_or_insert(now);
                    st.seen.last_at = Some(now);
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
                st.seen.ends_acked += 1;
            } else {
                self.succeeded(wc)?;
                st.sched.complete(id)?;
            }
        }
        Ok(())
    }

    /// Whether this thread is done: everything sent (and its ends of
    /// phase acknowledged), received and granted; posts the ends of phase
    /// once everything is sent.
    #[inline]
    fn finished(
        &self,
        st: &mut ThreadRun,
        credits: &mut Option<&mut [QpCredits]>,
    ) -> anyhow::Result<bool> {
        let n = self.qps.len();
        let sent = st.sched.is_done();
        if sent && st.ends_left > 0 {
            st.ends_left -= self.post_ends(&mut st.ends_posted, credits.as_deref_mut())?;
        }
        let sends_done = sent && (!st.ends_wanted || st.seen.ends_acked == n);
        let receives_done = match (self.plan.recv, st.expected) {
            (None, _) => true,
            (Some(_), Some(e)) => st.seen.count >= e,
            (Some(_), None) => st.seen.ends == n,
        };
        let grants_done = credits
            .as_deref()
            .is_none_or(|c| c.iter().all(QpCredits::settled));
        Ok(sends_done && receives_done && grants_done)
    }
}

/// One worker thread's state through a size's run ([`Worker::prepare`]).
struct ThreadRun {
    sched: BwScheduler,
    /// Requests per post (`--post_list`).
    post_list: u64,
    ring: Ring,
    /// Each QP's prepared requests.
    lists: Vec<PreparedSends>,
    wcs: Vec<WorkCompletion>,
    timeline: Timeline,
    /// Duration mode's window.
    window: Option<DurationWindow>,
    /// This side's figures count the messages it received (a receiving
    /// side only), not its completed operations.
    counts_receives: bool,
    /// Messages due (a receiving side of an iterations run).
    expected: Option<u64>,
    /// Every QP closes the phase with an end-of-phase SEND.
    ends_wanted: bool,
    seen: Received,
    ends_posted: Vec<bool>,
    ends_left: usize,
    /// The operation's name, for errors.
    op_name: &'static str,
}

impl ThreadRun {
    /// Progress at `now`: the count so far on the timeline and in the
    /// window, the run's last moment moved; posting stops once the window
    /// says so.
    #[inline]
    fn record_progress(&mut self, now: Instant, begin: Instant, end: &mut Instant) {
        let count = if self.counts_receives {
            self.seen.count
        } else {
            self.sched.completed_total()
        };
        // A receiving side's count begins with its first message
        // (perftest's server); in duration mode its window runs
        // on its own clock from the start, which is before the
        // sender's (the server starts as it sends the barrier), so
        // the sender's end of phase arrives after the window.
        let since = if self.counts_receives && self.window.is_none() {
            self.seen.first.unwrap_or(now)
        } else {
            begin
        };
        if !self.counts_receives || self.seen.count > 0 {
            *end = now;
        }
        let t = (now - since).as_nanos() as u64;
        self.timeline.record(t, count);
        if let Some(w) = &mut self.window {
            w.observe(t, count);
            if self.sched.is_posting() && !w.keep_posting(t) {
                self.sched.stop_posting();
            }
        }
    }

    /// With nothing completing: posting stops once the window's time is
    /// up.
    fn stop_posting_after_window(&mut self, now: Instant, begin: Instant) {
        if let Some(w) = &self.window
            && self.sched.is_posting()
            && !w.keep_posting((now - begin).as_nanos() as u64)
        {
            self.sched.stop_posting();
        }
    }

    /// The error of a run that made no progress for `timeout`.
    #[cold]
    fn stall(&self, timeout: Duration, plan: Plan) -> anyhow::Error {
        if self.sched.is_done() && plan.recv.is_some() {
            receive_stalled(timeout, self.seen.count, self.expected)
        } else {
            stalled(
                self.op_name,
                timeout,
                self.sched.posted_total(),
                self.sched.completed_total(),
            )
        }
    }

    /// The thread's figures, its run having begun at `begin` and made its
    /// last progress at `end`.
    fn outcome(mut self, begin: Instant, end: Instant) -> anyhow::Result<ThreadOutcome> {
        if self.counts_receives
            && let Some(w) = &mut self.window
        {
            // The sender closed the phase (every QP's end of phase came)
            // before this side's clock reached the window's end: the
            // window ends at the last message.
            let last = self.seen.last_at.unwrap_or(end);
            w.close_at((last - begin).as_nanos() as u64, self.seen.count);
        }
        let begin = if self.counts_receives && self.window.is_none() {
            self.seen.first.unwrap_or(begin)
        } else {
            begin
        };
        let (messages, elapsed_ns) = match &self.window {
            None if self.counts_receives => (self.seen.count, (end - begin).as_nanos() as u64),
            None => (self.sched.completed_total(), (end - begin).as_nanos() as u64),
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
            peak: self.timeline.peak(),
            operations: if self.counts_receives {
                self.seen.count
            } else {
                self.sched.completed_total()
            },
            received: self.seen.last,
        })
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
