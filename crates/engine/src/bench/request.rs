//! What a client asks for, and perftest's rules that make the run's
//! configuration of it.
//!
//! A [`ConfigRequest`] holds the test-configuring values as they were
//! asked for (`None`: not asked, the test's default), from a command line
//! (`args.rs`'s `Cli`) or typed (a cluster pair, the exporter's probe).
//! [`configure`] is the one function that turns it into a
//! [`BwConfig`] or [`LatConfig`]: the test's defaults, `-a` over `-s`, the
//! duration mode and its margin, the tx depth clamped to the iterations,
//! the CQ moderation's default and clamp, the receive ring, the warm-up,
//! `-A`'s operation, then [`TestConfig::validate`]. Where perftest
//! silently changes a valid value, the change is said as a note
//! ([`Configured::notes`]); what it refuses is a [`ConfigError`] naming
//! the flag. The rules are perftest's (`src/perftest_parameters.c`: its
//! `parser` and `force_dependecies`); each one's comment says which.

use crate::bench::config::{
    self, BwConfig, ConfigError, ConfigRecord, DurationMode, LatConfig, PathConfig, TestConfig,
};
use crate::bench::spec::{Metric, TestSpec, Verb};

/// perftest's warning when it will not measure the peak.
pub const NO_PEAK_WARNING: &str = "WARNING: BW peak won't be measured in this run.";

/// A configuration and the adjustments made to reach it: where perftest
/// silently changes a valid value (clamps `-Q` to `-t`, `-t` to `-n`, lets
/// `-a` override `-s`), rdmaperf does the same and says so.
#[derive(Debug, Clone, PartialEq)]
pub struct Adjusted<C> {
    /// The configuration.
    pub config: C,
    /// One line per adjustment.
    pub notes: Vec<String>,
}

impl<C> Adjusted<C> {
    /// The same adjustments of another value.
    pub fn map<D>(self, f: impl FnOnce(C) -> D) -> Adjusted<D> {
        Adjusted {
            config: f(self.config),
            notes: self.notes,
        }
    }
}

/// The test-configuring values a client asks for, each as given (`None`
/// or `false`: not asked for). [`Default`] is a command line without any
/// of these flags.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigRequest {
    /// `-s/--size` (`None`: the test's default size).
    pub size: Option<u64>,
    /// `-a/--all`: the sweep from 2 B to 8 MiB.
    pub all: bool,
    /// `-n/--iters` (`None`: the test's default).
    pub iters: Option<u64>,
    /// `-D/--duration`, seconds.
    pub duration: Option<f64>,
    /// `-f/--margin`, seconds (`None`: a quarter of the duration).
    pub margin: Option<f64>,
    /// `--run_infinitely`.
    pub run_infinitely: bool,
    /// `-m/--mtu`.
    pub mtu: Option<u32>,
    /// `-S/--sl`, `--tclass`, `--flow_label`.
    pub path: PathConfig,
    /// `-q/--qp`.
    pub qps: u32,
    /// `--threads`.
    pub threads: u32,
    /// `-t/--tx-depth` (`None`: the test's default).
    pub tx_depth: Option<u32>,
    /// `-Q/--cq-mod` (`None`: perftest's default, see [`configure`]).
    pub cq_mod: Option<u32>,
    /// `-l/--post-list`.
    pub post_list: u32,
    /// `-I/--inline-size` (`None`: the test's default).
    pub inline_size: Option<u32>,
    /// `-o/--outs` (`None`: the device's maximum, resolved once it is
    /// open).
    pub outs: Option<u32>,
    /// `-b/--bidirectional`.
    pub bidirectional: bool,
    /// `-r/--rx-depth` (`None`: [`config::DEFAULT_RX_DEPTH`]).
    pub rx_depth: Option<u32>,
    /// `-A/--atomic_type` (`None`: the test's own operation).
    pub atomic_type: Option<Verb>,
    /// `--write_with_imm`.
    pub write_with_imm: bool,
    /// `--perform_warm_up`.
    pub perform_warm_up: bool,
    /// `-N/--noPeak` (no configuration changes; only what is said).
    pub no_peak: bool,
    /// `--cpu_util` (no configuration changes; only what is said).
    pub cpu_util: bool,
}

