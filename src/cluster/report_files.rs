//! Rank 0's report directory (`--report DIR`): the files of
//! `engine::cluster::report` and `engine::cluster::html` written as
//! streams, each to a hidden `.partial` name renamed into place, so a
//! run of 1,024 ranks × 8 rails (8.4 M directions) never holds a file's
//! text in memory; and [`PairsLog`], the raw measurements appended after
//! each round, so a crash keeps what was measured.
//!
//! The files: `pairs.jsonl` (or `pairs.jsonl.gz`: [`Compression`]),
//! `summary.json`, `metrics.prom` (bounded: `--prom-worst`),
//! `report.html`, and with several rails `pair-sums.jsonl` (or `.gz`).
//! docs/cluster.md ("The report at scale") has the sizes and the
//! decisions.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use engine::cluster::html;
use engine::cluster::report::{self, Names, Roster};
use engine::cluster::verdict::{ClusterVerdict, Measurement};

/// `--report-compression auto`: the per-direction files are gzipped
/// above this many directions (about 20 MB of plain `pairs.jsonl`, 250
/// ranks all pairs on one rail); below it they stay plain text, which
/// the tests, `jq` and a person's editor read as they are.
pub const GZIP_ABOVE_DIRECTIONS: usize = 65_536;

/// The name [`PairsLog`] appends to in the report directory.
pub const PAIRS_LOG: &str = "measurements.jsonl.gz.partial";

/// Whether `pairs.jsonl` and `pair-sums.jsonl` are gzipped
/// (`--report-compression`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// Gzip above [`GZIP_ABOVE_DIRECTIONS`] directions.
    #[default]
    Auto,
    /// Always `pairs.jsonl.gz`.
    Gzip,
    /// Always plain `pairs.jsonl`.
    None,
}

impl std::str::FromStr for Compression {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "gzip" => Ok(Self::Gzip),
            "none" => Ok(Self::None),
            _ => Err(format!("{s:?}: want auto, gzip or none")),
        }
    }
}

impl Compression {
    /// Whether a run of `directions` directions is gzipped.
    pub fn gzip(self, directions: usize) -> bool {
        match self {
            Self::Auto => directions > GZIP_ABOVE_DIRECTIONS,
            Self::Gzip => true,
            Self::None => false,
        }
    }
}

/// What the page shows beside the figures: the run's facts, and where
/// each rank's rails sit when a topology said.
#[derive(Debug, Clone, Copy)]
pub struct PageInput<'a> {
    /// The plan, the test, the run's time.
    pub facts: html::PageFacts<'a>,
    /// The ranks' leaves and groups (`None`: no topology).
    pub layout: Option<&'a engine::cluster::localise::LeafLayout>,
}

/// What the report's size depends on, beside the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportOptions {
    /// `--prom-worst K`: the slowest directions `metrics.prom` carries.
    pub prom_worst: usize,
    /// `--report-compression`.
    pub compression: Compression,
}

impl Default for ReportOptions {
    fn default() -> Self {
        Self {
            prom_worst: report::DEFAULT_PROM_WORST,
            compression: Compression::Auto,
        }
    }
}

/// Writes the report into `dir`: every file to a hidden `.partial` name
/// first, renamed into place once whole; the other form of a
/// per-direction file (`pairs.jsonl` when `pairs.jsonl.gz` is written,
/// and the reverse) is removed, as is [`PairsLog`]'s file once the
/// report is written.
///
/// # Errors
/// A file that cannot be written, named.
pub fn write_report(
    dir: &Path,
    all: &[Measurement],
    judged: &ClusterVerdict,
    pair_sums: &[report::PairSum],
    roster: Roster<'_>,
    page: PageInput<'_>,
    options: ReportOptions,
) -> anyhow::Result<()> {
    let took = page.facts.duration_s;
    let names = Names::new(roster, judged.nodes.len(), judged.rail_count());
    let gzip = options.compression.gzip(all.len());
    write_jsonl(dir, "pairs.jsonl", gzip, |w| {
        report::write_pairs(w, all, judged, &names).map(drop)
    })?;
    write_file(dir, "summary.json", |w| {
        serde_json::to_writer_pretty(&mut *w, &report::summary(judged, roster, took))?;
        w.write_all(b"\n")
    })?;
    write_file(dir, "metrics.prom", |w| {
        let text = report::metrics(all, judged, &names, took, options.prom_worst).render();
        w.write_all(text.as_bytes())
    })?;
    write_file(dir, "report.html", |w| {
        w.write_all(html::page_with_layout(all, judged, roster, page.facts, page.layout).as_bytes())
    })?;
    // With several rails: each node pair's rails added up.
    if !pair_sums.is_empty() {
        write_jsonl(dir, "pair-sums.jsonl", gzip, |w| {
            report::write_pair_sums(w, pair_sums, &names).map(drop)
        })?;
    }
    remove_if_there(&dir.join(PAIRS_LOG), PAIRS_LOG)
}

