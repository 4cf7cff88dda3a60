//! The latency tests (`write_lat`, `send_lat`, `read_lat`): [`LatMeasure`],
//! their [`Measure`]; the loops themselves, and how each one measures, are
//! in [`round_trips`].

mod round_trips;

pub use round_trips::{LastReceived, LatOp, SizeRun, Until};

use engine::bench::clock::TickRate;
use engine::results::lat::LatRecorder;

use std::io;

use engine::bench::config::LatConfig;
use engine::bench::spec::{TestSpec, Verb};
use engine::format::lat_table::{LatTable, dump_samples, dump_unsorted};
use engine::format::report::Report;
use engine::format::table::TableStyle;
use engine::results::lat::lat_verdict;
use engine::results::record::{DataCheck, Figures, RunContext};
use engine::results::verdict::VerdictRecord;
use serde::{Deserialize, Serialize};

use super::{Measure, Shown, SizeCtx};
use crate::clock::Clock;
use crate::oob::{Channel, PeerWatch};
use crate::options::RunOptions;
use crate::output::{FigureLines, Output, Stdout};
use crate::setup::Port;
use crate::side::{Layout, Side};
use crate::stop;
use engine::bench::plan::Role;
use engine::format::banner::BannerInfo;

/// What a latency side tells its peer after a size.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
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
    report_unsorted: bool,
    huge_pages: bool,
    /// `ibv_wr_*`, or `ibv_post_send` with `--use_old_post_send`.
    post_path: verbs::PostPath,
    perftest_stats: bool,
    /// `--cpu_util` in duration mode: perftest's system CPU figure.
    cpu_util: bool,
    /// That figure for the last size.
    system_cpu: Option<f64>,
    output: Option<engine::format::perftest_json::OutputFigure>,
    json_histogram: bool,
    max_latency: Option<f64>,
    percentile: engine::results::lat::Percentile,
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
            Verb::Send => LatOp::SendPingPong,
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

impl LatMeasure {
    /// The size's figures: perftest's computation with
    /// `--perftest-stats` (when every sample was kept), else every sample.
    fn stats(&self, size: u64) -> engine::results::lat::LatStats {
        let f = self.spec.rtt_factor();
        let s = self
            .perftest_stats
            .then(|| self.rec.perftest_stats(size, f))
            .flatten()
            .unwrap_or_else(|| self.rec.stats_per(size, f));
        engine::results::lat::LatStats {
            system_cpu_util_pct: self.system_cpu,
            ..s
        }
    }
}

impl Measure for LatMeasure {
    type Config = LatConfig;
    type Outcome = LatOutcome;

