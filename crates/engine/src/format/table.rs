//! perftest's bandwidth table: its unit and layout ([`TableStyle`]), the
//! [`Table`] report, and the separator line every perftest table uses.

use std::io::{self, Write};

use serde::{Deserialize, Serialize};

use crate::format::report::Report;
use crate::results::bw::BwResult;
use crate::results::record::{Figures, SizeRecord};
use crate::results::verdict::VerdictRecord;

/// perftest's result separator: 87 dashes.
pub const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";

/// Unit of the text table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Unit {
    /// MiB/s (perftest's default `MB/sec`).
    #[default]
    MibPerSec,
    /// Gb/s (`--report_gbits`).
    Gbps,
}

impl Unit {
    /// The unit as perftest's table heads it: `MiB/sec` or `Gb/sec`.
    pub fn label(self) -> &'static str {
        match self {
            Self::MibPerSec => "MiB/sec",
            Self::Gbps => "Gb/sec",
        }
    }
}

/// How perftest's bandwidth table looks: its unit, whether it shows the
/// peak (perftest prints 0.00 with `-N`, `-D`, above 20 000 iterations)
/// and whether it has the `CPU_Util[%]` column (`--cpu_util` with `-D`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableStyle {
    /// MiB/s or Gb/s.
    pub unit: Unit,
    /// Whether the peak is shown (else 0.00).
    pub peak: bool,
    /// Whether the `CPU_Util[%]` column is there.
    pub cpu_column: bool,
}

impl Default for TableStyle {
    fn default() -> Self {
        Self {
            unit: Unit::MibPerSec,
            peak: true,
            cpu_column: false,
        }
    }
}

impl TableStyle {
    /// The average and peak in the style's unit (the peak 0 when not
    /// shown), as the table, `--output` and the perftest JSON file show them.
    pub fn bandwidths(&self, r: &BwResult) -> (f64, f64) {
        let (peak, avg) = match self.unit {
            Unit::MibPerSec => (r.bw_peak_mib_s, r.bw_avg_mib_s),
            Unit::Gbps => (r.bw_peak_gbps, r.bw_avg_gbps),
        };
        (if self.peak { peak } else { 0.0 }, avg)
    }

    /// Whether perftest prints this row in its extended-precision layout
    /// (`REPORT_FMT_EXT`: Gb/s with an average below 0.1).
    pub fn extended(&self, r: &BwResult) -> bool {
        self.unit == Unit::Gbps && self.bandwidths(r).1 < 0.1
    }

    /// The `#iterations` column: as perftest counts (see
    /// [`BwResult::table_iterations`]), or iterations per QP from a peer
    /// that did not send it.
    pub fn iterations(r: &BwResult) -> u64 {
        if r.table_iterations == 0 {
            r.iterations
        } else {
            r.table_iterations
        }
    }
}

/// perftest's table.
#[derive(Debug)]
pub struct Table<W> {
    out: W,
    style: TableStyle,
}

impl<W: Write> Table<W> {
    /// A table in `style`.
    pub fn new(out: W, style: TableStyle) -> Self {
        Self { out, style }
    }

    /// The header line exactly as perftest prints it (`RESULT_FMT`,
    /// `RESULT_FMT_G`, then `RESULT_EXT_CPU_UTIL`).
    pub fn header(style: TableStyle) -> String {
        let u = style.unit.label();
        let mut h =
            format!(" #bytes     #iterations    BW peak[{u}]    BW average[{u}]   MsgRate[Mpps]");
        if style.cpu_column {
            h.push_str("    CPU_Util[%]");
        }
        h
    }

    /// One row in perftest's layout: `REPORT_FMT`
    /// (`" %-7lu    %-10lu       %-7.2lf            %-7.2lf\t\t     %-7.6lf"`)
    /// or, for Gb/s below 0.1, `REPORT_FMT_EXT`
    /// (`" %-7lu    %lu           %-7.6lf            %-7.6lf            %-7.6lf"`),
    /// then `REPORT_EXT_CPU_UTIL` (`"\t    %-3.2f"`) with the CPU column.
    pub fn row(r: &BwResult, style: TableStyle) -> String {
        let (peak, avg) = style.bandwidths(r);
        let iters = TableStyle::iterations(r);
        let mut line = if style.extended(r) {
            format!(
                " {:<7}    {iters}           {peak:<7.6}            {avg:<7.6}            {:<7.6}",
                r.bytes, r.msg_rate_mpps
            )
        } else {
            format!(
                " {:<7}    {iters:<10}       {peak:<7.2}            {avg:<7.2}\t\t     {:<7.6}",
                r.bytes, r.msg_rate_mpps
            )
        };
        if style.cpu_column {
            line.push_str(&format!(
                "\t    {:<3.2}",
                r.system_cpu_util_pct.unwrap_or(0.0)
            ));
        }
        line
    }
}

