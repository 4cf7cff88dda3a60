//! Where the process runs, as perftest places it: by default on the CPUs
//! of the NIC's NUMA node (`<sysfs>/class/infiniband/DEV/device/numa_node`),
//! unless the process was already restricted (taskset, numactl) or
//! `--disable_numa`; `--pin_cores=LIST` on those CPUs; `--numa_node=N` on
//! node N's CPUs. Set before any memory is allocated or registered and
//! before any thread starts, so the buffers are first touched — and so
//! placed by the kernel's default local policy — on that node, and every
//! worker inherits the affinity. (perftest also sets a strict memory
//! policy with libnuma; rdmaperf relies on first touch: see
//! docs/perftest-compat.md.)

use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

use crate::exit::UsageError;
use crate::sysfs::Sysfs;

/// What the flags ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// `--pin_cores`: these CPUs.
    Cores(Vec<usize>),
    /// `--numa_node`: this node's CPUs.
    Node(u32),
    /// The NIC's node (the default).
    NicNode,
    /// `--disable_numa`: where the process already runs.
    Unbound,
}

/// Parses perftest's CPU list: `0`, `0,1,2`, `0-3`, `0-3,8,12-15`.
///
/// # Errors
/// A message naming the part that is not a CPU or range.
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in s.split(',').map(str::trim) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let num = |t: &str| {
            t.trim()
                .parse::<usize>()
                .map_err(|_| format!("{part:?} is not a CPU number or range"))
        };
        let (a, b) = (num(a)?, num(b)?);
        if a > b {
            return Err(format!("invalid CPU range {a}-{b} (start > end)"));
        }
        if b >= CpuSet::count() {
            return Err(format!(
                "CPU {b} is beyond the {} this build can address",
                CpuSet::count()
            ));
        }
        cpus.extend(a..=b);
    }
    Ok(cpus)
}

/// The CPUs of NUMA node `node` (none when sysfs shows none).
fn node_cpus(sysfs: &Sysfs, node: u32) -> Option<Vec<usize>> {
    parse_cpu_list(&sysfs.node_cpulist(node)?)
        .ok()
        .filter(|c| !c.is_empty())
}

fn set(cpus: &[usize]) -> nix::Result<()> {
    let mut set = CpuSet::new();
    for &c in cpus {
        set.set(c)?;
    }
    sched_setaffinity(Pid::from_raw(0), &set)
}

/// Whether the process may already run on fewer CPUs than are online
/// (taskset, numactl): perftest then leaves it where it is.
fn restricted(sysfs: &Sysfs) -> bool {
    let Ok(mine) = sched_getaffinity(Pid::from_raw(0)) else {
        return true;
    };
    let allowed = (0..CpuSet::count())
        .filter(|&c| mine.is_set(c).unwrap_or(false))
        .count();
    let online = sysfs
        .online_cpulist()
        .and_then(|t| parse_cpu_list(&t).ok())
        .map_or(allowed, |c| c.len());
    allowed < online
}

/// Places the process as `placement` says, for `device`; returns the
/// banner line that says where it runs (`None`: unchanged, nothing known).
///
/// # Errors
/// A usage error for a node without CPUs; a failure to set the affinity
/// the user asked for.
pub fn apply(
    placement: &Placement,
    sysfs: &Sysfs,
    device: Option<&str>,
) -> anyhow::Result<Option<String>> {
    match placement {
        Placement::Unbound => Ok(None),
        Placement::Cores(cpus) => {
            set(cpus)
                .map_err(|e| anyhow::anyhow!("--pin_cores: cannot set the CPU affinity: {e}"))?;
            Ok(Some(format!(
                " CPU affinity    : {} (--pin_cores)",
                list(cpus)
            )))
        }
        Placement::Node(n) => {
            let cpus = node_cpus(sysfs, *n).ok_or_else(|| {
                UsageError(format!(
                    "--numa_node: node {n} does not exist or has no CPUs"
                ))
            })?;
            set(&cpus).map_err(|e| anyhow::anyhow!("--numa_node: cannot run on node {n}: {e}"))?;
            Ok(Some(format!(
                " NUMA node       : {n} (--numa_node; CPUs {})",
                list(&cpus)
            )))
        }
        Placement::NicNode => Ok(device.and_then(|dev| bind_to_nic_node(sysfs, dev))),
    }
}

/// Binds the calling thread (and the threads it starts later) to the CPUs
/// of `dev`'s NUMA node, unless the process was already restricted; the
/// banner line that says where it runs (`None`: nothing known). For a
/// process that binds once, at its start (the perftest binaries).
pub fn bind_to_nic_node(sysfs: &Sysfs, dev: &str) -> Option<String> {
    if restricted(sysfs) {
        return Some(" NUMA node       : not bound (the process was already restricted)".into());
    }
    bind_to_node_of(sysfs, dev)
}

/// Binding thread after thread to its NIC's NUMA node (cluster mode's
/// thread per rail, the self-test's sides). Whether the process was
/// restricted (taskset, numactl) is asked once, when this is made —
/// before anything is bound: asked again, a thread this process bound to
/// one rail's node would look restricted and stay there for the next.
#[derive(Debug, Clone)]
pub struct NicNodeBinding {
    sysfs: Sysfs,
}

