//! `write_lat`: the command line, the client and server flows, output.

use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use clap::Parser;
use engine::clock::{ClockChoice, TickRate};
use engine::lat::{
    LatConfig, LatRecorder, LatStats, LatTable, LatWriter, Percentile, dump_samples, lat_verdict,
    parse_max_latency,
};
use engine::wire::{Message, SideInfo};
use verbs::Mtu;

use crate::bw::{BwSide, Layout};
use crate::clock::Clock;
use crate::lat::{Role, SizeRun, Until, zero_areas};
use crate::oob::Channel;
use crate::session::{
    self, Hello, client_barrier, client_goodbye, client_hello, expect_msg, progress, reject,
    server_accept, server_all_phases_run, server_hello, server_mtu, server_next_phase, side_json,
    sysfs_rate,
};
use crate::setup::{Port, open_port};
use crate::{ConnectionArgs, DeviceArgs, EXIT_VERDICT_FAIL, JsonOutput, RunArgs, UsageError};

/// Inline size tried when `-I` is not given (perftest's `DEF_INLINE_WRITE`).
const DEFAULT_INLINE: u32 = 220;

/// RDMA WRITE latency test (ib_write_lat equivalent): ping-pong of RDMA
/// WRITEs; reports half round trips with full percentiles. Run without
/// SERVER on one host, with SERVER on the other; the client's flags
/// configure both sides.
#[derive(Debug, Parser)]
#[command(name = "write_lat", version, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub conn: ConnectionArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
    #[command(flatten)]
    pub run: RunArgs,
    /// Send messages up to this size inline (default 220, or 0 when the device refuses).
    #[arg(short = 'I', long = "inline-size")]
    pub inline_size: Option<u32>,
    /// Print every sample (half round trip, usec) after the table.
    #[arg(short = 'H', long = "report-histogram")]
    pub report_histogram: bool,
    /// Write JSON lines (one object per size) to FILE, or to stdout instead of the table with `-`.
    #[arg(long = "json", value_name = "FILE|-")]
    pub json: Option<String>,
    /// Include the HdrHistogram (V2, base64) in each JSON object.
    #[arg(long = "json-histogram")]
    pub json_histogram: bool,
    /// Fail (exit 3) when the chosen percentile exceeds this many usec.
    #[arg(long = "max-latency", value_name = "USEC", value_parser = parse_max_latency)]
    pub max_latency: Option<f64>,
    /// Which figure --max-latency judges: median, p90, p99, p99.9, max, avg.
    #[arg(long = "percentile", default_value = "median")]
    pub percentile: Percentile,
    /// Clock for the samples: tsc (the CPU's counter, calibrated against
    /// CLOCK_MONOTONIC), monotonic, or auto (tsc when the CPU advertises an
    /// invariant one: constant_tsc and nonstop_tsc).
    #[arg(
        long = "clock",
        value_name = "auto|tsc|monotonic",
        default_value = "auto"
    )]
    pub clock: ClockChoice,
    /// Root of sysfs (for tests).
    #[arg(long = "sysfs-root", default_value = "/sys", hide = true)]
    pub sysfs_root: PathBuf,
    /// List devices, their ports and GIDs, then exit.
    #[arg(long = "list-devices")]
    pub list_devices: bool,
}

impl Cli {
    /// The test configuration the flags describe (client side).
    ///
    /// # Errors
    /// A usage error naming the flag.
    pub fn config(&self) -> anyhow::Result<LatConfig> {
        let cfg = LatConfig {
            sizes: self.run.sizes(2)?,
            iters: self.run.iters.unwrap_or(1000),
            duration: self.run.duration_mode(),
            inline_size: self.inline_size.unwrap_or(DEFAULT_INLINE),
            mtu: self.run.mtu,
        };
        cfg.validate().map_err(|e| UsageError(e.to_string()))?;
        Ok(cfg)
    }
}

/// Entry point of the binary.
///
/// # Errors
/// Usage errors (exit 2) and run failures (exit 1); a FAIL verdict is
/// returned as `Ok(EXIT_VERDICT_FAIL)`.
pub fn run(cli: &Cli) -> anyhow::Result<u8> {
    if cli.list_devices {
        crate::run_list(&cli.device, cli.json.as_deref())?;
        return Ok(0);
    }
    match &cli.conn.server {
        Some(server) => run_client(cli, server),
        None => run_server(cli),
    }
}

fn layout(cfg: &LatConfig, inline: u32) -> Layout {
    Layout {
        qps: 1,
        threads: 1,
        tx_depth: 1,
        inline_size: inline,
        area: cfg.buffer(),
        sends: true,
    }
}

/// Creates the side; when `-I` was not given and the device refuses the
/// default inline size, falls back to no inline (as perftest does for
/// devices it does not know), with a warning.
fn create_side(port: Port, cfg: &mut LatConfig, explicit_inline: bool) -> anyhow::Result<BwSide> {
    if explicit_inline || cfg.inline_size == 0 {
        return BwSide::create(port, &layout(cfg, cfg.inline_size));
    }
    let retry = port.clone();
    match BwSide::create(port, &layout(cfg, cfg.inline_size)) {
        Ok(s) => Ok(s),
        Err(e) if crate::is_usage_error(&e) => {
            eprintln!(
                "write_lat: warning: {} refused {} bytes of inline data; sending without inline",
                retry.ctx.name(),
                cfg.inline_size
            );
            cfg.inline_size = 0;
            BwSide::create(retry, &layout(cfg, 0))
        }
        Err(e) => Err(e),
    }
}

