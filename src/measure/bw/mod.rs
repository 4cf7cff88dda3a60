//! The bandwidth loop, generic over the operation it posts (a [`BwOp`]:
//! RDMA WRITE, with or without immediate, READ, SEND, fetch-and-add,
//! compare-and-swap). Each worker thread drives a contiguous group of QPs
//! spread over as few CQs as the device's `max_cqe` allows (polled in
//! turn); on a side that receives (the target of SENDs and writes with
//! immediate) the same loop checks, counts and re-posts the receives
//! ([`Plan`]). What it may post and when it is done is
//! [`engine::bench::sched::BwScheduler`]'s decision, so the
//! loop itself only moves its prepared work requests (ids, ring offsets,
//! signal flags: [`PreparedSends`]), posts, polls and reads the
//! clock: when completions arrive and once every
//! [`POLLS_PER_CLOCK_CHECK`] empty polls. Nothing in it allocates, locks
//! or formats. Per-thread state (the scheduler's counters) lives on each
//! worker's own stack and heap: no counter is shared between threads.
//!
//! Parts: [`ops`] (the operations), [`threads`] (one size's worker
//! threads, started together, their figures summed), [`worker`] (one
//! thread's measured loop); here, [`BwMeasure`], the bandwidth tests'
//! [`Measure`].

mod ops;
mod threads;
mod worker;

use anyhow::{Context as _, bail};
use engine::bench::config::{BwConfig, ring_offset, ring_slots};
use engine::bench::plan::{Plan, Role};
use engine::bench::spec::{TestSpec, Verb};
use engine::fabric::link::{self, CounterSnapshot, ExpectRate, LinkRate, VerdictInput};
use engine::format::banner::BannerInfo;
use engine::format::perftest_json::OutputFigure;
use engine::format::report::Report;
use engine::format::table::{RESULT_LINE, Table, TableStyle};
use engine::results::bw::{BwResult, shown_figures};
use engine::results::record::{DataCheck, Figures, RunContext};
use engine::results::verdict::{Limits, VerdictRecord};

pub use ops::{ATOMIC_SIZE, BwOp, CmpSwapOp, FetchAddOp, ReadOp, SendOp, WriteOp, atomic_words};
pub use threads::{cpu_time_ns, measure};
use worker::POLL_BATCH;
pub use worker::{POLLS_PER_CLOCK_CHECK, SizeRun};

use super::credit::QpCredits;
use super::{Measure, Shown, SizeCtx};
use crate::options::RunOptions;
use crate::output::{FigureLines, Stdout};
use crate::setup::Port;
use crate::side::{Layout, Side};

/// The data check of an atomic target: its words hold, summed over every
/// QP, exactly the operations the client completed (each fetch-and-add
/// adds 1; each compare-and-swap of the chain counts its word up by 1, and
/// one whose compare failed would leave it short).
fn check_atomics(side: &Side, client: &BwResult) -> anyhow::Result<DataCheck> {
    let words = atomic_words();
    let mut sum = 0u64;
    for q in 0..side.qps.len() {
        sum = sum.wrapping_add(side.atomic_sum(q, words)?);
    }
    if sum != client.operations {
        bail!(
            "data check failed: the target's words sum to {sum}, the client completed {} atomic operations",
            client.operations
        );
    }
    Ok(DataCheck {
        bytes_checked: words * ATOMIC_SIZE * side.qps.len() as u64,
    })
}

/// `--expect-rate`: the port's rate and error counters, read before and
/// after the run.
#[derive(Debug)]
struct LinkWatch {
    expect: ExpectRate,
    rate: Option<LinkRate>,
    before: CounterSnapshot,
    port: crate::sysfs::PortView,
    min_efficiency: f64,
}

