//! RDMA tests against a real device (soft-RoCE in CI).
//!
//! All are `#[ignore]`d for plain `cargo test`; `scripts/test` runs them
//! with `--ignored` inside the VM, with `RDMAPERF_TEST_DEVICE` set. Without
//! a device they fail, never pass.

mod support;

use std::time::Instant;

use support::{
    ACCESS, PORT, Rng, Side, WAIT, connect, connect_with, open_fds, resource_counts, test_device,
    write_and_verify,
};
use verbs::{
    AccessFlags, Context, Error, LocalSge, QpState, QueuePairCaps, RecvBatch, SendBatch, SendWr,
    WcOpcode, WcStatus, WorkCompletion,
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

/// Posts `wr` on `a` and checks that it completes, within the bound, with
/// "remote access error" (`IBV_WC_REM_ACCESS_ERR`) and leaves the QP in
/// the error state: a refusal, not a hang.
fn assert_refused_remotely(a: &Side, wr: &SendWr) {
    let started = Instant::now();
    a.qp.post_send(wr).unwrap();
    let wc = a.wait_one();
    assert!(started.elapsed() < WAIT);
    assert_eq!(
        wc.status(),
        WcStatus::REM_ACCESS_ERR,
        "got {:?}",
        wc.status()
    );
    assert_eq!(wc.status().as_str(), "remote access error");
    assert_eq!(wc.wr_id(), wr.wr_id);
    assert_eq!(a.qp.qp().state().unwrap(), QpState::Err);
}

/// `reader` RDMA-READs `len` random bytes of `target` at `remote_off` into
/// its own MR at `local_off`, then checks every byte of its region: the
/// read range holds exactly the target's pattern, everything else keeps
/// the filler.
fn read_and_verify(
    reader: &Side,
    target: &Side,
    rng: &mut Rng,
    len: usize,
    remote_off: usize,
    local_off: usize,
) {
    const FILLER: u8 = 0x5a;
    let pattern = target.fill_random(rng, remote_off..remote_off + len);
    let all = reader.mr().len();
    reader.mr().fill(0..all, FILLER).unwrap();
    let sge = reader.mr().sge(local_off..local_off + len).unwrap();
    let remote = target
        .mr()
        .remote()
        .slice(remote_off as u64..(remote_off + len) as u64)
        .unwrap();
    let wr = SendWr::read(len as u64, sge, remote).unwrap();
    reader.qp.post_send(&wr).unwrap();
    let wc = reader.wait_one();
    assert!(wc.is_success(), "read of {len} B: {:?}", wc.status());
    assert_eq!(wc.opcode(), WcOpcode::RdmaRead);
    assert_eq!(wc.wr_id(), len as u64);
    let got = reader.bytes();
    assert_eq!(
        &got[local_off..local_off + len],
        &pattern[..],
        "payload of {len} B"
    );
    assert!(
        got[..local_off].iter().all(|&x| x == FILLER),
        "read of {len} B wrote before its local range"
    );
    assert!(
        got[local_off + len..].iter().all(|&x| x == FILLER),
        "read of {len} B wrote after its local range"
    );
    let mut still = vec![0; len];
    target.mr().read_into(remote_off, &mut still).unwrap();
    assert_eq!(still, pattern, "a read changed the target");
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
        write_and_verify(&a, &b, &mut rng, len, 0, i * 4099, false);
    }
    // The maximum inline size, sent inline.
    write_and_verify(&a, &b, &mut rng, max_inline, 0, 17, true);
    // One write spanning the full region.
    write_and_verify(&a, &b, &mut rng, MR_LEN, 0, 0, false);
    // And the other direction.
    write_and_verify(&b, &a, &mut rng, mtu + 1, 0, 3, false);
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn post_list_of_unsignaled_writes_ends_with_one_completion() {
    let dev = test_device();
    let mut a = Side::new(&dev, 1 << 16, caps(0));
    let mut b = Side::new(&dev, 1 << 16, caps(0));
    connect(&mut a, &mut b);
    let mut rng = Rng::new(7);
    a.fill_random(&mut rng, 0..1 << 16);
    let chunk = 4096usize;
    let mut batch = SendBatch::with_capacity(16);
    for i in 0..16 {
        let sge = a.mr().sge(i * chunk..(i + 1) * chunk).unwrap();
        let remote = b
            .mr()
            .remote()
            .slice((i * chunk) as u64..((i + 1) * chunk) as u64)
            .unwrap();
        let last = i == 15;
        batch
            .push(&SendWr::write(i as u64, sge, remote).unwrap().signaled(last))
            .unwrap();
    }
    assert!(
        batch
            .push(&SendWr::write(99, a.mr().sge(0..1).unwrap(), b.mr().remote()).unwrap())
            .is_err()
    );
    a.qp.post_batch(&mut batch).unwrap();
    let wc = a.wait_one();
    assert!(wc.is_success(), "{:?}", wc.status());
    assert_eq!(wc.wr_id(), 15);
    assert_eq!(a.bytes(), b.bytes());
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
    a.mr().write_bytes(0, b"imm-data").unwrap();
    let wr =
        SendWr::write_with_imm(1, a.mr().sge(0..8).unwrap(), b.mr().remote(), 0xdead_beef).unwrap();
    a.qp.post_send(&wr).unwrap();
    assert!(a.wait_one().is_success());
    let wc = b.wait_one();
    assert!(wc.is_success(), "{:?}", wc.status());
    assert_eq!(wc.wr_id(), 42);
    assert_eq!(wc.opcode(), WcOpcode::RecvRdmaWithImm);
    assert_eq!(wc.imm_data(), Some(0xdead_beef));
    assert_eq!(wc.byte_len(), 8);
    assert_eq!(&b.bytes()[..8], b"imm-data");
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
    let wr = SendWr::write(5, a.mr().sge(0..64).unwrap(), remote).unwrap();
    assert_refused_remotely(&a, &wr);
    assert!(
        b.bytes().iter().all(|&x| x == 0),
        "target memory was written"
    );
    // Later work on the broken QP is flushed, still as data.
    let wr = SendWr::write(6, a.mr().sge(0..1).unwrap(), b.mr().remote()).unwrap();
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
    let wr = SendWr::write(1, a.mr().sge(0..16).unwrap(), read_only.remote()).unwrap();
    a.qp.post_send(&wr).unwrap();
    assert_eq!(a.wait_one().status(), WcStatus::REM_ACCESS_ERR);
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn rdma_read_delivers_every_byte_at_edge_sizes() {
    let dev = test_device();
    let mut a = Side::new(&dev, MR_LEN, caps(0));
    let mut b = Side::new(&dev, MR_LEN, caps(0));
    assert!(b.mr().access().contains(AccessFlags::REMOTE_READ));
    // Several reads outstanding at once (perftest's -o), within the device.
    let attr = a.ctx.query_device().unwrap();
    let outs = 4
        .min(attr.max_qp_init_rd_atom)
        .min(attr.max_qp_rd_atom)
        .max(1) as u8;
    connect_with(&mut a, &mut b, |o| {
        o.max_rd_atomic = outs;
        o.max_dest_rd_atomic = outs;
    });
    let mut rng = Rng::new(0x4ead);
    let sizes = [1, 2, 63, 64, 4095, 4096, 4097, 1 << 20];
    for (i, &len) in sizes.iter().enumerate() {
        // Odd offsets on both sides, so no alignment hides a bug.
        read_and_verify(&a, &b, &mut rng, len, i * 4099, i * 13 + 1);
    }
    // And the other direction.
    read_and_verify(&b, &a, &mut rng, 4097, 5, 0);

    // A post list of 16 reads, only the last signaled: its completion
    // means every read has landed.
    let (n, chunk) = (16usize, 4096usize);
    let pattern = b.fill_random(&mut rng, 0..n * chunk);
    a.mr().fill(0..n * chunk, 0).unwrap();
    let mut batch = SendBatch::with_capacity(n);
    for i in 0..n {
        let sge = a.mr().sge(i * chunk..(i + 1) * chunk).unwrap();
        let remote = b
            .mr()
            .remote()
            .slice((i * chunk) as u64..((i + 1) * chunk) as u64)
            .unwrap();
        let wr = SendWr::read(i as u64, sge, remote).unwrap();
        batch.push(&wr.signaled(i == n - 1)).unwrap();
    }
    a.qp.post_batch(&mut batch).unwrap();
    let wc = a.wait_one();
    assert!(wc.is_success(), "{:?}", wc.status());
    assert_eq!((wc.wr_id(), wc.opcode()), (15, WcOpcode::RdmaRead));
    assert_eq!(&a.bytes()[..n * chunk], &pattern[..]);
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn read_without_remote_read_access_is_refused() {
    let dev = test_device();
    let mut a = Side::new(&dev, 4096, caps(0));
    let mut b = Side::new(&dev, 4096, caps(0));
    connect(&mut a, &mut b);
    let unreadable =
        b.pd.allocate(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
            .unwrap();
    unreadable.fill(0..4096, 0x77).unwrap();
    let wr = SendWr::read(9, a.mr().sge(0..64).unwrap(), unreadable.remote()).unwrap();
    assert_refused_remotely(&a, &wr);
    assert!(
        a.bytes().iter().all(|&x| x == 0),
        "the refused read wrote local memory"
    );
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn fetch_add_and_cmp_swap_change_the_target_as_specified() {
    let dev = test_device();
    let cap = Context::open(&dev)
        .unwrap()
        .query_device()
        .unwrap()
        .atomic_cap;
    if !cap.is_supported() {
        eprintln!("fetch_add_and_cmp_swap: skipped, {dev} reports atomic_cap {cap}");
        return;
    }
    let access = ACCESS | AccessFlags::REMOTE_ATOMIC;
    let mut a = Side::with_access(&dev, 4096, caps(0), access);
    let mut b = Side::with_access(&dev, 4096, caps(0), access);
    connect(&mut a, &mut b);
    b.mr().fill(0..4096, 0xcc).unwrap();
    b.mr().write_u64(64, 100).unwrap();
    let target = b.mr().remote().slice(64..72).unwrap();
    let run = |wr: SendWr, opcode: WcOpcode| {
        a.qp.post_send(&wr).unwrap();
        let wc = a.wait_one();
        assert!(wc.is_success(), "{:?}: {:?}", wr.op, wc.status());
        assert_eq!((wc.wr_id(), wc.opcode()), (wr.wr_id, opcode));
    };
    let slot = |i: usize| a.mr().sge(i * 8..(i + 1) * 8).unwrap();

    run(
        SendWr::fetch_add(1, slot(0), target, 5).unwrap(),
        WcOpcode::FetchAdd,
    );
    assert_eq!(
        a.mr().read_u64(0).unwrap(),
        100,
        "fetch-add returns the old value"
    );
    assert_eq!(b.mr().read_u64(64).unwrap(), 105);

    run(
        SendWr::cmp_swap(2, slot(1), target, 105, 7).unwrap(),
        WcOpcode::CompSwap,
    );
    assert_eq!(a.mr().read_u64(8).unwrap(), 105);
    assert_eq!(b.mr().read_u64(64).unwrap(), 7, "a matching compare swaps");

    run(
        SendWr::cmp_swap(3, slot(2), target, 105, 9).unwrap(),
        WcOpcode::CompSwap,
    );
    assert_eq!(a.mr().read_u64(16).unwrap(), 7);
    assert_eq!(
        b.mr().read_u64(64).unwrap(),
        7,
        "a failed compare leaves it"
    );

    // 64-bit arithmetic, wrapping.
    b.mr().write_u64(64, u64::MAX).unwrap();
    run(
        SendWr::fetch_add(4, slot(3), target, 2).unwrap(),
        WcOpcode::FetchAdd,
    );
    assert_eq!(a.mr().read_u64(24).unwrap(), u64::MAX);
    assert_eq!(b.mr().read_u64(64).unwrap(), 1);

    let got = b.bytes();
    assert!(
        got[..64].iter().all(|&x| x == 0xcc),
        "bytes before the word changed"
    );
    assert!(
        got[72..].iter().all(|&x| x == 0xcc),
        "bytes after the word changed"
    );
    assert!(a.bytes()[32..].iter().all(|&x| x == 0), "results spilled");
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn send_lands_in_a_posted_receive_batch() {
    let dev = test_device();
    let mut a = Side::new(&dev, 4096, caps(64));
    let mut b = Side::new(&dev, 4096, caps(0));
    connect(&mut a, &mut b);
    let slot = 256usize;
    let sizes = [1usize, 17, 255, 256];
    b.mr().fill(0..4096, 0xee).unwrap();
    let mut ring = RecvBatch::with_capacity(sizes.len());
    for i in 0..sizes.len() {
        let sge = b.mr().sge(i * slot..(i + 1) * slot).unwrap();
        ring.push(100 + i as u64, sge).unwrap();
    }
    assert!(ring.push(99, b.mr().sge(0..1).unwrap()).is_err());
    b.qp.post_recv_batch(&mut ring).unwrap();

    let mut rng = Rng::new(0x5e4d);
    let mut sent = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        let at = i * 1024;
        sent.push(a.fill_random(&mut rng, at..at + len));
        let sge = a.mr().sge(at..at + len).unwrap();
        let wr = if i == 2 {
            SendWr::send_with_imm(i as u64, sge, 0xfeed_0002)
        } else {
            SendWr::send(i as u64, sge)
        };
        a.qp.post_send(&wr.inline(i == 0)).unwrap();
        let wc = a.wait_one();
        assert!(wc.is_success(), "send {i}: {:?}", wc.status());
        assert_eq!((wc.wr_id(), wc.opcode()), (i as u64, WcOpcode::Send));
    }
    for (i, &len) in sizes.iter().enumerate() {
        let wc = b.wait_one();
        assert!(wc.is_success(), "receive {i}: {:?}", wc.status());
        assert_eq!(wc.wr_id(), 100 + i as u64, "receives complete in order");
        assert_eq!(wc.opcode(), WcOpcode::Recv);
        assert_eq!(wc.byte_len() as usize, len);
        assert_eq!(wc.imm_data(), (i == 2).then_some(0xfeed_0002));
    }
    let got = b.bytes();
    for (i, &len) in sizes.iter().enumerate() {
        let at = i * slot;
        assert_eq!(&got[at..at + len], &sent[i][..], "message {i}");
        assert!(
            got[at + len..at + slot].iter().all(|&x| x == 0xee),
            "message {i} spilled past its length"
        );
    }
    assert!(got[sizes.len() * slot..].iter().all(|&x| x == 0xee));
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn receive_batch_outside_the_bound_region_is_refused_before_the_device() {
    let dev = test_device();
    let mut a = Side::new(&dev, 4096, caps(0));
    let mut b = Side::new(&dev, 4096, caps(0));
    connect(&mut a, &mut b);
    let refused = |r: verbs::Result<()>, what: &str| {
        let err = r.unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{what}: {err}");
        err.to_string()
    };
    let mut ring = RecvBatch::with_capacity(2);
    ring.push(1, b.mr().sge(0..64).unwrap()).unwrap();
    let past_end = LocalSge {
        addr: b.mr().addr() + 4096 - 4,
        length: 8,
        lkey: b.mr().lkey(),
    };
    ring.push(2, past_end).unwrap();
    let msg = refused(b.qp.post_recv_batch(&mut ring), "past the end");
    assert!(msg.contains("outside"), "{msg}");
    // Another region of the same PD is outside the bound one, too.
    let other = b.pd.allocate(4096, AccessFlags::LOCAL_WRITE).unwrap();
    ring.clear();
    ring.push(3, other.sge(0..64).unwrap()).unwrap();
    refused(b.qp.post_recv_batch(&mut ring), "another region");
    refused(b.qp.post_recv(4, past_end), "a single receive");

    // Nothing was posted: a send lands in the receive posted now, not in
    // the refused batch's valid first entry (receives are consumed in
    // order).
    ring.clear();
    ring.push(5, b.mr().sge(64..128).unwrap()).unwrap();
    b.qp.post_recv_batch(&mut ring).unwrap();
    a.mr().write_bytes(0, b"landed").unwrap();
    a.qp.post_send(&SendWr::send(0, a.mr().sge(0..6).unwrap()))
        .unwrap();
    assert!(a.wait_one().is_success());
    let wc = b.wait_one();
    assert!(wc.is_success(), "{:?}", wc.status());
    assert_eq!((wc.wr_id(), wc.byte_len()), (5, 6));
    let got = b.bytes();
    assert_eq!(&got[64..70], b"landed");
    assert!(
        got[..64].iter().all(|&x| x == 0),
        "a refused receive was used"
    );

    // A region without LOCAL_WRITE: the device must not write it, so
    // receives, reads and atomics from it are refused (its QP is not even
    // connected: the check comes first).
    let ro = Side::with_access(&dev, 4096, caps(0), AccessFlags::NONE);
    ring.clear();
    ring.push(1, ro.mr().sge(0..64).unwrap()).unwrap();
    let msg = refused(ro.qp.post_recv_batch(&mut ring), "receive");
    assert!(msg.contains("LOCAL_WRITE"), "{msg}");
    let read = SendWr::read(1, ro.mr().sge(0..8).unwrap(), b.mr().remote()).unwrap();
    refused(ro.qp.post_send(&read), "read");
    let fa = SendWr::fetch_add(1, ro.mr().sge(0..8).unwrap(), b.mr().remote(), 1).unwrap();
    refused(ro.qp.post_send(&fa), "fetch-add");
    let mut batch = SendBatch::with_capacity(1);
    batch.push(&read).unwrap();
    refused(ro.qp.post_batch(&mut batch), "batched read");
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
    let eb = b.qp.endpoint(PORT, b.gid_index, 1).unwrap();
    let active = a.options(0).mtu;
    if active < verbs::Mtu::Mtu4096 {
        let mut opts = a.options(0);
        opts.mtu = verbs::Mtu::Mtu4096;
        let err = a.qp.connect(&opts, &eb).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        assert!(err.to_string().contains("active MTU"), "{err}");
    }
    let mut opts = a.options(0);
    opts.hop_limit = 0;
    if a.gid_index.is_some() {
        assert!(matches!(
            a.qp.connect(&opts, &eb),
            Err(Error::InvalidArgument(_))
        ));
    }
    for (initiator, target) in [(0, 1), (1, 0)] {
        let mut opts = a.options(0);
        opts.max_rd_atomic = initiator;
        opts.max_dest_rd_atomic = target;
        let err = a.qp.connect(&opts, &eb).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        assert!(err.to_string().contains("at least 1"), "{err}");
    }
    let attr = a.ctx.query_device().unwrap();
    let limit = attr.max_qp_init_rd_atom;
    if (1..255).contains(&limit) {
        let mut opts = a.options(0);
        opts.max_rd_atomic = limit as u8 + 1;
        let err = a.qp.connect(&opts, &eb).unwrap_err();
        assert!(err.to_string().contains("max_qp_init_rd_atom"), "{err}");
    }
    assert_eq!(
        a.qp.qp().state().unwrap(),
        QpState::Reset,
        "a refused connect touched the QP"
    );
    connect(&mut a, &mut b);
    let too_long = a.qp.qp().caps().max_inline_data as usize + 1;
    let wr = SendWr::write(1, a.mr().sge(0..too_long).unwrap(), b.mr().remote())
        .unwrap()
        .inline(true);
    let err = a.qp.post_send(&wr).unwrap_err();
    assert!(err.to_string().contains("inline"), "{err}");
    // Inline READ: the device would have nowhere to write.
    let wr = SendWr::read(1, a.mr().sge(0..8).unwrap(), b.mr().remote())
        .unwrap()
        .inline(true);
    let err = a.qp.post_send(&wr).unwrap_err();
    assert!(err.to_string().contains("inline"), "{err}");
    assert!(a.mr().sge(0..4097).is_err());
    assert!(b.mr().remote().slice(0..4097).is_err());
    let big = a.mr().sge(0..4096).unwrap();
    let small = b.mr().remote().slice(0..100).unwrap();
    assert!(SendWr::write(1, big, small).is_err());
    assert!(SendWr::read(1, big, small).is_err());
    // Nothing refused reached the device: the QP is healthy, no completion.
    let mut wc = [WorkCompletion::default()];
    assert_eq!(a.cq.poll(&mut wc).unwrap(), 0);
    assert_eq!(a.qp.qp().state().unwrap(), QpState::Rts);
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
