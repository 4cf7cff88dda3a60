//! Slurm's `topology.conf` for the topology/tree plugin: one switch a
//! line, `SwitchName=s0 Nodes=dev[0-5]` for a leaf and
//! `SwitchName=s3 Switches=s[0-2]` above it, `LinkSpeed=` optional.
//! Every rail of a node sits under the node's leaf.
//!
//! The rules are Slurm's (topology.conf(5); `src/common/parse_config.c`
//! and `src/plugins/topology/tree/switch_record.c` of SchedMD/slurm):
//! keys are case-insensitive; `#` starts a comment unless escaped (`\#`);
//! a line ending in an odd number of `\` continues on the next; a value
//! is a word or `"quoted"`; names are hostlists (`s[0-2,4]`,
//! [`super::super::hostlist`]). As Slurm does, a line without
//! `SwitchName=` first, an unknown key, `Nodes=` with `Switches=`, a
//! switch defined twice, a child no line defines and a cycle are errors;
//! a key given twice keeps its last value and a node under two leaves its
//! first (Slurm warns of both: here they are notes). `LinkSpeed=` is
//! checked and not used (Slurm does not use it either).

use std::borrow::Cow;
use std::collections::HashMap;

use super::super::hostlist::{self, HostlistError};
use super::{
    Builder, Examples, Format, HostAdded, LineFault, MAX_HOSTS, MAX_LINKS, Topology, TopologyError,
};

/// The keys that may start a `topology.conf` line, lower case: the tree
/// plugin's and the other plugins' (refused by name, not as an unknown
/// format).
const FIRST_KEYS: [&str; 4] = ["switchname", "blockname", "blocksizes", "ringname"];

/// Whether `line`, the file's first meaningful line, is a
/// `topology.conf` line.
pub(super) fn starts(line: &str) -> bool {
    let key = line.split(['=', ' ', '\t']).next().unwrap_or("");
    FIRST_KEYS.iter().any(|k| key.eq_ignore_ascii_case(k)) || is_include(line)
}

fn is_include(line: &str) -> bool {
    line.get(..7)
        .is_some_and(|w| w.eq_ignore_ascii_case("include"))
        && line[7..].starts_with([' ', '\t'])
}

/// One `SwitchName=` line, as written.
#[derive(Debug)]
struct SwitchLine {
    line: usize,
    name: String,
    nodes: Option<String>,
    switches: Option<String>,
}

/// Reads a `topology.conf` (see the module's rules).
pub(super) fn parse(text: &str) -> Result<Topology, TopologyError> {
    let at = |line: usize| {
        move |fault: LineFault| TopologyError::Line {
            format: Format::SlurmTopologyConf,
            line,
            fault,
        }
    };
    let mut repeated = Examples::default();
    let mut lines: Vec<SwitchLine> = Vec::new();
    for (line, content) in logical_lines(text) {
        if let Some(s) = switch_line(line, &content, &mut repeated).map_err(at(line))? {
            lines.push(s);
        }
    }
    if lines.is_empty() {
        return Err(TopologyError::Empty);
    }
    let mut b = Builder::new(Format::SlurmTopologyConf);
    if repeated.count() > 0 {
        b.note(format!(
            "topology.conf: a key given twice on a line keeps its last value, as in Slurm: {}",
            repeated.list()
        ));
    }
    // Every switch first: `Switches=` may name a switch defined below.
    let mut defined: HashMap<&str, usize> = HashMap::new();
    for s in &lines {
        if let Some(&first_line) = defined.get(s.name.as_str()) {
            return Err(at(s.line)(LineFault::DuplicateSwitch {
                name: s.name.clone(),
                first_line,
            }));
        }
        defined.insert(&s.name, s.line);
        b.switch(&s.name).map_err(at(s.line))?;
    }
    let (mut names_left, mut links_left) = (MAX_HOSTS, MAX_LINKS);
    let mut twice = Examples::default();
    for s in &lines {
        let this = b.switch_named(&s.name).expect("added above");
        if let Some(nodes) = &s.nodes {
            let hosts = expand(nodes, names_left, "host names in Nodes= lists", MAX_HOSTS)
                .map_err(at(s.line))?;
            names_left -= hosts.len();
            for host in &hosts {
                if let HostAdded::UnderOtherLeaf { first, .. } =
                    b.host(host, Some(this)).map_err(at(s.line))?
                {
                    let first = &b.switches()[first as usize].name;
                    twice.push(|| format!("{host} ({first}, {})", s.name));
                }
            }
        }
        if let Some(switches) = &s.switches {
            let children = expand(switches, links_left, "names in Switches= lists", MAX_LINKS)
                .map_err(at(s.line))?;
            links_left -= children.len();
            for child in &children {
                if *child == s.name {
                    return Err(at(s.line)(LineFault::OwnChild(s.name.clone())));
                }
                let c = b
                    .switch_named(child)
                    .ok_or_else(|| LineFault::UnknownChild {
                        switch: s.name.clone(),
                        child: child.clone(),
                    })
                    .map_err(at(s.line))?;
                b.parent(c, this).map_err(at(s.line))?;
            }
        }
    }
    if let Some(i) = first_in_cycle(b.switches().iter().map(|s| s.parents.as_slice())) {
        let s = &lines[i];
        return Err(at(s.line)(LineFault::Cycle(s.name.clone())));
    }
    if twice.count() > 0 {
        b.note(format!(
            "topology.conf: {} host{} under two leaf switches, the first kept (Slurm warns of \
             it too): {}",
            twice.count(),
            if twice.count() == 1 { " is" } else { "s are" },
            twice.list()
        ));
    }
    Ok(b.finish())
}

