//! The `NCCL_*` environment checks of `rdmaperf doctor nccl`: a block of
//! variables ([`EnvBlock`]) read as NCCL reads it and checked against this
//! [`Machine`] with NCCL's own semantics ([`check`]).
//!
//! The parts, each using only those before it:
//!
//! - `machine`: this machine as the checks see it, [`Machine`] with its
//!   [`NetInterface`]s and [`GpuState`].
//! - `block`: the block of variables, [`EnvBlock`] of [`EnvVar`]s, and
//!   [`EnvParseError`] for a line that is not `NAME=value`.
//! - `lists`: NCCL's `^`/`=`/prefix lists, [`NameList`] of [`ListEntry`]s.
//! - `numbers`: integers as NCCL's `strtoll(.., 0)` reads them, and range
//!   checks.
//! - `ports`: the machine's usable ports and GIDs, and NCCL's automatic GID
//!   choice.
//! - `names`: deprecated, renamed, known-but-unchecked and unknown
//!   variable names.
//! - `settings`: `NCCL_IB_TIMEOUT` ([`ib_timeout_seconds`]), the traffic
//!   classes, `NCCL_NET_GDR_LEVEL`, `NCCL_DEBUG`, `NCCL_DEBUG_SUBSYS`.
//! - `selection`: what NCCL uses, `NCCL_IB_HCA`, `NCCL_SOCKET_IFNAME` and
//!   `NCCL_IB_GID_INDEX`.
//! - `checks`: [`check`], every variable of the block to its check, and
//!   what holds for the block as a whole.
//!
//! The unit tests sit beside the part they test; those of a variable's
//! check go through [`check`], with the test machines of `fixtures`.

mod block;
mod checks;
mod lists;
mod machine;
mod names;
mod numbers;
mod ports;
mod selection;
mod settings;

#[cfg(test)]
mod fixtures;

pub use block::{EnvBlock, EnvParseError, EnvVar};
pub use checks::check;
pub use lists::{ListEntry, NameList};
pub use machine::{GpuState, Machine, NetInterface};
pub use settings::ib_timeout_seconds;