/// The bandwidth tests (`write_bw`, `read_bw`).
pub struct BwMeasure {
    spec: TestSpec,
    cfg: BwConfig,
    role: Role,
    style: TableStyle,
    output: Option<OutputFigure>,
    limits: Limits,
    /// `--use_hugepages`.
    huge_pages: bool,
    /// `ibv_wr_*`, or `ibv_post_send` with `--use_old_post_send`.
    post_path: verbs::PostPath,
    /// `--report-both` with `-b`: each size's own and peer figures.
    report_both: Option<Vec<(BwResult, BwResult)>>,
    expect: Option<ExpectRate>,
    sysfs: crate::sysfs::Sysfs,
    min_efficiency: f64,
    watch: Option<LinkWatch>,
    best_gbps: f64,
    check: Option<DataCheck>,
    /// The port is iWARP: a SEND test counts receive credits.
    iwarp: bool,
    /// Per QP, the receive credits (made at the first size, kept: the
    /// counts run on across sizes).
    credits: Option<Vec<QpCredits>>,
}

impl BwMeasure {
    fn plan(&self, role: Role) -> Plan {
        Plan::of(self.spec, &self.cfg, role)
    }

    /// Whether SENDs are paced by receive credits: on iWARP, which has no
    /// receiver-not-ready retry ([`super::credit`]).
    fn counts_credits(&self) -> bool {
        self.iwarp && self.spec.verb == Verb::Send
    }

