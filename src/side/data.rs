//! The data in one side's region: the pattern a reader checks, the
//! zeroing before a check, the receive rings, and the checks of what
//! arrived (or was summed by atomics).

use std::ops::Range;

use anyhow::{Context as _, bail};
use engine::bench::config::ring_offset;
use engine::bench::spec::{fill_pattern, pattern_byte};
use verbs::{BoundQueuePair, LocalSge};

use super::Side;

/// The SGE of receive slot `slot` in the area at `base`: slots of
/// `recv_len` bytes on the ring of [`ring_offset`].
#[inline]
fn recv_sge(base: u64, recv_len: u32, lkey: u32, slot: u32) -> LocalSge {
    LocalSge {
        addr: base + ring_offset(u64::from(recv_len), u64::from(slot)),
        length: recv_len,
        lkey,
    }
}

/// Posts the receive of `slot` on `qp`, the `q`th QP of its worker thread,
/// into the exposed area at `base` (`recv_len` 0: an empty receive).
///
/// # Errors
/// As [`BoundQueuePair::post_recv`].
#[inline]
pub fn post_receive(
    qp: &BoundQueuePair,
    q: usize,
    base: u64,
    recv_len: u32,
    lkey: u32,
    slot: u32,
) -> verbs::Result<()> {
    let id = engine::bench::sched::recv_wr_id(q, slot);
    if recv_len == 0 {
        qp.qp().post_recv_empty(id)
    } else {
        qp.post_recv(id, recv_sge(base, recv_len, lkey, slot))
    }
}

/// The index of the first byte where `got` and `want` differ: one slice
/// comparison (memcmp) in the common case that they agree.
fn first_difference(got: &[u8], want: &[u8]) -> Option<usize> {
    if got == want {
        return None;
    }
    got.iter().zip(want).position(|(g, w)| g != w)
}

impl Side {
    /// Posts every QP's ring of `rx_depth` receives (a side that receives;
    /// a connected QP, so none is lost to a reset). Each worker's loop
    /// posts a receive again in its slot as it completes.
    pub(super) fn post_receive_rings(&self) -> anyhow::Result<()> {
        for t in 0..self.layout.threads {
            let range = self.layout.qps_of_thread(t);
            for g in range.clone() {
                let g = g as usize;
                for slot in 0..self.layout.rx_depth {
                    post_receive(
                        &self.qps[g],
                        g - range.start as usize,
                        self.exposed(g),
                        self.layout.recv_len,
                        self.lkey(),
                        slot,
                    )
                    .with_context(|| format!("posting receive {slot} of QP {g}"))?;
                }
            }
        }
        Ok(())
    }

    /// Consumes what a previous size left in the CQs: receives of messages
    /// that came after a side stopped counting (posted again) and nothing
    /// else; returns how many receives it found.
    ///
    /// # Errors
    /// A failed receive or post.
    pub fn drain_receives(&self) -> anyhow::Result<u64> {
        let mut wcs = vec![verbs::WorkCompletion::default(); 32];
        let mut found = 0u64;
        for t in 0..self.layout.threads as usize {
            let range = self.layout.qps_of_thread(t as u32);
            for cq in self.cqs_of_thread(t) {
                loop {
                    let n = cq.poll(&mut wcs)?;
                    if n == 0 {
                        break;
                    }
                    for wc in &wcs[..n] {
                        if !engine::bench::sched::is_recv(wc.wr_id()) {
                            continue;
                        }
                        if !wc.is_success() {
                            bail!("a receive completed with {} between sizes", wc.status());
                        }
                        let q = engine::bench::sched::wr_id_qp(wc.wr_id());
                        let g = range.start as usize + q;
                        if g >= range.end as usize {
                            bail!("a receive of an unknown QP completed");
                        }
                        post_receive(
                            &self.qps[g],
                            q,
                            self.exposed(g),
                            self.layout.recv_len,
                            self.lkey(),
                            engine::bench::sched::recv_slot(wc.wr_id()),
                        )?;
                        found += 1;
                    }
                }
            }
        }
        Ok(found)
    }

    /// Stores the read pattern in every exposed area.
    pub(super) fn fill_pattern(&self) -> anyhow::Result<()> {
        let area = usize::try_from(self.layout.area).context("area size")?;
        let mut buf = vec![0u8; area];
        // Every QP's area, made yet or not (rdma_cm makes them later).
        for q in 0..self.layout.qps as usize {
            fill_pattern(q, 0, &mut buf);
            self.region.write_bytes(self.exposed_offset(q), &buf)?;
        }
        Ok(())
    }

    /// Zeroes the first `len` bytes of QP `q`'s exposed and working areas.
    ///
    /// # Errors
    /// When `len` exceeds an area.
    pub fn zero(&self, q: usize, len: u64) -> anyhow::Result<()> {
        let len = usize::try_from(len.min(self.layout.area)).context("length")?;
        let e = self.exposed_offset(q);
        self.region.fill(e..e + len, 0)?;
        if self.layout.initiates {
            let w = self.working_offset(q);
            self.region.fill(w..w + len, 0)?;
        }
        Ok(())
    }

    /// Zeroes every working area (before a read test's size, so that its
    /// data check sees only what the reads brought).
    ///
    /// # Errors
    /// As [`Side::zero`].
    pub fn zero_working(&self) -> anyhow::Result<()> {
        let area = usize::try_from(self.layout.area).context("area size")?;
        for q in 0..self.qps.len() {
            let w = self.working_offset(q);
            self.region.fill(w..w + area, 0)?;
        }
        Ok(())
    }

