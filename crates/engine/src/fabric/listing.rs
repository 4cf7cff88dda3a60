//! The device inventory printed by `--list-devices`: devices, their ports
//! and GID tables, as plain data, and the writers that print it.

use std::io::{self, Write};

use serde::Serialize;

use crate::fabric::gid::{self, GidKind};

pub use crate::results::record::SCHEMA_VERSION;

/// One device.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceListing {
    /// Kernel name, e.g. `mlx5_0`.
    pub name: String,
    /// Node GUID (host order).
    pub node_guid: u64,
    /// Firmware version.
    pub fw_ver: String,
    /// Vendor id.
    pub vendor_id: u32,
    /// Its ports (possibly filtered to one).
    pub ports: Vec<PortListing>,
}

/// One port.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PortListing {
    /// Port number (1-based).
    pub port: u8,
    /// Logical state, e.g. `ACTIVE`.
    pub state: String,
    /// `IB` or `Ethernet`.
    pub link_layer: String,
    /// Active MTU in bytes.
    pub active_mtu: u32,
    /// Maximum MTU in bytes.
    pub max_mtu: u32,
    /// Local identifier (0 on RoCE).
    pub lid: u16,
    /// Lane count, when known.
    pub lanes: Option<u32>,
    /// Speed generation name (`HDR`, `NDR`, …), when known.
    pub speed: Option<String>,
    /// Data rate in Gb/s (lanes × per-lane rate), when known.
    pub rate_gbps: Option<f64>,
    /// Valid GIDs.
    pub gids: Vec<GidListing>,
}

/// One valid GID table entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GidListing {
    /// Index in the table.
    pub index: u32,
    /// Raw bytes.
    #[serde(skip)]
    pub bytes: [u8; 16],
    /// IPv6 notation.
    pub gid: String,
    /// IB / RoCE v1 / RoCE v2.
    #[serde(rename = "type")]
    pub kind: GidKind,
    /// The IPv4 address of an IPv4-mapped GID.
    pub ipv4: Option<String>,
}

impl GidListing {
    /// Builds an entry from raw bytes, deriving the printable forms.
    pub fn new(index: u32, bytes: [u8; 16], kind: GidKind) -> Self {
        Self {
            index,
            bytes,
            gid: gid::to_ipv6_string(&bytes),
            kind,
            ipv4: gid::ipv4_of(&bytes).map(|a| a.to_string()),
        }
    }
}

/// Writes a device inventory in one output format.
pub trait ListingWriter {
    /// Writes every device to `out`.
    ///
    /// # Errors
    /// The I/O error of `out`.
    fn write(&self, out: &mut dyn Write, devices: &[DeviceListing]) -> io::Result<()>;
}

/// Human-readable text, one block per device.
#[derive(Debug, Clone, Copy, Default)]
pub struct Text;

fn guid_string(guid: u64) -> String {
    let b = guid.to_be_bytes();
    format!(
        "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
    )
}

impl ListingWriter for Text {
    fn write(&self, out: &mut dyn Write, devices: &[DeviceListing]) -> io::Result<()> {
        for d in devices {
            writeln!(
                out,
                "{}  node_guid {}  fw {}  vendor {:#x}",
                d.name,
                guid_string(d.node_guid),
                d.fw_ver,
                d.vendor_id
            )?;
            for p in &d.ports {
                let rate = match (p.rate_gbps, p.lanes, &p.speed) {
                    (Some(r), Some(l), Some(s)) => format!("{r} Gb/s ({l}X {s})"),
                    _ => "unknown".to_owned(),
                };
                writeln!(
                    out,
                    "  port {}  {}  {}  mtu {} (max {})  lid {}  rate {}",
                    p.port, p.state, p.link_layer, p.active_mtu, p.max_mtu, p.lid, rate
                )?;
                if p.gids.is_empty() {
                    writeln!(out, "    no valid GID")?;
                }
                for g in &p.gids {
                    writeln!(out, "    gid {:<3} {:<40} {}", g.index, g.gid, g.kind)?;
                }
            }
        }
        Ok(())
    }
}

/// JSON lines: one object per device, with `schema_version`.
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonLines;

#[derive(Serialize)]
struct Line<'a> {
    schema_version: u32,
    kind: &'static str,
    #[serde(flatten)]
    device: &'a DeviceListing,
}

impl ListingWriter for JsonLines {
    fn write(&self, out: &mut dyn Write, devices: &[DeviceListing]) -> io::Result<()> {
        for device in devices {
            let line = Line {
                schema_version: SCHEMA_VERSION,
                kind: "device",
                device,
            };
            serde_json::to_writer(&mut *out, &line)?;
            out.write_all(b"\n")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rxe() -> DeviceListing {
        let mut ll = [0u8; 16];
        ll[..2].copy_from_slice(&[0xfe, 0x80]);
        ll[8..].copy_from_slice(&[0x02, 0x24, 0x13, 0xff, 0xfe, 0xc5, 0x51, 0x8f]);
        DeviceListing {
            name: "rxe0".into(),
            node_guid: 0x0024_13ff_fec5_518f,
            fw_ver: "0.0.0".into(),
            vendor_id: 0xff_ffff,
            ports: vec![PortListing {
                port: 1,
                state: "ACTIVE".into(),
                link_layer: "Ethernet".into(),
                active_mtu: 1024,
                max_mtu: 4096,
                lid: 0,
                lanes: Some(1),
                speed: Some("FDR10".into()),
                rate_gbps: Some(10.0),
                gids: vec![GidListing::new(0, ll, GidKind::RoceV2)],
            }],
        }
    }

    #[test]
    fn text_shows_device_port_and_gids() {
        let mut out = Vec::new();
        Text.write(&mut out, &[rxe()]).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "rxe0  node_guid 0024:13ff:fec5:518f  fw 0.0.0  vendor 0xffffff\n\
             \x20 port 1  ACTIVE  Ethernet  mtu 1024 (max 4096)  lid 0  rate 10 Gb/s (1X FDR10)\n\
             \x20   gid 0   fe80::224:13ff:fec5:518f                 RoCE v2\n"
        );
    }

    #[test]
    fn json_lines_carry_schema_and_fields() {
        let mut out = Vec::new();
        JsonLines.write(&mut out, &[rxe(), rxe()]).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(v["schema_version"], 1);
        assert_eq!(v["kind"], "device");
        assert_eq!(v["name"], "rxe0");
        assert_eq!(v["ports"][0]["state"], "ACTIVE");
        assert_eq!(v["ports"][0]["active_mtu"], 1024);
        assert_eq!(v["ports"][0]["rate_gbps"], 10.0);
        assert_eq!(v["ports"][0]["gids"][0]["type"], "RoCE v2");
        assert_eq!(v["ports"][0]["gids"][0]["gid"], "fe80::224:13ff:fec5:518f");
        assert!(v["ports"][0]["gids"][0]["ipv4"].is_null());
    }
}
