//! Receive credits in the bandwidth loop: a SEND test on iWARP, which has
//! no receiver-not-ready retry, never posts a SEND the peer has no
//! receive posted for. The arithmetic is [`engine::bench::credit`]'s; this
//! module moves its numbers. Per QP, its area ends in a credit line
//! ([`CREDIT_LINE`]): the peer's grant lands in our `GRANT_IN` word (an
//! RDMA WRITE of the little-endian count, one per so many reposts), and
//! ours is written from our `GRANT_OUT` word into the peer's `GRANT_IN`.
//! The state lives as long as the QPs (counts are cumulative across
//! message sizes).

use anyhow::Context as _;
use engine::bench::config::BwConfig;
use engine::bench::credit::{
    CREDIT_LINE, CreditReceiver, CreditSender, GRANT_IN, GRANT_OUT, GRANT_WRITES, grant_interval,
};
use engine::proto::wire::QpInfo;
use verbs::{BoundQueuePair, LocalSge, MemoryRegion, Op, SendWr};

use crate::exit::UsageError;
use crate::side::Side;

/// Marks the `wr_id` of a grant write (never a scheduler's: bit 61).
pub const GRANT_FLAG: u64 = 1 << 61;

/// Whether a send completion is a grant write's.
#[inline]
pub fn is_grant(wr_id: u64) -> bool {
    wr_id & GRANT_FLAG != 0
}

/// The bytes each QP's area holds for a test whose messages need
/// `messages` bytes: one credit line more when credits are used.
pub fn area(messages: u64, credits: bool) -> u64 {
    if credits {
        messages + CREDIT_LINE
    } else {
        messages
    }
}

/// How often a receiver grants, for `cfg`; a usage error (naming `-l`
/// and `-r`) when its post list is longer than its receive queue.
///
/// # Errors
/// That usage error.
pub fn interval(cfg: &BwConfig) -> Result<u32, UsageError> {
    grant_interval(cfg.rx_depth, cfg.post_list).ok_or_else(|| {
        UsageError(format!(
            "-l/--post_list: a post list of {} SENDs is longer than the receive queue of {} \
             (-r/--rx-depth): on iWARP a SEND needs a posted receive, so such a batch could \
             never be posted",
            cfg.post_list, cfg.rx_depth
        ))
    })
}

/// One QP's credits, both ways (a side with `-b` sends and receives).
#[derive(Debug)]
pub struct QpCredits {
    sender: CreditSender,
    receiver: CreditReceiver,
    /// Region offsets of our `GRANT_IN` and `GRANT_OUT` words.
    grant_in: usize,
    grant_out: usize,
    /// The peer's `GRANT_IN` word and its key.
    peer_word: u64,
    peer_rkey: u32,
    /// Grant writes posted and not yet completed.
    writes: u32,
}

impl QpCredits {
    /// Every QP's credits on `side`, whose areas hold `messages` bytes of
    /// messages before their credit line; the peer's areas are `remote`.
    /// Our `GRANT_IN` words start at the receive depth (the receives the
    /// peer posts before any SEND): call before the first SEND, when no
    /// grant can have come.
    ///
    /// # Errors
    /// A usage error when the post list is longer than the receive queue;
    /// a word outside the region.
    pub fn for_side(
        side: &Side,
        remote: &[QpInfo],
        cfg: &BwConfig,
        messages: u64,
    ) -> anyhow::Result<Vec<Self>> {
        let every = interval(cfg)?;
        let region = side.region();
        (0..side.qps.len())
            .map(|q| {
                let line = side.exposed_offset(q) + messages as usize;
                let c = Self {
                    sender: CreditSender::new(cfg.rx_depth),
                    receiver: CreditReceiver::new(cfg.rx_depth, every),
                    grant_in: line + GRANT_IN as usize,
                    grant_out: line + GRANT_OUT as usize,
                    peer_word: remote[q].addr + messages + GRANT_IN,
                    peer_rkey: remote[q].rkey,
                    writes: 0,
                };
                region
                    .write_u64(c.grant_in, u64::from(cfg.rx_depth).to_le())
                    .context("the credit word")?;
                Ok(c)
            })
            .collect()
    }

    /// Whether `n` SENDs may be posted now, after reading the peer's
    /// latest grant.
    ///
    /// # Errors
    /// A grant no receiver makes (`CreditError::BadGrant`).
    #[inline]
    pub fn may_send(&mut self, region: &MemoryRegion, n: u64) -> anyhow::Result<bool> {
        let grant = u64::from_le(region.read_u64(self.grant_in)?);
        self.sender.granted(grant)?;
        Ok(self.sender.available() >= n)
    }

    /// Records `n` SENDs posted (after [`QpCredits::may_send`] allowed them).
    ///
    /// # Errors
    /// More than the credits allowed (a caller bug).
    #[inline]
    pub fn sent(&mut self, n: u64) -> anyhow::Result<()> {
        Ok(self.sender.sent(n)?)
    }

    /// Records one receive posted again on `qp` (the `q`th of its thread)
    /// and writes the grant if one is due and a write may be posted.
    ///
    /// # Errors
    /// A failed post.
    #[inline]
    pub fn reposted(
        &mut self,
        qp: &BoundQueuePair,
        q: usize,
        region: &MemoryRegion,
    ) -> anyhow::Result<()> {
        self.receiver.record(1);
        self.grant(qp, q, region)
    }

    /// A grant write of this QP completed: one more may be posted, and a
    /// grant held back meanwhile goes now.
    ///
    /// # Errors
    /// A failed post.
    pub fn written(
        &mut self,
        qp: &BoundQueuePair,
        q: usize,
        region: &MemoryRegion,
    ) -> anyhow::Result<()> {
        self.writes = self.writes.saturating_sub(1);
        self.grant(qp, q, region)
    }

    /// Whether no grant write is in flight (the loop ends only then, so
    /// none completes in the next size's loop or after the QP is gone).
    #[inline]
    pub fn settled(&self) -> bool {
        self.writes == 0
    }

    #[inline]
    fn grant(
        &mut self,
        qp: &BoundQueuePair,
        q: usize,
        region: &MemoryRegion,
    ) -> anyhow::Result<()> {
        if self.writes >= GRANT_WRITES {
            return Ok(());
        }
        let Some(grant) = self.receiver.due() else {
            return Ok(());
        };
        // Grants only grow: a write still in flight from this word that
        // reads the newer count tells no more than is posted.
        region.write_u64(self.grant_out, grant.to_le())?;
        qp.post_send(&SendWr {
            wr_id: GRANT_FLAG | engine::bench::sched::wr_id(q, 0),
            local: LocalSge {
                addr: region.addr() + self.grant_out as u64,
                length: 8,
                lkey: region.lkey(),
            },
            op: Op::Write {
                remote_addr: self.peer_word,
                rkey: self.peer_rkey,
                imm: None,
            },
            signaled: true,
            inline: false,
        })
        .context("posting a receive-credit grant")?;
        self.writes += 1;
        Ok(())
    }
}
