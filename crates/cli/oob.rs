//! The out-of-band TCP channel between client and server: bounded connect,
//! bounded reads, framed messages (`engine::wire`), and a heartbeat while a
//! measured phase runs so a silent peer is told from a slow one.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Condvar, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use engine::wire::{self, Message, WireError};

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
        Ok(Self {
            inner,
            bind: bind.to_owned(),
            port,
        })
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
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        bail!(
                            "no client connected to {}:{} within {accept_timeout:?} (--accept-timeout)",
                            self.bind,
                            self.port
                        );
                    }
                    thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(e).context("accepting a client"),
            }
        }
    }
}

/// Reads from a stream with one deadline for the whole message, however
/// the peer spreads its bytes: each read waits at most the time left.
struct Deadlined<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
}

impl io::Read for Deadlined<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.stream
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
        io::Read::read(&mut self.stream, buf)
    }
}

/// A connected channel with a bound on every read and write.
#[derive(Debug)]
pub struct Channel {
    stream: TcpStream,
    peer: SocketAddr,
    timeout: Duration,
}

impl Channel {
    /// Connects to `host:port`, trying each resolved address and retrying
    /// refused connections (the server may start a moment later) until
    /// `timeout` has passed.
    ///
    /// # Errors
    /// When no address accepts within the bound; the message names the
    /// server and the port.
    pub fn connect(host: &str, port: u16, timeout: Duration) -> anyhow::Result<Self> {
        let addrs: Vec<SocketAddr> = (host, port)
            .to_socket_addrs()
            .with_context(|| format!("cannot resolve server {host:?}"))?
            .collect();
        let deadline = Instant::now() + timeout;
        loop {
            let mut last = None;
            for addr in &addrs {
                let left = deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(10));
                match TcpStream::connect_timeout(addr, left) {
                    Ok(stream) => return Self::new(stream, timeout),
                    Err(e) => last = Some(e),
                }
            }
            let refused = last
                .as_ref()
                .is_some_and(|e| e.kind() == io::ErrorKind::ConnectionRefused);
            if !refused || Instant::now() + Duration::from_millis(100) >= deadline {
                let why = last.map_or_else(|| "no address".to_owned(), |e| e.to_string());
                bail!(
                    "cannot connect to {host}:{port} within {timeout:?} (--timeout): {why} \
                     (is `write_bw` running as server there?)"
                );
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    fn new(stream: TcpStream, timeout: Duration) -> anyhow::Result<Self> {
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

    /// Sends one message.
    ///
    /// # Errors
    /// When the peer is gone or does not take the bytes within the bound.
    pub fn send(&mut self, msg: &Message) -> anyhow::Result<()> {
        wire::write_message(&mut self.stream, msg)
            .map_err(|e| self.describe(e, &format!("sending {}", msg.name())))
    }

    /// Receives the next message other than a heartbeat. Each read is
    /// bounded by the timeout; heartbeats restart it.
    ///
    /// # Errors
    /// Timeout, closed connection, a malformed frame, or an `Error`
    /// message from the peer (its text is included).
    pub fn recv(&mut self, waiting_for: &str) -> anyhow::Result<Message> {
        loop {
            match wire::read_message(&mut self.stream) {
                Ok(Message::Heartbeat) => continue,
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

    /// Whether the peer has sent something not yet read (a non-blocking
    /// peek): lets a side spinning on RDMA notice the peer's next message.
    ///
    /// It waits at most a microsecond, through the receive timeout, which
    /// only reads obey: `O_NONBLOCK` would be shared with the heartbeat
    /// thread's clone of the socket and make its writes fail.
    pub fn has_pending(&self) -> bool {
        let mut b = [0u8; 1];
        if self
            .stream
            .set_read_timeout(Some(Duration::from_micros(1)))
            .is_err()
        {
            return false;
        }
        // Ok(0) is end of stream: also something to read (and report).
        let got = self.stream.peek(&mut b).is_ok();
        let _ = self.stream.set_read_timeout(Some(self.timeout));
        got
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
    /// [`HEARTBEAT_EVERY`]; the heartbeat thread is stopped and joined
    /// before this returns — also when `work` panics — so no frame
    /// interleaves with the caller's next message.
    ///
    /// # Errors
    /// When the heartbeat socket cannot be cloned or its thread cannot
    /// start (then `work` does not run).
    pub fn with_heartbeat<T>(&mut self, work: impl FnOnce() -> T) -> anyhow::Result<T> {
        let mut beat = self
            .stream
            .try_clone()
            .context("cloning the control socket")?;
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
        thread::scope(|s| {
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
            Ok(work())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut ch = Channel::connect("127.0.0.1", port, timeout).unwrap();
        let started = Instant::now();
        ch.with_heartbeat(|| thread::sleep(Duration::from_millis(1300)))
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
}
