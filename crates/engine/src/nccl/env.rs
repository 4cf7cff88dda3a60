//! The `NCCL_*` environment checks of `rdmaperf doctor nccl`: a block of
//! variables ([`EnvBlock`]) read as NCCL reads it and checked against this
//! [`Machine`] with NCCL's own semantics ([`check`]).

use std::net::IpAddr;

use serde::Serialize;

use crate::fabric::ports::{DeviceState, GidEntry, PortState};
use crate::nccl::{Finding, Severity};

// --- the machine -------------------------------------------------------------

/// A network interface (`getifaddrs`/`/sys/class/net`), as the socket
/// checks need it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NetInterface {
    /// Its name (`eth0`).
    pub name: String,
    /// Whether it is administratively and operationally up.
    pub up: bool,
    /// Its IPv4 and IPv6 addresses.
    pub addresses: Vec<IpAddr>,
}

/// What the machine has for GPUDirect RDMA.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GpuState {
    /// NVIDIA GPUs found (0 when none, or no driver).
    pub gpus: u32,
    /// The loaded peer-memory module (`nvidia_peermem`, `nv_peer_mem`),
    /// if any.
    pub peer_memory_module: Option<String>,
}

/// This machine, as the NCCL checks see it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Machine {
    /// Its RDMA devices with their ports and GID tables.
    pub devices: Vec<DeviceState>,
    /// Its network interfaces.
    pub interfaces: Vec<NetInterface>,
    /// Its GPUs.
    pub gpus: GpuState,
}

// --- the block of variables ------------------------------------------------------

/// A line of an env block that is not `NAME=value`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvParseError {
    /// Not an assignment at all.
    #[error("line {line}: {text:?} is not NAME=value")]
    NotAssignment {
        /// 1-based line number.
        line: usize,
        /// The line, trimmed.
        text: String,
    },
    /// A quoted value whose quote is not closed at the end of the line.
    #[error("line {line}: {text:?} has an unterminated quote")]
    UnterminatedQuote {
        /// 1-based line number.
        line: usize,
        /// The line, trimmed.
        text: String,
    },
    /// An unquoted value with a space in it (the shell would run the rest
    /// as a command).
    #[error("line {line}: {text:?} has an unquoted space in its value")]
    UnquotedSpace {
        /// 1-based line number.
        line: usize,
        /// The line, trimmed.
        text: String,
    },
}

/// One `NAME=value` of a block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EnvVar {
    /// The name.
    pub name: String,
    /// The value, quotes removed.
    pub value: String,
    /// Its 1-based line in the parsed text (`None` from the environment).
    pub line: Option<usize>,
}

/// A block of variables, in the order set (every assignment kept: a name
/// set twice is there twice, and the last wins, as in the shell).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EnvBlock {
    vars: Vec<EnvVar>,
}

impl EnvBlock {
    /// Parses `export NAME=value` / `NAME=value` lines (values optionally
    /// in `"..."` or `'...'`), `#` comments and blank lines.
    pub fn parse(text: &str) -> Result<EnvBlock, EnvParseError> {
        let mut vars = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let t = raw.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            let not = || EnvParseError::NotAssignment {
                line,
                text: t.to_owned(),
            };
            let body = match t.strip_prefix("export") {
                Some(rest) if rest.starts_with([' ', '\t']) => rest.trim_start(),
                _ => t,
            };
            let (name, value) = body.split_once('=').ok_or_else(not)?;
            if !is_env_name(name) {
                return Err(not());
            }
            let value = unquote(value).map_err(|e| match e {
                Unquote::Unterminated => EnvParseError::UnterminatedQuote {
                    line,
                    text: t.to_owned(),
                },
                Unquote::Space => EnvParseError::UnquotedSpace {
                    line,
                    text: t.to_owned(),
                },
            })?;
            vars.push(EnvVar {
                name: name.to_owned(),
                value,
                line: Some(line),
            });
        }
        Ok(EnvBlock { vars })
    }

    /// The `NCCL_*` variables among `vars` (e.g. `std::env::vars()`).
    pub fn from_vars<I, K, V>(vars: I) -> EnvBlock
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let vars = vars
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .filter(|(k, _)| k.starts_with("NCCL_"))
            .map(|(name, value)| EnvVar {
                name,
                value,
                line: None,
            })
            .collect();
        EnvBlock { vars }
    }

    /// Whether nothing at all is set.
    pub fn is_empty(&self) -> bool {
        self.vars.is_empty()
    }

    /// Every assignment, in order.
    pub fn assignments(&self) -> &[EnvVar] {
        &self.vars
    }

    /// The value `name` ends up with (the last assignment).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars
            .iter()
            .rev()
            .find(|v| v.name == name)
            .map(|v| v.value.as_str())
    }

    /// The effective variables (last assignment of each name), in the
    /// order of their first assignment.
    pub fn effective(&self) -> Vec<&EnvVar> {
        let mut out: Vec<&EnvVar> = Vec::new();
        for v in &self.vars {
            if let Some(slot) = out.iter_mut().find(|o| o.name == v.name) {
                *slot = v;
            } else {
                out.push(v);
            }
        }
        out
    }
}

fn is_env_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

enum Unquote {
    Unterminated,
    Space,
}

/// The value as the shell would see it, for the simple forms: `"..."`,
/// `'...'`, or a bare word (a trailing ` # comment` dropped).
fn unquote(v: &str) -> Result<String, Unquote> {
    let v = v.trim_end();
    for q in ['"', '\''] {
        if let Some(rest) = v.strip_prefix(q) {
            let end = rest.find(q).ok_or(Unquote::Unterminated)?;
            let after = rest[end + 1..].trim_start();
            if !(after.is_empty() || after.starts_with('#')) {
                return Err(Unquote::Space);
            }
            return Ok(rest[..end].to_owned());
        }
    }
    let bare = match v.find(" #").or_else(|| v.find("\t#")) {
        Some(i) => v[..i].trim_end(),
        None => v,
    };
    if bare.contains([' ', '\t']) {
        return Err(Unquote::Space);
    }
    Ok(bare.to_owned())
}

// --- NCCL's lists: `^` excludes, `=` exact, else prefixes ----------------------------

/// One entry of an `NCCL_IB_HCA` / `NCCL_SOCKET_IFNAME` list:
/// `name[:port]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ListEntry {
    /// The name or name prefix.
    pub name: String,
    /// The port (`atoi` of what follows `:`), `None` = any port.
    pub port: Option<i64>,
}

/// A list as NCCL parses it (`parseStringList` and the `^`/`=` flags of
/// its callers in `net_ib.cc` and `socket.cc`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NameList {
    /// A leading `^`: the list says what NOT to use.
    pub exclude: bool,
    /// A `=` (after any `^`): names match exactly, not by prefix.
    pub exact: bool,
    /// The entries, empty ones dropped (as NCCL does), at most `max`.
    pub entries: Vec<ListEntry>,
}

/// How many HCAs NCCL's list holds (`MAX_IB_DEVS`).
const MAX_IB_DEVS: usize = 32;
/// How many interfaces NCCL's socket list holds (`MAX_IFS`).
const MAX_IFS: usize = 16;

impl NameList {
    /// Parses `value` as NCCL does, keeping at most `max` entries.
    pub fn parse(value: &str, max: usize) -> Self {
        let mut rest = value;
        let exclude = rest.starts_with('^');
        if exclude {
            rest = &rest[1..];
        }
        let exact = rest.starts_with('=');
        if exact {
            rest = &rest[1..];
        }
        let mut entries = Vec::new();
        for part in rest.split(',') {
            if entries.len() >= max {
                break;
            }
            // parseStringList: `name[:port[:rail[:plane]]]`, the port read
            // with atoi, absent or empty = any; an entry with an empty name
            // is dropped.
            let mut fields = part.split(':');
            let name = fields.next().unwrap_or_default();
            let port = fields.next().filter(|p| !p.is_empty()).map(atoi);
            if !name.is_empty() {
                entries.push(ListEntry {
                    name: name.to_owned(),
                    port,
                });
            }
        }
        NameList {
            exclude,
            exact,
            entries,
        }
    }

    /// Whether `entry` names `name` (`matchIf`): exactly, or as a prefix
    /// (`strncmp(name, prefix, strlen(prefix))`).
    fn entry_names(&self, entry: &ListEntry, name: &str) -> bool {
        if self.exact {
            name == entry.name
        } else {
            name.starts_with(&entry.name)
        }
    }

    /// Whether NCCL uses `name` (port `port`, `None` for interfaces):
    /// `matchIfList(...) ^ exclude`, where an empty list matches all.
    pub fn selects(&self, name: &str, port: Option<u8>) -> bool {
        let listed = self.entries.is_empty()
            || self.entries.iter().any(|e| {
                self.entry_names(e, name)
                    && match (e.port, port) {
                        (Some(want), Some(have)) => want == i64::from(have),
                        _ => true,
                    }
            });
        listed ^ self.exclude
    }
}

/// C's `atoi`: leading blanks, a sign, digits; 0 when there are none.
fn atoi(s: &str) -> i64 {
    let s = s.trim_start();
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let n: i64 = digits
        .bytes()
        .take_while(u8::is_ascii_digit)
        .fold(0i64, |acc, d| {
            acc.saturating_mul(10).saturating_add(i64::from(d - b'0'))
        });
    if neg { -n } else { n }
}

/// A list value naming `names`, with `=` when a prefix would also select
/// another of `all` (`mlx5_1` selects `mlx5_10` too).
fn list_value<'a>(names: &[&'a str], all: impl Iterator<Item = &'a str> + Clone) -> String {
    let over = names
        .iter()
        .any(|n| all.clone().any(|o| o != *n && o.starts_with(n)));
    let joined = names.join(",");
    if over { format!("={joined}") } else { joined }
}

// --- numbers as NCCL reads them ------------------------------------------------------