/// A hostlist expanded under what is left of its cap.
fn expand(
    list: &str,
    left: usize,
    what: &'static str,
    cap: usize,
) -> Result<Vec<String>, LineFault> {
    hostlist::expand(list, left).map_err(|e| match e {
        HostlistError::TooMany { .. } => LineFault::TooMany { what, cap },
        e => LineFault::Hostlist(e),
    })
}

/// The file's lines with comments cut and continuations joined, each
/// with the number of its first physical line; blank ones left out.
fn logical_lines(text: &str) -> impl Iterator<Item = (usize, Cow<'_, str>)> {
    let mut physical = text.lines().enumerate();
    std::iter::from_fn(move || {
        loop {
            let (n, raw) = physical.next()?;
            let (mut content, mut continues) = continuation(strip_comment(raw));
            let mut joined: Cow<'_, str> = Cow::Borrowed(content);
            while continues {
                let Some((_, next)) = physical.next() else {
                    break;
                };
                (content, continues) = continuation(strip_comment(next));
                joined.to_mut().push_str(content);
            }
            if !joined.trim().is_empty() {
                return Some((n + 1, joined));
            }
        }
    })
}

/// `line` up to its first `#` not escaped by an odd run of `\`.
fn strip_comment(line: &str) -> &str {
    let mut backslashes = 0usize;
    for (i, b) in line.bytes().enumerate() {
        match b {
            b'#' if backslashes.is_multiple_of(2) => return &line[..i],
            b'\\' => backslashes += 1,
            _ => backslashes = 0,
        }
    }
    line
}

/// `line` without its continuation backslash, and whether it had one (an
/// odd run of `\` before trailing white space).
fn continuation(line: &str) -> (&str, bool) {
    let t = line.trim_end();
    let run = t.len() - t.trim_end_matches('\\').len();
    if run % 2 == 1 {
        (&t[..t.len() - 1], true)
    } else {
        (line, false)
    }
}

