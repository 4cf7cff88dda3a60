//! Test configuration: what the client sends, what both sides validate.
//!
//! Every limit check names the flag the user typed, so the binaries can
//! exit with code 2 and a message that says what to change.

use serde::{Deserialize, Serialize};

/// perftest's default out-of-band TCP port.
pub const DEFAULT_PORT: u16 = 18515;
/// Largest message size (perftest's `MAX_SIZE`, 8 MiB).
pub const MAX_SIZE: u64 = 8 << 20;
/// Most queue pairs per test (perftest's limit).
pub const MAX_QPS: u32 = 16384;
/// Deepest send queue (perftest's limit).
pub const MAX_TX_DEPTH: u32 = 15000;
/// Largest CQ moderation (perftest's limit).
pub const MAX_CQ_MOD: u32 = 1024;
/// Most worker threads.
pub const MAX_THREADS: u32 = 256;
/// Fewest iterations (perftest's minimum).
pub const MIN_ITERS: u64 = 5;
/// Most iterations per size a configuration may ask for (a peer's value
/// is bounded before anything runs).
pub const MAX_ITERS: u64 = 1 << 40;
/// Longest duration per size, seconds (a day).
pub const MAX_DURATION_S: f64 = 86_400.0;
/// Most sizes in one run (the `-a` sweep has 23).
pub const MAX_SIZES: usize = 64;
/// Most send-queue entries over all QPs (`-q` × `-t`): 4 Mi entries, about
/// 256 MiB of work-queue rings on a device with 64-byte entries.
pub const MAX_SEND_QUEUE_ENTRIES: u64 = 1 << 22;
/// Bytes of device ring one send-queue entry is counted as in `--max-mem`
/// (one 64-byte basic block, as mlx5's WQE), before inline data.
pub const SQ_ENTRY_BYTES: u64 = 64;
/// Bytes of device ring one completion-queue entry is counted as (mlx5's
/// 64-byte CQE).
pub const CQ_ENTRY_BYTES: u64 = 64;
/// Cache line used to align ring slots of small messages.
pub const CACHE_LINE: u64 = 64;
/// Ring size for small messages (perftest's page-sized cycle buffer).
pub const RING_BYTES: u64 = 4096;

/// A configuration value out of range; names the flag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{flag}: {message}")]
pub struct ConfigError {
    /// The flag as the user types it, e.g. `-t/--tx-depth`.
    pub flag: &'static str,
    /// What is wrong and what is allowed.
    pub message: String,
}

fn bad(flag: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        flag,
        message: message.into(),
    }
}

/// The path options both sides set on every QP (perftest's `-S/--sl`,
/// `--tclass`, `--flow_label`): the client's values, sent with the
/// configuration, so both directions of the traffic carry the same marks.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PathConfig {
    /// Service level (0..=15).
    #[serde(default)]
    pub sl: u8,
    /// GRH traffic class: DSCP and ECN on RoCE (what `NCCL_IB_TC` sets).
    #[serde(default)]
    pub traffic_class: u8,
    /// GRH flow labels, taken by the QPs round-robin (perftest's); none: 0.
    #[serde(default)]
    pub flow_labels: Vec<u32>,
}

/// Largest GRH flow label (20 bits).
pub const MAX_FLOW_LABEL: u32 = 0xF_FFFF;

impl PathConfig {
    /// Checks the ranges.
    ///
    /// # Errors
    /// The flag whose value is out of range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.sl > 15 {
            return Err(bad(
                "-S/--sl",
                format!("service level {} is outside 0..=15", self.sl),
            ));
        }
        if self.flow_labels.len() > MAX_QPS as usize {
            return Err(bad(
                "--flow_label",
                format!(
                    "{} labels; at most one per QP ({MAX_QPS})",
                    self.flow_labels.len()
                ),
            ));
        }
        if let Some(l) = self.flow_labels.iter().find(|&&l| l > MAX_FLOW_LABEL) {
            return Err(bad(
                "--flow_label",
                format!("flow label {l} does not fit in 20 bits (0..={MAX_FLOW_LABEL})"),
            ));
        }
        Ok(())
    }

    /// The flow label of QP `q`.
    pub fn flow_label(&self, q: usize) -> u32 {
        if self.flow_labels.is_empty() {
            0
        } else {
            self.flow_labels[q % self.flow_labels.len()]
        }
    }
}

/// Duration mode (`-D`): run for `seconds`, measuring only between the
/// warm-up and cool-down margins.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DurationMode {
    /// Total run time per size, seconds.
    pub seconds: f64,
    /// Warm-up and cool-down margin each, seconds (perftest's `-f`).
    pub margin: f64,
}

impl DurationMode {
    /// The run and its margin as `Duration`s. The values have passed
    /// [`validate_run`] (finite, at most [`MAX_DURATION_S`]); anything else
    /// saturates instead of panicking.
    pub fn spans(&self) -> (std::time::Duration, std::time::Duration) {
        let span =
            |s: f64| std::time::Duration::try_from_secs_f64(s).unwrap_or(std::time::Duration::MAX);
        (span(self.seconds), span(self.margin))
    }
}

