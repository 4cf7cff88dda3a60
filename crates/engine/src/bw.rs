//! Bandwidth figures and their reports: what `write_bw` computes from the
//! raw counts and clock readings of a run, and how it prints them.
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

use std::io::{self, Write};

use serde::{Deserialize, Serialize};

use crate::report::{Figures, Report, SizeRecord, VerdictRecord};

/// Bytes per MiB.
pub const MIB: f64 = 1_048_576.0;

/// perftest's result separator: 87 dashes.
pub const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";

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
    /// Iterations per QP (the table's `#iterations`).
    pub iterations: u64,
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
}

/// Figures of one size, in every unit; what the reports print.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BwResult {
    /// Message size in bytes.
    pub bytes: u64,
    /// Iterations per QP.
    pub iterations: u64,
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
        }
    }

    /// Both directions of a bidirectional run: bandwidths and rates add
    /// (as perftest sums the two sides' reports), time is the longer one,
    /// CPU is this side's.
    pub fn combined(&self, peer: &Self) -> Self {
        Self {
            bytes: self.bytes,
            iterations: self.iterations,
            messages: self.messages.saturating_add(peer.messages),
            elapsed_s: self.elapsed_s.max(peer.elapsed_s),
            bw_peak_mib_s: self.bw_peak_mib_s + peer.bw_peak_mib_s,
            bw_avg_mib_s: self.bw_avg_mib_s + peer.bw_avg_mib_s,
            bw_peak_gbps: self.bw_peak_gbps + peer.bw_peak_gbps,
            bw_avg_gbps: self.bw_avg_gbps + peer.bw_avg_gbps,
            msg_rate_mpps: self.msg_rate_mpps + peer.msg_rate_mpps,
            cpu_util_pct: self.cpu_util_pct,
        }
    }
}

/// Unit of the text table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Unit {
    /// MiB/s (perftest's default `MB/sec`).
    #[default]
    MibPerSec,
    /// Gb/s (`--report_gbits`).
    Gbps,
}

/// perftest's table.
#[derive(Debug)]
pub struct Table<W> {
    out: W,
    unit: Unit,
    cpu_column: bool,
}

impl<W: Write> Table<W> {
    /// A table in `unit`, with the `CPU_Util[%]` column when `cpu_column`.
    pub fn new(out: W, unit: Unit, cpu_column: bool) -> Self {
        Self {
            out,
            unit,
            cpu_column,
        }
    }

    /// The header line exactly as perftest prints it.
    pub fn header(unit: Unit, cpu_column: bool) -> String {
        let u = match unit {
            Unit::MibPerSec => "MiB/sec",
            Unit::Gbps => "Gb/sec",
        };
        let mut h =
            format!(" #bytes     #iterations    BW peak[{u}]    BW average[{u}]   MsgRate[Mpps]");
        if cpu_column {
            h.push_str("    CPU_Util[%]");
        }
        h
    }

    /// One row in perftest's layout
    /// (`" %-7lu    %-10lu       %-7.2lf            %-7.2lf\t\t     %-7.6lf"`).
    pub fn row(r: &BwResult, unit: Unit, cpu_column: bool) -> String {
        let (peak, avg) = match unit {
            Unit::MibPerSec => (r.bw_peak_mib_s, r.bw_avg_mib_s),
            Unit::Gbps => (r.bw_peak_gbps, r.bw_avg_gbps),
        };
        // perftest prints 6 decimals when a Gb/s value is below 0.1.
        let prec = if unit == Unit::Gbps && avg < 0.1 {
            6
        } else {
            2
        };
        let mut line = format!(
            " {:<7}    {:<10}       {:<7.prec$}            {:<7.prec$}\t\t     {:<7.6}",
            r.bytes, r.iterations, peak, avg, r.msg_rate_mpps
        );
        if cpu_column {
            line.push_str(&format!("\t    {:.2}", r.cpu_util_pct));
        }
        line
    }
}

impl<W: Write> Report for Table<W> {
    fn begin(&mut self) -> io::Result<()> {
        writeln!(self.out, "{RESULT_LINE}")?;
        writeln!(self.out, "{}", Self::header(self.unit, self.cpu_column))?;
        self.out.flush()
    }

    fn size(&mut self, record: &SizeRecord<'_>) -> io::Result<()> {
        if let Figures::Bw(r) = &record.figures {
            writeln!(self.out, "{}", Self::row(r, self.unit, self.cpu_column))?;
        }
        self.out.flush()
    }

    fn verdict(&mut self, verdict: &VerdictRecord) -> io::Result<()> {
        writeln!(self.out, "{}", verdict.line())?;
        self.out.flush()
    }

    fn end(&mut self) -> io::Result<()> {
        writeln!(self.out, "{RESULT_LINE}")?;
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(size: u64, messages: u64, elapsed_ns: u64) -> Measurement {
        Measurement {
            size,
            iterations: messages,
            messages,
            elapsed_ns,
            peak_msgs_per_sec: None,
            cpu_ns: elapsed_ns / 2,
            wall_ns: elapsed_ns,
        }
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
    fn table_matches_perftest_layout() {
        assert_eq!(
            Table::<Vec<u8>>::header(Unit::MibPerSec, false),
            " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]"
        );
        assert!(
            Table::<Vec<u8>>::header(Unit::Gbps, true).ends_with("MsgRate[Mpps]    CPU_Util[%]")
        );
        let r = BwResult {
            bytes: 65536,
            iterations: 5000,
            messages: 5000,
            elapsed_s: 1.0,
            bw_peak_mib_s: 11030.78,
            bw_avg_mib_s: 11030.45,
            bw_peak_gbps: 92.53,
            bw_avg_gbps: 92.53,
            msg_rate_mpps: 0.176487,
            cpu_util_pct: 99.5,
        };
        assert_eq!(
            Table::<Vec<u8>>::row(&r, Unit::MibPerSec, false),
            " 65536      5000             11030.78            11030.45\t\t     0.176487"
        );
        let mut out = Vec::new();
        let mut t = Table::new(&mut out, Unit::MibPerSec, false);
        let ctx = crate::report::tests::context();
        t.begin().unwrap();
        t.size(&SizeRecord {
            context: &ctx,
            figures: Figures::Bw(r),
            peer_result: None,
            histogram: None,
            data_check: None,
        })
        .unwrap();
        t.end().unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 4);
        assert_eq!(text.lines().next().unwrap().len(), 87);
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
            messages: 10,
            elapsed_ns: 1_000,
            peak_msgs_per_sec: None,
            cpu_ns: 0,
            wall_ns: 1_000,
        });
        let peer = BwResult {
            messages: u64::MAX,
            ..mine
        };
        assert_eq!(mine.combined(&peer).messages, u64::MAX);
    }
}
