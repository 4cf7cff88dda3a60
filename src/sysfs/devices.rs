//! The inventory of devices, ports, GIDs and counters behind `rdmaperf`
//! and cluster mode's rails ([`super::Sysfs::devices`]), and the MTUs the
//! verbs add to it ([`add_mtus`]).

use std::fs;
use std::path::{Path, PathBuf};

use super::{attr, counters_in, names_in};

/// A `<root>/class/infiniband` that cannot be listed.
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
fn read_device(
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

/// Every RDMA device under `<root>/class/infiniband` (or only
/// `only`), sorted by name, with every port (or only port `only_port`:
/// a device without it has no ports).
///
/// # Errors
/// [`InventoryError`]: the directory cannot be listed, holds no device,
/// or has no device named `only`.
pub(super) fn read_devices(
    root: &Path,
    only: Option<&str>,
    only_port: Option<u8>,
) -> Result<Vec<engine::fabric::ports::DeviceState>, InventoryError> {
    let dir = root.join("class/infiniband");
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
