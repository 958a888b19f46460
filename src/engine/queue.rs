//! The one event queue of a simulation.
//!
//! Events are ordered by `(time, priority, insertion sequence)`. The sequence number
//! makes ties FIFO and the order total, so a run never depends on heap internals.
//! Scheduling an event before `now` is a bug in the caller and panics with both times.

use sim_core::{Duration, SimTime};
use std::collections::VecDeque;

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

/// The order of events that fall on the same picosecond: priority in the top 8 bits,
/// then the insertion sequence (56 bits, 7.2e16 events, far more than any run
/// schedules). One integer comparison orders them.
const SEQ_BITS: u32 = 56;

fn tie_order(priority: Priority, seq: u64) -> u64 {
    assert!(
        seq < 1 << SEQ_BITS,
        "event sequence number overflowed 56 bits"
    );
    ((priority.0 as u64) << SEQ_BITS) | seq
}

struct Entry<E> {
    time: u64,
    order: u64,
    event: E,
}

impl<E> Entry<E> {
    /// The whole pop order in one integer: time, then tie order.
    #[inline(always)]
    fn key(&self) -> u128 {
        (u128::from(self.time) << 64) | u128::from(self.order)
    }
}

/// Most events the queue keeps in its sorted list before it moves them into the radix
/// buckets, and the count at or below which it moves them back. With a few events
/// pending (`default` keeps 2.6 on average, `nvme-posted` 6.8) a sorted list costs a
/// short scan per push and nothing per pop; with hundreds (`large`) the radix heap's
/// moves cost less than scans. The gap between the two keeps a count that hovers
/// around one of them from moving the events at every push.
const LIST_MAX: usize = 32;
const LIST_RETURN: usize = 8;
/// Most events a push walks past in the list; see [`EventQueue::insert_in_list`].
const LIST_WALK_MAX: usize = 8;

/// Events due at the same instant, ascending by tie order. New events usually carry
/// the largest order yet, so inserting is an append; the binary search covers priorities
/// that jump ahead.
struct SameInstant<E>(VecDeque<Entry<E>>);

impl<E> SameInstant<E> {
    fn insert(&mut self, entry: Entry<E>) {
        match self.0.back() {
            Some(last) if last.order > entry.order => {
                let at = self.0.partition_point(|e| e.order < entry.order);
                self.0.insert(at, entry);
            }
            _ => self.0.push_back(entry),
        }
    }
}

/// Bits per digit of the radix. Wider digits mean fewer moves per event (an event moves
/// at most once per digit its distance from the earliest pending time spans) and more
/// buckets to keep. Four bits: 16 levels of 16 buckets.
const DIGIT_BITS: u32 = 4;
const SLOTS: usize = 1 << DIGIT_BITS;
const LEVELS: usize = 64 / DIGIT_BITS as usize;
const BUCKETS: usize = LEVELS * SLOTS;
const OCCUPANCY_WORDS: usize = BUCKETS / 64;
// `bucket_of` and `lowest_occupied` mask indices with `BUCKETS - 1`, and the bitmap has
// a whole number of words: both hold only for digit widths that divide 64 evenly.
const _: () = assert!(64 % DIGIT_BITS == 0 && BUCKETS.is_power_of_two() && BUCKETS >= 64);

/// The events of one radix bucket and the earliest of their times (`u64::MAX` when
/// empty), kept on push so that spreading the bucket, or peeking at it, needs no pass
/// to find it. Together in 32 bytes, two to a host cache line: a push reads and writes
/// both, and with events pending over many CPUs the queue's lines are often no longer
/// in L1 when the next push comes.
#[repr(align(32))]
struct Bucket<E> {
    earliest: u64,
    entries: Vec<Entry<E>>,
}

// The layout the comment above relies on: a `Vec` is three words whatever it holds.
const _: () = assert!(std::mem::size_of::<Bucket<()>>() == 32);

