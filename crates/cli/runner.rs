//! The one session runner: every test, both roles. A binary is a
//! [`TestSpec`]; [`main`] parses its flags ([`crate::args`]), and the
//! client or server flow here runs it: hello/accept, one phase per size
//! (prepare, barrier, measure, done exchange, report), goodbye, verdicts,
//! and the commit of the `--json` file. What differs between tests is
//! behind [`Measure`]: the bandwidth tests ([`BwMeasure`]) and the latency
//! tests ([`LatMeasure`]), each running the loops of [`crate::measure`]
//! for the spec's verb.

use std::io::{self, Write};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use engine::bw::{BwResult, RESULT_LINE, Table, Unit};
use engine::clock::{ClockRecord, TickRate};
use engine::config::{BwConfig, CACHE_LINE, ConfigError, RING_BYTES};
use engine::gid::to_perftest_string;
use engine::lat::{LatConfig, LatRecorder, LatTable, dump_samples, lat_verdict};
use engine::link::{self, CounterSnapshot, ExpectRate, LinkRate, VerdictInput};
use engine::report::{
    ConfigRecord, DataCheck, Figures, Report, RunContext, SideRecord, SizeRecord, VerdictRecord,
};
use engine::spec::{Metric, TestSpec, Verb};
use engine::wire::{Message, QpInfo, SideInfo};
use serde::Serialize;
use serde::de::DeserializeOwned;
use verbs::Mtu;

use crate::args::{Cli, Parsed};
use crate::clock::Clock;
use crate::measure::bw::{self as bw_loop, ReadOp, WriteOp};
use crate::measure::lat::{LatOp, Role as LatRole, SizeRun, Until};
use crate::oob::Channel;
use crate::output::Output;
use crate::session::{
    Hello, client_barrier, client_goodbye, client_hello, expect_msg, progress, reject,
    server_accept, server_all_phases_run, server_hello, server_mtu, server_next_phase, sysfs_rate,
};
use crate::setup::{Port, open_port};
use crate::side::{Layout, Side};
use crate::{EXIT_VERDICT_FAIL, UsageError};

/// Which side of the test this process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Connects, configures the test, goes first.
    Client,
    /// Listens, runs what the client asks.
    Server,
}

impl Role {
    /// `client` or `server`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Client => "client",
            Self::Server => "server",
        }
    }
}

/// The `main` of every test binary.
pub fn main(spec: TestSpec) -> ExitCode {
    let result = crate::args::parse(spec)
        .map_err(anyhow::Error::new)
        .and_then(|parsed| run(spec, &parsed));
    crate::finish(spec.name(), result)
}

