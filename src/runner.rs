//! The one session runner: every test, both roles. A binary is a
//! [`TestSpec`]; [`main`] parses its flags ([`crate::args`]) into
//! [`RunOptions`] once, and [`run_pair`] runs them: the client or the
//! server side of a session, driving the session's state machines
//! ([`engine::proto::session`]) over the control channel — hello/accept, one
//! phase per size (prepare, barrier, measure, done exchange, report),
//! goodbye, verdicts, the commit of the `--json` file — and returning the
//! typed results ([`RunSummary`]). What differs between tests is behind
//! [`Measure`]: the bandwidth tests ([`BwMeasure`]) and the latency tests
//! ([`LatMeasure`]), each running the loops of [`crate::measure`] for the
//! spec's verb.

use std::io::{self, Write};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context as _;
use engine::bench::config::TestConfig;
use engine::bench::plan::Role;
use engine::bench::spec::{Metric, TestSpec};
use engine::format::banner::{BannerInfo, address_line, gid_line};
use engine::proto::session::{
    self, ClientSession, Estimate, Next, NextPhase, ServerSession, SessionError, Walk,
};
use engine::proto::wire::{Message, QpConnection, QpInfo, SideInfo};
use engine::results::bw::BwResult;
use engine::results::record::{
    DataCheck, Figures, InterruptedRecord, QpPathRecord, RunContext, SideRecord, SizeRecord,
};
use engine::results::verdict::VerdictRecord;
use verbs::Mtu;

use crate::exit::UsageError;
use crate::measure::bw::BwMeasure;
use crate::measure::lat::LatMeasure;
use crate::measure::{Measure, Shown, SizeCtx};
use crate::oob::{Channel, Listener};
use crate::options::{FromConfiguration, RoleOptions, RunOptions};
use crate::output::show_progress;
use crate::output::{CounterLines, Output, PerftestJsonFile, PromFile};
use crate::setup::{Port, open_port};
use crate::side::Side;
use crate::stop::{self, Signal};

/// The `main` of every test binary: the only code that sees its command
/// line.
pub fn main(spec: TestSpec) -> ExitCode {
    let result = crate::args::parse(spec)
        .map_err(anyhow::Error::new)
        .and_then(|parsed| {
            let cli = &parsed.cli;
            // --run_infinitely: Ctrl-C is how such a run ends, normally.
            if cli.run_infinitely && cli.conn.server.is_some() {
                stop::install_finishing()
            } else {
                stop::install()
            }
            .context("installing the SIGINT/SIGTERM handlers")?;
            if cli.list_devices {
                crate::inventory::run_list(
                    (cli.device.ib_dev.as_deref(), cli.device.ib_port),
                    cli.json.as_deref(),
                )?;
                return Ok(0);
            }
            if !spec.is_implemented() {
                return Err(UsageError(format!("{spec} is not implemented in this build")).into());
            }
            let built = parsed.run_options(spec)?;
            place(&built.options)?;
            for line in &built.said {
                eprintln!("{line}");
            }
            Ok(run_pair(&built.options)?.exit_code)
        });
    crate::exit::finish(spec.binary(), result)
}

/// Before any memory or thread: binds the process as perftest does, on
/// the NIC's NUMA node (a process-wide choice: `main`'s, never a library
/// call's).
fn place(opts: &RunOptions) -> anyhow::Result<()> {
    let device = match opts.device().name {
        Some(d) => Some(d),
        None => verbs::devices()
            .ok()
            .and_then(|d| d.into_iter().next())
            .map(|d| d.name),
    };
    if let Some(line) =
        crate::placement::apply(&opts.local.placement, &opts.local.sysfs, device.as_deref())?
        && opts.local.banner
    {
        eprintln!("{line}");
    }
    Ok(())
}

/// What one size showed, typed.
#[derive(Debug, Clone, PartialEq)]
pub struct SizeResult {
    /// Message size, bytes.
    pub size: u64,
    /// This side's figures (a bidirectional run's: both directions).
    pub figures: Figures,
    /// The peer's own figures, when reported.
    pub peer_result: Option<BwResult>,
    /// The data check, when the test has one.
    pub data_check: Option<DataCheck>,
}

