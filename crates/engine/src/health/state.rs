//! What `rdmaperf health` keeps between runs, in one file of the state
//! directory (`health-state.json`): the counter snapshots of the last
//! hours, the flap events of the window, each rail direction's past
//! active figures and the last verdict. All bounded ([`Bounds`]): the file
//! never grows past a few hundred kB whatever runs how often.
//!
//! A file that is not this format, of another version or another node
//! (a state directory copied or shared between nodes) is refused
//! ([`StateProblem`]); the binary sets it aside and starts afresh, so a
//! damaged file is reported, never trusted and never fatal.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::HealthReport;
use super::counters::{FlapEvent, Snapshot};
use crate::baseline::History;

/// The file's `format` field.
pub const STATE_FORMAT: &str = "rdmaperf-health-state";
/// The file's `version` field.
pub const STATE_VERSION: u32 = 1;
/// Largest state file read, bytes: what the bounds below make is far
/// less; a bigger file is not ours.
pub const MAX_STATE_BYTES: u64 = 4 << 20;

/// How much the state keeps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    /// Snapshots younger than this are kept, seconds (two hours: the rate
    /// window is one).
    pub snapshot_age_s: u64,
    /// At most this many snapshots.
    pub snapshots: usize,
    /// Flap events younger than this are kept (the longer of the flap
    /// window and a week).
    pub event_age_s: u64,
    /// At most this many flap events.
    pub events: usize,
    /// At most this many rail directions with a baseline.
    pub baselines: usize,
    /// At most this many ports in a snapshot.
    pub ports: usize,
}

impl Bounds {
    /// The bounds for a flap window of `flap_window_s`.
    pub fn for_window(flap_window_s: u64) -> Self {
        Self {
            snapshot_age_s: 2 * super::passive::RATE_WINDOW_S,
            snapshots: 256,
            event_age_s: flap_window_s.max(7 * 86_400),
            events: 4_096,
            baselines: 256,
            ports: 64,
        }
    }
}

/// The state file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HealthState {
    /// [`STATE_FORMAT`].
    pub format: String,
    /// [`STATE_VERSION`].
    pub version: u32,
    /// The node it belongs to.
    pub node: String,
    /// Counter snapshots, oldest first.
    pub snapshots: Vec<Snapshot>,
    /// Flap events, oldest first.
    pub flaps: Vec<FlapEvent>,
    /// Each active direction's (`rxe1 -> rxe0`) past figures.
    pub baselines: BTreeMap<String, History>,
    /// The last run's report.
    pub last: Option<HealthReport>,
}

/// Why a state file was not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateProblem {
    /// Not JSON, or not of this shape.
    #[error("damaged: {0}")]
    Damaged(String),
    /// Another program's file, or another version of ours.
    #[error(
        "not an rdmaperf health state of version {STATE_VERSION} (format {format:?}, version {version})"
    )]
    Foreign {
        /// Its format field.
        format: String,
        /// Its version field.
        version: u32,
    },
    /// Another node's state.
    #[error("the state of node {0:?}, not this node's")]
    OtherNode(String),
    /// Bigger than [`MAX_STATE_BYTES`].
    #[error("{0} bytes, more than the {MAX_STATE_BYTES} a state file can be")]
    TooBig(u64),
}

impl HealthState {
    /// An empty state of `node`.
    pub fn new(node: &str) -> Self {
        Self {
            format: STATE_FORMAT.into(),
            version: STATE_VERSION,
            node: node.to_owned(),
            snapshots: Vec::new(),
            flaps: Vec::new(),
            baselines: BTreeMap::new(),
            last: None,
        }
    }

    /// Reads a state file's bytes for `node` (`None`: whichever node's,
    /// as the exporter reads it).
    ///
    /// # Errors
    /// [`StateProblem`]: too big, not JSON of this shape, another format
    /// or version, another node's.
    pub fn parse(bytes: &[u8], node: Option<&str>) -> Result<Self, StateProblem> {
        if bytes.len() as u64 > MAX_STATE_BYTES {
            return Err(StateProblem::TooBig(bytes.len() as u64));
        }
        // The header first, so that another version is named as such.
        #[derive(Deserialize)]
        struct Header {
            format: String,
            version: u32,
        }
        let header: Header =
            serde_json::from_slice(bytes).map_err(|e| StateProblem::Damaged(e.to_string()))?;
        if header.format != STATE_FORMAT || header.version != STATE_VERSION {
            return Err(StateProblem::Foreign {
                format: header.format,
                version: header.version,
            });
        }
        let state: HealthState =
            serde_json::from_slice(bytes).map_err(|e| StateProblem::Damaged(e.to_string()))?;
        if let Some(node) = node
            && state.node != node
        {
            return Err(StateProblem::OtherNode(state.node));
        }
        Ok(state)
    }

    /// The newest snapshot.
    pub fn latest(&self) -> Option<&Snapshot> {
        self.snapshots.last()
    }

