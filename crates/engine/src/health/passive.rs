//! The passive checks of one run (no traffic, well under a second): the
//! rails present, each rail's port ACTIVE/LinkUp at the expected rate, its
//! link flaps in the window, its `symbol_error` and `link_error_recovery`
//! counts over the last hour and any other error counter that rose since
//! the last run. Input: the ports as read now, this run's counter
//! [`Snapshot`] and what the state kept; output: the checks and the flap
//! events to keep.

use std::collections::BTreeMap;

use crate::cluster::rails::{RailSpec, device_order};
use crate::fabric::link::{ExpectRate, is_error_counter};
use crate::fabric::ports::{DeviceState, PortExpectation, PortState, check_ports};

use super::counters::{
    self, CARRIER_CHANGES, FlapEvent, LINK_DOWNED, LINK_ERROR_RECOVERY, SYMBOL_ERROR, Snapshot,
};
use super::{Check, Status, describe_seconds};

/// The span error counts are judged over: an hour, as the thresholds are
/// per hour.
pub const RATE_WINDOW_S: u64 = 3_600;

/// The thresholds of the passive checks.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// `--expect-rate`.
    pub expect_rate: ExpectRate,
    /// `--expect-rails`.
    pub expect_rails: Option<usize>,
    /// `--flap-window`, seconds (24 h: NVIDIA's bring-up guide, aznhc).
    pub flap_window_s: u64,
    /// `--flap-warn` (2: "two or more link-down events within 24 h →
    /// investigate").
    pub flap_warn: u64,
    /// `--flap-fail` (5: aznhc's "lost carrier" rule).
    pub flap_fail: u64,
    /// `--max-symbol-errors` per hour (120: NVSentinel).
    pub max_symbol_errors: u64,
    /// `--max-link-recoveries` per hour (300, NVSentinel's 5 a minute).
    pub max_link_recoveries: u64,
    /// `--ignore-counter`: error counters whose rise is not warned about
    /// (a name, or `counters/NAME`, `hw_counters/NAME`).
    pub ignore_counters: Vec<String>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            expect_rate: ExpectRate::Auto,
            expect_rails: None,
            flap_window_s: 86_400,
            flap_warn: 2,
            flap_fail: 5,
            max_symbol_errors: 120,
            max_link_recoveries: 300,
            ignore_counters: Vec::new(),
        }
    }
}

/// One rail as the health check sees it: a port that should be there.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthRail {
    /// `rxe1/1`.
    pub key: String,
    /// The device.
    pub device: String,
    /// The port.
    pub port: u8,
    /// The port as read, or `None` when it is missing.
    pub state: Option<PortState>,
}

/// The rails under `spec`: named ones whether or not they exist (a missing
/// one is a finding here, not a usage error), or (`auto`) every port of
/// the node's main link layer — the layer most ACTIVE ports have, else the
/// first port's — ACTIVE or not, in device order.
pub fn health_rails(devices: &[DeviceState], spec: &RailSpec) -> Vec<HealthRail> {
    let mut sorted: Vec<&DeviceState> = devices.iter().collect();
    sorted.sort_by(|a, b| device_order(&a.name, &b.name));
    let rail = |d: &DeviceState, p: &PortState| HealthRail {
        key: format!("{}/{}", d.name, p.port),
        device: d.name.clone(),
        port: p.port,
        state: Some(p.clone()),
    };
    match spec {
        RailSpec::Named(names) => names
            .iter()
            .map(|n| {
                let device = sorted.iter().find(|d| d.name == n.device);
                let port = device.and_then(|d| match n.port {
                    Some(p) => d.ports.iter().find(|q| q.port == p),
                    None => d
                        .ports
                        .iter()
                        .find(|q| q.state_id() == Some(4))
                        .or_else(|| d.ports.first()),
                });
                match (device, port) {
                    (Some(d), Some(p)) => rail(d, p),
                    _ => {
                        let port = n.port.unwrap_or(1);
                        HealthRail {
                            key: format!("{}/{port}", n.device),
                            device: n.device.clone(),
                            port,
                            state: None,
                        }
                    }
                }
            })
            .collect(),
        RailSpec::Auto => {
            let all: Vec<(&DeviceState, &PortState)> = sorted
                .iter()
                .flat_map(|d| d.ports.iter().map(move |p| (*d, p)))
                .collect();
            let mut counts: BTreeMap<Option<&str>, usize> = BTreeMap::new();
            for (_, p) in all.iter().filter(|(_, p)| p.state_id() == Some(4)) {
                *counts.entry(p.link_layer.as_deref()).or_default() += 1;
            }
            let main = counts
                .iter()
                .max_by_key(|(_, n)| **n)
                .map(|(l, _)| *l)
                .or_else(|| all.first().map(|(_, p)| p.link_layer.as_deref()));
            all.iter()
                .filter(|(_, p)| Some(p.link_layer.as_deref()) == main)
                .take(crate::cluster::rails::MAX_RAILS)
                .map(|(d, p)| rail(d, p))
                .collect()
        }
    }
}

