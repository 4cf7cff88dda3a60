//! Rank 0's coordinator driver: one thread, one event loop (mio: epoll
//! underneath) over every rank's connection, and the state machine
//! [`engine::cluster::coordinator::Coordinator`] that decides. The loop
//! only moves bytes: it accepts, reads each rank's frames as they come
//! (a [`FrameReader`] per connection), hands them to the machine with the
//! time, and writes what the machine sends through a bounded out-queue
//! per rank; a rank that stops reading is dropped when its queue passes
//! [`OUT_QUEUE_CAP`], never waited for. At the end it judges, prints,
//! writes the report and tells the ranks.
//!
//! Why mio: a readiness loop of one thread holds 16,384 connections in a
//! few megabytes, where a thread per rank (as before) needed 16,385
//! threads and two descriptors a connection; `poll(2)` through nix would
//! scan every descriptor on each wake. mio is the event loop under tokio,
//! kept by the tokio project, and adds no runtime (docs/cluster.md).

use std::collections::VecDeque;
use std::io::{self, IsTerminal as _, Read as _, Write as _};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use engine::cluster::coordinator::{
    Coordinator, Note, Recipient, ScheduleChoice as MachineSchedule, Setup, refusal,
};
use engine::cluster::html;
use engine::cluster::messages::ClusterMessage;
use engine::cluster::rails;
use engine::cluster::report::{self, Roster};
use engine::cluster::schedule::Rank;
use engine::cluster::verdict::{self, Measurement};
use engine::proto::wire::{self, FrameReader};
use mio::net::{TcpListener, TcpStream};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

use super::{ClusterPlan, ScheduleChoice};
use crate::oob::Listener;
use crate::stop::{self, Interrupted};

/// How long an arriving connection has to send its whole join.
const JOIN_BOUND: Duration = Duration::from_secs(10);

/// The longest the loop sleeps before it looks at signals and the
/// joins' bounds.
const TICK: Duration = Duration::from_millis(500);

/// Most bytes queued for one rank that it has not read: far above what
/// the run sends a rank at once (a start and a round message: a few
/// hundred bytes), so only a rank that stopped reading reaches it.
pub const OUT_QUEUE_CAP: usize = 256 << 10;

/// After the end messages, how long the loop keeps writing them to ranks
/// slow to read.
const END_FLUSH: Duration = Duration::from_secs(5);

const LISTENER: Token = Token(usize::MAX - 1);
const STOP: Token = Token(usize::MAX - 2);

/// One accepted connection: before its join, `rank` is `None` and it
/// must join by `join_by`.
#[derive(Debug)]
struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    reader: FrameReader,
    rank: Option<Rank>,
    join_by: Instant,
    /// Frames to write, the first from `written` on.
    out: VecDeque<Arc<[u8]>>,
    written: usize,
    queued: usize,
    /// Close once `out` is written (a refusal).
    closing: bool,
}

/// Every connection by token, and each rank's token.
#[derive(Debug, Default)]
struct Conns {
    slots: Vec<Option<Conn>>,
    free: Vec<usize>,
    of_rank: Vec<Option<usize>>,
}

impl Conns {
    fn insert(&mut self, conn: Conn) -> usize {
        match self.free.pop() {
            Some(t) => {
                self.slots[t] = Some(conn);
                t
            }
            None => {
                self.slots.push(Some(conn));
                self.slots.len() - 1
            }
        }
    }

    fn remove(&mut self, poll: &Poll, t: usize) -> Option<Conn> {
        let mut conn = self.slots.get_mut(t)?.take()?;
        let _ = poll.registry().deregister(&mut conn.stream);
        if let Some(r) = conn.rank
            && self.of_rank.get(r as usize) == Some(&Some(t))
        {
            self.of_rank[r as usize] = None;
        }
        self.free.push(t);
        Some(conn)
    }
}

/// How many descriptors rank 0 needs for a job of `size` ranks: one per
/// rank's connection, and a margin for its own (listeners, devices,
/// report files, the process's own).
pub fn descriptors_needed(size: u32) -> u64 {
    u64::from(size) + 256
}

