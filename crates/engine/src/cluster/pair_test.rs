//! What every pair runs: rank 0's test flags, sent to every rank in the
//! start (`cluster_start`'s `config`) as the client of a test binary
//! configures its server. Typed and bounded: a rank builds its own run
//! from these fields and its own device flags, never from text it is
//! sent.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::results::lat::Percentile;

/// Largest message size a pair test may ask for (perftest's `-s` cap is
/// 2^31; a cluster check has no use for more than 64 MiB).
pub const MAX_SIZE: u64 = 64 << 20;

/// Longest a pair test's direction may run, seconds.
pub const MAX_DURATION_S: u32 = 600;

/// Most QPs per pair.
pub const MAX_QPS: u32 = 64;

/// `--latency`: the default round trips of each direction's `write_lat`
/// (perftest's default `-n` for latency tests).
pub const LAT_ITERATIONS: u64 = 1_000;

/// Most round trips a direction's `write_lat` may ask for.
pub const MAX_LAT_ITERATIONS: u64 = 1_000_000;

/// `--latency`: `write_lat`'s message size, bytes (perftest's default).
pub const LAT_SIZE: u64 = 2;

/// The test of one pair (both directions, one after the other).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PairTest {
    /// `write_bw`'s message size, bytes.
    pub size: u64,
    /// Seconds each direction runs (`write_bw -D`).
    pub duration_s: u32,
    /// QPs (`-q`).
    pub qps: u32,
    /// Connect through rdma_cm (`-R`; iWARP needs it).
    pub rdma_cm: bool,
    /// The bound on every wait for a peer, seconds (`--timeout`).
    pub timeout_s: u32,
    /// After each direction's `write_bw`, a `write_lat` the same way
    /// (`--latency`): `lat_iters` round trips of [`LAT_SIZE`] bytes.
    pub latency: bool,
    /// The `write_lat`'s round trips (`-n`; [`LAT_ITERATIONS`] by default).
    pub lat_iters: u64,
    /// Which latency figure is judged (`--percentile`: `median`, `p99`,
    /// ...; [`Percentile`]'s text).
    pub percentile: String,
    /// No device: a fabricated figure instead of a test (`--simulate`).
    pub simulate: bool,
    /// With `simulate`: how long each fabricated direction takes, ms.
    pub simulate_ms: u32,
}

impl PairTest {
    /// Why the test cannot be run, if it cannot: a field out of its
    /// range (from a flag, or from a coordinator not to be trusted).
    pub fn problem(&self) -> Option<String> {
        if self.size == 0 || self.size > MAX_SIZE {
            return Some(format!("-s/--size {} is not 1 to {MAX_SIZE}", self.size));
        }
        if self.duration_s == 0 || self.duration_s > MAX_DURATION_S {
            return Some(format!(
                "-D/--duration {} is not 1 to {MAX_DURATION_S} seconds",
                self.duration_s
            ));
        }
        if self.qps == 0 || self.qps > MAX_QPS {
            return Some(format!("-q/--qp {} is not 1 to {MAX_QPS}", self.qps));
        }
        if self.lat_iters < 2 || self.lat_iters > MAX_LAT_ITERATIONS {
            return Some(format!(
                "-n/--iters {} is not 2 to {MAX_LAT_ITERATIONS}",
                self.lat_iters
            ));
        }
        if let Err(e) = self.judged_percentile() {
            return Some(e);
        }
        if self.simulate_ms > 60_000 {
            return Some(format!(
                "--simulate-ms {} is not 0 to 60000",
                self.simulate_ms
            ));
        }
        if self.timeout_s == 0 || self.timeout_s > 3_600 {
            return Some(format!(
                "--timeout {} is not 1 to 3600 seconds",
                self.timeout_s
            ));
        }
        None
    }

    /// The test for a human, e.g. `write_bw -s 1048576 -D 2 -q 1 -R,
    /// then write_lat -s 2 -n 1000`.
    pub fn describe(&self) -> String {
        if self.simulate {
            return format!("simulated ({} ms a direction)", self.simulate_ms);
        }
        let mut d = format!(
            "write_bw -s {} -D {} -q {}{}",
            self.size,
            self.duration_s,
            self.qps,
            if self.rdma_cm { " -R" } else { "" }
        );
        if self.latency {
            d.push_str(&format!(
                ", then write_lat -s {LAT_SIZE} -n {} (judged: {})",
                self.lat_iters, self.percentile
            ));
        }
        d
    }

