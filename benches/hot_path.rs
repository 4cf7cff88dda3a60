//! Criterion benches of the hot paths: recording a latency sample, the
//! handshake codec, the report writers, making a bandwidth loop's work
//! requests ready (built and batched, or prepared), and — when `RDMAPERF_TEST_DEVICE`
//! names a device (inside the soft-RoCE VM: `scripts/vm-run -- cargo bench`
//! or the built bench binary) — one post-and-poll round trip on a connected
//! QP pair.
//!
//! Run: `cargo bench` (host groups), or inside the VM for the device group.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use engine::bench::config::Ring;
use engine::format::lat_table::LatTable;
use engine::format::table::{Table, TableStyle, Unit};
use engine::proto::wire::{self, Message, QpInfo, SideInfo};
use engine::results::bw::{BwResult, Measurement};
use engine::results::lat::{LatRecorder, LatStats};
use verbs::{
    AccessFlags, BoundQueuePair, ConnectOptions, Context, LocalSge, PostPath, PreparedSends,
    QueuePairCaps, RemoteMemory, SendBatch, SendWr, WorkCompletion,
};

fn stats_path(c: &mut Criterion) {
    let mut rec = LatRecorder::new(1 << 20);
    let mut x = 12_345u64;
    c.bench_function("lat_record_sample", |b| {
        b.iter(|| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            rec.record(black_box(20_000 + (x >> 50)));
        })
    });
    let mut full = LatRecorder::new(100_000);
    for i in 0..100_000u64 {
        full.record(20_000 + (i * 7919) % 5_000);
    }
    c.bench_function("lat_stats_100k_samples", |b| {
        b.iter(|| black_box(full.stats(2)))
    });
}

/// One timestamp of each `--clock` source: what each latency sample pays
/// once (compare the two within one run).
fn clock_reads(c: &mut Criterion) {
    use rdmaperf::clock::{MonotonicTicks, Ticks, TscTicks};
    let mono = MonotonicTicks::starting_now();
    c.bench_function("clock_read_monotonic", |b| b.iter(|| black_box(mono.now())));
    if verbs::tsc::AVAILABLE {
        c.bench_function("clock_read_tsc", |b| b.iter(|| black_box(TscTicks.now())));
    }
}

fn qps(n: usize) -> Vec<QpInfo> {
    (0..n)
        .map(|i| QpInfo {
            qpn: 0x11 + i as u32,
            psn: 0xabcdef,
            lid: 0,
            gid: [
                0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0x24, 0x13, 0xff, 0xfe, 0xc5, 0x51, 0x8f,
            ],
            rkey: 0x1234,
            addr: 0x7f00_0000_0000 + (i as u64) * 65536,
            len: 65536,
        })
        .collect()
}

fn codec(c: &mut Criterion) {
    let side = SideInfo {
        device: "mlx5_0".into(),
        port: 1,
        gid_index: Some(3),
        gid: [0; 16],
        mtu: 4096,
        link_layer: "Ethernet".into(),
        rate: Some("400 Gb/sec (4X NDR)".into()),
        max_rd_atom: 16,
    };
    let hello = Message::Hello {
        test: "write_bw".into(),
        config: serde_json::to_value(engine::bench::config::BwConfig::default()).unwrap(),
        sides: vec![side],
        qps: qps(16),
        connection: Default::default(),
    };
    let frame = wire::encode(&hello).unwrap();
    c.bench_function("wire_encode_hello_16_qps", |b| {
        b.iter(|| black_box(wire::encode(black_box(&hello)).unwrap()))
    });
    c.bench_function("wire_decode_hello_16_qps", |b| {
        b.iter(|| black_box(wire::decode(black_box(&frame)).unwrap()))
    });
    let barrier = wire::encode(&Message::Barrier { phase: 7 }).unwrap();
    c.bench_function("wire_decode_barrier", |b| {
        b.iter(|| black_box(wire::decode(black_box(&barrier)).unwrap()))
    });
}

