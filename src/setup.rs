//! Opening a device and choosing port, GID and MTU the way perftest does,
//! with every bad choice reported as a usage error naming the flag.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use anyhow::Context as _;
use engine::bench::device::{DeviceFacts, Needs, Transport, refusal};
use engine::bench::spec::TestSpec;
use engine::fabric::gid::{self, GidCandidate};
use engine::proto::wire::SideInfo;
use verbs::{Context, Mtu, PortAttributes};

use crate::exit::UsageError;
use crate::inventory::gid_kind;
use crate::options::DeviceSelection;

/// A port found through the RDMA connection manager (`-R`), and the id
/// that found it (which holds librdmacm's device context the side's
/// memory, CQs and QPs are made on).
#[derive(Debug, Clone)]
pub enum CmEnd {
    /// Client: an id resolved to the server's address; every QP's id
    /// resolves from its local address, so all land on this device.
    Active(verbs::CmId),
    /// Server: the session's listener, on the address the client reached
    /// (port 0: the kernel's choice, sent to the client in the accept).
    Passive(verbs::CmId),
}

impl CmEnd {
    /// The id.
    pub fn id(&self) -> &verbs::CmId {
        match self {
            Self::Active(id) | Self::Passive(id) => id,
        }
    }
}

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
    /// Found through rdma_cm (`-R`): its QPs are then made on connection
    /// manager ids and connected by it.
    pub cm: Option<CmEnd>,
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
        cm: None,
    })
}

/// Client under `-R`: the device, port and GID the route to `server`
/// leads to (resolved within `timeout`). With `-d` the source address is
/// one the device has, so routing picks it; a route that still leads
/// elsewhere is an error naming both.
///
/// # Errors
/// Usage errors naming `-d` or `-i`; the connection manager's errors
/// (an unroutable address, no RDMA device on the route).
pub fn open_cm_active(
    server: &str,
    control_port: u16,
    dev: &DeviceSelection,
    timeout: Duration,
) -> anyhow::Result<Port> {
    let mut dst = (server, control_port)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve server {server:?}"))?
        .next()
        .with_context(|| format!("server {server:?} has no address"))?;
    // Resolution needs only the address; each QP's id later resolves to
    // the server's rdma_cm port.
    dst.set_port(0);
    let src = match dev.name.as_deref() {
        Some(name) => Some(source_address_of(name, &dst)?),
        None => None,
    };
    let id = verbs::CmId::new()?;
    id.resolve(src, dst, timeout).with_context(|| {
        format!(
            "rdma_cm cannot resolve {}{}",
            dst.ip(),
            src.map_or(String::new(), |s| format!(" from {}", s.ip()))
        )
    })?;
    let local = id.local_addr().map_or(dst.ip(), |a| a.ip());
    port_of_cm(CmEnd::Active(id), dev, local, "the route to the server")
}

/// Server under `-R`: a listener on `local` (the address the client
/// reached over the control channel) on a port the kernel picks, and
/// the device that has that address.
///
/// # Errors
/// A usage error naming `-d` or `-i` when the address is on another
/// device or port; the connection manager's errors (no RDMA device has
/// the address).
pub fn open_cm_passive(local: SocketAddr, dev: &DeviceSelection) -> anyhow::Result<Port> {
    let ip = local.ip().to_canonical();
    let mut at = local;
    at.set_ip(ip);
    at.set_port(0);
    // On iWARP the listener's port is a kernel TCP port too: one the
    // connection manager picks may still be held by an earlier
    // connection (seen after ~200 back-to-back sessions in the VM); a new
    // id picks another.
    let mut attempt = 1;
    let listener = loop {
        match verbs::CmId::listen(at, LISTEN_BACKLOG) {
            Ok(l) => break l,
            Err(e) if e.is_address_in_use("rdma_listen") && attempt < LISTEN_ATTEMPTS => {
                attempt += 1;
            }
            Err(e) => {
                return Err(
                    anyhow::Error::new(e).context(format!("cannot listen with rdma_cm on {ip}"))
                );
            }
        }
    };
    port_of_cm(
        CmEnd::Passive(listener),
        dev,
        ip,
        "the address the client reached",
    )
}

