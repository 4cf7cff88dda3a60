//! The control session as two deterministic state machines, one per side
//! ([`ClientSession`], [`ServerSession`]): no I/O, the time passed in.
//! They say what to send, what to wait for and within which [`Bound`],
//! and decide every rule of the protocol: the hello checks (the test, the
//! configuration decoded and valid, the offered QPs, `--max-mem`), the
//! path MTU and outstanding reads both sides use, the walk over the sizes
//! (phases, `--run_infinitely`, an early stop), the barrier and result
//! exchange, the goodbye. The driver (the CLI's runner) moves the
//! messages over the control channel and does what is asked between them
//! (create and connect the QPs, prepare, measure, show).
//!
//! A session, as the messages go:
//!
//! ```text
//! client                                server
//!   Hello{test, config, sides, qps} ->    ServerSession::hello (refuse: Reject)
//!                                   <-    Accept{sides, qps, mtu}
//!   per phase:  Barrier{p}          ->    ServerSession::next -> Phase
//!                                   <-    Barrier{p}
//!               (both measure)
//!   Done{p, result}                 ->
//!                                   <-    Done{p, result}
//!   Bye                             ->    ServerSession::next -> Bye
//!                                   <-    Bye
//! ```
//!
//! Results and configurations are typed here and JSON on the wire
//! ([`crate::proto::wire`] stays independent of the configuration types).
//!
//! `sides` is a list (one entry per device) so that a run over every NIC
//! of a node changes no message; this build runs one device per side, so
//! both machines send exactly one entry and refuse any other count.

use std::fmt;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::bench::config::{TestConfig, setup_budget};
use crate::proto::wire::{MAX_PEER_TEXT, Message, QpConnection, QpInfo, SideInfo, printable};

/// How long a wait for the peer's next message may last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// `--timeout` from the start of the wait; heartbeats do not extend it.
    Message,
    /// A measured phase's deadline (its iterations or duration plus
    /// `--timeout`, from its start barrier): heartbeats show the peer is
    /// alive — each frame must still come within `--timeout` of the last —
    /// but do not extend the phase past `at`.
    Phase {
        /// The deadline.
        at: Instant,
        /// The phase's whole bound, for the error message.
        bound: Duration,
    },
    /// The set-up of a session's QPs (the peer creates and connects them,
    /// seconds for thousands): as [`Bound::Phase`].
    Setup {
        /// The deadline.
        at: Instant,
        /// The whole bound, for the error message.
        bound: Duration,
    },
}

impl Bound {
    /// A measured phase that starts at `now` and may last `bound`.
    pub fn phase(now: Instant, bound: Duration) -> Self {
        Self::Phase {
            at: now + bound,
            bound,
        }
    }

    /// A set-up that starts at `now` and may last `bound`.
    pub fn setup(now: Instant, bound: Duration) -> Self {
        Self::Setup {
            at: now + bound,
            bound,
        }
    }

    /// The set-up bound of a peer creating `qps` queue pairs:
    /// [`setup_budget`] (`timeout` plus an allowance per QP).
    pub fn setup_of(now: Instant, qps: usize, timeout: Duration) -> Self {
        Self::setup(
            now,
            setup_budget(u32::try_from(qps).unwrap_or(u32::MAX), timeout),
        )
    }

    /// The bound on the answer to barrier `phase`: the first comes once
    /// the peer has connected its QPs too ([`Bound::setup_of`]), the
    /// others within `--timeout` ([`Bound::Message`]).
    pub fn barrier(now: Instant, phase: u32, qps: usize, timeout: Duration) -> Self {
        if phase == 0 {
            Self::setup_of(now, qps, timeout)
        } else {
            Self::Message
        }
    }

    /// When the wait must end at the latest, for a wait started at `now`
    /// with `timeout` between frames.
    pub fn deadline(self, now: Instant, timeout: Duration) -> Instant {
        match self {
            Self::Message => now + timeout,
            Self::Phase { at, .. } | Self::Setup { at, .. } => at,
        }
    }
}

