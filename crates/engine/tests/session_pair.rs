//! The session's two state machines driven against each other, without a
//! device or a socket: every message goes through the wire codec (encoded
//! and decoded, as the channel does) and time is a virtual clock. What a
//! user of a pair relies on: both sides walk the same sizes in the same
//! phases, each gets the other's typed result, an endless run ends when
//! the client stops it, refusals reach the client with their reason, and
//! a peer that breaks the protocol is an error, never a hang.

use std::time::{Duration, Instant};

use engine::bench::config::LatConfig;
use engine::bench::config::{BwConfig, DurationMode, SETUP_PER_QP};
use engine::proto::session::{
    Accepted, Bound, ClientSession, Estimate, Next, NextPhase, ServerSession, SessionError, Walk,
};
use engine::proto::wire::{Message, QpConnection, QpInfo, SideInfo, decode, encode};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

const TIMEOUT: Duration = Duration::from_secs(15);

/// A result, as a test's outcome would be.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct Outcome {
    size: u64,
    from: u8,
}

/// One message over the wire: encoded and decoded as the channel does.
fn wire(msg: &Message) -> Message {
    let frame = encode(msg).expect("encodes");
    let (back, used) = decode(&frame).expect("decodes");
    assert_eq!(used, frame.len());
    back
}

fn side(device: &str, mtu: u32) -> SideInfo {
    SideInfo {
        device: device.into(),
        port: 1,
        gid_index: Some(1),
        gid: [0xfe; 16],
        mtu,
        link_layer: "Ethernet".into(),
        rate: Some("100 Gb/sec (4X EDR)".into()),
        max_rd_atom: 16,
    }
}

fn qp(qpn: u32) -> QpInfo {
    QpInfo {
        qpn,
        psn: 7,
        lid: 0,
        gid: [0xfe; 16],
        rkey: 0x1234,
        addr: 0x1000,
        len: 65536,
    }
}

/// A bandwidth configuration; an endless one (`--run_infinitely`) runs
/// the last size in 5 s periods, as the flags build it.
fn bw(sizes: &[u64], qps: u32, endless: bool) -> BwConfig {
    let sizes = if endless {
        sizes.last().map(|&s| vec![s]).unwrap_or_default()
    } else {
        sizes.to_vec()
    };
    BwConfig {
        sizes,
        qps,
        endless,
        duration: endless.then_some(DurationMode {
            seconds: 5.0,
            margin: 0.0,
        }),
        ..BwConfig::default()
    }
}

/// What a pair did, side by side.
#[derive(Debug, Default, PartialEq)]
struct Log {
    client_phases: Vec<(u32, u64)>,
    server_phases: Vec<(u32, u64)>,
    client_got: Vec<Option<Outcome>>,
    server_got: Vec<Option<Outcome>>,
}

