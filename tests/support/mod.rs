//! Helpers shared by the RDMA integration tests.
//!
//! The tests need a real RDMA device, named by `RDMAPERF_TEST_DEVICE`
//! (`scripts/test` sets it inside the soft-RoCE VM). Without it they fail:
//! a test that ran against nothing must never count as passed.

#![allow(dead_code, unreachable_pub)]

pub mod exposition;
pub mod peers;

use std::time::{Duration, Instant};

use engine::fabric::gid::{self, GidCandidate};
use std::sync::Arc;

use verbs::{
    AccessFlags, BoundQueuePair, CompletionQueue, ConnectOptions, Context, MemoryRegion,
    ProtectionDomain, QueuePairCaps, WorkCompletion,
};

/// The device the RDMA tests run on. Panics when none is configured.
pub fn test_device() -> String {
    match std::env::var("RDMAPERF_TEST_DEVICE") {
        Ok(d) if !d.is_empty() => d,
        _ => panic!(
            "RDMAPERF_TEST_DEVICE is not set: these tests need an RDMA device \
             (run scripts/test, which boots a soft-RoCE VM, or set it to a real device)"
        ),
    }
}

/// The port the tests use.
pub const PORT: u8 = 1;

/// Bound on every wait for a completion.
pub const WAIT: Duration = Duration::from_secs(10);

/// GID index chosen as perftest's auto-selection would, or `None` on an
/// InfiniBand port (no GRH needed).
pub fn gid_index(ctx: &Context) -> Option<u32> {
    let port = ctx.query_port(PORT).expect("query port");
    assert!(
        port.is_active(),
        "{} port {PORT} is {}, not ACTIVE",
        ctx.name(),
        port.state
    );
    if !port.link_layer.is_ethernet() {
        return None;
    }
    let candidates: Vec<GidCandidate> = ctx
        .gid_table()
        .expect("gid table")
        .into_iter()
        .filter(|g| g.port == PORT)
        .map(|g| GidCandidate {
            index: g.gid_index,
            bytes: g.gid.0,
            kind: rdmaperf::inventory::gid_kind(g.gid_type),
        })
        .collect();
    let best = gid::best_index(&candidates, gid::Family::Ipv4);
    assert!(
        best.is_some(),
        "{} port {PORT} has no valid GID",
        ctx.name()
    );
    best
}

/// One side of a connection: its own device context, PD, CQ, and a QP
/// bound to its MR (the local memory of all its work and the target of the
/// peer's), as a separate host would have.
pub struct Side {
    // Field order is deliberately parents-first: the handles keep their
    // parents alive, so any order must drop cleanly.
    pub ctx: Context,
    pub pd: ProtectionDomain,
    pub cq: CompletionQueue,
    pub qp: BoundQueuePair,
    pub gid_index: Option<u32>,
}

/// The access of a side's MR (and of its QP): what the RDMA tests need
/// besides atomics.
pub const ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ);

impl Side {
    pub fn new(device: &str, mr_len: usize, caps: QueuePairCaps) -> Self {
        Self::with_access(device, mr_len, caps, ACCESS)
    }

    /// A side whose MR is registered with `access`, which its QP also
    /// grants the peer (see [`Side::options`]).
    pub fn with_access(
        device: &str,
        mr_len: usize,
        caps: QueuePairCaps,
        access: AccessFlags,
    ) -> Self {
        Self::on_path(device, mr_len, caps, access, verbs::PostPath::Classic)
    }

    /// As [`Side::with_access`], its QP created for the post path `path`
    /// (the device may fall back: see [`verbs::QueuePair::post_path`]).
    pub fn on_path(
        device: &str,
        mr_len: usize,
        caps: QueuePairCaps,
        access: AccessFlags,
        path: verbs::PostPath,
    ) -> Self {
        let ctx = Context::open(device).expect("open device");
        let gid_index = gid_index(&ctx);
        let pd = ctx.alloc_pd().expect("alloc pd");
        let cq = ctx
            .create_cq(caps.max_send_wr + caps.max_recv_wr)
            .expect("create cq");
        let mr = pd.allocate(mr_len, access).expect("register mr");
        let qp = pd
            .create_rc_qp_on(&cq, &cq, &caps, path)
            .expect("create qp");
        let qp = BoundQueuePair::new(qp, Arc::new(mr)).expect("bind qp to mr");
        Self {
            ctx,
            pd,
            cq,
            qp,
            gid_index,
        }
    }

