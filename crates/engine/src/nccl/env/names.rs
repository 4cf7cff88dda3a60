//! Names that are not checked values: deprecated and renamed variables,
//! the known ones left quiet, and unknown ones (typos, with the closest
//! known name).

use crate::nccl::{Finding, Severity};

use super::block::EnvVar;

/// NCCL's variables, from `env.rst` (NCCL 2.2x) plus a few of its
/// source; not exhaustive.
const KNOWN: &[&str] = &[
    "NCCL_SOCKET_IFNAME",
    "NCCL_SOCKET_FAMILY",
    "NCCL_SOCKET_NTHREADS",
    "NCCL_NSOCKS_PERTHREAD",
    "NCCL_SOCKET_RETRY_CNT",
    "NCCL_SOCKET_RETRY_SLEEP_MSEC",
    "NCCL_SOCKET_POLL_TIMEOUT_MSEC",
    "NCCL_CROSS_NIC",
    "NCCL_IB_HCA",
    "NCCL_IB_TIMEOUT",
    "NCCL_IB_RETRY_CNT",
    "NCCL_IB_GID_INDEX",
    "NCCL_IB_ADDR_FAMILY",
    "NCCL_IB_ADDR_RANGE",
    "NCCL_IB_ROCE_VERSION_NUM",
    "NCCL_IB_SL",
    "NCCL_IB_TC",
    "NCCL_IB_FIFO_TC",
    "NCCL_IB_RETURN_ASYNC_EVENTS",
    "NCCL_IB_QPS_PER_CONNECTION",
    "NCCL_IB_SPLIT_DATA_ON_QPS",
    "NCCL_IB_CUDA_SUPPORT",
    "NCCL_IB_GDR_LEVEL",
    "NCCL_IB_PCI_RELAXED_ORDERING",
    "NCCL_IB_ADAPTIVE_ROUTING",
    "NCCL_IB_ECE_ENABLE",
    "NCCL_IB_MERGE_VFS",
    "NCCL_IB_MERGE_NICS",
    "NCCL_IB_DISABLE",
    "NCCL_IB_AR_THRESHOLD",
    "NCCL_IB_USE_INLINE",
    "NCCL_IB_MQP_RETRY_ALL",
    "NCCL_IB_MQP_RETRY_CNT",
    "NCCL_IB_MQP_RETRY_SLEEP_MSEC",
    "NCCL_OOB_NET_ENABLE",
    "NCCL_OOB_NET_IFNAME",
    "NCCL_UID_STAGGER_THRESHOLD",
    "NCCL_UID_STAGGER_RATE",
    "NCCL_NET",
    "NCCL_NET_PLUGIN",
    "NCCL_TUNER_PLUGIN",
    "NCCL_PROFILER_PLUGIN",
    "NCCL_NET_GDR_LEVEL",
    "NCCL_NET_GDR_READ",
    "NCCL_NET_GDR_C2C",
    "NCCL_NET_SHARED_BUFFERS",
    "NCCL_NET_SHARED_COMMS",
    "NCCL_NET_DISABLE_INTRA",
    "NCCL_NET_FORCE_FLUSH",
    "NCCL_NET_OVERHEAD",
    "NCCL_P2P_DISABLE",
    "NCCL_P2P_LEVEL",
    "NCCL_P2P_DIRECT_DISABLE",
    "NCCL_P2P_NET_CHUNKSIZE",
    "NCCL_P2P_PCI_CHUNKSIZE",
    "NCCL_P2P_NVL_CHUNKSIZE",
    "NCCL_SHM_DISABLE",
    "NCCL_BUFFSIZE",
    "NCCL_NTHREADS",
    "NCCL_MAX_NCHANNELS",
    "NCCL_MIN_NCHANNELS",
    "NCCL_MAX_CTAS",
    "NCCL_MIN_CTAS",
    "NCCL_CHECKS_DISABLE",
    "NCCL_CHECK_POINTERS",
    "NCCL_LAUNCH_MODE",
    "NCCL_DEBUG",
    "NCCL_DEBUG_FILE",
    "NCCL_DEBUG_SUBSYS",
    "NCCL_COLLNET_ENABLE",
    "NCCL_COLLNET_NODE_THRESHOLD",
    "NCCL_TOPO_FILE",
    "NCCL_TOPO_DUMP_FILE",
    "NCCL_SET_THREAD_NAME",
    "NCCL_GRAPH_DUMP_FILE",
    "NCCL_GRAPH_FILE",
    "NCCL_GRAPH_MIXING_SUPPORT",
    "NCCL_IGNORE_CPU_AFFINITY",
    "NCCL_IGNORE_DISABLED_P2P",
    "NCCL_CONF_FILE",
    "NCCL_SET_STACK_SIZE",
    "NCCL_ALGO",
    "NCCL_PROTO",
    "NCCL_NVB_DISABLE",
    "NCCL_PXN_DISABLE",
    "NCCL_P2P_PXN_LEVEL",
    "NCCL_RUNTIME_CONNECT",
    "NCCL_CUMEM_ENABLE",
    "NCCL_CUMEM_HOST_ENABLE",
    "NCCL_NVLS_ENABLE",
    "NCCL_NVLS_CHUNKSIZE",
    "NCCL_MNNVL_ENABLE",
    "NCCL_RAS_ENABLE",
    "NCCL_SINGLE_RING_THRESHOLD",
    "NCCL_LL_THRESHOLD",
    "NCCL_TREE_THRESHOLD",
    "NCCL_WORK_FIFO_DEPTH",
    "NCCL_WORK_FIFO_BYTES",
    "NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_COMM_BLOCKING",
    "NCCL_CTA_POLICY",
    "NCCL_NCHANNELS_PER_NET_PEER",
    "NCCL_MIN_P2P_NCHANNELS",
    "NCCL_MAX_P2P_NCHANNELS",
];

