//! Rank 0's coordinator: gathers the ranks, sends the table, runs the
//! rounds, judges, writes the report. The decisions are
//! `engine::cluster`'s state machines (`Gathering`, `RoundTracker`,
//! `judge`); this driver moves frames: one thread accepts, one thread per
//! rank reads its connection and forwards what it reads as an [`Event`],
//! and this thread, the only one that decides, waits on those events
//! with the machines' deadlines. One connection per rank; the pairs'
//! connections are the ranks' own.

use std::collections::HashMap;
use std::io::{IsTerminal as _, Write as _};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread;
use std::time::{Duration, Instant};

use engine::cluster::html;
use engine::cluster::pair_test::PairTest;
use engine::cluster::rails;
use engine::cluster::rendezvous::{
    Gathering, GatheringState, Identity, RoundReport, RoundState, RoundTracker,
};
use engine::cluster::report::{self, Roster};
use engine::cluster::schedule::{self, Pattern, Rank, Round, Schedule};
use engine::cluster::verdict::{self, Measurement, NodeFacts, Outcome};
use engine::fabric::link::CounterRise;
use engine::proto::wire::Message;

use super::{ClusterPlan, ScheduleChoice};
use crate::oob::{Channel, Listener};
use crate::stop::{self, Interrupted};
use crate::wait::{self, Woke};

/// How long an arriving connection has to send its whole join.
const JOIN_BOUND: Duration = Duration::from_secs(10);

/// The longest the coordinator sleeps before it looks at signals.
const TICK: Duration = Duration::from_millis(500);

/// What the reading threads tell the coordinator.
#[derive(Debug)]
enum Event {
    /// A connection sent its join; `writer` sends to it.
    Joined {
        conn: u64,
        identity: Identity,
        writer: Channel,
    },
    /// A joined connection sent a message.
    Said { conn: u64, msg: Message },
    /// A joined connection closed or failed.
    Closed { conn: u64, why: String },
}

/// The ranks' connections, by connection and by rank.
#[derive(Debug, Default)]
struct Ranks {
    rank_of: HashMap<u64, Rank>,
    writer: HashMap<Rank, (u64, Channel)>,
}

impl Ranks {
    /// The rank of a connection that is still the rank's.
    fn rank(&self, conn: u64) -> Option<Rank> {
        let r = *self.rank_of.get(&conn)?;
        (self.writer.get(&r)?.0 == conn).then_some(r)
    }

    /// Sends to rank `r`; `false` when it cannot be reached (it is then
    /// dropped).
    fn send(&mut self, r: Rank, msg: &Message) -> bool {
        let ok = self
            .writer
            .get_mut(&r)
            .is_some_and(|(_, ch)| ch.send(msg).is_ok());
        if !ok {
            self.writer.remove(&r);
        }
        ok
    }
}

/// Runs the coordinator on `listener`; the run's exit code.
///
/// # Errors
/// A signal, or a failure to write the report.
pub fn run(plan: &ClusterPlan, listener: &Listener) -> anyhow::Result<u8> {
    let started = Instant::now();
    let test = &plan.test;
    let (tx, rx) = mpsc::channel();
    let gathered = Arc::new(AtomicBool::new(false));
    // Every wait of a reader: the longest rank 0 itself may be silent
    // (the gathering, a round) and a margin.
    let silence = plan.rendezvous_timeout.max(test.round_budget()) + Duration::from_secs(30);
    thread::scope(|s| -> anyhow::Result<u8> {
        let accepting = {
            let gathered = gathered.clone();
            let tx = tx.clone();
            thread::Builder::new()
                .name("accept".into())
                .spawn_scoped(s, move || accept(listener, &tx, &gathered, silence))?
        };
        drop(tx);
        let result = coordinate(plan, &rx, &gathered, started);
        gathered.store(true, Ordering::Relaxed);
        let _ = accepting.join();
        result
    })
}

