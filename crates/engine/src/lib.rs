//! The pure core of rdmaperf: everything that needs no device and no FFI.
//!
//! - [`gid`]: GID classification and perftest-compatible automatic GID
//!   index selection.
//! - [`listing`]: the device/port/GID inventory shown by `--list-devices`,
//!   and its writers (human text, JSON lines) behind one small trait.
//!
//! Later parts (configuration, the out-of-band handshake codec,
//! statistics, result reports) live here too, for the same reason: they
//! can be unit-tested without RDMA hardware.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod banner;
pub mod bw;
pub mod clock;
pub mod config;
pub mod gid;
pub mod lat;
pub mod link;
pub mod listing;
pub mod nccl;
pub mod perftest_json;
pub mod ports;
pub mod printf;
pub mod prom;
pub mod report;
pub mod sched;
pub mod session;
pub mod spec;
pub mod wire;
