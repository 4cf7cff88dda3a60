//! A saved `ibnetdiscover` output (infiniband-diags): every node of an
//! InfiniBand subnet with every cabled port. The layout is
//! `ibnetdiscover.c`'s (`out_switch`, `out_switch_port`, `out_ca`,
//! `out_ca_port` in linux-rdma/rdma-core's `infiniband-diags`):
//!
//! ```text
//! vendid=0x2c9
//! switchguid=0x248a0703000a0000(248a0703000a0000)
//! Switch  8 "S-248a0703000a0000"   # "leaf0" base port 0 lid 1 lmc 0
//! [1]     "H-0c42a10300100000"[1](c42a10300100001)   # "node00 mlx5_0" lid 2 4xNDR
//! [5]     "S-248a0703000b0000"[1]   # "spine0" lid 3 4xNDR
//!
//! caguid=0xc42a10300100000
//! Ca      1 "H-0c42a10300100000"   # "node00 mlx5_0"
//! [1](c42a10300100001)    "S-248a0703000a0000"[1]   # lid 2 lmc 0 "leaf0" lid 1 4xNDR
//! ```
//!
//! Each HCA port is placed under the switch it is cabled to, found by its
//! port GUID (the `(…)` after it) and, when its node description is
//! `"<host> <device>"` (rdma-ndd's default), by host, device and port:
//! so rail k of a node lands under whichever leaf rail k is cabled to.
//! A switch is named by its description (`MF0;<name>:<model>/U1`, as
//! NVIDIA's managed switches describe themselves, gives `<name>`), or
//! `S-<GUID>` when that is empty or shared. Leaves are the switches HCAs
//! are cabled to; a switch's parents are the switches it is cabled to one
//! level further from the leaves (levels by breadth-first search from
//! them).
//!
//! `-g` output (chassis groups: `Chassis`, `Non-Chassis Nodes`,
//! `[ext N]`) reads too; routers (`Rt`) are skipped; back-to-back HCA
//! links place nothing.

use std::collections::{HashMap, HashSet, VecDeque};

use super::{
    Builder, Examples, Format, LineFault, MAX_LINKS, MAX_PORTS, MAX_SWITCHES, Topology,
    TopologyError, check_name,
};

/// The `key=value` lines before each node.
const ID_KEYS: [&str; 6] = [
    "vendid",
    "devid",
    "sysimgguid",
    "switchguid",
    "caguid",
    "rtguid",
];

/// Whether `line`, the file's first meaningful line, is `ibnetdiscover`
/// output.
pub(super) fn starts(line: &str) -> bool {
    let id_key = line
        .split_once('=')
        .is_some_and(|(k, _)| ID_KEYS.contains(&k.trim()));
    id_key || node_kind(line).is_some() || chassis_line(line)
}

/// `-g` output's chassis lines (`Chassis 1 (guid 0x…)`,
/// `Non-Chassis Nodes`, `Hostname: …`).
fn chassis_line(line: &str) -> bool {
    line.starts_with("Chassis ") || line == "Non-Chassis Nodes" || line.starts_with("Hostname:")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NodeKind {
    Switch,
    Ca,
    Router,
}

impl NodeKind {
    /// The letter of its ids: `S-…`, `H-…`, `R-…`.
    fn letter(self) -> u8 {
        match self {
            NodeKind::Switch => b'S',
            NodeKind::Ca => b'H',
            NodeKind::Router => b'R',
        }
    }
}

/// The kind of a node line (`Switch`, `Ca`, `Rt` and white space), and
/// the rest.
fn node_kind(line: &str) -> Option<(NodeKind, &str)> {
    let end = line.find([' ', '\t'])?;
    let kind = match &line[..end] {
        "Switch" => NodeKind::Switch,
        "Ca" => NodeKind::Ca,
        "Rt" => NodeKind::Router,
        _ => return None,
    };
    Some((kind, line[end..].trim_start()))
}

/// A node line.
#[derive(Debug, PartialEq, Eq)]
struct NodeLine<'a> {
    kind: NodeKind,
    guid: u64,
    description: &'a str,
}