/// Why a session cannot go on (the peer's doing or a rule of the
/// protocol); the driver adds where (the peer's address).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionError {
    /// The peer sent `got` where `expected` was due.
    Unexpected {
        /// What was due (`accept`, `barrier`, `done`, `bye`, `hello`).
        expected: &'static str,
        /// The message's name.
        got: &'static str,
    },
    /// The peer refused the test ([`Message::Reject`]), its reason made
    /// printable.
    PeerRefused(String),
    /// The server is busy with another client ([`Message::Busy`]), its
    /// reason made printable.
    Busy(String),
    /// The server chose an MTU that is none.
    InvalidMtu(u32),
    /// The server's accept described this many device sides, not one.
    SideCount(usize),
    /// The client asked for rdma_cm and the server's accept named no
    /// rdma_cm port.
    NoCmPort,
    /// The client started a phase beyond the test's sizes.
    PhaseBeyondSizes {
        /// The phase.
        phase: u32,
        /// The test's sizes.
        sizes: usize,
    },
    /// The client said goodbye before every size ran.
    EndedEarly {
        /// Phases run.
        phases: u32,
        /// The test's sizes.
        sizes: usize,
    },
    /// The driver called `called` where the machine's order does not
    /// allow it (a bug in the driver, refused in every build; the
    /// machine's state is left as it was).
    OutOfOrder {
        /// The method called.
        called: &'static str,
        /// Where the session was (`before the hello`, ...).
        at: &'static str,
    },
    /// A result that does not decode.
    BadResult {
        /// Whose (`the server's`, `the client's`).
        whose: &'static str,
        /// The decoder's message.
        error: String,
    },
}

impl fmt::Display for SessionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unexpected { expected, got } => {
                write!(f, "protocol error: expected {expected}, got {got}")
            }
            Self::PeerRefused(reason) => write!(f, "the peer refused the test: {reason}"),
            Self::Busy(reason) => write!(f, "the server is busy: {reason}"),
            Self::InvalidMtu(mtu) => write!(f, "server chose an invalid MTU {mtu}"),
            Self::SideCount(count) => write!(
                f,
                "this build runs one device per side; the server described {count}"
            ),
            Self::NoCmPort => write!(
                f,
                "the server accepted an rdma_cm test (-R) without naming its rdma_cm port"
            ),
            Self::PhaseBeyondSizes { phase, sizes } => {
                write!(f, "client started phase {phase} of a {sizes}-size test")
            }
            Self::EndedEarly { phases, sizes } => {
                write!(f, "client ended after {phases} of {sizes} sizes")
            }
            Self::BadResult { whose, error } => write!(f, "{whose} result: {error}"),
            Self::OutOfOrder { called, at } => {
                write!(
                    f,
                    "internal error: session driven out of order: {called} called {at}"
                )
            }
        }
    }
}

impl std::error::Error for SessionError {}

/// The error for message `got` where `expected` was due (a `Reject`
/// carries its reason).
pub fn unexpected(got: &Message, expected: &'static str) -> SessionError {
    match got {
        Message::Reject { reason } => SessionError::PeerRefused(printable(reason, MAX_PEER_TEXT)),
        other => SessionError::Unexpected {
            expected,
            got: other.name(),
        },
    }
}

/// The path MTUs a port can have, in bytes.
pub const PATH_MTUS: [u32; 5] = [256, 512, 1024, 2048, 4096];

/// The path MTU the server chooses: the smaller of both sides' active
/// MTUs (a client MTU that is none counts as the smallest, 256).
pub fn path_mtu(ours: u32, client: u32) -> u32 {
    let client = if PATH_MTUS.contains(&client) {
        client
    } else {
        PATH_MTUS[0]
    };
    ours.min(client)
}

/// The note the server gives when the client's `-m` is above its active
/// MTU (as perftest: the active MTU is used, said, not refused).
pub fn mtu_note(requested: Option<u32>, ours: u32) -> Option<String> {
    requested.filter(|&r| r > ours).map(|r| {
        format!(
            "note: the client's -m/--mtu {r} is above this port's active MTU {ours}; using the smaller MTU of both sides"
        )
    })
}

/// The outstanding reads both sides set: the smallest of the request and
/// both devices' `max_qp_rd_atom` (perftest's `ctx_set_out_reads` and
/// `compare_ibv_device`), at least 1; 0 for a test that posts no reads.
pub fn effective_outs(uses_reads: bool, requested: u32, a: &SideInfo, b: &SideInfo) -> u32 {
    if !uses_reads {
        return 0;
    }
    requested.min(a.max_rd_atom).min(b.max_rd_atom).max(1)
}

