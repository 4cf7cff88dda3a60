//! The threads of one message size's run: [`measure`] starts a worker
//! thread per group of QPs behind one [`StartGate`] (all start together,
//! or none does), samples the system's CPU when asked, and sums the
//! threads' outcomes into one [`Measurement`].

use std::time::{Duration, Instant};

use anyhow::bail;
use engine::results::bw::Measurement;

use super::ops::BwOp;
use super::worker::{SizeRun, StartGate, ThreadOutcome, Worker};
use crate::measure::credit::QpCredits;
use crate::oob::PeerWatch;

/// Measures one message size: every worker thread drives its QPs, all
/// start together; `watch` tells them when the peer is gone.
///
/// # Errors
/// A failed completion (naming QPN and status), a post failure, a
/// received message of another size, or no progress within `timeout`.
pub fn measure<O: BwOp>(
    op: O,
    run: SizeRun<'_>,
    watch: &PeerWatch,
    mut credits: Option<&mut [QpCredits]>,
) -> anyhow::Result<(Measurement, Vec<(u32, u64)>)> {
    let SizeRun {
        plan,
        side,
        cfg,
        size,
        remote,
        system_cpu,
        ..
    } = run;
    let start = StartGate::default();
    let wall = Instant::now();
    let cpu_before = cpu_time_ns();
    let (not_started, outcomes, system_cpu_pct) = std::thread::scope(|s| {
        let mut handles = Vec::with_capacity(cfg.threads as usize);
        let mut not_started = None;
        for t in 0..cfg.threads {
            let range = cfg.qps_of_thread(t);
            let start = &start;
            // This thread's QPs' credits: the front of what is left.
            let mine = credits.take().map(|c| {
                let (mine, rest) = c.split_at_mut(range.len().min(c.len()));
                credits = Some(rest);
                mine
            });
            let spawned = std::thread::Builder::new()
                .name(format!("worker-{t}"))
                .spawn_scoped(s, move || {
                    let (lo, hi) = (range.start as usize, range.end as usize);
                    let worker = Worker {
                        op,
                        plan,
                        qps: &side.qps[lo..hi],
                        cqs: side.cqs_of_thread(t as usize),
                        working: (lo..hi).map(|q| side.working(q)).collect(),
                        exposed: (lo..hi).map(|q| side.exposed(q)).collect(),
                        remote: &remote[lo..hi],
                        lkey: side.lkey(),
                        region: side.region(),
                    };
                    worker.run(&run, start, watch, mine)
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    not_started = Some((t, e));
                    break;
                }
            }
        }
        // Every worker starts together, or none does: a thread that could
        // not be created must not leave the others waiting for it.
        start.open(not_started.is_none());
        let system_cpu_pct = match cfg.duration {
            Some(d) if system_cpu && not_started.is_none() => sample_system_cpu(d, &handles),
            _ => None,
        };
        let outcomes: Vec<anyhow::Result<ThreadOutcome>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a worker thread panicked")))
            })
            .collect();
        (not_started, outcomes, system_cpu_pct)
    });
    if let Some((t, e)) = not_started {
        bail!(
            "cannot start worker thread {} of {} (--threads): {e}",
            t + 1,
            cfg.threads
        );
    }
    let cpu_ns = cpu_time_ns().saturating_sub(cpu_before);
    let wall_ns = wall.elapsed().as_nanos() as u64;
    let mut first = None::<Instant>;
    let mut last = None::<Instant>;
    let mut messages = 0u64;
    let mut operations = 0u64;
    let mut peak = 0.0;
    let mut have_peak = true;
    let mut window_ns = 0u64;
    let mut received = Vec::with_capacity(cfg.qps as usize);
    for o in outcomes {
        let o = o?;
        received.extend_from_slice(&o.received);
        first = Some(first.map_or(o.begin, |f| f.min(o.begin)));
        last = Some(last.map_or(o.end, |l| l.max(o.end)));
        messages = messages.saturating_add(o.messages);
        operations = operations.saturating_add(o.operations);
        window_ns = window_ns.max(o.elapsed_ns);
        match o.peak {
            Some(p) => peak += p,
            None => have_peak = false,
        }
    }
    if cfg.duration.is_some() && (messages == 0 || window_ns == 0) {
        bail!(
            "no message completed inside the measurement window of {size}-byte {}s \
             (duration minus both margins): lengthen -D/--duration or shorten -f/--margin",
            O::NAME
        );
    }
    let elapsed_ns = if cfg.duration.is_some() {
        window_ns
    } else {
        match (first, last) {
            (Some(f), Some(l)) => l.duration_since(f).as_nanos() as u64,
            _ => 0,
        }
    };
    let m = Measurement {
        size,
        iterations: if cfg.duration.is_some() {
            messages / u64::from(cfg.qps).max(1)
        } else {
            cfg.iters
        },
        table_iterations: if cfg.duration.is_some() {
            messages
        } else {
            cfg.iters.saturating_mul(u64::from(cfg.qps))
        },
        messages,
        elapsed_ns,
        peak_msgs_per_sec: have_peak.then_some(peak),
        cpu_ns,
        wall_ns,
        system_cpu_pct,
        operations,
    };
    Ok((m, received))
}

/// perftest's `--cpu_util` figure over the measurement window of a
/// duration run that starts now: `/proc/stat` read when the first margin
/// has passed and when the window closes. `None` when the workers end
/// first (a failure) or a signal stops the run.
fn sample_system_cpu<T>(
    d: engine::bench::config::DurationMode,
    workers: &[std::thread::ScopedJoinHandle<'_, T>],
) -> Option<f64> {
    let (total, margin) = d.spans();
    let t0 = Instant::now();
    let wait_until = |t: Instant| loop {
        let now = Instant::now();
        if now >= t {
            return true;
        }
        if workers.iter().all(|w| w.is_finished()) || crate::stop::requested().is_some() {
            return false;
        }
        std::thread::sleep((t - now).min(Duration::from_millis(50)));
    };
    if !wait_until(t0 + margin) {
        return None;
    }
    let before = crate::measure::read_proc_stat()?;
    if !wait_until(t0 + total.saturating_sub(margin)) {
        return None;
    }
    Some(engine::results::bw::system_cpu_util(
        before,
        crate::measure::read_proc_stat()?,
    ))
}

/// Process CPU time (user + system, all threads) in nanoseconds.
pub fn cpu_time_ns() -> u64 {
    use nix::sys::resource::{UsageWho, getrusage};
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(u) => {
            let tv = |t: nix::sys::time::TimeVal| {
                t.tv_sec() as u64 * 1_000_000_000 + t.tv_usec() as u64 * 1000
            };
            tv(u.user_time()) + tv(u.system_time())
        }
        Err(_) => 0,
    }
}
