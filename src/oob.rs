//! The out-of-band TCP channel between client and server: bounded connect,
//! bounded reads, framed messages (`engine::proto::wire`), and a heartbeat while a
//! measured phase runs so a silent peer is told from a slow one.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use engine::cluster::messages::ClusterMessage;
pub use engine::proto::session::Bound;
use engine::proto::wire::{self, Message, WireError};
use nix::sys::socket::{MsgFlags, recv};

use crate::stop::{self, Interrupted};
use crate::wait::{self, Woke};

/// How often a side that is busy measuring tells its peer it is alive.
pub const HEARTBEAT_EVERY: Duration = Duration::from_millis(500);

/// The server's listening socket.
#[derive(Debug)]
pub struct Listener {
    inner: TcpListener,
    bind: String,
    port: u16,
}

impl Listener {
    /// Listens on `bind:port`.
    ///
    /// # Errors
    /// When binding fails.
    pub fn bind(bind: &str, port: u16) -> anyhow::Result<Self> {
        let inner = TcpListener::bind((bind, port))
            .with_context(|| format!("cannot listen on {bind}:{port}"))?;
        inner.set_nonblocking(true)?;
        // Port 0: the port the kernel chose.
        let port = inner.local_addr().map_or(port, |a| a.port());
        Ok(Self {
            inner,
            bind: bind.to_owned(),
            port,
        })
    }

