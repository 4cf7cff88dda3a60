//! `report.html`: the cluster report as one self-contained page (inline
//! CSS, SVG and PNG; no script, no font, no URL), to open from a file
//! share or a CI artefact. People look for the red cell: up to
//! [`MATRIX_MAX_RANKS`] ranks the page draws the pair matrix as a heat
//! map of titled SVG cells (one per direction, row = sender, column =
//! receiver); above that a million titled cells would be hundreds of MB,
//! so each rail's matrix is an image (a PNG in a `data:` URI, one pixel
//! per direction up to [`MATRIX_MAX_PIXELS`] ranks, above that each
//! pixel the worst direction of its block), beside one strip cell per
//! node and the slowest directions, one row per node. Both forms come
//! with the node verdicts, the failed directions, slow rounds, missing
//! ranks and the plan.
//!
//! Colour, anchored on the verdict: a passing direction is yellow at the
//! bandwidth where it would start to fail (its absolute floor or the
//! relative rule's share of its rail's best, whichever is higher) to
//! green at its rail's best; a failed one is orange just below that line
//! to red at half of it or less — so a loosened `--relative-bw` never
//! draws a passing direction red. A failed direction is also outlined;
//! a direction with its peer missing is grey, one that ran to an error
//! is black. Every text from a peer is escaped.
//!
//! With a topology ([`page_with_layout`]): the leaf switches named come
//! first; the matrices, the node strip and the node table are ordered by
//! group then host, the groups' boundaries drawn and labelled; and beside
//! each rail's matrix a group × group matrix, each cell the median
//! bandwidth from one group to another on that rail.

use std::fmt::Write as _;

use super::localise::LeafLayout;
use super::report::Roster;
use super::schedule::Rank;
use super::verdict::{Blame, ClusterVerdict, Measurement, NodeStatus, Outcome};

/// Largest job drawn as a full matrix (128 × 127 cells, ~3 MB with their
/// titles); above it, the node strip and the worst directions.
pub const MATRIX_MAX_RANKS: usize = 128;

/// How many of the worst directions the large form lists.
pub const WORST_LISTED: usize = 100;

/// Largest side of a large matrix's image, pixels: up to this many ranks
/// a pixel is a direction; above it, a pixel is the worst direction of a
/// block of ranks (4 MB of pixels a rail before compression).
pub const MATRIX_MAX_PIXELS: usize = 2_048;

/// Most groups drawn as a group × group matrix of titled cells; above, an
/// image, a pixel per pair of groups.
pub const GROUP_MATRIX_MAX_CELLS: usize = 64;

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
    page_with_layout(measurements, verdict, roster, facts, None)
}

/// Where each rank is drawn, with a topology: by group, then host.
#[derive(Debug, Clone, PartialEq)]
struct Placement {
    /// Per rank, its position (row and column).
    pos: Vec<usize>,
    /// Per rank, its group's index in `groups`.
    span_of: Vec<usize>,
    /// The groups in drawing order.
    groups: Vec<GroupSpan>,
}

/// A group's run of positions.
#[derive(Debug, Clone, PartialEq)]
struct GroupSpan {
    start: usize,
    len: usize,
    name: String,
}

impl Placement {
    fn new(layout: &LeafLayout, size: usize, roster: Roster<'_>) -> Self {
        let order = layout.order(size as u32, |r| roster.host(r));
        let mut pos = vec![0; size];
        let mut span_of = vec![0; size];
        let mut groups: Vec<GroupSpan> = Vec::new();
        let mut last: Option<Option<u32>> = None;
        for (at, &r) in order.iter().enumerate() {
            let g = layout.group(r);
            if last != Some(g) {
                groups.push(GroupSpan {
                    start: at,
                    len: 0,
                    name: layout.group_name(g),
                });
                last = Some(g);
            }
            if let Some(s) = groups.last_mut() {
                s.len += 1;
            }
            pos[r as usize] = at;
            span_of[r as usize] = groups.len() - 1;
        }
        Self {
            pos,
            span_of,
            groups,
        }
    }

    /// Rank r's position (its own number when out of range).
    fn at(&self, r: Rank) -> usize {
        self.pos.get(r as usize).copied().unwrap_or(r as usize)
    }
}

/// Rank r's position: its place in `placement`, or its rank.
fn position(placement: Option<&Placement>, r: Rank) -> usize {
    placement.map_or(r as usize, |p| p.at(r))
}

/// The page, with where each rank's rails sit (`layout`): the switch
/// findings first, the matrices ordered by group then host with the
/// groups' boundaries, a group × group matrix beside each rail's.
/// `None`: exactly [`page`].
pub fn page_with_layout(
    measurements: &[Measurement],
    verdict: &ClusterVerdict,
    roster: Roster<'_>,
    facts: PageFacts<'_>,
    layout: Option<&LeafLayout>,
) -> String {
    let size = verdict.nodes.len();
    let placement = layout.map(|l| Placement::new(l, size, roster));
    let placement = placement.as_ref();
    let mut h = String::with_capacity(64 * 1024);
    let verdict_word = if verdict.pass() { "PASS" } else { "FAIL" };
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>rdmaperf cluster: {verdict_word}, {size} ranks</title>\n<style>{CSS}{}</style>\n</head>\n<body>\n\
         <h1>rdmaperf cluster: <span class=\"{}\">{verdict_word}</span></h1>\n\
         <p class=\"facts\">{} &middot; {} &middot; {:.1} s &middot; exit code {}</p>\n",
        if placement.is_some() || !verdict.switches.is_empty() {
            CSS_GROUPS
        } else {
            ""
        },
        verdict_word.to_ascii_lowercase(),
        escape(facts.plan),
        escape(facts.test),
        facts.duration_s,
        verdict.exit_code(),
    );
    switches(&mut h, verdict);
    if size <= MATRIX_MAX_RANKS {
        matrices(&mut h, measurements, verdict, roster, placement);
    } else {
        images(&mut h, measurements, verdict, roster, placement);
        strip(&mut h, verdict, roster, placement);
        worst(&mut h, measurements, verdict, roster);
    }
    nodes(&mut h, verdict, roster, layout.zip(placement));
    failures(&mut h, measurements, verdict, roster);
    rounds_and_missing(&mut h, verdict, roster);
    h.push_str("</body>\n</html>\n");
    h
}