    /// Adds this run's snapshot and flap events, then drops what is
    /// older or more than `bounds` allow (oldest first).
    pub fn record(&mut self, now: Snapshot, events: Vec<FlapEvent>, bounds: &Bounds) {
        let mut now = now;
        if now.ports.len() > bounds.ports {
            now.ports = now.ports.into_iter().take(bounds.ports).collect();
        }
        self.flaps.extend(events);
        self.snapshots.push(now);
        self.trim(bounds);
    }

    /// Drops what `bounds` do not keep, judged against the newest
    /// snapshot.
    pub fn trim(&mut self, bounds: &Bounds) {
        let Some(now) = self.snapshots.last().cloned() else {
            return;
        };
        let young = |age: f64, max: u64| age <= max as f64;
        self.snapshots.retain(|s| {
            let age = match now.since(s) {
                Some(d) => d,
                None => (now.time_s - s.time_s) as f64,
            };
            young(age, bounds.snapshot_age_s)
        });
        if self.snapshots.len() > bounds.snapshots {
            let extra = self.snapshots.len() - bounds.snapshots;
            self.snapshots.drain(..extra);
        }
        self.flaps
            .retain(|e| young(e.age(&now), bounds.event_age_s));
        if self.flaps.len() > bounds.events {
            let extra = self.flaps.len() - bounds.events;
            self.flaps.drain(..extra);
        }
        while self.baselines.len() > bounds.baselines {
            // The direction whose last run is oldest goes.
            let oldest = self
                .baselines
                .iter()
                .min_by_key(|(_, h)| h.recent.last().map_or(i64::MIN, |r| r.time_s))
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => {
                    self.baselines.remove(&k);
                }
                None => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(time_s: i64, uptime_s: f64) -> Snapshot {
        Snapshot {
            time_s,
            uptime_s,
            boot_id: "b1".into(),
            ports: BTreeMap::from([(
                "rxe1/1".to_owned(),
                BTreeMap::from([("hw_counters/link_downed".to_owned(), 0u64)]),
            )]),
        }
    }

    #[test]
    fn a_state_round_trips_and_refuses_damage_other_formats_and_other_nodes() {
        let mut s = HealthState::new("node7");
        s.record(snap(100, 50.0), Vec::new(), &Bounds::for_window(86_400));
        let bytes = serde_json::to_vec(&s).unwrap();
        assert_eq!(HealthState::parse(&bytes, Some("node7")).unwrap(), s);
        assert_eq!(
            HealthState::parse(&bytes, Some("node8")),
            Err(StateProblem::OtherNode("node7".into()))
        );
        assert!(matches!(
            HealthState::parse(b"{\"format\": \"rdmaperf-health-st", Some("node7")),
            Err(StateProblem::Damaged(_))
        ));
        assert!(matches!(
            HealthState::parse(b"\x00\x01garbage", Some("node7")),
            Err(StateProblem::Damaged(_))
        ));
        let v2 = String::from_utf8(bytes.clone())
            .unwrap()
            .replace("\"version\":1", "\"version\":2");
        assert_eq!(
            HealthState::parse(v2.as_bytes(), Some("node7")),
            Err(StateProblem::Foreign {
                format: STATE_FORMAT.into(),
                version: 2
            })
        );
        assert!(matches!(
            HealthState::parse(br#"{"format":"nhc","version":1}"#, Some("node7")),
            Err(StateProblem::Foreign { .. })
        ));
        let big = vec![b' '; MAX_STATE_BYTES as usize + 1];
        assert!(matches!(
            HealthState::parse(&big, Some("node7")),
            Err(StateProblem::TooBig(_))
        ));
    }

    #[test]
    fn the_state_stays_bounded_however_often_it_runs() {
        let bounds = Bounds::for_window(86_400);
        let mut s = HealthState::new("n");
        // A run every 10 s for a day, each seeing a flap.
        for i in 0..8_640i64 {
            let t = i * 10;
            let event = FlapEvent {
                port: "rxe1/1".into(),
                flaps: 1,
                time_s: t,
                boot_id: "b1".into(),
                uptime_s: t as f64,
            };
            s.record(snap(t, t as f64), vec![event], &bounds);
        }
        assert_eq!(s.snapshots.len(), bounds.snapshots);
        assert_eq!(s.flaps.len(), bounds.events);
        // The newest are the ones kept.
        assert_eq!(s.snapshots.last().unwrap().time_s, 86_390);
        assert_eq!(s.flaps.last().unwrap().time_s, 86_390);
        let bytes = serde_json::to_vec(&s).unwrap();
        assert!((bytes.len() as u64) < MAX_STATE_BYTES, "{}", bytes.len());
        // Old snapshots go by age too.
        let mut t = HealthState::new("n");
        t.record(snap(0, 0.0), Vec::new(), &bounds);
        t.record(snap(10_000, 10_000.0), Vec::new(), &bounds);
        assert_eq!(t.snapshots.len(), 1);
    }
}
