//! fabric

pub mod gid;
pub mod link;
pub mod listing;
pub mod ports;
pub mod prom;