impl Default for ConfigRequest {
    /// No flag given: one QP, one thread, one request per post, the
    /// test's defaults for the rest.
    fn default() -> Self {
        Self {
            size: None,
            all: false,
            iters: None,
            duration: None,
            margin: None,
            run_infinitely: false,
            mtu: None,
            path: PathConfig::default(),
            qps: 1,
            threads: 1,
            tx_depth: None,
            cq_mod: None,
            post_list: 1,
            inline_size: None,
            outs: None,
            bidirectional: false,
            rx_depth: None,
            atomic_type: None,
            write_with_imm: false,
            perform_warm_up: false,
            no_peak: false,
            cpu_util: false,
        }
    }
}

/// A client's test: the operation it runs (an atomic test's: `-A`'s), its
/// configuration, and what perftest's rules changed on the way.
#[derive(Debug, Clone, PartialEq)]
pub struct Configured {
    /// The test (an atomic client's: the `-A` operation's).
    pub spec: TestSpec,
    /// The configuration, of the test's metric.
    pub config: ConfigRecord,
    /// One line per adjustment (perftest's notes and warnings).
    pub notes: Vec<String>,
}

/// The client's test configuration of `spec` that `request` asks for,
/// adjusted by perftest's rules: the one way from asked-for values to a
/// run's configuration, for the command line and the typed callers alike.
///
/// # Errors
/// The first value refused, naming its flag.
pub fn configure(spec: TestSpec, request: &ConfigRequest) -> Result<Configured, ConfigError> {
    // atomic_bw: -A picks the operation (the client's; a server runs what
    // its client asks).
    let spec = request.atomic_type.map_or(spec, |v| spec.with_atomic(v));
    let adjusted = match spec.metric {
        Metric::Bw => request.bw_config(spec)?.map(ConfigRecord::Bw),
        Metric::Lat => request.lat_config(spec)?.map(ConfigRecord::Lat),
    };
    Ok(Configured {
        spec,
        config: adjusted.config,
        notes: adjusted.notes,
    })
}

/// perftest's note when `--cpu_util` is given without `-D`.
const CPU_UTIL_NOTE: &str =
    "CPU Utilization works only with Duration mode (-D); --cpu_util is ignored (as perftest)";

impl ConfigRequest {
    /// The sizes to run: the `-a` sweep (which overrides `-s`, as in
    /// perftest) or one size (`default` without `-s`).
    fn sizes(&self, default: u64, notes: &mut Vec<String>) -> Vec<u64> {
        if self.all && self.run_infinitely {
            notes.push("--run_infinitely runs one size; -a/--all is ignored (as perftest)".into());
            return vec![self.size.unwrap_or(default)];
        }
        if self.all {
            if let Some(s) = self.size {
                notes.push(format!(
                    "-a/--all runs every size from 2 B to 8 MiB; -s/--size {s} is ignored (as perftest)"
                ));
            }
            config::sweep_sizes()
        } else {
            vec![self.size.unwrap_or(default)]
        }
    }

    /// Duration mode, with perftest's default margin: a quarter of the
    /// duration in whole seconds (`-D 4` → 1 s, `-D 2` → 0).
    fn duration_mode(&self) -> Option<DurationMode> {
        if self.run_infinitely {
            // perftest: a period of -D seconds (5 by default), reported
            // from one print to the next: no margins unless -f.
            let seconds = self.duration.unwrap_or(5.0);
            return Some(DurationMode {
                seconds,
                margin: self.margin.unwrap_or(0.0),
            });
        }
        self.duration.map(|seconds| DurationMode {
            seconds,
            margin: self.margin.unwrap_or_else(|| (seconds / 4.0).floor()),
        })
    }

    /// The iterations: `-n` or the test's default.
    fn iters(&self, spec: TestSpec) -> u64 {
        self.iters.unwrap_or(spec.defaults().iters)
    }

