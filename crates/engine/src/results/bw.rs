//! Bandwidth figures: what a bandwidth test computes from the raw counts
//! and clock readings of a run, and the completion [`Timeline`] its peak
//! comes from. perftest's table of them is [`crate::format::table`].
//!
//! Definitions (see docs/write_bw.md):
//! - average bandwidth = bytes completed / elapsed, where elapsed runs from
//!   the first post to the last completion (iteration mode) or spans the
//!   sampling window between the margins (duration mode);
//! - message rate = messages completed / elapsed;
//! - peak bandwidth = the best rate over any window of the completion
//!   timeline at least 1/20 of the run long (perftest's peak is the best
//!   window too, but over every window, which it disables above 20 000
//!   iterations for cost);
//! - MiB/s = 2^20 B/s (perftest's `MB/sec`), Gb/s = 10^9 bit/s.

use serde::{Deserialize, Serialize};

use crate::bench::config::BwConfig;
use crate::bench::plan::Role;

/// Bytes per MiB.
pub const MIB: f64 = 1_048_576.0;

/// One point of a completion timeline: nanoseconds since the run started
/// and messages completed so far.
pub type Sample = (u64, u64);

/// The highest message rate (messages per second) over any window of
/// `samples` spanning at least `min_window_ns`; `None` when no such window
/// exists. Samples must be in time order with non-decreasing counts.
pub fn peak_rate(samples: &[Sample], min_window_ns: u64) -> Option<f64> {
    let min_window_ns = min_window_ns.max(1);
    let mut best: Option<f64> = None;
    let mut start = 0usize;
    for end in 0..samples.len() {
        let (t_end, c_end) = samples[end];
        // Advance `start` while the window would still be long enough.
        while start + 1 < end && t_end - samples[start + 1].0 >= min_window_ns {
            start += 1;
        }
        let (t_start, c_start) = samples[start];
        if end > start && t_end - t_start >= min_window_ns {
            let rate = (c_end - c_start) as f64 * 1e9 / (t_end - t_start) as f64;
            best = Some(best.map_or(rate, |b: f64| b.max(rate)));
        }
    }
    best
}

/// The raw outcome of measuring one message size on one side.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measurement {
    /// Message size in bytes.
    pub size: u64,
    /// Iterations per QP.
    pub iterations: u64,
    /// The table's `#iterations` as perftest prints it: iterations × QPs,
    /// or in duration mode the messages counted in the window.
    pub table_iterations: u64,
    /// Messages completed inside the measured span, all QPs.
    pub messages: u64,
    /// Length of the measured span, nanoseconds.
    pub elapsed_ns: u64,
    /// Best windowed message rate, messages/s (summed over threads).
    pub peak_msgs_per_sec: Option<f64>,
    /// Process CPU time (user + system) over the whole run of the size
    /// (margins and drain included), nanoseconds.
    pub cpu_ns: u64,
    /// Wall time of that whole run, nanoseconds: the CPU figure's
    /// denominator.
    pub wall_ns: u64,
    /// The system's CPU use over the measurement window as perftest's
    /// `--cpu_util` reports it (percent), when it was sampled.
    pub system_cpu_pct: Option<f64>,
    /// Every operation this side completed in the size's run, margins
    /// included (what a target's data check counts).
    pub operations: u64,
}

/// The `cpu` line of `/proc/stat`: its user and idle jiffies, the two
/// fields perftest's `--cpu_util` reads.
pub fn parse_proc_stat(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let mut fields = line.split_whitespace().skip(1);
    let user = fields.next()?.parse().ok()?;
    let idle = fields.nth(2)?.parse().ok()?;
    Some((user, idle))
}

/// perftest's `--cpu_util` figure between two `/proc/stat` readings: user
/// time over user plus idle time, percent (0 when nothing elapsed).
pub fn system_cpu_util(before: (u64, u64), after: (u64, u64)) -> f64 {
    let user = after.0.saturating_sub(before.0);
    let idle = after.1.saturating_sub(before.1);
    if user + idle == 0 {
        0.0
    } else {
        user as f64 / (user + idle) as f64 * 100.0
    }
}

