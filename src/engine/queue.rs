//! The one event queue of a simulation.
//!
//! Events are ordered by `(time, priority, insertion sequence)`. The sequence number
//! makes ties FIFO and the order total, so a run never depends on heap internals.
//! Scheduling an event before `now` is a bug in the caller and panics with both times.

use sim_core::{Duration, SimTime};
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Tie-break slot for events that fall on the same picosecond. Lower runs first.
///
/// The slots encode causality the hardware guarantees within one instant; each constant
/// says why it sits where it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Priority(pub u8);

impl Priority {
    /// A device write arriving at the IOMMU. It runs first so a CPU access completing
    /// at the same picosecond observes the write, which is the conservative choice for
    /// race windows: the handler sees as much as it possibly could.
    pub const DEVICE: Priority = Priority(10);
    /// The IOMMU finishing a remap or a posted-descriptor update.
    pub const IOMMU: Priority = Priority(20);
    /// An interrupt message reaching a local APIC. After IOMMU work of the same instant,
    /// because the message is that work's consequence.
    pub const APIC: Priority = Priority(30);
    /// A CPU finishing an operation (memory access, handler body, EOI). Last, so it
    /// sees every hardware effect of the same instant.
    pub const CPU: Priority = Priority(40);
    /// Bookkeeping that must observe the settled state of an instant (end of run).
    pub const CONTROL: Priority = Priority(250);
}

/// The ordering key packed in one integer: time in the high 64 bits, then the
/// priority (8 bits), then the insertion sequence (56 bits, 7.2e16 events, far more
/// than any run schedules). One integer comparison orders events, and the key is 16
/// bytes instead of 24, which matters because the heap moves entries on every push and
/// pop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key(u128);

const SEQ_BITS: u32 = 56;

impl Key {
    fn new(time: SimTime, priority: Priority, seq: u64) -> Key {
        assert!(
            seq < 1 << SEQ_BITS,
            "event sequence number overflowed 56 bits"
        );
        Key(((time.0 as u128) << 64) | ((priority.0 as u128) << SEQ_BITS) | seq as u128)
    }

    fn time(self) -> SimTime {
        SimTime((self.0 >> 64) as u64)
    }
}

struct Entry<E> {
    key: Key,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    // Reversed: BinaryHeap is a max-heap and we want the earliest key on top.
    fn cmp(&self, other: &Self) -> Ordering {
        other.key.cmp(&self.key)
    }
}

/// A deterministic discrete-event queue.
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    now: SimTime,
    next_seq: u64,
    popped: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    /// An empty queue at time zero.
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    /// An empty queue at time zero with room for `capacity` pending events.
    pub fn with_capacity(capacity: usize) -> Self {
        EventQueue {
            heap: BinaryHeap::with_capacity(capacity),
            now: SimTime::ZERO,
            next_seq: 0,
            popped: 0,
        }
    }

    /// The time of the event most recently popped (or zero).
    pub fn now(&self) -> SimTime {
        self.now
    }

    /// Events handled so far.
    pub fn events_popped(&self) -> u64 {
        self.popped
    }

    /// Events pending.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether no event is pending.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Schedules `event` at absolute time `at`.
    ///
    /// # Panics
    /// If `at` is earlier than [`EventQueue::now`]: an effect cannot precede its cause.
    pub fn schedule(&mut self, at: SimTime, priority: Priority, event: E) {
        assert!(
            at >= self.now,
            "event scheduled into the past: at {at} but now is {}",
            self.now
        );
        let key = Key::new(at, priority, self.next_seq);
        self.next_seq += 1;
        self.heap.push(Entry { key, event });
    }

    /// Schedules `event` at `now + delay`.
    pub fn schedule_in(&mut self, delay: Duration, priority: Priority, event: E) {
        self.schedule(self.now + delay, priority, event);
    }

    /// Time of the next event, if any.
    pub fn peek_time(&self) -> Option<SimTime> {
        self.heap.peek().map(|e| e.key.time())
    }

    /// Removes the earliest event and advances `now` to its time.
    pub fn pop(&mut self) -> Option<(SimTime, E)> {
        let entry = self.heap.pop()?;
        self.now = entry.key.time();
        self.popped += 1;
        Some((entry.key.time(), entry.event))
    }

    /// Pops the earliest event only if it is due at or before `limit`.
    pub fn pop_until(&mut self, limit: SimTime) -> Option<(SimTime, E)> {
        match self.peek_time() {
            Some(t) if t <= limit => self.pop(),
            _ => None,
        }
    }

    /// Advances the clock without an event (e.g. to the end of a run window).
    ///
    /// # Panics
    /// If `to` is in the past, or if an event is pending before `to` (it would be skipped).
    pub fn advance_to(&mut self, to: SimTime) {
        assert!(to >= self.now, "clock moved backwards: {to} < {}", self.now);
        if let Some(t) = self.peek_time() {
            assert!(t >= to, "advance_to({to}) would skip an event at {t}");
        }
        self.now = to;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_by_time_then_priority_then_fifo() {
        let mut q = EventQueue::new();
        q.schedule(SimTime(10), Priority::CPU, "cpu@10");
        q.schedule(SimTime(10), Priority::DEVICE, "dev@10 first");
        q.schedule(SimTime(5), Priority::CONTROL, "ctl@5");
        q.schedule(SimTime(10), Priority::DEVICE, "dev@10 second");
        let order: Vec<_> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert_eq!(
            order,
            vec!["ctl@5", "dev@10 first", "dev@10 second", "cpu@10"]
        );
        assert_eq!(q.now(), SimTime(10));
        assert_eq!(q.events_popped(), 4);
    }

    #[test]
    #[should_panic(expected = "into the past")]
    fn scheduling_into_the_past_is_caught() {
        let mut q = EventQueue::new();
        q.schedule(SimTime(100), Priority::CPU, ());
        q.pop();
        q.schedule(SimTime(99), Priority::CPU, ());
    }

    #[test]
    fn pop_until_respects_limit() {
        let mut q = EventQueue::new();
        q.schedule(SimTime(5), Priority::CPU, 1);
        q.schedule(SimTime(15), Priority::CPU, 2);
        assert_eq!(q.pop_until(SimTime(10)), Some((SimTime(5), 1)));
        assert_eq!(q.pop_until(SimTime(10)), None);
        q.advance_to(SimTime(10));
        assert_eq!(q.now(), SimTime(10));
    }
}