    /// The bandwidth configuration asked for (client side); `outs` is `-o`
    /// or 0 (the device's maximum, resolved once it is open).
    ///
    /// # Errors
    /// The value refused, naming its flag.
    pub fn bw_config(&self, spec: TestSpec) -> Result<Adjusted<BwConfig>, ConfigError> {
        let d = spec.defaults();
        let mut notes = Vec::new();
        if spec.is_atomic() {
            // perftest: "Message size cannot be changed for Atomic tests".
            if let Some(s) = self.size.filter(|&s| s != d.size) {
                return Err(ConfigError {
                    flag: "-s/--size",
                    message: format!(
                        "{s}: message size cannot be changed for atomic tests (they operate on {} bytes)",
                        d.size
                    ),
                });
            }
            if self.all {
                return Err(ConfigError {
                    flag: "-a/--all",
                    message: format!(
                        "message size cannot be changed for atomic tests (they operate on {} bytes)",
                        d.size
                    ),
                });
            }
        }
        let sizes = self.sizes(d.size, &mut notes);
        let iters = self.iters(spec);
        let duration = self.duration_mode();
        let mut tx_depth = self.tx_depth.unwrap_or(d.tx_depth);
        // perftest clamps the tx depth to the iterations (count mode).
        if duration.is_none() && u64::from(tx_depth) > iters && iters > 0 {
            notes.push(format!(
                "-t/--tx-depth {tx_depth} is above the {iters} iterations; using {iters} (as perftest)"
            ));
            tx_depth = u32::try_from(iters).unwrap_or(tx_depth);
        }
        // perftest: 100 by default, clamped to the tx depth; 1 for sizes
        // above 8 KiB unless -a or an explicit -Q; the post list with -l.
        let cq_mod = match self.cq_mod {
            Some(q) if q > tx_depth && q <= config::MAX_CQ_MOD => {
                notes.push(format!(
                    "-Q/--cq-mod {q} is above the tx depth {tx_depth}; using {tx_depth} (as perftest)"
                ));
                tx_depth
            }
            Some(q) => {
                if q > 1 && !self.all && sizes[0] > 8192 {
                    notes.push(
                        "Large message requested and CQ moderation enabled; it can lead to inaccurate results (perftest's warning)".into(),
                    );
                }
                q
            }
            None if self.post_list > 1 => self.post_list.min(tx_depth.max(1)),
            None if !self.all && sizes[0] > 8192 => 1,
            None => 100.min(tx_depth.max(1)),
        };
        let counts_every_operation = spec.receives(self.write_with_imm) || spec.is_atomic();
        let cfg = BwConfig {
            sizes,
            iters,
            duration,
            qps: self.qps,
            threads: self.threads,
            tx_depth,
            cq_mod,
            post_list: self.post_list,
            inline_size: self.inline_size.unwrap_or(d.inline),
            bidirectional: self.bidirectional,
            mtu: self.mtu,
            outs: self.outs.unwrap_or(0),
            path: self.path.clone(),
            endless: self.run_infinitely,
            warm_up: self.perform_warm_up && !counts_every_operation,
            rx_depth: config::effective_rx_depth(
                self.rx_depth.unwrap_or(config::DEFAULT_RX_DEPTH),
                duration.is_none().then_some(iters),
            ),
            write_with_imm: self.write_with_imm,
        };
        if self.perform_warm_up && counts_every_operation {
            notes.push(
                "--perform_warm_up: no warm-up where the peer counts every operation (its receives, \
                 or an atomic target's words); perftest skips it for writes with immediate too"
                    .into(),
            );
        }
        if let Some(r) = self.rx_depth
            && (r == 0 || r > config::MAX_RX_DEPTH)
        {
            return Err(ConfigError {
                flag: "-r/--rx-depth",
                message: format!(
                    "rx depth {r} is outside 1..={} (perftest's limit)",
                    config::MAX_RX_DEPTH
                ),
            });
        }
        let cfg = self.checked(spec, cfg)?;
        if !self.no_peak && !cfg.measures_peak() {
            notes.push(NO_PEAK_WARNING.into());
        }
        if self.cpu_util && cfg.duration.is_none() {
            notes.push(CPU_UTIL_NOTE.into());
        }
        Ok(Adjusted { config: cfg, notes })
    }

