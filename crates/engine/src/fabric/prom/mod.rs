//! Prometheus text exposition (format 0.0.4) and what rdmaperf says in it,
//! one file each:
//!
//! - [`text::Exposition`]: metric families and their samples, written as the
//!   text format: one `# HELP` and one `# TYPE` line per family, each
//!   family's samples together, families in name order, samples in the
//!   order they were added.
//! - [`ports::port_metrics`]: the ports of a host. Every `node_infiniband_*`
//!   series that node_exporter 1.5.0 emits for the same sysfs tree, with
//!   its name, labels and value, plus what node_exporter lacks under
//!   `rdmaperf_port_*` / `rdmaperf_device_*`.
//! - [`health::add_health_metrics`]: the last `rdmaperf health` verdict,
//!   from its state file.
//! - [`results::ResultMetrics`]: the results of a test run (`--prom FILE`),
//!   fed with its size records and verdicts.

pub mod health;
pub mod ports;
pub mod results;
pub mod text;