/// Removes `path` (the report's `what`) when it is there.
fn remove_if_there(path: &Path, what: &str) -> anyhow::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing the report's {what}"))
        }
        _ => Ok(()),
    }
}

/// `name` (or `name.gz` when `gzip`) in `dir`, written by `body`; the
/// other form removed.
fn write_jsonl(
    dir: &Path,
    name: &str,
    gzip: bool,
    body: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> anyhow::Result<()> {
    let gz = format!("{name}.gz");
    let (written, other) = if gzip {
        (gz.as_str(), name)
    } else {
        (name, gz.as_str())
    };
    write_file(dir, written, |w| {
        if gzip {
            // The default level (6): at 8.4 M directions miniz_oxide's
            // level 1 wrote 145 MB in 14.0 s, level 3 52 MB in 16.3 s,
            // level 6 48 MB in 19.6 s (docs/performance.md). A buffer in
            // front of the encoder: each record is many small writes, and each write into the encoder is a call
            // of the compressor.
            let mut z = flate2::write::GzEncoder::new(w, flate2::Compression::default());
            let mut b = BufWriter::with_capacity(1 << 20, &mut z);
            body(&mut b)?;
            b.flush()?;
            drop(b);
            z.finish().map(drop)
        } else {
            body(w)
        }
    })?;
    remove_if_there(&dir.join(other), &format!("old {other}"))
}

/// `name` in `dir`, written by `body` through a buffer to its `.partial`
/// name, renamed into place when whole (removed when not).
fn write_file(
    dir: &Path,
    name: &str,
    body: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> anyhow::Result<()> {
    let dest = dir.join(name);
    let tmp = crate::atomic_file::partial_path(&dest)
        .with_context(|| format!("--report: {dest:?} does not name a file"))?;
    let written = File::create(&tmp).and_then(|f| {
        let mut w = BufWriter::with_capacity(1 << 20, f);
        body(&mut w)?;
        w.into_inner().map_err(io::IntoInnerError::into_error)?;
        std::fs::rename(&tmp, &dest)
    });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("writing the report's {name} ({dest:?})"));
    }
    Ok(())
}

/// The measurements so far, appended after each round to
/// [`PAIRS_LOG`] in the report directory: one `Measurement` a line as
/// the wire carries it (`{"round":..,"from":..,"to":..,"rail":..,
/// "outcome":{..}}`), gzipped, and after each round flushed to a gzip
/// sync point and synced, so a coordinator that crashes or is killed
/// mid-run leaves every finished round's figures behind (`zcat` reads
/// them all, then says the stream ends early: it has no trailer).
/// Gzipped because it is as long as the run: plain, all pairs of 4,096
/// ranks wrote 2.4 GB of it (measured). [`write_report`] removes it once
/// the report is written.
#[derive(Debug)]
pub struct PairsLog {
    path: PathBuf,
    file: BufWriter<flate2::write::GzEncoder<File>>,
}

impl PairsLog {
    /// Starts an empty log in `dir` (an earlier run's is replaced).
    ///
    /// # Errors
    /// When it cannot be created, named.
    pub fn create(dir: &Path) -> anyhow::Result<Self> {
        let path = dir.join(PAIRS_LOG);
        let file =
            File::create(&path).with_context(|| format!("--report: cannot create {path:?}"))?;
        Ok(Self {
            path,
            file: BufWriter::with_capacity(
                1 << 20,
                flate2::write::GzEncoder::new(file, flate2::Compression::fast()),
            ),
        })
    }

