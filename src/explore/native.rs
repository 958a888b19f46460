//! The same handler code on real atomics across threads: a bounded stress test.
//!
//! Poster threads post into a 64-byte-aligned, cache-padded descriptor of
//! [`AtomicU64`] words; the calling thread is the CPU that handles. It drives the
//! variant's own coroutine and performs each [`CpuOp`] on the real words. The run goes
//! in rounds (see [`NativeConfig`]); at the end of each, with the posters done and every
//! notification handled, the descriptor must be empty with ON clear, which is the
//! explorer's quiescence check on real memory. Every post and every handler call is
//! counted, so the run can say whether anything was lost.
//!
//! # How real atomics differ from the IOMMU's post
//! The IOMMU updates the whole 64-byte line in one indivisible read-modify-write
//! (VT-d 5.2.3): the PIR bit, the ON decision and the SN check happen together. A CPU
//! has no 64-byte atomic, so a software poster here does two 8-byte locked operations:
//! set the PIR bit (`fetch_or`), then test-and-set ON (`fetch_or` on the control word)
//! and send a notification if ON was clear. In between, the handler may harvest the
//! new bit and clear ON; the poster then sets ON again and notifies for a vector that
//! is already handled, so the next entry finds PIR empty. That is harmless and counted
//! as `empty_entries`. The other order (ON first, then the PIR bit) would be wrong: a
//! whole handler entry could run between the two and the bit would land after the
//! last look at PIR, with ON clear. SN is not modelled here (it would need a
//! compare-and-swap loop on the control word); the explorer covers SN and URG.
//!
//! # Memory ordering
//! Every locked operation and load is `SeqCst`. The protocol is a store-buffering
//! pattern: the handler clears ON and then reads PIR; a poster sets PIR and then reads
//! ON (in its test-and-set). Neither may read the old value, which needs a full fence
//! between each side's write and its read. On x86 the locked instructions (`xchg`,
//! `lock and`, `lock or`) are full fences and a `SeqCst` load is a plain `mov`, which
//! is what the kernel's code compiles to.
//!
//! The plain operations ([`CpuOp::StorePir`], [`CpuOp::StoreClearOn`]) are `Release`
//! stores, a plain `mov` on x86, which waits in the store buffer while later loads go
//! ahead; [`CpuOp::Mfence`] is a `SeqCst` fence (`mfence`). So a variant that clears ON
//! with a plain store and then reads PIR runs here with the reordering x86 really
//! does, and can lose a post that lands in between.
//!
//! A pass is evidence, not proof: threads hit the race windows by volume, at whatever
//! timing the host gives. The explorer is the proof within its bounds.

use std::sync::atomic::Ordering::{Relaxed, Release, SeqCst};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use pid_model::desc::{CONTROL_WORD, NV_SHIFT, ON_BIT, PID_WORDS};
use serde::Serialize;
use sim_core::{Vector, VectorSet};

use crate::engine::{Coroutine, Step};
use crate::kernel::{CpuOp, CpuPort, PirHandler, POSTED_MSI_NOTIFICATION_VECTOR};

const ON_MASK: u64 = 1 << (ON_BIT % 64);

/// A posted-interrupt descriptor in real memory: eight 64-bit words, 64-byte aligned
/// like the hardware's (VT-d 9.12). Wrap it in [`CachePadded`] so no other data shares
/// its line (or the adjacent-line prefetch pair).
#[repr(C, align(64))]
pub struct AtomicPid {
    words: [AtomicU64; PID_WORDS],
}

impl Default for AtomicPid {
    fn default() -> Self {
        AtomicPid::new()
    }
}

/// What a software post did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NativePost {
    /// The PIR bit was clear before (a new pending interrupt, not a merge).
    pub newly_pending: bool,
    /// ON was clear before: this post sends the notification.
    pub notify: bool,
}

impl AtomicPid {
    /// Empty PIR, ON clear, NV = the posted-MSI notification vector.
    pub fn new() -> AtomicPid {
        let pid = AtomicPid {
            words: Default::default(),
        };
        pid.words[CONTROL_WORD].store(
            u64::from(POSTED_MSI_NOTIFICATION_VECTOR.0) << (NV_SHIFT % 64),
            SeqCst,
        );
        pid
    }

    /// Posts `vector` as software must: set the PIR bit, then test-and-set ON.
    pub fn post(&self, vector: Vector) -> NativePost {
        let old = self.words[vector.word()].fetch_or(vector.bit(), SeqCst);
        let control = self.words[CONTROL_WORD].fetch_or(ON_MASK, SeqCst);
        NativePost {
            newly_pending: old & vector.bit() == 0,
            notify: control & ON_MASK == 0,
        }
    }

