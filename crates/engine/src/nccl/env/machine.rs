//! This machine as the checks see it: its RDMA devices with their ports
//! and GID tables, its network interfaces, its GPUs.

use std::net::IpAddr;

use serde::Serialize;

use crate::fabric::ports::DeviceState;

/// A network interface (`getifaddrs`/`/sys/class/net`), as the socket
/// checks need it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NetInterface {
    /// Its name (`eth0`).
    pub name: String,
    /// Whether it is administratively and operationally up.
    pub up: bool,
    /// Its IPv4 and IPv6 addresses.
    pub addresses: Vec<IpAddr>,
}

/// What the machine has for GPUDirect RDMA.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GpuState {
    /// NVIDIA GPUs found (0 when none, or no driver).
    pub gpus: u32,
    /// The loaded peer-memory module (`nvidia_peermem`, `nv_peer_mem`),
    /// if any.
    pub peer_memory_module: Option<String>,
}

/// This machine, as the NCCL checks see it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Machine {
    /// Its RDMA devices with their ports and GID tables.
    pub devices: Vec<DeviceState>,
    /// Its network interfaces.
    pub interfaces: Vec<NetInterface>,
    /// Its GPUs.
    pub gpus: GpuState,
}