    /// The latency figure judged.
    ///
    /// # Errors
    /// `percentile` is not one [`Percentile`] takes.
    pub fn judged_percentile(&self) -> Result<Percentile, String> {
        self.percentile.parse()
    }

    /// The bound on one direction: its duration, the set-up and the
    /// peer's bound twice (connect and the done exchange); with
    /// `latency`, the same again for the `write_lat` (its round trips
    /// are each bounded by the timeout, and take microseconds).
    pub fn direction_bound(&self) -> Duration {
        let timeout = u64::from(self.timeout_s);
        if self.simulate {
            return Duration::from_millis(u64::from(self.simulate_ms))
                + Duration::from_secs(timeout);
        }
        let latency = if self.latency { 2 * timeout + 1 } else { 0 };
        Duration::from_secs(u64::from(self.duration_s) + 2 * timeout + latency)
    }

    /// The coordinator's bound on a round: both directions, plus a margin
    /// for the reports to come in.
    pub fn round_budget(&self) -> Duration {
        2 * self.direction_bound() + Duration::from_secs(5)
    }

    /// The time a round usually takes, for the plan's estimate, seconds.
    pub fn typical_round_s(&self) -> f64 {
        if self.simulate {
            2.0 * f64::from(self.simulate_ms) / 1e3 + 0.01
        } else {
            // Both directions, and about a second of set-up each (one
            // more for a write_lat).
            let latency = if self.latency { 1.0 } else { 0.0 };
            2.0 * (f64::from(self.duration_s) + 1.0 + latency)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test() -> PairTest {
        PairTest {
            size: 1 << 20,
            duration_s: 2,
            qps: 1,
            rdma_cm: false,
            timeout_s: 10,
            latency: false,
            lat_iters: LAT_ITERATIONS,
            percentile: "median".into(),
            simulate: false,
            simulate_ms: 0,
        }
    }

    #[test]
    fn a_round_is_bounded_by_both_directions_and_a_margin() {
        let t = test();
        assert_eq!(t.direction_bound(), Duration::from_secs(22));
        assert_eq!(t.round_budget(), Duration::from_secs(49));
        assert_eq!(t.typical_round_s(), 6.0);
        // A write_lat after each write_bw: its own connect and end bounds.
        let t = PairTest {
            latency: true,
            ..test()
        };
        assert_eq!(t.direction_bound(), Duration::from_secs(43));
        assert_eq!(t.typical_round_s(), 8.0);
    }

    #[test]
    fn fields_out_of_range_are_named() {
        assert_eq!(test().problem(), None);
        for (t, flag) in [
            (PairTest { size: 0, ..test() }, "-s/--size"),
            (
                PairTest {
                    size: MAX_SIZE + 1,
                    ..test()
                },
                "-s/--size",
            ),
            (
                PairTest {
                    duration_s: 0,
                    ..test()
                },
                "-D/--duration",
            ),
            (PairTest { qps: 65, ..test() }, "-q/--qp"),
            (
                PairTest {
                    lat_iters: 1,
                    ..test()
                },
                "-n/--iters",
            ),
            (
                PairTest {
                    percentile: "p42".into(),
                    ..test()
                },
                "--percentile",
            ),
            (
                PairTest {
                    timeout_s: 0,
                    ..test()
                },
                "--timeout",
            ),
        ] {
            assert!(t.problem().is_some_and(|p| p.starts_with(flag)), "{t:?}");
        }
    }

    #[test]
    fn unknown_fields_are_refused() {
        let text = r#"{"size":1,"duration_s":1,"qps":1,"rdma_cm":false,"timeout_s":1,"latency":false,"lat_iters":1000,"percentile":"median","simulate":false,"simulate_ms":0,"json":"/etc/passwd"}"#;
        assert!(serde_json::from_str::<PairTest>(text).is_err());
    }
}
