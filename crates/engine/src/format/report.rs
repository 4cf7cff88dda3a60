//! The one trait every output format of the test results implements.

use std::io;

use crate::results::record::{InterruptedRecord, SizeRecord};
use crate::results::verdict::VerdictRecord;

/// An output format of the test results. Only [`Report::size`] must be
/// written; every other step does nothing unless the format overrides it.
pub trait Report {
    /// Before the first size.
    ///
    /// # Errors
    /// I/O errors of the destination.
    fn begin(&mut self) -> io::Result<()> {
        Ok(())
    }
    /// One size.
    ///
    /// # Errors
    /// I/O errors of the destination.
    fn size(&mut self, record: &SizeRecord<'_>) -> io::Result<()>;
    /// A verdict, after [`Report::end`] (a table is closed by then; the
    /// verdict lines follow it).
    ///
    /// # Errors
    /// I/O errors of the destination.
    fn verdict(&mut self, _verdict: &VerdictRecord) -> io::Result<()> {
        Ok(())
    }
    /// After the last size.
    ///
    /// # Errors
    /// I/O errors of the destination.
    fn end(&mut self) -> io::Result<()> {
        Ok(())
    }
    /// The run was interrupted (after [`Report::end`]): the last record.
    /// A table shows nothing more (the runner says it on stderr).
    ///
    /// # Errors
    /// I/O errors of the destination.
    fn interrupted(&mut self, _record: &InterruptedRecord) -> io::Result<()> {
        Ok(())
    }
}
