//! The state directory (`--state-dir`, `/var/lib/rdmaperf` by default):
//! created owner-only (0700), and trusted only when it is ours — owned by
//! this user and writable by nobody else; the state file in it likewise,
//! and only when it parses as this node's state of this version. A file
//! that is not is renamed aside (`health-state.json.bad-<unix time>`) and
//! reported; a directory that is not ours is reported and not used. None
//! of this is fatal: the checks that need no history still run.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use engine::health::state::{HealthState, MAX_STATE_BYTES};

/// The state file's name in the directory.
pub const STATE_FILE: &str = "health-state.json";

/// A usable state directory.
#[derive(Debug, Clone)]
pub struct StateDir {
    dir: PathBuf,
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
    /// Why it cannot be used, in words (the caller reports it and runs
    /// without state).
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

    /// The state file's path.
    pub fn file(&self) -> PathBuf {
        self.dir.join(STATE_FILE)
    }

    /// This node's state, or a fresh one with a note on what was wrong
    /// with the file (set aside when it was there but not usable).
    pub fn load(&self, node: &str, now_s: i64) -> (HealthState, Option<String>) {
        let path = self.file();
        let meta = match fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return (HealthState::new(node), None);
            }
            Err(e) => {
                return (
                    HealthState::new(node),
                    Some(format!(
                        "cannot read {}: {e}; starting afresh",
                        path.display()
                    )),
                );
            }
        };
        let problem = if !meta.is_file() {
            Some("not a regular file".to_owned())
        } else if let Some(why) = not_ours(&meta) {
            Some(why)
        } else if meta.len() > MAX_STATE_BYTES {
            Some(format!("{} bytes, more than {MAX_STATE_BYTES}", meta.len()))
        } else {
            match read_bounded(&path) {
                Ok(bytes) => match HealthState::parse(&bytes, Some(node)) {
                    Ok(state) => return (state, None),
                    Err(e) => Some(e.to_string()),
                },
                Err(e) => Some(format!("unreadable: {e}")),
            }
        };
        let problem = problem.unwrap_or_default();
        let aside = self.dir.join(format!("{STATE_FILE}.bad-{now_s}"));
        let note = match fs::rename(&path, &aside) {
            Ok(()) => format!(
                "state file {} {problem}: set aside as {}; starting afresh",
                path.display(),
                aside.display()
            ),
            Err(e) => format!(
                "state file {} {problem}: not used (cannot set it aside: {e}); starting afresh",
                path.display()
            ),
        };
        (HealthState::new(node), Some(note))
    }

    /// Writes `state` (owner-only, renamed into place).
    ///
    /// # Errors
    /// The write's error (a full disk), with the path.
    pub fn save(&self, state: &HealthState) -> Result<(), String> {
        let path = self.file();
        let tmp = self
            .dir
            .join(format!("{STATE_FILE}.{}.partial", std::process::id()));
        let text = serde_json::to_vec(state).map_err(|e| e.to_string())?;
        let written = (|| -> std::io::Result<()> {
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(&text)?;
            f.sync_all()?;
            fs::rename(&tmp, &path)
        })();
        written.map_err(|e| {
            let _ = fs::remove_file(&tmp);
            format!("cannot save the state to {}: {e}", path.display())
        })
    }
}

/// The last report in the state file of `dir`, read only (the
/// exporter's view: nothing is set aside, any node's state is shown).
pub fn last_report(dir: &Path) -> Option<engine::health::HealthReport> {
    let bytes = read_bounded(&dir.join(STATE_FILE)).ok()?;
    HealthState::parse(&bytes, None).ok()?.last
}

/// Reads at most [`MAX_STATE_BYTES`] + 1 bytes.
fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    fs::File::open(path)?
        .take(MAX_STATE_BYTES + 1)
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
    fn a_new_directory_is_owner_only_and_a_state_round_trips() {
        let d = temp("new").join("nested");
        let sd = StateDir::open(&d).unwrap();
        assert_eq!(fs::metadata(&d).unwrap().mode() & 0o777, 0o700);
        let (mut s, note) = sd.load("n1", 0);
        assert!(note.is_none());
        s.last = None;
        sd.save(&s).unwrap();
        assert_eq!(fs::metadata(sd.file()).unwrap().mode() & 0o777, 0o600);
        let (again, note) = sd.load("n1", 0);
        assert_eq!((again, note), (s, None));
        let _ = fs::remove_dir_all(d.parent().unwrap());
    }

    #[test]
    fn a_corrupt_or_other_nodes_file_is_set_aside_and_a_shared_directory_refused() {
        let d = temp("bad");
        let sd = StateDir::open(&d).unwrap();
        fs::write(sd.file(), b"{\"format\": \"rdmaperf-health-state\", \"vers").unwrap();
        fs::set_permissions(sd.file(), fs::Permissions::from_mode(0o600)).unwrap();
        let (s, note) = sd.load("n1", 1234);
        let note = note.unwrap();
        assert!(
            note.contains("damaged") && note.contains("set aside"),
            "{note}"
        );
        assert!(d.join("health-state.json.bad-1234").exists());
        assert!(!sd.file().exists());
        // Another node's state.
        sd.save(&HealthState::new("n2")).unwrap();
        let (_, note) = sd.load("n1", 1235);
        assert!(note.unwrap().contains("\"n2\""));
        assert_eq!(s, HealthState::new("n1"));
        // A world-writable file is not trusted.
        sd.save(&HealthState::new("n1")).unwrap();
        fs::set_permissions(sd.file(), fs::Permissions::from_mode(0o666)).unwrap();
        let (_, note) = sd.load("n1", 1236);
        assert!(note.unwrap().contains("writable by group or others"));
        // A world-writable directory is not used.
        fs::set_permissions(&d, fs::Permissions::from_mode(0o777)).unwrap();
        let err = StateDir::open(&d).unwrap_err();
        assert!(err.contains("writable by group or others"), "{err}");
        let _ = fs::remove_dir_all(&d);
    }
}
