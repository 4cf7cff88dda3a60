//! The machine's sysfs, read through one value: [`Sysfs`], a view of a
//! sysfs root (`/sys`; tests and `--sysfs-root` pass a fixture tree or a
//! host's tree mounted elsewhere). It is built once, where a command line
//! becomes the options of a run (`args`, `fabric::SysfsArgs::sysfs`,
//! `cluster`), and handed down; nothing below builds a path under the root
//! itself. [`PortView`] is one port of it: what a run reads of the port it
//! measures (rate, error counters, `-W`'s counters, the port's state for
//! `--prom`).
//!
//! What is read here is kept as read or parsed by the engine's rules
//! (`engine::fabric::link` classifies rates and counters,
//! `engine::fabric::ports` interprets the inventory); this module judges
//! nothing. Reads are never cached: a reading taken for a before/after
//! delta, or for a file rewritten after every size, is current.

mod devices;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use engine::fabric::link::{
    CounterSnapshot, LinkError, LinkRate, is_error_counter, parse_counter, parse_rate,
};
use engine::fabric::ports::DeviceState;

pub use devices::{InventoryError, add_mtus};

/// The root of the live system's sysfs.
const LIVE_ROOT: &str = "/sys";

/// The sysfs a run reads: the root every read is under. Cheap to clone
/// (one path); [`Default`] is the live `/sys`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sysfs {
    root: PathBuf,
}

impl Default for Sysfs {
    fn default() -> Self {
        Self::live()
    }
}

impl Sysfs {
    /// The live system's `/sys`.
    pub fn live() -> Self {
        Self::at(LIVE_ROOT)
    }

    /// The sysfs below `root` (a fixture tree, a host's `/sys` mounted in
    /// a container).
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The root (what `--sysfs-root` names, passed on to child processes).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether this is the live system's sysfs: the devices it shows can
    /// then be opened for what sysfs lacks (the MTU), and the interfaces'
    /// addresses asked of the kernel.
    pub fn is_live(&self) -> bool {
        self.root == Path::new(LIVE_ROOT)
    }

    /// Port `port` of RDMA device `device` (whether or not it exists).
    pub fn port(&self, device: &str, port: u8) -> PortView {
        PortView {
            sysfs: self.clone(),
            device: device.to_owned(),
            port,
        }
    }

    /// The port's negotiated rate as the kernel words it, when readable
    /// (what a side tells its peer).
    pub fn rate_text(&self, device: &str, port: u8) -> Option<String> {
        self.port(device, port).rate_text()
    }

    /// Every RDMA device under `class/infiniband` (or only `only`), sorted
    /// by name (`mlx5_2` before `mlx5_10`), with every port (or only port
    /// `only_port`: a device without it has no ports). No MTUs: those
    /// come from the verbs ([`add_mtus`]).
    ///
    /// # Errors
    /// [`InventoryError`]: the directory cannot be listed, holds no device,
    /// or has no device named `only`.
    pub fn devices(
        &self,
        only: Option<&str>,
        only_port: Option<u8>,
    ) -> Result<Vec<DeviceState>, InventoryError> {
        devices::read_devices(&self.root, only, only_port)
    }

    /// The NUMA node of `device`'s NIC, when the kernel knows one
    /// (`class/infiniband/DEV/device/numa_node`; `-1`: none).
    pub fn nic_node(&self, device: &str) -> Option<u32> {
        let text = attr(
            &self
                .infiniband()
                .join(device)
                .join("device")
                .join("numa_node"),
        )?;
        text.parse::<i64>().ok().and_then(|n| u32::try_from(n).ok())
    }

    /// NUMA node `node`'s CPU list as the kernel words it
    /// (`devices/system/node/nodeN/cpulist`, e.g. `0-3,8`).
    pub fn node_cpulist(&self, node: u32) -> Option<String> {
        attr(
            &self
                .root
                .join(format!("devices/system/node/node{node}/cpulist")),
        )
    }

    /// The online CPUs' list as the kernel words it
    /// (`devices/system/cpu/online`).
    pub fn online_cpulist(&self) -> Option<String> {
        attr(&self.root.join("devices/system/cpu/online"))
    }