/// Configuration of an RDMA WRITE bandwidth test; sent by the client, so
/// the server needs no matching flags.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BwConfig {
    /// Message sizes to run, in order (one, or the `-a` sweep).
    pub sizes: Vec<u64>,
    /// Messages per QP per size (iteration mode).
    pub iters: u64,
    /// Duration mode instead of a fixed count.
    pub duration: Option<DurationMode>,
    /// Queue pairs.
    pub qps: u32,
    /// Worker threads the QPs are spread over.
    pub threads: u32,
    /// Send queue depth per QP.
    pub tx_depth: u32,
    /// Signal one work request in every `cq_mod`.
    pub cq_mod: u32,
    /// Work requests chained per `ibv_post_send`.
    pub post_list: u32,
    /// Send messages up to this size inline.
    pub inline_size: u32,
    /// Both sides write at the same time.
    pub bidirectional: bool,
    /// Requested path MTU in bytes (`None`: the ports' active MTU).
    pub mtu: Option<u32>,
    /// Outstanding RDMA READs or atomics per QP (perftest's `-o/--outs`;
    /// 0 for tests that post none). Both sides use the smallest of this
    /// and both devices' `max_qp_rd_atom`.
    #[serde(default)]
    pub outs: u32,
    /// Path options of every QP (`-S`, `--tclass`, `--flow_label`).
    #[serde(default)]
    pub path: PathConfig,
    /// perftest's `--run_infinitely`: the size's duration-mode period runs
    /// again and again, one report each, until the client is stopped.
    #[serde(default)]
    pub endless: bool,
    /// perftest's `--perform_warm_up`: a tx depth of requests per QP,
    /// completed, before each size is timed.
    #[serde(default)]
    pub warm_up: bool,
    /// Receives kept posted per QP by the side that receives (perftest's
    /// `-r/--rx-depth`; the send tests and `--write_with_imm`).
    #[serde(default = "default_rx_depth")]
    pub rx_depth: u32,
    /// perftest's `--write_with_imm`: RDMA WRITE with immediate, each
    /// consuming a receive on the target.
    #[serde(default)]
    pub write_with_imm: bool,
}

/// Most bytes between two signaled work requests of a QP: CQ moderation
/// (`-Q`, 100 by default with `-a`) at 4–8 MiB messages would otherwise
/// leave 400–800 MiB without a completion, longer than `--timeout` on a
/// slow link (seen on soft-RoCE: `write_bw -a -n 400` stalled at 4 MiB).
pub const MAX_BYTES_PER_SIGNAL: u64 = 1 << 20;

/// The CQ moderation a size runs with: `cq_mod`, lowered so that no more
/// than [`MAX_BYTES_PER_SIGNAL`] go between two completions (at least
/// every message). Only which requests ask for a completion changes, not
/// what is posted or measured; with a post list (`-l`) it stays `cq_mod`,
/// which then equals the list.
pub fn signal_interval(cq_mod: u32, post_list: u32, size: u64) -> u32 {
    if post_list > 1 {
        return cq_mod;
    }
    let by_bytes = (MAX_BYTES_PER_SIGNAL / size.max(1)).max(1);
    cq_mod
        .min(u32::try_from(by_bytes).unwrap_or(u32::MAX))
        .max(1)
}

/// What a session's set-up may take per QP beyond `--timeout` (a side
/// creates and connects its QPs while the other waits; ~10 ms each under
/// emulation, far less on hardware).
pub const SETUP_PER_QP: std::time::Duration = std::time::Duration::from_millis(100);

/// The bound on waiting for a peer that sets up `qps` QPs: `timeout` plus
/// [`SETUP_PER_QP`] each (at most 16384 QPs: under half an hour).
pub fn setup_budget(qps: u32, timeout: std::time::Duration) -> std::time::Duration {
    timeout.saturating_add(SETUP_PER_QP.saturating_mul(qps))
}

/// Iterations above which perftest stops measuring the peak.
pub const PEAK_ITERS_LIMIT: u64 = 20_000;

/// perftest's `DEF_RX_SEND`.
pub const DEFAULT_RX_DEPTH: u32 = 512;
/// perftest's limit on `-r/--rx-depth`.
pub const MAX_RX_DEPTH: u32 = 16384;

fn default_rx_depth() -> u32 {
    DEFAULT_RX_DEPTH
}

/// perftest's receive-ring depth for a test with receives: `-r` (default
/// 512), at most the iterations in iteration mode, and even (perftest's
/// `force_dependecies`).
pub fn effective_rx_depth(rx_depth: u32, iters: Option<u64>) -> u32 {
    let d = match iters {
        Some(n) if u64::from(rx_depth) > n => n as u32,
        _ => rx_depth,
    };
    if d % 2 == 1 { d + 1 } else { d }
}

/// Bytes of device ring a receive ring of `rx_depth` entries per QP adds
/// (a receive-queue entry and a completion-queue entry each), saturating.
pub fn recv_ring_bytes(qps: u32, rx_depth: u32) -> u64 {
    u64::from(qps)
        .saturating_mul(u64::from(rx_depth))
        .saturating_mul(SQ_ENTRY_BYTES + CQ_ENTRY_BYTES)
}

/// Most outstanding reads per QP a configuration may ask for (the verbs
/// attribute is 8 bits).
pub const MAX_OUTS: u32 = 255;

/// Checks `-o/--outs`.
///
/// # Errors
/// When above [`MAX_OUTS`].
pub fn validate_outs(outs: u32) -> Result<(), ConfigError> {
    if outs > MAX_OUTS {
        return Err(bad(
            "-o/--outs",
            format!("{outs} outstanding reads is outside 1..={MAX_OUTS}"),
        ));
    }
    Ok(())
}

impl Default for BwConfig {
    /// perftest's `ib_write_bw` defaults.
    fn default() -> Self {
        Self {
            sizes: vec![65536],
            iters: 5000,
            duration: None,
            qps: 1,
            threads: 1,
            tx_depth: 128,
            cq_mod: 100,
            post_list: 1,
            inline_size: 0,
            bidirectional: false,
            mtu: None,
            outs: 0,
            path: PathConfig::default(),
            endless: false,
            warm_up: false,
            rx_depth: DEFAULT_RX_DEPTH,
            write_with_imm: false,
        }
    }
}