    /// The latency configuration asked for (client side).
    ///
    /// # Errors
    /// The value refused, naming its flag.
    pub fn lat_config(&self, spec: TestSpec) -> Result<Adjusted<LatConfig>, ConfigError> {
        let d = spec.defaults();
        let mut notes = Vec::new();
        let duration = self.duration_mode();
        let iters = self.iters(spec);
        let cfg = LatConfig {
            sizes: self.sizes(d.size, &mut notes),
            iters,
            duration,
            inline_size: self.inline_size.unwrap_or(d.inline),
            mtu: self.mtu,
            outs: self.outs.unwrap_or(0),
            path: self.path.clone(),
            rx_depth: config::effective_rx_depth(
                self.rx_depth.unwrap_or(config::DEFAULT_RX_DEPTH),
                duration.is_none().then_some(iters),
            ),
        };
        let cfg = self.checked(spec, cfg)?;
        if self.cpu_util && cfg.duration.is_none() {
            notes.push(CPU_UTIL_NOTE.into());
        }
        Ok(Adjusted { config: cfg, notes })
    }

    /// `cfg` once valid, and `-o` (when given) at least 1.
    fn checked<C: TestConfig>(&self, spec: TestSpec, cfg: C) -> Result<C, ConfigError> {
        cfg.validate()?;
        if spec.uses_outstanding_reads() && self.outs == Some(0) {
            return Err(ConfigError {
                flag: "-o/--outs",
                message: "at least 1 outstanding read".into(),
            });
        }
        Ok(cfg)
    }
}

