//! The scheduling policy of the bandwidth loop, pure and driven by what
//! the device reports: which QP may post how many work requests, which of
//! them ask for a completion, how a completion's `wr_id` maps back to a
//! QP and a message count, and when a duration run stops posting and what
//! it measured. The CLI's loop only posts what [`BwScheduler`] allows and
//! feeds it completions and clock readings; so every case soft-RoCE cannot
//! show (it drains the send queue instantly) is unit-tested here: a full
//! send queue, CQ moderation that does not divide the iterations, post
//! lists, duration windows with margins, and more than 2^40 messages.

/// Bits of a `wr_id` below the QP index: the message count.
pub const QP_SHIFT: u32 = 40;
/// Mask of the message count in a `wr_id` (it wraps every 2^40 messages).
pub const COUNT_MASK: u64 = (1 << QP_SHIFT) - 1;

/// The `wr_id` of message `index` (0-based) of QP `qp`: the QP in the high
/// bits, `index + 1` modulo 2^40 below.
#[inline]
pub fn wr_id(qp: usize, index: u64) -> u64 {
    ((qp as u64) << QP_SHIFT) | (index.wrapping_add(1) & COUNT_MASK)
}

/// The QP index of a `wr_id` (a send's or a receive's).
#[inline]
pub fn wr_id_qp(wr_id: u64) -> usize {
    ((wr_id & !RECV_FLAG) >> QP_SHIFT) as usize
}

/// The bit that marks a receive's `wr_id` (sends and receives of a QP
/// complete on the same CQ).
pub const RECV_FLAG: u64 = 1 << 63;

/// The `wr_id` of the receive in slot `slot` of QP `qp`'s receive ring.
#[inline]
pub fn recv_wr_id(qp: usize, slot: u32) -> u64 {
    RECV_FLAG | ((qp as u64) << QP_SHIFT) | u64::from(slot)
}

/// Whether a `wr_id` is a receive's ([`recv_wr_id`]).
#[inline]
pub fn is_recv(wr_id: u64) -> bool {
    wr_id & RECV_FLAG != 0
}

/// The ring slot of a receive's `wr_id`.
#[inline]
pub fn recv_slot(wr_id: u64) -> u32 {
    (wr_id & COUNT_MASK) as u32
}

/// What the scheduler needs of the test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Messages per QP; `None` in duration mode (until told to stop).
    pub iters: Option<u64>,
    /// Send queue depth: most work requests outstanding per QP.
    pub tx_depth: u32,
    /// One work request in `cq_mod` asks for a completion.
    pub cq_mod: u32,
    /// Work requests per post.
    pub post_list: u32,
}

/// A completion the scheduler cannot place: a bug or a corrupt completion,
/// never a normal event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SchedError {
    /// The `wr_id` names a QP this scheduler does not drive.
    #[error("completion for QP index {qp}, but this thread drives {qps} QPs")]
    UnknownQp {
        /// The QP index in the `wr_id`.
        qp: usize,
        /// QPs driven.
        qps: usize,
    },
    /// The `wr_id` completes more messages than were posted.
    #[error("completion of QP index {qp} covers {covers} messages, only {outstanding} outstanding")]
    NotPosted {
        /// The QP index.
        qp: usize,
        /// Messages the completion would complete.
        covers: u64,
        /// Messages posted and not yet completed.
        outstanding: u64,
    },
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Cursor {
    posted: u64,
    completed: u64,
    last_signaled: bool,
}

/// Per-thread scheduler over its QPs (perftest's `scnt`/`ccnt` logic).
///
/// A QP may post a batch of `post_list` requests while the batch fits in
/// its send queue (`posted + post_list - completed <= tx_depth`) and it
/// has messages left. Message `i` is signaled when `(i + 1) % cq_mod == 0`
/// or it is the last one, so every request is covered by a later signaled
/// one. After [`BwScheduler::stop_posting`] (duration mode) a QP whose
/// last request was unsignaled posts one more batch so that its tail is
/// covered; [`BwScheduler::is_done`] then waits for every posted request.
#[derive(Debug, Clone)]
pub struct BwScheduler {
    window: Window,
    cursors: Vec<Cursor>,
    posting: bool,
    posted_total: u64,
    completed_total: u64,
}