/// Makes sure this process may open `needed` descriptors: raises the
/// soft open-files limit to the hard one when it is lower than that.
///
/// # Errors
/// A usage error naming the numbers and the fix when even the hard limit
/// is too low.
pub fn ensure_open_files(needed: u64, what: &str) -> Result<(), crate::exit::UsageError> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)
        .map_err(|e| crate::exit::UsageError(format!("cannot read the open-files limit: {e}")))?;
    if soft >= needed {
        return Ok(());
    }
    if hard < needed {
        return Err(crate::exit::UsageError(format!(
            "{what} needs {needed} open files, and this process may open at most {hard} \
             (hard limit; soft {soft}): raise it where the job starts — `ulimit -n {needed}` in \
             the job script, Slurm's PropagateResourceLimits (or the slurmd's LimitNOFILE), \
             systemd's LimitNOFILE= for a service"
        )));
    }
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map_err(|e| {
        crate::exit::UsageError(format!("cannot raise the open-files limit to {hard}: {e}"))
    })
}

/// The kernel's cap on a listen backlog (`net.core.somaxconn`), or 4,096
/// (its default since Linux 5.4) when it cannot be read.
fn somaxconn() -> i32 {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(4_096)
}

/// Runs the coordinator on `listener` (its times counted from `started`,
/// when the ranks could first reach it); the run's exit code.
///
/// # Errors
/// A signal, a bad pairs file (a usage error), or a failure to write the
/// report.
pub fn run(plan: &ClusterPlan, listener: &Listener, started: Instant) -> anyhow::Result<u8> {
    let size = plan.launch.size;
    let mut io = Io::new(listener, size)?;
    let mut machine = Coordinator::new(
        Setup {
            size,
            version: env!("CARGO_PKG_VERSION").into(),
            test: plan.test.clone(),
            rendezvous_timeout: plan.rendezvous_timeout,
            schedule: match &plan.coordinating.schedule {
                ScheduleChoice::Pattern(p) => MachineSchedule::Pattern(*p),
                ScheduleChoice::PairsFile(t) => MachineSchedule::PairsFile(t.clone()),
            },
            thresholds: plan.coordinating.thresholds,
            ignore_counters: plan.coordinating.ignore_counters.clone(),
            topology: plan.coordinating.topology.clone(),
        },
        started,
    );
    let mut telling = Telling::new(plan, started)?;
    // Once the end messages are queued: until when they may take, and the
    // run's exit code.
    let mut ending: Option<(Instant, u8)> = None;
    loop {
        if let Some(sig) = stop::requested() {
            return Err(Interrupted(sig).into());
        }
        let wake = [machine.poll_timeout(), ending.map(|(by, _)| by)]
            .into_iter()
            .flatten()
            .fold(Instant::now() + TICK, Instant::min);
        io.turn(&mut machine, wake)?;
        telling.notes(&mut machine, &mut io)?;
        if let Some((by, code)) = ending {
            if io.all_written() || Instant::now() >= by {
                return match telling.bad_schedule.take() {
                    Some(e) => Err(crate::exit::UsageError(e).into()),
                    None => Ok(code),
                };
            }
        } else if machine.is_ended() {
            // The gathering found no schedule to run (a bad pairs file).
            io.send_all(&mut machine);
            ending = Some((Instant::now() + END_FLUSH, 2));
        } else if machine.is_done() {
            progress_done();
            if let Some(line) = round_time_line(machine.round_times(), telling.rounds_cpu()) {
                eprintln!("rdmaperf cluster: {line}");
            }
            let code = finish(plan, &mut machine, started)?;
            io.send_all(&mut machine);
            ending = Some((Instant::now() + END_FLUSH, code));
        }
    }
}

/// The loop's I/O: the event loop, the listener, every connection.
struct Io {
    poll: Poll,
    listen: TcpListener,
    conns: Conns,
    events: Events,
    scratch: Vec<u8>,
    size: u32,
}