/// Connection requests a server's rdma_cm listener queues (perftest: 1;
/// ours takes one per QP, in order, so a few suffice; more keep a burst of
/// strays from crowding the client out).
const LISTEN_BACKLOG: i32 = 64;

/// Tries of a listener whose kernel-picked port is found in use.
const LISTEN_ATTEMPTS: u32 = 5;

/// A local address of device `name` in `dst`'s family: the first one
/// whose rdma_cm binding lands on the device (the kernel's own answer, on
/// RoCE, iWARP and IPoIB alike).
fn source_address_of(name: &str, dst: &SocketAddr) -> anyhow::Result<SocketAddr> {
    let addrs = nix::ifaddrs::getifaddrs().context("listing the local addresses (getifaddrs)")?;
    for a in addrs {
        let Some(sa) = a.address else { continue };
        let addr = match (sa.as_sockaddr_in(), sa.as_sockaddr_in6(), dst) {
            (Some(v4), _, SocketAddr::V4(_)) => SocketAddr::from(std::net::SocketAddrV4::from(*v4)),
            (_, Some(v6), SocketAddr::V6(_)) => SocketAddr::from(std::net::SocketAddrV6::from(*v6)),
            _ => continue,
        };
        let mut any_port = addr;
        any_port.set_port(0);
        if let Ok(id) = verbs::CmId::bind(any_port)
            && id.device_name().as_deref() == Some(name)
        {
            return Ok(any_port);
        }
    }
    Err(UsageError(format!(
        "-d/--ib-dev: {name} has no {} address to reach {} from (under -R/--rdma_cm the source \
         address picks the device: give {name}'s network interface one)",
        if dst.is_ipv4() { "IPv4" } else { "IPv6" },
        dst.ip()
    ))
    .into())
}

/// The port `end`'s id is on, checked against `-d` and `-i`; `local` is
/// its local address (for the GID), `found` what led to it (for errors).
fn port_of_cm(
    end: CmEnd,
    dev: &DeviceSelection,
    local: IpAddr,
    found: &str,
) -> anyhow::Result<Port> {
    let id = end.id();
    let name = id.device_name().with_context(|| {
        format!("rdma_cm: no RDMA device has {local} ({found}); name the peer by an address on an RDMA device")
    })?;
    if let Some(want) = dev.name.as_deref()
        && want != name
    {
        return Err(UsageError(format!(
            "-d/--ib-dev: {want} was asked for, but {found} ({local}) is on {name} \
             (under -R/--rdma_cm the address decides the device)"
        ))
        .into());
    }
    let ctx = id.context()?;
    let port = id.port();
    if let Some(want) = dev.port
        && want != port
    {
        return Err(UsageError(format!(
            "-i/--ib-port: port {want} was asked for, but {found} ({local}) is on {name} port {port}"
        ))
        .into());
    }
    let attr = ctx.query_port(port)?;
    if !attr.is_active() {
        return Err(UsageError(format!(
            "{name} port {port} ({found}, {local}) is {}, not ACTIVE",
            attr.state
        ))
        .into());
    }
    // The GID the connection manager uses: its route's source GID (on
    // RoCE the address's; RoCE v2's entry where the table has both).
    let sgid = id.source_gid();
    let table = ctx.gid_table().context("reading the GID table")?;
    let mut matching: Vec<_> = table
        .iter()
        .filter(|g| g.port == port && g.gid == sgid)
        .collect();
    matching.sort_by_key(|g| g.gid_type != verbs::GidType::RoceV2);
    // An active iWARP id leaves its route's GID unset: the port's
    // first entry then (siw has one, from its netdev's MAC).
    let first = || {
        (sgid.0 == [0; 16])
            .then(|| table.iter().find(|g| g.port == port))
            .flatten()
    };
    let (gid_index, gid) = match matching.first().copied().or_else(first) {
        Some(g) => (Some(g.gid_index), g.gid.0),
        None => (None, sgid.0),
    };
    Ok(Port {
        ctx,
        port,
        attr,
        gid_index,
        gid,
        cm: Some(end),
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
            rdma_cm: self.cm.is_some(),
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