/// Checks what every test shares: sizes, iterations or duration, MTU.
///
/// # Errors
/// The first violated limit, naming its flag.
pub fn validate_run(
    sizes: &[u64],
    iters: u64,
    duration: Option<DurationMode>,
    mtu: Option<u32>,
) -> Result<(), ConfigError> {
    if sizes.is_empty() {
        return Err(bad("-s/--size", "no message size given"));
    }
    if sizes.len() > MAX_SIZES {
        return Err(bad(
            "-s/--size",
            format!("{} sizes; at most {MAX_SIZES}", sizes.len()),
        ));
    }
    if let Some(&s) = sizes.iter().find(|&&s| s == 0 || s > MAX_SIZE) {
        return Err(bad(
            "-s/--size",
            format!("message size {s} is outside 1..={MAX_SIZE} bytes"),
        ));
    }
    match duration {
        None if !(MIN_ITERS..=MAX_ITERS).contains(&iters) => {
            return Err(bad(
                "-n/--iters",
                format!("{iters} iterations is outside {MIN_ITERS}..={MAX_ITERS}"),
            ));
        }
        None => {}
        Some(d) => {
            if !(d.seconds.is_finite() && d.seconds > 0.0 && d.seconds <= MAX_DURATION_S) {
                return Err(bad(
                    "-D/--duration",
                    format!(
                        "duration must be a positive number of seconds, at most {MAX_DURATION_S}"
                    ),
                ));
            }
            if !(d.margin.is_finite() && d.margin >= 0.0) {
                return Err(bad("-f/--margin", "margin must be zero or more seconds"));
            }
            if d.seconds <= 2.0 * d.margin {
                return Err(bad(
                    "-D/--duration",
                    format!(
                        "duration {}s must exceed twice the margin ({}s) so something is measured",
                        d.seconds, d.margin
                    ),
                ));
            }
            if sizes.len() > 1 {
                return Err(bad("-D/--duration", "cannot be combined with -a/--all"));
            }
        }
    }
    if let Some(m) = mtu
        && ![256, 512, 1024, 2048, 4096].contains(&m)
    {
        return Err(bad(
            "-m/--mtu",
            format!("MTU {m} is not one of 256, 512, 1024, 2048, 4096"),
        ));
    }
    Ok(())
}

/// The `-a` sweep: 2 B to 8 MiB in powers of two.
pub fn sweep_sizes() -> Vec<u64> {
    (1..=23).map(|i| 1u64 << i).collect()
}

impl BwConfig {
    /// Checks every limit that does not depend on the device.
    ///
    /// # Errors
    /// The first violated limit, naming its flag.
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate_run(&self.sizes, self.iters, self.duration, self.mtu)?;
        validate_outs(self.outs)?;
        self.path.validate()?;
        if self.endless && (self.duration.is_none() || self.sizes.len() != 1) {
            return Err(bad(
                "--run_infinitely",
                "repeats one size's duration-mode period (a -D and one size)",
            ));
        }
        if self.qps == 0 || self.qps > MAX_QPS {
            return Err(bad(
                "-q/--qp",
                format!("{} QPs is outside 1..={MAX_QPS}", self.qps),
            ));
        }
        if self.threads == 0 || self.threads > MAX_THREADS {
            return Err(bad(
                "--threads",
                format!("{} threads is outside 1..={MAX_THREADS}", self.threads),
            ));
        }
        if self.threads > self.qps {
            return Err(bad(
                "--threads",
                format!(
                    "{} threads for {} QPs: each thread needs at least one QP (raise -q)",
                    self.threads, self.qps
                ),
            ));
        }
        if self.tx_depth == 0 || self.tx_depth > MAX_TX_DEPTH {
            return Err(bad(
                "-t/--tx-depth",
                format!("tx depth {} is outside 1..={MAX_TX_DEPTH}", self.tx_depth),
            ));
        }
        let entries = u64::from(self.qps) * u64::from(self.tx_depth);
        if entries > MAX_SEND_QUEUE_ENTRIES {
            return Err(bad(
                "-t/--tx-depth",
                format!(
                    "{} QPs × tx depth {} is {entries} send-queue entries; at most {MAX_SEND_QUEUE_ENTRIES}",
                    self.qps, self.tx_depth
                ),
            ));
        }
        if self.rx_depth == 0 || self.rx_depth > MAX_RX_DEPTH {
            return Err(bad(
                "-r/--rx-depth",
                format!("rx depth {} is outside 1..={MAX_RX_DEPTH}", self.rx_depth),
            ));
        }
        if self.cq_mod == 0 || self.cq_mod > MAX_CQ_MOD {
            return Err(bad(
                "-Q/--cq-mod",
                format!("CQ moderation {} is outside 1..={MAX_CQ_MOD}", self.cq_mod),
            ));
        }
        if self.cq_mod > self.tx_depth {
            return Err(bad(
                "-Q/--cq-mod",
                format!(
                    "CQ moderation {} is above the tx depth {}: the send queue would fill \
                     before any completion is requested",
                    self.cq_mod, self.tx_depth
                ),
            ));
        }
        if self.post_list == 0 || self.post_list > self.tx_depth {
            return Err(bad(
                "-l/--post-list",
                format!(
                    "post list {} is outside 1..=tx depth ({})",
                    self.post_list, self.tx_depth
                ),
            ));
        }
        if self.duration.is_none() && !self.iters.is_multiple_of(u64::from(self.post_list)) {
            return Err(bad(
                "-n/--iters",
                format!(
                    "{} iterations is not a multiple of the post list {}",
                    self.iters, self.post_list
                ),
            ));
        }
        Ok(())
    }

    /// Whether perftest measures a peak for this run: not in duration
    /// mode, nor above [`PEAK_ITERS_LIMIT`] iterations (it prints 0.00).
    pub fn measures_peak(&self) -> bool {
        self.duration.is_none() && self.iters <= PEAK_ITERS_LIMIT
    }

    /// Largest message size of the run.
    pub fn max_size(&self) -> u64 {
        self.sizes.iter().copied().max().unwrap_or(0)
    }

    /// Bytes of buffer each QP writes into on its peer: the largest message,
    /// at least the small-message ring.
    pub fn buffer_per_qp(&self) -> u64 {
        self.max_size().max(RING_BYTES)
    }

    /// Bytes a side registers (see [`memory_for`]); the client always
    /// sends, the server only when bidirectional.
    pub fn memory_needed(&self, sends: bool) -> u64 {
        memory_for(self.buffer_per_qp(), self.qps, sends)
    }

    /// The QPs thread `t` drives: contiguous, as even as possible.
    pub fn qps_of_thread(&self, t: u32) -> std::ops::Range<u32> {
        share(self.qps, self.threads, t)
    }
}

