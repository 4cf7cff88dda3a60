//! Who this process is in the job, from its launcher's environment, and
//! where the coordinator (rank 0) listens. The environment comes in as a
//! lookup function: nothing here reads the process's own.
//!
//! - [`detect`]: rank and size, innermost launcher first (torchrun, Open
//!   MPI, PMI, Slurm inside a step, `--rank/--size`, one process); the
//!   batch-script mistake and flags that contradict a launcher are errors.
//! - [`coordinator`]: `--coordinator`, else torchrun's `MASTER_ADDR`, else
//!   the first host of Slurm's step node list on a port from the job id.
//!
//! The variables and the precedence: the reference notes' fleet.md §2–3.

use std::fmt;

use serde::Serialize;
use thiserror::Error;

use super::hostlist::{self, HostlistError, MAX_HOSTS};
use super::schedule::{MAX_RANKS, Rank};

/// The environment, as a lookup (`std::env::var(..).ok()` in the driver).
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// What told this process its rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LaunchSource {
    /// torchrun (`RANK`/`WORLD_SIZE`).
    Torchrun,
    /// Open MPI's `mpirun` (`OMPI_COMM_WORLD_*`).
    OpenMpi,
    /// A PMI launcher: MPICH Hydra, Cray PALS, `srun --mpi=pmi2`.
    Pmi,
    /// Slurm's `srun` (`SLURM_PROCID`/`SLURM_NTASKS` inside a step).
    Slurm,
    /// `--rank` and `--size`.
    Flags,
    /// Nothing: a job of one.
    Single,
}

impl fmt::Display for LaunchSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Torchrun => "torchrun",
            Self::OpenMpi => "Open MPI",
            Self::Pmi => "PMI",
            Self::Slurm => "Slurm (srun)",
            Self::Flags => "--rank/--size",
            Self::Single => "one process",
        })
    }
}

/// This process's place in the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Launch {
    /// Its rank.
    pub rank: Rank,
    /// The job's size.
    pub size: u32,
    /// Where the two came from.
    pub source: LaunchSource,
}

/// `--rank` and `--size` as given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RankFlags {
    /// `--rank`.
    pub rank: Option<Rank>,
    /// `--size`.
    pub size: Option<u32>,
}

/// Why the launch could not be read. All are usage errors (exit 2).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LaunchError {
    /// `SLURM_PROCID` without a job step: the command runs in the batch
    /// script itself.
    #[error(
        "SLURM_PROCID is set but this is no job step (SLURM_STEP_ID {step}): the command runs in \
         the batch script itself, one process waiting for {size} ranks that never start; launch \
         with srun (srun rdmaperf cluster ...) or mpirun"
    )]
    SlurmBatchScript {
        /// The step id as set (or "unset").
        step: String,
        /// `SLURM_NTASKS` as set.
        size: String,
    },
    /// A launcher's variable is there, its partner is not.
    #[error("{present} is set but {missing} is not: {by} sets both")]
    Incomplete {
        /// The variable present.
        present: &'static str,
        /// The variable missing.
        missing: &'static str,
        /// The launcher.
        by: LaunchSource,
    },
    /// A variable that is not a number.
    #[error("{var}={value:?} is not a number")]
    NotANumber {
        /// The variable (or flag).
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// A size of 0 or above the cap.
    #[error("a job of {size} ranks (from {by}): 1 to {MAX_RANKS}")]
    Size {
        /// The size.
        size: u32,
        /// Where it came from.
        by: LaunchSource,
    },
    /// A rank at or above the size.
    #[error("rank {rank} of a job of {size} (from {by}): ranks go 0 to size − 1")]
    RankOutOfRange {
        /// The rank.
        rank: Rank,
        /// The size.
        size: u32,
        /// Where they came from.
        by: LaunchSource,
    },
    /// One of `--rank`/`--size` without the other.
    #[error("{given} without {missing}: give both, or launch with srun, mpirun or torchrun")]
    HalfFlags {
        /// The flag given.
        given: &'static str,
        /// The flag missing.
        missing: &'static str,
    },
    /// A flag that says otherwise than the launcher.
    #[error(
        "{flag} {given} contradicts {by}, which says {launcher}: drop the flag or make it agree"
    )]
    FlagContradicts {
        /// The flag.
        flag: &'static str,
        /// Its value.
        given: u32,
        /// The launcher's value.
        launcher: u32,
        /// The launcher.
        by: LaunchSource,
    },
    /// `--coordinator` that is not `HOST:PORT`.
    #[error("--coordinator {0:?}: expected HOST:PORT (or [IPV6]:PORT) with a port of 1 to 65535")]
    BadCoordinator(String),
    /// No way to find rank 0.
    #[error(
        "--coordinator HOST:PORT is required under {by}: it tells a rank nothing about where \
         rank 0 runs (give rank 0's host and a free port, the same on every rank)"
    )]
    CoordinatorRequired {
        /// The launcher.
        by: LaunchSource,
    },
    /// A variable the coordinator needs is missing or wrong.
    #[error("{0}")]
    CoordinatorEnv(String),
    /// Slurm's node list could not be expanded.
    #[error("SLURM node list: {0}")]
    NodeList(#[from] HostlistError),
}

