//! Port counters over time: a [`Snapshot`] of every watched counter of
//! every rail at one moment (with the wall clock, the time since boot and
//! the boot id), the link flaps between two snapshots ([`flaps_between`]),
//! the flaps of a window ([`flaps_in_window`]) and an error counter's
//! count over the last hour ([`count_in_window`]).
//!
//! What can go wrong with counters, and what is done:
//! - a reboot (the boot id changed): the counters started again; nothing
//!   is compared across it (no flap storm, no negative rate), and flap
//!   events recorded before it stay in the window;
//! - a driver reload (same boot, a counter went down): the counter is
//!   taken as reset; `link_downed` then counts from zero, so its value is
//!   the flaps since the reload, while `carrier_changes` of a new netdev
//!   counts its first carrier up, so it adds nothing;
//! - a wrapped counter: the same as a reset (it went down);
//! - a saturated PMA counter (`symbol_error` stops at 65,535,
//!   `link_error_recovery` and `link_downed` at 255: IBTA PortCounters):
//!   its count is not known, said as such;
//! - a missing counter (rxe has no `counters/`): its check is skipped;
//! - a clock step: spans within one boot use the time since boot
//!   (`CLOCK_BOOTTIME`, /proc/uptime), never the wall clock; across boots
//!   an event "in the future" is counted as recent.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The port's `link_downed` counter: the PMA's, or the driver's (rxe's
/// `hw_counters/link_downed`).
pub const LINK_DOWNED: [&str; 2] = ["counters/link_downed", "hw_counters/link_downed"];
/// The netdev's `carrier_changes` (`/sys/class/net/<if>/carrier_changes`):
/// two per down/up cycle.
pub const CARRIER_CHANGES: &str = "net/carrier_changes";
/// The PMA's `symbol_error`.
pub const SYMBOL_ERROR: &str = "counters/symbol_error";
/// The PMA's `link_error_recovery`.
pub const LINK_ERROR_RECOVERY: &str = "counters/link_error_recovery";

/// The value at which a PMA counter of `key` stops (IBTA PortCounters:
/// SymbolErrorCounter 16 bits, LinkErrorRecoveryCounter and
/// LinkDownedCounter 8 bits).
pub fn saturation_of(key: &str) -> Option<u64> {
    match key {
        SYMBOL_ERROR => Some(u64::from(u16::MAX)),
        LINK_ERROR_RECOVERY | "counters/link_downed" => Some(u64::from(u8::MAX)),
        _ => None,
    }
}

/// Every watched counter of every rail at one moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Wall clock, Unix seconds.
    pub time_s: i64,
    /// Seconds since boot (`/proc/uptime`'s first figure).
    pub uptime_s: f64,
    /// `/proc/sys/kernel/random/boot_id`.
    pub boot_id: String,
    /// Per port (`rxe1/1`): counter key (`counters/symbol_error`,
    /// `hw_counters/link_downed`, `net/carrier_changes`) → value.
    pub ports: BTreeMap<String, BTreeMap<String, u64>>,
}

impl Snapshot {
    /// Whether both were taken in the same boot.
    pub fn same_boot(&self, other: &Snapshot) -> bool {
        self.boot_id == other.boot_id
    }

    /// Seconds from `older` to `self` on the boot's clock, when both are of
    /// one boot and in order.
    pub fn since(&self, older: &Snapshot) -> Option<f64> {
        let d = self.uptime_s - older.uptime_s;
        (self.same_boot(older) && d.is_finite() && d >= 0.0).then_some(d)
    }

    /// A counter of a port.
    pub fn get(&self, port: &str, key: &str) -> Option<u64> {
        self.ports.get(port)?.get(key).copied()
    }

    /// The port's `link_downed`, wherever the driver keeps it.
    pub fn link_downed(&self, port: &str) -> Option<u64> {
        LINK_DOWNED.iter().find_map(|k| self.get(port, k))
    }
}

