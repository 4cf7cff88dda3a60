//! Everything behind the test binaries (`write_bw`, `write_lat`,
//! `read_bw`, `read_lat`): each is one [`engine::bench::spec::TestSpec`] handed to
//! [`runner::main`]. One command line ([`args`]), one session runner
//! ([`runner`]) over the control channel ([`oob`], [`session`]), the
//! resources of a side ([`side`]), the measured loops ([`measure`]), the
//! output routing ([`output`]), the device inventory and exit-code policy;
//! the `rdmaperf` binary ([`app`]: its command line and `main`), its
//! fabric-health subcommands ([`fabric`]) and cluster mode ([`cluster`]:
//! many ranks, each pair's test through the same runner).
//! All device access goes through the `verbs` crate, all pure logic is in
//! `engine`.

#![forbid(unsafe_code)]

pub mod app;
pub mod args;
pub mod clock;
pub mod cluster;
pub mod fabric;
pub mod inventory;
pub mod measure;
pub mod oob;
pub mod options;
pub mod output;
pub mod perftest_flags;
pub mod placement;
pub mod runner;
pub mod session;
pub mod setup;
pub mod side;
pub mod stop;
pub mod sysfs;
pub mod wait;

use std::fs::File;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use engine::fabric::listing::{JsonLines, ListingWriter, Text};

/// An error caused by the user's input: exits with code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Exit code of a run whose verdict (link or latency) is FAIL.
pub use engine::results::verdict::EXIT_VERDICT_FAIL;

/// Runs `--list-devices`: text on stdout; JSON lines to the `--json` file,
/// or to stdout instead of the text when it is `-`.
///
/// # Errors
/// Device errors (unknown device or port: a usage error) and I/O errors.
pub fn run_list(device: &args::DeviceArgs, json: Option<&str>) -> anyhow::Result<()> {
    let devices =
        inventory::collect(device.ib_dev.as_deref(), device.ib_port).map_err(|e| match e {
            verbs::Error::NoSuchDevice { .. } => UsageError(format!("-d/--ib-dev: {e}")).into(),
            verbs::Error::NoSuchPort { .. } => UsageError(format!("-i/--ib-port: {e}")).into(),
            other => anyhow::Error::new(other),
        })?;
    let mut stdout = output::Stdout;
    match json {
        Some("-") => JsonLines.write(&mut stdout, &devices)?,
        Some(path) => {
            // Create the file only after the inventory succeeded, so bad
            // input leaves nothing behind.
            Text.write(&mut stdout, &devices)?;
            let mut file = File::create(path)
                .map_err(|e| anyhow::anyhow!("cannot create --json file {path:?}: {e}"))?;
            JsonLines.write(&mut file, &devices)?;
            file.flush()?;
        }
        None => Text.write(&mut stdout, &devices)?,
    }
    Ok(())
}

/// A `--json FILE` in the making: written under a temporary name in FILE's
/// directory (`.FILE.<pid>.partial`) and renamed over FILE by
/// [`JsonFile::commit`] when the run succeeds. Dropped uncommitted (the run
/// failed), it removes the temporary file. So a failed run leaves neither a
/// partial FILE nor a truncated older one.
#[derive(Debug)]
pub struct JsonFile {
    tmp: PathBuf,
    dest: PathBuf,
    committed: bool,
}

impl JsonFile {
    /// Creates the temporary file; returns it for writing.
    ///
    /// # Errors
    /// A usage error naming `--json` when the path names no file or its
    /// directory is not writable.
    pub fn create(dest: &str) -> anyhow::Result<(Self, File)> {
        let dest = PathBuf::from(dest);
        let (tmp, file) = create_partial("--json", &dest)?;
        Ok((
            Self {
                tmp,
                dest,
                committed: false,
            },
            file,
        ))
    }

    /// Renames the finished file over its destination.
    ///
    /// # Errors
    /// When the rename fails (the temporary file is then removed).
    pub fn commit(mut self) -> anyhow::Result<()> {
        std::fs::rename(&self.tmp, &self.dest)
            .map_err(|e| anyhow::anyhow!("cannot write --json file {:?}: {e}", self.dest))?;
        self.committed = true;
        Ok(())
    }
}

/// Where a file is written before it is renamed over `dest`:
/// `.NAME.<pid>.partial` beside it; `None` when `dest` names no file.
pub fn partial_path(dest: &std::path::Path) -> Option<PathBuf> {
    let mut name = std::ffi::OsString::from(".");
    name.push(dest.file_name()?);
    name.push(format!(".{}.partial", std::process::id()));
    Some(dest.with_file_name(name))
}

/// Checks, before any work, that a file for `flag` can be created at
/// `dest` (its temporary name is created and removed).
///
/// # Errors
/// A usage error naming `flag` when it cannot.
pub fn check_writable(flag: &str, dest: &std::path::Path) -> Result<(), UsageError> {
    let (tmp, file) = create_partial(flag, dest)?;
    drop(file);
    let _ = std::fs::remove_file(&tmp);
    Ok(())
}

/// Creates `dest`'s temporary file ([`partial_path`]), new, for `flag`.
///
/// # Errors
/// A usage error naming `flag` when `dest` names no file or the file
/// cannot be created.
fn create_partial(flag: &str, dest: &std::path::Path) -> Result<(PathBuf, File), UsageError> {
    let tmp = partial_path(dest)
        .ok_or_else(|| UsageError(format!("{flag}: {dest:?} does not name a file")))?;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(|e| UsageError(format!("{flag}: cannot create {dest:?}: {e}")))?;
    Ok((tmp, file))
}

/// Writes `text` to `dest` under [`partial_path`] and renames it into
/// place, so a reader (node_exporter's textfile collector, a script)
/// never sees half of it; on failure the temporary file is removed.
///
/// # Errors
/// `what` (the flag, e.g. `--prom`) and `dest` name the file in the
/// error.
pub fn write_atomically(what: &str, dest: &std::path::Path, text: &str) -> io::Result<()> {
    let Some(tmp) = partial_path(dest) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what}: {dest:?} does not name a file"),
        ));
    };
    let written = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, dest));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io::Error::new(
            e.kind(),
            format!("cannot write {what} {dest:?}: {e}"),
        ));
    }
    Ok(())
}

impl Drop for JsonFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Whether an error is the user's input (exit 2) rather than a failure
/// while running (exit 1). Only a [`UsageError`] is (and
/// [`side::InlineRefused`], the `-I` refusal, a usage error of its own
/// type): the code that knows
/// an error comes from a flag makes it one where it happens (naming the
/// flag); nothing is reclassified after the fact from what a lower layer
/// returned, so a peer's bad value or a failed allocation exits 1.
pub fn is_usage_error(err: &anyhow::Error) -> bool {
    err.chain()
        .any(|cause| cause.is::<UsageError>() || cause.is::<side::InlineRefused>())
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