/// Accepts connections until the gathering ends; each gets a reading
/// thread.
fn accept(listener: &Listener, tx: &Sender<Event>, gathered: &AtomicBool, silence: Duration) {
    let mut conn = 0u64;
    while !gathered.load(Ordering::Relaxed) {
        match listener.try_accept() {
            Ok(Some((stream, _))) => {
                conn += 1;
                let tx = tx.clone();
                let id = conn;
                let spawned = thread::Builder::new()
                    .name(format!("rank-conn-{id}"))
                    .stack_size(128 << 10)
                    .spawn(move || read_rank(stream, id, &tx, silence));
                if let Err(e) = spawned {
                    eprintln!(
                        "rdmaperf cluster: coordinator: cannot read a rank's connection: {e}"
                    );
                }
            }
            Ok(None) => match wait::until_readable(&[listener.fd()], Some(Instant::now() + TICK)) {
                Ok(Woke::Stop(_)) => return,
                Ok(_) => {}
                Err(e) => {
                    eprintln!("rdmaperf cluster: coordinator: waiting for ranks: {e}");
                    return;
                }
            },
            Err(e) => {
                eprintln!("rdmaperf cluster: coordinator: accepting a rank: {e}");
                thread::sleep(TICK);
            }
        }
    }
}

/// One rank's connection: its join (within [`JOIN_BOUND`]; anything
/// else — a port scan, another protocol — is dropped), then every
/// message it sends, until it closes or is silent past `silence`.
fn read_rank(stream: TcpStream, conn: u64, tx: &Sender<Event>, silence: Duration) {
    let channels = stream
        .try_clone()
        .map_err(anyhow::Error::from)
        .and_then(|w| Ok((Channel::new(stream, JOIN_BOUND)?, Channel::new(w, silence)?)));
    let Ok((mut reader, writer)) = channels else {
        return;
    };
    let identity = match reader.recv_first("a rank's join") {
        Ok(Message::ClusterJoin { identity }) => *identity,
        Ok(other) => {
            eprintln!(
                "rdmaperf cluster: coordinator: {} sent {} instead of a join: dropped",
                reader.peer(),
                other.name()
            );
            return;
        }
        Err(e) => {
            eprintln!("rdmaperf cluster: coordinator: dropped a connection: {e:#}");
            return;
        }
    };
    reader.set_timeout(silence);
    if tx
        .send(Event::Joined {
            conn,
            identity,
            writer,
        })
        .is_err()
    {
        return;
    }
    loop {
        let event = match reader.recv("a rank's report") {
            Ok(msg) => Event::Said { conn, msg },
            Err(e) => Event::Closed {
                conn,
                why: format!("{e:#}"),
            },
        };
        let closed = matches!(event, Event::Closed { .. });
        if tx.send(event).is_err() || closed {
            return;
        }
    }
}

