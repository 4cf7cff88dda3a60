//! Rails: the RDMA ports of a node that cluster mode drives. On a
//! rail-optimised fabric NIC k of every node sits on rail k's switches,
//! so rail k of one node meets rail k of its partner. This module picks a
//! node's rails from its sysfs inventory (`--rails auto`: every ACTIVE
//! port of the node's main link layer, in device-name order) or from the
//! names given (`--rails mlx5_0,mlx5_3:1`), and holds the coordinator's
//! check that every rank brought the same rails: a rank whose rail count
//! or a rail's rate differs from most ranks', or whose named rail is not
//! ACTIVE, is a finding against that node (a NIC that did not come up),
//! never a crash. Pure: the caller reads sysfs (`cli::sysfs`).

use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::fabric::ports::DeviceState;

/// Most rails one node may name or bring (GPU nodes have up to 8 NICs;
/// the cap bounds what a peer's identity may carry).
pub const MAX_RAILS: usize = 32;

/// `--rails`: find them, or these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RailSpec {
    /// Every ACTIVE port of the node's main link layer.
    Auto,
    /// These ports, in this order (rail 0 first).
    Named(Vec<RailName>),
}

/// One `--rails` entry: `DEV` or `DEV:PORT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RailName {
    /// The device, e.g. `mlx5_3`.
    pub device: String,
    /// The port; `None`: the device's first ACTIVE port (else its first).
    pub port: Option<u8>,
}

/// One rail of a node, as its rank reports it in its identity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rail {
    /// The device, e.g. `mlx5_3`.
    pub device: String,
    /// The port number (1-based).
    pub port: u8,
    /// Whether the port was ACTIVE when the rank started.
    pub active: bool,
    /// `InfiniBand` or `Ethernet`, when sysfs says.
    #[serde(default)]
    pub link_layer: Option<String>,
    /// The negotiated rate, Gb/s, when it could be read.
    #[serde(default)]
    pub rate_gbps: Option<f64>,
    /// The NUMA node of the device's PCI function (`None`, or the
    /// kernel's -1, when it has none).
    #[serde(default)]
    pub numa_node: Option<i32>,
    /// The IPv4 address of its network interface, when it has one (RoCE,
    /// iWARP, IPoIB): where rdma_cm reaches this rail.
    #[serde(default)]
    pub address: Option<String>,
    /// The port's GUID on InfiniBand (the low 64 bits of GID 0, as
    /// `ibstat` prints "Port GUID"): what `ibnetdiscover` names the port
    /// by, so the topology finds the switch it is cabled to
    /// (`cluster::topology`).
    #[serde(default)]
    pub port_guid: Option<u64>,
}

impl Rail {
    /// `DEV:PORT`, as the reports name a device.
    pub fn name(&self) -> String {
        format!("{}:{}", self.device, self.port)
    }
}

/// A node's rails, and the ports `--rails auto` left out and why.
#[derive(Debug, Clone, PartialEq)]
pub struct RailSelection {
    /// Rail 0 first.
    pub rails: Vec<Rail>,
    /// `DEV:PORT (why)` for each port that is not a rail.
    pub skipped: Vec<String>,
}

/// Why `--rails` could not be honoured.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RailError {
    /// `--rails` with nothing in it.
    #[error("--rails: empty (give auto, or DEV[:PORT],...)")]
    Empty,
    /// An entry that is not `DEV` or `DEV:PORT`.
    #[error("--rails: {0:?} is not DEV or DEV:PORT (PORT 1-255)")]
    Syntax(String),
    /// More entries than [`MAX_RAILS`].
    #[error("--rails: {0} rails named, at most {MAX_RAILS}")]
    TooMany(usize),
    /// The same port twice.
    #[error("--rails: {0} named twice")]
    Duplicate(String),
    /// A named device this node does not have.
    #[error("--rails: this node has no RDMA device {0} (it has: {1})")]
    NoDevice(String, String),
    /// A named port its device does not have.
    #[error("--rails: {0} has no port {1}")]
    NoPort(String, u8),
    /// `--rails auto` on a node without an ACTIVE port.
    #[error("--rails auto: no ACTIVE RDMA port on this node (devices: {0})")]
    NoneActive(String),
}

