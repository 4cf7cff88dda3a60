//! The sysfs reads, under a sysfs root (normally `/sys`; tests pass a
//! fixture tree): a port's negotiated `rate` and its error counters
//! behind the link verdict, and the whole inventory of devices, ports,
//! GIDs and counters behind `rdmaperf` ([`read_devices`]). The engine's
//! `link` and `ports` modules classify and judge what is read here; they
//! read nothing themselves.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use engine::fabric::link::{
    CounterSnapshot, LinkError, LinkRate, is_error_counter, parse_counter, parse_rate,
};

/// `<sysfs_root>/class/infiniband/<device>/ports/<port>`.
pub fn port_dir(sysfs_root: &Path, device: &str, port: u8) -> PathBuf {
    sysfs_root
        .join("class/infiniband")
        .join(device)
        .join("ports")
        .join(port.to_string())
}

/// The port's negotiated rate as the kernel words it, when readable
/// (what a side tells its peer).
pub fn rate_text(sysfs_root: &Path, device: &str, port: u8) -> Option<String> {
    read_rate(sysfs_root, device, port).ok().map(|r| r.text)
}

/// Reads and parses the port's `rate` file.
///
/// # Errors
/// [`LinkError::ReadRate`] or [`LinkError::BadRate`], both naming the
/// file.
pub fn read_rate(sysfs_root: &Path, device: &str, port: u8) -> Result<LinkRate, LinkError> {
    let path = port_dir(sysfs_root, device, port).join("rate");
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

/// Reads every error counter of the port. Counters that are absent,
/// unreadable (permissions, `EINVAL`) or not numbers (`N/A (no PMA)` on
/// old kernels) are left out; a port without counters yields an empty
/// snapshot.
pub fn snapshot_error_counters(sysfs_root: &Path, device: &str, port: u8) -> CounterSnapshot {
    let dir = port_dir(sysfs_root, device, port);
    let mut counters = BTreeMap::new();
    for sub in ["counters", "hw_counters"] {
        // Only the error counters' files are read.
        for (name, value) in counters_in(&dir.join(sub), |name| is_error_counter(sub, name)) {
            counters.insert(format!("{sub}/{name}"), value);
        }
    }
    CounterSnapshot { counters }
}

/// A `<sysfs_root>/class/infiniband` that cannot be listed.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    /// The directory of RDMA devices is missing or unreadable.
    #[error("cannot list RDMA devices in {path}: {source}")]
    List {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// No RDMA device at all: [`verbs::Error::NoDevices`], so the test
    /// binaries, which ask libibverbs, say the same.
    #[error(transparent)]
    NoDevices(verbs::Error),
    /// `-d` names a device that does not exist.
    #[error("no RDMA device {name:?} (devices: {available})")]
    NoSuchDevice {
        /// The name asked for.
        name: String,
        /// The devices that exist, comma-separated.
        available: String,
    },
}

/// A sysfs attribute, trimmed; `None` when absent, unreadable or empty.
pub(crate) fn attr(path: &Path) -> Option<String> {
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

/// The valid (non-zero) GIDs of a port, with their type and netdev.
fn gid_table(port_dir: &Path) -> Vec<engine::fabric::ports::GidEntry> {
    let mut out = Vec::new();
    for name in names_in(&port_dir.join("gids")) {
        let Ok(index) = name.parse::<u32>() else {
            continue;
        };
        let Some(text) = attr(&port_dir.join("gids").join(&name)) else {
            continue;
        };
        let Some(bytes) = engine::fabric::gid::parse_sysfs_gid(&text) else {
            continue;
        };
        if bytes == [0; 16] {
            continue;
        }
        let attrs = port_dir.join("gid_attrs");
        out.push(engine::fabric::ports::GidEntry {
            index,
            kind: attr(&attrs.join("types").join(&name)),
            netdev: attr(&attrs.join("ndevs").join(&name)),
            ipv4: engine::fabric::gid::ipv4_of(&bytes).map(|a| a.to_string()),
            gid: text,
        });
    }
    out
}

/// The one network interface (`class/net/*` beside `class/infiniband`)
/// whose MAC address the node GUID `guid` is derived from
/// ([`engine::fabric::gid::guid_of_mac`]): the netdev of a soft device
/// that names it nowhere in sysfs (siw has no `gid_attrs/ndevs` and no
/// parent device). None when no interface or more than one matches.
fn netdev_of_guid(dev_dir: &Path, guid: &str) -> Option<String> {
    let net = dev_dir.parent()?.parent()?.join("net");
    let mut matching = names_in(&net).into_iter().filter(|n| {
        attr(&net.join(n).join("address"))
            .and_then(|mac| engine::fabric::gid::guid_of_mac(&mac))
            .is_some_and(|g| g == guid)
    });
    let first = matching.next()?;
    matching.next().is_none().then_some(first)
}

/// One device's sysfs directory as [`engine::fabric::ports::DeviceState`] (no
/// MTUs: those come from the verbs, see [`add_mtus`]), with every port or
/// only `only_port` (the others are not read).
pub fn read_device(
    dev_dir: &Path,
    name: &str,
    only_port: Option<u8>,
) -> engine::fabric::ports::DeviceState {
    let device_link = dev_dir.join("device");
    let pci_address = fs::read_link(&device_link)
        .ok()
        .and_then(|target| target.file_name()?.to_str().map(str::to_owned))
        .filter(|n| n.contains(':'));
    let node_guid = attr(&dev_dir.join("node_guid"));
    let node_type = attr(&dev_dir.join("node_type"));
    let iwarp = engine::fabric::ports::is_iwarp_node_type(node_type.as_deref());
    let single_netdev = {
        let nets = names_in(&device_link.join("net"));
        if nets.len() == 1 {
            nets.into_iter().next()
        } else {
            None
        }
    }
    .or_else(|| netdev_of_guid(dev_dir, node_guid.as_deref()?));
    let mut ports = Vec::new();
    for p in names_in(&dev_dir.join("ports")) {
        let Ok(port) = p.parse::<u8>() else {
            continue;
        };
        if only_port.is_some_and(|only| only != port) {
            continue;
        }
        let dir = dev_dir.join("ports").join(&p);
        let mut gids = gid_table(&dir);
        let netdev = gids
            .iter()
            .find_map(|g| g.netdev.clone())
            .or_else(|| single_netdev.clone());
        if iwarp {
            // iWARP GIDs have no `gid_attrs/ndevs`: they are the port's
            // netdev's (siw and cxgb4 make GID 0 of its MAC).
            for g in gids.iter_mut().filter(|g| g.netdev.is_none()) {
                g.netdev.clone_from(&netdev);
            }
        }
        ports.push(engine::fabric::ports::PortState {
            port,
            state: attr(&dir.join("state")),
            phys_state: attr(&dir.join("phys_state")),
            rate: attr(&dir.join("rate")),
            link_layer: attr(&dir.join("link_layer")),
            lid: attr(&dir.join("lid")),
            sm_lid: attr(&dir.join("sm_lid")),
            active_mtu: None,
            max_mtu: None,
            netdev,
            gids,
            counters: counters_in(&dir.join("counters"), |_| true),
            hw_counters: counters_in(&dir.join("hw_counters"), |_| true),
            counters_ext: counters_in(&dir.join("counters_ext"), |_| true),
        });
    }
    engine::fabric::ports::DeviceState {
        name: name.to_owned(),
        node_type,
        node_guid,
        fw_ver: attr(&dev_dir.join("fw_ver")),
        board_id: attr(&dev_dir.join("board_id")),
        hca_type: attr(&dev_dir.join("hca_type")),
        numa_node: attr(&device_link.join("numa_node")).and_then(|n| n.parse().ok()),
        pci_address,
        ports,
    }
}

/// Every RDMA device under `<sysfs_root>/class/infiniband` (or only
/// `only`), sorted by name, with every port (or only port `only_port`:
/// a device without it has no ports).
///
/// # Errors
/// [`InventoryError`]: the directory cannot be listed, holds no device,
/// or has no device named `only`.
pub fn read_devices(
    sysfs_root: &Path,
    only: Option<&str>,
    only_port: Option<u8>,
) -> Result<Vec<engine::fabric::ports::DeviceState>, InventoryError> {
    let dir = sysfs_root.join("class/infiniband");
    if let Err(source) = fs::read_dir(&dir) {
        return Err(if source.kind() == std::io::ErrorKind::NotFound {
            InventoryError::NoDevices(verbs::Error::NoDevices { dir })
        } else {
            InventoryError::List { path: dir, source }
        });
    }
    let names = names_in(&dir);
    if names.is_empty() {
        return Err(InventoryError::NoDevices(verbs::Error::NoDevices { dir }));
    }
    if let Some(want) = only
        && !names.iter().any(|n| n == want)
    {
        return Err(InventoryError::NoSuchDevice {
            name: want.to_owned(),
            available: names.join(", "),
        });
    }
    Ok(names
        .iter()
        .filter(|n| only.is_none_or(|w| w == n.as_str()))
        .map(|n| read_device(&dir.join(n), n, only_port))
        .collect())
}

/// Fills in each port's active and maximum MTU from the verbs (sysfs
/// has neither). A device that cannot be opened keeps `None`; the
/// returned lines say which and why (for stderr).
pub fn add_mtus(devices: &mut [engine::fabric::ports::DeviceState]) -> Vec<String> {
    let mut problems = Vec::new();
    for dev in devices {
        let ctx = match verbs::Context::open(&dev.name) {
            Ok(ctx) => ctx,
            Err(e) => {
                problems.push(format!("{}: MTU unknown: {e}", dev.name));
                continue;
            }
        };
        for port in &mut dev.ports {
            match ctx.query_port(port.port) {
                Ok(attr) => {
                    port.active_mtu = Some(attr.active_mtu.bytes());
                    port.max_mtu = Some(attr.max_mtu.bytes());
                }
                Err(e) => {
                    problems.push(format!("{} port {}: MTU unknown: {e}", dev.name, port.port))
                }
            }
        }
    }
    problems
}
