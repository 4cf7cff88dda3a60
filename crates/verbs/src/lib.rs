//! Safe lifecycle of RDMA verbs resources over `rdma-sys` and the system's
//! libibverbs: device [`Context`], [`ProtectionDomain`], [`CompletionQueue`],
//! [`MemoryRegion`] and reliable-connected [`QueuePair`], with the work
//! requests every perftest test needs (RDMA WRITE with and without
//! immediate, RDMA READ, SEND, fetch-and-add, compare-and-swap, receives),
//! and the RDMA connection manager ([`CmId`]: perftest's `-R`, the only way
//! to connect on iWARP), every wait on it bounded.
//! This is the only crate of rdmaperf that contains `unsafe`.
//!
//! # Ownership
//! Every handle keeps its parents alive through an `Arc`:
//!
//! | handle | owns | keeps alive |
//! |---|---|---|
//! | [`Context`] (cheap clone) | the `ibv_context` | — |
//! | [`ProtectionDomain`] (cheap clone) | the `ibv_pd` | its `Context` |
//! | [`CompletionQueue`] (cheap clone) | the `ibv_cq` | its `Context` |
//! | [`MemoryRegion`] | a page-aligned zeroed buffer and its `ibv_mr` | its `ProtectionDomain` |
//! | [`QueuePair`] | the `ibv_qp` | its `ProtectionDomain`, send and receive `CompletionQueue`s (and its `CmId` when made by [`CmId::create_qp`]) |
//! | [`CmId`] (cheap clone) | the `rdma_cm_id` | its [`EventChannel`] |
//! | a `Context` from [`CmId::context`] | nothing (librdmacm's context) | its `CmId` |
//!
//! So one struct can own a whole connection (context, PD, CQ, QP, MRs) in any
//! field order: a parent is destroyed only after its last child, which is
//! the order libibverbs requires (`ibv_destroy_cq` and `ibv_dealloc_pd`
//! answer `EBUSY` otherwise). A failed destroy panics (it means a resource
//! leaked through a raw handle) unless the thread is already panicking, in
//! which case it is reported on stderr.
//!
//! # Errors
//! One [`Error`] enum; every FFI return goes through one checker that names
//! the verb and carries the errno. A failed work request is not an `Err`: it
//! is a [`WorkCompletion`] whose [`WcStatus`] says what happened
//! (`ibv_wc_status_str`).
//!
//! # Thread safety
//! libibverbs is thread-safe, so every handle is `Send + Sync`. Polling one
//! CQ or posting on one QP from several threads is allowed but serialised
//! by the provider; a benchmark gives each thread its own QP and CQ.
//!
//! # The posting safety contract
//! Building a work request ([`SendWr`], [`SendBatch`], [`PreparedSends`],
//! [`RecvBatch`], [`MemoryRegion::sge`]) is safe: it is plain data,
//! bounds-checked against the region it came from. Handing it to the device
//! ([`QueuePair::post_send`], [`QueuePair::post_batch`],
//! [`QueuePair::post_prepared`], [`QueuePair::post_recv`],
//! [`QueuePair::post_recv_batch`]) is `unsafe`:
//! from that moment the device reads the local memory (WRITE, SEND) or
//! *writes* it (READ, atomics, receives), so the caller promises that the
//! memory stays allocated and registered until the request's completion,
//! or a later signaled one on the same QP, has been polled, and, where the
//! device writes, that Rust code touches it meanwhile only in ways that
//! tolerate a concurrent foreign write. Inline payloads are copied at post
//! time and carry no such obligation.
//!
//! [`BoundQueuePair`] discharges the contract for the rest of the
//! workspace: it owns a QP and an `Arc` of the one region all its work
//! uses, checks every post against that region, and drops the QP first.
//!
//! # Prepared requests
//! A hot loop that posts the same kind of request over and over (a
//! bandwidth test) builds a [`PreparedSends`] list once and changes only
//! each request's id, offset and signal flag before posting it again, as
//! perftest does: checked once when made, one range check per post.
//!
//! # Two post paths
//! A queue pair posts send work either with `ibv_post_send`
//! ([`PostPath::Classic`], [`ProtectionDomain::create_rc_qp`]) or, as
//! perftest does by default, with the `ibv_wr_*` builders on a QP made by
//! `ibv_create_qp_ex` ([`PostPath::Extended`],
//! [`ProtectionDomain::create_rc_qp_on`]); [`QueuePair::post_path`] says
//! which one a QP got (a device without the extended path falls back to
//! the classic one). Both take the same [`SendWr`] and [`SendBatch`], make
//! the same checks, carry the same safety contract and post the same work:
//! the extended request is translated from the classic `ibv_send_wr`. A
//! batch is one `ibv_wr_start`/`ibv_wr_complete`. Receives always use
//! `ibv_post_recv`.
//!
//! rdma-sys 0.3.0 cannot reach the extended verbs (its `verbs_get_ctx`
//! tests the ABI sentinel against `u32::MAX`, not `UINTPTR_MAX`), so this
//! crate looks the extended op table up itself, as rdma-core's `verbs.h`
//! does; [`Context::query_port`] uses it too, which is how
//! [`PortAttributes::active_speed_ex`] (XDR) is read.
//!
//! # Memory shared with the device
//! No safe function hands out a reference to a region's bytes: the device
//! and peers write them outside Rust's view. [`MemoryRegion`] offers atomic
//! accessors through `&self` instead (its type documentation says which
//! and why).
//!
//! # Soft-RoCE versus hardware
//! rxe forgives what real NICs do not (send-queue overflow, a path MTU above
//! the active MTU, a zero hop limit). [`QueuePair::connect`] validates MTU
//! and GRH parameters itself, and callers must count outstanding work
//! against [`QueuePairCaps::max_send_wr`].

#![deny(missing_docs)]

mod bound;
mod cm;
mod context;
mod cq;
mod error;
mod extended;
mod mr;
mod pd;
mod prepared;
mod qp;
mod shared;
pub mod tsc;
mod wr;
mod wr_ex;

pub use bound::BoundQueuePair;
pub use cm::{CmEventKind, CmId, ConnectParams, ConnectRequest, EventChannel, PRIVATE_DATA_LEN};
pub use context::{
    AtomicCap, Context, DeviceAttributes, DeviceInfo, Gid, GidEntry, GidType, LinkLayer, Mtu,
    PortAttributes, PortState, Transport, devices,
};
pub use cq::{CompletionQueue, WcOpcode, WcStatus, WorkCompletion};
pub use error::{Error, Result};
pub use mr::{AccessFlags, HUGE_PAGE, LocalSge, MemoryRegion, RemoteMemory};
pub use pd::ProtectionDomain;
pub use prepared::PreparedSends;
pub use qp::{ConnectOptions, Endpoint, PathAttr, PostPath, QpState, QueuePair, QueuePairCaps};
/// The raw bindings, for what this crate does not wrap.
pub use rdma_sys as ffi;
pub use wr::{BatchFull, Op, RecvBatch, SendBatch, SendWr};

/// Reports a failed destroy verb from a `Drop`: panics (a leak through a
/// raw handle is a bug), unless already unwinding.
fn drop_failed(verb: &'static str, rc: i32) {
    if rc == 0 {
        return;
    }
    let err = error::from_errno(verb, error::errno_of(rc));
    if std::thread::panicking() {
        eprintln!("rdmaperf-verbs: {err} (while unwinding; resource leaked)");
    } else {
        panic!("rdmaperf-verbs: {err}; a child resource is still alive through a raw handle");
    }
}