/// What a run gives its caller besides the reports it wrote.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunSummary {
    /// The exit code of the run: 0, or the verdicts' (`EXIT_VERDICT_FAIL`,
    /// perftest's 1 for a limit), or 130/143 when a signal stopped it.
    pub exit_code: u8,
    /// Every size shown (a persistent server: its last session's).
    pub sizes: Vec<SizeResult>,
    /// The verdicts (the client's).
    pub verdicts: Vec<VerdictRecord>,
    /// The signal that stopped the run, if one did.
    pub interrupted: Option<Signal>,
}

/// Runs one side of a pair as `opts` say: a client connects to its
/// server and runs the test; a server waits for clients (one, or one
/// after another with `--persistent`) and runs what each asks. Writes the
/// reports the output plan asks for and returns the typed results.
///
/// # Errors
/// Usage errors (exit 2) and run failures (exit 1); a FAIL verdict is an
/// `Ok` summary with its exit code.
pub fn run_pair(opts: &RunOptions) -> anyhow::Result<RunSummary> {
    let spec = opts.spec;
    match (&opts.role, spec.metric) {
        (RoleOptions::Client { server, .. }, Metric::Bw) => run_client::<BwMeasure>(opts, server),
        (RoleOptions::Client { server, .. }, Metric::Lat) => run_client::<LatMeasure>(opts, server),
        (RoleOptions::Server, Metric::Bw) => run_server::<BwMeasure>(opts),
        (RoleOptions::Server, Metric::Lat) => run_server::<LatMeasure>(opts),
    }
}

/// A session error from `ch`'s peer, as the user reads it.
fn session_error(ch: &Channel, e: SessionError) -> anyhow::Error {
    match e {
        SessionError::Busy(reason) => anyhow::anyhow!("server {} is busy: {reason}", ch.peer()),
        other => anyhow::Error::new(other),
    }
}

/// How this side's QPs reach the peer's.
#[derive(Debug, Clone, Copy)]
enum QpLink {
    /// By the numbers exchanged in the hello and the accept.
    Exchange,
    /// Through rdma_cm: the client reaches the server's listener at its
    /// address; the server (`None`) takes the connection.
    Cm(Option<std::net::SocketAddr>),
}

/// Connects this side's QPs as `agreed`, while the peer, waiting on the
/// channel for our next frame, gets heartbeats; then shows the banner
/// and builds the run's context (of `spec`: an atomic server runs its
/// client's atomic). Under rdma_cm the QPs were made at
/// connection: their numbers are read again first.
fn connect_qps<M: Measure>(
    ch: &mut Channel,
    side: &mut Side,
    m: &M,
    link: QpLink,
    agreed: &mut Agreed,
    spec: TestSpec,
    opts: &RunOptions,
) -> anyhow::Result<RunContext> {
    let conn = &opts.connection;
    let (mtu, outs) = (agreed.mtu, agreed.outs);
    let remote = &agreed.remote_qps;
    let connected = ch.with_heartbeat(|watch| match link {
        QpLink::Cm(server) => side.connect_cm(remote, server, outs, conn.timeout, watch),
        QpLink::Exchange => side.connect(
            remote,
            mtu,
            conn.qp_timeout,
            outs,
            m.config().path(),
            conn.pkey_index,
        ),
    })?;
    match agreed.role {
        Role::Server => connected.context("server cannot connect its QPs")?,
        Role::Client => connected?,
    }
    if matches!(link, QpLink::Cm(_)) {
        agreed.local_qps = side.qp_infos()?;
    }
    if opts.local.banner {
        banner(spec, m, side, agreed);
    }
    context(spec, opts, m, side, agreed)
}

/// What both sides agreed on, once connected.
#[derive(Debug, Clone)]
struct Agreed {
    /// This side.
    role: Role,
    /// The path MTU.
    mtu: Mtu,
    /// Outstanding reads per QP (0: none).
    outs: u32,
    /// This side's description, as sent.
    local_side: SideInfo,
    /// The peer's description.
    remote_side: SideInfo,
    /// This side's QPs.
    local_qps: Vec<QpInfo>,
    /// The peer's QPs.
    remote_qps: Vec<QpInfo>,
}