    /// The PIR as it is now (four separate loads: not a snapshot while posters run).
    pub fn pir(&self) -> VectorSet {
        VectorSet(std::array::from_fn(|i| self.words[i].load(SeqCst)))
    }

    /// ON, now.
    pub fn on(&self) -> bool {
        self.words[CONTROL_WORD].load(SeqCst) & ON_MASK != 0
    }

    /// Makes `store` (if any) and then `op`, with nothing in between.
    #[inline(always)]
    fn perform_after(&self, store: Option<CpuOp>, op: CpuOp) -> u64 {
        if let Some(store) = store {
            self.perform(store);
        }
        self.perform(op)
    }

    /// Performs one handler operation; `HandleVector`, `Eoi` and `Mfence` touch no
    /// descriptor memory, and they and the plain stores return 0 (the caller counts
    /// `HandleVector` and `Eoi`).
    ///
    /// # Panics
    /// If a PIR word index is not 0..4.
    #[inline(always)]
    pub fn perform(&self, op: CpuOp) -> u64 {
        match op {
            CpuOp::LoadPir { word } => self.words[pir_index(word)].load(SeqCst),
            CpuOp::XchgPir { word, value } => self.words[pir_index(word)].swap(value, SeqCst),
            CpuOp::ClearOn => {
                self.words[CONTROL_WORD].fetch_and(!ON_MASK, SeqCst);
                0
            }
            CpuOp::TestAndClearOn => {
                let old = self.words[CONTROL_WORD].fetch_and(!ON_MASK, SeqCst);
                u64::from(old & ON_MASK != 0)
            }
            CpuOp::StorePir { word, value } => {
                self.words[pir_index(word)].store(value, Release);
                0
            }
            CpuOp::StoreClearOn => {
                // A plain read and write back, not a locked `and`: a post between the
                // two has its ON overwritten, as a byte store would.
                let control = self.words[CONTROL_WORD].load(Relaxed);
                self.words[CONTROL_WORD].store(control & !ON_MASK, Release);
                0
            }
            CpuOp::Mfence => {
                fence(SeqCst);
                0
            }
            CpuOp::HandleVector(_) | CpuOp::Eoi => 0,
        }
    }
}

fn pir_index(word: usize) -> usize {
    assert!(
        word < 4,
        "handler asked for PIR word {word}; only 0..4 exist"
    );
    word
}

/// Bounds of a stress run.
///
/// The run is a sequence of rounds. In each round every poster makes a few posts with
/// pseudo-random pauses between them; then, once the posters are done and every
/// notification has been handled, the handling thread checks the descriptor at that
/// quiescent point, as the explorer does: anything still in PIR, or ON still set, is a
/// loss (it would wait for some later post's notification). It is counted and cleared,
/// and the next round starts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NativeConfig {
    /// Poster threads (each one a device behind the IOMMU). More posters than spare
    /// cores only time-slice: a descheduled handler thread sees nothing race.
    pub posters: usize,
    /// Rounds, at most.
    pub rounds: u64,
    /// Posts per poster per round.
    pub posts_per_round: u32,
    /// Vectors the posters cycle through (each poster at its own offset).
    pub vectors: Vec<Vector>,
    /// Wall-clock bound: no new round starts once it has passed.
    pub time_limit: Duration,
    /// Most spin-loop iterations a poster waits before each post (a pseudo-random
    /// number up to this), to spread posts over the handler's race windows.
    pub max_pause_spins: u32,
    /// End the run at the first round that loses something (to show that a broken
    /// variant loses, without waiting out the round count).
    pub stop_on_loss: bool,
}

impl Default for NativeConfig {
    /// One poster per spare core (at least one, at most three), 20,000 rounds of two
    /// posts each, half a second at most.
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        NativeConfig {
            posters: (cores - 1).clamp(1, 3),
            rounds: 20_000,
            posts_per_round: 2,
            vectors: vec![
                Vector(0x21),
                Vector(0x22),
                Vector(0x61),
                Vector(0xa1),
                Vector(0xe1),
            ],
            time_limit: Duration::from_millis(500),
            max_pause_spins: 512,
            stop_on_loss: false,
        }
    }
}

