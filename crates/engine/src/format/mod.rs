//! format

pub mod banner;
pub mod perftest_json;
pub mod printf;
