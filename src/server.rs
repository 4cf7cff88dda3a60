//! The server's accept loop, around the sessions the runner drives
//! ([`engine::proto::session`] decides the protocol): the bounded wait for
//! a client, dropping connections that are not clients, turning clients
//! away while busy, `--persistent`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use engine::proto::wire::{self, Message, SideInfo};

use crate::oob::{Channel, Listener};
use crate::options::{ConnectionOptions, RunOptions};
use crate::setup::Port;
use crate::stop::{self, Signal};
use crate::wait::{self, Bell, Woke};

/// Server on `listener` (bound by the caller: a test binary to `-p`,
/// cluster mode to port 0 before it joins) and `port` (opened by the
/// caller before listening): waits (bounded by
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
/// The accept bound, and whatever `serve` returns.
pub fn run_server_on(
    opts: &RunOptions,
    listener: &Listener,
    port: Port,
    mut serve: impl FnMut(&mut Channel, Message, Port, &SideInfo) -> anyhow::Result<u8>,
) -> anyhow::Result<u8> {
    let program = opts.spec.binary();
    let conn = &opts.connection;
    let local_side = port.side_info(opts.local.sysfs.rate_text(port.ctx.name(), port.port));
    if opts.local.banner {
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
            listener.port()
        );
    }
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
            None => next_client(program, listener, conn, deadline),
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
        // Wakes the thread below when the session ends: it sleeps until a
        // connection, this bell or a signal.
        let bell = Bell::new().context("creating the session's end-of-session bell")?;
        let (result, next) = thread::scope(|s| {
            let turning_away = thread::Builder::new()
                .name("busy".into())
                .spawn_scoped(s, || {
                    let ended = SessionEnd {
                        flag: &ended,
                        bell: &bell,
                    };
                    turn_away(program, listener, conn, &ended, session, peer, &test)
                });
            if let Err(e) = &turning_away {
                eprintln!("{program}: cannot start the thread that turns other clients away: {e}");
            }
            let result = serve(&mut ch, hello, port.clone(), &local_side);
            ended.store(true, Ordering::Relaxed);
            bell.ring();
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
    conn: &ConnectionOptions,
    done: &SessionEnd<'_>,
    session: u64,
    client: std::net::SocketAddr,
    test: &str,
) -> Option<(Channel, Message)> {
    let bound = conn.timeout.min(TURN_AWAY_BOUND);
    while !done.flag.load(Ordering::Relaxed) {
        let (stream, addr) = match listener.try_accept() {
            Ok(Some(c)) => c,
            Ok(None) => {
                // Asleep until a connection, the session's end or a
                // signal (after which the session ends too: nothing more
                // to turn away).
                match wait::until_readable(&[listener.fd(), done.bell.fd()], None) {
                    Ok(Woke::Ready(_)) => continue,
                    Ok(Woke::Stop(_)) => return None,
                    Ok(Woke::Deadline) | Err(_) => {
                        thread::sleep(Duration::from_millis(50));
                        continue;
                    }
                }
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
        if conn.persistent && ends_within(done.flag, HANDOVER_GRACE) {
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

/// The end of a session, as the thread that turns clients away sees it:
/// the flag, set when `serve` returns, and the bell rung right after.
struct SessionEnd<'a> {
    flag: &'a AtomicBool,
    bell: &'a Bell,
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
    conn: &ConnectionOptions,
    deadline: Option<Instant>,
) -> anyhow::Result<(Channel, Message)> {
    loop {
        let mut ch = listener.accept(deadline, conn.accept_timeout, conn.timeout)?;
        if let Some(hello) = first_hello(program, &mut ch) {
            return Ok((ch, hello));
        }
    }
}
