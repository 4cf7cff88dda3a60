//! results

pub mod bw;
pub mod lat;
pub mod report;