/// What every test configuration has, whatever the test measures; the
/// session runner needs only this of it.
pub trait TestConfig: Serialize + serde::de::DeserializeOwned + Clone {
    /// Checks every limit that does not depend on the device.
    ///
    /// # Errors
    /// The first violated limit, naming its flag.
    fn validate(&self) -> Result<(), ConfigError>;
    /// The message sizes, in order.
    fn sizes(&self) -> &[u64];
    /// The requested path MTU.
    fn mtu(&self) -> Option<u32>;
    /// The path options of every QP.
    fn path(&self) -> &PathConfig;
    /// Whether the last size repeats until the client stops
    /// (`--run_infinitely`).
    fn endless(&self) -> bool {
        false
    }
    /// Outstanding reads asked for (0: the device's maximum, or none).
    fn outs(&self) -> u32;
    /// Sets the outstanding reads (once the device is known).
    fn set_outs(&mut self, outs: u32);
    /// The configuration as the reports show it.
    fn record(&self) -> ConfigRecord;
    /// Whether a client's offer of `qps` queue pairs fits the
    /// configuration (the server's check).
    ///
    /// # Errors
    /// The reason, for the client.
    fn check_offer(&self, qps: usize) -> Result<(), String>;
    /// How long the measured phase of a size may take, before `--timeout`
    /// is added: see [`phase_budget`].
    fn phase_budget(&self, size: u64) -> std::time::Duration;
}

/// Slowest data rate a measured phase is allowed when its bound is derived
/// from its iterations: 4 MB/s, far below any RDMA link, so a slow link is
/// never cut off. Soft-RoCE reads of 8 MiB in a debug build under
/// emulation ran at 15 MB/s on a slow CI machine (CI of 40feabc), and CI
/// machines have been 1.9× slower than that: 10 MB/s left too little.
pub const PHASE_FLOOR_BYTES_PER_S: f64 = 4e6;
/// Slowest message rate a measured phase is allowed: one per 5 ms (a
/// 4 KiB SEND ping-pong took 1.7 ms a message under emulation on a host
/// running a second VM; 1 ms cut it off).
pub const PHASE_FLOOR_SECONDS_PER_MESSAGE: f64 = 5e-3;
/// Longest measured phase, whatever a configuration asks (a month): keeps
/// every deadline representable.
pub const MAX_PHASE_S: f64 = 30.0 * 86_400.0;

/// The bound on one measured phase: its duration in duration mode, else
/// `iters × messages_per_iter` messages of `size` bytes at the floor rates
/// ([`PHASE_FLOOR_SECONDS_PER_MESSAGE`] each plus the bytes at
/// [`PHASE_FLOOR_BYTES_PER_S`]); at most [`MAX_PHASE_S`]. Heartbeats prove
/// a busy peer alive but never extend a phase past this plus `--timeout`.
pub fn phase_budget(
    iters: u64,
    duration: Option<DurationMode>,
    messages_per_iter: u64,
    size: u64,
) -> std::time::Duration {
    let secs = match duration {
        Some(d) => d.seconds,
        None => {
            let messages = iters as f64 * messages_per_iter as f64;
            messages * (PHASE_FLOOR_SECONDS_PER_MESSAGE + size as f64 / PHASE_FLOOR_BYTES_PER_S)
        }
    };
    let secs = if secs.is_nan() {
        MAX_PHASE_S
    } else {
        secs.clamp(0.0, MAX_PHASE_S)
    };
    std::time::Duration::from_secs_f64(secs)
}

impl TestConfig for BwConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        BwConfig::validate(self)
    }
    fn sizes(&self) -> &[u64] {
        &self.sizes
    }
    fn mtu(&self) -> Option<u32> {
        self.mtu
    }
    fn path(&self) -> &PathConfig {
        &self.path
    }
    fn endless(&self) -> bool {
        self.endless
    }
    fn outs(&self) -> u32 {
        self.outs
    }
    fn set_outs(&mut self, outs: u32) {
        self.outs = outs;
    }
    fn record(&self) -> ConfigRecord {
        ConfigRecord::Bw(self.clone())
    }
    fn check_offer(&self, qps: usize) -> Result<(), String> {
        if qps != self.qps as usize {
            return Err(format!(
                "the configuration has {} QPs, the client offers {qps}",
                self.qps
            ));
        }
        Ok(())
    }
    fn phase_budget(&self, size: u64) -> std::time::Duration {
        let directions = if self.bidirectional { 2 } else { 1 };
        phase_budget(
            self.iters,
            self.duration,
            u64::from(self.qps) * directions,
            size,
        )
    }
}

