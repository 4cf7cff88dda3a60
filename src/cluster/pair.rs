//! One direction of one pair: this rank as `write_bw`'s client (data
//! flows from it to its partner, whose figure it reports) or as its
//! server on the pair listener it holds. The test is the session runner
//! called as a library: typed options in ([`options`], built from rank
//! 0's [`PairTest`] and this rank's device flags), a typed summary out.
//! `--simulate`: no device, no connection, a fabricated figure.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use engine::bench::request::{ConfigRequest, configure, refuse_beside_rdma_cm};
use engine::bench::spec::TestSpec;
use engine::cluster::pair_test::{LAT_SIZE, PairTest};
use engine::cluster::schedule::Rank;
use engine::cluster::verdict::{Measurement, Outcome, PairLatency};
use engine::format::table::Unit;
use engine::results::lat::Percentile;
use engine::results::record::Figures;

use crate::args::usage;
use crate::oob::Listener;
use crate::options::{
    ConnectionOptions, DeviceSelection, LocalOptions, OutputPlan, RoleOptions, RunOptions,
    VerdictPlan,
};
use crate::runner::RunSummary;

/// `--simulate-slow RANK[:RAIL]`: a rank whose pairs (on one rail, or
/// all) get [`SIMULATED_SLOW_GBPS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlowSpot {
    /// The slow rank.
    pub rank: Rank,
    /// Its slow rail (`None`: every rail).
    pub rail: Option<u32>,
}

impl SlowSpot {
    pub(super) fn covers(&self, rank: Rank, rail: u32) -> bool {
        self.rank == rank && self.rail.is_none_or(|k| k == rail)
    }
}

/// The figure `--simulate` fabricates for a healthy direction, Gb/s.
pub const SIMULATED_GBPS: f64 = 100.0;

/// The figure `--simulate` fabricates for a direction with a
/// `--simulate-slow` rank in it, Gb/s (below 0.93 × the best).
pub const SIMULATED_SLOW_GBPS: f64 = 40.0;

/// The options of one direction's test: `spec` is `write_bw`, or
/// `write_lat` (`--latency`); the client's against `server` (address,
/// pair port), or the server's when `None`. Built from the typed values,
/// never from a command line: `write_bw -s SIZE -D SECONDS -q QPS
/// --report_gbits` or `write_lat -s 2 -n ITERS`, with `--timeout`,
/// `--accept-timeout` (the direction's bound: a server waits for its
/// partner's previous direction to end), `-R` and this rank's device,
/// through perftest's rules ([`engine::bench::request::configure`]) as
/// the test binaries apply them to their flags.
///
/// # Errors
/// When the configuration refuses a value (a `write_bw` size above 8 MiB,
/// say), or `-R` meets a GID index: a usage error naming the flag.
pub fn options(
    spec: TestSpec,
    test: &PairTest,
    device: &DeviceSelection,
    server: Option<(&str, u16)>,
) -> anyhow::Result<RunOptions> {
    let bw = spec == TestSpec::WRITE_BW;
    let request = if bw {
        ConfigRequest {
            size: Some(test.size),
            duration: Some(f64::from(test.duration_s)),
            qps: test.qps,
            ..ConfigRequest::default()
        }
    } else {
        ConfigRequest {
            size: Some(LAT_SIZE),
            iters: Some(test.lat_iters),
            ..ConfigRequest::default()
        }
    };
    let role = match server {
        Some((host, _)) => RoleOptions::Client {
            server: host.to_owned(),
            config: configure(spec, &request).map_err(usage)?.config.into(),
        },
        None => RoleOptions::Server,
    };
    if test.rdma_cm {
        refuse_beside_rdma_cm(device.gid_index, &request.path, 0).map_err(usage)?;
    }
    Ok(RunOptions {
        spec,
        role,
        devices: vec![device.clone()],
        connection: ConnectionOptions {
            // A server listens on the pair listener it holds.
            port: server.map_or(engine::bench::config::DEFAULT_PORT, |(_, port)| port),
            timeout: Duration::from_secs(u64::from(test.timeout_s)),
            // A server waits for its partner's previous direction to end
            // (in whole seconds, at least 1, as `--accept-timeout` takes).
            accept_timeout: Duration::from_secs(test.direction_bound().as_secs().max(1)),
            rdma_cm: test.rdma_cm,
            ..ConnectionOptions::default()
        },
        // Results come back typed; nothing on stdout, no banner.
        local: LocalOptions {
            banner: false,
            ..LocalOptions::default()
        },
        output: OutputPlan {
            unit: if bw { Unit::Gbps } else { Unit::MibPerSec },
            ..OutputPlan::default()
        },
        verdicts: VerdictPlan::default(),
    })
}

