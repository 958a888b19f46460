//! Event payloads that would make every queue entry larger.
//!
//! An [`super::Event`] is copied on every schedule and every move inside the queue,
//! and sits in the fabric's delivery queues. Most events carry a CPU or device index;
//! a few carry more (an MSI's token, an IPI message, an injected SN change). Those few
//! park their payload here and carry its slot, which keeps `Event` at 16 bytes and a
//! queue entry at 32: at 1,024 CPUs the queue's buckets no longer fit the L1 data cache,
//! so its entry size is paid in misses on every event (`docs/performance-history.md`).

use std::num::NonZeroU32;

/// Where one parked payload sits. It is non-zero so that `Option<Slot>` is four bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Slot(NonZeroU32);

/// Payloads of events in flight, by slot. Freed slots are reused last-in first-out, so
/// a run's slots depend only on its events, and the table stays as large as the most
/// payloads ever in flight at once.
#[derive(Debug)]
pub(super) struct Parked<T> {
    slots: Vec<Option<T>>,
    free: Vec<Slot>,
}

impl<T> Default for Parked<T> {
    fn default() -> Self {
        Parked {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Parked<T> {
    /// Holds `payload` until its event is handled.
    pub(super) fn park(&mut self, payload: T) -> Slot {
        if let Some(slot) = self.free.pop() {
            self.slots[Self::index(slot)] = Some(payload);
            return slot;
        }
        self.slots.push(Some(payload));
        let number = u32::try_from(self.slots.len()).expect("fewer than 2^32 payloads in flight");
        Slot(NonZeroU32::new(number).expect("a pushed slot numbers from one"))
    }

    /// Hands back the payload of `slot` and frees the slot.
    ///
    /// # Panics
    /// If the slot is empty: an event was handled twice, which the queue never does.
    pub(super) fn take(&mut self, slot: Slot) -> T {
        let payload = self.slots[Self::index(slot)]
            .take()
            .expect("each parked payload is taken once, by its event");
        self.free.push(slot);
        payload
    }

    /// Payloads parked and not yet taken.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    fn index(slot: Slot) -> usize {
        slot.0.get() as usize - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_comes_back_from_its_own_slot() {
        let mut p = Parked::default();
        let a = p.park("a");
        let b = p.park("b");
        assert_ne!(a, b);
        assert_eq!(p.len(), 2);
        assert_eq!(p.take(b), "b");
        assert_eq!(p.take(a), "a");
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn freed_slots_are_reused_last_first_and_the_table_does_not_grow() {
        let mut p = Parked::default();
        let a = p.park(1u64);
        let b = p.park(2);
        p.take(a);
        p.take(b);
        assert_eq!(p.park(3), b, "the slot freed last is reused first");
        assert_eq!(p.park(4), a);
        assert_eq!(p.slots.len(), 2);
    }

    #[test]
    #[should_panic(expected = "taken once")]
    fn taking_a_slot_twice_is_caught() {
        let mut p = Parked::default();
        let a = p.park(());
        p.take(a);
        p.take(a);
    }

    /// Every MSI between the IOMMU and a local APIC or redistributor rides a parked
    /// token, so the table holds exactly the ledger's MSIs in the fabric, all run long.
    #[test]
    fn parked_tokens_are_the_msis_in_the_fabric() {
        for name in ["remapped", "arm-nvme"] {
            let text = crate::scenarios::embedded(name).expect("an embedded scenario");
            let sc = crate::Scenario::from_toml_str(text, name).expect("it parses");
            let mut sys = super::super::System::new(&sc).expect("it builds");
            let mut most_in_flight = 0;
            for _ in 0..400 {
                sys.run_for(sim_core::Duration::from_ns(250));
                assert_eq!(sys.parked.msis.len() as u64, sys.ledger.fabric, "{name}");
                most_in_flight = most_in_flight.max(sys.ledger.fabric);
            }
            assert!(most_in_flight > 0, "{name}: no MSI was ever in flight");
        }
    }

    #[test]
    fn an_optional_slot_costs_no_more_than_the_slot() {
        assert_eq!(std::mem::size_of::<Option<Slot>>(), 4);
    }
}