/// Runs `spec` with the parsed flags.
///
/// # Errors
/// Usage errors (exit 2) and run failures (exit 1); a FAIL verdict is
/// `Ok(EXIT_VERDICT_FAIL)`.
pub fn run(spec: TestSpec, parsed: &Parsed) -> anyhow::Result<u8> {
    let cli = &parsed.cli;
    if cli.list_devices {
        crate::run_list(&cli.device, cli.json.as_deref())?;
        return Ok(0);
    }
    if !spec.is_implemented() {
        return Err(UsageError(format!("{spec} is not implemented in this build")).into());
    }
    match (spec.metric, &cli.conn.server) {
        (Metric::Bw, Some(server)) => run_client::<BwMeasure>(spec, cli, server),
        (Metric::Lat, Some(server)) => run_client::<LatMeasure>(spec, cli, server),
        (Metric::Bw, None) => run_server::<BwMeasure>(spec, parsed),
        (Metric::Lat, None) => run_server::<LatMeasure>(spec, parsed),
    }
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
    type Config: Serialize + DeserializeOwned + Clone;
    /// What a side sends its peer after a size.
    type Outcome: Serialize + DeserializeOwned;

    /// The client's configuration from its flags.
    ///
    /// # Errors
    /// A usage error naming the flag.
    fn client_config(spec: TestSpec, cli: &Cli) -> Result<Self::Config, UsageError>;
    /// Checks a configuration the peer sent.
    ///
    /// # Errors
    /// The first violated limit.
    fn validate(cfg: &Self::Config) -> Result<(), ConfigError>;
    /// The configuration as reports show it.
    fn record_of(cfg: &Self::Config) -> ConfigRecord;
    /// The sizes, in order.
    fn sizes(cfg: &Self::Config) -> &[u64];
    /// The requested path MTU.
    fn mtu(cfg: &Self::Config) -> Option<u32>;
    /// Outstanding reads asked for (0: the device's maximum).
    fn outs(cfg: &Self::Config) -> u32;
    /// Sets the outstanding reads.
    fn set_outs(cfg: &mut Self::Config, outs: u32);

    /// The test's state on one side (the clock is resolved here, before
    /// any device is opened).
    ///
    /// # Errors
    /// Usage errors of the test's own flags.
    fn new(spec: TestSpec, cli: &Cli, cfg: Self::Config, role: Role) -> anyhow::Result<Self>;
    /// The configuration.
    fn config(&self) -> &Self::Config;
    /// The configuration, to set what the device decides (`-o`).
    fn config_mut(&mut self) -> &mut Self::Config;
    /// Server: whether the client's offer of `qps` QPs fits the test.
    ///
    /// # Errors
    /// The reason, for the client.
    fn check_offer(&self, qps: usize) -> Result<(), String>;
    /// What this side creates.
    fn layout(&self, role: Role) -> Layout;
    /// Called once the port is open, before the side is created.
    fn on_port(&mut self, _port: &Port) {}
    /// Creates this side's resources.
    ///
    /// # Errors
    /// Usage and device errors.
    fn create_side(&mut self, port: Port, role: Role) -> anyhow::Result<Side> {
        Side::create(port, &self.layout(role))
    }
    /// The test's own banner lines.
    fn banner(&self, role: Role, e: &mut dyn Write, outs: u32);
    /// What the context of the reports adds for this test.
    fn context(&self, ctx: RunContext) -> RunContext;
    /// The table this side prints on stdout, if any.
    fn table(&self, role: Role) -> Option<Box<dyn Report>>;
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

/// The outstanding reads both sides set: the smallest of the request and
/// both devices' maximum (perftest's `ctx_set_out_reads` and
/// `compare_ibv_device`); 0 for tests that post no reads.
fn effective_outs(spec: TestSpec, requested: u32, a: &SideInfo, b: &SideInfo) -> u32 {
    if !spec.uses_outstanding_reads() {
        return 0;
    }
    requested.min(a.max_rd_atom).min(b.max_rd_atom).max(1)
}

/// Client: resolves `-o` against the local device, as perftest does (the
/// device's maximum by default; above it, a warning and the maximum).
fn resolve_outs(spec: TestSpec, requested: u32, local_max: u32) -> anyhow::Result<u32> {
    if !spec.uses_outstanding_reads() {
        return Ok(0);
    }
    if local_max == 0 {
        anyhow::bail!("the device allows no outstanding RDMA READs (max_qp_rd_atom is 0)");
    }
    if requested > local_max {
        eprintln!(
            "{spec}: warning: -o/--outs {requested}: number of outstanding reads is above max = {local_max}; \
             changing to that max value"
        );
    }
    Ok(if requested == 0 {
        local_max
    } else {
        requested.min(local_max)
    })
}

#[allow(clippy::too_many_arguments)]
fn banner<M: Measure>(
    spec: TestSpec,
    role: Role,
    m: &M,
    side: &Side,
    mtu: Mtu,
    outs: u32,
    local: &[QpInfo],
    remote: &[QpInfo],
) {
    let mut e = io::stderr().lock();
    let port = &side.port;
    let _ = writeln!(
        e,
        "{RESULT_LINE}\n                    {} ({})",
        spec.title(),
        role.name()
    );
    let _ = writeln!(e, " Device          : {}", port.ctx.name());
    m.banner(role, &mut e, outs);
    let _ = writeln!(e, " Mtu             : {}[B]", mtu.bytes());
    let _ = writeln!(e, " Link type       : {}", port.attr.link_layer);
    match port.gid_index {
        Some(i) => {
            let _ = writeln!(e, " GID index       : {i}");
        }
        None => {
            let _ = writeln!(e, " GID index       : none");
        }
    }
    let _ = writeln!(e, "{RESULT_LINE}");
    if spec.metric == Metric::Bw {
        for (label, qps) in [("local", local), ("remote", remote)] {
            for q in qps {
                let out = if spec.uses_outstanding_reads() {
                    format!(" OUT {outs:#04x}")
                } else {
                    String::new()
                };
                let _ = writeln!(
                    e,
                    " {label} address: LID {:#06x} QPN {:#08x} PSN {:#08x}{out} RKey {:#010x} VAddr {:#018x}",
                    q.lid, q.qpn, q.psn, q.rkey, q.addr
                );
                let _ = writeln!(e, " GID: {}", to_perftest_string(&q.gid));
            }
        }
    }
}

fn context<M: Measure>(
    spec: TestSpec,
    role: Role,
    m: &M,
    mtu: Mtu,
    local: &SideInfo,
    remote: &SideInfo,
    outs: u32,
) -> RunContext {
    let with_mtu = |s: &SideInfo| SideRecord {
        mtu: mtu.bytes(),
        ..SideRecord::from(s)
    };
    m.context(RunContext {
        kind: spec.name(),
        role: role.name(),
        config: M::record_of(m.config()),
        direction: None,
        mtu: mtu.bytes(),
        local: with_mtu(local),
        remote: with_mtu(remote),
        clock: None,
        reported: None,
        outstanding_reads: spec.uses_outstanding_reads().then_some(outs),
    })
}

fn report_size(out: &mut Output, ctx: &RunContext, shown: Shown) -> io::Result<()> {
    let with_clock;
    let context = match shown.clock {
        Some(c) => {
            with_clock = RunContext {
                clock: Some(c),
                ..ctx.clone()
            };
            &with_clock
        }
        None => ctx,
    };
    out.size(&SizeRecord {
        context,
        figures: shown.figures,
        peer_result: shown.peer_result,
        histogram: shown.histogram,
        data_check: shown.data_check,
    })
}

fn decode<T: DeserializeOwned>(
    v: Option<serde_json::Value>,
    whose: &str,
) -> anyhow::Result<Option<T>> {
    v.map(serde_json::from_value)
        .transpose()
        .with_context(|| format!("{whose} result"))
}

fn run_client<M: Measure>(spec: TestSpec, cli: &Cli, server: &str) -> anyhow::Result<u8> {
    let cfg = M::client_config(spec, cli)?;
    // Before the device: `--clock tsc` where there is none is bad input.
    let mut m = M::new(spec, cli, cfg, Role::Client)?;
    let port = open_port(
        cli.device.ib_dev.as_deref(),
        cli.device.ib_port,
        cli.conn.gid_index,
    )?;
    let mtu = port.mtu_for(M::mtu(m.config()))?;
    let local_side = port.side_info(sysfs_rate(&cli.sysfs_root, &port));
    let outs = resolve_outs(spec, M::outs(m.config()), local_side.max_rd_atom)?;
    M::set_outs(m.config_mut(), outs);
    m.on_port(&port);
    let mut side = m.create_side(port, Role::Client)?;
    let local_qps = side.qp_infos()?;
    let mut out = Output::open(cli.json.as_deref(), m.table(Role::Client))?;

    let mut ch = Channel::connect(server, cli.conn.port, cli.conn.timeout)?;
    let result = (|| -> anyhow::Result<u8> {
        let (remote_side, remote_qps, mtu) = client_hello(
            &mut ch,
            spec.name(),
            serde_json::to_value(m.config())?,
            &local_side,
            mtu,
            local_qps.clone(),
        )?;
        let outs = effective_outs(spec, outs, &local_side, &remote_side);
        side.connect(&remote_qps, mtu, cli.conn.qp_timeout, outs)?;
        banner(
            spec,
            Role::Client,
            &m,
            &side,
            mtu,
            outs,
            &local_qps,
            &remote_qps,
        );
        let ctx = context(spec, Role::Client, &m, mtu, &local_side, &remote_side, outs);
        out.begin()?;
        for (phase, &size) in M::sizes(m.config()).to_vec().iter().enumerate() {
            let phase = phase as u32;
            m.prepare(&side, size)?;
            client_barrier(&mut ch, phase)?;
            progress(&format!("{spec}: {size} B ..."));
            let mine = m.run_size(SizeCtx {
                side: &side,
                remote: &remote_qps,
                size,
                role: Role::Client,
                timeout: cli.conn.timeout,
                ch: &mut ch,
            });
            let mine = match mine {
                Ok(o) => o,
                Err(e) => {
                    ch.send_error(&format!("client failed: {e:#}"));
                    return Err(e);
                }
            };
            ch.send(&Message::Done {
                phase,
                result: mine.as_ref().map(serde_json::to_value).transpose()?,
            })?;
            let peer = match ch.recv("the end barrier")? {
                Message::Done { phase: p, result } if p == phase => result,
                other => return Err(expect_msg(other, "done")),
            };
            let peer = decode::<M::Outcome>(peer, "the server's")?;
            progress("");
            if let Some(shown) = m.shown(Role::Client, size, mine.as_ref(), peer)? {
                report_size(&mut out, &ctx, shown)?;
            }
        }
        out.end()?;
        m.after_table(&mut out)?;
        client_goodbye(&mut ch)?;
        let mut code = 0;
        for v in m.verdicts(&side) {
            out.verdict(&v)?;
            if !v.pass() {
                code = EXIT_VERDICT_FAIL;
            }
        }
        out.commit()?;
        Ok(code)
    })();
    if let Err(e) = &result {
        ch.send_error(&format!("{e:#}"));
    }
    result
}

fn run_server<M: Measure>(spec: TestSpec, parsed: &Parsed) -> anyhow::Result<u8> {
    let cli = &parsed.cli;
    if !parsed.test_flags_given.is_empty() {
        eprintln!(
            "{spec}: warning: test flags on the server are ignored ({}); the client's configuration is used",
            parsed.test_flags_given.join(", ")
        );
    }
    crate::session::run_server(
        spec.name(),
        &cli.conn,
        &cli.device,
        &cli.sysfs_root,
        |ch, port, local_side| serve::<M>(spec, cli, ch, port, local_side),
    )
}

fn serve<M: Measure>(
    spec: TestSpec,
    cli: &Cli,
    ch: &mut Channel,
    port: Port,
    local_side: &SideInfo,
) -> anyhow::Result<u8> {
    let Hello {
        config,
        side: client_side,
        qps: client_qps,
    } = server_hello(ch, spec.name(), M::validate)?;
    let mut m = match M::new(spec, cli, config, Role::Server) {
        Ok(m) => m,
        Err(e) => return Err(reject(ch, format!("server cannot run the test: {e:#}"))),
    };
    if let Err(reason) = m.check_offer(client_qps.len()) {
        return Err(reject(ch, reason));
    }
    let need = m.layout(Role::Server).memory();
    if need > cli.max_mem {
        return Err(reject(
            ch,
            format!(
                "the test needs {need} bytes of registered memory on the server, above its --max-mem {}",
                cli.max_mem
            ),
        ));
    }
    let mtu = server_mtu(ch, &port, M::mtu(m.config()), client_side.mtu)?;
    let outs = effective_outs(spec, M::outs(m.config()), &client_side, local_side);
    m.on_port(&port);
    let mut side = match m.create_side(port, Role::Server) {
        Ok(s) => s,
        Err(e) => return Err(reject(ch, format!("server cannot set up the test: {e:#}"))),
    };
    let local_qps = side.qp_infos()?;
    if let Err(e) = side.connect(&client_qps, mtu, cli.conn.qp_timeout, outs) {
        return Err(reject(ch, format!("server cannot connect its QPs: {e:#}")));
    }
    server_accept(ch, local_side, mtu, local_qps.clone())?;
    banner(
        spec,
        Role::Server,
        &m,
        &side,
        mtu,
        outs,
        &local_qps,
        &client_qps,
    );
    let ctx = context(spec, Role::Server, &m, mtu, local_side, &client_side, outs);
    let mut out = Output::open(cli.json.as_deref(), m.table(Role::Server))?;
    out.begin()?;
    let sizes = M::sizes(m.config()).to_vec();
    let mut phase = 0u32;
    while let Some(size) = server_next_phase(ch, phase, &sizes)? {
        m.prepare(&side, size)?;
        ch.send(&Message::Barrier { phase })?;
        let mine = m.run_size(SizeCtx {
            side: &side,
            remote: &client_qps,
            size,
            role: Role::Server,
            timeout: cli.conn.timeout,
            ch,
        })?;
        let peer = match ch.recv("the client's result")? {
            Message::Done { phase: p, result } if p == phase => result,
            other => return Err(expect_msg(other, "done")),
        };
        let peer = decode::<M::Outcome>(peer, "the client's")?;
        let mine_json = mine.as_ref().map(serde_json::to_value).transpose()?;
        let shown = m.shown(Role::Server, size, mine.as_ref(), peer)?;
        ch.send(&Message::Done {
            phase,
            result: mine_json,
        })?;
        if let Some(shown) = shown {
            report_size(&mut out, &ctx, shown)?;
        }
        phase += 1;
    }
    out.end()?;
    server_all_phases_run(phase, &sizes)?;
    out.commit()?;
    Ok(0)
}

// --- bandwidth ---------------------------------------------------------------

/// `--expect-rate`: the port's rate and error counters, read before and
/// after the run.
#[derive(Debug)]
struct LinkWatch {
    expect: ExpectRate,
    rate: Option<LinkRate>,
    before: CounterSnapshot,
    sysfs_root: std::path::PathBuf,
    min_efficiency: f64,
}

/// The bandwidth tests (`write_bw`, `read_bw`).
pub struct BwMeasure {
    spec: TestSpec,
    cfg: BwConfig,
    unit: Unit,
    cpu_column: bool,
    expect: Option<ExpectRate>,
    sysfs_root: std::path::PathBuf,
    min_efficiency: f64,
    watch: Option<LinkWatch>,
    best_gbps: f64,
    check: Option<DataCheck>,
}

impl BwMeasure {
    fn initiates(&self, role: Role) -> bool {
        role == Role::Client || self.cfg.bidirectional
    }

    /// The data check of a read: every ring slot the size's reads landed
    /// in holds the peer's pattern.
    fn check_reads(&self, side: &Side, size: u64, per_qp: u64) -> anyhow::Result<DataCheck> {
        let (stride, slots) = if size > RING_BYTES / 2 {
            (0, 1)
        } else {
            let stride = size.div_ceil(CACHE_LINE) * CACHE_LINE;
            (stride, RING_BYTES / stride)
        };
        let touched = slots.min(per_qp.max(1));
        let mut bytes_checked = 0;
        for q in 0..side.qps.len() {
            bytes_checked +=
                side.check_pattern(q, (0..touched).map(|i| i * stride..i * stride + size))?;
        }
        Ok(DataCheck { bytes_checked })
    }
}

impl std::fmt::Debug for BwMeasure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BwMeasure")
            .field("spec", &self.spec)
            .finish()
    }
}

