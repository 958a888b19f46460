//! A deterministic, fully associative LRU cache: the shape of every IOMMU cache the
//! model has (VT-d's interrupt entry cache, the SMMU's configuration cache and TLB).
//! Recency is a doubly linked list threaded through a slot array, so a hit costs one
//! index lookup and a few slot writes. The index from key to slot is either an ordered
//! map (any key; range invalidation is cheap and iteration order never depends on
//! hashing; lookup, fill and invalidate are O(log capacity)) or, for small integer keys
//! such as an interrupt index, a table with one entry per possible key ([`DenseIndex`]:
//! O(1), one load on a hit).

use serde::Serialize;
use std::collections::BTreeMap;
use std::ops::RangeBounds;

/// Hit/miss/eviction counters of one cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CacheCounters {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    /// Entries removed by invalidation.
    pub invalidated: u64,
}

/// No slot: the end of the recency list.
const NIL: u32 = u32::MAX;

#[derive(Clone, Debug)]
struct Slot<K, V> {
    key: K,
    value: V,
    /// Towards the most recently used end.
    newer: u32,
    /// Towards the least recently used end.
    older: u32,
}

/// Where each cached key's slot is.
pub trait SlotIndex<K>: Clone + std::fmt::Debug {
    fn get(&self, key: &K) -> Option<u32>;
    fn insert(&mut self, key: K, slot: u32);
    fn remove(&mut self, key: &K) -> Option<u32>;
    /// The cached keys in `range`, in ascending order.
    fn keys_in<R: RangeBounds<K>>(&self, range: R) -> Vec<K>;
    fn clear(&mut self);
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K: Ord + Copy + std::fmt::Debug> SlotIndex<K> for BTreeMap<K, u32> {
    fn get(&self, key: &K) -> Option<u32> {
        BTreeMap::get(self, key).copied()
    }
    fn insert(&mut self, key: K, slot: u32) {
        BTreeMap::insert(self, key, slot);
    }
    fn remove(&mut self, key: &K) -> Option<u32> {
        BTreeMap::remove(self, key)
    }
    fn keys_in<R: RangeBounds<K>>(&self, range: R) -> Vec<K> {
        self.range(range).map(|(k, _)| *k).collect()
    }
    fn clear(&mut self) {
        BTreeMap::clear(self)
    }
    fn len(&self) -> usize {
        BTreeMap::len(self)
    }
}

/// A slot per possible `u32` key, for keys drawn from a small range (an interrupt
/// index is below the table's size): a lookup is one load. The table grows to the
/// largest key filled.
#[derive(Clone, Debug, Default)]
pub struct DenseIndex {
    slot_of: Vec<u32>,
    len: usize,
}

impl SlotIndex<u32> for DenseIndex {
    fn get(&self, key: &u32) -> Option<u32> {
        match self.slot_of.get(*key as usize) {
            Some(&slot) if slot != NIL => Some(slot),
            _ => None,
        }
    }
    fn insert(&mut self, key: u32, slot: u32) {
        let k = key as usize;
        if k >= self.slot_of.len() {
            self.slot_of.resize(k + 1, NIL);
        }
        if self.slot_of[k] == NIL {
            self.len += 1;
        }
        self.slot_of[k] = slot;
    }
    fn remove(&mut self, key: &u32) -> Option<u32> {
        let cell = self.slot_of.get_mut(*key as usize)?;
        if *cell == NIL {
            return None;
        }
        self.len -= 1;
        Some(std::mem::replace(cell, NIL))
    }
    fn keys_in<R: RangeBounds<u32>>(&self, range: R) -> Vec<u32> {
        use std::ops::Bound;
        let start = match range.start_bound() {
            Bound::Included(&s) => s as usize,
            Bound::Excluded(&s) => s as usize + 1,
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e as usize + 1,
            Bound::Excluded(&e) => e as usize,
            Bound::Unbounded => self.slot_of.len(),
        }
        .min(self.slot_of.len());
        (start..end)
            .filter(|&k| self.slot_of[k] != NIL)
            .map(|k| k as u32)
            .collect()
    }
    fn clear(&mut self) {
        self.slot_of.fill(NIL);
        self.len = 0;
    }
    fn len(&self) -> usize {
        self.len
    }
}

#[derive(Clone, Debug)]
pub struct LruCache<K: Ord + Copy, V: Copy, I: SlotIndex<K> = BTreeMap<K, u32>> {
    capacity: usize,
    index: I,
    slots: Vec<Slot<K, V>>,
    free: Vec<u32>,
    newest: u32,
    oldest: u32,
    counters: CacheCounters,
}

impl<K: Ord + Copy + std::fmt::Debug, V: Copy> LruCache<K, V> {
    /// `capacity` 0 means no cache: every lookup misses. Keys are found through an
    /// ordered map.
    pub fn new(capacity: usize) -> Self {
        Self::with_index(capacity, BTreeMap::new())
    }
}

impl<K: Ord + Copy, V: Copy, I: SlotIndex<K>> LruCache<K, V, I> {
    /// `capacity` 0 means no cache: every lookup misses. Keys are found through
    /// `index` (empty).
    pub fn with_index(capacity: usize, index: I) -> Self {
        LruCache {
            capacity,
            index,
            slots: Vec::new(),
            free: Vec::new(),
            newest: NIL,
            oldest: NIL,
            counters: CacheCounters::default(),
        }
    }

