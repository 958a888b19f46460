//! Interrupt entry cache (IEC): the IOMMU's cache of IRTEs.
//!
//! Modelled as fully associative with a configurable capacity and exact LRU
//! replacement, ordered by a use counter so it is deterministic. Real capacities and
//! policies are not published (COST-SOURCES.md lists interrupt-entry-cache effects as
//! unmeasured), so both are assumptions.
//!
//! The cache holds copies of present entries. Like hardware, it is not coherent with
//! the table in memory: after software rewrites an IRTE it must invalidate the cached
//! copy with an interrupt entry cache invalidate descriptor (VT-d 6.5.2; global or
//! index-selective), as Linux's `modify_irte` does through `qi_flush_iec`. Until then
//! requests keep using the stale copy. Not-present entries are not cached
//! (assumption), so a fault on a not-present entry always re-reads memory.
//!
//! Entries are found through a table with a slot per interrupt index
//! ([`DenseIndex`]), so a lookup is one load whatever the capacity.

use super::irte::Irte;
use crate::lru::{CacheCounters, DenseIndex, LruCache};

/// Hit/miss/eviction counters of the interrupt entry cache.
pub type IecCounters = CacheCounters;

/// Fully associative LRU cache of IRTEs keyed by interrupt index.
#[derive(Clone, Debug)]
pub struct Iec(LruCache<u32, Irte, DenseIndex>);

impl Iec {
    /// A cache of `capacity` entries. 0 is allowed and means no cache: every lookup
    /// misses.
    pub fn new(capacity: usize) -> Iec {
        Iec(LruCache::with_index(capacity, DenseIndex::default()))
    }

    /// Looks `index` up, counting a hit or a miss; a hit makes it most recently used.
    pub fn lookup(&mut self, index: u32) -> Option<Irte> {
        self.0.lookup(index)
    }

    /// Fills `index` after a miss, evicting the least recently used entry when full.
    /// Returns the evicted index.
    pub fn fill(&mut self, index: u32, irte: Irte) -> Option<u32> {
        self.0.fill(index, irte)
    }

    /// Index-selective invalidation. Returns whether the entry was cached.
    pub fn invalidate_index(&mut self, index: u32) -> bool {
        self.0.invalidate(index)
    }

    /// Global invalidation.
    pub fn invalidate_all(&mut self) {
        self.0.clear()
    }

    /// Whether `index` is cached.
    pub fn contains(&self, index: u32) -> bool {
        self.0.contains(index)
    }
    /// Entries cached.
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// Entries the cache can hold.
    pub fn capacity(&self) -> usize {
        self.0.capacity()
    }
    /// Hits, misses, evictions and invalidations so far.
    pub fn counters(&self) -> &IecCounters {
        self.0.counters()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(n: u128) -> Irte {
        Irte(n << 16 | 1)
    }

    #[test]
    fn lru_evicts_least_recently_used() {
        let mut c = Iec::new(2);
        assert!(c.is_empty());
        assert_eq!((c.capacity(), Iec::new(0).capacity()), (2, 0));
        assert_eq!(c.lookup(1), None);
        c.fill(1, e(1));
        assert_eq!(c.lookup(2), None);
        c.fill(2, e(2));
        assert_eq!(c.lookup(1), Some(e(1))); // 1 is now MRU, 2 is LRU
        assert_eq!(c.lookup(3), None);
        assert_eq!(c.fill(3, e(3)), Some(2));
        assert!(c.contains(1) && c.contains(3) && !c.contains(2));
        assert!(!c.is_empty());
        assert_eq!(
            *c.counters(),
            IecCounters {
                hits: 1,
                misses: 3,
                evictions: 1,
                invalidated: 0
            }
        );
    }

    #[test]
    fn invalidation() {
        let mut c = Iec::new(4);
        for i in 0..4 {
            c.fill(i, e(i as u128));
        }
        assert!(c.invalidate_index(2));
        assert!(!c.invalidate_index(2));
        assert_eq!(c.len(), 3);
        c.invalidate_all();
        assert!(c.is_empty());
        assert_eq!(c.counters().invalidated, 4);
        // Still consistent after invalidation: fill up and evict in order.
        for i in 10..15 {
            c.fill(i, e(1));
        }
        assert_eq!(c.len(), 4);
        assert!(!c.contains(10));
    }

    #[test]
    fn zero_capacity_never_hits() {
        let mut c = Iec::new(0);
        c.fill(1, e(1));
        assert_eq!(c.lookup(1), None);
        assert_eq!(c.counters().misses, 1);
    }
}