/// perftest's banner and address lines, on stderr (stdout carries results
/// only).
fn banner<M: Measure>(spec: TestSpec, m: &M, side: &Side, agreed: &Agreed) {
    let port = &side.port;
    let (role, mtu, outs) = (agreed.role, agreed.mtu, agreed.outs);
    let mut info = BannerInfo {
        title: spec.title(),
        bandwidth: spec.metric == Metric::Bw,
        device: port.ctx.name().to_owned(),
        qps: 1,
        tx_depth: None,
        post_list: 1,
        wr_api: side.post_path() == verbs::PostPath::Extended,
        rx_depth: None,
        cq_mod: 1,
        poll_batch: 1,
        bidirectional: false,
        mtu: mtu.bytes(),
        link_layer: port.attr.link_layer.to_string(),
        gid_index: port.gid_index,
        outs: spec.uses_outstanding_reads().then_some(outs),
        inline_size: 0,
        rdma_cm: port.cm.is_some(),
        iwarp: port.ctx.transport() == verbs::Transport::Iwarp,
        extra: vec![format!(" Role            : {}", role.name())],
    };
    m.banner(role, &mut info);
    let mut text = info.render();
    let read = spec.uses_outstanding_reads().then_some(outs);
    for (label, qps) in [("local", &agreed.local_qps), ("remote", &agreed.remote_qps)] {
        for q in qps {
            text.push_str(&address_line(
                label, q.lid, q.qpn, q.psn, read, q.rkey, q.addr,
            ));
            text.push('\n');
            text.push_str(&gid_line(&q.gid));
            text.push('\n');
        }
    }
    let _ = io::stderr().lock().write_all(text.as_bytes());
}

/// The context of this side's reports.
fn context<M: Measure>(
    spec: TestSpec,
    opts: &RunOptions,
    m: &M,
    side: &Side,
    agreed: &Agreed,
) -> anyhow::Result<RunContext> {
    let mtu = agreed.mtu.bytes();
    let with_mtu = |s: &SideInfo| SideRecord {
        mtu,
        ..SideRecord::from(s)
    };
    Ok(m.context(RunContext {
        kind: spec.name(),
        role: agreed.role.name(),
        config: m.config().record(),
        direction: None,
        measured_on: None,
        mtu,
        local: with_mtu(&agreed.local_side),
        remote: with_mtu(&agreed.remote_side),
        clock: None,
        reported: None,
        outstanding_reads: spec.uses_outstanding_reads().then_some(agreed.outs),
        qp_paths: qp_paths(opts, m.config(), side)?,
        rtt_factor: 1,
        rdma_cm: side.port.cm.is_some(),
        iwarp: side.port.ctx.transport() == verbs::Transport::Iwarp,
    }))
}

/// Each QP's path read back from the device, when a path option was
/// given (else none: the reports omit it); the first QP's on stderr.
fn qp_paths<C: TestConfig>(
    opts: &RunOptions,
    cfg: &C,
    side: &Side,
) -> anyhow::Result<Vec<QpPathRecord>> {
    if *cfg.path() == engine::bench::config::PathConfig::default()
        && opts.connection.pkey_index == 0
    {
        return Ok(Vec::new());
    }
    let paths = side.paths()?;
    let records: Vec<QpPathRecord> = paths
        .iter()
        .zip(&side.qps)
        .map(|(p, q)| QpPathRecord {
            qpn: q.qp().qpn(),
            sl: p.service_level,
            traffic_class: p.global.then_some(p.traffic_class),
            flow_label: p.global.then_some(p.flow_label),
            pkey_index: p.pkey_index,
        })
        .collect();
    if let Some(r) = records.first() {
        let grh = match (r.traffic_class, r.flow_label) {
            (Some(tc), Some(fl)) => format!("traffic class {tc}, flow label {fl}"),
            _ => "no GRH".to_owned(),
        };
        eprintln!(
            " QP path         : SL {}, {grh}, P_Key index {} (read back from QPN {:#x})",
            r.sl, r.pkey_index, r.qpn
        );
    }
    Ok(records)
}

/// This side's reports: the table (or `--output`'s figure) on stdout,
/// `--json`, perftest's `--out_json` file, `--prom`, `-W`.
fn open_output<M: Measure>(
    spec: TestSpec,
    opts: &RunOptions,
    m: &M,
    role: Role,
    port: &Port,
) -> anyhow::Result<Output> {
    let plan = &opts.output;
    let table = if plan.stdout_table {
        m.table(role)
    } else {
        None
    };
    let mut out = Output::open(plan.json.as_deref(), table)?;
    // The writers are handed this port's readings, not the sysfs.
    let view = opts.local.sysfs.port(port.ctx.name(), port.port);
    if let Some(list) = &plan.report_counters
        && plan.json.as_deref() != Some("-")
        && plan.stdout_table
    {
        let v = view.clone();
        out.add(Box::new(CounterLines::open(list, move |name| {
            v.counter(name)
        })?));
    }
    if let Some(path) = &plan.prom {
        out.add(Box::new(PromFile::create(path.clone(), move || {
            view.state()
        })?));
    }
    if let Some(path) = &plan.out_json {
        out.add(Box::new(PerftestJsonFile::create(
            path.clone(),
            spec.title(),
            m.table_style(),
            plan.figure,
        )?));
    }
    Ok(out)
}

