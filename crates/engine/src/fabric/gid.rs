//! GID classification and automatic GID index selection.
//!
//! perftest (since commit 57927ab) scores every GID of an Ethernet port and
//! takes the best when `-x` is not given: +100 when the address family
//! matches (IPv4-mapped by default, IPv6 with `--ipv6`), +10 when not
//! link-local, +2 for RoCE v2 and +1 for RoCE v1. The first index with the
//! highest score wins. rdmaperf does the same so both tools pick the same
//! GID on the same host.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use serde::Serialize;

/// Kind of a GID table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum GidKind {
    /// InfiniBand.
    #[serde(rename = "IB")]
    Ib,
    /// RoCE v1.
    #[serde(rename = "RoCE v1")]
    RoceV1,
    /// RoCE v2.
    #[serde(rename = "RoCE v2")]
    RoceV2,
    /// Not known to rdmaperf.
    #[serde(rename = "unknown")]
    Unknown,
}

impl fmt::Display for GidKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Ib => "IB",
            Self::RoceV1 => "RoCE v1",
            Self::RoceV2 => "RoCE v2",
            Self::Unknown => "unknown",
        })
    }
}

/// Address family a caller prefers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Family {
    /// IPv4-mapped GIDs (`::ffff:a.b.c.d`), perftest's default.
    #[default]
    Ipv4,
    /// Plain IPv6 GIDs (perftest's `--ipv6`).
    Ipv6,
}

/// One GID table entry, as plain data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidCandidate {
    /// Index in the port's GID table.
    pub index: u32,
    /// The 16 raw bytes (network order).
    pub bytes: [u8; 16],
    /// IB / RoCE v1 / RoCE v2.
    pub kind: GidKind,
}

/// The IPv4 address of an IPv4-mapped GID.
pub fn ipv4_of(bytes: &[u8; 16]) -> Option<Ipv4Addr> {
    Ipv6Addr::from(*bytes).to_ipv4_mapped()
}

/// The node GUID, as sysfs prints `node_guid` (`70ef:80ff:fe20:a3ac`),
/// that a soft device derives from its network interface's MAC address
/// (`72:ef:80:20:a3:ac`): the modified EUI-64 — `ff:fe` in the middle and
/// the universal/local bit flipped — as `rdma_rxe` and `siw` both make it.
/// `None` when `mac` is not six hex octets.
pub fn guid_of_mac(mac: &str) -> Option<String> {
    let octets: Vec<u8> = mac
        .trim()
        .split(':')
        .map(|o| {
            (o.len() == 2)
                .then(|| u8::from_str_radix(o, 16).ok())
                .flatten()
        })
        .collect::<Option<_>>()?;
    let [a, b, c, d, e, f] = <[u8; 6]>::try_from(octets).ok()?;
    Some(format!(
        "{:02x}{b:02x}:{c:02x}ff:fe{d:02x}:{e:02x}{f:02x}",
        a ^ 0x02
    ))
}

/// The bytes of a GID as sysfs prints it (`gids/<i>`: eight groups of
/// four hex digits, e.g. `fe80:0000:0000:0000:5054:00ff:fe12:3456`; any
/// IPv6 notation is taken).
pub fn parse_sysfs_gid(text: &str) -> Option<[u8; 16]> {
    text.trim().parse::<Ipv6Addr>().ok().map(|a| a.octets())
}

/// Whether the GID is an IPv6 link-local address (`fe80::/10`).
pub fn is_link_local(bytes: &[u8; 16]) -> bool {
    bytes[0] == 0xfe && (bytes[1] & 0xc0) == 0x80
}

/// The GID in IPv6 notation (IPv4-mapped ones as `::ffff:a.b.c.d`).
pub fn to_ipv6_string(bytes: &[u8; 16]) -> String {
    Ipv6Addr::from(*bytes).to_string()
}

/// perftest's score for one GID (higher is better).
pub fn score(candidate: &GidCandidate, family: Family) -> u32 {
    let mut score = 0;
    let is_v4 = ipv4_of(&candidate.bytes).is_some();
    if match family {
        Family::Ipv4 => is_v4,
        Family::Ipv6 => !is_v4,
    } {
        score += 100;
    }
    if !is_link_local(&candidate.bytes) {
        score += 10;
    }
    score += match candidate.kind {
        GidKind::RoceV2 => 2,
        GidKind::RoceV1 => 1,
        GidKind::Ib | GidKind::Unknown => 0,
    };
    score
}

