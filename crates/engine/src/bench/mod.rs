//! bench

pub mod clock;
pub mod config;
pub mod sched;
pub mod spec;