    fn new(spec: TestSpec, opts: &RunOptions, cfg: LatConfig, role: Role) -> anyhow::Result<Self> {
        let out = &opts.output;
        let cpu_util = out.cpu_column(cfg.duration.is_some());
        // Both sides of the write ping-pong measure (as perftest's); a read
        // server posts nothing: its monotonic clock only bounds its waits.
        let measures = role == Role::Client || spec.verb != Verb::Read;
        let clock = if measures {
            Clock::new(opts.local.clock)?
        } else {
            Clock::for_server()
        };
        let mut m = Self {
            spec,
            cfg,
            clock,
            rec: LatRecorder::new(0),
            explicit_inline: role == Role::Client && opts.local.explicit_inline,
            report_histogram: out.report_histogram,
            report_unsorted: out.report_unsorted,
            huge_pages: opts.local.huge_pages,
            post_path: opts.local.post_path,
            perftest_stats: out.perftest_stats,
            cpu_util,
            system_cpu: None,
            output: out.figure,
            json_histogram: out.json_histogram,
            max_latency: opts.verdicts.max_latency,
            percentile: opts.verdicts.percentile,
            dumps: Vec::new(),
            verdicts: Vec::new(),
            rate: TickRate::NANOSECONDS,
            check: None,
        };
        if measures {
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

    fn layout(&self, role: Role) -> Layout {
        Layout {
            qps: 1,
            threads: 1,
            tx_depth: self.spec.defaults().tx_depth,
            inline_size: self.cfg.inline_size,
            // A SEND ping-pong's receives cycle over a page-sized ring.
            area: if self.op() == LatOp::SendPingPong {
                self.cfg.buffer().max(engine::bench::config::RING_BYTES)
            } else {
                self.cfg.buffer()
            },
            initiates: self.op().is_ping_pong() || role == Role::Client,
            access: self.spec.access(),
            huge_pages: self.huge_pages,
            post_path: self.post_path,
            rx_depth: if self.op() == LatOp::SendPingPong {
                self.cfg.rx_depth
            } else {
                0
            },
            recv_len: if self.op() == LatOp::SendPingPong {
                u32::try_from(self.cfg.max_size()).unwrap_or(u32::MAX)
            } else {
                0
            },
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
            Err(e) if retries_without_inline(&e) => {
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

    fn banner(&self, role: Role, info: &mut BannerInfo) {
        // perftest's latency tests post one at a time: TX depth 1 on the
        // side that posts.
        let posts = role == Role::Client || self.op().is_ping_pong();
        // perftest: on the server of a test with receives.
        info.rx_depth =
            (self.op() == LatOp::SendPingPong && role == Role::Server).then_some(self.cfg.rx_depth);
        info.tx_depth = posts.then_some(1);
        info.inline_size = self.cfg.inline_size;
        let clock = match role {
            Role::Server if self.op() == LatOp::Read => "not used (the client measures)".to_owned(),
            _ => self.clock.describe(),
        };
        info.extra.push(format!(" Clock           : {clock}"));
    }

    fn context(&self, ctx: RunContext) -> RunContext {
        RunContext {
            rtt_factor: self.spec.rtt_factor(),
            reported: Some(if self.spec.rtt_factor() == 1 {
                "full round trip (RTT), microseconds"
            } else {
                "half round trip (RTT/2), microseconds"
            }),
            ..ctx
        }
    }

    fn table(&self, role: Role) -> Option<Box<dyn Report>> {
        // perftest's read_lat server prints no table; its write_lat
        // server prints its own.
        (role == Role::Client || self.op().is_ping_pong()).then(|| match self.output {
            Some(f) => Box::new(FigureLines::new(f, TableStyle::default())) as Box<dyn Report>,
            None => Box::new(
                LatTable::new(Stdout, self.cfg.duration.is_some(), self.spec.rtt_factor())
                    .with_cpu_column(self.cpu_util),
            ),
        })
    }

    fn prepare(&mut self, side: &Side, size: u64) -> anyhow::Result<()> {
        match self.op() {
            // Zero before the barrier: the peer writes as soon as it has
            // the barrier's answer.
            LatOp::WritePingPong => side.zero(0, size),
            LatOp::SendPingPong => {
                side.drain_receives()?;
                side.zero_exposed(engine::bench::config::RING_BYTES.max(size))?;
                side.fill_send_pattern(size)
            }
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
            (Some(d), Role::Client) => {
                let (total, margin) = d.spans();
                Until::Duration { total, margin }
            }
            (Some(_), Role::Server) => Until::PeerSaysStop,
        };
        self.rec.reset();
        // perftest samples /proc/stat at the window's ends; here the whole
        // run of the size (margins included) is the span.
        let cpu_before = self.cpu_util.then(super::read_proc_stat).flatten();
        let inline = size <= u64::from(self.cfg.inline_size);
        let (clock, rec) = (&self.clock, &mut self.rec);
        let run = |ch: Option<&Channel>, rec: &mut LatRecorder, watch: &PeerWatch| {
            SizeRun {
                op,
                side,
                remote: &remote[0],
                size,
                inline,
                role,
                until,
                timeout,
                ch,
                rec,
                watch,
            }
            .run(clock)
        };
        let mut read_checked = None;
        let (count, rate, received) = match op {
            // The ping-pong keeps the peer busy: no heartbeat thread
            // beside the measured loop.
            LatOp::WritePingPong | LatOp::SendPingPong => {
                match run(Some(&*ch), rec, &PeerWatch::default()) {
                    // The peer stopped and said why on the control channel.
                    Err(_) if stop::requested().is_none() && ch.has_pending() => {
                        return Err(ch.why_peer_stopped());
                    }
                    r => r?,
                }
            }
            // The reader's peer is passive, waiting on the control channel:
            // it hears heartbeats through the reads and the data check
            // (8 MiB of it took seconds in a debug build under emulation).
            LatOp::Read => ch.with_heartbeat(|w| -> anyhow::Result<_> {
                let got = run(None, rec, w)?;
                read_checked = Some(side.check_pattern(0, std::iter::once(0..size))?);
                Ok(got)
            })??,
        };
        self.rate = rate;
        self.system_cpu = cpu_before
            .zip(super::read_proc_stat())
            .map(|(b, a)| engine::results::bw::system_cpu_util(b, a));
        if let Some(bytes_checked) = read_checked {
            self.check = Some(DataCheck { bytes_checked });
        }
        if let Some((slot, n)) = received {
            let bytes_checked = ch.with_heartbeat(|_| side.check_received(0, size, slot, n))??;
            self.check = Some(DataCheck { bytes_checked });
        }
        Ok(Some(LatOutcome { round_trips: count }))
    }

    fn shown(
        &mut self,
        _side: &Side,
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
            let Some(m) = mine else {
                if let Some(p) = peer {
                    eprintln!(
                        "{}: {size} B: the client did {} reads",
                        self.spec, p.round_trips
                    );
                }
                return Ok(None);
            };
            self.clock.check_drift(self.rate);
            let mut stats = self.stats(size);
            // perftest's #iterations is the count, on both sides.
            stats.iterations = m.round_trips;
            if self.report_histogram || self.report_unsorted {
                self.dumps.push((size, self.rec.samples().to_vec()));
            }
            return Ok(Some(Shown {
                figures: Figures::Lat(stats),
                peer_result: None,
                histogram: self.json_histogram.then(|| self.rec.histogram_base64()),
                data_check: self.check.take(),
                clock: Some(self.clock.record(self.rate)),
            }));
        }
        self.clock.check_drift(self.rate);
        let stats = self.stats(size);
        if self.report_histogram || self.report_unsorted {
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
        let (ours, perftests) = (self.report_histogram, self.report_unsorted);
        out.dump(|w| {
            for (bytes, samples) in &dumps {
                if ours {
                    dump_samples(w, *bytes, samples, rtt_factor)?;
                }
                if perftests {
                    dump_unsorted(w, samples, rtt_factor)?;
                }
            }
            Ok(())
        })
    }

    fn verdicts(&mut self, _side: &Side) -> Vec<VerdictRecord> {
        std::mem::take(&mut self.verdicts)
    }
}

/// Whether a failed [`Side::create`] with the default inline size is
/// tried again without inline data.
fn retries_without_inline(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<crate::exit::InlineRefused>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::UsageError;

    #[test]
    fn only_the_inline_refusal_is_retried_without_inline() {
        let too_many_qps = anyhow::Error::new(UsageError(
            "-q/--qp: 100000 QPs; rxe0 allows 65536 (max_qp)".to_owned(),
        ));
        assert!(!retries_without_inline(&too_many_qps));
        let refused = anyhow::Error::new(crate::exit::InlineRefused(
            "-I/--inline-size: rxe0 refused a QP with 220 bytes of inline data".to_owned(),
        ))
        .context("creating the client's side");
        assert!(retries_without_inline(&refused));
        assert!(crate::exit::is_usage_error(&refused));
    }
}