    /// Every network interface under `class/net`, sorted by name, with
    /// the attributes `doctor nccl` judges.
    pub fn net_interfaces(&self) -> Vec<NetDevAttrs> {
        let dir = self.root.join("class/net");
        let mut names: Vec<String> = fs::read_dir(&dir)
            .map(|e| {
                e.flatten()
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
            .into_iter()
            .map(|name| NetDevAttrs {
                operstate: attr(&dir.join(&name).join("operstate")),
                flags: attr(&dir.join(&name).join("flags")),
                name,
            })
            .collect()
    }

    /// A counter of network interface `netdev` (`class/net/<if>/<name>`,
    /// e.g. `carrier_changes`), when it is a readable integer.
    pub fn netdev_counter(&self, netdev: &str, name: &str) -> Option<u64> {
        if netdev.contains('/') || netdev.starts_with('.') {
            return None;
        }
        parse_counter(&attr(&self.root.join("class/net").join(netdev).join(name))?)
    }

    /// How many PCI devices are bound to the `nvidia` driver.
    pub fn nvidia_devices(&self) -> usize {
        fs::read_dir(self.root.join("bus/pci/drivers/nvidia"))
            .map(|e| {
                e.flatten()
                    .filter(|e| e.file_name().to_string_lossy().contains(':'))
                    .count()
            })
            .unwrap_or(0)
    }

    /// Whether kernel module `name` is loaded (`module/NAME` exists).
    pub fn has_module(&self, name: &str) -> bool {
        self.root.join("module").join(name).exists()
    }

    fn infiniband(&self) -> PathBuf {
        self.root.join("class/infiniband")
    }
}

/// One network interface's attributes, as read (`None`: absent,
/// unreadable or empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetDevAttrs {
    /// The interface's name.
    pub name: String,
    /// `operstate`: `up`, `down`, `unknown`, ...
    pub operstate: Option<String>,
    /// `flags`, hexadecimal as the kernel writes it (`0x1003`).
    pub flags: Option<String>,
}

/// One port of one RDMA device in a [`Sysfs`]: what a run reads of the
/// port it measures. Every method reads now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortView {
    sysfs: Sysfs,
    device: String,
    port: u8,
}

impl PortView {
    /// The device's name.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// The port's number.
    pub fn port(&self) -> u8 {
        self.port
    }

    /// `class/infiniband/<device>/ports/<port>`.
    pub fn dir(&self) -> PathBuf {
        self.sysfs
            .infiniband()
            .join(&self.device)
            .join("ports")
            .join(self.port.to_string())
    }

    /// Reads and parses the port's `rate` file.
    ///
    /// # Errors
    /// [`LinkError::ReadRate`] or [`LinkError::BadRate`], both naming the
    /// file.
    pub fn rate(&self) -> Result<LinkRate, LinkError> {
        let path = self.dir().join("rate");
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(source) => return Err(LinkError::ReadRate { path, source }),
        };
        parse_rate(&text).map_err(|e| match e {
            LinkError::BadRate { text, .. } => LinkError::BadRate {
                text,
                path: Some(path),
            },
            other => other,
        })
    }

    /// The negotiated rate as the kernel words it, when readable.
    pub fn rate_text(&self) -> Option<String> {
        self.rate().ok().map(|r| r.text)
    }

    /// Every error counter of the port. Counters that are absent,
    /// unreadable (permissions, `EINVAL`) or not numbers (`N/A (no PMA)`
    /// on old kernels) are left out; a port without counters yields an
    /// empty snapshot.
    pub fn error_counters(&self) -> CounterSnapshot {
        let dir = self.dir();
        let mut counters = BTreeMap::new();
        for sub in ["counters", "hw_counters"] {
            // Only the error counters' files are read.
            for (name, value) in counters_in(&dir.join(sub), |name| is_error_counter(sub, name)) {
                counters.insert(format!("{sub}/{name}"), value);
            }
        }
        CounterSnapshot { counters }
    }

    /// The counter at `name`, a path below the port's directory
    /// (`counters/port_xmit_data`), as a number.
    ///
    /// # Errors
    /// A message naming the counter (and its file when unreadable), or
    /// the text that is not a number.
    pub fn counter(&self, name: &str) -> Result<u64, String> {
        let path = self.dir().join(name);
        let t = fs::read_to_string(&path)
            .map_err(|e| format!("cannot read counter {name} ({}): {e}", path.display()))?;
        t.trim()
            .parse()
            .map_err(|_| format!("counter {name} reads {:?}, not a number", t.trim()))
    }

    /// This port as the inventory shows it (its device with this port
    /// alone); empty when the sysfs does not show the device (a fixture
    /// root in tests).
    pub fn state(&self) -> Vec<DeviceState> {
        self.sysfs
            .devices(Some(&self.device), Some(self.port))
            .unwrap_or_default()
    }
}

/// A sysfs attribute, trimmed; `None` when absent, unreadable or empty.
fn attr(path: &Path) -> Option<String> {
    let text = fs::read_to_string(path).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

/// Every integer counter file in `dir` whose name `wanted` keeps
/// (`N/A (no PMA)` and unreadable files are left out), by file name.
fn counters_in(dir: &Path, wanted: impl Fn(&str) -> bool) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if !wanted(&name) {
            continue;
        }
        if let Some(value) = fs::read_to_string(entry.path())
            .ok()
            .and_then(|t| parse_counter(&t))
        {
            out.insert(name, value);
        }
    }
    out
}

/// The sorted names of the entries of `dir` (empty when unreadable).
fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    names.sort_by_key(|n| natural_key(n));
    names
}

/// Sorts `mlx5_2` before `mlx5_10` and GID `2` before `10`.
fn natural_key(name: &str) -> (String, u64) {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (stem, number) = name.split_at(name.len() - digits);
    (stem.to_owned(), number.parse().unwrap_or(0))
}
