//! The sysfs reads behind the link verdict: a port's negotiated `rate` and
//! its error counters, under a sysfs root (normally `/sys`; tests pass a
//! fixture tree). The engine's `link` module classifies and judges what is
//! read here; it reads nothing itself.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use engine::link::{
    CounterSnapshot, LinkError, LinkRate, is_error_counter, parse_counter, parse_rate,
};

/// `<sysfs_root>/class/infiniband/<device>/ports/<port>`.
pub fn port_dir(sysfs_root: &Path, device: &str, port: u8) -> PathBuf {
    sysfs_root
        .join("class/infiniband")
        .join(device)
        .join("ports")
        .join(port.to_string())
}

/// Reads and parses the port's `rate` file.
///
/// # Errors
/// [`LinkError::ReadRate`] or [`LinkError::BadRate`], both naming the
/// file.
pub fn read_rate(sysfs_root: &Path, device: &str, port: u8) -> Result<LinkRate, LinkError> {
    let path = port_dir(sysfs_root, device, port).join("rate");
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(source) => return Err(LinkError::ReadRate { path, source }),
    };
    parse_rate(&text).map_err(|e| match e {
        LinkError::BadRate { text, .. } => LinkError::BadRate {
            text,
            path: Some(path),
        },
        other => other,
    })
}

/// Adds the error counters found in `<port dir>/<sub>` to `into`, keyed
/// `<sub>/<name>`. A missing directory or an unreadable counter is skipped.
fn collect(dir: &Path, sub: &str, into: &mut BTreeMap<String, u64>) {
    let Ok(entries) = fs::read_dir(dir.join(sub)) else {
        return;
    };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(name) = file_name.to_str() else {
            continue;
        };
        if !is_error_counter(sub, name) {
            continue;
        }
        let Ok(text) = fs::read_to_string(entry.path()) else {
            continue;
        };
        if let Some(value) = parse_counter(&text) {
            into.insert(format!("{sub}/{name}"), value);
        }
    }
}

/// Reads every error counter of the port. Counters that are absent,
/// unreadable (permissions, `EINVAL`) or not numbers (`N/A (no PMA)` on
/// old kernels) are left out; a port without counters yields an empty
/// snapshot.
pub fn snapshot_error_counters(sysfs_root: &Path, device: &str, port: u8) -> CounterSnapshot {
    let dir = port_dir(sysfs_root, device, port);
    let mut counters = BTreeMap::new();
    collect(&dir, "counters", &mut counters);
    collect(&dir, "hw_counters", &mut counters);
    CounterSnapshot { counters }
}
