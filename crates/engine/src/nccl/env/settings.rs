//! The checks of single settings: `NCCL_IB_TIMEOUT`, the traffic
//! classes, `NCCL_NET_GDR_LEVEL`, `NCCL_DEBUG` and `NCCL_DEBUG_SUBSYS`.

use crate::nccl::{Finding, Severity};

use super::block::EnvBlock;
use super::machine::Machine;
use super::numbers::{int_of, nccl_int, range_check};

/// The local ACK timeout of `t`: 4.096 µs × 2^t, in seconds.
pub fn ib_timeout_seconds(t: u32) -> f64 {
    4.096e-6 * f64::from(2u32.saturating_pow(t.min(31)))
}

pub(super) fn check_timeout(value: &str, env: &EnvBlock, out: &mut Vec<Finding>) {
    const VAR: &str = "NCCL_IB_TIMEOUT";
    let Some(t) = int_of(VAR, value, out) else {
        return;
    };
    if !(1..=31).contains(&t) {
        out.push(
            Finding::new(
                Severity::Error,
                VAR,
                format!(
                    "{t} is out of range 1-31: the verbs timeout is 5 bits, and NCCL's \
                     docs say 0 or >= 32 give an infinite timeout (a dead peer hangs the job \
                     instead of failing)"
                ),
            )
            .with_value(value)
            .with_fix(format!("{VAR}=20 (NCCL's default since 2.23)")),
        );
        return;
    }
    let retry = env
        .get("NCCL_IB_RETRY_CNT")
        .and_then(nccl_int)
        .map(|n| n.value)
        .filter(|n| (0..=7).contains(n))
        .unwrap_or(7);
    let per_try = ib_timeout_seconds(t as u32);
    // The retry counter counts retransmissions after the first
    // transmission (IB spec Vol. 1; env.rst points at §12.7.38), so a failing QP
    // errors out after about (retry + 1) timeouts: first try plus retries.
    // NCCL's env.rst rounds this to timeout × NCCL_IB_RETRY_CNT ("30
    // seconds" for 20/7); both are given.
    let total = per_try * (retry + 1) as f64;
    let timing = format!(
        "local ACK timeout 4.096 µs × 2^{t} = {} per try; with NCCL_IB_RETRY_CNT={retry}, \
         ≈ {} ({} tries: the first and {retry} retries; NCCL's docs count {} × {retry} ≈ {}) \
         before a dead peer shows as error 12 (IBV_WC_RETRY_EXC_ERR)",
        secs(per_try),
        secs(total),
        retry + 1,
        secs(per_try),
        secs(per_try * retry as f64),
    );
    let (sev, extra) = if t > 24 {
        (
            Severity::Warning,
            "; that long, a job hangs for minutes before reporting a dead peer",
        )
    } else if t < 14 {
        (
            Severity::Warning,
            "; that short, congestion or a switch reboot gives spurious \
             IBV_WC_RETRY_EXC_ERR (error 12)",
        )
    } else {
        (Severity::Note, "")
    };
    let fix = (sev == Severity::Warning)
        .then(|| format!("{VAR}=20 (NCCL's default since 2.23; 18 in 2.14-2.22)"));
    out.push(
        Finding::new(sev, VAR, format!("{timing}{extra}"))
            .with_value(value)
            .with_fix_opt(fix),
    );
}

/// Seconds, shortly: `17.18 s`, `137 s`, `4.0 ms`.
fn secs(s: f64) -> String {
    if s < 0.1 {
        format!("{:.1} ms", s * 1e3)
    } else if s < 100.0 {
        format!("{s:.2} s")
    } else {
        format!("{s:.0} s")
    }
}

fn ecn_name(bits: i64) -> &'static str {
    match bits {
        0 => "Not-ECT",
        1 => "ECT(1)",
        2 => "ECT(0)",
        _ => "CE",
    }
}

