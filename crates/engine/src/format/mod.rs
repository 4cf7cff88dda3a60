//! format

pub mod banner;
pub mod json_lines;
pub mod lat_table;
pub mod perftest_json;
pub mod printf;
pub mod report;
pub mod table;
