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

use anyhow::Context as _;
use engine::bench::config::TestConfig;
use engine::bench::spec::{Metric, TestSpec};
use engine::format::banner::{BannerInfo, address_line, gid_line};
use engine::proto::wire::{Message, QpInfo, SideInfo};
use engine::results::record::{
    InterruptedRecord, QpPathRecord, RunContext, SideRecord, SizeRecord,
};
use engine::results::verdict::VerdictRecord;
use serde::de::DeserializeOwned;
use verbs::Mtu;

use crate::UsageError;
use crate::args::{Cli, Parsed};
pub use crate::measure::Role;
use crate::measure::bw::BwMeasure;
use crate::measure::lat::LatMeasure;
use crate::measure::{Measure, Shown, SizeCtx};
use crate::oob::{Bound, Channel};
use crate::output::{CounterLines, Output, PerftestJsonFile, PromFile};
use crate::session::{
    Hello, client_barrier, client_goodbye, client_hello, expect_msg, reject, server_accept,
    server_all_phases_run, server_hello, server_mtu, server_next_phase, show_progress, sysfs_rate,
};
use crate::setup::{Port, open_port};
use crate::side::Side;
use crate::stop::{self, Signal};

/// The `main` of every test binary.
pub fn main(spec: TestSpec) -> ExitCode {
    let result = crate::args::parse(spec)
        .map_err(anyhow::Error::new)
        .and_then(|parsed| {
            // --run_infinitely: Ctrl-C is how such a run ends, normally.
            if parsed.cli.run_infinitely && parsed.cli.conn.server.is_some() {
                stop::install_finishing()
            } else {
                stop::install()
            }
            .context("installing the SIGINT/SIGTERM handlers")?;
            run(spec, &parsed)
        });
    crate::finish(spec.binary(), result)
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
    // Before any memory or thread: as perftest, on the NIC's NUMA node.
    let device = match &cli.device.ib_dev {
        Some(d) => Some(d.clone()),
        None => verbs::devices()
            .ok()
            .and_then(|d| d.into_iter().next())
            .map(|d| d.name),
    };
    if let Some(line) =
        crate::placement::apply(&cli.placement(), &cli.sysfs_root, device.as_deref())?
        && cli.output.is_none()
    {
        eprintln!("{line}");
    }
    // atomic_bw: -A picks the operation (the client's; a server runs
    // what its client asks).
    let spec = match cli.atomic_type {
        Some(verb) if cli.conn.server.is_some() => spec.with_atomic(verb),
        _ => spec,
    };
    match (spec.metric, &cli.conn.server) {
        (Metric::Bw, Some(server)) => run_client::<BwMeasure>(spec, cli, server),
        (Metric::Lat, Some(server)) => run_client::<LatMeasure>(spec, cli, server),
        (Metric::Bw, None) => run_server::<BwMeasure>(spec, parsed),
        (Metric::Lat, None) => run_server::<LatMeasure>(spec, parsed),
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

/// perftest's banner and address lines, on stderr (stdout carries results
/// only).
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
    let port = &side.port;
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
        extra: vec![format!(" Role            : {}", role.name())],
    };
    m.banner(role, &mut info);
    let mut text = info.render();
    let read = spec.uses_outstanding_reads().then_some(outs);
    for (label, qps) in [("local", local), ("remote", remote)] {
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
        config: m.config().record(),
        direction: None,
        measured_on: None,
        mtu: mtu.bytes(),
        local: with_mtu(local),
        remote: with_mtu(remote),
        clock: None,
        reported: None,
        outstanding_reads: spec.uses_outstanding_reads().then_some(outs),
        qp_paths: Vec::new(),
        rtt_factor: 1,
    })
}

