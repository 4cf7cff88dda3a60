//! Test machines and helpers shared by the unit tests of the parts.

use crate::fabric::ports::{DeviceState, GidEntry, PortState};
use crate::nccl::{Finding, Severity};

use super::block::EnvBlock;
use super::machine::{GpuState, Machine, NetInterface};

// --- machines ------------------------------------------------------------

pub(super) fn gid(index: u32, gid: &str, kind: &str, netdev: &str, ipv4: Option<&str>) -> GidEntry {
    GidEntry {
        index,
        gid: gid.to_owned(),
        kind: Some(kind.to_owned()),
        netdev: Some(netdev.to_owned()),
        ipv4: ipv4.map(str::to_owned),
    }
}

pub(super) fn port(
    n: u8,
    state: &str,
    layer: &str,
    netdev: Option<&str>,
    gids: Vec<GidEntry>,
) -> PortState {
    PortState {
        port: n,
        state: Some(state.to_owned()),
        link_layer: Some(layer.to_owned()),
        netdev: netdev.map(str::to_owned),
        gids,
        ..PortState::default()
    }
}

pub(super) fn dev(name: &str, ports: Vec<PortState>) -> DeviceState {
    DeviceState {
        name: name.to_owned(),
        ports,
        ..DeviceState::default()
    }
}

pub(super) fn ib_dev(name: &str) -> DeviceState {
    dev(name, vec![port(1, "4: ACTIVE", "InfiniBand", None, vec![])])
}

pub(super) fn iface(name: &str, up: bool, addrs: &[&str]) -> NetInterface {
    NetInterface {
        name: name.to_owned(),
        up,
        addresses: addrs.iter().map(|a| a.parse().unwrap()).collect(),
    }
}

pub(super) const LINK_LOCAL: &str = "fe80:0000:0000:0000:b0d2:1cff:fe3f:9a01";
pub(super) const MAPPED: &str = "0000:0000:0000:0000:0000:ffff:a9fe:4d01";

/// The soft-RoCE VM: rxe0 port 1 ACTIVE Ethernet on veth0, GID 0
/// link-local RoCE v2, GID 1 IPv4 169.254.77.1 RoCE v2 (if `with_v4`).
pub(super) fn rxe_machine(with_v4: bool) -> Machine {
    let mut gids = vec![gid(0, LINK_LOCAL, "RoCE v2", "veth0", None)];
    if with_v4 {
        gids.push(gid(1, MAPPED, "RoCE v2", "veth0", Some("169.254.77.1")));
    }
    let veth_addrs: &[&str] = if with_v4 {
        &["169.254.77.1"]
    } else {
        &["fe80::b0d2:1cff:fe3f:9a01"]
    };
    Machine {
        devices: vec![dev(
            "rxe0",
            vec![port(1, "4: ACTIVE", "Ethernet", Some("veth0"), gids)],
        )],
        interfaces: vec![
            iface("lo", true, &["127.0.0.1", "::1"]),
            iface("veth0", true, veth_addrs),
        ],
        gpus: GpuState::default(),
    }
}

/// The usual mlx5 RoCE table: 0 link-local v1, 1 link-local v2,
/// 2 IPv4 v1, 3 IPv4 v2.
pub(super) fn mlx5_roce_machine() -> Machine {
    let v4 = "0000:0000:0000:0000:0000:ffff:0a00:0001";
    let ll = "fe80:0000:0000:0000:0e42:a1ff:fe00:0001";
    let gids = vec![
        gid(0, ll, "IB/RoCE v1", "eth2", None),
        gid(1, ll, "RoCE v2", "eth2", None),
        gid(2, v4, "IB/RoCE v1", "eth2", Some("10.0.0.1")),
        gid(3, v4, "RoCE v2", "eth2", Some("10.0.0.1")),
    ];
    Machine {
        devices: vec![dev(
            "mlx5_0",
            vec![port(1, "4: ACTIVE", "Ethernet", Some("eth2"), gids)],
        )],
        interfaces: vec![iface("eth2", true, &["10.0.0.1"])],
        gpus: GpuState::default(),
    }
}

pub(super) fn env(text: &str) -> EnvBlock {
    EnvBlock::parse(text).unwrap()
}

pub(super) fn about<'a>(findings: &'a [Finding], var: &str) -> Vec<&'a Finding> {
    findings.iter().filter(|f| f.variable == var).collect()
}

pub(super) fn worst(findings: &[Finding], var: &str) -> Option<Severity> {
    about(findings, var).iter().map(|f| f.severity).max()
}

pub(super) fn text_of(findings: &[Finding], var: &str) -> String {
    about(findings, var)
        .iter()
        .map(|f| f.line())
        .collect::<Vec<_>>()
        .join("\n")
}

pub(super) fn errors(findings: &[Finding]) -> Vec<String> {
    findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .map(Finding::line)
        .collect()
}