/// Slurm's special step ids (`slurm.h`: `SLURM_PENDING_STEP` 0xFFFFFFFD,
/// `SLURM_BATCH_SCRIPT` 0xFFFFFFFB, `SLURM_EXTERN_CONT` 0xFFFFFFFC,
/// `SLURM_INTERACTIVE_STEP` 0xFFFFFFFA): from here up, no `srun` step.
const SLURM_SPECIAL_STEPS: u64 = 0xFFFF_FFF0;

fn number(env: Env<'_>, var: &'static str) -> Result<Option<u32>, LaunchError> {
    match env(var) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| LaunchError::NotANumber { var, value: v }),
    }
}

/// Both of a launcher's variables, or neither; one alone is an error.
fn both(
    env: Env<'_>,
    rank: &'static str,
    size: &'static str,
    source: LaunchSource,
) -> Result<Option<(u32, u32)>, LaunchError> {
    match (number(env, rank)?, number(env, size)?) {
        (Some(r), Some(s)) => Ok(Some((r, s))),
        (None, None) => Ok(None),
        (Some(_), None) => Err(LaunchError::Incomplete {
            present: rank,
            missing: size,
            by: source,
        }),
        (None, Some(_)) => Err(LaunchError::Incomplete {
            present: size,
            missing: rank,
            by: source,
        }),
    }
}

/// The launcher's rank and size, innermost first, with `flags` checked
/// against them.
///
/// # Errors
/// See [`LaunchError`]: every case is a usage error.
pub fn detect(env: Env<'_>, flags: &RankFlags) -> Result<Launch, LaunchError> {
    let found = launcher(env)?;
    let launch = match found {
        Some(l) => {
            for (flag, given, launcher) in [
                ("--rank", flags.rank, l.rank),
                ("--size", flags.size, l.size),
            ] {
                if let Some(given) = given.filter(|&g| g != launcher) {
                    return Err(LaunchError::FlagContradicts {
                        flag,
                        given,
                        launcher,
                        by: l.source,
                    });
                }
            }
            l
        }
        None => match (flags.rank, flags.size) {
            (Some(rank), Some(size)) => Launch {
                rank,
                size,
                source: LaunchSource::Flags,
            },
            (Some(_), None) => {
                return Err(LaunchError::HalfFlags {
                    given: "--rank",
                    missing: "--size",
                });
            }
            (None, Some(_)) => {
                return Err(LaunchError::HalfFlags {
                    given: "--size",
                    missing: "--rank",
                });
            }
            (None, None) => Launch {
                rank: 0,
                size: 1,
                source: LaunchSource::Single,
            },
        },
    };
    if launch.size == 0 || launch.size > MAX_RANKS {
        return Err(LaunchError::Size {
            size: launch.size,
            by: launch.source,
        });
    }
    if launch.rank >= launch.size {
        return Err(LaunchError::RankOutOfRange {
            rank: launch.rank,
            size: launch.size,
            by: launch.source,
        });
    }
    Ok(launch)
}

/// The innermost launcher whose variables are set, if any.
fn launcher(env: Env<'_>) -> Result<Option<Launch>, LaunchError> {
    let with = |source| move |(rank, size)| Launch { rank, size, source };
    if env("TORCHELASTIC_RUN_ID").is_some() || env("GROUP_RANK").is_some() {
        let got = both(env, "RANK", "WORLD_SIZE", LaunchSource::Torchrun)?.ok_or(
            LaunchError::Incomplete {
                present: "TORCHELASTIC_RUN_ID",
                missing: "RANK",
                by: LaunchSource::Torchrun,
            },
        )?;
        return Ok(Some(with(LaunchSource::Torchrun)(got)));
    }
    let ompi = (
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        LaunchSource::OpenMpi,
    );
    let pmi = ("PMI_RANK", "PMI_SIZE", LaunchSource::Pmi);
    for (rank, size, source) in [ompi, pmi] {
        if let Some(got) = both(env, rank, size, source)? {
            return Ok(Some(with(source)(got)));
        }
    }
    let Some(got) = both(env, "SLURM_PROCID", "SLURM_NTASKS", LaunchSource::Slurm)? else {
        return Ok(None);
    };
    let step = env("SLURM_STEP_ID");
    let in_step = step
        .as_deref()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .is_some_and(|s| s < SLURM_SPECIAL_STEPS);
    if !in_step {
        return Err(LaunchError::SlurmBatchScript {
            step: step.unwrap_or_else(|| "unset".into()),
            size: env("SLURM_NTASKS").unwrap_or_default(),
        });
    }
    Ok(Some(with(LaunchSource::Slurm)(got)))
}

