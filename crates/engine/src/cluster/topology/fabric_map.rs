//! The run's map: which leaf switch each rail of each rank sits under,
//! and the groups of nodes that share their leaves, as plain data for
//! the schedule, the verdicts and the reports.
//!
//! A node's group is the tuple of leaves its rails sit under: on a
//! classic fat tree every rail of a node is under one leaf and the group
//! is that leaf; on a rail-optimised fabric rail k of every node of a
//! scalable unit is under leaf k of the unit, and the group is the unit.
//! A rank the topology does not place on any rail (or that sent no
//! identity) is in the group [`UNKNOWN_GROUP`]; a rail it does not place
//! is `None` in the tuple, `?` in the name.
//!
//! Names: one leaf is its name (`leaf3`); a tuple whose leaves' names
//! differ only in one number is written as a hostlist in rail order
//! (`su1-leaf[0-7]`, `rail[0-7]-leaf3`; a node with rails 1 and 2
//! swapped is `su1-leaf[0,2,1,3-7]`), any other tuple joined by `+`
//! (`leafA+leafB`, `su0-leaf0+?+su0-leaf2`). Two groups that would share
//! a name get ` (2)`, ` (3)`. Groups are in natural order of their names
//! (`leaf9` before `leaf10`), "unknown" last; ranks ascending.

use std::collections::BTreeMap;

use serde::Serialize;

use super::super::rails::{MAX_RAILS, Rail, device_order};
use super::super::rendezvous::Identity;
use super::super::schedule::Rank;
use super::{Examples, MatchedBy, Switch, Topology};

/// The name of the group of ranks no source places.
pub const UNKNOWN_GROUP: &str = "unknown";

/// Nodes under the same leaves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Group {
    /// Its name (see the module's rules).
    pub name: String,
    /// The leaf of each rail (an index into [`FabricMap::switches`]),
    /// rail 0 first; a single entry when every rail of its nodes sits
    /// under that one leaf; empty for [`UNKNOWN_GROUP`].
    pub leaves: Vec<Option<u32>>,
    /// Its ranks, ascending.
    pub ranks: Vec<Rank>,
}

impl Group {
    /// Rail `rail`'s leaf.
    pub fn leaf(&self, rail: u32) -> Option<u32> {
        match self.leaves[..] {
            [one] => one,
            _ => self.leaves.get(rail as usize).copied().flatten(),
        }
    }

    /// Whether it is the group of the ranks no source places.
    pub fn is_unknown(&self) -> bool {
        self.leaves.iter().all(Option::is_none)
    }
}

/// The run's switches, each rank's leaves and the groups.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FabricMap {
    /// The topology's switches (all of them: indices are the
    /// topology's).
    pub switches: Vec<Switch>,
    /// `[rank][rail]`: the leaf rail `rail` of rank `rank` sits under;
    /// empty for a rank that sent no identity.
    pub leaf_of: Vec<Vec<Option<u32>>>,
    /// The groups, in the module's order.
    pub groups: Vec<Group>,
    /// Each rank's group, an index into `groups`.
    pub group_of: Vec<u32>,
    /// What the reader and the matching noticed (hosts absent on either
    /// side, rails placed by description, ...), each bounded to a few
    /// names and "and N more".
    pub notes: Vec<String>,
}