/// Runs a whole session between the two machines: hello, accept, the
/// phases (the client stops after `stop_after` when given), goodbye.
fn run_pair(cfg: &BwConfig, stop_after: Option<usize>) -> Result<Log, SessionError> {
    let mut now = Instant::now();
    let qps: Vec<QpInfo> = (0..cfg.qps).map(qp).collect();
    let mut client = ClientSession::new(Walk::of(cfg, qps.len(), TIMEOUT));
    let mut server = ServerSession::new(TIMEOUT, 1 << 30);
    let (hello, bound) = client.hello(now, "write_bw", cfg, &side("c", 4096), 4096, qps.clone())?;
    assert_eq!(
        bound,
        Bound::setup_of(now, qps.len(), TIMEOUT),
        "the answer waits for the server's set-up of every QP"
    );
    let hello = match server.hello::<BwConfig>(wire(&hello), "write_bw")? {
        Ok(h) => h,
        Err(refusal) => {
            return client
                .on_answer(wire(&refusal.message()))
                .map(|_| Log::default());
        }
    };
    assert_eq!(hello.config, *cfg);
    assert_eq!(hello.side.mtu, 4096);
    let server_qps: Vec<QpInfo> = (100..100 + cfg.qps).map(qp).collect();
    let accept = server.accept(&side("s", 1024), 1024, server_qps.clone(), None)?;
    let Accepted {
        side,
        qps: got,
        mtu,
        cm_port,
    } = client.on_answer(wire(&accept))?;
    assert_eq!((side.device.as_str(), side.mtu, mtu), ("s", 1024, 1024));
    assert_eq!(got, server_qps);
    assert_eq!(cm_port, None);
    let mut log = Log::default();
    loop {
        now += Duration::from_millis(3);
        let stop = stop_after.is_some_and(|n| client.completed() >= n);
        let (phase, bound) = match client.next_phase(now, stop)? {
            NextPhase::Run(p, b) => (p, b),
            NextPhase::AllRun | NextPhase::Stopped => break,
        };
        assert_eq!(bound, Bound::barrier(now, phase.phase, qps.len(), TIMEOUT));
        assert_eq!(client.in_progress(), Some(phase.size));
        assert_eq!(
            server.next_bound(now),
            bound,
            "both sides bound the first barrier alike"
        );
        let Next::Phase(sp) = server.next(&wire(&client.barrier()?))? else {
            panic!("the server took a barrier for a goodbye");
        };
        client.on_barrier(&wire(&server.barrier()?))?;
        log.client_phases.push((phase.phase, phase.size));
        log.server_phases.push((sp.phase, sp.size));
        now += Duration::from_millis(10);
        let mine = Outcome {
            size: phase.size,
            from: 1,
        };
        let theirs = Outcome {
            size: sp.size,
            from: 2,
        };
        let done = client.done(Some(&mine))?;
        log.server_got.push(server.on_done::<Outcome>(wire(&done))?);
        let answer = server.done(Some(&theirs))?;
        log.client_got
            .push(client.on_done::<Outcome>(wire(&answer))?);
        assert_eq!(client.in_progress(), None);
        assert_eq!(client.completed(), server.completed());
    }
    let Next::Bye(answer) = server.next(&wire(&client.goodbye()?))? else {
        panic!("the server took a goodbye for a phase");
    };
    client.on_goodbye(&wire(&answer))?;
    server.all_run()?;
    Ok(log)
}

#[test]
fn both_sides_walk_every_size_and_get_each_others_results() {
    let cfg = bw(&[2, 4096, 65536], 2, false);
    let log = run_pair(&cfg, None).unwrap();
    let phases = vec![(0, 2), (1, 4096), (2, 65536)];
    assert_eq!(log.client_phases, phases);
    assert_eq!(log.server_phases, phases);
    for (i, size) in [2, 4096, 65536].into_iter().enumerate() {
        assert_eq!(log.client_got[i], Some(Outcome { size, from: 2 }));
        assert_eq!(log.server_got[i], Some(Outcome { size, from: 1 }));
    }
}

#[test]
fn an_endless_run_repeats_its_size_until_the_client_stops_it() {
    let log = run_pair(&bw(&[8192], 1, true), Some(5)).unwrap();
    assert_eq!(
        log.client_phases,
        (0..5).map(|p| (p, 8192)).collect::<Vec<_>>()
    );
    assert_eq!(log.server_phases, log.client_phases);
}

#[test]
fn a_side_without_a_result_sends_none_and_the_peer_gets_none() {
    let cfg = bw(&[64], 1, false);
    let mut client = ClientSession::new(Walk::of(&cfg, 1, TIMEOUT));
    let mut server = ServerSession::new(TIMEOUT, 1 << 30);
    let now = Instant::now();
    let (hello, _) = client
        .hello(now, "write_bw", &cfg, &side("c", 1024), 1024, vec![qp(1)])
        .unwrap();
    server
        .hello::<BwConfig>(wire(&hello), "write_bw")
        .unwrap()
        .unwrap();
    client
        .on_answer(wire(
            &server
                .accept(&side("s", 1024), 1024, vec![qp(2)], None)
                .unwrap(),
        ))
        .unwrap();
    let Ok(NextPhase::Run(..)) = client.next_phase(now, false) else {
        panic!("no phase")
    };
    server.next(&wire(&client.barrier().unwrap())).unwrap();
    client
        .on_barrier(&wire(&server.barrier().unwrap()))
        .unwrap();
    let done = client.done::<Outcome>(None).unwrap();
    assert_eq!(server.on_done::<Outcome>(wire(&done)).unwrap(), None);
    let answer = server.done::<Outcome>(None).unwrap();
    assert_eq!(client.on_done::<Outcome>(wire(&answer)).unwrap(), None);
}

