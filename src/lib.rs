//! Everything behind the test binaries (`write_bw`, `write_lat`,
//! `read_bw`, `read_lat`, `send_bw`, `send_lat`, `atomic_bw`): each is one
//! [`engine::bench::spec::TestSpec`] handed to [`runner::main`]. One
//! command line ([`args`], [`perftest_flags`], built once into
//! [`options`]), one session runner ([`runner`]) over the control channel
//! ([`oob`], [`server`]: the server's accept loop, [`wait`], [`stop`]), the resources of a side
//! ([`side`], [`setup`], [`placement`], [`clock`]), the measured loops
//! ([`measure`]), the output routing ([`output`]) and the files that
//! appear whole ([`atomic_file`]), the device inventory ([`inventory`],
//! [`sysfs`]) and the exit-code policy ([`exit`]); the `rdmaperf` binary ([`app`]: its command line and `main`), its
//! fabric-health subcommands ([`fabric`]) and cluster mode ([`cluster`]:
//! many ranks, each pair's test through the same runner).
//! All device access goes through the `verbs` crate, all pure logic is in
//! `engine`.

#![forbid(unsafe_code)]

pub mod app;
pub mod args;
pub mod atomic_file;
pub mod clock;
pub mod cluster;
pub mod exit;
pub mod fabric;
pub mod health;
pub mod inventory;
pub mod measure;
pub mod oob;
pub mod options;
pub mod output;
pub mod perftest_flags;
pub mod placement;
pub mod runner;
pub mod server;
pub mod setup;
pub mod side;
pub mod state_dir;
pub mod stop;
pub mod sysfs;
pub mod wait;