impl<W: Write> Report for Table<W> {
    fn begin(&mut self) -> io::Result<()> {
        writeln!(self.out, "{RESULT_LINE}")?;
        writeln!(self.out, "{}", Self::header(self.style))?;
        self.out.flush()
    }

    fn size(&mut self, record: &SizeRecord<'_>) -> io::Result<()> {
        if let Figures::Bw(r) = &record.figures {
            writeln!(self.out, "{}", Self::row(r, self.style))?;
        }
        self.out.flush()
    }

    fn verdict(&mut self, verdict: &VerdictRecord) -> io::Result<()> {
        writeln!(self.out, "{}", verdict.line())?;
        self.out.flush()
    }

    fn end(&mut self) -> io::Result<()> {
        writeln!(self.out, "{RESULT_LINE}")?;
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result() -> BwResult {
        BwResult {
            bytes: 65536,
            iterations: 2500,
            table_iterations: 5000,
            messages: 5000,
            elapsed_s: 1.0,
            bw_peak_mib_s: 11030.78,
            bw_avg_mib_s: 11030.45,
            bw_peak_gbps: 92.53,
            bw_avg_gbps: 0.0625,
            msg_rate_mpps: 0.176487,
            cpu_util_pct: 99.5,
            system_cpu_util_pct: Some(2.5),
            operations: 5000,
        }
    }

    // perftest_parameters.h, verbatim.
    const RESULT_FMT: &str =
        " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]";
    const RESULT_FMT_G: &str =
        " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]";
    const REPORT_FMT: &str = " %-7lu    %-10lu       %-7.2lf            %-7.2lf\t\t     %-7.6lf";
    const REPORT_FMT_EXT: &str =
        " %-7lu    %lu           %-7.6lf            %-7.6lf            %-7.6lf";
    const REPORT_EXT_CPU_UTIL: &str = "\t    %-3.2f";

    #[test]
    fn header_and_rows_are_perftests_format_strings() {
        use crate::format::printf::{CArg::*, sprintf};
        let mib = TableStyle::default();
        assert_eq!(Table::<Vec<u8>>::header(mib), RESULT_FMT);
        let g = TableStyle {
            unit: Unit::Gbps,
            peak: true,
            cpu_column: true,
        };
        assert_eq!(
            Table::<Vec<u8>>::header(g),
            format!("{RESULT_FMT_G}    CPU_Util[%]")
        );
        let r = result();
        // Column 2 is iterations × QPs, as perftest's.
        assert_eq!(
            Table::<Vec<u8>>::row(&r, mib),
            sprintf(
                REPORT_FMT,
                &[U(65536), U(5000), F(11030.78), F(11030.45), F(0.176487)]
            )
        );
        // No peak: 0.00, as perftest's `peak_up = !(noPeak) * ...`.
        let no_peak = TableStyle { peak: false, ..mib };
        assert_eq!(
            Table::<Vec<u8>>::row(&r, no_peak),
            sprintf(
                REPORT_FMT,
                &[U(65536), U(5000), F(0.0), F(11030.45), F(0.176487)]
            )
        );
        // Gb/s below 0.1: the extended layout; then the CPU column.
        assert_eq!(
            Table::<Vec<u8>>::row(&r, g),
            sprintf(
                REPORT_FMT_EXT,
                &[U(65536), U(5000), F(92.53), F(0.0625), F(0.176487)]
            ) + &sprintf(REPORT_EXT_CPU_UTIL, &[F(2.5)])
        );
        let mut out = Vec::new();
        let mut t = Table::new(&mut out, mib);
        let ctx = crate::results::record::tests::context();
        t.begin().unwrap();
        t.size(&SizeRecord {
            context: &ctx,
            figures: Figures::Bw(r),
            peer_result: None,
            histogram: None,
            data_check: None,
        })
        .unwrap();
        t.end().unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 4);
        assert_eq!(text.lines().next().unwrap(), RESULT_LINE);
        assert_eq!(RESULT_LINE.len(), 87);
    }
}
