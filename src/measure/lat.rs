//! The latency loops: the RDMA WRITE ping-pong (perftest's
//! `run_iter_lat_write`), the SEND ping-pong (`run_iter_lat_send`) and the
//! one-sided loop of reads (perftest's `run_iter_lat`).
//!
//! **Write ping-pong.** Both sides zero their areas before the start
//! barrier; the client goes first. Each side spins until the last byte of
//! its exposed area equals the count it expects (an Acquire load), then
//! stores its own next count in the last byte of its working area and
//! RDMA-WRITEs the message there (inline when it fits), and polls the
//! completion of that write. One sample is one round trip; the reports
//! divide by the test's `rtt_factor` (2).
//!
//! **SEND ping-pong.** Both sides keep a ring of receives posted (`-r`).
//! The client posts a signaled SEND of the size (inline when it fits) and
//! polls until the server's reply has been received and its SEND has
//! completed; the server polls for the client's message, then replies.
//! Each receive is checked for its size and posted again in its slot. One
//! sample is one round trip (`rtt_factor` 2), stamped as the write
//! ping-pong's.
//!
//! **One-sided.** Only the client posts: one signaled RDMA READ of the
//! size from the peer's exposed area into its working area, polled to
//! completion, then the next. The server's CPU takes no part. One sample
//! is one read's round trip (`rtt_factor` 1).
//!
//! In both, the clock is read once per operation, as perftest stamps each
//! post: the sample of operation i runs from the stamp before post i to
//! the stamp before post i+1.

use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use engine::bench::clock::{ClockSource, TickRate};
use engine::proto::wire::QpInfo;
use engine::results::lat::LatRecorder;
use verbs::{BoundQueuePair, CompletionQueue, LocalSge, Op, PreparedSends, SendWr, WorkCompletion};

use std::io;

use engine::bench::config::LatConfig;
use engine::bench::spec::{TestSpec, Verb};
use engine::format::lat_table::{LatTable, dump_samples, dump_unsorted};
use engine::format::report::Report;
use engine::format::table::TableStyle;
use engine::results::lat::lat_verdict;
use engine::results::record::{DataCheck, Figures, RunContext};
use engine::results::verdict::VerdictRecord;
use serde::{Deserialize, Serialize};

use super::{Measure, Shown, SizeCtx};
use crate::clock::{Clock, MonotonicTicks, Ticks, TscTicks};
use crate::oob::{Channel, PeerWatch};
use crate::options::RunOptions;
use crate::output::{FigureLines, Output, Stdout};
use crate::setup::Port;
use crate::side::{Layout, Side};
use crate::stop;
use engine::bench::plan::Role;
use engine::format::banner::BannerInfo;

/// Spins between two clock (and, for the server in duration mode,
/// channel) checks. Large on purpose: the bound is seconds, and a clock
/// read costs ~20 ns on hardware but up to ~2.5 µs under emulation
/// (CLOCK_MONOTONIC on an HPET clocksource), where frequent reads would
/// inflate every sample. The checks read the samples' own clock, so with
/// `--clock tsc` the loop makes no system call but the doorbell.
const SPINS_PER_CHECK: u32 = 1 << 16;
/// Round trips between two looks at the stop flag (a relaxed load).
const ROUND_TRIPS_PER_STOP_CHECK: u64 = 1024;

/// How a side's loop ends.
#[derive(Debug, Clone, Copy)]
pub enum Until {
    /// After this many operations.
    Iterations(u64),
    /// Client: run this long, recording only between the margins.
    Duration {
        /// Whole run.
        total: Duration,
        /// Warm-up and cool-down margin.
        margin: Duration,
    },
    /// Server of a ping-pong in duration mode: until the client's next
    /// control message.
    PeerSaysStop,
}

/// The operation a latency loop measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LatOp {
    /// The RDMA WRITE ping-pong.
    WritePingPong,
    /// The SEND ping-pong (perftest's `run_iter_lat_send`).
    SendPingPong,
    /// One RDMA READ at a time.
    Read,
}

impl LatOp {
    /// Whether both sides take turns (a ping-pong) rather than one side
    /// posting alone.
    fn is_ping_pong(self) -> bool {
        self != Self::Read
    }
}

