//! What one health run reads besides the ports: the clocks (wall, time
//! since boot, boot id: `engine::health::counters` needs all three to
//! survive reboots and clock steps) and the counter [`Snapshot`] of the
//! rails — each port's error counters (`counters/`, `hw_counters/`, as
//! `rdmaperf ports` reads them) and its netdev's `carrier_changes`.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use engine::health::counters::{CARRIER_CHANGES, Snapshot};
use engine::health::passive::HealthRail;

use crate::sysfs::Sysfs;

/// The clocks at the start of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Clock {
    /// Wall clock, Unix seconds.
    pub time_s: i64,
    /// Seconds since boot (`/proc/uptime`, CLOCK_BOOTTIME: it counts
    /// suspend and is never set).
    pub uptime_s: f64,
    /// `/proc/sys/kernel/random/boot_id` (new at every boot).
    pub boot_id: String,
}

impl Clock {
    /// Reads the clocks; a `/proc` without them gives an uptime of 0 and
    /// an empty boot id (every run then looks like a new boot: nothing is
    /// compared, nothing is counted twice).
    pub fn read() -> Self {
        let time_s = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let uptime_s = std::fs::read_to_string("/proc/uptime")
            .ok()
            .and_then(|t| t.split_whitespace().next()?.parse::<f64>().ok())
            .filter(|u| u.is_finite() && *u >= 0.0)
            .unwrap_or(0.0);
        let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|t| t.trim().to_owned())
            .unwrap_or_default();
        Self {
            time_s,
            uptime_s,
            boot_id,
        }
    }
}

/// The counters of every rail present, now.
pub fn snapshot(sysfs: &Sysfs, rails: &[HealthRail], clock: &Clock) -> Snapshot {
    let mut ports = BTreeMap::new();
    for rail in rails {
        let Some(state) = &rail.state else { continue };
        let mut counters = state.error_counters().counters;
        if let Some(netdev) = &state.netdev
            && let Some(v) = sysfs.netdev_counter(netdev, "carrier_changes")
        {
            counters.insert(CARRIER_CHANGES.to_owned(), v);
        }
        ports.insert(rail.key.clone(), counters);
    }
    Snapshot {
        time_s: clock.time_s,
        uptime_s: clock.uptime_s,
        boot_id: if clock.boot_id.is_empty() {
            // No boot id: a fresh one per run, so nothing is compared.
            format!("unknown-{}-{}", clock.time_s, std::process::id())
        } else {
            clock.boot_id.clone()
        },
        ports,
    }
}