/// The next event before `deadline`, waking every [`TICK`] to look at
/// signals; `None` at the deadline.
fn next_event(rx: &Receiver<Event>, deadline: Instant) -> anyhow::Result<Option<Event>> {
    loop {
        if let Some(sig) = stop::requested() {
            return Err(Interrupted(sig).into());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        match rx.recv_timeout(left.min(TICK)) {
            Ok(e) => return Ok(Some(e)),
            Err(RecvTimeoutError::Timeout) => {}
            // Nobody left to hear from: wait out the deadline.
            Err(RecvTimeoutError::Disconnected) => thread::sleep(left.min(TICK)),
        }
    }
}

/// The coordinator's decisions, from the gathering to the end.
fn coordinate(
    plan: &ClusterPlan,
    rx: &Receiver<Event>,
    gathered: &AtomicBool,
    started: Instant,
) -> anyhow::Result<u8> {
    let size = plan.launch.size;
    let test = &plan.test;
    let mut ranks = Ranks::default();
    let mut gathering = Gathering::new(
        size,
        env!("CARGO_PKG_VERSION"),
        started,
        plan.rendezvous_timeout,
    );
    while let GatheringState::Waiting(deadline) = gathering.poll(Instant::now()) {
        match next_event(rx, deadline)? {
            None => {}
            Some(Event::Joined {
                conn,
                identity,
                mut writer,
            }) => {
                let rank = identity.rank;
                match gathering.join(identity) {
                    Ok(()) => {
                        ranks.rank_of.insert(conn, rank);
                        ranks.writer.insert(rank, (conn, writer));
                    }
                    Err(e) => {
                        eprintln!("rdmaperf cluster: coordinator: refused: {e}");
                        writer.send_error(&format!("rank 0 refused this rank: {e}"));
                    }
                }
            }
            Some(Event::Closed { conn, .. }) => {
                if let Some(r) = ranks.rank(conn) {
                    gathering.left(r);
                    ranks.writer.remove(&r);
                }
            }
            Some(Event::Said { .. }) => {}
        }
    }
    gathered.store(true, Ordering::Relaxed);
    let members = gathering.close();
    let mut alive: Vec<bool> = members.iter().map(Option::is_some).collect();
    let hosts: Vec<Option<String>> = members
        .iter()
        .map(|m| m.as_ref().map(|m| m.host.clone()))
        .collect();
    let never_came: Vec<Rank> = (0..size).filter(|&r| !alive[r as usize]).collect();
    for &r in &never_came {
        eprintln!("rdmaperf cluster: rank {r} did not join within --rendezvous-timeout");
    }
    let present: Vec<Identity> = members.iter().flatten().cloned().collect();
    let table = Message::ClusterTable {
        members: present,
        missing: never_came.clone(),
        config: serde_json::to_value(test)?,
    };
    for r in 0..size {
        if alive[r as usize] && !ranks.send(r, &table) {
            alive[r as usize] = false;
        }
    }
    let (pattern, schedule) = match build_schedule(plan, &hosts) {
        Ok(s) => s,
        Err(e) => {
            let line = format!("rdmaperf cluster: {e}");
            end_all(&mut ranks, size, 2, &line);
            return Err(crate::UsageError(e).into());
        }
    };
    let mut out = crate::output::Stdout;
    let plan_text = match pattern {
        Some(p) => report::plan_line(p, size, &schedule, test.typical_round_s()),
        None => format!(
            "plan: pairs file of {size} ranks: {} pairs in {} rounds",
            schedule.pair_count(),
            schedule.rounds.len()
        ),
    };
    // Per rank, the rails it tests on (a pair runs on the rails both have).
    let rail_counts: Vec<u32> = members
        .iter()
        .map(|m| m.as_ref().map_or(1, Identity::rail_count))
        .collect();
    let most_rails = rail_counts.iter().copied().max().unwrap_or(1);
    let plan_text = if most_rails > 1 {
        format!(
            "{plan_text}; each pair on the rails both ranks have (up to {most_rails}), all at once"
        )
    } else {
        plan_text
    };
    writeln!(out, "{plan_text}").map_err(crate::stdout_write_error)?;
    let mut all: Vec<Measurement> = Vec::new();
    let mut index = 0u32;
    let mut round_times: Vec<Duration> = Vec::new();
    let mut unmeasured = 0usize;
    let cpu_at_start = thread_cpu();
    // Per rank: the error counters of its port that rose (its last report's).
    let mut port_errors: Vec<Vec<CounterRise>> = vec![Vec::new(); size as usize];
    let mut run_rounds = |rounds: &[Round],
                          all: &mut Vec<Measurement>,
                          alive: &mut Vec<bool>,
                          ranks: &mut Ranks,
                          label: &str|
     -> anyhow::Result<()> {
        for (k, round) in rounds.iter().enumerate() {
            let round_started = Instant::now();
            let got = run_round(
                (index, round),
                test,
                rx,
                alive,
                ranks,
                &mut port_errors,
                &rail_counts,
            )?;
            round_times.push(round_started.elapsed());
            unmeasured += got
                .iter()
                .filter(|m| !matches!(m.outcome, Outcome::Measured { .. }))
                .count();
            all.extend(got);
            index += 1;
            progress(&format!(
                "rdmaperf cluster: {label} {} of {}: {} pairs; {unmeasured} directions in error or with a peer missing so far",
                k + 1,
                rounds.len(),
                round.pairs.len()
            ));
        }
        Ok(())
    };
    run_rounds(&schedule.rounds, &mut all, &mut alive, &mut ranks, "round")?;
    // What each rank said about its port: its rate (--expect-rate auto).
    let rates: Vec<(Option<f64>, Vec<Option<f64>>)> = members
        .iter()
        .map(|m| match m {
            Some(m) => (m.rate_gbps, m.rails.iter().map(|r| r.rate_gbps).collect()),
            None => (None, Vec::new()),
        })
        .collect();
    // And its rails: a count or rate unlike most ranks' fails it.
    let rail_findings = rails::findings(
        &members
            .iter()
            .map(|m| m.as_ref().map(|m| m.rails.clone()).unwrap_or_default())
            .collect::<Vec<_>>(),
    );
    if pattern == Some(Pattern::Quick) {
        let missing: Vec<Rank> = (0..size).filter(|&r| !alive[r as usize]).collect();
        // The retest is about figures: port errors are judged at the end.
        let facts = node_facts(&rates, &[], &[], &[]);
        let first =
            verdict::judge_with(size, &missing, &all, &plan.coordinating.thresholds, &facts);
        let (suspects, good) = verdict::retest_candidates(size, &all, &first);
        let suspects: Vec<Rank> = suspects
            .into_iter()
            .filter(|&r| alive[r as usize])
            .collect();
        let good: Vec<Rank> = good.into_iter().filter(|&r| alive[r as usize]).collect();
        let met = |a: Rank, b: Rank| {
            all.iter()
                .any(|m| (m.from == a && m.to == b) || (m.from == b && m.to == a))
        };
        let retest = schedule::retest(size, &suspects, &good, &met);
        if !retest.is_empty() {
            writeln!(
                out,
                "plan: retest of {} suspect ranks against known-good ones: {} rounds",
                suspects.len(),
                retest.len()
            )
            .map_err(crate::stdout_write_error)?;
            run_rounds(&retest, &mut all, &mut alive, &mut ranks, "retest round")?;
        }
    }
    progress_done();
    if let Some(line) = round_time_line(&round_times, thread_cpu().saturating_sub(cpu_at_start)) {
        eprintln!("rdmaperf cluster: {line}");
    }
    let judging = Instant::now();
    let missing: Vec<Rank> = (0..size).filter(|&r| !alive[r as usize]).collect();
    let facts = node_facts(
        &rates,
        &port_errors,
        &plan.coordinating.ignore_counters,
        &rail_findings,
    );
    let judged = verdict::judge_with(size, &missing, &all, &plan.coordinating.thresholds, &facts);
    eprintln!(
        "rdmaperf cluster: judged {} directions in {:.1?}",
        all.len(),
        judging.elapsed()
    );
    let devices: Vec<Option<String>> = members
        .iter()
        .map(|m| m.as_ref().map(|m| m.device.clone()))
        .collect();
    // The rails each rank tested on, by name.
    let rail_devices: Vec<Vec<String>> = members
        .iter()
        .map(|m| match m {
            Some(m) if m.rail_count() > 1 => m
                .rails
                .iter()
                .take(m.rail_count() as usize)
                .map(rails::Rail::name)
                .collect(),
            _ => Vec::new(),
        })
        .collect();
    let roster = Roster {
        hosts: &hosts,
        devices: &devices,
        rails: &rail_devices,
    };
    let took = started.elapsed().as_secs_f64();
    let node_lines = report::node_lines(&judged, roster);
    let code = judged.exit_code();
    for line in &node_lines {
        writeln!(out, "{line}").map_err(crate::stdout_write_error)?;
    }
    for line in report::failure_lines(&all, &judged, roster) {
        writeln!(out, "{line}").map_err(crate::stdout_write_error)?;
    }
    let measured = all.iter().filter_map(Measurement::bw).collect();
    writeln!(out, "{}", spread_line("bandwidth", measured)).map_err(crate::stdout_write_error)?;
    // With several rails: what two nodes move between them at once, every
    // rail added up (on stdout and in the report).
    let pair_sums = if judged.rail_count() > 1 {
        report::pair_sums(&all, &judged, roster)
    } else {
        Vec::new()
    };
    if !pair_sums.is_empty() {
        let sums = pair_sums
            .iter()
            .filter(|s| s.rails_measured > 0)
            .map(|s| s.bw_gbps_sum)
            .collect();
        writeln!(
            out,
            "{}",
            spread_line("bandwidth of a node pair, its rails added up", sums)
        )
        .map_err(crate::stdout_write_error)?;
    }
    writeln!(
        out,
        "cluster: {} in {took:.1} s: exit code {code}",
        if judged.pass() { "PASS" } else { "FAIL" }
    )
    .map_err(crate::stdout_write_error)?;
    // The report before the ranks' end: a launcher (mpirun) may kill
    // rank 0 once another rank exits non-zero. The ranks' last wait
    // allows for it (`rank::END_BOUND_PER_RANK`).
    let written = match &plan.coordinating.report {
        Some(dir) => super::report_files::write_report(
            dir,
            &all,
            &judged,
            &pair_sums,
            roster,
            html::PageFacts {
                plan: &plan_text,
                test: &test.describe(),
                duration_s: took,
            },
            plan.coordinating.report_options,
        ),
        None => Ok(()),
    };
    for r in 0..size {
        let line = node_lines.get(r as usize).cloned().unwrap_or_default();
        ranks.send(
            r,
            &Message::ClusterEnd {
                exit_code: code,
                line,
            },
        );
    }
    written?;
    Ok(code)
}

/// Each rank's [`NodeFacts`]: its port's rate and the error counters that
/// rose (none when `port_errors` is empty), but those `ignore` names
/// (`--ignore-counter`: a name, or a prefix ending in `*`).
fn node_facts(
    rates: &[(Option<f64>, Vec<Option<f64>>)],
    port_errors: &[Vec<CounterRise>],
    ignore: &[String],
    rail_findings: &[Vec<String>],
) -> Vec<NodeFacts> {
    let ignored = |name: &str| {
        // A rail's counter is named after its port: `mlx5_1:1 counters/...`.
        let name = name.rsplit(' ').next().unwrap_or(name);
        ignore.iter().any(|i| match i.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == i,
        })
    };
    rates
        .iter()
        .enumerate()
        .map(|(r, (rate_gbps, rail_rates))| NodeFacts {
            rate_gbps: *rate_gbps,
            rail_rates_gbps: rail_rates.clone(),
            port_errors: port_errors
                .get(r)
                .map(|e| e.iter().filter(|c| !ignored(&c.name)).cloned().collect())
                .unwrap_or_default(),
            rail_findings: rail_findings.get(r).cloned().unwrap_or_default(),
        })
        .collect()
}

