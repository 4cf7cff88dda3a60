//! A directory of state files kept between runs (`rdmaperf health
//! --state-dir`, `rdmaperf cluster --history`): created owner-only
//! (0700), and trusted only when it is ours — owned by this user and
//! writable by nobody else; each file likewise, and only up to a size cap.
//! A file that is not usable is renamed aside (`NAME.bad-<unix time>`)
//! by the caller, never trusted and never fatal; a file is written
//! owner-only (0600) under a temporary name and renamed into place.

use std::fs;
use std::io::{Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A usable state directory.
#[derive(Debug, Clone)]
pub struct StateDir {
    dir: PathBuf,
}

/// What reading a state file found.
#[derive(Debug)]
pub enum StateRead {
    /// No such file: a first run.
    Missing,
    /// Its bytes.
    Bytes(Vec<u8>),
    /// There, but not to be trusted: why.
    Unusable(String),
}

/// Why a directory or file is not ours: group- or world-writable, or
/// owned by another user.
fn not_ours(meta: &fs::Metadata) -> Option<String> {
    // This process's user: the owner of /proc/self (no libc call needed).
    let me = fs::metadata("/proc/self").map(|m| m.uid()).ok()?;
    if meta.uid() != me {
        return Some(format!(
            "owned by uid {}, not this user (uid {me})",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Some(format!(
            "writable by group or others (mode {:o})",
            meta.mode() & 0o7777
        ));
    }
    None
}

impl StateDir {
    /// Opens (creating it 0700 if missing) the state directory `dir`.
    ///
    /// # Errors
    /// Why it cannot be used, in words.
    pub fn open(dir: &Path) -> Result<Self, String> {
        match fs::symlink_metadata(dir) {
            Ok(meta) => {
                if !meta.is_dir() {
                    return Err(format!("{} is not a directory", dir.display()));
                }
                if let Some(why) = not_ours(&meta) {
                    return Err(format!("{} is {why}: not used", dir.display()));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
                // The mode of the last component, whatever the umask.
                let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o700));
            }
            Err(e) => return Err(format!("cannot read {}: {e}", dir.display())),
        }
        Ok(Self {
            dir: dir.to_owned(),
        })
    }

    /// The path of file `name` in it.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Reads file `name`: missing, its bytes (at most `cap`), or why it is
    /// not to be trusted (not a regular file, not ours, over `cap`).
    pub fn read(&self, name: &str, cap: u64) -> StateRead {
        let path = self.file(name);
        let meta = match fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return StateRead::Missing,
            Err(e) => return StateRead::Unusable(format!("unreadable: {e}")),
        };
        if !meta.is_file() {
            return StateRead::Unusable("not a regular file".into());
        }
        if let Some(why) = not_ours(&meta) {
            return StateRead::Unusable(why);
        }
        if meta.len() > cap {
            return StateRead::Unusable(format!("{} bytes, more than {cap}", meta.len()));
        }
        match read_bounded(&path, cap) {
            Ok(bytes) => StateRead::Bytes(bytes),
            Err(e) => StateRead::Unusable(format!("unreadable: {e}")),
        }
    }

    /// Renames file `name` aside as `NAME.bad-<now_s>`; the note that says
    /// so (or that it could not be).
    pub fn set_aside(&self, name: &str, why: &str, now_s: i64) -> String {
        let path = self.file(name);
        let aside = self.file(&format!("{name}.bad-{now_s}"));
        match fs::rename(&path, &aside) {
            Ok(()) => format!(
                "{} {why}: set aside as {}; starting afresh",
                path.display(),
                aside.display()
            ),
            Err(e) => format!(
                "{} {why}: not used (cannot set it aside: {e}); starting afresh",
                path.display()
            ),
        }
    }

    /// Writes file `name` (owner-only, renamed into place).
    ///
    /// # Errors
    /// The write's error (a full disk), with the path.
    pub fn write(&self, name: &str, bytes: &[u8]) -> Result<(), String> {
        let path = self.file(name);
        let tmp = self.file(&format!("{name}.{}.partial", std::process::id()));
        let written = (|| -> std::io::Result<()> {
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            fs::rename(&tmp, &path)
        })();
        written.map_err(|e| {
            let _ = fs::remove_file(&tmp);
            format!("cannot save {}: {e}", path.display())
        })
    }
}

/// Reads at most `cap` + 1 bytes of `path`.
pub fn read_bounded(path: &Path, cap: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    fs::File::open(path)?
        .take(cap + 1)
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("rdmaperf-statedir-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_new_directory_and_its_files_are_owner_only() {
        let d = temp("new").join("nested");
        let sd = StateDir::open(&d).unwrap();
        assert_eq!(fs::metadata(&d).unwrap().mode() & 0o777, 0o700);
        assert!(matches!(sd.read("f", 10), StateRead::Missing));
        sd.write("f", b"abc").unwrap();
        assert_eq!(fs::metadata(sd.file("f")).unwrap().mode() & 0o777, 0o600);
        assert!(matches!(sd.read("f", 10), StateRead::Bytes(b) if b == b"abc"));
        // Over the cap: not trusted.
        assert!(matches!(sd.read("f", 2), StateRead::Unusable(_)));
        let note = sd.set_aside("f", "damaged", 7);
        assert!(
            note.contains("set aside as") && d.join("f.bad-7").exists(),
            "{note}"
        );
        let _ = fs::remove_dir_all(d.parent().unwrap());
    }

    #[test]
    fn shared_files_and_directories_are_not_trusted() {
        let d = temp("shared");
        let sd = StateDir::open(&d).unwrap();
        sd.write("f", b"x").unwrap();
        fs::set_permissions(sd.file("f"), fs::Permissions::from_mode(0o666)).unwrap();
        assert!(
            matches!(sd.read("f", 10), StateRead::Unusable(why) if why.contains("writable by group or others"))
        );
        // Another user's file (as root, which CI is: chown works).
        fs::set_permissions(sd.file("f"), fs::Permissions::from_mode(0o600)).unwrap();
        if std::os::unix::fs::chown(sd.file("f"), Some(65_534), None).is_ok() {
            assert!(
                matches!(sd.read("f", 10), StateRead::Unusable(why) if why.contains("owned by uid 65534"))
            );
        }
        fs::set_permissions(&d, fs::Permissions::from_mode(0o777)).unwrap();
        let err = StateDir::open(&d).unwrap_err();
        assert!(err.contains("writable by group or others"), "{err}");
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn a_state_that_cannot_be_written_says_so_and_leaves_the_old_file() {
        let d = temp("full");
        let sd = StateDir::open(&d).unwrap();
        sd.write("f", b"old").unwrap();
        // The temporary file's place taken (as a full disk refuses the
        // write): an error naming the file, the old one untouched.
        fs::create_dir(sd.file(&format!("f.{}.partial", std::process::id()))).unwrap();
        let err = sd.write("f", b"new").unwrap_err();
        assert!(
            err.starts_with("cannot save ") && err.contains("/f:"),
            "{err}"
        );
        assert!(matches!(sd.read("f", 10), StateRead::Bytes(b) if b == b"old"));
        let _ = fs::remove_dir_all(&d);
    }
}
