//! perftest's test banner (`ctx_print_test_info`) and address lines
//! (`ctx_print_pingpong_data`), field for field and width for width, for
//! what rdmaperf runs (RC, no SRQ, no dual port, `ibv_wr_*` or
//! `ibv_post_send`, no PCIe relaxed ordering, no rdma_cm). rdmaperf prints
//! it on stderr: stdout carries results only.

use std::fmt::Write as _;

use crate::format::table::RESULT_LINE;

/// What a test's banner shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BannerInfo {
    /// perftest's title, e.g. `RDMA_Write BW Test`.
    pub title: String,
    /// Whether this is a bandwidth test (CQ moderation and poll lines).
    pub bandwidth: bool,
    /// Device name.
    pub device: String,
    /// QPs.
    pub qps: u32,
    /// The send queue depth, on a side that sends (perftest: the client,
    /// or both with `-b`).
    pub tx_depth: Option<u32>,
    /// Work requests per post (`Post List` when above 1).
    pub post_list: u32,
    /// Whether work is posted with the `ibv_wr_*` API (perftest's
    /// default) rather than `ibv_post_send`.
    pub wr_api: bool,
    /// The receive ring's depth, on a side that receives SENDs or writes
    /// with immediate (perftest: the server, or both with `-b`).
    pub rx_depth: Option<u32>,
    /// CQ moderation (bandwidth tests).
    pub cq_mod: u32,
    /// Completions taken per poll (perftest's `--cqe_poll`; perftest's
    /// default adapts: `Dynamic`).
    pub poll_batch: u32,
    /// Both directions (`-b`).
    pub bidirectional: bool,
    /// Path MTU, bytes.
    pub mtu: u32,
    /// `IB` or `Ethernet`.
    pub link_layer: String,
    /// The GID index, when one is used.
    pub gid_index: Option<u32>,
    /// Outstanding reads (read tests), else the inline size.
    pub outs: Option<u32>,
    /// The inline size (write tests).
    pub inline_size: u32,
    /// Whether the QPs connect through rdma_cm (`rdma_cm QPs : ON`).
    pub rdma_cm: bool,
    /// Whether the device is iWARP (perftest's `transport_str`: `IW`,
    /// else `IB`).
    pub iwarp: bool,
    /// rdmaperf's own lines, after perftest's.
    pub extra: Vec<String>,
}

/// `%#0Nx` as C prints it: `0x` and zero padding to `width` characters in
/// all, except that 0 gets no `0x` (`%#04x` of 0 is `0000`).
pub fn alt_hex(v: u64, width: usize) -> String {
    if v == 0 {
        format!("{:0width$}", 0)
    } else {
        format!("{v:#0width$x}")
    }
}

/// perftest's `transport_str`: `IW` for an iWARP device, `IB` for every
/// other it runs on (InfiniBand and RoCE alike).
pub fn transport_name(iwarp: bool) -> &'static str {
    if iwarp { "IW" } else { "IB" }
}