    /// The data check of a read: every ring slot the size's reads landed
    /// in holds the peer's pattern.
    fn check_reads(&self, side: &Side, size: u64, per_qp: u64) -> anyhow::Result<DataCheck> {
        let touched = ring_slots(size).min(per_qp.max(1));
        let mut bytes_checked = 0;
        for q in 0..side.qps.len() {
            let slots = (0..touched).map(|i| ring_offset(size, i)..ring_offset(size, i) + size);
            bytes_checked += side.check_pattern(q, slots)?;
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

    fn new(spec: TestSpec, opts: &RunOptions, cfg: BwConfig, role: Role) -> anyhow::Result<Self> {
        let out = &opts.output;
        let style = TableStyle {
            unit: out.unit,
            // perftest measures no peak on a send server (one that only
            // receives), and says so.
            peak: out.shows_peak(&cfg)
                && !(role == Role::Server
                    && spec.receives(cfg.write_with_imm)
                    && !cfg.bidirectional),
            // perftest's CPU column exists in duration mode only.
            cpu_column: out.cpu_column(cfg.duration.is_some()),
        };
        let report_both = (out.report_both && cfg.bidirectional).then(Vec::new);
        Ok(Self {
            spec,
            cfg,
            role,
            report_both,
            huge_pages: opts.local.huge_pages,
            post_path: opts.local.post_path,
            style,
            output: out.figure,
            limits: Limits::new(opts.verdicts.limit_bw, opts.verdicts.limit_msgrate),
            expect: opts.verdicts.expect_rate,
            sysfs: opts.local.sysfs.clone(),
            min_efficiency: opts.verdicts.min_efficiency,
            watch: None,
            best_gbps: 0.0,
            check: None,
            iwarp: false,
            credits: None,
        })
    }

    fn config(&self) -> &BwConfig {
        &self.cfg
    }
    fn config_mut(&mut self) -> &mut BwConfig {
        &mut self.cfg
    }

    fn layout(&self, role: Role) -> Layout {
        let plan = self.plan(role);
        let credits = self.counts_credits();
        let mut access = self.spec.access();
        // The peer writes its grants into a sender's credit words.
        access.remote_write |= credits && plan.sends;
        Layout {
            qps: self.cfg.qps,
            threads: self.cfg.threads,
            // A receiver's grant writes have send-queue room of their own.
            tx_depth: self.cfg.tx_depth
                + if credits && plan.recv.is_some() {
                    engine::bench::credit::GRANT_WRITES
                } else {
                    0
                },
            inline_size: self.cfg.inline_size,
            area: super::credit::area(self.cfg.buffer_per_qp(), credits),
            initiates: plan.sends,
            access,
            huge_pages: self.huge_pages,
            post_path: self.post_path,
            rx_depth: plan.recv.map_or(0, |_| self.cfg.rx_depth),
            recv_len: plan.recv.map_or(0, |r| r.recv_len),
        }
    }

    /// `--write_with_imm`.
    fn immediate(&self, _role: Role) -> Option<&'static str> {
        self.cfg.write_with_imm.then_some("--write_with_imm")
    }

    fn on_port(&mut self, port: &Port) {
        self.iwarp = port.ctx.transport() == verbs::Transport::Iwarp;
        if let Some(expect) = self.expect {
            let view = self.sysfs.port(port.ctx.name(), port.port);
            self.watch = Some(LinkWatch {
                expect,
                rate: view.rate().ok(),
                before: view.error_counters(),
                port: view,
                min_efficiency: self.min_efficiency,
            });
        }
    }

    /// As the default, refusing first (exit 2) a post list that receive
    /// credits could never cover.
    fn create_side(&mut self, port: Port, role: Role) -> anyhow::Result<Side> {
        if self.counts_credits() {
            super::credit::interval(&self.cfg)?;
        }
        Side::create(port, &self.layout(role))
    }

    fn banner(&self, role: Role, info: &mut BannerInfo) {
        let c = &self.cfg;
        let plan = self.plan(role);
        info.qps = c.qps;
        info.tx_depth = plan.sends.then_some(c.tx_depth);
        info.post_list = c.post_list;
        info.rx_depth = plan.recv.map(|_| c.rx_depth);
        info.cq_mod = c.cq_mod;
        info.poll_batch = POLL_BATCH as u32;
        info.bidirectional = c.bidirectional;
        info.inline_size = c.inline_size;
        info.extra.push(format!(" Threads         : {}", c.threads));
    }

    fn context(&self, ctx: RunContext) -> RunContext {
        RunContext {
            direction: Some(if self.cfg.bidirectional {
                "bidirectional"
            } else {
                "unidirectional"
            }),
            measured_on: match (
                self.plan(self.role).peer_receives,
                self.cfg.bidirectional,
                self.role,
            ) {
                (false, _, _) => None,
                (true, true, _) => Some("both sides' senders"),
                (true, false, Role::Client) => Some("sender"),
                (true, false, Role::Server) => Some("receiver"),
            },
            ..ctx
        }
    }

    fn table(&self, _role: Role) -> Option<Box<dyn Report>> {
        Some(match self.output {
            Some(f) => Box::new(FigureLines::new(f, self.style)),
            None => Box::new(Table::new(Stdout, self.style)),
        })
    }

    fn table_style(&self) -> TableStyle {
        self.style
    }

    fn prepare(&mut self, side: &Side, size: u64) -> anyhow::Result<()> {
        if self.spec.verb == Verb::Read && side.layout().initiates {
            side.zero_working()?;
        }
        if let Some(r) = self.plan(self.role).recv {
            // Messages that came after the last size stopped counting.
            side.drain_receives()?;
            if r.sends {
                side.zero_exposed(u64::from(r.recv_len).max(engine::bench::config::RING_BYTES))?;
            }
        }
        if self.spec.verb == Verb::Send && side.layout().initiates {
            side.fill_send_pattern(size)?;
        }
        if self.spec.is_atomic() && self.role == Role::Server {
            // The target's words count the operations of this size.
            side.zero_exposed(engine::bench::config::RING_BYTES)?;
        }
        Ok(())
    }

    fn run_size(&mut self, ctx: SizeCtx<'_>) -> anyhow::Result<Option<BwResult>> {
        let plan = self.plan(ctx.role);
        if !plan.sends && plan.recv.is_none() {
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
        if self.counts_credits() && self.credits.is_none() {
            let messages = self.cfg.buffer_per_qp();
            self.credits = Some(QpCredits::for_side(side, remote, &self.cfg, messages)?);
        }
        let cfg = &self.cfg;
        let run = SizeRun {
            plan,
            side,
            cfg,
            size,
            remote,
            timeout,
            system_cpu: self.style.cpu_column,
        };
        let credits = &mut self.credits;
        macro_rules! run {
            ($op:expr) => {
                ch.with_heartbeat(|w| measure($op, run, w, credits.as_deref_mut()))?
            };
        }
        let (measured, received) = match self.spec.verb {
            Verb::Write => run!(WriteOp {
                imm: cfg.write_with_imm
            }),
            Verb::Read => run!(ReadOp),
            Verb::Send => run!(SendOp),
            Verb::FetchAdd => run!(FetchAddOp),
            Verb::CmpSwap => run!(CmpSwapOp),
            Verb::WriteImm => anyhow::bail!(
                "{} has no bandwidth loop of its own (write_bw --write_with_imm)",
                self.spec.op_name()
            ),
        }?;
        if self.spec.verb == Verb::Read {
            let per_qp = measured.messages / u64::from(cfg.qps).max(1);
            // The passive peer hears heartbeats through the check too.
            let check = ch.with_heartbeat(|_| self.check_reads(side, size, per_qp))??;
            self.check = Some(check);
        }
        if plan.recv.is_some_and(|r| r.sends) {
            let bytes_checked = ch.with_heartbeat(|_| -> anyhow::Result<u64> {
                let mut bytes_checked = 0;
                for (q, &(slot, count)) in received.iter().enumerate() {
                    bytes_checked += side.check_received(q, size, slot, count)?;
                }
                Ok(bytes_checked)
            })??;
            self.check = Some(DataCheck { bytes_checked });
        }
        let mut result = BwResult::from_measurement(&measured);
        if !plan.sends {
            // A receiving side's own figures (perftest's send server).
            result.operations = measured.operations;
        }
        Ok(Some(result))
    }

    fn shown(
        &mut self,
        side: &Side,
        role: Role,
        _size: u64,
        mine: Option<&BwResult>,
        peer: Option<BwResult>,
    ) -> anyhow::Result<Option<Shown>> {
        if role == Role::Server && self.spec.is_atomic() {
            let client = peer.as_ref().context("the client sent no result")?;
            self.check = Some(check_atomics(side, client)?);
        }
        let (figures, peer_result) =
            shown_figures(role, &self.cfg, mine, peer).map_err(|e| anyhow::anyhow!(e))?;
        if let (Some(both), Some(m), Some(p)) = (&mut self.report_both, mine, &peer_result)
            && role == Role::Client
        {
            both.push((*m, *p));
        }
        self.best_gbps = self.best_gbps.max(figures.bw_avg_gbps);
        self.limits
            .observe(self.style.bandwidths(&figures).1, figures.msg_rate_mpps);
        Ok(Some(Shown {
            figures: Figures::Bw(figures),
            peer_result,
            histogram: None,
            data_check: self.check.take(),
            clock: None,
        }))
    }

    /// `--report-both`: perftest's "Local results" and "Remote results"
    /// tables after the summed one.
    fn after_table(&mut self, out: &mut crate::output::Output) -> std::io::Result<()> {
        let Some(both) = self.report_both.take().filter(|b| !b.is_empty()) else {
            return Ok(());
        };
        if self.output.is_some() {
            return Ok(());
        }
        let style = self.style;
        out.dump(|w| {
            for (title, pick) in [("Local", 0), ("Remote", 1)] {
                writeln!(w, "{RESULT_LINE}\n {title} results: \n{RESULT_LINE}")?;
                writeln!(w, "{}", Table::<Vec<u8>>::header(style))?;
                for (mine, peer) in &both {
                    let r = if pick == 0 { mine } else { peer };
                    writeln!(w, "{}", Table::<Vec<u8>>::row(r, style))?;
                }
            }
            writeln!(w, "{RESULT_LINE}")?;
            w.flush()
        })
    }

    fn verdicts(&mut self, _side: &Side) -> Vec<VerdictRecord> {
        // perftest checks its limits where a side measured (both sides of
        // a bidirectional run); the runner asks only the client for its
        // verdicts, so here the client judges.
        let mut verdicts = if self.plan(self.role).sends {
            self.limits.verdicts(self.style.unit.label())
        } else {
            Vec::new()
        };
        let Some(w) = self.watch.take() else {
            return verdicts;
        };
        let after = w.port.error_counters();
        verdicts.push(VerdictRecord::Link(link::evaluate(&VerdictInput {
            expect: w.expect,
            negotiated: w.rate,
            min_efficiency: w.min_efficiency,
            measured_gbps: self.best_gbps,
            directions: if self.cfg.bidirectional { 2 } else { 1 },
            rises: link::rises(&w.before, &after),
        })));
        verdicts
    }
}
