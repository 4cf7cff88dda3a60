//! Slurm's hostlist syntax, expanded in order (as `scontrol show
//! hostnames` prints it): `tux[0-5,12,20-25]`, `rack[0-63]_blade[0-41]`
//! (groups multiply, the leftmost varying slowest), `linux[0000-1023]`
//! (a leading zero fixes the width), `a[1-2],b3` (items split by commas or
//! white space outside brackets). Syntax: slurm.conf(5), Slurm's
//! `hostlist.c`. Order and duplicates are kept: rank 0 runs on the first
//! host as written.
//!
//! The crates compared in the reference notes (fleet.md §4) either reject
//! `_`, sort the list, or are unmaintained; this is the small parser
//! instead. The count is computed before anything is allocated, so a list
//! like `x[0-99999999999]` fails at once.

use thiserror::Error;

/// Most hosts a list may expand to (Slurm's `MAX_RANGE` is 64 Ki per
/// range; a job this size is far beyond any fabric we validate).
pub const MAX_HOSTS: usize = 65_536;
/// Most bracket groups in one item (Slurm's examples have two; the cap
/// bounds the expansion's recursion).
pub const MAX_GROUPS: usize = 16;

/// Why a hostlist was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HostlistError {
    /// Nothing but separators.
    #[error("the hostlist is empty")]
    Empty,
    /// A `[` without its `]`, or a `]` without its `[`.
    #[error("unbalanced bracket in {0:?}")]
    Unbalanced(String),
    /// A `[` inside a bracket.
    #[error("nested bracket in {0:?}")]
    Nested(String),
    /// A range or a bracket with nothing in it.
    #[error("empty range in {0:?}")]
    EmptyRange(String),
    /// A range bound that is not a number.
    #[error("{range:?} in {item:?} is not a number or a range of numbers")]
    NotANumber {
        /// The item.
        item: String,
        /// The range.
        range: String,
    },
    /// A range that goes down.
    #[error("descending range {range:?} in {item:?}")]
    Descending {
        /// The item.
        item: String,
        /// The range.
        range: String,
    },
    /// More than [`MAX_GROUPS`] bracket groups in one item.
    #[error("more than {MAX_GROUPS} bracket groups in {0:?}")]
    TooManyGroups(String),
    /// More hosts than the cap.
    #[error("the hostlist expands to more than {cap} hosts")]
    TooMany {
        /// The cap.
        cap: usize,
    },
}

/// One bracket's ranges: (low, high, width), width 0 meaning unpadded.
type Ranges = Vec<(u64, u64, usize)>;

/// An item split into literal text and bracket groups: text₀ [g₀] text₁
/// [g₁] … textₙ.
struct Item {
    texts: Vec<String>,
    groups: Vec<Ranges>,
}

/// Expands `list` into host names, in order, at most `cap` of them.
///
/// # Errors
/// The first malformed item (named), or more than `cap` hosts.
pub fn expand(list: &str, cap: usize) -> Result<Vec<String>, HostlistError> {
    let items = split_items(list)?;
    if items.is_empty() {
        return Err(HostlistError::Empty);
    }
    let parsed = items
        .iter()
        .map(|i| parse_item(i))
        .collect::<Result<Vec<_>, _>>()?;
    // The count first, with checked arithmetic: nothing allocated for a
    // list that is too long.
    let mut total: usize = 0;
    for item in &parsed {
        let mut n: usize = 1;
        for g in &item.groups {
            let size = g.iter().try_fold(0usize, |acc, &(lo, hi, _)| {
                usize::try_from(hi - lo)
                    .ok()
                    .and_then(|d| d.checked_add(1))
                    .and_then(|d| acc.checked_add(d))
            });
            n = size
                .and_then(|s| n.checked_mul(s))
                .ok_or(HostlistError::TooMany { cap })?;
        }
        total = total.checked_add(n).ok_or(HostlistError::TooMany { cap })?;
        if total > cap {
            return Err(HostlistError::TooMany { cap });
        }
    }
    let mut out = Vec::with_capacity(total);
    for item in &parsed {
        expand_item(item, 0, String::new(), &mut out);
    }
    Ok(out)
}

/// Items split at commas and white space outside brackets.
fn split_items(list: &str) -> Result<Vec<&str>, HostlistError> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| HostlistError::Unbalanced(list.into()))?
            }
            c if depth == 0 && (c == ',' || c.is_whitespace()) => {
                if i > start {
                    items.push(&list[start..i]);
                }
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(HostlistError::Unbalanced(list.into()));
    }
    if list.len() > start {
        items.push(&list[start..]);
    }
    Ok(items)
}

fn parse_item(item: &str) -> Result<Item, HostlistError> {
    let mut texts = vec![String::new()];
    let mut groups = Vec::new();
    let mut rest = item;
    while let Some(open) = rest.find(['[', ']']) {
        if rest.as_bytes()[open] == b']' {
            return Err(HostlistError::Unbalanced(item.into()));
        }
        texts.last_mut().expect("one text").push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let close = after
            .find(['[', ']'])
            .ok_or_else(|| HostlistError::Unbalanced(item.into()))?;
        if after.as_bytes()[close] == b'[' {
            return Err(HostlistError::Nested(item.into()));
        }
        if groups.len() == MAX_GROUPS {
            return Err(HostlistError::TooManyGroups(item.into()));
        }
        groups.push(parse_ranges(item, &after[..close])?);
        texts.push(String::new());
        rest = &after[close + 1..];
    }
    texts.last_mut().expect("one text").push_str(rest);
    Ok(Item { texts, groups })
}