impl BwScheduler {
    /// A scheduler for `qps` QPs. `window` must be valid (tx depth, CQ
    /// moderation and post list at least 1, post list at most the tx
    /// depth; the configuration's `validate` guarantees it).
    pub fn new(window: Window, qps: usize) -> Self {
        Self {
            window,
            cursors: vec![
                Cursor {
                    last_signaled: true,
                    ..Cursor::default()
                };
                qps
            ],
            posting: true,
            posted_total: 0,
            completed_total: 0,
        }
    }

    /// As [`BwScheduler::new`] with every QP's counters starting at
    /// `start` messages (posted and completed): to test long runs.
    pub fn starting_at(window: Window, qps: usize, start: u64) -> Self {
        let mut s = Self::new(window, qps);
        for c in &mut s.cursors {
            c.posted = start;
            c.completed = start;
        }
        s
    }

    /// Number of QPs driven.
    pub fn qps(&self) -> usize {
        self.cursors.len()
    }

    /// Whether message `index` asks for a completion.
    #[inline]
    pub fn signaled(&self, index: u64) -> bool {
        (index + 1).is_multiple_of(u64::from(self.window.cq_mod))
            || Some(index + 1) == self.window.iters
    }

    /// The first message index of the batch QP `qp` may post now
    /// (`post_list` messages from it), or `None`.
    #[inline]
    pub fn next_batch(&self, qp: usize) -> Option<u64> {
        let c = &self.cursors[qp];
        let list = u64::from(self.window.post_list);
        let left = self.window.iters.is_none_or(|n| c.posted < n);
        let room = c.posted + list - c.completed <= u64::from(self.window.tx_depth);
        let wanted = self.posting || !c.last_signaled;
        (left && room && wanted).then_some(c.posted)
    }

    /// Records that QP `qp` posted the batch [`BwScheduler::next_batch`]
    /// returned.
    #[inline]
    pub fn posted(&mut self, qp: usize) {
        let list = u64::from(self.window.post_list);
        let last = self.cursors[qp].posted + list - 1;
        let signaled = self.signaled(last);
        let c = &mut self.cursors[qp];
        c.posted += list;
        c.last_signaled = signaled;
        self.posted_total += list;
    }

    /// A successful completion: every message of its QP up to the one it
    /// names is complete. Returns how many that completes.
    ///
    /// # Errors
    /// When the `wr_id` names no QP of this scheduler or more messages
    /// than are outstanding.
    #[inline]
    pub fn complete(&mut self, wr_id: u64) -> Result<u64, SchedError> {
        let qp = wr_id_qp(wr_id);
        let qps = self.cursors.len();
        let c = self
            .cursors
            .get_mut(qp)
            .ok_or(SchedError::UnknownQp { qp, qps })?;
        // The count field wraps every 2^40; outstanding work is far fewer
        // (at most the tx depth), so the distance is unambiguous.
        let covers = (wr_id & COUNT_MASK).wrapping_sub(c.completed) & COUNT_MASK;
        let outstanding = c.posted - c.completed;
        if covers > outstanding {
            return Err(SchedError::NotPosted {
                qp,
                covers,
                outstanding,
            });
        }
        c.completed += covers;
        self.completed_total += covers;
        Ok(covers)
    }

    /// Duration mode: post no new batch (but cover an unsignaled tail).
    pub fn stop_posting(&mut self) {
        self.posting = false;
    }

    /// Whether new batches are still wanted.
    pub fn is_posting(&self) -> bool {
        self.posting
    }

