//! What a host's RDMA ports look like, as plain data: the model behind
//! `rdmaperf ports`, `rdmaperf doctor nccl` and the Prometheus port
//! metrics. The binary fills it from sysfs (`/sys/class/infiniband`, the
//! files ibstat and show_gids read) and, where the device can be opened,
//! the verbs (MTUs); everything here only interprets it.
//!
//! Raw kernel strings are kept as read (trimmed), so every reader —
//! text, JSON, Prometheus, the NCCL checks — interprets them one way,
//! through the methods here.

use std::collections::BTreeMap;

use serde::Serialize;

/// One RDMA device (`/sys/class/infiniband/<name>`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DeviceState {
    /// Kernel name, e.g. `mlx5_0`, `rxe0`.
    pub name: String,
    /// `node_type`, e.g. `1: CA`.
    pub node_type: Option<String>,
    /// `node_guid`, e.g. `0c42:a103:00b0:1234`.
    pub node_guid: Option<String>,
    /// `fw_ver`.
    pub fw_ver: Option<String>,
    /// `board_id`, e.g. `MT_0000000838`.
    pub board_id: Option<String>,
    /// `hca_type`, e.g. `MT4129`.
    pub hca_type: Option<String>,
    /// NUMA node of the device's PCI function (`device/numa_node`; the
    /// kernel's -1 for "none" is kept).
    pub numa_node: Option<i32>,
    /// PCI address of the device's function, e.g. `0000:17:00.0`.
    pub pci_address: Option<String>,
    /// Its ports, by number.
    pub ports: Vec<PortState>,
}

/// One port (`ports/<n>/`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PortState {
    /// Port number (1-based).
    pub port: u8,
    /// `state`, raw: `4: ACTIVE`.
    pub state: Option<String>,
    /// `phys_state`, raw: `5: LinkUp`.
    pub phys_state: Option<String>,
    /// `rate`, raw: `400 Gb/sec (4X NDR)`.
    pub rate: Option<String>,
    /// `link_layer`: `InfiniBand` or `Ethernet`.
    pub link_layer: Option<String>,
    /// `lid`, raw hex: `0x1`.
    pub lid: Option<String>,
    /// `sm_lid`, raw hex.
    pub sm_lid: Option<String>,
    /// Active MTU in bytes (from the verbs; `None` when the device was not
    /// opened, e.g. on a fixture tree).
    pub active_mtu: Option<u32>,
    /// Maximum MTU in bytes (idem).
    pub max_mtu: Option<u32>,
    /// The network interface of a RoCE port (the netdev of its GIDs).
    pub netdev: Option<String>,
    /// Valid (non-zero) GID table entries.
    pub gids: Vec<GidEntry>,
    /// `counters/<name>` values (PMA counters, raw: the data counters are
    /// in 4-byte words). Files that are not integers (`N/A (no PMA)`) are
    /// left out.
    pub counters: BTreeMap<String, u64>,
    /// `hw_counters/<name>` values (driver counters, raw).
    pub hw_counters: BTreeMap<String, u64>,
}

/// One valid GID table entry (`gids/<i>`, `gid_attrs/types/<i>`,
/// `gid_attrs/ndevs/<i>`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GidEntry {
    /// Index in the table.
    pub index: u32,
    /// The GID as sysfs prints it (IPv6 notation, e.g.
    /// `0000:0000:0000:0000:0000:ffff:a9fe:0101`).
    pub gid: String,
    /// `gid_attrs/types/<i>`, raw: `IB/RoCE v1` or `RoCE v2`.
    pub kind: Option<String>,
    /// `gid_attrs/ndevs/<i>`: the netdev of a RoCE GID.
    pub netdev: Option<String>,
    /// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`).
    pub ipv4: Option<String>,
}

/// The number and the name of a `"<id>: <NAME>"` file (`state`,
/// `phys_state`, `node_type`): `("4: ACTIVE")` → `(4, "ACTIVE")`.
pub fn split_id_name(raw: &str) -> Option<(u32, &str)> {
    let (id, name) = raw.trim().split_once(':')?;
    Some((id.trim().parse().ok()?, name.trim()))
}

impl PortState {
    /// The logical state's id (`4` of `4: ACTIVE`).
    pub fn state_id(&self) -> Option<u32> {
        self.state.as_deref().and_then(split_id_name).map(|(i, _)| i)
    }

    /// The logical state's name (`ACTIVE`).
    pub fn state_name(&self) -> Option<&str> {
        self.state.as_deref().and_then(split_id_name).map(|(_, n)| n)
    }

    /// The physical state's id (`5` of `5: LinkUp`).
    pub fn phys_state_id(&self) -> Option<u32> {
        self.phys_state
            .as_deref()
            .and_then(split_id_name)
            .map(|(i, _)| i)
    }

    /// The physical state's name (`LinkUp`).
    pub fn phys_state_name(&self) -> Option<&str> {
        self.phys_state
            .as_deref()
            .and_then(split_id_name)
            .map(|(_, n)| n)
    }

    /// The negotiated rate in Gb/s (`400` of `400 Gb/sec (4X NDR)`).
    pub fn rate_gbps(&self) -> Option<f64> {
        self.rate
            .as_deref()
            .and_then(|r| crate::link::parse_rate(r).ok())
            .map(|r| r.gbps)
    }

    /// The lane count of the rate string (`4` of `(4X NDR)`).
    pub fn width_lanes(&self) -> Option<u32> {
        let (w, _) = rate_detail(self.rate.as_deref()?)?;
        w.strip_suffix('X')?.parse().ok()
    }

    /// The lane speed name of the rate string (`NDR` of `(4X NDR)`).
    pub fn speed_name(&self) -> Option<&str> {
        rate_detail(self.rate.as_deref()?).map(|(_, s)| s)
    }

    /// Whether the port is Ethernet (RoCE).
    pub fn is_ethernet(&self) -> bool {
        self.link_layer.as_deref() == Some("Ethernet")
    }
}

/// `("4X", "NDR")` of `400 Gb/sec (4X NDR)`.
fn rate_detail(rate: &str) -> Option<(&str, &str)> {
    let (_, rest) = rate.split_once('(')?;
    let (inside, _) = rest.split_once(')')?;
    let mut words = inside.split_whitespace();
    let width = words.next()?;
    let speed = words.next()?;
    Some((width, speed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(state: &str, phys: &str, rate: &str) -> PortState {
        PortState {
            port: 1,
            state: Some(state.into()),
            phys_state: Some(phys.into()),
            rate: Some(rate.into()),
            ..PortState::default()
        }
    }

    #[test]
    fn kernel_strings_are_read_one_way() {
        let p = port("4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)");
        assert_eq!(p.state_id(), Some(4));
        assert_eq!(p.state_name(), Some("ACTIVE"));
        assert_eq!(p.phys_state_id(), Some(5));
        assert_eq!(p.phys_state_name(), Some("LinkUp"));
        assert_eq!(p.rate_gbps(), Some(400.0));
        assert_eq!(p.width_lanes(), Some(4));
        assert_eq!(p.speed_name(), Some("NDR"));
        let slow = port("1: DOWN", "3: Disabled", "2.5 Gb/sec (1X SDR)");
        assert_eq!(slow.rate_gbps(), Some(2.5));
        assert_eq!(slow.width_lanes(), Some(1));
        assert_eq!(split_id_name("garbage"), None);
    }
}
