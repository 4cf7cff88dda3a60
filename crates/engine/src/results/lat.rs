//! Latency figures: what a latency test (`write_lat`, the `ib_write_lat`
//! equivalent, and the others) records per round trip, the statistics it
//! derives and the threshold verdict. perftest's table of them and the
//! sample lists are [`crate::format::lat_table`].
//!
//! Definitions:
//! - every sample is one round trip (ping-pong) in nanoseconds; every
//!   reported latency is **half** a round trip in microseconds
//!   (`ns / 1000 / 2`), as perftest reports write latency;
//! - min, max, mean and standard deviation are exact, from running sums
//!   over every sample; the standard deviation is the **population** one
//!   (divide by `n`, not `n - 1`), like perftest's, but computed in
//!   floating point: perftest truncates each deviation to an `int` number
//!   of microseconds, so any spread below 1 µs prints as `0.00`;
//! - percentiles use the **nearest-rank** method: the `p`-th percentile of
//!   `n` sorted samples is the one at 1-based rank `ceil(p / 100 × n)`.
//!   They are exact when every sample was kept, else they come from an
//!   HdrHistogram with 3 significant digits (within 0.1 %, clamped to the
//!   exact min and max);
//! - unlike perftest, no sample is dropped: perftest discards the two
//!   largest round trips before its statistics, we keep them all.

use std::fmt;
use std::str::FromStr;

use base64::Engine as _;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer as _, V2DeflateSerializer};
use serde::{Deserialize, Serialize};

/// Lowest value the histogram tells apart, nanoseconds.
const HIST_LOW_NS: u64 = 1;
/// Highest value the histogram tracks, nanoseconds (60 s); larger round
/// trips are recorded as this value and counted as clamped.
pub const HIST_HIGH_NS: u64 = 60_000_000_000;
/// Significant decimal digits the histogram keeps.
const HIST_SIGFIG: u8 = 3;

/// Recorder of round-trip samples in nanoseconds. Allocation-free and
/// lock-free per record after construction.
///
/// Keeps an HdrHistogram (1 ns .. 60 s, 3 significant digits, no
/// auto-resize), running count, sum and sum of squares (`u128`, exact) for
/// the mean and standard deviation, the exact min and max, and optionally
/// up to `keep_samples` raw samples in recorded order (for exact
/// percentiles and `-H` dumps).
#[derive(Clone)]
pub struct LatRecorder {
    hist: Histogram<u64>,
    count: u64,
    sum: u128,
    sum_sq: u128,
    min: u64,
    max: u64,
    clamped: u64,
    keep: usize,
    samples: Vec<u64>,
}

impl fmt::Debug for LatRecorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LatRecorder")
            .field("count", &self.count)
            .field("min", &self.min)
            .field("max", &self.max)
            .field("clamped", &self.clamped)
            .field("kept_samples", &self.samples.len())
            .field("keep", &self.keep)
            .finish_non_exhaustive()
    }
}

/// Half a round trip in microseconds from a round trip in nanoseconds.
#[inline]
/// A sample in microseconds divided by perftest's `rtt_factor`.
pub(crate) fn per_trip_us(ns: u64, rtt_factor: u32) -> f64 {
    ns as f64 / 1000.0 / f64::from(rtt_factor.max(1))
}

/// 1-based nearest rank of percentile `p` among `n` samples:
/// `ceil(p / 100 × n)`, clamped to `1..=n`. Products within 1e-9 of an
/// integer count as that integer, so `99.9 % of 1000` is rank 999, not
/// 1000 through floating-point noise.
fn nearest_rank(p: f64, n: u64) -> u64 {
    let x = p / 100.0 * n as f64;
    let r = x.round();
    let rank = if (x - r).abs() <= 1e-9 * x.max(1.0) {
        r
    } else {
        x.ceil()
    };
    (rank as u64).clamp(1, n.max(1))
}

/// The percentiles [`LatStats`] carries, in order.
const REPORTED: [f64; 5] = [50.0, 90.0, 99.0, 99.9, 99.99];