impl Io {
    /// An event loop over `listener` (its backlog raised to
    /// `net.core.somaxconn`) and the stop pipe, for `size` ranks.
    fn new(listener: &Listener, size: u32) -> anyhow::Result<Self> {
        let std_listener = listener
            .try_clone_std()
            .context("rank 0's listener for the ranks")?;
        // As many joins as the kernel lets wait (std's default is 128):
        // 16,384 ranks start together (they also retry with jittered
        // backoff).
        nix::sys::socket::listen(
            &std_listener,
            nix::sys::socket::Backlog::new(somaxconn())
                .unwrap_or(nix::sys::socket::Backlog::MAXCONN),
        )
        .context("setting the listen backlog")?;
        let mut listen = TcpListener::from_std(std_listener);
        let poll = Poll::new().context("creating the event loop")?;
        poll.registry()
            .register(&mut listen, LISTENER, Interest::READABLE)?;
        if let Some(fd) = stop::pipe() {
            use std::os::fd::AsRawFd as _;
            poll.registry()
                .register(&mut SourceFd(&fd.as_raw_fd()), STOP, Interest::READABLE)?;
        }
        Ok(Self {
            poll,
            listen,
            conns: Conns {
                of_rank: vec![None; size as usize],
                ..Conns::default()
            },
            events: Events::with_capacity(4_096),
            scratch: vec![0u8; 64 << 10],
            size,
        })
    }

    /// One turn: waits for I/O until `wake` (or a signal), reads and
    /// writes what is ready, hands the machine the time, drops
    /// connections that never joined, sends what the machine has to send.
    fn turn(&mut self, machine: &mut Coordinator, wake: Instant) -> anyhow::Result<()> {
        let wait = wake.saturating_duration_since(Instant::now());
        match self.poll.poll(&mut self.events, Some(wait)) {
            Err(e) if e.kind() != io::ErrorKind::Interrupted => {
                return Err(e).context("waiting for the ranks");
            }
            _ => {}
        }
        let ready: Vec<(Token, bool, bool)> = self
            .events
            .iter()
            .map(|e| {
                let readable = e.is_readable() || e.is_read_closed() || e.is_error();
                (e.token(), readable, e.is_writable())
            })
            .collect();
        for (token, readable, writable) in ready {
            match token {
                LISTENER => accept_all(&self.listen, &self.poll, &mut self.conns, self.size)?,
                STOP => {}
                Token(t) => {
                    if readable {
                        read_conn(&self.poll, &mut self.conns, t, machine, &mut self.scratch);
                    }
                    if writable {
                        write_conn(&self.poll, &mut self.conns, t, machine);
                    }
                }
            }
        }
        let now = Instant::now();
        if machine.poll_timeout().is_some_and(|d| d <= now) {
            machine.handle_timeout(now);
        }
        drop_unjoined(&self.poll, &mut self.conns, now);
        self.send_all(machine);
        Ok(())
    }

    /// Everything the machine has to send, queued and written.
    fn send_all(&mut self, machine: &mut Coordinator) {
        send_all(&self.poll, &mut self.conns, machine);
    }

    /// Closes rank `rank`'s connection, if it has one (the machine has
    /// dropped it).
    fn close_rank(&mut self, rank: Rank) {
        if let Some(t) = self.conns.of_rank.get(rank as usize).copied().flatten() {
            self.conns.remove(&self.poll, t);
        }
    }

    /// Whether every queued byte has been written.
    fn all_written(&self) -> bool {
        self.conns.slots.iter().flatten().all(|c| c.out.is_empty())
    }
}

/// What the loop says and keeps while the run goes: stdout, stderr, the
/// round log of `--report`, the rounds' CPU.
struct Telling {
    out: crate::output::Stdout,
    started: Instant,
    /// The deciding thread's CPU when the first round started.
    cpu_at_start: Duration,
    /// With `--report`: each round's measurements appended as it ends, so
    /// a crash keeps what was measured.
    log: Option<super::report_files::PairsLog>,
    logged: usize,
    bad_schedule: Option<String>,
}

impl Telling {
    fn new(plan: &ClusterPlan, started: Instant) -> anyhow::Result<Self> {
        Ok(Self {
            out: crate::output::Stdout,
            started,
            cpu_at_start: thread_cpu(),
            log: match &plan.coordinating.report {
                Some(dir) => Some(super::report_files::PairsLog::create(dir)?),
                None => None,
            },
            logged: 0,
            bad_schedule: None,
        })
    }

    /// The deciding thread's CPU since the first round.
    fn rounds_cpu(&self) -> Duration {
        thread_cpu().saturating_sub(self.cpu_at_start)
    }

