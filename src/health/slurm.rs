//! `--slurm-drain`: asks `scontrol` for this node's state and drains or
//! resumes it as `engine::health::drain` decides. `scontrol` comes from
//! `PATH`; each call is bounded ([`SCONTROL_TIMEOUT`]). slurmd does not
//! give a `HealthCheckProgram` `SLURM_CONF` (measured in the VM): a site
//! whose slurm.conf is not in the default place exports it in a wrapper
//! (docs/health.md).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use engine::health::Status;
use engine::health::drain::{DrainAction, decide, parse_show_node};

/// The bound on one `scontrol` call.
pub const SCONTROL_TIMEOUT: Duration = Duration::from_secs(10);

/// What `--slurm-drain` did, for the report.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DrainOutcome {
    /// The node's name in Slurm.
    pub node: String,
    /// `drain`, `resume`, `nothing` or `error`.
    pub action: &'static str,
    /// In words.
    pub detail: String,
}

/// Runs `scontrol ARGS` bounded by [`SCONTROL_TIMEOUT`]; its stdout.
fn scontrol(args: &[&str]) -> Result<String, String> {
    let mut child = Command::new("scontrol")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run scontrol: {e}"))?;
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if started.elapsed() < SCONTROL_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "scontrol {} did not answer within {} s",
                    args.first().copied().unwrap_or_default(),
                    SCONTROL_TIMEOUT.as_secs()
                ));
            }
            Err(e) => return Err(format!("scontrol: {e}")),
        }
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("scontrol: {e}"))?;
    let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_owned();
    if out.status.success() {
        Ok(text(&out.stdout))
    } else {
        Err(format!(
            "scontrol {} failed ({}): {}",
            args.first().copied().unwrap_or_default(),
            out.status,
            text(&out.stderr)
        ))
    }
}

/// Drains or resumes `node` for `verdict` (with its one-line `reason`).
pub fn apply(node: &str, verdict: Status, reason: Option<&str>) -> DrainOutcome {
    let outcome = |action, detail: String| DrainOutcome {
        node: node.to_owned(),
        action,
        detail,
    };
    if verdict == Status::Unknown {
        // Not even asked: nothing is done on UNKNOWN.
        let why = match decide(verdict, reason, &Default::default()) {
            DrainAction::Nothing { why } => why,
            other => format!("{other:?}"),
        };
        return outcome("nothing", why);
    }
    let shown = match scontrol(&["show", "node", node]) {
        Ok(s) => s,
        Err(e) => return outcome("error", e),
    };
    let Some(state) = parse_show_node(&shown) else {
        return outcome(
            "error",
            format!("scontrol show node {node}: no State= in its answer"),
        );
    };
    match decide(verdict, reason, &state) {
        DrainAction::Drain { reason } => {
            let reason_arg = format!("Reason={reason}");
            match scontrol(&[
                "update",
                &format!("NodeName={node}"),
                "State=DRAIN",
                &reason_arg,
            ]) {
                Ok(_) => outcome("drain", format!("drained {node}: {reason}")),
                Err(e) => outcome("error", e),
            }
        }
        DrainAction::Resume => {
            match scontrol(&["update", &format!("NodeName={node}"), "State=RESUME"]) {
                Ok(_) => outcome(
                    "resume",
                    format!(
                        "resumed {node} (was drained: {})",
                        state.reason.as_deref().unwrap_or("")
                    ),
                ),
                Err(e) => outcome("error", e),
            }
        }
        DrainAction::Nothing { why } => outcome("nothing", why),
    }
}