impl BannerInfo {
    /// The banner, one `\n`-ended line each, between two result lines.
    pub fn render(&self) -> String {
        let on_off = |b: bool| if b { "ON" } else { "OFF" };
        let mut s = String::new();
        let _ = writeln!(s, "{RESULT_LINE}");
        // perftest: "%s " per word of the verb, then "Bidirectional ",
        // "Post List ", "BW " or "Latency ", then "Test".
        let (post_list, bidirectional) = if self.bandwidth {
            (self.post_list, self.bidirectional)
        } else {
            (1, false)
        };
        let words = title_words(&self.title, post_list, bidirectional);
        let _ = writeln!(s, "                    {}", words.join(" "));
        let _ = writeln!(
            s,
            " Dual-port       : OFF\t\tDevice         : {}",
            self.device
        );
        let _ = writeln!(
            s,
            " Number of qps   : {}\t\tTransport type : {}",
            self.qps,
            transport_name(self.iwarp)
        );
        let _ = writeln!(s, " Connection type : RC\t\tUsing SRQ      : OFF");
        let _ = writeln!(s, " PCIe relax order: OFF\t\tLock-free      : OFF");
        let _ = writeln!(
            s,
            " ibv_wr* API     : {}\t\tUsing Enhanced Reorder      : OFF",
            on_off(self.wr_api)
        );
        if let Some(t) = self.tx_depth {
            let _ = writeln!(s, " TX depth        : {t}");
        }
        if self.post_list > 1 {
            let _ = writeln!(s, " Post List       : {}", self.post_list);
        }
        if let Some(r) = self.rx_depth {
            let _ = writeln!(s, " RX depth        : {r}");
        }
        if self.bandwidth {
            let _ = writeln!(s, " CQ Moderation   : {}", self.cq_mod);
            let _ = writeln!(s, " CQE Poll Batch  : {}", self.poll_batch);
        }
        let _ = writeln!(s, " Mtu             : {}[B]", self.mtu);
        let _ = writeln!(s, " Link type       : {}", self.link_layer);
        if let Some(g) = self.gid_index {
            let _ = writeln!(s, " GID index       : {g}");
        }
        match self.outs {
            Some(o) => {
                let _ = writeln!(s, " Outstand reads  : {o}");
            }
            None => {
                let _ = writeln!(s, " Max inline data : {}[B]", self.inline_size);
            }
        }
        let _ = writeln!(s, " rdma_cm QPs\t : {}", on_off(self.rdma_cm));
        let _ = writeln!(s, " Data ex. method : Ethernet");
        for e in &self.extra {
            let _ = writeln!(s, "{e}");
        }
        let _ = writeln!(s, "{RESULT_LINE}");
        s
    }
}

/// perftest's test name in words, as both its banner (joined by spaces)
/// and its JSON `test` (joined by `_`) spell it: the title
/// (`RDMA_Write BW Test`) with `Bidirectional` (`-b`) and `Post List`
/// (`-l` above 1) before the metric.
pub fn title_words(title: &str, post_list: u32, bidirectional: bool) -> Vec<&str> {
    let mut words: Vec<&str> = title.split(' ').collect();
    if words.len() >= 3 {
        let at = words.len() - 2;
        if post_list > 1 {
            words.insert(at, "List");
            words.insert(at, "Post");
        }
        if bidirectional {
            words.insert(at, "Bidirectional");
        }
    }
    words
}

/// One QP's address line, perftest's `BASIC_ADDR_FMT` (+ `READ_FMT` for
/// reads) + `RDMA_FMT`:
/// ` local address: LID %#04x QPN %#06x PSN %#06x[ OUT %#04x] RKey %#08x VAddr %#016llx`.
pub fn address_line(
    side: &str,
    lid: u16,
    qpn: u32,
    psn: u32,
    outs: Option<u32>,
    rkey: u32,
    vaddr: u64,
) -> String {
    let mut s = format!(
        " {side} address: LID {} QPN {} PSN {}",
        alt_hex(u64::from(lid), 4),
        alt_hex(u64::from(qpn), 6),
        alt_hex(u64::from(psn), 6)
    );
    if let Some(o) = outs {
        let _ = write!(s, " OUT {}", alt_hex(u64::from(o), 4));
    }
    let _ = write!(
        s,
        " RKey {} VAddr {}",
        alt_hex(u64::from(rkey), 8),
        alt_hex(vaddr, 16)
    );
    s
}

/// The GID as perftest prints it: every byte in decimal, two digits at
/// least, colon-separated (e.g. `254:128:00:…`).
pub fn to_perftest_string(bytes: &[u8; 16]) -> String {
    let parts: Vec<String> = bytes.iter().map(|b| format!("{b:02}")).collect();
    parts.join(":")
}