/// One logical line's switch, or why not.
fn switch_line(
    line: usize,
    content: &str,
    repeated: &mut Examples,
) -> Result<Option<SwitchLine>, LineFault> {
    if is_include(content.trim_start()) {
        return Err(LineFault::Include);
    }
    let pairs = key_values(content)?;
    let Some(&(first, name)) = pairs.first() else {
        return Ok(None);
    };
    if !first.eq_ignore_ascii_case("switchname") {
        return Err(
            if FIRST_KEYS.iter().any(|k| first.eq_ignore_ascii_case(k)) {
                LineFault::OtherPlugin(first.to_owned())
            } else {
                LineFault::NotSwitchName(first.to_owned())
            },
        );
    }
    if name.is_empty() {
        return Err(LineFault::EmptyValue("SwitchName".into()));
    }
    let mut s = SwitchLine {
        line,
        name: name.to_owned(),
        nodes: None,
        switches: None,
    };
    let mut seen = [false; 3];
    for &(key, value) in &pairs[1..] {
        let (k, canonical) = if key.eq_ignore_ascii_case("nodes") {
            (0, "Nodes")
        } else if key.eq_ignore_ascii_case("switches") {
            (1, "Switches")
        } else if key.eq_ignore_ascii_case("linkspeed") {
            (2, "LinkSpeed")
        } else if key.eq_ignore_ascii_case("switchname") {
            return Err(LineFault::TwoSwitches);
        } else {
            return Err(LineFault::UnknownKey(key.to_owned()));
        };
        if value.is_empty() {
            return Err(LineFault::EmptyValue(canonical.to_owned()));
        }
        if std::mem::replace(&mut seen[k], true) {
            repeated.push(|| format!("line {line} {canonical}="));
        }
        match k {
            0 => s.nodes = Some(value.to_owned()),
            1 => s.switches = Some(value.to_owned()),
            _ => {
                value
                    .parse::<u32>()
                    .map_err(|_| LineFault::BadLinkSpeed(value.to_owned()))?;
            }
        }
    }
    if s.nodes.is_some() && s.switches.is_some() {
        return Err(LineFault::NodesAndSwitches(s.name));
    }
    Ok(Some(s))
}

/// `KEY=VALUE` pairs as Slurm's parser reads them: a key of letters,
/// digits, `_` and `.`, white space allowed around `=`, a value that is
/// a word or `"quoted"` (possibly empty). A word holding `=` is the
/// next pair, so the key before it has no value (`SwitchName= Nodes=a`:
/// Slurm would name the switch `Nodes=a`).
fn key_values(content: &str) -> Result<Vec<(&str, &str)>, LineFault> {
    let mut pairs = Vec::new();
    let mut rest = content.trim_start();
    while !rest.is_empty() {
        let key_len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .unwrap_or(rest.len());
        let after_key = rest[key_len..].trim_start();
        if key_len == 0 || !after_key.starts_with('=') {
            return Err(LineFault::NotKeyValue(
                rest.chars().take(40).collect::<String>(),
            ));
        }
        let key = &rest[..key_len];
        let after_eq = after_key[1..].trim_start_matches([' ', '\t']);
        let (value, tail) = if let Some(quoted) = after_eq.strip_prefix('"') {
            let end = quoted.find('"').ok_or(LineFault::UnclosedQuote)?;
            (&quoted[..end], &quoted[end + 1..])
        } else {
            let end = after_eq.find(char::is_whitespace).unwrap_or(after_eq.len());
            if after_eq[..end].contains('=') {
                return Err(LineFault::EmptyValue(key.to_owned()));
            }
            (&after_eq[..end], &after_eq[end..])
        };
        pairs.push((key, value));
        rest = tail.trim_start();
    }
    Ok(pairs)
}