pub(super) fn deprecated_or_unknown(var: &EnvVar, out: &mut Vec<Finding>) {
    let (name, value) = (var.name.as_str(), var.value.as_str());
    let f = |sev, msg: &str| Finding::new(sev, name, msg).with_value(value);
    match name {
        "NCCL_IB_GDR_LEVEL" => out.push(
            f(
                Severity::Warning,
                "renamed NCCL_NET_GDR_LEVEL in NCCL 2.4.0",
            )
            .with_fix(format!("NCCL_NET_GDR_LEVEL={value}")),
        ),
        "NCCL_IB_CUDA_SUPPORT" => out.push(
            f(
                Severity::Warning,
                "removed in NCCL 2.4.0: no effect; GPUDirect RDMA is controlled by \
                 NCCL_NET_GDR_LEVEL",
            )
            .with_fix("remove it (NCCL_NET_GDR_LEVEL=LOC disables GPUDirect RDMA)"),
        ),
        "NCCL_MAX_NCHANNELS" | "NCCL_MIN_NCHANNELS" => {
            let new = name.replace("NCHANNELS", "CTAS");
            out.push(
                f(
                    Severity::Note,
                    &format!("deprecated in NCCL 2.17 for {new}"),
                )
                .with_fix(format!("{new}={value}")),
            );
        }
        "NCCL_LAUNCH_MODE" if value.eq_ignore_ascii_case("GROUP") => out.push(f(
            Severity::Note,
            "NCCL_LAUNCH_MODE=GROUP is deprecated (NCCL 2.9); the default, PARALLEL, is the \
             supported mode",
        )),
        "NCCL_ASYNC_ERROR_HANDLING" => out.push(f(
            Severity::Note,
            "read by PyTorch, not by NCCL (newer PyTorch spells it \
             TORCH_NCCL_ASYNC_ERROR_HANDLING)",
        )),
        _ if KNOWN.contains(&name) => {}
        _ => out.push(
            f(
                Severity::Warning,
                "not an NCCL variable (typo?): NCCL ignores it",
            )
            .with_fix_opt(closest_known(name).map(|close| format!("{close}={value}"))),
        ),
    }
}

