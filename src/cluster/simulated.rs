//! `--simulate-ranks N`: a whole job on one machine, to check the
//! coordinator at scale. This process is rank 0's coordinator, its real
//! driver on a real listener; the N ranks are lightweight state machines
//! in helper processes (this binary again, `--simulate-fleet
//! FIRST:LAST`, up to [`RANKS_PER_PROCESS`] each), each rank a real TCP
//! connection to rank 0 on loopback, all of a process's ranks on one
//! event loop (mio). No rank binds a pair listener and no pair connects:
//! a direction's figure is `--simulate`'s fabricated one, its report
//! comes after 2 × `--simulate-ms`.
//!
//! Why helper processes: rank 0 holds a descriptor per rank, and a rank
//! holds one too; 16,384 ranks in one process would need 32,768, above
//! the hard open-files limit of many machines (20,000 where this was
//! built). Split, rank 0's process needs N + a margin and each helper
//! 4,096 + a margin, and rank 0's real I/O path — accept, the frames,
//! the out-queues, the machine — is what is under test.
//!
//! Faults on demand, each a rank's behaviour: `--simulate-absent RANK`
//! (never joins), `--simulate-die RANK:ROUND` (closes its connection when
//! that round starts), `--simulate-mute RANK` (stops reading once the
//! run starts, and never reports), beside `--simulate-slow`.

use std::collections::VecDeque;
use std::io::{self, Read as _, Write as _};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use engine::cluster::messages::ClusterMessage;
use engine::cluster::pair_test::PairTest;
use engine::cluster::rendezvous::{self, Identity};
use engine::cluster::schedule::Rank;
use engine::fabric::link::CounterRise;
use engine::proto::wire::{self, FrameReader};
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

use super::{ClusterArgs, coordinator, pair, rank};
use crate::exit::UsageError;
use crate::oob::Listener;

/// Most simulated ranks one helper process runs.
pub const RANKS_PER_PROCESS: u32 = 4_096;

/// Most connections a helper process has in progress at once (the rest
/// wait their turn), so that thousands of ranks do not flood rank 0's
/// listen backlog together.
const CONNECTING_AT_ONCE: usize = 512;

/// How long the helpers are given to end after rank 0 has.
const FLEET_GRACE: Duration = Duration::from_secs(10);

/// `--simulate-die RANK:ROUND`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeathSpot {
    /// The rank.
    pub rank: Rank,
    /// The round in which it closes its connection.
    pub round: u32,
}

/// `--simulate-die`'s `RANK:ROUND`.
///
/// # Errors
/// Text that is not two numbers.
pub fn death_spot(s: &str) -> Result<DeathSpot, String> {
    let bad = || format!("'{s}' is not RANK:ROUND");
    let (r, k) = s.split_once(':').ok_or_else(bad)?;
    Ok(DeathSpot {
        rank: r.parse().map_err(|_| bad())?,
        round: k.parse().map_err(|_| bad())?,
    })
}

/// `--simulate-fleet`'s `FIRST:LAST` (inclusive).
///
/// # Errors
/// Text that is not two ordered numbers.
pub fn rank_range(s: &str) -> Result<(Rank, Rank), String> {
    let bad = || format!("'{s}' is not FIRST:LAST");
    let (a, b) = s.split_once(':').ok_or_else(bad)?;
    let (a, b): (Rank, Rank) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
    if a > b {
        return Err(bad());
    }
    Ok((a, b))
}