/// A port line.
#[derive(Debug, PartialEq, Eq)]
struct PortLine<'a> {
    port: u8,
    port_guid: Option<u64>,
    remote: u8,
    remote_guid: u64,
    remote_port: u8,
    remote_port_guid: Option<u64>,
    description: &'a str,
}

/// `"X-<hex>"` at the start of `text`: the letter, the GUID, the rest.
fn node_id(text: &str) -> Option<(u8, u64, &str)> {
    let b = text.as_bytes();
    if b.len() < 4 || b[0] != b'"' || b[2] != b'-' {
        return None;
    }
    let close = 3 + text[3..].find('"')?;
    Some((b[1], hex(&text[3..close])?, &text[close + 1..]))
}

/// 1 to 16 hex digits.
fn hex(digits: &str) -> Option<u64> {
    if digits.is_empty() || digits.len() > 16 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

/// `[N]` at the start of `text`, then the rest.
fn port_number(text: &str) -> Option<(u8, &str)> {
    let inner = text.strip_prefix('[')?;
    let close = inner.find(']')?;
    let n = inner[..close].parse().ok()?;
    Some((n, &inner[close + 1..]))
}

/// `text` past a `[ext N]` (`-g` output), if it starts with one.
fn skip_ext(text: &str) -> &str {
    match text.strip_prefix("[ext ").and_then(|t| t.split_once(']')) {
        Some((_, rest)) => rest,
        None => text,
    }
}

/// `(<hex>)` at the start of `text` (after white space), then the rest.
fn guid_in_parens(text: &str) -> Result<(Option<u64>, &str), String> {
    let t = text.trim_start();
    let Some(inner) = t.strip_prefix('(') else {
        return Ok((None, text));
    };
    let (digits, rest) = inner.split_once(')').ok_or("a ( without its )")?;
    let guid = hex(digits).ok_or_else(|| format!("({digits}) is not a port GUID"))?;
    Ok((Some(guid), rest))
}

/// The quoted description of a line's comment: from the first `"` after
/// `#` to the last `"` of the line (a description may hold quotes).
fn description(rest: &str) -> &str {
    let Some((_, comment)) = rest.split_once('#') else {
        return "";
    };
    match (comment.find('"'), comment.rfind('"')) {
        (Some(a), Some(b)) if b > a => &comment[a + 1..b],
        _ => "",
    }
}

fn node_line(line: &str) -> Result<NodeLine<'_>, LineFault> {
    let bad = |why: &str| LineFault::BadNode(why.to_owned());
    let (kind, rest) = node_kind(line).ok_or_else(|| bad("no Switch, Ca or Rt"))?;
    let (ports, rest) = rest
        .split_once([' ', '\t'])
        .ok_or_else(|| bad("no \"X-GUID\" id"))?;
    if !ports.parse::<u8>().is_ok_and(|p| p > 0) {
        return Err(bad(&format!("{ports:?} is not a port count (1-255)")));
    }
    let (letter, guid, rest) = node_id(rest.trim_start()).ok_or_else(|| bad("no \"X-GUID\" id"))?;
    if letter != kind.letter() {
        return Err(bad(
            "a Switch's id is \"S-…\", a Ca's \"H-…\", an Rt's \"R-…\"",
        ));
    }
    let rest = rest.trim_start();
    if !(rest.is_empty() || rest.starts_with('#')) {
        return Err(bad(&format!("{:?} after the id", excerpt(rest))));
    }
    Ok(NodeLine {
        kind,
        guid,
        description: description(rest),
    })
}

fn port_line(line: &str) -> Result<PortLine<'_>, LineFault> {
    let bad = |why: String| LineFault::BadPort(why);
    let (port, rest) = port_number(line).ok_or_else(|| bad("no [PORT] (0-255)".into()))?;
    let (port_guid, rest) = guid_in_parens(skip_ext(rest)).map_err(bad)?;
    let (remote, remote_guid, rest) =
        node_id(rest.trim_start()).ok_or_else(|| bad("no \"X-GUID\" remote node".into()))?;
    if !matches!(remote, b'S' | b'H' | b'R') {
        return Err(bad("a remote node is \"S-…\", \"H-…\" or \"R-…\"".into()));
    }
    let (remote_port, rest) =
        port_number(rest).ok_or_else(|| bad("no [PORT] (0-255) after the remote node".into()))?;
    let (remote_port_guid, rest) = guid_in_parens(skip_ext(rest)).map_err(bad)?;
    let rest = rest.trim_start();
    if !(rest.is_empty() || rest.starts_with('#')) {
        return Err(bad(format!("{:?} after the remote port", excerpt(rest))));
    }
    Ok(PortLine {
        port,
        port_guid,
        remote,
        remote_guid,
        remote_port,
        remote_port_guid,
        description: description(rest),
    })
}

