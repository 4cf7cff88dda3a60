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
    /// `counters_ext/<name>` values: the 64-bit PMA counters some
    /// out-of-tree drivers put beside `counters/` (raw; `*_data_64` in
    /// 4-byte words). Absent on in-tree drivers.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub counters_ext: BTreeMap<String, u64>,
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

/// Whether sysfs's `node_type` (`4: RNIC`) is an iWARP device's: the
/// kernel's `RDMA_NODE_RNIC`; siw, cxgb4, irdma in iWARP mode.
pub fn is_iwarp_node_type(node_type: Option<&str>) -> bool {
    node_type
        .and_then(split_id_name)
        .is_some_and(|(id, _)| id == 4)
}

impl DeviceState {
    /// Whether it is an iWARP device ([`is_iwarp_node_type`]).
    pub fn is_iwarp(&self) -> bool {
        is_iwarp_node_type(self.node_type.as_deref())
    }
}

impl PortState {
    /// The logical state's id (`4` of `4: ACTIVE`).
    pub fn state_id(&self) -> Option<u32> {
        self.state
            .as_deref()
            .and_then(split_id_name)
            .map(|(i, _)| i)
    }

    /// The logical state's name (`ACTIVE`).
    pub fn state_name(&self) -> Option<&str> {
        self.state
            .as_deref()
            .and_then(split_id_name)
            .map(|(_, n)| n)
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
            .and_then(|r| crate::fabric::link::parse_rate(r).ok())
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

    /// Its counter directories, each with the name of its directory:
    /// `counters`, `counters_ext`, `hw_counters`.
    pub fn counter_groups(&self) -> [(&'static str, &BTreeMap<String, u64>); 3] {
        [
            ("counters", &self.counters),
            ("counters_ext", &self.counters_ext),
            ("hw_counters", &self.hw_counters),
        ]
    }

    /// Its error counters (as [`crate::fabric::link::is_error_counter`] tells
    /// them), keyed `counters/<name>` and `hw_counters/<name>`.
    pub fn error_counters(&self) -> crate::fabric::link::CounterSnapshot {
        let mut counters = BTreeMap::new();
        for (sub, map) in self.counter_groups() {
            for (name, value) in map {
                if crate::fabric::link::is_error_counter(sub, name) {
                    counters.insert(format!("{sub}/{name}"), *value);
                }
            }
        }
        crate::fabric::link::CounterSnapshot { counters }
    }

    /// Whether the port is Ethernet (RoCE).
    pub fn is_ethernet(&self) -> bool {
        self.link_layer.as_deref() == Some("Ethernet")
    }
}

/// What `rdmaperf ports --check` expects of the ports.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PortExpectation {
    /// The rate every port should run at: `Auto` is the fastest rate of
    /// the ports of the same kind (link layer and HCA type) on this host,
    /// so one port trained down among its rail siblings fails.
    pub rate: crate::fabric::link::ExpectRate,
    /// How many ports there should be (`--expect-ports`).
    pub ports: Option<usize>,
}

/// The verdict on one port.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PortVerdict {
    /// Device name.
    pub device: String,
    /// Port number.
    pub port: u8,
    /// Whether every check passed.
    pub pass: bool,
    /// The rate it was held to, Gb/s.
    pub expected_gbps: Option<f64>,
    /// Its negotiated rate, Gb/s.
    pub rate_gbps: Option<f64>,
    /// Why it failed (empty when it passed).
    pub reasons: Vec<String>,
}

impl PortVerdict {
    /// `port mlx5_0/1: PASS ACTIVE LinkUp 400 Gb/sec (4X NDR)` or
    /// `port mlx5_1/1: FAIL <reason>; <reason>`.
    pub fn line(&self, state: &PortState) -> String {
        if self.pass {
            format!(
                "port {}/{}: PASS {} {} {}",
                self.device,
                self.port,
                state.state_name().unwrap_or("?"),
                state.phys_state_name().unwrap_or("?"),
                state.rate.as_deref().unwrap_or("rate unknown")
            )
        } else {
            format!(
                "port {}/{}: FAIL {}",
                self.device,
                self.port,
                self.reasons.join("; ")
            )
        }
    }
}

/// The verdict on all ports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PortsVerdict {
    /// Whether every port passed and the count was as expected.
    pub pass: bool,
    /// One verdict per port.
    pub ports: Vec<PortVerdict>,
    /// Why the port count failed, when it did.
    pub count_reason: Option<String>,
}

impl PortsVerdict {
    /// `verdict: PASS 8 ports` or `verdict: FAIL 1 of 8 ports; expected 8 ports, found 7`.
    pub fn line(&self) -> String {
        let failed = self.ports.iter().filter(|p| !p.pass).count();
        let n = self.ports.len();
        let mut line = if self.pass {
            format!("verdict: PASS {n} port{}", if n == 1 { "" } else { "s" })
        } else {
            format!(
                "verdict: FAIL {failed} of {n} port{}",
                if n == 1 { "" } else { "s" }
            )
        };
        if let Some(r) = &self.count_reason {
            line.push_str("; ");
            line.push_str(r);
        }
        line
    }
}

