//! perftest's command line where rdmaperf does not (yet) follow it: every
//! flag of perftest's `ib_{write,read}_{bw,lat}` that rdmaperf refuses —
//! named as not supported yet (exit 2), never as unknown — and the second
//! spelling (`_` or `-`) of every long flag. The list is perftest 6.29's
//! `long_options` and getopt string (`src/perftest_parameters.c`,
//! `parser()`); docs/perftest-compat.md is the table for users.

use clap::{Arg, ArgAction, Command};

/// A perftest flag rdmaperf refuses.
#[derive(Debug, Clone, Copy)]
pub struct Refused {
    /// perftest's short letter, if it has one.
    pub short: Option<char>,
    /// perftest's long name, exactly as spelled there.
    pub long: &'static str,
    /// Whether it takes a value.
    pub takes_value: bool,
    /// What the flag is for, as the refusal says it.
    pub what: &'static str,
}

const fn flag(short: Option<char>, long: &'static str, what: &'static str) -> Refused {
    Refused {
        short,
        long,
        takes_value: false,
        what,
    }
}

const fn value(short: Option<char>, long: &'static str, what: &'static str) -> Refused {
    Refused {
        short,
        long,
        takes_value: true,
        what,
    }
}

const RAW_ETH: &str = "raw Ethernet QPs";
const RDMA_CM: &str = "the control exchange over rdma_cm (-R connects the QPs through rdma_cm; the control channel stays on TCP)";
const ACCEL: &str = "accelerator (GPU) memory";
const RATE: &str = "the rate limiter";
const CRYPTO: &str = "AES-XTS encryption";

/// Every perftest flag of these tests that rdmaperf refuses.
pub const REFUSED: &[Refused] = &[
    // Letters.
    value(Some('B'), "source_mac", RAW_ETH),
    flag(Some('C'), "report-cycles", "reporting in CPU cycles"),
    value(Some('E'), "dest_mac", RAW_ETH),
    flag(Some('e'), "events", "sleeping on completion events"),
    flag(Some('g'), "mcg", "multicast"),
    value(Some('J'), "dest_ip", RAW_ETH),
    value(Some('j'), "source_ip", RAW_ETH),
    value(Some('K'), "dest_port", RAW_ETH),
    value(Some('k'), "source_port", RAW_ETH),
    value(Some('L'), "hop_limit", RAW_ETH),
    value(Some('M'), "MGID", "multicast"),
    flag(Some('O'), "dualport", "dual-port runs"),
    flag(Some('P'), "client", RAW_ETH),
    value(
        Some('T'),
        "tos",
        "the rdma_cm type of service (use --tclass)",
    ),
    flag(Some('v'), "mac_fwd", RAW_ETH),
    value(Some('X'), "vector", "completion event vectors"),
    flag(Some('z'), "comm_rdma_cm", RDMA_CM),
    flag(Some('Z'), "server", RAW_ETH),
    // Long names only.
    flag(None, "use_rss", RAW_ETH),
    value(None, "ethertype", RAW_ETH),
    value(None, "force-link", "forcing the link layer"),
    value(None, "remote_mac", RAW_ETH),
    value(None, "local_mac", RAW_ETH),
    value(None, "remote_ip", RAW_ETH),
    value(None, "local_ip", RAW_ETH),
    value(None, "remote_port", RAW_ETH),
    value(None, "local_port", RAW_ETH),
    flag(None, "use-srq", "shared receive queues (the send tests)"),
    flag(None, "no_lock", "lock-free parent domains"),
    flag(None, "use-null-mr", "null memory regions"),
    flag(None, "reversed", "reversed traffic"),
    flag(None, "tcp", RAW_ETH),
    value(None, "burst_size", RATE),
    value(None, "typical_pkt_size", RATE),
    value(None, "rate_limit", RATE),
    value(None, "rate_limit_type", RATE),
    value(None, "rate_units", RATE),
    value(None, "latency_gap", "a delay between latency posts"),
    value(
        None,
        "retry_count",
        "rdma_cm connect retries (-R connects once, within --timeout)",
    ),
    value(None, "payload_file_path", "payload patterns from a file"),
    value(None, "use_cuda", ACCEL),
    value(None, "use_cuda_bus_id", ACCEL),
    flag(None, "use_cuda_dmabuf", ACCEL),
    flag(None, "use_cuda_pcie_mapping", ACCEL),
    flag(None, "use_data_direct", ACCEL),
    value(None, "cuda_mem_type", ACCEL),
    value(None, "use_musa", ACCEL),
    value(None, "use_musa_bus_id", ACCEL),
    flag(None, "use_musa_dmabuf", ACCEL),
    flag(None, "use_musa_pcie_mapping", ACCEL),
    value(None, "use_rocm", ACCEL),
    flag(None, "use_rocm_dmabuf", ACCEL),
    value(None, "use_neuron", ACCEL),
    flag(None, "use_neuron_dmabuf", ACCEL),
    value(None, "use_hl", ACCEL),
    value(None, "use_mlu", ACCEL),
    flag(None, "use_mlu_dmabuf", ACCEL),
    value(None, "use_opencl", ACCEL),
    value(None, "opencl_platform_id", ACCEL),
    value(None, "use_ib_dm_dmabuf", "device memory"),
    value(None, "gpu_touch", ACCEL),
    value(None, "mmap", "mmap'd file buffers"),
    value(None, "mmap-offset", "mmap'd file buffers"),
    flag(None, "ipv6", "IPv6 GIDs (choose one with -x)"),
    flag(None, "ipv6-addr", "IPv6 control connections"),
    flag(None, "raw_ipv6", RAW_ETH),
    flag(None, "report-per-port", "dual-port runs"),
    flag(None, "odp", "on-demand paging"),
    flag(None, "promiscuous", RAW_ETH),
    flag(None, "sniffer", RAW_ETH),
    flag(None, "raw_mcast", RAW_ETH),
    flag(None, "mr_per_qp", "one memory region per QP"),
    value(None, "dlid", "a destination LID given by hand"),
    value(None, "wait_destroy", "a wait before resources are freed"),
    value(None, "flows", RAW_ETH),
    value(None, "flows_burst", RAW_ETH),
    value(None, "reply_every", RAW_ETH),
    flag(None, "vlan_en", RAW_ETH),
    value(None, "vlan_pcp", RAW_ETH),
    value(
        None,
        "recv_post_list",
        "receive post lists (the send tests)",
    ),
    flag(None, "aes_xts", CRYPTO),
    flag(None, "encrypt_on_tx", CRYPTO),
    flag(None, "sig_before", CRYPTO),
    value(None, "aes_block_size", CRYPTO),
    value(None, "kek_path", CRYPTO),
    value(None, "credentials_path", CRYPTO),
    value(None, "data_enc_keys_number", CRYPTO),
    value(None, "data_enc_key_app_path", CRYPTO),
    value(None, "log_dci_streams", "DC transport"),
    value(None, "log_active_dci_streams", "DC transport"),
    flag(None, "use_ooo", "out-of-order data placement"),
    value(None, "congest_type", "HNS congestion control"),
    value(
        None,
        "bind_source_ip",
        "choosing the control connection's source",
    ),
    flag(
        None,
        "send_with_imm",
        "SEND with immediate (the send tests)",
    ),
    flag(None, "no_enhanced_reorder", "receive reordering control"),
    flag(None, "unsolicited_write", "SRD unsolicited writes"),
    flag(None, "connectionless", "connectionless multicast servers"),
    value(None, "cqe_poll", "a fixed completion poll batch"),
    value(None, "tph_mem", "PCIe TLP processing hints"),
    value(None, "cpu_id", "PCIe TLP processing hints"),
    value(None, "ph", "PCIe TLP processing hints"),
    flag(
        None,
        "disable_dynamic_polling",
        "a fixed completion poll batch",
    ),
    flag(None, "sig_offload", "signature offload"),
    flag(
        None,
        "data_validation",
        "payload validation (read tests check their data always)",
    ),
    flag(None, "data_validation_debug", "payload validation"),
];