impl LatRecorder {
    /// A recorder keeping up to `keep_samples` raw samples (0 = none).
    /// All memory is allocated, and written once, here.
    ///
    /// # Panics
    /// Never in practice: the histogram bounds are constants that
    /// HdrHistogram accepts.
    pub fn new(keep_samples: usize) -> Self {
        let mut hist = Histogram::new_with_bounds(HIST_LOW_NS, HIST_HIGH_NS, HIST_SIGFIG)
            .expect("constant histogram bounds are valid");
        hist.auto(false);
        // Touch every page now (writing zeros), so that recording takes no
        // first-touch page fault inside the measured loop.
        hist.reset();
        // `vec![0; n]` would take untouched zeroed pages: write instead.
        let mut samples = Vec::with_capacity(keep_samples);
        samples.extend(std::iter::repeat_n(0u64, keep_samples));
        samples.clear();
        Self {
            hist,
            count: 0,
            sum: 0,
            sum_sq: 0,
            min: u64::MAX,
            max: 0,
            clamped: 0,
            keep: keep_samples,
            samples,
        }
    }

    /// Records one round trip. Never allocates: a value above
    /// [`HIST_HIGH_NS`] is recorded (everywhere, sums included) as that
    /// value and counted in [`Self::clamped`]; raw samples beyond the
    /// capacity given to [`Self::new`] are not kept.
    #[inline]
    pub fn record(&mut self, rtt_ns: u64) {
        let v = if rtt_ns > HIST_HIGH_NS {
            self.clamped += 1;
            HIST_HIGH_NS
        } else {
            rtt_ns
        };
        self.count += 1;
        let w = u128::from(v);
        self.sum += w;
        self.sum_sq += w * w;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        // In range by construction, and auto-resize is off: cannot fail
        // nor allocate.
        self.hist.saturating_record(v);
        if self.samples.len() < self.keep {
            self.samples.push(v);
        }
    }

    /// Forgets every sample, keeping the memory (for the next size).
    pub fn reset(&mut self) {
        self.hist.reset();
        self.count = 0;
        self.sum = 0;
        self.sum_sq = 0;
        self.min = u64::MAX;
        self.max = 0;
        self.clamped = 0;
        self.samples.clear();
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Samples that exceeded [`HIST_HIGH_NS`] and were clamped to it.
    pub fn clamped(&self) -> u64 {
        self.clamped
    }

    /// The raw samples kept, nanoseconds, in recorded order.
    pub fn samples(&self) -> &[u64] {
        &self.samples
    }

    /// The histogram of every sample, nanoseconds.
    pub fn histogram(&self) -> &Histogram<u64> {
        &self.hist
    }

    /// Whether every recorded sample was kept (percentiles are exact).
    pub fn all_kept(&self) -> bool {
        self.count > 0 && self.samples.len() as u64 == self.count
    }

    /// Population standard deviation of the round trips, nanoseconds, from
    /// the exact sums: `sqrt(n·Σx² − (Σx)²) / n`.
    fn stdev_ns(&self) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let n = u128::from(self.count);
        let nf = self.count as f64;
        let var = match n.checked_mul(self.sum_sq) {
            // Exact integer numerator (never negative: Cauchy–Schwarz).
            Some(a) => a.saturating_sub(self.sum * self.sum) as f64 / (nf * nf),
            // Astronomically many samples: fall back to floating point.
            None => {
                let mean = self.sum as f64 / nf;
                (self.sum_sq as f64 / nf - mean * mean).max(0.0)
            }
        };
        var.sqrt()
    }

    /// The figures of everything recorded so far, for message size
    /// `bytes`. Sorts a copy of the kept samples when all were kept
    /// (outside the hot loop), else reads the histogram.
    pub fn stats(&self, bytes: u64) -> LatStats {
        self.stats_per(bytes, 2)
    }

