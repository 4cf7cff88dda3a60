//! Numbers as NCCL reads them (`strtoll(.., 0)`: octal, hex, trailing
//! text ignored), and the findings for values that are not what they
//! look like or out of range.

use crate::nccl::{Finding, Severity};

/// An integer value as NCCL's `ncclLoadParam` reads it (`strtoll(str,
/// NULL, 0)`): decimal, `0x` hex or `0` octal, trailing text ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct NcclInt {
    pub(super) value: i64,
    /// Read in a base other than 10 (`010` is 8).
    radix: u32,
    /// Text after the number, ignored by NCCL.
    trailing: bool,
}

pub(super) fn nccl_int(s: &str) -> Option<NcclInt> {
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
pub(super) fn int_of(var: &str, value: &str, out: &mut Vec<Finding>) -> Option<i64> {
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
pub(super) fn range_check(
    var: &str,
    value: &str,
    lo: i64,
    hi: i64,
    out: &mut Vec<Finding>,
) -> Option<i64> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl::env::check;
    use crate::nccl::env::fixtures::*;
    use crate::nccl::env::machine::Machine;

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
}
