//! The fabric's switches and where each rail port sits under them, read
//! from what the site already has, and the run's map built from it
//! (issue 37). A [`Topology`] holds switches (a name and the switches one
//! level up) and places ports under leaf switches two ways:
//!
//! - by host: every rail of a host under the host's switch. Sources:
//!   Slurm's `topology.conf` ([`slurm_conf`], the topology/tree plugin)
//!   and the `SLURM_TOPOLOGY_ADDR` each rank reads under that plugin
//!   ([`slurm_address`]);
//! - by HCA port: each port under the switch it is cabled to, found by
//!   port GUID or by node description (`"<host> <device>"`). Source: a
//!   saved `ibnetdiscover` output ([`ibnetdiscover`]). This is what gets a
//!   rail-optimised fabric right, where rail k of every node of a unit is
//!   cabled to leaf k of that unit.
//!
//! [`Topology::parse`] recognises the file's format by its first line
//! that is neither blank nor a comment. [`fabric_map`] turns a topology
//! and the ranks' identities into the plain data the rest of cluster mode
//! consumes: each rank's leaf per rail, and the groups of nodes that sit
//! under the same leaves.
//!
//! Nothing a file says can panic the parser or make it hold more than the
//! caps below; a wrong line is a [`TopologyError`] naming its number.

use std::collections::HashMap;
use std::fmt;

use serde::Serialize;
use thiserror::Error;

use super::hostlist::HostlistError;
use super::rails::Rail;
use super::rendezvous::MAX_HOST_LEN;

pub mod fabric_map;
pub mod ibnetdiscover;
pub mod slurm_address;
pub mod slurm_conf;

pub use fabric_map::{FabricMap, Group, UNKNOWN_GROUP};
pub use slurm_address::{AddressError, SlurmAddress};

/// Largest topology text read, in bytes: the `ibnetdiscover` outputs of
/// 16,384 nodes with 8 rails are about 50 MB (each HCA port is written
/// twice, from its HCA and from its switch; 46 MB fabricated, in
/// docs/cluster.md).
pub const MAX_TEXT_BYTES: usize = 256 << 20;
/// Most switches a topology may name (Slurm numbers switches in 16 bits;
/// a three-tier fabric of 16,384 nodes with 8 rails has about 10,000).
pub const MAX_SWITCHES: usize = 65_536;
/// Most hosts a topology may place: also the most host names its
/// hostlists may expand to in all (the cap of [`super::hostlist`]).
pub const MAX_HOSTS: usize = super::hostlist::MAX_HOSTS;
/// Most HCA ports an `ibnetdiscover` output may place: 65,536 hosts with
/// 8 rails (one subnet holds at most 49,151 LIDs; the outputs of several
/// subnets, one a rail say, read as one file).
pub const MAX_PORTS: usize = 524_288;
/// Most switch-to-switch links (`Switches=` entries, cabled switch pairs,
/// address levels) a topology may hold.
pub const MAX_LINKS: usize = 1 << 20;
/// Longest switch, host or node description name kept, in bytes (the
/// bound on a rank's host name: [`MAX_HOST_LEN`]).
pub const MAX_NAME_LEN: usize = MAX_HOST_LEN;
/// How many names a note shows before "and N more".
pub const NOTE_EXAMPLES: usize = 8;

/// Where a topology came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// Slurm's `topology.conf`, topology/tree plugin.
    SlurmTopologyConf,
    /// A saved `ibnetdiscover` output (infiniband-diags).
    Ibnetdiscover,
    /// The ranks' `SLURM_TOPOLOGY_ADDR` and `_PATTERN`.
    SlurmAddresses,
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::SlurmTopologyConf => "topology.conf",
            Format::Ibnetdiscover => "ibnetdiscover output",
            Format::SlurmAddresses => "SLURM_TOPOLOGY_ADDR",
        })
    }
}

impl Format {
    /// The source in a sentence: `the topology.conf`.
    pub fn phrase(self) -> &'static str {
        match self {
            Format::SlurmTopologyConf => "the topology.conf",
            Format::Ibnetdiscover => "the ibnetdiscover output",
            Format::SlurmAddresses => "the ranks' SLURM_TOPOLOGY_ADDR",
        }
    }
}