/// One size on one side: what the client and the server each pass to
/// [`SizeRun::run`] (after [`Side::zero`] and the start barrier).
#[derive(Debug)]
pub struct SizeRun<'a> {
    /// The operation.
    pub op: LatOp,
    /// This side's connected QP and its memory region.
    pub side: &'a Side,
    /// The peer's QP (its exposed area's address and key).
    pub remote: &'a QpInfo,
    /// Message size in bytes.
    pub size: u64,
    /// Whether to post the writes inline.
    pub inline: bool,
    /// Which side this is.
    pub role: Role,
    /// How the loop ends.
    pub until: Until,
    /// Bound on every wait for the peer.
    pub timeout: Duration,
    /// The control channel (peeked by a ping-pong server in duration
    /// mode; `None` where nothing peeks).
    pub ch: Option<&'a Channel>,
    /// Where this side records its samples (a read server records none).
    pub rec: &'a mut LatRecorder,
    /// Whether to stop early (a signal, or the peer stopped).
    pub watch: &'a PeerWatch,
}

/// A SEND ping-pong's receive slot of its last message, and how many
/// messages it received.
pub type LastReceived = (u32, u64);

/// A SEND ping-pong side's receive ring (its exposed area).
#[derive(Debug, Clone, Copy)]
struct RecvRing {
    base: u64,
    recv_len: u32,
    lkey: u32,
    size: u64,
    last_slot: u32,
    received: u64,
}

#[cold]
fn peer_silent(timeout: Duration, count: u64) -> anyhow::Error {
    anyhow!(
        "no reply from the peer for {timeout:?} (--timeout) waiting for message {count}: \
         the peer or the link stopped responding"
    )
}

struct Loop<'a, T> {
    qp: &'a BoundQueuePair,
    cq: &'a CompletionQueue,
    region: &'a verbs::MemoryRegion,
    wc: [WorkCompletion; 1],
    /// SEND ping-pong: our SENDs not yet completed, the receive ring, the
    /// slot of the last message and how many came.
    sends_out: u32,
    recv: Option<RecvRing>,
    recv_off: usize,
    send_off: usize,
    /// The one request, posted again and again unchanged.
    wr: PreparedSends,
    name: &'static str,
    timeout: Duration,
    /// The samples' clock, also used for the waits' bounds: no second,
    /// possibly slower, clock in the loop.
    ticks: &'a T,
    timeout_ticks: u64,
    watch: &'a PeerWatch,
    /// Where a control message from the peer, while we wait for our own
    /// completion, means it stopped (not in a server's timed run, whose
    /// end is the client's message).
    stop_on_message: Option<&'a Channel>,
}

