//! The RDMA WRITE latency ping-pong (perftest's `run_iter_lat_write`).
//!
//! Both sides zero the area the peer writes into before the start
//! barrier; the client goes first.
//! Each side spins until the last byte of that area equals the count it
//! expects, then stores its own next count in the last byte of its source
//! area and RDMA-WRITEs the message (inline when it fits), and polls the
//! completion of that write. The client stamps the clock before its write
//! and when the reply's byte arrives: one sample is one round trip; the
//! reports show half of it, as perftest does.

use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use engine::clock::{ClockSource, TickRate};
use engine::lat::LatRecorder;
use engine::wire::QpInfo;
use verbs::{CompletionQueue, LocalSge, RdmaWrite, WorkCompletion};

use crate::bw::BwSide;
use crate::clock::{Clock, MonotonicTicks, Ticks, TscTicks};
use crate::oob::Channel;

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
    /// After this many round trips.
    Iterations(u64),
    /// Client: run this long, recording only between the margins.
    Duration {
        /// Whole run.
        total: Duration,
        /// Warm-up and cool-down margin.
        margin: Duration,
    },
    /// Server in duration mode: until the client's next control message.
    PeerSaysStop,
}

/// Which side of the ping-pong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Writes first, records samples.
    Client,
    /// Answers.
    Server,
}

struct Pong<'a, T> {
    cq: &'a CompletionQueue,
    wc: [WorkCompletion; 1],
    recv_off: usize,
    send_off: usize,
    write: RdmaWrite,
    timeout: Duration,
    /// The samples' clock, also used for the waits' bounds: no second,
    /// possibly slower, clock in the loop.
    ticks: &'a T,
    timeout_ticks: u64,
}

#[cold]
fn peer_silent(timeout: Duration, count: u64) -> anyhow::Error {
    anyhow!(
        "no reply from the peer for {timeout:?} (--timeout) waiting for message {count}: \
         the peer or the link stopped responding"
    )
}

/// Zeroes the first `size` bytes of both areas. Must run before this side
/// takes part in the start barrier: zeroing after it could wipe a flag the
/// peer has already written, and the ping-pong would wait forever.
///
/// # Errors
/// When the QP does not own its region alone.
pub fn zero_areas(side: &mut BwSide, size: u64) -> anyhow::Result<()> {
    let len = usize::try_from(size).context("message size")?;
    let (target, source) = (side.target_offset(0), side.source_offset(0));
    let (qp, _) = side.first_mut();
    let bytes = qp
        .source_bytes_mut()
        .ok_or_else(|| anyhow!("the latency QP does not own its memory region"))?;
    bytes[target..target + len].fill(0);
    bytes[source..source + len].fill(0);
    Ok(())
}

/// One size on one side: what the client and the server each pass to
/// [`SizeRun::run`] (after [`zero_areas`] and the start barrier).
#[derive(Debug)]
pub struct SizeRun<'a> {
    /// This side's connected QP and its memory region.
    pub side: &'a mut BwSide,
    /// The peer's QP (its target area's address and key).
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
    /// The control channel (peeked by a server in duration mode).
    pub ch: &'a Channel,
    /// Where the client records its samples (the server records none).
    pub rec: &'a mut LatRecorder,
}

