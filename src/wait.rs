//! Blocking waits without a polling loop. A thread that waits for a
//! connection, a control message or the end of a session sleeps in one
//! `poll(2)` on what it waits for and on the stop pipe (readable once
//! SIGINT or SIGTERM came, [`crate::stop::pipe`]) until one of them is
//! ready or its deadline passes. On a host where both sides of a test
//! busy-poll the CPUs, a thread that woke every few milliseconds to look at
//! a flag took a CPU from one of them (docs/performance.md, "Wake-ups of our
//! own"). [`Bell`] is how one thread wakes another that waits here.

use std::io::{self, Write as _};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use crate::stop::{self, Signal};

/// Why a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woke {
    /// The `i`th descriptor waited on is readable (or closed, or in error:
    /// the read that follows says which).
    Ready(usize),
    /// A signal asked the run to stop.
    Stop(Signal),
    /// The deadline passed first.
    Deadline,
}

/// Sleeps until one of `fds` is readable, a stop is requested, or
/// `deadline` (`None`: no deadline) has passed; past the deadline, a
/// descriptor already readable is still reported. The lowest ready index is
/// reported; a stop wins over readiness.
///
/// # Errors
/// When `poll(2)` fails other than by a signal (which only re-checks).
pub fn until_readable(fds: &[BorrowedFd<'_>], deadline: Option<Instant>) -> io::Result<Woke> {
    let pipe = stop::pipe();
    let mut set: Vec<PollFd<'_>> = fds
        .iter()
        .chain(pipe.as_ref())
        .map(|fd| PollFd::new(*fd, PollFlags::POLLIN))
        .collect();
    loop {
        if let Some(sig) = stop::requested() {
            return Ok(Woke::Stop(sig));
        }
        // Past the deadline, one look without waiting: what arrived in
        // time is taken, even when this side comes late to read it.
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let timeout = match left {
            None => PollTimeout::NONE,
            Some(left) if left.is_zero() => PollTimeout::ZERO,
            Some(left) => poll_timeout(left),
        };
        match poll(&mut set, timeout) {
            Ok(0) if left.is_some_and(|l| l.is_zero()) => return Ok(Woke::Deadline),
            Ok(0) => continue, // the deadline is re-checked above
            Ok(_) => {
                if let Some(sig) = stop::requested() {
                    return Ok(Woke::Stop(sig));
                }
                if let Some(i) = set[..fds.len()]
                    .iter()
                    .position(|p| p.revents().is_some_and(|r| !r.is_empty()))
                {
                    return Ok(Woke::Ready(i));
                }
                // Only the stop pipe, before the flag was visible: re-check.
            }
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// `left` as a poll timeout: whole milliseconds rounded up (so a wait never
/// ends just before its deadline and spins), at most `i32::MAX` ms (the
/// loop waits again after that).
fn poll_timeout(left: Duration) -> PollTimeout {
    let ms = left.as_nanos().div_ceil(1_000_000);
    PollTimeout::try_from(ms.min(i32::MAX as u128)).unwrap_or(PollTimeout::MAX)
}

/// A doorbell between two threads: [`Bell::ring`] on one side makes
/// [`Bell::fd`] readable, for good, on the other (a socket pair; the byte
/// is never read, so every later wait on it returns at once).
#[derive(Debug)]
pub struct Bell {
    ringer: UnixStream,
    listener: UnixStream,
}

impl Bell {
    /// A new bell, not rung.
    ///
    /// # Errors
    /// When the socket pair cannot be created.
    pub fn new() -> io::Result<Self> {
        let (ringer, listener) = UnixStream::pair()?;
        ringer.set_nonblocking(true)?;
        Ok(Self { ringer, listener })
    }

    /// Rings it (never blocks; ringing twice is ringing once).
    pub fn ring(&self) {
        let _ = (&self.ringer).write(&[1]);
    }

    /// What a waiter polls.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.listener.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn a_wait_ends_at_its_deadline_without_spinning() {
        let bell = Bell::new().unwrap();
        let start = Instant::now();
        let got = until_readable(&[bell.fd()], Some(start + Duration::from_millis(30))).unwrap();
        assert_eq!(got, Woke::Deadline);
        assert!(start.elapsed() >= Duration::from_millis(30));
    }

    #[test]
    fn a_bell_rung_from_another_thread_wakes_the_waiter_for_good() {
        let bell = Bell::new().unwrap();
        let other = TcpListener::bind("127.0.0.1:0").unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(20));
                bell.ring();
                bell.ring();
            });
            let got = until_readable(&[other.as_fd(), bell.fd()], None).unwrap();
            assert_eq!(got, Woke::Ready(1));
        });
        // Still rung: a later wait returns at once.
        assert_eq!(
            until_readable(&[bell.fd()], Some(Instant::now() + Duration::from_secs(5))).unwrap(),
            Woke::Ready(0)
        );
    }

    #[test]
    fn timeouts_round_up_to_whole_milliseconds_and_are_capped() {
        assert_eq!(i32::from(poll_timeout(Duration::from_micros(1))), 1);
        assert_eq!(i32::from(poll_timeout(Duration::from_micros(1500))), 2);
        assert_eq!(
            i32::from(poll_timeout(Duration::from_secs(u64::MAX))),
            i32::MAX
        );
    }
}