impl SizeRun<'_> {
    /// Runs the loop; returns the number of operations (round trips)
    /// done, the tick rate the samples were converted with, and (SEND
    /// ping-pong) the last message's receive slot and the messages
    /// received.
    ///
    /// # Errors
    /// A failed post or completion, or a peer silent for longer than
    /// `timeout`.
    pub fn run(self, clock: &Clock) -> anyhow::Result<(u64, TickRate, Option<LastReceived>)> {
        let rate = clock.rate_now();
        // One monomorphised loop per source: no branch on the clock inside.
        let (count, received) = match clock.source() {
            ClockSource::Tsc => self.drive(rate, &TscTicks)?,
            ClockSource::Monotonic => self.drive(rate, &MonotonicTicks::starting_now())?,
        };
        Ok((count, rate, received))
    }

    /// The loop; returns the operations done and, for a SEND ping-pong,
    /// the receive slot of the last message and how many came.
    fn drive(
        self,
        rate: TickRate,
        ticks: &impl Ticks,
    ) -> anyhow::Result<(u64, Option<LastReceived>)> {
        let SizeRun {
            op,
            side,
            remote,
            size,
            inline,
            role,
            until,
            timeout,
            ch,
            rec,
            watch,
        } = self;
        let len = usize::try_from(size).context("message size")?;
        let local = LocalSge {
            addr: side.working(0),
            length: u32::try_from(size).context("message size")?,
            lkey: side.lkey(),
        };
        let (wr, name) = match op {
            LatOp::WritePingPong => (
                SendWr {
                    wr_id: 0,
                    local,
                    op: Op::Write {
                        remote_addr: remote.addr,
                        rkey: remote.rkey,
                        imm: None,
                    },
                    signaled: true,
                    inline,
                },
                "RDMA WRITE",
            ),
            LatOp::SendPingPong => (
                SendWr {
                    wr_id: 0,
                    local,
                    op: Op::Send { imm: None },
                    signaled: true,
                    inline,
                },
                "SEND",
            ),
            LatOp::Read => (
                SendWr {
                    wr_id: 0,
                    local,
                    op: Op::Read {
                        remote_addr: remote.addr,
                        rkey: remote.rkey,
                    },
                    signaled: true,
                    inline: false,
                },
                "RDMA READ",
            ),
        };
        let mut lp = Loop {
            qp: &side.qps[0],
            cq: side.cq(0),
            region: side.region(),
            wc: [WorkCompletion::default()],
            sends_out: 0,
            recv: (op == LatOp::SendPingPong).then(|| RecvRing {
                base: side.exposed(0),
                recv_len: side.layout().recv_len,
                lkey: side.lkey(),
                size,
                last_slot: 0,
                received: 0,
            }),
            recv_off: side.exposed_offset(0) + len - 1,
            send_off: side.working_offset(0) + len - 1,
            wr: PreparedSends::new(&wr, 1, u64::from(wr.local.length))
                .context("preparing the work request")?,
            name,
            timeout,
            ticks,
            timeout_ticks: rate.ticks_for_ns(u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX)),
            watch,
            stop_on_message: ch.filter(|_| !matches!(until, Until::PeerSaysStop)),
        };

        // Duration mode in ticks, so the loop never converts.
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let (total, margin) = match until {
            Until::Duration { total, margin } => {
                (rate.ticks_for_ns(ns(total)), rate.ticks_for_ns(ns(margin)))
            }
            _ => (u64::MAX, 0),
        };
        let begin = ticks.now();
        let mut count = 0u64;
        let mut stamp = begin;
        loop {
            match (role, until) {
                (_, Until::Iterations(n)) if count == n => break,
                (Role::Client, Until::Duration { .. }) if stamp.wrapping_sub(begin) >= total => {
                    break;
                }
                _ => {}
            }
            // A responsive peer never lets a wait reach its spin check:
            // look at the stop flag every so many round trips too.
            if count.is_multiple_of(ROUND_TRIPS_PER_STOP_CHECK) && watch.should_stop() {
                return Err(watch.reason());
            }
            let next = count + 1;
            let flag = next as u8;
            match (op, role) {
                (LatOp::WritePingPong, Role::Server) => {
                    if !lp.wait_for(flag, next, until, ch)? {
                        break;
                    }
                    // The server measures too, as perftest's: one round
                    // trip from one arrival of the client's write to the
                    // next (every one it sees, margins included).
                    let arrived = ticks.now();
                    if count > 0 {
                        rec.record(rate.to_ns(arrived.saturating_sub(stamp)));
                    }
                    stamp = arrived;
                    lp.send(Some(flag))?;
                }
                (LatOp::WritePingPong, Role::Client) => {
                    let sent = stamp;
                    lp.send(Some(flag))?;
                    lp.wait_for(flag, next, until, ch)?;
                    stamp = ticks.now();
                    record(rec, rate, until, begin, sent, stamp, total, margin);
                }
                (LatOp::Read, Role::Client) => {
                    let sent = stamp;
                    lp.send(None)?;
                    stamp = ticks.now();
                    record(rec, rate, until, begin, sent, stamp, total, margin);
                }
                (LatOp::SendPingPong, Role::Server) => {
                    if !lp.wait_message(next, until, ch)? {
                        break;
                    }
                    let arrived = ticks.now();
                    if count > 0 {
                        rec.record(rate.to_ns(arrived.saturating_sub(stamp)));
                    }
                    stamp = arrived;
                    lp.post_message()?;
                }
                (LatOp::SendPingPong, Role::Client) => {
                    let sent = stamp;
                    lp.post_message()?;
                    lp.wait_message(next, until, ch)?;
                    stamp = ticks.now();
                    record(rec, rate, until, begin, sent, stamp, total, margin);
                }
                (LatOp::Read, Role::Server) => {
                    bail!("the server of a read latency test posts nothing")
                }
            }
            count = next;
        }
        lp.finish_sends()?;
        Ok((count, lp.recv.map(|r| (r.last_slot, r.received))))
    }
}

