//! `SLURM_TOPOLOGY_ADDR` and `SLURM_TOPOLOGY_ADDR_PATTERN`: what Slurm's
//! topology/tree plugin gives every task about its node's switches
//! (Topology Guide, "Environment Variables"; `topology_p_get_node_addr`
//! in `src/plugins/topology/tree/topology_tree.c` of SchedMD/slurm).
//!
//! The address has one part per switch level, the top level first, then
//! the node's name, dot-separated: `spine0.leaf7.node1`, pattern
//! `switch.switch.node`. Each level's part is the hostlist of the
//! switches at that level above the node (`s[4-7].s0.tux1` when four
//! switches list `s0` in `Switches=`), and empty when none is (levels are
//! the whole fabric's, so a node whose leaf hangs straight from the top
//! gets `top..node1`). A node's leaf is its last part; each switch's
//! parents are the switches of the nearest part above it that is not
//! empty. The node's name is Slurm's (it may hold dots: the pattern says
//! how many parts come before it).

use thiserror::Error;

use super::super::hostlist::{self, HostlistError};
use super::{Builder, Examples, Format, HostAdded, LineFault, Topology, TopologyError, check_name};

/// Longest address or pattern read, in bytes.
pub const MAX_ADDRESS_LEN: usize = 4_096;
/// Most switch levels an address may have (Slurm refuses a tree deeper
/// than 20 levels).
pub const MAX_LEVELS: usize = 20;
/// Most switches one level of an address may name.
pub const MAX_SWITCHES_PER_LEVEL: usize = 64;

/// A rank's place in Slurm's switch tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmAddress {
    /// From the top level down: the switches at that level above the
    /// node (empty when none is).
    pub levels: Vec<Vec<String>>,
    /// Slurm's name for the node.
    pub node: String,
}

/// Why an address was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AddressError {
    /// The address or the pattern is empty.
    #[error("SLURM_TOPOLOGY_ADDR or its _PATTERN is empty")]
    Empty,
    /// Longer than [`MAX_ADDRESS_LEN`].
    #[error("SLURM_TOPOLOGY_ADDR or its _PATTERN is {0} bytes, at most {MAX_ADDRESS_LEN}")]
    TooLong(usize),
    /// A pattern that is not `switch.…switch.node`.
    #[error("SLURM_TOPOLOGY_ADDR_PATTERN {0:?} is not switch.….switch.node")]
    Pattern(String),
    /// More than [`MAX_LEVELS`] switch levels.
    #[error("SLURM_TOPOLOGY_ADDR_PATTERN has {0} switch levels, at most {MAX_LEVELS}")]
    TooDeep(usize),
    /// Fewer parts than the pattern.
    #[error("SLURM_TOPOLOGY_ADDR {address:?} has fewer parts than its pattern {pattern:?}")]
    Parts {
        /// The address.
        address: String,
        /// The pattern.
        pattern: String,
    },
    /// A level's switches do not parse as a hostlist (or are more than
    /// [`MAX_SWITCHES_PER_LEVEL`]).
    #[error("SLURM_TOPOLOGY_ADDR level {level}: {error}")]
    Hostlist {
        /// The level, 0 the top.
        level: usize,
        /// Why.
        error: HostlistError,
    },
    /// A switch or node name that is empty, too long or holds a control
    /// character.
    #[error("SLURM_TOPOLOGY_ADDR: {0}")]
    Name(LineFault),
}