/// Bytes a side registers: a target area per QP, plus a source area per
/// QP when it sends.
pub fn memory_for(area: u64, qps: u32, sends: bool) -> u64 {
    let areas = if sends { 2 } else { 1 };
    area.saturating_mul(u64::from(qps)).saturating_mul(areas)
}

/// Bytes of device rings a side's queues are counted as in `--max-mem`:
/// every QP's send queue (`tx_depth` entries, each a basic block plus its
/// inline data rounded up to blocks) and one-entry receive queue, and the
/// completion queues (one entry per send-queue entry, plus one per CQ).
/// Saturating: a peer's numbers cannot overflow it.
pub fn ring_bytes(qps: u32, cqs: u32, tx_depth: u32, inline_size: u32) -> u64 {
    let sq_entry =
        SQ_ENTRY_BYTES + u64::from(inline_size).div_ceil(SQ_ENTRY_BYTES) * SQ_ENTRY_BYTES;
    let qps = u64::from(qps);
    let sq = qps
        .saturating_mul(u64::from(tx_depth))
        .saturating_mul(sq_entry);
    let rq = qps.saturating_mul(SQ_ENTRY_BYTES);
    let cq = qps
        .saturating_mul(u64::from(tx_depth))
        .saturating_add(u64::from(cqs))
        .saturating_mul(CQ_ENTRY_BYTES);
    sq.saturating_add(rq).saturating_add(cq)
}

/// Part `t` of `total` items split into `parts` contiguous ranges, as even
/// as possible (the first `total % parts` ranges get one more).
pub fn share(total: u32, parts: u32, t: u32) -> std::ops::Range<u32> {
    let parts = parts.max(1);
    let base = total / parts;
    let extra = total % parts;
    let start = t * base + t.min(extra);
    let len = base + u32::from(t < extra);
    start..start + len
}

/// How a thread's `n` QPs are spread over CQs of at most `max_cqe`
/// entries, `per_qp` entries each (plus one per CQ): the QP counts of its
/// CQs, as few CQs as fit. `None` when a single QP does not fit.
pub fn cq_groups(n: u32, per_qp: u64, max_cqe: u64) -> Option<Vec<u32>> {
    let per_cq = max_cqe.checked_sub(1)? / per_qp.max(1);
    if per_cq == 0 {
        return None;
    }
    let per_cq = u32::try_from(per_cq).unwrap_or(u32::MAX);
    let groups = n.div_ceil(per_cq).max(1);
    Some(
        (0..groups)
            .map(|g| share(n, groups, g).len() as u32)
            .collect(),
    )
}

/// Where message `i` of size `size` starts within a QP's area: small
/// messages rotate through a page-sized ring of cache-line aligned slots
/// (as perftest does), larger ones always start at 0.
#[inline]
pub fn ring_offset(size: u64, i: u64) -> u64 {
    Ring::for_size(size).offset(i)
}

/// How many distinct slots messages of `size` cycle through
/// ([`ring_offset`]): 1 above half the ring.
#[inline]
pub fn ring_slots(size: u64) -> u64 {
    Ring::for_size(size).slots
}

/// The ring of [`ring_offset`] for one message size, worked out once: a
/// hot loop asks it for each message's offset (one remainder and one
/// multiplication) without recomputing the slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ring {
    /// Distinct slots (1 above half the ring).
    slots: u64,
    /// Bytes between two slots; 0 when there is one slot.
    stride: u64,
}

impl Ring {
    /// The ring messages of `size` rotate through.
    #[inline]
    pub fn for_size(size: u64) -> Self {
        if size > RING_BYTES / 2 {
            return Self {
                slots: 1,
                stride: 0,
            };
        }
        let stride = ring_stride(size);
        Self {
            slots: RING_BYTES / stride,
            stride,
        }
    }

    /// Where message `i` starts.
    #[inline]
    pub fn offset(self, i: u64) -> u64 {
        if self.stride == 0 {
            return 0;
        }
        (i % self.slots) * self.stride
    }

    /// Bytes from the first slot's start to the last one's end for
    /// messages of `size`: what a QP's area must hold.
    #[inline]
    pub fn span(self, size: u64) -> u64 {
        (self.slots - 1) * self.stride + size
    }
}

/// Distance between two ring slots: the size rounded up to a cache line.
#[inline]
fn ring_stride(size: u64) -> u64 {
    size.div_ceil(CACHE_LINE).max(1) * CACHE_LINE
}

/// Parses a byte count with an optional binary suffix: `65536`, `64K`,
/// `64KiB`, `1M`, `2G` (K = 1024).
///
/// # Errors
/// A message naming the text when it is not a number with a known suffix
/// or overflows.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(split);
    let shift = match suffix.to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        _ => return Err(format!("{text:?} is not a size (examples: 65536, 64K, 1M)")),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a size (examples: 65536, 64K, 1M)"))?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{text:?} is too large"))
}

/// Configuration of an RDMA WRITE latency test, sent by the client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatConfig {
    /// Message sizes to run, in order (one, or the `-a` sweep).
    pub sizes: Vec<u64>,
    /// Round trips per size (iteration mode).
    pub iters: u64,
    /// Duration mode instead of a fixed count.
    pub duration: Option<DurationMode>,
    /// Send messages up to this size inline.
    pub inline_size: u32,
    /// Requested path MTU in bytes (`None`: the ports' active MTU).
    pub mtu: Option<u32>,
    /// Outstanding reads or atomics (`-o/--outs`; 0 for write latency).
    #[serde(default)]
    pub outs: u32,
    /// Path options of the QP (`-S`, `--tclass`, `--flow_label`).
    #[serde(default)]
    pub path: PathConfig,
    /// Receives kept posted by each side of a SEND ping-pong (`-r`).
    #[serde(default = "default_rx_depth")]
    pub rx_depth: u32,
}

