//! Receive credits for SEND tests on iWARP, which has no
//! receiver-not-ready retry: a SEND that finds no posted receive breaks the
//! connection. So the receiver grants credits and the sender never has more
//! SENDs in flight than the receiver has receives posted (perftest does the
//! same on iWARP only, `send_rcredit` in `send_bw.c`; its multi-QP form hung
//! until perftest commit 28308bb, a credit counted on the wrong QP).
//!
//! The scheme, per QP, pure arithmetic here (the loops move the numbers):
//!
//! - The receiver posts `rx_depth` receives before the first SEND can come;
//!   its **grant** is the cumulative number of receives it has ever posted:
//!   `rx_depth + reposted`. It tells the sender its grant (an RDMA WRITE of
//!   the 8-byte number into the sender's credit word) every `every`
//!   reposts, and once more when it is told to flush (end of a phase).
//! - The sender counts what it has **sent** (cumulative) and may post
//!   while `grant - sent > 0`: every SEND in flight then has a posted
//!   receive waiting, whatever the order the grants arrive in.
//!
//! Both counts are cumulative and compared with wrapping arithmetic, so
//! they may wrap around `u64` without harm; a grant that moves backwards,
//! or further than the receive queue can hold, is refused as the peer's
//! error (a peer's number never panics us).
//!
//! Where the numbers live: each QP's area gains a [`CREDIT_LINE`] after
//! the bytes its messages use; the peer writes its grant (little-endian)
//! into the word at [`GRANT_IN`], and this side's own grant is written
//! from the word at [`GRANT_OUT`]. A sender that batches `post_list`
//! SENDs needs that many credits at once: [`grant_interval`] keeps the
//! interval small enough that it always gets them.

/// Bytes after a QP's message area that hold its credit words (one
/// cache line).
pub const CREDIT_LINE: u64 = 64;
/// Offset in the credit line of the word the peer's grants land in.
pub const GRANT_IN: u64 = 0;
/// Offset in the credit line of the word this side's grants are sent from.
pub const GRANT_OUT: u64 = 8;
/// Grant writes a QP may have in flight at once (its send queue holds
/// this many more entries); a grant due while they are all in flight
/// waits for one to complete.
pub const GRANT_WRITES: u32 = 4;

/// How many reposts the receiver tells a grant after, for a receive queue
/// of `rx_depth` and a sender posting `post_list` SENDs at a time: a
/// quarter of the queue, but at most `rx_depth + 1 - post_list`, since the
/// sender always ends up with `rx_depth + 1 - every` credits or more (what
/// is reposted and not yet told is under `every`). `None` when the post
/// list is longer than the queue: such a sender could never post.
pub fn grant_interval(rx_depth: u32, post_list: u32) -> Option<u32> {
    let most = rx_depth.checked_add(1)?.checked_sub(post_list.max(1))?;
    (most > 0).then(|| (rx_depth / 4).clamp(1, most))
}

/// What a grant from the peer cannot be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CreditError {
    /// More SENDs were recorded than the credits allowed: a caller bug.
    #[error("{wanted} SENDs posted with only {available} receive credits")]
    Overdrawn {
        /// SENDs recorded at once.
        wanted: u64,
        /// Credits there were.
        available: u64,
    },
    /// The peer's grant moved backwards or beyond what its receive queue
    /// can hold: not a grant this scheme makes.
    #[error(
        "the peer granted {grant} receive credits after {sent} SENDs and a grant of {previous}: \
         more than its receive queue of {rx_depth} holds, or fewer than before"
    )]
    BadGrant {
        /// The new grant.
        grant: u64,
        /// The grant before it.
        previous: u64,
        /// SENDs sent so far.
        sent: u64,
        /// The receive queue depth both sides agreed on.
        rx_depth: u64,
    },
}

/// The sending side's credits on one QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreditSender {
    sent: u64,
    granted: u64,
    rx_depth: u64,
}

impl CreditSender {
    /// Before any SEND: the receiver has posted `rx_depth` receives.
    pub fn new(rx_depth: u32) -> Self {
        Self::starting_at(0, rx_depth)
    }

    /// As [`CreditSender::new`] with both counts starting at `origin`
    /// (what a long run reaches; tests use it near the wrap-around).
    pub fn starting_at(origin: u64, rx_depth: u32) -> Self {
        Self {
            sent: origin,
            granted: origin.wrapping_add(u64::from(rx_depth)),
            rx_depth: u64::from(rx_depth),
        }
    }

    /// SENDs that may be posted now.
    #[inline]
    pub fn available(&self) -> u64 {
        self.granted.wrapping_sub(self.sent)
    }

