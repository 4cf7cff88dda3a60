//! perftest's latency table, and its `-H` and `-U` sample lists.

use std::fmt::Write as _;
use std::io::{self, Write};

use crate::format::report::Report;
use crate::format::table::RESULT_LINE;
use crate::results::lat::{LatStats, per_trip_us, tps};
use crate::results::record::{Figures, SizeRecord};
use crate::results::verdict::VerdictRecord;

/// perftest's latency table: `RESULT_FMT_LAT` rows, or in duration mode
/// (`-D`) `RESULT_FMT_LAT_DUR` (`#iterations`, `t_avg`, `tps average`).
#[derive(Debug)]
pub struct LatTable<W> {
    out: W,
    duration: bool,
    rtt_factor: u32,
    cpu_column: bool,
}

impl<W: Write> LatTable<W> {
    /// A table written to `out`; `duration`: the duration-mode layout;
    /// `rtt_factor`: 2 when the figures are half round trips.
    pub fn new(out: W, duration: bool, rtt_factor: u32) -> Self {
        Self {
            out,
            duration,
            rtt_factor,
            cpu_column: false,
        }
    }

    /// With perftest's `CPU_Util[%]` column (`--cpu_util` in duration mode).
    pub fn with_cpu_column(self, cpu_column: bool) -> Self {
        Self { cpu_column, ..self }
    }

    /// The header line exactly as perftest prints it (`RESULT_FMT_LAT`,
    /// trailing space included, or `RESULT_FMT_LAT_DUR`).
    pub fn header(duration: bool) -> String {
        if duration {
            return " #bytes        #iterations       t_avg[usec]    tps average".to_owned();
        }
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    \
         t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
            .to_string()
    }

    /// One row in perftest's layout, `REPORT_FMT_LAT`
    /// (`" %-7lu %lu          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f"`):
    /// bytes, iterations, min, max, typical, avg, stdev, p99, p99.9.
    pub fn row(s: &LatStats) -> String {
        format!(
            " {:<7} {}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
            s.bytes,
            s.iterations,
            s.t_min_us,
            s.t_max_us,
            s.t_typical_us,
            s.t_avg_us,
            s.t_stdev_us,
            s.p99_us,
            s.p99_9_us
        )
    }

    /// A duration-mode row, `REPORT_FMT_LAT_DUR`
    /// (`" %-7lu       %lu            %-7.2f        %-7.2f"`): bytes, round
    /// trips counted, t_avg, tps.
    pub fn duration_row(s: &LatStats, rtt_factor: u32) -> String {
        format!(
            " {:<7}       {}            {:<7.2}        {:<7.2}",
            s.bytes,
            s.iterations,
            s.t_avg_us,
            tps(s, rtt_factor)
        )
    }
}

impl<W: Write> Report for LatTable<W> {
    fn begin(&mut self) -> io::Result<()> {
        writeln!(self.out, "{RESULT_LINE}")?;
        let cpu = if self.cpu_column {
            "    CPU_Util[%]"
        } else {
            ""
        };
        writeln!(self.out, "{}{cpu}", Self::header(self.duration))?;
        self.out.flush()
    }

