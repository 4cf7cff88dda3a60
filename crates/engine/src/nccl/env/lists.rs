//! NCCL's lists (`NCCL_IB_HCA`, `NCCL_SOCKET_IFNAME`): `^` excludes,
//! `=` matches names exactly, else entries are prefixes.

use serde::Serialize;

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
pub(super) const MAX_IB_DEVS: usize = 32;
/// How many interfaces NCCL's socket list holds (`MAX_IFS`).
pub(super) const MAX_IFS: usize = 16;

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
    pub(super) fn entry_names(&self, entry: &ListEntry, name: &str) -> bool {
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
pub(super) fn list_value<'a>(
    names: &[&'a str],
    all: impl Iterator<Item = &'a str> + Clone,
) -> String {
    let over = names
        .iter()
        .any(|n| all.clone().any(|o| o != *n && o.starts_with(n)));
    let joined = names.join(",");
    if over { format!("={joined}") } else { joined }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