/// perftest's `PERF_GID_FMT` line: ` GID: ` and the 16 bytes in decimal,
/// `%02d` each, colon-separated.
pub fn gid_line(gid: &[u8; 16]) -> String {
    format!(" GID: {}", to_perftest_string(gid))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::printf::{CArg::*, sprintf};

    // perftest_communication.h and perftest_parameters.c, verbatim.
    const BASIC_ADDR_FMT: &str = " %s address: LID %#04x QPN %#06x PSN %#06x";
    const READ_FMT: &str = " OUT %#04x";
    const RDMA_FMT: &str = " RKey %#08x VAddr %#016llx";
    const PERF_GID_FMT: &str =
        " %s: %02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d";

    #[test]
    fn address_and_gid_lines_are_perftests_formats() {
        for (lid, qpn, psn, rkey, va) in [
            (0u16, 0x11u32, 0x3e5a1bu32, 0x1fffu32, 0x7f12_a4c0_0000u64),
            (1, 0x1234, 0, 0x0012_34ff, 0),
        ] {
            let want = sprintf(
                &format!("{BASIC_ADDR_FMT}{RDMA_FMT}"),
                &[
                    S("local"),
                    U(lid.into()),
                    U(qpn.into()),
                    U(psn.into()),
                    U(rkey.into()),
                    U(va),
                ],
            );
            assert_eq!(address_line("local", lid, qpn, psn, None, rkey, va), want);
        }
        let want = sprintf(
            &format!("{BASIC_ADDR_FMT}{READ_FMT}{RDMA_FMT}"),
            &[
                S("remote"),
                U(0),
                U(0x22),
                U(0x10),
                U(16),
                U(0x40),
                U(0x1000),
            ],
        );
        assert_eq!(
            address_line("remote", 0, 0x22, 0x10, Some(16), 0x40, 0x1000),
            want
        );
        let gid = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255, 255, 169, 254, 77, 1];
        let args: Vec<_> = std::iter::once(S("GID"))
            .chain(gid.iter().map(|&b| U(b.into())))
            .collect();
        assert_eq!(gid_line(&gid), sprintf(PERF_GID_FMT, &args));
    }

    #[test]
    fn banner_lines_are_perftests_format_strings() {
        let info = BannerInfo {
            title: "RDMA_Write BW Test".into(),
            bandwidth: true,
            device: "rxe0".into(),
            qps: 2,
            tx_depth: Some(128),
            post_list: 1,
            wr_api: true,
            rx_depth: None,
            cq_mod: 100,
            poll_batch: 32,
            bidirectional: true,
            mtu: 1024,
            link_layer: "Ethernet".into(),
            gid_index: Some(1),
            outs: None,
            inline_size: 0,
            extra: vec![" Threads         : 1".into()],
            rdma_cm: false,
            iwarp: false,
        };
        let text = info.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], RESULT_LINE);
        // "                    " then "%s " per word, "Bidirectional ", "BW ", "Test\n".
        assert_eq!(
            lines[1],
            "                    RDMA_Write Bidirectional BW Test"
        );
        for (fmt, args) in [
            (
                " Dual-port       : %s\t\tDevice         : %s",
                vec![S("OFF"), S("rxe0")],
            ),
            (
                " Number of qps   : %d\t\tTransport type : %s",
                vec![U(2), S("IB")],
            ),
            (
                " Connection type : %s\t\tUsing SRQ      : %s",
                vec![S("RC"), S("OFF")],
            ),
            (
                " PCIe relax order: %s\t\tLock-free      : %s",
                vec![S("OFF"), S("OFF")],
            ),
            (
                " ibv_wr* API     : %s\t\tUsing Enhanced Reorder      : %s",
                vec![S("ON"), S("OFF")],
            ),
            (" TX depth        : %d", vec![U(128)]),
            (" CQ Moderation   : %d", vec![U(100)]),
            (" CQE Poll Batch  : %hu", vec![U(32)]),
            (" Mtu             : %lu[B]", vec![U(1024)]),
            (" Link type       : %s", vec![S("Ethernet")]),
            (" GID index       : %d", vec![U(1)]),
            (" Max inline data : %d[B]", vec![U(0)]),
            (" rdma_cm QPs\t : %s", vec![S("OFF")]),
            (" Data ex. method : %s", vec![S("Ethernet")]),
        ] {
            let line = sprintf(fmt, &args);
            assert!(lines.contains(&line.as_str()), "{line:?} not in\n{text}");
        }
        assert_eq!(lines[lines.len() - 2], " Threads         : 1");
        assert_eq!(lines[lines.len() - 1], RESULT_LINE);
    }

    #[test]
    fn gid_prints_like_perftest() {
        let v4 = std::net::Ipv4Addr::new(192, 168, 119, 1)
            .to_ipv6_mapped()
            .octets();
        assert_eq!(
            to_perftest_string(&v4),
            "00:00:00:00:00:00:00:00:00:00:255:255:192:168:119:01"
        );
    }
}