fn reports(c: &mut Criterion) {
    let r = BwResult::from_measurement(&Measurement {
        size: 65536,
        iterations: 5000,
        table_iterations: 5000,
        messages: 5000,
        elapsed_ns: 13_000_000,
        peak_msgs_per_sec: Some(390_000.0),
        cpu_ns: 13_000_000,
        wall_ns: 13_100_000,
        system_cpu_pct: Some(12.5),
        operations: 5000,
    });
    let style = TableStyle {
        unit: Unit::MibPerSec,
        peak: true,
        cpu_column: true,
    };
    c.bench_function("bw_table_row", |b| {
        b.iter(|| black_box(Table::<Vec<u8>>::row(black_box(&r), style)))
    });
    c.bench_function("bw_json_result", |b| {
        b.iter(|| black_box(serde_json::to_string(black_box(&r)).unwrap()))
    });
    let mut rec = LatRecorder::new(1000);
    for i in 0..1000u64 {
        rec.record(2_000 + i);
    }
    let s: LatStats = rec.stats(2);
    c.bench_function("lat_table_row", |b| {
        b.iter(|| black_box(LatTable::<Vec<u8>>::row(black_box(&s))))
    });
}

/// Making a bandwidth loop's requests ready to post, per post of
/// `post_list` WRITEs of 64 B along the 4 KiB ring (`Ring::offset`): built and pushed into
/// a batch (the loop before issue 20) against a prepared list whose ids,
/// offsets and signal flags are set (the loop now). Host only: no device.
fn request_building(c: &mut Criterion) {
    let local = LocalSge {
        addr: 0x10_0000,
        length: 64,
        lkey: 1,
    };
    let remote = RemoteMemory {
        addr: 0x20_0000,
        len: 4096,
        rkey: 2,
    };
    let ring = Ring::for_size(64);
    let offset = |i: u64| ring.offset(i);
    let mut group = c.benchmark_group("requests");
    for post_list in [1u64, 16] {
        let mut batch = SendBatch::with_capacity(post_list as usize);
        let mut i = 0u64;
        group.bench_function(format!("built_and_batched/{post_list}"), |b| {
            b.iter(|| {
                batch.clear();
                for _ in 0..post_list {
                    let at = offset(i);
                    let l = LocalSge {
                        addr: local.addr + at,
                        ..local
                    };
                    let r = RemoteMemory {
                        addr: remote.addr + at,
                        ..remote
                    };
                    let wr = SendWr::write(i, l, r).unwrap().signaled(i % 16 == 15);
                    batch.push(black_box(&wr)).unwrap();
                    i += 1;
                }
                black_box(&batch);
            })
        });
        let template = SendWr::write(0, local, remote).unwrap();
        let mut list = PreparedSends::new(&template, post_list as usize, 4096).unwrap();
        let mut i = 0u64;
        group.bench_function(format!("prepared/{post_list}"), |b| {
            b.iter(|| {
                for k in 0..post_list as usize {
                    list.set(k, black_box(i), offset(i), i % 16 == 15).unwrap();
                    i += 1;
                }
                black_box(&list);
            })
        });
    }
    group.finish();
}