/// Reports one size and keeps its typed result.
fn report_size(
    out: &mut Output,
    ctx: &RunContext,
    size: u64,
    shown: Shown,
    results: &mut Vec<SizeResult>,
) -> io::Result<()> {
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
        figures: shown.figures.clone(),
        peer_result: shown.peer_result,
        histogram: shown.histogram,
        data_check: shown.data_check,
    })?;
    results.push(SizeResult {
        size,
        figures: shown.figures,
        peer_result: shown.peer_result,
        data_check: shown.data_check,
    });
    Ok(())
}

/// A run stopped by `sig`: closes the table, writes the interrupted record
/// after the completed sizes, commits the `--json` file and says so.
fn report_interrupted(
    spec: TestSpec,
    role: Role,
    out: &mut Output,
    sig: Signal,
    (completed, in_progress, total): (usize, Option<u64>, usize),
) -> anyhow::Result<()> {
    show_progress("");
    out.interrupted(&InterruptedRecord {
        by: sig.name().to_owned(),
        role: role.name(),
        sizes_completed: completed,
        sizes_total: total,
        size_in_progress: in_progress,
    })?;
    out.commit()?;
    eprintln!(
        "{spec}: interrupted by {sig} after {completed} of {total} sizes; the report holds the completed ones"
    );
    Ok(())
}

