//! The breadth-first search's queue of states still to expand, kept as bytes.
//!
//! A state in memory carries a fixed-size descriptor and several heap vectors (the
//! handler's results, the ledger, the store buffer), a few hundred bytes in all. Its
//! encoding ([`super::pack`]: small integers in one byte, no padding) is a small
//! fraction of that, and the frontier of a large search holds millions of states at
//! once, so it is what decides the search's peak memory. Entries are appended to fixed-size chunks and a
//! chunk is freed as soon as the search has read past it, so memory follows the
//! number of states waiting, not the number ever queued.

use std::collections::VecDeque;

use super::pack::Pack;

/// Bytes per chunk. Large enough that chunk bookkeeping is negligible, small enough
/// that a half-read chunk wastes little.
const CHUNK_BYTES: usize = 1 << 20;

/// A FIFO of encoded values.
pub(crate) struct ByteQueue {
    chunks: VecDeque<Vec<u8>>,
    /// How far into the front chunk the reader has got.
    read: usize,
    len: usize,
    /// Bytes allocated by the chunks, and the most at any time.
    bytes: usize,
    peak_bytes: usize,
    /// The most values held at once.
    peak_len: usize,
    /// Where a value is encoded before it is copied into a chunk, kept between pushes.
    scratch: Vec<u8>,
}

impl ByteQueue {
    pub(crate) fn new() -> ByteQueue {
        ByteQueue {
            chunks: VecDeque::new(),
            read: 0,
            len: 0,
            bytes: 0,
            peak_bytes: 0,
            peak_len: 0,
            scratch: Vec::new(),
        }
    }

    /// Appends `header` followed by `body`, bytes already encoded by the caller (a
    /// worker thread encodes the states it makes; the queue only copies them). Frames
    /// are whole within one chunk, and a chunk never grows past the capacity it was
    /// made with (growing would copy the whole chunk): a frame that does not fit in the
    /// last chunk starts a new one, and one larger than a chunk gets a chunk of its own
    /// size.
    pub(crate) fn push_framed<H: Pack>(&mut self, header: &H, body: &[u8]) {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        header.pack(&mut scratch);
        let len = u32::try_from(body.len()).expect("a frame body under 4 GiB");
        scratch.extend_from_slice(&len.to_le_bytes());
        let total = scratch.len() + body.len();
        let fits = self
            .chunks
            .back()
            .is_some_and(|c| c.capacity() - c.len() >= total);
        if !fits {
            let chunk = Vec::with_capacity(CHUNK_BYTES.max(total));
            self.bytes += chunk.capacity();
            self.chunks.push_back(chunk);
        }
        let last = self.chunks.back_mut().expect("a chunk with room");
        last.extend_from_slice(&scratch);
        last.extend_from_slice(body);
        self.scratch = scratch;
        self.len += 1;
        self.peak_len = self.peak_len.max(self.len);
        self.peak_bytes = self.peak_bytes.max(self.bytes);
    }

    /// Removes the oldest frame: returns its header and appends its body to `body`.
    pub(crate) fn pop_framed<H: Pack>(&mut self, body: &mut Vec<u8>) -> Option<H> {
        let front = self.chunks.front()?;
        let mut rest = &front[self.read..];
        let header = H::unpack(&mut rest)
            .expect("a queued frame's header decodes as the type it was pushed as");
        let (len, rest) = rest.split_at(4);
        let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
        body.extend_from_slice(&rest[..len]);
        let rest = &rest[len..];
        self.read = front.len() - rest.len();
        self.len -= 1;
        if rest.is_empty() {
            let freed = self.chunks.pop_front().expect("read from it");
            self.bytes -= freed.capacity();
            self.read = 0;
        }
        Some(header)
    }

    /// Counts `values` taken out (`bytes` of them) but not yet done with, as if still
    /// queued, in the peaks: the batch a search is expanding.
    pub(crate) fn observe_taken(&mut self, values: usize, bytes: usize) {
        self.peak_len = self.peak_len.max(self.len + values);
        self.peak_bytes = self.peak_bytes.max(self.bytes + bytes);
    }

    /// Values waiting.
    pub(crate) fn waiting(&self) -> usize {
        self.len
    }

    /// The most values the queue has held at once.
    pub(crate) fn peak_len(&self) -> usize {
        self.peak_len
    }

    /// The most bytes the queue has held at once.
    pub(crate) fn peak_bytes(&self) -> usize {
        self.peak_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pop(q: &mut ByteQueue) -> Option<(u64, Vec<u8>)> {
        let mut body = Vec::new();
        q.pop_framed::<u64>(&mut body).map(|h| (h, body))
    }

    #[test]
    fn values_come_out_in_the_order_they_went_in_across_chunks() {
        let mut q = ByteQueue::new();
        // Enough values of growing size to fill several chunks.
        let n = 3 * CHUNK_BYTES / 100;
        for i in 0..n {
            q.push_framed(&(i as u64), &vec![i as u8; i % 200]);
            if i % 3 == 0 {
                let j = i / 3;
                assert_eq!(pop(&mut q), Some((j as u64, vec![j as u8; j % 200])));
            }
        }
        // Chunks are never grown (a grown chunk is copied whole).
        assert!(q.chunks.iter().all(|c| c.capacity() == CHUNK_BYTES));
        assert_eq!(q.bytes, q.chunks.len() * CHUNK_BYTES);
        let popped_so_far = n.div_ceil(3);
        assert_eq!(q.waiting(), n - popped_so_far);
        for j in popped_so_far..n {
            assert_eq!(pop(&mut q), Some((j as u64, vec![j as u8; j % 200])));
        }
        assert_eq!(pop(&mut q), None);
        assert_eq!(q.waiting(), 0);
        assert!(q.chunks.is_empty(), "read chunks are freed");
        assert_eq!(q.bytes, 0);
        assert!(q.peak_bytes() >= 2 * CHUNK_BYTES);
        // Two of every three values stay queued until the end.
        assert_eq!(q.peak_len(), n - popped_so_far);
    }

    #[test]
    fn frames_keep_their_headers_and_bodies_in_order() {
        let mut q = ByteQueue::new();
        let n = 2 * CHUNK_BYTES / 300;
        let body = |i: usize| vec![(i % 251) as u8; 100 + i % 400];
        for i in 0..n {
            q.push_framed(&(i as u32, u64::MAX - i as u64), &body(i));
        }
        assert_eq!(q.waiting(), n);
        assert!(q.chunks.len() >= 2);
        let mut out = Vec::new();
        for i in 0..n {
            out.clear();
            let h: (u32, u64) = q.pop_framed(&mut out).unwrap();
            assert_eq!((h, &out), ((i as u32, u64::MAX - i as u64), &body(i)));
        }
        assert_eq!(q.pop_framed::<(u32, u64)>(&mut out), None);
        assert!(q.chunks.is_empty() && q.bytes == 0);
    }

    #[test]
    fn a_value_larger_than_a_chunk_is_kept_whole() {
        let mut q = ByteQueue::new();
        let big = vec![7u8; CHUNK_BYTES + 10];
        q.push_framed(&1u64, &[]);
        q.push_framed(&2u64, &big);
        q.push_framed(&3u64, &[1]);
        assert_eq!(pop(&mut q), Some((1, vec![])));
        assert_eq!(pop(&mut q), Some((2, big)));
        assert_eq!(pop(&mut q), Some((3, vec![1])));
        assert_eq!(pop(&mut q), None);
    }
}