/// The colour scale, for a person (both forms).
const LEGEND: &str = "colour: where the bandwidth stands against the verdict \
     <span style=\"background:hsl(120,70%,45%)\">passed, at the rail's best</span>\
     <span style=\"background:hsl(60,70%,45%)\">passed, at the line where it would fail</span>\
     <span style=\"background:hsl(30,70%,45%)\">failed, just below the line</span>\
     <span style=\"background:hsl(0,70%,45%)\">failed, at half of it or less</span>\
     <span style=\"outline:2px solid #b42318\">failed</span>\
     <span style=\"background:#bbb\">peer missing</span>\
     <span style=\"background:#111;color:#fff\">error</span>";

const CSS: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}\
h1{font-size:1.4em}.pass{color:#17803d}.fail{color:#b42318}\
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}\
th{background:#f3f3f3}.facts{color:#555}svg{display:block;margin:.5em 0 1.5em}\
svg text{font-size:10px;fill:#444}rect.failed{stroke:#b42318;stroke-width:2}\
.legend span{display:inline-block;padding:0 6px;margin-right:6px;border:1px solid #999}\
.rail{display:inline-block;vertical-align:top;margin-right:2em}h3{font-size:1.05em;margin:.3em 0}\
img.matrix{display:block;image-rendering:pixelated;border:1px solid #ccc;margin:.5em 0 1.5em}";

/// The groups' and the switch findings' style, with a topology.
const CSS_GROUPS: &str = ".beside{display:flex;flex-wrap:wrap;gap:2em;align-items:flex-start}\
line.group-boundary{stroke:#222;stroke-width:1}svg text.group{font-weight:bold;fill:#222}\
.overlay{position:relative}.overlay svg{position:absolute;left:0;top:0;margin:0}\
ul#switches li.switch{color:#b42318;font-weight:bold}.overlay img.matrix{margin:0}";

/// Where a direction on `rail` stands against its verdict: the
/// bandwidth below which it fails (its absolute floor, or the relative
/// rule's share of the rail's best, whichever is higher) and the top of
/// the scale (the rail's best, or the floor when that is higher).
fn scale(verdict: &ClusterVerdict, rail: u32, floor: Option<f64>) -> (f64, f64) {
    let best = verdict
        .rail_best_bw_gbps
        .get(rail as usize)
        .copied()
        .flatten()
        .or(verdict.best_bw_gbps);
    let relative = best.map(|b| b * verdict.relative_bw);
    let line = match (floor, relative) {
        (Some(f), Some(r)) => f.max(r),
        (f, r) => f.or(r).unwrap_or(0.0),
    };
    let top = best.unwrap_or(line).max(line);
    (line, top)
}

/// A measured direction's hue, anchored on its verdict: passed, 60
/// (yellow, at the line where it would fail) to 120 (green, at the top);
/// failed, 0 (red, at half the line or below) to 30 (orange, just below
/// it, or above it when another rule failed it). A passing direction is
/// never in the failing half of the scale.
fn hue(bw: f64, (line, top): (f64, f64), passed: bool) -> f64 {
    if passed {
        let t = if top > line {
            ((bw - line) / (top - line)).clamp(0.0, 1.0)
        } else {
            1.0
        };
        60.0 + 60.0 * t
    } else {
        let t = if line > 0.0 {
            ((bw / line - 0.5) / 0.5).clamp(0.0, 1.0)
        } else {
            0.0
        };
        30.0 * t
    }
}

/// The CSS colour of a hue at the matrix's saturation and lightness.
fn colour(hue: f64) -> String {
    format!("hsl({hue:.0},70%,45%)")
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
                colour(hue(
                    *bw_gbps,
                    scale(verdict, m.judged_rail(), d.min_bw_gbps),
                    d.pass,
                )),
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
    placement: Option<&Placement>,
) {
    let rails = verdict.rail_count();
    let _ = write!(
        h,
        "<h2>Bandwidth per direction{}</h2>\n<p class=\"legend\">row: sender, column: receiver; {}{LEGEND}</p>\n",
        if rails > 1 {
            format!(", on each of {rails} rails (rail k of the sender met rail k of the receiver)")
        } else {
            String::new()
        },
        if placement.is_some() {
            "ordered by group then host, the groups' boundaries drawn; beside, the median from group to group; "
        } else {
            ""
        }
    );
    for rail in 0..rails {
        matrix(h, measurements, verdict, roster, (rail, rails), placement);
    }
}

/// With several rails, rail `rail`'s heading (its block opened); the id
/// of its matrix: `matrix-rail-K`, or `matrix` with one rail.
fn rail_heading(h: &mut String, roster: Roster<'_>, rail: u32, rails: u32) -> String {
    if rails > 1 {
        let _ = writeln!(
            h,
            "<div class=\"rail\"><h3>rail {rail} (rank 0's {})</h3>",
            escape(&roster.rail_device(0, rail))
        );
        format!("matrix-rail-{rail}")
    } else {
        "matrix".to_owned()
    }
}

/// Rail `rail`'s matrix (of `rails`).
fn matrix(
    h: &mut String,
    measurements: &[Measurement],
    verdict: &ClusterVerdict,
    roster: Roster<'_>,
    (rail, rails): (u32, u32),
    placement: Option<&Placement>,
) {
    let n = verdict.nodes.len();
    let cell_px = if n <= 16 {
        28
    } else if n <= 64 {
        12
    } else {
        6
    };
    // With groups: a band above and to the left for their names.
    let (left, top) = if placement.is_some() {
        (40 + GROUP_BAND_LEFT, 40 + GROUP_BAND_TOP)
    } else {
        (40, 40)
    };
    let (width, height) = (left + n * cell_px + 4, top + n * cell_px + 4);
    let id = rail_heading(h, roster, rail, rails);
    if placement.is_some() {
        h.push_str("<div class=\"beside\">\n");
    }
    let _ = writeln!(
        h,
        "<svg id=\"{id}\" class=\"matrix\" data-rail=\"{rail}\" width=\"{width}\" height=\"{height}\" role=\"img\">"
    );
    if cell_px >= 12 {
        for r in 0..n as Rank {
            let at = position(placement, r) * cell_px + cell_px / 2;
            let _ = writeln!(
                h,
                "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{r}</text><text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{r}</text>",
                left - 4,
                top + at + 4,
                left + at,
                top - 6
            );
        }
    }
    if let Some(p) = placement {
        group_marks(h, p, (left, top), cell_px as f64, n * cell_px, true);
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
            left + position(placement, m.to) * cell_px,
            top + position(placement, m.from) * cell_px,
            escape(&title),
            w = cell_px.saturating_sub(1).max(1),
        );
    }
    h.push_str("</svg>\n");
    if let Some(p) = placement {
        group_matrix(h, measurements, verdict, p, rail);
        h.push_str("</div>\n");
    }
    if rails > 1 {
        h.push_str("</div>\n");
    }
}

/// Width of the band left of a matrix for its groups' names, pixels.
const GROUP_BAND_LEFT: usize = 80;
/// Height of the band above a matrix for its groups' names, pixels.
const GROUP_BAND_TOP: usize = 16;

/// The groups' boundaries over a matrix whose cells start at `(left,
/// top)`, `px` pixels a position, `side` pixels wide: a line between two
/// groups across the matrix both ways and, with `names`, each group's
/// name in the bands above and to the left (cut to fit, whole in its
/// title).
fn group_marks(
    h: &mut String,
    p: &Placement,
    (left, top): (usize, usize),
    px: f64,
    side: usize,
    names: bool,
) {
    for g in &p.groups {
        let at = g.start as f64 * px;
        if g.start > 0 {
            let _ = writeln!(
                h,
                "<line class=\"group-boundary\" x1=\"{}\" y1=\"{top}\" x2=\"{}\" y2=\"{}\"/>\
                 <line class=\"group-boundary\" x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>",
                left as f64 + at - 0.5,
                left as f64 + at - 0.5,
                top + side,
                top as f64 + at - 0.5,
                left + side,
                top as f64 + at - 0.5,
            );
        }
        if names {
            // About 6 pixels a character at 10 px.
            let across = ((g.len as f64 * px / 6.0) as usize).max(1);
            let down = GROUP_BAND_LEFT / 6 - 1;
            let cut = |max: usize| -> String {
                let mut t: String = g.name.chars().take(max).collect();
                if g.name.chars().count() > max {
                    t.pop();
                    t.push('…');
                }
                t
            };
            let _ = writeln!(
                h,
                "<g class=\"group-label\" data-group=\"{}\"><title>group {} ({} ranks)</title>\
                 <text class=\"group\" x=\"{}\" y=\"12\">{}</text>\
                 <text class=\"group\" x=\"2\" y=\"{}\">{}</text></g>",
                escape(&g.name),
                escape(&g.name),
                g.len,
                left as f64 + at + 1.0,
                escape(&cut(across)),
                top as f64 + at + px.min(12.0),
                escape(&cut(down)),
            );
        }
    }
}

/// Each pair of groups' directions on `rail`: (row group, column group)
/// → their bandwidths (an error as -inf) and how many failed.
fn group_cells(
    measurements: &[Measurement],
    verdict: &ClusterVerdict,
    p: &Placement,
    rail: u32,
) -> Vec<(usize, Option<f64>, usize, usize)> {
    let g = p.groups.len();
    let mut bws: Vec<(u32, f32)> = Vec::new();
    let mut counts = vec![(0usize, 0usize); g * g];
    let on_rail = measurements
        .iter()
        .zip(&verdict.directions)
        .filter(|(m, d)| m.judged_rail() == rail && !d.peer_missing);
    for (m, d) in on_rail {
        let (Some(&a), Some(&b)) = (p.span_of.get(m.from as usize), p.span_of.get(m.to as usize))
        else {
            continue;
        };
        let cell = a * g + b;
        counts[cell].0 += 1;
        counts[cell].1 += usize::from(!d.pass);
        if let Some(bw) = m.bw() {
            bws.push((cell as u32, bw as f32));
        }
    }
    bws.sort_unstable_by(|x, y| x.0.cmp(&y.0).then(x.1.total_cmp(&y.1)));
    let mut out = Vec::new();
    let mut at = 0;
    for (cell, &(n, failed)) in counts.iter().enumerate() {
        if n == 0 {
            continue;
        }
        let from = at;
        while at < bws.len() && bws[at].0 as usize == cell {
            at += 1;
        }
        let run = &bws[from..at];
        let median = (!run.is_empty()).then(|| {
            let mid = run.len() / 2;
            if run.len() % 2 == 1 {
                f64::from(run[mid].1)
            } else {
                (f64::from(run[mid - 1].1) + f64::from(run[mid].1)) / 2.0
            }
        });
        out.push((cell, median, n, failed));
    }
    out
}

/// Beside rail `rail`'s matrix: the group × group matrix, each cell the
/// median bandwidth from the row's group to the column's on that rail,
/// coloured as a direction at that figure (failed when below the line);
/// titled cells up to [`GROUP_MATRIX_MAX_CELLS`] groups, an image above.
fn group_matrix(
    h: &mut String,
    measurements: &[Measurement],
    verdict: &ClusterVerdict,
    p: &Placement,
    rail: u32,
) {
    let g = p.groups.len();
    let cells = group_cells(measurements, verdict, p, rail);
    let line = scale(verdict, rail, None);
    let _ = writeln!(
        h,
        "<div class=\"groups\"><h3>group × group, rail {rail}: median Gb/s</h3>"
    );
    if g <= GROUP_MATRIX_MAX_CELLS {
        let px = if g <= 8 { 28 } else { 12 };
        let (left, top) = (GROUP_BAND_LEFT, GROUP_BAND_TOP);
        let side = g * px;
        let _ = writeln!(
            h,
            "<svg id=\"groups-rail-{rail}\" class=\"group-matrix\" data-rail=\"{rail}\" width=\"{}\" height=\"{}\" role=\"img\">",
            left + side + 4,
            top + side + 4
        );
        let spans = Placement {
            pos: Vec::new(),
            span_of: Vec::new(),
            groups: (0..g)
                .map(|i| GroupSpan {
                    start: i,
                    len: 1,
                    name: p.groups[i].name.clone(),
                })
                .collect(),
        };
        group_marks(h, &spans, (left, top), px as f64, side, true);
        for (cell, median, n, failed) in cells {
            let (a, b) = (cell / g, cell % g);
            let fill = match median {
                Some(mid) => colour(hue(mid, line, mid >= line.0)),
                None => "#111".into(),
            };
            let figure = median.map_or("no figure".into(), |m| {
                format!("median {} Gb/s", super::verdict::gbps(m))
            });
            let _ = writeln!(
                h,
                "<rect class=\"group-cell{}\" data-src-group=\"{}\" data-dst-group=\"{}\" x=\"{}\" y=\"{}\" width=\"{w}\" height=\"{w}\" fill=\"{fill}\"><title>{} -&gt; {}, rail {rail}: {figure} over {n} directions, {failed} failed</title></rect>",
                if failed > 0 { " failed" } else { "" },
                escape(&p.groups[a].name),
                escape(&p.groups[b].name),
                left + b * px,
                top + a * px,
                escape(&p.groups[a].name),
                escape(&p.groups[b].name),
                w = px - 1,
            );
        }
        h.push_str("</svg>\n");
    } else {
        let mut pixels = vec![PX_EMPTY; g * g];
        for (cell, median, _, _) in cells {
            pixels[cell] = match median {
                Some(mid) => level(mid, line, mid >= line.0),
                None => PX_ERROR,
            };
        }
        let png = super::png::indexed(g as u32, g as u32, &palette(), &pixels);
        let shown = g * 600usize.div_ceil(g).max(1);
        let _ = writeln!(
            h,
            "<img id=\"groups-rail-{rail}\" class=\"matrix group-matrix\" data-rail=\"{rail}\" \
             width=\"{shown}\" height=\"{shown}\" alt=\"rail {rail}: {g} × {g} groups\" \
             src=\"data:image/png;base64,{}\">",
            data_base64(&png)
        );
    }
    h.push_str("</div>\n");
}

/// The switch findings, first on the page (none without a topology).
fn switches(h: &mut String, verdict: &ClusterVerdict) {
    if verdict.switches.is_empty() {
        return;
    }
    let lines = super::report::switch_lines(verdict);
    let named = verdict.switches.iter().filter(|f| f.fails()).count();
    let _ = writeln!(
        h,
        "<h2>Switch findings: {named}</h2>\n<p class=\"legend\">a leaf whose cross-leaf directions failed while its nodes passed among themselves: its uplinks, not its nodes</p>\n<ul id=\"switches\">"
    );
    for l in lines {
        let class = if l.starts_with("SWITCH") {
            "switch"
        } else {
            "note"
        };
        let _ = writeln!(h, "<li class=\"{class}\">{}</li>", escape(&l));
    }
    h.push_str("</ul>\n");
}

/// The large form's node strip: one cell per node, its verdict's colour.
fn strip(
    h: &mut String,
    verdict: &ClusterVerdict,
    roster: Roster<'_>,
    placement: Option<&Placement>,
) {
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
        let at = position(placement, node.rank);
        let _ = writeln!(
            h,
            "<rect class=\"node {}\" data-rank=\"{r}\" x=\"{}\" y=\"{}\" width=\"{w}\" height=\"{w}\" fill=\"{fill}\"><title>rank {r} {}: {}, {} of {} pairs failed</title></rect>",
            node.status.word().to_ascii_lowercase(),
            (at % per_row) * px,
            (at / per_row) * px,
            escape(&roster.host(node.rank)),
            node.status.word(),
            node.failed,
            node.pairs,
            w = px - 1,
        );
    }
    h.push_str("</svg>\n");
}

/// The large form's matrices: an image per rail, a pixel per direction
/// (up to [`MATRIX_MAX_PIXELS`] ranks; above, a block of ranks per
/// pixel, the worst of its directions).
fn images(
    h: &mut String,
    measurements: &[Measurement],
    verdict: &ClusterVerdict,
    roster: Roster<'_>,
    placement: Option<&Placement>,
) {
    let n = verdict.nodes.len();
    let rails = verdict.rail_count();
    let block = n.div_ceil(MATRIX_MAX_PIXELS).max(1);
    let side = n.div_ceil(block);
    // At least 600 px on the page, whole pixels per block.
    let shown = side * 600usize.div_ceil(side).max(1);
    let _ = write!(
        h,
        "<h2>Bandwidth per direction{}</h2>\n<p class=\"legend\">row: sender, column: receiver; {}; {LEGEND}</p>\n",
        if rails > 1 {
            format!(", on each of {rails} rails (rail k of the sender met rail k of the receiver)")
        } else {
            String::new()
        },
        if block > 1 {
            format!("a pixel is a block of {block} × {block} ranks, drawn as its worst direction")
        } else {
            "a pixel is a direction".into()
        }
    );
    for rail in 0..rails {
        let pixels = matrix_pixels(measurements, verdict, rail, block, side, placement);
        let png = super::png::indexed(side as u32, side as u32, &palette(), &pixels);
        let id = rail_heading(h, roster, rail, rails);
        if let Some(p) = placement {
            // The groups' boundaries over the image, their names in the
            // list below it.
            let _ = writeln!(
                h,
                "<div class=\"beside\"><div><div class=\"overlay\" style=\"width:{shown}px;height:{shown}px\">\n\
                 <svg class=\"group-boundaries\" width=\"{shown}\" height=\"{shown}\" role=\"img\">"
            );
            group_marks(h, p, (0, 0), shown as f64 / n as f64, shown, false);
            h.push_str("</svg>\n");
        }
        let _ = writeln!(
            h,
            "<img id=\"{id}\" class=\"matrix\" data-rail=\"{rail}\" data-ranks-per-pixel=\"{block}\" \
             width=\"{shown}\" height=\"{shown}\" alt=\"rail {rail}: {n} × {n} directions\" \
             src=\"data:image/png;base64,{}\">",
            data_base64(&png)
        );
        if let Some(p) = placement {
            h.push_str("</div>\n<p class=\"legend group-list\">groups, in order: ");
            let listed: Vec<String> = p
                .groups
                .iter()
                .take(GROUP_MATRIX_MAX_CELLS)
                .map(|g| format!("{} ({})", escape(&g.name), g.len))
                .collect();
            h.push_str(&listed.join(", "));
            if p.groups.len() > GROUP_MATRIX_MAX_CELLS {
                let _ = write!(h, " and {} more", p.groups.len() - GROUP_MATRIX_MAX_CELLS);
            }
            h.push_str("</p></div>\n");
            group_matrix(h, measurements, verdict, p, rail);
            h.push_str("</div>\n");
        }
        if rails > 1 {
            h.push_str("</div>\n");
        }
    }
}

/// Palette levels of a passing direction (green at the top to yellow at
/// the line) and of a failed one (orange to red).
const PASS_LEVELS: u8 = 16;
const FAIL_LEVELS: u8 = 8;
/// Palette indices, ordered so that a larger one is a worse direction
/// (a block's pixel is the largest of its directions').
const PX_EMPTY: u8 = 0;
const PX_MISSING: u8 = 1 + PASS_LEVELS;
const PX_ERROR: u8 = PX_MISSING + 1 + FAIL_LEVELS;

/// The images' palette: [`PX_EMPTY`] white, the passing levels, grey,
/// the failing levels, black.
fn palette() -> Vec<[u8; 3]> {
    let mut p = vec![[255, 255, 255]];
    for i in 0..PASS_LEVELS {
        p.push(hsl_rgb(
            120.0 - 60.0 * f64::from(i) / f64::from(PASS_LEVELS - 1),
        ));
    }
    p.push([0xbb, 0xbb, 0xbb]);
    for i in 0..FAIL_LEVELS {
        p.push(hsl_rgb(
            30.0 - 30.0 * f64::from(i) / f64::from(FAIL_LEVELS - 1),
        ));
    }
    p.push([0x11, 0x11, 0x11]);
    p
}

/// A direction's palette index: its hue quantised, worse = larger.
fn pixel(m: &Measurement, d: &super::verdict::DirectionVerdict, verdict: &ClusterVerdict) -> u8 {
    match m.outcome {
        Outcome::PeerMissing => PX_MISSING,
        Outcome::Error { .. } => PX_ERROR,
        Outcome::Measured { bw_gbps, .. } => level(
            bw_gbps,
            scale(verdict, m.judged_rail(), d.min_bw_gbps),
            d.pass,
        ),
    }
}

/// A measured figure's palette index against `scale` (as [`hue`]).
fn level(bw: f64, scale: (f64, f64), pass: bool) -> u8 {
    let hue = hue(bw, scale, pass);
    if pass {
        // 120 → level 0, 60 → the last.
        let t = ((120.0 - hue) / 60.0).clamp(0.0, 1.0);
        1 + (t * f64::from(PASS_LEVELS - 1)).round() as u8
    } else {
        let t = ((30.0 - hue) / 30.0).clamp(0.0, 1.0);
        PX_MISSING + 1 + (t * f64::from(FAIL_LEVELS - 1)).round() as u8
    }
}

/// Rail `rail`'s `side` × `side` pixels, `block` ranks a pixel.
fn matrix_pixels(
    measurements: &[Measurement],
    verdict: &ClusterVerdict,
    rail: u32,
    block: usize,
    side: usize,
    placement: Option<&Placement>,
) -> Vec<u8> {
    let mut px = vec![PX_EMPTY; side * side];
    let on_rail = measurements
        .iter()
        .zip(&verdict.directions)
        .filter(|(m, _)| m.judged_rail() == rail);
    for (m, d) in on_rail {
        let (row, col) = (
            position(placement, m.from) / block,
            position(placement, m.to) / block,
        );
        if row < side && col < side {
            let at = &mut px[row * side + col];
            *at = (*at).max(pixel(m, d, verdict));
        }
    }
    px
}

/// HSL (saturation 70 %, lightness 45 %: the SVG cells') to RGB, the
/// CSS Color 4 formula ("Converting HSL Colors to sRGB").
fn hsl_rgb(hue: f64) -> [u8; 3] {
    let (s, l): (f64, f64) = (0.70, 0.45);
    let f = |n: f64| {
        let k = (n + hue / 30.0) % 12.0;
        let a = s * l.min(1.0 - l);
        let v = l - a * (k - 3.0).min(9.0 - k).clamp(-1.0, 1.0);
        (v * 255.0).round() as u8
    };
    [f(0.0), f(8.0), f(4.0)]
}

/// `bytes` in base64 for a `data:` URI, with a line break inside any
/// "http" the alphabet happens to spell (the page has no URL, and
/// says so to a `grep http`); a URL parser drops the breaks (WHATWG URL
/// Standard, "remove all ASCII tab or newline from input").
fn data_base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    let text = base64::engine::general_purpose::STANDARD.encode(bytes);
    let mut out = String::with_capacity(text.len());
    let b = text.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        if i >= 2
            && b[i - 2..=i].eq_ignore_ascii_case(b"htt")
            && b.get(i + 1).is_some_and(|n| n.eq_ignore_ascii_case(&b'p'))
        {
            out.push('\n');
        }
        out.push(char::from(c));
    }
    out
}