/// What the passive checks were given.
#[derive(Debug, Clone, Copy)]
pub struct PassiveInput<'a> {
    /// Every device as read now.
    pub devices: &'a [DeviceState],
    /// The rails (from [`health_rails`]).
    pub rails: &'a [HealthRail],
    /// The thresholds.
    pub limits: &'a Limits,
    /// This run's counters.
    pub now: &'a Snapshot,
    /// Earlier snapshots kept (any order; the newest is the last run's).
    pub history: &'a [Snapshot],
    /// Flap events kept.
    pub events: &'a [FlapEvent],
}

/// The passive checks' outcome.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PassiveOutcome {
    /// The checks, in rail order.
    pub checks: Vec<Check>,
    /// Flaps seen since the last run, to keep.
    pub new_events: Vec<FlapEvent>,
    /// Notes (a reboot since the last run, a clock step, a reset).
    pub notes: Vec<String>,
    /// Each rail's figures, for the exporter.
    pub figures: Vec<super::RailFigures>,
}

/// Runs the passive checks.
pub fn check(input: PassiveInput<'_>) -> PassiveOutcome {
    let PassiveInput {
        devices,
        rails,
        limits,
        now,
        history,
        events,
    } = input;
    let mut out = PassiveOutcome::default();
    let previous = history
        .iter()
        .filter(|s| now.since(s).is_some())
        .max_by(|a, b| a.uptime_s.total_cmp(&b.uptime_s))
        .or_else(|| history.iter().max_by_key(|s| s.time_s));
    match previous {
        None => out.notes.push(
            "no earlier reading in the state: flaps and error counts are counted from now".into(),
        ),
        Some(p) if !p.same_boot(now) => out.notes.push(format!(
            "rebooted since the last run (boot id {} -> {}): the counters started again; \
             flaps kept from before stay in the window",
            short(&p.boot_id),
            short(&now.boot_id)
        )),
        _ => {}
    }
    out.checks.push(rails_check(rails, limits));
    // The verdict of ports --check over the rails present, for state and rate.
    let present: Vec<DeviceState> = rails
        .iter()
        .filter_map(|r| {
            let state = r.state.clone()?;
            let d = devices.iter().find(|d| d.name == r.device)?;
            Some(DeviceState {
                ports: vec![state],
                ..d.clone()
            })
        })
        .collect();
    let verdict = check_ports(
        &present,
        &PortExpectation {
            rate: limits.expect_rate,
            ports: None,
        },
        &BTreeMap::new(),
    );
    let flaps_now: BTreeMap<String, counters::FlapDelta> = previous
        .map(|p| counters::flaps_between(p, now))
        .unwrap_or_default()
        .into_iter()
        .map(|d| (d.port.clone(), d))
        .collect();
    for d in flaps_now.values() {
        if d.flaps > 0 {
            out.new_events.push(FlapEvent {
                port: d.port.clone(),
                flaps: d.flaps,
                time_s: now.time_s,
                boot_id: now.boot_id.clone(),
                uptime_s: now.uptime_s,
            });
        }
        if d.reset {
            out.notes.push(format!(
                "{}: a counter went down since the last run (driver reload or wrap): taken as reset",
                d.port
            ));
        }
    }
    let all_events: Vec<FlapEvent> = events
        .iter()
        .chain(out.new_events.iter())
        .cloned()
        .collect();
    let mut stepped = false;
    for rail in rails {
        let Some(state) = &rail.state else { continue };
        let pv = verdict
            .ports
            .iter()
            .find(|v| v.device == rail.device && v.port == rail.port);
        let (state_reasons, rate_reasons): (Vec<&String>, Vec<&String>) = pv
            .map(|v| v.reasons.iter().partition(|r| !r.starts_with("rate")))
            .unwrap_or_default();
        let subject = Some(rail.key.clone());
        out.checks.push(if state_reasons.is_empty() {
            Check::new(
                "port",
                subject.clone(),
                Status::Pass,
                format!(
                    "{} {}",
                    state.state_name().unwrap_or("?"),
                    state.phys_state_name().unwrap_or("?")
                ),
            )
        } else {
            Check::new("port", subject.clone(), Status::Fail, join(&state_reasons))
        });
        out.checks.push(if rate_reasons.is_empty() {
            let held = pv
                .and_then(|v| v.expected_gbps)
                .map(|g| format!(" (expected {g} Gb/s)"))
                .unwrap_or_default();
            Check::new(
                "rate",
                subject.clone(),
                Status::Pass,
                format!("{}{held}", state.rate.as_deref().unwrap_or("rate unknown")),
            )
        } else {
            Check::new("rate", subject.clone(), Status::Fail, join(&rate_reasons))
        });
        let (in_window, step) =
            counters::flaps_in_window(&all_events, &rail.key, now, limits.flap_window_s);
        stepped |= step;
        out.checks.push(flap_check(
            rail,
            in_window,
            flaps_now.get(&rail.key),
            limits,
        ));
        let mut figures = super::RailFigures {
            device: rail.device.clone(),
            port: rail.port,
            flaps: in_window,
            flap_window_s: limits.flap_window_s,
            symbol_errors: None,
            link_error_recoveries: None,
        };
        for (key, name, max) in [
            (SYMBOL_ERROR, "symbol_error", limits.max_symbol_errors),
            (
                LINK_ERROR_RECOVERY,
                "link_error_recovery",
                limits.max_link_recoveries,
            ),
        ] {
            if let Some(c) = counters::count_in_window(history, now, &rail.key, key, RATE_WINDOW_S)
            {
                if key == SYMBOL_ERROR {
                    figures.symbol_errors = Some(c.count);
                } else {
                    figures.link_error_recoveries = Some(c.count);
                }
                out.checks.push(rate_check(name, subject.clone(), &c, max));
            }
        }
        out.figures.push(figures);
        if let Some(p) = previous.filter(|p| p.same_boot(now)) {
            out.checks
                .push(rises_check(p, now, &rail.key, &limits.ignore_counters));
        }
    }
    if stepped {
        out.notes.push(
            "a flap kept in the state lies in the future of the wall clock (the clock was set \
             back): counted as recent"
                .into(),
        );
    }
    out
}