/// Where rank 0 listens for the other ranks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Coordinator {
    /// Its host (a name or an address).
    pub host: String,
    /// Its TCP port.
    pub port: u16,
    /// Where the two came from.
    pub source: CoordinatorSource,
}

/// What named the coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CoordinatorSource {
    /// `--coordinator`.
    Flag,
    /// torchrun's `MASTER_ADDR`, one port above `MASTER_PORT`.
    Torchrun,
    /// The first host of Slurm's node list, a port from the job id.
    SlurmNodelist,
    /// None: one rank, the node self-test.
    SelfTest,
}

impl fmt::Display for CoordinatorSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Flag => "--coordinator",
            Self::Torchrun => "MASTER_ADDR, MASTER_PORT + 1",
            Self::SlurmNodelist => "the first host of SLURM_STEP_NODELIST",
            Self::SelfTest => "none: one rank is the node self-test",
        })
    }
}

/// The base of the port a Slurm job's coordinator derives (Lightning's
/// `SLURMEnvironment` uses 15000 + the job id's last four digits).
pub const SLURM_PORT_BASE: u16 = 15_000;

/// Parses `HOST:PORT` or `[IPV6]:PORT`.
fn host_port(text: &str) -> Option<(String, u16)> {
    let (host, port) = match text.strip_prefix('[') {
        Some(rest) => {
            let (h, p) = rest.split_once("]:")?;
            (h, p)
        }
        None => text.rsplit_once(':')?,
    };
    let port: u16 = port.parse().ok().filter(|&p| p != 0)?;
    (!host.is_empty()
        && !host.contains(char::is_whitespace)
        && (text.starts_with('[') || !host.contains(':')))
    .then(|| (host.to_string(), port))
}

