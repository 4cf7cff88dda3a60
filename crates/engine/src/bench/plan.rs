//! Who does what in a test: the [`Role`] of a side, and for the bandwidth
//! loop each side's [`Plan`] — whether it posts the operation, whether
//! and how it receives, whether a duration run must drain — derived from
//! the test and its configuration (perftest's `run_iter_bw` and
//! `run_iter_bw_server` split, and its `-b`).

use super::config::BwConfig;
use super::spec::{TestSpec, Verb};

/// Which side of the test a process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Connects, configures the test, goes first.
    Client,
    /// Listens, runs what the client asks.
    Server,
}

impl Role {
    /// `client` or `server`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Client => "client",
            Self::Server => "server",
        }
    }
}

/// How a side receives, when the peer's operations consume its receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Receiving {
    /// SENDs (checked for their size) or RDMA WRITEs with immediate.
    pub sends: bool,
    /// Bytes each receive holds (0: empty receives).
    pub recv_len: u32,
}

/// What one side does in a size's run of the bandwidth loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// It posts the operation (the client; both sides with `-b`).
    pub sends: bool,
    /// It receives (the peer's SENDs or RDMA WRITEs with immediate).
    pub recv: Option<Receiving>,
    /// The peer receives: in duration mode, every QP closes the phase
    /// with an end-of-phase SEND once its own work has completed.
    pub peer_receives: bool,
    /// Wait for every posted operation before ending a duration-mode run
    /// (a receiving peer or an atomic target counts every one).
    pub drain: bool,
}

impl Plan {
    /// The plan of `role` in `spec` run with `cfg`.
    pub fn of(spec: TestSpec, cfg: &BwConfig, role: Role) -> Self {
        let peer_receives = spec.receives(cfg.write_with_imm);
        let recv = (peer_receives && (role == Role::Server || cfg.bidirectional)).then(|| {
            Receiving {
                sends: spec.verb == Verb::Send,
                // Every receive holds the run's largest message (a ring
                // posted once serves every size); writes with immediate
                // land by address: empty receives.
                recv_len: if spec.verb == Verb::Send {
                    u32::try_from(cfg.max_size()).unwrap_or(u32::MAX)
                } else {
                    0
                },
            }
        });
        Self {
            // The client posts; the server too with `-b`.
            sends: role == Role::Client || cfg.bidirectional,
            recv,
            peer_receives,
            drain: peer_receives || spec.is_atomic(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(bidirectional: bool, write_with_imm: bool) -> BwConfig {
        BwConfig {
            sizes: vec![2, 65536],
            bidirectional,
            write_with_imm,
            ..BwConfig::default()
        }
    }

    #[test]
    fn a_write_server_only_exposes_memory() {
        let c = cfg(false, false);
        let client = Plan::of(TestSpec::WRITE_BW, &c, Role::Client);
        let server = Plan::of(TestSpec::WRITE_BW, &c, Role::Server);
        assert!(client.sends && client.recv.is_none() && !client.drain);
        assert!(!server.sends && server.recv.is_none() && !server.peer_receives);
    }

    #[test]
    fn a_send_server_receives_the_largest_message_and_the_client_drains() {
        let c = cfg(false, false);
        let server = Plan::of(TestSpec::SEND_BW, &c, Role::Server);
        assert_eq!(
            server.recv,
            Some(Receiving {
                sends: true,
                recv_len: 65536
            })
        );
        assert!(!server.sends);
        let client = Plan::of(TestSpec::SEND_BW, &c, Role::Client);
        assert!(client.sends && client.peer_receives && client.drain && client.recv.is_none());
    }

    #[test]
    fn writes_with_immediate_consume_empty_receives() {
        let c = cfg(false, true);
        let server = Plan::of(TestSpec::WRITE_BW, &c, Role::Server);
        assert_eq!(
            server.recv,
            Some(Receiving {
                sends: false,
                recv_len: 0
            })
        );
        assert!(Plan::of(TestSpec::WRITE_BW, &c, Role::Client).drain);
    }

    #[test]
    fn bidirectional_both_sides_send_and_both_receive_what_the_other_sends() {
        let c = cfg(true, false);
        for role in [Role::Client, Role::Server] {
            let p = Plan::of(TestSpec::SEND_BW, &c, role);
            assert!(p.sends && p.recv.is_some() && p.peer_receives, "{role:?}");
            assert!(Plan::of(TestSpec::READ_BW, &c, role).sends);
        }
    }

    #[test]
    fn an_atomic_client_drains_its_target_counts_every_operation() {
        let c = BwConfig {
            sizes: vec![8],
            ..BwConfig::default()
        };
        let p = Plan::of(TestSpec::FETCH_ADD_BW, &c, Role::Client);
        assert!(p.sends && p.drain && !p.peer_receives);
        assert_eq!(Role::Server.name(), "server");
    }
}