/// The server's answer to a hello for `test` carrying `config` and `qps`
/// QPs: its refusal reason, or `None` when accepted.
fn refusal(test: &str, config: serde_json::Value, qps: usize, max_mem: u64) -> Option<String> {
    let mut server = ServerSession::new(TIMEOUT, max_mem);
    let hello = Message::Hello {
        test: test.into(),
        config,
        sides: vec![side("c", 1024)],
        qps: (0..qps as u32).map(qp).collect(),
        connection: Default::default(),
    };
    match server.hello::<BwConfig>(wire(&hello), "write_bw").unwrap() {
        Ok(_) => server
            .check_memory(Estimate {
                memory: 1 << 20,
                rings: 1 << 10,
            })
            .err()
            .map(|r| r.reason),
        Err(r) => Some(r.reason),
    }
}

#[test]
fn the_server_refuses_another_test_a_bad_configuration_and_a_wrong_offer() {
    let good = serde_json::to_value(bw(&[65536], 2, false)).unwrap();
    assert_eq!(refusal("write_bw", good.clone(), 2, 1 << 30), None);
    assert_eq!(
        refusal("read_bw", good.clone(), 2, 1 << 30).as_deref(),
        Some("this server runs write_bw, the client asked for \"read_bw\"")
    );
    let malformed = refusal("write_bw", serde_json::json!({"sizes": "big"}), 2, 1 << 30).unwrap();
    assert!(
        malformed.starts_with("malformed configuration: "),
        "{malformed}"
    );
    let zero = serde_json::to_value(bw(&[0], 2, false)).unwrap();
    let invalid = refusal("write_bw", zero, 2, 1 << 30).unwrap();
    assert!(invalid.starts_with("invalid configuration: "), "{invalid}");
    assert_eq!(
        refusal("write_bw", good.clone(), 3, 1 << 30).as_deref(),
        Some("the configuration has 2 QPs, the client offers 3")
    );
    assert_eq!(
        refusal("write_bw", good, 2, 1 << 20).as_deref(),
        Some(
            "the test needs 1049600 bytes on the server (1048576 of registered memory and an \
             estimated 1024 of queue rings), above its --max-mem 1048576"
        )
    );
    // A latency configuration's offer is one QP.
    let lat = serde_json::to_value(LatConfig::default()).unwrap();
    let mut server = ServerSession::new(TIMEOUT, 1 << 30);
    let hello = Message::Hello {
        test: "write_lat".into(),
        config: lat,
        sides: vec![side("c", 1024)],
        qps: vec![qp(1), qp(2)],
        connection: Default::default(),
    };
    let refused = server
        .hello::<LatConfig>(hello, "write_lat")
        .unwrap()
        .unwrap_err();
    assert_eq!(
        refused.reason,
        "a latency test uses one QP, the client offers 2"
    );
}

/// A client of `cfg` that sent its hello (`side`, path MTU 1024, `qps`),
/// and that hello.
fn client_after_hello(
    cfg: &BwConfig,
    side: &SideInfo,
    qps: Vec<QpInfo>,
) -> (ClientSession, Message) {
    let mut client = ClientSession::new(Walk::of(cfg, cfg.qps as usize, TIMEOUT));
    let (hello, _) = client
        .hello(Instant::now(), "write_bw", cfg, side, 1024, qps)
        .unwrap();
    (client, hello)
}

