//! SMMU circular queue indexes (IHI 0070 3.5.1).
//!
//! A queue holds 2^n entries, 0 <= n <= 19. PROD and CONS each carry an n-bit index and,
//! in the next bit up, a wrap flag that toggles every time the index runs off the top
//! and back to 0. With equal indexes the queue is empty when the wrap flags are equal
//! and full when they differ; this "mirrored" scheme lets all 2^n entries be in use.
//! Only the owner of an index moves it, and only forwards.
//!
//! [`QueueGeometry`] does the index arithmetic on raw register values ([`QueuePtr`]);
//! bits above the wrap flag (e.g. Linux's OWNED flag in bit 31 of its shadow PROD) are
//! kept by [`QueueGeometry::inc`] and ignored by every comparison, as in Linux's
//! `queue_inc_prod_n`. [`CircularQueue`] is a whole queue in memory with both indexes,
//! for a single producer and a single consumer; its property test is the reference for
//! "never lose or reorder an entry, full and empty right across wrap-around".

use super::error::SmmuError;
use serde::Serialize;

/// Largest log2 queue size the architecture allows (3.5.1, SMMU_IDR1.CMDQS max 19).
pub const MAX_QUEUE_LOG2: u8 = 19;

/// A raw PROD/CONS value: index in bits [n-1:0], wrap flag in bit \[n\], anything above
/// is ignored by the queue arithmetic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct QueuePtr(pub u32);

/// Index arithmetic for a 2^log2-entry queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct QueueGeometry {
    log2: u8,
}

impl QueueGeometry {
    /// A queue of 2^log2 entries; `log2` in 0..=19.
    pub fn new(log2: u8) -> Result<QueueGeometry, SmmuError> {
        if log2 > MAX_QUEUE_LOG2 {
            return Err(SmmuError::InvalidQueueSize {
                field: "log2_entries",
                value: log2,
                max: MAX_QUEUE_LOG2,
            });
        }
        Ok(QueueGeometry { log2 })
    }

    pub fn log2(self) -> u8 {
        self.log2
    }
    pub fn entries(self) -> u32 {
        1 << self.log2
    }
    /// Mask of the index field.
    pub fn idx_mask(self) -> u32 {
        self.entries() - 1
    }
    /// The wrap flag's bit.
    pub fn wrap_bit(self) -> u32 {
        1 << self.log2
    }
    /// Mask of index and wrap flag together.
    pub fn field_mask(self) -> u32 {
        (self.wrap_bit() << 1) - 1
    }
    pub fn idx(self, p: QueuePtr) -> u32 {
        p.0 & self.idx_mask()
    }
    pub fn wrap(self, p: QueuePtr) -> bool {
        p.0 & self.wrap_bit() != 0
    }
    /// Builds a pointer from an index (taken modulo the size) and a wrap flag.
    pub fn ptr(self, idx: u32, wrap: bool) -> QueuePtr {
        QueuePtr((idx & self.idx_mask()) | if wrap { self.wrap_bit() } else { 0 })
    }
    /// Only index and wrap flag of `p`.
    pub fn clean(self, p: QueuePtr) -> QueuePtr {
        QueuePtr(p.0 & self.field_mask())
    }

    /// `p` advanced by `n` entries, wrapping the index and toggling the wrap flag as
    /// many times as it runs off the top; bit 31 (a software flag such as Linux's
    /// OWNED/overflow flag) is carried over, the bits between wrap+1 and 30 are cleared.
    pub fn inc(self, p: QueuePtr, n: u32) -> QueuePtr {
        let f = self.field_mask();
        let moved = (p.0 & f).wrapping_add(n) & f;
        QueuePtr((p.0 & (1 << 31)) | moved)
    }

    /// IHI 0070 3.5.1: equal indexes and equal wrap flags.
    pub fn is_empty(self, prod: QueuePtr, cons: QueuePtr) -> bool {
        self.clean(prod) == self.clean(cons)
    }

    /// IHI 0070 3.5.1: equal indexes and different wrap flags.
    pub fn is_full(self, prod: QueuePtr, cons: QueuePtr) -> bool {
        self.idx(prod) == self.idx(cons) && self.wrap(prod) != self.wrap(cons)
    }

    /// Entries between CONS and PROD, for a consistent pair (see
    /// [`QueueGeometry::is_consistent`]).
    pub fn used(self, prod: QueuePtr, cons: QueuePtr) -> u32 {
        let (p, c) = (self.idx(prod), self.idx(cons));
        if self.wrap(prod) == self.wrap(cons) {
            p.wrapping_sub(c)
        } else {
            self.entries() - c + p
        }
    }