/// Records the sample `sent..stamp` (client), inside the margins in
/// duration mode.
#[allow(clippy::too_many_arguments)]
#[inline]
fn record(
    rec: &mut LatRecorder,
    rate: TickRate,
    until: Until,
    begin: u64,
    sent: u64,
    stamp: u64,
    total: u64,
    margin: u64,
) {
    let keep = match until {
        Until::Duration { .. } => {
            let t = stamp.wrapping_sub(begin);
            t >= margin && t <= total.saturating_sub(margin)
        }
        _ => true,
    };
    if keep {
        // A counter read on another CPU a little behind counts as 0.
        rec.record(rate.to_ns(stamp.saturating_sub(sent)));
    }
}

impl<T: Ticks> Loop<'_, T> {
    /// Stores `flag` (ping-pong) into our working area's last byte, posts
    /// the work request, and polls its completion (bounded).
    #[inline]
    fn send(&mut self, flag: Option<u8>) -> anyhow::Result<()> {
        if let Some(f) = flag {
            self.region.write_volatile(self.send_off, f);
        }
        self.qp.post_prepared(&mut self.wr)?;
        let mut deadline = None::<u64>;
        let mut polls = 0u32;
        loop {
            if self.cq.poll(&mut self.wc)? == 1 {
                let wc = &self.wc[0];
                if !wc.is_success() {
                    bail!(
                        "{} on QPN {:#x} completed with {}: the peer may be gone",
                        self.name,
                        self.qp.qp().qpn(),
                        wc.status()
                    );
                }
                return Ok(());
            }
            polls += 1;
            if polls == SPINS_PER_CHECK {
                polls = 0;
                if self.watch.should_stop() {
                    return Err(self.watch.reason());
                }
                // The peer stopped (its QP gone, ours retrying): it said
                // why on the control channel, which the caller reads.
                if self.stop_on_message.is_some_and(Channel::has_pending) {
                    bail!("the peer stopped the measured phase");
                }
                let now = self.ticks.now();
                if now > *deadline.get_or_insert(now.saturating_add(self.timeout_ticks)) {
                    bail!(
                        "no completion for our {} within {:?} (--timeout)",
                        self.name,
                        self.timeout
                    );
                }
            }
        }
    }

    /// SEND ping-pong: posts this turn's SEND (signaled; the next wait
    /// also collects its completion).
    #[inline]
    fn post_message(&mut self) -> anyhow::Result<()> {
        self.qp.post_prepared(&mut self.wr)?;
        self.sends_out += 1;
        Ok(())
    }

    /// SEND ping-pong: polls until the peer's next message is received
    /// (its size checked, the receive posted again) and our SENDs have
    /// completed. `Ok(false)` when a server in duration mode sees the
    /// client's control message instead.
    #[inline]
    fn wait_message(
        &mut self,
        count: u64,
        until: Until,
        ch: Option<&Channel>,
    ) -> anyhow::Result<bool> {
        let mut got = false;
        let mut spins = 0u32;
        let mut since = None::<u64>;
        loop {
            if self.cq.poll(&mut self.wc)? == 1 {
                self.completed(0)?;
                if engine::bench::sched::is_recv(self.wc[0].wr_id()) {
                    got = true;
                }
                if got && self.sends_out == 0 {
                    return Ok(true);
                }
                continue;
            }
            spins += 1;
            if spins == SPINS_PER_CHECK {
                spins = 0;
                if self.peer_ended(&mut since, count, until, ch, !got)? {
                    return Ok(false);
                }
            }
        }
    }

    /// One completion of the SEND ping-pong: a receive (checked, counted,
    /// posted again) or one of our SENDs.
    #[inline]
    fn completed(&mut self, i: usize) -> anyhow::Result<()> {
        let wc = &self.wc[i];
        let qpn = self.qp.qp().qpn();
        if !wc.is_success() {
            if engine::bench::sched::is_recv(wc.wr_id()) {
                return Err(super::receive_failed(qpn, wc));
            }
            bail!(
                "{} on QPN {qpn:#x} completed with {}: the peer may be gone",
                self.name,
                wc.status()
            );
        }
        if !engine::bench::sched::is_recv(wc.wr_id()) {
            self.sends_out = self.sends_out.saturating_sub(1);
            return Ok(());
        }
        let Some(r) = &mut self.recv else {
            bail!("a receive completed on QPN {qpn:#x}, which posted none");
        };
        if u64::from(wc.byte_len()) != r.size {
            return Err(super::wrong_size(qpn, r.size, wc.byte_len()));
        }
        let slot = engine::bench::sched::recv_slot(wc.wr_id());
        crate::side::post_receive(self.qp, 0, r.base, r.recv_len, r.lkey, slot)?;
        r.last_slot = slot;
        r.received += 1;
        Ok(())
    }

    /// After the loop: waits (bounded) for our last SEND's completion, so
    /// none is left for the next size.
    fn finish_sends(&mut self) -> anyhow::Result<()> {
        let mut deadline = None::<u64>;
        let mut polls = 0u32;
        while self.sends_out > 0 {
            if self.cq.poll(&mut self.wc)? == 1 {
                self.completed(0)?;
                continue;
            }
            polls += 1;
            if polls == SPINS_PER_CHECK {
                polls = 0;
                let now = self.ticks.now();
                if now > *deadline.get_or_insert(now.saturating_add(self.timeout_ticks)) {
                    bail!(
                        "no completion for our last {} within {:?} (--timeout)",
                        self.name,
                        self.timeout
                    );
                }
            }
        }
        Ok(())
    }

    /// Spins until the peer's byte equals `flag` (an Acquire load, so the
    /// rest of its message is visible too). `Ok(false)` when a server in
    /// duration mode sees the client's control message instead.
    #[inline]
    fn wait_for(
        &self,
        flag: u8,
        count: u64,
        until: Until,
        ch: Option<&Channel>,
    ) -> anyhow::Result<bool> {
        let mut spins = 0u32;
        let mut since = None::<u64>;
        while self.region.load_acquire(self.recv_off) != flag {
            spins += 1;
            if spins == SPINS_PER_CHECK {
                spins = 0;
                if self.peer_ended(&mut since, count, until, ch, true)? {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// A ping-pong wait's check every [`SPINS_PER_CHECK`] spins: the stop
    /// flag, the peer's control message and the silence bound (counted
    /// from the first check, `since`). `Ok(true)` when a server in
    /// duration mode sees the client's message and `may_end` (nothing of
    /// the round received yet): the end of the timed run. Any other
    /// message mid-loop is the peer's error, which the caller reads.
    #[inline]
    fn peer_ended(
        &self,
        since: &mut Option<u64>,
        count: u64,
        until: Until,
        ch: Option<&Channel>,
        may_end: bool,
    ) -> anyhow::Result<bool> {
        if self.watch.should_stop() {
            return Err(self.watch.reason());
        }
        let now = self.ticks.now();
        let start = *since.get_or_insert(now);
        if ch.is_some_and(Channel::has_pending) {
            if matches!(until, Until::PeerSaysStop) && may_end {
                return Ok(true);
            }
            bail!("the peer stopped the measured phase");
        }
        if now.saturating_sub(start) > self.timeout_ticks {
            return Err(peer_silent(self.timeout, count));
        }
        Ok(false)
    }
}

/// What a latency side tells its peer after a size.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct LatOutcome {
    /// Operations (round trips) done.
    pub round_trips: u64,
}

/// The latency tests (`write_lat`, `read_lat`).
pub struct LatMeasure {
    spec: TestSpec,
    cfg: LatConfig,
    clock: Clock,
    rec: LatRecorder,
    explicit_inline: bool,
    report_histogram: bool,
    report_unsorted: bool,
    huge_pages: bool,
    /// `ibv_wr_*`, or `ibv_post_send` with `--use_old_post_send`.
    post_path: verbs::PostPath,
    perftest_stats: bool,
    /// `--cpu_util` in duration mode: perftest's system CPU figure.
    cpu_util: bool,
    /// That figure for the last size.
    system_cpu: Option<f64>,
    output: Option<engine::format::perftest_json::OutputFigure>,
    json_histogram: bool,
    max_latency: Option<f64>,
    percentile: engine::results::lat::Percentile,
    dumps: Vec<(u64, Vec<u64>)>,
    verdicts: Vec<VerdictRecord>,
    rate: TickRate,
    check: Option<DataCheck>,
}

impl std::fmt::Debug for LatMeasure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LatMeasure")
            .field("spec", &self.spec)
            .finish()
    }
}

