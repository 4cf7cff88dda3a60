//! Opening a device and choosing port, GID and MTU the way perftest does,
//! with every bad choice reported as a usage error naming the flag.

use anyhow::Context as _;
use engine::bench::device::{DeviceFacts, Needs, Transport, refusal};
use engine::bench::spec::TestSpec;
use engine::fabric::gid::{self, GidCandidate};
use engine::proto::wire::SideInfo;
use verbs::{Context, Mtu, PortAttributes};

use crate::UsageError;
use crate::inventory::gid_kind;

/// A device opened on an active port with a chosen GID (a clone shares
/// the open device).
#[derive(Debug, Clone)]
pub struct Port {
    /// The open device.
    pub ctx: Context,
    /// Port number.
    pub port: u8,
    /// Its attributes at open time.
    pub attr: PortAttributes,
    /// GID index (None on InfiniBand when not asked for).
    pub gid_index: Option<u32>,
    /// The GID at that index (zero when none).
    pub gid: [u8; 16],
}

/// Opens `device` (or the first device), checks that `port` is ACTIVE,
/// and picks the GID index: `-x` when given (must exist), else perftest's
/// scoring on Ethernet ports, none on InfiniBand.
///
/// # Errors
/// Usage errors naming `-d`, `-i` or `-x`; device errors otherwise.
pub fn open_port(
    device: Option<&str>,
    port: Option<u8>,
    gid_index: Option<u32>,
) -> anyhow::Result<Port> {
    let name = match device {
        Some(d) => d.to_owned(),
        None => verbs::devices()?
            .into_iter()
            .next()
            .map(|d| d.name)
            .ok_or_else(verbs::Error::no_devices)?,
    };
    let ctx = Context::open(&name).map_err(|e| match e {
        verbs::Error::NoSuchDevice { .. } => {
            anyhow::Error::new(UsageError(format!("-d/--ib-dev: {e}")))
        }
        other => other.into(),
    })?;
    let port = port.unwrap_or(1);
    let attr = ctx.query_port(port).map_err(|e| match e {
        verbs::Error::NoSuchPort { .. } => {
            anyhow::Error::new(UsageError(format!("-i/--ib-port: {e}")))
        }
        other => other.into(),
    })?;
    if !attr.is_active() {
        return Err(UsageError(format!(
            "-i/--ib-port: {name} port {port} is {}, not ACTIVE",
            attr.state
        ))
        .into());
    }
    let chosen = match gid_index {
        Some(i) => Some(i),
        None if attr.link_layer.is_ethernet() => {
            let candidates: Vec<GidCandidate> = ctx
                .gid_table()
                .context("reading the GID table")?
                .into_iter()
                .filter(|g| g.port == port)
                .map(|g| GidCandidate {
                    index: g.gid_index,
                    bytes: g.gid.0,
                    kind: gid_kind(g.gid_type),
                })
                .collect();
            Some(
                gid::best_index(&candidates, gid::Family::Ipv4).ok_or_else(|| {
                    UsageError(format!(
                        "-x/--gid-index: {name} port {port} has no valid GID"
                    ))
                })?,
            )
        }
        None => None,
    };
    let gid = match chosen {
        Some(i) => {
            ctx.gid(port, i)
                .map_err(|e| match e {
                    verbs::Error::NoSuchGid { .. } => {
                        anyhow::Error::new(UsageError(format!("-x/--gid-index: {e}")))
                    }
                    other => other.into(),
                })?
                .gid
                .0
        }
        None => [0; 16],
    };
    Ok(Port {
        ctx,
        port,
        attr,
        gid_index: chosen,
        gid,
    })
}

impl Port {
    /// Refuses, before anything is created on the device, a test it
    /// cannot run (`engine::bench::device::refusal`: atomics without
    /// atomic support; immediate data, or connecting without rdma_cm, on
    /// iWARP).
    ///
    /// # Errors
    /// A usage error naming the flag or the test; a device error when the
    /// device cannot be queried.
    pub fn refuse_unsupported(
        &self,
        spec: TestSpec,
        immediate: Option<&'static str>,
    ) -> anyhow::Result<()> {
        let facts = DeviceFacts {
            name: self.ctx.name(),
            transport: match self.ctx.transport() {
                verbs::Transport::InfiniBand => Transport::InfiniBand,
                verbs::Transport::Iwarp => Transport::Iwarp,
                verbs::Transport::Other(_) => Transport::Other,
            },
            atomics: self.ctx.query_device()?.atomic_cap.is_supported(),
        };
        let needs = Needs {
            binary: spec.binary(),
            atomics: spec.is_atomic(),
            immediate,
            // -R is not supported yet (perftest_flags refuses it).
            rdma_cm: false,
        };
        match refusal(&facts, &needs) {
            Some(why) => Err(UsageError(why).into()),
            None => Ok(()),
        }
    }

    /// What the peer learns about this side.
    pub fn side_info(&self, sysfs_rate: Option<String>) -> SideInfo {
        SideInfo {
            device: self.ctx.name().to_owned(),
            port: self.port,
            gid_index: self.gid_index,
            gid: self.gid,
            mtu: self.attr.active_mtu.bytes(),
            link_layer: self.attr.link_layer.to_string(),
            rate: sysfs_rate,
            max_rd_atom: self
                .ctx
                .query_device()
                .ok()
                .and_then(|d| u32::try_from(d.max_qp_rd_atom).ok())
                .unwrap_or(0),
        }
    }

    /// The path MTU for a requested value (`-m`), checked against the
    /// active MTU.
    ///
    /// # Errors
    /// A usage error naming `-m/--mtu`.
    pub fn mtu_for(&self, requested: Option<u32>) -> anyhow::Result<Mtu> {
        match requested {
            None => Ok(self.attr.active_mtu),
            Some(bytes) => {
                let mtu = Mtu::from_bytes(bytes).ok_or_else(|| {
                    UsageError(format!(
                        "-m/--mtu: {bytes} is not 256, 512, 1024, 2048 or 4096"
                    ))
                })?;
                if mtu > self.attr.active_mtu {
                    // perftest: "Requested mtu is higher than active mtu",
                    // and it runs at the active MTU.
                    eprintln!(
                        "note: -m/--mtu {bytes} is above the active MTU {} of {} port {}; using {} (as perftest)",
                        self.attr.active_mtu.bytes(),
                        self.ctx.name(),
                        self.port,
                        self.attr.active_mtu.bytes()
                    );
                    return Ok(self.attr.active_mtu);
                }
                Ok(mtu)
            }
        }
    }
}