    fn size(&mut self, record: &SizeRecord<'_>) -> io::Result<()> {
        if let Figures::Lat(stats) = &record.figures {
            let mut row = if self.duration {
                Self::duration_row(stats, self.rtt_factor)
            } else {
                Self::row(stats)
            };
            if self.cpu_column {
                // perftest's REPORT_EXT_CPU_UTIL.
                let _ = write!(
                    row,
                    "\t    {:<3.2}",
                    stats.system_cpu_util_pct.unwrap_or(0.0)
                );
            }
            writeln!(self.out, "{row}")?;
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

/// The `-H` dump: a header line `#bytes #sample  rtt/2[usec]` (`rtt[usec]`
/// when `rtt_factor` is 1: reads and atomics), then one
/// line `BYTES INDEX LATENCY` per sample in recorded order (1-based index,
/// half round trip in microseconds with 4 decimals, which is exact for
/// nanosecond round trips).
///
/// # Errors
/// I/O errors of the destination.
pub fn dump_samples(
    out: &mut dyn Write,
    bytes: u64,
    samples_ns: &[u64],
    rtt_factor: u32,
) -> io::Result<()> {
    let unit = if rtt_factor == 1 { "rtt" } else { "rtt/2" };
    writeln!(out, "#bytes #sample  {unit}[usec]")?;
    for (i, &ns) in samples_ns.iter().enumerate() {
        writeln!(out, "{bytes} {} {:.4}", i + 1, per_trip_us(ns, rtt_factor))?;
    }
    out.flush()
}

/// C's `%g` (six significant digits, trailing zeros dropped, exponent
/// form below 1e-4 or from 1e6), for perftest's sample lists.
pub fn c_g(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return if v == 0.0 { "0".into() } else { v.to_string() };
    }
    let exp = v.abs().log10().floor() as i32;
    let strip = |t: String| {
        if t.contains('.') {
            t.trim_end_matches('0').trim_end_matches('.').to_owned()
        } else {
            t
        }
    };
    if !(-4..6).contains(&exp) {
        let t = format!("{v:.5e}");
        let (m, e) = t.split_once('e').unwrap_or((&t, "0"));
        let e: i32 = e.parse().unwrap_or(0);
        let sign = if e < 0 { '-' } else { '+' };
        return format!("{}e{sign}{:02}", strip(m.to_owned()), e.abs());
    }
    let decimals = usize::try_from(5 - exp).unwrap_or(0);
    strip(format!("{v:.decimals$}"))
}

/// perftest's `-U/--report-unsorted` list: `#, usec`, then one
/// `%d, %g` line per sample in the order measured (1-based index; half
/// round trips when `rtt_factor` is 2).
///
/// # Errors
/// I/O errors of the destination.
pub fn dump_unsorted(out: &mut dyn Write, samples_ns: &[u64], rtt_factor: u32) -> io::Result<()> {
    writeln!(out, "#, usec")?;
    for (i, &ns) in samples_ns.iter().enumerate() {
        writeln!(out, "{}, {}", i + 1, c_g(per_trip_us(ns, rtt_factor)))?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::lat::tests::stats as sample_stats;

    #[test]
    fn empty_stats_fill_every_column() {
        let s = crate::results::lat::LatRecorder::new(0).stats(2);
        assert_eq!(LatTable::<Vec<u8>>::row(&s).split_whitespace().count(), 9);
    }

    #[test]
    fn percent_g_is_cs() {
        // printf("%g") of each, as glibc prints it.
        for (v, c) in [
            (1.234567, "1.23457"),
            (12.5, "12.5"),
            (100.0, "100"),
            (0.00012, "0.00012"),
            (1234567.0, "1.23457e+06"),
            (0.0000123, "1.23e-05"),
            (0.0, "0"),
        ] {
            assert_eq!(c_g(v), c, "{v}");
        }
        let mut out = Vec::new();
        dump_unsorted(&mut out, &[3000, 1000], 2).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "#, usec\n1, 1.5\n2, 0.5\n");
    }

    // perftest_parameters.h, verbatim (tabs as \t).
    const RESULT_FMT_LAT: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";
    const RESULT_FMT_LAT_DUR: &str = " #bytes        #iterations       t_avg[usec]    tps average";
    const REPORT_FMT_LAT: &str = " %-7lu %lu          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f";
    const REPORT_FMT_LAT_DUR: &str = " %-7lu       %lu            %-7.2f        %-7.2f";

    #[test]
    fn table_is_perftests_format_strings() {
        use crate::format::printf::{CArg::*, sprintf};
        assert_eq!(LatTable::<Vec<u8>>::header(false), RESULT_FMT_LAT);
        assert_eq!(LatTable::<Vec<u8>>::header(true), RESULT_FMT_LAT_DUR);
        let s = sample_stats();
        assert_eq!(
            LatTable::<Vec<u8>>::row(&s),
            sprintf(
                REPORT_FMT_LAT,
                &[
                    U(2),
                    U(1000),
                    F(1.03),
                    F(3.52),
                    F(1.06),
                    F(1.07),
                    F(0.04),
                    F(1.18),
                    F(3.52)
                ]
            )
        );
        // tps: 10^6 / (1.07 us × 2).
        assert_eq!(
            LatTable::<Vec<u8>>::duration_row(&s, 2),
            sprintf(REPORT_FMT_LAT_DUR, &[U(2), U(1000), F(1.07), F(1e6 / 2.14)])
        );
        let mut out = Vec::new();
        let mut t = LatTable::new(&mut out, false, 2);
        let ctx = crate::results::record::tests::context();
        t.begin().unwrap();
        t.size(&SizeRecord {
            context: &ctx,
            figures: Figures::Lat(sample_stats()),
            peer_result: None,
            histogram: Some("x".into()),
            data_check: None,
        })
        .unwrap();
        t.end().unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0], RESULT_LINE);
        assert_eq!(lines[3], RESULT_LINE);
    }

    #[test]
    fn dump_lists_samples_in_recorded_order() {
        let mut out = Vec::new();
        dump_samples(&mut out, 64, &[3001, 2000], 2).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "#bytes #sample  rtt/2[usec]\n64 1 1.5005\n64 2 1.0000\n"
        );
    }
}