impl Measure for BwMeasure {
    type Config = BwConfig;
    type Outcome = BwResult;

    fn client_config(spec: TestSpec, cli: &Cli) -> Result<BwConfig, UsageError> {
        cli.bw_config(spec)
    }
    fn validate(cfg: &BwConfig) -> Result<(), ConfigError> {
        cfg.validate()
    }
    fn record_of(cfg: &BwConfig) -> ConfigRecord {
        ConfigRecord::Bw(cfg.clone())
    }
    fn sizes(cfg: &BwConfig) -> &[u64] {
        &cfg.sizes
    }
    fn mtu(cfg: &BwConfig) -> Option<u32> {
        cfg.mtu
    }
    fn outs(cfg: &BwConfig) -> u32 {
        cfg.outs
    }
    fn set_outs(cfg: &mut BwConfig, outs: u32) {
        cfg.outs = outs;
    }

    fn new(spec: TestSpec, cli: &Cli, cfg: BwConfig, _role: Role) -> anyhow::Result<Self> {
        Ok(Self {
            spec,
            cfg,
            unit: if cli.report_gbits {
                Unit::Gbps
            } else {
                Unit::MibPerSec
            },
            cpu_column: cli.cpu_util,
            expect: cli.expect_rate,
            sysfs_root: cli.sysfs_root.clone(),
            min_efficiency: cli.min_efficiency,
            watch: None,
            best_gbps: 0.0,
            check: None,
        })
    }

