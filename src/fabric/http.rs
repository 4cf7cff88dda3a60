//! The little HTTP/1.x the exporter needs: read one `GET` request head
//! (bounded in size and time), answer it, close. No keep-alive, no
//! bodies in requests; a scraper (Prometheus, curl) needs no more.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The largest request head read; a longer one is refused (431).
pub const MAX_HEAD_BYTES: usize = 8 * 1024;

/// How long a client may take to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// A request line, split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `HEAD`, ….
    pub method: String,
    /// The path, percent-decoded, without the query.
    pub path: String,
    /// The query's `name=value` pairs, percent-decoded, in order.
    pub query: Vec<(String, String)>,
    /// The header fields, `(name, value)`, the value trimmed, in order
    /// (the head is at most [`MAX_HEAD_BYTES`]).
    pub headers: Vec<(String, String)>,
}

impl Request {
    /// The first value of header field `name` (case-insensitive, as HTTP
    /// field names are).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The first value of query parameter `name`.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Why a request could not be read; each maps to a status code.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The head did not end within [`MAX_HEAD_BYTES`].
    #[error("request head longer than {MAX_HEAD_BYTES} bytes")]
    TooLarge,
    /// Not `METHOD TARGET HTTP/1.x`, or bad percent-encoding.
    #[error("malformed request: {0}")]
    Malformed(String),
    /// The client went quiet or away.
    #[error("reading the request: {0}")]
    Io(#[from] io::Error),
}

/// Reads one request head from `stream` within [`HEAD_TIMEOUT`] in all.
///
/// # Errors
/// [`RequestError`].
pub fn read_request(stream: &mut TcpStream) -> Result<Request, RequestError> {
    let deadline = Instant::now() + HEAD_TIMEOUT;
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    loop {
        if let Some(end) = find_head_end(&head) {
            head.truncate(end);
            break;
        }
        if head.len() >= MAX_HEAD_BYTES {
            return Err(RequestError::TooLarge);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(
                io::Error::new(io::ErrorKind::TimedOut, "request head not complete").into(),
            );
        }
        stream.set_read_timeout(Some(left))?;
        let want = (MAX_HEAD_BYTES - head.len()).min(buf.len());
        let n = stream.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "closed before the request ended",
            )
            .into());
        }
        head.extend_from_slice(&buf[..n]);
    }
    parse_request_line(&String::from_utf8_lossy(&head))
}

/// The end of the head (`\r\n\r\n` or `\n\n`), if present.
fn find_head_end(bytes: &[u8]) -> Option<usize> {
    let crlf = bytes.windows(4).position(|w| w == b"\r\n\r\n");
    let lf = bytes.windows(2).position(|w| w == b"\n\n");
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Parses a request head: its request line and header fields (a line
/// that is not `Name: value` is skipped).
///
/// # Errors
/// [`RequestError::Malformed`] for the request line.
pub fn parse_request_line(head: &str) -> Result<Request, RequestError> {
    let mut lines = head.lines();
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(RequestError::Malformed(format!("request line {line:?}")));
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || !target.starts_with('/') {
        return Err(RequestError::Malformed(format!("request line {line:?}")));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let bad = |what: &str| RequestError::Malformed(format!("bad percent-encoding in {what:?}"));
    let path = percent_decode(path).ok_or_else(|| bad(path))?;
    let mut pairs = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        pairs.push((
            percent_decode(name).ok_or_else(|| bad(name))?,
            percent_decode(value).ok_or_else(|| bad(value))?,
        ));
    }
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .filter(|(name, _)| !name.is_empty() && !name.contains(' '))
        .map(|(name, value)| (name.to_owned(), value.trim().to_owned()))
        .collect();
    Ok(Request {
        method: method.to_owned(),
        path,
        query: pairs,
        headers,
    })
}

/// Decodes `%XX` and `+` (a space, as forms encode it); `None` for a bad
/// escape or bytes that are not UTF-8.
pub fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Writes a whole response and closes the write side.
///
/// # Errors
/// I/O errors (the client went away).
pub fn respond(
    stream: &mut TcpStream,
    status: u16,
    content_type: &str,
    body: &str,
    head_only: bool,
) -> io::Result<()> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Error",
    };
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    let mut response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if !head_only {
        response.push_str(body);
    }
    stream.write_all(response.as_bytes())?;
    stream.flush()?;
    let _ = stream.shutdown(std::net::Shutdown::Write);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_url_is_split_and_decoded() {
        let r = parse_request_line(
            "GET /probe?target=%5Bfe80%3A%3A1%5D%3A18515&test=write_bw&size=4096&x HTTP/1.1\r\nHost: a\r\n",
        )
        .unwrap();
        assert_eq!(r.method, "GET");
        assert_eq!(r.path, "/probe");
        assert_eq!(r.param("target"), Some("[fe80::1]:18515"));
        assert_eq!(r.param("size"), Some("4096"));
        assert_eq!(r.param("x"), Some(""));
        assert_eq!(r.param("duration"), None);
        assert_eq!(r.header("host"), Some("a"));
    }

    #[test]
    fn header_fields_are_found_by_any_case_of_their_name() {
        // What Prometheus sends with every scrape.
        let r = parse_request_line(
            "GET /probe?target=n HTTP/1.1\r\nHost: x:9880\r\nUser-Agent: Prometheus/2.45.3\r\n\
             X-Prometheus-Scrape-Timeout-Seconds: 10\r\nnot a header\r\n",
        )
        .unwrap();
        assert_eq!(r.header("x-prometheus-scrape-timeout-seconds"), Some("10"));
        assert_eq!(r.header("User-Agent"), Some("Prometheus/2.45.3"));
        assert_eq!(r.header("Accept"), None);
        assert_eq!(r.headers.len(), 3);
    }

    #[test]
    fn malformed_requests_are_refused_not_guessed() {
        for bad in [
            "",
            "GET",
            "GET /metrics",
            "GET metrics HTTP/1.1",
            "GET /metrics SMTP/1.0",
            "GET /a b HTTP/1.1",
            "GET /probe?target=%zz HTTP/1.1",
            "GET /probe?target=%e2%82 HTTP/1.1",
        ] {
            assert!(
                matches!(parse_request_line(bad), Err(RequestError::Malformed(_))),
                "{bad:?}"
            );
        }
        assert_eq!(percent_decode("a+b%20c").as_deref(), Some("a b c"));
        assert_eq!(percent_decode("%4"), None);
    }

    #[test]
    fn the_head_ends_at_the_first_blank_line() {
        assert_eq!(find_head_end(b"GET / HTTP/1.0\r\n\r\nbody"), Some(14));
        assert_eq!(find_head_end(b"GET / HTTP/1.0\n\n"), Some(14));
        assert_eq!(find_head_end(b"GET / HTTP/1.0\r\n"), None);
    }
}