    /// Whether every QP finished: all its messages completed (iteration
    /// mode), or posting stopped and all posted work completed.
    pub fn is_done(&self) -> bool {
        match self.window.iters {
            Some(n) => self.cursors.iter().all(|c| c.completed >= n),
            None => !self.posting && self.cursors.iter().all(|c| c.completed == c.posted),
        }
    }

    /// Messages posted by all QPs.
    pub fn posted_total(&self) -> u64 {
        self.posted_total
    }

    /// Messages completed by all QPs.
    pub fn completed_total(&self) -> u64 {
        self.completed_total
    }

    /// Messages QP `qp` posted and has not seen complete.
    pub fn outstanding(&self, qp: usize) -> u64 {
        let c = &self.cursors[qp];
        c.posted - c.completed
    }
}

/// Duration mode (`-D`): posting stops at `total`; the measured window
/// runs from the first observation at or after `margin` to the first at
/// or after `total - margin`. Times are nanoseconds since the run began,
/// from the caller's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationWindow {
    total_ns: u64,
    margin_ns: u64,
    start: Option<(u64, u64)>,
    end: Option<(u64, u64)>,
}

impl DurationWindow {
    /// A window over a run of `total_ns` with margins of `margin_ns`.
    pub fn new(total_ns: u64, margin_ns: u64) -> Self {
        Self {
            total_ns,
            margin_ns,
            start: None,
            end: None,
        }
    }

    /// Notes `completed` messages at `t_ns`.
    #[inline]
    pub fn observe(&mut self, t_ns: u64, completed: u64) {
        if self.start.is_none() && t_ns >= self.margin_ns {
            self.start = Some((t_ns, completed));
        }
        if self.end.is_none() && t_ns >= self.total_ns.saturating_sub(self.margin_ns) {
            self.end = Some((t_ns, completed));
        }
    }

    /// Whether posting should go on at `t_ns`.
    #[inline]
    pub fn keep_posting(&self, t_ns: u64) -> bool {
        t_ns < self.total_ns
    }

    /// Ends the window at `t_ns` with `completed` messages if it has begun
    /// and not yet ended: a receiver's phase that the sender closed before
    /// the receiver's own clock reached the window's end (the two sides
    /// start their clocks a few milliseconds apart).
    pub fn close_at(&mut self, t_ns: u64, completed: u64) {
        if self.start.is_some() && self.end.is_none() {
            self.end = Some((t_ns, completed));
        }
    }

