//! The pure core of rdmaperf: everything that needs no device and no FFI.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod bench;
pub mod fabric;
pub mod format;
pub mod nccl;
pub mod proto;
pub mod results;