/// The client's `-o` against its own device, as perftest resolves it:
/// the device's maximum by default; above it, the maximum and a warning
/// (the second value). 0 for a test that posts no reads.
///
/// # Errors
/// A device that allows no outstanding reads.
pub fn resolve_outs(
    uses_reads: bool,
    requested: u32,
    local_max: u32,
) -> Result<(u32, Option<String>), String> {
    if !uses_reads {
        return Ok((0, None));
    }
    if local_max == 0 {
        return Err("the device allows no outstanding RDMA READs (max_qp_rd_atom is 0)".into());
    }
    let warning = (requested > local_max).then(|| {
        format!(
            "warning: -o/--outs {requested}: number of outstanding reads is above max = {local_max}; \
             changing to that max value"
        )
    });
    let outs = if requested == 0 {
        local_max
    } else {
        requested.min(local_max)
    };
    Ok((outs, warning))
}

/// The size of phase `phase`: the sizes in order; with `endless`, the last
/// again and again.
pub fn size_of_phase(sizes: &[u64], endless: bool, phase: u32) -> Option<u64> {
    sizes
        .get(phase as usize)
        .or_else(|| sizes.last().filter(|_| endless))
        .copied()
}

/// `side` as sent in the handshake: with the path MTU in use.
fn with_mtu(side: &SideInfo, mtu: u32) -> SideInfo {
    SideInfo {
        mtu,
        ..side.clone()
    }
}

/// Decodes a peer's result.
fn decode_result<O: DeserializeOwned>(
    result: Option<Value>,
    whose: &'static str,
) -> Result<Option<O>, SessionError> {
    result
        .map(serde_json::from_value)
        .transpose()
        .map_err(|e| SessionError::BadResult {
            whose,
            error: e.to_string(),
        })
}

/// Encodes this side's result (a result that cannot be encoded is sent as
/// none: the peer then shows what it measured itself).
fn encode_result<O: Serialize>(result: Option<&O>) -> Option<Value> {
    result.and_then(|r| serde_json::to_value(r).ok())
}

/// What a session walks through, the same on both sides once the client's
/// configuration is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Walk {
    /// The sizes, one phase each.
    pub sizes: Vec<u64>,
    /// The last size repeats until the client stops (`--run_infinitely`).
    pub endless: bool,
    /// The QPs each side connects (the first barrier waits for them).
    pub qps: usize,
    /// `--timeout`: the bound between two messages.
    pub timeout: Duration,
}

impl Walk {
    /// The walk of configuration `config` over `qps` QPs.
    pub fn of<C: TestConfig>(config: &C, qps: usize, timeout: Duration) -> Self {
        Self {
            sizes: config.sizes().to_vec(),
            endless: config.endless(),
            qps,
            timeout,
        }
    }
}

/// Where the client is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientAt {
    /// Before the hello.
    Start,
    /// Hello sent.
    Hello,
    /// Accepted; between phases.
    Between,
    /// Barrier of the current phase sent.
    Barrier,
    /// Measuring the current phase.
    Measuring,
    /// Our result sent, the server's due.
    Done,
    /// Goodbye sent.
    Bye,
    /// Over.
    Finished,
}

/// `Ok` when a call of `called` is in order, else the refusal naming
/// where the session is (`at`).
fn in_order(ok: bool, called: &'static str, at: &'static str) -> Result<(), SessionError> {
    if ok {
        Ok(())
    } else {
        Err(SessionError::OutOfOrder { called, at })
    }
}

impl ClientAt {
    fn describe(self) -> &'static str {
        match self {
            Self::Start => "before the hello",
            Self::Hello => "while the hello's answer is due",
            Self::Between => "between phases",
            Self::Barrier => "while the barrier's answer is due",
            Self::Measuring => "while a phase is measured",
            Self::Done => "while the server's result is due",
            Self::Bye => "while the goodbye's answer is due",
            Self::Finished => "after the session ended",
        }
    }
}

/// What the server answered the client's hello with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// The server's side (the one entry of its `sides`).
    pub side: SideInfo,
    /// The server's QPs, one per client QP.
    pub qps: Vec<QpInfo>,
    /// The path MTU both sides use, in bytes.
    pub mtu: u32,
    /// The server's rdma_cm port (non-zero), when the QPs connect
    /// through rdma_cm.
    pub cm_port: Option<u16>,
}

/// A phase to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Phase {
    /// Its number, from 0.
    pub phase: u32,
    /// Its message size.
    pub size: u64,
}

/// The client's next step of the walk.
#[derive(Debug, Clone, PartialEq)]
pub enum NextPhase {
    /// Run this phase: send [`ClientSession::barrier`] once prepared, its
    /// answer is due within the bound.
    Run(Phase, Bound),
    /// Every size ran.
    AllRun,
    /// Stopped while sizes remain (an endless run's Ctrl-C).
    Stopped,
}