/// What a stress run counted.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NativeReport {
    /// [`PirHandler::name`] of the handler run.
    pub variant: String,
    /// Rounds completed.
    pub rounds: u64,
    /// Posts made.
    pub posts: u64,
    /// Posts that found their PIR bit already set (merged into a pending interrupt).
    pub merged: u64,
    /// Notifications sent (posts that found ON clear).
    pub notifications: u64,
    /// Handler entries run (one per notification).
    pub handler_entries: u64,
    /// Entries that called no device handler (see the module docs).
    pub empty_entries: u64,
    /// Device handler calls.
    pub handled: u64,
    /// Rounds that ended with a vector left in PIR or ON left set: each is a loss.
    pub stranded_rounds: u64,
    /// Vectors found left in PIR at the end of a round, summed over rounds.
    pub stranded_vectors: u64,
    /// Rounds that ended with ON set and no notification outstanding.
    pub stuck_on_rounds: u64,
    /// Interrupts posted (PIR bit 0 -> 1) and never handled.
    pub lost: u64,
    /// Handler calls beyond the interrupts posted.
    pub extra: u64,
    /// Entries that did not EOI exactly once.
    pub eoi_mismatches: u64,
    /// The time bound ended the run before its round count.
    pub stopped_by_time: bool,
    /// Wall-clock time of the run, seconds.
    pub elapsed_s: f64,
}

impl NativeReport {
    /// Every interrupt posted was handled exactly once, every round ended with PIR
    /// empty and ON clear, and every entry wrote one EOI.
    pub fn nothing_lost(&self) -> bool {
        self.stranded_rounds == 0 && self.lost == 0 && self.extra == 0 && self.eoi_mismatches == 0
    }
}

#[derive(Default)]
struct Tally {
    entries: u64,
    empty_entries: u64,
    handled: u64,
    eoi_mismatches: u64,
    per_vector: Vec<u64>,
}

/// One handler entry on the real descriptor.
fn run_entry(handler: &dyn PirHandler, pid: &AtomicPid, tally: &mut Tally) {
    let mut co = Coroutine::from_boxed(|port| handler.run(CpuPort::new(port)));
    let (mut eois, mut calls) = (0, 0);
    let mut result = None;
    // A plain store's result is always 0, so the coroutine can be resumed for the
    // next operation before the store is made; the two are then made back to back.
    // Resuming the coroutine between them takes longer than a store takes to leave
    // the store buffer, so without this the load that x86 lets pass the store would
    // never find it still buffered, and a TSO-only race could not show here.
    let mut deferred_store: Option<CpuOp> = None;
    while let Step::Request(op) = co.resume(result.take()) {
        match op {
            CpuOp::HandleVector(v) => {
                tally.per_vector[v.0 as usize] += 1;
                calls += 1;
            }
            CpuOp::Eoi => eois += 1,
            _ => {}
        }
        let store = deferred_store.take();
        if matches!(op, CpuOp::StorePir { .. } | CpuOp::StoreClearOn) {
            if let Some(earlier) = store {
                pid.perform(earlier);
            }
            deferred_store = Some(op);
            result = Some(0);
            continue;
        }
        result = Some(pid.perform_after(store, op));
    }
    if let Some(store) = deferred_store {
        pid.perform(store);
    }
    tally.entries += 1;
    tally.handled += calls;
    tally.empty_entries += u64::from(calls == 0);
    tally.eoi_mismatches += u64::from(eois != 1);
}

/// Shared between the handling thread and the posters.
struct Shared {
    pid: CachePadded<AtomicPid>,
    /// Interrupts posted per vector (PIR bit 0 -> 1).
    pending: Vec<AtomicU64>,
    notifications: AtomicU64,
    /// The round the posters may run (0: none yet).
    round: AtomicU64,
    /// Posters done with the current round.
    done_in_round: AtomicUsize,
    stop: AtomicBool,
}