    /// Free entries (Linux `queue_has_space` computes the same quantity).
    pub fn space(self, prod: QueuePtr, cons: QueuePtr) -> u32 {
        self.entries() - self.used(prod, cons)
    }

    /// Whether `n` more entries fit.
    pub fn has_space(self, prod: QueuePtr, cons: QueuePtr, n: u32) -> bool {
        self.space(prod, cons) >= n
    }

    /// IHI 0070 3.5.1 lists the consistent states: equal pointers (empty), equal
    /// indexes with different wraps (full), PROD ahead of CONS with equal wraps, PROD
    /// behind CONS with different wraps. The other two are inconsistent.
    pub fn is_consistent(self, prod: QueuePtr, cons: QueuePtr) -> bool {
        let (p, c) = (self.idx(prod), self.idx(cons));
        let same_wrap = self.wrap(prod) == self.wrap(cons);
        (same_wrap && p >= c) || (!same_wrap && p <= c)
    }

    /// Whether the entry at `target` has been consumed when the consumer is at `cons`:
    /// CONS is past it in the same lap, or CONS is in the next lap and not yet back at
    /// its index. Meaningful only while the queue has not wrapped twice since `target`
    /// was produced (Linux's `queue_consumed`, which holds the cmdq lock shared to make
    /// that so).
    pub fn consumed(self, cons: QueuePtr, target: QueuePtr) -> bool {
        let (c, t) = (self.idx(cons), self.idx(target));
        if self.wrap(cons) == self.wrap(target) {
            c > t
        } else {
            c <= t
        }
    }
}

/// A single-producer single-consumer queue in memory with its two indexes.
#[derive(Clone, Debug)]
pub struct CircularQueue<T> {
    geometry: QueueGeometry,
    slots: Vec<Option<T>>,
    prod: QueuePtr,
    cons: QueuePtr,
}

impl<T: Clone> CircularQueue<T> {
    pub fn new(geometry: QueueGeometry) -> CircularQueue<T> {
        CircularQueue {
            geometry,
            slots: vec![None; geometry.entries() as usize],
            prod: QueuePtr(0),
            cons: QueuePtr(0),
        }
    }

    pub fn geometry(&self) -> QueueGeometry {
        self.geometry
    }
    pub fn prod(&self) -> QueuePtr {
        self.prod
    }
    pub fn cons(&self) -> QueuePtr {
        self.cons
    }
    pub fn is_empty(&self) -> bool {
        self.geometry.is_empty(self.prod, self.cons)
    }
    pub fn is_full(&self) -> bool {
        self.geometry.is_full(self.prod, self.cons)
    }
    pub fn len(&self) -> u32 {
        self.geometry.used(self.prod, self.cons)
    }

    /// Writes `item` at PROD and advances PROD; a full queue refuses and hands the item
    /// back, so the producer can wait and retry (nothing is dropped here).
    pub fn produce(&mut self, item: T) -> Result<(), T> {
        if self.is_full() {
            return Err(item);
        }
        let i = self.geometry.idx(self.prod) as usize;
        self.slots[i] = Some(item);
        self.prod = self.geometry.inc(self.prod, 1);
        Ok(())
    }

