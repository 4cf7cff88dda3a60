//! What a run measured, and its records; imports only [`crate::bench`](mod@crate::bench).
//!
//! - [`bw`]: bandwidth figures from a measurement, the completion
//!   timeline and its peak rate, `/proc/stat` CPU use.
//! - [`lat`]: the latency recorder, its statistics and percentiles, the
//!   `--max-latency` verdict.
//! - [`record`]: the run context and the per-size and interruption
//!   records every output format is fed.
//! - [`verdict`]: the verdicts of a run (link, latency, perftest limits)
//!   and the exit code of a failed one.

pub mod bw;
pub mod lat;
pub mod record;
pub mod verdict;