impl SizeRun<'_> {
    /// Runs the ping-pong; returns the number of round trips done and the
    /// tick rate the samples were converted with.
    ///
    /// # Errors
    /// A failed post or completion, or a peer silent for longer than
    /// `timeout`.
    pub fn run(self, clock: &Clock) -> anyhow::Result<(u64, TickRate)> {
        let rate = clock.rate_now();
        // One monomorphised loop per source: no branch on the clock inside.
        let count = match clock.source() {
            ClockSource::Tsc => self.ping_pong(rate, &TscTicks)?,
            ClockSource::Monotonic => self.ping_pong(rate, &MonotonicTicks::starting_now())?,
        };
        Ok((count, rate))
    }

    /// [`SizeRun::run`] with the clock's ticks and their rate.
    fn ping_pong(self, rate: TickRate, ticks: &impl Ticks) -> anyhow::Result<u64> {
        let SizeRun {
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
        let last = len - 1;
        let (target, source) = (side.target_offset(0), side.source_offset(0));
        let write = RdmaWrite {
            wr_id: 0,
            local: LocalSge {
                addr: side.source(0),
                length: u32::try_from(size).context("message size")?,
                lkey: side.lkey(),
            },
            remote_addr: remote.addr,
            rkey: remote.rkey,
            signaled: true,
            inline,
            imm: None,
        };
        let (qp, cq) = side.first_mut();
        let mut pong = Pong {
            cq,
            wc: [WorkCompletion::default()],
            recv_off: target + last,
            send_off: source + last,
            write,
            timeout,
            ticks,
            timeout_ticks: rate.ticks_for_ns(u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX)),
        };
        let mut ex = qp
            .exclusive()
            .ok_or_else(|| anyhow!("the latency QP does not own its memory region"))?;

        // Duration mode in ticks, so the loop never converts.
        let (total, margin) = match until {
            Until::Duration { total, margin } => (
                rate.ticks_for_ns(total.as_nanos() as u64),
                rate.ticks_for_ns(margin.as_nanos() as u64),
            ),
            _ => (u64::MAX, 0),
        };
        // One clock read per round trip, as perftest stamps each post: the
        // sample of round trip i runs from the stamp before post i to the
        // stamp before post i+1, which is taken right after reply i arrived.
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
            if role == Role::Server {
                if !pong.wait_for(&ex, flag, next, until, ch)? {
                    break;
                }
                pong.send(&mut ex, flag)?;
            } else {
                let sent = stamp;
                pong.send(&mut ex, flag)?;
                pong.wait_for(&ex, flag, next, until, ch)?;
                stamp = ticks.now();
                let record = match until {
                    Until::Duration { .. } => {
                        let t = stamp.wrapping_sub(begin);
                        t >= margin && t <= total.saturating_sub(margin)
                    }
                    _ => true,
                };
                if record {
                    // A counter read on another CPU a little behind counts as 0.
                    rec.record(rate.to_ns(stamp.saturating_sub(sent)));
                }
            }
            count = next;
        }
        Ok(count)
    }
}

impl<T: Ticks> Pong<'_, T> {
    /// Writes `flag` into our source's last byte, posts the write, and
    /// polls its completion (bounded).
    #[inline]
    fn send(&mut self, ex: &mut verbs::ExclusivePoster<'_>, flag: u8) -> anyhow::Result<()> {
        ex.write_volatile(self.send_off, flag);
        ex.post_send(&self.write)?;
        let mut deadline = None::<u64>;
        let mut polls = 0u32;
        loop {
            if self.cq.poll(&mut self.wc)? == 1 {
                let wc = &self.wc[0];
                if !wc.is_success() {
                    bail!(
                        "RDMA WRITE on QPN {:#x} completed with {}: the peer may be gone",
                        ex.qp().qpn(),
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
                        "no completion for our write within {:?} (--timeout)",
                        self.timeout
                    );
                }
            }
        }
    }

    /// Spins until the peer's byte equals `flag`. `Ok(false)` when a
    /// server in duration mode sees the client's control message instead.
    #[inline]
    fn wait_for(
        &self,
        ex: &verbs::ExclusivePoster<'_>,
        flag: u8,
        count: u64,
        until: Until,
        ch: &Channel,
    ) -> anyhow::Result<bool> {
        let region = ex.region();
        let mut spins = 0u32;
        let mut since = None::<u64>;
        while region.read_volatile(self.recv_off) != flag {
            spins += 1;
            if spins == SPINS_PER_CHECK {
                spins = 0;
                let now = self.ticks.now();
                let start = *since.get_or_insert(now);
                if matches!(until, Until::PeerSaysStop) && ch.has_pending() {
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
