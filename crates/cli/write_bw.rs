//! `write_bw`: the command line, the client and server flows, output.

use std::io::{self, Write};
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use engine::bw::{BwResult, BwWriter, Table, Unit};
use engine::config::BwConfig;
use engine::gid::to_perftest_string;
use engine::link::{self, ExpectRate, LinkRate, Verdict, VerdictInput};
use engine::wire::{Message, QpInfo, SideInfo};
use verbs::Mtu;

use crate::bw::{BwSide, Layout};
use crate::oob::Channel;
use crate::session::{
    self, Hello, client_barrier, client_goodbye, client_hello, expect_msg, progress, reject,
    server_accept, server_all_phases_run, server_hello, server_mtu, server_next_phase, side_json,
    size_arg, sysfs_rate,
};
use crate::setup::{Port, open_port};
use crate::{ConnectionArgs, DeviceArgs, EXIT_VERDICT_FAIL, JsonOutput, RunArgs, UsageError};

/// RDMA WRITE bandwidth test (ib_write_bw equivalent). Run without SERVER
/// on one host (the server), with SERVER on the other (the client). The
/// client's flags configure both sides.
#[derive(Debug, Parser)]
#[command(name = "write_bw", version, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub conn: ConnectionArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
    #[command(flatten)]
    pub run: RunArgs,
    /// Number of queue pairs.
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    pub qps: u32,
    /// Worker threads the QPs are spread over.
    #[arg(long = "threads", default_value_t = 1)]
    pub threads: u32,
    /// Send queue depth per QP.
    #[arg(short = 't', long = "tx-depth", default_value_t = 128)]
    pub tx_depth: u32,
    /// Request a completion every N work requests (default 100, 1 above 8 KiB, at most the tx depth).
    #[arg(short = 'Q', long = "cq-mod")]
    pub cq_mod: Option<u32>,
    /// Work requests chained per post.
    #[arg(short = 'l', long = "post-list", default_value_t = 1)]
    pub post_list: u32,
    /// Send messages up to this many bytes inline.
    #[arg(short = 'I', long = "inline-size", default_value_t = 0)]
    pub inline_size: u32,
    /// Both sides write at once; reports the sum.
    #[arg(short = 'b', long = "bidirectional")]
    pub bidirectional: bool,
    /// Report Gb/s (10^9 bit/s) instead of MiB/s.
    #[arg(long = "report_gbits", visible_alias = "report-gbits")]
    pub report_gbits: bool,
    /// Add the CPU_Util[%] column (always in JSON).
    #[arg(long = "cpu_util", visible_alias = "cpu-util")]
    pub cpu_util: bool,
    /// Most memory the server registers for a client's test.
    #[arg(long = "max-mem", value_name = "BYTES", default_value = "1G", value_parser = size_arg)]
    pub max_mem: u64,
    /// Write JSON lines (one object per size) to FILE, or to stdout instead of the table with `-`.
    #[arg(long = "json", value_name = "FILE|-")]
    pub json: Option<String>,
    /// Expected link rate: auto (the port's negotiated rate), 200, 400, or any Gb/s.
    #[arg(long = "expect-rate", value_name = "auto|200|400|GBPS")]
    pub expect_rate: Option<ExpectRate>,
    /// Fraction of the expected rate the average bandwidth must reach.
    #[arg(long = "min-efficiency", default_value = "0.9", value_parser = link::parse_efficiency)]
    pub min_efficiency: f64,
    /// Root of sysfs (for tests on fixture trees).
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
    pub fn config(&self) -> anyhow::Result<BwConfig> {
        let sizes = self.run.sizes(65536)?;
        let tx_depth = self.tx_depth;
        // perftest: 100 by default, clamped to the tx depth; 1 for sizes
        // above 8 KiB unless -a or an explicit -Q.
        let cq_mod = match self.cq_mod {
            Some(q) => q,
            None if !self.run.all && sizes[0] > 8192 => 1,
            None => 100.min(tx_depth.max(1)),
        };
        let cq_mod = if self.post_list > 1 && self.cq_mod.is_none() {
            self.post_list.min(tx_depth.max(1))
        } else {
            cq_mod
        };
        let cfg = BwConfig {
            sizes,
            iters: self.run.iters.unwrap_or(5000),
            duration: self.run.duration_mode(),
            qps: self.qps,
            threads: self.threads,
            tx_depth,
            cq_mod,
            post_list: self.post_list,
            inline_size: self.inline_size,
            bidirectional: self.bidirectional,
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

struct Output {
    table: Option<Table<io::Stdout>>,
    json: JsonOutput,
}

impl Output {
    fn open(cli: &Cli) -> anyhow::Result<Self> {
        let unit = if cli.report_gbits {
            Unit::Gbps
        } else {
            Unit::MibPerSec
        };
        let json = JsonOutput::open(cli.json.as_deref())?;
        Ok(Self {
            table: json
                .table_on_stdout
                .then(|| Table::new(io::stdout(), unit, cli.cpu_util)),
            json,
        })
    }

    fn begin(&mut self) -> io::Result<()> {
        if let Some(t) = &mut self.table {
            t.begin()?;
        }
        Ok(())
    }

    fn result(&mut self, r: &BwResult, ctx: &serde_json::Value) -> io::Result<()> {
        if let Some(t) = &mut self.table {
            t.result(r, ctx)?;
        }
        if let Some(j) = &mut self.json.json {
            j.result(r, ctx)?;
        }
        Ok(())
    }

    fn end(&mut self) -> io::Result<()> {
        if let Some(t) = &mut self.table {
            t.end()?;
        }
        if let Some(j) = &mut self.json.json {
            BwWriter::end(j)?;
        }
        Ok(())
    }
}

fn banner(role: &str, cfg: &BwConfig, port: &Port, mtu: Mtu, local: &[QpInfo], remote: &[QpInfo]) {
    let mut e = io::stderr().lock();
    let line = engine::bw::RESULT_LINE;
    let _ = writeln!(e, "{line}\n                    RDMA_Write BW Test ({role})");
    let _ = writeln!(e, " Device          : {}", port.ctx.name());
    let _ = writeln!(
        e,
        " Number of qps   : {}\t\tThreads        : {}",
        cfg.qps, cfg.threads
    );
    let _ = writeln!(e, " Connection type : RC\t\tUsing SRQ      : OFF");
    let _ = writeln!(e, " TX depth        : {}", cfg.tx_depth);
    let _ = writeln!(e, " CQ Moderation   : {}", cfg.cq_mod);
    let _ = writeln!(e, " Post list       : {}", cfg.post_list);
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
    let _ = writeln!(
        e,
        " Bidirectional   : {}",
        if cfg.bidirectional { "ON" } else { "OFF" }
    );
    let _ = writeln!(e, "{line}");
    for (label, qps) in [("local", local), ("remote", remote)] {
        for q in qps {
            let _ = writeln!(
                e,
                " {label} address: LID {:#06x} QPN {:#08x} PSN {:#08x} RKey {:#010x} VAddr {:#018x}",
                q.lid, q.qpn, q.psn, q.rkey, q.addr
            );
            let _ = writeln!(e, " GID: {}", to_perftest_string(&q.gid));
        }
    }
}

fn context_json(
    role: &str,
    cfg: &BwConfig,
    mtu: Mtu,
    local: &SideInfo,
    remote: &SideInfo,
    peer: Option<&BwResult>,
) -> serde_json::Value {
    let mut v = serde_json::json!({
        "role": role,
        "config": cfg,
        "direction": if cfg.bidirectional { "bidirectional" } else { "unidirectional" },
        "mtu": mtu.bytes(),
        "local": side_json(local),
        "remote": side_json(remote),
    });
    if let Some(p) = peer {
        v["peer_result"] = serde_json::to_value(p).unwrap_or_default();
    }
    v
}

struct LinkWatch {
    expect: ExpectRate,
    rate: Option<LinkRate>,
    before: link::CounterSnapshot,
}

impl LinkWatch {
    fn start(cli: &Cli, port: &Port) -> Option<Self> {
        let expect = cli.expect_rate?;
        let name = port.ctx.name();
        Some(Self {
            expect,
            rate: crate::sysfs::read_rate(&cli.sysfs_root, name, port.port).ok(),
            before: crate::sysfs::snapshot_error_counters(&cli.sysfs_root, name, port.port),
        })
    }

    fn finish(self, cli: &Cli, port: &Port, best_gbps: f64, directions: u32) -> Verdict {
        let after =
            crate::sysfs::snapshot_error_counters(&cli.sysfs_root, port.ctx.name(), port.port);
        link::evaluate(&VerdictInput {
            expect: self.expect,
            negotiated: self.rate,
            min_efficiency: cli.min_efficiency,
            measured_gbps: best_gbps,
            directions,
            rises: link::rises(&self.before, &after),
        })
    }
}

fn run_client(cli: &Cli, server: &str) -> anyhow::Result<u8> {
    let cfg = cli.config()?;
    let port = open_port(
        cli.device.ib_dev.as_deref(),
        cli.device.ib_port,
        cli.conn.gid_index,
    )?;
    let mtu = port.mtu_for(cfg.mtu)?;
    let watch = LinkWatch::start(cli, &port);
    let local_side = port.side_info(sysfs_rate(&cli.sysfs_root, &port));
    let mut side = BwSide::create(port, &Layout::for_bw(&cfg, true))?;
    let local_qps = side.qp_infos()?;
    let mut out = Output::open(cli)?;

    let mut ch = Channel::connect(server, cli.conn.port, cli.conn.timeout)?;
    let result = (|| -> anyhow::Result<u8> {
        let (remote_side, remote_qps, mtu) = client_hello(
            &mut ch,
            "write_bw",
            serde_json::to_value(&cfg)?,
            &local_side,
            mtu,
            local_qps.clone(),
        )?;
        side.connect(&remote_qps, mtu, cli.conn.qp_timeout)?;
        banner("client", &cfg, &side.port, mtu, &local_qps, &remote_qps);
        out.begin()?;
        let mut best_gbps: f64 = 0.0;
        for (phase, &size) in cfg.sizes.iter().enumerate() {
            let phase = phase as u32;
            client_barrier(&mut ch, phase)?;
            progress(&format!("write_bw: {size} B ..."));
            let measured =
                ch.with_heartbeat(|| side.run(&cfg, size, &remote_qps, cli.conn.timeout))?;
            let measured = match measured {
                Ok(m) => m,
                Err(e) => {
                    ch.send_error(&format!("client failed: {e:#}"));
                    return Err(e);
                }
            };
            let mine = BwResult::from_measurement(&measured);
            ch.send(&Message::Done {
                phase,
                result: Some(serde_json::to_value(mine)?),
            })?;
            let peer = match ch.recv("the end barrier")? {
                Message::Done { phase: p, result } if p == phase => result,
                other => return Err(expect_msg(other, "done")),
            };
            let peer: Option<BwResult> = match peer {
                Some(v) if cfg.bidirectional => {
                    Some(serde_json::from_value(v).context("server result")?)
                }
                _ => None,
            };
            let shown = peer.as_ref().map_or(mine, |p| mine.combined(p));
            best_gbps = best_gbps.max(shown.bw_avg_gbps);
            progress("");
            let ctx = context_json(
                "client",
                &cfg,
                mtu,
                &local_side,
                &remote_side,
                peer.as_ref(),
            );
            out.result(&shown, &ctx)?;
        }
        out.end()?;
        client_goodbye(&mut ch)?;
        let mut code = 0;
        if let Some(w) = watch {
            let verdict = w.finish(
                cli,
                &side.port,
                best_gbps,
                if cfg.bidirectional { 2 } else { 1 },
            );
            out.json.verdict(&verdict.line(), &verdict)?;
            if !verdict.pass {
                code = EXIT_VERDICT_FAIL;
            }
        }
        out.json.commit()?;
        Ok(code)
    })();
    if let Err(e) = &result {
        ch.send_error(&format!("{e:#}"));
    }
    result
}

fn run_server(cli: &Cli) -> anyhow::Result<u8> {
    let test_flags = cli.run.size.is_some()
        || cli.run.all
        || cli.run.iters.is_some()
        || cli.run.duration.is_some()
        || cli.qps != 1
        || cli.threads != 1
        || cli.cq_mod.is_some()
        || cli.bidirectional
        || cli.run.mtu.is_some()
        || cli.expect_rate.is_some();
    if test_flags {
        eprintln!(
            "write_bw: warning: test flags on the server are ignored; the client's configuration is used"
        );
    }
    session::run_server(
        "write_bw",
        &cli.conn,
        &cli.device,
        &cli.sysfs_root,
        |ch, port, side| serve(cli, ch, port, side),
    )
}

fn serve(cli: &Cli, ch: &mut Channel, port: Port, local_side: &SideInfo) -> anyhow::Result<u8> {
    let Hello {
        config: cfg,
        side: client_side,
        qps: client_qps,
    } = server_hello(ch, "write_bw", BwConfig::validate)?;
    let need = cfg.memory_needed(cfg.bidirectional);
    if need > cli.max_mem {
        return Err(reject(
            ch,
            format!(
                "the test needs {need} bytes of registered memory on the server, above its --max-mem {}",
                cli.max_mem
            ),
        ));
    }
    let mtu = server_mtu(ch, &port, cfg.mtu, client_side.mtu)?;
    let mut side = match BwSide::create(port, &Layout::for_bw(&cfg, cfg.bidirectional)) {
        Ok(s) => s,
        Err(e) => return Err(reject(ch, format!("server cannot set up the test: {e:#}"))),
    };
    let local_qps = side.qp_infos()?;
    if let Err(e) = side.connect(&client_qps, mtu, cli.conn.qp_timeout) {
        return Err(reject(ch, format!("server cannot connect its QPs: {e:#}")));
    }
    server_accept(ch, local_side, mtu, local_qps.clone())?;
    banner("server", &cfg, &side.port, mtu, &local_qps, &client_qps);
    let mut out = Output::open(cli)?;
    out.begin()?;
    let mut phase = 0u32;
    while let Some(size) = server_next_phase(ch, phase, &cfg.sizes)? {
        ch.send(&Message::Barrier { phase })?;
        let mine = if cfg.bidirectional {
            let measured =
                ch.with_heartbeat(|| side.run(&cfg, size, &client_qps, cli.conn.timeout))??;
            Some(BwResult::from_measurement(&measured))
        } else {
            None
        };
        let client_result: BwResult = match ch.recv("the client's result")? {
            Message::Done {
                phase: p,
                result: Some(v),
            } if p == phase => serde_json::from_value(v).context("client result")?,
            other => return Err(expect_msg(other, "done")),
        };
        ch.send(&Message::Done {
            phase,
            result: mine.map(serde_json::to_value).transpose()?,
        })?;
        let shown = mine.map_or(client_result, |m| m.combined(&client_result));
        let ctx = context_json(
            "server",
            &cfg,
            mtu,
            local_side,
            &client_side,
            Some(&client_result),
        );
        out.result(&shown, &ctx)?;
        phase += 1;
    }
    out.end()?;
    server_all_phases_run(phase, &cfg.sizes)?;
    out.json.commit()?;
    Ok(0)
}