/// Under `-R` the connection manager sets the GID and the path of every
/// QP from the address (and on iWARP there is no GID or path to set): the
/// values that would set them are refused, never silently ignored. Takes
/// this side's asked-for GID index, path and P_Key index (a server's too:
/// its path flags are refused beside `-R`, though its client's path is
/// the one used).
///
/// # Errors
/// The first of `-x`, `-S`, `--tclass`, `--flow_label`, `--pkey_index`
/// that is set.
pub fn refuse_beside_rdma_cm(
    gid_index: Option<u32>,
    path: &PathConfig,
    pkey_index: u16,
) -> Result<(), ConfigError> {
    let given = [
        (gid_index.is_some(), "-x/--gid-index"),
        (path.sl != 0, "-S/--sl"),
        (path.traffic_class != 0, "--tclass"),
        (!path.flow_labels.is_empty(), "--flow_label"),
        (pkey_index != 0, "--pkey_index"),
    ];
    match given.iter().find(|(set, _)| *set) {
        Some(&(_, flag)) => Err(ConfigError {
            flag,
            message: format!(
                "under -R/--rdma_cm the connection manager chooses the GID and path \
                 from the address; name the server by the address whose GID and path you want, \
                 and drop {flag}"
            ),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bw(spec: TestSpec, request: &ConfigRequest) -> Adjusted<BwConfig> {
        request.bw_config(spec).unwrap()
    }

    #[test]
    fn nothing_asked_is_the_tests_defaults() {
        for spec in crate::bench::spec::IMPLEMENTED {
            let d = spec.defaults();
            let c = configure(spec, &ConfigRequest::default()).unwrap();
            assert_eq!(c.spec, spec);
            match c.config {
                ConfigRecord::Bw(b) => {
                    assert_eq!(
                        (b.sizes, b.iters, b.inline_size, b.qps, b.threads),
                        (vec![d.size], d.iters, d.inline, 1, 1)
                    );
                    assert_eq!(b.tx_depth, d.tx_depth.min(d.iters as u32));
                    assert_eq!((b.duration, b.outs, b.post_list), (None, 0, 1));
                }
                ConfigRecord::Lat(l) => {
                    assert_eq!(
                        (l.sizes, l.iters, l.inline_size),
                        (vec![d.size], d.iters, d.inline)
                    );
                    assert_eq!(l.duration, None);
                }
            }
        }
    }

    #[test]
    fn the_cq_moderation_is_100_clamped_1_above_8_kib_or_the_post_list() {
        let r = |size, cq_mod, post_list, all| ConfigRequest {
            size: Some(size),
            cq_mod,
            post_list,
            all,
            ..ConfigRequest::default()
        };
        // write_bw: tx depth 128.
        assert_eq!(
            bw(TestSpec::WRITE_BW, &r(4096, None, 1, false))
                .config
                .cq_mod,
            100
        );
        assert_eq!(
            bw(TestSpec::WRITE_BW, &r(16384, None, 1, false))
                .config
                .cq_mod,
            1
        );
        assert_eq!(
            bw(TestSpec::WRITE_BW, &r(16384, None, 1, true))
                .config
                .cq_mod,
            100
        );
        assert_eq!(
            bw(TestSpec::WRITE_BW, &r(64, None, 8, false)).config.cq_mod,
            8
        );
        // Above the tx depth: the tx depth, said.
        let a = bw(TestSpec::WRITE_BW, &r(64, Some(500), 1, false));
        assert_eq!(a.config.cq_mod, 128);
        assert_eq!(
            a.notes,
            ["-Q/--cq-mod 500 is above the tx depth 128; using 128 (as perftest)"]
        );
        // Explicit above 8 KiB: kept, with perftest's warning.
        let a = bw(TestSpec::WRITE_BW, &r(65536, Some(16), 1, false));
        assert_eq!(a.config.cq_mod, 16);
        assert!(
            a.notes[0].starts_with("Large message requested"),
            "{:?}",
            a.notes
        );
    }

    #[test]
    fn the_tx_depth_is_clamped_to_the_iterations_in_count_mode_only() {
        let a = bw(
            TestSpec::WRITE_BW,
            &ConfigRequest {
                size: Some(64),
                iters: Some(64),
                tx_depth: Some(256),
                ..ConfigRequest::default()
            },
        );
        assert_eq!((a.config.tx_depth, a.config.cq_mod), (64, 64));
        assert_eq!(
            a.notes,
            ["-t/--tx-depth 256 is above the 64 iterations; using 64 (as perftest)"]
        );
        let a = bw(
            TestSpec::WRITE_BW,
            &ConfigRequest {
                iters: Some(64),
                tx_depth: Some(256),
                duration: Some(2.0),
                ..ConfigRequest::default()
            },
        );
        assert_eq!(a.config.tx_depth, 256);
    }

    #[test]
    fn duration_mode_has_a_quarter_margin_in_whole_seconds_and_no_peak() {
        let at = |seconds: f64, margin: Option<f64>, endless: bool| {
            ConfigRequest {
                duration: Some(seconds),
                margin,
                run_infinitely: endless,
                ..ConfigRequest::default()
            }
            .bw_config(TestSpec::WRITE_BW)
            .unwrap()
        };
        assert_eq!(at(4.0, None, false).config.duration.unwrap().margin, 1.0);
        assert_eq!(at(2.0, None, false).config.duration.unwrap().margin, 0.0);
        assert_eq!(
            at(600.0, None, false).config.duration.unwrap().margin,
            150.0
        );
        assert_eq!(
            at(4.0, Some(0.5), false).config.duration.unwrap().margin,
            0.5
        );
        // --run_infinitely: periods of -D, no margin unless -f.
        assert_eq!(
            at(4.0, None, true).config.duration,
            Some(DurationMode {
                seconds: 4.0,
                margin: 0.0
            })
        );
        let a = at(4.0, None, false);
        assert!(!a.config.measures_peak());
        assert_eq!(a.notes, [NO_PEAK_WARNING]);
        // -N: nothing to warn about.
        let a = ConfigRequest {
            duration: Some(4.0),
            no_peak: true,
            ..ConfigRequest::default()
        }
        .bw_config(TestSpec::WRITE_BW)
        .unwrap();
        assert!(a.notes.is_empty());
        // Latency: the same duration rule.
        let l = ConfigRequest {
            duration: Some(8.0),
            ..ConfigRequest::default()
        }
        .lat_config(TestSpec::WRITE_LAT)
        .unwrap();
        assert_eq!(l.config.duration.unwrap().margin, 2.0);
    }

    #[test]
    fn all_overrides_size_with_a_note_and_atomics_keep_their_size() {
        let a = bw(
            TestSpec::WRITE_BW,
            &ConfigRequest {
                all: true,
                size: Some(64),
                ..ConfigRequest::default()
            },
        );
        assert_eq!(a.config.sizes, config::sweep_sizes());
        assert_eq!(a.notes.len(), 1, "{:?}", a.notes);
        let e = ConfigRequest {
            size: Some(16),
            ..ConfigRequest::default()
        }
        .bw_config(TestSpec::FETCH_ADD_BW)
        .unwrap_err();
        assert_eq!(e.flag, "-s/--size");
        // Asking for the atomic size itself is fine.
        assert!(
            ConfigRequest {
                size: Some(8),
                ..ConfigRequest::default()
            }
            .bw_config(TestSpec::FETCH_ADD_BW)
            .is_ok()
        );
    }

    #[test]
    fn atomic_type_picks_the_operation() {
        let c = configure(
            TestSpec::FETCH_ADD_BW,
            &ConfigRequest {
                atomic_type: Some(Verb::CmpSwap),
                ..ConfigRequest::default()
            },
        )
        .unwrap();
        assert_eq!(c.spec, TestSpec::CMP_SWAP_BW);
    }

    #[test]
    fn refusals_name_the_flag() {
        let flag = |spec, r: ConfigRequest| configure(spec, &r).unwrap_err().flag;
        let r = ConfigRequest::default;
        assert_eq!(
            flag(
                TestSpec::WRITE_BW,
                ConfigRequest {
                    rx_depth: Some(0),
                    ..r()
                }
            ),
            "-r/--rx-depth"
        );
        assert_eq!(
            flag(
                TestSpec::READ_BW,
                ConfigRequest {
                    outs: Some(0),
                    ..r()
                }
            ),
            "-o/--outs"
        );
        assert_eq!(
            flag(
                TestSpec::WRITE_BW,
                ConfigRequest {
                    size: Some(16 << 20),
                    ..r()
                }
            ),
            "-s/--size"
        );
        assert_eq!(
            flag(
                TestSpec::WRITE_LAT,
                ConfigRequest {
                    iters: Some(3),
                    ..r()
                }
            ),
            "-n/--iters"
        );
    }

    #[test]
    fn warm_up_is_skipped_where_the_peer_counts_every_operation() {
        let r = ConfigRequest {
            perform_warm_up: true,
            ..ConfigRequest::default()
        };
        assert!(bw(TestSpec::WRITE_BW, &r).config.warm_up);
        let a = bw(TestSpec::SEND_BW, &r);
        assert!(!a.config.warm_up);
        assert!(a.notes[0].starts_with("--perform_warm_up"), "{:?}", a.notes);
    }

    #[test]
    fn rdma_cm_refuses_what_it_decides_for() {
        let path = PathConfig::default();
        assert!(refuse_beside_rdma_cm(None, &path, 0).is_ok());
        assert_eq!(
            refuse_beside_rdma_cm(Some(0), &path, 0).unwrap_err().flag,
            "-x/--gid-index"
        );
        let sl = PathConfig {
            sl: 2,
            ..PathConfig::default()
        };
        assert_eq!(
            refuse_beside_rdma_cm(None, &sl, 0).unwrap_err().flag,
            "-S/--sl"
        );
        assert_eq!(
            refuse_beside_rdma_cm(None, &path, 1).unwrap_err().flag,
            "--pkey_index"
        );
    }
}
