//! Shared code of the `write_bw` and `write_lat` binaries: command-line
//! pieces common to both, the device inventory, and exit-code policy.
//!
//! The binaries are thin: parsing here, measurement in later modules, all
//! device access through the `verbs` crate, all pure logic in `engine`.

#![forbid(unsafe_code)]

pub mod bw;
pub mod clock;
pub mod inventory;
pub mod lat;
pub mod oob;
pub mod session;
pub mod setup;
pub mod sysfs;
pub mod write_bw;
pub mod write_lat;

use std::fs::File;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use engine::listing::{JsonLines, ListingWriter, Text};

/// Flags that select a device and port, with perftest's names.
#[derive(Debug, Clone, Args)]
pub struct DeviceArgs {
    /// RDMA device to use (default: all when listing, the first otherwise).
    #[arg(short = 'd', long = "ib-dev", value_name = "DEVICE")]
    pub ib_dev: Option<String>,
    /// Port of the device (1-based).
    #[arg(short = 'i', long = "ib-port", value_name = "PORT",
          value_parser = clap::value_parser!(u8).range(1..))]
    pub ib_port: Option<u8>,
}

/// Flags of the out-of-band connection, shared by both tests.
#[derive(Debug, Clone, Args)]
pub struct ConnectionArgs {
    /// Server to connect to; without it this side is the server.
    #[arg(value_name = "SERVER")]
    pub server: Option<String>,
    /// GID index (default: chosen as perftest does: RoCE v2 and IPv4 first, link-local last).
    #[arg(short = 'x', long = "gid-index", value_name = "INDEX")]
    pub gid_index: Option<u32>,
    /// TCP port of the out-of-band channel.
    #[arg(short = 'p', long = "port", default_value_t = engine::config::DEFAULT_PORT)]
    pub port: u16,
    /// Address the server listens on.
    #[arg(long = "bind", value_name = "ADDR", default_value = "0.0.0.0")]
    pub bind: String,
    /// Bound on every wait for the peer, seconds.
    #[arg(long = "timeout", value_name = "SECONDS", default_value = "15",
          value_parser = session::seconds_arg)]
    pub timeout: std::time::Duration,
    /// How long the server waits for a client, seconds.
    #[arg(long = "accept-timeout", value_name = "SECONDS", default_value = "300",
          value_parser = session::seconds_arg)]
    pub accept_timeout: std::time::Duration,
    /// QP ACK timeout exponent: 4.096 us x 2^N before a retransmit (perftest's -u; local to this side).
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 14,
          value_parser = clap::value_parser!(u8).range(0..=31))]
    pub qp_timeout: u8,
}

/// Flags that say what to run, shared by both tests (the client's count).
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Message size in bytes (suffixes K, M allowed; write_bw 65536, write_lat 2).
    #[arg(short = 's', long = "size", value_parser = session::size_arg)]
    pub size: Option<u64>,
    /// Run all sizes from 2 B to 8 MiB.
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Iterations per size (write_bw: 5000 messages per QP; write_lat: 1000 round trips).
    #[arg(short = 'n', long = "iters")]
    pub iters: Option<u64>,
    /// Run for this many seconds per size instead of a count.
    #[arg(short = 'D', long = "duration", value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Warm-up and cool-down margin of duration mode, seconds.
    #[arg(short = 'f', long = "margin", default_value_t = 2.0)]
    pub margin: f64,
    /// Path MTU in bytes (default: the smaller active MTU of both ports).
    #[arg(short = 'm', long = "mtu")]
    pub mtu: Option<u32>,
}

impl RunArgs {
    /// The sizes to run: the `-a` sweep or one size (`default` without `-s`).
    ///
    /// # Errors
    /// A usage error when `-a` and `-s` are both given.
    pub fn sizes(&self, default: u64) -> anyhow::Result<Vec<u64>> {
        if self.all && self.size.is_some() {
            return Err(UsageError("-a/--all and -s/--size exclude each other".into()).into());
        }
        Ok(if self.all {
            engine::config::sweep_sizes()
        } else {
            vec![self.size.unwrap_or(default)]
        })
    }

    /// Duration mode, when `-D` is given.
    pub fn duration_mode(&self) -> Option<engine::config::DurationMode> {
        self.duration.map(|seconds| engine::config::DurationMode {
            seconds,
            margin: self.margin,
        })
    }
}

/// An error caused by the user's input: exits with code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Exit code of a run whose verdict (link or latency) is FAIL.
pub const EXIT_VERDICT_FAIL: u8 = 3;