    fn config(&self) -> &BwConfig {
        &self.cfg
    }
    fn config_mut(&mut self) -> &mut BwConfig {
        &mut self.cfg
    }

    fn check_offer(&self, qps: usize) -> Result<(), String> {
        if qps != self.cfg.qps as usize {
            return Err(format!(
                "the configuration has {} QPs, the client offers {qps}",
                self.cfg.qps
            ));
        }
        Ok(())
    }

    fn layout(&self, role: Role) -> Layout {
        Layout {
            qps: self.cfg.qps,
            threads: self.cfg.threads,
            tx_depth: self.cfg.tx_depth,
            inline_size: self.cfg.inline_size,
            area: self.cfg.buffer_per_qp(),
            initiates: self.initiates(role),
            access: self.spec.access(),
        }
    }

    fn on_port(&mut self, port: &Port) {
        if let Some(expect) = self.expect {
            let name = port.ctx.name();
            self.watch = Some(LinkWatch {
                expect,
                rate: crate::sysfs::read_rate(&self.sysfs_root, name, port.port).ok(),
                before: crate::sysfs::snapshot_error_counters(&self.sysfs_root, name, port.port),
                sysfs_root: self.sysfs_root.clone(),
                min_efficiency: self.min_efficiency,
            });
        }
    }