fn short(boot_id: &str) -> &str {
    boot_id.get(..8).unwrap_or(boot_id)
}

fn join(reasons: &[&String]) -> String {
    reasons
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join("; ")
}

fn plural(n: u64, one: &str) -> String {
    if n == 1 {
        format!("{n} {one}")
    } else {
        format!("{n} {one}s")
    }
}

/// The rails present and counted.
fn rails_check(rails: &[HealthRail], limits: &Limits) -> Check {
    let missing: Vec<&str> = rails
        .iter()
        .filter(|r| r.state.is_none())
        .map(|r| r.key.as_str())
        .collect();
    let present = rails.len() - missing.len();
    let mut reasons = Vec::new();
    if !missing.is_empty() {
        reasons.push(format!("missing: {}", missing.join(", ")));
    }
    if let Some(n) = limits.expect_rails.filter(|&n| n != present) {
        reasons.push(format!("expected {n} rails, found {present}"));
    }
    if rails.is_empty() && limits.expect_rails.is_none() {
        reasons.push("no RDMA port found".into());
    }
    if reasons.is_empty() {
        let names: Vec<&str> = rails.iter().map(|r| r.key.as_str()).collect();
        Check::new(
            "rails",
            None,
            Status::Pass,
            format!(
                "{} present: {}",
                plural(present as u64, "rail"),
                names.join(", ")
            ),
        )
    } else {
        Check::new("rails", None, Status::Fail, reasons.join("; "))
    }
}