struct Output {
    table: Option<LatTable<io::Stdout>>,
    json: JsonOutput,
    histogram_in_json: bool,
    dump: bool,
}

impl Output {
    fn open(cli: &Cli) -> anyhow::Result<Self> {
        let json = JsonOutput::open(cli.json.as_deref())?;
        Ok(Self {
            table: json.table_on_stdout.then(|| LatTable::new(io::stdout())),
            json,
            histogram_in_json: cli.json_histogram,
            dump: cli.report_histogram,
        })
    }

    fn begin(&mut self) -> io::Result<()> {
        if let Some(t) = &mut self.table {
            t.begin()?;
        }
        Ok(())
    }

    fn result(
        &mut self,
        stats: &LatStats,
        rec: &LatRecorder,
        ctx: &serde_json::Value,
    ) -> io::Result<()> {
        if let Some(t) = &mut self.table {
            t.result(stats, ctx, None)?;
        }
        if let Some(j) = &mut self.json.json {
            let h = self.histogram_in_json.then(|| rec.histogram_base64());
            j.result(stats, ctx, h.as_deref())?;
        }
        Ok(())
    }

    fn end(&mut self, dumps: &[(u64, Vec<u64>)]) -> io::Result<()> {
        if let Some(t) = &mut self.table {
            t.end()?;
        }
        if self.dump {
            let mut out = io::stdout().lock();
            for (bytes, samples) in dumps {
                dump_samples(&mut out, *bytes, samples)?;
            }
        }
        if let Some(j) = &mut self.json.json {
            LatWriter::end(j)?;
        }
        Ok(())
    }
}

fn context_json(
    role: &str,
    cfg: &LatConfig,
    mtu: Mtu,
    local: &SideInfo,
    remote: &SideInfo,
    clock: &Clock,
    rate: TickRate,
) -> serde_json::Value {
    serde_json::json!({
        "role": role,
        "config": cfg,
        "mtu": mtu.bytes(),
        "local": side_json(local),
        "remote": side_json(remote),
        "clock": clock.json(rate),
        "reported": "half round trip (RTT/2), microseconds",
    })
}

fn banner(role: &str, cfg: &LatConfig, port: &Port, mtu: Mtu, clock: &str) {
    let line = engine::bw::RESULT_LINE;
    let mut e = io::stderr().lock();
    let _ = writeln!(
        e,
        "{line}\n                    RDMA_Write Latency Test ({role})"
    );
    let _ = writeln!(e, " Device          : {}", port.ctx.name());
    let _ = writeln!(e, " Connection type : RC\t\tUsing SRQ      : OFF");
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
    let _ = writeln!(e, " Max inline data : {}[B]", cfg.inline_size);
    let _ = writeln!(e, " Clock           : {clock}");
    let _ = writeln!(e, "{line}");
}

fn keep_samples(cfg: &LatConfig) -> usize {
    match cfg.duration {
        None => usize::try_from(cfg.iters)
            .unwrap_or(usize::MAX)
            .min(1 << 24),
        Some(_) => 1 << 20,
    }
}