/// Figures of one size, in every unit; what the reports print.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BwResult {
    /// Message size in bytes.
    pub bytes: u64,
    /// Iterations per QP.
    pub iterations: u64,
    /// `#iterations` as perftest's table prints it (iterations × QPs; in
    /// duration mode the messages this side counted).
    #[serde(default)]
    pub table_iterations: u64,
    /// Messages counted.
    pub messages: u64,
    /// Measured span, seconds.
    pub elapsed_s: f64,
    /// Peak bandwidth, MiB/s.
    pub bw_peak_mib_s: f64,
    /// Average bandwidth, MiB/s.
    pub bw_avg_mib_s: f64,
    /// Peak bandwidth, Gb/s.
    pub bw_peak_gbps: f64,
    /// Average bandwidth, Gb/s.
    pub bw_avg_gbps: f64,
    /// Message rate, millions of messages per second.
    pub msg_rate_mpps: f64,
    /// CPU use of the process over the span, percent of one core.
    pub cpu_util_pct: f64,
    /// The system's CPU use over the window as perftest's `--cpu_util`
    /// defines it (user / (user + idle) of `/proc/stat`), percent; with
    /// `--cpu_util` in duration mode only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_cpu_util_pct: Option<f64>,
    /// Every operation (or received message) this side completed in the
    /// size's run, margins included.
    #[serde(default)]
    pub operations: u64,
}

impl BwResult {
    /// Computes the figures of a measurement.
    pub fn from_measurement(m: &Measurement) -> Self {
        let secs = m.elapsed_ns as f64 / 1e9;
        let (avg_bps, rate) = if secs > 0.0 {
            (
                m.messages as f64 * m.size as f64 / secs,
                m.messages as f64 / secs,
            )
        } else {
            (0.0, 0.0)
        };
        // A peak below the average can only come from a coarse timeline;
        // the average is then the best window known.
        let peak_bps = m
            .peak_msgs_per_sec
            .map_or(avg_bps, |p| (p * m.size as f64).max(avg_bps));
        Self {
            bytes: m.size,
            iterations: m.iterations,
            table_iterations: m.table_iterations,
            messages: m.messages,
            elapsed_s: secs,
            bw_peak_mib_s: peak_bps / MIB,
            bw_avg_mib_s: avg_bps / MIB,
            bw_peak_gbps: peak_bps * 8.0 / 1e9,
            bw_avg_gbps: avg_bps * 8.0 / 1e9,
            msg_rate_mpps: rate / 1e6,
            cpu_util_pct: if m.wall_ns > 0 {
                m.cpu_ns as f64 / m.wall_ns as f64 * 100.0
            } else {
                0.0
            },
            system_cpu_util_pct: m.system_cpu_pct,
            operations: m.operations,
        }
    }

    /// Both directions of a bidirectional run: bandwidths and rates add
    /// (as perftest sums the two sides' reports), time is the longer one,
    /// CPU is this side's.
    pub fn combined(&self, peer: &Self) -> Self {
        Self {
            bytes: self.bytes,
            iterations: self.iterations,
            table_iterations: self.table_iterations,
            messages: self.messages.saturating_add(peer.messages),
            elapsed_s: self.elapsed_s.max(peer.elapsed_s),
            bw_peak_mib_s: self.bw_peak_mib_s + peer.bw_peak_mib_s,
            bw_avg_mib_s: self.bw_avg_mib_s + peer.bw_avg_mib_s,
            bw_peak_gbps: self.bw_peak_gbps + peer.bw_peak_gbps,
            bw_avg_gbps: self.bw_avg_gbps + peer.bw_avg_gbps,
            msg_rate_mpps: self.msg_rate_mpps + peer.msg_rate_mpps,
            cpu_util_pct: self.cpu_util_pct,
            system_cpu_util_pct: self.system_cpu_util_pct,
            operations: self.operations.saturating_add(peer.operations),
        }
    }
}

/// What a side shows of one size of a bandwidth test, from its own
/// figures and the peer's: the figures, and the peer's own when reported.
/// The client shows its own (with `-b`, summed with the server's); the
/// server shows what it received when it only receives (perftest's send
/// server), else the client's (with `-b`, summed with its own).
///
/// # Errors
/// A side without the figures it needs, or a receiver that received
/// another count than the client completed (iteration mode).
pub fn shown_figures(
    role: Role,
    cfg: &BwConfig,
    mine: Option<&BwResult>,
    peer: Option<BwResult>,
) -> Result<(BwResult, Option<BwResult>), String> {
    match role {
        Role::Client => {
            let mine = *mine.ok_or("the client measured nothing")?;
            let peer = peer.filter(|_| cfg.bidirectional);
            Ok((peer.as_ref().map_or(mine, |p| mine.combined(p)), peer))
        }
        Role::Server => {
            let client = peer.ok_or("the client sent no result")?;
            match mine {
                // A receiver of SENDs or writes with immediate shows
                // what it received (perftest's send server).
                Some(m) if !cfg.bidirectional => {
                    if cfg.duration.is_none() && m.operations != client.operations {
                        return Err(format!(
                            "the client completed {} operations, the server received {} messages",
                            client.operations, m.operations
                        ));
                    }
                    Ok((*m, Some(client)))
                }
                _ => Ok((mine.map_or(client, |m| m.combined(&client)), Some(client))),
            }
        }
    }
}

