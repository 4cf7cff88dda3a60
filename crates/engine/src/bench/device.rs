//! What a test needs from its device, and the refusal, naming the flag or
//! the test, when the device cannot give it: decided before any QP is
//! created or any traffic is sent (exit 2), never discovered as an error
//! completion halfway through a run.
//!
//! The device facts come from the verbs layer (transport, atomic
//! capability); which device lacks what is the providers' business (siw:
//! Linux `drivers/infiniband/sw/siw/siw_verbs.c` refuses immediate data and
//! atomics, `atomic_cap` 0; every iWARP QP reaches RTS only through the
//! iWARP connection manager, rdma-core `librdmacm/man/rdma_connect.3`).

/// A device's transport, as far as a test cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// InfiniBand semantics (InfiniBand and RoCE).
    InfiniBand,
    /// iWARP: no immediate data, connection through rdma_cm only.
    Iwarp,
    /// Anything else; nothing is assumed about it.
    Other,
}

/// What is known of the device a test is about to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceFacts<'a> {
    /// Its name, e.g. `siw0`.
    pub name: &'a str,
    /// Its transport.
    pub transport: Transport,
    /// Whether it supports atomics (`atomic_cap` not `ATOMIC_NONE`).
    pub atomics: bool,
}

/// What a test is about to ask of its device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Needs {
    /// The test's binary, e.g. `atomic_bw`, for messages.
    pub binary: &'static str,
    /// It posts atomics.
    pub atomics: bool,
    /// It carries immediate data, and the flag (or the reason) that makes
    /// it, e.g. `--write_with_imm`.
    pub immediate: Option<&'static str>,
    /// It connects its QPs through rdma_cm (`-R`).
    pub rdma_cm: bool,
}

/// Why `dev` cannot run what `needs` asks, if it cannot: the message of a
/// usage error (exit 2), which begins with the flag that asks for what is
/// missing or, when the test itself does, with the device (the binary's
/// name already prefixes every error). The most fundamental lack is named
/// first: a test the device cannot do at all before a way of connecting it.
pub fn refusal(dev: &DeviceFacts<'_>, needs: &Needs) -> Option<String> {
    let name = dev.name;
    if needs.atomics && !dev.atomics {
        return Some(format!(
            "{name} does not support atomic operations (atomic_cap NONE), which {} posts",
            needs.binary
        ));
    }
    if dev.transport == Transport::Iwarp {
        if let Some(flag) = needs.immediate {
            return Some(format!(
                "{flag}: {name} is an iWARP device, and iWARP carries no immediate data \
                 (RDMA WRITE and SEND with immediate are InfiniBand and RoCE operations)"
            ));
        }
        if !needs.rdma_cm {
            return Some(format!(
                "{name} is an iWARP device: its queue pairs reach RTS only through the \
                 iWARP connection manager, so {} connects them only with -R/--rdma_cm: \
                 add -R and name the server by its address on {name}'s network",
                needs.binary
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIW: DeviceFacts<'static> = DeviceFacts {
        name: "siw0",
        transport: Transport::Iwarp,
        atomics: false,
    };
    const RXE: DeviceFacts<'static> = DeviceFacts {
        name: "rxe0",
        transport: Transport::InfiniBand,
        atomics: true,
    };
    const WRITE: Needs = Needs {
        binary: "write_bw",
        atomics: false,
        immediate: None,
        rdma_cm: false,
    };

    #[test]
    fn a_roce_device_runs_every_test_without_rdma_cm() {
        for needs in [
            WRITE,
            Needs {
                binary: "atomic_bw",
                atomics: true,
                ..WRITE
            },
            Needs {
                immediate: Some("--write_with_imm"),
                ..WRITE
            },
        ] {
            assert_eq!(refusal(&RXE, &needs), None, "{needs:?}");
        }
    }

    #[test]
    fn siw_refuses_atomics_first_then_immediates_then_connecting_without_rdma_cm() {
        let atomic = Needs {
            binary: "atomic_bw",
            atomics: true,
            ..WRITE
        };
        let e = refusal(&SIW, &atomic).unwrap();
        assert_eq!(
            e,
            "siw0 does not support atomic operations (atomic_cap NONE), which atomic_bw posts"
        );
        let imm = Needs {
            immediate: Some("--write_with_imm"),
            rdma_cm: true,
            ..WRITE
        };
        let e = refusal(&SIW, &imm).unwrap();
        assert!(
            e.starts_with("--write_with_imm: siw0 is an iWARP device") && e.contains("immediate"),
            "{e}"
        );
        let e = refusal(&SIW, &WRITE).unwrap();
        assert!(
            e.starts_with("siw0 is an iWARP device")
                && e.contains("write_bw connects them only with -R/--rdma_cm"),
            "{e}"
        );
        let cm = Needs {
            rdma_cm: true,
            ..WRITE
        };
        assert_eq!(refusal(&SIW, &cm), None);
    }

    #[test]
    fn a_device_without_atomics_refuses_only_atomic_tests() {
        let no_atomics = DeviceFacts {
            atomics: false,
            ..RXE
        };
        assert_eq!(refusal(&no_atomics, &WRITE), None);
        assert!(
            refusal(
                &no_atomics,
                &Needs {
                    binary: "atomic_bw",
                    atomics: true,
                    ..WRITE
                }
            )
            .is_some()
        );
    }
}