/// `--simulate-ranks N`: rank 0's coordinator here, the ranks in helper
/// processes; the run's exit code (the coordinator's).
///
/// # Errors
/// Usage errors (exit 2), and failures to start the helpers.
pub fn run(args: &ClusterArgs, n: u32) -> anyhow::Result<u8> {
    let max = engine::cluster::schedule::MAX_RANKS;
    if !(2..=max).contains(&n) {
        return Err(UsageError(format!("--simulate-ranks {n}: 2 to {max}")).into());
    }
    if args.rank.is_some() || args.size.is_some() {
        return Err(
            UsageError("--simulate-ranks sets every rank: not with --rank/--size".into()).into(),
        );
    }
    let faults = args
        .simulate_absent
        .iter()
        .chain(&args.simulate_mute)
        .copied()
        .chain(args.simulate_die.iter().map(|d| d.rank));
    if let Some(bad) = faults.into_iter().find(|&r| r >= n) {
        return Err(UsageError(format!(
            "--simulate-absent/-die/-mute {bad}: the job has {n} ranks"
        ))
        .into());
    }
    if let Some(list) = &args.simulate_hosts {
        let hosts = simulated_hosts(list)?;
        if hosts.len() != n as usize {
            return Err(UsageError(format!(
                "--simulate-hosts names {} hosts for {n} ranks: give one per rank",
                hosts.len()
            ))
            .into());
        }
    }
    if !args.simulate_slow_switch.is_empty() {
        let Some(path) = &args.topology else {
            return Err(UsageError("--simulate-slow-switch needs --topology".into()).into());
        };
        let topology = read_topology(path)?;
        if let Some(bad) = args
            .simulate_slow_switch
            .iter()
            .find(|s| topology.switch_index(&s.name).is_none())
        {
            return Err(UsageError(format!(
                "--simulate-slow-switch {}: no switch of that name in --topology {}",
                bad.name,
                path.display()
            ))
            .into());
        }
    }
    // Rank 0's listener first, held: the helpers dial a port that listens.
    let listener = Listener::bind("127.0.0.1", 0).context("rank 0's listener for the ranks")?;
    let port = listener.port();
    let mut a = args.clone();
    a.simulate = true;
    a.simulate_ranks = None;
    a.rank = Some(0);
    a.size = Some(n);
    a.coordinator = Some(format!("127.0.0.1:{port}"));
    // No launcher's variables: the flags say who is who.
    let plan = a.plan(&|_| None)?;
    // The rails the helpers will read: a rail this node lacks is a usage
    // error now, not ranks that never come.
    rank::node_rails(&plan)?;
    coordinator::ensure_open_files(
        coordinator::descriptors_needed(n),
        &format!("--simulate-ranks {n} (rank 0 holds a connection per rank)"),
    )?;
    let processes = n.div_ceil(RANKS_PER_PROCESS);
    eprintln!(
        "rdmaperf cluster: simulating {n} ranks in {processes} helper process{}, coordinator 127.0.0.1:{port}",
        if processes == 1 { "" } else { "es" }
    );
    let exe = std::env::current_exe().context("finding this program to start the ranks")?;
    let started = Instant::now();
    let mut fleet: Vec<Child> = Vec::new();
    for p in 0..processes {
        let first = p * RANKS_PER_PROCESS;
        let last = (first + RANKS_PER_PROCESS).min(n) - 1;
        let spawned = Command::new(&exe)
            .arg("cluster")
            .args(fleet_args(args, n, port, (first, last)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .context("starting the simulated ranks");
        match spawned {
            Ok(c) => fleet.push(c),
            Err(e) => {
                end_fleet(&mut fleet, Duration::ZERO);
                return Err(e);
            }
        }
    }
    let code = coordinator::run(&plan, &listener, started);
    drop(listener);
    end_fleet(&mut fleet, FLEET_GRACE);
    code
}

/// The flags of the helper process for ranks `first..=last`: what a rank
/// needs (its rails, its sysfs, its faults); the test itself comes from
/// rank 0.
fn fleet_args(args: &ClusterArgs, n: u32, port: u16, (first, last): (Rank, Rank)) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "--simulate-fleet".into(),
        format!("{first}:{last}"),
        "--size".into(),
        n.to_string(),
        "--coordinator".into(),
        format!("127.0.0.1:{port}"),
        "--rendezvous-timeout".into(),
        args.rendezvous_timeout.as_secs().max(1).to_string(),
        "--sysfs-root".into(),
        args.sysfs_root.display().to_string(),
    ];
    let mut flag = |f: &str, value: String| {
        v.push(f.into());
        v.push(value);
    };
    if let Some(r) = &args.rails {
        flag("--rails", r.clone());
    }
    if let Some(d) = &args.device.ib_dev {
        flag("-d", d.clone());
    }
    if let Some(i) = args.device.ib_port {
        flag("-i", i.to_string());
    }
    for s in &args.simulate_slow {
        flag(
            "--simulate-slow",
            match s.rail {
                Some(k) => format!("{}:{k}", s.rank),
                None => s.rank.to_string(),
            },
        );
    }
    for r in &args.simulate_absent {
        flag("--simulate-absent", r.to_string());
    }
    if let Some(h) = &args.simulate_hosts {
        flag("--simulate-hosts", h.clone());
    }
    if let Some(t) = &args.topology {
        flag("--topology", t.display().to_string());
    }
    for s in &args.simulate_slow_switch {
        flag(
            "--simulate-slow-switch",
            match s.rail {
                Some(k) => format!("{}:{k}", s.name),
                None => s.name.clone(),
            },
        );
    }
    for r in &args.simulate_mute {
        flag("--simulate-mute", r.to_string());
    }
    for d in &args.simulate_die {
        flag("--simulate-die", format!("{}:{}", d.rank, d.round));
    }
    v
}

