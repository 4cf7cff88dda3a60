//! Which clock stamps latency samples, and how counter ticks become
//! nanoseconds. Pure: the caller reads the clocks and the CPU flags.
//!
//! Two sources:
//! - **monotonic**: `CLOCK_MONOTONIC` through `std::time::Instant`, one tick
//!   per nanosecond. Cheap where the kernel's clocksource can be read from
//!   user space (TSC, kvm-clock: ~20 ns); a system call where it cannot
//!   (HPET, e.g. under qemu TCG: ~2.5 µs).
//! - **tsc**: the CPU's time-stamp counter (perftest's `get_cycles`), ~10 ns
//!   on hardware. Its rate is not read from anywhere (perftest reads
//!   `cpu MHz` from /proc/cpuinfo and can be wrong); it is calibrated
//!   against the monotonic clock, over 20 ms at start-up and again over
//!   the whole run when it ends.
//!
//! `auto` takes the TSC only when the CPU says it ticks at a constant rate
//! through every power state (`constant_tsc` and `nonstop_tsc` in
//! /proc/cpuinfo, as on every current server CPU), and the monotonic clock
//! otherwise.

use std::fmt;

use serde::Serialize;

/// What the user asked for with `--clock`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ClockChoice {
    /// The TSC when the CPU advertises an invariant one, else monotonic.
    #[default]
    Auto,
    /// The time-stamp counter, calibrated against the monotonic clock.
    Tsc,
    /// `CLOCK_MONOTONIC`.
    Monotonic,
}

impl std::str::FromStr for ClockChoice {
    type Err = String;

    /// `auto`, `tsc` or `monotonic` (case-insensitive).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "tsc" => Ok(Self::Tsc),
            "monotonic" => Ok(Self::Monotonic),
            _ => Err(format!("--clock: {s:?} is not one of auto, tsc, monotonic")),
        }
    }
}

/// The clock a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ClockSource {
    /// The time-stamp counter.
    Tsc,
    /// `CLOCK_MONOTONIC`.
    Monotonic,
}

impl fmt::Display for ClockSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Tsc => "TSC (rdtsc, rate calibrated against CLOCK_MONOTONIC)",
            Self::Monotonic => "CLOCK_MONOTONIC",
        })
    }
}

/// The clock of a latency run, as reported in JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClockRecord {
    /// The source read.
    pub source: ClockSource,
    /// `auto` or `--clock`.
    pub chosen_by: &'static str,
    /// Measured cost of one read, nanoseconds.
    pub read_cost_ns: f64,
    /// The TSC's calibrated rate (TSC only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tsc_mhz: Option<f64>,
}

/// Whether `/proc/cpuinfo` text advertises an invariant TSC: the first
/// `flags` line has both `constant_tsc` and `nonstop_tsc`.
pub fn invariant_tsc(cpuinfo: &str) -> bool {
    cpuinfo
        .lines()
        .find_map(|l| {
            let (key, value) = l.split_once(':')?;
            (key.trim() == "flags").then_some(value)
        })
        .is_some_and(|flags| {
            let has = |w: &str| flags.split_whitespace().any(|f| f == w);
            has("constant_tsc") && has("nonstop_tsc")
        })
}

/// Resolves `--clock`. `tsc_readable`: this build can read a TSC;
/// `cpuinfo`: the text of /proc/cpuinfo when it could be read.
///
/// # Errors
/// `--clock tsc` on a build without a TSC, as a message naming the flag.
pub fn choose(
    choice: ClockChoice,
    tsc_readable: bool,
    cpuinfo: Option<&str>,
) -> Result<ClockSource, String> {
    match choice {
        ClockChoice::Monotonic => Ok(ClockSource::Monotonic),
        ClockChoice::Tsc if tsc_readable => Ok(ClockSource::Tsc),
        ClockChoice::Tsc => Err(format!(
            "--clock tsc: this build ({}) cannot read a time-stamp counter; use --clock monotonic",
            std::env::consts::ARCH
        )),
        ClockChoice::Auto => Ok(if tsc_readable && cpuinfo.is_some_and(invariant_tsc) {
            ClockSource::Tsc
        } else {
            ClockSource::Monotonic
        }),
    }
}

/// A counter reading and a monotonic-clock reading taken together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TickPoint {
    /// Counter ticks.
    pub ticks: u64,
    /// Monotonic nanoseconds (from any fixed origin).
    pub ns: u64,
}

/// Nanoseconds per counter tick.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TickRate {
    ns_per_tick: f64,
}

impl TickRate {
    /// One tick per nanosecond (the monotonic clock).
    pub const NANOSECONDS: Self = Self { ns_per_tick: 1.0 };

    /// The rate between two points; `None` unless both the counter and
    /// the clock moved forward.
    pub fn between(a: TickPoint, b: TickPoint) -> Option<Self> {
        let ticks = b.ticks.checked_sub(a.ticks).filter(|&t| t > 0)?;
        let ns = b.ns.checked_sub(a.ns).filter(|&n| n > 0)?;
        Some(Self {
            ns_per_tick: ns as f64 / ticks as f64,
        })
    }