fn run_client(cli: &Cli, server: &str) -> anyhow::Result<u8> {
    let mut cfg = cli.config()?;
    // Before the device: `--clock tsc` where there is none is bad input.
    let clock = Clock::new(cli.clock)?;
    let port = open_port(
        cli.device.ib_dev.as_deref(),
        cli.device.ib_port,
        cli.conn.gid_index,
    )?;
    let mtu = port.mtu_for(cfg.mtu)?;
    let local_side = port.side_info(sysfs_rate(&cli.sysfs_root, &port));
    let mut side = create_side(port, &mut cfg, cli.inline_size.is_some())?;
    let local_qps = side.qp_infos()?;
    let mut out = Output::open(cli)?;

    let mut ch = Channel::connect(server, cli.conn.port, cli.conn.timeout)?;
    let result = (|| -> anyhow::Result<u8> {
        let (remote_side, remote_qps, mtu) = client_hello(
            &mut ch,
            "write_lat",
            serde_json::to_value(&cfg)?,
            &local_side,
            mtu,
            local_qps.clone(),
        )?;
        side.connect(&remote_qps, mtu, cli.conn.qp_timeout)?;
        banner("client", &cfg, &side.port, mtu, &clock.describe());
        out.begin()?;
        let mut dumps = Vec::new();
        let mut verdict_fail = false;
        let mut verdicts = Vec::new();
        // Allocated (and its pages touched) once; emptied for each size.
        let mut rec = LatRecorder::new(keep_samples(&cfg));
        for (phase, &size) in cfg.sizes.iter().enumerate() {
            let phase = phase as u32;
            zero_areas(&mut side, size)?;
            client_barrier(&mut ch, phase)?;
            progress(&format!("write_lat: {size} B ..."));
            rec.reset();
            let until = match cfg.duration {
                None => Until::Iterations(cfg.iters),
                Some(d) => Until::Duration {
                    total: Duration::from_secs_f64(d.seconds),
                    margin: Duration::from_secs_f64(d.margin),
                },
            };
            let inline = size <= u64::from(cfg.inline_size);
            let done = SizeRun {
                side: &mut side,
                remote: &remote_qps[0],
                size,
                inline,
                role: Role::Client,
                until,
                timeout: cli.conn.timeout,
                ch: &ch,
                rec: &mut rec,
            }
            .run(&clock);
            let (count, rate) = match done {
                Ok(c) => c,
                Err(e) => {
                    ch.send_error(&format!("client failed: {e:#}"));
                    return Err(e);
                }
            };
            ch.send(&Message::Done {
                phase,
                result: Some(serde_json::json!({"round_trips": count})),
            })?;
            match ch.recv("the end barrier")? {
                Message::Done { phase: p, .. } if p == phase => {}
                other => return Err(expect_msg(other, "done")),
            }
            progress("");
            clock.check_drift(rate);
            let stats = rec.stats(size);
            let ctx = context_json("client", &cfg, mtu, &local_side, &remote_side, &clock, rate);
            out.result(&stats, &rec, &ctx)?;
            if cli.report_histogram {
                dumps.push((size, rec.samples().to_vec()));
            }
            if let Some(max) = cli.max_latency {
                let v = lat_verdict(&stats, cli.percentile, max);
                verdict_fail |= !v.pass;
                verdicts.push(v);
            }
        }
        out.end(&dumps)?;
        client_goodbye(&mut ch)?;
        for v in &verdicts {
            out.json.verdict(&v.line(), v)?;
        }
        out.json.commit()?;
        Ok(if verdict_fail { EXIT_VERDICT_FAIL } else { 0 })
    })();
    if let Err(e) = &result {
        ch.send_error(&format!("{e:#}"));
    }
    result
}

fn run_server(cli: &Cli) -> anyhow::Result<u8> {
    session::run_server(
        "write_lat",
        &cli.conn,
        &cli.device,
        &cli.sysfs_root,
        |ch, port, side| serve(cli, ch, port, side),
    )
}

fn serve(cli: &Cli, ch: &mut Channel, port: Port, local_side: &SideInfo) -> anyhow::Result<u8> {
    let Hello {
        config: mut cfg,
        side: client_side,
        qps: client_qps,
    } = server_hello(ch, "write_lat", LatConfig::validate)?;
    if client_qps.len() != 1 {
        return Err(reject(
            ch,
            format!(
                "a latency test uses one QP, the client offers {}",
                client_qps.len()
            ),
        ));
    }
    let mtu = server_mtu(ch, &port, cfg.mtu, client_side.mtu)?;
    let mut side = match create_side(port, &mut cfg, false) {
        Ok(s) => s,
        Err(e) => return Err(reject(ch, format!("server cannot set up the test: {e:#}"))),
    };
    let local_qps = side.qp_infos()?;
    if let Err(e) = side.connect(&client_qps, mtu, cli.conn.qp_timeout) {
        return Err(reject(ch, format!("server cannot connect its QP: {e:#}")));
    }
    server_accept(ch, local_side, mtu, local_qps)?;
    // The server records nothing: the monotonic clock only bounds its waits.
    let clock = Clock::for_server();
    banner(
        "server",
        &cfg,
        &side.port,
        mtu,
        "not used (the client measures the round trips)",
    );
    // The server records nothing; one empty recorder serves every size.
    let mut rec = LatRecorder::new(0);
    let mut phase = 0u32;
    while let Some(size) = server_next_phase(ch, phase, &cfg.sizes)? {
        // Zero before answering: the client writes as soon as it has the
        // answer.
        zero_areas(&mut side, size)?;
        ch.send(&Message::Barrier { phase })?;
        let until = match cfg.duration {
            None => Until::Iterations(cfg.iters),
            Some(_) => Until::PeerSaysStop,
        };
        let inline = size <= u64::from(cfg.inline_size);
        let (count, _) = SizeRun {
            side: &mut side,
            remote: &client_qps[0],
            size,
            inline,
            role: Role::Server,
            until,
            timeout: cli.conn.timeout,
            ch,
            rec: &mut rec,
        }
        .run(&clock)?;
        let client_count = match ch.recv("the client's result")? {
            Message::Done { phase: p, result } if p == phase => {
                result.and_then(|v| v["round_trips"].as_u64())
            }
            other => return Err(expect_msg(other, "done")),
        };
        if let Some(c) = client_count {
            if c != count {
                bail!("client counted {c} round trips, the server answered {count}");
            }
        }
        ch.send(&Message::Done {
            phase,
            result: None,
        })?;
        eprintln!("write_lat: {size} B: answered {count} round trips");
        phase += 1;
    }
    server_all_phases_run(phase, &cfg.sizes)?;
    Ok(0)
}