/// Waits up to `grace` for the helpers to end, then kills those left.
fn end_fleet(fleet: &mut [Child], grace: Duration) {
    let until = Instant::now() + grace;
    for c in fleet.iter_mut() {
        loop {
            match c.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
                Ok(None) => {
                    let _ = c.kill();
                    let _ = c.wait();
                    break;
                }
            }
        }
    }
}

/// Where one simulated rank stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Not connected: tries again at this time.
    Waiting(Instant),
    /// Its connection is being made.
    Connecting,
    /// Joined: answers rank 0.
    Running,
    /// Over (ended, refused, dead or gone).
    Over,
}

/// One simulated rank.
#[derive(Debug)]
struct SimRank {
    rank: Rank,
    stage: Stage,
    stream: Option<TcpStream>,
    reader: FrameReader,
    out: VecDeque<u8>,
    /// The test, from rank 0's start.
    test: Option<PairTest>,
    /// A report held until its time (`--simulate-ms`).
    due: Option<(Instant, Vec<u8>)>,
    attempts: u32,
}

/// What all the ranks of a helper share: their node's rails, ports and
/// faults.
struct Node {
    args: ClusterArgs,
    rails: Vec<engine::cluster::rails::Rail>,
    /// The rails it tests on (a side each).
    sides: usize,
    ports: Vec<rank::PortWatch>,
    risen: (Instant, Vec<CounterRise>),
    size: u32,
    host: String,
    /// `--simulate-hosts`: each rank's host (empty: all on this host).
    hosts: Vec<String>,
    /// With `--simulate-slow-switch`: where the slow switches are.
    slow_switches: Option<SlowLeaves>,
}

/// `--simulate-slow-switch` in a helper: each rank's leaf (by its host,
/// in `--topology`) and the slow leaves, each with its rail (`None`:
/// every rail).
struct SlowLeaves {
    leaf: Vec<Option<u32>>,
    slow: Vec<(u32, Option<u32>)>,
}

impl Node {
    /// The error counters of this node's ports that rose since the start
    /// (read at most every 100 ms, whatever the ranks).
    fn risen(&mut self) -> Vec<CounterRise> {
        if self.risen.0.elapsed() > Duration::from_millis(100) {
            let several = self.ports.len() > 1;
            let mut all: Vec<CounterRise> =
                self.ports.iter().flat_map(|p| p.risen(several)).collect();
            all.truncate(engine::cluster::messages::MAX_REPORT_PORT_ERRORS);
            self.risen = (Instant::now(), all);
        }
        self.risen.1.clone()
    }

    /// Whether `me` → `partner` on `rail` gets a slow figure: either rank
    /// is `--simulate-slow` there, or the direction crosses the uplinks
    /// of a `--simulate-slow-switch` leaf (one end under it, the other
    /// under another leaf).
    fn is_slow(&self, (me, partner): (Rank, Rank), rail: u32) -> bool {
        let slow_rank = self
            .args
            .simulate_slow
            .iter()
            .any(|s| s.covers(me, rail) || s.covers(partner, rail));
        let crosses = self
            .slow_switches
            .as_ref()
            .is_some_and(|SlowLeaves { leaf, slow }| {
                let at = |r: Rank| leaf.get(r as usize).copied().flatten();
                let (a, b) = (at(me), at(partner));
                a != b
                    && slow.iter().any(|&(s, k)| {
                        k.is_none_or(|k| k == rail) && (a == Some(s) || b == Some(s))
                    })
            });
        slow_rank || crosses
    }

    /// Rank `r`'s identity: this node's rails, made-up pair ports (no
    /// pair connects under `--simulate`).
    fn identity(&self, r: Rank) -> Identity {
        Identity {
            rank: r,
            size: self.size,
            version: env!("CARGO_PKG_VERSION").into(),
            host: self
                .hosts
                .get(r as usize)
                .cloned()
                .unwrap_or_else(|| self.host.clone()),
            pair_port: 1,
            address: "127.0.0.1".into(),
            device: self
                .rails
                .first()
                .map_or_else(|| "simulated".into(), |r| r.name()),
            rate_gbps: self.rails.first().and_then(|r| r.rate_gbps),
            rails: self.rails.clone(),
            rail_ports: (2..=self.sides as u16).collect(),
            topology_addr: None,
        }
    }
}