impl LatMeasure {
    fn op(&self) -> LatOp {
        match self.spec.verb {
            Verb::Read => LatOp::Read,
            Verb::Send => LatOp::SendPingPong,
            _ => LatOp::WritePingPong,
        }
    }

    fn keep_samples(&self) -> usize {
        match self.cfg.duration {
            None => usize::try_from(self.cfg.iters)
                .unwrap_or(usize::MAX)
                .min(1 << 24),
            Some(_) => 1 << 20,
        }
    }
}

impl LatMeasure {
    /// The size's figures: perftest's computation with
    /// `--perftest-stats` (when every sample was kept), else every sample.
    fn stats(&self, size: u64) -> engine::results::lat::LatStats {
        let f = self.spec.rtt_factor();
        let s = self
            .perftest_stats
            .then(|| self.rec.perftest_stats(size, f))
            .flatten()
            .unwrap_or_else(|| self.rec.stats_per(size, f));
        engine::results::lat::LatStats {
            system_cpu_util_pct: self.system_cpu,
            ..s
        }
    }
}

impl Measure for LatMeasure {
    type Config = LatConfig;
    type Outcome = LatOutcome;

    fn new(spec: TestSpec, opts: &RunOptions, cfg: LatConfig, role: Role) -> anyhow::Result<Self> {
        let out = &opts.output;
        let cpu_util = out.cpu_column(cfg.duration.is_some());
        // Both sides of the write ping-pong measure (as perftest's); a read
        // server posts nothing: its monotonic clock only bounds its waits.
        let measures = role == Role::Client || spec.verb != Verb::Read;
        let clock = if measures {
            Clock::new(opts.local.clock)?
        } else {
            Clock::for_server()
        };
        let mut m = Self {
            spec,
            cfg,
            clock,
            rec: LatRecorder::new(0),
            explicit_inline: role == Role::Client && opts.local.explicit_inline,
            report_histogram: out.report_histogram,
            report_unsorted: out.report_unsorted,
            huge_pages: opts.local.huge_pages,
            post_path: opts.local.post_path,
            perftest_stats: out.perftest_stats,
            cpu_util,
            system_cpu: None,
            output: out.figure,
            json_histogram: out.json_histogram,
            max_latency: opts.verdicts.max_latency,
            percentile: opts.verdicts.percentile,
            dumps: Vec::new(),
            verdicts: Vec::new(),
            rate: TickRate::NANOSECONDS,
            check: None,
        };
        if measures {
            // Allocated (and its pages touched) once; emptied per size.
            m.rec = LatRecorder::new(m.keep_samples());
        }
        Ok(m)
    }