/// An integer value as NCCL's `ncclLoadParam` reads it (`strtoll(str,
/// NULL, 0)`): decimal, `0x` hex or `0` octal, trailing text ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NcclInt {
    value: i64,
    /// Read in a base other than 10 (`010` is 8).
    radix: u32,
    /// Text after the number, ignored by NCCL.
    trailing: bool,
}

fn nccl_int(s: &str) -> Option<NcclInt> {
    let t = s.trim_start();
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let (radix, digits) = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        if h.bytes().next().is_some_and(|b| b.is_ascii_hexdigit()) {
            (16, h)
        } else {
            (8, t)
        }
    } else if t.starts_with('0') && t.len() > 1 && t.as_bytes()[1].is_ascii_digit() {
        (8, &t[1..])
    } else {
        (10, t)
    };
    let len = digits
        .bytes()
        .take_while(|b| (*b as char).is_digit(radix))
        .count();
    if len == 0 {
        // `0x` or `0` followed by a non-digit: strtoll reads the 0.
        return t.starts_with('0').then_some(NcclInt {
            value: 0,
            radix: 10,
            trailing: t.len() > 1,
        });
    }
    let value = i64::from_str_radix(&digits[..len], radix).ok()?;
    Some(NcclInt {
        value: if neg { -value } else { value },
        radix,
        trailing: len < digits.len(),
    })
}

/// The integer of `var`=`value`, or `None` after an error finding in
/// `out` saying it is not one; a warning in `out` when NCCL reads it other
/// than it looks.
fn int_of(var: &str, value: &str, out: &mut Vec<Finding>) -> Option<i64> {
    match nccl_int(value) {
        None => {
            out.push(
                Finding::new(
                    Severity::Error,
                    var,
                    format!(
                        "{value:?} is not an integer: NCCL reads it with strtoll(.., 0), which \
                         yields 0 for a value without digits (newer typed parameters reject it \
                         and keep the default)"
                    ),
                )
                .with_value(value),
            );
            None
        }
        Some(n) => {
            if n.radix != 10 {
                let base = if n.radix == 16 {
                    "hexadecimal"
                } else {
                    "octal"
                };
                out.push(
                    Finding::new(
                        Severity::Warning,
                        var,
                        format!(
                            "NCCL reads numbers with strtoll(.., 0): {value:?} is {base}, \
                             i.e. {}",
                            n.value
                        ),
                    )
                    .with_value(value)
                    .with_fix(format!("{var}={}", n.value)),
                );
            }
            if n.trailing {
                out.push(
                    Finding::new(
                        Severity::Warning,
                        var,
                        format!(
                            "NCCL reads only the leading number of {value:?} ({}) and ignores \
                             the rest",
                            n.value
                        ),
                    )
                    .with_value(value)
                    .with_fix(format!("{var}={}", n.value)),
                );
            }
            Some(n.value)
        }
    }
}

/// Checks that `var`=`value` is an integer in `lo..=hi`.
fn range_check(var: &str, value: &str, lo: i64, hi: i64, out: &mut Vec<Finding>) -> Option<i64> {
    let n = int_of(var, value, out)?;
    if n < lo || n > hi {
        out.push(
            Finding::new(
                Severity::Error,
                var,
                format!("{n} is out of range: {var} takes {lo}-{hi}"),
            )
            .with_value(value),
        );
        return None;
    }
    Some(n)
}

// --- the machine's ports and GIDs ------------------------------------------------------

/// A port NCCL's IB transport would use: ACTIVE, link layer InfiniBand or
/// Ethernet (`net_ib.cc` skips the others).
fn usable(port: &PortState) -> bool {
    port.state_name() == Some("ACTIVE")
        && matches!(
            port.link_layer.as_deref(),
            None | Some("InfiniBand") | Some("Ethernet")
        )
}

fn port_label(dev: &DeviceState, port: &PortState) -> String {
    let layer = if port.is_ethernet() { "RoCE" } else { "IB" };
    format!("{}:{}/{layer}", dev.name, port.port)
}

/// A selected port: its device and itself.
type Sel<'a> = (&'a DeviceState, &'a PortState);

fn active_ports(machine: &Machine) -> Vec<Sel<'_>> {
    machine
        .devices
        .iter()
        .flat_map(|d| d.ports.iter().map(move |p| (d, p)))
        .filter(|(_, p)| usable(p))
        .collect()
}

// `PortState::gids` holds only valid (non-zero) entries, each with its
// IPv4 address when IPv4-mapped (`GidEntry::ipv4`).

fn gid_link_local(g: &GidEntry) -> bool {
    crate::fabric::gid::parse_sysfs_gid(&g.gid)
        .is_some_and(|b| crate::fabric::gid::is_link_local(&b))
}

fn gid_at(port: &PortState, index: i64) -> Option<&GidEntry> {
    port.gids.iter().find(|g| i64::from(g.index) == index)
}

/// The GID index NCCL's automatic choice (`NCCL_IB_GID_INDEX=-1`,
/// `ncclIbGetGidIndex`/`ncclUpdateGidIndex`) lands on for a RoCE port:
/// starting at 0, a candidate of the wanted address family replaces one of
/// the other family; among the wanted family, a valid candidate of the
/// wanted RoCE version replaces one of another version. (The
/// `NCCL_IB_ADDR_RANGE` subnet filter is not applied here.)
fn auto_gid_index(port: &PortState, want_v4: bool, want_version: i64) -> u32 {
    let fam_v4 = |g: Option<&GidEntry>| g.is_some_and(|g| g.ipv4.is_some());
    let version = |g: Option<&GidEntry>| g.and_then(GidEntry::roce_version).map(i64::from);
    let max = port.gids.iter().map(|g| g.index).max().unwrap_or(0);
    let mut cur = 0u32;
    for cand in 1..=max {
        let c = gid_at(port, i64::from(cand));
        let k = gid_at(port, i64::from(cur));
        if fam_v4(c) != fam_v4(k) && fam_v4(c) == want_v4 {
            cur = cand;
        } else if fam_v4(c) != want_v4 || c.is_none() {
            continue;
        } else if (version(k) != version(c) || k.is_none()) && version(c) == Some(want_version) {
            cur = cand;
        }
    }
    cur
}

fn describe_gid(g: &GidEntry) -> String {
    let kind = g.kind.as_deref().unwrap_or("type unknown");
    match g.ipv4.as_deref() {
        Some(v4) => format!("{kind}, IPv4 {v4}"),
        None if gid_link_local(g) => format!("{kind}, link-local {}", g.gid),
        None => format!("{kind}, {}", g.gid),
    }
}

// --- the checks ----------------------------------------------------------------------

/// Checks every `NCCL_*` variable of `env` against `machine`.
pub fn check(env: &EnvBlock, machine: &Machine) -> Vec<Finding> {
    let mut out = Vec::new();
    let nccl: Vec<&EnvVar> = env
        .effective()
        .into_iter()
        .filter(|v| v.name.starts_with("NCCL_"))
        .collect();
    if nccl.is_empty() {
        out.push(Finding::new(
            Severity::Note,
            "env",
            "no NCCL_* variables set: NCCL uses its defaults",
        ));
        return out;
    }
    let selected = selected_ports(env, machine);
    for var in nccl {
        duplicates(env, var, &mut out);
        let (name, value) = (var.name.as_str(), var.value.as_str());
        match name {
            "NCCL_IB_HCA" => check_ib_hca(value, machine, &selected, &mut out),
            "NCCL_SOCKET_IFNAME" => check_socket_ifname(value, machine, &selected, &mut out),
            "NCCL_IB_GID_INDEX" => check_gid_index(value, env, machine, &selected, &mut out),
            "NCCL_IB_TIMEOUT" => check_timeout(value, env, &mut out),
            "NCCL_IB_RETRY_CNT" => {
                range_check(name, value, 0, 7, &mut out);
            }
            "NCCL_IB_QPS_PER_CONNECTION" => {
                if let Some(n) = range_check(name, value, 1, 128, &mut out)
                    && n > 1
                {
                    out.push(
                        Finding::new(
                            Severity::Note,
                            name,
                            format!(
                                "each connection between two ranks is spread over {n} \
                                     QPs (more flows, so more ECMP/adaptive-routing entropy on \
                                     multi-level fabrics; more QPs per NIC); \
                                     NCCL_IB_SPLIT_DATA_ON_QPS says how messages are spread"
                            ),
                        )
                        .with_value(value),
                    );
                }
            }
            "NCCL_IB_SL" => {
                range_check(name, value, 0, 15, &mut out);
            }
            "NCCL_IB_TC" | "NCCL_IB_FIFO_TC" => check_tc(name, value, &mut out),
            "NCCL_NET_GDR_LEVEL" => check_gdr_level(name, value, machine, &mut out),
            "NCCL_DEBUG" => check_debug(value, &mut out),
            "NCCL_DEBUG_SUBSYS" => check_debug_subsys(value, &mut out),
            "NCCL_IB_DISABLE" => {
                if let Some(n) = int_of(name, value, &mut out)
                    && n != 0
                {
                    out.push(
                        Finding::new(
                            Severity::Warning,
                            name,
                            "disables NCCL's IB/RoCE transport: inter-node traffic goes \
                                 over TCP sockets",
                        )
                        .with_value(value)
                        .with_fix(format!("unset {name} (or {name}=0)")),
                    );
                }
            }
            _ => deprecated_or_unknown(var, &mut out),
        }
    }
    // Unset, NCCL_IB_HCA selects every ACTIVE port.
    if env.get("NCCL_IB_HCA").is_none()
        && selected.is_empty()
        && env.get("NCCL_IB_DISABLE").is_none()
    {
        let why = if machine.devices.is_empty() {
            "no RDMA device here"
        } else {
            "no RDMA port is ACTIVE here"
        };
        out.push(Finding::new(
            Severity::Warning,
            "NCCL_IB_HCA",
            format!(
                "(unset: all devices) {why}: NCCL logs \"NET/IB : No device found.\" and uses \
                 sockets"
            ),
        ));
    }
    out
}