    /// The port it listens on (the kernel's choice when bound to 0).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The next connection, accepted before `deadline` if there is one
    /// (`accept_timeout` names the bound in the error); its reads and
    /// writes are bounded by `timeout`.
    ///
    /// # Errors
    /// When no client comes in time, or accepting fails.
    pub fn accept(
        &self,
        deadline: Option<Instant>,
        accept_timeout: Duration,
        timeout: Duration,
    ) -> anyhow::Result<Channel> {
        loop {
            match self.inner.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(false)?;
                    return Channel::new(stream, timeout);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Asleep until a connection, a signal or the deadline.
                    match wait::until_readable(&[self.fd()], deadline)
                        .context("waiting for a client")?
                    {
                        Woke::Ready(_) => {}
                        Woke::Stop(sig) => return Err(Interrupted(sig).into()),
                        Woke::Deadline => bail!(
                            "no client connected to {}:{} within {accept_timeout:?} (--accept-timeout)",
                            self.bind,
                            self.port
                        ),
                    }
                }
                Err(e) => return Err(e).context("accepting a client"),
            }
        }
    }

    /// Another handle on the listening socket (a duplicated descriptor),
    /// for an event loop that takes ownership of it.
    ///
    /// # Errors
    /// When the descriptor cannot be duplicated.
    pub fn try_clone_std(&self) -> io::Result<TcpListener> {
        self.inner.try_clone()
    }

    /// The listening socket, for a wait on the next connection.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.inner.as_fd()
    }

    /// A connection waiting to be accepted, if one is (never blocks).
    ///
    /// # Errors
    /// When accepting fails.
    pub fn try_accept(&self) -> io::Result<Option<(TcpStream, SocketAddr)>> {
        match self.inner.accept() {
            Ok((stream, addr)) => {
                stream.set_nonblocking(false)?;
                Ok(Some((stream, addr)))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Reads from a stream with one deadline for the whole message, however
/// the peer spreads its bytes: each read sleeps until bytes arrive, the
/// deadline passes or a signal stops the run ([`wait::until_readable`]:
/// no periodic wake-up; the io error then carries [`Interrupted`]).
struct Deadlined<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
}

impl io::Read for Deadlined<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match wait::until_readable(&[self.stream.as_fd()], Some(self.deadline))? {
                Woke::Stop(sig) => return Err(io::Error::other(Interrupted(sig))),
                Woke::Deadline => return Err(io::ErrorKind::TimedOut.into()),
                // Readable: this read does not block (`MSG_DONTWAIT` for
                // this call only, as in `has_pending`).
                Woke::Ready(_) => {
                    match recv(self.stream.as_raw_fd(), buf, MsgFlags::MSG_DONTWAIT) {
                        Ok(n) => return Ok(n),
                        Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
    }
}

/// The wait before connection attempt `attempt` + 1: 100 ms doubling to
/// 1 s, each between half and one and a half of that at random, so that
/// thousands of ranks refused together (rank 0 not yet listening, or its
/// listen backlog full) come back spread out rather than at once.
fn backoff(attempt: u32) -> Duration {
    use std::hash::{BuildHasher as _, Hasher as _};
    let base = Duration::from_millis(100)
        .saturating_mul(1 << attempt.saturating_sub(1).min(4))
        .min(Duration::from_secs(1));
    // A random draw from the standard library: each `RandomState` is
    // seeded anew (per process and per call), enough for jitter.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(attempt);
    let unit = (h.finish() % 1_000) as f64 / 1_000.0;
    base.mul_f64(0.5 + unit)
}

/// A connected channel with a bound on every read and write.
#[derive(Debug)]
pub struct Channel {
    stream: TcpStream,
    peer: SocketAddr,
    timeout: Duration,
}

impl Channel {
    /// Connects to `host:port`, trying each resolved address and, with
    /// `retry_refused`, retrying refused connections (the server may start
    /// a moment later) until `timeout` has passed; without, a refusal is
    /// the answer (a probe of a server that should be there).
    ///
    /// # Errors
    /// When no address accepts within the bound; the message names the
    /// server and the port.
    pub fn connect(
        host: &str,
        port: u16,
        timeout: Duration,
        retry_refused: bool,
    ) -> anyhow::Result<Self> {
        let addrs: Vec<SocketAddr> = (host, port)
            .to_socket_addrs()
            .with_context(|| format!("cannot resolve server {host:?}"))?
            .collect();
        let deadline = Instant::now() + timeout;
        let mut attempt = 0u32;
        loop {
            stop::check()?;
            let mut last = None;
            for addr in &addrs {
                let left = deadline
                    .saturating_duration_since(Instant::now())
                    .clamp(Duration::from_millis(10), stop::POLL * 10);
                match TcpStream::connect_timeout(addr, left) {
                    // Nobody listens yet and the kernel gave us the very
                    // port we dial: not a server (it would read its own
                    // hello); as refused.
                    Ok(stream) if is_self_connection(&stream) => {
                        last = Some(io::Error::from(io::ErrorKind::ConnectionRefused));
                    }
                    Ok(stream) => return Self::new(stream, timeout),
                    Err(e) => last = Some(e),
                }
            }
            // Refused: the server may start a moment later; timed out: an
            // attempt is cut at a second so a signal is seen, retry.
            let retry = last.as_ref().is_some_and(|e| match e.kind() {
                io::ErrorKind::ConnectionRefused => retry_refused,
                io::ErrorKind::TimedOut => true,
                _ => false,
            });
            if !retry || Instant::now() + Duration::from_millis(100) >= deadline {
                let why = last.map_or_else(|| "no address".to_owned(), |e| e.to_string());
                if !retry_refused {
                    bail!(
                        "cannot connect to {host}:{port}: {why} (is the server of this test running there?)"
                    );
                }
                bail!(
                    "cannot connect to {host}:{port} within {timeout:?} (--timeout): {why} \
                     (is the server of this test running there?)"
                );
            }
            attempt += 1;
            thread::sleep(backoff(attempt).min(deadline.saturating_duration_since(Instant::now())));
        }
    }

    /// A channel over a connected stream, every wait bounded by `timeout`.
    ///
    /// # Errors
    /// When the socket cannot be set up.
    pub fn new(stream: TcpStream, timeout: Duration) -> anyhow::Result<Self> {
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        let peer = stream.peer_addr()?;
        Ok(Self {
            stream,
            peer,
            timeout,
        })
    }

    /// The peer's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Our end's address (the one the peer reached).
    ///
    /// # Errors
    /// When the socket cannot say.
    pub fn local(&self) -> io::Result<SocketAddr> {
        self.stream.local_addr()
    }

    /// The bound on every wait (`--timeout`).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Changes the bound on every wait (`--timeout`).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
        let _ = self.stream.set_write_timeout(Some(timeout));
    }

    /// Sends one message.
    ///
    /// # Errors
    /// When the peer is gone or does not take the bytes within the bound.
    pub fn send(&mut self, msg: &Message) -> anyhow::Result<()> {
        wire::write_message(&mut self.stream, msg)
            .map_err(|e| self.describe(e, &format!("sending {}", msg.name())))
    }

    /// Receives the next message other than a heartbeat, within
    /// `--timeout` of now (heartbeats do not extend it).
    ///
    /// # Errors
    /// Timeout, closed connection, a malformed frame, an `Error` message
    /// from the peer (its text is included), or [`Interrupted`].
    pub fn recv(&mut self, waiting_for: &str) -> anyhow::Result<Message> {
        self.recv_within(waiting_for, Bound::Message)
    }

    /// Receives the next message other than a heartbeat within `bound`.
    ///
    /// # Errors
    /// As [`Channel::recv`]; past a phase's deadline, an error naming it.
    pub fn recv_within(&mut self, waiting_for: &str, bound: Bound) -> anyhow::Result<Message> {
        let (end, phase) = match bound {
            Bound::Message => (Instant::now() + self.timeout, None),
            Bound::Phase { at, bound } => (at, Some((bound, false))),
            Bound::Setup { at, bound } => (at, Some((bound, true))),
        };
        loop {
            // Each frame within --timeout of the last, none past the end.
            let silence = Instant::now() + self.timeout;
            let got = wire::read_message(&mut Deadlined {
                stream: &self.stream,
                deadline: silence.min(end),
            });
            match got {
                Ok(Message::Heartbeat) => continue,
                Err(WireError::Timeout) if silence > end && phase.is_some() => match phase {
                    Some((bound, true)) => bail!(
                        "{waiting_for} did not come from peer {} within the set-up bound of {bound:.1?} \
                         (--timeout plus {:?} per QP): the peer is alive but its set-up does not end",
                        self.peer,
                        engine::bench::config::SETUP_PER_QP
                    ),
                    _ => bail!(
                        "{waiting_for} did not come from peer {} within the measured phase's bound of {:.1?} \
                         (its iterations or duration at the slowest rates allowed, plus --timeout): \
                         the peer is alive but its measurement does not end",
                        self.peer,
                        phase.map(|p| p.0).unwrap_or_default()
                    ),
                },
                got => return self.received(got, waiting_for),
            }
        }
    }

    /// What a read gave, for the caller: the message, the peer's `Error`
    /// as an error (its text made printable), or the failure described.
    fn received(
        &self,
        got: Result<Message, WireError>,
        waiting_for: &str,
    ) -> anyhow::Result<Message> {
        match got {
            Ok(Message::Error { message }) => bail!(
                "peer {} reported an error: {}",
                self.peer,
                wire::printable(&message, wire::MAX_PEER_TEXT)
            ),
            Ok(msg) => Ok(msg),
            Err(e) => Err(self.describe(e, &format!("waiting for {waiting_for}"))),
        }
    }

    /// Receives the first message of a connection, whole, within
    /// `timeout` of now (a peer that trickles bytes or says nothing is
    /// cut off then).
    ///
    /// # Errors
    /// As [`Channel::recv`], the deadline included.
    pub fn recv_first(&mut self, waiting_for: &str) -> anyhow::Result<Message> {
        let deadline = Instant::now() + self.timeout;
        let got = wire::read_message(&mut Deadlined {
            stream: &self.stream,
            deadline,
        });
        self.stream.set_read_timeout(Some(self.timeout))?;
        self.received(got, waiting_for)
    }

    fn describe(&self, e: WireError, doing: &str) -> anyhow::Error {
        if let Some(sig) = stop::requested() {
            return anyhow::Error::new(Interrupted(sig))
                .context(format!("{doing} from peer {}", self.peer));
        }
        match e {
            WireError::Timeout => anyhow!(
                "timed out after {:?} {doing} from peer {} (--timeout)",
                self.timeout,
                self.peer
            ),
            WireError::Closed | WireError::Truncated => {
                anyhow!("peer {} closed the connection while {doing}", self.peer)
            }
            other => anyhow::Error::new(other).context(format!("{doing} from peer {}", self.peer)),
        }
    }

    /// Whether the peer has sent something not yet read: lets a side
    /// spinning on RDMA notice the peer's next message. A peek with
    /// `MSG_DONTWAIT` for this one call: the socket's `O_NONBLOCK` would be
    /// shared with the heartbeat thread's clone and make its writes fail.
    pub fn has_pending(&self) -> bool {
        // Ok(0) is end of stream: also something to read (and report).
        peek_now(&self.stream, &mut [0u8; 1]).is_ok()
    }

    /// Sends one cluster message (rank ↔ coordinator).
    ///
    /// # Errors
    /// When the peer is gone or does not take the bytes within the bound.
    pub fn send_cluster(&mut self, msg: &ClusterMessage) -> anyhow::Result<()> {
        wire::write_message(&mut self.stream, msg)
            .map_err(|e| self.describe(e, &format!("sending {}", msg.name())))
    }

    /// Receives the next cluster message within `--timeout` of now.
    ///
    /// # Errors
    /// Timeout, closed connection, a malformed frame, or [`Interrupted`].
    pub fn recv_cluster(&mut self, waiting_for: &str) -> anyhow::Result<ClusterMessage> {
        let got = wire::read_frame(&mut Deadlined {
            stream: &self.stream,
            deadline: Instant::now() + self.timeout,
        });
        got.map_err(|e| self.describe(e, &format!("waiting for {waiting_for}")))
    }

    /// Best effort: tells the peer why we stop. Errors are ignored, the
    /// peer may already be gone.
    pub fn send_error(&mut self, message: &str) {
        let _ = wire::write_message(
            &mut self.stream,
            &Message::Error {
                message: message.to_owned(),
            },
        );
    }

    /// Runs `work` while a background thread sends heartbeats every
    /// [`HEARTBEAT_EVERY`] and, at each beat, reads the peer's heartbeats
    /// (so a bidirectional phase, where both sides beat, never fills the
    /// socket buffers) and looks at what else the peer sent: an `Error`
    /// or the end of the connection sets the [`PeerWatch`] that `work`'s
    /// loops read at their clock checks, and the peer's message becomes
    /// this call's error. The heartbeat thread is stopped and joined before
    /// this returns — also when `work` panics — so no frame interleaves
    /// with the caller's next message.
    ///
    /// # Errors
    /// When the heartbeat socket cannot be cloned or its thread cannot
    /// start (then `work` does not run), or the peer stopped (its error).
    pub fn with_heartbeat<T>(&mut self, work: impl FnOnce(&PeerWatch) -> T) -> anyhow::Result<T> {
        let mut beat = self
            .stream
            .try_clone()
            .context("cloning the control socket")?;
        let watch = PeerWatch::default();
        // The thread sleeps until its next beat or until it is told to
        // stop (a condition variable): it wakes twice a second, not in a
        // polling loop beside the measured one.
        let stop = (Mutex::new(false), Condvar::new());
        /// Stops the heartbeat when `work` returns or unwinds, so the scope
        /// can always join it.
        struct StopOnDrop<'a>(&'a (Mutex<bool>, Condvar));
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                *self.0.0.lock().unwrap_or_else(PoisonError::into_inner) = true;
                self.0.1.notify_all();
            }
        }
        let out = thread::scope(|s| {
            thread::Builder::new()
                .name("heartbeat".into())
                .spawn_scoped(s, || {
                    let (stopped, wake) = &stop;
                    let mut next = Instant::now() + HEARTBEAT_EVERY;
                    let mut done = stopped.lock().unwrap_or_else(PoisonError::into_inner);
                    while !*done {
                        let left = next.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            if wire::write_message(&mut beat, &Message::Heartbeat).is_err() {
                                return;
                            }
                            drain_heartbeats(&mut beat, &watch);
                            next += HEARTBEAT_EVERY;
                            continue;
                        }
                        done = wake
                            .wait_timeout(done, left)
                            .unwrap_or_else(PoisonError::into_inner)
                            .0;
                    }
                })
                .context("starting the heartbeat thread")?;
            let _stop = StopOnDrop(&stop);
            anyhow::Ok(work(&watch))
        })?;
        if watch.stopped() {
            return Err(self.why_peer_stopped());
        }
        Ok(out)
    }

    /// After the peer stopped a measured phase: its `Error` (or the closed
    /// connection), read from the channel, as the error.
    pub fn why_peer_stopped(&mut self) -> anyhow::Error {
        match self.recv("the measured phase") {
            Err(e) => e,
            Ok(other) => anyhow!(
                "peer {} stopped the measured phase, then sent {}",
                self.peer,
                other.name()
            ),
        }
    }
}