/// Where rank 0 listens: `--coordinator` (`flag`); else torchrun's
/// `MASTER_ADDR` on `MASTER_PORT + 1` (torchrun's agent holds
/// `MASTER_PORT`); else under Slurm the first host of
/// `SLURM_STEP_NODELIST` (or `SLURM_JOB_NODELIST`) on port 15000 + (job
/// id + step id) mod 10000 (two steps of one job do not collide); none
/// for a job of one.
///
/// # Errors
/// A malformed flag, a missing or malformed variable, or a launcher that
/// names no coordinator (`mpirun` without Slurm: the flag is required).
pub fn coordinator(
    flag: Option<&str>,
    env: Env<'_>,
    launch: &Launch,
) -> Result<Option<Coordinator>, LaunchError> {
    if let Some(text) = flag {
        let (host, port) =
            host_port(text).ok_or_else(|| LaunchError::BadCoordinator(text.into()))?;
        return Ok(Some(Coordinator {
            host,
            port,
            source: CoordinatorSource::Flag,
        }));
    }
    let missing =
        |what: &str| LaunchError::CoordinatorEnv(format!("{what}: give --coordinator HOST:PORT"));
    match launch.source {
        LaunchSource::Torchrun => {
            let host = env("MASTER_ADDR")
                .filter(|h| !h.trim().is_empty())
                .ok_or_else(|| missing("torchrun set no MASTER_ADDR"))?;
            let port = env("MASTER_PORT").ok_or_else(|| missing("torchrun set no MASTER_PORT"))?;
            let port = port
                .trim()
                .parse::<u16>()
                .ok()
                .and_then(|p| p.checked_add(1))
                .ok_or_else(|| missing(&format!("MASTER_PORT={port:?} leaves no port above it")))?;
            Ok(Some(Coordinator {
                host: host.trim().into(),
                port,
                source: CoordinatorSource::Torchrun,
            }))
        }
        LaunchSource::Slurm => {
            let list = env("SLURM_STEP_NODELIST")
                .or_else(|| env("SLURM_JOB_NODELIST"))
                .ok_or_else(|| missing("Slurm set no SLURM_STEP_NODELIST"))?;
            let host = hostlist::expand(&list, MAX_HOSTS)?.swap_remove(0);
            let id = |var: &'static str| -> Result<u64, LaunchError> {
                let v = env(var).ok_or_else(|| missing(&format!("Slurm set no {var}")))?;
                v.trim()
                    .parse()
                    .map_err(|_| LaunchError::NotANumber { var, value: v })
            };
            let offset = (id("SLURM_JOB_ID")? + id("SLURM_STEP_ID")?) % 10_000;
            Ok(Some(Coordinator {
                host,
                port: SLURM_PORT_BASE + offset as u16,
                source: CoordinatorSource::SlurmNodelist,
            }))
        }
        _ if launch.size == 1 => Ok(None),
        by => Err(LaunchError::CoordinatorRequired { by }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(vars: &[(&str, &str)]) -> HashMap<String, String> {
        vars.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn detect_in(vars: &[(&str, &str)], flags: RankFlags) -> Result<Launch, LaunchError> {
        let map = env_of(vars);
        detect(&|k| map.get(k).cloned(), &flags)
    }

    fn launched(vars: &[(&str, &str)]) -> Launch {
        detect_in(vars, RankFlags::default()).unwrap()
    }

    const SRUN: [(&str, &str); 6] = [
        ("SLURM_PROCID", "2"),
        ("SLURM_NTASKS", "4"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_JOB_ID", "123456"),
        ("SLURM_STEP_NODELIST", "gpu[07-10]"),
        ("SLURM_JOB_NODELIST", "gpu[01-10]"),
    ];

    #[test]
    fn each_launcher_is_read_from_its_own_variables() {
        let l = launched(&[
            ("TORCHELASTIC_RUN_ID", "x"),
            ("RANK", "3"),
            ("WORLD_SIZE", "8"),
        ]);
        assert_eq!((l.rank, l.size, l.source), (3, 8, LaunchSource::Torchrun));
        let l = launched(&[("GROUP_RANK", "0"), ("RANK", "1"), ("WORLD_SIZE", "2")]);
        assert_eq!(l.source, LaunchSource::Torchrun);
        let l = launched(&[("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "4")]);
        assert_eq!((l.rank, l.size, l.source), (1, 4, LaunchSource::OpenMpi));
        let l = launched(&[("PMI_RANK", "5"), ("PMI_SIZE", "6")]);
        assert_eq!((l.rank, l.size, l.source), (5, 6, LaunchSource::Pmi));
        let l = launched(&SRUN);
        assert_eq!((l.rank, l.size, l.source), (2, 4, LaunchSource::Slurm));
        let l = launched(&[]);
        assert_eq!((l.rank, l.size, l.source), (0, 1, LaunchSource::Single));
        let l = detect_in(
            &[],
            RankFlags {
                rank: Some(1),
                size: Some(2),
            },
        )
        .unwrap();
        assert_eq!(l.source, LaunchSource::Flags);
        assert_eq!(LaunchSource::Slurm.to_string(), "Slurm (srun)");
    }

    #[test]
    fn the_innermost_launcher_wins() {
        // torchrun started by srun: torchrun's ranks.
        let mut vars = SRUN.to_vec();
        vars.extend([
            ("TORCHELASTIC_RUN_ID", "j"),
            ("RANK", "7"),
            ("WORLD_SIZE", "16"),
        ]);
        assert_eq!(launched(&vars).source, LaunchSource::Torchrun);
        // mpirun inside an sbatch allocation: the batch step's SLURM_*
        // (step 0xFFFFFFFB) are inherited; Open MPI's ranks win.
        let vars = [
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_STEP_ID", "4294967291"),
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
        ];
        assert_eq!(launched(&vars).rank, 3);
        // srun --mpi=pmi2 sets PMI_* beside SLURM_*: PMI's.
        let mut vars = SRUN.to_vec();
        vars.extend([("PMI_RANK", "1"), ("PMI_SIZE", "4")]);
        assert_eq!(launched(&vars).source, LaunchSource::Pmi);
    }

    #[test]
    fn run_straight_from_a_batch_script_says_launch_with_srun() {
        for step in [None, Some("4294967291"), Some("batch")] {
            let mut vars = vec![("SLURM_PROCID", "0"), ("SLURM_NTASKS", "4")];
            if let Some(s) = step {
                vars.push(("SLURM_STEP_ID", s));
            }
            let e = detect_in(&vars, RankFlags::default()).unwrap_err();
            assert!(matches!(e, LaunchError::SlurmBatchScript { .. }), "{e}");
            let text = e.to_string();
            assert!(text.contains("launch with srun"), "{text}");
            assert!(text.contains("waiting for 4 ranks"), "{text}");
        }
    }

    #[test]
    fn flags_that_agree_pass_and_flags_that_contradict_are_refused() {
        let vars = [("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "4")];
        assert!(
            detect_in(
                &vars,
                RankFlags {
                    rank: Some(1),
                    size: Some(4)
                }
            )
            .is_ok()
        );
        assert_eq!(
            detect_in(
                &vars,
                RankFlags {
                    rank: None,
                    size: Some(8)
                }
            )
            .unwrap_err()
            .to_string(),
            "--size 8 contradicts Open MPI, which says 4: drop the flag or make it agree"
        );
        assert_eq!(
            detect_in(
                &[],
                RankFlags {
                    rank: Some(0),
                    size: None
                }
            )
            .unwrap_err()
            .to_string(),
            "--rank without --size: give both, or launch with srun, mpirun or torchrun"
        );
    }

    #[test]
    fn malformed_or_half_present_variables_are_named() {
        let err = |vars: &[(&str, &str)]| {
            detect_in(vars, RankFlags::default())
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err(&[("OMPI_COMM_WORLD_RANK", "1")]),
            "OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not: Open MPI sets both"
        );
        assert_eq!(
            err(&[("PMI_RANK", "one"), ("PMI_SIZE", "2")]),
            "PMI_RANK=\"one\" is not a number"
        );
        assert_eq!(
            err(&[("PMI_RANK", "2"), ("PMI_SIZE", "2")]),
            "rank 2 of a job of 2 (from PMI): ranks go 0 to size − 1"
        );
        assert_eq!(
            err(&[("PMI_RANK", "0"), ("PMI_SIZE", "0")]),
            "a job of 0 ranks (from PMI): 1 to 65536"
        );
        assert!(err(&[("TORCHELASTIC_RUN_ID", "x")]).contains("RANK"));
    }

    fn coord(
        flag: Option<&str>,
        vars: &[(&str, &str)],
    ) -> Result<Option<Coordinator>, LaunchError> {
        let map = env_of(vars);
        let env = |k: &str| map.get(k).cloned();
        let launch = detect(&env, &RankFlags::default())?;
        coordinator(flag, &env, &launch)
    }

    #[test]
    fn the_coordinator_comes_from_the_flag_torchrun_or_slurms_node_list() {
        let c = coord(Some("head:7000"), &SRUN).unwrap().unwrap();
        assert_eq!(
            (c.host.as_str(), c.port, c.source),
            ("head", 7000, CoordinatorSource::Flag)
        );
        let c = coord(Some("[fe80::1%veth0]:7000"), &[]).unwrap().unwrap();
        assert_eq!((c.host.as_str(), c.port), ("fe80::1%veth0", 7000));
        let torch = [
            ("TORCHELASTIC_RUN_ID", "j"),
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "node0"),
            ("MASTER_PORT", "29500"),
        ];
        let c = coord(None, &torch).unwrap().unwrap();
        assert_eq!((c.host.as_str(), c.port), ("node0", 29501));
        // Slurm: the step's first host; 15000 + (123456 + 0) mod 10000.
        let c = coord(None, &SRUN).unwrap().unwrap();
        assert_eq!((c.host.as_str(), c.port), ("gpu07", 18456));
        let mut step3 = SRUN.to_vec();
        step3[2] = ("SLURM_STEP_ID", "3");
        assert_eq!(coord(None, &step3).unwrap().unwrap().port, 18459);
        assert_eq!(coord(None, &[]).unwrap(), None);
    }

    #[test]
    fn without_a_coordinator_mpirun_needs_the_flag_and_bad_flags_are_named() {
        let mpirun = [("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "4")];
        let e = coord(None, &mpirun).unwrap_err().to_string();
        assert!(
            e.starts_with("--coordinator HOST:PORT is required under Open MPI"),
            "{e}"
        );
        for bad in [
            "head",
            "head:",
            "head:0",
            "head:70000",
            ":7000",
            "fe80::1:7000",
            "[fe80::1]7000",
        ] {
            assert_eq!(
                coord(Some(bad), &mpirun).unwrap_err(),
                LaunchError::BadCoordinator(bad.into()),
                "{bad}"
            );
        }
        let torch = [
            ("GROUP_RANK", "0"),
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "n0"),
            ("MASTER_PORT", "65535"),
        ];
        assert!(
            coord(None, &torch)
                .unwrap_err()
                .to_string()
                .contains("no port above it")
        );
    }
}
