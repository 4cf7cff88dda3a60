//! The checks of what NCCL uses: the ports `NCCL_IB_HCA` selects, the
//! interface of `NCCL_SOCKET_IFNAME`, and the GID of `NCCL_IB_GID_INDEX`
//! on those ports.

use std::net::IpAddr;

use crate::fabric::ports::{DeviceState, GidEntry, PortState};
use crate::nccl::{Finding, Severity};

use super::block::EnvBlock;
use super::lists::{MAX_IB_DEVS, MAX_IFS, NameList, list_value};
use super::machine::{Machine, NetInterface};
use super::numbers::{int_of, nccl_int};
use super::ports::{
    Sel, active_ports, auto_gid_index, describe_gid, gid_at, gid_link_local, port_label, usable,
};

/// The ports NCCL_IB_HCA (or its default, all) selects: ACTIVE ones only.
pub(super) fn selected_ports<'a>(env: &EnvBlock, machine: &'a Machine) -> Vec<Sel<'a>> {
    let list = env
        .get("NCCL_IB_HCA")
        .map(|v| NameList::parse(v, MAX_IB_DEVS));
    active_ports(machine)
        .into_iter()
        .filter(|(d, p)| {
            list.as_ref()
                .is_none_or(|l| l.selects(&d.name, Some(p.port)))
        })
        .collect()
}

const NO_DEVICE: &str = "NCCL logs \"NET/IB : No device found.\" and falls back to sockets";

