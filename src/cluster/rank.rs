//! One rank's life: bind a pair listener per rail (port 0, held: no
//! free-port race), start the coordinator when this is rank 0, join it
//! with retries until `--rendezvous-timeout`, take rank 0's start (the
//! test), then run each round it is sent (with its partner's contact) —
//! on every rail both ranks have at once (rail k
//! with the partner's rail k, a thread each, bound to its NIC's NUMA
//! node), both directions with its partner, one after the other — and
//! report; at the end print its line and exit with the run's code. Every
//! wait on rank 0 is bounded.

use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use engine::cluster::messages::{self, ClusterMessage, Contact};
use engine::cluster::pair_test::PairTest;
use engine::cluster::rails::{self, Rail, RailSelection, RailSpec};
use engine::cluster::rendezvous::{self, Identity};
use engine::cluster::verdict::{EXIT_RANKS_MISSING, Measurement};
use engine::fabric::link::{CounterRise, CounterSnapshot, rises};
use engine::proto::wire;

use super::ClusterPlan;
use super::coordinator;
use super::pair;
use crate::oob::{Channel, Listener};
use crate::options::DeviceSelection;

/// Slack on every wait for rank 0 beyond the bounds it keeps itself.
const COORDINATOR_SLACK: Duration = Duration::from_secs(30);

/// Rank 0 judges and writes the report before the ranks' end: per rank
/// in the job, the extra time a rank allows for it (1,024 ranks: a
/// million directions, 430 MB of report, ~35 s measured).
pub const END_BOUND_PER_RANK: Duration = Duration::from_millis(100);