    fn config(&self) -> &LatConfig {
        &self.cfg
    }
    fn config_mut(&mut self) -> &mut LatConfig {
        &mut self.cfg
    }

    fn layout(&self, role: Role) -> Layout {
        Layout {
            qps: 1,
            threads: 1,
            tx_depth: self.spec.defaults().tx_depth,
            inline_size: self.cfg.inline_size,
            // A SEND ping-pong's receives cycle over a page-sized ring.
            area: if self.op() == LatOp::SendPingPong {
                self.cfg.buffer().max(engine::bench::config::RING_BYTES)
            } else {
                self.cfg.buffer()
            },
            initiates: self.op().is_ping_pong() || role == Role::Client,
            access: self.spec.access(),
            huge_pages: self.huge_pages,
            post_path: self.post_path,
            rx_depth: if self.op() == LatOp::SendPingPong {
                self.cfg.rx_depth
            } else {
                0
            },
            recv_len: if self.op() == LatOp::SendPingPong {
                u32::try_from(self.cfg.max_size()).unwrap_or(u32::MAX)
            } else {
                0
            },
        }
    }

    /// When `-I` was not given and the device refuses the default inline
    /// size, falls back to no inline (as perftest does for devices it does
    /// not know), with a warning.
    fn create_side(&mut self, port: Port, role: Role) -> anyhow::Result<Side> {
        if self.explicit_inline || self.cfg.inline_size == 0 {
            return Side::create(port, &self.layout(role));
        }
        let retry = port.clone();
        match Side::create(port, &self.layout(role)) {
            Ok(s) => Ok(s),
            Err(e) if retries_without_inline(&e) => {
                eprintln!(
                    "{}: warning: {} refused {} bytes of inline data; sending without inline",
                    self.spec,
                    retry.ctx.name(),
                    self.cfg.inline_size
                );
                self.cfg.inline_size = 0;
                Side::create(retry, &self.layout(role))
            }
            Err(e) => Err(e),
        }
    }