    /// Reads the entry at CONS and advances CONS; `None` when empty.
    pub fn consume(&mut self) -> Option<T> {
        if self.is_empty() {
            return None;
        }
        let i = self.geometry.idx(self.cons) as usize;
        let item = self.slots[i].take();
        assert!(item.is_some(), "consumed a slot that was never produced");
        self.cons = self.geometry.inc(self.cons, 1);
        item
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    fn g(log2: u8) -> QueueGeometry {
        QueueGeometry::new(log2).unwrap()
    }

    #[test]
    fn spec_example_128_entries() {
        // IHI 0070 3.5.1: 128 entries -> 7-bit indexes, wrap flag in bit 7.
        let q = g(7);
        assert_eq!((q.log2(), q.entries()), (7, 128));
        assert_eq!(q.wrap_bit(), 1 << 7);
        let p = q.inc(QueuePtr(127), 1);
        assert_eq!((q.idx(p), q.wrap(p)), (0, true));
        assert!(q.is_full(p, QueuePtr(0)));
        assert!(q.is_full(q.inc(p, 128), p));
        assert!(q.is_empty(q.inc(p, 256), q.inc(p, 256)));
        assert!(g(20 - 1).entries() == 1 << 19);
        assert!(matches!(
            QueueGeometry::new(20),
            Err(SmmuError::InvalidQueueSize { value: 20, .. })
        ));
    }

    #[test]
    fn one_entry_queue_toggles_only_the_wrap_flag() {
        let q = g(0);
        let p = q.inc(QueuePtr(0), 1);
        assert_eq!(p, QueuePtr(1));
        assert!(q.is_full(p, QueuePtr(0)));
        assert!(q.is_empty(q.inc(p, 1), QueuePtr(0)));
    }

    #[test]
    fn inc_keeps_bit_31_and_consistency_matches_the_spec_list() {
        let q = g(3);
        assert_eq!(q.inc(QueuePtr(1 << 31 | 7), 2), QueuePtr(1 << 31 | 8 | 1));
        assert!(q.is_consistent(q.ptr(5, false), q.ptr(2, false)));
        assert!(q.is_consistent(q.ptr(1, true), q.ptr(6, false)));
        assert!(!q.is_consistent(q.ptr(5, true), q.ptr(2, false)));
        assert!(!q.is_consistent(q.ptr(1, false), q.ptr(6, false)));
    }

    #[test]
    fn consumed_across_a_wrap() {
        let q = g(2);
        let target = q.ptr(3, false);
        assert!(!q.consumed(q.ptr(3, false), target));
        assert!(q.consumed(q.ptr(0, true), target));
        assert!(q.consumed(q.ptr(3, true), target));
        assert!(!q.consumed(q.ptr(2, false), target));
    }

    #[derive(Clone, Debug)]
    enum Op {
        Produce(u8),
        Consume(u8),
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        prop::collection::vec(
            prop_oneof![
                (1u8..20).prop_map(Op::Produce),
                (1u8..20).prop_map(Op::Consume)
            ],
            1..200,
        )
    }

    proptest! {
        /// Random bursts of produce and consume against a VecDeque reference: nothing
        /// is lost, order is kept, and full/empty agree with the reference at every
        /// step, across many wrap-arounds and for every queue size up to 2^5.
        #[test]
        fn never_loses_or_reorders(log2 in 0u8..6, ops in ops()) {
            let mut q = CircularQueue::new(g(log2));
            let mut model = VecDeque::new();
            let cap = 1usize << log2;
            let mut next = 0u64;
            let mut refused = 0u64;
            for op in ops {
                match op {
                    Op::Produce(n) => for _ in 0..n {
                        match q.produce(next) {
                            Ok(()) => { model.push_back(next); next += 1; }
                            Err(item) => {
                                // The producer keeps the item: it waits and retries.
                                prop_assert_eq!(item, next);
                                prop_assert_eq!(model.len(), cap);
                                refused += 1;
                            }
                        }
                    },
                    Op::Consume(n) => for _ in 0..n {
                        prop_assert_eq!(q.consume(), model.pop_front());
                    },
                }
                prop_assert_eq!(q.len() as usize, model.len());
                prop_assert_eq!(q.is_empty(), model.is_empty());
                prop_assert_eq!(q.is_full(), model.len() == cap);
                prop_assert!(q.geometry().is_consistent(q.prod(), q.cons()));
            }
            // Drain: everything produced comes out, in order.
            while let Some(x) = q.consume() {
                prop_assert_eq!(Some(x), model.pop_front());
            }
            prop_assert!(model.is_empty());
            let _ = refused;
        }

        /// `used` and `consumed` agree with a linear count for any pair of positions
        /// less than one queue apart.
        #[test]
        fn used_and_consumed_match_linear_positions(
            log2 in 0u8..8, start in 0u64..10_000, ahead in 0u64..256, back in 0u64..256
        ) {
            let q = g(log2);
            let size = 1u64 << log2;
            let ahead = ahead % (size + 1);
            let at = |lin: u64| q.inc(QueuePtr(0), (lin % (2 * size)) as u32);
            let cons = at(start);
            let prod = at(start + ahead);
            prop_assert_eq!(q.used(prod, cons) as u64, ahead);
            prop_assert!(q.is_consistent(prod, cons));
            prop_assert_eq!(q.is_full(prod, cons), ahead == size);
            // An entry produced `back` entries before CONS (within one lap) is consumed;
            // CONS itself and later entries are not.
            let back = back % size.max(1);
            if start > back && back < size {
                prop_assert!(q.consumed(cons, at(start - back - 1)));
            }
            prop_assert!(!q.consumed(cons, at(start)));
        }
    }
}