    /// Appends a round's measurements and pushes them to the disk.
    ///
    /// # Errors
    /// When they cannot be written, naming the file.
    pub fn append(&mut self, measurements: &[Measurement]) -> anyhow::Result<()> {
        let written = (|| -> io::Result<()> {
            for m in measurements {
                serde_json::to_writer(&mut self.file, m)?;
                self.file.write_all(b"\n")?;
            }
            // The buffer into the encoder, the encoder to a sync point.
            self.file.flush()?;
            self.file.get_ref().get_ref().sync_data()
        })();
        written.with_context(|| format!("appending to {:?}", self.path))
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    fn no_layout(facts: html::PageFacts<'_>) -> PageInput<'_> {
        PageInput {
            facts,
            layout: None,
        }
    }

    use super::*;
    use engine::cluster::verdict::{ClusterVerdict, Outcome, Thresholds, judge};

    /// A fresh directory under the system's tmp.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("report-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// All pairs of `n` ranks on `rails` rails, rank 1 slow.
    fn run(n: u32, rails: u32) -> Vec<Measurement> {
        let s = engine::cluster::schedule::all_pairs(n).unwrap();
        let mut all = Vec::new();
        for (i, round) in s.rounds.iter().enumerate() {
            for p in &round.pairs {
                for rail in 0..rails {
                    for (from, to) in [(p.client, p.server), (p.server, p.client)] {
                        let slow = from == 1 || to == 1;
                        all.push(Measurement {
                            round: i as u32,
                            from,
                            to,
                            rail,
                            outcome: Outcome::Measured {
                                bw_gbps: if slow { 40.0 } else { 100.0 },
                                msg_rate_mpps: Some(0.1),
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

    fn facts() -> html::PageFacts<'static> {
        html::PageFacts {
            plan: "plan",
            test: "write_bw",
            duration_s: 1.0,
        }
    }

    #[test]
    fn a_small_report_is_plain_and_a_gzipped_one_reads_back_the_same() {
        let all = run(6, 2);
        let v = judge(6, &[], &all, &Thresholds::default());
        let hosts: Vec<Option<String>> = (0..6).map(|r| Some(format!("node-{r}"))).collect();
        let roster = Roster {
            hosts: &hosts,
            devices: &[],
            rails: &[],
        };
        let sums = report::pair_sums(&all, &v, roster);
        let dir = scratch("forms");
        let mut log = PairsLog::create(&dir).unwrap();
        log.append(&all[..4]).unwrap();
        // Read as a crash leaves it: up to the last sync point, no trailer.
        let mut logged = String::new();
        let _ = flate2::read::GzDecoder::new(File::open(log.path()).unwrap())
            .read_to_string(&mut logged);
        let back: Vec<Measurement> = logged
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(back, all[..4], "the log holds the measurements as sent");
        let options = ReportOptions::default();
        write_report(&dir, &all, &v, &sums, roster, no_layout(facts()), options).unwrap();
        assert!(!dir.join(PAIRS_LOG).exists(), "the log removed");
        let plain = std::fs::read_to_string(dir.join("pairs.jsonl")).unwrap();
        assert_eq!(plain.lines().count(), all.len());
        for name in [
            "summary.json",
            "metrics.prom",
            "report.html",
            "pair-sums.jsonl",
        ] {
            assert!(dir.join(name).exists(), "{name}");
        }
        let gzip = ReportOptions {
            compression: Compression::Gzip,
            ..options
        };
        write_report(&dir, &all, &v, &sums, roster, no_layout(facts()), gzip).unwrap();
        assert!(!dir.join("pairs.jsonl").exists(), "the other form removed");
        assert!(!dir.join("pair-sums.jsonl").exists());
        let mut text = String::new();
        flate2::read::GzDecoder::new(File::open(dir.join("pairs.jsonl.gz")).unwrap())
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, plain);
        for line in text.lines() {
            let record: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(
                record["pass"],
                record["src_rank"] != 1 && record["dst_rank"] != 1
            );
        }
        // No hidden `.partial` file left behind.
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".partial"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A fabricated run: its measurements and verdict, each rank's host
    /// and its devices on each rail.
    type Fleet = (
        Vec<Measurement>,
        ClusterVerdict,
        Vec<Option<String>>,
        Vec<Vec<String>>,
    );

    /// The first `rounds` rounds of all pairs of 1,024 ranks on 8 rails,
    /// rank 17 slow on rail 3, judged; with a fleet's names.
    fn fleet(rounds: usize) -> Fleet {
        let s = engine::cluster::schedule::all_pairs(1_024).unwrap();
        let mut all = Vec::new();
        for (i, round) in s.rounds.iter().take(rounds).enumerate() {
            for p in &round.pairs {
                for rail in 0..8 {
                    for (from, to) in [(p.client, p.server), (p.server, p.client)] {
                        let slow = rail == 3 && (from == 17 || to == 17);
                        let bw_gbps = if slow {
                            40.0
                        } else {
                            100.0 - f64::from((from.wrapping_mul(31) ^ to) % 8) * 0.1
                        };
                        all.push(Measurement {
                            round: i as u32,
                            from,
                            to,
                            rail,
                            outcome: Outcome::Measured {
                                bw_gbps,
                                msg_rate_mpps: Some(1.49),
                                lat_us: None,
                                latency: None,
                            },
                        });
                    }
                }
            }
        }
        let v = judge(1_024, &[], &all, &Thresholds::default());
        let hosts = (0..1_024)
            .map(|r| Some(format!("gpu-node-{r:04}")))
            .collect();
        let rails = (0..1_024)
            .map(|_| (0..8).map(|k| format!("mlx5_{k}:1")).collect())
            .collect();
        (all, v, hosts, rails)
    }

    #[test]
    fn at_1024_ranks_on_8_rails_a_direction_costs_tens_of_bytes_and_the_metrics_are_bounded() {
        // 4 of all pairs' 1,023 rounds: 32,768 of its 8,380,416
        // directions, the per-direction bytes as at full size.
        let (all, v, hosts, rails) = fleet(4);
        assert_eq!(all.len(), 4 * 512 * 2 * 8);
        let roster = Roster {
            hosts: &hosts,
            devices: &[],
            rails: &rails,
        };
        let names = Names::new(roster, 1_024, 8);
        let mut plain = Vec::new();
        report::write_pairs(&mut plain, &all, &v, &names).unwrap();
        let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        report::write_pairs(&mut z, &all, &v, &names).unwrap();
        let gz = z.finish().unwrap();
        let per = |bytes: usize| bytes as f64 / all.len() as f64;
        // The whole run (examples/cluster_report_scale.rs, its
        // msg_rate_mpps with 16 digits): 332 B a direction plain, 5.7 B
        // gzipped (docs/performance.md). The bounds leave room: at
        // 8,380,416 directions 20 B is 168 MB.
        assert!(
            per(plain.len()) < 400.0,
            "{} B a direction",
            per(plain.len())
        );
        assert!(
            per(gz.len()) < 20.0,
            "{} B a direction gzipped",
            per(gz.len())
        );
        // metrics.prom: per node 1 series, per node and rail 5, per rail
        // 1, the run 7, the 10 worst directions 2 each — whatever the
        // directions' count.
        let series = |all: &[Measurement], v: &ClusterVerdict| {
            report::metrics(all, v, &names, 1.0, report::DEFAULT_PROM_WORST)
                .render()
                .lines()
                .filter(|l| !l.starts_with('#'))
                .count()
        };
        let want = 1_024 + 1_024 * 8 * 5 + 8 + 7 + 10 * 2;
        assert_eq!(series(&all, &v), want);
        let (more, v8, _, _) = fleet(8);
        assert_eq!(
            series(&more, &v8),
            want,
            "no more series for more directions"
        );
    }

    #[test]
    fn auto_compresses_only_above_the_threshold_and_the_flag_parses() {
        assert!(!Compression::Auto.gzip(GZIP_ABOVE_DIRECTIONS));
        assert!(Compression::Auto.gzip(GZIP_ABOVE_DIRECTIONS + 1));
        assert!(Compression::Gzip.gzip(1));
        assert!(!Compression::None.gzip(usize::MAX));
        assert_eq!("gzip".parse(), Ok(Compression::Gzip));
        let bad = "zstd".parse::<Compression>().unwrap_err();
        assert!(bad.contains("auto, gzip or none"), "{bad}");
    }
}