#[test]
fn the_server_refuses_a_hello_describing_other_than_one_device_side() {
    let good = serde_json::to_value(bw(&[65536], 1, false)).unwrap();
    let hello = |sides: Vec<SideInfo>| Message::Hello {
        test: "write_bw".into(),
        config: good.clone(),
        sides,
        qps: vec![qp(1)],
        connection: Default::default(),
    };
    // Two sides, through the wire; none (which the wire itself refuses),
    // straight to the state machine.
    for (msg, n) in [
        (wire(&hello(vec![side("c", 1024), side("c2", 1024)])), 2),
        (hello(vec![]), 0),
    ] {
        // What the client is sent: the reason, naming both counts.
        let told = ServerSession::new(TIMEOUT, 1 << 30)
            .hello::<BwConfig>(msg, "write_bw")
            .map(|checked| checked.map(|_| ()).map_err(|refusal| refusal.message()));
        let reason = format!("this build runs one device per side; the client described {n}");
        assert_eq!(told, Ok(Err(Message::Reject { reason })));
    }
    // The client hears it as the server's reason.
    let (mut client, _) =
        client_after_hello(&bw(&[65536], 1, false), &side("c", 1024), vec![qp(1)]);
    let refusal = Message::Reject {
        reason: "this build runs one device per side; the client described 2".into(),
    };
    assert_eq!(
        client.on_answer(wire(&refusal)).unwrap_err().to_string(),
        "the peer refused the test: this build runs one device per side; the client described 2"
    );
}

#[test]
fn an_rdma_cm_client_says_so_and_takes_only_an_accept_that_names_the_cm_port() {
    let cfg = bw(&[65536], 2, false);
    let hello_of = |connection| {
        let mut client = ClientSession::new(Walk::of(&cfg, 2, TIMEOUT)).connecting(connection);
        let (hello, _) = client
            .hello(
                Instant::now(),
                "write_bw",
                &cfg,
                &side("c", 1024),
                1024,
                vec![qp(0), qp(0)],
            )
            .unwrap();
        (client, wire(&hello))
    };
    // The server learns the client's choice from the hello.
    for connection in [QpConnection::QpExchange, QpConnection::RdmaCm] {
        let (_, hello) = hello_of(connection);
        let mut server = ServerSession::new(TIMEOUT, 1 << 30);
        let checked = server
            .hello::<BwConfig>(hello, "write_bw")
            .unwrap()
            .unwrap();
        assert_eq!(checked.connection, connection);
    }
    // An rdma_cm client needs the port (0 is no port); the exchange
    // ignores one.
    for (connection, cm_port, expect) in [
        (QpConnection::RdmaCm, Some(40_001), Ok(Some(40_001))),
        (QpConnection::RdmaCm, None, Err(SessionError::NoCmPort)),
        (QpConnection::RdmaCm, Some(0), Err(SessionError::NoCmPort)),
        (QpConnection::QpExchange, Some(40_001), Ok(None)),
        (QpConnection::QpExchange, None, Ok(None)),
    ] {
        let (mut client, _) = hello_of(connection);
        let accept = Message::Accept {
            sides: vec![side("s", 1024)],
            qps: vec![qp(0), qp(0)],
            mtu: 1024,
            cm_port,
        };
        let got = client.on_answer(wire(&accept)).map(|a| a.cm_port);
        assert_eq!(got, expect, "{connection:?} {cm_port:?}");
    }
    assert_eq!(
        SessionError::NoCmPort.to_string(),
        "the server accepted an rdma_cm test (-R) without naming its rdma_cm port"
    );
}

#[test]
fn the_client_sends_one_side_with_the_path_mtu_and_takes_the_servers_one_side() {
    let cfg = bw(&[64], 1, false);
    let (mut client, hello) = client_after_hello(&cfg, &side("c", 4096), vec![qp(1)]);
    let Message::Hello { sides, .. } = wire(&hello) else {
        panic!("not a hello: {hello:?}");
    };
    assert_eq!(sides, vec![side("c", 1024)]);
    // No side at all is refused too (the wire would refuse it first).
    let e = client
        .on_answer(Message::Accept {
            sides: vec![],
            qps: vec![qp(2)],
            mtu: 1024,
            cm_port: None,
        })
        .unwrap_err();
    assert_eq!(e, SessionError::SideCount(0));
    assert_eq!(
        e.to_string(),
        "this build runs one device per side; the server described 0"
    );
}

