//! The crate's one error type and the checker every FFI return goes through.

use std::io;

/// Everything that can go wrong in this crate.
///
/// Messages are lowercase and name what matters: the verb, the device, the
/// port, the GID index or the queue pair number. An errno is part of the
/// message (`os_error`), not a [`std::error::Error::source`]: a chain
/// printer (anyhow's `{:#}`) would print it twice.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A verb returned an error; `os_error` carries the errno.
    #[error("{verb} failed: {os_error}")]
    Verb {
        /// The libibverbs function that failed, e.g. `ibv_reg_mr`.
        verb: &'static str,
        /// The errno it reported.
        os_error: io::Error,
    },
    /// The provider does not implement the verb (`EOPNOTSUPP`).
    #[error("{verb} is not supported by this device or provider")]
    Unsupported {
        /// The libibverbs function.
        verb: &'static str,
    },
    /// No RDMA device at all: `ibv_get_device_list` listed none, or failed
    /// with `ENOSYS` (no RDMA in the kernel) while `dir` holds no device.
    /// `rdmaperf ports` says the same of its sysfs tree.
    #[error("no RDMA devices in {} (is the driver loaded? for soft-RoCE: rdma link add)", .dir.display())]
    NoDevices {
        /// The kernel's directory of RDMA devices, `class/infiniband`
        /// under the sysfs libibverbs reads (see [`Error::no_devices`]).
        dir: std::path::PathBuf,
    },
    /// The named device does not exist.
    #[error("no RDMA device named {name:?}; available: {}", list_or_none(.available))]
    NoSuchDevice {
        /// The name that was asked for.
        name: String,
        /// The devices that do exist.
        available: Vec<String>,
    },
    /// The port number is outside `1..=phys_port_cnt`.
    #[error("device {device} has no port {port} (it has {port_count})")]
    NoSuchPort {
        /// Device name.
        device: String,
        /// Requested port.
        port: u8,
        /// Number of physical ports.
        port_count: u8,
    },
    /// The GID index holds no valid GID on that port.
    #[error("device {device} port {port} has no GID at index {gid_index}")]
    NoSuchGid {
        /// Device name.
        device: String,
        /// Port number.
        port: u8,
        /// The requested GID index.
        gid_index: u32,
    },
    /// A caller-supplied argument is out of range; the message says which.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// `ibv_post_send`/`ibv_wr_complete`/`ibv_post_recv` rejected a work
    /// request.
    #[error("{verb} on QPN {qpn:#x} failed: {os_error}")]
    Post {
        /// `ibv_post_send`, `ibv_wr_complete` (the extended post path) or
        /// `ibv_post_recv`.
        verb: &'static str,
        /// Queue pair number.
        qpn: u32,
        /// The errno.
        os_error: io::Error,
    },
    /// A bounded wait ran out.
    #[error("timed out after {waited:?} waiting for {what}")]
    Timeout {
        /// What was awaited, e.g. `a completion`.
        what: &'static str,
        /// How long it waited.
        waited: std::time::Duration,
    },
    /// The connection manager answered a step with another event than
    /// the one it should have (an address no local device reaches, a
    /// rejected or unreachable peer), with the event's status: 0, a
    /// negative errno, or a peer's reject reason.
    #[error("{step}: the connection manager reported {event} ({})", cm_status(.event, *.status))]
    Cm {
        /// The librdmacm call whose outcome this was.
        step: &'static str,
        /// librdmacm's name of the event (`rdma_event_str`).
        event: String,
        /// The event's status.
        status: i32,
    },
    /// A queue pair state transition failed.
    #[error("ibv_modify_qp to {target} on QPN {qpn:#x} failed: {os_error}")]
    ModifyQp {
        /// Target state, e.g. `RTR`.
        target: &'static str,
        /// Queue pair number.
        qpn: u32,
        /// The errno.
        os_error: io::Error,
    },
}

impl Error {
    /// [`Error::NoDevices`] for the sysfs libibverbs reads: `$SYSFS_PATH`
    /// when set (libibverbs' own override), else `/sys`.
    pub fn no_devices() -> Self {
        Error::NoDevices {
            dir: kernel_device_dir(),
        }
    }

    /// Whether this is `verb` refused because an address or port is in
    /// use (`EADDRINUSE`).
    pub fn is_address_in_use(&self, verb: &str) -> bool {
        matches!(self, Error::Verb { verb: v, os_error }
            if *v == verb && os_error.raw_os_error() == Some(libc::EADDRINUSE))
    }
}

/// `class/infiniband` under the sysfs libibverbs reads.
pub(crate) fn kernel_device_dir() -> std::path::PathBuf {
    let sysfs = std::env::var_os("SYSFS_PATH").unwrap_or_else(|| "/sys".into());
    std::path::Path::new(&sysfs).join("class/infiniband")
}

/// An event's status for people: an errno's text, or a reject reason.
fn cm_status(event: &str, status: i32) -> String {
    if status < 0 {
        format!("{}", io::Error::from_raw_os_error(-status))
    } else if event.ends_with("REJECTED") {
        format!("reject reason {status}")
    } else {
        format!("status {status}")
    }
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Turns an errno into the crate's error, mapping `EOPNOTSUPP` to
/// [`Error::Unsupported`].
pub(crate) fn from_errno(verb: &'static str, errno: i32) -> Error {
    if errno == libc::EOPNOTSUPP {
        Error::Unsupported { verb }
    } else {
        Error::Verb {
            verb,
            os_error: io::Error::from_raw_os_error(errno),
        }
    }
}

/// The errno of a failed call, whichever convention the verb uses.
///
/// libibverbs verbs report failure three ways: a positive errno
/// (`ibv_modify_qp`, `ibv_post_send`, `ibv_query_port`), `-1` with `errno`
/// set (`ibv_query_device` in some providers), or a negative errno. All are
/// folded here. Called only on the failure path, right after the call, so
/// `errno` is still the call's.
pub(crate) fn errno_of(rc: i32) -> i32 {
    if rc > 0 {
        rc
    } else {
        match io::Error::last_os_error().raw_os_error() {
            Some(e) if e != 0 && rc == -1 => e,
            _ if rc < -1 => -rc,
            Some(e) if e != 0 => e,
            _ => libc::EIO,
        }
    }
}

/// Checks an integer return code: `0` is success.
pub(crate) fn check(verb: &'static str, rc: i32) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(from_errno(verb, errno_of(rc)))
    }
}

/// Checks a pointer return: null is failure with `errno` set.
pub(crate) fn check_ptr<T>(verb: &'static str, ptr: *mut T) -> Result<std::ptr::NonNull<T>> {
    std::ptr::NonNull::new(ptr).ok_or_else(|| from_errno(verb, errno_of(-1)))
}