    /// Nanoseconds in `ticks`.
    #[inline]
    pub fn to_ns(self, ticks: u64) -> u64 {
        (ticks as f64 * self.ns_per_tick) as u64
    }

    /// Ticks in `ns` nanoseconds (rounded up).
    pub fn ticks_for_ns(self, ns: u64) -> u64 {
        (ns as f64 / self.ns_per_tick).ceil() as u64
    }

    /// Nanoseconds per tick.
    pub fn ns_per_tick(self) -> f64 {
        self.ns_per_tick
    }

    /// Counter frequency in MHz.
    pub fn mhz(self) -> f64 {
        1000.0 / self.ns_per_tick
    }

    /// Relative difference to `other` (0.01 = 1 %).
    pub fn drift_from(self, other: Self) -> f64 {
        (self.ns_per_tick / other.ns_per_tick - 1.0).abs()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTEL: &str = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu MHz\t\t: 2300.000\n\
        flags\t\t: fpu vme tsc msr constant_tsc rep_good nopl nonstop_tsc cpuid tsc_known_freq\n\
        processor\t: 1\nflags\t\t: fpu\n";
    const TCG: &str = "processor\t: 0\nmodel name\t: QEMU TCG CPU version 2.5+\n\
        flags\t\t: fpu de pse tsc msr pae rdtscp lm\n";

    #[test]
    fn invariant_tsc_needs_both_flags_on_the_first_flags_line() {
        assert!(invariant_tsc(INTEL));
        assert!(!invariant_tsc(TCG));
        assert!(!invariant_tsc("flags : constant_tsc\n"));
        assert!(!invariant_tsc("flags : nonstop_tsc\n"));
        assert!(!invariant_tsc("flags :\n"));
        assert!(!invariant_tsc(""));
        // Only whole words count.
        assert!(!invariant_tsc("flags : xconstant_tsc nonstop_tscx\n"));
        // The ARM "Features" line is not a flags line.
        assert!(!invariant_tsc("Features : constant_tsc nonstop_tsc\n"));
    }

    #[test]
    fn choose_follows_the_flag_and_the_cpu() {
        use ClockChoice::*;
        assert_eq!(choose(Auto, true, Some(INTEL)), Ok(ClockSource::Tsc));
        assert_eq!(choose(Auto, true, Some(TCG)), Ok(ClockSource::Monotonic));
        assert_eq!(choose(Auto, true, None), Ok(ClockSource::Monotonic));
        assert_eq!(choose(Auto, false, Some(INTEL)), Ok(ClockSource::Monotonic));
        assert_eq!(choose(Tsc, true, Some(TCG)), Ok(ClockSource::Tsc));
        assert_eq!(
            choose(Monotonic, true, Some(INTEL)),
            Ok(ClockSource::Monotonic)
        );
        let e = choose(Tsc, false, Some(INTEL)).unwrap_err();
        assert!(e.starts_with("--clock tsc:"), "{e}");
    }

    #[test]
    fn clock_choice_parses_its_three_names() {
        assert_eq!("auto".parse(), Ok(ClockChoice::Auto));
        assert_eq!("TSC".parse(), Ok(ClockChoice::Tsc));
        assert_eq!(" monotonic".parse(), Ok(ClockChoice::Monotonic));
        let e = "rdtsc".parse::<ClockChoice>().unwrap_err();
        assert!(e.contains("--clock") && e.contains("rdtsc"), "{e}");
    }

    #[test]
    fn rate_converts_both_ways() {
        let a = TickPoint {
            ticks: 1_000,
            ns: 500,
        };
        let b = TickPoint {
            ticks: 1_000 + 2_300_000_000,
            ns: 500 + 1_000_000_000,
        };
        let r = TickRate::between(a, b).unwrap();
        assert!((r.mhz() - 2300.0).abs() < 1e-6, "{}", r.mhz());
        assert_eq!(r.to_ns(2300), 1000);
        assert_eq!(r.ticks_for_ns(1000), 2300);
        assert_eq!(TickRate::NANOSECONDS.to_ns(1234), 1234);
        assert_eq!(TickRate::NANOSECONDS.ticks_for_ns(1234), 1234);
        let slower = TickRate::between(
            a,
            TickPoint {
                ticks: b.ticks,
                ns: b.ns + 10_000_000,
            },
        )
        .unwrap();
        assert!((slower.drift_from(r) - 0.01).abs() < 1e-9);
    }

    #[test]
    fn rate_refuses_a_counter_or_clock_that_did_not_advance() {
        let a = TickPoint { ticks: 10, ns: 10 };
        assert_eq!(TickRate::between(a, a), None);
        assert_eq!(TickRate::between(a, TickPoint { ticks: 5, ns: 20 }), None);
        assert_eq!(TickRate::between(a, TickPoint { ticks: 20, ns: 5 }), None);
    }
}
