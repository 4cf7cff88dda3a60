//! The pure core of rdmaperf: everything that needs no device and no FFI,
//! so all of it is unit-tested without RDMA hardware. Grouped by domain;
//! the layers only point one way: [`bench`](mod@bench) ← [`results`] ← [`format`](mod@format),
//! with [`fabric`], [`nccl`] and [`cluster`] on top, and [`proto`] above
//! [`cluster`] (its wire carries cluster mode's messages).
//!
//! - [`bench`](mod@bench): what a test is and how it runs: [`bench::spec`] (verb,
//!   metric, defaults), [`bench::config`] (the configurations and their
//!   limits), [`bench::sched`] (the bandwidth loop's posting policy),
//!   [`bench::clock`] (the sample clock).
//! - [`results`]: what a run measured: [`results::bw`] (bandwidth
//!   figures, the completion timeline), [`results::lat`] (latency
//!   statistics), [`results::record`] (run context and size records),
//!   [`results::verdict`] (link, latency and limit verdicts).
//! - [`format`](mod@format): how results are shown: the [`format::report::Report`]
//!   trait, perftest's tables ([`format::table`], [`format::lat_table`]),
//!   [`format::json_lines`], [`format::perftest_json`], the
//!   [`format::banner`], and [`format::printf`] (C's printf, for tests).
//! - [`proto`]: the control protocol: [`proto::wire`] (the framed
//!   message codec, cluster mode's messages included) and
//!   [`proto::session`] (the session's two state machines).
//! - [`fabric`]: port health: [`fabric::ports`], [`fabric::link`],
//!   [`fabric::gid`], [`fabric::listing`] and the Prometheus
//!   [`fabric::prom`] metrics.
//! - [`nccl`]: `doctor nccl`: [`nccl::env`] (NCCL_* checks) and
//!   [`nccl::log`] (NCCL log reader).
//! - [`health`]: `rdmaperf health`, the node check a scheduler runs: counter
//!   windows that survive reboots, the passive checks, the bounded state
//!   file, the Slurm drain rule; [`baseline`]: each link against its own
//!   past (also `rdmaperf cluster --history`).
//! - [`cluster`]: cluster mode: [`cluster::launch`] (rank, size and
//!   coordinator from the launcher), [`cluster::hostlist`] (Slurm
//!   hostlists), [`cluster::schedule`] (rounds of pairs),
//!   [`cluster::rendezvous`] (the coordinator's state machines) and
//!   [`cluster::verdict`] (pair, round and node verdicts).

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod baseline;
pub mod bench;
pub mod cluster;
pub mod fabric;
pub mod format;
pub mod health;
pub mod nccl;
pub mod proto;
pub mod results;