/// Tells every rank the run is over with `code` and `line`.
fn end_all(ranks: &mut Ranks, size: u32, code: u8, line: &str) {
    for r in 0..size {
        ranks.send(
            r,
            &Message::ClusterEnd {
                exit_code: code,
                line: line.to_owned(),
            },
        );
    }
}

/// The schedule rank 0's flags ask for (`None` as the pattern: a pairs
/// file).
///
/// # Errors
/// The pairs file's first bad line.
fn build_schedule(
    plan: &ClusterPlan,
    hosts: &[Option<String>],
) -> Result<(Option<Pattern>, Schedule), String> {
    let size = plan.launch.size;
    let built = match &plan.coordinating.schedule {
        ScheduleChoice::Pattern(p) => match p {
            Pattern::AllPairs => schedule::all_pairs(size),
            Pattern::Quick => schedule::quick(size),
            Pattern::Ring => schedule::ring(size),
        }
        .map(|s| (Some(*p), s)),
        ScheduleChoice::PairsFile(text) => {
            // A host name names its rank when one rank runs there.
            let names = |name: &str| -> Option<Rank> {
                let mut on = hosts
                    .iter()
                    .enumerate()
                    .filter(|(_, h)| h.as_deref() == Some(name));
                match (on.next(), on.next()) {
                    (Some((r, _)), None) => Rank::try_from(r).ok(),
                    _ => None,
                }
            };
            schedule::from_pairs_file(text, &names, size).map(|s| (None, s))
        }
    };
    built.map_err(|e| format!("--pairs-file/--pattern: {e}"))
}