/// One switch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Switch {
    /// Its name: `SwitchName=` in Slurm's files; in `ibnetdiscover`
    /// output its node description (`MF0;leaf3:MQM9700/U1`, as NVIDIA's
    /// managed switches describe themselves, gives `leaf3`), or
    /// `S-<GUID>` when the description is empty or not unique.
    pub name: String,
    /// The switches one level up, by index, ascending: every switch whose
    /// `Switches=` lists it (Slurm's second example puts each leaf under
    /// four), every switch one level higher it is cabled to
    /// (`ibnetdiscover`), the level above it in an address. Empty at the
    /// top.
    pub parents: Vec<u32>,
}

/// How a rail was placed under its leaf.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MatchedBy {
    /// The rail's port GUID is an HCA port of the `ibnetdiscover` output.
    PortGuid,
    /// `"<host> <device>"` and the port number matched an HCA port's node
    /// description (rdma-ndd's default, `%h %d`).
    NodeDescription,
    /// The host is under a leaf switch (Slurm): every rail is.
    Host,
}

/// Where a rail sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Its leaf switch, an index into [`Topology::switches`].
    pub leaf: u32,
    /// How it was found.
    pub by: MatchedBy,
    /// The topology's host it matched (index into [`Topology::hosts`]).
    pub host: u32,
}

/// A host a topology names, and its leaf when every rail of it sits
/// under one (Slurm's sources; `None` for `ibnetdiscover`, which places
/// ports).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyHost {
    /// As written (for `ibnetdiscover`, the host part of its HCAs'
    /// `"<host> <device>"` descriptions, else the whole description).
    pub name: String,
    /// Its leaf, by host.
    pub leaf: Option<u32>,
}

/// One HCA port an `ibnetdiscover` output places.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HcaPort {
    host: u32,
    leaf: u32,
}

/// The fabric's switches and where the ports sit under them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    format: Format,
    switches: Vec<Switch>,
    hosts: Vec<TopologyHost>,
    host_by_name: HashMap<String, u32>,
    ports: Vec<HcaPort>,
    port_by_guid: HashMap<u64, u32>,
    port_by_description: HashMap<String, u32>,
    notes: Vec<String>,
}

/// Why a topology was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TopologyError {
    /// More than [`MAX_TEXT_BYTES`].
    #[error("the topology is {len} bytes, at most {MAX_TEXT_BYTES}")]
    TooLarge {
        /// Its length.
        len: usize,
    },
    /// Only blank lines and comments.
    #[error(
        "the topology is empty: no SwitchName= line (Slurm's topology.conf) and no node (ibnetdiscover)"
    )]
    Empty,
    /// The first meaningful line is neither format's.
    #[error(
        "topology line {line}: neither Slurm's topology.conf (SwitchName=...) nor ibnetdiscover output (vendid=..., Switch, Ca): {text:?}"
    )]
    Unrecognised {
        /// Its number, from 1.
        line: usize,
        /// Its start.
        text: String,
    },
    /// A line of a recognised file is wrong.
    #[error("{format} line {line}: {fault}")]
    Line {
        /// The file's format.
        format: Format,
        /// The line's number, from 1.
        line: usize,
        /// What is wrong with it.
        fault: LineFault,
    },
    /// A rank's `SLURM_TOPOLOGY_ADDR` could not be taken in.
    #[error("SLURM_TOPOLOGY_ADDR of {host}: {fault}")]
    Address {
        /// The rank's host.
        host: String,
        /// What is wrong (a cap reached, a bad name).
        fault: LineFault,
    },
}