/// A warning for each earlier assignment of `var`'s name.
fn duplicates(env: &EnvBlock, var: &EnvVar, out: &mut Vec<Finding>) {
    let all: Vec<&EnvVar> = env
        .assignments()
        .iter()
        .filter(|v| v.name == var.name)
        .collect();
    if all.len() < 2 {
        return;
    }
    let where_ = |v: &EnvVar| match v.line {
        Some(l) => format!("line {l}"),
        None => "the environment".to_owned(),
    };
    let earlier: Vec<String> = all[..all.len() - 1]
        .iter()
        .map(|v| format!("{:?} ({})", v.value, where_(v)))
        .collect();
    out.push(
        Finding::new(
            Severity::Warning,
            &var.name,
            format!(
                "set {} times: the last ({}) wins, as in the shell; overridden: {}",
                all.len(),
                where_(var),
                earlier.join(", ")
            ),
        )
        .with_value(&var.value)
        .with_fix(format!("keep one {}= line", var.name)),
    );
}

/// The ports NCCL_IB_HCA (or its default, all) selects: ACTIVE ones only.
fn selected_ports<'a>(env: &EnvBlock, machine: &'a Machine) -> Vec<Sel<'a>> {
    let list = env
        .get("NCCL_IB_HCA")
        .map(|v| NameList::parse(v, MAX_IB_DEVS));
    active_ports(machine)
        .into_iter()
        .filter(|(d, p)| {
            list.as_ref()
                .is_none_or(|l| l.selects(&d.name, Some(p.port)))
        })
        .collect()
}

const NO_DEVICE: &str = "NCCL logs \"NET/IB : No device found.\" and falls back to sockets";

