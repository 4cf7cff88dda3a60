//! The cluster report at fleet scale, without a fleet: fabricates the
//! measurements of all pairs of N ranks on R rails (default 1,024 × 8:
//! 8,380,416 directions, rank 17 slow on rail 3), judges them
//! (`verdict::judge_with`) and writes the whole report
//! (`report_files::write_report`, default options) into DIR, then
//! prints each file's size and the phases' times. Run it under
//! `/usr/bin/time -v` for the peak memory (docs/performance.md, "The
//! cluster report at scale"):
//!
//! ```sh
//! cargo build --release --example cluster_report_scale
//! /usr/bin/time -v target/release/examples/cluster_report_scale 1024 8 /tmp/scale
//! ```

use std::process::ExitCode;
use std::time::Instant;

use engine::cluster::html::PageFacts;
use engine::cluster::report::{self, Roster};
use engine::cluster::schedule;
use engine::cluster::verdict::{self, Measurement, NodeFacts, Outcome, Thresholds};
use rdmaperf::cluster::report_files::{ReportOptions, write_report};

/// The rank whose rail [`SLOW_RAIL`] is slow.
const SLOW_RANK: u32 = 17;
const SLOW_RAIL: u32 = 3;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (n, rails, dir) = match args.as_slice() {
        [n, r, d] => match (n.parse::<u32>(), r.parse::<u32>()) {
            (Ok(n), Ok(r)) if n >= 2 && (1..=32).contains(&r) => (n, r, d.clone()),
            _ => return usage(),
        },
        _ => return usage(),
    };
    let dir = std::path::PathBuf::from(dir);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("cluster_report_scale: cannot create {dir:?}: {e}");
        return ExitCode::from(1);
    }
    let started = Instant::now();
    let all = fabricate(n, rails);
    let made = started.elapsed();
    let hosts: Vec<Option<String>> = (0..n).map(|r| Some(format!("gpu-node-{r:04}"))).collect();
    let devices: Vec<Option<String>> = (0..n).map(|_| Some("mlx5_0:1".into())).collect();
    let rail_devices: Vec<Vec<String>> = (0..n)
        .map(|_| (0..rails).map(|k| format!("mlx5_{k}:1")).collect())
        .collect();
    let roster = Roster {
        hosts: &hosts,
        devices: &devices,
        rails: &rail_devices,
    };
    let input_kb = vm_kb("VmRSS");
    let judging = Instant::now();
    let facts = vec![NodeFacts::default(); n as usize];
    let judged = verdict::judge_with(n, &[], &all, &Thresholds::default(), &facts);
    let judged_in = judging.elapsed();
    let judged_kb = vm_kb("VmHWM");
    let writing = Instant::now();
    let sums = if judged.rail_count() > 1 {
        report::pair_sums(&all, &judged, roster)
    } else {
        Vec::new()
    };
    let plan = format!("plan: all-pairs of {n} ranks on {rails} rails (fabricated)");
    let page = PageFacts {
        plan: &plan,
        test: "write_bw -s 1048576 -D 2 (fabricated)",
        duration_s: 0.0,
    };
    if let Err(e) = write_report(
        &dir,
        &all,
        &judged,
        &sums,
        roster,
        rdmaperf::cluster::report_files::PageInput {
            facts: page,
            layout: None,
        },
        ReportOptions::default(),
    ) {
        eprintln!("cluster_report_scale: {e:#}");
        return ExitCode::from(1);
    }
    let written_in = writing.elapsed();
    println!(
        "directions {} measurement {} B verdict {} B",
        all.len(),
        std::mem::size_of::<Measurement>(),
        std::mem::size_of::<verdict::DirectionVerdict>()
    );
    println!(
        "fabricated {:.1} s, judged {:.1} s, report written {:.1} s",
        made.as_secs_f64(),
        judged_in.as_secs_f64(),
        written_in.as_secs_f64()
    );
    println!(
        "memory: the measurements {} MB resident; peak after judging {} MB, after writing {} MB",
        input_kb / 1024,
        judged_kb / 1024,
        vm_kb("VmHWM") / 1024
    );
    let mut total = 0;
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(Result::ok).collect())
        .unwrap_or_default();
    names.sort_by_key(std::fs::DirEntry::file_name);
    for e in names {
        let len = e.metadata().map_or(0, |m| m.len());
        total += len;
        println!("{} {len} B", e.file_name().to_string_lossy());
    }
    println!("total {total} B");
    ExitCode::SUCCESS
}

/// A `/proc/self/status` figure in kB (`VmRSS`: resident now; `VmHWM`:
/// the peak so far), 0 when unreadable (proc(5)).
fn vm_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
                .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        })
        .unwrap_or(0)
}

fn usage() -> ExitCode {
    eprintln!("usage: cluster_report_scale RANKS RAILS DIR (RANKS at least 2, RAILS 1 to 32)");
    ExitCode::from(2)
}

/// Every direction of every pair on every rail, as `--simulate` figures
/// them (100 Gb/s less up to 0.7; 40 for the slow rank's rail).
fn fabricate(n: u32, rails: u32) -> Vec<Measurement> {
    let Ok(s) = schedule::all_pairs(n) else {
        return Vec::new();
    };
    let mut all = Vec::with_capacity(s.pair_count() * 2 * rails as usize);
    for (round, r) in s.rounds.iter().enumerate() {
        for p in &r.pairs {
            for rail in 0..rails {
                for (from, to) in [(p.client, p.server), (p.server, p.client)] {
                    let slow = rail == SLOW_RAIL && (from == SLOW_RANK || to == SLOW_RANK);
                    let bw_gbps = if slow {
                        40.0
                    } else {
                        100.0 - f64::from((from.wrapping_mul(31) ^ to) % 8) * 0.1
                    };
                    all.push(Measurement {
                        round: round as u32,
                        from,
                        to,
                        rail,
                        outcome: Outcome::Measured {
                            bw_gbps,
                            msg_rate_mpps: Some(bw_gbps / 8.0 / 1.048576 / 8.0),
                            lat_us: None,
                            latency: None,
                        },
                    });
                }
            }
        }
    }
    all
}
