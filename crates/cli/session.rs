//! The handshake steps of the control protocol, for the runner: hello and
//! accept (or reject), barriers, goodbye, the server's bounded wait for a
//! client, protocol error messages, progress on a terminal.

use std::io::{self, IsTerminal};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use engine::bench::config::ConfigError;
use engine::proto::wire::{self, Message, QpInfo, SideInfo};
use serde::de::DeserializeOwned;
use verbs::Mtu;

use crate::oob::{Channel, Listener};
use crate::setup::Port;
use crate::stop::{self, Signal};

/// Client: sends the test and its side (with the path MTU it proposes),
/// returns the server's side, QPs and the MTU it chose.
///
/// # Errors
/// A rejection (with the server's reason), a protocol or channel error.
pub fn client_hello(
    ch: &mut Channel,
    test: &str,
    config: serde_json::Value,
    side: &SideInfo,
    mtu: Mtu,
    qps: Vec<QpInfo>,
) -> anyhow::Result<(SideInfo, Vec<QpInfo>, Mtu)> {
    // The server creates as many QPs as we offer before it answers
    // (connecting them while we connect ours), sending heartbeats
    // meanwhile.
    let bound = crate::oob::Bound::setup_of(qps.len(), ch.timeout());
    ch.send(&Message::Hello {
        test: test.into(),
        config,
        side: with_mtu(side, mtu),
        qps,
    })?;
    match ch.recv_within("the server's answer", bound)? {
        Message::Accept { side, qps, mtu } => {
            let mtu =
                Mtu::from_bytes(mtu).ok_or_else(|| anyhow!("server chose an invalid MTU {mtu}"))?;
            Ok((side, qps, mtu))
        }
        Message::Busy { reason } => Err(anyhow!(
            "server {} is busy: {}",
            ch.peer(),
            engine::proto::wire::printable(&reason, engine::proto::wire::MAX_PEER_TEXT)
        )),
        other => Err(expect_msg(other, "accept")),
    }
}

/// `side` as sent in the handshake: with the path MTU in use.
fn with_mtu(side: &SideInfo, mtu: Mtu) -> SideInfo {
    SideInfo {
        mtu: mtu.bytes(),
        ..side.clone()
    }
}

/// Client: the barrier that starts phase `phase` (the client sends first,
/// the server answers).
///
/// # Errors
/// A protocol or channel error.
pub fn client_barrier(
    ch: &mut Channel,
    phase: u32,
    bound: crate::oob::Bound,
) -> anyhow::Result<()> {
    ch.send(&Message::Barrier { phase })?;
    match ch.recv_within("the start barrier", bound)? {
        Message::Barrier { phase: p } if p == phase => Ok(()),
        other => Err(expect_msg(other, "barrier")),
    }
}

/// Client: the closing `Bye` exchange.
///
/// # Errors
/// A protocol or channel error.
pub fn client_goodbye(ch: &mut Channel) -> anyhow::Result<()> {
    ch.send(&Message::Bye)?;
    match ch.recv("goodbye")? {
        Message::Bye => Ok(()),
        other => Err(expect_msg(other, "bye")),
    }
}

/// Server: waits for the client's next step. `Some(size)` when the client
/// starts phase `phase` (its barrier not yet answered: the caller answers
/// when ready); `None` after the client's goodbye (answered).
///
/// # Errors
/// A protocol or channel error, or a phase beyond the test's sizes.
pub fn server_next_phase(
    ch: &mut Channel,
    phase: u32,
    sizes: &[u64],
    endless: bool,
    bound: crate::oob::Bound,
) -> anyhow::Result<Option<u64>> {
    match ch.recv_within("the next phase", bound)? {
        Message::Barrier { phase: p } if p == phase => {
            let size = sizes
                .get(phase as usize)
                .or_else(|| sizes.last().filter(|_| endless));
            let size = size.ok_or_else(|| {
                anyhow!(
                    "client started phase {phase} of a {}-size test",
                    sizes.len()
                )
            })?;
            Ok(Some(*size))
        }
        Message::Bye => {
            ch.send(&Message::Bye)?;
            Ok(None)
        }
        other => Err(expect_msg(other, "barrier")),
    }
}