    /// The MR: source and destination of this side's work, target of the
    /// peer's.
    pub fn mr(&self) -> &MemoryRegion {
        self.qp.region()
    }

    /// A copy of every byte of the MR.
    pub fn bytes(&self) -> Vec<u8> {
        let mut v = vec![0; self.mr().len()];
        self.mr().read_into(0, &mut v).expect("read the MR");
        v
    }

    /// Fills `range` of the MR with pseudo-random bytes and returns them.
    pub fn fill_random(&self, rng: &mut Rng, range: std::ops::Range<usize>) -> Vec<u8> {
        let data = rng.bytes(range.len());
        self.mr()
            .write_bytes(range.start, &data)
            .expect("write the MR");
        data
    }

    /// Connection options: the test port and GID, the active MTU, and the
    /// MR's access granted to the peer.
    pub fn options(&self, psn: u32) -> ConnectOptions {
        ConnectOptions {
            port: PORT,
            gid_index: self.gid_index,
            mtu: self.ctx.query_port(PORT).unwrap().active_mtu,
            psn,
            access: self.mr().access(),
            ..ConnectOptions::default()
        }
    }

    /// Waits for exactly one completion, bounded by [`WAIT`].
    pub fn wait_one(&self) -> WorkCompletion {
        let mut wc = [WorkCompletion::default()];
        let n = self
            .cq
            .poll_until(&mut wc, Instant::now() + WAIT)
            .expect("a completion within the bound");
        assert_eq!(n, 1);
        wc[0].clone()
    }
}

/// Connects two sides' QPs to each other (both RTS).
pub fn connect(a: &mut Side, b: &mut Side) {
    connect_with(a, b, |_| {});
}

/// As [`connect`], with `tweak` applied to both sides' options.
pub fn connect_with(a: &mut Side, b: &mut Side, tweak: impl Fn(&mut ConnectOptions)) {
    let (psn_a, psn_b) = (0x12_3456, 0x65_4321);
    let ea = a.qp.endpoint(PORT, a.gid_index, psn_a).expect("endpoint a");
    let eb = b.qp.endpoint(PORT, b.gid_index, psn_b).expect("endpoint b");
    let (mut oa, mut ob) = (a.options(psn_a), b.options(psn_b));
    tweak(&mut oa);
    tweak(&mut ob);
    a.qp.connect(&oa, &eb).expect("connect a");
    b.qp.connect(&ob, &ea).expect("connect b");
}

/// xorshift64*: deterministic pseudo-random bytes for payloads.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed | 1)
    }

    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.fill(&mut v);
        v
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            let v = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// Open file descriptors of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

/// The device's resource counts from `rdma -j resource show`, e.g.
/// `{"pd": 1, "cq": 1, "qp": 1, "mr": 0, ...}`.
pub fn resource_counts(device: &str) -> serde_json::Map<String, serde_json::Value> {
    let out = std::process::Command::new("rdma")
        .args(["-j", "resource", "show"])
        .output()
        .expect("run `rdma -j resource show` (iproute2)");
    assert!(out.status.success(), "rdma resource show failed: {out:?}");
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).expect("rdma json");
    let entry = all
        .as_array()
        .expect("array")
        .iter()
        .find(|e| e["ifname"] == device)
        .unwrap_or_else(|| panic!("{device} not in `rdma resource show`: {all}"));
    let mut counts = entry.as_object().expect("object").clone();
    counts.remove("ifindex");
    counts.remove("ifname");
    counts
}