    fn unlink(&mut self, slot: u32) {
        let (newer, older) = {
            let s = &self.slots[slot as usize];
            (s.newer, s.older)
        };
        match newer {
            NIL => self.newest = older,
            n => self.slots[n as usize].older = older,
        }
        match older {
            NIL => self.oldest = newer,
            o => self.slots[o as usize].newer = newer,
        }
    }

    fn link_newest(&mut self, slot: u32) {
        let old_newest = self.newest;
        {
            let s = &mut self.slots[slot as usize];
            s.newer = NIL;
            s.older = old_newest;
        }
        match old_newest {
            NIL => self.oldest = slot,
            n => self.slots[n as usize].newer = slot,
        }
        self.newest = slot;
    }

    fn touch(&mut self, slot: u32) {
        if self.newest != slot {
            self.unlink(slot);
            self.link_newest(slot);
        }
    }

    fn release(&mut self, slot: u32) {
        self.unlink(slot);
        self.free.push(slot);
    }

    /// Looks `key` up, counting a hit or miss; a hit becomes most recently used.
    pub fn lookup(&mut self, key: K) -> Option<V> {
        match self.index.get(&key) {
            Some(slot) => {
                self.touch(slot);
                self.counters.hits += 1;
                Some(self.slots[slot as usize].value)
            }
            None => {
                self.counters.misses += 1;
                None
            }
        }
    }