/// Runs `--list-devices`: text on stdout; JSON lines to the `--json` file,
/// or to stdout instead of the text when it is `-`.
///
/// # Errors
/// Device errors (unknown device or port: a usage error) and I/O errors.
pub fn run_list(device: &DeviceArgs, json: Option<&str>) -> anyhow::Result<()> {
    let devices = inventory::collect(device.ib_dev.as_deref(), device.ib_port)?;
    let stdout = io::stdout();
    match json {
        Some("-") => JsonLines.write(&mut stdout.lock(), &devices)?,
        Some(path) => {
            // Create the file only after the inventory succeeded, so bad
            // input leaves nothing behind.
            Text.write(&mut stdout.lock(), &devices)?;
            let mut file = File::create(path)
                .map_err(|e| anyhow::anyhow!("cannot create --json file {path:?}: {e}"))?;
            JsonLines.write(&mut file, &devices)?;
            file.flush()?;
        }
        None => Text.write(&mut stdout.lock(), &devices)?,
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
        let name = dest
            .file_name()
            .ok_or_else(|| UsageError(format!("--json: {dest:?} does not name a file")))?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".{}.partial", std::process::id()));
        let tmp = dest.with_file_name(tmp_name);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| UsageError(format!("--json: cannot create {dest:?}: {e}")))?;
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

impl Drop for JsonFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// What `--json` asks of a test's output: JSON lines to stdout instead of
/// the table (`-`), to a file beside the table (written as a [`JsonFile`]),
/// or none.
pub struct JsonOutput {
    /// Whether stdout carries the table (not JSON).
    pub table_on_stdout: bool,
    /// The JSON lines, when asked for.
    pub json: Option<engine::bw::JsonLines<Box<dyn Write>>>,
    file: Option<JsonFile>,
}

impl std::fmt::Debug for JsonOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonOutput")
            .field("table_on_stdout", &self.table_on_stdout)
            .field("json", &self.json.is_some())
            .field("file", &self.file)
            .finish()
    }
}

impl JsonOutput {
    /// Opens what `--json` names (a file is created now, so a bad path
    /// fails before any work).
    ///
    /// # Errors
    /// As [`JsonFile::create`].
    pub fn open(json: Option<&str>) -> anyhow::Result<Self> {
        let (table_on_stdout, out, file): (bool, Option<Box<dyn Write>>, _) = match json {
            None => (true, None, None),
            Some("-") => (false, Some(Box::new(io::stdout())), None),
            Some(path) => {
                let (pending, f) = JsonFile::create(path)?;
                (true, Some(Box::new(io::BufWriter::new(f))), Some(pending))
            }
        };
        Ok(Self {
            table_on_stdout,
            json: out.map(engine::bw::JsonLines::new),
            file,
        })
    }

    /// Reports a verdict: its line on stdout beside the table (on stderr
    /// when stdout carries JSON), and a JSON line when JSON is written.
    ///
    /// # Errors
    /// I/O errors of the JSON destination.
    pub fn verdict(&mut self, line: &str, verdict: &impl serde::Serialize) -> io::Result<()> {
        if self.table_on_stdout {
            println!("{line}");
        } else {
            eprintln!("{line}");
        }
        match &mut self.json {
            Some(j) => j.verdict(verdict),
            None => Ok(()),
        }
    }

    /// The run succeeded: a `--json FILE` takes its place.
    ///
    /// # Errors
    /// As [`JsonFile::commit`].
    pub fn commit(self) -> anyhow::Result<()> {
        self.file.map_or(Ok(()), JsonFile::commit)
    }
}

/// Whether an error is the user's input (exit 2) rather than a failure
/// while running (exit 1).
pub fn is_usage_error(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause.downcast_ref::<UsageError>().is_some()
            || matches!(
                cause.downcast_ref::<verbs::Error>(),
                Some(
                    verbs::Error::NoSuchDevice { .. }
                        | verbs::Error::NoSuchPort { .. }
                        | verbs::Error::NoSuchGid { .. }
                        | verbs::Error::InvalidArgument(_)
                )
            )
    })
}

/// The binaries' `main` tail: prints the error on stderr and picks the
/// exit code (the run's own code when it finished, e.g. 0 or
/// [`EXIT_VERDICT_FAIL`]; 1 runtime failure, 2 bad input; a closed stdout
/// pipe is not an error).
pub fn finish(program: &str, result: anyhow::Result<u8>) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            let broken_pipe = err.chain().any(|c| {
                c.downcast_ref::<io::Error>()
                    .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
            });
            if broken_pipe {
                return ExitCode::SUCCESS;
            }
            eprintln!("{program}: error: {err:#}");
            if is_usage_error(&err) {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}