/// The client: builds its side, connects to `server` and runs the test.
fn run_client<M: Measure>(opts: &RunOptions, server: &str) -> anyhow::Result<RunSummary>
where
    M::Config: FromConfiguration,
{
    let spec = opts.spec;
    let RoleOptions::Client { config, .. } = &opts.role else {
        anyhow::bail!("not a client");
    };
    let cfg = M::Config::from_configuration(config)
        .ok_or_else(|| anyhow::anyhow!("{spec}: the configuration is not a {spec} test's"))?;
    // Before the device: `--clock tsc` where there is none is bad input.
    let mut m = M::new(spec, opts, cfg, Role::Client)?;
    let dev = opts.device();
    let conn = &opts.connection;
    let (port, connection) = if conn.rdma_cm {
        let port = crate::setup::open_cm_active(server, conn.port, &dev, conn.timeout)?;
        (port, QpConnection::RdmaCm)
    } else {
        let port = open_port(dev.name.as_deref(), dev.port, dev.gid_index)?;
        (port, QpConnection::QpExchange)
    };
    let mtu = port.mtu_for(m.config().mtu())?;
    let local_side = port.side_info(opts.local.sysfs.rate_text(port.ctx.name(), port.port));
    let (outs, warning) = session::resolve_outs(
        spec.uses_outstanding_reads(),
        m.config().outs(),
        local_side.max_rd_atom,
    )
    .map_err(|e| anyhow::anyhow!(e))?;
    if let Some(w) = warning {
        eprintln!("{spec}: {w}");
    }
    m.config_mut().set_outs(outs);
    port.refuse_unsupported(spec, m.immediate(Role::Client))?;
    m.on_port(&port);
    let mut side = m.create_side(port, Role::Client)?;
    let local_qps = side.qp_infos()?;
    let mut out = open_output(spec, opts, &m, Role::Client, &side.port)?;
    let mut ch = Channel::connect(server, conn.port, conn.timeout, conn.retry_refused)?;
    let mut session = ClientSession::new(Walk::of(m.config(), local_qps.len(), conn.timeout))
        .connecting(connection);
    let mut summary = RunSummary::default();
    let result = (|| -> anyhow::Result<u8> {
        stop::pause_point("hello");
        let (hello, bound) = session.hello(
            Instant::now(),
            spec.name(),
            m.config(),
            &local_side,
            mtu.bytes(),
            local_qps.clone(),
        )?;
        ch.send(&hello)?;
        let answer = ch.recv_within("the server's answer", bound)?;
        let accepted = session
            .on_answer(answer)
            .map_err(|e| session_error(&ch, e))?;
        let mtu = Mtu::from_bytes(accepted.mtu).unwrap_or(mtu);
        let outs = session::effective_outs(
            spec.uses_outstanding_reads(),
            outs,
            &local_side,
            &accepted.side,
        );
        let mut agreed = Agreed {
            role: Role::Client,
            mtu,
            outs,
            local_side: local_side.clone(),
            remote_side: accepted.side,
            local_qps: local_qps.clone(),
            remote_qps: accepted.qps,
        };
        // The server's rdma_cm listener is on the address we reached
        // (the peer's scope kept, for a link-local IPv6 address).
        let cm_server = accepted.cm_port.map(|p| {
            let mut at = ch.peer();
            at.set_port(p);
            at
        });
        let link = cm_server.map_or(QpLink::Exchange, |at| QpLink::Cm(Some(at)));
        let ctx = connect_qps(&mut ch, &mut side, &m, link, &mut agreed, spec, opts)?;
        out.begin()?;
        loop {
            let finish = stop::finish_requested();
            if finish.is_none() {
                stop::check()?;
            }
            let (phase, barrier_bound) =
                match session.next_phase(Instant::now(), finish.is_some())? {
                    NextPhase::Run(phase, bound) => (phase, bound),
                    NextPhase::AllRun => break,
                    NextPhase::Stopped => {
                        // perftest's words (on stderr: stdout is results).
                        if let Some(sig) = finish {
                            eprintln!(
                                " User stopped traffic ({sig}): {} periods reported",
                                session.completed()
                            );
                        }
                        break;
                    }
                };
            let size = phase.size;
            m.prepare(&side, size)?;
            // The first barrier's answer comes once the server has
            // connected its QPs too (heartbeats meanwhile).
            ch.send(&session.barrier()?)?;
            let answer = ch.recv_within("the start barrier", barrier_bound)?;
            session
                .on_barrier(&answer)
                .map_err(|e| session_error(&ch, e))?;
            let bound = session.phase_bound(Instant::now(), m.config().phase_budget(size));
            stop::pause_point("measure");
            if opts.local.banner {
                show_progress(&format!("{spec}: {size} B ..."));
            }
            let mine = m.run_size(SizeCtx {
                side: &side,
                remote: &agreed.remote_qps,
                size,
                role: Role::Client,
                timeout: conn.timeout,
                ch: &mut ch,
            })?;
            stop::pause_point("done");
            ch.send(&session.done(mine.as_ref())?)?;
            let answer = ch.recv_within("the server's result", bound)?;
            let peer = session
                .on_done::<M::Outcome>(answer)
                .map_err(|e| session_error(&ch, e))?;
            if opts.local.banner {
                show_progress("");
            }
            if let Some(shown) = m.shown(&side, Role::Client, size, mine.as_ref(), peer)? {
                report_size(&mut out, &ctx, size, shown, &mut summary.sizes)?;
            }
        }
        out.end()?;
        m.after_table(&mut out)?;
        ch.send(&session.goodbye()?)?;
        let answer = ch.recv("goodbye")?;
        session
            .on_goodbye(&answer)
            .map_err(|e| session_error(&ch, e))?;
        let mut code = 0;
        for v in m.verdicts(&side) {
            out.verdict(&v)?;
            if !v.pass() {
                if let VerdictRecord::Limit(l) = &v {
                    eprintln!("{}", l.perftest_error());
                }
                code = code.max(v.exit_code_on_fail());
            }
            summary.verdicts.push(v);
        }
        out.commit()?;
        Ok(code)
    })();
    match result {
        Ok(code) => {
            summary.exit_code = code;
            Ok(summary)
        }
        Err(e) => {
            if let Some(sig) = stop::interrupted_by(&e) {
                ch.send_error(&format!("client interrupted by {sig}"));
                // --run_infinitely: as many periods as ran (and the one cut).
                let progress = (session.completed(), session.in_progress(), session.total());
                report_interrupted(spec, Role::Client, &mut out, sig, progress)?;
                summary.exit_code = sig.exit_code();
                summary.interrupted = Some(sig);
                return Ok(summary);
            }
            ch.send_error(&format!("client failed: {e:#}"));
            Err(e)
        }
    }
}