/// The client's side of a session.
#[derive(Debug, Clone)]
pub struct ClientSession {
    walk: Walk,
    at: ClientAt,
    phase: u32,
    connection: QpConnection,
}

impl ClientSession {
    /// A session that will walk `walk`.
    pub fn new(walk: Walk) -> Self {
        Self {
            walk,
            at: ClientAt::Start,
            phase: 0,
            connection: QpConnection::QpExchange,
        }
    }

    /// Whether the session is `at`, for a call of `called`.
    fn expect(&self, at: ClientAt, called: &'static str) -> Result<(), SessionError> {
        in_order(self.at == at, called, self.at.describe())
    }

    /// The same session, connecting its QPs `connection`'s way (the
    /// hello says so; an rdma_cm accept must name the server's port).
    pub fn connecting(self, connection: QpConnection) -> Self {
        Self { connection, ..self }
    }

    /// The hello to send — the test, its configuration, our side with the
    /// path MTU we propose (the one entry of `sides`), our QPs — and the
    /// bound on the answer (the server creates as many QPs as we offer
    /// before it answers).
    ///
    /// # Errors
    /// [`SessionError::OutOfOrder`] unless the session is new.
    pub fn hello<C: TestConfig>(
        &mut self,
        now: Instant,
        test: &str,
        config: &C,
        side: &SideInfo,
        mtu: u32,
        qps: Vec<QpInfo>,
    ) -> Result<(Message, Bound), SessionError> {
        self.expect(ClientAt::Start, "hello")?;
        self.at = ClientAt::Hello;
        let bound = Bound::setup_of(now, qps.len(), self.walk.timeout);
        let config = serde_json::to_value(config).unwrap_or(Value::Null);
        let hello = Message::Hello {
            test: test.into(),
            config,
            sides: vec![with_mtu(side, mtu)],
            qps,
            connection: self.connection,
        };
        Ok((hello, bound))
    }

    /// The server's answer to the hello.
    ///
    /// # Errors
    /// A refusal, a busy server, an accept describing other than one
    /// device side, an invalid MTU, another message; a call out of order.
    pub fn on_answer(&mut self, answer: Message) -> Result<Accepted, SessionError> {
        self.expect(ClientAt::Hello, "on_answer")?;
        self.at = ClientAt::Finished;
        match answer {
            Message::Accept {
                sides,
                qps,
                mtu,
                cm_port,
            } => {
                let [side] = <[SideInfo; 1]>::try_from(sides)
                    .map_err(|sides| SessionError::SideCount(sides.len()))?;
                if !PATH_MTUS.contains(&mtu) {
                    return Err(SessionError::InvalidMtu(mtu));
                }
                let cm_port = match self.connection {
                    QpConnection::QpExchange => None,
                    QpConnection::RdmaCm => {
                        Some(cm_port.filter(|&p| p != 0).ok_or(SessionError::NoCmPort)?)
                    }
                };
                self.at = ClientAt::Between;
                Ok(Accepted {
                    side,
                    qps,
                    mtu,
                    cm_port,
                })
            }
            Message::Busy { reason } => Err(SessionError::Busy(printable(&reason, MAX_PEER_TEXT))),
            other => Err(unexpected(&other, "accept")),
        }
    }

    /// The next step of the walk: a phase, with its barrier to send and
    /// the bound on the answer; the end, when every size ran; or, with
    /// `stop` (an endless run's Ctrl-C) while sizes remain, a stop. After
    /// either, say [`ClientSession::goodbye`].
    ///
    /// # Errors
    /// [`SessionError::OutOfOrder`] unless between phases.
    pub fn next_phase(&mut self, now: Instant, stop: bool) -> Result<NextPhase, SessionError> {
        self.expect(ClientAt::Between, "next_phase")?;
        let Some(size) = size_of_phase(&self.walk.sizes, self.walk.endless, self.phase) else {
            return Ok(NextPhase::AllRun);
        };
        if stop {
            return Ok(NextPhase::Stopped);
        }
        self.at = ClientAt::Barrier;
        let phase = self.phase;
        let bound = Bound::barrier(now, phase, self.walk.qps, self.walk.timeout);
        Ok(NextPhase::Run(Phase { phase, size }, bound))
    }

