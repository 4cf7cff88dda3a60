//! `report.html`: the cluster report as one self-contained page (inline
//! CSS and SVG; no script, no font, no URL), to open from a file share
//! or a CI artefact. People look for the red cell: up to
//! [`MATRIX_MAX_RANKS`] ranks the page draws the pair matrix as a heat
//! map (one cell per direction, row = sender, column = receiver); above
//! that a matrix is unreadable (and a million cells is hundreds of MB),
//! so the page draws one strip cell per node and lists the worst
//! directions instead. Both forms come with the node verdicts, the
//! failed directions, slow rounds, missing ranks and the plan.
//!
//! Colour: a measured direction's bandwidth as a fraction of what it is
//! judged against (its absolute floor when there is one, else the
//! cluster's best), from red at half of it or below to green at all of
//! it; a failed direction is outlined and hatched whatever its colour, a
//! direction with its peer missing is grey, one that ran to an error is
//! black. Every text from a peer is escaped.

use std::fmt::Write as _;

use super::report::Roster;
use super::verdict::{Blame, ClusterVerdict, Measurement, NodeStatus, Outcome};

/// Largest job drawn as a full matrix (128 × 127 cells, ~3 MB with their
/// titles); above it, the node strip and the worst directions.
pub const MATRIX_MAX_RANKS: usize = 128;

/// How many of the worst directions the large form lists.
pub const WORST_LISTED: usize = 100;

/// What the page shows besides the verdicts.
#[derive(Debug, Clone, Copy)]
pub struct PageFacts<'a> {
    /// The plan line (`plan: all-pairs of 4 ranks: ...`).
    pub plan: &'a str,
    /// The test each pair ran, for a human (`write_bw -s 65536 -D 2 ...`).
    pub test: &'a str,
    /// The run's wall time, seconds.
    pub duration_s: f64,
}

/// The page.
pub fn page(
    measurements: &[Measurement],
    verdict: &ClusterVerdict,
    roster: Roster<'_>,
    facts: PageFacts<'_>,
) -> String {
    let size = verdict.nodes.len();
    let mut h = String::with_capacity(64 * 1024);
    let verdict_word = if verdict.pass() { "PASS" } else { "FAIL" };
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>rdmaperf cluster: {verdict_word}, {size} ranks</title>\n<style>{CSS}</style>\n</head>\n<body>\n\
         <h1>rdmaperf cluster: <span class=\"{}\">{verdict_word}</span></h1>\n\
         <p class=\"facts\">{} &middot; {} &middot; {:.1} s &middot; exit code {}</p>\n",
        verdict_word.to_ascii_lowercase(),
        escape(facts.plan),
        escape(facts.test),
        facts.duration_s,
        verdict.exit_code(),
    );
    if size <= MATRIX_MAX_RANKS {
        matrices(&mut h, measurements, verdict, roster);
    } else {
        strip(&mut h, verdict, roster);
        worst(&mut h, measurements, verdict, roster);
    }
    nodes(&mut h, verdict, roster);
    failures(&mut h, measurements, verdict, roster);
    rounds_and_missing(&mut h, verdict, roster);
    h.push_str("</body>\n</html>\n");
    h
}