#[test]
fn a_refusal_or_a_busy_server_reaches_the_client_with_its_reason() {
    let cfg = bw(&[64], 4, false);
    let run = |answer: Message| {
        let (mut client, _) = client_after_hello(&cfg, &side("c", 1024), vec![]);
        client.on_answer(wire(&answer)).unwrap_err().to_string()
    };
    assert_eq!(
        run(Message::Reject {
            reason: "the configuration has 2 QPs, the client offers 4".into()
        }),
        "the peer refused the test: the configuration has 2 QPs, the client offers 4"
    );
    assert_eq!(
        run(Message::Busy {
            reason: "it is running a write_bw session".into()
        }),
        "the server is busy: it is running a write_bw session"
    );
    assert_eq!(
        run(Message::Accept {
            sides: vec![side("s", 1000)],
            qps: vec![],
            mtu: 1000,
            cm_port: None,
        }),
        "server chose an invalid MTU 1000"
    );
    // One device per side: an accept describing two is refused.
    assert_eq!(
        run(Message::Accept {
            sides: vec![side("s", 1024), side("s2", 1024)],
            qps: vec![],
            mtu: 1024,
            cm_port: None,
        }),
        "this build runs one device per side; the server described 2"
    );
    assert_eq!(
        run(Message::Barrier { phase: 0 }),
        "protocol error: expected accept, got barrier"
    );
}

/// A server that accepted `cfg`, waiting for the first barrier.
fn accepted_server(cfg: &BwConfig) -> ServerSession {
    let mut server = ServerSession::new(TIMEOUT, 1 << 30);
    let hello = Message::Hello {
        test: "write_bw".into(),
        config: serde_json::to_value(cfg).unwrap(),
        sides: vec![side("c", 1024)],
        qps: (0..cfg.qps).map(qp).collect(),
        connection: Default::default(),
    };
    server
        .hello::<BwConfig>(hello, "write_bw")
        .unwrap()
        .unwrap();
    server.accept(&side("s", 1024), 1024, vec![], None).unwrap();
    server
}

/// Runs phase `phase` on an accepted server, neither side with a result.
fn run_phase(s: &mut ServerSession, phase: u32) {
    s.next(&Message::Barrier { phase }).unwrap();
    s.on_done::<Outcome>(Message::Done {
        phase,
        result: None,
    })
    .unwrap();
    s.done::<Outcome>(None).unwrap();
}

#[test]
fn a_client_that_breaks_the_walk_is_an_error_on_the_server() {
    let cfg = bw(&[2, 4, 8], 1, false);
    // A barrier of another phase.
    let mut s = accepted_server(&cfg);
    assert_eq!(
        s.next(&Message::Barrier { phase: 1 })
            .unwrap_err()
            .to_string(),
        "protocol error: expected barrier, got barrier"
    );
    // A goodbye after one of three sizes: answered, then an error.
    let mut s = accepted_server(&cfg);
    run_phase(&mut s, 0);
    assert_eq!(s.next(&Message::Bye).unwrap(), Next::Bye(Message::Bye));
    assert_eq!(
        s.all_run().unwrap_err().to_string(),
        "client ended after 1 of 3 sizes"
    );
    // A phase beyond the sizes.
    let one = bw(&[2], 1, false);
    let mut s = accepted_server(&one);
    run_phase(&mut s, 0);
    assert_eq!(
        s.next(&Message::Barrier { phase: 1 })
            .unwrap_err()
            .to_string(),
        "client started phase 1 of a 1-size test"
    );
    // A result that is not one.
    let mut s = accepted_server(&cfg);
    s.next(&Message::Barrier { phase: 0 }).unwrap();
    let bad = s
        .on_done::<Outcome>(Message::Done {
            phase: 0,
            result: Some(serde_json::json!("fast")),
        })
        .unwrap_err()
        .to_string();
    assert!(bad.starts_with("the client's result: "), "{bad}");
}