/// The index of the best-scoring candidate; the lowest index wins a tie.
/// `None` when there are no candidates.
pub fn best_index(candidates: &[GidCandidate], family: Family) -> Option<u32> {
    let mut best: Option<(u32, u32)> = None;
    for c in candidates {
        let s = score(c, family);
        if best.is_none_or(|(bs, bi)| s > bs || (s == bs && c.index < bi)) {
            best = Some((s, c.index));
        }
    }
    best.map(|(_, i)| i)
}

#[cfg(test)]
mod tests {
    use super::guid_of_mac;

    #[test]
    fn a_soft_devices_guid_is_its_macs_modified_eui64() {
        // Read in the test VM: siw0 on veth2, rxe0 on veth0.
        assert_eq!(
            guid_of_mac("72:ef:80:20:a3:ac").as_deref(),
            Some("70ef:80ff:fe20:a3ac")
        );
        assert_eq!(
            guid_of_mac("02:24:13:c5:51:8f\n").as_deref(),
            Some("0024:13ff:fec5:518f")
        );
        for bad in [
            "",
            "72:ef:80:20:a3",
            "72:ef:80:20:a3:ac:01",
            "7:ef:80:20:a3:ac",
            "zz:ef:80:20:a3:ac",
        ] {
            assert_eq!(guid_of_mac(bad), None, "{bad:?}");
        }
    }

    use super::*;

    fn link_local() -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0] = 0xfe;
        b[1] = 0x80;
        b[8..].copy_from_slice(&[0x02, 0x24, 0x13, 0xff, 0xfe, 0xc5, 0x51, 0x8f]);
        b
    }

    fn v4(a: [u8; 4]) -> [u8; 16] {
        Ipv4Addr::from(a).to_ipv6_mapped().octets()
    }

    fn global_v6() -> [u8; 16] {
        "2001:db8::1".parse::<Ipv6Addr>().unwrap().octets()
    }

    fn cand(index: u32, bytes: [u8; 16], kind: GidKind) -> GidCandidate {
        GidCandidate { index, bytes, kind }
    }

    #[test]
    fn typical_roce_table_prefers_ipv4_roce_v2() {
        // What mlx5 and rxe with an IPv4 address show: 0/1 link-local
        // v1/v2, 2/3 IPv4-mapped v1/v2.
        let table = [
            cand(0, link_local(), GidKind::RoceV1),
            cand(1, link_local(), GidKind::RoceV2),
            cand(2, v4([192, 168, 1, 5]), GidKind::RoceV1),
            cand(3, v4([192, 168, 1, 5]), GidKind::RoceV2),
        ];
        assert_eq!(best_index(&table, Family::Ipv4), Some(3));
        assert_eq!(score(&table[3], Family::Ipv4), 112);
        assert_eq!(score(&table[0], Family::Ipv4), 1);
    }

    #[test]
    fn ipv6_family_prefers_global_ipv6() {
        let table = [
            cand(0, link_local(), GidKind::RoceV2),
            cand(1, v4([10, 0, 0, 1]), GidKind::RoceV2),
            cand(2, global_v6(), GidKind::RoceV2),
        ];
        assert_eq!(best_index(&table, Family::Ipv6), Some(2));
        assert_eq!(best_index(&table, Family::Ipv4), Some(1));
    }

    #[test]
    fn link_local_only_table_picks_roce_v2_and_ties_go_to_lowest_index() {
        let table = [
            cand(0, link_local(), GidKind::RoceV2),
            cand(1, link_local(), GidKind::RoceV2),
        ];
        assert_eq!(best_index(&table, Family::Ipv4), Some(0));
        assert_eq!(best_index(&[], Family::Ipv4), None);
    }

    #[test]
    fn formats_like_ipv6_and_like_perftest() {
        assert_eq!(
            to_ipv6_string(&v4([192, 168, 119, 1])),
            "::ffff:192.168.119.1"
        );
        assert!(is_link_local(&link_local()));
        assert!(!is_link_local(&global_v6()));
        assert_eq!(ipv4_of(&link_local()), None);
    }
}