/// Judges every port: ACTIVE and LinkUp, at the expected rate, no error
/// counter rising (`rises`: per `(device, port)`, from two snapshots
/// taken `--watch` seconds apart; empty without `--watch`).
pub fn check_ports(
    devices: &[DeviceState],
    expect: &PortExpectation,
    rises: &BTreeMap<(String, u8), Vec<crate::fabric::link::CounterRise>>,
) -> PortsVerdict {
    use crate::fabric::link::ExpectRate;
    // The fastest rate per kind of port, for `auto`.
    let kind = |d: &DeviceState, p: &PortState| (p.link_layer.clone(), d.hca_type.clone());
    let mut fastest: BTreeMap<(Option<String>, Option<String>), f64> = BTreeMap::new();
    for d in devices {
        for p in &d.ports {
            if let Some(r) = p.rate_gbps() {
                let e = fastest.entry(kind(d, p)).or_insert(r);
                *e = e.max(r);
            }
        }
    }
    let mut verdicts = Vec::new();
    for d in devices {
        for p in &d.ports {
            let mut reasons = Vec::new();
            match p.state_name() {
                Some("ACTIVE") => {}
                Some(s) => reasons.push(format!("state {s}, not ACTIVE")),
                None => reasons.push("state unknown".to_owned()),
            }
            match p.phys_state_name() {
                Some("LinkUp") => {}
                Some(s) => reasons.push(format!("physical state {s}, not LinkUp")),
                None => reasons.push("physical state unknown".to_owned()),
            }
            let rate = p.rate_gbps();
            let expected = match expect.rate {
                ExpectRate::Gbps(g) => Some(g),
                ExpectRate::Auto => fastest.get(&kind(d, p)).copied(),
            };
            match (rate, expected) {
                (None, _) => reasons.push("rate unknown".to_owned()),
                (Some(r), Some(e)) if r < e => {
                    let why = match expect.rate {
                        ExpectRate::Auto => "the fastest port of its kind here",
                        ExpectRate::Gbps(_) => "--expect-rate",
                    };
                    reasons.push(format!(
                        "rate {} below {e} Gb/s ({why}): trained down",
                        p.rate.as_deref().unwrap_or_default()
                    ));
                }
                _ => {}
            }
            for rise in rises.get(&(d.name.clone(), p.port)).into_iter().flatten() {
                reasons.push(format!(
                    "error counter {} rose {} -> {}",
                    rise.name, rise.before, rise.after
                ));
            }
            verdicts.push(PortVerdict {
                device: d.name.clone(),
                port: p.port,
                pass: reasons.is_empty(),
                expected_gbps: expected,
                rate_gbps: rate,
                reasons,
            });
        }
    }
    let count_reason = expect
        .ports
        .filter(|&n| n != verdicts.len())
        .map(|n| format!("expected {n} ports, found {}", verdicts.len()));
    PortsVerdict {
        pass: count_reason.is_none() && verdicts.iter().all(|v| v.pass),
        ports: verdicts,
        count_reason,
    }
}

/// Rows of text in aligned columns, two spaces apart (the last column
/// unpadded), as `ibstat`-style tools print.
#[derive(Debug, Clone, Default)]
pub struct Columns {
    rows: Vec<Vec<String>>,
}

impl Columns {
    /// A table with this header row.
    pub fn new(header: &[&str]) -> Self {
        Self {
            rows: vec![header.iter().map(|h| (*h).to_owned()).collect()],
        }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Writes the rows.
    ///
    /// # Errors
    /// I/O errors of `out`.
    pub fn write(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        let mut widths: Vec<usize> = Vec::new();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                if widths.len() <= i {
                    widths.push(0);
                }
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        for row in &self.rows {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                if i + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
                }
            }
            writeln!(out, "{}", line.trim_end())?;
        }
        Ok(())
    }
}

fn or_dash(v: Option<impl ToString>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

impl GidEntry {
    /// The RoCE version its type names: 1 for `IB/RoCE v1`, 2 for `RoCE
    /// v2` (what NCCL's `ncclIbRoceGetVersionNum` reads from
    /// `gid_attrs/types`); `None` when the type is unknown.
    pub fn roce_version(&self) -> Option<u8> {
        match self.kind.as_deref()? {
            k if k.contains("v2") => Some(2),
            k if k.contains("v1") => Some(1),
            _ => None,
        }
    }

    /// show_gids' `VER` column: `v1`, `v2`, or `-` when the type is
    /// unknown.
    pub fn version_column(&self) -> &'static str {
        match self.roce_version() {
            Some(2) => "v2",
            Some(1) => "v1",
            _ => "-",
        }
    }
}