/// The rank's run; its exit code (rank 0's: the verdicts'; the others':
/// what rank 0 said, or 4 when rank 0 could not be reached or went away).
///
/// # Errors
/// A usage error (a bad flag); other failures end in exit code 4 with
/// the reason on stderr.
pub fn run(plan: &ClusterPlan) -> anyhow::Result<u8> {
    let me = plan.launch.rank;
    // Its rails first: a rail it cannot have is its usage error, before
    // it listens or joins.
    let rails = node_rails(plan)?;
    // A pair listener and a device per rail.
    let sides = rail_devices(plan, &rails)
        .into_iter()
        .enumerate()
        .map(|(k, device)| {
            let listener = Listener::bind("0.0.0.0", 0)
                .with_context(|| format!("binding this rank's pair listener for rail {k}"))?;
            Ok(RailSide { device, listener })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let coordinating = if me == 0 {
        // Rank 0 holds a connection per rank: a limit too low for the
        // job is said now, before any wait.
        coordinator::ensure_open_files(
            coordinator::descriptors_needed(plan.launch.size),
            &format!("rank 0 of {} ranks", plan.launch.size),
        )?;
        let l = Listener::bind("0.0.0.0", plan.coordinator.port).with_context(|| {
            format!(
                "rank 0 cannot listen for the ranks on port {}",
                plan.coordinator.port
            )
        })?;
        let plan = plan.clone();
        Some(
            thread::Builder::new()
                .name("coordinator".into())
                .spawn(move || coordinator::run(&plan, &l, Instant::now()))?,
        )
    } else {
        None
    };
    let joined = take_part(plan, &sides, rails);
    let code = match coordinating {
        Some(c) => {
            // Rank 0's own part ended (or failed): the coordinator's code
            // is the run's.
            if let Err(e) = &joined {
                eprintln!("rdmaperf cluster: rank 0: {e:#}");
            }
            match c.join() {
                Ok(Ok(code)) => code,
                Ok(Err(e)) => {
                    eprintln!("rdmaperf cluster: coordinator: {e:#}");
                    EXIT_RANKS_MISSING
                }
                Err(_) => bail!("the coordinator's thread panicked"),
            }
        }
        None => match joined {
            Ok((code, line)) => {
                if plan.print_line && !line.is_empty() {
                    println!("{line}");
                }
                code
            }
            Err(e) => {
                if crate::stop::interrupted_by(&e).is_some() {
                    return Err(e);
                }
                eprintln!("rdmaperf cluster: rank {me}: {e:#}");
                EXIT_RANKS_MISSING
            }
        },
    };
    Ok(code)
}

/// One rail of this rank: its device and its pair listener.
struct RailSide {
    device: DeviceSelection,
    listener: Listener,
}

/// Joins, runs the rounds, returns rank 0's exit code and this rank's
/// line.
fn take_part(
    plan: &ClusterPlan,
    sides: &[RailSide],
    rails: Vec<Rail>,
) -> anyhow::Result<(u8, String)> {
    let me = plan.launch.rank;
    let coordinator = &plan.coordinator;
    let mut ch = Channel::connect(
        &coordinator.host,
        coordinator.port,
        plan.rendezvous_timeout,
        true,
    )
    .context("joining rank 0 (--rendezvous-timeout)")?;
    // Rail 0 first.
    let named = |d: &DeviceSelection| match &d.name {
        Some(n) => format!("{n}:{}", d.port.unwrap_or(1)),
        None => "simulated".into(),
    };
    // Each rail's port: its rate (for --expect-rate auto) and its error
    // counters before the first round; every report says which rose since.
    let ports: Vec<PortWatch> = sides
        .iter()
        .filter_map(|s| PortWatch::new(plan, &s.device))
        .collect();
    let identity = Identity {
        rank: me,
        size: plan.launch.size,
        version: env!("CARGO_PKG_VERSION").into(),
        host: host_name(),
        pair_port: sides[0].listener.port(),
        address: pair::reachable_address(plan.pair_address.as_deref(), ch.local().ok()),
        device: named(&sides[0].device),
        rate_gbps: ports.first().and_then(|p| p.rate_gbps),
        rails,
        rail_ports: sides[1..].iter().map(|s| s.listener.port()).collect(),
        topology_addr: engine::cluster::rendezvous::TopologyAddr::from_env(|k| {
            std::env::var(k).ok()
        }),
    };
    let several = ports.len() > 1;
    let risen = || -> Vec<CounterRise> {
        let mut all: Vec<CounterRise> = ports.iter().flat_map(|p| p.risen(several)).collect();
        all.truncate(messages::MAX_REPORT_PORT_ERRORS);
        all
    };
    ch.send_cluster(&ClusterMessage::Join {
        identity: Box::new(identity),
    })?;
    // Rank 0 answers when all have come or at its deadline.
    ch.set_timeout(plan.rendezvous_timeout + COORDINATOR_SLACK);
    let test = match ch.recv_cluster("the start from rank 0")? {
        ClusterMessage::Start { config, .. } => {
            if let Some(p) = config.problem() {
                bail!("rank 0 sent a test this rank refuses: {p}");
            }
            config
        }
        // Refused, or the run could not start (a bad pairs file): rank 0's
        // reason on stderr, its exit code.
        ClusterMessage::End { exit_code, line } => {
            eprintln!(
                "rdmaperf cluster: rank {me}: {}",
                wire::printable(&line, wire::MAX_PEER_TEXT)
            );
            return Ok((exit_code, String::new()));
        }
        other => bail!("rank 0 sent {} instead of the start", other.name()),
    };
    // Between rounds rank 0 waits for the slowest pair; after the last,
    // it judges and writes the report.
    ch.set_timeout(test.round_budget() + COORDINATOR_SLACK + END_BOUND_PER_RANK * plan.launch.size);
    loop {
        match ch.recv_cluster("the next round from rank 0")? {
            ClusterMessage::Round {
                round,
                partner,
                serve,
            } => {
                let measurements = match partner {
                    Some(partner) => {
                        let started = Instant::now();
                        let m = every_rail(plan, &test, sides, round, &partner, serve);
                        if !test.simulate {
                            eprintln!(
                                "rdmaperf cluster: rank {me}: round {round} with rank {} in {:.1?}",
                                partner.rank,
                                started.elapsed()
                            );
                        }
                        m
                    }
                    None => Vec::new(),
                };
                ch.send_cluster(&ClusterMessage::Report {
                    round,
                    measurements,
                    port_errors: risen(),
                })?;
            }
            ClusterMessage::End { exit_code, line } => {
                return Ok((exit_code, wire::printable(&line, wire::MAX_PEER_TEXT)));
            }
            other => bail!("rank 0 sent {} during the rounds", other.name()),
        }
    }
}

/// Every rail this rank and `partner` both have, at once: rail k with
/// the partner's rail k, each in its own thread bound to its NIC's NUMA
/// node (so the memory it registers is on that node), each with its own
/// QPs; a single shared rail runs in this thread.
fn every_rail(
    plan: &ClusterPlan,
    test: &PairTest,
    sides: &[RailSide],
    round: u32,
    partner: &Contact,
    serve_first: bool,
) -> Vec<Measurement> {
    let shared = rendezvous::shared_rails(sides.len() as u32, partner.rail_count());
    let on_rail = |k: u32| {
        let side = &sides[k as usize];
        bind_to_rail_node(plan, &side.device);
        both_ways(plan, test, side, (round, k), partner, serve_first)
    };
    if shared == 1 {
        return on_rail(0);
    }
    thread::scope(|s| {
        let running: Vec<_> = (0..shared)
            .map(|k| {
                thread::Builder::new()
                    .name(format!("rail {k}"))
                    .spawn_scoped(s, move || on_rail(k))
            })
            .collect();
        running
            .into_iter()
            .zip(0..)
            .flat_map(|(t, k)| match t.map(|t| t.join()) {
                Ok(Ok(m)) => m,
                _ => {
                    eprintln!(
                        "rdmaperf cluster: rank {}: rail {k}'s thread failed",
                        plan.launch.rank
                    );
                    Vec::new()
                }
            })
            .collect()
    })
}

/// Both directions with `partner` on one rail: the serving rank serves
/// first, then drives; its partner the other way round. What this rank
/// drove is what it reports (its partner reports the other direction).
fn both_ways(
    plan: &ClusterPlan,
    test: &PairTest,
    side: &RailSide,
    (round, rail): (u32, u32),
    partner: &Contact,
    serve_first: bool,
) -> Vec<Measurement> {
    let me = plan.launch.rank;
    let p = partner.rank;
    let serve = || {
        if let Err(e) = pair::serve(test, &side.device, &side.listener) {
            eprintln!(
                "rdmaperf cluster: rank {me}: serving rank {p} in round {round} on rail {rail}: {e:#}"
            );
        }
    };
    // Under rdma_cm the route to the server's address picks the device:
    // with several rails, rail k's own address (else the one that reached
    // rank 0): the contact rank 0 sent says which.
    let address = partner.address_on(rail);
    let send = || {
        pair::send_to(
            test,
            &side.device,
            (me, p),
            (round, rail),
            (address, partner.port(rail).unwrap_or(0)),
            &plan.simulate_slow,
        )
    };
    let m = if serve_first {
        serve();
        send()
    } else {
        let m = send();
        serve();
        m
    };
    vec![m]
}

/// This rank's port in sysfs: its rate, and its error counters when the
/// rank joined.
pub(super) struct PortWatch {
    port: crate::sysfs::PortView,
    rate_gbps: Option<f64>,
    before: CounterSnapshot,
}

impl PortWatch {
    /// `device`'s port (none for `--simulate` without a device).
    pub(super) fn new(plan: &ClusterPlan, device: &DeviceSelection) -> Option<Self> {
        let name = device.name.as_deref()?;
        let port = device.port.unwrap_or(1);
        let view = plan.sysfs.port(name, port);
        let rate_gbps = match view.rate() {
            Ok(r) => Some(r.gbps),
            Err(e) => {
                if !plan.test.simulate {
                    eprintln!("rdmaperf cluster: rank {}: {e}", plan.launch.rank);
                }
                None
            }
        };
        let before = view.error_counters();
        Some(Self {
            port: view,
            rate_gbps,
            before,
        })
    }

    /// The error counters that rose since the rank joined; with
    /// `several` rails, each named after its port (`mlx5_1:1
    /// counters/symbol_error`).
    pub(super) fn risen(&self, several: bool) -> Vec<CounterRise> {
        let now = self.port.error_counters();
        let mut r = rises(&self.before, &now);
        if several {
            for c in &mut r {
                c.name = format!("{}:{} {}", self.port.device(), self.port.port(), c.name);
            }
        }
        r
    }
}

/// The devices a rank tests on, a side each: one per rail; `-d` is the
/// one rail as the flags name it; without rails (`--simulate`), the
/// plan's device.
pub(super) fn rail_devices(plan: &ClusterPlan, rails: &[Rail]) -> Vec<DeviceSelection> {
    if plan.device.name.is_some() || rails.is_empty() {
        vec![plan.device.clone()]
    } else {
        rails
            .iter()
            .map(|r| rail_device(r, plan.device.gid_index))
            .collect()
    }
}

/// The device selection that tests on `rail` (its device and port; the
/// GID index `-x` gives, or perftest's choice).
pub(super) fn rail_device(rail: &Rail, gid_index: Option<u32>) -> DeviceSelection {
    DeviceSelection {
        name: Some(rail.device.clone()),
        port: Some(rail.port),
        gid_index,
    }
}

/// Binds the calling thread to the NUMA node of `device`'s NIC before it
/// opens the device and registers its memory (not under `--simulate`,
/// nor when the process was started restricted: [`ClusterPlan::numa`]).
pub(super) fn bind_to_rail_node(plan: &ClusterPlan, device: &DeviceSelection) {
    bind_to_nic_of(plan.numa.as_ref(), device);
}

/// Binds the calling thread to the NUMA node of `device`'s NIC with
/// `numa` (nothing when `None`).
pub(super) fn bind_to_nic_of(
    numa: Option<&crate::placement::NicNodeBinding>,
    device: &DeviceSelection,
) {
    if let (Some(numa), Some(name)) = (numa, &device.name) {
        numa.bind(name);
    }
}

/// This host's name (the kernel's).
pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// The IPv4 address where rdma_cm reaches `rail`: its port's IPv4-mapped
/// GID (RoCE v2), else the first IPv4 address of its network interface
/// (iWARP, IPoIB) as this network namespace sees it.
pub(crate) fn rail_address(
    devices: &[engine::fabric::ports::DeviceState],
    rail: &Rail,
) -> Option<String> {
    let port = devices
        .iter()
        .find(|d| d.name == rail.device)?
        .ports
        .iter()
        .find(|p| p.port == rail.port)?;
    if let Some(a) = port.gids.iter().find_map(|g| g.ipv4.clone()) {
        return Some(a);
    }
    let netdev = port.netdev.as_deref()?;
    nix::ifaddrs::getifaddrs().ok()?.find_map(|a| {
        let ip = a.address?.as_sockaddr_in()?.ip();
        (a.interface_name == netdev).then(|| ip.to_string())
    })
}

/// This node's rails under `--rails` (`-d DEV` names one), read from
/// sysfs; printed on stderr with the ports left out. None under
/// `--simulate` without `-d`/`--rails` (an empty list). A rail named with `-d` that sysfs
/// does not show (a sysfs root without it) stays, its facts unknown.
///
/// # Errors
/// A named rail this node does not have, or no ACTIVE port for `auto`: a
/// usage error on this rank, before it joins (rank 0 then reports it
/// missing; on rank 0, the run ends at once).
pub(super) fn node_rails(plan: &ClusterPlan) -> anyhow::Result<Vec<Rail>> {
    let me = plan.launch.rank;
    if plan.rails == RailSpec::Named(Vec::new()) {
        return Ok(Vec::new());
    }
    let devices = plan.sysfs.devices(None, None).unwrap_or_default();
    let selection = match (rails::select(&devices, &plan.rails), &plan.device.name) {
        (Ok(mut s), _) => {
            for r in &mut s.rails {
                r.address = rail_address(&devices, r);
            }
            s
        }
        (Err(_), Some(d)) => RailSelection {
            rails: vec![Rail {
                address: None,
                device: d.clone(),
                port: plan.device.port.unwrap_or(1),
                active: true,
                link_layer: None,
                rate_gbps: None,
                numa_node: None,
                port_guid: None,
            }],
            skipped: Vec::new(),
        },
        (Err(e), None) => return Err(crate::exit::UsageError(format!("rank {me}: {e}")).into()),
    };
    let shown: Vec<String> = selection
        .rails
        .iter()
        .map(|r| {
            let mut facts = Vec::new();
            if let Some(g) = r.rate_gbps {
                facts.push(format!("{g} Gb/s"));
            }
            if let Some(n) = r.numa_node {
                facts.push(format!("NUMA {n}"));
            }
            if let Some(a) = &r.address {
                facts.push(a.clone());
            }
            if !r.active {
                facts.push("not ACTIVE".into());
            }
            if facts.is_empty() {
                r.name()
            } else {
                format!("{} ({})", r.name(), facts.join(", "))
            }
        })
        .collect();
    // (The helper processes of --simulate-ranks: rank 0 speaks for all.)
    if !plan.print_line && me != 0 {
        return Ok(selection.rails);
    }
    eprintln!("rdmaperf cluster: rank {me}: rails {}", shown.join(", "));
    if !selection.skipped.is_empty() {
        eprintln!(
            "rdmaperf cluster: rank {me}: not rails: {}",
            selection.skipped.join(", ")
        );
    }
    Ok(selection.rails)
}