fn excerpt(text: &str) -> String {
    text.chars().take(40).collect()
}

/// A switch seen: defined by its `Switch` line or named by a link.
#[derive(Debug)]
struct SwitchSeen<'a> {
    guid: u64,
    description: &'a str,
    defined_on: Option<usize>,
}

/// An HCA port cabled to a switch.
#[derive(Debug)]
struct CaPort<'a> {
    ca: u64,
    port: u8,
    port_guid: Option<u64>,
    description: &'a str,
    switch: u32,
    line: usize,
}

/// Everything read, before names and levels.
#[derive(Debug, Default)]
struct Discovered<'a> {
    switches: Vec<SwitchSeen<'a>>,
    switch_by_guid: HashMap<u64, u32>,
    nodes_defined: HashMap<u64, usize>,
    ca_ports: Vec<CaPort<'a>>,
    ca_port_by_id: HashMap<(u64, u8), u32>,
    links: HashSet<(u32, u32)>,
}

/// The node whose block the port lines are in.
#[derive(Debug, Clone, Copy)]
struct Block<'a> {
    kind: NodeKind,
    guid: u64,
    description: &'a str,
}

impl<'a> Discovered<'a> {
    fn switch(&mut self, guid: u64, description: &'a str) -> Result<u32, LineFault> {
        if let Some(&i) = self.switch_by_guid.get(&guid) {
            let seen = &mut self.switches[i as usize];
            if seen.description.is_empty() {
                seen.description = description;
            }
            return Ok(i);
        }
        if self.switches.len() >= MAX_SWITCHES {
            return Err(LineFault::TooMany {
                what: "switches",
                cap: MAX_SWITCHES,
            });
        }
        let i = self.switches.len() as u32;
        self.switches.push(SwitchSeen {
            guid,
            description,
            defined_on: None,
        });
        self.switch_by_guid.insert(guid, i);
        Ok(i)
    }