/// Each QP's path read back from the device, when a path option was
/// given (else none: the reports omit it); the first QP's on stderr.
fn qp_paths<C: TestConfig>(cli: &Cli, cfg: &C, side: &Side) -> anyhow::Result<Vec<QpPathRecord>> {
    if *cfg.path() == engine::bench::config::PathConfig::default() && cli.conn.pkey_index == 0 {
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
/// `--json`, perftest's `--out_json` file.
fn open_output<M: Measure>(
    spec: TestSpec,
    cli: &Cli,
    m: &M,
    role: Role,
    port: &Port,
) -> anyhow::Result<Output> {
    let mut out = Output::open(cli.json.as_deref(), m.table(role))?;
    if let Some(list) = &cli.report_counters
        && cli.json.as_deref() != Some("-")
    {
        let dir = crate::sysfs::port_dir(&cli.sysfs_root, port.ctx.name(), port.port);
        out.add(Box::new(CounterLines::open(list, &dir)?));
    }
    if let Some(path) = &cli.prom {
        out.add(Box::new(PromFile::create(
            path.clone(),
            &cli.sysfs_root,
            port.ctx.name(),
            port.port,
        )?));
    }
    if cli.out_json {
        out.add(Box::new(PerftestJsonFile::create(
            cli.out_json_file.clone(),
            spec.title(),
            m.table_style(),
            cli.output,
        )?));
    }
    Ok(out)
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

/// The bound on a measured phase that starts now: its budget (from its
/// iterations or duration) plus `--timeout`.
fn phase_bound<M: Measure>(m: &M, size: u64, timeout: std::time::Duration) -> Bound {
    Bound::phase(m.config().phase_budget(size) + timeout)
}

/// Where a run is in its sizes, for the record of an interruption.
#[derive(Debug, Default)]
struct Progress {
    completed: usize,
    in_progress: Option<u64>,
}

/// A run stopped by `sig`: closes the table, writes the interrupted record
/// after the completed sizes, commits the `--json` file and says so.
fn report_interrupted(
    spec: TestSpec,
    role: Role,
    out: &mut Output,
    sig: Signal,
    progress: &Progress,
    total: usize,
) -> anyhow::Result<()> {
    show_progress("");
    out.interrupted(&InterruptedRecord {
        by: sig.name().to_owned(),
        role: role.name(),
        sizes_completed: progress.completed,
        sizes_total: total,
        size_in_progress: progress.in_progress,
    })?;
    out.commit()?;
    eprintln!(
        "{spec}: interrupted by {sig} after {} of {total} sizes; the report holds the completed ones",
        progress.completed
    );
    Ok(())
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
    let mtu = port.mtu_for(m.config().mtu())?;
    let local_side = port.side_info(sysfs_rate(&cli.sysfs_root, &port));
    let outs = resolve_outs(spec, m.config().outs(), local_side.max_rd_atom)?;
    m.config_mut().set_outs(outs);
    m.on_port(&port);
    let mut side = m.create_side(port, Role::Client)?;
    let local_qps = side.qp_infos()?;
    let mut out = open_output(spec, cli, &m, Role::Client, &side.port)?;

    let mut ch = Channel::connect(server, cli.conn.port, cli.conn.timeout)?;
    let total = m.config().sizes().len();
    let mut at = Progress::default();
    let result = (|| -> anyhow::Result<u8> {
        stop::pause_point("hello");
        let (remote_side, remote_qps, mtu) = client_hello(
            &mut ch,
            spec.name(),
            serde_json::to_value(m.config())?,
            &local_side,
            mtu,
            local_qps.clone(),
        )?;
        let outs = effective_outs(spec, outs, &local_side, &remote_side);
        // The server, waiting for the first barrier, gets heartbeats while
        // our QPs connect.
        ch.with_heartbeat(|_| {
            side.connect(
                &remote_qps,
                mtu,
                cli.conn.qp_timeout,
                outs,
                m.config().path(),
                cli.conn.pkey_index,
            )
        })??;
        // --output: the number alone, as perftest (no banner).
        if cli.output.is_none() {
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
        }
        let ctx = RunContext {
            qp_paths: qp_paths(cli, m.config(), &side)?,
            ..context(spec, Role::Client, &m, mtu, &local_side, &remote_side, outs)
        };
        out.begin()?;
        let sizes = m.config().sizes().to_vec();
        let endless = m.config().endless();
        for phase in 0u32.. {
            // --run_infinitely: the one size again and again, a row per
            // period, until stopped.
            let Some(&size) = sizes
                .get(phase as usize)
                .or_else(|| sizes.last().filter(|_| endless))
            else {
                break;
            };
            if let Some(sig) = stop::finish_requested() {
                // perftest's words (on stderr: stdout is results).
                eprintln!(
                    " User stopped traffic ({sig}): {} periods reported",
                    at.completed
                );
                break;
            }
            stop::check()?;
            at.in_progress = Some(size);
            m.prepare(&side, size)?;
            // The first barrier's answer comes once the server has
            // connected its QPs too (heartbeats meanwhile).
            let barrier_bound = Bound::barrier(phase, side.qps.len(), cli.conn.timeout);
            client_barrier(&mut ch, phase, barrier_bound)?;
            let bound = phase_bound(&m, size, cli.conn.timeout);
            stop::pause_point("measure");
            show_progress(&format!("{spec}: {size} B ..."));
            let mine = m.run_size(SizeCtx {
                side: &side,
                remote: &remote_qps,
                size,
                role: Role::Client,
                timeout: cli.conn.timeout,
                ch: &mut ch,
            });
            let mine = mine?;
            stop::pause_point("done");
            ch.send(&Message::Done {
                phase,
                result: mine.as_ref().map(serde_json::to_value).transpose()?,
            })?;
            let peer = match ch.recv_within("the server's result", bound)? {
                Message::Done { phase: p, result } if p == phase => result,
                other => return Err(expect_msg(other, "done")),
            };
            let peer = decode::<M::Outcome>(peer, "the server's")?;
            show_progress("");
            if let Some(shown) = m.shown(&side, Role::Client, size, mine.as_ref(), peer)? {
                report_size(&mut out, &ctx, shown)?;
            }
            at.completed += 1;
            at.in_progress = None;
        }
        out.end()?;
        m.after_table(&mut out)?;
        client_goodbye(&mut ch)?;
        let mut code = 0;
        for v in m.verdicts(&side) {
            out.verdict(&v)?;
            if !v.pass() {
                if let VerdictRecord::Limit(l) = &v {
                    eprintln!("{}", l.perftest_error());
                }
                code = code.max(v.exit_code_on_fail());
            }
        }
        out.commit()?;
        Ok(code)
    })();
    if let Err(e) = &result {
        if let Some(sig) = stop::interrupted_by(e) {
            ch.send_error(&format!("client interrupted by {sig}"));
            // --run_infinitely: as many periods as ran (and the one cut).
            let total = if m.config().endless() {
                at.completed + usize::from(at.in_progress.is_some())
            } else {
                total
            };
            report_interrupted(spec, Role::Client, &mut out, sig, &at, total)?;
            return Ok(sig.exit_code());
        }
        ch.send_error(&format!("client failed: {e:#}"));
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
        spec.binary(),
        &cli.conn,
        &cli.device,
        &cli.sysfs_root,
        |ch, hello, port, local_side| serve::<M>(spec, cli, ch, hello, port, local_side),
    )
}

fn serve<M: Measure>(
    spec: TestSpec,
    cli: &Cli,
    ch: &mut Channel,
    hello: Message,
    port: Port,
    local_side: &SideInfo,
) -> anyhow::Result<u8> {
    // An atomic server runs whichever atomic its client asked for (-A is
    // the client's flag).
    let spec = match &hello {
        Message::Hello { test, .. } => TestSpec::from_name(test)
            .filter(|s| spec.is_atomic() && s.is_atomic() && s.metric == spec.metric)
            .unwrap_or(spec),
        _ => spec,
    };
    let Hello {
        config,
        side: client_side,
        qps: client_qps,
    } = server_hello(ch, hello, spec.name(), M::Config::validate)?;
    let mut m = match M::new(spec, cli, config, Role::Server) {
        Ok(m) => m,
        Err(e) => return Err(reject(ch, format!("server cannot run the test: {e:#}"))),
    };
    // Before anything is allocated: the QP list matches the configuration,
    // and memory plus queue rings fit --max-mem.
    if let Err(reason) = m.check_offer(client_qps.len()) {
        return Err(reject(ch, reason));
    }
    let layout = m.layout(Role::Server);
    let (memory, rings) = (layout.memory(), layout.rings());
    let need = memory.saturating_add(rings);
    if need > cli.max_mem {
        return Err(reject(
            ch,
            format!(
                "the test needs {need} bytes on the server ({memory} of registered memory and \
                 an estimated {rings} of queue rings), above its --max-mem {}",
                cli.max_mem
            ),
        ));
    }
    let mtu = server_mtu(&port, m.config().mtu(), client_side.mtu);
    let outs = effective_outs(spec, m.config().outs(), &client_side, local_side);
    m.on_port(&port);
    // Creating thousands of QPs takes seconds: the client,
    // waiting for the answer, gets heartbeats meanwhile (its bound is
    // --timeout between frames, and the set-up budget in all).
    let setup = ch.with_heartbeat(|_| {
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
        Err(reason) => return Err(reject(ch, reason)),
    };
    stop::pause_point("accept");
    // Answered before our QPs connect: both sides move theirs to RTR/RTS
    // at once (a QP may reach RTS before its peer does; the client posts
    // nothing before the first barrier, which we answer once connected).
    server_accept(ch, local_side, mtu, local_qps.clone())?;
    ch.with_heartbeat(|_| {
        side.connect(
            &client_qps,
            mtu,
            cli.conn.qp_timeout,
            outs,
            m.config().path(),
            cli.conn.pkey_index,
        )
    })?
    .context("server cannot connect its QPs")?;
    // --output: the number alone, as perftest (no banner).
    if cli.output.is_none() {
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
    }
    let ctx = RunContext {
        qp_paths: qp_paths(cli, m.config(), &side)?,
        ..context(spec, Role::Server, &m, mtu, local_side, &client_side, outs)
    };
    let mut out = open_output(spec, cli, &m, Role::Server, &side.port)?;
    let sizes = m.config().sizes().to_vec();
    let mut at = Progress::default();
    let result = (|| -> anyhow::Result<u8> {
        out.begin()?;
        let mut phase = 0u32;
        let endless = m.config().endless();
        while let Some(size) = server_next_phase(
            ch,
            phase,
            &sizes,
            endless,
            // The first barrier comes once the client has connected its
            // QPs.
            Bound::barrier(phase, side.qps.len(), cli.conn.timeout),
        )? {
            stop::check()?;
            at.in_progress = Some(size);
            m.prepare(&side, size)?;
            ch.send(&Message::Barrier { phase })?;
            let bound = phase_bound(&m, size, cli.conn.timeout);
            stop::pause_point("measure");
            let mine = m.run_size(SizeCtx {
                side: &side,
                remote: &client_qps,
                size,
                role: Role::Server,
                timeout: cli.conn.timeout,
                ch,
            })?;
            let peer = match ch.recv_within("the client's result", bound)? {
                Message::Done { phase: p, result } if p == phase => result,
                other => return Err(expect_msg(other, "done")),
            };
            let peer = decode::<M::Outcome>(peer, "the client's")?;
            let mine_json = mine.as_ref().map(serde_json::to_value).transpose()?;
            let shown = m.shown(&side, Role::Server, size, mine.as_ref(), peer)?;
            stop::pause_point("done");
            ch.send(&Message::Done {
                phase,
                result: mine_json,
            })?;
            if let Some(shown) = shown {
                report_size(&mut out, &ctx, shown)?;
            }
            at.completed += 1;
            at.in_progress = None;
            phase += 1;
        }
        out.end()?;
        if !endless {
            server_all_phases_run(phase, &sizes)?;
        }
        out.commit()?;
        Ok(0)
    })();
    if let Err(e) = &result
        && let Some(sig) = stop::interrupted_by(e)
    {
        report_interrupted(spec, Role::Server, &mut out, sig, &at, sizes.len())?;
    }
    result
}
