//! RDMA tests against a real device (soft-RoCE in CI).
//!
//! All are `#[ignore]`d for plain `cargo test`; `scripts/test` runs them
//! with `--ignored` inside the VM, with `RDMAPERF_TEST_DEVICE` set. Without
//! a device they fail, never pass.

mod support;

use std::time::Instant;

use support::{PORT, Rng, Side, WAIT, connect, open_fds, resource_counts, test_device};
use verbs::{
    AccessFlags, Context, Error, QpState, QueuePairCaps, RdmaWrite, WcOpcode, WcStatus,
    WorkCompletion, WriteBatch,
};

const MR_LEN: usize = 4 << 20;

fn caps(inline: u32) -> QueuePairCaps {
    QueuePairCaps {
        max_send_wr: 64,
        max_recv_wr: 16,
        max_inline_data: inline,
        ..QueuePairCaps::default()
    }
}

/// Writes `len` random bytes from `a` into `b` at `offset` (both sides'
/// MRs), then checks every byte of `b`'s region: the written range equals
/// the source, everything else is untouched.
fn write_and_verify(
    a: &mut Side,
    b: &Side,
    rng: &mut Rng,
    len: usize,
    offset: usize,
    inline: bool,
) {
    let before = b.mr().as_slice().to_vec();
    rng.fill(&mut a.bytes_mut()[..len]);
    let sge = a.mr().sge(0..len).unwrap();
    let remote = b
        .mr()
        .remote()
        .slice(offset as u64..(offset + len) as u64)
        .unwrap();
    let wr = RdmaWrite::new(len as u64, sge, remote)
        .unwrap()
        .inline(inline);
    a.qp.post_send(&wr).unwrap();
    let wc = a.wait_one();
    assert!(wc.is_success(), "write of {len} B: {:?}", wc.status());
    assert_eq!(wc.opcode(), WcOpcode::RdmaWrite);
    assert_eq!(wc.wr_id(), len as u64);
    let got = b.mr().as_slice();
    assert_eq!(
        &got[offset..offset + len],
        &a.mr().as_slice()[..len],
        "payload of {len} B"
    );
    assert_eq!(
        &got[..offset],
        &before[..offset],
        "bytes before the target range changed"
    );
    assert_eq!(
        &got[offset + len..],
        &before[offset + len..],
        "bytes after the target range changed"
    );
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn device_is_present_with_active_port_and_gid() {
    let dev = test_device();
    let ctx = Context::open(&dev).unwrap();
    let port = ctx.query_port(PORT).unwrap();
    assert!(port.is_active(), "{dev} port {PORT}: {:?}", port.state);
    let gids = ctx.gid_table().unwrap();
    assert!(
        gids.iter().any(|g| g.port == PORT),
        "{dev} has no GID on port {PORT}"
    );
    let attr = ctx.query_device().unwrap();
    assert!(attr.phys_port_cnt >= 1);
    eprintln!(
        "RDMA test device: {dev} port {PORT} {} {} mtu {} gids {}",
        port.state,
        port.link_layer,
        port.active_mtu,
        gids.len()
    );
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn rdma_write_delivers_every_byte_at_edge_sizes() {
    let dev = test_device();
    let mut a = Side::new(&dev, MR_LEN, caps(64));
    let mut b = Side::new(&dev, MR_LEN, caps(64));
    connect(&mut a, &mut b);
    let mtu = a.options(0).mtu.bytes() as usize;
    let max_inline = a.qp.qp().caps().max_inline_data as usize;
    assert!(
        max_inline >= 64,
        "granted inline {max_inline} < requested 64"
    );
    let mut rng = Rng::new(0x5eed);
    let sizes = [1, max_inline, mtu - 1, mtu, mtu + 1, 1 << 20];
    for (i, &len) in sizes.iter().enumerate() {
        // Land at an odd offset too, so no alignment hides a bug.
        write_and_verify(&mut a, &b, &mut rng, len, i * 4099, false);
    }
    // The maximum inline size, sent inline.
    write_and_verify(&mut a, &b, &mut rng, max_inline, 17, true);
    // One write spanning the full region.
    write_and_verify(&mut a, &b, &mut rng, MR_LEN, 0, false);
    // And the other direction.
    write_and_verify(&mut b, &a, &mut rng, mtu + 1, 3, false);
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn post_list_of_unsignaled_writes_ends_with_one_completion() {
    let dev = test_device();
    let mut a = Side::new(&dev, 1 << 16, caps(0));
    let mut b = Side::new(&dev, 1 << 16, caps(0));
    connect(&mut a, &mut b);
    let mut rng = Rng::new(7);
    rng.fill(a.bytes_mut());
    let chunk = 4096usize;
    let mut batch = WriteBatch::with_capacity(16);
    for i in 0..16 {
        let sge = a.mr().sge(i * chunk..(i + 1) * chunk).unwrap();
        let remote = b
            .mr()
            .remote()
            .slice((i * chunk) as u64..((i + 1) * chunk) as u64)
            .unwrap();
        let last = i == 15;
        batch
            .push(
                &RdmaWrite::new(i as u64, sge, remote)
                    .unwrap()
                    .signaled(last),
            )
            .unwrap();
    }
    assert!(
        batch
            .push(&RdmaWrite::new(99, a.mr().sge(0..1).unwrap(), b.mr().remote()).unwrap())
            .is_err()
    );
    a.qp.post_batch(&mut batch).unwrap();
    let wc = a.wait_one();
    assert!(wc.is_success(), "{:?}", wc.status());
    assert_eq!(wc.wr_id(), 15);
    assert_eq!(a.mr().as_slice(), b.mr().as_slice());
    let mut more = [WorkCompletion::default(), WorkCompletion::default()];
    assert_eq!(
        a.cq.poll(&mut more).unwrap(),
        0,
        "unsignaled writes produced completions"
    );
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn write_with_immediate_consumes_a_receive_and_carries_the_value() {
    let dev = test_device();
    let mut a = Side::new(&dev, 4096, caps(0));
    let mut b = Side::new(&dev, 4096, caps(0));
    connect(&mut a, &mut b);
    b.qp.qp().post_recv_empty(42).unwrap();
    a.bytes_mut()[..8].copy_from_slice(b"imm-data");
    let wr = RdmaWrite::new(1, a.mr().sge(0..8).unwrap(), b.mr().remote())
        .unwrap()
        .with_imm(0xdead_beef);
    a.qp.post_send(&wr).unwrap();
    assert!(a.wait_one().is_success());
    let wc = b.wait_one();
    assert!(wc.is_success(), "{:?}", wc.status());
    assert_eq!(wc.wr_id(), 42);
    assert_eq!(wc.opcode(), WcOpcode::RecvRdmaWithImm);
    assert_eq!(wc.imm_data(), Some(0xdead_beef));
    assert_eq!(wc.byte_len(), 8);
    assert_eq!(&b.mr().as_slice()[..8], b"imm-data");
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn wrong_rkey_yields_remote_access_error_not_a_hang() {
    let dev = test_device();
    let mut a = Side::new(&dev, 4096, caps(0));
    let mut b = Side::new(&dev, 4096, caps(0));
    connect(&mut a, &mut b);
    let mut remote = b.mr().remote();
    remote.rkey ^= 0x00ff_ff00;
    let wr = RdmaWrite::new(5, a.mr().sge(0..64).unwrap(), remote).unwrap();
    let started = Instant::now();
    a.qp.post_send(&wr).unwrap();
    let wc = a.wait_one();
    assert!(started.elapsed() < WAIT);
    assert_eq!(
        wc.status(),
        WcStatus::REM_ACCESS_ERR,
        "got {:?}",
        wc.status()
    );
    assert_eq!(wc.status().as_str(), "remote access error");
    assert_eq!(wc.wr_id(), 5);
    assert_eq!(a.qp.qp().state().unwrap(), QpState::Err);
    assert!(
        b.mr().as_slice().iter().all(|&x| x == 0),
        "target memory was written"
    );
    // Later work on the broken QP is flushed, still as data.
    let wr = RdmaWrite::new(6, a.mr().sge(0..1).unwrap(), b.mr().remote()).unwrap();
    a.qp.post_send(&wr).unwrap();
    assert_eq!(a.wait_one().status(), WcStatus::WR_FLUSH_ERR);
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn target_without_remote_write_access_is_refused() {
    let dev = test_device();
    let mut a = Side::new(&dev, 4096, caps(0));
    let mut b = Side::new(&dev, 4096, caps(0));
    connect(&mut a, &mut b);
    let read_only = b.pd.allocate(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let wr = RdmaWrite::new(1, a.mr().sge(0..16).unwrap(), read_only.remote()).unwrap();
    a.qp.post_send(&wr).unwrap();
    assert_eq!(a.wait_one().status(), WcStatus::REM_ACCESS_ERR);
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn opening_a_missing_device_lists_the_real_ones() {
    let dev = test_device();
    let err = Context::open("no_such_dev0").unwrap_err();
    match &err {
        Error::NoSuchDevice { name, available } => {
            assert_eq!(name, "no_such_dev0");
            assert!(available.contains(&dev), "{available:?} lacks {dev}");
        }
        other => panic!("expected NoSuchDevice, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("no_such_dev0") && msg.contains(&dev), "{msg}");
    let ctx = Context::open(&dev).unwrap();
    assert!(matches!(
        ctx.query_port(9),
        Err(Error::NoSuchPort { port: 9, .. })
    ));
    assert!(matches!(
        ctx.gid(PORT, 1000),
        Err(Error::NoSuchGid {
            gid_index: 1000,
            ..
        })
    ));
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn bad_connection_and_post_parameters_are_refused_before_the_device() {
    let dev = test_device();
    let mut a = Side::new(&dev, 4096, caps(32));
    let mut b = Side::new(&dev, 4096, caps(32));
    let eb = b.qp.qp().endpoint(PORT, b.gid_index, 1).unwrap();
    let active = a.options(0).mtu;
    if active < verbs::Mtu::Mtu4096 {
        let mut opts = a.options(0);
        opts.mtu = verbs::Mtu::Mtu4096;
        let err = a.qp.qp_mut().connect(&opts, &eb).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        assert!(err.to_string().contains("active MTU"), "{err}");
    }
    let mut opts = a.options(0);
    opts.hop_limit = 0;
    if a.gid_index.is_some() {
        assert!(matches!(
            a.qp.qp_mut().connect(&opts, &eb),
            Err(Error::InvalidArgument(_))
        ));
    }
    assert_eq!(
        a.qp.qp().state().unwrap(),
        QpState::Reset,
        "a refused connect touched the QP"
    );
    connect(&mut a, &mut b);
    let too_long = a.qp.qp().caps().max_inline_data as usize + 1;
    let wr = RdmaWrite::new(1, a.mr().sge(0..too_long).unwrap(), b.mr().remote())
        .unwrap()
        .inline(true);
    let err = a.qp.post_send(&wr).unwrap_err();
    assert!(err.to_string().contains("inline"), "{err}");
    assert!(a.mr().sge(0..4097).is_err());
    assert!(b.mr().remote().slice(0..4097).is_err());
    let big = a.mr().sge(0..4096).unwrap();
    assert!(RdmaWrite::new(1, big, b.mr().remote().slice(0..100).unwrap()).is_err());
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn a_thousand_create_destroy_cycles_leak_no_fd_and_no_device_resource() {
    let dev = test_device();
    // Warm up once so lazily created library state is not counted.
    drop(Side::new(&dev, 4096, caps(0)));
    let fds_before = open_fds();
    let res_before = resource_counts(&dev);
    let ctx = Context::open(&dev).unwrap();
    for i in 0..1000 {
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(16).unwrap();
        let mr = pd
            .allocate(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
            .unwrap();
        let qp = pd.create_rc_qp(&cq, &cq, &caps(0)).unwrap();
        if i % 250 == 0 {
            // Mid-life: more handles exist than at the start.
            let during = resource_counts(&dev);
            assert!(
                during["qp"].as_u64() > res_before["qp"].as_u64(),
                "{during:?}"
            );
        }
        // Drop children first in the "wrong" order: the parents must
        // survive until their last child.
        drop(pd);
        drop(cq);
        drop(mr);
        drop(qp);
    }
    drop(ctx);
    // Whole connections, too, each with its own device context.
    for _ in 0..20 {
        let mut a = Side::new(&dev, 4096, caps(0));
        let mut b = Side::new(&dev, 4096, caps(0));
        connect(&mut a, &mut b);
    }
    assert_eq!(open_fds(), fds_before, "file descriptors leaked");
    assert_eq!(resource_counts(&dev), res_before, "device resources leaked");
}