/// One RDMA WRITE of 2 bytes posted and its completion polled, on a QP
/// pair connected to itself through the device, on each post path
/// (`ibv_post_send` and `ibv_wr_*`), in one run so their ratio is
/// comparable.
fn post_and_poll(c: &mut Criterion) {
    let Ok(dev) = std::env::var("RDMAPERF_TEST_DEVICE") else {
        eprintln!("post_and_poll: skipped (set RDMAPERF_TEST_DEVICE, e.g. inside scripts/vm-run)");
        return;
    };
    let ctx = Context::open(&dev).expect("open device");
    let port = ctx.query_port(1).expect("port 1");
    let gid_index = port.link_layer.is_ethernet().then_some(0);
    let mut group = c.benchmark_group("device");
    group.measurement_time(Duration::from_secs(5));
    for path in [PostPath::Classic, PostPath::Extended] {
        let mk = || {
            let pd = ctx.alloc_pd().unwrap();
            let cq = ctx.create_cq(64).unwrap();
            let mr = pd
                .allocate(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
                .unwrap();
            let caps = QueuePairCaps {
                max_send_wr: 16,
                max_inline_data: 64,
                ..QueuePairCaps::default()
            };
            let qp = pd.create_rc_qp_on(&cq, &cq, &caps, path).unwrap();
            (cq, BoundQueuePair::new(qp, Arc::new(mr)).unwrap())
        };
        let (cq_a, mut a) = mk();
        let (_cq_b, mut b) = mk();
        let got = a.qp().post_path();
        let ea = a.endpoint(1, gid_index, 1).unwrap();
        let eb = b.endpoint(1, gid_index, 2).unwrap();
        let opts = |psn| ConnectOptions {
            port: 1,
            gid_index,
            mtu: port.active_mtu,
            psn,
            ..ConnectOptions::default()
        };
        a.connect(&opts(1), &eb).unwrap();
        b.connect(&opts(2), &ea).unwrap();
        let remote = b.region().remote();
        let write = SendWr::write(1, a.region().sge(0..2).unwrap(), remote)
            .unwrap()
            .inline(true);
        let mut wc = [WorkCompletion::default()];
        let name = match got {
            PostPath::Classic => "post_and_poll_2B_inline_write/ibv_post_send",
            PostPath::Extended => "post_and_poll_2B_inline_write/ibv_wr",
        };
        group.bench_function(name, |bch| {
            bch.iter(|| {
                a.post_send(&write).unwrap();
                cq_a.poll_until(&mut wc, Instant::now() + Duration::from_secs(5))
                    .expect("a completion within 5 s");
                assert!(wc[0].is_success());
            })
        });
        let mut prepared = PreparedSends::new(&write, 1, 2).unwrap();
        group.bench_function(format!("{name}/prepared"), |bch| {
            bch.iter(|| {
                a.post_prepared(&mut prepared).unwrap();
                cq_a.poll_until(&mut wc, Instant::now() + Duration::from_secs(5))
                    .expect("a completion within 5 s");
                assert!(wc[0].is_success());
            })
        });
    }
    group.finish();
}

/// The coordinator's logic at 1,024 ranks (no sockets): one round of all
/// pairs (512 pairs: the tracker started, 1,024 reports, a poll after
/// each, finished), and the verdicts over the whole run's 1,047,552
/// directions. Issue 22's target: under 50 ms a round.
fn cluster_coordinator(c: &mut Criterion) {
    use engine::cluster::rendezvous::{RoundReport, RoundState, RoundTracker};
    use engine::cluster::schedule::all_pairs;
    use engine::cluster::verdict::{self, Measurement as Direction, Outcome, Thresholds};
    const N: u32 = 1_024;
    let schedule = all_pairs(N).unwrap();
    let alive = vec![true; N as usize];
    let reports = |i: u32| -> Vec<RoundReport> {
        let round = &schedule.rounds[i as usize];
        round
            .pairs
            .iter()
            .flat_map(|p| {
                let both =
                    [(p.client, p.server), (p.server, p.client)].map(|(from, to)| Direction {
                        round: i,
                        from,
                        to,
                        rail: 0,
                        outcome: Outcome::Measured {
                            msg_rate_mpps: None,
                            bw_gbps: 390.0 + f64::from((from * 7 + to) % 10),
                            lat_us: None,
                            latency: None,
                        },
                    });
                [
                    RoundReport {
                        rank: p.client,
                        measurements: both.to_vec(),
                    },
                    RoundReport {
                        rank: p.server,
                        measurements: Vec::new(),
                    },
                ]
            })
            .collect()
    };
    let mut group = c.benchmark_group("cluster_1024");
    group.sample_size(20);
    let round = reports(7);
    group.bench_function("coordinator_round", |b| {
        b.iter_batched(
            || round.clone(),
            |reports| {
                let now = Instant::now();
                let mut t = RoundTracker::start(
                    7,
                    &schedule.rounds[7],
                    &alive,
                    now,
                    Duration::from_secs(30),
                );
                for r in reports {
                    t.report(r);
                    black_box(t.poll(now));
                }
                assert_eq!(t.poll(now), RoundState::Done);
                black_box(t.finish())
            },
            criterion::BatchSize::LargeInput,
        )
    });
    let all: Vec<Direction> = (0..schedule.rounds.len() as u32)
        .flat_map(|i| {
            let mut t = RoundTracker::start(
                i,
                &schedule.rounds[i as usize],
                &alive,
                Instant::now(),
                Duration::from_secs(30),
            );
            for r in reports(i) {
                t.report(r);
            }
            t.finish().0
        })
        .collect();
    assert_eq!(all.len(), 1_047_552);
    group.sample_size(10);
    group.bench_function("judge_all_pairs", |b| {
        b.iter(|| black_box(verdict::judge(N, &[], &all, &Thresholds::default())))
    });
    group.finish();
}

criterion_group!(
    benches,
    cluster_coordinator,
    stats_path,
    clock_reads,
    codec,
    reports,
    request_building,
    post_and_poll
);
criterion_main!(benches);