/// A helper process: ranks `first..=last` of `args.size`, until each has
/// ended. Its exit code is 0 (rank 0's is the run's).
///
/// # Errors
/// Usage errors, and an event loop that cannot be made.
pub fn run_fleet(args: &ClusterArgs, (first, last): (Rank, Rank)) -> anyhow::Result<u8> {
    let mut a = args.clone();
    a.simulate = true;
    a.rank = Some(first.max(1));
    let mut plan = a.plan(&|_| None)?;
    // Rank 0's process has said what the node's rails are.
    plan.print_line = false;
    let size = plan.launch.size;
    if last >= size {
        return Err(UsageError(format!(
            "--simulate-fleet {first}:{last}: the job has {size} ranks"
        ))
        .into());
    }
    let count = last - first + 1;
    coordinator::ensure_open_files(
        u64::from(count) + 64,
        &format!("{count} simulated ranks in one process"),
    )?;
    let rails = rank::node_rails(&plan)?;
    // A side per rail, as a real rank has.
    let devices = rank::rail_devices(&plan, &rails);
    let ports = devices
        .iter()
        .filter_map(|d| rank::PortWatch::new(&plan, d))
        .collect();
    let mut node = Node {
        args: args.clone(),
        sides: devices.len(),
        rails,
        ports,
        risen: (Instant::now(), Vec::new()),
        size,
        host: rank::host_name(),
        hosts: match &args.simulate_hosts {
            Some(list) => simulated_hosts(list)?,
            None => Vec::new(),
        },
        slow_switches: None,
    };
    if let (Some(path), false) = (&args.topology, args.simulate_slow_switch.is_empty()) {
        let topology = read_topology(path)?;
        let leaf = (0..size)
            .map(|r| {
                let host = node.hosts.get(r as usize).unwrap_or(&node.host);
                topology.locate(host, None).map(|p| p.leaf)
            })
            .collect();
        let slow = args
            .simulate_slow_switch
            .iter()
            .filter_map(|s| Some((topology.switch_index(&s.name)?, s.rail)))
            .collect();
        node.slow_switches = Some(SlowLeaves { leaf, slow });
    }
    let addr: SocketAddr = format!("{}:{}", plan.coordinator.host, plan.coordinator.port)
        .parse()
        .map_err(|e| UsageError(format!("--coordinator: {e}")))?;
    let now = Instant::now();
    let mut ranks: Vec<SimRank> = (first..=last)
        .map(|r| SimRank {
            rank: r,
            stage: if args.simulate_absent.contains(&r) {
                Stage::Over
            } else {
                Stage::Waiting(now)
            },
            stream: None,
            reader: FrameReader::default(),
            out: VecDeque::new(),
            test: None,
            due: None,
            attempts: 0,
        })
        .collect();
    let deadline = now + plan.rendezvous_timeout + Duration::from_secs(30);
    let mut poll = Poll::new()?;
    let mut events = Events::with_capacity(4_096);
    let mut scratch = vec![0u8; 64 << 10];
    loop {
        let now = Instant::now();
        start_connections(&mut ranks, &poll, addr, (now, deadline))?;
        // Done when every rank is over, a mute one once the run started
        // (it reads nothing more, rank 0's end included).
        let mute = |r: &SimRank| r.test.is_some() && args.simulate_mute.contains(&r.rank);
        if ranks.iter().all(|r| r.stage == Stage::Over || mute(r)) {
            return Ok(0);
        }
        release_due(&mut ranks, now);
        if let Err(e) = poll.poll(&mut events, Some(next_wake(&ranks, now)))
            && e.kind() != io::ErrorKind::Interrupted
        {
            return Err(e.into());
        }
        for event in &events {
            if let Some(r) = ranks.get_mut(event.token().0) {
                let readable = event.is_readable() || event.is_read_closed();
                let connected = event.is_writable() || event.is_error();
                on_ready(r, (readable, connected), &poll, &mut node, &mut scratch)?;
            }
        }
    }
}