impl FabricMap {
    /// The map of `members` (rank r at index r; `None` for a rank that
    /// sent no identity) on `topology`: each rail by
    /// [`Topology::locate`].
    pub fn build(members: &[Option<Identity>], topology: &Topology) -> FabricMap {
        let mut leaf_of: Vec<Vec<Option<u32>>> = Vec::with_capacity(members.len());
        let mut matched = vec![false; topology.hosts().len()];
        let mut silent = Examples::default();
        let mut unplaced = Examples::default();
        let mut unplaced_rails = Examples::default();
        let mut by_description = Examples::default();
        for (rank, member) in members.iter().enumerate() {
            let Some(id) = member else {
                silent.push(|| rank.to_string());
                leaf_of.push(Vec::new());
                continue;
            };
            let rails = id.rail_count().min(MAX_RAILS as u32);
            let rail_name = |k: u32| {
                let name = id
                    .rails
                    .get(k as usize)
                    .map_or(format!("rail {k}"), Rail::name);
                format!("{} {name} (rank {rank})", id.host)
            };
            let mut leaves = Vec::with_capacity(rails as usize);
            for k in 0..rails {
                let placement = topology.locate(&id.host, id.rails.get(k as usize));
                if let Some(p) = placement {
                    matched[p.host as usize] = true;
                    if p.by == MatchedBy::NodeDescription {
                        by_description.push(|| rail_name(k));
                    }
                }
                leaves.push(placement.map(|p| p.leaf));
            }
            if leaves.iter().all(Option::is_none) {
                unplaced.push(|| format!("{} (rank {rank})", id.host));
            } else {
                for (k, _) in leaves.iter().enumerate().filter(|(_, l)| l.is_none()) {
                    unplaced_rails.push(|| rail_name(k as u32));
                }
            }
            leaf_of.push(leaves);
        }

        let mut by_key: BTreeMap<Vec<Option<u32>>, Vec<Rank>> = BTreeMap::new();
        let mut unknown: Vec<Rank> = Vec::new();
        for (rank, leaves) in leaf_of.iter().enumerate() {
            match group_key(leaves) {
                Some(key) => by_key.entry(key).or_default().push(rank as Rank),
                None => unknown.push(rank as Rank),
            }
        }
        let switches = topology.switches();
        let mut groups: Vec<Group> = by_key
            .into_iter()
            .map(|(leaves, ranks)| Group {
                name: group_name(&leaves, switches),
                leaves,
                ranks,
            })
            .collect();
        groups.sort_by(|a, b| device_order(&a.name, &b.name).then_with(|| a.leaves.cmp(&b.leaves)));
        let mut uses: BTreeMap<String, usize> = BTreeMap::from([(UNKNOWN_GROUP.to_owned(), 1)]);
        for g in &mut groups {
            let n = uses.entry(g.name.clone()).or_default();
            *n += 1;
            if *n > 1 {
                g.name = format!("{} ({n})", g.name);
            }
        }
        if !unknown.is_empty() {
            groups.push(Group {
                name: UNKNOWN_GROUP.to_owned(),
                leaves: Vec::new(),
                ranks: unknown,
            });
        }
        let mut group_of = vec![0u32; leaf_of.len()];
        for (i, g) in groups.iter().enumerate() {
            for &r in &g.ranks {
                group_of[r as usize] = i as u32;
            }
        }

        let mut notes = topology.notes().to_vec();
        let plural = |n: usize, one: &str, many: &str| if n == 1 { one } else { many }.to_owned();
        if unplaced.count() > 0 {
            let n = unplaced.count();
            notes.push(format!(
                "{n} rank{} not in {} (group \"{UNKNOWN_GROUP}\"): {}",
                plural(n, " is", "s are"),
                topology.format().phrase(),
                unplaced.list()
            ));
        }
        if silent.count() > 0 {
            let n = silent.count();
            notes.push(format!(
                "{n} rank{} no identity (group \"{UNKNOWN_GROUP}\"): {}",
                plural(n, " sent", "s sent"),
                silent.list()
            ));
        }
        if unplaced_rails.count() > 0 {
            let n = unplaced_rails.count();
            notes.push(format!(
                "{n} rail{} not in {} (\"?\" in their group's name): {}",
                plural(n, " is", "s are"),
                topology.format().phrase(),
                unplaced_rails.list()
            ));
        }
        if by_description.count() > 0 {
            let n = by_description.count();
            notes.push(format!(
                "{n} rail{} placed by node description (\"<host> <device>\"), not by port GUID: {}",
                plural(n, " was", "s were"),
                by_description.list()
            ));
        }
        let hosts = topology.hosts();
        let mut absent: Vec<&str> = (0..hosts.len())
            .filter(|&h| !matched[h])
            .map(|h| hosts[h].name.as_str())
            .collect();
        absent.sort_by(|a, b| device_order(a, b));
        let absent = absent.iter().fold(Examples::default(), |mut e, h| {
            e.push(|| (*h).to_owned());
            e
        });
        if absent.count() > 0 {
            let n = absent.count();
            notes.push(format!(
                "{} names {n} host{} absent from the job: {}",
                topology.format().phrase(),
                plural(n, "", "s"),
                absent.list()
            ));
        }
        FabricMap {
            switches: switches.to_vec(),
            leaf_of,
            groups,
            group_of,
            notes,
        }
    }

