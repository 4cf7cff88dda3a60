//! Server and client processes of one test binary on the test device,
//! bounded, for the end-to-end tests.

use std::process::Output;
use std::time::Duration;

use super::{Reaper, free_port, test_device};

/// `-u 18` (a ~1 s ACK timeout: under emulation ACKs are often later than
/// the default 67 ms) and `--timeout 10` unless `extra` sets its own.
pub fn with_default_timeout<'a>(mut args: Vec<&'a str>, extra: &[&'a str]) -> Vec<&'a str> {
    args.extend_from_slice(&["-u", "18"]);
    if !extra.contains(&"--timeout") {
        args.extend_from_slice(&["--timeout", "10"]);
    }
    args.extend_from_slice(extra);
    args
}

/// A server of `bin` on `dev`, listening on 127.0.0.1:`port`.
pub fn server(bin: &str, dev: &str, port: u16, extra: &[&str]) -> Reaper {
    let port = port.to_string();
    let base = vec![
        "-d",
        dev,
        "--bind",
        "127.0.0.1",
        "-p",
        &port,
        "--accept-timeout",
        "30",
    ];
    Reaper::spawn(bin, &with_default_timeout(base, extra))
}

/// A client of `bin` on `dev`, connecting to 127.0.0.1:`port`.
pub fn client(bin: &str, dev: &str, port: u16, extra: &[&str]) -> Reaper {
    let port = port.to_string();
    let mut args = with_default_timeout(vec!["-d", dev, "-p", &port], extra);
    args.push("127.0.0.1");
    Reaper::spawn(bin, &args)
}

/// Runs a server and a client of `bin` with `args` (the server gets
/// `server_extra` only: it takes the test from the client); returns
/// (server, client) outputs.
pub fn pair(bin: &str, args: &[&str], server_extra: &[&str]) -> (Output, Output) {
    let dev = test_device();
    let port = free_port();
    let s = server(bin, &dev, port, server_extra);
    let c = client(bin, &dev, port, args);
    let c = c.wait_bounded(Duration::from_secs(120), "client");
    let s = s.wait_bounded(Duration::from_secs(30), "server");
    (s, c)
}

/// The JSON lines of an output, parsed.
pub fn json_lines(stdout: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// A fake sysfs tree whose port 1 of `dev` has the `rate` text and no
/// error counters (so a verdict on it depends only on the measured
/// bandwidth); removed on drop.
pub struct FakeSysfs(pub super::TempDir);

impl FakeSysfs {
    /// The tree, under the temporary directory, named after `tag`.
    pub fn with_rate(tag: &str, dev: &str, rate: &str) -> Self {
        let dir = super::TempDir::new(tag);
        let port_dir = dir.path("class/infiniband").join(dev).join("ports/1");
        std::fs::create_dir_all(port_dir.join("hw_counters")).unwrap();
        std::fs::write(port_dir.join("rate"), rate).unwrap();
        Self(dir)
    }

    /// Its root, for `--sysfs-root`.
    pub fn root(&self) -> &str {
        self.0.root().to_str().unwrap()
    }
}