/// The large form's slowest directions, one row per node, so one bad
/// node fills one row, not the table: a direction belongs to the node
/// its failure is blamed on, else to its sender; each node's row is its
/// slowest direction and how many of its directions failed, the nodes in
/// order of that slowest figure (an error first).
fn worst(
    h: &mut String,
    measurements: &[Measurement],
    verdict: &ClusterVerdict,
    roster: Roster<'_>,
) {
    let size = verdict.nodes.len();
    let mut slowest: Vec<Option<(f64, usize)>> = vec![None; size];
    let mut failed = vec![0usize; size];
    for (i, (m, d)) in measurements.iter().zip(&verdict.directions).enumerate() {
        let owner = match (d.blame, d.blamed_ranks.first()) {
            (Blame::Node, Some(&r)) => r,
            _ => m.from,
        } as usize;
        if owner >= size {
            continue;
        }
        let key = match m.outcome {
            Outcome::Measured { bw_gbps, .. } => bw_gbps,
            Outcome::Error { .. } => f64::NEG_INFINITY,
            Outcome::PeerMissing => continue,
        };
        failed[owner] += usize::from(!d.pass);
        if slowest[owner].is_none_or(|(k, _)| key < k) {
            slowest[owner] = Some((key, i));
        }
    }
    let mut rows: Vec<(usize, f64, usize)> = slowest
        .iter()
        .enumerate()
        .filter_map(|(r, s)| s.map(|(k, i)| (r, k, i)))
        .collect();
    rows.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    rows.truncate(WORST_LISTED);
    let _ = writeln!(
        h,
        "<h2>The slowest directions, one row per node: {} nodes</h2>\n\
         <p class=\"legend\">a direction counts for the node its failure is blamed on, else for its sender</p>\n\
         <table id=\"worst\">\n<tr><th>node</th><th>its directions failed</th><th>round</th><th>rail</th><th>from</th><th>to</th><th>Gb/s</th><th>verdict</th></tr>",
        rows.len()
    );
    for (r, _, i) in rows {
        let (m, d) = (&measurements[i], &verdict.directions[i]);
        let figure = m.bw().map_or("error".into(), super::verdict::gbps);
        let _ = writeln!(
            h,
            "<tr><td>rank {r} {}</td><td>{}</td><td>{}</td><td>{}</td><td>rank {} {}</td><td>rank {} {}</td><td>{}</td><td>{}</td></tr>",
            escape(&roster.host(r as u32)),
            failed[r],
            m.round,
            m.rail,
            m.from,
            escape(&roster.host(m.from)),
            m.to,
            escape(&roster.host(m.to)),
            figure,
            if d.pass { "PASS" } else { "FAIL" }
        );
    }
    h.push_str("</table>\n");
}