pub(super) fn check_tc(var: &str, value: &str, out: &mut Vec<Finding>) {
    let Some(tc) = range_check(var, value, 0, 255, out) else {
        return;
    };
    let (dscp, ecn) = (tc >> 2, tc & 3);
    let decoded = format!(
        "traffic class {tc}: on RoCE v2 the IP ToS byte, DSCP {dscp} (TC >> 2), ECN bits \
         {ecn:02b} ({}); on InfiniBand the GRH traffic class",
        ecn_name(ecn)
    );
    if ecn == 0 {
        out.push(Finding::new(Severity::Note, var, decoded).with_value(value));
        return;
    }
    let implies = if ecn == 3 {
        "CE (congestion experienced) on every packet: receivers see congestion everywhere and \
         congestion control throttles the sender"
    } else {
        "ECN-capable on every packet as sent, whether or not the NIC's congestion control \
         (e.g. DCQCN) is on; switches may then mark instead of drop"
    };
    out.push(
        Finding::new(
            Severity::Warning,
            var,
            format!(
                "{decoded}; the ECN bits are normally left 0 and set by the NIC for \
                 ECN-capable traffic; these mark the traffic {implies}"
            ),
        )
        .with_value(value)
        .with_fix(format!("{var}={} (DSCP {dscp}, ECN bits 00)", dscp << 2)),
    );
}

/// `NCCL_NET_GDR_LEVEL` names (`topoPathTypeStr` up to `SYS`); the
/// documented ones first.
const GDR_DOCUMENTED: [&str; 5] = ["LOC", "PIX", "PXB", "PHB", "SYS"];
const GDR_INTERNAL: [&str; 5] = ["NVL", "NVB", "C2C", "P2C", "PXN"];

fn gdr_meaning(level: &str) -> &'static str {
    match level {
        "LOC" => "never use GPUDirect RDMA",
        "PIX" => "only when GPU and NIC share a PCI switch",
        "PXB" => "when GPU and NIC are connected through PCI switches (possibly several)",
        "PHB" => "when GPU and NIC are on the same NUMA node (traffic through the CPU)",
        "SYS" => "even across the SMP interconnect between NUMA nodes",
        "NVL" => "only when GPU and NIC are connected through NVLink",
        _ => "a path type NCCL knows internally; not documented for this variable",
    }
}

pub(super) fn check_gdr_level(var: &str, value: &str, machine: &Machine, out: &mut Vec<Finding>) {
    let upper = value.to_ascii_uppercase();
    let level: Option<(&str, Option<&str>)> = if let Some(n) = GDR_DOCUMENTED
        .iter()
        .chain(GDR_INTERNAL.iter())
        .find(|n| **n == upper)
    {
        Some((n, None))
    } else if value.as_bytes().first().is_some_and(u8::is_ascii_digit) {
        // paths.cc: `strtol(str, NULL, 0)` when the first character is a
        // digit, through `levelsOldToNew`, which maps 0-4 to the documented
        // names in order (> 4 = SYS).
        nccl_int(value).map(|n| {
            let i = usize::try_from(n.value)
                .unwrap_or(usize::MAX)
                .min(GDR_DOCUMENTED.len() - 1);
            (
                GDR_DOCUMENTED[i],
                Some(
                    "integer levels are discouraged: their mapping changed across NCCL \
                     versions (an older table had 3 = same root complex)",
                ),
            )
        })
    } else {
        None
    };
    let Some((level, legacy)) = level else {
        out.push(
            Finding::new(
                Severity::Error,
                var,
                format!(
                    "{value:?} is not a level (LOC, PIX, PXB, PHB, SYS, or NVL on newer NCCL); \
                     NCCL ignores it and uses its automatic choice"
                ),
            )
            .with_value(value),
        );
        return;
    };
    let mut msg = format!("{level}: {}", gdr_meaning(level));
    let mut sev = Severity::Note;
    let mut fix = None;
    if let Some(l) = legacy {
        msg.push_str(&format!("; {l}"));
        fix = Some(format!("{var}={level}"));
    } else if value != level {
        // NCCL compares names with strcmp: only upper case is a level.
        sev = Severity::Warning;
        msg.push_str(&format!(
            "; but NCCL compares the name case-sensitively, so {value:?} is ignored"
        ));
        fix = Some(format!("{var}={level}"));
    }
    if machine.gpus.gpus == 0 {
        msg.push_str("; no NVIDIA GPU here: no effect");
    } else if machine.gpus.peer_memory_module.is_none() && level != "LOC" {
        sev = Severity::Warning;
        msg.push_str(
            "; no peer-memory module is loaded (nvidia_peermem / nv_peer_mem): GPUDirect RDMA \
             needs it (or dma-buf support on newer kernels, drivers and NCCL), else NCCL \
             stages through host memory",
        );
        fix.get_or_insert_with(|| "modprobe nvidia_peermem".to_owned());
    }
    out.push(
        Finding::new(sev, var, msg)
            .with_value(value)
            .with_fix_opt(fix),
    );
}

const DEBUG_LEVELS: [&str; 5] = ["VERSION", "WARN", "INFO", "ABORT", "TRACE"];