/// `selected`: the ports `value` selects ([`selected_ports`]).
pub(super) fn check_ib_hca(
    value: &str,
    machine: &Machine,
    selected: &[Sel<'_>],
    out: &mut Vec<Finding>,
) {
    const VAR: &str = "NCCL_IB_HCA";
    let list = NameList::parse(value, MAX_IB_DEVS);
    let names = || machine.devices.iter().map(|d| d.name.as_str());
    let all_names: Vec<&str> = names().collect();
    let devices = if all_names.is_empty() {
        "no RDMA device here".to_owned()
    } else {
        format!("devices: {}", all_names.join(", "))
    };
    let active = active_ports(machine);
    let mut active_devs: Vec<&str> = Vec::new();
    for (d, _) in &active {
        if !active_devs.contains(&d.name.as_str()) {
            active_devs.push(&d.name);
        }
    }
    let fix = if active_devs.is_empty() {
        None
    } else {
        Some(format!("{VAR}={}", list_value(&active_devs, names())))
    };

    // Each entry on its own.
    let mut any_entry_matched = false;
    // Entries naming no device; said only when another entry does (else
    // the error below says it once).
    let mut unmatched = Vec::new();
    for e in &list.entries {
        let matched: Vec<&DeviceState> = machine
            .devices
            .iter()
            .filter(|d| list.entry_names(e, &d.name))
            .collect();
        any_entry_matched |= !matched.is_empty();
        if matched.is_empty() {
            let how = if list.exact {
                "is no device"
            } else {
                "is a prefix of no device"
            };
            let what = if list.exclude {
                "excludes nothing"
            } else {
                "selects nothing"
            };
            unmatched.push(
                Finding::new(
                    if list.exclude {
                        Severity::Note
                    } else {
                        Severity::Warning
                    },
                    VAR,
                    format!("entry {:?} {how} here ({devices}): it {what}", e.name),
                )
                .with_value(value),
            );
            continue;
        }
        if let Some(p) = e.port
            && !matched
                .iter()
                .any(|d| d.ports.iter().any(|q| i64::from(q.port) == p))
        {
            out.push(
                Finding::new(
                    Severity::Warning,
                    VAR,
                    format!(
                        "entry {}:{p}: {} has no port {p}",
                        e.name,
                        matched
                            .iter()
                            .map(|d| d.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
                .with_value(value),
            );
        }
        // The prefix gotcha: `mlx5_1` is a whole device name and also
        // selects mlx5_10..mlx5_19.
        if !list.exact && matched.iter().any(|d| d.name == e.name) && matched.len() > 1 {
            let others: Vec<&str> = matched
                .iter()
                .filter(|d| d.name != e.name)
                .map(|d| d.name.as_str())
                .collect();
            let verb = if list.exclude { "excludes" } else { "selects" };
            let entries: Vec<String> = list
                .entries
                .iter()
                .map(|e| match e.port {
                    Some(p) => format!("{}:{p}", e.name),
                    None => e.name.clone(),
                })
                .collect();
            let caret = if list.exclude { "^" } else { "" };
            out.push(
                Finding::new(
                    Severity::Warning,
                    VAR,
                    format!(
                        "{:?} is matched as a prefix: it {verb} {} too; a leading '=' makes \
                         NCCL match names exactly",
                        e.name,
                        others.join(", ")
                    ),
                )
                .with_value(value)
                .with_fix(format!("{VAR}={caret}={}", entries.join(","))),
            );
        }
    }

    if any_entry_matched || list.exclude {
        out.extend(unmatched);
    }
    // Ports the list names that NCCL skips (not ACTIVE).
    let skipped: Vec<String> = machine
        .devices
        .iter()
        .flat_map(|d| d.ports.iter().map(move |p| (d, p)))
        .filter(|(d, p)| !usable(p) && list.selects(&d.name, Some(p.port)))
        .map(|(d, p)| {
            format!(
                "{}:{} is {}",
                d.name,
                p.port,
                p.state_name().unwrap_or("in an unknown state")
            )
        })
        .collect();
    if selected.is_empty() {
        let why = if !any_entry_matched && !list.exclude && !list.entries.is_empty() {
            format!("matches no RDMA device here ({devices})")
        } else if !skipped.is_empty() {
            format!("selects no ACTIVE port ({})", skipped.join(", "))
        } else if active.is_empty() {
            format!("selects no ACTIVE port: none is ACTIVE here ({devices})")
        } else {
            format!("selects none of the ACTIVE ports ({devices})")
        };
        let fix = fix.unwrap_or_else(|| {
            if machine.devices.is_empty() {
                format!("no RDMA device here: NCCL can only use sockets; unset {VAR}")
            } else {
                "bring an RDMA port to ACTIVE first (see `rdmaperf ports`)".to_owned()
            }
        });
        out.push(
            Finding::new(Severity::Error, VAR, format!("{why}; {NO_DEVICE}"))
                .with_value(value)
                .with_fix(fix),
        );
        return;
    }
    let labels: Vec<String> = selected.iter().map(|(d, p)| port_label(d, p)).collect();
    let mut msg = format!("NCCL uses {}", labels.join(", "));
    if !skipped.is_empty() {
        msg.push_str(&format!("; skips {} (not ACTIVE)", skipped.join(", ")));
    }
    out.push(Finding::new(Severity::Note, VAR, msg).with_value(value));
}

/// Whether an interface carries an address NCCL's `findInterfaces` would
/// take (IPv4 or IPv6, not IPv6 loopback).
fn has_usable_address(i: &NetInterface) -> bool {
    i.addresses
        .iter()
        .any(|a| !matches!(a, IpAddr::V6(v6) if v6.is_loopback()))
}

fn is_docker(name: &str) -> bool {
    name.starts_with("docker")
}

/// The interface to suggest for NCCL_SOCKET_IFNAME: up, with an address,
/// not `lo`; the netdev of a selected RDMA port first, then any RoCE GID's
/// netdev, then anything but docker.
fn suggest_interface<'a>(machine: &'a Machine, selected: &[Sel<'_>]) -> Option<&'a str> {
    let ok = |i: &&NetInterface| i.up && has_usable_address(i) && i.name != "lo";
    let netdevs_of = |ports: &mut dyn Iterator<Item = &PortState>| -> Vec<String> {
        let mut v = Vec::new();
        for p in ports {
            for n in p
                .netdev
                .iter()
                .chain(p.gids.iter().filter_map(|g| g.netdev.as_ref()))
            {
                if !v.contains(n) {
                    v.push(n.clone());
                }
            }
        }
        v
    };
    let from_sel = netdevs_of(&mut selected.iter().map(|(_, p)| *p));
    let from_all = netdevs_of(&mut machine.devices.iter().flat_map(|d| d.ports.iter()));
    for pref in [from_sel, from_all] {
        if let Some(i) = machine
            .interfaces
            .iter()
            .filter(ok)
            .find(|i| pref.contains(&i.name))
        {
            return Some(&i.name);
        }
    }
    machine
        .interfaces
        .iter()
        .filter(ok)
        .find(|i| !is_docker(&i.name))
        .map(|i| i.name.as_str())
}

pub(super) fn check_socket_ifname(
    value: &str,
    machine: &Machine,
    selected: &[Sel<'_>],
    out: &mut Vec<Finding>,
) {
    const VAR: &str = "NCCL_SOCKET_IFNAME";
    // socket.cc: `if (env && strlen(env) > 1)` — shorter values are
    // ignored and NCCL picks an interface itself.
    if value.len() <= 1 {
        out.push(
            Finding::new(
                Severity::Warning,
                VAR,
                "NCCL ignores a value shorter than 2 characters and picks an interface itself \
                 (ib* first, then anything but docker* and lo)",
            )
            .with_value(value),
        );
        return;
    }
    let list = NameList::parse(value, MAX_IFS);
    let names = || machine.interfaces.iter().map(|i| i.name.as_str());
    let all: Vec<&str> = names().collect();
    let listing = if all.is_empty() {
        "no interfaces seen".to_owned()
    } else {
        format!("interfaces: {}", all.join(", "))
    };
    let suggestion = suggest_interface(machine, selected);
    let fix = suggestion.map(|s| format!("{VAR}={}", list_value(&[s], names())));
    let sel: Vec<&NetInterface> = machine
        .interfaces
        .iter()
        .filter(|i| list.selects(&i.name, None))
        .collect();
    if sel.is_empty() {
        out.push(
            Finding::new(
                Severity::Error,
                VAR,
                format!(
                    "selects no interface here ({listing}); NCCL's bootstrap fails: \
                     \"Bootstrap : no socket interface found\""
                ),
            )
            .with_value(value)
            .with_fix_opt(fix),
        );
        return;
    }
    if !list.exclude {
        for e in &list.entries {
            if !machine
                .interfaces
                .iter()
                .any(|i| list.entry_names(e, &i.name))
            {
                out.push(
                    Finding::new(
                        Severity::Note,
                        VAR,
                        format!("entry {:?} names no interface here ({listing})", e.name),
                    )
                    .with_value(value),
                );
            }
        }
    }
    let usable: Vec<&&NetInterface> = sel
        .iter()
        .filter(|i| i.up && has_usable_address(i))
        .collect();
    let names_of = |v: &[&NetInterface]| {
        v.iter()
            .map(|i| i.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if usable.is_empty() {
        let why = if sel.iter().all(|i| !i.up) {
            "is down"
        } else {
            "has no IP address (NCCL only considers interfaces with one, so bootstrap would \
             find none)"
        };
        out.push(
            Finding::new(
                Severity::Warning,
                VAR,
                format!("selects {}, which {why}", names_of(&sel)),
            )
            .with_value(value)
            .with_fix_opt(fix),
        );
        return;
    }
    for i in &sel {
        if i.name == "lo" {
            out.push(
                Finding::new(
                    Severity::Note,
                    VAR,
                    "selects lo: the loopback reaches only this host; a multi-node job needs a \
                     real interface",
                )
                .with_value(value),
            );
        } else if is_docker(&i.name) {
            out.push(
                Finding::new(
                    Severity::Note,
                    VAR,
                    format!(
                        "selects {}: a docker bridge is usually not reachable from other hosts",
                        i.name
                    ),
                )
                .with_value(value),
            );
        }
    }
    let described: Vec<String> = usable
        .iter()
        .map(|i| {
            let addrs: Vec<String> = i.addresses.iter().map(|a| a.to_string()).collect();
            format!("{} ({})", i.name, addrs.join(", "))
        })
        .collect();
    out.push(
        Finding::new(
            Severity::Note,
            VAR,
            format!("NCCL's sockets use {}", described.join(", ")),
        )
        .with_value(value),
    );
}

pub(super) fn check_gid_index(
    value: &str,
    env: &EnvBlock,
    machine: &Machine,
    selected: &[Sel<'_>],
    out: &mut Vec<Finding>,
) {
    const VAR: &str = "NCCL_IB_GID_INDEX";
    let Some(index) = int_of(VAR, value, out) else {
        return;
    };
    // The ports it applies to: those NCCL_IB_HCA selects, or (when that
    // selects none: its own error) every ACTIVE port.
    let ports: Vec<Sel<'_>> = if selected.is_empty() {
        active_ports(machine)
    } else {
        selected.to_vec()
    };
    if ports.is_empty() {
        out.push(
            Finding::new(
                Severity::Note,
                VAR,
                "no ACTIVE RDMA port here to check it against",
            )
            .with_value(value),
        );
        return;
    }
    let want_v4 = env.get("NCCL_IB_ADDR_FAMILY") != Some("AF_INET6");
    let want_version = env
        .get("NCCL_IB_ROCE_VERSION_NUM")
        .and_then(nccl_int)
        .map_or(2, |n| n.value);
    let (eth, ib): (Vec<Sel<'_>>, Vec<Sel<'_>>) = ports.iter().partition(|(_, p)| p.is_ethernet());
    if !ib.is_empty() {
        let labels: Vec<String> = ib
            .iter()
            .map(|(d, p)| format!("{}:{}", d.name, p.port))
            .collect();
        out.push(
            Finding::new(
                Severity::Note,
                VAR,
                format!(
                    "{} is InfiniBand: NCCL does not use NCCL_IB_GID_INDEX there (it takes \
                     GID 0, or the routable-FLID one); on IB a GID only matters for GRH \
                     (routed) traffic and index 0 is normal",
                    labels.join(", ")
                ),
            )
            .with_value(value),
        );
    }
    if eth.is_empty() {
        return;
    }
    if index < 0 {
        let picks: Vec<String> = eth
            .iter()
            .map(|(d, p)| {
                let i = auto_gid_index(p, want_v4, want_version);
                let what = gid_at(p, i64::from(i))
                    .map(describe_gid)
                    .unwrap_or_default();
                format!("{}:{} → {i} ({what})", d.name, p.port)
            })
            .collect();
        out.push(
            Finding::new(
                Severity::Note,
                VAR,
                format!(
                    "automatic (NCCL ≥ 2.21; older NCCL uses 0): picks a {} RoCE v{want_version} \
                     GID: {}",
                    if want_v4 {
                        "IPv4 (NCCL_IB_ADDR_FAMILY=AF_INET)"
                    } else {
                        "IPv6"
                    },
                    picks.join("; ")
                ),
            )
            .with_value(value),
        );
        return;
    }
    let fix = gid_fix(&eth);
    let mut worst = Severity::Note;
    let mut parts = Vec::new();
    for (d, p) in &eth {
        let at = format!("{}:{}", d.name, p.port);
        match gid_at(p, index) {
            None => {
                worst = worst.max(Severity::Error);
                let have: Vec<String> = p
                    .gids
                    .iter()
                    .map(|g| format!("{} = {}", g.index, describe_gid(g)))
                    .collect();
                let have = if have.is_empty() {
                    "none".to_owned()
                } else {
                    have.join("; ")
                };
                parts.push(format!(
                    "{at} has no GID {index} (its GIDs: {have}); NCCL's queue pairs cannot \
                     be connected with it"
                ));
            }
            Some(g) if g.roce_version() == Some(1) => {
                worst = worst.max(Severity::Warning);
                parts.push(format!(
                    "GID {index} on {at} is {}: RoCE v1 (not IP-routable); NCCL wants RoCE v2",
                    describe_gid(g)
                ));
            }
            Some(g) if g.ipv4.is_none() && gid_link_local(g) => {
                worst = worst.max(Severity::Warning);
                parts.push(format!(
                    "GID {index} on {at} is {}: link-local, routable only on one L2 segment \
                     (NCCL's automatic choice takes an IPv4 one)",
                    describe_gid(g)
                ));
            }
            Some(g) => parts.push(format!("GID {index} on {at} is {}", describe_gid(g))),
        }
    }
    out.push(
        Finding::new(worst, VAR, parts.join("; "))
            .with_value(value)
            .with_fix_opt(fix.filter(|_| worst > Severity::Note)),
    );
}

/// The GID index to suggest for the Ethernet ports `eth`: one index that
/// is RoCE v2 with an IPv4 address on every port, else a RoCE v2
/// link-local one (said as such).
fn gid_fix(eth: &[Sel<'_>]) -> Option<String> {
    const VAR: &str = "NCCL_IB_GID_INDEX";
    let common = |pred: &dyn Fn(&GidEntry) -> bool| -> Option<u32> {
        let (_, first) = eth.first()?;
        let mut idx: Vec<u32> = first
            .gids
            .iter()
            .filter(|g| pred(g))
            .map(|g| g.index)
            .collect();
        idx.sort_unstable();
        idx.into_iter().find(|i| {
            eth.iter()
                .all(|(_, p)| gid_at(p, i64::from(*i)).is_some_and(pred))
        })
    };
    let v2 = |g: &GidEntry| g.roce_version() == Some(2);
    if let Some(i) = common(&|g| v2(g) && g.ipv4.is_some()) {
        return Some(format!(
            "{VAR}={i} (RoCE v2 with an IPv4 address; or unset it on NCCL ≥ 2.21, which picks \
             it itself)"
        ));
    }
    if let Some(i) = common(&|g| v2(g) && gid_link_local(g)) {
        return Some(format!(
            "{VAR}={i} (RoCE v2, but link-local: no RoCE v2 GID has an IPv4 address; give the \
             netdev an IPv4 address for a routable one)"
        ));
    }
    common(&v2).map(|i| format!("{VAR}={i} (RoCE v2)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl::env::check;
    use crate::nccl::env::fixtures::*;
    use crate::nccl::has_errors;

    #[test]
    fn a_prefix_that_is_a_device_name_also_selects_its_longer_siblings() {
        let m = Machine {
            devices: vec![ib_dev("mlx5_1"), ib_dev("mlx5_10")],
            ..Machine::default()
        };
        let f = check(&env("NCCL_IB_HCA=mlx5_1\n"), &m);
        let warn = about(&f, "NCCL_IB_HCA")
            .into_iter()
            .find(|x| x.severity == Severity::Warning)
            .expect("a prefix warning");
        assert!(warn.message.contains("mlx5_10"), "{}", warn.message);
        assert_eq!(warn.fix.as_deref(), Some("NCCL_IB_HCA==mlx5_1"));
        let note = text_of(&f, "NCCL_IB_HCA");
        assert!(
            note.contains("mlx5_1:1/IB") && note.contains("mlx5_10:1/IB"),
            "{note}"
        );
        // With '=' only mlx5_1 is used, and nothing is said against it.
        let f = check(&env("NCCL_IB_HCA==mlx5_1\n"), &m);
        assert_eq!(worst(&f, "NCCL_IB_HCA"), Some(Severity::Note));
        let note = text_of(&f, "NCCL_IB_HCA");
        assert!(
            note.contains("mlx5_1:1/IB") && !note.contains("mlx5_10"),
            "{note}"
        );
    }

    #[test]
    fn a_caret_excludes_and_an_equals_with_port_selects_one_port() {
        let m = Machine {
            devices: vec![
                dev(
                    "mlx5_0",
                    vec![
                        port(1, "4: ACTIVE", "InfiniBand", None, vec![]),
                        port(2, "4: ACTIVE", "InfiniBand", None, vec![]),
                    ],
                ),
                ib_dev("mlx5_1"),
                ib_dev("mlx5_01"),
            ],
            ..Machine::default()
        };
        let sel = |v: &str| -> Vec<String> {
            let b = env(&format!("NCCL_IB_HCA={v}\n"));
            selected_ports(&b, &m)
                .iter()
                .map(|(d, p)| format!("{}:{}", d.name, p.port))
                .collect()
        };
        assert_eq!(sel("^mlx5_0"), ["mlx5_1:1"]);
        assert_eq!(sel("^=mlx5_0"), ["mlx5_1:1", "mlx5_01:1"]);
        assert_eq!(sel("=mlx5_0:1"), ["mlx5_0:1"]);
        assert_eq!(sel("mlx5_0:2"), ["mlx5_0:2"]);
        assert_eq!(sel("mlx5_0"), ["mlx5_0:1", "mlx5_0:2", "mlx5_01:1"]);
        let f = check(&env("NCCL_IB_HCA=^mlx5_0\n"), &m);
        assert!(!has_errors(&f), "{f:#?}");
    }

    #[test]
    fn a_value_selecting_only_ports_that_are_not_active_is_an_error() {
        let m = Machine {
            devices: vec![
                dev(
                    "mlx5_0",
                    vec![port(1, "1: DOWN", "InfiniBand", None, vec![])],
                ),
                ib_dev("mlx5_1"),
            ],
            ..Machine::default()
        };
        let f = check(&env("NCCL_IB_HCA==mlx5_0\n"), &m);
        let e = about(&f, "NCCL_IB_HCA")[0];
        assert_eq!(e.severity, Severity::Error);
        assert!(
            e.message.contains("no ACTIVE port") && e.message.contains("DOWN"),
            "{}",
            e.message
        );
        assert_eq!(e.fix.as_deref(), Some("NCCL_IB_HCA=mlx5_1"));
        // Excluding every device is the same error.
        let f = check(&env("NCCL_IB_HCA=^mlx5\n"), &m);
        assert_eq!(worst(&f, "NCCL_IB_HCA"), Some(Severity::Error));
        // A machine with no RDMA device at all.
        let f = check(&env("NCCL_IB_HCA=mlx5\n"), &Machine::default());
        let e = about(&f, "NCCL_IB_HCA")[0];
        assert!(e.message.contains("no RDMA device here"), "{}", e.message);
    }

    #[test]
    fn an_entry_naming_no_device_beside_one_that_does_is_a_warning() {
        let f = check(&env("NCCL_IB_HCA=rxe0,mlx5_0\n"), &rxe_machine(true));
        assert!(!has_errors(&f), "{f:#?}");
        assert_eq!(worst(&f, "NCCL_IB_HCA"), Some(Severity::Warning));
        assert!(text_of(&f, "NCCL_IB_HCA").contains("\"mlx5_0\" is a prefix of no device"));
        // Alone, it is the error only, said once.
        let f = check(&env("NCCL_IB_HCA=mlx5\n"), &rxe_machine(true));
        assert_eq!(about(&f, "NCCL_IB_HCA").len(), 1, "{f:#?}");
    }

    #[test]
    fn the_suggested_hca_value_uses_equals_when_a_name_prefixes_another() {
        let m = Machine {
            devices: vec![ib_dev("mlx5_1"), ib_dev("mlx5_10")],
            ..Machine::default()
        };
        let f = check(&env("NCCL_IB_HCA=rxe\n"), &m);
        let e = about(&f, "NCCL_IB_HCA")
            .into_iter()
            .find(|x| x.severity == Severity::Error)
            .unwrap();
        assert_eq!(e.fix.as_deref(), Some("NCCL_IB_HCA==mlx5_1,mlx5_10"));
    }

    #[test]
    fn socket_ifname_follows_the_same_list_rules() {
        let mut m = rxe_machine(true);
        m.interfaces.push(iface("docker0", true, &["172.17.0.1"]));
        m.interfaces.push(iface("eth9", false, &["10.9.0.1"]));
        m.interfaces.push(iface("eth8", true, &[]));
        let f = |v: &str| check(&env(&format!("NCCL_SOCKET_IFNAME={v}\n")), &m);

        let x = f("=lo");
        assert_eq!(worst(&x, "NCCL_SOCKET_IFNAME"), Some(Severity::Note));
        assert!(text_of(&x, "NCCL_SOCKET_IFNAME").contains("loopback"));
        assert!(text_of(&f("docker"), "NCCL_SOCKET_IFNAME").contains("docker0"));
        // Down, or without an address: NCCL would not find it usable.
        let x = f("eth9");
        assert_eq!(worst(&x, "NCCL_SOCKET_IFNAME"), Some(Severity::Warning));
        assert!(text_of(&x, "NCCL_SOCKET_IFNAME").contains("down"));
        let x = f("=eth8");
        assert_eq!(worst(&x, "NCCL_SOCKET_IFNAME"), Some(Severity::Warning));
        assert!(text_of(&x, "NCCL_SOCKET_IFNAME").contains("no IP address"));
        // Excluding lo and docker: veth0 (and the others).
        let x = f("^lo,docker");
        assert!(!has_errors(&x));
        assert!(text_of(&x, "NCCL_SOCKET_IFNAME").contains("veth0 (169.254.77.1)"));
        // Excluding everything.
        let x = f("^lo,docker,veth,eth");
        assert_eq!(worst(&x, "NCCL_SOCKET_IFNAME"), Some(Severity::Error));
        // socket.cc uses the variable only when strlen > 1.
        let x = f("e");
        assert_eq!(worst(&x, "NCCL_SOCKET_IFNAME"), Some(Severity::Warning));
        assert!(text_of(&x, "NCCL_SOCKET_IFNAME").contains("ignores"));
    }

    #[test]
    fn gid_index_on_the_usual_mlx5_table() {
        let m = mlx5_roce_machine();
        let f = |v: &str| check(&env(&format!("NCCL_IB_GID_INDEX={v}\n")), &m);
        assert_eq!(worst(&f("3"), "NCCL_IB_GID_INDEX"), Some(Severity::Note));
        let x = f("2");
        assert_eq!(worst(&x, "NCCL_IB_GID_INDEX"), Some(Severity::Warning));
        let t = text_of(&x, "NCCL_IB_GID_INDEX");
        assert!(
            t.contains("RoCE v1") && t.contains("fix: NCCL_IB_GID_INDEX=3 "),
            "{t}"
        );
        assert_eq!(worst(&f("1"), "NCCL_IB_GID_INDEX"), Some(Severity::Warning));
        assert_eq!(worst(&f("4"), "NCCL_IB_GID_INDEX"), Some(Severity::Error));
        // -1: NCCL's own choice, the IPv4 RoCE v2 GID.
        let t = text_of(&f("-1"), "NCCL_IB_GID_INDEX");
        assert!(t.contains("mlx5_0:1 → 3"), "{t}");
        let x = f("three");
        assert_eq!(worst(&x, "NCCL_IB_GID_INDEX"), Some(Severity::Error));
        assert!(text_of(&x, "NCCL_IB_GID_INDEX").contains("\"three\" is not an integer"));
    }

    #[test]
    fn gid_index_on_infiniband_is_a_note() {
        let m = Machine {
            devices: vec![ib_dev("mlx5_0")],
            ..Machine::default()
        };
        let f = check(&env("NCCL_IB_GID_INDEX=3\n"), &m);
        assert_eq!(worst(&f, "NCCL_IB_GID_INDEX"), Some(Severity::Note));
        assert!(text_of(&f, "NCCL_IB_GID_INDEX").contains("InfiniBand"));
    }
}