    fn banner(&self, role: Role, info: &mut BannerInfo) {
        // perftest's latency tests post one at a time: TX depth 1 on the
        // side that posts.
        let posts = role == Role::Client || self.op().is_ping_pong();
        // perftest: on the server of a test with receives.
        info.rx_depth =
            (self.op() == LatOp::SendPingPong && role == Role::Server).then_some(self.cfg.rx_depth);
        info.tx_depth = posts.then_some(1);
        info.inline_size = self.cfg.inline_size;
        let clock = match role {
            Role::Server if self.op() == LatOp::Read => "not used (the client measures)".to_owned(),
            _ => self.clock.describe(),
        };
        info.extra.push(format!(" Clock           : {clock}"));
    }

    fn context(&self, ctx: RunContext) -> RunContext {
        RunContext {
            rtt_factor: self.spec.rtt_factor(),
            reported: Some(if self.spec.rtt_factor() == 1 {
                "full round trip (RTT), microseconds"
            } else {
                "half round trip (RTT/2), microseconds"
            }),
            ..ctx
        }
    }

    fn table(&self, role: Role) -> Option<Box<dyn Report>> {
        // perftest's read_lat server prints no table; its write_lat
        // server prints its own.
        (role == Role::Client || self.op().is_ping_pong()).then(|| match self.output {
            Some(f) => Box::new(FigureLines::new(f, TableStyle::default())) as Box<dyn Report>,
            None => Box::new(
                LatTable::new(Stdout, self.cfg.duration.is_some(), self.spec.rtt_factor())
                    .with_cpu_column(self.cpu_util),
            ),
        })
    }

    fn prepare(&mut self, side: &Side, size: u64) -> anyhow::Result<()> {
        match self.op() {
            // Zero before the barrier: the peer writes as soon as it has
            // the barrier's answer.
            LatOp::WritePingPong => side.zero(0, size),
            LatOp::SendPingPong => {
                side.drain_receives()?;
                side.zero_exposed(engine::bench::config::RING_BYTES.max(size))?;
                side.fill_send_pattern(size)
            }
            LatOp::Read if side.layout().initiates => side.zero_working(),
            LatOp::Read => Ok(()),
        }
    }

    fn run_size(&mut self, ctx: SizeCtx<'_>) -> anyhow::Result<Option<LatOutcome>> {
        let op = self.op();
        let SizeCtx {
            side,
            remote,
            size,
            role,
            timeout,
            ch,
        } = ctx;
        if op == LatOp::Read && role == Role::Server {
            return Ok(None);
        }
        let until = match (self.cfg.duration, role) {
            (None, _) => Until::Iterations(self.cfg.iters),
            (Some(d), Role::Client) => {
                let (total, margin) = d.spans();
                Until::Duration { total, margin }
            }
            (Some(_), Role::Server) => Until::PeerSaysStop,
        };
        self.rec.reset();
        // perftest samples /proc/stat at the window's ends; here the whole
        // run of the size (margins included) is the span.
        let cpu_before = self.cpu_util.then(super::read_proc_stat).flatten();
        let inline = size <= u64::from(self.cfg.inline_size);
        let (clock, rec) = (&self.clock, &mut self.rec);
        let run = |ch: Option<&Channel>, rec: &mut LatRecorder, watch: &PeerWatch| {
            SizeRun {
                op,
                side,
                remote: &remote[0],
                size,
                inline,
                role,
                until,
                timeout,
                ch,
                rec,
                watch,
            }
            .run(clock)
        };
        let mut read_checked = None;
        let (count, rate, received) = match op {
            // The ping-pong keeps the peer busy: no heartbeat thread
            // beside the measured loop.
            LatOp::WritePingPong | LatOp::SendPingPong => {
                match run(Some(&*ch), rec, &PeerWatch::default()) {
                    // The peer stopped and said why on the control channel.
                    Err(_) if stop::requested().is_none() && ch.has_pending() => {
                        return Err(ch.why_peer_stopped());
                    }
                    r => r?,
                }
            }
            // The reader's peer is passive, waiting on the control channel:
            // it hears heartbeats through the reads and the data check
            // (8 MiB of it took seconds in a debug build under emulation).
            LatOp::Read => ch.with_heartbeat(|w| -> anyhow::Result<_> {
                let got = run(None, rec, w)?;
                read_checked = Some(side.check_pattern(0, std::iter::once(0..size))?);
                Ok(got)
            })??,
        };
        self.rate = rate;
        self.system_cpu = cpu_before
            .zip(super::read_proc_stat())
            .map(|(b, a)| engine::results::bw::system_cpu_util(b, a));
        if let Some(bytes_checked) = read_checked {
            self.check = Some(DataCheck { bytes_checked });
        }
        if let Some((slot, n)) = received {
            let bytes_checked = ch.with_heartbeat(|_| side.check_received(0, size, slot, n))??;
            self.check = Some(DataCheck { bytes_checked });
        }
        Ok(Some(LatOutcome { round_trips: count }))
    }

