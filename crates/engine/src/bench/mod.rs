//! What a test is and how it is scheduled; the lowest layer (it imports
//! nothing else of the crate).
//!
//! - [`spec`]: a test as data: its verb, metric, perftest title, defaults
//!   and memory access.
//! - [`config`]: the bandwidth and latency configurations the client
//!   sends, their limits and validation, and the ring and budget
//!   arithmetic derived from them.
//! - [`request`]: what a client asks for (flags or typed values) and
//!   perftest's rules that make the run's configuration of it, one
//!   function for every caller.
//! - [`plan`]: who does what: a side's role and, in the bandwidth loop,
//!   whether it posts, receives, drains.
//! - [`sched`]: the bandwidth loop's scheduling policy (`wr_id`s, posting,
//!   signalling, duration windows).
//! - [`clock`]: which clock stamps latency samples and how ticks become
//!   nanoseconds.
//! - [`credit`]: receive credits for SEND tests on iWARP (no
//!   receiver-not-ready retry there): the sender never has more SENDs in
//!   flight than the receiver has receives posted.
//! - [`device`]: what a test needs from its device, refused by name before
//!   any traffic when the device lacks it (atomics, immediate data, iWARP's
//!   connection through rdma_cm).

pub mod clock;
pub mod config;
pub mod credit;
pub mod device;
pub mod plan;
pub mod request;
pub mod sched;
pub mod spec;
