//! Pieces both tests share around the handshake: protocol error messages,
//! the JSON description of a side, progress on a terminal.

use std::io::{self, IsTerminal};
use std::path::Path;

use anyhow::anyhow;
use engine::link;
use engine::wire::{Message, SideInfo};

use crate::setup::Port;

/// Describes a side in JSON reports.
pub fn side_json(s: &SideInfo) -> serde_json::Value {
    serde_json::json!({
        "device": s.device,
        "port": s.port,
        "gid_index": s.gid_index,
        "gid": engine::gid::to_ipv6_string(&s.gid),
        "mtu": s.mtu,
        "link_layer": s.link_layer,
        "rate": s.rate,
    })
}

/// Shows progress on stderr, only when it is a terminal.
pub fn progress(msg: &str) {
    if io::stderr().is_terminal() {
        eprint!("\r{msg}\x1b[K");
    }
}

/// The error for an unexpected message (a `Reject` carries its reason).
pub fn expect_msg(got: Message, want: &str) -> anyhow::Error {
    match got {
        Message::Reject { reason } => anyhow!("the peer refused the test: {reason}"),
        other => anyhow!("protocol error: expected {want}, got {}", other.name()),
    }
}

/// The port's negotiated rate text from sysfs, when readable.
pub fn sysfs_rate(sysfs_root: &Path, port: &Port) -> Option<String> {
    link::read_rate(sysfs_root, port.ctx.name(), port.port)
        .ok()
        .map(|r| r.text)
}