/// The argument id of a refused flag.
fn refused_id(r: &Refused) -> String {
    format!("refused:{}", r.long)
}

/// The other spelling of a long name: `_` for `-` and the reverse.
fn other_spelling(long: &str) -> Option<String> {
    let alt: String = if long.contains('_') {
        long.replace('_', "-")
    } else {
        long.replace('-', "_")
    };
    (alt != long).then_some(alt)
}

/// Adds the refused flags (hidden) and the second spelling of every long
/// name (hidden aliases) to `cmd`; long names then match by unambiguous
/// prefix, as perftest's getopt_long.
pub fn extend(mut cmd: Command) -> Command {
    let taken = |cmd: &Command, name: &str| {
        cmd.get_arguments().any(|a| {
            a.get_long() == Some(name) || a.get_all_aliases().is_some_and(|v| v.contains(&name))
        })
    };
    for r in REFUSED {
        let mut arg = Arg::new(refused_id(r)).long(r.long).hide(true);
        if let Some(s) = r.short {
            arg = arg.short(s);
        }
        arg = if r.takes_value {
            arg.action(ArgAction::Set).value_name("VALUE")
        } else {
            arg.action(ArgAction::SetTrue)
        };
        cmd = cmd.arg(arg);
    }
    let longs: Vec<(String, String)> = cmd
        .get_arguments()
        .filter_map(|a| Some((a.get_id().to_string(), a.get_long()?.to_owned())))
        .collect();
    for (id, long) in longs {
        if let Some(alt) = other_spelling(&long)
            && !taken(&cmd, &alt)
        {
            cmd = cmd.mut_arg(id, |a| a.alias(alt));
        }
    }
    cmd.infer_long_args(true)
}

/// The refusal of the first refused flag given on the command line.
pub fn refusal(matches: &clap::ArgMatches, program: &str) -> Option<String> {
    REFUSED.iter().find_map(|r| {
        let id = refused_id(r);
        (matches.value_source(&id) == Some(clap::parser::ValueSource::CommandLine)).then(|| {
            let name = match r.short {
                Some(s) => format!("-{s}/--{}", r.long),
                None => format!("--{}", r.long),
            };
            format!(
                "{name}: not supported by {program} yet (perftest's flag for {}); \
                 docs/perftest-compat.md lists every perftest flag and what rdmaperf does with it",
                r.what
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_refused_flag_is_listed_twice() {
        let mut longs: Vec<&str> = REFUSED.iter().map(|r| r.long).collect();
        longs.sort_unstable();
        let n = longs.len();
        longs.dedup();
        assert_eq!(n, longs.len());
    }

    #[test]
    fn spellings_swap_separators() {
        assert_eq!(other_spelling("out_json").as_deref(), Some("out-json"));
        assert_eq!(other_spelling("tx-depth").as_deref(), Some("tx_depth"));
        assert_eq!(other_spelling("size"), None);
    }
}