impl NicNodeBinding {
    /// The binding, unless the process is already restricted.
    pub fn unless_restricted(sysfs: &Sysfs) -> Option<Self> {
        (!restricted(sysfs)).then(|| Self {
            sysfs: sysfs.clone(),
        })
    }

    /// Binds the calling thread to `dev`'s node. Called first in a
    /// thread, the memory that thread registers is first touched on that
    /// node.
    pub fn bind(&self, dev: &str) -> Option<String> {
        bind_to_node_of(&self.sysfs, dev)
    }
}

/// Binds the calling thread to the CPUs of `dev`'s NUMA node.
fn bind_to_node_of(sysfs: &Sysfs, dev: &str) -> Option<String> {
    let n = sysfs.nic_node(dev)?;
    let cpus = node_cpus(sysfs, n)?;
    // sched_setaffinity(0) binds the calling thread only.
    Some(match set(&cpus) {
        Ok(()) => format!(
            " NUMA node       : {n} ({dev}'s node; CPUs {})",
            list(&cpus)
        ),
        Err(e) => {
            eprintln!(
                "warning: cannot bind to {dev}'s NUMA node {n} ({e}); continuing without NUMA binding"
            );
            format!(" NUMA node       : not bound ({dev}'s node {n} refused)")
        }
    })
}

fn list(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_as_perftests() {
        assert_eq!(parse_cpu_list("5").unwrap(), vec![5]);
        assert_eq!(parse_cpu_list("0-3,8").unwrap(), vec![0, 1, 2, 3, 8]);
        assert_eq!(parse_cpu_list("0, 1, 2").unwrap(), vec![0, 1, 2]);
        assert!(parse_cpu_list("3-1").unwrap_err().contains("start > end"));
        assert!(parse_cpu_list("a").is_err() && parse_cpu_list("").is_err());
        assert!(parse_cpu_list("99999").is_err());
        assert_eq!(list(&[0, 1, 2, 3, 8, 12, 13]), "0-3,8,12-13");
    }

    #[test]
    fn the_nics_node_comes_from_sysfs() {
        let root = std::env::temp_dir().join(format!("rdmaperf-numa-{}", std::process::id()));
        let dev = root.join("class/infiniband/mlx5_0/device");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("numa_node"), "1\n").unwrap();
        let node = root.join("devices/system/node/node1");
        std::fs::create_dir_all(&node).unwrap();
        std::fs::write(node.join("cpulist"), "0-1\n").unwrap();
        let sysfs = Sysfs::at(&root);
        assert_eq!(sysfs.nic_node("mlx5_0"), Some(1));
        assert_eq!(node_cpus(&sysfs, 1), Some(vec![0, 1]));
        std::fs::write(dev.join("numa_node"), "-1\n").unwrap();
        assert_eq!(sysfs.nic_node("mlx5_0"), None);
        assert_eq!(sysfs.nic_node("nonesuch"), None);
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// A fixture of two NUMA nodes of one CPU each (CPUs 0 and 1 online),
    /// `nic0` on node 0 and `nic1` on node 1.
    fn two_nodes(name: &str) -> std::path::PathBuf {
        let root = std::env::temp_dir().join(format!("rdmaperf-{name}-{}", std::process::id()));
        for n in 0..2 {
            let dev = root.join(format!("class/infiniband/nic{n}/device"));
            std::fs::create_dir_all(&dev).unwrap();
            std::fs::write(dev.join("numa_node"), format!("{n}\n")).unwrap();
            let node = root.join(format!("devices/system/node/node{n}"));
            std::fs::create_dir_all(&node).unwrap();
            std::fs::write(node.join("cpulist"), format!("{n}\n")).unwrap();
        }
        let cpu = root.join("devices/system/cpu");
        std::fs::create_dir_all(&cpu).unwrap();
        std::fs::write(cpu.join("online"), "0-1\n").unwrap();
        root
    }

    fn my_cpus() -> Vec<usize> {
        let mine = sched_getaffinity(Pid::from_raw(0)).unwrap();
        (0..CpuSet::count())
            .filter(|&c| mine.is_set(c).unwrap())
            .collect()
    }

    #[test]
    fn a_thread_bound_to_one_rails_node_moves_to_the_next_rails_node() {
        // Cluster mode's self-test and a rank with one shared rail bind
        // the same thread to one rail's node after another.
        let root = two_nodes("rebind");
        let sysfs = Sysfs::at(&root);
        std::thread::scope(|s| {
            s.spawn(|| {
                let binding = NicNodeBinding::unless_restricted(&sysfs).unwrap();
                binding.bind("nic0");
                assert_eq!(my_cpus(), [0]);
                binding.bind("nic1");
                assert_eq!(my_cpus(), [1], "still on nic0's node");
                // Made now, in a thread this process bound: restricted.
                assert!(NicNodeBinding::unless_restricted(&sysfs).is_none());
            });
        });
        std::fs::remove_dir_all(&root).unwrap();
    }
}