    /// Before a SEND test's size: every message slot of every working
    /// area holds the sender's pattern, restarting at each slot (byte `k`
    /// of every message of QP `q` is `pattern_byte(q, k)`, wherever the
    /// receiver's ring puts it).
    ///
    /// # Errors
    /// When `size` exceeds an area.
    pub fn fill_send_pattern(&self, size: u64) -> anyhow::Result<()> {
        let len = usize::try_from(size).context("message size")?;
        let mut buf = vec![0u8; len];
        for q in 0..self.qps.len() {
            fill_pattern(q, 0, &mut buf);
            for i in 0..engine::bench::config::ring_slots(size) {
                let off = self.working_offset(q) + ring_offset(size, i) as usize;
                self.region.write_bytes(off, &buf)?;
            }
        }
        Ok(())
    }

    /// Zeroes every exposed area's first `len` bytes (a receiver's ring,
    /// an atomic target's words) before a size.
    ///
    /// # Errors
    /// When `len` exceeds an area.
    pub fn zero_exposed(&self, len: u64) -> anyhow::Result<()> {
        let len = usize::try_from(len.min(self.layout.area)).context("length")?;
        for q in 0..self.qps.len() {
            let e = self.exposed_offset(q);
            self.region.fill(e..e + len, 0)?;
        }
        Ok(())
    }

    /// The data check of a SEND test's receiver: on QP `q`, the slots of
    /// its last `count` receives (the ring is consumed in slot order,
    /// ending at `last_slot`) hold the sender's pattern in their first
    /// `size` bytes. Each distinct slot is compared once (a slot reused
    /// holds the last message put there). Returns the bytes compared.
    ///
    /// # Errors
    /// The first differing byte, naming QP, slot, offset, expected and
    /// found.
    pub fn check_received(
        &self,
        q: usize,
        size: u64,
        last_slot: u32,
        count: u64,
    ) -> anyhow::Result<u64> {
        let (rx, recv_len) = (self.layout.rx_depth, u64::from(self.layout.recv_len));
        if rx == 0 || count == 0 {
            return Ok(0);
        }
        let touched = count.min(u64::from(rx)) as u32;
        let distinct = engine::bench::config::ring_slots(recv_len).min(u64::from(touched)) as u32;
        let len = usize::try_from(size).context("message size")?;
        let mut buf = vec![0u8; len];
        let mut want = vec![0u8; len];
        fill_pattern(q, 0, &mut want);
        let mut checked = 0;
        // The last `distinct` slots consumed, newest first: their offsets
        // are all different (the ring of offsets repeats every
        // ring_slots(recv_len) slots).
        for back in 0..distinct {
            let slot = (last_slot + rx - back % rx) % rx;
            let off = ring_offset(recv_len, u64::from(slot));
            self.region
                .read_into(self.exposed_offset(q) + off as usize, &mut buf)?;
            if let Some(k) = first_difference(&buf, &want) {
                bail!(
                    "data check failed: QP {q}'s receive in slot {slot} has {:#04x} at byte {k} \
                     of its {size}-byte message, the sender's pattern {:#04x}",
                    buf[k],
                    pattern_byte(q, k as u64)
                );
            }
            checked += size;
        }
        Ok(checked)
    }

    /// The sum of the `words` 8-byte words of QP `q`'s exposed area that
    /// an atomic test targets (one per cache line: [`ring_offset`] of 8).
    ///
    /// # Errors
    /// When the words lie beyond the area.
    pub fn atomic_sum(&self, q: usize, words: u64) -> anyhow::Result<u64> {
        let mut sum = 0u64;
        for i in 0..words {
            let off = self.exposed_offset(q) + ring_offset(8, i) as usize;
            sum = sum.wrapping_add(self.region.read_u64(off)?);
        }
        Ok(sum)
    }

    /// The data check of a read test: QP `q`'s working area holds the
    /// peer's pattern in every range of `ranges` (offsets within the
    /// area). Returns the bytes compared.
    ///
    /// # Errors
    /// The first differing byte, naming QP, offset, expected and found.
    pub fn check_pattern(
        &self,
        q: usize,
        ranges: impl Iterator<Item = Range<u64>>,
    ) -> anyhow::Result<u64> {
        let base = self.working_offset(q);
        let (mut buf, mut want) = (Vec::new(), Vec::new());
        let mut checked = 0;
        for r in ranges {
            let len = usize::try_from(r.end - r.start).context("range")?;
            buf.resize(len, 0);
            want.resize(len, 0);
            self.region.read_into(base + r.start as usize, &mut buf)?;
            fill_pattern(q, r.start, &mut want);
            if let Some(i) = first_difference(&buf, &want) {
                let off = r.start + i as u64;
                bail!(
                    "data check failed: QP {q} byte {off} is {:#04x}, the peer's pattern has {:#04x} \
                     (the read did not deliver the peer's memory)",
                    buf[i],
                    pattern_byte(q, off)
                );
            }
            checked += len as u64;
        }
        Ok(checked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_difference_is_the_first_byte_that_differs() {
        assert_eq!(first_difference(b"abcd", b"abcd"), None);
        assert_eq!(first_difference(b"abcd", b"abXd"), Some(2));
        assert_eq!(first_difference(b"Xbcd", b"abcX"), Some(0));
    }

    #[test]
    fn receive_slots_follow_the_ring_one_after_another() {
        let a = recv_sge(4096, 64, 7, 0);
        let b = recv_sge(4096, 64, 7, 1);
        assert_eq!(
            (a.addr, a.length, a.lkey),
            (4096 + ring_offset(64, 0), 64, 7)
        );
        assert_eq!(b.addr - a.addr, ring_offset(64, 1) - ring_offset(64, 0));
    }
}