/// The known name nearest to `name`, if it is within 3 edits.
fn closest_known(name: &str) -> Option<&'static str> {
    KNOWN
        .iter()
        .map(|k| (edit_distance(name, k), *k))
        .filter(|(d, _)| *d <= 3)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Levenshtein distance.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl::env::check;
    use crate::nccl::env::fixtures::*;
    use crate::nccl::env::machine::Machine;
    use crate::nccl::has_errors;

    #[test]
    fn deprecated_names_say_what_replaced_them() {
        let m = Machine::default();
        let f = check(
            &env(
                "NCCL_IB_GDR_LEVEL=PHB\nNCCL_IB_CUDA_SUPPORT=1\nNCCL_MAX_NCHANNELS=8\n\
                 NCCL_MIN_NCHANNELS=2\nNCCL_LAUNCH_MODE=GROUP\nNCCL_ASYNC_ERROR_HANDLING=1\n",
            ),
            &m,
        );
        let one = |var: &str| about(&f, var)[0].clone();
        let x = one("NCCL_IB_GDR_LEVEL");
        assert_eq!(x.severity, Severity::Warning);
        assert!(x.message.contains("2.4.0"));
        assert_eq!(x.fix.as_deref(), Some("NCCL_NET_GDR_LEVEL=PHB"));
        let x = one("NCCL_IB_CUDA_SUPPORT");
        assert_eq!(x.severity, Severity::Warning);
        assert!(x.message.contains("removed in NCCL 2.4.0"));
        let x = one("NCCL_MAX_NCHANNELS");
        assert_eq!(x.severity, Severity::Note);
        assert!(x.message.contains("2.17"));
        assert_eq!(x.fix.as_deref(), Some("NCCL_MAX_CTAS=8"));
        assert_eq!(
            one("NCCL_MIN_NCHANNELS").fix.as_deref(),
            Some("NCCL_MIN_CTAS=2")
        );
        assert_eq!(one("NCCL_LAUNCH_MODE").severity, Severity::Note);
        assert!(one("NCCL_ASYNC_ERROR_HANDLING").message.contains("PyTorch"));
        assert!(!has_errors(&f));
        // PARALLEL is fine.
        assert!(check(&env("NCCL_LAUNCH_MODE=PARALLEL\n"), &rxe_machine(true)).is_empty());
    }

    #[test]
    fn unknown_names_are_typos_with_the_closest_known_name() {
        let m = Machine::default();
        let f = check(
            &env("NCCL_IB_HCAS=mlx5_0\nNCCL_SOCKET_IF_NAME=eth0\nNCCL_ZZZZ_QQQQ_WWWW=1\n"),
            &m,
        );
        let x = about(&f, "NCCL_IB_HCAS")[0];
        assert_eq!(x.severity, Severity::Warning);
        assert!(x.message.contains("not an NCCL variable (typo?)"));
        assert_eq!(x.fix.as_deref(), Some("NCCL_IB_HCA=mlx5_0"));
        assert_eq!(
            about(&f, "NCCL_SOCKET_IF_NAME")[0].fix.as_deref(),
            Some("NCCL_SOCKET_IFNAME=eth0")
        );
        let x = about(&f, "NCCL_ZZZZ_QQQQ_WWWW")[0];
        assert_eq!(x.severity, Severity::Warning);
        assert_eq!(x.fix, None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn known_variables_that_are_not_checked_stay_quiet() {
        let m = rxe_machine(true);
        let f = check(
            &env("NCCL_ALGO=Ring\nNCCL_PROTO=Simple\nNCCL_CROSS_NIC=1\n"),
            &m,
        );
        assert!(f.is_empty(), "{f:#?}");
    }
}