/// The text of `rdmaperf ports`: the devices (as ibstat's CA lines), the
/// ports (ibstat's port lines plus MTU and netdev), the GID tables (as
/// show_gids: `DEV PORT INDEX GID IPv4 VER DEV`), and, with
/// `counters`, every counter, raw (with `deltas`: also its change over
/// the `--watch` interval).
///
/// # Errors
/// I/O errors of `out`.
pub fn write_text(
    devices: &[DeviceState],
    counters: bool,
    deltas: Option<&CounterDeltas>,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    let mut devs = Columns::new(&[
        "DEVICE",
        "NODE TYPE",
        "HCA TYPE",
        "BOARD ID",
        "FW",
        "NODE GUID",
        "NUMA",
        "PCI",
    ]);
    let mut ports = Columns::new(&[
        "DEVICE",
        "PORT",
        "STATE",
        "PHYS STATE",
        "RATE",
        "GB/S",
        "WIDTH",
        "SPEED",
        "LINK LAYER",
        "MTU",
        "MAX MTU",
        "LID",
        "SM LID",
        "NETDEV",
    ]);
    let mut gids = Columns::new(&["DEV", "PORT", "INDEX", "GID", "IPv4", "VER", "DEV"]);
    for d in devices {
        devs.row(vec![
            d.name.clone(),
            or_dash(d.node_type.as_ref()),
            or_dash(d.hca_type.as_ref()),
            or_dash(d.board_id.as_ref()),
            or_dash(d.fw_ver.as_ref()),
            or_dash(d.node_guid.as_ref()),
            or_dash(d.numa_node.filter(|n| *n >= 0)),
            or_dash(d.pci_address.as_ref()),
        ]);
        for p in &d.ports {
            ports.row(vec![
                d.name.clone(),
                p.port.to_string(),
                or_dash(p.state_name()),
                or_dash(p.phys_state_name()),
                or_dash(p.rate.as_ref()),
                or_dash(p.rate_gbps()),
                or_dash(p.width_lanes().map(|w| format!("{w}X"))),
                or_dash(p.speed_name()),
                or_dash(p.link_layer.as_ref()),
                or_dash(p.active_mtu),
                or_dash(p.max_mtu),
                or_dash(p.lid.as_ref()),
                or_dash(p.sm_lid.as_ref()),
                or_dash(p.netdev.as_ref()),
            ]);
            for g in &p.gids {
                gids.row(vec![
                    d.name.clone(),
                    p.port.to_string(),
                    g.index.to_string(),
                    g.gid.clone(),
                    g.ipv4.clone().unwrap_or_default(),
                    // An iWARP GID has no RoCE version (the kernel's
                    // types file says `IB/RoCE v1` for every device).
                    if d.is_iwarp() {
                        "-".to_owned()
                    } else {
                        g.version_column().to_owned()
                    },
                    g.netdev.clone().unwrap_or_default(),
                ]);
            }
        }
    }
    devs.write(out)?;
    writeln!(out)?;
    ports.write(out)?;
    writeln!(out)?;
    gids.write(out)?;
    if counters {
        let mut table = match deltas {
            Some(d) => Columns::new(&[
                "DEVICE",
                "PORT",
                "COUNTER",
                "VALUE",
                // f64's Display prints 2.0 as `2`.
                &format!("DELTA/{}s", d.seconds),
            ]),
            None => Columns::new(&["DEVICE", "PORT", "COUNTER", "VALUE"]),
        };
        for d in devices {
            for p in &d.ports {
                for (sub, map) in p.counter_groups() {
                    for (name, value) in map {
                        let key = format!("{sub}/{name}");
                        let mut row = vec![d.name.clone(), p.port.to_string(), key.clone()];
                        row.push(value.to_string());
                        if let Some(deltas) = deltas {
                            row.push(or_dash(deltas.get(&d.name, p.port, &key)));
                        }
                        table.row(row);
                    }
                }
            }
        }
        writeln!(out)?;
        table.write(out)?;
    }
    Ok(())
}

/// The change of every counter over a `--watch` interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CounterDeltas {
    /// The interval, seconds.
    pub seconds: f64,
    /// `device` → `port` → `counters/<name>` → change (negative: the
    /// counter was reset or wrapped).
    pub deltas: BTreeMap<String, BTreeMap<u8, BTreeMap<String, i128>>>,
}