/// One round: each live rank is sent its partner (or none), the reports
/// are collected until all came or the round's budget passed; ranks that
/// close their connection or stay silent are dropped from the run.
fn run_round(
    (index, round): (u32, &Round),
    test: &PairTest,
    rx: &Receiver<Event>,
    alive: &mut [bool],
    ranks: &mut Ranks,
    port_errors: &mut [Vec<CounterRise>],
    rail_counts: &[u32],
) -> anyhow::Result<Vec<Measurement>> {
    let size = alive.len();
    let mut partner: Vec<Option<(Rank, bool)>> = vec![None; size];
    for p in &round.pairs {
        partner[p.server as usize] = Some((p.client, true));
        partner[p.client as usize] = Some((p.server, false));
    }
    let mut lost = Vec::new();
    for (r, slot) in partner.iter().enumerate() {
        let rank = r as Rank;
        if !alive[r] {
            continue;
        }
        let msg = Message::ClusterRound {
            round: index,
            partner: slot.map(|(p, _)| p),
            serve: slot.is_some_and(|(_, s)| s),
        };
        if !ranks.send(rank, &msg) {
            lost.push(rank);
        }
    }
    let mut tracker = RoundTracker::start(index, round, alive, Instant::now(), test.round_budget())
        .with_rails(rail_counts.to_vec());
    for r in lost {
        eprintln!("rdmaperf cluster: rank {r} cannot be reached: dropped from the run");
        tracker.lost(r);
        alive[r as usize] = false;
    }
    loop {
        let deadline = match tracker.poll(Instant::now()) {
            RoundState::Done => break,
            RoundState::Waiting(d) => d,
        };
        match next_event(rx, deadline)? {
            None => {}
            Some(Event::Said {
                conn,
                msg:
                    Message::ClusterReport {
                        round,
                        measurements,
                        port_errors: risen,
                    },
            }) if round == index => {
                if let Some(rank) = ranks.rank(conn) {
                    if let Some(slot) = port_errors.get_mut(rank as usize) {
                        *slot = risen;
                    }
                    tracker.report(RoundReport { rank, measurements });
                }
            }
            Some(Event::Said { .. }) => {}
            Some(Event::Closed { conn, why }) => {
                if let Some(rank) = ranks.rank(conn) {
                    eprintln!(
                        "rdmaperf cluster: rank {rank} left in round {index}: {why}; its pairs are 'peer missing' from now on"
                    );
                    tracker.lost(rank);
                    alive[rank as usize] = false;
                    ranks.writer.remove(&rank);
                }
            }
            Some(Event::Joined {
                mut writer,
                identity,
                ..
            }) => {
                writer.send_error(&format!(
                    "rank {} arrived after the rendezvous ended",
                    identity.rank
                ));
            }
        }
    }
    let (measurements, silent) = tracker.finish();
    for r in silent {
        eprintln!(
            "rdmaperf cluster: rank {r} sent no report within round {index}'s bound of {:?}: dropped from the run",
            test.round_budget()
        );
        alive[r as usize] = false;
        ranks.writer.remove(&r);
    }
    Ok(measurements)
}