    fn banner(&self, role: Role, e: &mut dyn Write, outs: u32) {
        let c = &self.cfg;
        let _ = writeln!(
            e,
            " Number of qps   : {}\t\tThreads        : {}",
            c.qps, c.threads
        );
        let _ = writeln!(e, " Connection type : RC\t\tUsing SRQ      : OFF");
        if self.initiates(role) {
            let _ = writeln!(e, " TX depth        : {}", c.tx_depth);
        }
        let _ = writeln!(e, " CQ Moderation   : {}", c.cq_mod);
        let _ = writeln!(e, " Post list       : {}", c.post_list);
        if self.spec.uses_outstanding_reads() {
            let _ = writeln!(e, " Outstand reads  : {outs}");
        } else {
            let _ = writeln!(e, " Max inline data : {}[B]", c.inline_size);
        }
        let _ = writeln!(
            e,
            " Bidirectional   : {}",
            if c.bidirectional { "ON" } else { "OFF" }
        );
    }

    fn context(&self, ctx: RunContext) -> RunContext {
        RunContext {
            direction: Some(if self.cfg.bidirectional {
                "bidirectional"
            } else {
                "unidirectional"
            }),
            ..ctx
        }
    }

    fn table(&self, _role: Role) -> Option<Box<dyn Report>> {
        Some(Box::new(Table::new(
            io::stdout(),
            self.unit,
            self.cpu_column,
        )))
    }