    /// Inserts or refreshes `key`; returns the evicted key when full.
    pub fn fill(&mut self, key: K, value: V) -> Option<K> {
        if self.capacity == 0 {
            return None;
        }
        if let Some(slot) = self.index.get(&key) {
            self.slots[slot as usize].value = value;
            self.touch(slot);
            return None;
        }
        let entry = Slot {
            key,
            value,
            newer: NIL,
            older: NIL,
        };
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = entry;
                slot
            }
            None => {
                self.slots.push(entry);
                u32::try_from(self.slots.len() - 1).expect("an LRU cache holds < 2^32 entries")
            }
        };
        self.index.insert(key, slot);
        self.link_newest(slot);
        if self.index.len() > self.capacity {
            let victim_slot = self.oldest;
            let victim = self.slots[victim_slot as usize].key;
            self.index.remove(&victim);
            self.release(victim_slot);
            self.counters.evictions += 1;
            return Some(victim);
        }
        None
    }

    /// Removes one key; returns whether it was cached.
    pub fn invalidate(&mut self, key: K) -> bool {
        match self.index.remove(&key) {
            Some(slot) => {
                self.release(slot);
                self.counters.invalidated += 1;
                true
            }
            None => false,
        }
    }

    /// Removes every key in `range`; returns how many.
    pub fn invalidate_range<R: RangeBounds<K>>(&mut self, range: R) -> u64 {
        let keys = self.index.keys_in(range);
        for k in &keys {
            self.invalidate(*k);
        }
        keys.len() as u64
    }

    pub fn clear(&mut self) {
        self.counters.invalidated += self.index.len() as u64;
        self.index.clear();
        self.slots.clear();
        self.free.clear();
        self.newest = NIL;
        self.oldest = NIL;
    }

    pub fn contains(&self, key: K) -> bool {
        self.index.get(&key).is_some()
    }
    pub fn len(&self) -> usize {
        self.index.len()
    }
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    pub fn counters(&self) -> &CacheCounters {
        &self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_least_recently_used_and_invalidates_ranges() {
        let mut c: LruCache<(u16, u64), u64> = LruCache::new(3);
        for p in 0..3 {
            assert_eq!(c.lookup((1, p)), None);
            c.fill((1, p), p * 10);
        }
        assert_eq!(c.lookup((1, 0)), Some(0)); // (1,1) is now LRU
        assert_eq!(c.fill((2, 9), 90), Some((1, 1)));
        assert_eq!(c.invalidate_range((1, 0)..(2, 0)), 2);
        assert_eq!(c.len(), 1);
        assert!(c.contains((2, 9)));
        assert_eq!(c.counters().evictions, 1);
        assert_eq!(c.counters().invalidated, 2);
        let mut none: LruCache<u32, u32> = LruCache::new(0);
        none.fill(1, 1);
        assert_eq!(none.lookup(1), None);
        assert!(none.is_empty());
        assert_eq!((none.capacity(), c.capacity()), (0, 3));
        assert!(!c.is_empty());
        c.clear();
        assert!(c.is_empty());
    }

    mod against_a_recency_list {
        use super::*;
        use proptest::prelude::*;

        /// The obvious LRU: a vector ordered from least to most recently used.
        struct Reference {
            capacity: usize,
            order: Vec<(u8, u32)>,
        }

        impl Reference {
            fn lookup(&mut self, key: u8) -> Option<u32> {
                let at = self.order.iter().position(|(k, _)| *k == key)?;
                let entry = self.order.remove(at);
                self.order.push(entry);
                Some(entry.1)
            }
            fn fill(&mut self, key: u8, value: u32) -> Option<u8> {
                if self.capacity == 0 {
                    return None;
                }
                if let Some(at) = self.order.iter().position(|(k, _)| *k == key) {
                    self.order.remove(at);
                    self.order.push((key, value));
                    return None;
                }
                self.order.push((key, value));
                (self.order.len() > self.capacity).then(|| self.order.remove(0).0)
            }
            fn invalidate(&mut self, key: u8) -> bool {
                let at = self.order.iter().position(|(k, _)| *k == key);
                at.map(|at| self.order.remove(at)).is_some()
            }
        }

        #[derive(Clone, Debug)]
        enum Op {
            Lookup(u8),
            Fill(u8, u32),
            Invalidate(u8),
            InvalidateRange(u8, u8),
            Clear,
        }

        fn op() -> impl Strategy<Value = Op> {
            let key = 0u8..24;
            prop_oneof![
                6 => key.clone().prop_map(Op::Lookup),
                6 => (key.clone(), any::<u32>()).prop_map(|(k, v)| Op::Fill(k, v)),
                2 => key.clone().prop_map(Op::Invalidate),
                1 => (key.clone(), key).prop_map(|(a, b)| Op::InvalidateRange(a.min(b), a.max(b))),
                1 => Just(Op::Clear),
            ]
        }

        /// Runs `ops` on `cache` and on the obvious LRU side by side.
        fn same_as_reference<I: SlotIndex<u32>>(
            mut cache: LruCache<u32, u32, I>,
            capacity: usize,
            ops: Vec<Op>,
        ) -> Result<(), TestCaseError> {
            let mut reference = Reference {
                capacity,
                order: Vec::new(),
            };
            let evicted = |k: Option<u8>| k.map(u32::from);
            for op in ops {
                match op {
                    Op::Lookup(k) => prop_assert_eq!(cache.lookup(k.into()), reference.lookup(k)),
                    Op::Fill(k, v) => {
                        prop_assert_eq!(cache.fill(k.into(), v), evicted(reference.fill(k, v)))
                    }
                    Op::Invalidate(k) => {
                        prop_assert_eq!(cache.invalidate(k.into()), reference.invalidate(k))
                    }
                    Op::InvalidateRange(a, b) => {
                        let want = (a..b).filter(|k| reference.invalidate(*k)).count() as u64;
                        prop_assert_eq!(cache.invalidate_range(u32::from(a)..u32::from(b)), want);
                    }
                    Op::Clear => {
                        cache.clear();
                        reference.order.clear();
                    }
                }
                prop_assert_eq!(cache.len(), reference.order.len());
                for (k, _) in &reference.order {
                    prop_assert!(cache.contains(u32::from(*k)));
                }
            }
            Ok(())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]
            /// Every answer (hit value, evicted key, removal) and the final contents match
            /// the obvious LRU, whatever mix of operations runs: keys in an ordered map.
            #[test]
            fn behaves_like_the_obvious_lru(
                capacity in 0usize..9,
                ops in proptest::collection::vec(op(), 1..300),
            ) {
                same_as_reference(LruCache::new(capacity), capacity, ops)?;
            }

            /// The same, with keys in a table of slots ([`DenseIndex`]).
            #[test]
            fn a_dense_index_behaves_like_the_obvious_lru(
                capacity in 0usize..9,
                ops in proptest::collection::vec(op(), 1..300),
            ) {
                same_as_reference(
                    LruCache::with_index(capacity, DenseIndex::default()),
                    capacity,
                    ops,
                )?;
            }
        }
    }
}