/// Parses `--rails`: `auto`, or `DEV[:PORT]` entries separated by commas.
pub fn parse_spec(text: &str) -> Result<RailSpec, RailError> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("auto") {
        return Ok(RailSpec::Auto);
    }
    if text.is_empty() {
        return Err(RailError::Empty);
    }
    let entries: Vec<&str> = text.split(',').map(str::trim).collect();
    if entries.len() > MAX_RAILS {
        return Err(RailError::TooMany(entries.len()));
    }
    let mut names: Vec<RailName> = Vec::with_capacity(entries.len());
    for entry in entries {
        let (device, port) = match entry.rsplit_once(':') {
            Some((d, p)) => match p.parse::<u8>() {
                Ok(p) if p >= 1 => (d, Some(p)),
                _ => return Err(RailError::Syntax(entry.to_owned())),
            },
            None => (entry, None),
        };
        let valid = !device.is_empty()
            && device
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
        if !valid {
            return Err(RailError::Syntax(entry.to_owned()));
        }
        let name = RailName {
            device: device.to_owned(),
            port,
        };
        if names.contains(&name) {
            return Err(RailError::Duplicate(entry.to_owned()));
        }
        names.push(name);
    }
    Ok(RailSpec::Named(names))
}

/// Device names in the order people number NICs: `mlx5_2` before
/// `mlx5_10` (digit runs compare as numbers).
pub fn device_order(a: &str, b: &str) -> Ordering {
    fn chunks(s: &str) -> Vec<(bool, &str)> {
        let mut out = Vec::new();
        let mut start = 0;
        let bytes = s.as_bytes();
        for i in 1..=bytes.len() {
            if i == bytes.len() || bytes[i].is_ascii_digit() != bytes[start].is_ascii_digit() {
                out.push((bytes[start].is_ascii_digit(), &s[start..i]));
                start = i;
            }
        }
        out
    }
    let (ca, cb) = (chunks(a), chunks(b));
    for ((da, xa), (db, xb)) in ca.iter().zip(&cb) {
        let o = if *da && *db {
            let (ta, tb) = (xa.trim_start_matches('0'), xb.trim_start_matches('0'));
            ta.len().cmp(&tb.len()).then_with(|| ta.cmp(tb))
        } else {
            xa.cmp(xb)
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    ca.len().cmp(&cb.len()).then_with(|| a.cmp(b))
}

/// An InfiniBand port's GUID: the interface identifier (low 64 bits) of
/// its GID 0, which the subnet manager builds from the port GUID (IBA
/// 4.1.1). `None` on RoCE and iWARP, whose GIDs come from addresses.
fn ib_port_guid(port: &crate::fabric::ports::PortState) -> Option<u64> {
    if port.link_layer.as_deref() != Some("InfiniBand") {
        return None;
    }
    let gid = port.gids.iter().find(|g| g.index == 0)?;
    let bytes = crate::fabric::gid::parse_sysfs_gid(&gid.gid)?;
    let guid = u64::from_be_bytes(bytes[8..].try_into().ok()?);
    (guid != 0).then_some(guid)
}

/// This node's rails under `spec`, from its inventory.
pub fn select(devices: &[DeviceState], spec: &RailSpec) -> Result<RailSelection, RailError> {
    let mut devices: Vec<&DeviceState> = devices.iter().collect();
    devices.sort_by(|a, b| device_order(&a.name, &b.name));
    let rail = |d: &DeviceState, p: &crate::fabric::ports::PortState| Rail {
        address: None,
        device: d.name.clone(),
        port: p.port,
        active: p.state_id() == Some(4),
        link_layer: p.link_layer.clone(),
        rate_gbps: p.rate_gbps(),
        numa_node: d.numa_node.filter(|&n| n >= 0),
        port_guid: ib_port_guid(p),
    };
    match spec {
        RailSpec::Named(names) => {
            let rails = names
                .iter()
                .map(|n| {
                    let d = devices.iter().find(|d| d.name == n.device).ok_or_else(|| {
                        RailError::NoDevice(n.device.clone(), device_list(&devices))
                    })?;
                    let port = match n.port {
                        Some(p) => d
                            .ports
                            .iter()
                            .find(|q| q.port == p)
                            .ok_or_else(|| RailError::NoPort(n.device.clone(), p))?,
                        None => d
                            .ports
                            .iter()
                            .find(|q| q.state_id() == Some(4))
                            .or_else(|| d.ports.first())
                            .ok_or_else(|| RailError::NoPort(n.device.clone(), 1))?,
                    };
                    Ok(rail(d, port))
                })
                .collect::<Result<Vec<Rail>, RailError>>()?;
            Ok(RailSelection {
                rails,
                skipped: Vec::new(),
            })
        }
        RailSpec::Auto => {
            let all: Vec<Rail> = devices
                .iter()
                .flat_map(|d| d.ports.iter().map(move |p| (d, p)))
                .map(|(d, p)| rail(d, p))
                .collect();
            // The main link layer: the one most ACTIVE ports have; on a
            // tie, the first ACTIVE port's.
            let mut counts: BTreeMap<Option<&str>, usize> = BTreeMap::new();
            for r in all.iter().filter(|r| r.active) {
                *counts.entry(r.link_layer.as_deref()).or_default() += 1;
            }
            let most = counts.values().copied().max().unwrap_or(0);
            let layer = all
                .iter()
                .filter(|r| r.active)
                .map(|r| r.link_layer.as_deref())
                .find(|l| counts.get(l) == Some(&most))
                .ok_or_else(|| RailError::NoneActive(device_list(&devices)))?
                .map(str::to_owned);
            let mut selection = RailSelection {
                rails: Vec::new(),
                skipped: Vec::new(),
            };
            for r in all {
                if !r.active {
                    selection.skipped.push(format!("{} (not ACTIVE)", r.name()));
                } else if r.link_layer != layer {
                    selection.skipped.push(format!(
                        "{} ({}; the rails are {})",
                        r.name(),
                        r.link_layer.as_deref().unwrap_or("link layer unknown"),
                        layer.as_deref().unwrap_or("of an unknown link layer")
                    ));
                } else if selection.rails.len() < MAX_RAILS {
                    selection.rails.push(r);
                } else {
                    selection
                        .skipped
                        .push(format!("{} (more than {MAX_RAILS} rails)", r.name()));
                }
            }
            Ok(selection)
        }
    }
}

fn device_list(devices: &[&DeviceState]) -> String {
    if devices.is_empty() {
        return "none".to_owned();
    }
    devices
        .iter()
        .map(|d| d.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The coordinator's check across ranks (`rails[r]`: rank r's rails,
/// empty when it reported none, e.g. under `--simulate`): per rank, what
/// is wrong with its rails against most ranks'. A rank whose rail count
/// differs from the most common count, a rail whose rate differs from
/// most ranks' rate on that rail, a rail that is not ACTIVE.
pub fn findings(rails: &[Vec<Rail>]) -> Vec<Vec<String>> {
    let mut out = vec![Vec::new(); rails.len()];
    let reported = || rails.iter().filter(|r| !r.is_empty());
    // The most common count; on a tie the larger (a NIC that did not come
    // up is likelier than one too many).
    let mut counts: BTreeMap<usize, usize> = BTreeMap::new();
    for r in reported() {
        *counts.entry(r.len()).or_default() += 1;
    }
    let Some((&usual, _)) = counts.iter().max_by(|a, b| a.1.cmp(b.1).then(a.0.cmp(b.0))) else {
        return out;
    };
    // Rates compared to 0.1 Gb/s; per rail index, the most common rate
    // (on a tie the higher: the down-trained one is the finding).
    let tenth = |g: f64| (g * 10.0).round() as i64;
    let usual_rate: Vec<Option<i64>> = (0..usual)
        .map(|k| {
            let mut rates: BTreeMap<i64, usize> = BTreeMap::new();
            for r in reported() {
                if let Some(g) = r.get(k).and_then(|x| x.rate_gbps) {
                    *rates.entry(tenth(g)).or_default() += 1;
                }
            }
            rates
                .into_iter()
                .max_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)))
                .map(|(rate, _)| rate)
        })
        .collect();
    for (rank, mine) in rails.iter().enumerate() {
        if mine.is_empty() {
            continue;
        }
        let notes = &mut out[rank];
        if mine.len() != usual {
            notes.push(format!(
                "{} rail{}, most ranks have {usual}",
                mine.len(),
                if mine.len() == 1 { "" } else { "s" }
            ));
        }
        for (k, rail) in mine.iter().enumerate() {
            if !rail.active {
                notes.push(format!("rail {k} {} is not ACTIVE", rail.name()));
            }
            let usual = usual_rate.get(k).copied().flatten();
            if let (Some(g), Some(u)) = (rail.rate_gbps, usual)
                && tenth(g) != u
            {
                notes.push(format!(
                    "rail {k} {} at {} Gb/s, most ranks' rail {k} at {} Gb/s",
                    rail.name(),
                    tenth(g) as f64 / 10.0,
                    u as f64 / 10.0
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::ports::PortState;

    fn port(n: u8, state: &str, rate: &str, layer: &str) -> PortState {
        PortState {
            port: n,
            state: Some(state.to_owned()),
            rate: Some(rate.to_owned()),
            link_layer: Some(layer.to_owned()),
            ..PortState::default()
        }
    }

    fn device(name: &str, numa: i32, ports: Vec<PortState>) -> DeviceState {
        DeviceState {
            name: name.to_owned(),
            numa_node: Some(numa),
            ports,
            ..DeviceState::default()
        }
    }

    /// A GPU node: mlx5_0..mlx5_7 NDR InfiniBand, 4 per NUMA node, listed
    /// out of order (as readdir gives them), plus an Ethernet NIC.
    fn eight_ndr() -> Vec<DeviceState> {
        let mut d: Vec<DeviceState> = [7, 2, 0, 5, 1, 6, 3, 4]
            .into_iter()
            .map(|i| {
                device(
                    &format!("mlx5_{i}"),
                    i / 4,
                    vec![port(1, "4: ACTIVE", "400 Gb/sec (4X NDR)", "InfiniBand")],
                )
            })
            .collect();
        d.push(device(
            "mlx5_10",
            0,
            vec![port(1, "4: ACTIVE", "100 Gb/sec (4X EDR)", "Ethernet")],
        ));
        d
    }

    #[test]
    fn spec_parses_auto_and_names_and_refuses_bad_ones() {
        assert_eq!(parse_spec("auto"), Ok(RailSpec::Auto));
        assert_eq!(
            parse_spec("mlx5_0, mlx5_3:2"),
            Ok(RailSpec::Named(vec![
                RailName {
                    device: "mlx5_0".into(),
                    port: None
                },
                RailName {
                    device: "mlx5_3".into(),
                    port: Some(2)
                },
            ]))
        );
        assert_eq!(parse_spec(""), Err(RailError::Empty));
        assert_eq!(
            parse_spec("mlx5_0:0"),
            Err(RailError::Syntax("mlx5_0:0".into()))
        );
        assert_eq!(parse_spec("mlx5_0,"), Err(RailError::Syntax(String::new())));
        assert_eq!(parse_spec("a b"), Err(RailError::Syntax("a b".into())));
        assert_eq!(
            parse_spec("mlx5_0,mlx5_0"),
            Err(RailError::Duplicate("mlx5_0".into()))
        );
        let many = (0..33)
            .map(|i| format!("d{i}"))
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(parse_spec(&many), Err(RailError::TooMany(33)));
        assert!(
            RailError::Syntax("x:0".into())
                .to_string()
                .starts_with("--rails: ")
        );
    }

    #[test]
    fn device_names_sort_as_nics_are_numbered() {
        let mut names = vec!["mlx5_10", "mlx5_2", "mlx5_1", "bnxt_re0", "mlx5_0"];
        names.sort_by(|a, b| device_order(a, b));
        assert_eq!(names, ["bnxt_re0", "mlx5_0", "mlx5_1", "mlx5_2", "mlx5_10"]);
    }

    #[test]
    fn auto_takes_every_active_port_of_the_main_link_layer_in_order() {
        let s = select(&eight_ndr(), &RailSpec::Auto).unwrap();
        let names: Vec<String> = s.rails.iter().map(Rail::name).collect();
        assert_eq!(
            names,
            (0..8).map(|i| format!("mlx5_{i}:1")).collect::<Vec<_>>()
        );
        assert!(s.rails.iter().all(|r| r.rate_gbps == Some(400.0)));
        assert_eq!(s.rails[3].numa_node, Some(0));
        assert_eq!(s.rails[4].numa_node, Some(1));
        assert_eq!(
            s.skipped,
            ["mlx5_10:1 (Ethernet; the rails are InfiniBand)"]
        );
    }

    #[test]
    fn a_port_down_is_not_a_rail_and_the_count_differs() {
        let mut devices = eight_ndr();
        let m3 = devices.iter_mut().find(|d| d.name == "mlx5_3").unwrap();
        m3.ports[0].state = Some("1: DOWN".into());
        let s = select(&devices, &RailSpec::Auto).unwrap();
        assert_eq!(s.rails.len(), 7);
        assert!(s.skipped.contains(&"mlx5_3:1 (not ACTIVE)".to_owned()));
        // Named, it stays a rail, reported as not ACTIVE.
        let named = select(&devices, &parse_spec("mlx5_3").unwrap()).unwrap();
        assert!(!named.rails[0].active);
    }

    #[test]
    fn named_rails_keep_their_order_and_unknown_ones_are_refused() {
        let devices = eight_ndr();
        let s = select(&devices, &parse_spec("mlx5_1,mlx5_0:1").unwrap()).unwrap();
        assert_eq!(
            s.rails.iter().map(Rail::name).collect::<Vec<_>>(),
            ["mlx5_1:1", "mlx5_0:1"]
        );
        let e = select(&devices, &parse_spec("mlx5_9").unwrap()).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "--rails: this node has no RDMA device mlx5_9 (it has: mlx5_0, mlx5_1"
            ),
            "{e}"
        );
        assert_eq!(
            select(&devices, &parse_spec("mlx5_0:2").unwrap()),
            Err(RailError::NoPort("mlx5_0".into(), 2))
        );
        assert_eq!(
            select(&[], &RailSpec::Auto),
            Err(RailError::NoneActive("none".into()))
        );
    }

    #[test]
    fn mixed_link_layers_follow_the_majority() {
        // Two RoCE ports and one InfiniBand: the rails are Ethernet.
        let devices = vec![
            device(
                "mlx5_0",
                0,
                vec![port(1, "4: ACTIVE", "400 Gb/sec (4X NDR)", "InfiniBand")],
            ),
            device(
                "mlx5_1",
                0,
                vec![port(1, "4: ACTIVE", "200 Gb/sec (4X HDR)", "Ethernet")],
            ),
            device(
                "mlx5_2",
                1,
                vec![port(1, "4: ACTIVE", "200 Gb/sec (4X HDR)", "Ethernet")],
            ),
        ];
        let s = select(&devices, &RailSpec::Auto).unwrap();
        assert_eq!(
            s.rails.iter().map(Rail::name).collect::<Vec<_>>(),
            ["mlx5_1:1", "mlx5_2:1"]
        );
        assert_eq!(s.skipped, ["mlx5_0:1 (InfiniBand; the rails are Ethernet)"]);
    }

    #[test]
    fn findings_name_the_node_whose_rails_differ() {
        let healthy = select(&eight_ndr(), &RailSpec::Auto).unwrap().rails;
        let mut down = eight_ndr();
        down.iter_mut().find(|d| d.name == "mlx5_3").unwrap().ports[0].state =
            Some("1: DOWN".into());
        let seven = select(&down, &RailSpec::Auto).unwrap().rails;
        let mut slow = eight_ndr();
        slow.iter_mut().find(|d| d.name == "mlx5_5").unwrap().ports[0].rate =
            Some("200 Gb/sec (2X NDR)".into());
        let trained_down = select(&slow, &RailSpec::Auto).unwrap().rails;
        let f = findings(&[
            healthy.clone(),
            healthy.clone(),
            seven,
            trained_down,
            healthy,
            Vec::new(),
        ]);
        assert!(f[0].is_empty() && f[1].is_empty() && f[4].is_empty() && f[5].is_empty());
        assert_eq!(f[2], ["7 rails, most ranks have 8"]);
        assert_eq!(
            f[3],
            ["rail 5 mlx5_5:1 at 200 Gb/s, most ranks' rail 5 at 400 Gb/s"]
        );
        assert!(findings(&[]).is_empty());
    }

    #[test]
    fn an_infiniband_rail_carries_its_port_guid_from_gid_0() {
        use crate::fabric::ports::GidEntry;
        let gid = |index: u32, gid: &str| GidEntry {
            index,
            gid: gid.into(),
            ..GidEntry::default()
        };
        let mut devices = eight_ndr();
        let m0 = devices.iter_mut().find(|d| d.name == "mlx5_0").unwrap();
        m0.ports[0].gids = vec![
            gid(0, "fe80:0000:0000:0000:0c42:a103:0010:0001"),
            gid(1, "fe80:0000:0000:0000:0c42:a103:0010:0099"),
        ];
        let s = select(&devices, &RailSpec::Auto).unwrap();
        assert_eq!(s.rails[0].port_guid, Some(0x0c42_a103_0010_0001));
        assert_eq!(s.rails[1].port_guid, None, "no GID table read");
        // RoCE: the GID is an address, not a port GUID.
        let mut roce = eight_ndr();
        let eth = roce.iter_mut().find(|d| d.name == "mlx5_10").unwrap();
        eth.ports[0].gids = vec![gid(0, "fe80:0000:0000:0000:0e42:a1ff:fe10:0001")];
        let named = select(&roce, &parse_spec("mlx5_10").unwrap()).unwrap();
        assert_eq!(named.rails[0].port_guid, None);
        // An identity from before the field still reads.
        let old = r#"{"device":"mlx5_0","port":1,"active":true}"#;
        assert_eq!(serde_json::from_str::<Rail>(old).unwrap().port_guid, None);
    }

    #[test]
    fn rails_round_trip_through_json() {
        let rails = select(&eight_ndr(), &RailSpec::Auto).unwrap().rails;
        let text = serde_json::to_string(&rails).unwrap();
        let back: Vec<Rail> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, rails);
    }
}