/// The link flaps of one port between two snapshots of one boot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlapDelta {
    /// The port, `rxe1/1`.
    pub port: String,
    /// Flaps: the larger of `link_downed`'s rise and half
    /// `carrier_changes`' rise (rounded up: a port that went down and is
    /// still down is one).
    pub flaps: u64,
    /// `link_downed`'s rise, when both readings had it.
    pub link_downed: Option<u64>,
    /// `carrier_changes`' rise, when both readings had it.
    pub carrier_changes: Option<u64>,
    /// A counter went down between them (driver reload, wrap).
    pub reset: bool,
}

/// The flaps of every port of `now` between `before` and `now`: empty when
/// they are of different boots (the counters started again; the caller
/// says so) — ports with no flap are left out.
pub fn flaps_between(before: &Snapshot, now: &Snapshot) -> Vec<FlapDelta> {
    if !now.same_boot(before) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for port in now.ports.keys() {
        let mut reset = false;
        let link_downed = match (before.link_downed(port), now.link_downed(port)) {
            (Some(b), Some(n)) if n >= b => Some(n - b),
            // Reset: link_downed counts from 0 again, its value is the
            // flaps since.
            (Some(_), Some(n)) => {
                reset = true;
                Some(n)
            }
            _ => None,
        };
        let carrier_changes = match (
            before.get(port, CARRIER_CHANGES),
            now.get(port, CARRIER_CHANGES),
        ) {
            (Some(b), Some(n)) if n >= b => Some(n - b),
            // A new netdev counts its first carrier up: nothing to add.
            (Some(_), Some(_)) => {
                reset = true;
                Some(0)
            }
            _ => None,
        };
        let flaps = link_downed
            .unwrap_or(0)
            .max(carrier_changes.unwrap_or(0).div_ceil(2));
        if flaps > 0 || reset {
            out.push(FlapDelta {
                port: port.clone(),
                flaps,
                link_downed,
                carrier_changes,
                reset,
            });
        }
    }
    out
}

/// Flaps seen on a port by one run, kept for the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlapEvent {
    /// The port, `rxe1/1`.
    pub port: String,
    /// How many.
    pub flaps: u64,
    /// When the run saw them, Unix seconds.
    pub time_s: i64,
    /// The boot they were seen in, and its clock then.
    pub boot_id: String,
    /// Seconds since that boot.
    pub uptime_s: f64,
}

impl FlapEvent {
    /// Seconds from the event to `now`: on the boot's clock within one
    /// boot, else on the wall clock; negative when the wall clock went
    /// back past it.
    pub fn age(&self, now: &Snapshot) -> f64 {
        if self.boot_id == now.boot_id {
            now.uptime_s - self.uptime_s
        } else {
            (now.time_s - self.time_s) as f64
        }
    }
}

/// The flaps of `port` within `window_s` before `now`, and whether an
/// event lay in the future of the wall clock (a clock step back: counted,
/// it is recent by any measure).
pub fn flaps_in_window(
    events: &[FlapEvent],
    port: &str,
    now: &Snapshot,
    window_s: u64,
) -> (u64, bool) {
    let mut count = 0u64;
    let mut stepped = false;
    for e in events.iter().filter(|e| e.port == port) {
        let age = e.age(now);
        if age < 0.0 {
            stepped = true;
        }
        if age <= window_s as f64 {
            count = count.saturating_add(e.flaps);
        }
    }
    (count, stepped)
}

/// An error counter's count over a span that ends now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowCount {
    /// Its rise over the span.
    pub count: u64,
    /// The span, seconds (at most the window).
    pub span_s: f64,
    /// Its value now sits at the PMA counter's ceiling: the count is a
    /// lower bound.
    pub saturated: bool,
}

