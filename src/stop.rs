//! Stopping on a signal: SIGINT and SIGTERM set a flag that the measured
//! loops read at their clock checks, and make the stop pipe ([`pipe`])
//! readable, which ends every wait on the peer at once ([`crate::wait`]);
//! the runner then tells the peer, reports what was measured and exits 130
//! (SIGINT) or 143 (SIGTERM). A second signal exits at once with that
//! code.
//!
//! Also the test hook `RDMAPERF_PAUSE_AT=<point>`: the process stops
//! itself (SIGSTOP) when it reaches that point of the session, so tests
//! can freeze or kill a peer in a chosen phase ([`pause_point`]).

use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use signal_hook::consts::{SIGINT, SIGSTOP, SIGTERM};

/// Longest a wait that cannot sleep on the stop pipe (a connection
/// attempt, a handover's grace) goes without looking at the stop flag.
pub const POLL: Duration = Duration::from_millis(100);

/// The read end of the stop pipe: the handlers of [`install`] write a byte
/// into its other end; nothing reads it, so it stays readable.
static PIPE: OnceLock<UnixStream> = OnceLock::new();

/// What a wait polls beside what it waits for: readable once a stop was
/// requested. `None` where no signal interrupts a wait (no handlers, or
/// [`install_finishing`]'s, which only end an endless run's period).
pub fn pipe() -> Option<BorrowedFd<'static>> {
    PIPE.get().map(AsFd::as_fd)
}

/// A signal that stops a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Ctrl-C.
    Int,
    /// `kill`, a scheduler ending a job.
    Term,
}

impl Signal {
    /// `SIGINT` or `SIGTERM`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Int => "SIGINT",
            Self::Term => "SIGTERM",
        }
    }

    /// The exit code of a run it stopped: 128 + the signal number.
    pub fn exit_code(self) -> u8 {
        match self {
            Self::Int => 130,
            Self::Term => 143,
        }
    }
}

impl std::fmt::Display for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The error a stopped run returns, up to the runner.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("interrupted by {0}")]
pub struct Interrupted(pub Signal);

/// The signal received (0: none yet), shared with the handlers.
fn received() -> &'static Arc<AtomicUsize> {
    static RECEIVED: OnceLock<Arc<AtomicUsize>> = OnceLock::new();
    RECEIVED.get_or_init(|| Arc::new(AtomicUsize::new(0)))
}

const INT: usize = 1;
const TERM: usize = 2;

/// The signal that asked an endless run to finish (0: none yet).
fn finish() -> &'static Arc<AtomicUsize> {
    static FINISH: OnceLock<Arc<AtomicUsize>> = OnceLock::new();
    FINISH.get_or_init(|| Arc::new(AtomicUsize::new(0)))
}

/// Installs the handlers (once per process; later calls do nothing).
///
/// # Errors
/// When a handler cannot be registered.
pub fn install() -> std::io::Result<()> {
    if INSTALLED.get().is_some() {
        return Ok(());
    }
    let (ringer, waiter) = UnixStream::pair()?;
    install_into(received())?;
    for sig in [SIGINT, SIGTERM] {
        signal_hook::low_level::pipe::register(sig, ringer.try_clone()?)?;
    }
    let _ = PIPE.set(waiter);
    Ok(())
}

/// Installs the handlers of a run that a signal ends normally
/// (`--run_infinitely`): SIGINT and SIGTERM interrupt nothing, they ask
/// the run to finish after the period in progress ([`finish_requested`]);
/// a second signal still exits at once.
///
/// # Errors
/// When a handler cannot be registered.
pub fn install_finishing() -> std::io::Result<()> {
    install_into(finish())
}

/// Set once handlers are installed (either kind).
static INSTALLED: OnceLock<()> = OnceLock::new();

fn install_into(target: &'static Arc<AtomicUsize>) -> std::io::Result<()> {
    if INSTALLED.get().is_some() {
        return Ok(());
    }
    let seen = Arc::new(AtomicBool::new(false));
    for (sig, code, value) in [(SIGINT, 130, INT), (SIGTERM, 143, TERM)] {
        // Registered first, so it runs before `seen` is set: a second
        // signal exits at once.
        signal_hook::flag::register_conditional_shutdown(sig, code, Arc::clone(&seen))?;
        signal_hook::flag::register(sig, Arc::clone(&seen))?;
        signal_hook::flag::register_usize(sig, Arc::clone(target), value)?;
    }
    let _ = INSTALLED.set(());
    Ok(())
}

/// The signal that asked an endless run to finish, if one did.
pub fn finish_requested() -> Option<Signal> {
    match finish().load(Ordering::Relaxed) {
        INT => Some(Signal::Int),
        TERM => Some(Signal::Term),
        _ => None,
    }
}

/// The signal that asked the run to stop, if one did.
#[inline]
pub fn requested() -> Option<Signal> {
    match received().load(Ordering::Relaxed) {
        INT => Some(Signal::Int),
        TERM => Some(Signal::Term),
        _ => None,
    }
}

/// `Err(Interrupted)` once a stop was requested.
///
/// # Errors
/// The interruption.
pub fn check() -> Result<(), Interrupted> {
    match requested() {
        Some(sig) => Err(Interrupted(sig)),
        None => Ok(()),
    }
}

/// The signal that interrupted a failed run, if it was one.
pub fn interrupted_by(err: &anyhow::Error) -> Option<Signal> {
    err.chain().find_map(|c| {
        c.downcast_ref::<Interrupted>()
            .or_else(|| {
                c.downcast_ref::<std::io::Error>()
                    .and_then(|e| e.get_ref())
                    .and_then(|inner| inner.downcast_ref::<Interrupted>())
            })
            .map(|i| i.0)
    })
}

/// Test hook: when `RDMAPERF_PAUSE_AT` names `point`, the process stops
/// itself with SIGSTOP here (the test then resumes or kills it). Points:
/// `hello` (client, before sending its hello), `accept` (server, before
/// answering it), `measure` (either side, after the start barrier),
/// `done` (either side, before sending its result), `cm-connect` (either
/// side under `-R`, once its first QP is connected through rdma_cm).
pub fn pause_point(point: &str) {
    static AT: OnceLock<Option<String>> = OnceLock::new();
    let at = AT.get_or_init(|| std::env::var("RDMAPERF_PAUSE_AT").ok());
    if at.as_deref() == Some(point) {
        let _ = signal_hook::low_level::raise(SIGSTOP);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interruption_is_found_through_context_and_io_errors() {
        let direct = anyhow::Error::new(Interrupted(Signal::Int)).context("measuring 64 B");
        assert_eq!(interrupted_by(&direct), Some(Signal::Int));
        let io = anyhow::Error::new(std::io::Error::other(Interrupted(Signal::Term)))
            .context("waiting for the client's result");
        assert_eq!(interrupted_by(&io), Some(Signal::Term));
        assert_eq!(interrupted_by(&anyhow::anyhow!("peer gone")), None);
        assert_eq!(Signal::Int.exit_code(), 130);
        assert_eq!(Signal::Term.exit_code(), 143);
    }
}