    fn shown(
        &mut self,
        _side: &Side,
        role: Role,
        size: u64,
        mine: Option<&LatOutcome>,
        peer: Option<LatOutcome>,
    ) -> anyhow::Result<Option<Shown>> {
        if role == Role::Server {
            if let (Some(m), Some(p)) = (mine, peer)
                && m.round_trips != p.round_trips
            {
                anyhow::bail!(
                    "client counted {} round trips, the server answered {}",
                    p.round_trips,
                    m.round_trips
                );
            }
            let Some(m) = mine else {
                if let Some(p) = peer {
                    eprintln!(
                        "{}: {size} B: the client did {} reads",
                        self.spec, p.round_trips
                    );
                }
                return Ok(None);
            };
            self.clock.check_drift(self.rate);
            let mut stats = self.stats(size);
            // perftest's #iterations is the count, on both sides.
            stats.iterations = m.round_trips;
            if self.report_histogram || self.report_unsorted {
                self.dumps.push((size, self.rec.samples().to_vec()));
            }
            return Ok(Some(Shown {
                figures: Figures::Lat(stats),
                peer_result: None,
                histogram: self.json_histogram.then(|| self.rec.histogram_base64()),
                data_check: self.check.take(),
                clock: Some(self.clock.record(self.rate)),
            }));
        }
        self.clock.check_drift(self.rate);
        let stats = self.stats(size);
        if self.report_histogram || self.report_unsorted {
            self.dumps.push((size, self.rec.samples().to_vec()));
        }
        if let Some(max) = self.max_latency {
            self.verdicts.push(VerdictRecord::Latency(lat_verdict(
                &stats,
                self.percentile,
                max,
            )));
        }
        Ok(Some(Shown {
            figures: Figures::Lat(stats),
            peer_result: None,
            histogram: self.json_histogram.then(|| self.rec.histogram_base64()),
            data_check: self.check.take(),
            clock: Some(self.clock.record(self.rate)),
        }))
    }

    fn after_table(&mut self, out: &mut Output) -> io::Result<()> {
        let rtt_factor = self.spec.rtt_factor();
        let dumps = std::mem::take(&mut self.dumps);
        let (ours, perftests) = (self.report_histogram, self.report_unsorted);
        out.dump(|w| {
            for (bytes, samples) in &dumps {
                if ours {
                    dump_samples(w, *bytes, samples, rtt_factor)?;
                }
                if perftests {
                    dump_unsorted(w, samples, rtt_factor)?;
                }
            }
            Ok(())
        })
    }

    fn verdicts(&mut self, _side: &Side) -> Vec<VerdictRecord> {
        std::mem::take(&mut self.verdicts)
    }
}

/// Whether a failed [`Side::create`] with the default inline size is
/// tried again without inline data.
fn retries_without_inline(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<crate::exit::InlineRefused>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::UsageError;

    #[test]
    fn only_the_inline_refusal_is_retried_without_inline() {
        let too_many_qps = anyhow::Error::new(UsageError(
            "-q/--qp: 100000 QPs; rxe0 allows 65536 (max_qp)".to_owned(),
        ));
        assert!(!retries_without_inline(&too_many_qps));
        let refused = anyhow::Error::new(crate::exit::InlineRefused(
            "-I/--inline-size: rxe0 refused a QP with 220 bytes of inline data".to_owned(),
        ))
        .context("creating the client's side");
        assert!(retries_without_inline(&refused));
        assert!(crate::exit::is_usage_error(&refused));
    }
}