    /// The group of `rank`.
    pub fn group(&self, rank: Rank) -> Option<&Group> {
        let &g = self.group_of.get(rank as usize)?;
        self.groups.get(g as usize)
    }

    /// Each group's ranks, ascending, the groups in the map's order
    /// ("unknown" last): what the schedule pairs groups by.
    pub fn group_ranks(&self) -> Vec<Vec<Rank>> {
        self.groups.iter().map(|g| g.ranks.clone()).collect()
    }
}

/// The key a rank is grouped by: its leaves, one entry when they are all
/// the same leaf; `None` when no rail is placed.
fn group_key(leaves: &[Option<u32>]) -> Option<Vec<Option<u32>>> {
    let first = *leaves.first()?;
    if leaves.iter().all(Option::is_none) {
        return None;
    }
    if first.is_some() && leaves.iter().all(|&l| l == first) {
        return Some(vec![first]);
    }
    Some(leaves.to_vec())
}

/// A group's name from its leaves (see the module's rules).
fn group_name(leaves: &[Option<u32>], switches: &[Switch]) -> String {
    let name = |l: &Option<u32>| l.map_or("?", |i| switches[i as usize].name.as_str());
    let names: Vec<&str> = leaves.iter().map(name).collect();
    if let [one] = names[..] {
        return one.to_owned();
    }
    if leaves.iter().all(Option::is_some)
        && let Some(compact) = bracketed(&names)
    {
        return compact;
    }
    names.join("+")
}

