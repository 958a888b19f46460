//! A deterministic, fully associative LRU cache: the shape of every IOMMU cache the
//! model has (VT-d's interrupt entry cache, the SMMU's configuration cache and TLB). Recency is a use counter, so the order is
//! the same on every run; every operation is O(log capacity), range removal
//! O(removed * log capacity).

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

#[derive(Clone, Debug)]
pub struct LruCache<K: Ord + Copy, V: Copy> {
    capacity: usize,
    entries: BTreeMap<K, (V, u64)>,
    by_age: BTreeMap<u64, K>,
    next_stamp: u64,
    counters: CacheCounters,
}

impl<K: Ord + Copy, V: Copy> LruCache<K, V> {
    /// `capacity` 0 means no cache: every lookup misses.
    pub fn new(capacity: usize) -> Self {
        LruCache {
            capacity,
            entries: BTreeMap::new(),
            by_age: BTreeMap::new(),
            next_stamp: 0,
            counters: CacheCounters::default(),
        }
    }

    fn stamp(&mut self) -> u64 {
        self.next_stamp += 1;
        self.next_stamp
    }

    /// Looks `key` up, counting a hit or miss; a hit becomes most recently used.
    pub fn lookup(&mut self, key: K) -> Option<V> {
        let s = self.stamp();
        match self.entries.get_mut(&key) {
            Some((v, age)) => {
                let old = std::mem::replace(age, s);
                let k = self.by_age.remove(&old);
                assert!(k.is_some(), "LRU age index out of sync");
                self.by_age.insert(s, key);
                self.counters.hits += 1;
                Some(*v)
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
        let s = self.stamp();
        if let Some((_, old)) = self.entries.insert(key, (value, s)) {
            self.by_age.remove(&old);
            self.by_age.insert(s, key);
            return None;
        }
        self.by_age.insert(s, key);
        if self.entries.len() > self.capacity {
            let (_, victim) = self.by_age.pop_first().expect("cache is non-empty");
            self.entries.remove(&victim);
            self.counters.evictions += 1;
            return Some(victim);
        }
        None
    }

    /// Removes one key; returns whether it was cached.
    pub fn invalidate(&mut self, key: K) -> bool {
        match self.entries.remove(&key) {
            Some((_, age)) => {
                self.by_age.remove(&age);
                self.counters.invalidated += 1;
                true
            }
            None => false,
        }
    }

    /// Removes every key in `range`; returns how many.
    pub fn invalidate_range<R: RangeBounds<K>>(&mut self, range: R) -> u64 {
        let keys: Vec<K> = self.entries.range(range).map(|(k, _)| *k).collect();
        for k in &keys {
            self.invalidate(*k);
        }
        keys.len() as u64
    }

    pub fn clear(&mut self) {
        self.counters.invalidated += self.entries.len() as u64;
        self.entries.clear();
        self.by_age.clear();
    }

    pub fn contains(&self, key: K) -> bool {
        self.entries.contains_key(&key)
    }
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
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
    }
}
