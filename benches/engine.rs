//! Engine throughput: the ping model (N entities, each with one pending event; each
//! handled event schedules one new event at now + uniform [1, 1000] ns drawn from a
//! seeded ChaCha8 stream), on irqsim's queue and on a plain BinaryHeap loop doing the
//! same work, so the two can be compared in one run. Reports events per second.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use divan::counter::ItemsCount;
use divan::Bencher;
use irqsim::engine::{EventQueue, Priority};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sim_core::{Duration, SimTime};

const EVENTS: u64 = 200_000;

fn main() {
    divan::main();
}

#[divan::bench(args = [1_000, 100_000])]
fn irqsim_queue(b: Bencher, pending: u32) {
    b.counter(ItemsCount::new(EVENTS)).bench_local(|| {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut q = EventQueue::with_capacity(pending as usize);
        for e in 0..pending {
            q.schedule(SimTime(rng.gen_range(1..=1000) * 1000), Priority::CPU, e);
        }
        for _ in 0..EVENTS {
            let (_, e) = q.pop().expect("never empty");
            let delay = Duration::from_ns(rng.gen_range(1..=1000));
            q.schedule_in(delay, Priority::CPU, e);
        }
        q.now()
    });
}

#[divan::bench(args = [1_000, 100_000])]
fn plain_binary_heap(b: Bencher, pending: u32) {
    b.counter(ItemsCount::new(EVENTS)).bench_local(|| {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut heap = BinaryHeap::with_capacity(pending as usize);
        let mut seq = 0u64;
        for e in 0..pending {
            heap.push(Reverse((rng.gen_range(1..=1000u64) * 1000, seq, e)));
            seq += 1;
        }
        let mut now = 0;
        for _ in 0..EVENTS {
            let Reverse((t, _, e)) = heap.pop().expect("never empty");
            now = t;
            heap.push(Reverse((t + rng.gen_range(1..=1000u64) * 1000, seq, e)));
            seq += 1;
        }
        now
    });
}