    /// The barrier that starts the phase (once prepared).
    ///
    /// # Errors
    /// [`SessionError::OutOfOrder`] unless a phase was started.
    pub fn barrier(&self) -> Result<Message, SessionError> {
        self.expect(ClientAt::Barrier, "barrier")?;
        Ok(Message::Barrier { phase: self.phase })
    }

    /// The bound on the peer's result of a phase measured from `now` whose
    /// measurement may take `budget`: that plus `--timeout`.
    pub fn phase_bound(&self, now: Instant, budget: Duration) -> Bound {
        Bound::phase(now, budget + self.walk.timeout)
    }

    /// The server's answer to the barrier: the phase starts.
    ///
    /// # Errors
    /// Another message, or another phase's barrier; a call out of order.
    pub fn on_barrier(&mut self, answer: &Message) -> Result<(), SessionError> {
        self.expect(ClientAt::Barrier, "on_barrier")?;
        match answer {
            Message::Barrier { phase } if *phase == self.phase => {
                self.at = ClientAt::Measuring;
                Ok(())
            }
            other => {
                self.at = ClientAt::Finished;
                Err(unexpected(other, "barrier"))
            }
        }
    }

    /// Our result of the phase, to send; the server's is then due within
    /// `bound` (the measured phase's, from its start).
    ///
    /// # Errors
    /// [`SessionError::OutOfOrder`] unless the phase is being measured.
    pub fn done<O: Serialize>(&mut self, result: Option<&O>) -> Result<Message, SessionError> {
        self.expect(ClientAt::Measuring, "done")?;
        self.at = ClientAt::Done;
        Ok(Message::Done {
            phase: self.phase,
            result: encode_result(result),
        })
    }

    /// The server's result of the phase; the walk moves on.
    ///
    /// # Errors
    /// Another message or phase, a result that does not decode; a call
    /// out of order.
    pub fn on_done<O: DeserializeOwned>(
        &mut self,
        msg: Message,
    ) -> Result<Option<O>, SessionError> {
        self.expect(ClientAt::Done, "on_done")?;
        self.at = ClientAt::Finished;
        let result = match msg {
            Message::Done { phase, result } if phase == self.phase => result,
            other => return Err(unexpected(&other, "done")),
        };
        let result = decode_result(result, "the server's")?;
        self.at = ClientAt::Between;
        self.phase += 1;
        Ok(result)
    }

    /// The goodbye to send once the walk ended.
    ///
    /// # Errors
    /// [`SessionError::OutOfOrder`] unless between phases.
    pub fn goodbye(&mut self) -> Result<Message, SessionError> {
        self.expect(ClientAt::Between, "goodbye")?;
        self.at = ClientAt::Bye;
        Ok(Message::Bye)
    }

    /// The server's goodbye.
    ///
    /// # Errors
    /// Another message; a call out of order.
    pub fn on_goodbye(&mut self, msg: &Message) -> Result<(), SessionError> {
        self.expect(ClientAt::Bye, "on_goodbye")?;
        self.at = ClientAt::Finished;
        match msg {
            Message::Bye => Ok(()),
            other => Err(unexpected(other, "bye")),
        }
    }

    /// Phases completed (both results exchanged): every phase before the
    /// current one.
    pub fn completed(&self) -> usize {
        self.phase as usize
    }

    /// The phase being run, if one is (its barrier sent, its results not
    /// yet exchanged).
    pub fn in_progress(&self) -> Option<u64> {
        matches!(
            self.at,
            ClientAt::Barrier | ClientAt::Measuring | ClientAt::Done
        )
        .then(|| size_of_phase(&self.walk.sizes, self.walk.endless, self.phase))
        .flatten()
    }

    /// Sizes in the walk: the configuration's, or for an endless walk the
    /// periods that ran (and the one cut).
    pub fn total(&self) -> usize {
        if self.walk.endless {
            self.completed() + usize::from(self.in_progress().is_some())
        } else {
            self.walk.sizes.len()
        }
    }
}

/// What a refused hello tells the client, and this side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The reason, for both.
    pub reason: String,
}

impl Refusal {
    /// The message that tells the client.
    pub fn message(&self) -> Message {
        Message::Reject {
            reason: self.reason.clone(),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "refused the client's test: {}", self.reason)
    }
}

impl std::error::Error for Refusal {}

/// What a client asked for, checked.
#[derive(Debug, Clone)]
pub struct Hello<C> {
    /// The test configuration, decoded and valid.
    pub config: C,
    /// The client's side (the one entry of its `sides`).
    pub side: SideInfo,
    /// The client's QPs.
    pub qps: Vec<QpInfo>,
    /// How the client connects the QPs.
    pub connection: QpConnection,
}