/// What is wrong with a line.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LineFault {
    /// Text where `KEY=VALUE` was expected.
    #[error("expected KEY=VALUE at {0:?}")]
    NotKeyValue(String),
    /// A quoted value without its closing quote.
    #[error("a quoted value has no closing quote")]
    UnclosedQuote,
    /// A key topology/tree does not take.
    #[error("unknown key {0:?} (topology/tree takes SwitchName, Switches, Nodes, LinkSpeed)")]
    UnknownKey(String),
    /// A line that does not start with `SwitchName=`.
    #[error("a switch line starts with SwitchName=, not {0}=")]
    NotSwitchName(String),
    /// A line of Slurm's other topology plugins.
    #[error(
        "{0}= is topology/block's or topology/ring's: rdmaperf reads topology/tree's SwitchName= lines"
    )]
    OtherPlugin(String),
    /// Slurm's `Include`.
    #[error("Include is not followed: give the file the switches are in")]
    Include,
    /// A key with nothing after its `=`.
    #[error("{0}= is empty")]
    EmptyValue(String),
    /// A second `SwitchName=` on a line (Slurm refuses it too).
    #[error("one switch a line: SwitchName= is given twice")]
    TwoSwitches,
    /// `LinkSpeed=` that is not a 32-bit number.
    #[error("LinkSpeed={0:?} is not a number")]
    BadLinkSpeed(String),
    /// Both `Nodes=` and `Switches=` (Slurm refuses it too).
    #[error("switch {0} has both Nodes= and Switches=")]
    NodesAndSwitches(String),
    /// A switch name given twice.
    #[error("switch {name} is already defined on line {first_line}")]
    DuplicateSwitch {
        /// The name.
        name: String,
        /// Where it was first defined.
        first_line: usize,
    },
    /// `Switches=` names a switch no line defines.
    #[error("switch {switch} lists {child}, which no SwitchName= line defines")]
    UnknownChild {
        /// The parent.
        switch: String,
        /// The child.
        child: String,
    },
    /// `Switches=` names the switch itself.
    #[error("switch {0} lists itself in Switches=")]
    OwnChild(String),
    /// The `Switches=` lines make a cycle.
    #[error("switch {0} is below itself: the Switches= lines are not a tree")]
    Cycle(String),
    /// A hostlist that does not parse.
    #[error("{0}")]
    Hostlist(HostlistError),
    /// A name that is empty, longer than [`MAX_NAME_LEN`] or holds a
    /// control character.
    #[error("{what} of {len} bytes (1 to {MAX_NAME_LEN}, no control characters)")]
    BadName {
        /// Which name.
        what: &'static str,
        /// Its length.
        len: usize,
    },
    /// More of something than its cap.
    #[error("more than {cap} {what}")]
    TooMany {
        /// What there are too many of.
        what: &'static str,
        /// The cap.
        cap: usize,
    },
    /// An `ibnetdiscover` line of no known kind.
    #[error("not an ibnetdiscover line: {0:?}")]
    NotIbnetdiscover(String),
    /// A node line that is not `TYPE PORTS "X-GUID" # "DESCRIPTION"`.
    #[error("a node line is TYPE PORTS \"X-GUID\" # \"DESCRIPTION\": {0}")]
    BadNode(String),
    /// A port line that is not `[PORT](GUID) "X-GUID"[PORT] # ...`.
    #[error("a port line is [PORT] \"X-GUID\"[PORT] # ...: {0}")]
    BadPort(String),
    /// A port line outside a node's block.
    #[error("a port line outside a Switch or Ca block")]
    PortOutsideNode,
    /// A node defined twice.
    #[error("node {guid} is already defined on line {first_line}")]
    DuplicateNode {
        /// Its `S-…`/`H-…` id.
        guid: String,
        /// Where it was first defined.
        first_line: usize,
    },
    /// An HCA port said to be cabled to two switches.
    #[error("{port} is cabled to {this} here and to {other} on line {other_line}")]
    CabledTwice {
        /// The port (`H-<GUID>` port N).
        port: String,
        /// The switch this line says.
        this: String,
        /// The switch another line said.
        other: String,
        /// That line.
        other_line: usize,
    },
}

/// At most [`NOTE_EXAMPLES`] names for a note, and how many more there
/// were.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Examples {
    shown: Vec<String>,
    more: usize,
}

impl Examples {
    /// Counts one more; keeps its name while fewer than
    /// [`NOTE_EXAMPLES`] are shown (the name is made only then).
    pub(crate) fn push(&mut self, name: impl FnOnce() -> String) {
        if self.shown.len() < NOTE_EXAMPLES {
            self.shown.push(name());
        } else {
            self.more += 1;
        }
    }

    /// How many were counted.
    pub(crate) fn count(&self) -> usize {
        self.shown.len() + self.more
    }