    /// As [`LatRecorder::stats`], with every figure divided by
    /// `rtt_factor` instead of 2: 1 for reads and atomics, whose sample is
    /// one operation's round trip (perftest's `rtt_factor`).
    pub fn stats_per(&self, bytes: u64, rtt_factor: u32) -> LatStats {
        let f = f64::from(rtt_factor.max(1));
        let us = |ns: u64| per_trip_us(ns, rtt_factor);
        if self.count == 0 {
            return LatStats {
                bytes,
                iterations: 0,
                t_min_us: 0.0,
                t_max_us: 0.0,
                t_typical_us: 0.0,
                t_avg_us: 0.0,
                t_stdev_us: 0.0,
                p50_us: 0.0,
                p90_us: 0.0,
                p99_us: 0.0,
                p99_9_us: 0.0,
                p99_99_us: 0.0,
                exact_percentiles: false,
                system_cpu_util_pct: None,
            };
        }
        let n = self.count;
        let exact = self.all_kept();
        let mut p = [0u64; REPORTED.len()];
        if exact {
            let mut sorted = self.samples.clone();
            sorted.sort_unstable();
            for (out, &q) in p.iter_mut().zip(&REPORTED) {
                *out = sorted[(nearest_rank(q, n) - 1) as usize];
            }
        } else {
            for (out, &q) in p.iter_mut().zip(&REPORTED) {
                // HdrHistogram takes rank ceil(quantile × n); asking for
                // (rank − ½) / n makes that the same nearest rank as above.
                let rank = nearest_rank(q, n);
                let v = self.hist.value_at_quantile((rank as f64 - 0.5) / n as f64);
                // A bucket's highest equivalent value may pass the extremes.
                *out = v.clamp(self.min, self.max);
            }
        }
        LatStats {
            bytes,
            iterations: n,
            t_min_us: us(self.min),
            t_max_us: us(self.max),
            t_typical_us: us(p[0]),
            t_avg_us: self.sum as f64 / n as f64 / 1000.0 / f,
            t_stdev_us: self.stdev_ns() / 1000.0 / f,
            p50_us: us(p[0]),
            p90_us: us(p[1]),
            p99_us: us(p[2]),
            p99_9_us: us(p[3]),
            p99_99_us: us(p[4]),
            exact_percentiles: exact,
            system_cpu_util_pct: None,
        }
    }

    /// The table's figures as perftest computes them (`print_report_lat`,
    /// for `--perftest-stats`): of the `M` samples sorted, the two largest
    /// are left out of the median, mean and deviation (`n = M − 2`);
    /// t_max is the second largest, p99 and p99.9 are `sorted[ceil(n ×
    /// 0.99)]` and `sorted[ceil(n × 0.999)]`; the median of an even `n` is
    /// the mean of the middle two. The deviation is in floating point
    /// (perftest truncates each deviation to whole microseconds: a bug not
    /// copied). `None` when fewer than 3 samples or not all were kept (then
    /// [`LatRecorder::stats_per`] applies). The JSON-only percentiles
    /// (p50, p90, p99.99) stay rdmaperf's.
    pub fn perftest_stats(&self, bytes: u64, rtt_factor: u32) -> Option<LatStats> {
        if !self.all_kept() || self.samples.len() < 3 {
            return None;
        }
        let us = |ns: f64| ns / 1000.0 / f64::from(rtt_factor.max(1));
        let mut sorted = self.samples.clone();
        sorted.sort_unstable();
        let m = sorted.len();
        let n = m - 2;
        let kept = &sorted[..n];
        let median = if (n - 1) % 2 == 1 {
            (kept[n / 2] + kept[n / 2 - 1]) as f64 / 2.0
        } else {
            kept[n / 2] as f64
        };
        let mean = kept.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
        let var = kept.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n as f64;
        let at = |q: f64| sorted[((n as f64 * q).ceil() as usize).min(m - 1)] as f64;
        Some(LatStats {
            t_min_us: us(sorted[0] as f64),
            t_max_us: us(sorted[n] as f64),
            t_typical_us: us(median),
            t_avg_us: us(mean),
            t_stdev_us: us(var.sqrt()),
            p99_us: us(at(0.99)),
            p99_9_us: us(at(0.999)),
            ..self.stats_per(bytes, rtt_factor)
        })
    }