    /// Says what the machine has to say: the plan and the retest on
    /// stdout, the rest on stderr; logs each round's measurements; closes
    /// the connection of a rank dropped for its silence.
    fn notes(&mut self, machine: &mut Coordinator, io: &mut Io) -> anyhow::Result<()> {
        while let Some(note) = machine.poll_note() {
            match &note {
                Note::Plan(line) => {
                    // The rounds' CPU is counted from here (the gathering
                    // is its own figure: the time all joined).
                    self.cpu_at_start = thread_cpu();
                    eprintln!(
                        "rdmaperf cluster: {} of {} ranks joined in {:.2} s; the start and the first round sent",
                        machine.live().count(),
                        io.size,
                        self.started.elapsed().as_secs_f64()
                    );
                    writeln!(self.out, "{line}").map_err(crate::exit::stdout_write_error)?;
                }
                Note::Retest { suspects, rounds } => writeln!(
                    self.out,
                    "plan: retest of {suspects} suspect ranks against known-good ones: {rounds} rounds"
                )
                .map_err(crate::exit::stdout_write_error)?,
                Note::Topology(lines) => {
                    for line in lines {
                        writeln!(self.out, "{line}").map_err(crate::exit::stdout_write_error)?;
                    }
                }
                Note::BadSchedule(e) => self.bad_schedule = Some(e.clone()),
                Note::Done => {}
                Note::RoundDone { .. } => {
                    say(&note);
                    self.log_round(machine.measurements());
                }
                Note::Silent { rank, .. } => {
                    say(&note);
                    // Dropped for its silence: its connection closes, so
                    // it hears at once that it is out of the run.
                    io.close_rank(*rank);
                }
                other => say(other),
            }
        }
        Ok(())
    }

    /// Appends the measurements of `all` not yet logged to the round log.
    fn log_round(&mut self, all: &[Measurement]) {
        if let Some(log) = &mut self.log
            && let Err(e) = log.append(&all[self.logged.min(all.len())..])
        {
            eprintln!("rdmaperf cluster: {e:#}: the rest is kept in memory only");
            self.log = None;
        }
        self.logged = all.len();
    }
}

/// A note of the machine's on stderr.
fn say(note: &Note) {
    match note {
        Note::NeverCame(ranks) => {
            for r in ranks {
                eprintln!("rdmaperf cluster: rank {r} did not join within --rendezvous-timeout");
            }
        }
        Note::Left { rank, round, why } => match round {
            Some(k) => eprintln!(
                "rdmaperf cluster: rank {rank} left in round {k}: {why}; its pairs are 'peer missing' from now on"
            ),
            None => eprintln!(
                "rdmaperf cluster: rank {rank} cannot be reached: {why}; dropped from the run"
            ),
        },
        Note::Silent { rank, round, bound } => eprintln!(
            "rdmaperf cluster: rank {rank} sent no report within round {round}'s bound of {bound:?}: dropped from the run"
        ),
        Note::RoundDone {
            label,
            number,
            of,
            pairs,
            unmeasured,
            ..
        } => progress(&format!(
            "rdmaperf cluster: {label} {number} of {of}: {pairs} pairs; {unmeasured} directions in error or with a peer missing so far"
        )),
        Note::Plan(_)
        | Note::Topology(_)
        | Note::Retest { .. }
        | Note::BadSchedule(_)
        | Note::Done => {}
    }
}

/// Accepts every waiting connection (more than the job could hold are
/// closed at once: a port scan or a storm cannot exhaust descriptors).
fn accept_all(
    listen: &TcpListener,
    poll: &Poll,
    conns: &mut Conns,
    size: u32,
) -> anyhow::Result<()> {
    loop {
        match listen.accept() {
            Ok((mut stream, peer)) => {
                let open = conns.slots.len() - conns.free.len();
                if open >= size as usize * 2 + 64 {
                    continue; // dropped: closed as it goes out of scope
                }
                let _ = stream.set_nodelay(true);
                let t = conns.free.last().copied().unwrap_or(conns.slots.len());
                if let Err(e) = poll.registry().register(
                    &mut stream,
                    Token(t),
                    Interest::READABLE | Interest::WRITABLE,
                ) {
                    eprintln!("rdmaperf cluster: coordinator: cannot watch {peer}: {e}");
                    continue;
                }
                let got = conns.insert(Conn {
                    stream,
                    peer,
                    reader: FrameReader::default(),
                    rank: None,
                    join_by: Instant::now() + JOIN_BOUND,
                    out: VecDeque::new(),
                    written: 0,
                    queued: 0,
                    closing: false,
                });
                debug_assert_eq!(got, t);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                // EMFILE and the like: say so, the ranks retry.
                eprintln!("rdmaperf cluster: coordinator: accepting a rank: {e}");
                return Ok(());
            }
        }
    }
}

