//! Property tests of the topology readers and the run's map: no text —
//! soups of both formats' tokens, the ibsim fixtures with bytes cut,
//! flipped or inserted — makes `Topology::parse` or `SlurmAddress::parse`
//! panic, an error names a line the text has, and whatever parses gives a
//! map in which every rank is in exactly one group, groups' ranks ascend
//! and names are unique.

use std::collections::HashSet;

use engine::cluster::rails::Rail;
use engine::cluster::rendezvous::Identity;
use engine::cluster::topology::{FabricMap, SlurmAddress, Topology, TopologyError};
use proptest::prelude::*;
use proptest::sample::Index;

const FAT_TREE: &str = include_str!("../../../tests/fixtures/topology/fat-tree.ibnetdiscover");
const RAIL_OPTIMISED: &str =
    include_str!("../../../tests/fixtures/topology/rail-optimised.ibnetdiscover");

/// Pieces of both formats, and of what breaks them.
const TOKENS: &[&str] = &[
    "SwitchName=",
    "switchname = ",
    "Nodes=",
    "Switches=",
    "LinkSpeed=",
    "BlockName=",
    "s0",
    "s[0-3]",
    "n[0-99]",
    "n[1-",
    "]",
    "[",
    ",",
    "\"",
    "\\",
    "#",
    "\n",
    "\r\n",
    " ",
    "\t",
    "=",
    "vendid=0x2c9",
    "switchguid=0x10(10)",
    "Switch\t8 ",
    "Ca\t2 ",
    "Rt\t1 ",
    "\"S-0000000000000010\"",
    "\"H-00000000000000ff\"",
    "\"R-0000000000000001\"",
    "\"S-\"",
    "[1]",
    "[2]",
    "[ext 3]",
    "(ff)",
    "(100)",
    "(zz)",
    "# \"leaf0\" lid 1",
    "# lid 2 lmc 0 \"a mlx5_0\"",
    "\"a mlx5_0\"",
    "MF0;leaf:MQM9700/U1",
    "Chassis 1",
    "Non-Chassis Nodes",
    "é",
    "\u{7}",
    "0",
    "-",
    ".",
    "Include",
];

fn soup() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(TOKENS), 0..60).prop_map(|t| t.concat())
}

/// Edits of a text: cut a range, flip a byte, insert a token.
#[derive(Debug, Clone)]
enum Edit {
    Cut(Index, Index),
    Flip(Index, u8),
    Insert(Index, &'static str),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Edit::Cut(a, b)),
        (any::<Index>(), 1u8..=255).prop_map(|(i, x)| Edit::Flip(i, x)),
        (any::<Index>(), prop::sample::select(TOKENS)).prop_map(|(i, t)| Edit::Insert(i, t)),
    ]
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut bytes = text.as_bytes().to_vec();
    for e in edits {
        if bytes.is_empty() {
            break;
        }
        match e {
            Edit::Cut(a, b) => {
                let (a, b) = (a.index(bytes.len()), b.index(bytes.len()));
                bytes.drain(a.min(b)..a.max(b));
            }
            Edit::Flip(i, x) => {
                let i = i.index(bytes.len());
                bytes[i] ^= x;
            }
            Edit::Insert(i, t) => {
                let i = i.index(bytes.len());
                bytes.splice(i..i, t.bytes());
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Ranks on a few of the hosts the texts name, and strangers.
fn members() -> Vec<Option<Identity>> {
    let hosts = ["n0", "n5", "a", "node03", "gpu05", "login1", "s0"];
    let mut members: Vec<Option<Identity>> = hosts
        .iter()
        .enumerate()
        .map(|(r, host)| {
            Some(Identity {
                rank: r as u32,
                size: hosts.len() as u32 + 1,
                version: "test".into(),
                host: (*host).into(),
                pair_port: 40_000,
                address: "192.0.2.1".into(),
                device: "mlx5_0:1".into(),
                rate_gbps: None,
                rails: (0..2u64)
                    .map(|k| Rail {
                        device: format!("mlx5_{k}"),
                        port: 1,
                        active: true,
                        link_layer: Some("InfiniBand".into()),
                        rate_gbps: None,
                        numa_node: None,
                        address: None,
                        port_guid: Some(0xff + r as u64 + k),
                    })
                    .collect(),
                rail_ports: vec![40_001],
                topology_addr: None,
            })
        })
        .collect();
    members.push(None);
    members
}

/// What holds of any text: no panic, an error names one of its lines,
/// a topology's indices are in range and its map is consistent.
fn check(text: &str) -> Result<(), TestCaseError> {
    match Topology::parse(text) {
        Err(TopologyError::Line { line, .. } | TopologyError::Unrecognised { line, .. }) => {
            prop_assert!(
                line >= 1 && line <= text.lines().count().max(1),
                "line {line}"
            );
        }
        Err(_) => {}
        Ok(t) => {
            let n = t.switches().len() as u32;
            prop_assert!(t.switches().iter().flat_map(|s| &s.parents).all(|&p| p < n));
            let members = members();
            let map = FabricMap::build(&members, &t);
            prop_assert_eq!(map.group_of.len(), members.len());
            prop_assert_eq!(map.leaf_of.len(), members.len());
            let mut seen = HashSet::new();
            let mut names = HashSet::new();
            for (g, group) in map.groups.iter().enumerate() {
                prop_assert!(names.insert(group.name.clone()), "{}", group.name);
                prop_assert!(group.ranks.windows(2).all(|w| w[0] < w[1]));
                for &r in &group.ranks {
                    prop_assert!(seen.insert(r));
                    prop_assert_eq!(map.group_of[r as usize], g as u32);
                }
            }
            prop_assert_eq!(seen.len(), members.len());
            prop_assert!(
                map.leaf_of
                    .iter()
                    .flatten()
                    .flatten()
                    .all(|&l| (l as usize) < map.switches.len())
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn token_soups_never_panic(text in soup()) {
        check(&text)?;
    }

    #[test]
    fn slurm_lines_from_soup_never_panic(text in soup()) {
        check(&format!("SwitchName=s0 Nodes=n[0-9]\n{text}"))?;
        check(&format!("switchguid=0x10(10)\n{text}"))?;
    }

    #[test]
    fn edited_fixtures_never_panic(
        edits in prop::collection::vec(edit(), 1..6),
        which in any::<bool>(),
    ) {
        let base = if which { FAT_TREE } else { RAIL_OPTIMISED };
        check(&apply(base, &edits))?;
    }

    #[test]
    fn addresses_never_panic(address in soup(), pattern in soup()) {
        let _ = SlurmAddress::parse(&address, &pattern);
        let _ = SlurmAddress::parse(&address, "switch.switch.node");
        if let Ok(a) = SlurmAddress::parse(&address, "switch.node") {
            let t = Topology::from_slurm_addresses([("h", &a)]);
            prop_assert!(t.is_ok());
        }
    }
}