    /// Records `n` SENDs posted.
    ///
    /// # Errors
    /// [`CreditError::Overdrawn`] when fewer than `n` credits were left;
    /// nothing is recorded then.
    #[inline]
    pub fn sent(&mut self, n: u64) -> Result<(), CreditError> {
        let available = self.available();
        if n > available {
            return Err(CreditError::Overdrawn {
                wanted: n,
                available,
            });
        }
        self.sent = self.sent.wrapping_add(n);
        Ok(())
    }

    /// Takes the peer's cumulative grant, as read from the credit word.
    /// The same grant read again changes nothing.
    ///
    /// # Errors
    /// [`CreditError::BadGrant`] when it is below the previous grant or
    /// would put more credits in hand than the receive queue holds; the
    /// previous grant stays.
    pub fn granted(&mut self, grant: u64) -> Result<(), CreditError> {
        let forward = grant.wrapping_sub(self.granted);
        let in_hand = grant.wrapping_sub(self.sent);
        // A grant below the previous one wraps `forward` to a huge number,
        // and so does `in_hand`: both are caught by the second test.
        if forward > self.rx_depth || in_hand > self.rx_depth {
            return Err(CreditError::BadGrant {
                grant,
                previous: self.granted,
                sent: self.sent,
                rx_depth: self.rx_depth,
            });
        }
        self.granted = grant;
        Ok(())
    }
}

/// The receiving side's grants on one QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreditReceiver {
    /// Receives ever posted: the grant.
    posted: u64,
    /// The grant last told to the sender.
    told: u64,
    every: u64,
}

impl CreditReceiver {
    /// `rx_depth` receives posted before the first SEND; a grant is told
    /// every `every` reposts (at least 1, at most `rx_depth`: a sender
    /// must hear of a repost before it can run dry).
    pub fn new(rx_depth: u32, every: u32) -> Self {
        Self::starting_at(0, rx_depth, every)
    }

    /// As [`CreditReceiver::new`] with the counts starting at `origin`.
    pub fn starting_at(origin: u64, rx_depth: u32, every: u32) -> Self {
        let posted = origin.wrapping_add(u64::from(rx_depth));
        Self {
            posted,
            told: posted,
            every: u64::from(every.clamp(1, rx_depth.max(1))),
        }
    }

    /// Records `n` receives posted again; the grant to tell the sender
    /// now, if it is time.
    #[inline]
    pub fn reposted(&mut self, n: u64) -> Option<u64> {
        self.record(n);
        self.due()
    }

    /// Records `n` receives posted again, telling nothing yet (the caller
    /// cannot send a grant now and asks [`CreditReceiver::due`] later).
    #[inline]
    pub fn record(&mut self, n: u64) {
        self.posted = self.posted.wrapping_add(n);
    }

    /// The grant to tell the sender now, if `every` reposts or more went
    /// untold.
    #[inline]
    pub fn due(&mut self) -> Option<u64> {
        (self.posted.wrapping_sub(self.told) >= self.every).then(|| self.tell())
    }

    /// The grant not yet told, if any (at the end of a phase).
    pub fn flush(&mut self) -> Option<u64> {
        (self.posted != self.told).then(|| self.tell())
    }

    fn tell(&mut self) -> u64 {
        self.told = self.posted;
        self.posted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// One QP, simulated: the sender posts while it has credits, SENDs
    /// arrive in order and each consumes a posted receive (which must
    /// exist: iWARP), the receiver posts consumed receives again later and
    /// tells grants, which reach the sender `delay` steps after. What
    /// happens at each step is picked by a replayable generator.
    struct Link {
        sender: CreditSender,
        receiver: CreditReceiver,
        /// Receives posted and not yet consumed.
        posted_receives: u64,
        /// Receives consumed and not yet posted again.
        to_repost: u64,
        in_flight: u64,
        grants: VecDeque<(u64, u64)>,
        delivered: u64,
        step: u64,
        delay: u64,
    }

    impl Link {
        fn new(origin: u64, rx_depth: u32, every: u32, delay: u64) -> Self {
            Self {
                sender: CreditSender::starting_at(origin, rx_depth),
                receiver: CreditReceiver::starting_at(origin, rx_depth, every),
                posted_receives: u64::from(rx_depth),
                to_repost: 0,
                in_flight: 0,
                grants: VecDeque::new(),
                delivered: 0,
                step: 0,
                delay,
            }
        }

        /// One step: `choice` picks a SEND, an arrival, a repost or the
        /// reading of a grant that is due.
        fn step(&mut self, choice: u64, stop_sending: bool) {
            self.step += 1;
            match choice % 4 {
                0 if !stop_sending && self.sender.available() > 0 => {
                    self.sender.sent(1).unwrap();
                    self.in_flight += 1;
                }
                1 if self.in_flight > 0 => {
                    assert!(
                        self.posted_receives > 0,
                        "a SEND arrived with no receive posted (step {})",
                        self.step
                    );
                    self.in_flight -= 1;
                    self.posted_receives -= 1;
                    self.to_repost += 1;
                    self.delivered += 1;
                }
                2 if self.to_repost > 0 => {
                    // Sometimes several at once, as a batch of completions.
                    let n = 1 + (choice >> 8) % self.to_repost;
                    self.to_repost -= n;
                    self.posted_receives += n;
                    if let Some(g) = self.receiver.reposted(n) {
                        self.grants.push_back((self.step + self.delay, g));
                    }
                }
                _ => {
                    if let Some(&(due, g)) = self.grants.front()
                        && due <= self.step
                    {
                        self.grants.pop_front();
                        self.sender.granted(g).unwrap();
                    }
                }
            }
        }
    }

    /// A small deterministic generator (xorshift), so the tests replay.
    fn choices(seed: u64) -> impl Iterator<Item = u64> {
        let mut x = seed | 1;
        std::iter::from_fn(move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            Some(x)
        })
    }

