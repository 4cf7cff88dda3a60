//! Files that appear whole or not at all: written under a temporary
//! name beside their destination (`.NAME.<pid>.partial`) and renamed into
//! place — `--json` ([`JsonFile`], removed when the run fails), `--prom`
//! and the cluster report ([`write_atomically`]); and the check, before
//! any work, that such a file can be created ([`check_writable`]).

use std::fs::File;
use std::io;
use std::path::PathBuf;

use crate::exit::UsageError;

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
