//! How results are shown; imports [`crate::results`] and [`crate::bench`](mod@crate::bench).
//!
//! - [`report`]: the [`report::Report`] trait every output format
//!   implements.
//! - [`table`]: perftest's bandwidth table, its style and separator line.
//! - [`lat_table`]: perftest's latency table and sample dumps.
//! - [`json_lines`]: the typed JSON lines report.
//! - [`perftest_json`]: perftest's `--out_json` file and `--output` figure.
//! - [`banner`]: perftest's banner and address lines.
//! - [`printf`]: C's printf, to compare the layouts with perftest's own
//!   format strings.

pub mod banner;
pub mod json_lines;
pub mod lat_table;
pub mod perftest_json;
pub mod printf;
pub mod report;
pub mod table;