/// Set by the heartbeat thread when the peer ended the measured phase (it
/// sent an `Error`, or closed the connection); read by the measured loops
/// at their clock checks, as the stop flag is.
#[derive(Debug, Default)]
pub struct PeerWatch {
    stopped: AtomicBool,
}

impl PeerWatch {
    /// Whether the peer stopped.
    #[inline]
    pub fn stopped(&self) -> bool {
        self.stopped.load(Ordering::Relaxed)
    }

    /// Whether the loop should end now: the peer stopped or a signal came.
    #[inline]
    pub fn should_stop(&self) -> bool {
        self.stopped() || stop::requested().is_some()
    }

    /// Why the loop ended early (after [`PeerWatch::should_stop`]).
    #[cold]
    pub fn reason(&self) -> anyhow::Error {
        match stop::requested() {
            Some(sig) => Interrupted(sig).into(),
            None => anyhow!("the peer stopped the measured phase"),
        }
    }
}

/// The bytes waiting on `stream`, copied into `buf` and left there
/// (`MSG_PEEK`), without blocking (`MSG_DONTWAIT` for this call only: the
/// socket's `O_NONBLOCK` is shared with its clones). `Ok(0)`: end of stream.
fn peek_now(stream: &TcpStream, buf: &mut [u8]) -> nix::Result<usize> {
    recv(
        stream.as_raw_fd(),
        buf,
        MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT,
    )
}