/// Server, after the goodbye: every size must have run.
///
/// # Errors
/// When the client ended after `phases` of them.
pub fn server_all_phases_run(phases: u32, sizes: &[u64]) -> anyhow::Result<()> {
    if phases as usize != sizes.len() {
        anyhow::bail!("client ended after {phases} of {} sizes", sizes.len());
    }
    Ok(())
}

/// Server: what the client asked for.
#[derive(Debug)]
pub struct Hello<C> {
    /// The test configuration, decoded and valid.
    pub config: C,
    /// The client's side.
    pub side: SideInfo,
    /// The client's QPs.
    pub qps: Vec<QpInfo>,
}

/// Server: receives the client's `Hello` for `test` and decodes and
/// `validate`s its configuration, rejecting (and telling the client) any
/// other test, a malformed or an invalid configuration.
///
/// # Errors
/// A protocol or channel error, or the rejection.
pub fn server_hello<C: DeserializeOwned>(
    ch: &mut Channel,
    first: Message,
    test: &str,
    validate: impl FnOnce(&C) -> Result<(), ConfigError>,
) -> anyhow::Result<Hello<C>> {
    match first {
        Message::Hello {
            test: asked,
            config,
            side,
            qps,
        } => {
            if asked != test {
                return Err(reject(
                    ch,
                    format!(
                        "this server runs {test}, the client asked for {:?}",
                        engine::proto::wire::printable(&asked, 64)
                    ),
                ));
            }
            let config: C = match serde_json::from_value(config) {
                Ok(c) => c,
                Err(e) => return Err(reject(ch, format!("malformed configuration: {e}"))),
            };
            if let Err(e) = validate(&config) {
                return Err(reject(ch, format!("invalid configuration: {e}")));
            }
            Ok(Hello { config, side, qps })
        }
        other => Err(expect_msg(other, "hello")),
    }
}

/// Server: accepts the test, sending our side and QPs and the path MTU.
///
/// # Errors
/// A channel error.
pub fn server_accept(
    ch: &mut Channel,
    side: &SideInfo,
    mtu: Mtu,
    qps: Vec<QpInfo>,
) -> anyhow::Result<()> {
    ch.send(&Message::Accept {
        side: with_mtu(side, mtu),
        qps,
        mtu: mtu.bytes(),
    })
}

/// Server: tells the client why its test is refused, and returns the
/// error for this side.
pub fn reject(ch: &mut Channel, reason: String) -> anyhow::Error {
    let _ = ch.send(&Message::Reject {
        reason: reason.clone(),
    });
    anyhow!("refused the client's test: {reason}")
}

/// Server: the path MTU, the smaller of both sides' (a requested `-m`
/// above ours is said, and ours used, as perftest).
pub fn server_mtu(port: &Port, requested: Option<u32>, client_mtu: u32) -> Mtu {
    let ours = port.attr.active_mtu;
    if let Some(req) = requested
        && req > ours.bytes()
    {
        // As perftest: the active MTU, said, not a refusal.
        eprintln!(
            "note: the client's -m/--mtu {req} is above this port's active MTU {}; using the smaller MTU of both sides",
            ours.bytes()
        );
    }
    ours.min(Mtu::from_bytes(client_mtu).unwrap_or(Mtu::Mtu256))
}

/// Shows progress on stderr, only when it is a terminal.
pub fn show_progress(msg: &str) {
    if io::stderr().is_terminal() {
        eprint!("\r{msg}\x1b[K");
    }
}

/// The error for an unexpected message (a `Reject` carries its reason).
pub fn expect_msg(got: Message, want: &str) -> anyhow::Error {
    match got {
        Message::Reject { reason } => anyhow!(
            "the peer refused the test: {}",
            engine::proto::wire::printable(&reason, engine::proto::wire::MAX_PEER_TEXT)
        ),
        other => anyhow!("protocol error: expected {want}, got {}", other.name()),
    }
}