/// `--simulate`'s measurement of `me` → `partner` in `round` on `rail`,
/// at once: the fabricated figure, slow when `slow` covers either rank
/// on that rail.
pub fn fabricated(
    test: &PairTest,
    (me, partner): (Rank, Rank),
    (round, rail): (u32, u32),
    slow: &[SlowSpot],
) -> Measurement {
    let is_slow = slow
        .iter()
        .any(|s| s.covers(me, rail) || s.covers(partner, rail));
    fabricated_as(test, (me, partner), (round, rail), is_slow)
}

/// `--simulate`'s measurement of `me` → `partner` in `round` on `rail`:
/// the fabricated figure, slow when `is_slow`.
pub fn fabricated_as(
    test: &PairTest,
    (me, partner): (Rank, Rank),
    (round, rail): (u32, u32),
    is_slow: bool,
) -> Measurement {
    Measurement {
        round,
        from: me,
        to: partner,
        rail,
        outcome: simulated(test, me, partner, is_slow),
    }
}

/// This rank drives data to `partner` at `server` (its address and pair
/// port) in `round` on `rail` (with `device`, this rank's device on it):
/// the measurement, an error included. With
/// `--latency`, a `write_lat` the same way follows the `write_bw` (tried
/// even when the `write_bw` failed: the partner serves both).
pub fn send_to(
    test: &PairTest,
    device: &DeviceSelection,
    (me, partner): (Rank, Rank),
    (round, rail): (u32, u32),
    server: (&str, u16),
    slow: &[SlowSpot],
) -> Measurement {
    if test.simulate {
        std::thread::sleep(std::time::Duration::from_millis(u64::from(
            test.simulate_ms,
        )));
        return fabricated(test, (me, partner), (round, rail), slow);
    }
    let outcome = {
        let bw = options(TestSpec::WRITE_BW, test, device, Some(server))
            .and_then(|o| crate::runner::run_pair(&o));
        let lat = test.latency.then(|| {
            options(TestSpec::WRITE_LAT, test, device, Some(server))
                .and_then(|o| crate::runner::run_pair(&o))
        });
        measured(test, bw, lat)
    };
    Measurement {
        round,
        from: me,
        to: partner,
        rail,
        outcome,
    }
}

/// The outcome of a direction from its `write_bw` and, with `--latency`,
/// its `write_lat`: an error in either is the direction's error.
fn measured(
    test: &PairTest,
    bw: anyhow::Result<RunSummary>,
    lat: Option<anyhow::Result<RunSummary>>,
) -> Outcome {
    let error = |error: String| Outcome::Error { error };
    let (bw_gbps, msg_rate_mpps) = match bw {
        Ok(summary) => match summary.sizes.last().map(|s| &s.figures) {
            Some(Figures::Bw(bw)) => (bw.bw_avg_gbps, bw.msg_rate_mpps),
            _ => return error("write_bw ended without a figure".into()),
        },
        Err(e) => return error(format!("{e:#}")),
    };
    let latency = match lat {
        None => None,
        Some(Ok(summary)) => match summary.sizes.last().map(|s| &s.figures) {
            Some(Figures::Lat(stats)) => Some(*stats),
            _ => return error("write_lat ended without a figure".into()),
        },
        Some(Err(e)) => return error(format!("write_lat: {e:#}")),
    };
    let latency = latency.as_ref().map(PairLatency::of);
    Outcome::Measured {
        bw_gbps,
        msg_rate_mpps: Some(msg_rate_mpps),
        lat_us: latency.map(|l| l.at(judged(test))),
        latency: latency.map(Box::new),
    }
}

