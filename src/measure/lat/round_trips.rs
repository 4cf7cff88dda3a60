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
use engine::bench::plan::Role;
use engine::proto::wire::QpInfo;
use engine::results::lat::LatRecorder;
use verbs::{BoundQueuePair, CompletionQueue, LocalSge, Op, PreparedSends, SendWr, WorkCompletion};

use crate::clock::{Clock, MonotonicTicks, Ticks, TscTicks};
use crate::measure::{receive_failed, wrong_size};
use crate::oob::{Channel, PeerWatch};
use crate::side::Side;

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
    pub(super) fn is_ping_pong(self) -> bool {
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
        let samples = SampleWindow {
            rate,
            until,
            begin,
            total,
            margin,
        };
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
                    samples.record(rec, sent, stamp);
                }
                (LatOp::Read, Role::Client) => {
                    let sent = stamp;
                    lp.send(None)?;
                    stamp = ticks.now();
                    samples.record(rec, sent, stamp);
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
                    samples.record(rec, sent, stamp);
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

/// Which of the client's samples count, in ticks: in duration mode
/// those inside the margins of the run begun at `begin`.
#[derive(Debug, Clone, Copy)]
struct SampleWindow {
    rate: TickRate,
    until: Until,
    /// When the run began.
    begin: u64,
    /// The run's length (duration mode).
    total: u64,
    /// Each margin (duration mode).
    margin: u64,
}

impl SampleWindow {
    /// Records the sample `sent..stamp` when it counts.
    #[inline]
    fn record(&self, rec: &mut LatRecorder, sent: u64, stamp: u64) {
        let keep = match self.until {
            Until::Duration { .. } => {
                let t = stamp.wrapping_sub(self.begin);
                t >= self.margin && t <= self.total.saturating_sub(self.margin)
            }
            _ => true,
        };
        if keep {
            // A counter read on another CPU a little behind counts as 0.
            rec.record(self.rate.to_ns(stamp.saturating_sub(sent)));
        }
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
                return Err(receive_failed(qpn, wc));
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
            return Err(wrong_size(qpn, r.size, wc.byte_len()));
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