/// The server: waits for clients and serves each ([`serve`]).
fn run_server<M: Measure>(opts: &RunOptions) -> anyhow::Result<RunSummary> {
    let conn = &opts.connection;
    // The device before the port: a bad -d leaves nothing listening.
    let dev = opts.device();
    let port = open_port(dev.name.as_deref(), dev.port, dev.gid_index)?;
    let listener = Listener::bind(&conn.bind, conn.port)?;
    serve_clients::<M>(opts, &listener, port)
}

/// The server side of one pair on a listener the caller holds (cluster
/// mode's pair listener, bound once to port 0 before it joins: no
/// free-port race): opens the device, serves the next client (or
/// clients, with `--persistent`) as [`run_pair`] does.
///
/// # Errors
/// As [`run_pair`]; `opts` must be a server's.
pub fn serve_on(opts: &RunOptions, listener: &Listener) -> anyhow::Result<RunSummary> {
    let dev = opts.device();
    let open = || open_port(dev.name.as_deref(), dev.port, dev.gid_index);
    match (&opts.role, opts.spec.metric) {
        (RoleOptions::Client { .. }, _) => anyhow::bail!("serve_on: the options are a client's"),
        (RoleOptions::Server, Metric::Bw) => serve_clients::<BwMeasure>(opts, listener, open()?),
        (RoleOptions::Server, Metric::Lat) => serve_clients::<LatMeasure>(opts, listener, open()?),
    }
}

/// Serves clients on `listener` with `port` ([`serve`] each); the last
/// session's summary with the server's exit code.
fn serve_clients<M: Measure>(
    opts: &RunOptions,
    listener: &Listener,
    port: Port,
) -> anyhow::Result<RunSummary> {
    let mut last = RunSummary::default();
    let code =
        crate::server::run_server_on(opts, listener, port, |ch, hello, port, local_side| {
            let summary = serve::<M>(opts, ch, hello, port, local_side)?;
            let code = summary.exit_code;
            last = summary;
            Ok(code)
        })?;
    last.exit_code = code;
    Ok(last)
}

/// Tells the client why its test is refused; the error for this side.
fn refuse(ch: &mut Channel, refusal: session::Refusal) -> anyhow::Error {
    let _ = ch.send(&refusal.message());
    anyhow::Error::new(refusal)
}

