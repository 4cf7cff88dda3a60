//! Port health: what the host's ports, links and GIDs are and how they
//! are judged, listed and exported.
//!
//! - [`ports`]: the port state model, `ports --check` verdicts and text.
//! - [`link`]: the negotiated rate, error counters and the
//!   `--expect-rate` evaluation.
//! - [`gid`]: GID classification and perftest's automatic GID index.
//! - [`listing`]: the `--list-devices` inventory and its writers.
//! - [`prom`]: Prometheus text: the exposition format, port metrics and
//!   test result metrics.

pub mod gid;
pub mod link;
pub mod listing;
pub mod ports;
pub mod prom;