/// Connects to a local server on `port`, waiting (at most 20 s) until it
/// listens.
pub fn connect_to_server(port: u16) -> std::net::TcpStream {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => return s,
            Err(e) if Instant::now() > deadline => panic!("server never listened: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// The TCP sockets listening on this host (in this network namespace)
/// now, as (local address, port), read from `/proc/net/tcp{,6}` so no
/// listener is woken by the look. The address is the table's hex: an IPv4
/// one is the 32-bit word in host (little-endian) order.
pub fn tcp_listeners() -> Vec<(String, u16)> {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .flat_map(|table| {
            std::fs::read_to_string(table)
                .unwrap_or_default()
                .lines()
                .skip(1)
                .filter_map(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    let (addr, port) = f.get(1)?.split_once(':')?;
                    // st 0A is TCP_LISTEN (include/net/tcp_states.h).
                    (f.get(3) == Some(&"0A"))
                        .then(|| Some((addr.to_owned(), u16::from_str_radix(port, 16).ok()?)))?
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Waits (at most `limit`) until some process listens on TCP `port`
/// ([`tcp_listeners`]).
pub fn wait_listening(port: u16, limit: Duration) {
    let start = Instant::now();
    while !tcp_listeners().iter().any(|&(_, p)| p == port) {
        assert!(
            start.elapsed() < limit,
            "nothing listened on port {port} within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A path below `tests/fixtures/`, e.g. `fixture("sysfs/ndr")`.
pub fn fixture(path: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(path)
}

/// A free TCP port on loopback (bound and released), never one this
/// process has handed out before: tests running side by side (libtest's
/// threads, or a test's own) could otherwise draw the same port, the
/// kernel being free to give a released port again, and one's server
/// would fail to bind while its client reached the other's.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if GIVEN.lock().unwrap_or_else(|e| e.into_inner()).insert(port) {
            return port;
        }
    }
}

/// A temporary directory, removed on drop; `tag` names it, a counter
/// keeps it apart from every other one of this process.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    /// A new, empty directory.
    pub fn new(tag: &str) -> Self {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "rdmaperf-{tag}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    /// A new directory holding a copy of the tree `from`.
    pub fn copy_of(tag: &str, from: &std::path::Path) -> Self {
        let t = Self::new(tag);
        copy_dir(from, &t.0);
        t
    }

    /// The directory.
    pub fn root(&self) -> &std::path::Path {
        &self.0
    }

    /// `name` inside it.
    pub fn path(&self, name: &str) -> std::path::PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Copies the tree `from` to `to` (files and directories).
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// `GET path` over HTTP/1.0 from 127.0.0.1:`port`: (status, body), every
/// read and write bounded by `limit` (status 0 when the answer is not
/// HTTP).
pub fn http_get(port: u16, path: &str, limit: Duration) -> std::io::Result<(u16, String)> {
    http_get_with(port, path, &[], limit)
}

/// As [`http_get`], with extra header fields (`Name: value` each), as
/// Prometheus sends `X-Prometheus-Scrape-Timeout-Seconds`.
pub fn http_get_with(
    port: u16,
    path: &str,
    headers: &[&str],
    limit: Duration,
) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(limit))?;
    s.set_write_timeout(Some(limit))?;
    let mut head = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n");
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok((status, body.to_owned()))
}

/// Lossy UTF-8 of a process's output.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `out` is a usage error: exit 2, its stderr naming `needle` (the flag),
/// nothing on stdout; `context` (the arguments) is shown on a failure.
pub fn assert_usage_error(out: &std::process::Output, needle: &str, context: &str) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{context}: {stderr}");
    assert!(stderr.contains(needle), "{context}: {stderr}");
    assert!(out.stdout.is_empty(), "{context}: {}", text(&out.stdout));
}

/// The numeric rows of a perftest table whose header is `header` (which
/// must be there): every line that starts with a space and a digit, each
/// field a number.
pub fn table_rows(stdout: &str, header: &str) -> Vec<Vec<f64>> {
    assert!(
        stdout.lines().any(|l| l == header),
        "no perftest header {header:?} in:\n{stdout}"
    );
    stdout
        .lines()
        .filter(|l| l.starts_with(' ') && l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| {
            l.split_whitespace()
                .map(|f| f.parse().unwrap_or_else(|_| panic!("{f:?} in {l:?}")))
                .collect()
        })
        .collect()
}

/// A spawned binary that is killed when dropped unwaited (a failing test
/// must not leave a spinning peer behind to starve the next test).
pub struct Reaper(Option<std::process::Child>, Option<Drains>);

/// Threads reading a child's stdout and stderr from its start: a process
/// that writes more than a pipe holds (the banner of 256 QPs is ~100 KB)
/// would otherwise block on the write until the test reads its output.
type Drains = (
    std::thread::JoinHandle<Vec<u8>>,
    std::thread::JoinHandle<Vec<u8>>,
);

fn drain(pipe: Option<impl std::io::Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut buf);
        }
        buf
    })
}