    /// `a, b, c and 12 more`.
    pub(crate) fn list(&self) -> String {
        let shown = self.shown.join(", ");
        match self.more {
            0 => shown,
            n => format!("{shown} and {n} more"),
        }
    }
}

/// The key a host is looked up by: lower case, up to its first dot when
/// that label holds a letter (`Node07.cluster` → `node07`; `10.0.0.7`
/// stays whole). Slurm's node names are usually short names while a
/// rank's host name may be its FQDN.
pub(crate) fn host_key(name: &str) -> String {
    let short = match name.split_once('.') {
        Some((first, _)) if first.bytes().any(|b| b.is_ascii_alphabetic()) => first,
        _ => name,
    };
    short.to_ascii_lowercase()
}

/// The key an HCA port is looked up by description: host key, device,
/// port.
fn description_key(host: &str, device: &str, port: u8) -> String {
    format!("{} {} {port}", host_key(host), device.to_ascii_lowercase())
}

/// `Ok` for a name we keep: 1 to [`MAX_NAME_LEN`] bytes, no control
/// characters (names are printed in reports and on terminals).
pub(crate) fn check_name(what: &'static str, name: &str) -> Result<(), LineFault> {
    if name.is_empty() || name.len() > MAX_NAME_LEN || name.chars().any(char::is_control) {
        return Err(LineFault::BadName {
            what,
            len: name.len(),
        });
    }
    Ok(())
}

impl Topology {
    /// Reads a topology file: Slurm's `topology.conf` or a saved
    /// `ibnetdiscover` output, told apart by the first line that is
    /// neither blank nor a comment (`#`): a `SwitchName=` (or another
    /// `topology.conf` key) starts a `topology.conf`; `vendid=`,
    /// `devid=`, `sysimgguid=`, `switchguid=`, `caguid=`, `rtguid=` or a
    /// `Switch`, `Ca`, `Rt` node line starts `ibnetdiscover` output.
    ///
    /// # Errors
    /// Text above [`MAX_TEXT_BYTES`], an empty file, a first line of
    /// neither format, or the first bad line of the format found.
    pub fn parse(text: &str) -> Result<Topology, TopologyError> {
        if text.len() > MAX_TEXT_BYTES {
            return Err(TopologyError::TooLarge { len: text.len() });
        }
        let Some((n, first)) = text
            .lines()
            .enumerate()
            .map(|(n, l)| (n + 1, l.trim()))
            .find(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        else {
            return Err(TopologyError::Empty);
        };
        if slurm_conf::starts(first) {
            slurm_conf::parse(text)
        } else if ibnetdiscover::starts(first) {
            ibnetdiscover::parse(text)
        } else {
            Err(TopologyError::Unrecognised {
                line: n,
                text: first.chars().take(80).collect(),
            })
        }
    }

    /// Where it came from.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Its switches; indices are what [`Placement::leaf`] and
    /// [`Switch::parents`] hold.
    pub fn switches(&self) -> &[Switch] {
        &self.switches
    }

    /// The hosts it names.
    pub fn hosts(&self) -> &[TopologyHost] {
        &self.hosts
    }

    /// What reading it noticed that is not an error (a node under two
    /// leaves, a key given twice), each line bounded.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// The switch named `name`.
    pub fn switch_index(&self, name: &str) -> Option<u32> {
        self.switches
            .iter()
            .position(|s| s.name == name)
            .map(|i| i as u32)
    }

    /// Where rail `rail` of `host` sits: by the rail's port GUID, else
    /// by the node description `"<host> <device>"` and its port, else by
    /// the host (every rail of a Slurm node under its switch). `rail` is
    /// `None` when the rank sent no rail details (`--simulate`).
    pub fn locate(&self, host: &str, rail: Option<&Rail>) -> Option<Placement> {
        let port = |i: u32, by| {
            let p = &self.ports[i as usize];
            Placement {
                leaf: p.leaf,
                by,
                host: p.host,
            }
        };
        if let Some(rail) = rail {
            if let Some(&i) = rail.port_guid.and_then(|g| self.port_by_guid.get(&g)) {
                return Some(port(i, MatchedBy::PortGuid));
            }
            let key = description_key(host, &rail.device, rail.port);
            if let Some(&i) = self.port_by_description.get(&key) {
                return Some(port(i, MatchedBy::NodeDescription));
            }
        }
        let &h = self.host_by_name.get(&host_key(host))?;
        let leaf = self.hosts[h as usize].leaf?;
        Some(Placement {
            leaf,
            by: MatchedBy::Host,
            host: h,
        })
    }
}

/// What [`Builder::host`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HostAdded {
    /// A new host.
    New(u32),
    /// A host already there (under the same leaf, or now under this one).
    Known(u32),
    /// A host already under another leaf, which it keeps.
    UnderOtherLeaf {
        /// The host.
        host: u32,
        /// The leaf it keeps.
        first: u32,
    },
}