/// Flaps in the window against `--flap-warn`/`--flap-fail`; a flap since
/// the last run warns even below `--flap-warn` (it is news, once).
fn flap_check(
    rail: &HealthRail,
    in_window: u64,
    since_last: Option<&counters::FlapDelta>,
    limits: &Limits,
) -> Check {
    let window = describe_seconds(limits.flap_window_s);
    let mut message = format!("{} in the last {window}", plural(in_window, "link flap"));
    let status = if in_window >= limits.flap_fail {
        message.push_str(&format!(" (fail at {})", limits.flap_fail));
        Status::Fail
    } else if in_window >= limits.flap_warn {
        message.push_str(&format!(
            " (warn at {}, fail at {})",
            limits.flap_warn, limits.flap_fail
        ));
        Status::Warn
    } else if since_last.is_some_and(|d| d.flaps > 0) {
        message.push_str(&format!(" (warn at {})", limits.flap_warn));
        Status::Warn
    } else {
        Status::Pass
    };
    if let Some(d) = since_last.filter(|d| d.flaps > 0) {
        let mut how = Vec::new();
        if let Some(n) = d.link_downed.filter(|&n| n > 0) {
            how.push(format!("link_downed +{n}"));
        }
        if let Some(n) = d.carrier_changes.filter(|&n| n > 0) {
            how.push(format!("carrier_changes +{n}"));
        }
        message.push_str(&format!(
            "; {} since the last run ({})",
            d.flaps,
            how.join(", ")
        ));
    }
    Check::new("flap", Some(rail.key.clone()), status, message)
}

/// An error counter's count over the last hour against its limit.
fn rate_check(name: &str, subject: Option<String>, c: &counters::WindowCount, max: u64) -> Check {
    let span = describe_seconds(c.span_s.round().max(1.0) as u64);
    if c.saturated {
        return Check::new(
            name,
            subject,
            Status::Warn,
            format!(
                "the counter is at its ceiling: its rate is not known (reset the port's \
                 counters, e.g. perfquery -R); {} in the last {span} at least",
                c.count
            ),
        );
    }
    // A count over a span shorter than the hour is a lower bound of the
    // hour's: judged as it is, never extrapolated.
    let status = if c.count >= max {
        Status::Fail
    } else {
        Status::Pass
    };
    Check::new(
        name,
        subject,
        status,
        format!("{} in the last {span} (fail at {max} per hour)", c.count),
    )
}