    /// The histogram in HdrHistogram's compressed V2 encoding
    /// (`V2DeflateSerializer`, the form HdrHistogram's log tools read),
    /// base64 with the standard alphabet. Values are round trips in
    /// nanoseconds.
    ///
    /// # Panics
    /// Never in practice: encoding `u64` counts into memory cannot fail.
    pub fn histogram_base64(&self) -> String {
        let mut bytes = Vec::new();
        V2DeflateSerializer::new()
            .serialize(&self.hist, &mut bytes)
            .expect("V2-encoding u64 counts into a Vec cannot fail");
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }
}

/// The inverse of [`LatRecorder::histogram_base64`] (also reads the
/// compressed V2 form), for tests and for merging histograms.
///
/// # Errors
/// A message when the text is not base64 or not an HdrHistogram.
pub fn histogram_from_base64(s: &str) -> Result<Histogram<u64>, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .map_err(|e| format!("histogram is not base64: {e}"))?;
    Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(|e| format!("histogram is not an HdrHistogram V2 encoding: {e}"))
}

/// Figures of one size. All latencies are in microseconds and are HALF a
/// round trip (RTT/2), as perftest reports write latency.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LatStats {
    /// Message size in bytes.
    pub bytes: u64,
    /// Round trips measured (all of them; none dropped).
    pub iterations: u64,
    /// Smallest latency (exact).
    pub t_min_us: f64,
    /// Largest latency (exact).
    pub t_max_us: f64,
    /// Typical latency: the median (same as `p50_us`).
    pub t_typical_us: f64,
    /// Mean latency (exact).
    pub t_avg_us: f64,
    /// Population standard deviation (exact, floating point).
    pub t_stdev_us: f64,
    /// 50th percentile (nearest rank).
    pub p50_us: f64,
    /// 90th percentile (nearest rank).
    pub p90_us: f64,
    /// 99th percentile (nearest rank).
    pub p99_us: f64,
    /// 99.9th percentile (nearest rank).
    pub p99_9_us: f64,
    /// 99.99th percentile (nearest rank).
    pub p99_99_us: f64,
    /// Whether the percentiles come from every raw sample (else from the
    /// histogram, within 0.1 %).
    pub exact_percentiles: bool,
    /// The system's CPU use as perftest's `--cpu_util` defines it (user /
    /// (user + idle) of `/proc/stat`), percent; duration mode only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_cpu_util_pct: Option<f64>,
}

impl LatStats {
    /// The reported percentiles (p50, p90, p99, p99.9, p99.99),
    /// microseconds, in the order of [`REPORTED`].
    pub fn percentiles_us(&self) -> [f64; 5] {
        [
            self.p50_us,
            self.p90_us,
            self.p99_us,
            self.p99_9_us,
            self.p99_99_us,
        ]
    }
}

/// Which figure a threshold applies to (`--percentile`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Percentile {
    /// The median (`t_typical`).
    Median,
    /// A percentile, e.g. `P(99.9)`. Parsing accepts the reported ones
    /// (50, 90, 99, 99.9, 99.99); any other value is judged on the
    /// smallest reported percentile at or above it (the max above 99.99),
    /// which never makes a verdict more lenient.
    P(f64),
    /// The largest latency.
    Max,
    /// The mean latency.
    Avg,
}

impl Percentile {
    /// The figure of `stats` this selects, microseconds.
    pub fn value(self, stats: &LatStats) -> f64 {
        match self {
            Percentile::Median => stats.t_typical_us,
            Percentile::Max => stats.t_max_us,
            Percentile::Avg => stats.t_avg_us,
            Percentile::P(p) => REPORTED
                .iter()
                .zip(stats.percentiles_us())
                .find(|&(&q, _)| q >= p)
                .map_or(stats.t_max_us, |(_, v)| v),
        }
    }
}

impl fmt::Display for Percentile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Percentile::Median => f.write_str("median"),
            Percentile::P(p) => write!(f, "p{p}"),
            Percentile::Max => f.write_str("max"),
            Percentile::Avg => f.write_str("avg"),
        }
    }
}

impl FromStr for Percentile {
    type Err = String;