#[test]
fn bounds_follow_the_virtual_clock() {
    let cfg = bw(&[65536], 100, false);
    let t0 = Instant::now();
    let client = ClientSession::new(Walk::of(&cfg, 100, TIMEOUT));
    let budget = Duration::from_secs(2);
    assert_eq!(
        client.phase_bound(t0, budget),
        Bound::Phase {
            at: t0 + budget + TIMEOUT,
            bound: budget + TIMEOUT
        }
    );
    // The first barrier: --timeout plus the set-up allowance per QP.
    let first = Bound::barrier(t0, 0, 100, TIMEOUT);
    assert_eq!(
        first.deadline(t0, TIMEOUT),
        t0 + TIMEOUT + SETUP_PER_QP * 100
    );
    // A later one: --timeout from when the wait starts.
    let later = Bound::barrier(t0, 1, 100, TIMEOUT);
    let t1 = t0 + Duration::from_secs(60);
    assert_eq!(later.deadline(t1, TIMEOUT), t1 + TIMEOUT);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any walk: both sides run the same phases with the same sizes, in
    /// order, each with the other's result; an endless walk stops where
    /// the client stops it.
    #[test]
    fn any_walk_runs_the_same_phases_on_both_sides(
        sizes in prop::collection::vec(1u64..=(8 << 20), 1..12),
        qps in 1u32..64,
        endless in any::<bool>(),
        stop_after in 0usize..20,
    ) {
        let cfg = bw(&sizes, qps, endless);
        let log = run_pair(&cfg, endless.then_some(stop_after)).unwrap();
        let expected: Vec<(u32, u64)> = if endless {
            (0..stop_after as u32).map(|p| (p, *sizes.last().unwrap())).collect()
        } else {
            sizes.iter().enumerate().map(|(p, &s)| (p as u32, s)).collect()
        };
        prop_assert_eq!(&log.client_phases, &expected);
        prop_assert_eq!(&log.server_phases, &expected);
        for (i, &(_, size)) in expected.iter().enumerate() {
            prop_assert_eq!(log.client_got[i], Some(Outcome { size, from: 2 }));
            prop_assert_eq!(log.server_got[i], Some(Outcome { size, from: 1 }));
        }
    }
}

/// The error a call out of order gets.
fn out_of_order(called: &'static str, at: &'static str) -> SessionError {
    SessionError::OutOfOrder { called, at }
}