/// A switch that is its own ancestor (following `parents`), if any.
fn first_in_cycle<'a>(parents: impl Iterator<Item = &'a [u32]>) -> Option<usize> {
    let parents: Vec<&[u32]> = parents.collect();
    // 0: not seen, 1: on the current path, 2: done.
    let mut state = vec![0u8; parents.len()];
    for start in 0..parents.len() {
        if state[start] != 0 {
            continue;
        }
        // Iterative depth-first walk: (switch, next parent to follow).
        let mut stack = vec![(start, 0usize)];
        state[start] = 1;
        while let Some(&mut (s, ref mut next)) = stack.last_mut() {
            if let Some(&p) = parents[s].get(*next) {
                *next += 1;
                match state[p as usize] {
                    0 => {
                        state[p as usize] = 1;
                        stack.push((p as usize, 0));
                    }
                    1 => return Some(p as usize),
                    _ => {}
                }
            } else {
                state[s] = 2;
                stack.pop();
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::cluster::topology::MatchedBy;

    fn parse_ok(text: &str) -> Topology {
        Topology::parse(text).unwrap_or_else(|e| panic!("{e}"))
    }

    fn err(text: &str) -> String {
        Topology::parse(text).unwrap_err().to_string()
    }

    fn leaf_of(t: &Topology, host: &str) -> Option<String> {
        t.locate(host, None)
            .map(|p| t.switches()[p.leaf as usize].name.clone())
    }

    fn parents(t: &Topology, switch: &str) -> Vec<String> {
        let s = &t.switches()[t.switch_index(switch).unwrap() as usize];
        s.parents
            .iter()
            .map(|&p| t.switches()[p as usize].name.clone())
            .collect()
    }

    /// topology.conf(5), EXAMPLE (doc/man/man5/topology.conf.5 of
    /// SchedMD/slurm, the topology/tree part).
    const MAN_PAGE: &str = "\
##################################################################
# Slurm's network topology configuration file for use with the
# topology/tree plugin
##################################################################
SwitchName=s0 Nodes=dev[0-5]
SwitchName=s1 Nodes=dev[6-11]
SwitchName=s2 Nodes=dev[12-17]
SwitchName=s3 Switches=s[0-2]
";

    /// The Topology Guide's first example (doc/html/topology.shtml):
    /// three levels, two children each.
    const GUIDE_THREE_LEVELS: &str = "\
# topology.conf
# Switch Configuration
SwitchName=s0 Nodes=tux[0-1]
SwitchName=s1 Nodes=tux[2-3]
SwitchName=s2 Nodes=tux[4-5]
SwitchName=s3 Nodes=tux[6-7]
SwitchName=s4 Switches=s[0-1]
SwitchName=s5 Switches=s[2-3]
SwitchName=s6 Switches=s[4-5]
";

    /// The Topology Guide's second example: every leaf under four
    /// switches, with `LinkSpeed=`.
    const GUIDE_TWO_LEVELS: &str = "\
# topology.conf
# Switch Configuration
SwitchName=s0 Nodes=tux[0-3]   LinkSpeed=900
SwitchName=s1 Nodes=tux[4-7]   LinkSpeed=900
SwitchName=s2 Nodes=tux[8-11]  LinkSpeed=900
SwitchName=s3 Nodes=tux[12-15] LinkSpeed=1800
SwitchName=s4 Switches=s[0-3]  LinkSpeed=1800
SwitchName=s5 Switches=s[0-3]  LinkSpeed=1800
SwitchName=s6 Switches=s[0-3]  LinkSpeed=1800
SwitchName=s7 Switches=s[0-3]  LinkSpeed=1800
";

    #[test]
    fn the_man_pages_example_places_every_node_under_its_leaf() {
        let t = parse_ok(MAN_PAGE);
        assert_eq!(t.switches().len(), 4);
        assert_eq!(t.hosts().len(), 18);
        assert_eq!(leaf_of(&t, "dev0").as_deref(), Some("s0"));
        assert_eq!(leaf_of(&t, "dev11").as_deref(), Some("s1"));
        assert_eq!(leaf_of(&t, "dev17").as_deref(), Some("s2"));
        assert_eq!(leaf_of(&t, "dev18"), None);
        for leaf in ["s0", "s1", "s2"] {
            assert_eq!(parents(&t, leaf), ["s3"]);
        }
        assert!(parents(&t, "s3").is_empty());
        let p = t.locate("DEV3.cluster.example", None).unwrap();
        assert_eq!((p.by, p.leaf), (MatchedBy::Host, 0));
        assert!(t.notes().is_empty());
    }

    #[test]
    fn the_guides_examples_nest_and_share_parents() {
        let t = parse_ok(GUIDE_THREE_LEVELS);
        assert_eq!(parents(&t, "s1"), ["s4"]);
        assert_eq!(parents(&t, "s4"), ["s6"]);
        assert_eq!(parents(&t, "s5"), ["s6"]);
        assert_eq!(leaf_of(&t, "tux5").as_deref(), Some("s2"));
        let t = parse_ok(GUIDE_TWO_LEVELS);
        assert_eq!(t.switches().len(), 8);
        for leaf in ["s0", "s1", "s2", "s3"] {
            assert_eq!(parents(&t, leaf), ["s4", "s5", "s6", "s7"]);
        }
        assert_eq!(leaf_of(&t, "tux13").as_deref(), Some("s3"));
    }

    #[test]
    fn keys_ignore_case_and_comments_quotes_and_continuations_follow_slurm() {
        let t = parse_ok(
            "switchname=leaf0 NODES=\"gpu[00-03]\"  # the first rack\n\
             SWITCHNAME = leaf1 nodes = gpu[04-07] \\\n\
             \t linkspeed=100\n\
             \n\
             SwitchName=top Switches=leaf[0-1]\r\n\
             SwitchName=empty\n",
        );
        assert_eq!(leaf_of(&t, "gpu02").as_deref(), Some("leaf0"));
        assert_eq!(leaf_of(&t, "gpu07").as_deref(), Some("leaf1"));
        assert_eq!(parents(&t, "leaf1"), ["top"]);
        assert_eq!(t.switches().len(), 4, "an empty leaf is a switch");
        // An escaped `#` is not a comment: it stays in the name.
        let t = parse_ok("SwitchName=a\\#b Nodes=n1\n");
        assert_eq!(t.switches()[0].name, "a\\#b");
    }

    #[test]
    fn a_repeated_key_and_a_node_under_two_leaves_are_notes_not_errors() {
        let t = parse_ok(
            "SwitchName=s0 Nodes=n[0-3] Nodes=n[0-1]\n\
             SwitchName=s1 Nodes=n[1-2]\n",
        );
        assert_eq!(leaf_of(&t, "n3"), None, "the last Nodes= kept");
        assert_eq!(leaf_of(&t, "n1").as_deref(), Some("s0"));
        assert_eq!(leaf_of(&t, "n2").as_deref(), Some("s1"));
        assert_eq!(
            t.notes(),
            [
                "topology.conf: a key given twice on a line keeps its last value, as in Slurm: \
                 line 1 Nodes=",
                "topology.conf: 1 host is under two leaf switches, the first kept (Slurm warns \
                 of it too): n1 (s0, s1)"
            ]
        );
    }

    #[test]
    fn bad_lines_are_refused_naming_the_line_and_the_fault() {
        let cases: [(&str, &str); 18] = [
            (
                "SwitchName=s0 Nodes=a[0-3]\nSwitchName=s1 Nodes=b[0-3] Ports=4\n",
                "topology.conf line 2: unknown key \"Ports\" (topology/tree takes SwitchName, \
                 Switches, Nodes, LinkSpeed)",
            ),
            (
                "SwitchName=s0 Nodes=a[0-3]\n\nNodes=b[0-3] SwitchName=s1\n",
                "topology.conf line 3: a switch line starts with SwitchName=, not Nodes=",
            ),
            (
                "SwitchName=s0 Nodes=a[0-3]\nSwitchName=s1 Nodes=a4 Switches=s0\n",
                "topology.conf line 2: switch s1 has both Nodes= and Switches=",
            ),
            (
                "SwitchName=s0 Nodes=a[0-3]\n# x\nSwitchName=s0 Nodes=b[0-3]\n",
                "topology.conf line 3: switch s0 is already defined on line 1",
            ),
            (
                "SwitchName=s0 Nodes=a[0-3]\nSwitchName=top Switches=s[0-1]\n",
                "topology.conf line 2: switch top lists s1, which no SwitchName= line defines",
            ),
            (
                "SwitchName=s0 Switches=s0\n",
                "topology.conf line 1: switch s0 lists itself in Switches=",
            ),
            (
                "SwitchName=a Switches=b\nSwitchName=b Switches=c\nSwitchName=c Switches=a\n",
                "topology.conf line 1: switch a is below itself: the Switches= lines are not a \
                 tree",
            ),
            (
                "SwitchName=s0 Nodes=a[0-3\n",
                "topology.conf line 1: unbalanced bracket in \"a[0-3\"",
            ),
            (
                "SwitchName=s0 Nodes=a[3-0]\n",
                "topology.conf line 1: descending range \"3-0\" in \"a[3-0]\"",
            ),
            (
                "SwitchName=s0 Nodes=a[0-3] LinkSpeed=fast\n",
                "topology.conf line 1: LinkSpeed=\"fast\" is not a number",
            ),
            (
                "SwitchName= Nodes=a\n",
                "topology.conf line 1: SwitchName= is empty",
            ),
            (
                "SwitchName=\"\" Nodes=a\n",
                "topology.conf line 1: SwitchName= is empty",
            ),
            (
                "SwitchName=s0 Nodes=\"a[0-3]\n",
                "topology.conf line 1: a quoted value has no closing quote",
            ),
            (
                "SwitchName=s0 Nodes=a[0-3] oops\n",
                "topology.conf line 1: expected KEY=VALUE at \"oops\"",
            ),
            (
                "BlockName=block1 Nodes=node[1-32]\nBlockSizes=30,120\n",
                "topology.conf line 1: BlockName= is topology/block's or topology/ring's: \
                 rdmaperf reads topology/tree's SwitchName= lines",
            ),
            (
                "SwitchName=s0 Nodes=a SwitchName=s1\n",
                "topology.conf line 1: one switch a line: SwitchName= is given twice",
            ),
            (
                "Include /etc/slurm/topology.d/leaves.conf\n",
                "topology.conf line 1: Include is not followed: give the file the switches are in",
            ),
            (
                "SwitchName=s0 Nodes=a\x07b\n",
                "topology.conf line 1: a host name of 3 bytes (1 to 255, no control characters)",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(err(text), want, "{text:?}");
        }
        assert_eq!(
            Topology::parse("# SwitchName=s0\n").unwrap_err(),
            TopologyError::Empty
        );
    }

    #[test]
    fn hostlists_above_the_caps_fail_before_they_are_expanded() {
        assert_eq!(
            err("SwitchName=s0 Nodes=n[0-99999999999]\n"),
            format!("topology.conf line 1: more than {MAX_HOSTS} host names in Nodes= lists")
        );
        // The cap is on the file's total, not a line's.
        let half = |s: u32| format!("SwitchName=s{s} Nodes=n{s}x[0-{}]\n", MAX_HOSTS / 2 - 1);
        let text = format!("{}{}SwitchName=s2 Nodes=last\n", half(0), half(1));
        assert_eq!(
            err(&text),
            format!("topology.conf line 3: more than {MAX_HOSTS} host names in Nodes= lists")
        );
        let many = "SwitchName=top Switches=s[0-99999999]\n";
        assert_eq!(
            err(many),
            format!("topology.conf line 1: more than {MAX_LINKS} names in Switches= lists")
        );
        let switches: String = (0..=super::super::MAX_SWITCHES)
            .map(|i| format!("SwitchName=s{i}\n"))
            .collect();
        assert_eq!(
            err(&switches),
            format!(
                "topology.conf line {}: more than {} switches",
                super::super::MAX_SWITCHES + 1,
                super::super::MAX_SWITCHES
            )
        );
    }

    /// 16,384 hosts under 512 leaves of 32, 16 spines over all leaves
    /// (the shape of the simulation). Measured, not asserted:
    /// `cargo test --release -p rdmaperf-engine sixteen_thousand --
    /// --nocapture` prints the time (docs/cluster.md, "Topology").
    #[test]
    fn sixteen_thousand_hosts_parse() {
        let mut text = String::new();
        for l in 0..512 {
            text.push_str(&format!(
                "SwitchName=leaf{l:03} Nodes=node[{:05}-{:05}] LinkSpeed=400\n",
                l * 32,
                l * 32 + 31
            ));
        }
        for s in 0..16 {
            text.push_str(&format!("SwitchName=spine{s:02} Switches=leaf[000-511]\n"));
        }
        let started = Instant::now();
        let t = parse_ok(&text);
        let took = started.elapsed();
        eprintln!(
            "topology.conf of {} bytes, 16,384 hosts, 528 switches: parsed in {took:?}",
            text.len()
        );
        assert_eq!(t.hosts().len(), 16_384);
        assert_eq!(leaf_of(&t, "node16383").as_deref(), Some("leaf511"));
        assert_eq!(parents(&t, "leaf200").len(), 16);
    }
}