    /// `median`, `max`, `avg`, or `pNN` / `NN` with NN one of 50, 90, 99,
    /// 99.9, 99.99 (case-insensitive).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase();
        let err = || {
            format!(
                "--percentile: {s:?} is not one of median, p50, p90, p99, p99.9, p99.99, max, avg"
            )
        };
        match t.as_str() {
            "median" => return Ok(Percentile::Median),
            "max" => return Ok(Percentile::Max),
            "avg" => return Ok(Percentile::Avg),
            _ => {}
        }
        let digits = t.strip_prefix('p').unwrap_or(&t);
        if !digits.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(err());
        }
        let p: f64 = digits.parse().map_err(|_| err())?;
        if REPORTED.contains(&p) {
            Ok(Percentile::P(p))
        } else {
            Err(err())
        }
    }
}

/// Parses `--max-latency`: a positive, finite number of microseconds.
///
/// # Errors
/// A message naming `--max-latency` and the text.
pub fn parse_max_latency(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!(
            "--max-latency: {s:?} is not a positive number of microseconds"
        )),
    }
}

/// Outcome of checking one size against `--max-latency`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LatVerdict {
    /// The measured figure is at most the threshold.
    pub pass: bool,
    /// The figure judged, as displayed (`median`, `p99.9`, `max`, `avg`).
    pub percentile: String,
    /// The measured figure, microseconds (half round trip).
    pub measured_us: f64,
    /// The threshold, microseconds.
    pub max_us: f64,
    /// Message size in bytes.
    pub bytes: u64,
}

/// Judges `stats` on `which` against `max_us`: pass when measured ≤ max.
pub fn lat_verdict(stats: &LatStats, which: Percentile, max_us: f64) -> LatVerdict {
    let measured_us = which.value(stats);
    LatVerdict {
        pass: measured_us <= max_us,
        percentile: which.to_string(),
        measured_us,
        max_us,
        bytes: stats.bytes,
    }
}

impl LatVerdict {
    /// One human line, e.g.
    /// `verdict: PASS p99 1.84 usec <= max 2.50 usec (2 B)`.
    pub fn line(&self) -> String {
        let (word, cmp) = if self.pass {
            ("PASS", "<=")
        } else {
            ("FAIL", ">")
        };
        format!(
            "verdict: {word} {} {:.2} usec {cmp} max {:.2} usec ({} B)",
            self.percentile, self.measured_us, self.max_us, self.bytes
        )
    }
}