/// The port's negotiated rate text from sysfs, when readable.
pub fn sysfs_rate(sysfs_root: &Path, port: &Port) -> Option<String> {
    crate::sysfs::read_rate(sysfs_root, port.ctx.name(), port.port)
        .ok()
        .map(|r| r.text)
}

/// Server: opens the device and port, waits (bounded by
/// `--accept-timeout`) for one client — dropping, with one line on stderr,
/// every connection that does not open with a valid `Hello` within
/// `--timeout` — and runs `serve` on it with that `Hello`; a failure is
/// also reported to the client. While a session runs, other clients are
/// told the server is busy ([`Message::Busy`]). `--persistent`: serves
/// clients one after another until stopped. SIGINT/SIGTERM abort the
/// session in progress (the client is told) and end the server: exit
/// 130/143, or 0 for a persistent server stopped by SIGTERM.
///
/// # Errors
/// Device and usage errors before listening, the accept bound, and
/// whatever `serve` returns.
pub fn run_server(
    program: &str,
    conn: &crate::args::ConnectionArgs,
    device: &crate::args::DeviceArgs,
    sysfs_root: &Path,
    mut serve: impl FnMut(&mut Channel, Message, Port, &SideInfo) -> anyhow::Result<u8>,
) -> anyhow::Result<u8> {
    let port = crate::setup::open_port(device.ib_dev.as_deref(), device.ib_port, conn.gid_index)?;
    let local_side = port.side_info(sysfs_rate(sysfs_root, &port));
    let listener = Listener::bind(&conn.bind, conn.port)?;
    eprintln!(
        "{program}: server on {} port {} waiting for {} on {}:{}",
        port.ctx.name(),
        port.port,
        if conn.persistent {
            "clients (--persistent)"
        } else {
            "a client"
        },
        conn.bind,
        conn.port
    );
    let mut session = 0u64;
    // A client that came in as a session ended, handed over by the thread
    // that turns clients away.
    let mut handed_over: Option<(Channel, Message)> = None;
    let stopped = |sig: Signal, session: u64| {
        eprintln!("{program}: stopped by {sig} after {session} sessions");
        Ok(if conn.persistent && sig == Signal::Term {
            0
        } else {
            sig.exit_code()
        })
    };
    loop {
        let deadline = if conn.persistent {
            None
        } else {
            Some(Instant::now() + conn.accept_timeout)
        };
        let next = match handed_over.take() {
            Some(c) => Ok(c),
            None => next_client(program, &listener, conn, deadline),
        };
        let (mut ch, hello) = match next {
            Ok(c) => c,
            Err(e) => match stop::interrupted_by(&e) {
                Some(sig) => return stopped(sig, session),
                None => return Err(e),
            },
        };
        session += 1;
        let peer = ch.peer();
        let test = match &hello {
            Message::Hello { test, .. } => wire::printable(test, 64),
            _ => String::new(),
        };
        // The session's resources (QPs, CQs, memory) live in `serve` and
        // are gone when it returns. Meanwhile other clients are turned away.
        let ended = AtomicBool::new(false);
        let (result, next) = thread::scope(|s| {
            let turning_away = thread::Builder::new()
                .name("busy".into())
                .spawn_scoped(s, || {
                    turn_away(program, &listener, conn, &ended, session, peer, &test)
                });
            if let Err(e) = &turning_away {
                eprintln!("{program}: cannot start the thread that turns other clients away: {e}");
            }
            let result = serve(&mut ch, hello, port.clone(), &local_side);
            ended.store(true, Ordering::Relaxed);
            let next = turning_away.ok().and_then(|t| t.join().ok()).flatten();
            (result, next)
        });
        handed_over = next;
        if let Err(e) = &result {
            if let Some(sig) = stop::interrupted_by(e) {
                // Wherever the session was (setup included), the client is
                // told; `serve` reported what it measured.
                ch.send_error(&format!("server interrupted by {sig}"));
                eprintln!("{program}: session {session} with {peer}: interrupted by {sig}");
                return stopped(sig, session);
            }
            ch.send_error(&format!("server failed: {e:#}"));
        }
        if !conn.persistent {
            return result;
        }
        match result {
            Ok(code) => {
                eprintln!("{program}: session {session} with {peer}: done (exit code {code})")
            }
            Err(e) => eprintln!("{program}: session {session} with {peer}: failed: {e:#}"),
        }
    }
}