    /// Messages and nanoseconds between the window's two ends, once both
    /// were observed.
    pub fn measured(&self) -> Option<(u64, u64)> {
        let ((ta, ca), (tb, cb)) = (self.start?, self.end?);
        Some((cb - ca, tb - ta))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    #[test]
    fn receive_ids_name_their_qp_and_slot_and_never_look_like_a_send() {
        for (qp, slot) in [(0usize, 0u32), (3, 511), (16383, 16383)] {
            let id = recv_wr_id(qp, slot);
            assert!(is_recv(id));
            assert_eq!((wr_id_qp(id), recv_slot(id)), (qp, slot));
        }
        for (qp, i) in [(0usize, 0u64), (16383, COUNT_MASK - 1), (7, u64::MAX)] {
            let id = wr_id(qp, i);
            assert!(!is_recv(id));
            assert_eq!(wr_id_qp(id), qp);
        }
    }

    /// A send queue as hardware keeps it: requests complete in order, and
    /// only signaled ones produce a completion (covering the unsignaled
    /// ones before them). Posting beyond the depth is an error, as
    /// `ENOMEM` from `ibv_post_send`, where rxe would silently take it.
    struct FakeQueue {
        depth: u64,
        queue: VecDeque<(u64, bool)>,
    }

    impl FakeQueue {
        fn post(&mut self, id: u64, signaled: bool) {
            assert!(
                (self.queue.len() as u64) < self.depth,
                "send queue overflow: {} outstanding, depth {}",
                self.queue.len(),
                self.depth
            );
            self.queue.push_back((id, signaled));
        }

        /// Completes up to `n` requests; returns the wr_ids of the
        /// signaled ones among them.
        fn drain(&mut self, n: usize) -> Vec<u64> {
            let mut out = Vec::new();
            for _ in 0..n {
                match self.queue.pop_front() {
                    Some((id, true)) => out.push(id),
                    Some(_) => {}
                    None => break,
                }
            }
            out
        }
    }

    /// Runs the scheduler against fake queues, draining `per_poll`
    /// requests per QP per round; returns messages completed per QP.
    fn simulate(w: Window, qps: usize, per_poll: usize, stop_after: Option<u64>) -> Vec<u64> {
        let mut s = BwScheduler::new(w, qps);
        let mut queues: Vec<FakeQueue> = (0..qps)
            .map(|_| FakeQueue {
                depth: u64::from(w.tx_depth),
                queue: VecDeque::new(),
            })
            .collect();
        let mut rounds = 0u64;
        while !s.is_done() {
            rounds += 1;
            assert!(rounds < 1_000_000, "no progress");
            for (q, queue) in queues.iter_mut().enumerate() {
                while let Some(first) = s.next_batch(q) {
                    for i in first..first + u64::from(w.post_list) {
                        queue.post(wr_id(q, i), s.signaled(i));
                    }
                    s.posted(q);
                }
            }
            for queue in &mut queues {
                for id in queue.drain(per_poll) {
                    s.complete(id).unwrap();
                }
            }
            if stop_after.is_some_and(|n| s.completed_total() >= n) {
                s.stop_posting();
            }
        }
        (0..qps)
            .map(|q| s.cursors[q].completed)
            .inspect(|&c| assert!(c > 0))
            .collect()
    }

    fn window(iters: Option<u64>, tx_depth: u32, cq_mod: u32, post_list: u32) -> Window {
        Window {
            iters,
            tx_depth,
            cq_mod,
            post_list,
        }
    }

    #[test]
    fn a_full_send_queue_is_never_overfilled() {
        // The device completes slowly (1 per poll): the window must hold.
        let done = simulate(window(Some(5000), 128, 100, 1), 2, 1, None);
        assert_eq!(done, vec![5000, 5000]);
        let done = simulate(window(Some(1000), 16, 16, 1), 1, 1, None);
        assert_eq!(done, vec![1000]);
    }

    #[test]
    fn cq_moderation_that_does_not_divide_the_iterations_still_ends() {
        // 1000 = 15 × 64 + 40: the last message is signaled anyway.
        let s = BwScheduler::new(window(Some(1000), 128, 64, 1), 1);
        assert!(s.signaled(63) && !s.signaled(64) && s.signaled(999));
        assert_eq!(
            simulate(window(Some(1000), 128, 64, 1), 3, 7, None),
            vec![1000; 3]
        );
        assert_eq!(simulate(window(Some(7), 4, 3, 1), 1, 1, None), vec![7]);
    }

    #[test]
    fn post_lists_post_whole_batches_within_the_depth() {
        let w = window(Some(1200), 64, 8, 8);
        let mut s = BwScheduler::new(w, 1);
        let mut batches = 0;
        while let Some(first) = s.next_batch(0) {
            assert_eq!(first % 8, 0);
            s.posted(0);
            batches += 1;
        }
        assert_eq!(batches, 8, "64-deep queue holds 8 batches of 8");
        assert_eq!(s.outstanding(0), 64);
        // The 8th message of the first batch completes it.
        assert_eq!(s.complete(wr_id(0, 7)), Ok(8));
        assert_eq!(s.next_batch(0), Some(64));
        assert_eq!(simulate(w, 2, 5, None), vec![1200, 1200]);
    }

    #[test]
    fn duration_mode_stops_posting_and_covers_the_unsignaled_tail() {
        let w = window(None, 32, 10, 1);
        let mut s = BwScheduler::new(w, 1);
        for _ in 0..15 {
            let first = s.next_batch(0).unwrap();
            assert_eq!(first, s.posted_total());
            s.posted(0);
        }
        s.stop_posting();
        // Message 14 was unsignaled: post up to the next signaled (19).
        let mut extra = 0;
        while s.next_batch(0).is_some() {
            s.posted(0);
            extra += 1;
        }
        assert_eq!(extra, 5);
        assert!(!s.is_done());
        assert_eq!(s.complete(wr_id(0, 9)), Ok(10));
        assert_eq!(s.complete(wr_id(0, 19)), Ok(10));
        assert!(s.is_done());
        // And end to end, with a stop part-way.
        let done = simulate(w, 2, 3, Some(777));
        assert!(done.iter().all(|&c| c % 10 == 0), "{done:?}");
    }

    #[test]
    fn counts_past_two_to_the_fortieth_decode_across_the_wrap() {
        let w = window(None, 128, 16, 1);
        let start = (1u64 << 40) - 40;
        let mut s = BwScheduler::starting_at(w, 2, start);
        for _ in 0..64 {
            s.posted(1);
        }
        // Message start+47 has count field (start + 48) mod 2^40 = 8.
        let id = wr_id(1, start + 47);
        assert_eq!(wr_id_qp(id), 1, "the count never spills into the QP");
        assert_eq!(id & COUNT_MASK, 8);
        assert_eq!(s.complete(id), Ok(48));
        assert_eq!(s.complete(wr_id(1, start + 63)), Ok(16));
        assert_eq!(s.outstanding(1), 0);
        assert_eq!(s.outstanding(0), 0);
    }

    #[test]
    fn a_completion_for_nothing_posted_is_an_error_not_a_panic() {
        let mut s = BwScheduler::new(window(Some(100), 8, 1, 1), 2);
        assert_eq!(
            s.complete(wr_id(5, 0)),
            Err(SchedError::UnknownQp { qp: 5, qps: 2 })
        );
        s.posted(0);
        assert!(matches!(
            s.complete(wr_id(0, 3)),
            Err(SchedError::NotPosted {
                covers: 4,
                outstanding: 1,
                ..
            })
        ));
        assert_eq!(
            s.complete(u64::MAX),
            Err(SchedError::UnknownQp {
                qp: 0x7f_ffff,
                qps: 2
            })
        );
    }

    #[test]
    fn a_window_closed_early_ends_where_it_was_closed() {
        let mut d = DurationWindow::new(10_000, 0);
        d.observe(0, 0);
        d.observe(9_000, 90);
        assert_eq!(d.measured(), None);
        d.close_at(9_500, 95);
        assert_eq!(d.measured(), Some((95, 9_500)));
        // A window already ended, or never begun, is left alone.
        d.close_at(20_000, 200);
        assert_eq!(d.measured(), Some((95, 9_500)));
        let mut late = DurationWindow::new(10_000, 2_000);
        late.observe(1_000, 10);
        late.close_at(1_500, 15);
        assert_eq!(late.measured(), None);
    }

    #[test]
    fn duration_window_measures_between_the_margins() {
        let mut d = DurationWindow::new(10_000, 2_000);
        for (t, c) in [
            (0, 0),
            (1_000, 10),
            (2_500, 25),
            (5_000, 50),
            (8_100, 81),
            (9_000, 90),
        ] {
            d.observe(t, c);
        }
        assert_eq!(d.measured(), Some((81 - 25, 8_100 - 2_500)));
        assert!(d.keep_posting(9_999) && !d.keep_posting(10_000));
        let mut short = DurationWindow::new(10_000, 2_000);
        short.observe(1_000, 10);
        assert_eq!(short.measured(), None, "ended before the window");
    }
}
