//! The Prometheus text exposition format 0.0.4: [`Exposition`] holds
//! metric families and their samples and writes them as text (one
//! `# HELP` and one `# TYPE` line per family, each family's samples
//! together, families in name order, samples in the order they were
//! added), escaping label values and HELP texts.
//!
//! Names. Metric and label names used here are constants of this module;
//! a name outside `[a-zA-Z_:][a-zA-Z0-9_:]*` (label names:
//! `[a-zA-Z_][a-zA-Z0-9_]*`) would be a programming error, and rather
//! than fail or panic, [`Exposition`] sanitizes it: every character
//! outside the set becomes `_`, and a name that is empty or starts with a
//! digit gets a leading `_`. Whatever comes from the host (device names,
//! driver counter names, firmware strings) goes into label values, which
//! may hold any text and are escaped.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

/// The `# TYPE` of a metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    /// A value that only goes up (reset to 0 on restart); names end in
    /// `_total`.
    Counter,
    /// A value that may go up and down.
    Gauge,
    /// Quantiles (`{quantile="0.5"}` …) plus `_sum` and `_count`.
    Summary,
    /// No type given.
    Untyped,
}

impl MetricType {
    /// The word of the `# TYPE` line.
    pub fn as_str(self) -> &'static str {
        match self {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Summary => "summary",
            MetricType::Untyped => "untyped",
        }
    }
}

/// Which line of a family a sample is: the family name itself, or a
/// summary's `_sum` / `_count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Suffix {
    Bare,
    Sum,
    Count,
}

impl Suffix {
    fn as_str(self) -> &'static str {
        match self {
            Suffix::Bare => "",
            Suffix::Sum => "_sum",
            Suffix::Count => "_count",
        }
    }
}

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
struct Series {
    suffix: Suffix,
    labels: Vec<(String, String)>,
    value: f64,
}

/// One metric family: its HELP, TYPE and samples.
#[derive(Debug, Clone, PartialEq)]
struct Family {
    help: String,
    kind: MetricType,
    series: Vec<Series>,
    /// Where each series is in `series`: a cluster report puts a million
    /// series in one family, a scan per sample would be quadratic.
    index: HashMap<(Suffix, Vec<(String, String)>), usize>,
}

/// A set of metric families in the text exposition format 0.0.4.
///
/// The first sample of a family fixes its HELP and TYPE (later ones with
/// another help or type keep the first). A sample with the name, labels
/// and suffix of one already added replaces its value, so a family never
/// holds the same series twice. Output: families in name order, samples
/// in the order added, every line ending in `\n` (an empty exposition is
/// the empty string).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exposition {
    families: BTreeMap<String, Family>,
}

impl Exposition {
    /// An empty exposition.
    pub fn new() -> Self {
        Self::default()
    }

    /// The names of its families, in output order.
    pub fn family_names(&self) -> impl Iterator<Item = &str> {
        self.families.keys().map(String::as_str)
    }

    /// Adds the sample `name{labels} value` of a counter, gauge or
    /// untyped family (for summaries see [`Exposition::summary`]). Label
    /// names are sanitized (see the module documentation); a label name
    /// given twice keeps its first value.
    pub fn sample(
        &mut self,
        name: &str,
        help: &str,
        kind: MetricType,
        labels: &[(&str, &str)],
        value: f64,
    ) {
        let labels = label_pairs(labels.iter().copied());
        self.family(name, help, kind)
            .put(Suffix::Bare, labels, value);
    }

    /// Adds one summary: a `{quantile="q"}` sample per `(q, value)` and,
    /// when given, `_sum` and `_count`. A `quantile` label among `labels`
    /// is left out (the format reserves it).
    pub fn summary(
        &mut self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        quantiles: &[(f64, f64)],
        sum_and_count: Option<(f64, u64)>,
    ) {
        let base = label_pairs(labels.iter().copied().filter(|(k, _)| *k != "quantile"));
        let family = self.family(name, help, MetricType::Summary);
        for &(q, v) in quantiles {
            let mut with_q = base.clone();
            with_q.push(("quantile".to_owned(), format_value(q)));
            family.put(Suffix::Bare, with_q, v);
        }
        if let Some((sum, count)) = sum_and_count {
            family.put(Suffix::Sum, base.clone(), sum);
            family.put(Suffix::Count, base, count as f64);
        }
    }

    fn family(&mut self, name: &str, help: &str, kind: MetricType) -> &mut Family {
        self.families
            .entry(sanitize_metric_name(name))
            .or_insert_with(|| Family {
                help: help.to_owned(),
                kind,
                series: Vec::new(),
                index: HashMap::new(),
            })
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (name, family) in &self.families {
            out.push_str("# HELP ");
            out.push_str(name);
            if !family.help.is_empty() {
                out.push(' ');
                escape_help(&family.help, &mut out);
            }
            out.push('\n');
            let _ = writeln!(out, "# TYPE {name} {}", family.kind.as_str());
            for s in &family.series {
                out.push_str(name);
                out.push_str(s.suffix.as_str());
                if !s.labels.is_empty() {
                    out.push('{');
                    for (i, (k, v)) in s.labels.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        out.push_str(k);
                        out.push_str("=\"");
                        escape_label_value(v, &mut out);
                        out.push('"');
                    }
                    out.push('}');
                }
                out.push(' ');
                out.push_str(&format_value(s.value));
                out.push('\n');
            }
        }
        out
    }
}

