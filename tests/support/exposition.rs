//! The text exposition format (0.0.4) as the tests read it: every sample
//! by series, checked as a Prometheus parser would check it.

use std::collections::{BTreeMap, BTreeSet};

/// A series: metric name and labels.
pub type SeriesKey = (String, BTreeMap<String, String>);

/// The samples of a text exposition (format 0.0.4), by series. Checks
/// what a Prometheus parser would reject: a sample before its family's
/// `# TYPE`, a family declared twice or split, a series given twice.
pub fn parse_exposition(text: &str) -> BTreeMap<SeriesKey, f64> {
    let mut out = BTreeMap::new();
    let mut declared = BTreeSet::new();
    let mut current: Option<(String, String)> = None; // (name, type)
    for (n, line) in text.lines().enumerate() {
        let at = || format!("line {}: {line:?}", n + 1);
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or_else(|| panic!("{}", at()));
            assert!(declared.insert(name.to_owned()), "TYPE twice: {}", at());
            current = Some((name.to_owned(), kind.to_owned()));
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let (name, labels, rest) = parse_sample(line).unwrap_or_else(|| panic!("{}", at()));
        if let Some((family, kind)) = &current {
            let base = match kind.as_str() {
                "summary" | "histogram" => name
                    .strip_suffix("_sum")
                    .or_else(|| name.strip_suffix("_count"))
                    .or_else(|| name.strip_suffix("_bucket"))
                    .filter(|b| b == family)
                    .unwrap_or(&name),
                _ => &name,
            };
            assert_eq!(base, family, "sample outside its family: {}", at());
        }
        let value_text = rest.split_whitespace().next().unwrap_or("");
        let value = match value_text {
            "NaN" => f64::NAN,
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value: {}", at())),
        };
        assert!(
            out.insert((name, labels), value).is_none(),
            "series twice: {}",
            at()
        );
    }
    out
}

/// `name{k="v",...} rest` → (name, labels, rest).
fn parse_sample(line: &str) -> Option<(String, BTreeMap<String, String>, &str)> {
    let name_end = line.find(['{', ' '])?;
    let name = line[..name_end].to_owned();
    let mut labels = BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(inner) = rest.strip_prefix('{') {
        let mut chars = inner.char_indices();
        let mut key = String::new();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '}' => break i,
                ',' | ' ' => {}
                '=' => {
                    if chars.next()?.1 != '"' {
                        return None;
                    }
                    let mut value = String::new();
                    loop {
                        match chars.next()?.1 {
                            '"' => break,
                            '\\' => match chars.next()?.1 {
                                'n' => value.push('\n'),
                                other => value.push(other),
                            },
                            other => value.push(other),
                        }
                    }
                    labels.insert(std::mem::take(&mut key), value);
                }
                c => key.push(c),
            }
        };
        rest = &inner[end + 1..];
    }
    Some((name, labels, rest.trim_start()))
}

/// The value of the one series named `name` whose labels include all of
/// `labels` (the exposition is parsed, so a malformed one fails here).
pub fn sample(exposition: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    parse_exposition(exposition)
        .into_iter()
        .find(|((n, l), _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, v)| v)
}