    fn node(&mut self, node: &NodeLine<'a>, line: usize) -> Result<Block<'a>, LineFault> {
        if let Some(&first_line) = self.nodes_defined.get(&node.guid) {
            return Err(LineFault::DuplicateNode {
                guid: format!("{}-{:016x}", node.kind.letter() as char, node.guid),
                first_line,
            });
        }
        if self.nodes_defined.len() >= MAX_PORTS + MAX_SWITCHES {
            return Err(LineFault::TooMany {
                what: "nodes",
                cap: MAX_PORTS + MAX_SWITCHES,
            });
        }
        self.nodes_defined.insert(node.guid, line);
        if node.kind == NodeKind::Switch {
            let i = self.switch(node.guid, node.description)?;
            let seen = &mut self.switches[i as usize];
            seen.description = node.description;
            seen.defined_on = Some(line);
        }
        Ok(Block {
            kind: node.kind,
            guid: node.guid,
            description: node.description,
        })
    }

    fn link(&mut self, a: u32, b: u32) -> Result<(), LineFault> {
        if a == b || self.links.contains(&(a.min(b), a.max(b))) {
            return Ok(());
        }
        if self.links.len() >= MAX_LINKS {
            return Err(LineFault::TooMany {
                what: "switch-to-switch links",
                cap: MAX_LINKS,
            });
        }
        self.links.insert((a.min(b), a.max(b)));
        Ok(())
    }

    fn ca_port(&mut self, p: CaPort<'a>) -> Result<(), LineFault> {
        if let Some(&i) = self.ca_port_by_id.get(&(p.ca, p.port)) {
            let known = &mut self.ca_ports[i as usize];
            if known.switch != p.switch {
                let name = |s: u32| format!("S-{:016x}", self.switches[s as usize].guid);
                let known = &self.ca_ports[i as usize];
                return Err(LineFault::CabledTwice {
                    port: format!("H-{:016x} port {}", p.ca, p.port),
                    this: name(p.switch),
                    other: name(known.switch),
                    other_line: known.line,
                });
            }
            known.port_guid = known.port_guid.or(p.port_guid);
            if known.description.is_empty() {
                known.description = p.description;
            }
            return Ok(());
        }
        if self.ca_ports.len() >= MAX_PORTS {
            return Err(LineFault::TooMany {
                what: "HCA ports",
                cap: MAX_PORTS,
            });
        }
        self.ca_port_by_id
            .insert((p.ca, p.port), self.ca_ports.len() as u32);
        self.ca_ports.push(p);
        Ok(())
    }

    /// What a port line of `block` says.
    fn port(&mut self, block: Block<'a>, p: &PortLine<'a>, line: usize) -> Result<(), LineFault> {
        match (block.kind, p.remote) {
            (NodeKind::Switch, b'S') => {
                let this = self.switch(block.guid, block.description)?;
                let other = self.switch(p.remote_guid, p.description)?;
                self.link(this, other)
            }
            (NodeKind::Switch, b'H') => {
                let switch = self.switch(block.guid, block.description)?;
                self.ca_port(CaPort {
                    ca: p.remote_guid,
                    port: p.remote_port,
                    port_guid: p.remote_port_guid,
                    description: p.description,
                    switch,
                    line,
                })
            }
            (NodeKind::Ca, b'S') => {
                let switch = self.switch(p.remote_guid, p.description)?;
                self.ca_port(CaPort {
                    ca: block.guid,
                    port: p.port,
                    port_guid: p.port_guid,
                    description: block.description,
                    switch,
                    line,
                })
            }
            // Routers, and HCAs cabled back to back: no leaf.
            _ => Ok(()),
        }
    }
}

/// Reads an `ibnetdiscover` output (see the module's rules).
pub(super) fn parse(text: &str) -> Result<Topology, TopologyError> {
    let mut d = Discovered::default();
    let mut block: Option<Block<'_>> = None;
    for (n, raw) in text.lines().enumerate() {
        let line = n + 1;
        let at = |fault| TopologyError::Line {
            format: Format::Ibnetdiscover,
            line,
            fault,
        };
        let t = raw.trim();
        if t.is_empty() {
            block = None;
            continue;
        }
        if t.starts_with('#') || chassis_line(t) {
            continue;
        }
        if t.starts_with('[') {
            let p = port_line(t).map_err(at)?;
            let b = block.ok_or_else(|| at(LineFault::PortOutsideNode))?;
            d.port(b, &p, line).map_err(at)?;
        } else if t
            .split_once('=')
            .is_some_and(|(k, _)| ID_KEYS.contains(&k.trim()))
        {
            continue;
        } else if node_kind(t).is_some() {
            let node = node_line(t).map_err(at)?;
            block = Some(d.node(&node, line).map_err(at)?);
        } else {
            return Err(at(LineFault::NotIbnetdiscover(excerpt(t))));
        }
    }
    if d.switches.is_empty() && d.nodes_defined.is_empty() {
        return Err(TopologyError::Empty);
    }
    build(d)
}

/// `MF0;<name>:<model>/U1` (NVIDIA's managed switches) → `<name>`.
fn managed_switch_name(description: &str) -> Option<&str> {
    let rest = description.strip_prefix("MF0;")?;
    let (name, model) = rest.split_once(':')?;
    (!name.is_empty() && model.contains('/')).then_some(name)
}

fn build(d: Discovered<'_>) -> Result<Topology, TopologyError> {
    let mut b = Builder::new(Format::Ibnetdiscover);
    // Names: the description, unless empty, unfit or shared.
    fn candidate<'a>(s: &SwitchSeen<'a>) -> Option<&'a str> {
        let name = managed_switch_name(s.description).unwrap_or(s.description.trim());
        check_name("", name).is_ok().then_some(name)
    }
    let mut uses: HashMap<&str, usize> = HashMap::new();
    for s in &d.switches {
        if let Some(name) = candidate(s) {
            *uses.entry(name).or_default() += 1;
        }
    }
    let mut by_guid = Examples::default();
    for s in &d.switches {
        let at = |fault| TopologyError::Line {
            format: Format::Ibnetdiscover,
            line: s.defined_on.unwrap_or(0),
            fault,
        };
        match candidate(s).filter(|n| uses[n] == 1) {
            Some(name) => b.switch(name).map_err(at)?,
            None => {
                let id = format!("S-{:016x}", s.guid);
                by_guid.push(|| format!("{id} ({:?})", s.description));
                b.switch(&id).map_err(at)?
            }
        };
    }
    if by_guid.count() > 0 {
        b.note(format!(
            "ibnetdiscover: {} switch{} named by GUID (no description, or one another switch \
             has too): {}",
            by_guid.count(),
            if by_guid.count() == 1 {
                " is"
            } else {
                "es are"
            },
            by_guid.list()
        ));
    }
    // Levels: 0 for the switches HCAs are cabled to, then outwards.
    let mut neighbours: Vec<Vec<u32>> = vec![Vec::new(); d.switches.len()];
    for &(a, c) in &d.links {
        neighbours[a as usize].push(c);
        neighbours[c as usize].push(a);
    }
    let mut level: Vec<Option<u32>> = vec![None; d.switches.len()];
    let mut queue = VecDeque::new();
    for p in &d.ca_ports {
        if level[p.switch as usize].is_none() {
            level[p.switch as usize] = Some(0);
            queue.push_back(p.switch);
        }
    }
    while let Some(s) = queue.pop_front() {
        let next = level[s as usize].map(|l| l + 1);
        for &n in &neighbours[s as usize] {
            if level[n as usize].is_none() {
                level[n as usize] = next;
                queue.push_back(n);
            }
        }
    }
    for (s, ns) in neighbours.iter().enumerate() {
        let Some(l) = level[s] else { continue };
        for &n in ns {
            if level[n as usize] == Some(l + 1) {
                let line = d.switches[s].defined_on.unwrap_or(0);
                b.parent(s as u32, n).map_err(|fault| TopologyError::Line {
                    format: Format::Ibnetdiscover,
                    line,
                    fault,
                })?;
            }
        }
    }
    // Hosts and ports: `"<host> <device>"` descriptions name both.
    for p in &d.ca_ports {
        let at = |fault| TopologyError::Line {
            format: Format::Ibnetdiscover,
            line: p.line,
            fault,
        };
        let words: Vec<&str> = p.description.split_whitespace().take(3).collect();
        let (host, device) = match words[..] {
            [host, device] if check_name("", host).is_ok() && check_name("", device).is_ok() => {
                (host.to_owned(), Some(device))
            }
            _ if check_name("", p.description).is_ok() => (p.description.to_owned(), None),
            _ => (format!("H-{:016x}", p.ca), None),
        };
        let h = b.host(&host, None).map_err(at)?.index();
        b.port(h, p.switch, p.port_guid, device.map(|dev| (dev, p.port)))
            .map_err(at)?;
    }
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::rails::Rail;
    use crate::cluster::topology::MatchedBy;

    /// tests/fixtures/topology: ibsim fabrics, discovered by the real
    /// ibnetdiscover (README.md there says how).
    const FAT_TREE: &str =
        include_str!("../../../../../tests/fixtures/topology/fat-tree.ibnetdiscover");
    const RAIL_OPTIMISED: &str =
        include_str!("../../../../../tests/fixtures/topology/rail-optimised.ibnetdiscover");

    fn rail(device: &str, port_guid: Option<u64>) -> Rail {
        Rail {
            device: device.into(),
            port: 1,
            active: true,
            link_layer: Some("InfiniBand".into()),
            rate_gbps: Some(400.0),
            numa_node: None,
            address: None,
            port_guid,
        }
    }

    fn leaf(t: &Topology, host: &str, rail: &Rail) -> Option<(String, MatchedBy)> {
        t.locate(host, Some(rail))
            .map(|p| (t.switches()[p.leaf as usize].name.clone(), p.by))
    }

    fn parents(t: &Topology, switch: &str) -> Vec<String> {
        let s = &t.switches()[t.switch_index(switch).unwrap() as usize];
        s.parents
            .iter()
            .map(|&p| t.switches()[p as usize].name.clone())
            .collect()
    }

    #[test]
    fn lines_read_as_ibnetdiscover_writes_them() {
        assert_eq!(
            node_line(
                "Switch\t36 \"S-0002c902004b0f68\"\t\t# \"MF0;leaf-3:MQM8700/U1\" enhanced port 0 lid 3 lmc 0"
            ),
            Ok(NodeLine {
                kind: NodeKind::Switch,
                guid: 0x0002_c902_004b_0f68,
                description: "MF0;leaf-3:MQM8700/U1"
            })
        );
        assert_eq!(
            node_line("Ca\t2 \"H-0002c9030002ba6e\"\t\t# \"node1 \"quoted\" HCA-1\" (scp)")
                .unwrap()
                .description,
            "node1 \"quoted\" HCA-1"
        );
        // A switch's port to an HCA, and to a switch; `-g`'s [ext N].
        assert_eq!(
            port_line(
                "[1]\t\"H-0002c9030002ba6e\"[1](2c9030002ba6f) \t\t# \"node1 mlx5_0\" lid 4 4xQDR"
            ),
            Ok(PortLine {
                port: 1,
                port_guid: None,
                remote: b'H',
                remote_guid: 0x0002_c903_0002_ba6e,
                remote_port: 1,
                remote_port_guid: Some(0x2_c903_0002_ba6f),
                description: "node1 mlx5_0"
            })
        );
        let up =
            port_line("[13][ext 3]\t\"S-0002c9020040fc28\"[7][ext 19]\t\t# \"spine\" lid 5 4xQDR")
                .unwrap();
        assert_eq!((up.port, up.remote, up.remote_port), (13, b'S', 7));
        // An HCA's port, to a switch and back to back to another HCA.
        let ca = port_line(
            "[2](2c9030002ba70) \t\"S-0002c902004b0f68\"[2]\t\t# lid 6 lmc 0 \"leaf\" lid 3 4xQDR",
        )
        .unwrap();
        assert_eq!(
            (ca.port, ca.port_guid, ca.description),
            (2, Some(0x2_c903_0002_ba70), "leaf")
        );
        let b2b = port_line(
            "[1](11) \t\"H-0000000000000020\"[1] (21) \t\t# lid 1 lmc 0 \"b mlx5_0\" lid 2 4xEDR",
        )
        .unwrap();
        assert_eq!((b2b.remote, b2b.remote_port_guid), (b'H', Some(0x21)));
    }

    #[test]
    fn the_fat_tree_places_each_host_under_its_leaf_and_leaves_under_both_spines() {
        let t = Topology::parse(FAT_TREE).unwrap();
        assert_eq!(t.format(), Format::Ibnetdiscover);
        assert_eq!(t.switches().len(), 6);
        assert_eq!(t.hosts().len(), 16);
        for h in 0..16u64 {
            let guid = 0x0c42_a103_0010_0001 + h * 0x100;
            let host = format!("node{h:02}");
            let want = format!("leaf{}", h / 4);
            assert_eq!(
                leaf(&t, &host, &rail("mlx5_0", Some(guid))),
                Some((want.clone(), MatchedBy::PortGuid))
            );
            // No GUID sent: the node description finds it.
            assert_eq!(
                leaf(&t, &host.to_uppercase(), &rail("mlx5_0", None)),
                Some((want, MatchedBy::NodeDescription))
            );
        }
        for l in 0..4 {
            assert_eq!(parents(&t, &format!("leaf{l}")), ["spine0", "spine1"]);
        }
        assert!(parents(&t, "spine0").is_empty());
        assert_eq!(leaf(&t, "node00", &rail("mlx5_1", None)), None);
        assert_eq!(t.locate("node00", None), None, "ports, not hosts");
        assert!(t.notes().is_empty(), "{:?}", t.notes());
    }

    #[test]
    fn the_rail_optimised_fabric_puts_rail_k_under_leaf_k_of_its_unit() {
        let t = Topology::parse(RAIL_OPTIMISED).unwrap();
        assert_eq!(t.switches().len(), 10);
        assert_eq!(t.hosts().len(), 8);
        for h in 0..8u64 {
            for k in 0..4u64 {
                let guid = 0x0c42_a103_0020_0001 + h * 0x100 + k * 0x10;
                let want = format!("su{}-leaf{k}", h / 4);
                let r = rail(&format!("mlx5_{k}"), Some(guid));
                assert_eq!(
                    leaf(&t, &format!("gpu{h:02}"), &r),
                    Some((want, MatchedBy::PortGuid))
                );
            }
        }
        assert_eq!(parents(&t, "su1-leaf2"), ["spine0", "spine1"]);
    }

    #[test]
    fn the_outputs_of_several_subnets_read_as_one() {
        let both = format!("{FAT_TREE}\n{RAIL_OPTIMISED}");
        let t = Topology::parse(&both).unwrap();
        assert_eq!((t.switches().len(), t.hosts().len()), (16, 24));
        // Both have a spine0: the shared description names them by GUID.
        assert_eq!(t.switch_index("spine0"), None);
        assert_eq!(t.notes().len(), 1);
        let r = rail("mlx5_3", Some(0x0c42_a103_0020_0731));
        assert_eq!(
            leaf(&t, "gpu07", &r),
            Some(("su1-leaf3".into(), MatchedBy::PortGuid))
        );
    }

    #[test]
    fn switches_without_a_unique_description_are_named_by_guid() {
        let text = "\
switchguid=0x10(10)
Switch\t8 \"S-0000000000000010\"\t\t# \"Quantum Mellanox Technologies\" base port 0 lid 1 lmc 0
[1]\t\"H-0000000000000100\"[1](101) \t\t# \"a mlx5_0\" lid 3 4xNDR

switchguid=0x20(20)
Switch\t8 \"S-0000000000000020\"\t\t# \"Quantum Mellanox Technologies\" base port 0 lid 2 lmc 0
[1]\t\"H-0000000000000200\"[1](201) \t\t# \"b mlx5_0\" lid 4 4xNDR
[2]\t\"S-0000000000000030\"[1]\t\t# \"\" lid 5 4xNDR
";
        let t = Topology::parse(text).unwrap();
        let names: Vec<&str> = t.switches().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "S-0000000000000010",
                "S-0000000000000020",
                "S-0000000000000030"
            ]
        );
        assert_eq!(
            t.notes(),
            [
                "ibnetdiscover: 3 switches are named by GUID (no description, or one another \
              switch has too): S-0000000000000010 (\"Quantum Mellanox Technologies\"), \
              S-0000000000000020 (\"Quantum Mellanox Technologies\"), S-0000000000000030 (\"\")"
            ]
        );
        // The switch only named by a link is the parent of leaf 0x20.
        assert_eq!(parents(&t, "S-0000000000000020"), ["S-0000000000000030"]);
    }

    #[test]
    fn bad_lines_are_refused_naming_the_line_and_the_fault() {
        let head =
            "vendid=0x2c9\nswitchguid=0x10(10)\nSwitch\t8 \"S-0000000000000010\"\t\t# \"leaf\"\n";
        let cases: [(String, &str); 9] = [
            (
                format!("{head}[1]\t\"H-0000000000000100\"[1](10x1)\t\t# \"a mlx5_0\"\n"),
                "ibnetdiscover output line 4: a port line is [PORT] \"X-GUID\"[PORT] # ...: \
                 (10x1) is not a port GUID",
            ),
            (
                format!("{head}[1]\t\"H-0000000000000100\"\t\t# \"a mlx5_0\"\n"),
                "ibnetdiscover output line 4: a port line is [PORT] \"X-GUID\"[PORT] # ...: no \
                 [PORT] (0-255) after the remote node",
            ),
            (
                format!("{head}[300]\t\"H-0000000000000100\"[1]\n"),
                "ibnetdiscover output line 4: a port line is [PORT] \"X-GUID\"[PORT] # ...: no \
                 [PORT] (0-255)",
            ),
            (
                format!("{head}\n[1]\t\"H-0000000000000100\"[1](101)\n"),
                "ibnetdiscover output line 5: a port line outside a Switch or Ca block",
            ),
            (
                format!("{head}\nSwitch\t8 \"S-0000000000000010\"\t\t# \"again\"\n"),
                "ibnetdiscover output line 5: node S-0000000000000010 is already defined on \
                 line 3",
            ),
            (
                "vendid=0x2c9\nCa\t2 \"S-0000000000000001\"\t\t# \"a mlx5_0\"\n".into(),
                "ibnetdiscover output line 2: a node line is TYPE PORTS \"X-GUID\" # \
                 \"DESCRIPTION\": a Switch's id is \"S-…\", a Ca's \"H-…\", an Rt's \"R-…\"",
            ),
            (
                "vendid=0x2c9\nSwitch\tmany \"S-0000000000000001\"\n".into(),
                "ibnetdiscover output line 2: a node line is TYPE PORTS \"X-GUID\" # \
                 \"DESCRIPTION\": \"many\" is not a port count (1-255)",
            ),
            (
                format!("{head}Hca\t1 \"H-0000000000000100\"\n"),
                "ibnetdiscover output line 4: not an ibnetdiscover line: \"Hca\\t1 \
                 \\\"H-0000000000000100\\\"\"",
            ),
            (
                format!(
                    "{head}[1]\t\"H-0000000000000100\"[1](101)\t\t# \"a mlx5_0\"\n\n\
                     switchguid=0x20(20)\nSwitch\t8 \"S-0000000000000020\"\t\t# \"other\"\n\
                     [3]\t\"H-0000000000000100\"[1](101)\t\t# \"a mlx5_0\"\n"
                ),
                "ibnetdiscover output line 8: H-0000000000000100 port 1 is cabled to \
                 S-0000000000000020 here and to S-0000000000000010 on line 4",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(
                Topology::parse(&text).unwrap_err().to_string(),
                want,
                "{text:?}"
            );
        }
    }

    #[test]
    fn chassis_grouped_output_reads_too() {
        // `ibnetdiscover -g`: chassis lines first, `[ext N]` port maps.
        let text = "\
#
# Topology file: generated on Mon Jan  1 00:00:00 2024
#
# Initiated from node 0000000000000100 port 0000000000000101

Chassis 1 (guid 0x10)

# Spine Nodes
vendid=0x2c9
devid=0xd2f2
switchguid=0x20(20)\t# MIS5600 Spine 1 Chip 1
Switch\t36 \"S-0000000000000020\"\t\t# \"spine\" base port 0 lid 1 lmc 0
[1][ext 1]\t\"S-0000000000000010\"[5][ext 17]\t\t# \"leaf\" lid 2 4xHDR

Non-Chassis Nodes

vendid=0x2c9
switchguid=0x10(10)
Switch\t36 \"S-0000000000000010\"\t\t# \"leaf\" base port 0 lid 2 lmc 0
[1][ext 1]\t\"H-0000000000000100\"[1](101) \t\t# \"a mlx5_0\" lid 3 4xHDR
[5][ext 17]\t\"S-0000000000000020\"[1][ext 1]\t\t# \"spine\" lid 1 4xHDR
";
        let t = Topology::parse(text).unwrap();
        assert_eq!(t.format(), Format::Ibnetdiscover);
        assert_eq!(
            leaf(&t, "a", &rail("mlx5_0", Some(0x101))),
            Some(("leaf".into(), MatchedBy::PortGuid))
        );
        assert_eq!(parents(&t, "leaf"), ["spine"]);
    }

    #[test]
    fn managed_switch_descriptions_give_the_switch_name() {
        assert_eq!(
            managed_switch_name("MF0;su1-leaf3:MQM9700/U1"),
            Some("su1-leaf3")
        );
        assert_eq!(managed_switch_name("MF0;:MQM9700/U1"), None);
        assert_eq!(managed_switch_name("Quantum Mellanox Technologies"), None);
    }
}
