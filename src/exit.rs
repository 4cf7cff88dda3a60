//! How a run ends: the errors that are the user's input ([`UsageError`],
//! [`InlineRefused`]: exit 2), the exit code of every other outcome
//! ([`exit_code_of`]: 1 a failure while running, 130/143 a signal, none
//! for a closed stdout), and the binaries' `main` tail ([`finish`]). The
//! whole table is in docs/reliability.md.

use std::io;
use std::process::ExitCode;

use crate::stop;

/// An error caused by the user's input: exits with code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Exit code of a run whose verdict (link or latency) is FAIL.
pub use engine::results::verdict::EXIT_VERDICT_FAIL;

/// The device refused a QP with `-I`'s inline size: a usage error (exit
/// 2, naming the flag) of its own type, so that a test that chose the
/// inline size itself can retry without inline for this refusal only.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InlineRefused(pub String);

/// Whether an error is the user's input (exit 2) rather than a failure
/// while running (exit 1). Only a [`UsageError`] is (and
/// [`InlineRefused`], the `-I` refusal, a usage error of its own
/// type): the code that knows
/// an error comes from a flag makes it one where it happens (naming the
/// flag); nothing is reclassified after the fact from what a lower layer
/// returned, so a peer's bad value or a failed allocation exits 1.
pub fn is_usage_error(err: &anyhow::Error) -> bool {
    err.chain()
        .any(|cause| cause.is::<UsageError>() || cause.is::<InlineRefused>())
}

/// The binaries' `main` tail: prints the error on stderr and picks the
/// exit code (the run's own code when it finished, e.g. 0 or
/// [`EXIT_VERDICT_FAIL`]; 1 runtime failure, 2 bad input; a closed stdout
/// pipe is not an error).
pub fn finish(program: &str, result: anyhow::Result<u8>) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) => match exit_code_of(&err) {
            None => ExitCode::SUCCESS,
            Some(code) if stop::interrupted_by(&err).is_some() => {
                eprintln!("{program}: {err:#}");
                ExitCode::from(code)
            }
            Some(code) => {
                eprintln!("{program}: error: {err:#}");
                ExitCode::from(code)
            }
        },
    }
}

/// The exit code of a failed run: `None` when stdout was closed under us
/// (`| head`: not an error, exit 0, nothing printed), 130/143 when a
/// SIGINT/SIGTERM stopped it, 2 for bad input, 1 otherwise — EPIPE on the
/// control socket included. The whole table is in docs/reliability.md.
pub fn exit_code_of(err: &anyhow::Error) -> Option<u8> {
    let stdout_closed = err.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .and_then(|e| e.get_ref())
            .is_some_and(|inner| inner.is::<StdoutClosed>())
    });
    if stdout_closed {
        None
    } else if let Some(sig) = stop::interrupted_by(err) {
        Some(sig.exit_code())
    } else if is_usage_error(err) {
        Some(2)
    } else {
        Some(1)
    }
}

/// The payload of the `io::Error` a write to a closed stdout becomes
/// ([`stdout_write_error`]), so that it is told from a broken socket.
#[derive(Debug, thiserror::Error)]
#[error("stdout is closed")]
pub struct StdoutClosed;

/// Marks a `BrokenPipe` from writing stdout as [`StdoutClosed`]; other
/// errors pass unchanged.
pub fn stdout_write_error(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::BrokenPipe {
        io::Error::new(io::ErrorKind::BrokenPipe, StdoutClosed)
    } else {
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_errors_created_as_usage_errors_exit_2() {
        // A peer's zero GID or a failed allocation reaches us as the verbs
        // crate's InvalidArgument: a failure while running, not bad input.
        let peer = anyhow::Error::new(verbs::Error::InvalidArgument(
            "RoCE needs the peer's GID; it sent none".into(),
        ))
        .context("connecting QP 0 to peer QPN 0x11");
        assert!(!is_usage_error(&peer));
        let usage = anyhow::Error::new(UsageError("-s/--size: 0".into())).context("client");
        assert!(is_usage_error(&usage));
    }

    #[test]
    fn only_a_closed_stdout_is_a_quiet_success() {
        // EPIPE on the control socket: the peer went away mid-run.
        let socket = anyhow::Error::new(io::Error::from(io::ErrorKind::BrokenPipe))
            .context("sending done to peer 127.0.0.1:18515");
        assert_eq!(exit_code_of(&socket), Some(1));
        // `| head` closed our stdout: not an error.
        let closed = stdout_write_error(io::Error::from(io::ErrorKind::BrokenPipe));
        assert_eq!(exit_code_of(&anyhow::Error::new(closed)), None);
        let usage = anyhow::Error::new(UsageError("-s/--size: 0".into()));
        assert_eq!(exit_code_of(&usage), Some(2));
        let sigint = anyhow::Error::new(stop::Interrupted(stop::Signal::Int)).context("connecting");
        assert_eq!(exit_code_of(&sigint), Some(130));
    }
}
