//! [`check`]: every `NCCL_*` variable of the block, each to its check,
//! and what holds for the block as a whole (names set twice, no port).

use crate::nccl::{Finding, Severity};

use super::block::{EnvBlock, EnvVar};
use super::machine::Machine;
use super::names::deprecated_or_unknown;
use super::numbers::{int_of, range_check};
use super::selection::{check_gid_index, check_ib_hca, check_socket_ifname, selected_ports};
use super::settings::{check_debug, check_debug_subsys, check_gdr_level, check_tc, check_timeout};

/// Checks every `NCCL_*` variable of `env` against `machine`.
pub fn check(env: &EnvBlock, machine: &Machine) -> Vec<Finding> {
    let mut out = Vec::new();
    let nccl: Vec<&EnvVar> = env
        .effective()
        .into_iter()
        .filter(|v| v.name.starts_with("NCCL_"))
        .collect();
    if nccl.is_empty() {
        out.push(Finding::new(
            Severity::Note,
            "env",
            "no NCCL_* variables set: NCCL uses its defaults",
        ));
        return out;
    }
    let selected = selected_ports(env, machine);
    for var in nccl {
        duplicates(env, var, &mut out);
        let (name, value) = (var.name.as_str(), var.value.as_str());
        match name {
            "NCCL_IB_HCA" => check_ib_hca(value, machine, &selected, &mut out),
            "NCCL_SOCKET_IFNAME" => check_socket_ifname(value, machine, &selected, &mut out),
            "NCCL_IB_GID_INDEX" => check_gid_index(value, env, machine, &selected, &mut out),
            "NCCL_IB_TIMEOUT" => check_timeout(value, env, &mut out),
            "NCCL_IB_RETRY_CNT" => {
                range_check(name, value, 0, 7, &mut out);
            }
            "NCCL_IB_QPS_PER_CONNECTION" => {
                if let Some(n) = range_check(name, value, 1, 128, &mut out)
                    && n > 1
                {
                    out.push(
                        Finding::new(
                            Severity::Note,
                            name,
                            format!(
                                "each connection between two ranks is spread over {n} \
                                     QPs (more flows, so more ECMP/adaptive-routing entropy on \
                                     multi-level fabrics; more QPs per NIC); \
                                     NCCL_IB_SPLIT_DATA_ON_QPS says how messages are spread"
                            ),
                        )
                        .with_value(value),
                    );
                }
            }
            "NCCL_IB_SL" => {
                range_check(name, value, 0, 15, &mut out);
            }
            "NCCL_IB_TC" | "NCCL_IB_FIFO_TC" => check_tc(name, value, &mut out),
            "NCCL_NET_GDR_LEVEL" => check_gdr_level(name, value, machine, &mut out),
            "NCCL_DEBUG" => check_debug(value, &mut out),
            "NCCL_DEBUG_SUBSYS" => check_debug_subsys(value, &mut out),
            "NCCL_IB_DISABLE" => {
                if let Some(n) = int_of(name, value, &mut out)
                    && n != 0
                {
                    out.push(
                        Finding::new(
                            Severity::Warning,
                            name,
                            "disables NCCL's IB/RoCE transport: inter-node traffic goes \
                                 over TCP sockets",
                        )
                        .with_value(value)
                        .with_fix(format!("unset {name} (or {name}=0)")),
                    );
                }
            }
            _ => deprecated_or_unknown(var, &mut out),
        }
    }
    // Unset, NCCL_IB_HCA selects every ACTIVE port.
    if env.get("NCCL_IB_HCA").is_none()
        && selected.is_empty()
        && env.get("NCCL_IB_DISABLE").is_none()
    {
        let why = if machine.devices.is_empty() {
            "no RDMA device here"
        } else {
            "no RDMA port is ACTIVE here"
        };
        out.push(Finding::new(
            Severity::Warning,
            "NCCL_IB_HCA",
            format!(
                "(unset: all devices) {why}: NCCL logs \"NET/IB : No device found.\" and uses \
                 sockets"
            ),
        ));
    }
    out
}

