//! A C `printf` for tests: renders perftest's format strings, copied
//! verbatim from its source, so that our rows are compared byte for byte
//! with what perftest's own format would print — never with our output.
//! Covers what those strings use: flags `-`, `#`, `0`, width, precision,
//! length modifiers (ignored), and `d u x f s %`.

/// One argument.
#[derive(Debug, Clone, Copy)]
pub enum CArg<'a> {
    /// An integer (`%d`, `%u`, `%lu`, `%x`).
    U(u64),
    /// A double (`%f`, `%lf`).
    F(f64),
    /// A string (`%s`).
    S(&'a str),
}

/// `sprintf(fmt, args...)`.
///
/// # Panics
/// On a conversion this does not know or too few arguments (a test bug).
pub fn sprintf(fmt: &str, args: &[CArg<'_>]) -> String {
    let mut out = String::new();
    let mut args = args.iter();
    let mut chars = fmt.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let (mut left, mut alt, mut zero) = (false, false, false);
        while let Some(&f) = chars.peek() {
            match f {
                '-' => left = true,
                '#' => alt = true,
                '0' => zero = true,
                _ => break,
            }
            chars.next();
        }
        let mut width = 0usize;
        while let Some(d) = chars.peek().and_then(|c| c.to_digit(10)) {
            width = width * 10 + d as usize;
            chars.next();
        }
        let mut precision = None;
        if chars.peek() == Some(&'.') {
            chars.next();
            let mut p = 0usize;
            while let Some(d) = chars.peek().and_then(|c| c.to_digit(10)) {
                p = p * 10 + d as usize;
                chars.next();
            }
            precision = Some(p);
        }
        while matches!(chars.peek(), Some('l' | 'L' | 'h' | 'z')) {
            chars.next();
        }
        let conv = chars.next().expect("conversion");
        let (prefix, body) = match (conv, args.next()) {
            ('%', _) => {
                out.push('%');
                continue;
            }
            ('d' | 'u', Some(CArg::U(v))) => (String::new(), v.to_string()),
            ('x', Some(CArg::U(v))) => (
                if alt && *v != 0 { "0x" } else { "" }.to_owned(),
                format!("{v:x}"),
            ),
            ('f', Some(CArg::F(v))) => (String::new(), format!("{v:.*}", precision.unwrap_or(6))),
            ('s', Some(CArg::S(v))) => (String::new(), (*v).to_owned()),
            (c, a) => panic!("cannot render %{c} with {a:?}"),
        };
        let len = prefix.len() + body.len();
        let pad = width.saturating_sub(len);
        if left {
            out.push_str(&prefix);
            out.push_str(&body);
            out.extend(std::iter::repeat_n(' ', pad));
        } else if zero {
            out.push_str(&prefix);
            out.extend(std::iter::repeat_n('0', pad));
            out.push_str(&body);
        } else {
            out.extend(std::iter::repeat_n(' ', pad));
            out.push_str(&prefix);
            out.push_str(&body);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_as_c_does() {
        assert_eq!(
            sprintf("%#04x|%#04x", &[CArg::U(0), CArg::U(1)]),
            "0000|0x01"
        );
        assert_eq!(sprintf("%#016llx", &[CArg::U(0x7f12)]), "0x00000000007f12");
        assert_eq!(sprintf("%-7lu|", &[CArg::U(65536)]), "65536  |");
        assert_eq!(
            sprintf("%-7.2lf|%.6lf", &[CArg::F(1.005), CArg::F(0.5)]),
            "1.00   |0.500000"
        );
        assert_eq!(sprintf("%02d:%s%%", &[CArg::U(7), CArg::S("x")]), "07:x%");
    }
}