impl Default for LatConfig {
    /// perftest's `ib_write_lat` defaults.
    fn default() -> Self {
        Self {
            sizes: vec![2],
            iters: 1000,
            duration: None,
            inline_size: 0,
            mtu: None,
            outs: 0,
            path: PathConfig::default(),
            rx_depth: DEFAULT_RX_DEPTH,
        }
    }
}

impl LatConfig {
    /// Checks every limit that does not depend on the device, with the
    /// same rules and flag names as [`BwConfig::validate`].
    ///
    /// # Errors
    /// The first violated limit, naming its flag.
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate_run(&self.sizes, self.iters, self.duration, self.mtu)?;
        validate_outs(self.outs)?;
        if self.rx_depth == 0 || self.rx_depth > MAX_RX_DEPTH {
            return Err(ConfigError {
                flag: "-r/--rx-depth",
                message: format!("rx depth {} is outside 1..={}", self.rx_depth, MAX_RX_DEPTH),
            });
        }
        self.path.validate()
    }

    /// Largest message size of the run.
    pub fn max_size(&self) -> u64 {
        self.sizes.iter().copied().max().unwrap_or(0)
    }

    /// Bytes of buffer each side registers: the largest message rounded up
    /// to a whole cache line (64 B), and at least one cache line.
    pub fn buffer(&self) -> u64 {
        (self.max_size().div_ceil(CACHE_LINE) * CACHE_LINE).max(CACHE_LINE)
    }
}

impl TestConfig for LatConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        LatConfig::validate(self)
    }
    fn sizes(&self) -> &[u64] {
        &self.sizes
    }
    fn mtu(&self) -> Option<u32> {
        self.mtu
    }
    fn path(&self) -> &PathConfig {
        &self.path
    }
    fn outs(&self) -> u32 {
        self.outs
    }
    fn set_outs(&mut self, outs: u32) {
        self.outs = outs;
    }
    fn record(&self) -> ConfigRecord {
        ConfigRecord::Lat(self.clone())
    }
    fn check_offer(&self, qps: usize) -> Result<(), String> {
        if qps != 1 {
            return Err(format!(
                "a latency test uses one QP, the client offers {qps}"
            ));
        }
        Ok(())
    }
    fn phase_budget(&self, size: u64) -> std::time::Duration {
        // A round trip is two messages (a read's request and response).
        phase_budget(self.iters, self.duration, 2, size)
    }
}