/// A warning for each earlier assignment of `var`'s name.
fn duplicates(env: &EnvBlock, var: &EnvVar, out: &mut Vec<Finding>) {
    let all: Vec<&EnvVar> = env
        .assignments()
        .iter()
        .filter(|v| v.name == var.name)
        .collect();
    if all.len() < 2 {
        return;
    }
    let where_ = |v: &EnvVar| match v.line {
        Some(l) => format!("line {l}"),
        None => "the environment".to_owned(),
    };
    let earlier: Vec<String> = all[..all.len() - 1]
        .iter()
        .map(|v| format!("{:?} ({})", v.value, where_(v)))
        .collect();
    out.push(
        Finding::new(
            Severity::Warning,
            &var.name,
            format!(
                "set {} times: the last ({}) wins, as in the shell; overridden: {}",
                all.len(),
                where_(var),
                earlier.join(", ")
            ),
        )
        .with_value(&var.value)
        .with_fix(format!("keep one {}= line", var.name)),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl::env::fixtures::*;
    use crate::nccl::{Summary, has_errors};

    #[test]
    fn a_name_set_twice_the_last_wins_with_a_warning() {
        let b = env("NCCL_IB_HCA=mlx5\nNCCL_IB_TIMEOUT=22\nNCCL_IB_HCA=rxe0\n");
        assert_eq!(b.get("NCCL_IB_HCA"), Some("rxe0"));
        let f = check(&b, &rxe_machine(true));
        let dup: Vec<&Finding> = about(&f, "NCCL_IB_HCA")
            .into_iter()
            .filter(|f| f.message.contains("last"))
            .collect();
        assert_eq!(dup.len(), 1, "{f:#?}");
        assert_eq!(dup[0].severity, Severity::Warning);
        assert!(
            dup[0].message.contains("line 3") && dup[0].message.contains("line 1"),
            "{}",
            dup[0].message
        );
        // The value checked is the last one: rxe0 selects the port.
        assert!(errors(&f).is_empty(), "{:?}", errors(&f));
    }

    #[test]
    fn no_nccl_variable_is_one_note() {
        for b in [
            env("# nothing set\n"),
            env("CUDA_VISIBLE_DEVICES=0\n"),
            EnvBlock::default(),
        ] {
            let f = check(&b, &rxe_machine(true));
            assert_eq!(f.len(), 1, "{f:#?}");
            assert_eq!(f[0].severity, Severity::Note);
            assert!(
                f[0].message.contains("no NCCL_* variables set"),
                "{}",
                f[0].message
            );
        }
    }

    const ISSUE_BLOCK: &str = "export NCCL_IB_HCA=mlx5\nexport NCCL_SOCKET_IFNAME=eth0\n\
        export NCCL_IB_GID_INDEX=3\nexport NCCL_IB_TIMEOUT=22\n\
        export NCCL_IB_QPS_PER_CONNECTION=4\nexport NCCL_IB_TC=41\n\
        export NCCL_NET_GDR_LEVEL=2\n";
    #[test]
    fn the_issue_block_on_rxe_names_each_wrong_setting() {
        let f = check(&env(ISSUE_BLOCK), &rxe_machine(true));

        // NCCL_IB_HCA=mlx5: no device has that prefix → NET/IB finds no
        // device and NCCL uses sockets.
        assert_eq!(worst(&f, "NCCL_IB_HCA"), Some(Severity::Error), "{f:#?}");
        let hca = about(&f, "NCCL_IB_HCA")
            .into_iter()
            .find(|x| x.severity == Severity::Error)
            .unwrap();
        assert_eq!(hca.fix.as_deref(), Some("NCCL_IB_HCA=rxe0"));
        let line = hca.line();
        assert!(line.starts_with("error   NCCL_IB_HCA=mlx5: "), "{line}");
        assert!(
            line.contains("rxe0") && line.contains("NET/IB : No device found."),
            "{line}"
        );
        assert!(line.contains("sockets"), "{line}");

        // NCCL_IB_GID_INDEX=3: rxe0:1 has GIDs 0 and 1 only; 1 is the RoCE
        // v2 IPv4 one.
        assert_eq!(
            worst(&f, "NCCL_IB_GID_INDEX"),
            Some(Severity::Error),
            "{f:#?}"
        );
        let g = text_of(&f, "NCCL_IB_GID_INDEX");
        assert!(g.contains("no GID 3"), "{g}");
        assert!(g.contains("fix: NCCL_IB_GID_INDEX=1 "), "{g}");

        // NCCL_SOCKET_IFNAME=eth0: no interface eth0 → bootstrap fails.
        assert_eq!(
            worst(&f, "NCCL_SOCKET_IFNAME"),
            Some(Severity::Error),
            "{f:#?}"
        );
        let s = text_of(&f, "NCCL_SOCKET_IFNAME");
        assert!(s.contains("no socket interface found"), "{s}");
        assert!(s.contains("fix: NCCL_SOCKET_IFNAME=veth0"), "{s}");

        // NCCL_IB_TC=41 = 0b101001: DSCP 10, ECN 01.
        let tc = text_of(&f, "NCCL_IB_TC");
        assert!(tc.contains("DSCP 10"), "{tc}");
        assert!(tc.contains("ECT(1)"), "{tc}");
        assert_eq!(worst(&f, "NCCL_IB_TC"), Some(Severity::Warning));
        assert!(tc.contains("fix: NCCL_IB_TC=40"), "{tc}");

        // NCCL_IB_TIMEOUT=22: 4.096 µs × 2^22 = 17.18 s; × 8 tries ≈ 137 s.
        let t = text_of(&f, "NCCL_IB_TIMEOUT");
        assert_eq!(worst(&f, "NCCL_IB_TIMEOUT"), Some(Severity::Note), "{t}");
        assert!(t.contains("17.18 s") && t.contains("137 s"), "{t}");

        // 4 QPs per connection: allowed, explained.
        assert_eq!(
            worst(&f, "NCCL_IB_QPS_PER_CONNECTION"),
            Some(Severity::Note)
        );
        assert!(text_of(&f, "NCCL_IB_QPS_PER_CONNECTION").contains("4 QPs"));

        // NCCL_NET_GDR_LEVEL=2: legacy integer for PXB; no GPU here.
        let gdr = text_of(&f, "NCCL_NET_GDR_LEVEL");
        assert_eq!(
            worst(&f, "NCCL_NET_GDR_LEVEL"),
            Some(Severity::Note),
            "{gdr}"
        );
        assert!(
            gdr.contains("PXB") && gdr.contains("no NVIDIA GPU here"),
            "{gdr}"
        );

        assert_eq!(errors(&f).len(), 3, "{:#?}", errors(&f));
        assert!(has_errors(&f));
        let sum = Summary::of(&f);
        assert_eq!(sum.errors, 3);
    }

    #[test]
    fn a_block_right_for_the_rxe_vm_has_no_error() {
        let b = env(
            "NCCL_IB_HCA=rxe0\nNCCL_SOCKET_IFNAME=veth0\nNCCL_IB_GID_INDEX=1\nNCCL_IB_TC=104\n\
             NCCL_IB_TIMEOUT=20\n",
        );
        let f = check(&b, &rxe_machine(true));
        assert!(!has_errors(&f), "{f:#?}");
        assert!(!f.iter().any(|x| x.severity == Severity::Warning), "{f:#?}");
        assert!(text_of(&f, "NCCL_IB_HCA").contains("rxe0:1/RoCE"));
        let tc = text_of(&f, "NCCL_IB_TC");
        assert!(tc.contains("DSCP 26") && tc.contains("ECN bits 00"), "{tc}");
        assert!(text_of(&f, "NCCL_IB_TIMEOUT").contains("4.29 s"));
    }

    #[test]
    fn without_an_ipv4_gid_the_link_local_one_is_a_warning_only() {
        let m = rxe_machine(false);
        let b = env(
            "NCCL_IB_HCA=rxe0\nNCCL_SOCKET_IFNAME=veth0\nNCCL_IB_GID_INDEX=0\nNCCL_IB_TC=104\n",
        );
        let f = check(&b, &m);
        assert!(!has_errors(&f), "{f:#?}");
        assert_eq!(worst(&f, "NCCL_IB_GID_INDEX"), Some(Severity::Warning));
        assert!(text_of(&f, "NCCL_IB_GID_INDEX").contains("link-local"));
        // A wrong index there suggests the link-local RoCE v2 one, said as
        // such.
        let f = check(&env("NCCL_IB_GID_INDEX=3\n"), &m);
        let fix = about(&f, "NCCL_IB_GID_INDEX")[0].fix.clone().unwrap();
        assert!(
            fix.starts_with("NCCL_IB_GID_INDEX=0 ") && fix.contains("link-local"),
            "{fix}"
        );
    }

    #[test]
    fn small_ranges() {
        let m = Machine::default();
        let w = |block: &str, var: &str| worst(&check(&env(block), &m), var);
        assert_eq!(
            w("NCCL_IB_RETRY_CNT=8\n", "NCCL_IB_RETRY_CNT"),
            Some(Severity::Error)
        );
        assert_eq!(w("NCCL_IB_RETRY_CNT=7\n", "NCCL_IB_RETRY_CNT"), None);
        assert_eq!(
            w(
                "NCCL_IB_QPS_PER_CONNECTION=0\n",
                "NCCL_IB_QPS_PER_CONNECTION"
            ),
            Some(Severity::Error)
        );
        assert_eq!(
            w(
                "NCCL_IB_QPS_PER_CONNECTION=129\n",
                "NCCL_IB_QPS_PER_CONNECTION"
            ),
            Some(Severity::Error)
        );
        assert_eq!(
            w(
                "NCCL_IB_QPS_PER_CONNECTION=1\n",
                "NCCL_IB_QPS_PER_CONNECTION"
            ),
            None
        );
        assert_eq!(w("NCCL_IB_SL=16\n", "NCCL_IB_SL"), Some(Severity::Error));
        assert_eq!(w("NCCL_IB_SL=3\n", "NCCL_IB_SL"), None);
        assert_eq!(w("NCCL_IB_TC=256\n", "NCCL_IB_TC"), Some(Severity::Error));
        assert_eq!(w("NCCL_IB_SL=high\n", "NCCL_IB_SL"), Some(Severity::Error));
    }

    #[test]
    fn ib_disable_and_no_active_port_say_sockets() {
        let f = check(&env("NCCL_IB_DISABLE=1\n"), &rxe_machine(true));
        assert_eq!(worst(&f, "NCCL_IB_DISABLE"), Some(Severity::Warning));
        assert!(text_of(&f, "NCCL_IB_DISABLE").contains("sockets"));
        let f = check(&env("NCCL_IB_TIMEOUT=20\n"), &Machine::default());
        assert_eq!(worst(&f, "NCCL_IB_HCA"), Some(Severity::Warning));
        assert!(text_of(&f, "NCCL_IB_HCA").contains("No device found"));
    }
}