/// Starts the connections of ranks whose time came, at most
/// [`CONNECTING_AT_ONCE`] in progress; past `deadline` a rank gives up.
fn start_connections(
    ranks: &mut [SimRank],
    poll: &Poll,
    addr: SocketAddr,
    (now, deadline): (Instant, Instant),
) -> io::Result<()> {
    let mut connecting = ranks
        .iter()
        .filter(|r| r.stage == Stage::Connecting)
        .count();
    for (i, r) in ranks.iter_mut().enumerate() {
        if connecting >= CONNECTING_AT_ONCE {
            break;
        }
        let Stage::Waiting(at) = r.stage else {
            continue;
        };
        if at > now {
            continue;
        }
        if now >= deadline {
            r.stage = Stage::Over;
            continue;
        }
        match TcpStream::connect(addr) {
            Ok(mut s) => {
                poll.registry().register(
                    &mut s,
                    Token(i),
                    Interest::READABLE | Interest::WRITABLE,
                )?;
                r.stream = Some(s);
                r.stage = Stage::Connecting;
                connecting += 1;
            }
            Err(_) => retry(r, now),
        }
    }
    Ok(())
}

/// Queues the reports whose time came (`--simulate-ms`).
fn release_due(ranks: &mut [SimRank], now: Instant) {
    for r in ranks {
        if let Some((at, _)) = &r.due
            && *at <= now
            && let Some((_, bytes)) = r.due.take()
        {
            r.out.extend(bytes);
            flush(r);
        }
    }
}

/// How long the loop may sleep: until the next report or connection
/// attempt is due, at most half a second.
fn next_wake(ranks: &[SimRank], now: Instant) -> Duration {
    let most = Duration::from_millis(500);
    ranks
        .iter()
        .filter_map(|r| match (r.stage, &r.due) {
            (_, Some((at, _))) => Some(*at),
            (Stage::Waiting(at), _) => Some(at),
            _ => None,
        })
        .min()
        .map_or(most, |at| at.saturating_duration_since(now).min(most))
}

/// Rank `r`'s socket is ready (`readable`; `connected`: writable, or in
/// error while it connects): its join once connected (or a retry), then
/// what rank 0 sent, answered, and its queue written.
fn on_ready(
    r: &mut SimRank,
    (readable, connected): (bool, bool),
    poll: &Poll,
    node: &mut Node,
    scratch: &mut [u8],
) -> anyhow::Result<()> {
    if r.stage == Stage::Connecting && connected {
        let ok = r
            .stream
            .as_ref()
            .is_some_and(|s| s.take_error().ok().flatten().is_none() && s.peer_addr().is_ok());
        if !ok {
            drop_stream(poll, r);
            retry(r, Instant::now());
            return Ok(());
        }
        r.stage = Stage::Running;
        let join = ClusterMessage::Join {
            identity: Box::new(node.identity(r.rank)),
        };
        r.out.extend(wire::encode(&join)?);
    }
    if r.stage != Stage::Running {
        return Ok(());
    }
    let muted = r.test.is_some() && node.args.simulate_mute.contains(&r.rank);
    if readable && !muted {
        read_rank(poll, r, node, scratch);
    }
    if r.stage == Stage::Running {
        flush(r);
    }
    Ok(())
}

/// Tries rank `r`'s connection again after a jittered backoff.
fn retry(r: &mut SimRank, now: Instant) {
    r.attempts += 1;
    let ms = (50u64 << r.attempts.min(5)).min(1_000);
    // Spread by rank: ranks refused together do not come back together.
    let jitter = u64::from(r.rank.wrapping_mul(2_654_435_761) % 1_000) * ms / 1_000;
    r.stage = Stage::Waiting(now + Duration::from_millis(ms / 2 + jitter));
}

fn drop_stream(poll: &Poll, r: &mut SimRank) {
    if let Some(mut s) = r.stream.take() {
        let _ = poll.registry().deregister(&mut s);
    }
}