const CSS: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}\
h1{font-size:1.4em}.pass{color:#17803d}.fail{color:#b42318}\
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}\
th{background:#f3f3f3}.facts{color:#555}svg{display:block;margin:.5em 0 1.5em}\
svg text{font-size:10px;fill:#444}rect.failed{stroke:#b42318;stroke-width:2}\
.legend span{display:inline-block;padding:0 6px;margin-right:6px;border:1px solid #999}\
.rail{display:inline-block;vertical-align:top;margin-right:2em}h3{font-size:1.05em;margin:.3em 0}";

/// The colour of a direction: its fraction of `against`, red (≤ 0.5) to
/// green (1.0), as an HSL hue.
fn colour(bw: f64, against: f64) -> String {
    let f = if against > 0.0 { bw / against } else { 1.0 };
    let t = ((f - 0.5) / 0.5).clamp(0.0, 1.0);
    format!("hsl({:.0},70%,45%)", t * 120.0)
}

/// What a direction on `rail` is judged against for its colour.
fn reference(verdict: &ClusterVerdict, rail: u32, floor: Option<f64>) -> f64 {
    floor
        .or(verdict
            .rail_best_bw_gbps
            .get(rail as usize)
            .copied()
            .flatten())
        .or(verdict.best_bw_gbps)
        .unwrap_or(0.0)
}

/// One cell's class, fill and title.
fn cell(
    m: &Measurement,
    d: &super::verdict::DirectionVerdict,
    verdict: &ClusterVerdict,
    roster: Roster<'_>,
) -> (&'static str, String, String) {
    let who = format!(
        "rank {} {} ({}) -> rank {} {} ({}), round {}, rail {}",
        m.from,
        roster.host(m.from),
        roster.rail_device(m.from, m.rail),
        m.to,
        roster.host(m.to),
        roster.rail_device(m.to, m.rail),
        m.round,
        m.rail
    );
    let why: Vec<String> = d.reasons.iter().map(|r| r.line()).collect();
    let why = if why.is_empty() {
        String::new()
    } else {
        format!(": {}", why.join("; "))
    };
    match &m.outcome {
        Outcome::Measured {
            bw_gbps, lat_us, ..
        } => {
            let lat = lat_us.map_or(String::new(), |l| format!(", {l:.2} us"));
            let class = if d.pass { "passed" } else { "failed" };
            (
                class,
                colour(*bw_gbps, reference(verdict, m.judged_rail(), d.min_bw_gbps)),
                format!(
                    "{who}: {} Gb/s{lat} {}{why}",
                    super::verdict::gbps(*bw_gbps),
                    if d.pass { "PASS" } else { "FAIL" }
                ),
            )
        }
        Outcome::Error { .. } => ("failed", "#111".into(), format!("{who}: FAIL{why}")),
        Outcome::PeerMissing => ("missing", "#bbb".into(), format!("{who}: peer missing")),
    }
}

/// The pair matrices, one per rail (rail k of the sender met rail k of
/// the receiver): row = sender, column = receiver.
fn matrices(
    h: &mut String,
    measurements: &[Measurement],
    verdict: &ClusterVerdict,
    roster: Roster<'_>,
) {
    let rails = verdict.rail_count();
    let _ = write!(
        h,
        "<h2>Bandwidth per direction{}</h2>\n<p class=\"legend\">row: sender, column: receiver; \
         colour: the fraction of the direction's floor (or of the rail's best) \
         <span style=\"background:hsl(0,70%,45%)\">&le; 50 %</span>\
         <span style=\"background:hsl(120,70%,45%)\">100 %</span>\
         <span style=\"outline:2px solid #b42318\">failed</span>\
         <span style=\"background:#bbb\">peer missing</span>\
         <span style=\"background:#111;color:#fff\">error</span></p>\n",
        if rails > 1 {
            format!(", on each of {rails} rails (rail k of the sender met rail k of the receiver)")
        } else {
            String::new()
        }
    );
    for rail in 0..rails {
        matrix(h, measurements, verdict, roster, (rail, rails));
    }
}

/// Rail `rail`'s matrix (of `rails`).
fn matrix(
    h: &mut String,
    measurements: &[Measurement],
    verdict: &ClusterVerdict,
    roster: Roster<'_>,
    (rail, rails): (u32, u32),
) {
    let n = verdict.nodes.len();
    let cell_px = if n <= 16 {
        28
    } else if n <= 64 {
        12
    } else {
        6
    };
    let margin = 40;
    let side = margin + n * cell_px + 4;
    let id = if rails > 1 {
        let _ = writeln!(
            h,
            "<div class=\"rail\"><h3>rail {rail} (rank 0's {})</h3>",
            escape(&roster.rail_device(0, rail))
        );
        format!("matrix-rail-{rail}")
    } else {
        "matrix".to_owned()
    };
    let _ = writeln!(
        h,
        "<svg id=\"{id}\" class=\"matrix\" data-rail=\"{rail}\" width=\"{side}\" height=\"{side}\" role=\"img\">"
    );
    if cell_px >= 12 {
        for r in 0..n {
            let at = margin + r * cell_px + cell_px / 2;
            let _ = writeln!(
                h,
                "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{r}</text><text x=\"{at}\" y=\"{}\" text-anchor=\"middle\">{r}</text>",
                margin - 4,
                at + 4,
                margin - 6
            );
        }
    }
    let on_rail = measurements
        .iter()
        .zip(&verdict.directions)
        .filter(|(m, _)| m.judged_rail() == rail);
    for (m, d) in on_rail {
        let (class, fill, title) = cell(m, d, verdict, roster);
        let _ = writeln!(
            h,
            "<rect class=\"cell {class}\" data-src=\"{}\" data-dst=\"{}\" data-rail=\"{rail}\" x=\"{}\" y=\"{}\" width=\"{w}\" height=\"{w}\" fill=\"{fill}\"><title>{}</title></rect>",
            m.from,
            m.to,
            margin + m.to as usize * cell_px,
            margin + m.from as usize * cell_px,
            escape(&title),
            w = cell_px.saturating_sub(1).max(1),
        );
    }
    h.push_str("</svg>\n");
    if rails > 1 {
        h.push_str("</div>\n");
    }
}

/// The large form's node strip: one cell per node, its verdict's colour.
fn strip(h: &mut String, verdict: &ClusterVerdict, roster: Roster<'_>) {
    let n = verdict.nodes.len();
    let per_row = 64;
    let px = 12;
    let rows = n.div_ceil(per_row);
    let _ = write!(
        h,
        "<h2>Nodes</h2>\n<p class=\"legend\">{n} ranks: too many for a pair matrix; one cell per node \
         <span style=\"background:hsl(120,70%,45%)\">PASS</span>\
         <span style=\"background:hsl(40,90%,50%)\">LINK</span>\
         <span style=\"background:hsl(0,70%,45%)\">FAIL</span>\
         <span style=\"background:#bbb\">MISSING</span></p>\n\
         <svg id=\"strip\" width=\"{}\" height=\"{}\" role=\"img\">\n",
        per_row * px,
        rows * px
    );
    for node in &verdict.nodes {
        let fill = match node.status {
            NodeStatus::Pass => "hsl(120,70%,45%)",
            NodeStatus::LinkFailures => "hsl(40,90%,50%)",
            NodeStatus::Fail => "hsl(0,70%,45%)",
            NodeStatus::Missing => "#bbb",
        };
        let r = node.rank as usize;
        let _ = writeln!(
            h,
            "<rect class=\"node {}\" data-rank=\"{r}\" x=\"{}\" y=\"{}\" width=\"{w}\" height=\"{w}\" fill=\"{fill}\"><title>rank {r} {}: {}, {} of {} pairs failed</title></rect>",
            node.status.word().to_ascii_lowercase(),
            (r % per_row) * px,
            (r / per_row) * px,
            escape(&roster.host(node.rank)),
            node.status.word(),
            node.failed,
            node.pairs,
            w = px - 1,
        );
    }
    h.push_str("</svg>\n");
}

/// The large form's table of the worst measured directions.
fn worst(
    h: &mut String,
    measurements: &[Measurement],
    verdict: &ClusterVerdict,
    roster: Roster<'_>,
) {
    let mut measured: Vec<(usize, f64)> = measurements
        .iter()
        .enumerate()
        .filter_map(|(i, m)| match m.outcome {
            Outcome::Measured { bw_gbps, .. } => Some((i, bw_gbps)),
            _ => None,
        })
        .collect();
    measured.sort_by(|a, b| a.1.total_cmp(&b.1));
    measured.truncate(WORST_LISTED);
    let _ = writeln!(
        h,
        "<h2>The {} slowest directions</h2>\n<table id=\"worst\">\n<tr><th>round</th><th>rail</th><th>from</th><th>to</th><th>Gb/s</th><th>verdict</th></tr>",
        measured.len()
    );
    for (i, bw) in measured {
        let (m, d) = (&measurements[i], &verdict.directions[i]);
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>rank {} {}</td><td>rank {} {}</td><td>{}</td><td>{}</td></tr>",
            m.round,
            m.rail,
            m.from,
            escape(&roster.host(m.from)),
            m.to,
            escape(&roster.host(m.to)),
            super::verdict::gbps(bw),
            if d.pass { "PASS" } else { "FAIL" }
        );
    }
    h.push_str("</table>\n");
}

/// The per-node verdict table.
fn nodes(h: &mut String, verdict: &ClusterVerdict, roster: Roster<'_>) {
    h.push_str(
        "<h2>Node verdicts</h2>\n<table id=\"nodes\">\n<tr><th>rank</th><th>host</th><th>devices (rail 0, 1, ...)</th>\
         <th>verdict</th><th>pairs failed</th><th>worst Gb/s</th><th>port error counters that rose</th>\
         <th>rails unlike most ranks'</th><th>rails that failed</th></tr>\n",
    );
    for n in &verdict.nodes {
        let rose: Vec<String> = n
            .port_errors
            .iter()
            .map(|c| format!("{} {} -> {}", c.name, c.before, c.after))
            .collect();
        let failed_rails = super::report::failed_rails(n, roster);
        let _ = writeln!(
            h,
            "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} of {}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            n.status.word().to_ascii_lowercase(),
            n.rank,
            escape(&roster.host(n.rank)),
            escape(&devices_of(roster, n)),
            n.status.word(),
            n.failed,
            n.pairs,
            n.worst_bw_gbps.map_or("-".into(), super::verdict::gbps),
            escape(&rose.join(", ")),
            escape(&n.rail_findings.join("; ")),
            escape(&failed_rails.join("; ")),
        );
    }
    h.push_str("</table>\n");
}

/// A node's devices: each of its rails', or its one device.
fn devices_of(roster: Roster<'_>, n: &super::verdict::NodeVerdict) -> String {
    match roster.rails.get(n.rank as usize) {
        Some(rails) if !rails.is_empty() => rails.join(", "),
        _ => roster.device(n.rank),
    }
}

/// Every failed direction (at most [`WORST_LISTED`] × 10 rows).
fn failures(
    h: &mut String,
    measurements: &[Measurement],
    verdict: &ClusterVerdict,
    roster: Roster<'_>,
) {
    let failed: Vec<usize> = verdict
        .directions
        .iter()
        .enumerate()
        .filter(|(_, d)| !d.pass && !d.peer_missing)
        .map(|(i, _)| i)
        .collect();
    let _ = writeln!(
        h,
        "<h2>Failed directions: {}</h2>\n<table id=\"failures\">\n<tr><th>round</th><th>rail</th><th>from</th><th>to</th><th>whose</th><th>why</th></tr>",
        failed.len()
    );
    for &i in failed.iter().take(WORST_LISTED * 10) {
        let (m, d) = (&measurements[i], &verdict.directions[i]);
        let whose = match d.blame {
            Blame::Node => d
                .blamed_ranks
                .iter()
                .map(|r| format!("NODE rank {r}"))
                .collect::<Vec<_>>()
                .join(", "),
            _ => "LINK".into(),
        };
        let why: Vec<String> = d.reasons.iter().map(|r| r.line()).collect();
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>rank {} {} ({})</td><td>rank {} {} ({})</td><td>{whose}</td><td>{}</td></tr>",
            m.round,
            m.rail,
            m.from,
            escape(&roster.host(m.from)),
            escape(&roster.rail_device(m.from, m.rail)),
            m.to,
            escape(&roster.host(m.to)),
            escape(&roster.rail_device(m.to, m.rail)),
            escape(&why.join("; ")),
        );
    }
    h.push_str("</table>\n");
}

/// Slow rounds and missing ranks.
fn rounds_and_missing(h: &mut String, verdict: &ClusterVerdict, roster: Roster<'_>) {
    let slow: Vec<String> = verdict
        .rounds
        .iter()
        .filter(|r| r.slow)
        .map(|r| {
            format!(
                "round {}, rail {}: {} of {} directions below the relative threshold",
                r.round, r.rail, r.relative_failures, r.measured
            )
        })
        .collect();
    let missing: Vec<String> = verdict
        .nodes
        .iter()
        .filter(|n| n.status == NodeStatus::Missing)
        .map(|n| format!("rank {} {}", n.rank, roster.host(n.rank)))
        .collect();
    for (title, id, items) in [
        ("Slow rounds (congestion)", "slow-rounds", slow),
        ("Missing ranks", "missing", missing),
    ] {
        let _ = writeln!(h, "<h2>{title}: {}</h2>\n<ul id=\"{id}\">", items.len());
        for i in items {
            let _ = writeln!(h, "<li>{}</li>", escape(&i));
        }
        h.push_str("</ul>\n");
    }
}

/// `text` safe inside HTML elements and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::schedule::Rank;
    use crate::cluster::verdict::{Thresholds, judge};

    /// Each matrix cell's sender, receiver and class.
    fn cells(page: &str) -> Vec<(Rank, Rank, String)> {
        page.lines()
            .filter(|l| l.starts_with("<rect class=\"cell "))
            .map(|l| {
                let attr = |name: &str| {
                    let at = l.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
                    l[at..at + l[at..].find('"').unwrap()].to_owned()
                };
                (
                    attr("data-src").parse().unwrap(),
                    attr("data-dst").parse().unwrap(),
                    attr("class"),
                )
            })
            .collect()
    }

    /// All pairs of `n` ranks at 100 Gb/s, rank `slow` at 40.
    fn run(n: u32, slow: Rank) -> (Vec<Measurement>, ClusterVerdict) {
        let schedule = crate::cluster::schedule::all_pairs(n).unwrap();
        let mut all = Vec::new();
        for (i, round) in schedule.rounds.iter().enumerate() {
            for p in &round.pairs {
                for (from, to) in [(p.client, p.server), (p.server, p.client)] {
                    all.push(Measurement {
                        round: i as u32,
                        from,
                        to,
                        rail: 0,
                        outcome: Outcome::Measured {
                            msg_rate_mpps: None,
                            bw_gbps: if from == slow || to == slow {
                                40.0
                            } else {
                                100.0
                            },
                            lat_us: None,
                            latency: None,
                        },
                    });
                }
            }
        }
        let v = judge(n, &[], &all, &Thresholds::default());
        (all, v)
    }

    fn facts() -> PageFacts<'static> {
        PageFacts {
            plan: "plan: all-pairs",
            test: "write_bw -s 1048576 -D 2",
            duration_s: 12.5,
        }
    }

    #[test]
    fn the_slowest_directions_table_keeps_a_small_figures_digits() {
        // Above the matrix's limit: the page lists the slowest directions.
        let n = MATRIX_MAX_RANKS as u32 + 1;
        let (mut all, _) = run(n, n);
        if let Outcome::Measured { bw_gbps, .. } = &mut all[0].outcome {
            *bw_gbps = 0.00026;
        }
        let v = judge(n, &[], &all, &Thresholds::default());
        let roster = Roster {
            rails: &[],
            hosts: &[],
            devices: &[],
        };
        let p = page(&all, &v, roster, facts());
        let worst = &p[p.find("<table id=\"worst\">").unwrap()..];
        let first_row = worst.lines().nth(2).unwrap();
        assert!(
            first_row.contains("<td>0.000260</td><td>FAIL</td>"),
            "{first_row}"
        );
    }

    #[test]
    fn a_small_job_is_a_matrix_with_one_cell_per_direction_and_the_slow_node_marked() {
        let (all, v) = run(4, 2);
        let hosts: Vec<Option<String>> =
            (0..4).map(|r| Some(format!("node-{r}<script>"))).collect();
        let roster = Roster {
            rails: &[],
            hosts: &hosts,
            devices: &[],
        };
        let p = page(&all, &v, roster, facts());
        let cells = cells(&p);
        assert_eq!(cells.len(), 12, "4 × 3 directions");
        for (src, dst, class) in &cells {
            assert_ne!(src, dst);
            let slow = *src == 2 || *dst == 2;
            assert_eq!(class, if slow { "cell failed" } else { "cell passed" });
        }
        // Self-contained, and nothing a peer said becomes markup.
        assert!(!p.contains("http") && !p.contains("<script") && !p.contains(" src="));
        assert!(p.contains("node-2&lt;script&gt;"));
        assert!(p.contains("<h1>rdmaperf cluster: <span class=\"fail\">FAIL</span></h1>"));
    }

    #[test]
    fn two_rails_draw_a_matrix_each_and_only_the_bad_rails_cells_fail() {
        // 4 nodes, 2 rails; rank 1's rail 1 is slow, its rail 0 healthy.
        let (rail0, _) = run(4, 99);
        let (rail1, _) = run(4, 1);
        let all: Vec<Measurement> = rail0
            .into_iter()
            .chain(rail1.into_iter().map(|m| Measurement { rail: 1, ..m }))
            .collect();
        let v = judge(4, &[], &all, &Thresholds::default());
        let hosts: Vec<Option<String>> = (0..4).map(|r| Some(format!("node-{r}"))).collect();
        let rails: Vec<Vec<String>> = (0..4)
            .map(|r| vec![format!("mlx5_{r}0:1"), format!("mlx5_{r}1:1")])
            .collect();
        let roster = Roster {
            hosts: &hosts,
            devices: &[],
            rails: &rails,
        };
        let p = page(&all, &v, roster, facts());
        let rail_of = |l: &str| l.contains("data-rail=\"1\"");
        let cell_lines: Vec<&str> = p
            .lines()
            .filter(|l| l.starts_with("<rect class=\"cell "))
            .collect();
        assert_eq!(cell_lines.len(), 24, "4 × 3 directions on each of 2 rails");
        for (l, (src, dst, class)) in cell_lines.iter().zip(cells(&p)) {
            let bad = rail_of(l) && (src == 1 || dst == 1);
            assert_eq!(
                class,
                if bad { "cell failed" } else { "cell passed" },
                "{l}"
            );
        }
        assert!(p.contains("<svg id=\"matrix-rail-0\" class=\"matrix\" data-rail=\"0\""));
        assert!(p.contains("<svg id=\"matrix-rail-1\" class=\"matrix\" data-rail=\"1\""));
        // A cell's title names the hosts, the rail's devices, the figure
        // and the round.
        assert!(
            p.contains("<title>rank 1 node-1 (mlx5_11:1) -&gt; rank 0 node-0 (mlx5_01:1), round "),
            "{p}"
        );
        assert!(p.contains(", rail 1: 40.00 Gb/s FAIL: "));
        // The node table names the failed rail.
        assert!(
            p.contains("<td>rail 1 mlx5_11:1: FAIL 3 of 3 pairs failed, worst 40.00 Gb/s</td>"),
            "{p}"
        );
        assert!(!p.contains("http"));
    }

    #[test]
    fn a_large_job_is_a_node_strip_and_the_worst_directions_within_a_few_megabytes() {
        let (all, v) = run(200, 7);
        let roster = Roster {
            rails: &[],
            hosts: &[],
            devices: &[],
        };
        let p = page(&all, &v, roster, facts());
        assert!(cells(&p).is_empty());
        assert_eq!(p.matches("<rect class=\"node ").count(), 200);
        assert!(p.contains("<rect class=\"node fail\" data-rank=\"7\""));
        assert!(p.matches("<tr><td>").count() >= WORST_LISTED);
        assert!(p.len() < 4 << 20, "{} bytes", p.len());
    }
}