/// The per-node verdict table.
fn nodes(
    h: &mut String,
    verdict: &ClusterVerdict,
    roster: Roster<'_>,
    grouped: Option<(&LeafLayout, &Placement)>,
) {
    let _ = writeln!(
        h,
        "<h2>Node verdicts</h2>\n<table id=\"nodes\">\n<tr>{}<th>rank</th><th>host</th><th>devices (rail 0, 1, ...)</th>\
         <th>verdict</th><th>pairs failed</th><th>worst Gb/s</th><th>port error counters that rose</th>\
         <th>rails unlike most ranks'</th><th>rails that failed</th></tr>",
        if grouped.is_some() {
            "<th>group</th>"
        } else {
            ""
        }
    );
    let mut order: Vec<&super::verdict::NodeVerdict> = verdict.nodes.iter().collect();
    if let Some((_, p)) = grouped {
        order.sort_by_key(|n| p.at(n.rank));
    }
    for n in order {
        let rose: Vec<String> = n
            .port_errors
            .iter()
            .map(|c| format!("{} {} -> {}", c.name, c.before, c.after))
            .collect();
        let failed_rails = super::report::failed_rails(n, roster);
        let _ = writeln!(
            h,
            "<tr class=\"{}\">{}<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} of {}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            n.status.word().to_ascii_lowercase(),
            grouped.map_or(String::new(), |(l, _)| format!(
                "<td>{}</td>",
                escape(&l.group_name(l.group(n.rank)))
            )),
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
            Blame::Switch => match d.switch_finding().and_then(|i| verdict.switches.get(i)) {
                Some(f) => format!("SWITCH {}", f.what()),
                None => "SWITCH".into(),
            },
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
    /// A roster that knows no host, device or rail names.
    const NO_NAMES: Roster<'static> = Roster {
        rails: &[],
        hosts: &[],
        devices: &[],
    };

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
    fn the_colours_are_anchored_on_the_verdict_so_a_pass_is_never_red() {
        // The demo's case: --relative-bw 0.05 passes a direction at 0.3 ×
        // its rail's best, which the old scale (red at half the best or
        // below) drew red.
        let (mut all, _) = run(4, 99);
        if let Outcome::Measured { bw_gbps, .. } = &mut all[0].outcome {
            *bw_gbps = 30.0;
        }
        let th = Thresholds {
            relative_bw: 0.05,
            ..Thresholds::default()
        };
        let v = judge(4, &[], &all, &th);
        assert!(v.directions[0].pass);
        let (line, top) = scale(&v, 0, None);
        assert_eq!((line, top), (5.0, 100.0));
        let h = hue(30.0, (line, top), true);
        assert!((60.0..=120.0).contains(&h), "{h}");
        // At the line, yellow; at the best, green; failed, red to orange.
        assert_eq!(hue(5.0, (line, top), true), 60.0);
        assert_eq!(hue(100.0, (line, top), true), 120.0);
        assert_eq!(hue(2.5, (line, top), false), 0.0);
        assert_eq!(hue(4.99, (line, top), false).round(), 30.0);
        // A direction failed for another rule above the line stays in
        // the failing half.
        assert_eq!(hue(90.0, (line, top), false), 30.0);
        // An absolute floor above the relative share is the line.
        assert_eq!(scale(&v, 0, Some(80.0)), (80.0, 100.0));
        let p = page(&all, &v, NO_NAMES, facts());
        let first = p
            .lines()
            .find(|l| l.starts_with("<rect class=\"cell passed\" data-src=\"0\""))
            .unwrap();
        let at = first.find("fill=\"hsl(").unwrap() + 10;
        let drawn: f64 = first[at..at + first[at..].find(',').unwrap()]
            .parse()
            .unwrap();
        assert!(drawn >= 60.0, "{first}");
    }

    #[test]
    fn a_large_matrix_is_an_image_a_pixel_per_direction_or_the_worst_of_a_block() {
        let (all, v) = run(200, 7);
        let p = page(&all, &v, NO_NAMES, facts());
        let at = p.find("src=\"data:image/png;base64,").unwrap() + 27;
        let text: String = p[at..at + p[at..].find('"').unwrap()]
            .chars()
            .filter(|c| !c.is_ascii_whitespace())
            .collect();
        use base64::Engine as _;
        let png = base64::engine::general_purpose::STANDARD
            .decode(text)
            .unwrap();
        assert_eq!(png[12..16], *b"IHDR");
        assert_eq!(png[16..24], [0, 0, 0, 200, 0, 0, 0, 200], "200 × 200");
        assert!(
            p.contains("id=\"matrix\" class=\"matrix\" data-rail=\"0\" data-ranks-per-pixel=\"1\"")
        );
        // The pixels: rank 7's row and column failed, the rest passed,
        // the diagonal empty.
        let px = matrix_pixels(&all, &v, 0, 1, 200, None);
        for (i, &c) in px.iter().enumerate() {
            let (row, col) = (i / 200, i % 200);
            let want = if row == col {
                c == PX_EMPTY
            } else if row == 7 || col == 7 {
                c > PX_MISSING && c < PX_ERROR
            } else {
                (1..PX_MISSING).contains(&c)
            };
            assert!(want, "pixel {row},{col}: {c}");
        }
        // Two ranks a pixel: a block is its worst direction.
        let px = matrix_pixels(&all, &v, 0, 2, 100, None);
        assert_eq!(px.len(), 100 * 100);
        for (i, &c) in px.iter().enumerate() {
            let (row, col) = (i / 100, i % 100);
            let failing = row == 3 || col == 3;
            assert_eq!(c > PX_MISSING, failing, "block {row},{col}: {c}");
        }
        assert_eq!(palette().len(), usize::from(PX_ERROR) + 1);
    }

    #[test]
    fn a_base64_http_is_broken_by_a_line_break() {
        // Bytes whose base64 spells "http" (and "HTTP").
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode("aHR0AAhttpAAHTTP")
            .unwrap();
        let text = data_base64(&bytes);
        assert!(!text.to_ascii_lowercase().contains("http"), "{text}");
        let back: String = text.chars().filter(|c| *c != '\n').collect();
        assert_eq!(back, "aHR0AAhttpAAHTTP");
    }

    #[test]
    fn one_bad_node_fills_one_row_of_the_slowest_directions() {
        let (all, v) = run(200, 7);
        let p = page(&all, &v, NO_NAMES, facts());
        let table = &p[p.find("<table id=\"worst\">").unwrap()..];
        let table = &table[..table.find("</table>").unwrap()];
        let rows: Vec<&str> = table
            .lines()
            .filter(|l| l.starts_with("<tr><td>"))
            .collect();
        assert_eq!(rows.len(), WORST_LISTED);
        // Its 398 directions, all failed and blamed on it, are one row.
        assert!(
            rows[0].starts_with("<tr><td>rank 7 ?</td><td>398</td>"),
            "{}",
            rows[0]
        );
        assert_eq!(rows.iter().filter(|r| r.contains("FAIL")).count(), 1);
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

    /// Sixteen ranks under four leaves, rank r under leaf r % 4 (so the
    /// group order is not the rank order), leaf 2's uplinks slow.
    fn interleaved(n: u32, leaves: u32) -> (Vec<Measurement>, ClusterVerdict, LeafLayout) {
        use crate::cluster::localise::fabricate::*;
        let layout = LeafLayout {
            switch_names: (0..leaves).map(|i| format!("leaf{i}")).collect(),
            group_names: (0..leaves).map(|i| format!("g{i}<b>")).collect(),
            leaf_of: (0..n).map(|r| vec![Some(r % leaves)]).collect(),
            group_of: (0..n).map(|r| r % leaves).collect(),
        };
        let ms = measure(&all_pairs_rounds(n), 1, slow_uplinks(&layout, 2, 0, 40.0));
        let v = crate::cluster::verdict::judge_with_layout(
            n,
            &[],
            &ms,
            &Thresholds::default(),
            &[],
            Some(&layout),
        );
        (ms, v, layout)
    }

    #[test]
    fn with_a_topology_the_switch_finding_is_first_and_the_matrix_is_ordered_by_group() {
        let (ms, v, layout) = interleaved(16, 4);
        assert_eq!(v.switches.len(), 1);
        let hosts: Vec<Option<String>> = (0..16).map(|r| Some(format!("node-{r}"))).collect();
        let roster = Roster {
            rails: &[],
            hosts: &hosts,
            devices: &[],
        };
        let p = page_with_layout(&ms, &v, roster, facts(), Some(&layout));
        let at = |needle: &str| p.find(needle).unwrap_or_else(|| panic!("{needle} in {p}"));
        // The finding first, before the matrix.
        assert!(at("<h2>Switch findings: 1</h2>") < at("<svg id=\"matrix\""));
        assert!(p.contains("<li class=\"switch\">SWITCH leaf leaf2, rail 0: "));
        // The run fails, every node passes.
        assert!(p.contains("<span class=\"fail\">FAIL</span>"));
        assert_eq!(p.matches("<tr class=\"pass\">").count(), 16);
        // Ordered by group then host: rank 4 (g0, node-4) is the second
        // column: 120 px of bands and labels, 28 px a cell.
        let cells: Vec<&str> = p
            .lines()
            .filter(|l| l.starts_with("<rect class=\"cell "))
            .collect();
        assert_eq!(cells.len(), 16 * 15);
        assert!(
            cells
                .iter()
                .any(|l| l
                    .contains("data-src=\"0\" data-dst=\"4\" data-rail=\"0\" x=\"148\" y=\"56\"")),
            "{cells:#?}"
        );
        // Group boundaries (3 between 4 groups, both ways) and labels,
        // escaped.
        assert_eq!(p.matches("<line class=\"group-boundary\"").count(), 6 + 6);
        assert!(p.contains("<g class=\"group-label\" data-group=\"g2&lt;b&gt;\"><title>group g2&lt;b&gt; (4 ranks)</title>"));
        assert!(!p.contains("<b>"));
        // Beside it, the group matrix: 4 × 4 cells, leaf 2's cross cells
        // failed, the diagonal (within each group) passed.
        assert!(at("<svg id=\"matrix\"") < at("<svg id=\"groups-rail-0\""));
        let group_cells: Vec<&str> = p
            .lines()
            .filter(|l| l.starts_with("<rect class=\"group-cell"))
            .collect();
        assert_eq!(group_cells.len(), 16);
        for l in &group_cells {
            let src2 = l.contains("data-src-group=\"g2&lt;b&gt;\"");
            let dst2 = l.contains("data-dst-group=\"g2&lt;b&gt;\"");
            assert_eq!(
                l.starts_with("<rect class=\"group-cell failed\""),
                src2 != dst2,
                "{l}"
            );
        }
        assert!(p.contains(
            "g2&lt;b&gt; -&gt; g0&lt;b&gt;, rail 0: median 40.00 Gb/s over 16 directions, 16 failed"
        ));
        // The node table: a group column, rows in the matrix's order.
        assert!(p.contains("<tr><th>group</th><th>rank</th>"));
        let rows: Vec<&str> = p
            .lines()
            .filter(|l| l.starts_with("<tr class=\"pass\">"))
            .collect();
        assert!(rows[0].starts_with("<tr class=\"pass\"><td>g0&lt;b&gt;</td><td>0</td>"));
        assert!(rows[1].starts_with("<tr class=\"pass\"><td>g0&lt;b&gt;</td><td>4</td>"));
        // The failed directions say whose.
        assert!(p.contains("<td>SWITCH leaf leaf2</td>"));
        assert!(!p.contains("http"));
        // Without a topology: the page as before.
        assert_eq!(
            page_with_layout(&ms, &v, roster, facts(), None),
            page(&ms, &v, roster, facts())
        );
        let blind = judge(16, &[], &ms, &Thresholds::default());
        let plain = page(&ms, &blind, roster, facts());
        assert!(!plain.contains("Switch findings") && !plain.contains("group"));
    }

    #[test]
    fn a_large_job_with_a_topology_orders_its_image_and_draws_the_boundaries_over_it() {
        let (ms, v, layout) = interleaved(200, 8);
        let p = page_with_layout(&ms, &v, NO_NAMES, facts(), Some(&layout));
        assert!(p.contains("<h2>Switch findings: 1</h2>"));
        assert!(p.contains("<svg class=\"group-boundaries\""));
        // Over the image and in the group matrix: 7 between 8 groups, both
        // ways.
        assert_eq!(
            p.matches("<line class=\"group-boundary\"").count(),
            2 * 7 * 2
        );
        assert!(p.contains(
            "<p class=\"legend group-list\">groups, in order: g0&lt;b&gt; (25), g1&lt;b&gt; (25),"
        ));
        assert!(p.contains("<svg id=\"groups-rail-0\" class=\"group-matrix\""));
        // The pixels follow the order: leaf 2's ranks are positions
        // 50..75, its cross directions failed, within it passed.
        let placement = Placement::new(&layout, 200, NO_NAMES);
        let px = matrix_pixels(&ms, &v, 0, 1, 200, Some(&placement));
        for (i, &c) in px.iter().enumerate() {
            let (row, col) = (i / 200, i % 200);
            let in2 = |x: usize| (50..75).contains(&x);
            let want = if row == col {
                c == PX_EMPTY
            } else if in2(row) != in2(col) {
                c > PX_MISSING && c < PX_ERROR
            } else {
                (1..PX_MISSING).contains(&c)
            };
            assert!(want, "pixel {row},{col}: {c}");
        }
        // The strip follows the order too: rank 2 (g2's first) at
        // position 50, 12 px a cell.
        assert!(p.contains("<rect class=\"node pass\" data-rank=\"2\" x=\"600\" y=\"0\""));
        // More groups than the drawn group matrix takes: an image.
        let (ms, v, layout) = interleaved(130, 65);
        let p = page_with_layout(&ms, &v, NO_NAMES, facts(), Some(&layout));
        assert!(p.contains("<img id=\"groups-rail-0\" class=\"matrix group-matrix\""));
        assert!(p.contains(" and 1 more</p>"));
        assert!(!p.contains("http"));
    }
}