impl HostAdded {
    /// The host's index.
    pub(crate) fn index(self) -> u32 {
        match self {
            HostAdded::New(h) | HostAdded::Known(h) | HostAdded::UnderOtherLeaf { host: h, .. } => {
                h
            }
        }
    }
}

/// What the three readers fill: switches by name, hosts by key, ports by
/// GUID and description, each under its cap.
#[derive(Debug)]
pub(crate) struct Builder {
    format: Format,
    switches: Vec<Switch>,
    switch_by_name: HashMap<String, u32>,
    links: usize,
    hosts: Vec<TopologyHost>,
    host_by_name: HashMap<String, u32>,
    ports: Vec<HcaPort>,
    port_by_guid: HashMap<u64, u32>,
    port_by_description: HashMap<String, u32>,
    notes: Vec<String>,
}

impl Builder {
    pub(crate) fn new(format: Format) -> Self {
        Self {
            format,
            switches: Vec::new(),
            switch_by_name: HashMap::new(),
            links: 0,
            hosts: Vec::new(),
            host_by_name: HashMap::new(),
            ports: Vec::new(),
            port_by_guid: HashMap::new(),
            port_by_description: HashMap::new(),
            notes: Vec::new(),
        }
    }

    /// The switch named `name`, added if new.
    pub(crate) fn switch(&mut self, name: &str) -> Result<u32, LineFault> {
        if let Some(&i) = self.switch_by_name.get(name) {
            return Ok(i);
        }
        check_name("a switch name", name)?;
        if self.switches.len() >= MAX_SWITCHES {
            return Err(LineFault::TooMany {
                what: "switches",
                cap: MAX_SWITCHES,
            });
        }
        let i = self.switches.len() as u32;
        self.switches.push(Switch {
            name: name.to_owned(),
            parents: Vec::new(),
        });
        self.switch_by_name.insert(name.to_owned(), i);
        Ok(i)
    }

    /// The switch named `name`, if added.
    pub(crate) fn switch_named(&self, name: &str) -> Option<u32> {
        self.switch_by_name.get(name).copied()
    }

    /// `parent` is one level above `child` (a repeat is ignored).
    pub(crate) fn parent(&mut self, child: u32, parent: u32) -> Result<(), LineFault> {
        let parents = &mut self.switches[child as usize].parents;
        if parents.contains(&parent) {
            return Ok(());
        }
        if self.links >= MAX_LINKS {
            return Err(LineFault::TooMany {
                what: "switch-to-switch links",
                cap: MAX_LINKS,
            });
        }
        self.links += 1;
        parents.push(parent);
        Ok(())
    }

    /// The host named `name`, added under `leaf` if new; a host already
    /// under another leaf keeps its first (the caller notes it).
    pub(crate) fn host(&mut self, name: &str, leaf: Option<u32>) -> Result<HostAdded, LineFault> {
        let key = host_key(name);
        if let Some(&h) = self.host_by_name.get(&key) {
            let known = &mut self.hosts[h as usize].leaf;
            return Ok(match (*known, leaf) {
                (Some(first), Some(other)) if first != other => {
                    HostAdded::UnderOtherLeaf { host: h, first }
                }
                (None, Some(_)) => {
                    *known = leaf;
                    HostAdded::Known(h)
                }
                _ => HostAdded::Known(h),
            });
        }
        check_name("a host name", name)?;
        if self.hosts.len() >= MAX_HOSTS {
            return Err(LineFault::TooMany {
                what: "hosts",
                cap: MAX_HOSTS,
            });
        }
        let h = self.hosts.len() as u32;
        self.hosts.push(TopologyHost {
            name: name.to_owned(),
            leaf,
        });
        self.host_by_name.insert(key, h);
        Ok(HostAdded::New(h))
    }

