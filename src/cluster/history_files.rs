//! `--history DIR`: rank 0's file of every direction's past figures
//! (`cluster-history.json` in an owner-only [`StateDir`]): the directory
//! checked while the flags are (a usage error naming the flag), the file
//! read before the verdicts (set aside when damaged or foreign, never
//! trusted, never fatal) and written after them.

use std::path::Path;

use engine::baseline::BaselineRule;
use engine::cluster::history::{ClusterHistory, Ends, HistoryTally, MAX_HISTORY_BYTES, ends_of};
use engine::cluster::verdict::{BaselineFloor, DirectionVerdict, Measurement};

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

/// One run's history: the file read before the verdicts, each
/// direction's baseline, and the file written after them.
#[derive(Debug)]
pub struct RunHistory {
    dir: StateDir,
    past: ClusterHistory,
    rule: BaselineRule,
    ends: Vec<Vec<String>>,
    now_s: i64,
}

impl RunHistory {
    /// Opens `--history DIR` for a run whose ranks are on `hosts`, each
    /// with its rails' names (`devices[rank]`, one for all rails or one
    /// per rail); `None` (with a warning) when the directory cannot be
    /// used any more.
    pub fn open(
        dir: &Path,
        rule: BaselineRule,
        hosts: &[Option<String>],
        devices: &[Vec<String>],
    ) -> Option<Self> {
        let now_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let dir = match open_dir(dir) {
            Ok(sd) => sd,
            Err(e) => {
                eprintln!("rdmaperf cluster: warning: {e}: no history kept");
                return None;
            }
        };
        let past = load(&dir, now_s);
        Some(Self {
            dir,
            past,
            rule,
            ends: ends_of(hosts, devices),
            now_s,
        })
    }

    /// Each measurement's baseline, and the tally.
    pub fn floors(
        &self,
        measurements: &[Measurement],
    ) -> (Vec<Option<BaselineFloor>>, HistoryTally) {
        self.past
            .floors(&Ends::new(&self.ends), measurements, &self.rule)
    }

    /// Records every measured direction with its verdict and saves the
    /// file; how many old directions were forgotten.
    pub fn record_and_save(
        mut self,
        measurements: &[Measurement],
        directions: &[DirectionVerdict],
    ) -> usize {
        let dropped = self.past.record(
            &Ends::new(&self.ends),
            measurements,
            directions,
            &self.rule,
            self.now_s,
        );
        save(&self.dir, &self.past);
        dropped
    }
}
