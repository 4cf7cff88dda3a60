//! What differs between tests, behind one trait: [`Measure`] says what a
//! side creates, what it does before a size's barrier, how it measures a
//! size and what it shows of it. The runner ([`crate::runner`]) does
//! everything else. The implementations are per metric and run the loops
//! of this module for the spec's verb: [`bw::BwMeasure`] (the bandwidth
//! loop, generic over the operation, with [`credit`]'s receive credits
//! for SENDs on iWARP) and [`lat::LatMeasure`] (the write and SEND
//! ping-pongs and the one-sided read loop).

use std::io;
use std::time::Duration;

use engine::bench::clock::ClockRecord;
use engine::bench::config::TestConfig;
use engine::bench::plan::Role;
use engine::bench::spec::TestSpec;
use engine::format::banner::BannerInfo;
use engine::format::report::Report;
use engine::format::table::TableStyle;
use engine::proto::wire::QpInfo;
use engine::results::bw::BwResult;
use engine::results::record::{DataCheck, Figures, RunContext};
use engine::results::verdict::VerdictRecord;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::oob::Channel;
use crate::options::RunOptions;
use crate::output::Output;
use crate::setup::Port;
use crate::side::{Layout, Side};

pub mod bw;
pub mod credit;
pub mod lat;

/// A receive that completed in error (both loops that receive SENDs).
#[cold]
fn receive_failed(qpn: u32, wc: &verbs::WorkCompletion) -> anyhow::Error {
    anyhow::anyhow!(
        "a receive on QPN {qpn:#x} completed with {}: the peer may be gone",
        wc.status()
    )
}

/// A received SEND of another size than the phase's.
#[cold]
fn wrong_size(qpn: u32, size: u64, got: u32) -> anyhow::Error {
    anyhow::anyhow!(
        "QPN {qpn:#x} received a {got}-byte message where {size}-byte SENDs were expected"
    )
}

/// The user and idle jiffies of `/proc/stat`'s `cpu` line (perftest's
/// `--cpu_util` reading).
fn read_proc_stat() -> Option<(u64, u64)> {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|t| engine::results::bw::parse_proc_stat(&t))
}

/// What the runner asks of one size on one side.
#[derive(Debug)]
pub struct SizeCtx<'a> {
    /// This side's resources, connected.
    pub side: &'a Side,
    /// The peer's QPs.
    pub remote: &'a [QpInfo],
    /// Message size.
    pub size: u64,
    /// This side.
    pub role: Role,
    /// Bound on every wait for the peer.
    pub timeout: Duration,
    /// The control channel (heartbeats; peeked by a ping-pong server).
    pub ch: &'a mut Channel,
}

/// What a side shows of one size.
#[derive(Debug)]
pub struct Shown {
    /// The figures.
    pub figures: Figures,
    /// The peer's own figures, when reported.
    pub peer_result: Option<BwResult>,
    /// The encoded histogram (`--json-histogram`).
    pub histogram: Option<String>,
    /// The data check, when the test has one.
    pub data_check: Option<DataCheck>,
    /// The clock the figures were converted with (latency).
    pub clock: Option<ClockRecord>,
}

/// What differs between tests; the runner does the rest.
pub trait Measure: Sized {
    /// The configuration the client sends.
    type Config: TestConfig;
    /// What a side sends its peer after a size.
    type Outcome: Serialize + DeserializeOwned;

    /// The test's state on one side (the clock is resolved here, before
    /// any device is opened).
    ///
    /// # Errors
    /// Usage errors of the test's own options.
    fn new(
        spec: TestSpec,
        opts: &RunOptions,
        cfg: Self::Config,
        role: Role,
    ) -> anyhow::Result<Self>;
    /// The configuration.
    fn config(&self) -> &Self::Config;
    /// The configuration, to set what the device decides (`-o`).
    fn config_mut(&mut self) -> &mut Self::Config;
    /// What this side creates.
    fn layout(&self, role: Role) -> Layout;
    /// Called once the port is open, before the side is created.
    fn on_port(&mut self, _port: &Port) {}
    /// The flag (or reason) that makes this test carry immediate data,
    /// if it does: iWARP devices have none.
    fn immediate(&self, _role: Role) -> Option<&'static str> {
        None
    }
    /// Creates this side's resources.
    ///
    /// # Errors
    /// Usage and device errors.
    fn create_side(&mut self, port: Port, role: Role) -> anyhow::Result<Side> {
        Side::create(port, &self.layout(role))
    }
    /// The test's fields of perftest's banner (QPs, depths, inline size;
    /// rdmaperf's own lines in `extra`); the runner fills the rest.
    fn banner(&self, role: Role, info: &mut BannerInfo);
    /// What the context of the reports adds for this test.
    fn context(&self, ctx: RunContext) -> RunContext;
    /// The table this side prints on stdout, if any (`--output`: its one
    /// figure per size).
    fn table(&self, role: Role) -> Option<Box<dyn Report>>;
    /// How bandwidth figures are shown (unit, peak, CPU column) in the
    /// table, `--output` and perftest's JSON file.
    fn table_style(&self) -> TableStyle {
        TableStyle::default()
    }
    /// Before a size's start barrier (a ping-pong zeroes its flags here:
    /// after the barrier the peer may already have written).
    ///
    /// # Errors
    /// Device-memory errors.
    fn prepare(&mut self, side: &Side, size: u64) -> anyhow::Result<()>;
    /// This side's part of one size; `None` when it measures nothing.
    ///
    /// # Errors
    /// Failed operations, a silent peer.
    fn run_size(&mut self, ctx: SizeCtx<'_>) -> anyhow::Result<Option<Self::Outcome>>;
    /// What this side shows of the size, from both outcomes.
    ///
    /// # Errors
    /// Outcomes that contradict each other.
    fn shown(
        &mut self,
        side: &Side,
        role: Role,
        size: u64,
        mine: Option<&Self::Outcome>,
        peer: Option<Self::Outcome>,
    ) -> anyhow::Result<Option<Shown>>;
    /// After the table: raw dumps.
    ///
    /// # Errors
    /// I/O errors.
    fn after_table(&mut self, _out: &mut Output) -> io::Result<()> {
        Ok(())
    }
    /// The verdicts of the run.
    fn verdicts(&mut self, _side: &Side) -> Vec<VerdictRecord> {
        Vec::new()
    }
}