fn parse_ranges(item: &str, body: &str) -> Result<Ranges, HostlistError> {
    if body.trim().is_empty() {
        return Err(HostlistError::EmptyRange(item.into()));
    }
    body.split(',')
        .map(|range| {
            let not_number = || HostlistError::NotANumber {
                item: item.into(),
                range: range.into(),
            };
            let (lo, hi) = range.split_once('-').unwrap_or((range, range));
            if lo.is_empty() || hi.is_empty() {
                return Err(HostlistError::EmptyRange(item.into()));
            }
            if !lo.bytes().chain(hi.bytes()).all(|b| b.is_ascii_digit()) {
                return Err(not_number());
            }
            let (l, h): (u64, u64) = (
                lo.parse().map_err(|_| not_number())?,
                hi.parse().map_err(|_| not_number())?,
            );
            if h < l {
                return Err(HostlistError::Descending {
                    item: item.into(),
                    range: range.into(),
                });
            }
            // A leading zero fixes the width (`[0000-1023]`, `[01-10]`).
            let width = if lo.len() > 1 && lo.starts_with('0') {
                lo.len()
            } else {
                0
            };
            Ok((l, h, width))
        })
        .collect()
}

fn expand_item(item: &Item, group: usize, prefix: String, out: &mut Vec<String>) {
    let name = prefix + &item.texts[group];
    let Some(ranges) = item.groups.get(group) else {
        out.push(name);
        return;
    };
    for &(lo, hi, width) in ranges {
        for n in lo..=hi {
            expand_item(item, group + 1, format!("{name}{n:0width$}"), out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(list: &str) -> Vec<String> {
        expand(list, MAX_HOSTS).unwrap()
    }

    #[test]
    fn slurms_own_examples_expand_in_order() {
        // slurm.conf(5): "tux[0-5,12,20-25]".
        let t = hosts("tux[0-5,12,20-25]");
        assert_eq!(t.len(), 13);
        assert_eq!(
            t[..7],
            ["tux0", "tux1", "tux2", "tux3", "tux4", "tux5", "tux12"]
        );
        assert_eq!(t[12], "tux25");
        // slurm.conf(5): "rack[0-63]_blade[0-41]": 64 × 42, rack slowest.
        let r = hosts("rack[0-63]_blade[0-41]");
        assert_eq!(r.len(), 2_688);
        assert_eq!(r[..2], ["rack0_blade0", "rack0_blade1"]);
        assert_eq!(r[42], "rack1_blade0");
        assert_eq!(r[2_687], "rack63_blade41");
        // slurm.conf(5): "linux[0000-1023]", padded.
        let l = hosts("linux[0000-1023]");
        assert_eq!(l.len(), 1_024);
        assert_eq!(
            (l[0].as_str(), l[1_023].as_str()),
            ("linux0000", "linux1023")
        );
        assert_eq!(hosts("a[1-2],b3"), ["a1", "a2", "b3"]);
    }

    #[test]
    fn separators_padding_single_numbers_and_duplicates_are_kept_as_written() {
        assert_eq!(hosts("n1 n2,\tn1"), ["n1", "n2", "n1"]);
        assert_eq!(hosts("n[01-03]"), ["n01", "n02", "n03"]);
        assert_eq!(hosts("n[8-10]"), ["n8", "n9", "n10"]);
        assert_eq!(hosts("x[7]"), ["x7"]);
        assert_eq!(hosts("[1-2]x"), ["1x", "2x"]);
        assert_eq!(hosts("gpu[3,1]-ib"), ["gpu3-ib", "gpu1-ib"]);
    }

    #[test]
    fn malformed_lists_are_refused_naming_the_fault() {
        let err = |l: &str| expand(l, MAX_HOSTS).unwrap_err().to_string();
        assert_eq!(err(" , "), "the hostlist is empty");
        assert_eq!(err("tux[0-5"), "unbalanced bracket in \"tux[0-5\"");
        assert_eq!(err("tux0-5]"), "unbalanced bracket in \"tux0-5]\"");
        assert_eq!(err("a]b[1]"), "unbalanced bracket in \"a]b[1]\"");
        assert_eq!(err("a[1[2]]"), "nested bracket in \"a[1[2]]\"");
        assert_eq!(err("a[]"), "empty range in \"a[]\"");
        assert_eq!(err("a[1-]"), "empty range in \"a[1-]\"");
        assert_eq!(
            err("a[x-2]"),
            "\"x-2\" in \"a[x-2]\" is not a number or a range of numbers"
        );
        assert_eq!(err("a[5-3]"), "descending range \"5-3\" in \"a[5-3]\"");
        let deep = "n[1]".repeat(17);
        assert_eq!(
            err(&deep),
            format!("more than 16 bracket groups in {deep:?}")
        );
        assert_eq!(
            err("a[0-99999999999999999999]"),
            "\"0-99999999999999999999\" in \"a[0-99999999999999999999]\" is not a number or a range of numbers"
        );
    }

    #[test]
    fn a_list_above_the_cap_fails_before_anything_is_allocated() {
        assert_eq!(
            expand("x[0-99999999999]", MAX_HOSTS).unwrap_err(),
            HostlistError::TooMany { cap: MAX_HOSTS }
        );
        assert_eq!(
            expand("x[0-18446744073709551615]", MAX_HOSTS).unwrap_err(),
            HostlistError::TooMany { cap: MAX_HOSTS }
        );
        assert_eq!(
            expand("a[0-999]b[0-999]c[0-999]", MAX_HOSTS).unwrap_err(),
            HostlistError::TooMany { cap: MAX_HOSTS }
        );
        assert_eq!(
            expand("n[1-4]", 3).unwrap_err(),
            HostlistError::TooMany { cap: 3 }
        );
        assert_eq!(expand("n[1-3]", 3).unwrap().len(), 3);
    }
}