/// Writes what rank `r` has queued until the socket takes no more.
fn flush(r: &mut SimRank) {
    let Some(s) = r.stream.as_mut() else {
        return;
    };
    while !r.out.is_empty() {
        let (front, _) = r.out.as_slices();
        match s.write(front) {
            Ok(n) => {
                r.out.drain(..n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => {
                r.stage = Stage::Over;
                r.stream = None;
                return;
            }
        }
    }
}

/// Reads what rank 0 sent rank `r` and answers it.
fn read_rank(poll: &Poll, r: &mut SimRank, node: &mut Node, scratch: &mut [u8]) {
    loop {
        let Some(s) = r.stream.as_mut() else {
            return;
        };
        match s.read(scratch) {
            Ok(0) => break,
            Ok(n) => r.reader.feed(&scratch[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return answer(poll, r, node),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
        answer(poll, r, node);
        // Over, or mute from the start on: nothing more is read.
        if r.stage == Stage::Over || (r.test.is_some() && node.args.simulate_mute.contains(&r.rank))
        {
            return;
        }
    }
    // Rank 0 closed the connection (or it failed): this rank is over.
    answer(poll, r, node);
    drop_stream(poll, r);
    r.stage = Stage::Over;
}

/// Every whole message rank `r` holds, answered.
fn answer(poll: &Poll, r: &mut SimRank, node: &mut Node) {
    while r.stage == Stage::Running {
        let msg = match r.reader.take::<ClusterMessage>() {
            Ok(Some(m)) => m,
            Ok(None) => return,
            Err(_) => {
                drop_stream(poll, r);
                r.stage = Stage::Over;
                return;
            }
        };
        match msg {
            ClusterMessage::Start { config, .. } => {
                r.test = Some(config);
                // A mute rank reads nothing more from here on.
                if node.args.simulate_mute.contains(&r.rank) {
                    return;
                }
            }
            ClusterMessage::Round {
                round,
                partner,
                serve: _,
            } => {
                if node
                    .args
                    .simulate_die
                    .iter()
                    .any(|d| d.rank == r.rank && d.round == round)
                {
                    drop_stream(poll, r);
                    r.stage = Stage::Over;
                    return;
                }
                let Some(test) = &r.test else {
                    continue;
                };
                let measurements = partner
                    .map(|p| {
                        let shared = rendezvous::shared_rails(node.sides as u32, p.rail_count());
                        (0..shared)
                            .map(|rail| {
                                pair::fabricated_as(
                                    test,
                                    (r.rank, p.rank),
                                    (round, rail),
                                    node.is_slow((r.rank, p.rank), rail),
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let report = ClusterMessage::Report {
                    round,
                    measurements,
                    port_errors: node.risen(),
                };
                let Ok(bytes) = wire::encode(&report) else {
                    continue;
                };
                // Both directions, one after the other.
                let takes = Duration::from_millis(2 * u64::from(test.simulate_ms));
                if takes.is_zero() {
                    r.out.extend(bytes);
                } else {
                    r.due = Some((Instant::now() + takes, bytes));
                }
            }
            ClusterMessage::End { .. } => {
                drop_stream(poll, r);
                r.stage = Stage::Over;
            }
            ClusterMessage::Join { .. } | ClusterMessage::Report { .. } => {}
        }
    }
}

/// `--simulate-slow-switch NAME[:RAIL]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlowSwitch {
    /// The leaf switch, as `--topology` names it.
    pub name: String,
    /// Its slow rail (`None`: every rail).
    pub rail: Option<u32>,
}

/// Parses `--simulate-slow-switch`'s `NAME` or `NAME:RAIL`.
///
/// # Errors
/// An empty name or a rail that is no number.
pub fn slow_switch(s: &str) -> Result<SlowSwitch, String> {
    let (name, rail) = match s.rsplit_once(':') {
        Some((n, k)) => (
            n,
            Some(
                k.parse::<u32>()
                    .map_err(|_| format!("'{s}' is not NAME or NAME:RAIL"))?,
            ),
        ),
        None => (s, None),
    };
    if name.is_empty() {
        return Err(format!("'{s}': no switch name"));
    }
    Ok(SlowSwitch {
        name: name.to_owned(),
        rail,
    })
}

/// `--simulate-hosts`' hostlist, expanded (at most [`MAX_RANKS`] hosts).
fn simulated_hosts(list: &str) -> Result<Vec<String>, UsageError> {
    engine::cluster::hostlist::expand(list, engine::cluster::schedule::MAX_RANKS as usize)
        .map_err(|e| UsageError(format!("--simulate-hosts {list}: {e}")))
}

/// `--topology FILE`, read and parsed (usage errors naming it).
fn read_topology(
    path: &std::path::Path,
) -> Result<engine::cluster::topology::Topology, UsageError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        UsageError(format!(
            "--topology {}: cannot read it: {e}",
            path.display()
        ))
    })?;
    engine::cluster::topology::Topology::parse(&text)
        .map_err(|e| UsageError(format!("--topology {}: {e}", path.display())))
}
