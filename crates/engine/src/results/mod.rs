//! results

pub mod bw;
pub mod lat;
pub mod record;
pub mod verdict;