/// A deterministic discrete-event queue.
///
/// With at most [`LIST_MAX`] events pending, the events sit in one list sorted by
/// `(time, priority, insertion sequence)`, latest first: a pop takes the last entry,
/// and a push walks from that end to its place. Beyond that (or once a push would walk
/// past more than [`LIST_WALK_MAX`] of them), and until a spread finds
/// [`LIST_RETURN`] or fewer left, they sit in a radix heap on the event time
/// (Ahuja, Mehlhorn, Orlin and Tarjan, 1990), with
/// digits of [`DIGIT_BITS`] bits: an event scheduled at `t > base` sits in the bucket
/// of the highest digit in which `t` differs from `base`, where `base` is the earliest
/// time still pending, and of `t`'s value in that digit. Buckets in index order hold
/// ever later times, and simulated time never goes backwards, which is the one property
/// a radix heap needs. Pushing is an append; popping empties the lowest bucket only
/// when the events at `base` run out, and each event it moves lands in a bucket of a
/// strictly lower digit, so an event moves at most once per digit. Events due at
/// `base` itself wait in a short list sorted by (priority, sequence), which keeps the
/// pop order exactly `(time, priority, insertion sequence)`, the same order a binary
/// heap on the whole key gives.
pub struct EventQueue<E> {
    /// While `in_buckets` is false: every pending event, latest first, so the next one
    /// to pop is the last.
    list: Vec<Entry<E>>,
    /// Whether the pending events are in the radix buckets and `at_base` (else in `list`).
    in_buckets: bool,
    at_base: SameInstant<E>,
    buckets: Box<[Bucket<E>; BUCKETS]>,
    /// Bit i of the bitmap set iff `buckets[i]` holds an event.
    occupied: [u64; OCCUPANCY_WORDS],
    /// Every pending event is due at or after `base`; `at_base` holds those due at it.
    base: u64,
    len: usize,
    now: SimTime,
    next_seq: u64,
    popped: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

fn bucket_of(time: u64, base: u64) -> usize {
    debug_assert!(time > base);
    let level = (63 - (time ^ base).leading_zeros()) / DIGIT_BITS;
    let digit = (time >> (level * DIGIT_BITS)) as usize & (SLOTS - 1);
    // The mask states what the level's range already guarantees, so indexing needs no
    // bounds check.
    (level as usize * SLOTS + digit) & (BUCKETS - 1)
}

impl<E> EventQueue<E> {
    /// An empty queue at time zero.
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    /// An empty queue at time zero. `capacity` sizes the buffer for events due at the
    /// same instant; the time buckets grow on demand and keep their memory.
    pub fn with_capacity(capacity: usize) -> Self {
        EventQueue {
            list: Vec::with_capacity(LIST_MAX),
            in_buckets: false,
            at_base: SameInstant(VecDeque::with_capacity(capacity.min(64))),
            buckets: Box::new(std::array::from_fn(|_| Bucket {
                earliest: u64::MAX,
                entries: Vec::new(),
            })),
            occupied: [0; OCCUPANCY_WORDS],
            base: 0,
            len: 0,
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
        self.len
    }

    /// Whether no event is pending.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Schedules `event` at absolute time `at`.
    ///
    /// # Panics
    /// If `at` is earlier than [`EventQueue::now`]: an effect cannot precede its cause.
    // Always inlined: called out of line, the event travels by pointer, and the caller's
    // field-by-field stores followed by this function's one 16-byte load defeat
    // store-to-load forwarding on every event scheduled.
    #[inline(always)]
    pub fn schedule(&mut self, at: SimTime, priority: Priority, event: E) {
        assert!(
            at >= self.now,
            "event scheduled into the past: at {at} but now is {}",
            self.now
        );
        let entry = Entry {
            time: at.0,
            order: tie_order(priority, self.next_seq),
            event,
        };
        self.next_seq += 1;
        self.len += 1;
        if !self.in_buckets {
            if self.list.len() < LIST_MAX {
                self.insert_in_list(entry);
                return;
            }
            self.move_list_to_buckets();
        }
        self.push_radix(entry);
    }

    /// Puts `entry` in its place in the radix buckets, or in `at_base`.
    #[inline(always)]
    fn push_radix(&mut self, entry: Entry<E>) {
        // `base` never passes `now` while an event is due before it, and `at >= now`.
        if entry.time == self.base {
            self.at_base.insert(entry);
        } else {
            let b = bucket_of(entry.time, self.base);
            self.push_to_bucket(b, entry);
        }
    }

    /// Inserts `entry` in the sorted list from its earliest end, moving each earlier
    /// event up by one: most events are scheduled a short time ahead, so the walk is
    /// short, and moving entries one at a time costs less than `Vec::insert`'s call to
    /// `memmove` for the few it moves.
    ///
    /// A walk longer than [`LIST_WALK_MAX`] means the pending events are spread in time
    /// and pushed anywhere among them: the events move into the radix buckets, which
    /// serve that in constant time.
    #[inline(always)]
    fn insert_in_list(&mut self, entry: Entry<E>) {
        let key = entry.key();
        self.list.push(entry);
        let last = self.list.len() - 1;
        let mut at = last;
        while at > 0 && self.list[at - 1].key() < key {
            if last - at == LIST_WALK_MAX {
                // The list need not be sorted for the move: each event finds its
                // bucket by its own time.
                self.move_list_to_buckets();
                return;
            }
            self.list.swap(at - 1, at);
            at -= 1;
        }
    }

    /// The list is full, or a push would walk too far: its events go into the radix
    /// buckets, whose `base` is now (every pending event is due at or after it).
    #[cold]
    fn move_list_to_buckets(&mut self) {
        self.base = self.now.0;
        self.in_buckets = true;
        let mut list = std::mem::take(&mut self.list);
        // Earliest first, so that same-instant events usually reach `at_base` as
        // appends (it sorts any that do not: a walk cut short leaves one out of place).
        while let Some(entry) = list.pop() {
            self.push_radix(entry);
        }
        self.list = list;
    }

    /// Few events are left in the buckets: they go back into the list.
    #[cold]
    fn move_buckets_to_list(&mut self) {
        self.in_buckets = false;
        self.list.extend(self.at_base.0.drain(..));
        while let Some(b) = self.lowest_occupied() {
            self.empty_bucket(b);
            let mut entries = std::mem::take(&mut self.buckets[b].entries);
            self.list.append(&mut entries);
            self.buckets[b].entries = entries;
        }
        self.list
            .sort_unstable_by_key(|entry| std::cmp::Reverse(entry.key()));
    }

    #[inline(always)]
    fn push_to_bucket(&mut self, b: usize, entry: Entry<E>) {
        let bucket = &mut self.buckets[b];
        bucket.earliest = bucket.earliest.min(entry.time);
        bucket.entries.push(entry);
        self.occupied[b / 64] |= 1 << (b % 64);
    }

    fn empty_bucket(&mut self, b: usize) {
        self.buckets[b].earliest = u64::MAX;
        self.occupied[b / 64] &= !(1 << (b % 64));
    }

    fn lowest_occupied(&self) -> Option<usize> {
        let (w, word) = self
            .occupied
            .iter()
            .enumerate()
            .find(|(_, word)| **word != 0)?;
        Some((w * 64 + word.trailing_zeros() as usize) & (BUCKETS - 1))
    }

    /// Schedules `event` at `now + delay`.
    pub fn schedule_in(&mut self, delay: Duration, priority: Priority, event: E) {
        self.schedule(self.now + delay, priority, event);
    }

    /// Time of the next event, if any: the list's last entry's; in the buckets, `base`
    /// if something is due at it, else the earliest time in the lowest occupied bucket.
    pub fn peek_time(&self) -> Option<SimTime> {
        if !self.in_buckets {
            return self.list.last().map(|entry| SimTime(entry.time));
        }
        if !self.at_base.0.is_empty() {
            return Some(SimTime(self.base));
        }
        self.lowest_occupied()
            .map(|b| SimTime(self.buckets[b].earliest))
    }

    #[inline(always)]
    fn take_due_from_list(&mut self, limit: u64) -> Option<Entry<E>> {
        match self.list.last() {
            Some(entry) if entry.time <= limit => self.list.pop(),
            _ => None,
        }
    }

    /// Removes the earliest pending event if it is due at or before `limit`.
    ///
    /// When nothing is due at `base`, `base` moves to the earliest pending time and the
    /// lowest bucket spreads over the buckets below it. When that time is after
    /// `limit`, `base` stays put: a caller may still schedule before it.
    fn take_due(&mut self, limit: u64) -> Option<Entry<E>> {
        if !self.in_buckets {
            return self.take_due_from_list(limit);
        }
        if let Some(entry) = self.at_base.0.pop_front() {
            if entry.time <= limit {
                return Some(entry);
            }
            self.at_base.0.push_front(entry);
            return None;
        }
        if self.len <= LIST_RETURN {
            // Checked only here, where the buckets are about to be spread, so that the
            // pops served from `at_base` pay nothing for it.
            self.move_buckets_to_list();
            return self.take_due_from_list(limit);
        }
        let b = self.lowest_occupied()?;
        let min = self.buckets[b].earliest;
        if min > limit {
            return None;
        }
        self.base = min;
        self.empty_bucket(b);
        if self.buckets[b].entries.len() == 1 {
            // The common case with few events pending: nothing to spread.
            return self.buckets[b].entries.pop();
        }
        let mut spilled = std::mem::take(&mut self.buckets[b].entries);
        // Usually one event holds the minimum. Taking it out before the spread leaves
        // the loop no state to carry, so each event goes straight from this bucket to
        // its lower one; the events' order inside a bucket does not matter, as
        // same-instant events are sorted when they reach `at_base`.
        let first_due = spilled
            .iter()
            .position(|entry| entry.time == min)
            .map(|i| spilled.swap_remove(i));
        for entry in spilled.drain(..) {
            if entry.time == min {
                self.at_base.insert(entry);
            } else {
                let lower = bucket_of(entry.time, min);
                self.push_to_bucket(lower, entry);
            }
        }
        // Hand the emptied vector back so its memory is reused, not reallocated.
        self.buckets[b].entries = spilled;
        match first_due {
            Some(only) if self.at_base.0.is_empty() => Some(only),
            Some(first) => {
                self.at_base.insert(first);
                self.at_base.0.pop_front()
            }
            None => self.at_base.0.pop_front(),
        }
    }

    /// Removes the earliest event and advances `now` to its time.
    pub fn pop(&mut self) -> Option<(SimTime, E)> {
        self.pop_until(SimTime(u64::MAX))
    }

    /// Pops the earliest event only if it is due at or before `limit`.
    pub fn pop_until(&mut self, limit: SimTime) -> Option<(SimTime, E)> {
        let entry = self.take_due(limit.0)?;
        self.len -= 1;
        self.now = SimTime(entry.time);
        self.popped += 1;
        Some((self.now, entry.event))
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

    /// Events far in the future that put `q` in its radix buckets, so that a test's
    /// own events go through them and not the sorted list.
    fn into_buckets(q: &mut EventQueue<&'static str>) {
        for i in 0..=LIST_MAX as u64 {
            q.schedule(SimTime((1 << 60) + i), Priority::CPU, "filler");
        }
        assert!(q.in_buckets, "more than LIST_MAX events pending");
    }

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
    fn a_queue_is_empty_exactly_when_nothing_is_pending() {
        let mut q = EventQueue::new();
        assert!(q.is_empty());
        q.schedule(SimTime(3), Priority::CPU, ());
        assert!(!q.is_empty(), "one event pending");
        assert_eq!(q.len(), 1);
        q.pop();
        assert!(q.is_empty());
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

    #[test]
    fn a_spread_bucket_hands_out_its_same_instant_events_by_priority_then_fifo() {
        // From base 0, times 1000 to 1010 share one bucket (0x3E8..0x3F2: level 2,
        // digit 3). The first event at the minimum in the bucket is not the one that
        // must run first, and a later event is due in between by time only.
        let mut q = EventQueue::new();
        into_buckets(&mut q);
        q.schedule(SimTime(1010), Priority::DEVICE, "1010");
        q.schedule(SimTime(1000), Priority::CPU, "1000 cpu first");
        q.schedule(SimTime(1001), Priority::DEVICE, "1001");
        q.schedule(SimTime(1000), Priority::IOMMU, "1000 iommu");
        q.schedule(SimTime(1000), Priority::CPU, "1000 cpu second");
        q.schedule(SimTime(1000), Priority::DEVICE, "1000 device");
        let popped: Vec<_> = std::iter::from_fn(|| q.pop()).take(6).collect();
        assert_eq!(
            popped,
            [
                (SimTime(1000), "1000 device"),
                (SimTime(1000), "1000 iommu"),
                (SimTime(1000), "1000 cpu first"),
                (SimTime(1000), "1000 cpu second"),
                (SimTime(1001), "1001"),
                (SimTime(1010), "1010"),
            ]
        );
    }

    #[test]
    fn an_event_scheduled_at_the_current_instant_with_a_higher_priority_runs_next() {
        let mut q = EventQueue::new();
        q.schedule(SimTime(7), Priority::CPU, "cpu");
        q.schedule(SimTime(7), Priority::CPU, "cpu 2");
        q.schedule(SimTime(9), Priority::CPU, "later");
        assert_eq!(q.pop(), Some((SimTime(7), "cpu")));
        q.schedule(SimTime(7), Priority::DEVICE, "device, same instant");
        assert_eq!(q.pop(), Some((SimTime(7), "device, same instant")));
        assert_eq!(q.pop(), Some((SimTime(7), "cpu 2")));
        assert_eq!(q.pop(), Some((SimTime(9), "later")));
    }

    #[test]
    fn a_window_end_before_the_next_event_leaves_room_to_schedule_earlier() {
        for buckets in [false, true] {
            let mut q = EventQueue::new();
            if buckets {
                into_buckets(&mut q);
            }
            q.schedule(SimTime(1_000), Priority::CPU, "far");
            q.schedule(SimTime(1_001), Priority::CPU, "farther");
            assert_eq!(q.pop_until(SimTime(100)), None);
            q.advance_to(SimTime(100));
            q.schedule(SimTime(150), Priority::CPU, "near");
            assert_eq!(q.peek_time(), Some(SimTime(150)));
            let order: Vec<_> = std::iter::from_fn(|| q.pop().map(|(_, e)| e))
                .filter(|e| *e != "filler")
                .collect();
            assert_eq!(
                order,
                vec!["near", "far", "farther"],
                "in buckets: {buckets}"
            );
            assert!(q.is_empty());
        }
    }

    #[test]
    fn events_keep_their_order_as_they_move_between_the_list_and_the_buckets() {
        use std::cmp::Reverse;
        // Pairs of events share an instant, with priorities that jump ahead of earlier
        // pushes; the count goes past the list's size, down below its return point,
        // past the size again and down to nothing.
        let slots = [
            Priority::CPU,
            Priority::DEVICE,
            Priority::CONTROL,
            Priority::IOMMU,
        ];
        let mut q = EventQueue::new();
        let mut reference = std::collections::BinaryHeap::new();
        let mut seq = 0u64;
        let mut where_events_were = vec![q.in_buckets];
        let plan = [(2 * LIST_MAX, 2 * LIST_MAX - 4), (LIST_MAX, usize::MAX)];
        for (pushes, pops) in plan {
            let from = q.now().0 + 1;
            for i in 0..pushes as u64 {
                let priority = slots[seq as usize % slots.len()];
                q.schedule(SimTime(from + i / 2), priority, seq);
                reference.push(Reverse((from + i / 2, priority, seq)));
                seq += 1;
                where_events_were.push(q.in_buckets);
            }
            for _ in 0..pops.min(reference.len()) {
                let want = reference.pop().map(|Reverse((t, _, id))| (SimTime(t), id));
                assert_eq!(q.pop(), want);
                where_events_were.push(q.in_buckets);
            }
        }
        assert!(q.is_empty());
        where_events_were.dedup();
        assert_eq!(where_events_were, [false, true, false, true, false]);
    }

    #[test]
    fn a_push_that_would_walk_past_many_events_moves_them_into_the_buckets() {
        // Each push is later than every event pending: the list keeps the earliest at
        // its end, so the push walks past all of them.
        let mut q = EventQueue::new();
        let count = LIST_WALK_MAX as u64 + 1;
        for i in 0..count {
            q.schedule(SimTime(1_000 + i), Priority::CPU, i);
            assert!(!q.in_buckets, "a walk past {i} events stays in the list");
        }
        q.schedule(SimTime(1_000 + count), Priority::CPU, count);
        assert!(
            q.in_buckets,
            "a walk past {count} events moves to the buckets"
        );
        let popped: Vec<_> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert_eq!(popped, (0..=count).collect::<Vec<_>>());
    }

    mod against_a_binary_heap {
        use super::*;
        use proptest::prelude::*;
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;

        #[derive(Clone, Debug)]
        enum Op {
            /// Schedule at now + delay ps with priority slot 0..4.
            Schedule {
                delay: u64,
                slot: u8,
            },
            Pop,
            /// pop_until(now + window), then advance_to the window's end if nothing is due.
            Window {
                window: u64,
            },
            /// pop_until exactly the earliest pending time, plus `off` of -1, 0 or +1 ps:
            /// the limit's boundary, which uniform windows almost never hit.
            AtNext {
                off: i8,
            },
        }

        fn op() -> impl Strategy<Value = Op> {
            let delay = prop_oneof![
                3 => Just(0u64),
                4 => 1u64..64,
                4 => 1u64..1_000_000,
                1 => 1u64..(1 << 50),
                // Up to 2^54, so 400 steps stay below 2^63 and reach the highest digits.
                1 => (1u64 << 50)..(1 << 54),
            ];
            prop_oneof![
                5 => (delay, 0u8..4).prop_map(|(delay, slot)| Op::Schedule { delay, slot }),
                4 => Just(Op::Pop),
                1 => (0u64..2_000_000).prop_map(|window| Op::Window { window }),
                1 => (-1i8..=1).prop_map(|off| Op::AtNext { off }),
            ]
        }

        const SLOTS: [Priority; 4] = [
            Priority::DEVICE,
            Priority::IOMMU,
            Priority::CPU,
            Priority::CONTROL,
        ];

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]
            /// The queue pops exactly what a binary heap on (time, priority, insertion
            /// sequence) pops, through any mix of same-instant events, priorities that
            /// jump ahead, far-future events and run windows, whether its events are
            /// in the sorted list, in the radix buckets, or moving between them.
            #[test]
            fn pops_in_the_same_order(
                far_events in prop_oneof![Just(0u64), Just(LIST_MAX as u64 + 8)],
                ops in proptest::collection::vec(op(), 1..400),
            ) {
                let mut q = EventQueue::new();
                let mut reference = BinaryHeap::new();
                let mut seq = 0u64;
                let mut now = 0u64;
                // Far events keep the queue in its radix buckets for most of the run
                // (until the end, when it drains); without them it moves between the
                // list and the buckets as the ops' count of pending events goes.
                for i in 0..far_events {
                    let at = (1 << 61) + i / 2;
                    q.schedule(SimTime(at), Priority::DEVICE, seq);
                    reference.push(Reverse((at, Priority::DEVICE, seq)));
                    seq += 1;
                }
                for op in ops {
                    match op {
                        Op::Schedule { delay, slot } => {
                            let at = now + delay;
                            q.schedule(SimTime(at), SLOTS[slot as usize], seq);
                            reference.push(Reverse((at, SLOTS[slot as usize], seq)));
                            seq += 1;
                        }
                        Op::Pop => {
                            let want = reference.pop().map(|Reverse((t, _, id))| (SimTime(t), id));
                            prop_assert_eq!(q.pop(), want);
                            if let Some((t, _)) = want {
                                now = t.0;
                            }
                        }
                        Op::Window { .. } | Op::AtNext { .. } => {
                            let limit = match op {
                                Op::Window { window } => now + window,
                                Op::AtNext { off } => match reference.peek() {
                                    Some(Reverse((t, _, _))) => t.saturating_add_signed(off as i64).max(now),
                                    None => now,
                                },
                                _ => unreachable!(),
                            };
                            let due = matches!(reference.peek(), Some(Reverse((t, _, _))) if *t <= limit);
                            let want = if due {
                                reference.pop().map(|Reverse((t, _, id))| (SimTime(t), id))
                            } else {
                                None
                            };
                            prop_assert_eq!(q.pop_until(SimTime(limit)), want);
                            match want {
                                Some((t, _)) => now = t.0,
                                None => {
                                    q.advance_to(SimTime(limit));
                                    now = limit;
                                }
                            }
                        }
                    }
                    prop_assert_eq!(q.len(), reference.len());
                    prop_assert_eq!(
                        q.peek_time(),
                        reference.peek().map(|Reverse((t, _, _))| SimTime(*t))
                    );
                }
                while let Some(Reverse((t, _, id))) = reference.pop() {
                    prop_assert_eq!(q.pop(), Some((SimTime(t), id)));
                }
                prop_assert!(q.pop().is_none());
            }
        }
    }
}
