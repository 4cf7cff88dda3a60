//! Where a test's results go: perftest's table on stdout, JSON lines to
//! `--json FILE` (beside the table) or to stdout (`--json -`, instead of
//! the table). Both are [`engine::format::report::Report`]s; this only routes.

use std::io::{self, Write};

use engine::format::json_lines::JsonLines;
use engine::format::perftest_json::{self, OutputFigure};
use engine::format::report::Report;
use engine::format::table::TableStyle;
use engine::results::record::{InterruptedRecord, SizeRecord};
use engine::results::verdict::VerdictRecord;

use crate::atomic_file::JsonFile;

/// The process's stdout, whose `BrokenPipe` errors say that they came
/// from stdout ([`crate::exit::StdoutClosed`]): a closed stdout (`| head`) ends
/// the run quietly with exit 0, a broken control socket does not.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stdout;

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        io::stdout()
            .write(buf)
            .map_err(crate::exit::stdout_write_error)
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stdout()
            .flush()
            .map_err(crate::exit::stdout_write_error)
    }
}

/// The reports of one run.
pub struct Output {
    table: Option<Box<dyn Report>>,
    json: Option<JsonLines<Box<dyn Write>>>,
    file: Option<JsonFile>,
    /// Further reports (perftest's `--out_json` file).
    extra: Vec<Box<dyn Report>>,
    /// Whether [`Output::end`] ran.
    ended: bool,
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Output")
            .field("table", &self.table.is_some())
            .field("json", &self.json.is_some())
            .field("file", &self.file)
            .finish()
    }
}

impl Output {
    /// Opens what `--json` names (a file is created now, so a bad path
    /// fails before any work); `table` is used when stdout carries a
    /// table (`None`: this side prints none).
    ///
    /// # Errors
    /// As [`JsonFile::create`].
    pub fn open(json: Option<&str>, table: Option<Box<dyn Report>>) -> anyhow::Result<Self> {
        let (table_on_stdout, out, file): (bool, Option<Box<dyn Write>>, _) = match json {
            None => (true, None, None),
            Some("-") => (false, Some(Box::new(Stdout)), None),
            Some(path) => {
                let (pending, f) = JsonFile::create(path)?;
                (true, Some(Box::new(io::BufWriter::new(f))), Some(pending))
            }
        };
        Ok(Self {
            table: table.filter(|_| table_on_stdout),
            json: out.map(JsonLines::new),
            file,
            extra: Vec::new(),
            ended: false,
        })
    }

    /// Adds a report that every size goes to as well.
    pub fn add(&mut self, report: Box<dyn Report>) {
        self.extra.push(report);
    }

    /// Before the first size.
    ///
    /// # Errors
    /// I/O errors.
    pub fn begin(&mut self) -> io::Result<()> {
        self.each(|r| r.begin())
    }

    /// One size.
    ///
    /// # Errors
    /// I/O errors.
    pub fn size(&mut self, record: &SizeRecord<'_>) -> io::Result<()> {
        self.each(|r| r.size(record))
    }

    /// After the last size.
    ///
    /// # Errors
    /// I/O errors.
    pub fn end(&mut self) -> io::Result<()> {
        self.ended = true;
        self.each(|r| r.end())
    }

    /// A verdict: its line after the table (on stderr when stdout carries
    /// JSON), and a JSON line when JSON is written.
    ///
    /// # Errors
    /// I/O errors.
    pub fn verdict(&mut self, verdict: &VerdictRecord) -> io::Result<()> {
        if self.table.is_none() {
            eprintln!("{}", verdict.line());
        }
        self.each(|r| r.verdict(verdict))
    }