impl CounterDeltas {
    /// The change of every counter present in both readings.
    pub fn between(before: &[DeviceState], after: &[DeviceState], seconds: f64) -> Self {
        let mut deltas: BTreeMap<String, BTreeMap<u8, BTreeMap<String, i128>>> = BTreeMap::new();
        for (device, bp, ap) in same_ports(before, after) {
            let per_port = deltas
                .entry(device.to_owned())
                .or_default()
                .entry(ap.port)
                .or_default();
            for ((sub, am), (_, bm)) in ap.counter_groups().into_iter().zip(bp.counter_groups()) {
                for (name, after_value) in am {
                    if let Some(before_value) = bm.get(name) {
                        per_port.insert(
                            format!("{sub}/{name}"),
                            i128::from(*after_value) - i128::from(*before_value),
                        );
                    }
                }
            }
        }
        Self { seconds, deltas }
    }

    /// One counter's change.
    pub fn get(&self, device: &str, port: u8, key: &str) -> Option<i128> {
        self.deltas.get(device)?.get(&port)?.get(key).copied()
    }
}

/// Every port read in both `before` and `after` (matched by device name
/// and port number): `(device, its port before, its port after)`.
fn same_ports<'a>(
    before: &'a [DeviceState],
    after: &'a [DeviceState],
) -> impl Iterator<Item = (&'a str, &'a PortState, &'a PortState)> {
    after.iter().flat_map(move |a| {
        let b = before.iter().find(|b| b.name == a.name);
        a.ports.iter().filter_map(move |ap| {
            let bp = b?.ports.iter().find(|p| p.port == ap.port)?;
            Some((a.name.as_str(), bp, ap))
        })
    })
}

/// The error counters that rose between two readings, per `(device,
/// port)` read in both — what [`check_ports`] fails a port for.
pub fn error_rises(
    before: &[DeviceState],
    after: &[DeviceState],
) -> BTreeMap<(String, u8), Vec<crate::fabric::link::CounterRise>> {
    same_ports(before, after)
        .map(|(device, bp, ap)| {
            (
                (device.to_owned(), ap.port),
                crate::fabric::link::rises(&bp.error_counters(), &ap.error_counters()),
            )
        })
        .collect()
}

/// `("4X", "NDR")` of `400 Gb/sec (4X NDR)`.
fn rate_detail(rate: &str) -> Option<(&str, &str)> {
    let mut words = crate::fabric::link::rate_detail(rate)?.split_whitespace();
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

    fn device(name: &str, ports: Vec<PortState>) -> DeviceState {
        DeviceState {
            name: name.into(),
            hca_type: Some("MT4129".into()),
            ports,
            ..DeviceState::default()
        }
    }

    #[test]
    fn auto_fails_the_port_trained_down_among_its_siblings() {
        let ndr = || port("4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)");
        let devices = vec![
            device("mlx5_0", vec![ndr()]),
            device(
                "mlx5_1",
                vec![port("4: ACTIVE", "5: LinkUp", "200 Gb/sec (2X NDR)")],
            ),
            device(
                "mlx5_2",
                vec![port("1: DOWN", "3: Disabled", "400 Gb/sec (4X NDR)")],
            ),
        ];
        let v = check_ports(&devices, &PortExpectation::default(), &BTreeMap::new());
        assert!(!v.pass);
        assert!(v.ports[0].pass, "{:?}", v.ports[0]);
        assert_eq!(v.ports[1].expected_gbps, Some(400.0));
        assert!(v.ports[1].reasons[0].contains("rate 200 Gb/sec (2X NDR) below 400 Gb/s"));
        assert_eq!(
            v.ports[2].reasons,
            [
                "state DOWN, not ACTIVE",
                "physical state Disabled, not LinkUp"
            ]
        );
        assert_eq!(v.line(), "verdict: FAIL 2 of 3 ports");
    }

    #[test]
    fn an_explicit_rate_a_port_count_and_rising_counters_are_held() {
        let devices = vec![device(
            "mlx5_0",
            vec![port("4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)")],
        )];
        let expect = PortExpectation {
            rate: crate::fabric::link::ExpectRate::Gbps(200.0),
            ports: Some(1),
        };
        let v = check_ports(&devices, &expect, &BTreeMap::new());
        assert!(v.pass, "{v:?}");
        assert_eq!(v.line(), "verdict: PASS 1 port");
        let expect = PortExpectation {
            rate: crate::fabric::link::ExpectRate::Gbps(400.0),
            ports: Some(2),
        };
        let mut rises = BTreeMap::new();
        rises.insert(
            ("mlx5_0".to_owned(), 1),
            vec![crate::fabric::link::CounterRise {
                name: "counters/symbol_error".into(),
                before: 1,
                after: 5,
            }],
        );
        let v = check_ports(&devices, &expect, &rises);
        assert!(!v.pass);
        assert_eq!(v.count_reason.as_deref(), Some("expected 2 ports, found 1"));
        assert!(v.ports[0].reasons[1].contains("error counter counters/symbol_error rose 1 -> 5"));
    }
}
