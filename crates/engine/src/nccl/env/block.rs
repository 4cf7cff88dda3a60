//! The block of variables: `NAME=value` lines as pasted from a job's
//! script, or the process environment, the last assignment of a name
//! winning as in the shell.

use serde::Serialize;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl::env::fixtures::*;

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
}