    /// Raw lines after the table (`-H`), on stdout.
    ///
    /// # Errors
    /// I/O errors.
    pub fn dump(&mut self, f: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> io::Result<()> {
        f(&mut io::BufWriter::new(Stdout))
    }

    fn each(&mut self, mut f: impl FnMut(&mut dyn Report) -> io::Result<()>) -> io::Result<()> {
        if let Some(t) = &mut self.table {
            f(t.as_mut())?;
        }
        if let Some(j) = &mut self.json {
            f(j)?;
        }
        for r in &mut self.extra {
            f(r.as_mut())?;
        }
        Ok(())
    }

    /// The run succeeded: a `--json FILE` takes its place.
    ///
    /// # Errors
    /// As [`JsonFile::commit`].
    pub fn commit(&mut self) -> anyhow::Result<()> {
        // Flush (and close) the file before it is renamed into place.
        if let Some(mut j) = self.json.take() {
            j.end()?;
        }
        self.file.take().map_or(Ok(()), JsonFile::commit)
    }

    /// The run was interrupted: closes the table if it is open, then
    /// writes `record` as the last JSON line (the caller commits).
    ///
    /// # Errors
    /// I/O errors.
    pub fn interrupted(&mut self, record: &InterruptedRecord) -> io::Result<()> {
        if !self.ended {
            self.end()?;
        }
        self.each(|r| r.interrupted(record))
    }
}

/// `--output`: one number per size on stdout (perftest's `"%lf\n"`), in
/// place of the table.
#[derive(Debug)]
pub struct FigureLines {
    figure: OutputFigure,
    style: TableStyle,
}

impl FigureLines {
    /// Prints `figure`, bandwidths as `style` shows them.
    pub fn new(figure: OutputFigure, style: TableStyle) -> Self {
        Self { figure, style }
    }
}

impl Report for FigureLines {
    fn size(&mut self, record: &SizeRecord<'_>) -> io::Result<()> {
        if let Some(v) = self.figure.value(&record.figures, self.style) {
            let mut out = Stdout;
            writeln!(out, "{v:.6}")?;
            out.flush()?;
        }
        Ok(())
    }
}

/// perftest's `--out_json` file, rewritten after every size (as
/// perftest's, it then holds the last one); each version is written under
/// a temporary name and renamed into place, so a reader never sees half
/// of one.
#[derive(Debug)]
pub struct PerftestJsonFile {
    path: std::path::PathBuf,
    title: String,
    style: TableStyle,
    output: Option<OutputFigure>,
}

impl PerftestJsonFile {
    /// The file at `path` for the test titled `title` (perftest's title,
    /// e.g. `RDMA_Write BW Test`); checks now, before any work, that it can
    /// be written there.
    ///
    /// # Errors
    /// A usage error naming `--out_json_file` when it cannot.
    pub fn create(
        path: std::path::PathBuf,
        title: String,
        style: TableStyle,
        output: Option<OutputFigure>,
    ) -> anyhow::Result<Self> {
        crate::atomic_file::check_writable("--out_json_file", &path)?;
        Ok(Self {
            path,
            title,
            style,
            output,
        })
    }
}

impl Report for PerftestJsonFile {
    fn size(&mut self, record: &SizeRecord<'_>) -> io::Result<()> {
        let text = perftest_json::render(&self.title, record, self.style, self.output);
        crate::atomic_file::write_atomically("--out_json_file", &self.path, &text)
    }
}

/// `--prom FILE`: the results, the verdicts and this side's port
/// metrics as Prometheus text, rewritten atomically after every size and
/// verdict (a textfile collector never reads half of it; an interrupted
/// run leaves the sizes it completed).
pub struct PromFile {
    path: std::path::PathBuf,
    metrics: engine::fabric::prom::results::ResultMetrics,
    /// This side's port, read when asked (the runner hands over
    /// [`crate::sysfs::PortView::state`]): the writer reads nothing itself.
    port_readings: PortReadings,
}

/// What [`PromFile`] is handed: a reading of this side's port, taken
/// each time it is called (empty: no port metrics).
type PortReadings = Box<dyn Fn() -> Vec<engine::fabric::ports::DeviceState>>;

impl std::fmt::Debug for PromFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromFile")
            .field("path", &self.path)
            .finish()
    }
}

impl PromFile {
    /// The file at `path`, with the port metrics of `port_readings`,
    /// called at every write so they are as fresh as the results; checks
    /// now, before any work, that it can be written there.
    ///
    /// # Errors
    /// A usage error naming `--prom` when it cannot.
    pub fn create(
        path: std::path::PathBuf,
        port_readings: impl Fn() -> Vec<engine::fabric::ports::DeviceState> + 'static,
    ) -> anyhow::Result<Self> {
        crate::atomic_file::check_writable("--prom", &path)?;
        Ok(Self {
            path,
            metrics: engine::fabric::prom::results::ResultMetrics::new(),
            port_readings: Box::new(port_readings),
        })
    }

    fn write(&self) -> io::Result<()> {
        let mut text = self.metrics.render();
        // This side's port, read now (a device sysfs does not show, as a
        // fixture root in tests, adds nothing).
        let devices = (self.port_readings)();
        if !devices.is_empty() {
            text.push_str(&engine::fabric::prom::ports::port_metrics(&devices).render());
        }
        crate::atomic_file::write_atomically("--prom", &self.path, &text)
    }
}

impl Report for PromFile {
    fn size(&mut self, record: &SizeRecord<'_>) -> io::Result<()> {
        self.metrics.size(record);
        self.write()
    }

    fn verdict(&mut self, verdict: &VerdictRecord) -> io::Result<()> {
        self.metrics.verdict(verdict);
        self.write()
    }

    fn end(&mut self) -> io::Result<()> {
        self.write()
    }
}

/// perftest's `-W/--report-counters`: after each size, the change of
/// each named port counter since the last reading (the first one from
/// when the run was set up, as perftest's), `"\t%s=%llu\n"` per counter
/// and an empty line. Names are paths under the port's sysfs directory,
/// e.g. `counters/port_xmit_data` (raw units: 4-byte words there).
pub struct CounterLines {
    names: Vec<String>,
    last: Vec<u64>,
    /// Reads one counter by name, now (the runner hands over
    /// [`crate::sysfs::PortView::counter`]).
    read_counter: CounterReading,
}