/// What a server's test would take of its memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    /// Registered memory, bytes.
    pub memory: u64,
    /// Queue rings, bytes (estimated).
    pub rings: u64,
}

/// Where the server is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServerAt {
    /// Waiting for the hello.
    Hello,
    /// Hello taken, not yet accepted.
    Checked,
    /// Accepted; waiting for the next barrier or the goodbye.
    Between,
    /// In a phase: the client's barrier read.
    Phase,
    /// Over.
    Finished,
}

impl ServerAt {
    fn describe(self) -> &'static str {
        match self {
            Self::Hello => "before the hello",
            Self::Checked => "before the hello was accepted",
            Self::Between => "between phases",
            Self::Phase => "in a phase",
            Self::Finished => "after the session ended",
        }
    }
}

/// The server's side of a session.
#[derive(Debug, Clone)]
pub struct ServerSession {
    timeout: Duration,
    max_mem: u64,
    walk: Option<Walk>,
    at: ServerAt,
    phase: u32,
}

/// What the client asked for next.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Run this phase (its barrier is answered once ready:
    /// [`ServerSession::barrier`]).
    Phase(Phase),
    /// The client said goodbye: send this answer; the session is over.
    Bye(Message),
}

impl ServerSession {
    /// A session under `--timeout` and `--max-mem`.
    pub fn new(timeout: Duration, max_mem: u64) -> Self {
        Self {
            timeout,
            max_mem,
            walk: None,
            at: ServerAt::Hello,
            phase: 0,
        }
    }

    /// Whether the session is `at`, for a call of `called`.
    fn expect(&self, at: ServerAt, called: &'static str) -> Result<(), SessionError> {
        in_order(self.at == at, called, self.at.describe())
    }

    /// The client's first message, for a server of `test`: the test must
    /// be `test`, it must describe exactly one device side, its
    /// configuration must decode and `validate`, and the QPs offered must
    /// fit it.
    ///
    /// # Errors
    /// A [`Refusal`] (send its message), or a message that is not a
    /// hello; a call out of order.
    pub fn hello<C: TestConfig>(
        &mut self,
        first: Message,
        test: &str,
    ) -> Result<Result<Hello<C>, Refusal>, SessionError> {
        self.expect(ServerAt::Hello, "hello")?;
        self.at = ServerAt::Finished;
        let Message::Hello {
            test: asked,
            config,
            sides,
            qps,
            connection,
        } = first
        else {
            return Err(unexpected(&first, "hello"));
        };
        let refuse = |reason: String| Ok(Err(Refusal { reason }));
        if asked != test {
            return refuse(format!(
                "this server runs {test}, the client asked for {:?}",
                printable(&asked, 64)
            ));
        }
        let side = match <[SideInfo; 1]>::try_from(sides) {
            Ok([side]) => side,
            Err(sides) => {
                return refuse(format!(
                    "this build runs one device per side; the client described {}",
                    sides.len()
                ));
            }
        };
        let config: C = match serde_json::from_value(config) {
            Ok(c) => c,
            Err(e) => return refuse(format!("malformed configuration: {e}")),
        };
        if let Err(e) = config.validate() {
            return refuse(format!("invalid configuration: {e}"));
        }
        if let Err(reason) = config.check_offer(qps.len()) {
            return refuse(reason);
        }
        self.walk = Some(Walk::of(&config, qps.len(), self.timeout));
        self.at = ServerAt::Checked;
        Ok(Ok(Hello {
            config,
            side,
            qps,
            connection,
        }))
    }

    /// Whether the test, as `estimate`d, fits `--max-mem`.
    ///
    /// # Errors
    /// The refusal naming both.
    pub fn check_memory(&self, estimate: Estimate) -> Result<(), Refusal> {
        let Estimate { memory, rings } = estimate;
        let need = memory.saturating_add(rings);
        if need > self.max_mem {
            return Err(Refusal {
                reason: format!(
                    "the test needs {need} bytes on the server ({memory} of registered memory and \
                     an estimated {rings} of queue rings), above its --max-mem {}",
                    self.max_mem
                ),
            });
        }
        Ok(())
    }