impl Family {
    /// Adds a series, or replaces the value of the same series.
    fn put(&mut self, suffix: Suffix, labels: Vec<(String, String)>, value: f64) {
        match self.index.entry((suffix, labels)) {
            std::collections::hash_map::Entry::Occupied(at) => {
                self.series[*at.get()].value = value;
            }
            std::collections::hash_map::Entry::Vacant(slot) => {
                let labels = slot.key().1.clone();
                slot.insert(self.series.len());
                self.series.push(Series {
                    suffix,
                    labels,
                    value,
                });
            }
        }
    }
}

/// Owned, sanitized label pairs; a repeated name keeps its first value.
fn label_pairs<'a>(labels: impl Iterator<Item = (&'a str, &'a str)>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (k, v) in labels {
        let k = sanitize_label_name(k);
        if !out.iter().any(|(seen, _)| *seen == k) {
            out.push((k, v.to_owned()));
        }
    }
    out
}

fn name_char(c: char, colon: bool) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || (colon && c == ':')
}

fn sanitize(name: &str, colon: bool) -> String {
    let mut out: String = name
        .chars()
        .map(|c| if name_char(c, colon) { c } else { '_' })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

/// `name` as a valid metric name: characters outside
/// `[a-zA-Z0-9_:]` become `_`; an empty name or one starting with a
/// digit gets a leading `_`. A valid name is returned unchanged.
pub fn sanitize_metric_name(name: &str) -> String {
    sanitize(name, true)
}

/// `name` as a valid label name (as [`sanitize_metric_name`], without
/// `:`).
pub fn sanitize_label_name(name: &str) -> String {
    sanitize(name, false)
}

/// Appends a label value with `\`, `"` and newline escaped.
fn escape_label_value(value: &str, out: &mut String) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Appends a HELP text with `\` and newline escaped.
fn escape_help(help: &str, out: &mut String) {
    for c in help.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// A sample value as Prometheus' Go client writes it (`strconv`'s `'g'`
/// format, shortest digits): `NaN`, `+Inf`, `-Inf`; plain decimals for
/// exponents −4 to 5 (`1893`, `0.25`); otherwise scientific with a signed
/// two-digit-or-more exponent (`5e+10`, `1.442917315e+09`, `1e-05`).
pub fn format_value(v: f64) -> String {
    if v.is_nan() {
        return "NaN".to_owned();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned();
    }
    // Rust's `{:e}` gives the shortest round-trip digits: `-1.2345e6`.
    let sci = format!("{v:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let mut out = String::from(sign);
    if !(-4..6).contains(&exp) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(
            out,
            "e{}{:02}",
            if exp < 0 { '-' } else { '+' },
            exp.unsigned_abs()
        );
    } else if exp < 0 {
        out.push_str("0.");
        for _ in 0..(-exp - 1) {
            out.push('0');
        }
        out.push_str(&digits);
    } else {
        let int_len = exp as usize + 1;
        if digits.len() <= int_len {
            out.push_str(&digits);
            for _ in digits.len()..int_len {
                out.push('0');
            }
        } else {
            out.push_str(&digits[..int_len]);
            out.push('.');
            out.push_str(&digits[int_len..]);
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Whether `name` matches `[a-zA-Z_:][a-zA-Z0-9_:]*` (checked by
    /// hand, not through `sanitize`).
    pub(crate) fn is_valid_metric_name(name: &str) -> bool {
        valid_name(name, true)
    }

    /// Whether `name` matches `[a-zA-Z_][a-zA-Z0-9_]*`.
    pub(crate) fn is_valid_label_name(name: &str) -> bool {
        valid_name(name, false)
    }

    fn valid_name(name: &str, colon: bool) -> bool {
        let mut chars = name.chars();
        match chars.next() {
            Some(first) if name_char(first, colon) && !first.is_ascii_digit() => {
                chars.all(|c| name_char(c, colon))
            }
            _ => false,
        }
    }

    /// The lines of `text` that start with `prefix`.
    pub(crate) fn lines_of<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
        text.lines().filter(|l| l.starts_with(prefix)).collect()
    }

    #[test]
    fn values_are_written_as_node_exporter_writes_them() {
        // Strings from node_exporter 1.5.0's /metrics on
        // tests/fixtures/sysfs/complete and from Go's
        // strconv.FormatFloat(v, 'g', -1, 64), which its client uses:
        // decimal for exponents -4..5, else d.ddde±XX.
        let cases: [(f64, &str); 20] = [
            (5e10, "5e+10"),
            (2.5e10, "2.5e+10"),
            (15_011_253_891_833_204.0, "1.5011253891833204e+16"),
            (1_442_917_315.0, "1.442917315e+09"),
            (31_877_402.0, "3.1877402e+07"),
            (1893.0, "1893"),
            (0.0, "0"),
            (-0.0, "-0"),
            (1.0, "1"),
            (4187.0, "4187"),
            (312_500_000.0, "3.125e+08"),
            (123_456.0, "123456"),
            (1_000_000.0, "1e+06"),
            (0.25, "0.25"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.87e-6, "1.87e-06"),
            (-2.5, "-2.5"),
            (1e100, "1e+100"),
            (0.001022552, "0.001022552"),
        ];
        for (v, want) in cases {
            assert_eq!(format_value(v), want, "{v:e}");
        }
        assert_eq!(format_value(f64::NAN), "NaN");
        assert_eq!(format_value(f64::INFINITY), "+Inf");
        assert_eq!(format_value(f64::NEG_INFINITY), "-Inf");
        // Every value reads back as itself.
        for v in [1.0 / 3.0, 123.456e-7, 9_007_199_254_740_993.0, 6.02e23] {
            assert_eq!(format_value(v).parse::<f64>().unwrap(), v);
        }
    }

    #[test]
    fn label_values_and_help_are_escaped() {
        let mut e = Exposition::new();
        e.sample(
            "m",
            "a \\ back\nslash \"quoted\"",
            MetricType::Gauge,
            &[("v", "C:\\dir \"x\"\nnext")],
            1.0,
        );
        assert_eq!(
            e.render(),
            "# HELP m a \\\\ back\\nslash \"quoted\"\n\
             # TYPE m gauge\n\
             m{v=\"C:\\\\dir \\\"x\\\"\\nnext\"} 1\n"
        );
    }

    #[test]
    fn families_are_sorted_contiguous_and_declared_once() {
        let mut e = Exposition::new();
        e.sample("b_total", "B.", MetricType::Counter, &[("k", "1")], 1.0);
        e.sample("a", "A.", MetricType::Gauge, &[], 2.0);
        e.sample(
            "b_total",
            "other help",
            MetricType::Gauge,
            &[("k", "2")],
            3.0,
        );
        // The same series again replaces its value in place.
        e.sample("b_total", "B.", MetricType::Counter, &[("k", "1")], 4.0);
        e.sample("u", "", MetricType::Untyped, &[], f64::NAN);
        let text = e.render();
        assert_eq!(
            text,
            "# HELP a A.\n# TYPE a gauge\na 2\n\
             # HELP b_total B.\n# TYPE b_total counter\n\
             b_total{k=\"1\"} 4\nb_total{k=\"2\"} 3\n\
             # HELP u\n# TYPE u untyped\nu NaN\n"
        );
        assert!(text.ends_with('\n'));
        assert_eq!(e.family_names().collect::<Vec<_>>(), ["a", "b_total", "u"]);
        assert_eq!(Exposition::new().render(), "");
    }

    #[test]
    fn summaries_have_quantiles_sum_and_count() {
        let mut e = Exposition::new();
        e.summary(
            "rpc_seconds",
            "RPC.",
            &[("op", "x"), ("quantile", "dropped")],
            &[(0.5, 0.002), (0.99, 0.01)],
            Some((1.5, 300)),
        );
        assert_eq!(
            e.render(),
            "# HELP rpc_seconds RPC.\n# TYPE rpc_seconds summary\n\
             rpc_seconds{op=\"x\",quantile=\"0.5\"} 0.002\n\
             rpc_seconds{op=\"x\",quantile=\"0.99\"} 0.01\n\
             rpc_seconds_sum{op=\"x\"} 1.5\n\
             rpc_seconds_count{op=\"x\"} 300\n"
        );
    }

    #[test]
    fn bad_names_are_sanitized() {
        assert!(is_valid_metric_name("node_infiniband_info"));
        assert!(is_valid_metric_name("a:b_c9"));
        assert!(!is_valid_metric_name("9a"));
        assert!(!is_valid_metric_name(""));
        assert!(!is_valid_metric_name("a-b"));
        assert!(is_valid_label_name("_x1"));
        assert!(!is_valid_label_name("a:b"));
        assert_eq!(sanitize_metric_name("rx.bytes-total"), "rx_bytes_total");
        assert_eq!(sanitize_metric_name("9lives"), "_9lives");
        assert_eq!(sanitize_metric_name(""), "_");
        assert_eq!(sanitize_metric_name("a:b"), "a:b");
        assert_eq!(sanitize_label_name("a:b"), "a_b");
        assert_eq!(sanitize_label_name("é"), "_");
        let mut e = Exposition::new();
        e.sample(
            "bad name",
            "",
            MetricType::Gauge,
            &[("1x", "v"), ("1x", "w")],
            1.0,
        );
        assert_eq!(
            e.render(),
            "# HELP bad_name\n# TYPE bad_name gauge\nbad_name{_1x=\"v\"} 1\n"
        );
    }
}