/// The latency figure judged (the percentile was checked when the test
/// was taken).
fn judged(test: &PairTest) -> Percentile {
    test.judged_percentile().unwrap_or(Percentile::Median)
}

/// This rank serves its partner's direction on `listener`: one session,
/// two with `--latency` (the `write_bw`, then the `write_lat`).
///
/// # Errors
/// When the test fails on this side (the partner reports its own view;
/// the error goes to stderr).
pub fn serve(test: &PairTest, device: &DeviceSelection, listener: &Listener) -> anyhow::Result<()> {
    if test.simulate {
        return Ok(());
    }
    let bw = options(TestSpec::WRITE_BW, test, device, None)
        .and_then(|o| crate::runner::serve_on(&o, listener));
    if test.latency {
        let lat = options(TestSpec::WRITE_LAT, test, device, None)
            .and_then(|o| crate::runner::serve_on(&o, listener))
            .context("write_lat");
        bw.and(lat).map(|_| ())
    } else {
        bw.map(|_| ())
    }
}

/// `--simulate`'s figures for `me` → `partner` (a latency too with
/// `--latency`: 2 µs, 10 µs when slow).
fn simulated(test: &PairTest, me: Rank, partner: Rank, is_slow: bool) -> Outcome {
    let gbps = if is_slow {
        SIMULATED_SLOW_GBPS
    } else {
        // A little spread, as real links have (under 1 %).
        SIMULATED_GBPS - f64::from((me.wrapping_mul(31) ^ partner) % 8) * 0.1
    };
    let latency = test.latency.then(|| {
        let us = if is_slow { 10.0 } else { 2.0 };
        PairLatency {
            iterations: test.lat_iters,
            min_us: us * 0.9,
            avg_us: us * 1.05,
            p50_us: us,
            p90_us: us * 1.1,
            p99_us: us * 1.2,
            p99_9_us: us * 1.5,
            p99_99_us: us * 1.8,
            max_us: us * 2.0,
        }
    });
    Outcome::Measured {
        bw_gbps: gbps,
        // Messages of `-s` bytes at that rate.
        msg_rate_mpps: Some(gbps * 1e9 / 8.0 / test.size as f64 / 1e6),
        lat_us: latency.map(|l| l.at(judged(test))),
        latency: latency.map(Box::new),
    }
}