    /// The acceptance to send: our side (the one entry of `sides`), QPs,
    /// the path MTU, and our rdma_cm listener's port when the client
    /// connects through rdma_cm.
    ///
    /// # Errors
    /// [`SessionError::OutOfOrder`] unless a hello was checked.
    pub fn accept(
        &mut self,
        side: &SideInfo,
        mtu: u32,
        qps: Vec<QpInfo>,
        cm_port: Option<u16>,
    ) -> Result<Message, SessionError> {
        self.expect(ServerAt::Checked, "accept")?;
        self.at = ServerAt::Between;
        Ok(Message::Accept {
            sides: vec![with_mtu(side, mtu)],
            qps,
            mtu,
            cm_port,
        })
    }

    /// The bound on the client's next step (the first barrier comes once
    /// the client has connected its QPs).
    pub fn next_bound(&self, now: Instant) -> Bound {
        let qps = self.walk.as_ref().map_or(1, |w| w.qps);
        Bound::barrier(now, self.phase, qps, self.timeout)
    }

    /// The client's next step: a phase's barrier or the goodbye (then
    /// check [`ServerSession::all_run`] once the reports are closed).
    ///
    /// # Errors
    /// Another message or phase, a phase beyond the sizes; a call out of
    /// order.
    pub fn next(&mut self, msg: &Message) -> Result<Next, SessionError> {
        self.expect(ServerAt::Between, "next")?;
        self.at = ServerAt::Finished;
        let walk = self.walk.as_ref().ok_or(SessionError::Unexpected {
            expected: "hello",
            got: msg.name(),
        })?;
        match msg {
            Message::Barrier { phase } if *phase == self.phase => {
                let size = size_of_phase(&walk.sizes, walk.endless, self.phase).ok_or(
                    SessionError::PhaseBeyondSizes {
                        phase: self.phase,
                        sizes: walk.sizes.len(),
                    },
                )?;
                self.at = ServerAt::Phase;
                Ok(Next::Phase(Phase {
                    phase: self.phase,
                    size,
                }))
            }
            Message::Bye => Ok(Next::Bye(Message::Bye)),
            other => Err(unexpected(other, "barrier")),
        }
    }

    /// The bound on the client's result of a phase measured from `now`
    /// whose measurement may take `budget`: that plus `--timeout`.
    pub fn phase_bound(&self, now: Instant, budget: Duration) -> Bound {
        Bound::phase(now, budget + self.timeout)
    }

    /// The answer to the phase's barrier (once prepared).
    ///
    /// # Errors
    /// [`SessionError::OutOfOrder`] unless in a phase.
    pub fn barrier(&self) -> Result<Message, SessionError> {
        self.expect(ServerAt::Phase, "barrier")?;
        Ok(Message::Barrier { phase: self.phase })
    }

    /// The client's result of the phase.
    ///
    /// # Errors
    /// Another message or phase, a result that does not decode; a call
    /// out of order.
    pub fn on_done<O: DeserializeOwned>(
        &mut self,
        msg: Message,
    ) -> Result<Option<O>, SessionError> {
        self.expect(ServerAt::Phase, "on_done")?;
        match msg {
            Message::Done { phase, result } if phase == self.phase => {
                decode_result(result, "the client's").inspect_err(|_| {
                    self.at = ServerAt::Finished;
                })
            }
            other => {
                self.at = ServerAt::Finished;
                Err(unexpected(&other, "done"))
            }
        }
    }

    /// Our result of the phase, to send; the walk moves on.
    ///
    /// # Errors
    /// [`SessionError::OutOfOrder`] unless in a phase.
    pub fn done<O: Serialize>(&mut self, result: Option<&O>) -> Result<Message, SessionError> {
        self.expect(ServerAt::Phase, "done")?;
        let msg = Message::Done {
            phase: self.phase,
            result: encode_result(result),
        };
        self.at = ServerAt::Between;
        self.phase += 1;
        Ok(msg)
    }

    /// After the goodbye: whether every size ran (an endless walk ends
    /// whenever the client stops it).
    ///
    /// # Errors
    /// The client ended before.
    pub fn all_run(&self) -> Result<(), SessionError> {
        match &self.walk {
            Some(walk) if !walk.endless && self.phase as usize != walk.sizes.len() => {
                Err(SessionError::EndedEarly {
                    phases: self.phase,
                    sizes: walk.sizes.len(),
                })
            }
            _ => Ok(()),
        }
    }

    /// Phases completed: every phase before the current one.
    pub fn completed(&self) -> usize {
        self.phase as usize
    }

