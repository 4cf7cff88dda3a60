//! The health state in its directory (`--state-dir`, `/var/lib/rdmaperf`
//! by default; [`crate::state_dir::StateDir`]: owner-only, shared files
//! not trusted): loaded for this node, or set aside and started afresh when
//! damaged, foreign or another node's; saved at the end of every run.

use std::path::Path;

use engine::health::HealthReport;
use engine::health::state::{HealthState, MAX_STATE_BYTES};

use crate::state_dir::{StateDir, StateRead, read_bounded};

/// The state file's name in the directory.
pub const STATE_FILE: &str = "health-state.json";

/// This node's state, or a fresh one with a note on what was wrong with
/// the file (set aside when it was there but not usable).
pub fn load(dir: &StateDir, node: &str, now_s: i64) -> (HealthState, Option<String>) {
    let why = match dir.read(STATE_FILE, MAX_STATE_BYTES) {
        StateRead::Missing => return (HealthState::new(node), None),
        StateRead::Bytes(bytes) => match HealthState::parse(&bytes, Some(node)) {
            Ok(state) => return (state, None),
            Err(e) => e.to_string(),
        },
        StateRead::Unusable(why) => why,
    };
    let note = dir.set_aside(STATE_FILE, &why, now_s);
    (HealthState::new(node), Some(format!("state file {note}")))
}

/// Saves `state`.
///
/// # Errors
/// Why it could not be written (a full disk).
pub fn save(dir: &StateDir, state: &HealthState) -> Result<(), String> {
    let bytes = serde_json::to_vec(state).map_err(|e| e.to_string())?;
    dir.write(STATE_FILE, &bytes)
}

/// The last report in the state file of `dir`, read only (the exporter's
/// view: nothing is set aside, any node's state is shown).
pub fn last_report(dir: &Path) -> Option<HealthReport> {
    let bytes = read_bounded(&dir.join(STATE_FILE), MAX_STATE_BYTES).ok()?;
    HealthState::parse(&bytes, None).ok()?.last
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_corrupt_or_other_nodes_file_is_set_aside_and_a_good_one_round_trips() {
        let d = std::env::temp_dir().join(format!("rdmaperf-health-state-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let sd = StateDir::open(&d).unwrap();
        let (s, note) = load(&sd, "n1", 0);
        assert!(note.is_none());
        save(&sd, &s).unwrap();
        assert_eq!(load(&sd, "n1", 0), (s.clone(), None));
        std::fs::write(
            sd.file(STATE_FILE),
            b"{\"format\": \"rdmaperf-health-state\", \"vers",
        )
        .unwrap();
        let (fresh, note) = load(&sd, "n1", 1234);
        let note = note.unwrap();
        assert!(
            note.contains("damaged") && note.contains("set aside"),
            "{note}"
        );
        assert!(d.join("health-state.json.bad-1234").exists());
        assert_eq!(fresh, HealthState::new("n1"));
        save(&sd, &HealthState::new("n2")).unwrap();
        let (_, note) = load(&sd, "n1", 1235);
        assert!(note.unwrap().contains("\"n2\""));
        let _ = std::fs::remove_dir_all(&d);
    }
}