    fn prepare(&mut self, side: &Side, _size: u64) -> anyhow::Result<()> {
        if self.spec.verb == Verb::Read && side.layout().initiates {
            side.zero_working()?;
        }
        Ok(())
    }

    fn run_size(&mut self, ctx: SizeCtx<'_>) -> anyhow::Result<Option<BwResult>> {
        if !self.initiates(ctx.role) {
            return Ok(None);
        }
        let SizeCtx {
            side,
            remote,
            size,
            timeout,
            ch,
            ..
        } = ctx;
        let cfg = &self.cfg;
        let measured = match self.spec.verb {
            Verb::Write => {
                ch.with_heartbeat(|| bw_loop::measure(WriteOp, side, cfg, size, remote, timeout))?
            }
            Verb::Read => {
                ch.with_heartbeat(|| bw_loop::measure(ReadOp, side, cfg, size, remote, timeout))?
            }
            _ => anyhow::bail!(
                "{} has no bandwidth loop in this build",
                self.spec.op_name()
            ),
        }?;
        if self.spec.verb == Verb::Read {
            let per_qp = measured.messages / u64::from(cfg.qps).max(1);
            self.check = Some(self.check_reads(side, size, per_qp)?);
        }
        Ok(Some(BwResult::from_measurement(&measured)))
    }

    fn shown(
        &mut self,
        role: Role,
        _size: u64,
        mine: Option<&BwResult>,
        peer: Option<BwResult>,
    ) -> anyhow::Result<Option<Shown>> {
        let (figures, peer_result) = match role {
            Role::Client => {
                let mine = *mine.context("the client measured nothing")?;
                let peer = peer.filter(|_| self.cfg.bidirectional);
                (peer.as_ref().map_or(mine, |p| mine.combined(p)), peer)
            }
            Role::Server => {
                let client = peer.context("the client sent no result")?;
                (mine.map_or(client, |m| m.combined(&client)), Some(client))
            }
        };
        self.best_gbps = self.best_gbps.max(figures.bw_avg_gbps);
        Ok(Some(Shown {
            figures: Figures::Bw(figures),
            peer_result,
            histogram: None,
            data_check: self.check.take(),
            clock: None,
        }))
    }

    fn verdicts(&mut self, side: &Side) -> Vec<VerdictRecord> {
        let Some(w) = self.watch.take() else {
            return Vec::new();
        };
        let port = &side.port;
        let after =
            crate::sysfs::snapshot_error_counters(&w.sysfs_root, port.ctx.name(), port.port);
        vec![VerdictRecord::Link(link::evaluate(&VerdictInput {
            expect: w.expect,
            negotiated: w.rate,
            min_efficiency: w.min_efficiency,
            measured_gbps: self.best_gbps,
            directions: if self.cfg.bidirectional { 2 } else { 1 },
            rises: link::rises(&w.before, &after),
        }))]
    }
}

// --- latency -------------------------------------------------------------------

/// What a latency side tells its peer after a size.
#[derive(Debug, Clone, Copy, Serialize, serde::Deserialize)]
pub struct LatOutcome {
    /// Operations (round trips) done.
    pub round_trips: u64,
}

/// The latency tests (`write_lat`, `read_lat`).
pub struct LatMeasure {
    spec: TestSpec,
    cfg: LatConfig,
    clock: Clock,
    rec: LatRecorder,
    explicit_inline: bool,
    report_histogram: bool,
    json_histogram: bool,
    max_latency: Option<f64>,
    percentile: engine::lat::Percentile,
    dumps: Vec<(u64, Vec<u64>)>,
    verdicts: Vec<VerdictRecord>,
    rate: TickRate,
    check: Option<DataCheck>,
}

impl std::fmt::Debug for LatMeasure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LatMeasure")
            .field("spec", &self.spec)
            .finish()
    }
}

impl LatMeasure {
    fn op(&self) -> LatOp {
        match self.spec.verb {
            Verb::Read => LatOp::Read,
            _ => LatOp::WritePingPong,
        }
    }

