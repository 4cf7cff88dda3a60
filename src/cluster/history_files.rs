//! `--history DIR`: rank 0's file of every direction's past figures
//! (`cluster-history.json` in an owner-only [`StateDir`]): the directory
//! checked while the flags are (a usage error naming the flag), the file
//! read before the verdicts (set aside when damaged or foreign, never
//! trusted, never fatal) and written after them.

use std::path::Path;

use engine::cluster::history::{ClusterHistory, MAX_HISTORY_BYTES};

use crate::exit::UsageError;
use crate::state_dir::{StateDir, StateRead};

/// The file's name in the directory.
pub const HISTORY_FILE: &str = "cluster-history.json";

/// Creates (0700) or checks `--history DIR`, and that the file can be
/// written there.
///
/// # Errors
/// A usage error naming `--history`.
pub fn open_dir(dir: &Path) -> Result<StateDir, UsageError> {
    let sd = StateDir::open(dir).map_err(|e| UsageError(format!("--history: {e}")))?;
    crate::atomic_file::check_writable("--history", &sd.file(HISTORY_FILE))?;
    Ok(sd)
}

/// The history in `dir`, or an empty one with a note (on stderr) on what
/// was wrong with the file.
pub fn load(dir: &StateDir, now_s: i64) -> ClusterHistory {
    let why = match dir.read(HISTORY_FILE, MAX_HISTORY_BYTES) {
        StateRead::Missing => return ClusterHistory::default(),
        StateRead::Bytes(bytes) => match ClusterHistory::parse(&bytes) {
            Ok(h) => return h,
            Err(e) => e,
        },
        StateRead::Unusable(why) => why,
    };
    eprintln!(
        "rdmaperf cluster: warning: --history: {}",
        dir.set_aside(HISTORY_FILE, &why, now_s)
    );
    ClusterHistory::default()
}

/// Saves the history; a failure is a warning (the run's verdicts stand).
pub fn save(dir: &StateDir, history: &ClusterHistory) {
    let written = serde_json::to_vec(history)
        .map_err(|e| e.to_string())
        .and_then(|bytes| dir.write(HISTORY_FILE, &bytes));
    if let Err(e) = written {
        eprintln!("rdmaperf cluster: warning: --history: {e}");
    }
}