/// One session of the server, from the client's hello.
fn serve<M: Measure>(
    opts: &RunOptions,
    ch: &mut Channel,
    hello: Message,
    port: Port,
    local_side: &SideInfo,
) -> anyhow::Result<RunSummary> {
    // An atomic server runs whichever atomic its client asked for (-A is
    // the client's flag).
    let spec = opts.spec;
    let spec = match &hello {
        Message::Hello { test, .. } => TestSpec::from_name(test)
            .filter(|s| spec.is_atomic() && s.is_atomic() && s.metric == spec.metric)
            .unwrap_or(spec),
        _ => spec,
    };
    let conn = &opts.connection;
    let mut session = ServerSession::new(conn.timeout, opts.local.max_mem);
    let hello = match session
        .hello::<M::Config>(hello, spec.name())
        .map_err(|e| session_error(ch, e))?
    {
        Ok(h) => h,
        Err(refusal) => return Err(refuse(ch, refusal)),
    };
    // Under rdma_cm the device is the one with the address the client
    // reached, found by listening there.
    let (port, local_side, cm_port) = match hello.connection {
        QpConnection::QpExchange => (port, local_side.clone(), None),
        QpConnection::RdmaCm => {
            let found = ch
                .local()
                .map_err(anyhow::Error::from)
                .and_then(|at| crate::setup::open_cm_passive(at, &opts.device()));
            match found {
                Ok(port) => {
                    let side =
                        port.side_info(opts.local.sysfs.rate_text(port.ctx.name(), port.port));
                    let listening = port.cm.as_ref().map(|c| c.id().local_port());
                    (port, side, listening)
                }
                Err(e) => {
                    return Err(refuse(
                        ch,
                        session::Refusal {
                            reason: format!("server cannot connect through rdma_cm: {e:#}"),
                        },
                    ));
                }
            }
        }
    };
    let local_side = &local_side;
    let mut m = match M::new(spec, opts, hello.config, Role::Server) {
        Ok(m) => m,
        Err(e) => {
            return Err(refuse(
                ch,
                session::Refusal {
                    reason: format!("server cannot run the test: {e:#}"),
                },
            ));
        }
    };
    // The port first: what it is (iWARP) shapes the layout.
    m.on_port(&port);
    // Before anything is allocated: memory plus queue rings fit --max-mem.
    let layout = m.layout(Role::Server);
    if let Err(refusal) = session.check_memory(Estimate {
        memory: layout.memory(),
        rings: layout.rings(),
    }) {
        return Err(refuse(ch, refusal));
    }
    let ours = port.attr.active_mtu.bytes();
    if let Some(note) = session::mtu_note(m.config().mtu(), ours) {
        eprintln!("{note}");
    }
    let mtu = Mtu::from_bytes(session::path_mtu(ours, hello.side.mtu)).unwrap_or(Mtu::Mtu256);
    let outs = session::effective_outs(
        spec.uses_outstanding_reads(),
        m.config().outs(),
        &hello.side,
        local_side,
    );
    // Creating thousands of QPs takes seconds: the client,
    // waiting for the answer, gets heartbeats meanwhile (its bound is
    // --timeout between frames, and the set-up budget in all).
    let setup = ch.with_heartbeat(|_| {
        port.refuse_unsupported(spec, m.immediate(Role::Server))
            .map_err(|e| format!("server cannot set up the test: {e:#}"))?;
        let side = m
            .create_side(port, Role::Server)
            .map_err(|e| format!("server cannot set up the test: {e:#}"))?;
        let local_qps = side
            .qp_infos()
            .map_err(|e| format!("server cannot describe its QPs: {e:#}"))?;
        Ok::<_, String>((side, local_qps))
    })?;
    let (mut side, local_qps) = match setup {
        Ok(s) => s,
        Err(reason) => return Err(refuse(ch, session::Refusal { reason })),
    };
    stop::pause_point("accept");
    // Answered before our QPs connect: both sides move theirs to RTR/RTS
    // at once (a QP may reach RTS before its peer does; the client posts
    // nothing before the first barrier, which we answer once connected).
    ch.send(&session.accept(local_side, mtu.bytes(), local_qps.clone(), cm_port)?)?;
    let mut agreed = Agreed {
        role: Role::Server,
        mtu,
        outs,
        local_side: local_side.clone(),
        remote_side: hello.side,
        local_qps,
        remote_qps: hello.qps,
    };
    let link = cm_port.map_or(QpLink::Exchange, |_| QpLink::Cm(None));
    let ctx = connect_qps(ch, &mut side, &m, link, &mut agreed, spec, opts)?;
    let mut out = open_output(spec, opts, &m, Role::Server, &side.port)?;
    let mut summary = RunSummary::default();
    let result = (|| -> anyhow::Result<u8> {
        out.begin()?;
        loop {
            // The first barrier comes once the client has connected its
            // QPs.
            let msg = ch.recv_within("the next phase", session.next_bound(Instant::now()))?;
            let phase = match session.next(&msg).map_err(|e| session_error(ch, e))? {
                Next::Phase(p) => p,
                Next::Bye(answer) => {
                    ch.send(&answer)?;
                    break;
                }
            };
            let size = phase.size;
            stop::check()?;
            m.prepare(&side, size)?;
            ch.send(&session.barrier()?)?;
            let bound = session.phase_bound(Instant::now(), m.config().phase_budget(size));
            stop::pause_point("measure");
            let mine = m.run_size(SizeCtx {
                side: &side,
                remote: &agreed.remote_qps,
                size,
                role: Role::Server,
                timeout: conn.timeout,
                ch,
            })?;
            let answer = ch.recv_within("the client's result", bound)?;
            let peer = session
                .on_done::<M::Outcome>(answer)
                .map_err(|e| session_error(ch, e))?;
            let shown = m.shown(&side, Role::Server, size, mine.as_ref(), peer)?;
            stop::pause_point("done");
            ch.send(&session.done(mine.as_ref())?)?;
            if let Some(shown) = shown {
                report_size(&mut out, &ctx, size, shown, &mut summary.sizes)?;
            }
        }
        out.end()?;
        session.all_run().map_err(|e| session_error(ch, e))?;
        out.commit()?;
        Ok(0)
    })();
    if let Err(e) = &result
        && let Some(sig) = stop::interrupted_by(e)
    {
        let progress = (session.completed(), session.in_progress(), session.total());
        report_interrupted(spec, Role::Server, &mut out, sig, progress)?;
    }
    summary.exit_code = result?;
    Ok(summary)
}