fn spin_wait(spins: &mut u32) {
    *spins = spins.wrapping_add(1);
    if *spins % 64 == 0 {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

/// One poster thread: returns (posts, merged).
fn poster(k: usize, shared: &Shared, config: &NativeConfig) -> (u64, u64) {
    let (mut posts, mut merged) = (0u64, 0u64);
    let vs = &config.vectors;
    // xorshift64: cheap, different per poster, no shared state.
    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (k as u64 + 1).wrapping_mul(0xff51_afd7_ed55_8ccd);
    let mut next = 0usize;
    for round in 1..=config.rounds {
        let mut spins = 0;
        while shared.round.load(SeqCst) < round {
            if shared.stop.load(SeqCst) {
                return (posts, merged);
            }
            spin_wait(&mut spins);
        }
        for _ in 0..config.posts_per_round {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            for _ in 0..rng % (u64::from(config.max_pause_spins) + 1) {
                std::hint::spin_loop();
            }
            let v = vs[(next + k) % vs.len()];
            next += 1;
            let r = shared.pid.post(v);
            posts += 1;
            if r.newly_pending {
                shared.pending[v.0 as usize].fetch_add(1, SeqCst);
            } else {
                merged += 1;
            }
            if r.notify {
                shared.notifications.fetch_add(1, SeqCst);
            }
        }
        shared.done_in_round.fetch_add(1, SeqCst);
    }
    (posts, merged)
}

/// Runs `handler` on this thread against `config.posters` poster threads, round by
/// round (see [`NativeConfig`]), and counts what happened.
///
/// # Panics
/// If `config` has no poster or no vector.
pub fn run_native(handler: &dyn PirHandler, config: &NativeConfig) -> NativeReport {
    assert!(config.posters > 0, "at least one poster thread");
    assert!(!config.vectors.is_empty(), "at least one vector");
    let shared = Shared {
        pid: CachePadded::new(AtomicPid::new()),
        pending: (0..256).map(|_| AtomicU64::new(0)).collect(),
        notifications: AtomicU64::new(0),
        round: AtomicU64::new(0),
        done_in_round: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
    };
    let started = Instant::now();
    let mut tally = Tally {
        per_vector: vec![0; 256],
        ..Tally::default()
    };
    let (mut rounds, mut stranded_rounds, mut stranded_vectors, mut stuck_on_rounds) = (0, 0, 0, 0);
    let mut stopped_by_time = false;

    let (posts, merged) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..config.posters)
            .map(|k| {
                let shared = &shared;
                s.spawn(move || poster(k, shared, config))
            })
            .collect();

        let mut taken = 0u64;
        for round in 1..=config.rounds {
            if started.elapsed() >= config.time_limit {
                stopped_by_time = true;
                break;
            }
            shared.done_in_round.store(0, SeqCst);
            shared.round.store(round, SeqCst);
            // This thread is the CPU: one entry per notification, until the posters
            // are done with the round and no notification is outstanding. Read
            // `done_in_round` first: a poster's notifications precede its increment.
            let mut spins = 0;
            loop {
                if taken < shared.notifications.load(SeqCst) {
                    taken += 1;
                    run_entry(handler, &shared.pid, &mut tally);
                    continue;
                }
                if shared.done_in_round.load(SeqCst) == config.posters
                    && taken == shared.notifications.load(SeqCst)
                {
                    break;
                }
                spin_wait(&mut spins);
            }
            rounds = round;
            // Quiescent: nothing may be left behind. Reclaim what is, so the next
            // round starts clean and every loss is counted once.
            let mut stranded = false;
            for word in &shared.pid.words[..4] {
                let bits = word.swap(0, SeqCst);
                stranded_vectors += u64::from(bits.count_ones());
                stranded |= bits != 0;
            }
            if shared.pid.perform(CpuOp::TestAndClearOn) != 0 {
                stuck_on_rounds += 1;
                stranded = true;
            }
            stranded_rounds += u64::from(stranded);
            if stranded && config.stop_on_loss {
                break;
            }
        }
        shared.stop.store(true, SeqCst);
        workers
            .into_iter()
            .map(|w| w.join().expect("poster thread panicked"))
            .fold((0, 0), |(p, m), (wp, wm)| (p + wp, m + wm))
    });

    let (mut lost, mut extra) = (0, 0);
    for (v, count) in shared.pending.iter().enumerate() {
        let posted = count.load(SeqCst);
        let handled = tally.per_vector[v];
        lost += posted.saturating_sub(handled);
        extra += handled.saturating_sub(posted);
    }
    NativeReport {
        variant: handler.name().to_string(),
        rounds,
        posts,
        merged,
        notifications: shared.notifications.load(SeqCst),
        handler_entries: tally.entries,
        empty_entries: tally.empty_entries,
        handled: tally.handled,
        stranded_rounds,
        stranded_vectors,
        stuck_on_rounds,
        lost,
        extra,
        eoi_mismatches: tally.eoi_mismatches,
        stopped_by_time,
        elapsed_s: started.elapsed().as_secs_f64(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_is_one_aligned_line() {
        assert_eq!(std::mem::size_of::<AtomicPid>(), 64);
        assert_eq!(std::mem::align_of::<AtomicPid>(), 64);
        let padded = CachePadded::new(AtomicPid::new());
        assert_eq!(&*padded as *const AtomicPid as usize % 64, 0);
    }

    #[test]
    fn post_sets_the_bit_then_on_and_notifies_once() {
        let pid = AtomicPid::new();
        let first = pid.post(Vector(0x61));
        assert_eq!(
            first,
            NativePost {
                newly_pending: true,
                notify: true
            }
        );
        let again = pid.post(Vector(0x61));
        assert_eq!(
            again,
            NativePost {
                newly_pending: false,
                notify: false
            }
        );
        assert!(pid.on());
        assert!(pid.pir().contains(Vector(0x61)));
        assert_eq!(pid.perform(CpuOp::TestAndClearOn), 1);
        assert!(!pid.on());
        assert_eq!(
            pid.perform(CpuOp::XchgPir { word: 1, value: 0 }),
            Vector(0x61).bit()
        );
    }
}