/// While session `session` with `client` runs: answers every other client
/// with [`Message::Busy`] (after reading its hello, within a short bound,
/// so the answer is not lost to a reset) and drops any other connection,
/// one line on stderr each, until `done` is set. A persistent server's
/// client whose hello is read after the session ended, or that ends within
/// [`HANDOVER_GRACE`], is returned, to be served next (a client that
/// starts or retries at once after its session is not
/// told "busy").
fn turn_away(
    program: &str,
    listener: &Listener,
    conn: &crate::args::ConnectionArgs,
    done: &AtomicBool,
    session: u64,
    client: std::net::SocketAddr,
    test: &str,
) -> Option<(Channel, Message)> {
    let bound = conn.timeout.min(TURN_AWAY_BOUND);
    while !done.load(Ordering::Relaxed) {
        let (stream, addr) = match listener.try_accept() {
            Ok(Some(c)) => c,
            Ok(None) => {
                thread::sleep(Duration::from_millis(50));
                continue;
            }
            Err(e) => {
                eprintln!("{program}: accepting a connection while busy: {e}");
                thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let Ok(mut ch) = Channel::new(stream, bound) else {
            continue;
        };
        let Some(hello) = first_hello(program, &mut ch) else {
            continue;
        };
        if conn.persistent && ends_within(done, HANDOVER_GRACE) {
            ch.set_timeout(conn.timeout);
            return Some((ch, hello));
        }
        let _ = ch.send(&Message::Busy {
            reason: format!(
                "it is running a {test} session (session {session}) for {client}; \
                 try again when it ends"
            ),
        });
        eprintln!(
            "{program}: turned away a client from {addr}: busy with session {session} ({client})"
        );
    }
    None
}

/// Whether `done` is set within `grace` (polled every 10 ms).
fn ends_within(done: &AtomicBool, grace: Duration) -> bool {
    let until = Instant::now() + grace;
    loop {
        if done.load(Ordering::Relaxed) {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// The `Hello` a new connection opens with, or `None` after one stderr
/// line saying why the connection is not a client (it is then dropped).
fn first_hello(program: &str, ch: &mut Channel) -> Option<Message> {
    match ch.recv_first("the client's test") {
        Ok(msg @ Message::Hello { .. }) => Some(msg),
        Ok(other) => {
            eprintln!(
                "{program}: dropped a connection from {}: it sent {} before hello",
                ch.peer(),
                other.name()
            );
            None
        }
        Err(e) => {
            eprintln!("{program}: dropped a connection from {}: {e:#}", ch.peer());
            None
        }
    }
}

/// Longest a busy server waits for a second client's hello before it drops
/// the connection.
const TURN_AWAY_BOUND: Duration = Duration::from_secs(2);
/// How long a persistent server's busy thread waits for the session to
/// end before it answers `Busy`: the session's client has its answer
/// (results or a refusal) before the server has torn the session down, so
/// a client started right after it would otherwise be told "busy".
const HANDOVER_GRACE: Duration = Duration::from_secs(1);

/// Waits for the next real client (until `deadline`, or for ever): a
/// connection that is not a client — a port probe, a health check, junk,
/// another protocol or version, a peer that does not send a whole first
/// message within `--timeout` — is logged and dropped.
fn next_client(
    program: &str,
    listener: &Listener,
    conn: &crate::args::ConnectionArgs,
    deadline: Option<Instant>,
) -> anyhow::Result<(Channel, Message)> {
    loop {
        let mut ch = listener.accept(deadline, conn.accept_timeout, conn.timeout)?;
        if let Some(hello) = first_hello(program, &mut ch) {
            return Ok((ch, hello));
        }
    }
}
