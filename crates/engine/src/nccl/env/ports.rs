//! The machine's ports and GIDs as NCCL's IB transport sees them: the
//! usable (ACTIVE) ports and the GID NCCL picks on its own.

use crate::fabric::ports::{DeviceState, GidEntry, PortState};

use super::machine::Machine;

/// A port NCCL's IB transport would use: ACTIVE, link layer InfiniBand or
/// Ethernet (`net_ib.cc` skips the others).
pub(super) fn usable(port: &PortState) -> bool {
    port.state_name() == Some("ACTIVE")
        && matches!(
            port.link_layer.as_deref(),
            None | Some("InfiniBand") | Some("Ethernet")
        )
}

pub(super) fn port_label(dev: &DeviceState, port: &PortState) -> String {
    let layer = if port.is_ethernet() { "RoCE" } else { "IB" };
    format!("{}:{}/{layer}", dev.name, port.port)
}

/// A selected port: its device and itself.
pub(super) type Sel<'a> = (&'a DeviceState, &'a PortState);

pub(super) fn active_ports(machine: &Machine) -> Vec<Sel<'_>> {
    machine
        .devices
        .iter()
        .flat_map(|d| d.ports.iter().map(move |p| (d, p)))
        .filter(|(_, p)| usable(p))
        .collect()
}

// `PortState::gids` holds only valid (non-zero) entries, each with its
// IPv4 address when IPv4-mapped (`GidEntry::ipv4`).

pub(super) fn gid_link_local(g: &GidEntry) -> bool {
    crate::fabric::gid::parse_sysfs_gid(&g.gid)
        .is_some_and(|b| crate::fabric::gid::is_link_local(&b))
}

pub(super) fn gid_at(port: &PortState, index: i64) -> Option<&GidEntry> {
    port.gids.iter().find(|g| i64::from(g.index) == index)
}

/// The GID index NCCL's automatic choice (`NCCL_IB_GID_INDEX=-1`,
/// `ncclIbGetGidIndex`/`ncclUpdateGidIndex`) lands on for a RoCE port:
/// starting at 0, a candidate of the wanted address family replaces one of
/// the other family; among the wanted family, a valid candidate of the
/// wanted RoCE version replaces one of another version. (The
/// `NCCL_IB_ADDR_RANGE` subnet filter is not applied here.)
pub(super) fn auto_gid_index(port: &PortState, want_v4: bool, want_version: i64) -> u32 {
    let fam_v4 = |g: Option<&GidEntry>| g.is_some_and(|g| g.ipv4.is_some());
    let version = |g: Option<&GidEntry>| g.and_then(GidEntry::roce_version).map(i64::from);
    let max = port.gids.iter().map(|g| g.index).max().unwrap_or(0);
    let mut cur = 0u32;
    for cand in 1..=max {
        let c = gid_at(port, i64::from(cand));
        let k = gid_at(port, i64::from(cur));
        if fam_v4(c) != fam_v4(k) && fam_v4(c) == want_v4 {
            cur = cand;
        } else if fam_v4(c) != want_v4 || c.is_none() {
            continue;
        } else if (version(k) != version(c) || k.is_none()) && version(c) == Some(want_version) {
            cur = cand;
        }
    }
    cur
}

pub(super) fn describe_gid(g: &GidEntry) -> String {
    let kind = g.kind.as_deref().unwrap_or("type unknown");
    match g.ipv4.as_deref() {
        Some(v4) => format!("{kind}, IPv4 {v4}"),
        None if gid_link_local(g) => format!("{kind}, link-local {}", g.gid),
        None => format!("{kind}, {}", g.gid),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl::env::fixtures::*;

    #[test]
    fn automatic_gid_choice_follows_nccl() {
        let m = rxe_machine(true);
        let p = &m.devices[0].ports[0];
        assert_eq!(auto_gid_index(p, true, 2), 1);
        // Asking for IPv6: the link-local RoCE v2 GID 0 stays.
        assert_eq!(auto_gid_index(p, false, 2), 0);
        let m = mlx5_roce_machine();
        let p = &m.devices[0].ports[0];
        assert_eq!(auto_gid_index(p, true, 2), 3);
        assert_eq!(auto_gid_index(p, true, 1), 2);
        assert_eq!(auto_gid_index(p, false, 2), 1);
    }
}