/// perftest's `tps average` of a duration-mode latency run: operations per
/// second. perftest derives both figures from the window and the count
/// (`t_avg = window / rtt_factor / iters`, `tps = iters / window`), so
/// `tps = 10^6 / (t_avg × rtt_factor)`; rdmaperf's mean is over round
/// trips that tile the window, the same quotient.
pub fn tps(s: &LatStats, rtt_factor: u32) -> f64 {
    let per_op_us = s.t_avg_us * f64::from(rtt_factor.max(1));
    if per_op_us > 0.0 {
        1e6 / per_op_us
    } else {
        0.0
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn stats() -> LatStats {
        sample_stats()
    }

    #[test]
    fn perftest_stats_drop_the_two_largest_as_print_report_lat() {
        // 1..=10 us and two outliers: perftest's n = 10.
        let mut rtts: Vec<u64> = (1..=10).map(|u| u * 2000).collect();
        rtts.extend([500_000, 900_000]);
        let r = recorder(&rtts, 12);
        let s = r.perftest_stats(2, 2).unwrap();
        assert_eq!(s.t_min_us, 1.0);
        // sorted[n]: the second largest.
        assert_eq!(s.t_max_us, 250.0);
        // (n − 1) % 2 == 1: mean of sorted[5] and sorted[4] = (6 + 5) / 2.
        assert_eq!(s.t_typical_us, 5.5);
        assert_eq!(s.t_avg_us, 5.5);
        // ceil(10 × 0.99) = 10: sorted[10].
        assert_eq!(s.p99_us, 250.0);
        assert!((s.t_stdev_us - 8.25f64.sqrt()).abs() < 1e-9);
        assert_eq!(s.iterations, 12);
        assert!(recorder(&[1, 2], 2).perftest_stats(2, 2).is_none());
    }

    pub(crate) fn recorder(rtts: &[u64], keep: usize) -> LatRecorder {
        let mut r = LatRecorder::new(keep);
        for &v in rtts {
            r.record(v);
        }
        r
    }

    fn close(a: f64, b: f64, eps: f64) -> bool {
        (a - b).abs() <= eps
    }

    /// Deterministic PRNG (SplitMix64).
    struct SplitMix(u64);

    impl SplitMix {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
    }

    /// Latency-like round trips: 1.5–4.5 µs, with a 1 % tail up to ~100 µs.
    fn latency_like(n: usize) -> Vec<u64> {
        let mut rng = SplitMix(42);
        (0..n)
            .map(|_| {
                let r = rng.next();
                let mut v = 1500 + r % 3000;
                if r.is_multiple_of(100) {
                    v += (r >> 20) % 100_000;
                }
                v
            })
            .collect()
    }

    #[test]
    fn stats_on_hand_computed_set() {
        // RTTs 2,4,6,8 µs → half-RTT 1,2,3,4 µs.
        let r = recorder(&[2000, 4000, 6000, 8000], 4);
        let s = r.stats(2);
        assert_eq!(s.bytes, 2);
        assert_eq!(s.iterations, 4);
        assert!(s.exact_percentiles);
        assert_eq!(s.t_min_us, 1.0);
        assert_eq!(s.t_max_us, 4.0);
        assert_eq!(s.t_avg_us, 2.5);
        // Population: deviations ±1.5, ±0.5 → variance (2.25+0.25)·2/4 = 1.25.
        assert!(
            close(s.t_stdev_us, 1.25f64.sqrt(), 1e-12),
            "{}",
            s.t_stdev_us
        );
        // Nearest rank: p50 → rank ceil(2) = 2; p99 → rank ceil(3.96) = 4.
        assert_eq!(s.p50_us, 2.0);
        assert_eq!(s.t_typical_us, 2.0);
        assert_eq!(s.p90_us, 4.0);
        assert_eq!(s.p99_us, 4.0);
        assert_eq!(s.p99_99_us, 4.0);
        // The histogram path gives the same figures here (values < 2048 ns
        // are exact in it; larger ones within 0.1 %).
        let h = recorder(&[2000, 4000, 6000, 8000], 0).stats(2);
        assert!(!h.exact_percentiles);
        assert!(close(h.p50_us, 2.0, 2.0 * 1e-3));
        assert_eq!(h.p99_us, 4.0, "clamped to the exact max");
        assert_eq!((h.t_min_us, h.t_max_us, h.t_avg_us), (1.0, 4.0, 2.5));
    }

    #[test]
    fn nearest_rank_is_immune_to_float_noise() {
        assert_eq!(nearest_rank(99.9, 1000), 999);
        assert_eq!(nearest_rank(99.0, 100), 99);
        assert_eq!(nearest_rank(99.99, 10_000), 9999);
        assert_eq!(nearest_rank(50.0, 4), 2);
        assert_eq!(nearest_rank(50.0, 5), 3);
        assert_eq!(nearest_rank(99.99, 5), 5);
        assert_eq!(nearest_rank(50.0, 1), 1);
    }

    #[test]
    fn stdev_is_right_where_perftest_prints_zero() {
        // Half-RTT 1.10, 1.30, 1.20, 1.40 µs (RTT 2200..2800 ns).
        let r = recorder(&[2200, 2600, 2400, 2800], 4);
        let s = r.stats(2);
        assert!(close(s.t_avg_us, 1.25, 1e-12));
        // Population: deviations ±0.15, ±0.05 → variance
        // (0.0225+0.0025)·2/4 = 0.0125 → stdev 0.11180….
        assert!(
            close(s.t_stdev_us, 0.0125f64.sqrt(), 1e-12),
            "{}",
            s.t_stdev_us
        );
        assert!(close(s.t_stdev_us, 0.1118, 1e-4));
        // perftest (print_report_lat): average is a double (1.25), but
        //   int temp_var = average - x;   // 0.15, -0.05, 0.05, -0.15 → 0
        //   int pow_var = pow(temp_var, 2); // 0
        //   stdev = sqrt(stdev_sum / measure_cnt) = sqrt(0 / 4) = 0.00
        let xs = [1.10f64, 1.30, 1.20, 1.40];
        let average = xs.iter().sum::<f64>() / xs.len() as f64;
        let stdev_sum: f64 = xs
            .iter()
            .map(|x| {
                let temp_var = (average - x) as i32;
                f64::from(temp_var * temp_var)
            })
            .sum();
        assert_eq!((stdev_sum / xs.len() as f64).sqrt(), 0.0);
    }

    #[test]
    fn histogram_percentiles_agree_with_exact_within_0_1_percent() {
        let rtts = latency_like(100_000);
        let exact = recorder(&rtts, rtts.len()).stats(2);
        let hist = recorder(&rtts, 10).stats(2);
        assert!(exact.exact_percentiles && !hist.exact_percentiles);
        for (e, h) in [
            (exact.p50_us, hist.p50_us),
            (exact.p90_us, hist.p90_us),
            (exact.p99_us, hist.p99_us),
            (exact.p99_9_us, hist.p99_9_us),
            (exact.p99_99_us, hist.p99_99_us),
        ] {
            assert!((h - e).abs() <= e * 1e-3, "exact {e} histogram {h}");
        }
        // Min, max, mean, stdev do not depend on kept samples.
        assert_eq!(exact.t_min_us, hist.t_min_us);
        assert_eq!(exact.t_max_us, hist.t_max_us);
        assert_eq!(exact.t_avg_us, hist.t_avg_us);
        assert_eq!(exact.t_stdev_us, hist.t_stdev_us);
        // Mean and stdev against a two-pass computation.
        let n = rtts.len() as f64;
        let mean = rtts.iter().map(|&v| v as f64).sum::<f64>() / n;
        let var = rtts.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
        assert!(close(exact.t_avg_us, mean / 2000.0, 1e-9));
        assert!(close(exact.t_stdev_us, var.sqrt() / 2000.0, 1e-9));
    }

    #[test]
    fn percentiles_are_ordered() {
        let rtts = latency_like(20_000);
        for keep in [0, rtts.len()] {
            let s = recorder(&rtts, keep).stats(2);
            let chain = [
                s.t_min_us,
                s.p50_us,
                s.p90_us,
                s.p99_us,
                s.p99_9_us,
                s.p99_99_us,
                s.t_max_us,
            ];
            assert!(chain.windows(2).all(|w| w[0] <= w[1]), "{chain:?}");
            assert_eq!(s.t_typical_us, s.p50_us);
        }
    }

    #[test]
    fn recording_does_not_grow_and_clamps_huge_values() {
        let mut r = LatRecorder::new(10);
        let cap = r.samples.capacity();
        for i in 0..1_000_000u64 {
            r.record(1000 + i % 5000);
        }
        r.record(u64::MAX);
        r.record(HIST_HIGH_NS + 1);
        r.record(HIST_HIGH_NS);
        assert_eq!(r.count(), 1_000_003);
        assert_eq!(r.samples().len(), 10);
        assert_eq!(r.samples.capacity(), cap);
        assert_eq!(r.samples()[..3], [1000, 1001, 1002]);
        assert_eq!(r.clamped(), 2);
        assert_eq!(r.histogram().len(), 1_000_003);
        assert_eq!(
            r.histogram().max(),
            r.histogram().highest_equivalent(HIST_HIGH_NS)
        );
        let s = r.stats(2);
        assert_eq!(s.t_max_us, HIST_HIGH_NS as f64 / 2000.0);
        assert!(!s.exact_percentiles);
        r.reset();
        assert_eq!((r.count(), r.samples().len(), r.clamped()), (0, 0, 0));
        assert_eq!(r.samples.capacity(), cap);
        assert_eq!(r.stats(2).iterations, 0);
    }

    #[test]
    fn empty_recorder_gives_zeros() {
        let s = LatRecorder::new(0).stats(2);
        assert_eq!(s.iterations, 0);
        assert_eq!(s.t_max_us, 0.0);
    }

    #[test]
    fn histogram_base64_round_trips() {
        let rtts = latency_like(50_000);
        let r = recorder(&rtts, 0);
        let b64 = r.histogram_base64();
        assert!(
            b64.bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"+/=".contains(&c))
        );
        let h = histogram_from_base64(&b64).unwrap();
        assert_eq!(h.len(), r.histogram().len());
        assert_eq!(
            h.value_at_quantile(0.99),
            r.histogram().value_at_quantile(0.99)
        );
        assert_eq!(h.max(), r.histogram().max());
        assert!(histogram_from_base64("not base64!").is_err());
        assert!(histogram_from_base64("aGVsbG8=").is_err());
    }

    #[test]
    fn percentile_parses_and_displays() {
        let p = |s: &str| s.parse::<Percentile>();
        assert_eq!(p("median"), Ok(Percentile::Median));
        assert_eq!(p("MAX"), Ok(Percentile::Max));
        assert_eq!(p("avg"), Ok(Percentile::Avg));
        assert_eq!(p("p50"), Ok(Percentile::P(50.0)));
        assert_eq!(p("99"), Ok(Percentile::P(99.0)));
        assert_eq!(p("p99.9"), Ok(Percentile::P(99.9)));
        assert_eq!(p("99.99"), Ok(Percentile::P(99.99)));
        assert_eq!(p("p90"), Ok(Percentile::P(90.0)));
        for bad in ["p95", "", "p", "pp99", "-99", "p+99", "101", "nan", "mean"] {
            let e = p(bad).unwrap_err();
            assert!(
                e.contains("--percentile") && e.contains(&format!("{bad:?}")),
                "{e}"
            );
        }
        let shown: Vec<String> = ["median", "p99.9", "99", "p99.99", "max", "avg", "50"]
            .iter()
            .map(|s| p(s).unwrap().to_string())
            .collect();
        assert_eq!(
            shown,
            ["median", "p99.9", "p99", "p99.99", "max", "avg", "p50"]
        );
    }

    #[test]
    fn max_latency_parses() {
        assert_eq!(parse_max_latency("2.5"), Ok(2.5));
        assert_eq!(parse_max_latency(" 10 "), Ok(10.0));
        for bad in ["0", "-1", "inf", "NaN", "x", ""] {
            let e = parse_max_latency(bad).unwrap_err();
            assert!(
                e.contains("--max-latency") && e.contains(&format!("{bad:?}")),
                "{e}"
            );
        }
    }

    fn sample_stats() -> LatStats {
        LatStats {
            bytes: 2,
            iterations: 1000,
            t_min_us: 1.03,
            t_max_us: 3.52,
            t_typical_us: 1.06,
            t_avg_us: 1.07,
            t_stdev_us: 0.04,
            p50_us: 1.06,
            p90_us: 1.10,
            p99_us: 1.18,
            p99_9_us: 3.52,
            p99_99_us: 3.52,
            exact_percentiles: true,
            system_cpu_util_pct: None,
        }
    }

    #[test]
    fn verdicts_pass_fail_and_lines() {
        let s = sample_stats();
        let v = lat_verdict(&s, Percentile::P(99.0), 2.5);
        assert!(v.pass);
        assert_eq!(v.measured_us, 1.18);
        assert_eq!(
            v.line(),
            "verdict: PASS p99 1.18 usec <= max 2.50 usec (2 B)"
        );
        let v = lat_verdict(&s, Percentile::Median, 1.0);
        assert!(!v.pass);
        assert_eq!(
            v.line(),
            "verdict: FAIL median 1.06 usec > max 1.00 usec (2 B)"
        );
        // Equal passes.
        assert!(lat_verdict(&s, Percentile::Max, 3.52).pass);
        assert_eq!(lat_verdict(&s, Percentile::Avg, 5.0).measured_us, 1.07);
        assert_eq!(lat_verdict(&s, Percentile::P(99.9), 5.0).measured_us, 3.52);
        // Unreported percentiles use the next one up, then the max.
        assert_eq!(Percentile::P(95.0).value(&s), 1.18);
        assert_eq!(Percentile::P(99.999).value(&s), 3.52);
        let j = serde_json::to_value(lat_verdict(&s, Percentile::P(99.9), 5.0)).unwrap();
        assert_eq!(j["percentile"], "p99.9");
        assert_eq!(j["pass"], true);
        assert_eq!(j["bytes"], 2);
    }
}