/// Lowest value the histogram tells apart, nanoseconds.
/// The test configuration, as the client sent it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ConfigRecord {
    /// A bandwidth test.
    Bw(BwConfig),
    /// A latency test.
    Lat(LatConfig),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qps_share_as_few_cqs_as_hold_them() {
        // 1024 QPs of 128 + 512 entries on a 131071-entry CQ (mlx5's
        // max_cqe 4194303 is larger): 204 a CQ, 6 CQs, as even as can be.
        let g = cq_groups(1024, 640, 131_071).unwrap();
        assert_eq!(g.len(), 6);
        assert_eq!(g.iter().sum::<u32>(), 1024);
        assert!(g.iter().all(|&n| n == 170 || n == 171), "{g:?}");
        // Room for all in one (one entry kept per CQ).
        assert_eq!(cq_groups(4, 128, 513), Some(vec![4]));
        assert_eq!(cq_groups(4, 128, 512), Some(vec![2, 2]));
        // No QP at all still gets its CQ; a QP larger than a CQ fits none.
        assert_eq!(cq_groups(0, 128, 1024), Some(vec![0]));
        assert_eq!(cq_groups(1, 1024, 1024), None);
        assert_eq!(cq_groups(1, 1, 0), None);
    }

    #[test]
    fn set_up_may_take_a_tenth_of_a_second_per_qp_beyond_the_timeout() {
        let t = std::time::Duration::from_secs(15);
        assert_eq!(setup_budget(1, t), std::time::Duration::from_millis(15_100));
        assert_eq!(
            setup_budget(1024, t),
            std::time::Duration::from_millis(117_400)
        );
        assert!(setup_budget(MAX_QPS, t) < std::time::Duration::from_secs(30 * 60));
    }

    #[test]
    fn large_messages_ask_for_a_completion_at_least_every_mib() {
        assert_eq!(signal_interval(100, 1, 65536), 16);
        assert_eq!(signal_interval(100, 1, 4096), 100);
        assert_eq!(signal_interval(100, 1, 4 << 20), 1);
        assert_eq!(signal_interval(100, 1, 8 << 20), 1);
        assert_eq!(signal_interval(1, 1, 2), 1);
        assert_eq!(
            signal_interval(8, 8, 8 << 20),
            8,
            "a post list keeps its moderation"
        );
        assert_eq!(signal_interval(100, 1, 0), 100);
    }

    #[test]
    fn rx_depth_follows_perftests_force_dependecies() {
        // DEF_RX_SEND, clamped to the iterations, made even.
        assert_eq!(effective_rx_depth(DEFAULT_RX_DEPTH, Some(1000)), 512);
        assert_eq!(effective_rx_depth(512, Some(100)), 100);
        assert_eq!(effective_rx_depth(512, Some(5)), 6);
        assert_eq!(effective_rx_depth(33, None), 34);
        assert_eq!(effective_rx_depth(16384, None), 16384);
        let c = BwConfig {
            rx_depth: 0,
            ..BwConfig::default()
        };
        assert_eq!(c.validate().unwrap_err().flag, "-r/--rx-depth");
        let c = BwConfig {
            rx_depth: 16385,
            ..BwConfig::default()
        };
        assert!(c.validate().unwrap_err().message.contains("1..=16384"));
        let c = BwConfig {
            qps: 16384,
            tx_depth: 1,
            cq_mod: 1,
            rx_depth: 16384,
            ..BwConfig::default()
        };
        // The receive rings (created only where a side receives) are
        // bounded by the server's --max-mem estimate, not here.
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(recv_ring_bytes(2, 512), 2 * 512 * 128);
        assert_eq!(recv_ring_bytes(u32::MAX, u32::MAX), u64::MAX);
    }

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("65536"), Ok(65536));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert!(parse_size("").is_err());
        assert!(parse_size("12X").unwrap_err().contains("12X"));
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999999999999G").is_err());
    }

    fn flag_of(c: &BwConfig) -> &'static str {
        c.validate().unwrap_err().flag
    }

    #[test]
    fn perftest_defaults_are_valid() {
        BwConfig::default().validate().unwrap();
        let all = BwConfig {
            sizes: sweep_sizes(),
            ..BwConfig::default()
        };
        all.validate().unwrap();
        assert_eq!(all.sizes.first(), Some(&2));
        assert_eq!(all.sizes.last(), Some(&(8 << 20)));
        assert_eq!(all.sizes.len(), 23);
    }

    #[test]
    fn each_bad_value_names_its_flag() {
        let d = BwConfig::default();
        assert_eq!(
            flag_of(&BwConfig {
                sizes: vec![0],
                ..d.clone()
            }),
            "-s/--size"
        );
        assert_eq!(
            flag_of(&BwConfig {
                sizes: vec![MAX_SIZE + 1],
                ..d.clone()
            }),
            "-s/--size"
        );
        assert_eq!(
            flag_of(&BwConfig {
                tx_depth: 0,
                ..d.clone()
            }),
            "-t/--tx-depth"
        );
        assert_eq!(
            flag_of(&BwConfig {
                tx_depth: 64,
                cq_mod: 100,
                ..d.clone()
            }),
            "-Q/--cq-mod"
        );
        assert_eq!(
            flag_of(&BwConfig {
                qps: 0,
                ..d.clone()
            }),
            "-q/--qp"
        );
        assert_eq!(
            flag_of(&BwConfig {
                qps: 2,
                threads: 3,
                ..d.clone()
            }),
            "--threads"
        );
        assert_eq!(
            flag_of(&BwConfig {
                iters: 3,
                ..d.clone()
            }),
            "-n/--iters"
        );
        assert_eq!(
            flag_of(&BwConfig {
                post_list: 3,
                ..d.clone()
            }),
            "-n/--iters"
        );
        assert_eq!(
            flag_of(&BwConfig {
                mtu: Some(1500),
                ..d.clone()
            }),
            "-m/--mtu"
        );
        let dur = Some(DurationMode {
            seconds: 4.0,
            margin: 2.0,
        });
        assert_eq!(
            flag_of(&BwConfig {
                duration: dur,
                ..d.clone()
            }),
            "-D/--duration"
        );
        let dur = Some(DurationMode {
            seconds: 5.0,
            margin: 2.0,
        });
        BwConfig {
            duration: dur,
            ..d.clone()
        }
        .validate()
        .unwrap();
        let sweep = BwConfig {
            duration: dur,
            sizes: sweep_sizes(),
            ..d.clone()
        };
        assert_eq!(flag_of(&sweep), "-D/--duration");
        let e = BwConfig {
            tx_depth: 64,
            cq_mod: 100,
            ..d
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.to_string().split(':').next(), Some("-Q/--cq-mod"));
        assert!(e.message.contains("100") && e.message.contains("64"));
    }

    #[test]
    fn memory_needed_counts_areas_and_qps() {
        let c = BwConfig {
            qps: 4,
            sizes: vec![65536],
            ..BwConfig::default()
        };
        assert_eq!(c.memory_needed(false), 4 * 65536);
        assert_eq!(c.memory_needed(true), 8 * 65536);
        let small = BwConfig {
            sizes: vec![2],
            ..BwConfig::default()
        };
        assert_eq!(small.buffer_per_qp(), RING_BYTES);
    }

    #[test]
    fn threads_split_qps_evenly_and_cover_all() {
        let c = BwConfig {
            qps: 7,
            threads: 3,
            ..BwConfig::default()
        };
        let parts: Vec<_> = (0..3).map(|t| c.qps_of_thread(t)).collect();
        assert_eq!(parts, vec![0..3, 3..5, 5..7]);
    }

    #[test]
    fn small_messages_rotate_through_aligned_ring_slots() {
        assert_eq!(ring_offset(2, 0), 0);
        assert_eq!(ring_offset(2, 1), 64);
        assert_eq!(ring_offset(2, 64), 0);
        assert_eq!(ring_offset(100, 1), 128);
        assert_eq!(ring_offset(65536, 5), 0);
        for i in 0..1000 {
            let off = ring_offset(1000, i);
            assert!(off + 1000 <= RING_BYTES && off.is_multiple_of(CACHE_LINE));
        }
    }

    #[test]
    fn a_ring_spans_every_slot_it_hands_out_and_no_more_than_an_area() {
        for size in [1, 2, 8, 63, 64, 65, 100, 1000, 2048, 2049, 4096, 65536] {
            let ring = Ring::for_size(size);
            let span = ring.span(size);
            assert!(span <= size.max(RING_BYTES), "size {size}: span {span}");
            let mut last = 0;
            for i in 0..ring_slots(size) * 2 {
                let off = ring.offset(i);
                assert_eq!(off, ring_offset(size, i));
                assert!(off + size <= span, "size {size}, message {i}");
                last = last.max(off + size);
            }
            assert_eq!(last, span, "size {size}: the span is the last slot's end");
        }
    }

    #[test]
    fn config_defaults_and_flags() {
        let d = LatConfig::default();
        d.validate().unwrap();
        assert_eq!(d.sizes, vec![2]);
        assert_eq!(d.iters, 1000);
        assert_eq!(d.buffer(), 64);
        let flag = |c: LatConfig| c.validate().unwrap_err().flag;
        assert_eq!(
            flag(LatConfig {
                sizes: vec![],
                ..d.clone()
            }),
            "-s/--size"
        );
        assert_eq!(
            flag(LatConfig {
                sizes: vec![MAX_SIZE + 1],
                ..d.clone()
            }),
            "-s/--size"
        );
        assert_eq!(
            flag(LatConfig {
                iters: MIN_ITERS - 1,
                ..d.clone()
            }),
            "-n/--iters"
        );
        assert_eq!(
            flag(LatConfig {
                mtu: Some(1500),
                ..d.clone()
            }),
            "-m/--mtu"
        );
        let dur = |seconds, margin| Some(DurationMode { seconds, margin });
        assert_eq!(
            flag(LatConfig {
                duration: dur(4.0, 2.0),
                ..d.clone()
            }),
            "-D/--duration"
        );
        assert_eq!(
            flag(LatConfig {
                duration: dur(4.0, -1.0),
                ..d.clone()
            }),
            "-f/--margin"
        );
        assert_eq!(
            flag(LatConfig {
                duration: dur(5.0, 2.0),
                sizes: sweep_sizes(),
                ..d.clone()
            }),
            "-D/--duration"
        );
        // Duration mode ignores the iteration count.
        LatConfig {
            duration: dur(5.0, 2.0),
            iters: 0,
            ..d.clone()
        }
        .validate()
        .unwrap();
        let big = LatConfig {
            sizes: vec![2, 100, 8 << 20],
            ..d
        };
        assert_eq!(big.max_size(), 8 << 20);
        assert_eq!(big.buffer(), 8 << 20);
        let odd = LatConfig {
            sizes: vec![100],
            ..LatConfig::default()
        };
        assert_eq!(odd.buffer(), 128);
    }
}