#[test]
fn a_driver_calling_the_client_out_of_order_is_refused_and_the_walk_goes_on() {
    // No `debug_assert!`: the same refusal in a release build (this test
    // also runs under `cargo test --release`, docs/design.md).
    let cfg = bw(&[64], 1, false);
    let mut client = ClientSession::new(Walk::of(&cfg, 1, TIMEOUT));
    let now = Instant::now();
    assert_eq!(
        client.barrier(),
        Err(out_of_order("barrier", "before the hello"))
    );
    assert_eq!(
        client.next_phase(now, false).unwrap_err(),
        out_of_order("next_phase", "before the hello")
    );
    assert_eq!(
        client.goodbye().unwrap_err().to_string(),
        "internal error: session driven out of order: goodbye called before the hello"
    );
    let (hello, _) = client
        .hello(now, "write_bw", &cfg, &side("c", 1024), 1024, vec![qp(1)])
        .unwrap();
    assert_eq!(
        client
            .hello(now, "write_bw", &cfg, &side("c", 1024), 1024, vec![qp(1)])
            .unwrap_err(),
        out_of_order("hello", "while the hello's answer is due")
    );
    assert_eq!(
        client.done::<Outcome>(None).unwrap_err(),
        out_of_order("done", "while the hello's answer is due")
    );
    let mut server = ServerSession::new(TIMEOUT, 1 << 30);
    server
        .hello::<BwConfig>(wire(&hello), "write_bw")
        .unwrap()
        .unwrap();
    let accept = server
        .accept(&side("s", 1024), 1024, vec![qp(2)], None)
        .unwrap();
    client.on_answer(wire(&accept)).unwrap();
    let Ok(NextPhase::Run(..)) = client.next_phase(now, false) else {
        panic!("no phase")
    };
    // Measuring: no goodbye, no second barrier answer, no early result.
    let barrier = client.barrier().unwrap();
    server.next(&wire(&barrier)).unwrap();
    client
        .on_barrier(&wire(&server.barrier().unwrap()))
        .unwrap();
    assert_eq!(
        client.goodbye().unwrap_err(),
        out_of_order("goodbye", "while a phase is measured")
    );
    assert_eq!(
        client.on_barrier(&barrier).unwrap_err(),
        out_of_order("on_barrier", "while a phase is measured")
    );
    assert_eq!(
        client
            .on_done::<Outcome>(Message::Done {
                phase: 0,
                result: None
            })
            .unwrap_err(),
        out_of_order("on_done", "while a phase is measured")
    );
    // The refusals left the walk where it was: it ends as it should.
    let done = client.done::<Outcome>(None).unwrap();
    server.on_done::<Outcome>(wire(&done)).unwrap();
    client
        .on_done::<Outcome>(wire(&server.done::<Outcome>(None).unwrap()))
        .unwrap();
    assert_eq!(client.next_phase(now, false), Ok(NextPhase::AllRun));
    let Next::Bye(answer) = server.next(&wire(&client.goodbye().unwrap())).unwrap() else {
        panic!("the server took a goodbye for a phase");
    };
    client.on_goodbye(&wire(&answer)).unwrap();
    server.all_run().unwrap();
    assert_eq!(
        client.on_goodbye(&answer).unwrap_err(),
        out_of_order("on_goodbye", "after the session ended")
    );
}

#[test]
fn a_driver_calling_the_server_out_of_order_is_refused_and_the_walk_goes_on() {
    let cfg = bw(&[64, 128], 1, false);
    let mut server = ServerSession::new(TIMEOUT, 1 << 30);
    assert_eq!(
        server
            .accept(&side("s", 1024), 1024, vec![], None)
            .unwrap_err(),
        out_of_order("accept", "before the hello")
    );
    assert_eq!(
        server.next(&Message::Barrier { phase: 0 }).unwrap_err(),
        out_of_order("next", "before the hello")
    );
    let mut server = accepted_server(&cfg);
    assert_eq!(
        server.barrier(),
        Err(out_of_order("barrier", "between phases"))
    );
    assert_eq!(
        server.done::<Outcome>(None).unwrap_err(),
        out_of_order("done", "between phases")
    );
    assert_eq!(
        server
            .on_done::<Outcome>(Message::Done {
                phase: 0,
                result: None
            })
            .unwrap_err(),
        out_of_order("on_done", "between phases")
    );
    let first = Message::Hello {
        test: "write_bw".into(),
        config: serde_json::to_value(&cfg).unwrap(),
        sides: vec![side("c", 1024)],
        qps: vec![qp(0)],
        connection: Default::default(),
    };
    assert_eq!(
        server.hello::<BwConfig>(first, "write_bw").unwrap_err(),
        out_of_order("hello", "between phases")
    );
    server.next(&Message::Barrier { phase: 0 }).unwrap();
    assert_eq!(
        server.next(&Message::Barrier { phase: 0 }).unwrap_err(),
        out_of_order("next", "in a phase")
    );
    // Nothing moved: both sizes run and the walk ends complete.
    run_phase_after_barrier(&mut server, 0);
    run_phase(&mut server, 1);
    assert_eq!(server.next(&Message::Bye).unwrap(), Next::Bye(Message::Bye));
    server.all_run().unwrap();
}

/// Finishes phase `phase` on a server that took its barrier.
fn run_phase_after_barrier(s: &mut ServerSession, phase: u32) {
    s.barrier().unwrap();
    s.on_done::<Outcome>(Message::Done {
        phase,
        result: None,
    })
    .unwrap();
    s.done::<Outcome>(None).unwrap();
}