    fn keep_samples(&self) -> usize {
        match self.cfg.duration {
            None => usize::try_from(self.cfg.iters)
                .unwrap_or(usize::MAX)
                .min(1 << 24),
            Some(_) => 1 << 20,
        }
    }
}

impl Measure for LatMeasure {
    type Config = LatConfig;
    type Outcome = LatOutcome;

    fn client_config(spec: TestSpec, cli: &Cli) -> Result<LatConfig, UsageError> {
        cli.lat_config(spec)
    }
    fn validate(cfg: &LatConfig) -> Result<(), ConfigError> {
        cfg.validate()
    }
    fn record_of(cfg: &LatConfig) -> ConfigRecord {
        ConfigRecord::Lat(cfg.clone())
    }
    fn sizes(cfg: &LatConfig) -> &[u64] {
        &cfg.sizes
    }
    fn mtu(cfg: &LatConfig) -> Option<u32> {
        cfg.mtu
    }
    fn outs(cfg: &LatConfig) -> u32 {
        cfg.outs
    }
    fn set_outs(cfg: &mut LatConfig, outs: u32) {
        cfg.outs = outs;
    }

    fn new(spec: TestSpec, cli: &Cli, cfg: LatConfig, role: Role) -> anyhow::Result<Self> {
        let clock = match role {
            Role::Client => Clock::new(cli.clock)?,
            // The server records nothing: the monotonic clock only bounds
            // its waits.
            Role::Server => Clock::for_server(),
        };
        let mut m = Self {
            spec,
            cfg,
            clock,
            rec: LatRecorder::new(0),
            explicit_inline: role == Role::Client && cli.inline_size.is_some(),
            report_histogram: cli.report_histogram,
            json_histogram: cli.json_histogram,
            max_latency: cli.max_latency,
            percentile: cli.percentile,
            dumps: Vec::new(),
            verdicts: Vec::new(),
            rate: TickRate::NANOSECONDS,
            check: None,
        };
        if role == Role::Client {
            // Allocated (and its pages touched) once; emptied per size.
            m.rec = LatRecorder::new(m.keep_samples());
        }
        Ok(m)
    }

    fn config(&self) -> &LatConfig {
        &self.cfg
    }
    fn config_mut(&mut self) -> &mut LatConfig {
        &mut self.cfg
    }

    fn check_offer(&self, qps: usize) -> Result<(), String> {
        if qps != 1 {
            return Err(format!(
                "a latency test uses one QP, the client offers {qps}"
            ));
        }
        Ok(())
    }

    fn layout(&self, role: Role) -> Layout {
        Layout {
            qps: 1,
            threads: 1,
            tx_depth: 1,
            inline_size: self.cfg.inline_size,
            area: self.cfg.buffer(),
            initiates: self.op() == LatOp::WritePingPong || role == Role::Client,
            access: self.spec.access(),
        }
    }

    /// When `-I` was not given and the device refuses the default inline
    /// size, falls back to no inline (as perftest does for devices it does
    /// not know), with a warning.
    fn create_side(&mut self, port: Port, role: Role) -> anyhow::Result<Side> {
        if self.explicit_inline || self.cfg.inline_size == 0 {
            return Side::create(port, &self.layout(role));
        }
        let retry = port.clone();
        match Side::create(port, &self.layout(role)) {
            Ok(s) => Ok(s),
            Err(e) if e.chain().any(|c| c.downcast_ref::<UsageError>().is_some()) => {
                eprintln!(
                    "{}: warning: {} refused {} bytes of inline data; sending without inline",
                    self.spec,
                    retry.ctx.name(),
                    self.cfg.inline_size
                );
                self.cfg.inline_size = 0;
                Side::create(retry, &self.layout(role))
            }
            Err(e) => Err(e),
        }
    }

    fn banner(&self, role: Role, e: &mut dyn Write, outs: u32) {
        let _ = writeln!(e, " Connection type : RC\t\tUsing SRQ      : OFF");
        if self.spec.uses_outstanding_reads() {
            let _ = writeln!(e, " Outstand reads  : {outs}");
        } else {
            let _ = writeln!(e, " Max inline data : {}[B]", self.cfg.inline_size);
        }
        let clock = match role {
            Role::Client => self.clock.describe(),
            Role::Server => "not used (the client measures)".to_owned(),
        };
        let _ = writeln!(e, " Clock           : {clock}");
    }

    fn context(&self, ctx: RunContext) -> RunContext {
        RunContext {
            reported: Some(if self.spec.rtt_factor() == 1 {
                "full round trip (RTT), microseconds"
            } else {
                "half round trip (RTT/2), microseconds"
            }),
            ..ctx
        }
    }

