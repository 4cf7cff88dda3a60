//! `report.html` in a real browser: Debian's Chromium, headless
//! (`scripts/setup` installs it), loads the page a simulated cluster run
//! wrote and serializes its DOM (`--dump-dom`) and takes a screenshot;
//! the tests check what a person would look for: one cell per direction
//! of every pair, the bad node's cells and row marked failed, and at
//! scale the node strip instead of the matrix. A machine without
//! Chromium fails these tests (run scripts/setup).

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use support::TempDir;

const RDMAPERF: &str = env!("CARGO_BIN_EXE_rdmaperf");

/// `rdmaperf cluster --simulate-ranks N --simulate-slow SLOW --report DIR`
/// (exit 3: the slow rank fails); the page's path.
fn simulated_report(dir: &Path, ranks: u32, slow: u32) -> std::path::PathBuf {
    let out = Command::new(RDMAPERF)
        .args(["cluster", "--simulate-ranks", &ranks.to_string()])
        .args(["--simulate-slow", &slow.to_string()])
        .arg("--report")
        .arg(dir)
        .output()
        .expect("spawn rdmaperf cluster");
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.join("report.html")
}

/// Headless Chromium on `page` with `mode` (`--dump-dom`, or
/// `--screenshot=FILE`); its stdout.
fn chromium(page: &Path, profile: &Path, mode: &str) -> String {
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
            "--window-size=1100,1000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(mode)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium not found: scripts/setup installs Debian's chromium");
    assert!(
        out.status.success(),
        "chromium {mode}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("the DOM is UTF-8")
}

/// The start tags named `tag` in a DOM Chromium serialized (attributes in
/// double quotes, `"` inside them as `&quot;`): each tag's attributes.
fn elements(dom: &str, tag: &str) -> Vec<BTreeMap<String, String>> {
    let open = format!("<{tag} ");
    let mut found = Vec::new();
    let mut rest = dom;
    while let Some(at) = rest.find(&open) {
        let after = &rest[at + open.len()..];
        let end = after.find('>').expect("an unterminated tag");
        let mut attrs = BTreeMap::new();
        let mut text = &after[..end];
        while let Some(eq) = text.find("=\"") {
            let name = text[..eq].trim().to_owned();
            let value_end = text[eq + 2..].find('"').expect("an unterminated value");
            attrs.insert(name, text[eq + 2..eq + 2 + value_end].to_owned());
            text = &text[eq + 2 + value_end + 1..];
        }
        found.push(attrs);
        rest = &after[end..];
    }
    found
}

#[test]
fn the_browser_draws_a_cell_per_direction_and_marks_the_bad_nodes_cells_failed() {
    let t = TempDir::new("report-page");
    let page = simulated_report(&t.root().join("report"), 8, 5);
    let dom = chromium(&page, &t.root().join("profile"), "--dump-dom");
    let cells = elements(&dom, "rect");
    let cells: Vec<_> = cells
        .iter()
        .filter(|a| a.get("class").is_some_and(|c| c.starts_with("cell ")))
        .collect();
    // 8 ranks: 28 pairs, 56 directions, each once.
    assert_eq!(cells.len(), 56, "{dom}");
    let mut seen = std::collections::BTreeSet::new();
    for c in &cells {
        let (src, dst): (u32, u32) = (
            c["data-src"].parse().unwrap(),
            c["data-dst"].parse().unwrap(),
        );
        assert!(src != dst && src < 8 && dst < 8, "{c:?}");
        assert!(seen.insert((src, dst)), "twice: {c:?}");
        let want = if src == 5 || dst == 5 {
            "cell failed"
        } else {
            "cell passed"
        };
        assert_eq!(c["class"], want, "{c:?}");
    }
    // The node table: rank 5's row is the failed one.
    let rows = elements(&dom, "tr");
    let fail_rows = rows
        .iter()
        .filter(|a| a.get("class").map(String::as_str) == Some("fail"))
        .count();
    assert_eq!(fail_rows, 1, "{dom}");
    assert!(!dom.contains("http://") && !dom.contains("https://"));
    // And it draws: a screenshot of the page's size.
    let shot = t.root().join("report.png");
    chromium(
        &page,
        &t.root().join("profile"),
        &format!("--screenshot={}", shot.display()),
    );
    let png = std::fs::read(&shot).expect("chromium wrote the screenshot");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let (w, h) = (
        u32::from_be_bytes(png[16..20].try_into().unwrap()),
        u32::from_be_bytes(png[20..24].try_into().unwrap()),
    );
    assert_eq!((w, h), (1100, 1000));
}

#[test]
fn above_128_ranks_the_browser_draws_the_node_strip_instead_of_the_matrix() {
    // 200 ranks takes the large form (as 1,024 does: docs/cluster.md).
    let t = TempDir::new("report-page-200");
    let page = simulated_report(&t.root().join("report"), 200, 17);
    let size = std::fs::metadata(&page).unwrap().len();
    assert!(size < 4 << 20, "{size} bytes");
    let dom = chromium(&page, &t.root().join("profile"), "--dump-dom");
    let rects = elements(&dom, "rect");
    assert!(
        rects
            .iter()
            .all(|a| !a.get("class").is_some_and(|c| c.starts_with("cell "))),
        "no matrix cells at 200 ranks"
    );
    let nodes: Vec<_> = rects
        .iter()
        .filter(|a| a.get("class").is_some_and(|c| c.starts_with("node ")))
        .collect();
    assert_eq!(nodes.len(), 200);
    for n in nodes {
        let want = if n["data-rank"] == "17" {
            "node fail"
        } else {
            "node pass"
        };
        assert_eq!(n["class"], want, "{n:?}");
    }
}