impl Reaper {
    /// Spawns `bin` with `args`, stdout and stderr captured.
    pub fn spawn(bin: &str, args: &[&str]) -> Self {
        Self::spawn_env(bin, args, &[])
    }

    /// As [`Reaper::spawn`], with `env` added to the environment.
    pub fn spawn_env(bin: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::spawn_in(bin, args, env, None)
    }

    /// As [`Reaper::spawn_env`], in the working directory `dir` when given.
    pub fn spawn_in(
        bin: &str,
        args: &[&str],
        env: &[(&str, &str)],
        dir: Option<&std::path::Path>,
    ) -> Self {
        let mut cmd = std::process::Command::new(bin);
        if let Some(d) = dir {
            cmd.current_dir(d);
        }
        let mut child = cmd
            .args(args)
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {bin}: {e}"));
        let drains = (drain(child.stdout.take()), drain(child.stderr.take()));
        Self(Some(child), Some(drains))
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.0.as_ref().expect("process already reaped").id()
    }

    /// Sends `signal` (a name `kill` knows: `INT`, `TERM`, `STOP`, `KILL`).
    pub fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &self.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {}", self.id());
    }

    /// Waits (at most `limit`) until the process has stopped itself
    /// (state `T` in /proc/PID/stat); panics if it exits or does not stop.
    pub fn wait_stopped(&mut self, limit: Duration) {
        let start = Instant::now();
        loop {
            let stat =
                std::fs::read_to_string(format!("/proc/{}/stat", self.id())).unwrap_or_default();
            // The state follows the parenthesised command name.
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next());
            if state == Some("T") {
                return;
            }
            let child = self.0.as_mut().expect("process already reaped");
            if let Some(status) = child.try_wait().unwrap() {
                // What it said is what tells why (a slow machine's bound?).
                let stderr = self
                    .1
                    .take()
                    .map(|(_, e)| e.join().unwrap_or_default())
                    .unwrap_or_default();
                panic!(
                    "process exited ({status}) before it stopped itself; stderr:\n{}",
                    text(&stderr)
                );
            }
            assert!(
                start.elapsed() < limit,
                "process did not stop within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits (at most `limit`) until the process catches SIGINT and SIGTERM
    /// (bits 2 and 15 of `SigCgt` in /proc/PID/status): its handlers are
    /// installed.
    pub fn wait_handlers(&self, limit: Duration) {
        let start = Instant::now();
        let want = (1u64 << 1) | (1u64 << 14);
        loop {
            let status =
                std::fs::read_to_string(format!("/proc/{}/status", self.id())).unwrap_or_default();
            let caught = status
                .lines()
                .find_map(|l| l.strip_prefix("SigCgt:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
                .unwrap_or(0);
            if caught & want == want {
                return;
            }
            assert!(
                start.elapsed() < limit,
                "no SIGINT/SIGTERM handlers within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the process now and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.0.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// Waits for the process with a bound; kills it and panics (showing its
    /// output) when the bound is exceeded.
    pub fn wait_bounded(mut self, limit: Duration, what: &str) -> std::process::Output {
        let mut child = self.0.take().expect("process already reaped");
        let start = Instant::now();
        let (status, timed_out) = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break (status, false);
            }
            if start.elapsed() > limit {
                let _ = child.kill();
                break (child.wait().unwrap(), true);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let (stdout, stderr) = self.1.take().expect("output already taken");
        let out = std::process::Output {
            status,
            stdout: stdout.join().unwrap_or_default(),
            stderr: stderr.join().unwrap_or_default(),
        };
        if timed_out {
            panic!(
                "{what} did not exit within {limit:?}\nstdout:\n{}\nstderr:\n{}",
                text(&out.stdout),
                text(&out.stderr)
            );
        }
        out
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Lets `client` run against `server` for 4 s, kills the server, and
/// checks that the client then fails (non-zero exit, an error on stderr)
/// within 15 s: no hang on a dead peer.
pub fn assert_client_fails_soon_after_the_server_dies(mut server: Reaper, client: Reaper) {
    std::thread::sleep(Duration::from_secs(4));
    server.kill();
    let killed = Instant::now();
    let out = client.wait_bounded(Duration::from_secs(30), "client");
    assert!(
        !out.status.success(),
        "client succeeded against a dead server"
    );
    assert!(
        killed.elapsed() < Duration::from_secs(15),
        "client took {:?}",
        killed.elapsed()
    );
    assert!(text(&out.stderr).contains("error"), "{}", text(&out.stderr));
}

/// Asserts that a process exited successfully, showing its output when not.
pub fn assert_ok(out: &std::process::Output, who: &str) {
    assert!(
        out.status.success(),
        "{who} failed ({:?})\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// Runs `bin` as a client (`BASE --timeout 2 ARGS 127.0.0.1`, BASE e.g.
/// `-d DEV -p PORT`) with each case's flags, and checks that it exits 2
/// naming the flag, prints no results and never tries to connect.
pub fn assert_each_bad_flag_exits_2(bin: &str, base: &[&str], cases: &[(&[&str], &str)]) {
    for (args, flag) in cases {
        let mut all = base.to_vec();
        all.extend_from_slice(&["--timeout", "2"]);
        all.extend_from_slice(args);
        all.push("127.0.0.1");
        let out = Reaper::spawn(bin, &all).wait_bounded(Duration::from_secs(20), "client");
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: expected {flag} in {err}");
        assert!(out.stdout.is_empty(), "{args:?} printed results");
        assert!(
            !err.contains("cannot connect"),
            "{args:?} tried to connect: {err}"
        );
    }
}

/// Writes `len` random bytes from `a` at `src` into `b` at `dst`, then
/// checks every byte of `b`: the range holds the source, the rest is
/// unchanged.
pub fn write_and_verify(
    a: &Side,
    b: &Side,
    rng: &mut Rng,
    len: usize,
    src: usize,
    dst: usize,
    inline: bool,
) {
    let before = b.bytes();
    let data = a.fill_random(rng, src..src + len);
    let sge = a.mr().sge(src..src + len).unwrap();
    let remote = b
        .mr()
        .remote()
        .slice(dst as u64..(dst + len) as u64)
        .unwrap();
    let wr = verbs::SendWr::write(0x1000 + len as u64, sge, remote)
        .unwrap()
        .inline(inline);
    a.qp.post_send(&wr).unwrap();
    let wc = a.wait_one();
    assert!(wc.is_success(), "write of {len} B: {:?}", wc.status());
    assert_eq!(
        (wc.opcode(), wc.wr_id()),
        (verbs::WcOpcode::RdmaWrite, 0x1000 + len as u64)
    );
    let got = b.bytes();
    assert_eq!(&got[dst..dst + len], &data[..], "payload of {len} B");
    assert_eq!(
        &got[..dst],
        &before[..dst],
        "bytes before the range changed"
    );
    assert_eq!(
        &got[dst + len..],
        &before[dst + len..],
        "bytes after the range changed"
    );
}

/// Debian's promtool (package `prometheus`, which scripts/setup installs;
/// the VM runs over the host's filesystem, so it is there too).
pub const PROMTOOL: &str = "/usr/bin/promtool";

/// Asserts that `promtool check metrics` accepts `exposition` with no
/// problem at all (its exit code 0 and nothing printed: lint findings
/// such as naming hints fail it too). `what` names the exposition.
pub fn assert_promtool_clean(exposition: &str, what: &str) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    assert!(
        std::path::Path::new(PROMTOOL).exists(),
        "{PROMTOOL} is missing: run scripts/setup (it installs Debian's prometheus)"
    );
    let mut child = Command::new(PROMTOOL)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {PROMTOOL}: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(exposition.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics on {what}: {}\n{}{}\n--- exposition ---\n{exposition}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
}