    /// The size of the phase in progress, if one is.
    pub fn in_progress(&self) -> Option<u64> {
        let walk = self.walk.as_ref()?;
        (self.at == ServerAt::Phase)
            .then(|| size_of_phase(&walk.sizes, walk.endless, self.phase))
            .flatten()
    }

    /// The sizes of the test (0 before the hello).
    pub fn total(&self) -> usize {
        self.walk.as_ref().map_or(0, |w| w.sizes.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(max_rd_atom: u32) -> SideInfo {
        SideInfo {
            device: "rxe0".into(),
            port: 1,
            gid_index: Some(1),
            gid: [0; 16],
            mtu: 1024,
            link_layer: "Ethernet".into(),
            rate: None,
            max_rd_atom,
        }
    }

    #[test]
    fn the_path_mtu_is_the_smaller_and_a_bad_client_mtu_the_smallest() {
        assert_eq!(path_mtu(4096, 1024), 1024);
        assert_eq!(path_mtu(1024, 4096), 1024);
        assert_eq!(path_mtu(4096, 1000), 256);
        assert_eq!(path_mtu(4096, 0), 256);
        assert_eq!(
            mtu_note(Some(4096), 1024).as_deref(),
            Some(
                "note: the client's -m/--mtu 4096 is above this port's active MTU 1024; using the smaller MTU of both sides"
            )
        );
        assert_eq!(mtu_note(Some(1024), 1024), None);
        assert_eq!(mtu_note(None, 1024), None);
    }

    #[test]
    fn outstanding_reads_are_the_smallest_of_request_and_both_devices() {
        assert_eq!(effective_outs(true, 16, &side(8), &side(4)), 4);
        assert_eq!(effective_outs(true, 2, &side(8), &side(4)), 2);
        // A device reporting 0 still gets one read outstanding.
        assert_eq!(effective_outs(true, 16, &side(0), &side(4)), 1);
        assert_eq!(effective_outs(false, 16, &side(8), &side(4)), 0);
    }

    #[test]
    fn outs_resolve_as_perftest_default_max_clamp_with_warning() {
        assert_eq!(resolve_outs(true, 0, 16), Ok((16, None)));
        assert_eq!(resolve_outs(true, 4, 16), Ok((4, None)));
        let (outs, warning) = resolve_outs(true, 32, 16).unwrap();
        assert_eq!(outs, 16);
        assert_eq!(
            warning.as_deref(),
            Some(
                "warning: -o/--outs 32: number of outstanding reads is above max = 16; changing to that max value"
            )
        );
        assert!(resolve_outs(true, 4, 0).is_err());
        assert_eq!(resolve_outs(false, 4, 0), Ok((0, None)));
    }

    #[test]
    fn phases_walk_the_sizes_and_an_endless_walk_repeats_the_last() {
        assert_eq!(size_of_phase(&[2, 4], false, 1), Some(4));
        assert_eq!(size_of_phase(&[2, 4], false, 2), None);
        assert_eq!(size_of_phase(&[2, 4], true, 9), Some(4));
        assert_eq!(size_of_phase(&[], true, 0), None);
    }

    #[test]
    fn bounds_the_first_barrier_by_the_set_up_of_every_qp_later_ones_by_timeout() {
        let now = Instant::now();
        let t = Duration::from_secs(15);
        assert_eq!(
            Bound::barrier(now, 0, 10, t),
            Bound::Setup {
                at: now + t + crate::bench::config::SETUP_PER_QP * 10,
                bound: t + crate::bench::config::SETUP_PER_QP * 10
            }
        );
        assert_eq!(Bound::barrier(now, 1, 10, t), Bound::Message);
        assert_eq!(Bound::Message.deadline(now, t), now + t);
        let p = Bound::phase(now, Duration::from_secs(3));
        assert_eq!(p.deadline(now, t), now + Duration::from_secs(3));
    }

    #[test]
    fn server_memory_check_names_both_figures() {
        let s = ServerSession::new(Duration::from_secs(1), 1000);
        assert!(
            s.check_memory(Estimate {
                memory: 600,
                rings: 400
            })
            .is_ok()
        );
        let r = s
            .check_memory(Estimate {
                memory: 600,
                rings: 401,
            })
            .unwrap_err();
        assert_eq!(
            r.reason,
            "the test needs 1001 bytes on the server (600 of registered memory and an estimated 401 of queue rings), above its --max-mem 1000"
        );
        assert_eq!(
            r.to_string(),
            format!("refused the client's test: {}", r.reason)
        );
    }
}