pub(super) fn check_debug(value: &str, out: &mut Vec<Finding>) {
    if !DEBUG_LEVELS.iter().any(|l| l.eq_ignore_ascii_case(value)) {
        out.push(
            Finding::new(
                Severity::Warning,
                "NCCL_DEBUG",
                format!(
                    "{value:?} is not a level ({}): NCCL ignores it",
                    DEBUG_LEVELS.join(", ")
                ),
            )
            .with_value(value)
            .with_fix("NCCL_DEBUG=INFO (what `rdmaperf doctor nccl --log` reads)"),
        );
    }
}

/// `NCCL_DEBUG_SUBSYS` names (`ALLOC_HOST` and `DESTROY` on the newest
/// NCCL).
const SUBSYSTEMS: [&str; 19] = [
    "INIT",
    "COLL",
    "P2P",
    "SHM",
    "NET",
    "GRAPH",
    "TUNING",
    "ENV",
    "ALLOC",
    "ALLOC_HOST",
    "CALL",
    "PROXY",
    "NVLS",
    "BOOTSTRAP",
    "REG",
    "PROFILE",
    "RAS",
    "DESTROY",
    "ALL",
];

pub(super) fn check_debug_subsys(value: &str, out: &mut Vec<Finding>) {
    let list = value.strip_prefix('^').unwrap_or(value);
    let unknown: Vec<&str> = list
        .split(',')
        .filter(|s| !s.is_empty() && !SUBSYSTEMS.iter().any(|k| k.eq_ignore_ascii_case(s)))
        .collect();
    if !unknown.is_empty() {
        out.push(
            Finding::new(
                Severity::Warning,
                "NCCL_DEBUG_SUBSYS",
                format!(
                    "unknown subsystem(s) {}: ignored (known: {})",
                    unknown.join(", "),
                    SUBSYSTEMS.join(", ")
                ),
            )
            .with_value(value),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl::env::check;
    use crate::nccl::env::fixtures::*;
    use crate::nccl::env::machine::GpuState;

    #[test]
    fn ib_timeout_ranges_and_times() {
        assert!((ib_timeout_seconds(22) - 17.179_869_184).abs() < 1e-9);
        assert!((ib_timeout_seconds(20) - 4.294_967_296).abs() < 1e-9);
        let f = |v: &str| check(&env(&format!("NCCL_IB_TIMEOUT={v}\n")), &Machine::default());
        for bad in ["0", "32", "-1"] {
            assert_eq!(
                worst(&f(bad), "NCCL_IB_TIMEOUT"),
                Some(Severity::Error),
                "{bad}"
            );
        }
        assert_eq!(worst(&f("25"), "NCCL_IB_TIMEOUT"), Some(Severity::Warning));
        assert_eq!(worst(&f("12"), "NCCL_IB_TIMEOUT"), Some(Severity::Warning));
        assert_eq!(worst(&f("14"), "NCCL_IB_TIMEOUT"), Some(Severity::Note));
        assert_eq!(worst(&f("24"), "NCCL_IB_TIMEOUT"), Some(Severity::Note));
        let x = f("abc");
        assert_eq!(worst(&x, "NCCL_IB_TIMEOUT"), Some(Severity::Error));
        assert!(text_of(&x, "NCCL_IB_TIMEOUT").contains("\"abc\""));
        // The retry count multiplies: 4.29 s × (3 + 1).
        let x = check(
            &env("NCCL_IB_TIMEOUT=20\nNCCL_IB_RETRY_CNT=3\n"),
            &Machine::default(),
        );
        let t = text_of(&x, "NCCL_IB_TIMEOUT");
        assert!(
            t.contains("4.29 s per try") && t.contains("17.18 s (4 tries"),
            "{t}"
        );
        // NCCL's env.rst figure, timeout × NCCL_IB_RETRY_CNT, is given too.
        assert!(t.contains("4.29 s × 3 ≈ 12.88 s"), "{t}");
    }

    #[test]
    fn traffic_class_decodes_dscp_and_ecn() {
        let m = Machine::default();
        let t = |v: &str| {
            let f = check(&env(&format!("NCCL_IB_TC={v}\n")), &m);
            (worst(&f, "NCCL_IB_TC"), text_of(&f, "NCCL_IB_TC"))
        };
        let (s, x) = t("104");
        assert_eq!(s, Some(Severity::Note));
        assert!(x.contains("DSCP 26") && x.contains("ECN bits 00"), "{x}");
        let (s, x) = t("106");
        assert_eq!(s, Some(Severity::Warning));
        assert!(
            x.contains("DSCP 26") && x.contains("ECN bits 10 (ECT(0))"),
            "{x}"
        );
        assert!(x.contains("fix: NCCL_IB_TC=104"), "{x}");
        let (_, x) = t("41");
        assert!(
            x.contains("DSCP 10") && x.contains("ECN bits 01 (ECT(1))"),
            "{x}"
        );
        let (s, x) = t("3");
        assert_eq!(s, Some(Severity::Warning));
        assert!(x.contains("DSCP 0") && x.contains("CE"), "{x}");
    }

    #[test]
    fn gdr_level_names_integers_and_the_machine() {
        let no_gpu = Machine::default();
        let gpu = |module: Option<&str>| Machine {
            gpus: GpuState {
                gpus: 8,
                peer_memory_module: module.map(str::to_owned),
            },
            ..Machine::default()
        };
        let f = |v: &str, m: &Machine| {
            let x = check(&env(&format!("NCCL_NET_GDR_LEVEL={v}\n")), m);
            (
                worst(&x, "NCCL_NET_GDR_LEVEL"),
                text_of(&x, "NCCL_NET_GDR_LEVEL"),
            )
        };
        let (s, x) = f("PXB", &no_gpu);
        assert_eq!(s, Some(Severity::Note));
        assert!(x.contains("no NVIDIA GPU here: no effect"), "{x}");
        let (s, x) = f("PHB", &gpu(None));
        assert_eq!(s, Some(Severity::Warning));
        assert!(x.contains("nvidia_peermem") && x.contains("dma-buf"), "{x}");
        assert_eq!(
            f("SYS", &gpu(Some("nvidia_peermem"))).0,
            Some(Severity::Note)
        );
        // LOC disables GPUDirect RDMA: no module needed.
        assert_eq!(f("LOC", &gpu(None)).0, Some(Severity::Note));
        // Legacy integers: 0-4 = LOC, PIX, PXB, PHB, SYS; more = SYS.
        for (v, name) in [
            ("0", "LOC"),
            ("1", "PIX"),
            ("2", "PXB"),
            ("3", "PHB"),
            ("4", "SYS"),
            ("9", "SYS"),
        ] {
            let (s, x) = f(v, &no_gpu);
            assert_eq!(s, Some(Severity::Note), "{v}");
            assert!(
                x.contains(&format!("{name}:")) && x.contains("discouraged"),
                "{v}: {x}"
            );
            assert!(
                x.contains(&format!("fix: NCCL_NET_GDR_LEVEL={name}")),
                "{v}: {x}"
            );
        }
        // NVL is a level on newer NCCL.
        assert_eq!(f("NVL", &no_gpu).0, Some(Severity::Note));
        // paths.cc compares names with strcmp: lower case is not a level.
        let (s, x) = f("pxb", &no_gpu);
        assert_eq!(s, Some(Severity::Warning));
        assert!(x.contains("fix: NCCL_NET_GDR_LEVEL=PXB"), "{x}");
        assert_eq!(f("near", &no_gpu).0, Some(Severity::Error));
        assert_eq!(f("-1", &no_gpu).0, Some(Severity::Error));
    }

    #[test]
    fn debug_levels_and_subsystems() {
        let m = Machine::default();
        let w = |block: &str, var: &str| worst(&check(&env(block), &m), var);
        assert_eq!(w("NCCL_DEBUG=info\n", "NCCL_DEBUG"), None);
        assert_eq!(w("NCCL_DEBUG=TRACE\n", "NCCL_DEBUG"), None);
        assert_eq!(
            w("NCCL_DEBUG=verbose\n", "NCCL_DEBUG"),
            Some(Severity::Warning)
        );
        assert_eq!(
            w("NCCL_DEBUG_SUBSYS=INIT,NET,graph\n", "NCCL_DEBUG_SUBSYS"),
            None
        );
        assert_eq!(w("NCCL_DEBUG_SUBSYS=^COLL\n", "NCCL_DEBUG_SUBSYS"), None);
        let f = check(&env("NCCL_DEBUG_SUBSYS=^INIT,NETWORK\n"), &m);
        assert_eq!(worst(&f, "NCCL_DEBUG_SUBSYS"), Some(Severity::Warning));
        assert!(text_of(&f, "NCCL_DEBUG_SUBSYS").contains("NETWORK"));
    }
}