impl SlurmAddress {
    /// Reads `SLURM_TOPOLOGY_ADDR` by `SLURM_TOPOLOGY_ADDR_PATTERN`.
    ///
    /// # Errors
    /// An empty or over-long value, a pattern that is not
    /// `switch.….node`, an address with fewer parts, a level that is not
    /// a hostlist of at most [`MAX_SWITCHES_PER_LEVEL`] names.
    pub fn parse(address: &str, pattern: &str) -> Result<SlurmAddress, AddressError> {
        let (address, pattern) = (address.trim(), pattern.trim());
        if address.is_empty() || pattern.is_empty() {
            return Err(AddressError::Empty);
        }
        if let Some(len) = [address.len(), pattern.len()]
            .into_iter()
            .find(|&l| l > MAX_ADDRESS_LEN)
        {
            return Err(AddressError::TooLong(len));
        }
        let kinds: Vec<&str> = pattern.split('.').collect();
        let (last, switches) = kinds.split_last().expect("split gives one at least");
        if *last != "node" || switches.iter().any(|k| *k != "switch") {
            return Err(AddressError::Pattern(pattern.to_owned()));
        }
        if switches.len() > MAX_LEVELS {
            return Err(AddressError::TooDeep(switches.len()));
        }
        let parts: Vec<&str> = address.splitn(kinds.len(), '.').collect();
        if parts.len() != kinds.len() {
            return Err(AddressError::Parts {
                address: address.to_owned(),
                pattern: pattern.to_owned(),
            });
        }
        let (node, parts) = parts.split_last().expect("as many as the pattern's");
        check_name("a node name", node).map_err(AddressError::Name)?;
        let levels = parts
            .iter()
            .enumerate()
            .map(|(level, part)| {
                if part.is_empty() {
                    return Ok(Vec::new());
                }
                let names = hostlist::expand(part, MAX_SWITCHES_PER_LEVEL)
                    .map_err(|error| AddressError::Hostlist { level, error })?;
                for n in &names {
                    check_name("a switch name", n).map_err(AddressError::Name)?;
                }
                Ok(names)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(SlurmAddress {
            levels,
            node: (*node).to_owned(),
        })
    }

    /// The node's leaf switch: the first of the last level's.
    pub fn leaf(&self) -> Option<&str> {
        self.levels.last()?.first().map(String::as_str)
    }
}

impl Topology {
    /// The topology the ranks' addresses describe: each `(host,
    /// address)` places every rail of `host` (the rank's host name, which
    /// may differ from Slurm's node name) under the address's leaf.
    ///
    /// A host whose address names no leaf is left out (its ranks are
    /// "unknown"); one under two leaves, or given two addresses, keeps
    /// the first: both are notes.
    ///
    /// # Errors
    /// More than [`super::MAX_SWITCHES`] switches, [`super::MAX_HOSTS`]
    /// hosts or [`super::MAX_LINKS`] links, or a host name that is empty,
    /// too long or holds a control character (named with its host).
    pub fn from_slurm_addresses<'a>(
        addresses: impl IntoIterator<Item = (&'a str, &'a SlurmAddress)>,
    ) -> Result<Topology, TopologyError> {
        let mut b = Builder::new(Format::SlurmAddresses);
        let (mut no_leaf, mut two_leaves, mut moved) = Default::default();
        for (host, address) in addresses {
            add(
                &mut b,
                host,
                address,
                [&mut no_leaf, &mut two_leaves, &mut moved],
            )
            .map_err(|fault| TopologyError::Address {
                host: host.to_owned(),
                fault,
            })?;
        }
        let notes: [(&Examples, &str); 3] = [
            (
                &no_leaf,
                "an address with no leaf switch (group \"unknown\")",
            ),
            (
                &two_leaves,
                "an address with several leaf switches (the first taken)",
            ),
            (&moved, "two addresses (the first kept)"),
        ];
        for (list, what) in notes {
            if list.count() > 0 {
                b.note(format!(
                    "SLURM_TOPOLOGY_ADDR: {} host{} {what}: {}",
                    list.count(),
                    if list.count() == 1 { " has" } else { "s have" },
                    list.list()
                ));
            }
        }
        Ok(b.finish())
    }
}

/// One host's address into `b`; the notes' lists: no leaf, several
/// leaves, a second address.
fn add(
    b: &mut Builder,
    host: &str,
    address: &SlurmAddress,
    [no_leaf, two_leaves, moved]: [&mut Examples; 3],
) -> Result<(), LineFault> {
    let Some(leaf) = address.leaf() else {
        no_leaf.push(|| host.to_owned());
        return Ok(());
    };
    let mut above: Vec<u32> = Vec::new();
    for level in address.levels.iter().filter(|l| !l.is_empty()) {
        let mut this = Vec::with_capacity(level.len());
        for name in level {
            let s = b.switch(name)?;
            for &p in &above {
                b.parent(s, p)?;
            }
            this.push(s);
        }
        above = this;
    }
    let last = address.levels.last().map_or(0, Vec::len);
    if last > 1 {
        two_leaves.push(|| {
            format!(
                "{host} ({})",
                address.levels[address.levels.len() - 1].join(", ")
            )
        });
    }
    let leaf = b.switch_named(leaf).expect("added above");
    if let HostAdded::UnderOtherLeaf { first, .. } = b.host(host, Some(leaf))? {
        let first = b.switches()[first as usize].name.clone();
        moved.push(|| format!("{host} ({first}, then {})", address.leaf().unwrap_or("")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::topology::MatchedBy;

    fn addr(a: &str, p: &str) -> SlurmAddress {
        SlurmAddress::parse(a, p).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn an_address_reads_top_down_to_the_node() {
        let a = addr("spine0.leaf7.node1", "switch.switch.node");
        assert_eq!(a.levels, [vec!["spine0"], vec!["leaf7"]]);
        assert_eq!((a.node.as_str(), a.leaf()), ("node1", Some("leaf7")));
        // The code's own example (topology_tree.c): three levels.
        let a = addr("s0.s4.s8.tux1", "switch.switch.switch.node");
        assert_eq!(a.leaf(), Some("s8"));
        // Several switches at a level: a hostlist (the guide's second
        // example, where four switches list every leaf).
        let a = addr("s[4-7].s0.tux1", "switch.switch.node");
        assert_eq!(a.levels[0], ["s4", "s5", "s6", "s7"]);
        // A level with no switch above the node is empty; a node name
        // may hold dots.
        let a = addr("top..n1.ib.example", "switch.switch.node");
        assert_eq!(a.levels, [vec!["top".to_owned()], vec![]]);
        assert_eq!((a.node.as_str(), a.leaf()), ("n1.ib.example", None));
        // No switches configured: Slurm sets the node alone.
        let a = addr("tux1", "node");
        assert!(a.levels.is_empty() && a.leaf().is_none());
    }

    #[test]
    fn bad_addresses_and_patterns_are_refused() {
        let e = |a: &str, p: &str| SlurmAddress::parse(a, p).unwrap_err().to_string();
        assert_eq!(
            e("", "node"),
            "SLURM_TOPOLOGY_ADDR or its _PATTERN is empty"
        );
        assert_eq!(
            e("a.b", "switch.nodes"),
            "SLURM_TOPOLOGY_ADDR_PATTERN \"switch.nodes\" is not switch.….switch.node"
        );
        assert_eq!(
            e("a.b", "node.switch"),
            "SLURM_TOPOLOGY_ADDR_PATTERN \"node.switch\" is not switch.….switch.node"
        );
        assert_eq!(
            e("leaf0", "switch.switch.node"),
            "SLURM_TOPOLOGY_ADDR \"leaf0\" has fewer parts than its pattern \"switch.switch.node\""
        );
        assert_eq!(
            e("s[0-3.n1", "switch.node"),
            "SLURM_TOPOLOGY_ADDR level 0: unbalanced bracket in \"s[0-3\""
        );
        assert_eq!(
            e("s[0-999].n1", "switch.node"),
            "SLURM_TOPOLOGY_ADDR level 0: the hostlist expands to more than 64 hosts"
        );
        assert_eq!(
            e("s0.", "switch.node"),
            "SLURM_TOPOLOGY_ADDR: a node name of 0 bytes (1 to 255, no control characters)"
        );
        let deep = format!("{}node", "switch.".repeat(21));
        assert_eq!(
            e(&format!("{}n", "s.".repeat(21)), &deep),
            "SLURM_TOPOLOGY_ADDR_PATTERN has 21 switch levels, at most 20"
        );
        assert_eq!(
            e(&"x".repeat(5_000), "node"),
            "SLURM_TOPOLOGY_ADDR or its _PATTERN is 5000 bytes, at most 4096"
        );
    }

    #[test]
    fn the_ranks_addresses_build_the_tree() {
        let pattern = "switch.switch.node";
        let ranks = [
            ("node1", addr("spine0.leaf0.node1", pattern)),
            ("node2.cluster", addr("spine0.leaf0.node2", pattern)),
            ("node3", addr("spine[0-1].leaf1.node3", pattern)),
            ("node4", addr("spine0..node4", pattern)),
            ("node1", addr("spine0.leaf0.node1", pattern)),
        ];
        let t = Topology::from_slurm_addresses(ranks.iter().map(|(h, a)| (*h, a))).unwrap();
        assert_eq!(t.format(), Format::SlurmAddresses);
        let name = |i: u32| t.switches()[i as usize].name.as_str();
        let leaf = |h: &str| t.locate(h, None).map(|p| (name(p.leaf), p.by));
        assert_eq!(leaf("node1"), Some(("leaf0", MatchedBy::Host)));
        assert_eq!(leaf("NODE2"), Some(("leaf0", MatchedBy::Host)));
        assert_eq!(leaf("node3"), Some(("leaf1", MatchedBy::Host)));
        assert_eq!(leaf("node4"), None);
        let parents = |s: &str| -> Vec<&str> {
            t.switches()[t.switch_index(s).unwrap() as usize]
                .parents
                .iter()
                .map(|&p| name(p))
                .collect()
        };
        assert_eq!(parents("leaf0"), ["spine0"]);
        assert_eq!(parents("leaf1"), ["spine0", "spine1"]);
        assert!(parents("spine1").is_empty());
        assert_eq!(
            t.notes(),
            [
                "SLURM_TOPOLOGY_ADDR: 1 host has an address with no leaf switch (group \"unknown\"): \
              node4"
            ]
        );
    }

    #[test]
    fn a_leaf_hanging_from_the_top_skips_the_empty_level_and_conflicts_are_notes() {
        let pattern = "switch.switch.switch.node";
        // `leaf[B-C]` is not a hostlist range: a bracket holds numbers.
        assert!(SlurmAddress::parse("core.agg.leaf[B-C].b", pattern).is_err());
        let ranks = [
            ("a", addr("core..leafA.a", pattern)),
            ("b", addr("core.agg.leaf[1-2].b", pattern)),
            ("b", addr("core.agg.leafX.b", pattern)),
        ];
        let t = Topology::from_slurm_addresses(ranks.iter().map(|(h, a)| (*h, a))).unwrap();
        let idx = |s: &str| t.switch_index(s).unwrap();
        assert_eq!(t.switches()[idx("leafA") as usize].parents, [idx("core")]);
        assert_eq!(t.switches()[idx("leaf2") as usize].parents, [idx("agg")]);
        assert_eq!(t.locate("b", None).unwrap().leaf, idx("leaf1"));
        assert_eq!(
            t.notes(),
            [
                "SLURM_TOPOLOGY_ADDR: 1 host has an address with several leaf switches (the \
                 first taken): b (leaf1, leaf2)",
                "SLURM_TOPOLOGY_ADDR: 1 host has two addresses (the first kept): b (leaf1, then \
                 leafX)"
            ]
        );
    }

    #[test]
    fn a_bad_host_name_is_named() {
        let a = addr("s0.n1", "switch.node");
        let e = Topology::from_slurm_addresses([("", &a)]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "SLURM_TOPOLOGY_ADDR of : a host name of 0 bytes (1 to 255, no control characters)"
        );
    }
}