/// Reads every whole heartbeat waiting on `stream`, stopping at anything
/// else, which is left for the caller's next read; an `Error` or the end
/// of the stream sets `watch`. Never blocks (`MSG_DONTWAIT`).
fn drain_heartbeats(stream: &mut TcpStream, watch: &PeerWatch) {
    let mut buf = [0u8; 64];
    loop {
        let Ok(n) = peek_now(stream, &mut buf) else {
            return;
        };
        if n == 0 {
            watch.stopped.store(true, Ordering::Relaxed);
            return;
        }
        match wire::peek_header(&buf[..n]) {
            Some(("heartbeat", len)) if len <= n => {
                if io::Read::read_exact(stream, &mut buf[..len]).is_err() {
                    return;
                }
            }
            Some(("error", _)) => {
                watch.stopped.store(true, Ordering::Relaxed);
                return;
            }
            _ => return,
        }
    }
}

/// Whether `stream` is connected to itself (same local and peer address).
fn is_self_connection(stream: &TcpStream) -> bool {
    matches!((stream.local_addr(), stream.peer_addr()), (Ok(l), Ok(p)) if l == p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TCP connection to itself, as the kernel makes when a client's
    /// ephemeral port happens to equal the port it dials and nobody
    /// listens there (a "simultaneous open" with itself).
    fn self_connected() -> TcpStream {
        use nix::sys::socket::{
            AddressFamily, SockFlag, SockType, SockaddrIn, bind, connect, getsockname, socket,
        };
        let fd = socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::empty(),
            None,
        )
        .unwrap();
        let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
        // Bound to a port of its own first, then dialling it: no other
        // socket can take the port in between.
        bind(raw, &SockaddrIn::new(127, 0, 0, 1, 0)).unwrap();
        let addr: SockaddrIn = getsockname(raw).unwrap();
        connect(raw, &addr).unwrap();
        TcpStream::from(fd)
    }

    #[test]
    fn a_connection_to_itself_is_not_a_server() {
        let s = self_connected();
        assert!(is_self_connection(&s));
        let listener = Listener::bind("127.0.0.1", 0).unwrap();
        let real = TcpStream::connect(listener.inner.local_addr().unwrap()).unwrap();
        assert!(!is_self_connection(&real));
    }

    #[test]
    fn heartbeats_go_out_while_working_and_stop_with_the_work() {
        let listener = Listener::bind("127.0.0.1", 0).unwrap();
        let port = listener.inner.local_addr().unwrap().port();
        let timeout = Duration::from_secs(5);
        let peer = thread::spawn(move || {
            let mut ch = listener
                .accept(Some(Instant::now() + timeout), timeout, timeout)
                .unwrap();
            // Counts heartbeats until the other side's `Bye`.
            let mut beats = 0;
            loop {
                match wire::read_message(&mut ch.stream).unwrap() {
                    Message::Heartbeat => beats += 1,
                    Message::Bye => return beats,
                    other => panic!("unexpected {}", other.name()),
                }
            }
        });
        let mut ch = Channel::connect("127.0.0.1", port, timeout, true).unwrap();
        let started = Instant::now();
        ch.with_heartbeat(|_| thread::sleep(Duration::from_millis(1300)))
            .unwrap();
        // Joined promptly once the work ended, not at its next beat.
        assert!(
            started.elapsed() < Duration::from_millis(1450),
            "{:?}",
            started.elapsed()
        );
        ch.send(&Message::Bye).unwrap();
        assert_eq!(peer.join().unwrap(), 2, "beats at 0.5 s and 1.0 s");
    }

    /// A listener on loopback and a connected pair of channels.
    fn pair(timeout: Duration) -> (Channel, Channel) {
        let listener = Listener::bind("127.0.0.1", 0).unwrap();
        let port = listener.inner.local_addr().unwrap().port();
        let client = Channel::connect("127.0.0.1", port, timeout, true).unwrap();
        let server = listener
            .accept(Some(Instant::now() + timeout), timeout, timeout)
            .unwrap();
        (client, server)
    }

    /// Sends heartbeats on `ch` every 100 ms until `stop` is set.
    fn beat_until(mut ch: Channel, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            if ch.send(&Message::Heartbeat).is_err() {
                return;
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    #[test]
    fn heartbeats_do_not_extend_a_wait_for_a_message() {
        let timeout = Duration::from_millis(600);
        let (client, mut server) = pair(timeout);
        let stop = AtomicBool::new(false);
        thread::scope(|s| {
            s.spawn(|| beat_until(client, &stop));
            let started = Instant::now();
            let e = server.recv("the client's result").unwrap_err();
            let took = started.elapsed();
            stop.store(true, Ordering::Relaxed);
            assert!(e.to_string().contains("timed out"), "{e:#}");
            assert!(took >= timeout && took < timeout * 2, "{took:?}");
        });
    }

    #[test]
    fn a_heartbeat_only_peer_is_cut_off_at_the_phase_deadline() {
        let timeout = Duration::from_millis(400);
        let (client, mut server) = pair(timeout);
        let stop = AtomicBool::new(false);
        thread::scope(|s| {
            s.spawn(|| beat_until(client, &stop));
            let bound = Duration::from_millis(1200);
            let started = Instant::now();
            // Alive (beats every 100 ms, well within --timeout) but never
            // done: cut at the phase's bound, not at the first timeout.
            let e = server
                .recv_within("the client's result", Bound::phase(Instant::now(), bound))
                .unwrap_err();
            let took = started.elapsed();
            stop.store(true, Ordering::Relaxed);
            assert!(
                format!("{e:#}").contains("within the measured phase's bound"),
                "{e:#}"
            );
            assert!(took >= bound && took < bound + timeout, "{took:?}");
        });
    }

    #[test]
    fn an_answer_that_came_in_time_is_taken_when_the_waiter_comes_late() {
        // The peer answered within the phase; this side's own work (a
        // data check of 8 MiB in a debug build under emulation, CI of
        // 40feabc) ran past the phase's end before it looked. The answer
        // waiting in the socket is the peer's, in time: take it.
        let timeout = Duration::from_millis(400);
        let (mut client, mut server) = pair(timeout);
        let begun = Instant::now();
        client.send(&Message::Bye).unwrap();
        thread::sleep(Duration::from_millis(300));
        let got = server
            .recv_within(
                "the client's result",
                Bound::phase(begun, Duration::from_millis(100)),
            )
            .unwrap();
        assert_eq!(got, Message::Bye);
        // Nothing waiting past the end: cut off at once.
        let started = Instant::now();
        let e = server
            .recv_within(
                "the client's result",
                Bound::phase(begun, Duration::from_millis(100)),
            )
            .unwrap_err();
        assert!(
            format!("{e:#}").contains("within the measured phase's bound"),
            "{e:#}"
        );
        assert!(started.elapsed() < timeout, "{:?}", started.elapsed());
    }

    #[test]
    fn a_silent_peer_is_cut_off_at_the_timeout_inside_a_long_phase() {
        let timeout = Duration::from_millis(400);
        let (_client, mut server) = pair(timeout);
        let started = Instant::now();
        let e = server
            .recv_within(
                "the client's result",
                Bound::phase(Instant::now(), Duration::from_secs(60)),
            )
            .unwrap_err();
        assert!(e.to_string().contains("timed out"), "{e:#}");
        assert!(started.elapsed() < timeout * 2, "{:?}", started.elapsed());
    }

    #[test]
    fn the_peers_beats_are_drained_and_its_error_ends_the_work() {
        let timeout = Duration::from_secs(5);
        let (mut client, mut server) = pair(timeout);
        // Bidirectional: the peer beats too; then it fails.
        for _ in 0..50 {
            server.send(&Message::Heartbeat).unwrap();
        }
        server
            .send(&Message::Error {
                message: "server failed: \x1b[31mQP error".into(),
            })
            .unwrap();
        let started = Instant::now();
        let e = client
            .with_heartbeat(|w| {
                // A measured loop: runs until told to stop.
                while !w.should_stop() {
                    if started.elapsed() > Duration::from_secs(4) {
                        return "not stopped";
                    }
                    thread::sleep(Duration::from_millis(5));
                }
                "stopped"
            })
            .unwrap_err();
        let text = format!("{e:#}");
        assert!(
            text.contains("reported an error: server failed: ") && text.contains("QP error"),
            "{text}"
        );
        assert!(!text.contains('\x1b'), "escape printed raw: {text:?}");
        // Noticed at the first beat.
        assert!(started.elapsed() < Duration::from_millis(1500));
    }

    #[test]
    fn a_peer_hanging_up_ends_the_work() {
        let timeout = Duration::from_secs(5);
        let (mut client, server) = pair(timeout);
        drop(server);
        let e = client
            .with_heartbeat(|w| {
                let t = Instant::now();
                while !w.should_stop() && t.elapsed() < Duration::from_secs(4) {
                    thread::sleep(Duration::from_millis(5));
                }
            })
            .unwrap_err();
        assert!(format!("{e:#}").contains("closed the connection"), "{e:#}");
    }

    #[test]
    fn has_pending_sees_a_message_without_consuming_it() {
        let (mut client, mut server) = pair(Duration::from_secs(5));
        assert!(!server.has_pending());
        client.send(&Message::Barrier { phase: 4 }).unwrap();
        let t = Instant::now();
        while !server.has_pending() {
            assert!(t.elapsed() < Duration::from_secs(2));
            thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            server.recv("the barrier").unwrap(),
            Message::Barrier { phase: 4 }
        );
    }
}