/// The rise of counter `key` of `port` over the longest span within
/// `window_s` that ends at `now`, from the snapshots of `history` (any
/// order) of the same boot with no reset after them. `None` when no
/// earlier snapshot qualifies (first run, a reboot, a reset) or `now`
/// lacks the counter.
pub fn count_in_window(
    history: &[Snapshot],
    now: &Snapshot,
    port: &str,
    key: &str,
    window_s: u64,
) -> Option<WindowCount> {
    let current = now.get(port, key)?;
    let mut earlier: Vec<(&Snapshot, f64)> = history
        .iter()
        .filter_map(|s| now.since(s).map(|d| (s, d)))
        // Zero is a span: /proc/uptime ticks in 10 ms, two runs can share one.
        .filter(|(_, d)| *d <= window_s as f64)
        .collect();
    // Newest first; walk back while the counter never went down.
    earlier.sort_by(|a, b| a.1.total_cmp(&b.1));
    let mut best: Option<(u64, f64)> = None;
    let mut newer = current;
    for (s, d) in earlier {
        let Some(v) = s.get(port, key) else { break };
        if v > newer {
            break;
        }
        best = Some((v, d));
        newer = v;
    }
    let (start, span_s) = best?;
    Some(WindowCount {
        count: current - start,
        span_s,
        saturated: saturation_of(key).is_some_and(|max| current >= max),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOOT: &str = "b1";

    fn snap(time_s: i64, uptime_s: f64, boot: &str, counters: &[(&str, u64)]) -> Snapshot {
        let mut port = BTreeMap::new();
        for (k, v) in counters {
            port.insert((*k).to_owned(), *v);
        }
        Snapshot {
            time_s,
            uptime_s,
            boot_id: boot.to_owned(),
            ports: BTreeMap::from([("rxe1/1".to_owned(), port)]),
        }
    }

    fn event(time_s: i64, uptime_s: f64, boot: &str, flaps: u64) -> FlapEvent {
        FlapEvent {
            port: "rxe1/1".into(),
            flaps,
            time_s,
            boot_id: boot.into(),
            uptime_s,
        }
    }

    #[test]
    fn a_down_up_cycle_is_one_flap_by_either_counter() {
        let a = snap(0, 100.0, BOOT, &[(LINK_DOWNED[1], 0), (CARRIER_CHANGES, 2)]);
        let b = snap(
            60,
            160.0,
            BOOT,
            &[(LINK_DOWNED[1], 1), (CARRIER_CHANGES, 4)],
        );
        let d = flaps_between(&a, &b);
        assert_eq!(d.len(), 1);
        assert_eq!(
            (d[0].flaps, d[0].link_downed, d[0].carrier_changes),
            (1, Some(1), Some(2))
        );
        // Only the netdev's counter (an IB port's IPoIB, or no link_downed):
        // five cycles, ten carrier changes, five flaps; a port still down: one.
        let c = snap(0, 100.0, BOOT, &[(CARRIER_CHANGES, 2)]);
        let e = snap(60, 160.0, BOOT, &[(CARRIER_CHANGES, 12)]);
        assert_eq!(flaps_between(&c, &e)[0].flaps, 5);
        let down = snap(60, 160.0, BOOT, &[(CARRIER_CHANGES, 3)]);
        assert_eq!(flaps_between(&c, &down)[0].flaps, 1);
        // Nothing moved: no entry.
        assert!(flaps_between(&a, &a).is_empty());
    }

    #[test]
    fn a_reboot_between_two_snapshots_counts_nothing_and_a_driver_reload_no_storm() {
        let a = snap(
            0,
            5000.0,
            BOOT,
            &[(LINK_DOWNED[0], 7), (CARRIER_CHANGES, 40)],
        );
        let rebooted = snap(
            600,
            30.0,
            "b2",
            &[(LINK_DOWNED[0], 0), (CARRIER_CHANGES, 1)],
        );
        assert!(flaps_between(&a, &rebooted).is_empty());
        // Driver reload: same boot, counters back near zero; link_downed
        // counts the flaps since (2), carrier_changes adds nothing.
        let reloaded = snap(
            600,
            5600.0,
            BOOT,
            &[(LINK_DOWNED[0], 2), (CARRIER_CHANGES, 1)],
        );
        let d = flaps_between(&a, &reloaded);
        assert_eq!(d.len(), 1);
        assert!(d[0].reset);
        assert_eq!(d[0].flaps, 2);
        // A wrapped carrier_changes alone is a reset, not 4 billion flaps.
        let b = snap(
            0,
            100.0,
            BOOT,
            &[(CARRIER_CHANGES, u64::from(u32::MAX) - 1)],
        );
        let wrapped = snap(60, 160.0, BOOT, &[(CARRIER_CHANGES, 2)]);
        let d = flaps_between(&b, &wrapped);
        assert_eq!((d[0].flaps, d[0].reset), (0, true));
    }

    #[test]
    fn flaps_across_the_windows_edge_a_reboot_and_a_clock_step() {
        let day = 86_400u64;
        let now = snap(200_000, 50_000.0, BOOT, &[]);
        let events = vec![
            // Same boot, 10 s inside the window by the boot clock even
            // though the wall clock was stepped forward by an hour since.
            event(200_000 - 86_390 - 3_600, 50_000.0 - 86_390.0, BOOT, 2),
            // Same boot, just outside the window.
            event(200_000 - 86_410, 50_000.0 - 86_410.0, BOOT, 3),
            // An earlier boot, 1 h ago on the wall clock: inside.
            event(200_000 - 3_600, 99_999.0, "b0", 1),
            // An earlier boot, 2 days ago: outside.
            event(200_000 - 172_800, 10.0, "b0", 4),
            // Another port.
            FlapEvent {
                port: "rxe0/1".into(),
                ..event(200_000, 50_000.0, BOOT, 9)
            },
        ];
        assert_eq!(flaps_in_window(&events, "rxe1/1", &now, day), (3, false));
        // The wall clock went back a day: an earlier boot's event now lies
        // in the future; it is counted and the step is said.
        let stepped = snap(200_000 - 86_400, 50_000.0, BOOT, &[]);
        let (n, step) = flaps_in_window(&events[2..3], "rxe1/1", &stepped, day);
        assert_eq!((n, step), (1, true));
    }

    #[test]
    fn an_error_count_spans_at_most_the_window_and_stops_at_a_reset_or_reboot() {
        let hour = 3_600;
        let key = SYMBOL_ERROR;
        let history = vec![
            snap(0, 0.0, "b0", &[(key, 0)]),
            snap(1_000, 1_000.0, BOOT, &[(key, 10)]),
            snap(2_000, 2_000.0, BOOT, &[(key, 500)]), // reset after this one
            snap(3_000, 3_000.0, BOOT, &[(key, 20)]),
            snap(4_000, 4_000.0, BOOT, &[(key, 50)]),
        ];
        let now = snap(4_500, 4_500.0, BOOT, &[(key, 170)]);
        let c = count_in_window(&history, &now, "rxe1/1", key, hour).unwrap();
        assert_eq!((c.count, c.span_s, c.saturated), (150, 1_500.0, false));
        // A snapshot over an hour old is not the start of the span.
        let old = vec![
            snap(500, 500.0, BOOT, &[(key, 0)]),
            snap(3_000, 3_000.0, BOOT, &[(key, 20)]),
        ];
        let c = count_in_window(&old, &now, "rxe1/1", key, hour).unwrap();
        assert_eq!((c.count, c.span_s), (150, 1_500.0));
        // First run: nothing to compare.
        assert!(count_in_window(&[], &now, "rxe1/1", key, hour).is_none());
        // Missing counter (rxe has no counters/): nothing.
        assert!(count_in_window(&history, &now, "rxe1/1", "counters/nope", hour).is_none());
        // A clock step of the wall clock does not matter within a boot.
        let stepped = Snapshot {
            time_s: -99_999,
            ..now.clone()
        };
        assert_eq!(
            count_in_window(&history, &stepped, "rxe1/1", key, hour)
                .unwrap()
                .count,
            150
        );
        // Saturated: a lower bound.
        let full = snap(4_500, 4_500.0, BOOT, &[(key, 65_535)]);
        assert!(
            count_in_window(&history, &full, "rxe1/1", key, hour)
                .unwrap()
                .saturated
        );
    }
}