/// Names that differ only in one number, in order, as one hostlist:
/// `su1-leaf0`, `su1-leaf1`, `su1-leaf2` → `su1-leaf[0-2]`; `r0-leaf4`,
/// `r1-leaf4` → `r[0-1]-leaf4`.
fn bracketed(names: &[&str]) -> Option<String> {
    /// Runs of digits and of the rest, in order.
    fn chunks(name: &str) -> Vec<&str> {
        let mut out = Vec::new();
        let mut start = 0;
        let b = name.as_bytes();
        for i in 1..=b.len() {
            if i == b.len() || b[i].is_ascii_digit() != b[start].is_ascii_digit() {
                out.push(&name[start..i]);
                start = i;
            }
        }
        out
    }
    fn follows(a: &str, b: &str) -> bool {
        let padded = |d: &str| d.len() > 1 && d.starts_with('0');
        let (Ok(x), Ok(y)) = (a.parse::<u64>(), b.parse::<u64>()) else {
            return false;
        };
        x.checked_add(1) == Some(y) && (a.len() == b.len() || !(padded(a) || padded(b)))
    }
    let split: Vec<Vec<&str>> = names.iter().map(|n| chunks(n)).collect();
    let first = split.first()?;
    if split.iter().any(|c| c.len() != first.len()) {
        return None;
    }
    let mut varying = (0..first.len()).filter(|&i| split.iter().any(|c| c[i] != first[i]));
    let at = varying.next()?;
    if varying.next().is_some() || !first[at].bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let numbers: Vec<&str> = split.iter().map(|c| c[at]).collect();
    let mut items = Vec::new();
    let mut i = 0;
    while i < numbers.len() {
        let mut j = i;
        while j + 1 < numbers.len() && follows(numbers[j], numbers[j + 1]) {
            j += 1;
        }
        items.push(if j > i {
            format!("{}-{}", numbers[i], numbers[j])
        } else {
            numbers[i].to_owned()
        });
        i = j + 1;
    }
    Some(format!(
        "{}[{}]{}",
        first[..at].concat(),
        items.join(","),
        first[at + 1..].concat()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAT_TREE: &str =
        include_str!("../../../../../tests/fixtures/topology/fat-tree.ibnetdiscover");
    const RAIL_OPTIMISED: &str =
        include_str!("../../../../../tests/fixtures/topology/rail-optimised.ibnetdiscover");

    /// Rank `rank` on `host` with one rail per `(device, port GUID)`.
    fn identity(rank: Rank, host: &str, rails: &[(&str, Option<u64>)]) -> Identity {
        Identity {
            rank,
            size: 0,
            version: "test".into(),
            host: host.into(),
            pair_port: 40_000,
            address: "192.0.2.1".into(),
            device: "mlx5_0:1".into(),
            rate_gbps: Some(400.0),
            rails: rails
                .iter()
                .map(|&(device, port_guid)| Rail {
                    device: device.into(),
                    port: 1,
                    active: true,
                    link_layer: Some("InfiniBand".into()),
                    rate_gbps: Some(400.0),
                    numa_node: None,
                    address: None,
                    port_guid,
                })
                .collect(),
            rail_ports: (1..rails.len()).map(|k| 40_000 + k as u16).collect(),
            topology_addr: None,
        }
    }

    /// A simulated rank: no rail details, `rails` listeners.
    fn simulated(rank: Rank, host: &str, rails: u16) -> Identity {
        Identity {
            rails: Vec::new(),
            rail_ports: (1..rails).map(|k| 40_000 + k).collect(),
            ..identity(rank, host, &[])
        }
    }

    /// gpu<h>'s four rails, with the fixture's port GUIDs.
    fn gpu(h: u64) -> Identity {
        let rails: Vec<(String, Option<u64>)> = (0..4u64)
            .map(|k| {
                let guid = 0x0c42_a103_0020_0001 + h * 0x100 + k * 0x10;
                (format!("mlx5_{k}"), Some(guid))
            })
            .collect();
        let rails: Vec<(&str, Option<u64>)> = rails.iter().map(|(d, g)| (d.as_str(), *g)).collect();
        identity(h as Rank, &format!("gpu{h:02}"), &rails)
    }

    fn names(map: &FabricMap) -> Vec<&str> {
        map.groups.iter().map(|g| g.name.as_str()).collect()
    }

    #[test]
    fn a_fat_tree_job_matched_by_guid_groups_by_leaf() {
        let t = Topology::parse(FAT_TREE).unwrap();
        // Ranks in an order unlike the hosts': rank r on node (r * 5) % 16.
        let members: Vec<Option<Identity>> = (0..16u64)
            .map(|r| {
                let h = (r * 5) % 16;
                let guid = 0x0c42_a103_0010_0001 + h * 0x100;
                Some(identity(
                    r as Rank,
                    &format!("node{h:02}"),
                    &[("mlx5_0", Some(guid))],
                ))
            })
            .collect();
        let map = FabricMap::build(&members, &t);
        assert_eq!(names(&map), ["leaf0", "leaf1", "leaf2", "leaf3"]);
        assert_eq!(map.groups[0].ranks, [0, 7, 10, 13]);
        assert_eq!(map.groups[1].ranks, [1, 4, 11, 14]);
        let leaf1 = t.switch_index("leaf1").unwrap();
        assert_eq!(map.groups[1].leaves, [Some(leaf1)]);
        assert_eq!(map.leaf_of[1], [Some(leaf1)]);
        assert_eq!(map.group(1).unwrap().name, "leaf1");
        assert_eq!(map.group_of[13], 0);
        assert_eq!(
            map.group_ranks(),
            [[0, 7, 10, 13], [1, 4, 11, 14], [2, 5, 8, 15], [3, 6, 9, 12]]
        );
        assert_eq!(map.switches.len(), 6);
        assert!(map.notes.is_empty(), "{:?}", map.notes);
        assert!(map.groups.iter().all(|g| !g.is_unknown()));
    }

    #[test]
    fn a_rail_optimised_job_groups_by_scalable_unit_and_a_swapped_rail_stands_out() {
        let t = Topology::parse(RAIL_OPTIMISED).unwrap();
        let mut members: Vec<Option<Identity>> = (0..8).map(|h| Some(gpu(h))).collect();
        let map = FabricMap::build(&members, &t);
        assert_eq!(names(&map), ["su0-leaf[0-3]", "su1-leaf[0-3]"]);
        assert_eq!(map.groups[1].ranks, [4, 5, 6, 7]);
        let leaf = |n: &str| Some(t.switch_index(n).unwrap());
        assert_eq!(
            map.groups[0].leaves,
            [
                leaf("su0-leaf0"),
                leaf("su0-leaf1"),
                leaf("su0-leaf2"),
                leaf("su0-leaf3")
            ]
        );
        assert_eq!(map.groups[0].leaf(2), leaf("su0-leaf2"));
        assert_eq!(map.leaf_of[6][3], leaf("su1-leaf3"));
        assert!(map.notes.is_empty(), "{:?}", map.notes);
        // gpu05's mlx5_1 and mlx5_2 cabled the other way round.
        let g5 = members[5].as_mut().unwrap();
        let (a, b) = (g5.rails[1].port_guid, g5.rails[2].port_guid);
        (g5.rails[1].port_guid, g5.rails[2].port_guid) = (b, a);
        let map = FabricMap::build(&members, &t);
        assert_eq!(
            names(&map),
            ["su0-leaf[0-3]", "su1-leaf[0,2,1,3]", "su1-leaf[0-3]"]
        );
        assert_eq!(map.groups[1].ranks, [5]);
    }

    #[test]
    fn without_guids_the_node_description_places_the_rails_and_says_so() {
        let t = Topology::parse(RAIL_OPTIMISED).unwrap();
        let members: Vec<Option<Identity>> = (0..8)
            .map(|h| {
                let mut id = gpu(h);
                id.rails.iter_mut().for_each(|r| r.port_guid = None);
                Some(id)
            })
            .collect();
        let map = FabricMap::build(&members, &t);
        assert_eq!(names(&map), ["su0-leaf[0-3]", "su1-leaf[0-3]"]);
        assert_eq!(
            map.notes,
            [
                "32 rails were placed by node description (\"<host> <device>\"), not by port GUID: \
              gpu00 mlx5_0:1 (rank 0), gpu00 mlx5_1:1 (rank 0), gpu00 mlx5_2:1 (rank 0), gpu00 \
              mlx5_3:1 (rank 0), gpu01 mlx5_0:1 (rank 1), gpu01 mlx5_1:1 (rank 1), gpu01 \
              mlx5_2:1 (rank 1), gpu01 mlx5_3:1 (rank 1) and 24 more"
            ]
        );
    }

    #[test]
    fn hosts_missing_on_either_side_are_notes_and_unknown_is_a_group() {
        let t = Topology::parse(RAIL_OPTIMISED).unwrap();
        let stranger = identity(3, "login1", &[("mlx5_0", Some(0xdead))]);
        let mut partial = gpu(1);
        partial.rails[1].port_guid = Some(0xbeef);
        partial.rails[1].device = "mlx5_9".into();
        let members = vec![Some(gpu(0)), Some(partial), None, Some(stranger)];
        let map = FabricMap::build(&members, &t);
        assert_eq!(
            names(&map),
            [
                "su0-leaf0+?+su0-leaf2+su0-leaf3",
                "su0-leaf[0-3]",
                "unknown"
            ]
        );
        let unknown = &map.groups[2];
        assert!(unknown.is_unknown() && unknown.leaves.is_empty());
        assert_eq!(unknown.ranks, [2, 3]);
        assert_eq!(map.group_of, [1, 0, 2, 2]);
        assert_eq!(map.group_ranks(), [vec![1], vec![0], vec![2, 3]]);
        assert!(map.leaf_of[2].is_empty());
        assert_eq!(map.leaf_of[1][1], None);
        assert_eq!(
            map.notes,
            [
                "1 rank is not in the ibnetdiscover output (group \"unknown\"): login1 (rank 3)",
                "1 rank sent no identity (group \"unknown\"): 2",
                "1 rail is not in the ibnetdiscover output (\"?\" in their group's name): gpu01 \
                 mlx5_9:1 (rank 1)",
                "the ibnetdiscover output names 6 hosts absent from the job: gpu02, gpu03, \
                 gpu04, gpu05, gpu06, gpu07"
            ]
        );
    }

    #[test]
    fn a_slurm_topology_places_every_rail_of_a_host_even_simulated() {
        let mut conf = String::new();
        for l in 0..12 {
            conf.push_str(&format!(
                "SwitchName=leaf{l} Nodes=n[{}-{}]\n",
                l * 4,
                l * 4 + 3
            ));
        }
        conf.push_str("SwitchName=spine Switches=leaf[0-11]\n");
        let t = Topology::parse(&conf).unwrap();
        // 100 ranks on n0..n99: n48 and above are not in the file.
        let members: Vec<Option<Identity>> = (0..100)
            .map(|r| Some(simulated(r, &format!("n{r}"), 2)))
            .collect();
        let map = FabricMap::build(&members, &t);
        let want: Vec<String> = (0..12)
            .map(|l| format!("leaf{l}"))
            .chain(["unknown".into()])
            .collect();
        assert_eq!(names(&map), want, "natural order, unknown last");
        assert_eq!(map.groups[10].ranks, [40, 41, 42, 43]);
        let leaf10 = t.switch_index("leaf10").unwrap();
        assert_eq!(map.leaf_of[41], [Some(leaf10), Some(leaf10)]);
        assert_eq!(map.groups[10].leaves, [Some(leaf10)]);
        assert_eq!(map.groups[10].leaf(1), Some(leaf10));
        assert_eq!(map.groups[12].ranks.len(), 52);
        assert_eq!(
            map.notes,
            [
                "52 ranks are not in the topology.conf (group \"unknown\"): n48 (rank 48), n49 \
              (rank 49), n50 (rank 50), n51 (rank 51), n52 (rank 52), n53 (rank 53), n54 (rank \
              54), n55 (rank 55) and 44 more"
            ]
        );
    }

    #[test]
    fn group_names_are_unique_whatever_the_switches_are_called() {
        let t = Topology::parse(
            "SwitchName=unknown Nodes=a\nSwitchName=x Nodes=b\nSwitchName=y Nodes=c\n",
        )
        .unwrap();
        let members = vec![
            Some(simulated(0, "a", 1)),
            Some(simulated(1, "b", 1)),
            Some(simulated(2, "zz", 1)),
        ];
        let map = FabricMap::build(&members, &t);
        assert_eq!(names(&map), ["unknown (2)", "x", "unknown"]);
        assert!(!map.groups[0].is_unknown() && map.groups[2].is_unknown());
    }

    #[test]
    fn tuples_of_leaves_are_named_compactly_in_rail_order() {
        let switches: Vec<Switch> = [
            "su1-leaf0",
            "su1-leaf1",
            "su1-leaf2",
            "su1-leaf3",
            "leafA",
            "leaf09",
            "leaf10",
            "leaf9",
            "r0-leaf4",
            "r1-leaf4",
            "r2-leaf4",
            "r1-leaf5",
        ]
        .iter()
        .map(|n| Switch {
            name: (*n).into(),
            parents: Vec::new(),
        })
        .collect();
        let name = |l: &[Option<u32>]| group_name(l, &switches);
        assert_eq!(name(&[Some(0), Some(1), Some(2), Some(3)]), "su1-leaf[0-3]");
        assert_eq!(
            name(&[Some(0), Some(2), Some(1), Some(3)]),
            "su1-leaf[0,2,1,3]"
        );
        assert_eq!(
            name(&[Some(0), Some(0), Some(1), Some(1)]),
            "su1-leaf[0,0-1,1]"
        );
        assert_eq!(name(&[Some(3), Some(2)]), "su1-leaf[3,2]");
        assert_eq!(name(&[Some(0), Some(4)]), "su1-leaf0+leafA");
        assert_eq!(name(&[Some(0), None]), "su1-leaf0+?");
        // Padded numbers run only at one width; 9 → 10 unpadded does.
        assert_eq!(name(&[Some(5), Some(6)]), "leaf[09-10]");
        assert_eq!(name(&[Some(5), Some(7)]), "leaf[09,9]");
        assert_eq!(name(&[Some(7), Some(6)]), "leaf[9-10]");
        assert_eq!(name(&[Some(4)]), "leafA");
        // The number that varies need not be the last.
        assert_eq!(name(&[Some(8), Some(9), Some(10)]), "r[0-2]-leaf4");
        assert_eq!(name(&[Some(8), Some(11)]), "r0-leaf4+r1-leaf5");
        assert_eq!(name(&[Some(1), Some(9)]), "su1-leaf1+r1-leaf4");
    }

    #[test]
    fn an_empty_job_has_no_groups() {
        let t = Topology::parse("SwitchName=s0 Nodes=a\n").unwrap();
        let map = FabricMap::build(&[], &t);
        assert!(map.groups.is_empty() && map.group_of.is_empty());
        assert_eq!(
            map.notes,
            ["the topology.conf names 1 host absent from the job: a"]
        );
        assert_eq!(map.group(0), None);
    }
}