/// `selected`: the ports `value` selects ([`selected_ports`]).
fn check_ib_hca(value: &str, machine: &Machine, selected: &[Sel<'_>], out: &mut Vec<Finding>) {
    const VAR: &str = "NCCL_IB_HCA";
    let list = NameList::parse(value, MAX_IB_DEVS);
    let names = || machine.devices.iter().map(|d| d.name.as_str());
    let all_names: Vec<&str> = names().collect();
    let devices = if all_names.is_empty() {
        "no RDMA device here".to_owned()
    } else {
        format!("devices: {}", all_names.join(", "))
    };
    let active = active_ports(machine);
    let mut active_devs: Vec<&str> = Vec::new();
    for (d, _) in &active {
        if !active_devs.contains(&d.name.as_str()) {
            active_devs.push(&d.name);
        }
    }
    let fix = if active_devs.is_empty() {
        None
    } else {
        Some(format!("{VAR}={}", list_value(&active_devs, names())))
    };

    // Each entry on its own.
    let mut any_entry_matched = false;
    // Entries naming no device; said only when another entry does (else
    // the error below says it once).
    let mut unmatched = Vec::new();
    for e in &list.entries {
        let matched: Vec<&DeviceState> = machine
            .devices
            .iter()
            .filter(|d| list.entry_names(e, &d.name))
            .collect();
        any_entry_matched |= !matched.is_empty();
        if matched.is_empty() {
            let how = if list.exact {
                "is no device"
            } else {
                "is a prefix of no device"
            };
            let what = if list.exclude {
                "excludes nothing"
            } else {
                "selects nothing"
            };
            unmatched.push(
                Finding::new(
                    if list.exclude {
                        Severity::Note
                    } else {
                        Severity::Warning
                    },
                    VAR,
                    format!("entry {:?} {how} here ({devices}): it {what}", e.name),
                )
                .with_value(value),
            );
            continue;
        }
        if let Some(p) = e.port
            && !matched
                .iter()
                .any(|d| d.ports.iter().any(|q| i64::from(q.port) == p))
        {
            out.push(
                Finding::new(
                    Severity::Warning,
                    VAR,
                    format!(
                        "entry {}:{p}: {} has no port {p}",
                        e.name,
                        matched
                            .iter()
                            .map(|d| d.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
                .with_value(value),
            );
        }
        // The prefix gotcha: `mlx5_1` is a whole device name and also
        // selects mlx5_10..mlx5_19.
        if !list.exact && matched.iter().any(|d| d.name == e.name) && matched.len() > 1 {
            let others: Vec<&str> = matched
                .iter()
                .filter(|d| d.name != e.name)
                .map(|d| d.name.as_str())
                .collect();
            let verb = if list.exclude { "excludes" } else { "selects" };
            let entries: Vec<String> = list
                .entries
                .iter()
                .map(|e| match e.port {
                    Some(p) => format!("{}:{p}", e.name),
                    None => e.name.clone(),
                })
                .collect();
            let caret = if list.exclude { "^" } else { "" };
            out.push(
                Finding::new(
                    Severity::Warning,
                    VAR,
                    format!(
                        "{:?} is matched as a prefix: it {verb} {} too; a leading '=' makes \
                         NCCL match names exactly",
                        e.name,
                        others.join(", ")
                    ),
                )
                .with_value(value)
                .with_fix(format!("{VAR}={caret}={}", entries.join(","))),
            );
        }
    }

    if any_entry_matched || list.exclude {
        out.extend(unmatched);
    }
    // Ports the list names that NCCL skips (not ACTIVE).
    let skipped: Vec<String> = machine
        .devices
        .iter()
        .flat_map(|d| d.ports.iter().map(move |p| (d, p)))
        .filter(|(d, p)| !usable(p) && list.selects(&d.name, Some(p.port)))
        .map(|(d, p)| {
            format!(
                "{}:{} is {}",
                d.name,
                p.port,
                p.state_name().unwrap_or("in an unknown state")
            )
        })
        .collect();
    if selected.is_empty() {
        let why = if !any_entry_matched && !list.exclude && !list.entries.is_empty() {
            format!("matches no RDMA device here ({devices})")
        } else if !skipped.is_empty() {
            format!("selects no ACTIVE port ({})", skipped.join(", "))
        } else if active.is_empty() {
            format!("selects no ACTIVE port: none is ACTIVE here ({devices})")
        } else {
            format!("selects none of the ACTIVE ports ({devices})")
        };
        let fix = fix.unwrap_or_else(|| {
            if machine.devices.is_empty() {
                format!("no RDMA device here: NCCL can only use sockets; unset {VAR}")
            } else {
                "bring an RDMA port to ACTIVE first (see `rdmaperf ports`)".to_owned()
            }
        });
        out.push(
            Finding::new(Severity::Error, VAR, format!("{why}; {NO_DEVICE}"))
                .with_value(value)
                .with_fix(fix),
        );
        return;
    }
    let labels: Vec<String> = selected.iter().map(|(d, p)| port_label(d, p)).collect();
    let mut msg = format!("NCCL uses {}", labels.join(", "));
    if !skipped.is_empty() {
        msg.push_str(&format!("; skips {} (not ACTIVE)", skipped.join(", ")));
    }
    out.push(Finding::new(Severity::Note, VAR, msg).with_value(value));
}

/// Whether an interface carries an address NCCL's `findInterfaces` would
/// take (IPv4 or IPv6, not IPv6 loopback).
fn has_usable_address(i: &NetInterface) -> bool {
    i.addresses
        .iter()
        .any(|a| !matches!(a, IpAddr::V6(v6) if v6.is_loopback()))
}

fn is_docker(name: &str) -> bool {
    name.starts_with("docker")
}

/// The interface to suggest for NCCL_SOCKET_IFNAME: up, with an address,
/// not `lo`; the netdev of a selected RDMA port first, then any RoCE GID's
/// netdev, then anything but docker.
fn suggest_interface<'a>(machine: &'a Machine, selected: &[Sel<'_>]) -> Option<&'a str> {
    let ok = |i: &&NetInterface| i.up && has_usable_address(i) && i.name != "lo";
    let netdevs_of = |ports: &mut dyn Iterator<Item = &PortState>| -> Vec<String> {
        let mut v = Vec::new();
        for p in ports {
            for n in p
                .netdev
                .iter()
                .chain(p.gids.iter().filter_map(|g| g.netdev.as_ref()))
            {
                if !v.contains(n) {
                    v.push(n.clone());
                }
            }
        }
        v
    };
    let from_sel = netdevs_of(&mut selected.iter().map(|(_, p)| *p));
    let from_all = netdevs_of(&mut machine.devices.iter().flat_map(|d| d.ports.iter()));
    for pref in [from_sel, from_all] {
        if let Some(i) = machine
            .interfaces
            .iter()
            .filter(ok)
            .find(|i| pref.contains(&i.name))
        {
            return Some(&i.name);
        }
    }
    machine
        .interfaces
        .iter()
        .filter(ok)
        .find(|i| !is_docker(&i.name))
        .map(|i| i.name.as_str())
}

fn check_socket_ifname(
    value: &str,
    machine: &Machine,
    selected: &[Sel<'_>],
    out: &mut Vec<Finding>,
) {
    const VAR: &str = "NCCL_SOCKET_IFNAME";
    // socket.cc: `if (env && strlen(env) > 1)` — shorter values are
    // ignored and NCCL picks an interface itself.
    if value.len() <= 1 {
        out.push(
            Finding::new(
                Severity::Warning,
                VAR,
                "NCCL ignores a value shorter than 2 characters and picks an interface itself \
                 (ib* first, then anything but docker* and lo)",
            )
            .with_value(value),
        );
        return;
    }
    let list = NameList::parse(value, MAX_IFS);
    let names = || machine.interfaces.iter().map(|i| i.name.as_str());
    let all: Vec<&str> = names().collect();
    let listing = if all.is_empty() {
        "no interfaces seen".to_owned()
    } else {
        format!("interfaces: {}", all.join(", "))
    };
    let suggestion = suggest_interface(machine, selected);
    let fix = suggestion.map(|s| format!("{VAR}={}", list_value(&[s], names())));
    let sel: Vec<&NetInterface> = machine
        .interfaces
        .iter()
        .filter(|i| list.selects(&i.name, None))
        .collect();
    if sel.is_empty() {
        out.push(
            Finding::new(
                Severity::Error,
                VAR,
                format!(
                    "selects no interface here ({listing}); NCCL's bootstrap fails: \
                     \"Bootstrap : no socket interface found\""
                ),
            )
            .with_value(value)
            .with_fix_opt(fix),
        );
        return;
    }
    if !list.exclude {
        for e in &list.entries {
            if !machine
                .interfaces
                .iter()
                .any(|i| list.entry_names(e, &i.name))
            {
                out.push(
                    Finding::new(
                        Severity::Note,
                        VAR,
                        format!("entry {:?} names no interface here ({listing})", e.name),
                    )
                    .with_value(value),
                );
            }
        }
    }
    let usable: Vec<&&NetInterface> = sel
        .iter()
        .filter(|i| i.up && has_usable_address(i))
        .collect();
    let names_of = |v: &[&NetInterface]| {
        v.iter()
            .map(|i| i.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if usable.is_empty() {
        let why = if sel.iter().all(|i| !i.up) {
            "is down"
        } else {
            "has no IP address (NCCL only considers interfaces with one, so bootstrap would \
             find none)"
        };
        out.push(
            Finding::new(
                Severity::Warning,
                VAR,
                format!("selects {}, which {why}", names_of(&sel)),
            )
            .with_value(value)
            .with_fix_opt(fix),
        );
        return;
    }
    for i in &sel {
        if i.name == "lo" {
            out.push(
                Finding::new(
                    Severity::Note,
                    VAR,
                    "selects lo: the loopback reaches only this host; a multi-node job needs a \
                     real interface",
                )
                .with_value(value),
            );
        } else if is_docker(&i.name) {
            out.push(
                Finding::new(
                    Severity::Note,
                    VAR,
                    format!(
                        "selects {}: a docker bridge is usually not reachable from other hosts",
                        i.name
                    ),
                )
                .with_value(value),
            );
        }
    }
    let described: Vec<String> = usable
        .iter()
        .map(|i| {
            let addrs: Vec<String> = i.addresses.iter().map(|a| a.to_string()).collect();
            format!("{} ({})", i.name, addrs.join(", "))
        })
        .collect();
    out.push(
        Finding::new(
            Severity::Note,
            VAR,
            format!("NCCL's sockets use {}", described.join(", ")),
        )
        .with_value(value),
    );
}

fn check_gid_index(
    value: &str,
    env: &EnvBlock,
    machine: &Machine,
    selected: &[Sel<'_>],
    out: &mut Vec<Finding>,
) {
    const VAR: &str = "NCCL_IB_GID_INDEX";
    let Some(index) = int_of(VAR, value, out) else {
        return;
    };
    // The ports it applies to: those NCCL_IB_HCA selects, or (when that
    // selects none: its own error) every ACTIVE port.
    let ports: Vec<Sel<'_>> = if selected.is_empty() {
        active_ports(machine)
    } else {
        selected.to_vec()
    };
    if ports.is_empty() {
        out.push(
            Finding::new(
                Severity::Note,
                VAR,
                "no ACTIVE RDMA port here to check it against",
            )
            .with_value(value),
        );
        return;
    }
    let want_v4 = env.get("NCCL_IB_ADDR_FAMILY") != Some("AF_INET6");
    let want_version = env
        .get("NCCL_IB_ROCE_VERSION_NUM")
        .and_then(nccl_int)
        .map_or(2, |n| n.value);
    let (eth, ib): (Vec<Sel<'_>>, Vec<Sel<'_>>) = ports.iter().partition(|(_, p)| p.is_ethernet());
    if !ib.is_empty() {
        let labels: Vec<String> = ib
            .iter()
            .map(|(d, p)| format!("{}:{}", d.name, p.port))
            .collect();
        out.push(
            Finding::new(
                Severity::Note,
                VAR,
                format!(
                    "{} is InfiniBand: NCCL does not use NCCL_IB_GID_INDEX there (it takes \
                     GID 0, or the routable-FLID one); on IB a GID only matters for GRH \
                     (routed) traffic and index 0 is normal",
                    labels.join(", ")
                ),
            )
            .with_value(value),
        );
    }
    if eth.is_empty() {
        return;
    }
    if index < 0 {
        let picks: Vec<String> = eth
            .iter()
            .map(|(d, p)| {
                let i = auto_gid_index(p, want_v4, want_version);
                let what = gid_at(p, i64::from(i))
                    .map(describe_gid)
                    .unwrap_or_default();
                format!("{}:{} → {i} ({what})", d.name, p.port)
            })
            .collect();
        out.push(
            Finding::new(
                Severity::Note,
                VAR,
                format!(
                    "automatic (NCCL ≥ 2.21; older NCCL uses 0): picks a {} RoCE v{want_version} \
                     GID: {}",
                    if want_v4 {
                        "IPv4 (NCCL_IB_ADDR_FAMILY=AF_INET)"
                    } else {
                        "IPv6"
                    },
                    picks.join("; ")
                ),
            )
            .with_value(value),
        );
        return;
    }
    let fix = gid_fix(&eth);
    let mut worst = Severity::Note;
    let mut parts = Vec::new();
    for (d, p) in &eth {
        let at = format!("{}:{}", d.name, p.port);
        match gid_at(p, index) {
            None => {
                worst = worst.max(Severity::Error);
                let have: Vec<String> = p
                    .gids
                    .iter()
                    .map(|g| format!("{} = {}", g.index, describe_gid(g)))
                    .collect();
                let have = if have.is_empty() {
                    "none".to_owned()
                } else {
                    have.join("; ")
                };
                parts.push(format!(
                    "{at} has no GID {index} (its GIDs: {have}); NCCL's queue pairs cannot \
                     be connected with it"
                ));
            }
            Some(g) if g.roce_version() == Some(1) => {
                worst = worst.max(Severity::Warning);
                parts.push(format!(
                    "GID {index} on {at} is {}: RoCE v1 (not IP-routable); NCCL wants RoCE v2",
                    describe_gid(g)
                ));
            }
            Some(g) if g.ipv4.is_none() && gid_link_local(g) => {
                worst = worst.max(Severity::Warning);
                parts.push(format!(
                    "GID {index} on {at} is {}: link-local, routable only on one L2 segment \
                     (NCCL's automatic choice takes an IPv4 one)",
                    describe_gid(g)
                ));
            }
            Some(g) => parts.push(format!("GID {index} on {at} is {}", describe_gid(g))),
        }
    }
    out.push(
        Finding::new(worst, VAR, parts.join("; "))
            .with_value(value)
            .with_fix_opt(fix.filter(|_| worst > Severity::Note)),
    );
}

/// The GID index to suggest for the Ethernet ports `eth`: one index that
/// is RoCE v2 with an IPv4 address on every port, else a RoCE v2
/// link-local one (said as such).
fn gid_fix(eth: &[Sel<'_>]) -> Option<String> {
    const VAR: &str = "NCCL_IB_GID_INDEX";
    let common = |pred: &dyn Fn(&GidEntry) -> bool| -> Option<u32> {
        let (_, first) = eth.first()?;
        let mut idx: Vec<u32> = first
            .gids
            .iter()
            .filter(|g| pred(g))
            .map(|g| g.index)
            .collect();
        idx.sort_unstable();
        idx.into_iter().find(|i| {
            eth.iter()
                .all(|(_, p)| gid_at(p, i64::from(*i)).is_some_and(pred))
        })
    };
    let v2 = |g: &GidEntry| g.roce_version() == Some(2);
    if let Some(i) = common(&|g| v2(g) && g.ipv4.is_some()) {
        return Some(format!(
            "{VAR}={i} (RoCE v2 with an IPv4 address; or unset it on NCCL ≥ 2.21, which picks \
             it itself)"
        ));
    }
    if let Some(i) = common(&|g| v2(g) && gid_link_local(g)) {
        return Some(format!(
            "{VAR}={i} (RoCE v2, but link-local: no RoCE v2 GID has an IPv4 address; give the \
             netdev an IPv4 address for a routable one)"
        ));
    }
    common(&v2).map(|i| format!("{VAR}={i} (RoCE v2)"))
}

/// The local ACK timeout of `t`: 4.096 µs × 2^t, in seconds.
pub fn ib_timeout_seconds(t: u32) -> f64 {
    4.096e-6 * f64::from(2u32.saturating_pow(t.min(31)))
}

fn check_timeout(value: &str, env: &EnvBlock, out: &mut Vec<Finding>) {
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

fn check_tc(var: &str, value: &str, out: &mut Vec<Finding>) {
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

fn check_gdr_level(var: &str, value: &str, machine: &Machine, out: &mut Vec<Finding>) {
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

fn check_debug(value: &str, out: &mut Vec<Finding>) {
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

fn check_debug_subsys(value: &str, out: &mut Vec<Finding>) {
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

/// NCCL's variables, from `env.rst` (NCCL 2.2x) plus a few of its
/// source; not exhaustive.
const KNOWN: &[&str] = &[
    "NCCL_SOCKET_IFNAME",
    "NCCL_SOCKET_FAMILY",
    "NCCL_SOCKET_NTHREADS",
    "NCCL_NSOCKS_PERTHREAD",
    "NCCL_SOCKET_RETRY_CNT",
    "NCCL_SOCKET_RETRY_SLEEP_MSEC",
    "NCCL_SOCKET_POLL_TIMEOUT_MSEC",
    "NCCL_CROSS_NIC",
    "NCCL_IB_HCA",
    "NCCL_IB_TIMEOUT",
    "NCCL_IB_RETRY_CNT",
    "NCCL_IB_GID_INDEX",
    "NCCL_IB_ADDR_FAMILY",
    "NCCL_IB_ADDR_RANGE",
    "NCCL_IB_ROCE_VERSION_NUM",
    "NCCL_IB_SL",
    "NCCL_IB_TC",
    "NCCL_IB_FIFO_TC",
    "NCCL_IB_RETURN_ASYNC_EVENTS",
    "NCCL_IB_QPS_PER_CONNECTION",
    "NCCL_IB_SPLIT_DATA_ON_QPS",
    "NCCL_IB_CUDA_SUPPORT",
    "NCCL_IB_GDR_LEVEL",
    "NCCL_IB_PCI_RELAXED_ORDERING",
    "NCCL_IB_ADAPTIVE_ROUTING",
    "NCCL_IB_ECE_ENABLE",
    "NCCL_IB_MERGE_VFS",
    "NCCL_IB_MERGE_NICS",
    "NCCL_IB_DISABLE",
    "NCCL_IB_AR_THRESHOLD",
    "NCCL_IB_USE_INLINE",
    "NCCL_IB_MQP_RETRY_ALL",
    "NCCL_IB_MQP_RETRY_CNT",
    "NCCL_IB_MQP_RETRY_SLEEP_MSEC",
    "NCCL_OOB_NET_ENABLE",
    "NCCL_OOB_NET_IFNAME",
    "NCCL_UID_STAGGER_THRESHOLD",
    "NCCL_UID_STAGGER_RATE",
    "NCCL_NET",
    "NCCL_NET_PLUGIN",
    "NCCL_TUNER_PLUGIN",
    "NCCL_PROFILER_PLUGIN",
    "NCCL_NET_GDR_LEVEL",
    "NCCL_NET_GDR_READ",
    "NCCL_NET_GDR_C2C",
    "NCCL_NET_SHARED_BUFFERS",
    "NCCL_NET_SHARED_COMMS",
    "NCCL_NET_DISABLE_INTRA",
    "NCCL_NET_FORCE_FLUSH",
    "NCCL_NET_OVERHEAD",
    "NCCL_P2P_DISABLE",
    "NCCL_P2P_LEVEL",
    "NCCL_P2P_DIRECT_DISABLE",
    "NCCL_P2P_NET_CHUNKSIZE",
    "NCCL_P2P_PCI_CHUNKSIZE",
    "NCCL_P2P_NVL_CHUNKSIZE",
    "NCCL_SHM_DISABLE",
    "NCCL_BUFFSIZE",
    "NCCL_NTHREADS",
    "NCCL_MAX_NCHANNELS",
    "NCCL_MIN_NCHANNELS",
    "NCCL_MAX_CTAS",
    "NCCL_MIN_CTAS",
    "NCCL_CHECKS_DISABLE",
    "NCCL_CHECK_POINTERS",
    "NCCL_LAUNCH_MODE",
    "NCCL_DEBUG",
    "NCCL_DEBUG_FILE",
    "NCCL_DEBUG_SUBSYS",
    "NCCL_COLLNET_ENABLE",
    "NCCL_COLLNET_NODE_THRESHOLD",
    "NCCL_TOPO_FILE",
    "NCCL_TOPO_DUMP_FILE",
    "NCCL_SET_THREAD_NAME",
    "NCCL_GRAPH_DUMP_FILE",
    "NCCL_GRAPH_FILE",
    "NCCL_GRAPH_MIXING_SUPPORT",
    "NCCL_IGNORE_CPU_AFFINITY",
    "NCCL_IGNORE_DISABLED_P2P",
    "NCCL_CONF_FILE",
    "NCCL_SET_STACK_SIZE",
    "NCCL_ALGO",
    "NCCL_PROTO",
    "NCCL_NVB_DISABLE",
    "NCCL_PXN_DISABLE",
    "NCCL_P2P_PXN_LEVEL",
    "NCCL_RUNTIME_CONNECT",
    "NCCL_CUMEM_ENABLE",
    "NCCL_CUMEM_HOST_ENABLE",
    "NCCL_NVLS_ENABLE",
    "NCCL_NVLS_CHUNKSIZE",
    "NCCL_MNNVL_ENABLE",
    "NCCL_RAS_ENABLE",
    "NCCL_SINGLE_RING_THRESHOLD",
    "NCCL_LL_THRESHOLD",
    "NCCL_TREE_THRESHOLD",
    "NCCL_WORK_FIFO_DEPTH",
    "NCCL_WORK_FIFO_BYTES",
    "NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_COMM_BLOCKING",
    "NCCL_CTA_POLICY",
    "NCCL_NCHANNELS_PER_NET_PEER",
    "NCCL_MIN_P2P_NCHANNELS",
    "NCCL_MAX_P2P_NCHANNELS",
];

fn deprecated_or_unknown(var: &EnvVar, out: &mut Vec<Finding>) {
    let (name, value) = (var.name.as_str(), var.value.as_str());
    let f = |sev, msg: &str| Finding::new(sev, name, msg).with_value(value);
    match name {
        "NCCL_IB_GDR_LEVEL" => out.push(
            f(
                Severity::Warning,
                "renamed NCCL_NET_GDR_LEVEL in NCCL 2.4.0",
            )
            .with_fix(format!("NCCL_NET_GDR_LEVEL={value}")),
        ),
        "NCCL_IB_CUDA_SUPPORT" => out.push(
            f(
                Severity::Warning,
                "removed in NCCL 2.4.0: no effect; GPUDirect RDMA is controlled by \
                 NCCL_NET_GDR_LEVEL",
            )
            .with_fix("remove it (NCCL_NET_GDR_LEVEL=LOC disables GPUDirect RDMA)"),
        ),
        "NCCL_MAX_NCHANNELS" | "NCCL_MIN_NCHANNELS" => {
            let new = name.replace("NCHANNELS", "CTAS");
            out.push(
                f(
                    Severity::Note,
                    &format!("deprecated in NCCL 2.17 for {new}"),
                )
                .with_fix(format!("{new}={value}")),
            );
        }
        "NCCL_LAUNCH_MODE" if value.eq_ignore_ascii_case("GROUP") => out.push(f(
            Severity::Note,
            "NCCL_LAUNCH_MODE=GROUP is deprecated (NCCL 2.9); the default, PARALLEL, is the \
             supported mode",
        )),
        "NCCL_ASYNC_ERROR_HANDLING" => out.push(f(
            Severity::Note,
            "read by PyTorch, not by NCCL (newer PyTorch spells it \
             TORCH_NCCL_ASYNC_ERROR_HANDLING)",
        )),
        _ if KNOWN.contains(&name) => {}
        _ => out.push(
            f(
                Severity::Warning,
                "not an NCCL variable (typo?): NCCL ignores it",
            )
            .with_fix_opt(closest_known(name).map(|close| format!("{close}={value}"))),
        ),
    }
}

/// The known name nearest to `name`, if it is within 3 edits.
fn closest_known(name: &str) -> Option<&'static str> {
    KNOWN
        .iter()
        .map(|k| (edit_distance(name, k), *k))
        .filter(|(d, _)| *d <= 3)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Levenshtein distance.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl::{Summary, has_errors};

    // --- machines ------------------------------------------------------------

    fn gid(index: u32, gid: &str, kind: &str, netdev: &str, ipv4: Option<&str>) -> GidEntry {
        GidEntry {
            index,
            gid: gid.to_owned(),
            kind: Some(kind.to_owned()),
            netdev: Some(netdev.to_owned()),
            ipv4: ipv4.map(str::to_owned),
        }
    }

    fn port(
        n: u8,
        state: &str,
        layer: &str,
        netdev: Option<&str>,
        gids: Vec<GidEntry>,
    ) -> PortState {
        PortState {
            port: n,
            state: Some(state.to_owned()),
            link_layer: Some(layer.to_owned()),
            netdev: netdev.map(str::to_owned),
            gids,
            ..PortState::default()
        }
    }

    fn dev(name: &str, ports: Vec<PortState>) -> DeviceState {
        DeviceState {
            name: name.to_owned(),
            ports,
            ..DeviceState::default()
        }
    }

    fn ib_dev(name: &str) -> DeviceState {
        dev(name, vec![port(1, "4: ACTIVE", "InfiniBand", None, vec![])])
    }

    fn iface(name: &str, up: bool, addrs: &[&str]) -> NetInterface {
        NetInterface {
            name: name.to_owned(),
            up,
            addresses: addrs.iter().map(|a| a.parse().unwrap()).collect(),
        }
    }

    const LINK_LOCAL: &str = "fe80:0000:0000:0000:b0d2:1cff:fe3f:9a01";
    const MAPPED: &str = "0000:0000:0000:0000:0000:ffff:a9fe:4d01";

    /// The soft-RoCE VM: rxe0 port 1 ACTIVE Ethernet on veth0, GID 0
    /// link-local RoCE v2, GID 1 IPv4 169.254.77.1 RoCE v2 (if `with_v4`).
    fn rxe_machine(with_v4: bool) -> Machine {
        let mut gids = vec![gid(0, LINK_LOCAL, "RoCE v2", "veth0", None)];
        if with_v4 {
            gids.push(gid(1, MAPPED, "RoCE v2", "veth0", Some("169.254.77.1")));
        }
        let veth_addrs: &[&str] = if with_v4 {
            &["169.254.77.1"]
        } else {
            &["fe80::b0d2:1cff:fe3f:9a01"]
        };
        Machine {
            devices: vec![dev(
                "rxe0",
                vec![port(1, "4: ACTIVE", "Ethernet", Some("veth0"), gids)],
            )],
            interfaces: vec![
                iface("lo", true, &["127.0.0.1", "::1"]),
                iface("veth0", true, veth_addrs),
            ],
            gpus: GpuState::default(),
        }
    }

    /// The usual mlx5 RoCE table: 0 link-local v1, 1 link-local v2,
    /// 2 IPv4 v1, 3 IPv4 v2.
    fn mlx5_roce_machine() -> Machine {
        let v4 = "0000:0000:0000:0000:0000:ffff:0a00:0001";
        let ll = "fe80:0000:0000:0000:0e42:a1ff:fe00:0001";
        let gids = vec![
            gid(0, ll, "IB/RoCE v1", "eth2", None),
            gid(1, ll, "RoCE v2", "eth2", None),
            gid(2, v4, "IB/RoCE v1", "eth2", Some("10.0.0.1")),
            gid(3, v4, "RoCE v2", "eth2", Some("10.0.0.1")),
        ];
        Machine {
            devices: vec![dev(
                "mlx5_0",
                vec![port(1, "4: ACTIVE", "Ethernet", Some("eth2"), gids)],
            )],
            interfaces: vec![iface("eth2", true, &["10.0.0.1"])],
            gpus: GpuState::default(),
        }
    }

    fn env(text: &str) -> EnvBlock {
        EnvBlock::parse(text).unwrap()
    }

    fn about<'a>(findings: &'a [Finding], var: &str) -> Vec<&'a Finding> {
        findings.iter().filter(|f| f.variable == var).collect()
    }

    fn worst(findings: &[Finding], var: &str) -> Option<Severity> {
        about(findings, var).iter().map(|f| f.severity).max()
    }

    fn text_of(findings: &[Finding], var: &str) -> String {
        about(findings, var)
            .iter()
            .map(|f| f.line())
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn errors(findings: &[Finding]) -> Vec<String> {
        findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .map(Finding::line)
            .collect()
    }

    // --- the env block ---------------------------------------------------------

    #[test]
    fn env_lines_take_export_quotes_comments_and_blanks() {
        let b = env(
            "# a job's block\n\nexport NCCL_IB_HCA=mlx5\nNCCL_DEBUG=\"INFO\"\n  export  \
             NCCL_SOCKET_IFNAME='=eth0'\nNCCL_IB_TC=106 # DSCP 26\nNCCL_ALGO=\n",
        );
        assert_eq!(b.get("NCCL_IB_HCA"), Some("mlx5"));
        assert_eq!(b.get("NCCL_DEBUG"), Some("INFO"));
        assert_eq!(b.get("NCCL_SOCKET_IFNAME"), Some("=eth0"));
        assert_eq!(b.get("NCCL_IB_TC"), Some("106"));
        assert_eq!(b.get("NCCL_ALGO"), Some(""));
        let lines: Vec<Option<usize>> = b.assignments().iter().map(|v| v.line).collect();
        assert_eq!(lines, [Some(3), Some(4), Some(5), Some(6), Some(7)]);
        assert!(!b.is_empty());
        assert!(env("# nothing\n\n").is_empty());
    }

    #[test]
    fn env_lines_that_are_not_variables_name_their_line() {
        let e = EnvBlock::parse("export NCCL_IB_HCA=mlx5\nthis is not a variable\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"line 2: "this is not a variable" is not NAME=value"#
        );
        let e = EnvBlock::parse("NCCL_IB_HCA=\"mlx5\n").unwrap_err();
        assert!(
            matches!(e, EnvParseError::UnterminatedQuote { line: 1, .. }),
            "{e}"
        );
        let e = EnvBlock::parse("\nNCCL_IB_HCA=mlx5 mlx4\n").unwrap_err();
        assert!(
            matches!(e, EnvParseError::UnquotedSpace { line: 2, .. }),
            "{e}"
        );
        let e = EnvBlock::parse("1NCCL=2\n").unwrap_err();
        assert!(
            matches!(e, EnvParseError::NotAssignment { line: 1, .. }),
            "{e}"
        );
        // Messages are lowercase (thiserror convention of the crate).
        assert!(e.to_string().starts_with("line"));
    }

    #[test]
    fn from_vars_keeps_only_nccl_variables() {
        let b = EnvBlock::from_vars([
            ("PATH", "/usr/bin"),
            ("NCCL_IB_HCA", "rxe0"),
            ("CUDA_VISIBLE_DEVICES", "0"),
        ]);
        assert_eq!(b.assignments().len(), 1);
        assert_eq!(b.get("NCCL_IB_HCA"), Some("rxe0"));
        assert!(EnvBlock::from_vars([("HOME", "/root")]).is_empty());
    }

    #[test]
    fn a_name_set_twice_the_last_wins_with_a_warning() {
        let b = env("NCCL_IB_HCA=mlx5\nNCCL_IB_TIMEOUT=22\nNCCL_IB_HCA=rxe0\n");
        assert_eq!(b.get("NCCL_IB_HCA"), Some("rxe0"));
        let f = check(&b, &rxe_machine(true));
        let dup: Vec<&Finding> = about(&f, "NCCL_IB_HCA")
            .into_iter()
            .filter(|f| f.message.contains("last"))
            .collect();
        assert_eq!(dup.len(), 1, "{f:#?}");
        assert_eq!(dup[0].severity, Severity::Warning);
        assert!(
            dup[0].message.contains("line 3") && dup[0].message.contains("line 1"),
            "{}",
            dup[0].message
        );
        // The value checked is the last one: rxe0 selects the port.
        assert!(errors(&f).is_empty(), "{:?}", errors(&f));
    }

    #[test]
    fn no_nccl_variable_is_one_note() {
        for b in [
            env("# nothing set\n"),
            env("CUDA_VISIBLE_DEVICES=0\n"),
            EnvBlock::default(),
        ] {
            let f = check(&b, &rxe_machine(true));
            assert_eq!(f.len(), 1, "{f:#?}");
            assert_eq!(f[0].severity, Severity::Note);
            assert!(
                f[0].message.contains("no NCCL_* variables set"),
                "{}",
                f[0].message
            );
        }
    }

    // --- the issue's block on the rxe VM -----------------------------------------

    const ISSUE_BLOCK: &str = "export NCCL_IB_HCA=mlx5\nexport NCCL_SOCKET_IFNAME=eth0\n\
        export NCCL_IB_GID_INDEX=3\nexport NCCL_IB_TIMEOUT=22\n\
        export NCCL_IB_QPS_PER_CONNECTION=4\nexport NCCL_IB_TC=41\n\
        export NCCL_NET_GDR_LEVEL=2\n";

    #[test]
    fn the_issue_block_on_rxe_names_each_wrong_setting() {
        let f = check(&env(ISSUE_BLOCK), &rxe_machine(true));

        // NCCL_IB_HCA=mlx5: no device has that prefix → NET/IB finds no
        // device and NCCL uses sockets.
        assert_eq!(worst(&f, "NCCL_IB_HCA"), Some(Severity::Error), "{f:#?}");
        let hca = about(&f, "NCCL_IB_HCA")
            .into_iter()
            .find(|x| x.severity == Severity::Error)
            .unwrap();
        assert_eq!(hca.fix.as_deref(), Some("NCCL_IB_HCA=rxe0"));
        let line = hca.line();
        assert!(line.starts_with("error   NCCL_IB_HCA=mlx5: "), "{line}");
        assert!(
            line.contains("rxe0") && line.contains("NET/IB : No device found."),
            "{line}"
        );
        assert!(line.contains("sockets"), "{line}");

        // NCCL_IB_GID_INDEX=3: rxe0:1 has GIDs 0 and 1 only; 1 is the RoCE
        // v2 IPv4 one.
        assert_eq!(
            worst(&f, "NCCL_IB_GID_INDEX"),
            Some(Severity::Error),
            "{f:#?}"
        );
        let g = text_of(&f, "NCCL_IB_GID_INDEX");
        assert!(g.contains("no GID 3"), "{g}");
        assert!(g.contains("fix: NCCL_IB_GID_INDEX=1 "), "{g}");

        // NCCL_SOCKET_IFNAME=eth0: no interface eth0 → bootstrap fails.
        assert_eq!(
            worst(&f, "NCCL_SOCKET_IFNAME"),
            Some(Severity::Error),
            "{f:#?}"
        );
        let s = text_of(&f, "NCCL_SOCKET_IFNAME");
        assert!(s.contains("no socket interface found"), "{s}");
        assert!(s.contains("fix: NCCL_SOCKET_IFNAME=veth0"), "{s}");

        // NCCL_IB_TC=41 = 0b101001: DSCP 10, ECN 01.
        let tc = text_of(&f, "NCCL_IB_TC");
        assert!(tc.contains("DSCP 10"), "{tc}");
        assert!(tc.contains("ECT(1)"), "{tc}");
        assert_eq!(worst(&f, "NCCL_IB_TC"), Some(Severity::Warning));
        assert!(tc.contains("fix: NCCL_IB_TC=40"), "{tc}");

        // NCCL_IB_TIMEOUT=22: 4.096 µs × 2^22 = 17.18 s; × 8 tries ≈ 137 s.
        let t = text_of(&f, "NCCL_IB_TIMEOUT");
        assert_eq!(worst(&f, "NCCL_IB_TIMEOUT"), Some(Severity::Note), "{t}");
        assert!(t.contains("17.18 s") && t.contains("137 s"), "{t}");

        // 4 QPs per connection: allowed, explained.
        assert_eq!(
            worst(&f, "NCCL_IB_QPS_PER_CONNECTION"),
            Some(Severity::Note)
        );
        assert!(text_of(&f, "NCCL_IB_QPS_PER_CONNECTION").contains("4 QPs"));

        // NCCL_NET_GDR_LEVEL=2: legacy integer for PXB; no GPU here.
        let gdr = text_of(&f, "NCCL_NET_GDR_LEVEL");
        assert_eq!(
            worst(&f, "NCCL_NET_GDR_LEVEL"),
            Some(Severity::Note),
            "{gdr}"
        );
        assert!(
            gdr.contains("PXB") && gdr.contains("no NVIDIA GPU here"),
            "{gdr}"
        );

        assert_eq!(errors(&f).len(), 3, "{:#?}", errors(&f));
        assert!(has_errors(&f));
        let sum = Summary::of(&f);
        assert_eq!(sum.errors, 3);
    }

    #[test]
    fn a_block_right_for_the_rxe_vm_has_no_error() {
        let b = env(
            "NCCL_IB_HCA=rxe0\nNCCL_SOCKET_IFNAME=veth0\nNCCL_IB_GID_INDEX=1\nNCCL_IB_TC=104\n\
             NCCL_IB_TIMEOUT=20\n",
        );
        let f = check(&b, &rxe_machine(true));
        assert!(!has_errors(&f), "{f:#?}");
        assert!(!f.iter().any(|x| x.severity == Severity::Warning), "{f:#?}");
        assert!(text_of(&f, "NCCL_IB_HCA").contains("rxe0:1/RoCE"));
        let tc = text_of(&f, "NCCL_IB_TC");
        assert!(tc.contains("DSCP 26") && tc.contains("ECN bits 00"), "{tc}");
        assert!(text_of(&f, "NCCL_IB_TIMEOUT").contains("4.29 s"));
    }

    #[test]
    fn without_an_ipv4_gid_the_link_local_one_is_a_warning_only() {
        let m = rxe_machine(false);
        let b = env(
            "NCCL_IB_HCA=rxe0\nNCCL_SOCKET_IFNAME=veth0\nNCCL_IB_GID_INDEX=0\nNCCL_IB_TC=104\n",
        );
        let f = check(&b, &m);
        assert!(!has_errors(&f), "{f:#?}");
        assert_eq!(worst(&f, "NCCL_IB_GID_INDEX"), Some(Severity::Warning));
        assert!(text_of(&f, "NCCL_IB_GID_INDEX").contains("link-local"));
        // A wrong index there suggests the link-local RoCE v2 one, said as
        // such.
        let f = check(&env("NCCL_IB_GID_INDEX=3\n"), &m);
        let fix = about(&f, "NCCL_IB_GID_INDEX")[0].fix.clone().unwrap();
        assert!(
            fix.starts_with("NCCL_IB_GID_INDEX=0 ") && fix.contains("link-local"),
            "{fix}"
        );
    }

    // --- NCCL_IB_HCA -------------------------------------------------------------

    #[test]
    fn name_lists_parse_as_nccl_does() {
        let l = NameList::parse("^=mlx5_0:1,mlx5_1", MAX_IB_DEVS);
        assert!(l.exclude && l.exact);
        assert_eq!(
            l.entries,
            [
                ListEntry {
                    name: "mlx5_0".into(),
                    port: Some(1)
                },
                ListEntry {
                    name: "mlx5_1".into(),
                    port: None
                },
            ]
        );
        // Empty entries and an empty port are dropped/any.
        let l = NameList::parse("mlx5_0:,,:2,mlx5_1:1:0", MAX_IB_DEVS);
        assert_eq!(
            l.entries,
            [
                ListEntry {
                    name: "mlx5_0".into(),
                    port: None
                },
                ListEntry {
                    name: "mlx5_1".into(),
                    port: Some(1)
                },
            ]
        );
        // An empty list matches everything; `^` with nothing after it
        // therefore excludes everything (matchIfList(..) ^ searchNot).
        assert!(NameList::parse("", 32).selects("mlx5_0", Some(1)));
        assert!(!NameList::parse("^", 32).selects("mlx5_0", Some(1)));
        // Prefix vs exact.
        assert!(NameList::parse("mlx5", 32).selects("mlx5_3", Some(1)));
        assert!(!NameList::parse("=mlx5", 32).selects("mlx5_3", Some(1)));
        assert!(NameList::parse("mlx5_0:1", 32).selects("mlx5_0", Some(1)));
        assert!(!NameList::parse("mlx5_0:1", 32).selects("mlx5_0", Some(2)));
        // At most `max` entries.
        assert_eq!(NameList::parse("a,b,c", 2).entries.len(), 2);
    }

    #[test]
    fn a_prefix_that_is_a_device_name_also_selects_its_longer_siblings() {
        let m = Machine {
            devices: vec![ib_dev("mlx5_1"), ib_dev("mlx5_10")],
            ..Machine::default()
        };
        let f = check(&env("NCCL_IB_HCA=mlx5_1\n"), &m);
        let warn = about(&f, "NCCL_IB_HCA")
            .into_iter()
            .find(|x| x.severity == Severity::Warning)
            .expect("a prefix warning");
        assert!(warn.message.contains("mlx5_10"), "{}", warn.message);
        assert_eq!(warn.fix.as_deref(), Some("NCCL_IB_HCA==mlx5_1"));
        let note = text_of(&f, "NCCL_IB_HCA");
        assert!(
            note.contains("mlx5_1:1/IB") && note.contains("mlx5_10:1/IB"),
            "{note}"
        );
        // With '=' only mlx5_1 is used, and nothing is said against it.
        let f = check(&env("NCCL_IB_HCA==mlx5_1\n"), &m);
        assert_eq!(worst(&f, "NCCL_IB_HCA"), Some(Severity::Note));
        let note = text_of(&f, "NCCL_IB_HCA");
        assert!(
            note.contains("mlx5_1:1/IB") && !note.contains("mlx5_10"),
            "{note}"
        );
    }

    #[test]
    fn a_caret_excludes_and_an_equals_with_port_selects_one_port() {
        let m = Machine {
            devices: vec![
                dev(
                    "mlx5_0",
                    vec![
                        port(1, "4: ACTIVE", "InfiniBand", None, vec![]),
                        port(2, "4: ACTIVE", "InfiniBand", None, vec![]),
                    ],
                ),
                ib_dev("mlx5_1"),
                ib_dev("mlx5_01"),
            ],
            ..Machine::default()
        };
        let sel = |v: &str| -> Vec<String> {
            let b = env(&format!("NCCL_IB_HCA={v}\n"));
            selected_ports(&b, &m)
                .iter()
                .map(|(d, p)| format!("{}:{}", d.name, p.port))
                .collect()
        };
        assert_eq!(sel("^mlx5_0"), ["mlx5_1:1"]);
        assert_eq!(sel("^=mlx5_0"), ["mlx5_1:1", "mlx5_01:1"]);
        assert_eq!(sel("=mlx5_0:1"), ["mlx5_0:1"]);
        assert_eq!(sel("mlx5_0:2"), ["mlx5_0:2"]);
        assert_eq!(sel("mlx5_0"), ["mlx5_0:1", "mlx5_0:2", "mlx5_01:1"]);
        let f = check(&env("NCCL_IB_HCA=^mlx5_0\n"), &m);
        assert!(!has_errors(&f), "{f:#?}");
    }

    #[test]
    fn a_value_selecting_only_ports_that_are_not_active_is_an_error() {
        let m = Machine {
            devices: vec![
                dev(
                    "mlx5_0",
                    vec![port(1, "1: DOWN", "InfiniBand", None, vec![])],
                ),
                ib_dev("mlx5_1"),
            ],
            ..Machine::default()
        };
        let f = check(&env("NCCL_IB_HCA==mlx5_0\n"), &m);
        let e = about(&f, "NCCL_IB_HCA")[0];
        assert_eq!(e.severity, Severity::Error);
        assert!(
            e.message.contains("no ACTIVE port") && e.message.contains("DOWN"),
            "{}",
            e.message
        );
        assert_eq!(e.fix.as_deref(), Some("NCCL_IB_HCA=mlx5_1"));
        // Excluding every device is the same error.
        let f = check(&env("NCCL_IB_HCA=^mlx5\n"), &m);
        assert_eq!(worst(&f, "NCCL_IB_HCA"), Some(Severity::Error));
        // A machine with no RDMA device at all.
        let f = check(&env("NCCL_IB_HCA=mlx5\n"), &Machine::default());
        let e = about(&f, "NCCL_IB_HCA")[0];
        assert!(e.message.contains("no RDMA device here"), "{}", e.message);
    }

    #[test]
    fn an_entry_naming_no_device_beside_one_that_does_is_a_warning() {
        let f = check(&env("NCCL_IB_HCA=rxe0,mlx5_0\n"), &rxe_machine(true));
        assert!(!has_errors(&f), "{f:#?}");
        assert_eq!(worst(&f, "NCCL_IB_HCA"), Some(Severity::Warning));
        assert!(text_of(&f, "NCCL_IB_HCA").contains("\"mlx5_0\" is a prefix of no device"));
        // Alone, it is the error only, said once.
        let f = check(&env("NCCL_IB_HCA=mlx5\n"), &rxe_machine(true));
        assert_eq!(about(&f, "NCCL_IB_HCA").len(), 1, "{f:#?}");
    }

    #[test]
    fn the_suggested_hca_value_uses_equals_when_a_name_prefixes_another() {
        let m = Machine {
            devices: vec![ib_dev("mlx5_1"), ib_dev("mlx5_10")],
            ..Machine::default()
        };
        let f = check(&env("NCCL_IB_HCA=rxe\n"), &m);
        let e = about(&f, "NCCL_IB_HCA")
            .into_iter()
            .find(|x| x.severity == Severity::Error)
            .unwrap();
        assert_eq!(e.fix.as_deref(), Some("NCCL_IB_HCA==mlx5_1,mlx5_10"));
    }

    // --- NCCL_SOCKET_IFNAME -----------------------------------------------------------

    #[test]
    fn socket_ifname_follows_the_same_list_rules() {
        let mut m = rxe_machine(true);
        m.interfaces.push(iface("docker0", true, &["172.17.0.1"]));
        m.interfaces.push(iface("eth9", false, &["10.9.0.1"]));
        m.interfaces.push(iface("eth8", true, &[]));
        let f = |v: &str| check(&env(&format!("NCCL_SOCKET_IFNAME={v}\n")), &m);

        let x = f("=lo");
        assert_eq!(worst(&x, "NCCL_SOCKET_IFNAME"), Some(Severity::Note));
        assert!(text_of(&x, "NCCL_SOCKET_IFNAME").contains("loopback"));
        assert!(text_of(&f("docker"), "NCCL_SOCKET_IFNAME").contains("docker0"));
        // Down, or without an address: NCCL would not find it usable.
        let x = f("eth9");
        assert_eq!(worst(&x, "NCCL_SOCKET_IFNAME"), Some(Severity::Warning));
        assert!(text_of(&x, "NCCL_SOCKET_IFNAME").contains("down"));
        let x = f("=eth8");
        assert_eq!(worst(&x, "NCCL_SOCKET_IFNAME"), Some(Severity::Warning));
        assert!(text_of(&x, "NCCL_SOCKET_IFNAME").contains("no IP address"));
        // Excluding lo and docker: veth0 (and the others).
        let x = f("^lo,docker");
        assert!(!has_errors(&x));
        assert!(text_of(&x, "NCCL_SOCKET_IFNAME").contains("veth0 (169.254.77.1)"));
        // Excluding everything.
        let x = f("^lo,docker,veth,eth");
        assert_eq!(worst(&x, "NCCL_SOCKET_IFNAME"), Some(Severity::Error));
        // socket.cc uses the variable only when strlen > 1.
        let x = f("e");
        assert_eq!(worst(&x, "NCCL_SOCKET_IFNAME"), Some(Severity::Warning));
        assert!(text_of(&x, "NCCL_SOCKET_IFNAME").contains("ignores"));
    }

    // --- NCCL_IB_GID_INDEX --------------------------------------------------------------

    #[test]
    fn gid_index_on_the_usual_mlx5_table() {
        let m = mlx5_roce_machine();
        let f = |v: &str| check(&env(&format!("NCCL_IB_GID_INDEX={v}\n")), &m);
        assert_eq!(worst(&f("3"), "NCCL_IB_GID_INDEX"), Some(Severity::Note));
        let x = f("2");
        assert_eq!(worst(&x, "NCCL_IB_GID_INDEX"), Some(Severity::Warning));
        let t = text_of(&x, "NCCL_IB_GID_INDEX");
        assert!(
            t.contains("RoCE v1") && t.contains("fix: NCCL_IB_GID_INDEX=3 "),
            "{t}"
        );
        assert_eq!(worst(&f("1"), "NCCL_IB_GID_INDEX"), Some(Severity::Warning));
        assert_eq!(worst(&f("4"), "NCCL_IB_GID_INDEX"), Some(Severity::Error));
        // -1: NCCL's own choice, the IPv4 RoCE v2 GID.
        let t = text_of(&f("-1"), "NCCL_IB_GID_INDEX");
        assert!(t.contains("mlx5_0:1 → 3"), "{t}");
        let x = f("three");
        assert_eq!(worst(&x, "NCCL_IB_GID_INDEX"), Some(Severity::Error));
        assert!(text_of(&x, "NCCL_IB_GID_INDEX").contains("\"three\" is not an integer"));
    }

    #[test]
    fn automatic_gid_choice_follows_nccl() {
        let m = rxe_machine(true);
        let p = &m.devices[0].ports[0];
        assert_eq!(auto_gid_index(p, true, 2), 1);
        // Asking for IPv6: the link-local RoCE v2 GID 0 stays.
        assert_eq!(auto_gid_index(p, false, 2), 0);
        let m = mlx5_roce_machine();
        let p = &m.devices[0].ports[0];
        assert_eq!(auto_gid_index(p, true, 2), 3);
        assert_eq!(auto_gid_index(p, true, 1), 2);
        assert_eq!(auto_gid_index(p, false, 2), 1);
    }

    #[test]
    fn gid_index_on_infiniband_is_a_note() {
        let m = Machine {
            devices: vec![ib_dev("mlx5_0")],
            ..Machine::default()
        };
        let f = check(&env("NCCL_IB_GID_INDEX=3\n"), &m);
        assert_eq!(worst(&f, "NCCL_IB_GID_INDEX"), Some(Severity::Note));
        assert!(text_of(&f, "NCCL_IB_GID_INDEX").contains("InfiniBand"));
    }

    // --- numbers ---------------------------------------------------------------------------

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
    fn numbers_are_read_as_strtoll_base_0_reads_them() {
        let x = check(&env("NCCL_IB_TIMEOUT=022\n"), &Machine::default());
        // 022 is octal 18.
        let t = text_of(&x, "NCCL_IB_TIMEOUT");
        assert!(
            t.contains("octal") && t.contains("fix: NCCL_IB_TIMEOUT=18"),
            "{t}"
        );
        assert!(t.contains("2^18"), "{t}");
        assert_eq!(nccl_int("0x14").map(|n| n.value), Some(20));
        assert_eq!(
            nccl_int("22abc").map(|n| (n.value, n.trailing)),
            Some((22, true))
        );
        assert_eq!(nccl_int("-1").map(|n| n.value), Some(-1));
        assert_eq!(nccl_int("x"), None);
        assert_eq!(nccl_int(""), None);
    }

    #[test]
    fn small_ranges() {
        let m = Machine::default();
        let w = |block: &str, var: &str| worst(&check(&env(block), &m), var);
        assert_eq!(
            w("NCCL_IB_RETRY_CNT=8\n", "NCCL_IB_RETRY_CNT"),
            Some(Severity::Error)
        );
        assert_eq!(w("NCCL_IB_RETRY_CNT=7\n", "NCCL_IB_RETRY_CNT"), None);
        assert_eq!(
            w(
                "NCCL_IB_QPS_PER_CONNECTION=0\n",
                "NCCL_IB_QPS_PER_CONNECTION"
            ),
            Some(Severity::Error)
        );
        assert_eq!(
            w(
                "NCCL_IB_QPS_PER_CONNECTION=129\n",
                "NCCL_IB_QPS_PER_CONNECTION"
            ),
            Some(Severity::Error)
        );
        assert_eq!(
            w(
                "NCCL_IB_QPS_PER_CONNECTION=1\n",
                "NCCL_IB_QPS_PER_CONNECTION"
            ),
            None
        );
        assert_eq!(w("NCCL_IB_SL=16\n", "NCCL_IB_SL"), Some(Severity::Error));
        assert_eq!(w("NCCL_IB_SL=3\n", "NCCL_IB_SL"), None);
        assert_eq!(w("NCCL_IB_TC=256\n", "NCCL_IB_TC"), Some(Severity::Error));
        assert_eq!(w("NCCL_IB_SL=high\n", "NCCL_IB_SL"), Some(Severity::Error));
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

    // --- GPUDirect ---------------------------------------------------------------------------

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

    // --- debug, deprecated, unknown -------------------------------------------------------------

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

    #[test]
    fn deprecated_names_say_what_replaced_them() {
        let m = Machine::default();
        let f = check(
            &env(
                "NCCL_IB_GDR_LEVEL=PHB\nNCCL_IB_CUDA_SUPPORT=1\nNCCL_MAX_NCHANNELS=8\n\
                 NCCL_MIN_NCHANNELS=2\nNCCL_LAUNCH_MODE=GROUP\nNCCL_ASYNC_ERROR_HANDLING=1\n",
            ),
            &m,
        );
        let one = |var: &str| about(&f, var)[0].clone();
        let x = one("NCCL_IB_GDR_LEVEL");
        assert_eq!(x.severity, Severity::Warning);
        assert!(x.message.contains("2.4.0"));
        assert_eq!(x.fix.as_deref(), Some("NCCL_NET_GDR_LEVEL=PHB"));
        let x = one("NCCL_IB_CUDA_SUPPORT");
        assert_eq!(x.severity, Severity::Warning);
        assert!(x.message.contains("removed in NCCL 2.4.0"));
        let x = one("NCCL_MAX_NCHANNELS");
        assert_eq!(x.severity, Severity::Note);
        assert!(x.message.contains("2.17"));
        assert_eq!(x.fix.as_deref(), Some("NCCL_MAX_CTAS=8"));
        assert_eq!(
            one("NCCL_MIN_NCHANNELS").fix.as_deref(),
            Some("NCCL_MIN_CTAS=2")
        );
        assert_eq!(one("NCCL_LAUNCH_MODE").severity, Severity::Note);
        assert!(one("NCCL_ASYNC_ERROR_HANDLING").message.contains("PyTorch"));
        assert!(!has_errors(&f));
        // PARALLEL is fine.
        assert!(check(&env("NCCL_LAUNCH_MODE=PARALLEL\n"), &rxe_machine(true)).is_empty());
    }

    #[test]
    fn unknown_names_are_typos_with_the_closest_known_name() {
        let m = Machine::default();
        let f = check(
            &env("NCCL_IB_HCAS=mlx5_0\nNCCL_SOCKET_IF_NAME=eth0\nNCCL_ZZZZ_QQQQ_WWWW=1\n"),
            &m,
        );
        let x = about(&f, "NCCL_IB_HCAS")[0];
        assert_eq!(x.severity, Severity::Warning);
        assert!(x.message.contains("not an NCCL variable (typo?)"));
        assert_eq!(x.fix.as_deref(), Some("NCCL_IB_HCA=mlx5_0"));
        assert_eq!(
            about(&f, "NCCL_SOCKET_IF_NAME")[0].fix.as_deref(),
            Some("NCCL_SOCKET_IFNAME=eth0")
        );
        let x = about(&f, "NCCL_ZZZZ_QQQQ_WWWW")[0];
        assert_eq!(x.severity, Severity::Warning);
        assert_eq!(x.fix, None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn known_variables_that_are_not_checked_stay_quiet() {
        let m = rxe_machine(true);
        let f = check(
            &env("NCCL_ALGO=Ring\nNCCL_PROTO=Simple\nNCCL_CROSS_NIC=1\n"),
            &m,
        );
        assert!(f.is_empty(), "{f:#?}");
    }

    #[test]
    fn ib_disable_and_no_active_port_say_sockets() {
        let f = check(&env("NCCL_IB_DISABLE=1\n"), &rxe_machine(true));
        assert_eq!(worst(&f, "NCCL_IB_DISABLE"), Some(Severity::Warning));
        assert!(text_of(&f, "NCCL_IB_DISABLE").contains("sockets"));
        let f = check(&env("NCCL_IB_TIMEOUT=20\n"), &Machine::default());
        assert_eq!(worst(&f, "NCCL_IB_HCA"), Some(Severity::Warning));
        assert!(text_of(&f, "NCCL_IB_HCA").contains("No device found"));
    }
}