/// A round's progress line on stderr: rewritten in place on a terminal
/// (a progress bar of one line), one line each in a log.
fn progress(line: &str) {
    if std::io::stderr().is_terminal() {
        crate::session::show_progress(line);
    } else {
        eprintln!("{line}");
    }
}

/// Ends the progress line on a terminal.
fn progress_done() {
    if std::io::stderr().is_terminal() {
        eprintln!();
    }
}

/// The rounds' wall times and the deciding thread's CPU time over them,
/// e.g. `1023 rounds: mean 12.3 ms, max 40.1 ms a round; the
/// coordinator's thread 1.2 ms of CPU a round` (with `--simulate`: the
/// cost of a round without its tests).
fn round_time_line(times: &[Duration], cpu: Duration) -> Option<String> {
    let max = times.iter().max()?;
    let n = u32::try_from(times.len()).ok()?;
    let mean = times.iter().sum::<Duration>() / n;
    Some(format!(
        "{} rounds: mean {:.1} ms, max {:.1} ms a round; the coordinator's thread {:.2} ms of CPU a round",
        times.len(),
        mean.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3,
        (cpu / n).as_secs_f64() * 1e3
    ))
}

/// This thread's CPU time so far (user and system).
fn thread_cpu() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_THREAD).map_or(Duration::ZERO, |u| {
        let t = u.user_time() + u.system_time();
        Duration::new(
            u64::try_from(t.tv_sec()).unwrap_or(0),
            u32::try_from(t.tv_usec()).unwrap_or(0) * 1_000,
        )
    })
}

/// The spread of figures `bw` under `label`: `bandwidth: min 5.1 median
/// 5.6 max 5.9 Gb/s over 12 directions`.
fn spread_line(label: &str, mut bw: Vec<f64>) -> String {
    if bw.is_empty() {
        return format!("{label}: no direction measured");
    }
    bw.sort_by(f64::total_cmp);
    let median = bw[bw.len() / 2];
    format!(
        "{label}: min {} median {} max {} Gb/s over {} directions",
        verdict::gbps(bw[0]),
        verdict::gbps(median),
        verdict::gbps(bw[bw.len() - 1]),
        bw.len()
    )
}