    #[test]
    fn the_sender_never_overruns_the_posted_receives_and_never_stalls() {
        for (seed, rx_depth, every, delay) in [
            (1, 512, 128, 0),
            (2, 16, 1, 5),
            (3, 8, 8, 40),
            (4, 1, 1, 3),
            (5, 64, 200, 7),
        ] {
            let mut link = Link::new(0, rx_depth, every, delay);
            for c in choices(seed).take(200_000) {
                link.step(c, false);
            }
            assert!(
                link.delivered > 10_000,
                "seed {seed}: only {} delivered: the sender stalled",
                link.delivered
            );
        }
    }

    #[test]
    fn a_greedy_sender_against_a_lazy_receiver_never_overruns() {
        // The worst order: the sender sends whenever it may, SENDs arrive
        // at once, the receiver reposts only when nothing else can happen.
        for (rx_depth, every, delay) in [(1, 1, 0), (4, 1, 2), (16, 4, 9), (8, 8, 0)] {
            let mut link = Link::new(u64::MAX - 5, rx_depth, every, delay);
            for _ in 0..20_000 {
                let choice = if link.sender.available() > 0 {
                    0
                } else if link.in_flight > 0 {
                    1
                } else if link
                    .grants
                    .front()
                    .is_some_and(|&(due, _)| due <= link.step + 1)
                {
                    3
                } else if link.to_repost > 0 {
                    2
                } else {
                    3
                };
                link.step(choice, false);
            }
            assert!(
                link.delivered > 1_000,
                "rx_depth {rx_depth}: {}",
                link.delivered
            );
        }
    }

    #[test]
    fn many_short_runs_from_the_start_never_overrun() {
        // The first steps, where the initial credits are spent, in many
        // orders.
        for seed in 1..3_000 {
            let mut link = Link::new(0, 1 + (seed % 4) as u32, 1, seed % 3);
            for c in choices(seed).take(60) {
                link.step(c, false);
            }
        }
    }

    #[test]
    fn counts_wrap_around_u64_without_harm() {
        for origin in [u64::MAX - 3, u64::MAX - 600, u64::MAX] {
            let mut link = Link::new(origin, 32, 4, 2);
            for c in choices(origin).take(50_000) {
                link.step(c, false);
            }
            assert!(
                link.delivered > 2_000,
                "origin {origin}: {}",
                link.delivered
            );
        }
    }

    #[test]
    fn each_qp_spends_only_its_own_credits() {
        // Two QPs: grants for QP 1 must not let QP 0 send (perftest's
        // multi-QP hang was a credit booked on the wrong QP).
        let mut qps = [CreditSender::new(4), CreditSender::new(4)];
        qps[0].sent(4).unwrap();
        qps[1].sent(2).unwrap();
        qps[1].granted(6).unwrap();
        assert_eq!(qps[0].available(), 0);
        assert_eq!(qps[1].available(), 4);
        assert_eq!(
            qps[0].sent(1),
            Err(CreditError::Overdrawn {
                wanted: 1,
                available: 0
            })
        );
    }

