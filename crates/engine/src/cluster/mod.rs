//! Cluster mode's pure logic (`rdmaperf cluster`): who this process is in
//! the job, whom it tests against in which round, and what the results
//! say about nodes and links. No sockets, no devices, no clock: the
//! driver in `cli` reads the environment and the network and hands the
//! facts in.
//!
//! - [`launch`]: the rank and size from the launcher's environment
//!   (torchrun, Open MPI, PMI, Slurm, `--rank/--size`), innermost first,
//!   and where the coordinator (rank 0) listens.
//! - [`coordinator`]: rank 0's whole run as one state machine (no I/O,
//!   time passed in): gathering, start, rounds, retests, the measurements
//!   and facts the verdicts judge; the driver only moves bytes.
//! - [`messages`]: the rank ↔ coordinator messages, in the pair
//!   protocol's frames, each bounded whatever the job's size.
//! - [`pair_test`]: what every pair runs (rank 0's flags, typed and
//!   bounded) and the bounds on a round.
//! - [`html`]: `report.html`, the report as one self-contained page (a
//!   heat map of the pair matrix, or a node strip at scale).
//! - [`rails`]: a node's rails (`--rails auto` or named ports, in
//!   device-name order) and the coordinator's check that every rank
//!   brought the same count at the same rates.
//! - [`history`]: `--history DIR`: every direction against its own past
//!   runs (the file's model, bounded, and each measurement's baseline).
//! - [`hostlist`]: Slurm's hostlist syntax (`tux[0-5,12]`,
//!   `rack[0-1]_blade[0-2]`), expanded in order under a cap.
//! - [`schedule`]: the rounds of pairs: all pairs by the circle method
//!   (byes for odd N), the quick bisection and its retest pass, the ring,
//!   and a pairs file; who serves in each pair.
//! - [`rendezvous`]: the coordinator's state machines: gathering every
//!   rank's identity under a deadline, then following each round until
//!   every live rank has reported or its deadline passes.
//! - [`report`]: what rank 0 writes: stdout lines, `pairs.jsonl` and
//!   `summary.json` records, `metrics.prom`.
//! - [`topology`]: the fabric's switches and where each rail port sits
//!   under them, from Slurm's `topology.conf`, a saved `ibnetdiscover`
//!   output or the ranks' `SLURM_TOPOLOGY_ADDR`; the run's map (each
//!   rank's leaf per rail) and its groups of nodes under the same leaves.
//! - [`verdict`]: per-pair verdicts (absolute and relative to the
//!   cluster's best), slow rounds, and per-node verdicts that tell a bad
//!   node from a bad link.

pub mod coordinator;
pub mod history;
pub mod hostlist;
pub mod html;
pub mod launch;
pub mod localise;
pub mod messages;
pub mod pair_test;
pub mod png;
pub mod rails;
pub mod rendezvous;
pub mod report;
pub mod schedule;
pub mod topology;
pub mod verdict;