    fn table(&self, role: Role) -> Option<Box<dyn Report>> {
        (role == Role::Client).then(|| Box::new(LatTable::new(io::stdout())) as Box<dyn Report>)
    }

    fn prepare(&mut self, side: &Side, size: u64) -> anyhow::Result<()> {
        match self.op() {
            // Zero before the barrier: the peer writes as soon as it has
            // the barrier's answer.
            LatOp::WritePingPong => side.zero(0, size),
            LatOp::Read if side.layout().initiates => side.zero_working(),
            LatOp::Read => Ok(()),
        }
    }

    fn run_size(&mut self, ctx: SizeCtx<'_>) -> anyhow::Result<Option<LatOutcome>> {
        let op = self.op();
        let SizeCtx {
            side,
            remote,
            size,
            role,
            timeout,
            ch,
        } = ctx;
        if op == LatOp::Read && role == Role::Server {
            return Ok(None);
        }
        let until = match (self.cfg.duration, role) {
            (None, _) => Until::Iterations(self.cfg.iters),
            (Some(d), Role::Client) => Until::Duration {
                total: Duration::try_from_secs_f64(d.seconds).context("-D/--duration")?,
                margin: Duration::try_from_secs_f64(d.margin).context("-f/--margin")?,
            },
            (Some(_), Role::Server) => Until::PeerSaysStop,
        };
        self.rec.reset();
        let inline = size <= u64::from(self.cfg.inline_size);
        let lat_role = match role {
            Role::Client => LatRole::Client,
            Role::Server => LatRole::Server,
        };
        let (clock, rec) = (&self.clock, &mut self.rec);
        let run = |ch: Option<&Channel>, rec: &mut LatRecorder| {
            SizeRun {
                op,
                side,
                remote: &remote[0],
                size,
                inline,
                role: lat_role,
                until,
                timeout,
                ch,
                rec,
            }
            .run(clock)
        };
        let (count, rate) = match op {
            // The write ping-pong keeps the peer busy: no heartbeat thread
            // beside the measured loop.
            LatOp::WritePingPong => run(Some(&*ch), rec)?,
            // The reader's peer is passive, waiting on the control channel.
            LatOp::Read => ch.with_heartbeat(|| run(None, rec))??,
        };
        self.rate = rate;
        if op == LatOp::Read {
            let bytes_checked = side.check_pattern(0, std::iter::once(0..size))?;
            self.check = Some(DataCheck { bytes_checked });
        }
        Ok(Some(LatOutcome { round_trips: count }))
    }

    fn shown(
        &mut self,
        role: Role,
        size: u64,
        mine: Option<&LatOutcome>,
        peer: Option<LatOutcome>,
    ) -> anyhow::Result<Option<Shown>> {
        if role == Role::Server {
            if let (Some(m), Some(p)) = (mine, peer)
                && m.round_trips != p.round_trips
            {
                anyhow::bail!(
                    "client counted {} round trips, the server answered {}",
                    p.round_trips,
                    m.round_trips
                );
            }
            match (mine, peer) {
                (Some(m), _) => eprintln!(
                    "{}: {size} B: answered {} round trips",
                    self.spec, m.round_trips
                ),
                (None, Some(p)) => eprintln!(
                    "{}: {size} B: the client did {} reads",
                    self.spec, p.round_trips
                ),
                (None, None) => {}
            }
            return Ok(None);
        }
        self.clock.check_drift(self.rate);
        let stats = self.rec.stats_per(size, self.spec.rtt_factor());
        if self.report_histogram {
            self.dumps.push((size, self.rec.samples().to_vec()));
        }
        if let Some(max) = self.max_latency {
            self.verdicts.push(VerdictRecord::Latency(lat_verdict(
                &stats,
                self.percentile,
                max,
            )));
        }
        Ok(Some(Shown {
            figures: Figures::Lat(stats),
            peer_result: None,
            histogram: self.json_histogram.then(|| self.rec.histogram_base64()),
            data_check: self.check.take(),
            clock: Some(self.clock.record(self.rate)),
        }))
    }

    fn after_table(&mut self, out: &mut Output) -> io::Result<()> {
        let rtt_factor = self.spec.rtt_factor();
        let dumps = std::mem::take(&mut self.dumps);
        out.dump(|w| {
            for (bytes, samples) in &dumps {
                dump_samples(w, *bytes, samples, rtt_factor)?;
            }
            Ok(())
        })
    }

    fn verdicts(&mut self, _side: &Side) -> Vec<VerdictRecord> {
        std::mem::take(&mut self.verdicts)
    }
}
