//! The clock that stamps latency samples (`--clock`); the choice and the
//! tick arithmetic are in [`engine::bench::clock`].

use std::time::{Duration, Instant};

use anyhow::anyhow;
use engine::bench::clock::{ClockChoice, ClockRecord, ClockSource, TickPoint, TickRate};

use crate::exit::UsageError;

/// A counter the ping-pong reads once per round trip.
pub trait Ticks {
    /// The current count.
    fn now(&self) -> u64;
}

/// `CLOCK_MONOTONIC`, in nanoseconds since `origin`.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicTicks {
    origin: Instant,
}

impl MonotonicTicks {
    /// Counting from now.
    pub fn starting_now() -> Self {
        Self {
            origin: Instant::now(),
        }
    }
}

impl Ticks for MonotonicTicks {
    #[inline]
    fn now(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }
}

/// The time-stamp counter. Only built when [`engine::bench::clock::choose`] said
/// the TSC can be read, so `0` is never seen.
#[derive(Debug, Clone, Copy)]
pub struct TscTicks;

impl Ticks for TscTicks {
    #[inline]
    fn now(&self) -> u64 {
        verbs::tsc::try_read().unwrap_or(0)
    }
}

/// Start-up calibration span of the TSC.
const CALIBRATION: Duration = Duration::from_millis(20);
/// Rate change over a run above which a warning is printed.
const DRIFT_WARNING: f64 = 0.005;

/// The chosen clock, its start-up calibration and its measured cost.
#[derive(Debug, Clone)]
pub struct Clock {
    source: ClockSource,
    choice: ClockChoice,
    origin: Instant,
    start: TickPoint,
    startup_rate: TickRate,
    read_cost_ns: f64,
}

impl Clock {
    /// Resolves `--clock`; for the TSC, calibrates it over 20 ms.
    ///
    /// # Errors
    /// A usage error for `--clock tsc` where no TSC can be read; an error
    /// when the TSC does not advance.
    pub fn new(choice: ClockChoice) -> anyhow::Result<Self> {
        // Only `auto` looks at the CPU's flags.
        let cpuinfo = (choice == ClockChoice::Auto)
            .then(|| std::fs::read_to_string("/proc/cpuinfo").ok())
            .flatten();
        let source =
            engine::bench::clock::choose(choice, verbs::tsc::AVAILABLE, cpuinfo.as_deref())
                .map_err(UsageError)?;
        let mut clock = Self::unmeasured(source, choice);
        if source == ClockSource::Tsc {
            clock.start = clock.point();
            std::thread::sleep(CALIBRATION);
            clock.startup_rate =
                TickRate::between(clock.start, clock.point()).ok_or_else(|| {
                    anyhow!("the TSC did not advance in {CALIBRATION:?}; use --clock monotonic")
                })?;
        }
        clock.read_cost_ns = match source {
            ClockSource::Tsc => read_cost_ticks(&TscTicks) * clock.startup_rate.ns_per_tick(),
            ClockSource::Monotonic => read_cost_ticks(&MonotonicTicks::starting_now()),
        };
        Ok(clock)
    }

    /// The server's clock: monotonic, cost not measured. The server stamps
    /// no samples; the clock only bounds its waits.
    pub fn for_server() -> Self {
        Self::unmeasured(ClockSource::Monotonic, ClockChoice::Monotonic)
    }

    /// `source`, not yet calibrated nor measured.
    fn unmeasured(source: ClockSource, choice: ClockChoice) -> Self {
        Self {
            source,
            choice,
            origin: Instant::now(),
            start: TickPoint { ticks: 0, ns: 0 },
            startup_rate: TickRate::NANOSECONDS,
            read_cost_ns: 0.0,
        }
    }

    /// How the source was chosen, as reported.
    fn chosen_by(&self) -> &'static str {
        match self.choice {
            ClockChoice::Auto => "auto",
            _ => "--clock",
        }
    }

    /// The source in use.
    pub fn source(&self) -> ClockSource {
        self.source
    }

    /// The TSC and the monotonic clock read together: the TSC read before
    /// and after the clock, keeping the tightest of five tries (a pair
    /// split by preemption would skew the rate), at its midpoint.
    fn point(&self) -> TickPoint {
        let mut best = None::<(u64, TickPoint)>;
        for _ in 0..5 {
            let a = TscTicks.now();
            let ns = self.origin.elapsed().as_nanos() as u64;
            let b = TscTicks.now();
            let gap = b.saturating_sub(a);
            if best.is_none_or(|(g, _)| gap < g) {
                best = Some((
                    gap,
                    TickPoint {
                        ticks: a + gap / 2,
                        ns,
                    },
                ));
            }
        }
        best.map_or(TickPoint { ticks: 0, ns: 0 }, |(_, p)| p)
    }

    /// The rate over the whole time since start-up (at least the 20 ms
    /// calibration, more accurate the longer the process has run).
    pub fn rate_now(&self) -> TickRate {
        match self.source {
            ClockSource::Monotonic => TickRate::NANOSECONDS,
            ClockSource::Tsc => {
                TickRate::between(self.start, self.point()).unwrap_or(self.startup_rate)
            }
        }
    }

    /// After a run that converted with `used`: warns on stderr when the
    /// TSC's rate since start-up differs from it by more than 0.5 %.
    pub fn check_drift(&self, used: TickRate) {
        if self.source != ClockSource::Tsc {
            return;
        }
        let now = self.rate_now();
        let drift = now.drift_from(used);
        if drift > DRIFT_WARNING {
            eprintln!(
                "warning: the TSC's rate moved by {:.2} % during the run \
                 ({:.2} MHz, then {:.2} MHz): its figures may be off by as much; \
                 --clock monotonic does not depend on it",
                drift * 100.0,
                used.mhz(),
                now.mhz()
            );
        }
    }

    /// The `clock` object of the JSON output; `rate` is the one the
    /// figures were converted with.
    pub fn record(&self, rate: TickRate) -> ClockRecord {
        ClockRecord {
            source: self.source,
            chosen_by: self.chosen_by(),
            read_cost_ns: self.read_cost_ns,
            tsc_mhz: (self.source == ClockSource::Tsc).then(|| rate.mhz()),
        }
    }

    /// One line for the banner.
    pub fn describe(&self) -> String {
        let rate = match self.source {
            ClockSource::Tsc => format!(" at {:.2} MHz", self.startup_rate.mhz()),
            ClockSource::Monotonic => String::new(),
        };
        format!(
            "{}{rate}, {:.1} ns per read ({})",
            self.source,
            self.read_cost_ns,
            self.chosen_by()
        )
    }
}

/// Average cost of one `now()`, in ticks.
fn read_cost_ticks(ticks: &impl Ticks) -> f64 {
    const N: u32 = 100_000;
    let first = ticks.now();
    let mut last = first;
    for _ in 0..N {
        last = std::hint::black_box(ticks.now());
    }
    last.saturating_sub(first) as f64 / f64::from(N)
}
