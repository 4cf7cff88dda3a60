//! Where a test's results go: perftest's table on stdout, JSON lines to
//! `--json FILE` (beside the table) or to stdout (`--json -`, instead of
//! the table). Both are [`engine::report::Report`]s; this only routes.

use std::io::{self, Write};

use engine::report::{InterruptedRecord, JsonLines, Report, SizeRecord, VerdictRecord};

use crate::JsonFile;

/// The process's stdout, whose `BrokenPipe` errors say that they came
/// from stdout ([`crate::StdoutClosed`]): a closed stdout (`| head`) ends
/// the run quietly with exit 0, a broken control socket does not.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stdout;

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        io::stdout().write(buf).map_err(crate::stdout_write_error)
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stdout().flush().map_err(crate::stdout_write_error)
    }
}

/// The reports of one run.
pub struct Output {
    table: Option<Box<dyn Report>>,
    json: Option<JsonLines<Box<dyn Write>>>,
    file: Option<JsonFile>,
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
            ended: false,
        })
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