#[cfg(test)]
mod peer_bounds {
    use super::*;

    #[test]
    fn phase_budgets_follow_the_run_and_stay_representable() {
        let d = BwConfig::default();
        // 5000 × 64 KiB: 25 s of messages (5 ms each) plus 81.9 s of bytes
        // at the floors.
        let b = d.phase_budget(65536).as_secs_f64();
        assert!((b - (25.0 + 5000.0 * 65536.0 / 4e6)).abs() < 1e-6, "{b}");
        let bidir = BwConfig {
            bidirectional: true,
            ..d.clone()
        };
        assert!((bidir.phase_budget(65536).as_secs_f64() - 2.0 * b).abs() < 1e-6);
        let timed = BwConfig {
            duration: Some(DurationMode {
                seconds: 7.0,
                margin: 1.0,
            }),
            ..d.clone()
        };
        assert_eq!(
            timed.phase_budget(8 << 20),
            std::time::Duration::from_secs(7)
        );
        let huge = BwConfig {
            iters: MAX_ITERS,
            qps: MAX_QPS,
            ..d
        };
        assert_eq!(
            huge.phase_budget(MAX_SIZE),
            std::time::Duration::from_secs_f64(MAX_PHASE_S)
        );
        // Whatever the inputs, a deadline of now + budget exists.
        let far = std::time::Instant::now().checked_add(huge.phase_budget(MAX_SIZE));
        assert!(far.is_some());
    }

    #[test]
    fn rings_are_counted_and_the_queue_product_is_capped() {
        // 1 QP, depth 128, no inline, one CQ: 128 SQ blocks, one RQ entry,
        // 129 CQEs.
        assert_eq!(ring_bytes(1, 1, 128, 0), (128 + 1 + 129) * 64);
        // Inline data rounds up to blocks: 220 bytes are 4 more.
        assert_eq!(ring_bytes(1, 1, 1, 220), (5 + 1 + 2) * 64);
        assert_eq!(ring_bytes(u32::MAX, u32::MAX, u32::MAX, u32::MAX), u64::MAX);
        let c = BwConfig {
            qps: 16384,
            tx_depth: 15000,
            cq_mod: 1,
            ..BwConfig::default()
        };
        let e = c.validate().unwrap_err();
        assert_eq!(e.flag, "-t/--tx-depth");
        assert!(e.message.contains("245760000 send-queue entries"), "{e}");
        let ok = BwConfig {
            qps: 16384,
            tx_depth: 256,
            ..BwConfig::default()
        };
        assert_eq!(ok.validate(), Ok(()));
    }

    #[test]
    fn a_peer_cannot_ask_for_an_unbounded_run() {
        let d = BwConfig::default();
        let e = BwConfig {
            iters: u64::MAX,
            ..d.clone()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.flag, "-n/--iters");
        let e = BwConfig {
            duration: Some(DurationMode {
                seconds: 1e20,
                margin: 1.0,
            }),
            ..d.clone()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.flag, "-D/--duration");
        let e = BwConfig {
            sizes: vec![2; MAX_SIZES + 1],
            ..d
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.flag, "-s/--size");
    }
}