/// Reads all that connection `t` has, hands each whole frame to the
/// machine; a closed or broken connection leaves the run.
fn read_conn(
    poll: &Poll,
    conns: &mut Conns,
    t: usize,
    machine: &mut Coordinator,
    scratch: &mut [u8],
) {
    let why = loop {
        let Some(Some(conn)) = conns.slots.get_mut(t) else {
            return;
        };
        match conn.stream.read(scratch) {
            Ok(0) => break "the connection closed".to_owned(),
            Ok(n) => {
                conn.reader.feed(&scratch[..n]);
                if let Err(why) = take_frames(conns, t, machine) {
                    break why;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => break e.to_string(),
        }
    };
    close(poll, conns, t, machine, &why);
}

/// Every whole frame connection `t` holds, to the machine; `Err` with why
/// the connection must close.
fn take_frames(conns: &mut Conns, t: usize, machine: &mut Coordinator) -> Result<(), String> {
    loop {
        let Some(Some(conn)) = conns.slots.get_mut(t) else {
            return Ok(());
        };
        if conn.closing {
            return Ok(());
        }
        let msg = match conn.reader.take::<ClusterMessage>() {
            Ok(Some(m)) => m,
            Ok(None) => return Ok(()),
            Err(e) => {
                if conn.rank.is_none() {
                    // A port scan, another protocol: dropped quietly.
                    eprintln!(
                        "rdmaperf cluster: coordinator: dropped a connection from {}: {e}",
                        conn.peer
                    );
                }
                return Err(format!("it sent a bad frame: {e}"));
            }
        };
        let now = Instant::now();
        match (conn.rank, msg) {
            (None, ClusterMessage::Join { identity }) => {
                let rank = identity.rank;
                match machine.handle_join(*identity, now) {
                    Ok(()) => {
                        conn.rank = Some(rank);
                        conns.of_rank[rank as usize] = Some(t);
                    }
                    Err(e) => {
                        eprintln!("rdmaperf cluster: coordinator: refused: {e}");
                        if let Ok(bytes) = wire::encode(&refusal(&e)) {
                            queue(conn, bytes.into());
                        }
                        conn.closing = true;
                    }
                }
            }
            (None, other) => {
                eprintln!(
                    "rdmaperf cluster: coordinator: {} sent {} instead of a join: dropped",
                    conn.peer,
                    other.name()
                );
                return Err("no join".into());
            }
            (Some(rank), msg) => machine.handle(rank, msg, now),
        }
    }
}

/// Queues `bytes` on `conn`.
fn queue(conn: &mut Conn, bytes: Arc<[u8]>) {
    conn.queued += bytes.len();
    conn.out.push_back(bytes);
}

/// Writes what connection `t` has queued until the socket takes no more.
fn write_conn(poll: &Poll, conns: &mut Conns, t: usize, machine: &mut Coordinator) {
    let Some(Some(conn)) = conns.slots.get_mut(t) else {
        return;
    };
    let why = loop {
        let Some(front) = conn.out.front() else {
            if conn.closing {
                break "refused".to_owned();
            }
            return;
        };
        match conn.stream.write(&front[conn.written..]) {
            Ok(n) => {
                conn.written += n;
                conn.queued -= n;
                if conn.written == front.len() {
                    conn.out.pop_front();
                    conn.written = 0;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => break e.to_string(),
        }
    };
    close(poll, conns, t, machine, &why);
}

/// Closes connection `t`; its rank (if it joined) leaves the run.
fn close(poll: &Poll, conns: &mut Conns, t: usize, machine: &mut Coordinator, why: &str) {
    if let Some(conn) = conns.remove(poll, t)
        && let Some(rank) = conn.rank
        && !conn.closing
    {
        machine.handle_lost(rank, why, Instant::now());
    }
}

/// Closes connections that did not join within [`JOIN_BOUND`].
fn drop_unjoined(poll: &Poll, conns: &mut Conns, now: Instant) {
    let late: Vec<usize> = conns
        .slots
        .iter()
        .enumerate()
        .filter_map(|(t, c)| {
            c.as_ref()
                .is_some_and(|c| c.rank.is_none() && !c.closing && c.join_by <= now)
                .then_some(t)
        })
        .collect();
    for t in late {
        if let Some(c) = conns.remove(poll, t) {
            eprintln!(
                "rdmaperf cluster: coordinator: dropped a connection from {}: no join within {JOIN_BOUND:?}",
                c.peer
            );
        }
    }
}

/// Queues and writes everything the machine has to send: a message for
/// every live rank is encoded once. A rank whose queue passes
/// [`OUT_QUEUE_CAP`] stopped reading: it leaves the run.
fn send_all(poll: &Poll, conns: &mut Conns, machine: &mut Coordinator) {
    let mut touched = Vec::new();
    while let Some(t) = machine.poll_transmit() {
        let bytes: Arc<[u8]> = match wire::encode(&t.msg) {
            Ok(b) => b.into(),
            Err(e) => {
                eprintln!(
                    "rdmaperf cluster: coordinator: cannot encode {}: {e}",
                    t.msg.name()
                );
                continue;
            }
        };
        let ranks: Vec<Rank> = match t.to {
            Recipient::Rank(r) => vec![r],
            Recipient::EveryLive => machine.live().collect(),
        };
        for r in ranks {
            let Some(tok) = conns.of_rank.get(r as usize).copied().flatten() else {
                machine.handle_lost(r, "no connection", Instant::now());
                continue;
            };
            let Some(Some(conn)) = conns.slots.get_mut(tok) else {
                continue;
            };
            queue(conn, bytes.clone());
            if conn.queued > OUT_QUEUE_CAP {
                close(
                    poll,
                    conns,
                    tok,
                    machine,
                    &format!("it stopped reading ({OUT_QUEUE_CAP} bytes unread)"),
                );
                continue;
            }
            touched.push(tok);
        }
    }
    touched.sort_unstable();
    touched.dedup();
    for t in touched {
        write_conn(poll, conns, t, machine);
    }
}

/// The end of the run: verdicts, stdout, the report, then each rank's end
/// message queued; the run's exit code.
fn finish(plan: &ClusterPlan, machine: &mut Coordinator, started: Instant) -> anyhow::Result<u8> {
    let test = &plan.test;
    let mut out = crate::output::Stdout;
    let members = machine.members();
    let hosts: Vec<Option<String>> = members
        .iter()
        .map(|m| m.as_ref().map(|m| m.host.clone()))
        .collect();
    let devices: Vec<Option<String>> = members
        .iter()
        .map(|m| m.as_ref().map(|m| m.device.clone()))
        .collect();
    // The rails each rank tested on, by name.
    let rail_devices: Vec<Vec<String>> = members
        .iter()
        .map(|m| match m {
            Some(m) if m.rail_count() > 1 => m
                .rails
                .iter()
                .take(m.rail_count() as usize)
                .map(rails::Rail::name)
                .collect(),
            _ => Vec::new(),
        })
        .collect();
    // --history: each direction's baseline, by its two ends (a rank of
    // one rail by its device).
    let history = plan.coordinating.history.as_ref().and_then(|(dir, rule)| {
        let per_rank: Vec<Vec<String>> = rail_devices
            .iter()
            .zip(&devices)
            .map(|(rails, device)| {
                if rails.is_empty() {
                    device.iter().cloned().collect()
                } else {
                    rails.clone()
                }
            })
            .collect();
        super::history_files::RunHistory::open(dir, *rule, &hosts, &per_rank)
    });
    let judging = Instant::now();
    let (judged, history_tally) = match &history {
        Some(h) => {
            let (floors, tally) = h.floors(machine.measurements());
            (machine.judge_against(&floors), Some(tally))
        }
        None => (machine.judge(), None),
    };
    let all = machine.measurements();
    eprintln!(
        "rdmaperf cluster: judged {} directions in {:.1?}",
        all.len(),
        judging.elapsed()
    );
    let roster = Roster {
        hosts: &hosts,
        devices: &devices,
        rails: &rail_devices,
    };
    let took = started.elapsed().as_secs_f64();
    let layout = machine.layout();
    let node_lines = report::node_lines(&judged, roster);
    let code = judged.exit_code();
    // A switch found first: it explains the node and link lines after it.
    for line in report::switch_lines(&judged) {
        writeln!(out, "{line}").map_err(crate::exit::stdout_write_error)?;
    }
    for line in &node_lines {
        writeln!(out, "{line}").map_err(crate::exit::stdout_write_error)?;
    }
    for line in report::failure_lines(all, &judged, roster) {
        writeln!(out, "{line}").map_err(crate::exit::stdout_write_error)?;
    }
    let measured = all.iter().filter_map(Measurement::bw).collect();
    writeln!(out, "{}", spread_line("bandwidth", measured))
        .map_err(crate::exit::stdout_write_error)?;
    if let (Some(h), Some(mut tally)) = (history, history_tally) {
        tally.dropped = h.record_and_save(all, &judged.directions);
        writeln!(out, "{}", tally.line()).map_err(crate::exit::stdout_write_error)?;
    }
    // With several rails: what two nodes move between them at once, every
    // rail added up (on stdout and in the report).
    let pair_sums = if judged.rail_count() > 1 {
        report::pair_sums(all, &judged, roster)
    } else {
        Vec::new()
    };
    if !pair_sums.is_empty() {
        let sums = pair_sums
            .iter()
            .filter(|s| s.rails_measured > 0)
            .map(|s| s.bw_gbps_sum)
            .collect();
        writeln!(
            out,
            "{}",
            spread_line("bandwidth of a node pair, its rails added up", sums)
        )
        .map_err(crate::exit::stdout_write_error)?;
    }
    writeln!(
        out,
        "cluster: {} in {took:.1} s: exit code {code}",
        if judged.pass() { "PASS" } else { "FAIL" }
    )
    .map_err(crate::exit::stdout_write_error)?;
    // The report before the ranks' end: a launcher (mpirun) may kill
    // rank 0 once another rank exits non-zero. The ranks' last wait
    // allows for it (`rank::END_BOUND_PER_RANK`).
    let written = match &plan.coordinating.report {
        Some(dir) => super::report_files::write_report(
            dir,
            all,
            &judged,
            &pair_sums,
            roster,
            super::report_files::PageInput {
                facts: html::PageFacts {
                    plan: machine.plan(),
                    test: &test.describe(),
                    duration_s: took,
                },
                layout,
            },
            plan.coordinating.report_options,
        ),
        None => Ok(()),
    };
    machine.end(code, &|r| {
        node_lines.get(r as usize).cloned().unwrap_or_default()
    });
    written?;
    Ok(code)
}

/// A round's progress line on stderr: rewritten in place on a terminal
/// (a progress bar of one line), one line each in a log.
fn progress(line: &str) {
    if std::io::stderr().is_terminal() {
        crate::output::show_progress(line);
    } else {
        eprintln!("{line}");
    }
}

/// Ends the progress line on a terminal.
fn progress_done() {
    if std::io::stderr().is_terminal() {
        eprintln!();
    }
}

/// The rounds' wall times and the deciding thread's CPU time over them,
/// e.g. `1023 rounds: mean 12.3 ms, max 40.1 ms a round; the
/// coordinator's thread 1.2 ms of CPU a round` (with `--simulate`: the
/// cost of a round without its tests).
fn round_time_line(times: &[Duration], cpu: Duration) -> Option<String> {
    let max = times.iter().max()?;
    let n = u32::try_from(times.len()).ok()?;
    let mean = times.iter().sum::<Duration>() / n;
    Some(format!(
        "{} rounds: mean {:.1} ms, max {:.1} ms a round; the coordinator's thread {:.2} ms of CPU a round",
        times.len(),
        mean.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3,
        (cpu / n).as_secs_f64() * 1e3
    ))
}

/// This thread's CPU time so far (user and system).
fn thread_cpu() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_THREAD).map_or(Duration::ZERO, |u| {
        let t = u.user_time() + u.system_time();
        Duration::new(
            u64::try_from(t.tv_sec()).unwrap_or(0),
            u32::try_from(t.tv_usec()).unwrap_or(0) * 1_000,
        )
    })
}

/// The spread of figures `bw` under `label`: `bandwidth: min 5.1 median
/// 5.6 max 5.9 Gb/s over 12 directions`.
fn spread_line(label: &str, mut bw: Vec<f64>) -> String {
    if bw.is_empty() {
        return format!("{label}: no direction measured");
    }
    bw.sort_by(f64::total_cmp);
    let median = bw[bw.len() / 2];
    format!(
        "{label}: min {} median {} max {} Gb/s over {} directions",
        verdict::gbps(bw[0]),
        verdict::gbps(median),
        verdict::gbps(bw[bw.len() - 1]),
        bw.len()
    )
}
