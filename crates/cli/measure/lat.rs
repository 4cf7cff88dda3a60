//! The latency loops: the RDMA WRITE ping-pong (perftest's
//! `run_iter_lat_write`) and the one-sided loop of reads (perftest's
//! `run_iter_lat`).
//!
//! **Write ping-pong.** Both sides zero their areas before the start
//! barrier; the client goes first. Each side spins until the last byte of
//! its exposed area equals the count it expects (an Acquire load), then
//! stores its own next count in the last byte of its working area and
//! RDMA-WRITEs the message there (inline when it fits), and polls the
//! completion of that write. One sample is one round trip; the reports
//! divide by the test's `rtt_factor` (2).
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
use engine::clock::{ClockSource, TickRate};
use engine::lat::LatRecorder;
use engine::wire::QpInfo;
use verbs::{BoundQueuePair, CompletionQueue, LocalSge, Op, SendWr, WorkCompletion};

use crate::clock::{Clock, MonotonicTicks, Ticks, TscTicks};
use crate::oob::Channel;
use crate::side::Side;

/// Spins between two clock (and, for the server in duration mode,
/// channel) checks. Large on purpose: the bound is seconds, and a clock
/// read costs ~20 ns on hardware but up to ~2.5 µs under emulation
/// (CLOCK_MONOTONIC on an HPET clocksource), where frequent reads would
/// inflate every sample. The checks read the samples' own clock, so with
/// `--clock tsc` the loop makes no system call but the doorbell.
const SPINS_PER_CHECK: u32 = 1 << 16;

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

/// Which side of the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Goes first, records samples.
    Client,
    /// Answers (ping-pong only).
    Server,
}

/// The operation a latency loop measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LatOp {
    /// The RDMA WRITE ping-pong.
    WritePingPong,
    /// One RDMA READ at a time.
    Read,
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
    /// Where the client records its samples (the server records none).
    pub rec: &'a mut LatRecorder,
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
    recv_off: usize,
    send_off: usize,
    wr: SendWr,
    name: &'static str,
    timeout: Duration,
    /// The samples' clock, also used for the waits' bounds: no second,
    /// possibly slower, clock in the loop.
    ticks: &'a T,
    timeout_ticks: u64,
}

impl SizeRun<'_> {
    /// Runs the loop; returns the number of operations (round trips)
    /// done and the tick rate the samples were converted with.
    ///
    /// # Errors
    /// A failed post or completion, or a peer silent for longer than
    /// `timeout`.
    pub fn run(self, clock: &Clock) -> anyhow::Result<(u64, TickRate)> {
        let rate = clock.rate_now();
        // One monomorphised loop per source: no branch on the clock inside.
        let count = match clock.source() {
            ClockSource::Tsc => self.drive(rate, &TscTicks)?,
            ClockSource::Monotonic => self.drive(rate, &MonotonicTicks::starting_now())?,
        };
        Ok((count, rate))
    }

    fn drive(self, rate: TickRate, ticks: &impl Ticks) -> anyhow::Result<u64> {
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
            recv_off: side.exposed_offset(0) + len - 1,
            send_off: side.working_offset(0) + len - 1,
            wr,
            name,
            timeout,
            ticks,
            timeout_ticks: rate.ticks_for_ns(u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX)),
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
            let next = count + 1;
            let flag = next as u8;
            match (op, role) {
                (LatOp::WritePingPong, Role::Server) => {
                    if !lp.wait_for(flag, next, until, ch)? {
                        break;
                    }
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
                (LatOp::Read, Role::Server) => {
                    bail!("the server of a read latency test posts nothing")
                }
            }
            count = next;
        }
        Ok(count)
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
        self.qp.post_send(&self.wr)?;
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
                let now = self.ticks.now();
                let start = *since.get_or_insert(now);
                if matches!(until, Until::PeerSaysStop) && ch.is_some_and(Channel::has_pending) {
                    return Ok(false);
                }
                if now.saturating_sub(start) > self.timeout_ticks {
                    return Err(peer_silent(self.timeout, count));
                }
            }
        }
        Ok(true)
    }
}