    /// An HCA port of `host` under `leaf`, found by `guid` and, when the
    /// description is `"<host> <device>"`, by `device` and `port`.
    pub(crate) fn port(
        &mut self,
        host: u32,
        leaf: u32,
        guid: Option<u64>,
        device: Option<(&str, u8)>,
    ) -> Result<(), LineFault> {
        if self.ports.len() >= MAX_PORTS {
            return Err(LineFault::TooMany {
                what: "HCA ports",
                cap: MAX_PORTS,
            });
        }
        let i = self.ports.len() as u32;
        self.ports.push(HcaPort { host, leaf });
        if let Some(g) = guid {
            self.port_by_guid.entry(g).or_insert(i);
        }
        if let Some((device, port)) = device {
            let key = description_key(&self.hosts[host as usize].name, device, port);
            self.port_by_description.entry(key).or_insert(i);
        }
        Ok(())
    }

    /// A note for [`Topology::notes`].
    pub(crate) fn note(&mut self, text: String) {
        self.notes.push(text);
    }

    pub(crate) fn switches(&self) -> &[Switch] {
        &self.switches
    }

    pub(crate) fn finish(mut self) -> Topology {
        for s in &mut self.switches {
            s.parents.sort_unstable();
        }
        Topology {
            format: self.format,
            switches: self.switches,
            hosts: self.hosts,
            host_by_name: self.host_by_name,
            ports: self.ports,
            port_by_guid: self.port_by_guid,
            port_by_description: self.port_by_description,
            notes: self.notes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_is_told_by_the_first_meaningful_line() {
        let slurm = "# comment\n\n  switchname=s0 nodes=a[0-1]\n";
        assert_eq!(
            Topology::parse(slurm).unwrap().format(),
            Format::SlurmTopologyConf
        );
        let ib = "#\n# Topology file: generated\n#\n\nvendid=0x2c9\ndevid=0x101d\ncaguid=0x1\n\
                  Ca\t1 \"H-0000000000000001\"\t\t# \"a mlx5_0\"\n\
                  [1](2) \t\"S-0000000000000010\"[1]\t\t# lid 1 lmc 0 \"leaf0\" lid 2 4xNDR\n";
        assert_eq!(Topology::parse(ib).unwrap().format(), Format::Ibnetdiscover);
    }

    #[test]
    fn a_file_of_neither_format_or_of_nothing_is_refused_naming_the_line() {
        assert_eq!(
            Topology::parse("\n# only comments\n   \n").unwrap_err(),
            TopologyError::Empty
        );
        assert_eq!(Topology::parse("").unwrap_err(), TopologyError::Empty);
        let e = Topology::parse("# a hosts file?\n10.0.0.1 node01\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "topology line 2: neither Slurm's topology.conf (SwitchName=...) nor ibnetdiscover \
             output (vendid=..., Switch, Ca): \"10.0.0.1 node01\""
        );
        let long = format!("{}\n", "x".repeat(500));
        let TopologyError::Unrecognised { text, .. } = Topology::parse(&long).unwrap_err() else {
            panic!()
        };
        assert_eq!(text.len(), 80);
        // A binary file: no panic, a line named.
        let junk: String = (0u8..=255).map(char::from).collect();
        assert!(Topology::parse(&junk).is_err());
    }

    #[test]
    fn host_keys_ignore_case_and_domain_but_not_an_address() {
        assert_eq!(host_key("Node07.cluster.example"), "node07");
        assert_eq!(host_key("node07"), "node07");
        assert_eq!(host_key("10.0.0.7"), "10.0.0.7");
        assert_eq!(host_key("dgx-a100-001.ib"), "dgx-a100-001");
    }

    #[test]
    fn examples_show_a_few_and_count_the_rest() {
        let mut e = Examples::default();
        for i in 0..20 {
            e.push(|| format!("n{i}"));
        }
        assert_eq!(e.count(), 20);
        assert_eq!(e.list(), "n0, n1, n2, n3, n4, n5, n6, n7 and 12 more");
        let mut one = Examples::default();
        one.push(|| "a".into());
        assert_eq!(one.list(), "a");
    }
}