/// A completion timeline for the peak figure, bounded: when full it keeps
/// every other sample and doubles the spacing, so recording never
/// allocates after construction.
#[derive(Debug, Clone)]
pub struct Timeline {
    samples: Vec<Sample>,
    min_gap: u64,
}

impl Timeline {
    /// A timeline of at most `capacity` samples (at least 2).
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            samples: Vec::with_capacity(capacity.max(2)),
            min_gap: 0,
        }
    }

    /// Records `count` messages at `t_ns` (non-decreasing in both).
    #[inline]
    pub fn record(&mut self, t_ns: u64, count: u64) {
        if let Some(&(last_t, _)) = self.samples.last()
            && t_ns.saturating_sub(last_t) < self.min_gap
        {
            return;
        }
        if self.samples.len() == self.samples.capacity() {
            let kept = self.samples.len() / 2;
            for i in 0..kept {
                self.samples[i] = self.samples[2 * i];
            }
            self.samples.truncate(kept);
            self.min_gap = self.min_gap.max(1) * 2;
        }
        self.samples.push((t_ns, count));
    }

    /// The samples, in time order.
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    /// The peak message rate over windows of at least a twentieth of the
    /// run (see [`peak_rate`]).
    pub fn peak(&self) -> Option<f64> {
        let run_ns = self.samples.last().map_or(0, |s| s.0);
        peak_rate(&self.samples, run_ns / 20)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(size: u64, messages: u64, elapsed_ns: u64) -> Measurement {
        Measurement {
            size,
            iterations: messages,
            table_iterations: messages,
            messages,
            elapsed_ns,
            peak_msgs_per_sec: None,
            cpu_ns: elapsed_ns / 2,
            wall_ns: elapsed_ns,
            system_cpu_pct: None,
            operations: messages,
        }
    }

    /// Figures of `messages` messages of 64 KiB in 1 s.
    fn r(messages: u64) -> BwResult {
        BwResult::from_measurement(&m(65536, messages, 1_000_000_000))
    }

    #[test]
    fn a_client_shows_its_own_figures_and_with_b_both_directions_summed() {
        let c = BwConfig::default();
        let (shown, peer) = shown_figures(Role::Client, &c, Some(&r(5000)), Some(r(4000))).unwrap();
        assert_eq!(
            (shown, peer),
            (r(5000), None),
            "no -b: the server's are not shown"
        );
        let b = BwConfig {
            bidirectional: true,
            ..c.clone()
        };
        let (shown, peer) = shown_figures(Role::Client, &b, Some(&r(5000)), Some(r(4000))).unwrap();
        assert_eq!(peer, Some(r(4000)));
        assert_eq!(shown.messages, 9000);
        assert!((shown.bw_avg_mib_s - (r(5000).bw_avg_mib_s + r(4000).bw_avg_mib_s)).abs() < 1e-9);
        assert_eq!(
            shown_figures(Role::Client, &c, None, Some(r(1))),
            Err("the client measured nothing".into())
        );
    }

    #[test]
    fn a_server_shows_the_clients_figures_or_what_it_received() {
        let c = BwConfig::default();
        // A write server measures nothing: the client's figures.
        assert_eq!(
            shown_figures(Role::Server, &c, None, Some(r(5000))),
            Ok((r(5000), Some(r(5000))))
        );
        // A send server shows what it received, which must be every
        // message the client completed.
        assert_eq!(
            shown_figures(Role::Server, &c, Some(&r(5000)), Some(r(5000))),
            Ok((r(5000), Some(r(5000))))
        );
        assert_eq!(
            shown_figures(Role::Server, &c, Some(&r(4999)), Some(r(5000))),
            Err("the client completed 5000 operations, the server received 4999 messages".into())
        );
        // In duration mode the counts differ by design.
        let d = BwConfig {
            duration: Some(crate::bench::config::DurationMode {
                seconds: 4.0,
                margin: 1.0,
            }),
            ..c.clone()
        };
        assert!(shown_figures(Role::Server, &d, Some(&r(4999)), Some(r(5000))).is_ok());
        assert_eq!(
            shown_figures(Role::Server, &c, None, None),
            Err("the client sent no result".into())
        );
    }

    #[test]
    fn figures_follow_perftest_units() {
        // 5000 × 64 KiB in 1 s = 312.5 MiB/s = 2.62144 Gb/s, 5000 msg/s.
        let r = BwResult::from_measurement(&m(65536, 5000, 1_000_000_000));
        assert!((r.bw_avg_mib_s - 312.5).abs() < 1e-9);
        assert!((r.bw_avg_gbps - 2.62144).abs() < 1e-9);
        assert!((r.msg_rate_mpps - 0.005).abs() < 1e-12);
        assert!((r.cpu_util_pct - 50.0).abs() < 1e-9);
        assert_eq!(r.bw_peak_mib_s, r.bw_avg_mib_s);
    }

    #[test]
    fn peak_is_best_window_and_never_below_average() {
        // 100 msgs in the first 10 ms, then 100 msgs in the next 90 ms.
        let samples = [(0, 0), (10_000_000, 100), (100_000_000, 200)];
        let p = peak_rate(&samples, 5_000_000).unwrap();
        assert!((p - 10_000.0).abs() < 1e-6, "{p}");
        // A window longer than the run: no peak.
        assert_eq!(peak_rate(&samples, 200_000_000), None);
        let mut meas = m(1000, 200, 100_000_000);
        meas.peak_msgs_per_sec = Some(p);
        let r = BwResult::from_measurement(&meas);
        assert!(r.bw_peak_mib_s > r.bw_avg_mib_s);
        meas.peak_msgs_per_sec = Some(1.0);
        let r = BwResult::from_measurement(&meas);
        assert_eq!(r.bw_peak_mib_s, r.bw_avg_mib_s);
    }

    #[test]
    fn bidirectional_sums_both_sides() {
        let a = BwResult::from_measurement(&m(4096, 1000, 1_000_000_000));
        let b = BwResult::from_measurement(&m(4096, 500, 500_000_000));
        let c = a.combined(&b);
        assert!((c.bw_avg_mib_s - 2.0 * a.bw_avg_mib_s).abs() < 1e-9);
        assert_eq!(c.messages, 1500);
        assert_eq!(c.elapsed_s, 1.0);
    }

    #[test]
    fn system_cpu_is_user_over_user_and_idle_of_proc_stat() {
        let before = parse_proc_stat("cpu  100 5 50 1000 7 0 3 0 0 0\ncpu0 1 2 3 4\n").unwrap();
        assert_eq!(before, (100, 1000));
        let after = parse_proc_stat("cpu  150 9 80 1150 7 0 3 0 0 0\n").unwrap();
        assert!((system_cpu_util(before, after) - 25.0).abs() < 1e-9);
        assert_eq!(system_cpu_util(after, after), 0.0);
        assert_eq!(parse_proc_stat("intr 5\n"), None);
    }

    #[test]
    fn timeline_stays_within_its_capacity() {
        let mut t = Timeline::with_capacity(8);
        for i in 0..1000u64 {
            t.record(i * 100, i * 10);
        }
        assert!(t.samples().len() <= 8);
        assert!(t.samples().windows(2).all(|w| w[0].0 < w[1].0));
        let p = t.peak().unwrap();
        assert!((p - 1e8).abs() < 1e6, "{p}");
    }
}

#[cfg(test)]
mod peer_values {
    use super::*;

    #[test]
    fn combining_with_a_peers_huge_count_saturates_instead_of_panicking() {
        let mine = BwResult::from_measurement(&Measurement {
            size: 2,
            iterations: 10,
            table_iterations: 10,
            messages: 10,
            elapsed_ns: 1_000,
            peak_msgs_per_sec: None,
            cpu_ns: 0,
            wall_ns: 1_000,
            system_cpu_pct: None,
            operations: 10,
        });
        let peer = BwResult {
            messages: u64::MAX,
            ..mine
        };
        assert_eq!(mine.combined(&peer).messages, u64::MAX);
    }
}