/// The other error counters that rose since the last run: a warning.
fn rises_check(previous: &Snapshot, now: &Snapshot, port: &str, ignored: &[String]) -> Check {
    let own = |k: &str| {
        LINK_DOWNED.contains(&k)
            || k == SYMBOL_ERROR
            || k == LINK_ERROR_RECOVERY
            || k == CARRIER_CHANGES
    };
    let mut rose = Vec::new();
    if let Some(counters) = now.ports.get(port) {
        for (key, &after) in counters {
            let watched = key
                .split_once('/')
                .is_some_and(|(sub, name)| is_error_counter(sub, name));
            let is_ignored = ignored
                .iter()
                .any(|i| i == key || key.split_once('/').is_some_and(|(_, name)| name == i));
            if own(key) || !watched || is_ignored {
                continue;
            }
            if let Some(before) = previous.get(port, key).filter(|&b| after > b) {
                rose.push(format!("{key} {before} -> {after}"));
            }
        }
    }
    if rose.is_empty() {
        Check::new(
            "counters",
            Some(port.to_owned()),
            Status::Pass,
            "no error counter rose since the last run",
        )
    } else {
        Check::new(
            "counters",
            Some(port.to_owned()),
            Status::Warn,
            format!("rose since the last run: {}", rose.join(", ")),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::rails::RailName;

    fn port(n: u8, state: &str, layer: &str) -> PortState {
        PortState {
            port: n,
            state: Some(state.to_owned()),
            phys_state: Some(
                if state.starts_with('4') {
                    "5: LinkUp"
                } else {
                    "3: Disabled"
                }
                .to_owned(),
            ),
            rate: Some("400 Gb/sec (4X NDR)".to_owned()),
            link_layer: Some(layer.to_owned()),
            ..PortState::default()
        }
    }

    fn device(name: &str, ports: Vec<PortState>) -> DeviceState {
        DeviceState {
            name: name.to_owned(),
            ports,
            ..DeviceState::default()
        }
    }

    #[test]
    fn auto_rails_keep_a_port_that_went_down_and_named_rails_keep_a_missing_one() {
        let devices = vec![
            device("mlx5_10", vec![port(1, "4: ACTIVE", "InfiniBand")]),
            device("mlx5_2", vec![port(1, "1: DOWN", "InfiniBand")]),
            device("mlx5_0", vec![port(1, "4: ACTIVE", "InfiniBand")]),
            device("eth_roce", vec![port(1, "4: ACTIVE", "Ethernet")]),
        ];
        let auto: Vec<String> = health_rails(&devices, &RailSpec::Auto)
            .into_iter()
            .map(|r| r.key)
            .collect();
        assert_eq!(auto, ["mlx5_0/1", "mlx5_2/1", "mlx5_10/1"]);
        let named = health_rails(
            &devices,
            &RailSpec::Named(vec![
                RailName {
                    device: "mlx5_0".into(),
                    port: None,
                },
                RailName {
                    device: "mlx5_9".into(),
                    port: Some(2),
                },
            ]),
        );
        assert_eq!(named[1].key, "mlx5_9/2");
        assert!(named[1].state.is_none());
        let c = rails_check(&named, &Limits::default());
        assert_eq!(
            (c.status, c.message.as_str()),
            (Status::Fail, "missing: mlx5_9/2")
        );
    }

    #[test]
    fn a_port_down_fails_its_port_check_and_the_others_pass() {
        let devices = vec![
            device("mlx5_0", vec![port(1, "4: ACTIVE", "InfiniBand")]),
            device("mlx5_1", vec![port(1, "1: DOWN", "InfiniBand")]),
        ];
        let rails = health_rails(&devices, &RailSpec::Auto);
        let now = Snapshot {
            time_s: 0,
            uptime_s: 0.0,
            boot_id: "b".into(),
            ports: BTreeMap::new(),
        };
        let out = check(PassiveInput {
            devices: &devices,
            rails: &rails,
            limits: &Limits::default(),
            now: &now,
            history: &[],
            events: &[],
        });
        let failed: Vec<String> = out
            .checks
            .iter()
            .filter(|c| c.status == Status::Fail)
            .map(Check::line)
            .collect();
        assert_eq!(
            failed,
            ["FAIL port mlx5_1/1: state DOWN, not ACTIVE; physical state Disabled, not LinkUp"]
        );
        assert_eq!(out.figures.len(), 2);
        assert!(out.notes[0].starts_with("no earlier reading"));
    }
}