/// What [`CounterLines`] is handed: a reading of one named counter.
type CounterReading = Box<dyn Fn(&str) -> Result<u64, String>>;

impl std::fmt::Debug for CounterLines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CounterLines")
            .field("names", &self.names)
            .field("last", &self.last)
            .finish()
    }
}

impl CounterLines {
    /// Reads every counter of `list` (comma-separated) with
    /// `read_counter` once, so a missing one fails before any work.
    ///
    /// # Errors
    /// A usage error naming `-W/--report-counters` and the counter.
    pub fn open(
        list: &str,
        read_counter: impl Fn(&str) -> Result<u64, String> + 'static,
    ) -> anyhow::Result<Self> {
        let mut names = Vec::new();
        for name in list.split(',').filter(|n| !n.is_empty()) {
            if name.split('/').any(|c| c == ".." || c.is_empty()) || name.starts_with('/') {
                return Err(crate::exit::UsageError(format!(
                    "-W/--report-counters: {name:?} is not a counter under the port's directory"
                ))
                .into());
            }
            names.push(name.to_owned());
        }
        if names.is_empty() {
            return Err(
                crate::exit::UsageError("-W/--report-counters: no counter named".into()).into(),
            );
        }
        let mut c = Self {
            names,
            last: Vec::new(),
            read_counter: Box::new(read_counter),
        };
        c.last = c
            .read()
            .map_err(|e| crate::exit::UsageError(format!("-W/--report-counters: {e}")))?;
        Ok(c)
    }

    fn read(&self) -> Result<Vec<u64>, String> {
        self.names.iter().map(|n| (self.read_counter)(n)).collect()
    }
}

impl Report for CounterLines {
    fn size(&mut self, _record: &SizeRecord<'_>) -> io::Result<()> {
        let now = self.read().map_err(io::Error::other)?;
        let mut out = Stdout;
        for (name, (n, l)) in self.names.iter().zip(now.iter().zip(&self.last)) {
            writeln!(out, "\t{name}={}", n.wrapping_sub(*l))?;
        }
        writeln!(out)?;
        out.flush()?;
        self.last = now;
        Ok(())
    }
}

/// Shows progress on stderr (rewritten in place), only when it is a
/// terminal.
pub fn show_progress(msg: &str) {
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        eprint!("\r{msg}\x1b[K");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::fabric::ports::{DeviceState, PortState};

    /// `--prom`'s port metrics are the readings it is handed, taken anew
    /// at every write (as fresh as the results), and none when the
    /// reading is empty.
    #[test]
    fn the_prom_file_writes_the_port_readings_it_is_handed_at_each_write() {
        let path = std::env::temp_dir().join(format!("rdmaperf-prom-{}.prom", std::process::id()));
        let words = std::rc::Rc::new(std::cell::Cell::new(Some(10)));
        let reading = std::rc::Rc::clone(&words);
        let mut prom = PromFile::create(path.clone(), move || {
            reading
                .get()
                .map(|w| {
                    vec![DeviceState {
                        name: "mlx5_0".into(),
                        ports: vec![PortState {
                            port: 1,
                            counters: [("port_xmit_data".to_owned(), w)].into(),
                            ..PortState::default()
                        }],
                        ..DeviceState::default()
                    }]
                })
                .unwrap_or_default()
        })
        .unwrap();
        let xmit = |text: &str| {
            text.lines()
                .find(|l| l.starts_with("node_infiniband_port_data_transmitted_bytes_total{"))
                .map(|l| l.rsplit(' ').next().unwrap().to_owned())
        };
        prom.end().unwrap();
        let first = std::fs::read_to_string(&path).unwrap();
        assert_eq!(xmit(&first).as_deref(), Some("40"), "{first}");
        words.set(Some(25));
        prom.end().unwrap();
        let second = std::fs::read_to_string(&path).unwrap();
        assert_eq!(xmit(&second).as_deref(), Some("100"), "{second}");
        words.set(None);
        prom.end().unwrap();
        let third = std::fs::read_to_string(&path).unwrap();
        assert!(!third.contains("node_infiniband"), "{third}");
        std::fs::remove_file(&path).unwrap();
    }

    /// `-W`'s counters come from the reading it is handed: a missing one
    /// is refused (exit 2) before any work, as are names outside the port.
    #[test]
    fn counter_lines_read_through_what_they_are_handed() {
        let read = |name: &str| match name {
            "counters/port_xmit_data" => Ok(7),
            other => Err(format!("cannot read counter {other}")),
        };
        let c = CounterLines::open("counters/port_xmit_data", read).unwrap();
        assert_eq!(c.last, [7]);
        for bad in ["counters/nonesuch", "../x", "/etc/passwd", ""] {
            let e = CounterLines::open(bad, read).unwrap_err();
            assert!(
                e.downcast_ref::<crate::exit::UsageError>().is_some(),
                "{bad}: {e}"
            );
        }
    }
}