/// The address a partner reaches: `--pair-address`, else the local
/// address of this rank's connection to rank 0 (the interface that
/// reaches the cluster).
pub fn reachable_address(flag: Option<&str>, to_coordinator: Option<SocketAddr>) -> String {
    match (flag, to_coordinator) {
        (Some(a), _) => a.to_owned(),
        (None, Some(local)) => local.ip().to_string(),
        (None, None) => "127.0.0.1".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::cluster::pair_test::LAT_ITERATIONS;

    fn test() -> PairTest {
        PairTest {
            size: 1 << 20,
            duration_s: 2,
            qps: 2,
            rdma_cm: false,
            timeout_s: 10,
            latency: false,
            lat_iters: LAT_ITERATIONS,
            percentile: "median".into(),
            simulate: false,
            simulate_ms: 0,
        }
    }

    /// The oracle: the options as they were built before they were
    /// typed, by writing the direction's command line and parsing it
    /// back as `write_bw`/`write_lat` would. Kept (test code only) so
    /// that the typed [`options`] is shown to build the same run.
    fn argv_options(
        spec: TestSpec,
        test: &PairTest,
        device: &DeviceSelection,
        server: Option<(&str, u16)>,
    ) -> anyhow::Result<RunOptions> {
        let mut argv: Vec<String> = vec![spec.name().into()];
        let mut flag = |f: &str, v: String| {
            argv.push(f.into());
            argv.push(v);
        };
        let bw = spec == TestSpec::WRITE_BW;
        if bw {
            flag("-s", test.size.to_string());
            flag("-D", test.duration_s.to_string());
            flag("-q", test.qps.to_string());
        } else {
            flag("-s", LAT_SIZE.to_string());
            flag("-n", test.lat_iters.to_string());
        }
        flag("--timeout", test.timeout_s.to_string());
        flag(
            "--accept-timeout",
            test.direction_bound().as_secs().max(1).to_string(),
        );
        if let Some(d) = &device.name {
            flag("-d", d.clone());
        }
        if let Some(p) = device.port {
            flag("-i", p.to_string());
        }
        if let Some(x) = device.gid_index {
            flag("-x", x.to_string());
        }
        if let Some((_, port)) = server {
            flag("-p", port.to_string());
        }
        if bw {
            argv.push("--report_gbits".into());
        }
        if test.rdma_cm {
            argv.push("-R".into());
        }
        if let Some((host, _)) = server {
            argv.push(host.into());
        }
        let parsed = crate::args::try_parse_from(spec, &argv)?;
        let mut built = parsed.run_options(spec)?.options;
        built.output.stdout_table = false;
        built.local.banner = false;
        Ok(built)
    }

    /// Representative pair tests: the defaults, the bounds of every
    /// field, rdma_cm, and ones the test configuration refuses.
    fn representative_tests() -> Vec<PairTest> {
        let t = test();
        vec![
            t.clone(),
            PairTest {
                size: 1,
                duration_s: 1,
                qps: 1,
                timeout_s: 1,
                lat_iters: 2,
                ..t.clone()
            },
            PairTest {
                size: 65536,
                duration_s: 4,
                qps: 64,
                latency: true,
                lat_iters: 1_000_000,
                percentile: "p99".into(),
                ..t.clone()
            },
            PairTest {
                size: 8 << 20,
                duration_s: 600,
                timeout_s: 3600,
                rdma_cm: true,
                ..t.clone()
            },
            PairTest {
                size: 8192,
                duration_s: 3,
                qps: 16,
                rdma_cm: true,
                latency: true,
                ..t.clone()
            },
            // Above the bandwidth test's 8 MiB (a pair test allows 64):
            // refused, naming -s/--size.
            PairTest {
                size: 16 << 20,
                ..t.clone()
            },
            // Too few iterations for write_lat: refused, naming -n/--iters.
            PairTest { lat_iters: 3, ..t },
        ]
    }

    fn representative_devices() -> Vec<DeviceSelection> {
        vec![
            DeviceSelection::default(),
            DeviceSelection {
                name: Some("mlx5_0".into()),
                port: None,
                gid_index: None,
            },
            DeviceSelection {
                name: Some("rxe1".into()),
                port: Some(2),
                gid_index: Some(3),
            },
            DeviceSelection {
                name: None,
                port: Some(1),
                gid_index: Some(0),
            },
        ]
    }

    #[test]
    fn typed_options_equal_what_the_command_line_built() {
        let servers = [
            None,
            Some(("169.254.10.2", 40123)),
            Some(("fe80::1", 18515)),
            Some(("node-7.example", 1)),
        ];
        let mut compared = (0, 0);
        for spec in [TestSpec::WRITE_BW, TestSpec::WRITE_LAT] {
            for t in representative_tests() {
                for dev in representative_devices() {
                    for server in servers {
                        let typed = options(spec, &t, &dev, server);
                        let argv = argv_options(spec, &t, &dev, server);
                        let case = format!("{spec} {t:?} {dev:?} {server:?}");
                        match (typed, argv) {
                            (Ok(typed), Ok(argv)) => {
                                assert_eq!(typed, argv, "{case}");
                                compared.0 += 1;
                            }
                            (Err(typed), Err(argv)) => {
                                assert_eq!(format!("{typed:#}"), format!("{argv:#}"), "{case}");
                                compared.1 += 1;
                            }
                            (typed, argv) => panic!("{case}: typed {typed:?}, argv {argv:?}"),
                        }
                    }
                }
            }
        }
        // Both outcomes were met: runs built, and runs refused.
        assert!(compared.0 > 100 && compared.1 > 10, "{compared:?}");
    }

    /// Where the two paths part, on purpose: a device name is a value,
    /// never text that clap could take for a flag (the command line
    /// `-d -q` refused such a name; the device lookup now names it).
    #[test]
    fn a_device_name_is_taken_as_it_is_never_as_a_flag() {
        let dev = DeviceSelection {
            name: Some("-q".into()),
            ..DeviceSelection::default()
        };
        let server = Some(("169.254.10.2", 40123));
        let o = options(TestSpec::WRITE_BW, &test(), &dev, server).unwrap();
        assert_eq!(o.devices, std::slice::from_ref(&dev));
        assert!(argv_options(TestSpec::WRITE_BW, &test(), &dev, server).is_err());
    }

    #[test]
    fn a_direction_is_write_bw_with_rank_0s_flags_and_this_ranks_device() {
        let dev = DeviceSelection {
            name: Some("rxe1".into()),
            port: Some(1),
            gid_index: Some(1),
        };
        let o = options(
            TestSpec::WRITE_BW,
            &test(),
            &dev,
            Some(("169.254.10.2", 40123)),
        )
        .unwrap();
        assert_eq!(o.spec, TestSpec::WRITE_BW);
        assert_eq!(o.connection.port, 40123);
        assert_eq!(o.devices, std::slice::from_ref(&dev));
        assert!(!o.output.stdout_table && !o.local.banner);
        let RoleOptions::Client { server, config } = &o.role else {
            panic!("not a client: {:?}", o.role);
        };
        assert_eq!(server, "169.254.10.2");
        let crate::options::Configuration::Bw(bw) = config else {
            panic!("not a bandwidth test");
        };
        assert_eq!(bw.sizes, [1 << 20]);
        assert_eq!(bw.qps, 2);
        let server = options(TestSpec::WRITE_BW, &test(), &dev, None).unwrap();
        assert!(!server.is_client());
        assert_eq!(server.connection.accept_timeout, test().direction_bound());
    }

    #[test]
    fn latency_is_write_lat_of_perftests_default_size_and_round_trips_on_the_same_device() {
        let dev = DeviceSelection {
            name: Some("rxe1".into()),
            port: Some(1),
            gid_index: None,
        };
        let o = options(
            TestSpec::WRITE_LAT,
            &test(),
            &dev,
            Some(("169.254.10.2", 40123)),
        )
        .unwrap();
        assert_eq!(o.spec, TestSpec::WRITE_LAT);
        assert_eq!(o.connection.port, 40123);
        assert_eq!(o.devices, std::slice::from_ref(&dev));
        let RoleOptions::Client { config, .. } = &o.role else {
            panic!("not a client: {:?}", o.role);
        };
        let crate::options::Configuration::Lat(lat) = config else {
            panic!("not a latency test: {config:?}");
        };
        assert_eq!(lat.sizes, [LAT_SIZE]);
        assert_eq!(lat.iters, LAT_ITERATIONS);
        assert!(
            !options(TestSpec::WRITE_LAT, &test(), &dev, None)
                .unwrap()
                .is_client()
        );
    }

    #[test]
    fn rdma_cm_reaches_both_sides() {
        let t = PairTest {
            rdma_cm: true,
            ..test()
        };
        let dev = DeviceSelection::default();
        assert!(
            options(TestSpec::WRITE_BW, &t, &dev, Some(("169.254.10.2", 1)))
                .unwrap()
                .connection
                .rdma_cm
        );
        assert!(
            options(TestSpec::WRITE_BW, &t, &dev, None)
                .unwrap()
                .connection
                .rdma_cm
        );
    }

    #[test]
    fn a_slow_rank_gets_a_low_figure_both_ways_on_its_slow_rail_only() {
        let slow = [SlowSpot {
            rank: 2,
            rail: Some(1),
        }];
        let bw = |me, partner, rail| match send_to(
            &PairTest {
                simulate: true,
                ..test()
            },
            &DeviceSelection::default(),
            (me, partner),
            (0, rail),
            ("127.0.0.1", 1),
            &slow,
        )
        .outcome
        {
            Outcome::Measured { bw_gbps, .. } => bw_gbps,
            other => panic!("{other:?}"),
        };
        assert_eq!(bw(2, 0, 1), SIMULATED_SLOW_GBPS);
        assert_eq!(bw(0, 2, 1), SIMULATED_SLOW_GBPS);
        assert!(bw(0, 2, 0) > SIMULATED_GBPS * 0.99);
        assert!(bw(0, 1, 1) > SIMULATED_GBPS * 0.99);
    }
}