    #[test]
    fn at_the_end_of_a_phase_every_send_finds_its_receive_and_the_last_grant_is_told() {
        // Duration mode: posting stops at some point; what is in flight
        // arrives, and the receiver's flush tells the last grant.
        let mut link = Link::new(0, 16, 5, 1);
        for c in choices(9).take(10_000) {
            link.step(c, false);
        }
        for c in choices(10).take(10_000) {
            link.step(c, true);
        }
        assert_eq!(link.in_flight, 0, "every SEND arrived");
        // The receiver posts what was consumed again (end of the phase).
        if link.to_repost > 0
            && let Some(g) = link.receiver.reposted(link.to_repost)
        {
            link.grants.push_back((0, g));
        }
        if let Some(g) = link.receiver.flush() {
            link.grants.push_back((0, g));
        }
        while let Some((_, g)) = link.grants.pop_front() {
            link.sender.granted(g).unwrap();
        }
        assert_eq!(link.sender.available(), 16, "all credits back once idle");
        assert_eq!(link.receiver.flush(), None, "nothing left to tell");
    }

    #[test]
    fn a_grant_that_moves_back_or_beyond_the_queue_is_refused_and_changes_nothing() {
        let mut s = CreditSender::new(8);
        s.sent(8).unwrap();
        s.granted(12).unwrap();
        s.granted(12).unwrap();
        let before = s;
        assert!(matches!(s.granted(11), Err(CreditError::BadGrant { .. })));
        assert!(matches!(s.granted(17), Err(CreditError::BadGrant { .. })));
        assert!(matches!(
            s.granted(u64::MAX),
            Err(CreditError::BadGrant { .. })
        ));
        assert_eq!(s, before);
        let e = s.granted(17).unwrap_err().to_string();
        assert!(
            e.contains("granted 17") && e.contains("receive queue of 8"),
            "{e}"
        );
    }

    #[test]
    fn the_receiver_tells_every_so_many_reposts_and_its_interval_is_bounded() {
        let mut r = CreditReceiver::new(8, 3);
        assert_eq!(r.reposted(1), None);
        assert_eq!(r.reposted(1), None);
        assert_eq!(r.reposted(1), Some(11));
        assert_eq!(r.flush(), None);
        assert_eq!(r.reposted(1), None);
        assert_eq!(r.flush(), Some(12));
        // An interval above the depth would let the sender run dry.
        let mut wide = CreditReceiver::new(4, 100);
        assert_eq!(wide.reposted(3), None);
        assert_eq!(wide.reposted(1), Some(8));
        let mut zero = CreditReceiver::new(4, 0);
        assert_eq!(zero.reposted(1), Some(5));
    }

    #[test]
    fn a_grant_held_back_is_told_when_asked_later() {
        // All grant writes in flight: reposts are recorded, and the grant
        // goes out (cumulative, covering them all) once one completes.
        let mut r = CreditReceiver::new(8, 2);
        r.record(1);
        r.record(2);
        r.record(1);
        assert_eq!(r.due(), Some(12));
        assert_eq!(r.due(), None);
        r.record(1);
        assert_eq!(r.due(), None, "one repost is under the interval");
    }

    #[test]
    fn the_interval_lets_a_batching_sender_always_post_its_batch() {
        assert_eq!(grant_interval(512, 1), Some(128));
        assert_eq!(grant_interval(8, 8), Some(1));
        assert_eq!(grant_interval(8, 7), Some(2));
        assert_eq!(grant_interval(1, 1), Some(1));
        assert_eq!(grant_interval(3, 0), Some(1));
        assert_eq!(grant_interval(8, 9), None);
        assert_eq!(grant_interval(u32::MAX, 1), None);
        // The guarantee: a sender of `post_list` at a time never stalls
        // when the receiver tells at that interval.
        for (rx_depth, post_list) in [(8, 8), (8, 5), (16, 3), (4, 1), (2, 2)] {
            let every = grant_interval(rx_depth, post_list).unwrap();
            let mut link = Link::new(0, rx_depth, every, 3);
            let mut batches = 0u64;
            for c in choices(u64::from(rx_depth * 31 + post_list)).take(20_000) {
                // Instead of single SENDs: a whole batch, only when the
                // credits cover it.
                if c % 4 == 0 {
                    let n = u64::from(post_list);
                    if link.sender.available() >= n {
                        link.sender.sent(n).unwrap();
                        link.in_flight += n;
                        batches += 1;
                    }
                } else {
                    link.step(c, true);
                }
            }
            // Drained: the sender holds a whole batch again.
            while link.in_flight > 0 || link.to_repost > 0 || !link.grants.is_empty() {
                for k in 1..4 {
                    link.step(k, true);
                }
            }
            assert!(batches > 200, "{rx_depth}/{post_list}: {batches}");
            assert!(
                link.sender.available() >= u64::from(post_list),
                "{rx_depth}/{post_list}: {} credits left",
                link.sender.available()
            );
        }
    }
}
