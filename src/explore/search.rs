//! Breadth-first enumeration of every interleaving of the handler's atomic steps with
//! the hardware actors' steps, with duplicate states pruned.
//!
//! Coroutines cannot be cloned, so the search is stateless in the model-checking sense:
//! a state records the results its handler entry has been given so far, and taking the
//! handler's next step re-runs the variant's own coroutine from its start with those
//! results ([`advance_handler`]). Everything else in a state is plain data
//! ([`super::model::World`] plus each actor's progress).
//!
//! Breadth-first order makes the first violation found one with the fewest steps.
//! Visited states are kept as 128-bit XXH3 fingerprints of the state's bytes (handler
//! results included; with the reduction, of what decides its future:
//! [`World::hash_behaviour`]). Under a preemption bound each keeps the fewest
//! preemptions it was reached with: a state reached again with no fewer is pruned, one
//! reached with fewer is explored again, since more of its future fits in the bound.
//! Without a bound a state is explored once. The set is only looked up, never
//! iterated, so its order never reaches a result.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hash, Hasher};

use sim_core::Vector;

use super::por::{footprint, Footprint, StepContext};

use super::model::{Invariant, StepNote, Violation, World};
use super::pack::{pack_struct, Pack};
use super::retrigger::entry_coroutine;
use super::sn::advance_sn;
use super::{Counterexample, ExploreConfig, TraceStep};
use crate::engine::Step;
use crate::kernel::retrigger::PostedMsiAck;
use crate::kernel::sn::{SnOp, SnSoftware};
use crate::kernel::{CpuOp, PirHandler};

mod batch;
pub(crate) use batch::explore;

/// Who takes a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Actor {
    /// The handler performs the operation it is suspended on.
    Handler,
    /// The IOMMU performs the next post of the non-urgent device: with vector choices,
    /// the one at this index of [`ExploreConfig::post_choices`].
    Iommu(u8),
    /// The IOMMU performs the next post of the device whose IRTE has URG set.
    IommuUrg,
    /// The other CPU's next SN step.
    SnCpu,
    /// The APIC delivers the pending notification and the handler starts.
    Apic,
    /// The handler CPU's store buffer writes its oldest store (x86-TSO).
    StoreBuffer,
    /// The IRQ core's next retrigger: an IPI of the device vector itself.
    IrqCore,
    /// The APIC delivers the retriggered vector and its IDT entry starts.
    ApicIdt,
    /// The IOMMU updates a descriptor with the post whose IRTE it fetched.
    IommuSwap,
    /// The CPU changing the interrupt's affinity takes its next step.
    Migration,
}

/// Actors that are not posts, each at most once (see [`Explorer::enabled`]).
const OTHER_ACTORS: usize = 9;

/// The actors that may step in a state, in the order the search takes them. Kept
/// inline: the search asks twice per step, and a heap list was one allocation each.
#[derive(Clone, Copy)]
pub(super) struct Enabled {
    len: usize,
    actors: [Actor; OTHER_ACTORS + super::MAX_POST_CHOICES],
}

impl Default for Enabled {
    fn default() -> Self {
        Enabled {
            len: 0,
            actors: [Actor::Handler; OTHER_ACTORS + super::MAX_POST_CHOICES],
        }
    }
}

impl Enabled {
    fn push(&mut self, actor: Actor) {
        self.actors[self.len] = actor;
        self.len += 1;
    }
}

impl std::ops::Deref for Enabled {
    type Target = [Actor];
    fn deref(&self) -> &[Actor] {
        &self.actors[..self.len]
    }
}

impl Actor {
    fn name(self) -> &'static str {
        match self {
            Actor::Handler => "handler",
            Actor::Iommu(_) => "iommu",
            Actor::IommuUrg => "iommu-urg",
            Actor::SnCpu => "sn-cpu",
            Actor::Apic => "apic",
            Actor::StoreBuffer => "store-buffer",
            Actor::IrqCore => "irq-core",
            Actor::ApicIdt => "apic-idt",
            Actor::IommuSwap => "iommu-swap",
            Actor::Migration => "migration",
        }
    }
}

/// One step of the SN-changing CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SnStep {
    Set,
    Clear,
    Recheck,
}

fn sn_program(config: &ExploreConfig) -> Vec<SnStep> {
    let mut p = Vec::new();
    for i in 0..config.sn_toggles {
        if i % 2 == 0 {
            p.push(SnStep::Set);
        } else {
            p.push(SnStep::Clear);
            if config.sn_recheck {
                p.push(SnStep::Recheck);
            }
        }
    }
    p
}

/// A state of the search: the world and how far each hardware actor has got.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    world: World,
    next_post: u16,
    next_urg: u16,
    sn_step: u16,
    retriggers_sent: u16,
    /// A user's SN software: the results it has been given, and the operation it is
    /// suspended on (`None` once it has returned).
    sn_results: Vec<u64>,
    sn_next: Option<SnOp>,
    /// The previous step was the handler's (so switching away from it now preempts).
    last_was_handler: bool,
}

impl State {
    /// The state's identity in the visited set: a 128-bit XXH3 of its bytes. With
    /// `reduce`, the world contributes only what decides its future
    /// ([`World::hash_behaviour`]). `keep_last` includes the "previous step was the
    /// handler's" flag, which only a preemption bound reads: the reduced search
    /// keeps it only then, the full one also without a bound (so that it counts every
    /// distinct state) unless sleep sets need both orders of a handler step and
    /// another to meet in one state.
    fn fingerprint(&self, sink: &mut ByteSink, reduce: bool, keep_last: bool) -> Fingerprint {
        sink.0.clear();
        if !reduce {
            // The whole state: its encoding identifies it (the encoding is
            // prefix-free and ends with `last_was_handler`).
            self.pack(&mut sink.0);
            return State::fingerprint_packed(&sink.0, keep_last);
        }
        // Destructured in full, so that a new field must be placed here or left out
        // on purpose.
        let State {
            world,
            next_post,
            next_urg,
            sn_step,
            retriggers_sent,
            sn_results,
            sn_next,
            last_was_handler,
        } = self;
        world.hash_behaviour(sink);
        (next_post, next_urg, sn_step, retriggers_sent).hash(sink);
        (sn_results, sn_next).hash(sink);
        if keep_last {
            last_was_handler.hash(sink);
        }
        Fingerprint::of(&sink.0)
    }

    /// Becomes a copy of `src`, reusing this state's buffers.
    fn assign_from(&mut self, src: &State) {
        let State {
            world,
            next_post,
            next_urg,
            sn_step,
            retriggers_sent,
            sn_results,
            sn_next,
            last_was_handler,
        } = src;
        self.world.assign_from(world);
        self.next_post = *next_post;
        self.next_urg = *next_urg;
        self.sn_step = *sn_step;
        self.retriggers_sent = *retriggers_sent;
        self.sn_results.clone_from(sn_results);
        self.sn_next = *sn_next;
        self.last_was_handler = *last_was_handler;
    }

    /// The full (unreduced) fingerprint of a state from its [`Pack`] encoding, which
    /// ends with the one byte of `last_was_handler`.
    fn fingerprint_packed(bytes: &[u8], keep_last: bool) -> Fingerprint {
        let identity = if keep_last {
            bytes
        } else {
            &bytes[..bytes.len() - 1]
        };
        Fingerprint::of(identity)
    }
}

pack_struct!(State {
    world,
    next_post,
    next_urg,
    sn_step,
    retriggers_sent,
    sn_results,
    sn_next,
    // Last: the unreduced fingerprint leaves out this byte (`fingerprint_packed`).
    last_was_handler,
});

/// A [`Hasher`] that only collects the bytes it is fed, so that a state is hashed
/// once, by XXH3, over an unambiguous encoding (derived `Hash` writes lengths and
/// discriminants).
#[derive(Default)]
struct ByteSink(Vec<u8>);

impl Hasher for ByteSink {
    fn write(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }

    fn finish(&self) -> u64 {
        xxhash_rust::xxh3::xxh3_64(&self.0)
    }
}

/// Hashes a [`Fingerprint`] (already a uniform hash) by keeping its first word, so
/// the visited set does not hash it again.
#[derive(Default)]
struct FingerprintHasher(u64);

impl Hasher for FingerprintHasher {
    fn write(&mut self, bytes: &[u8]) {
        // Only fingerprints are hashed here; anything else still hashes well.
        self.0 = xxhash_rust::xxh3::xxh3_64_with_seed(bytes, self.0);
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = word;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A 128-bit fingerprint as two words: 8-byte aligned, so a set entry is 16 bytes,
/// where a `u128` key takes 32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fingerprint([u64; 2]);

impl Hash for Fingerprint {
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write_u64(self.0[0]);
    }
}

impl Fingerprint {
    fn of(bytes: &[u8]) -> Fingerprint {
        let fp = xxhash_rust::xxh3::xxh3_128(bytes);
        Fingerprint([fp as u64, (fp >> 64) as u64])
    }
}

type FpBuild = BuildHasherDefault<FingerprintHasher>;

/// How many tables the visited set is split into, by a byte of the fingerprint.
/// A hash table grows by allocating a table twice its size and moving every entry,
/// so one table of millions of fingerprints briefly holds one and a half times its
/// memory; a table of 256 shards grows one shard at a time.
const VISITED_SHARDS: usize = 256;

/// The fingerprints seen so far. Under a preemption bound each keeps the fewest
/// preemptions it was reached with; with sleep sets, the steps asleep on every path
/// it was reached by; otherwise nothing but the fingerprint.
struct Visited {
    shards: Shards,
    len: usize,
}

enum Shards {
    Unbounded(Vec<HashSet<Fingerprint, FpBuild>>),
    Bounded(Vec<HashMap<Fingerprint, u32, FpBuild>>),
    Sleeping(Vec<HashMap<SleepKey, u32, FpBuild>>),
}

/// A fingerprint cut to 96 bits, so that with its 32-bit sleep set an entry is still
/// 16 bytes. The shard byte is among the bits kept; with 10^8 states the chance that
/// two collide is below 10^-12.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SleepKey([u32; 3]);

impl SleepKey {
    fn of(fp: Fingerprint) -> SleepKey {
        let [a, b] = fp.0;
        SleepKey([a as u32, (a >> 32) as u32, (b >> 32) as u32])
    }
}

impl Hash for SleepKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write_u64(u64::from(self.0[0]) | (u64::from(self.0[1]) << 32));
    }
}

/// What the visited set says of a state reached with a sleep set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Admission {
    /// Not seen before: explore it.
    New,
    /// Seen, and every step awake now was taken from it before.
    Known,
    /// Seen, but the steps `woken` were asleep on every path to it so far and are
    /// awake on this one: take them, with the steps asleep on all its paths now
    /// (`asleep`) as their siblings' (Godefroid 1996, 6.2). Under a preemption bound:
    /// reached with fewer preemptions, so everything again.
    Reopen { woken: u32, asleep: u32 },
}

/// One shard of the visited set.
enum ShardMut<'a> {
    Unbounded(&'a mut HashSet<Fingerprint, FpBuild>),
    Bounded(&'a mut HashMap<Fingerprint, u32, FpBuild>),
    Sleeping(&'a mut HashMap<SleepKey, u32, FpBuild>),
}

impl ShardMut<'_> {
    /// [`Visited::admit`] within this shard (which must be `fp`'s).
    fn admit(&mut self, fp: Fingerprint, preemptions: u32, asleep: u32) -> Admission {
        match self {
            ShardMut::Unbounded(set) => {
                if set.insert(fp) {
                    Admission::New
                } else {
                    Admission::Known
                }
            }
            ShardMut::Bounded(map) => match map.entry(fp) {
                Entry::Occupied(mut best) if *best.get() > preemptions => {
                    best.insert(preemptions);
                    // Everything again: more of its future fits in the bound.
                    Admission::Reopen {
                        woken: u32::MAX,
                        asleep: 0,
                    }
                }
                Entry::Occupied(_) => Admission::Known,
                Entry::Vacant(slot) => {
                    slot.insert(preemptions);
                    Admission::New
                }
            },
            ShardMut::Sleeping(map) => match map.entry(SleepKey::of(fp)) {
                Entry::Occupied(mut slept) => {
                    let woken = *slept.get() & !asleep;
                    if woken == 0 {
                        Admission::Known
                    } else {
                        *slept.get_mut() &= asleep;
                        Admission::Reopen {
                            woken,
                            asleep: *slept.get(),
                        }
                    }
                }
                Entry::Vacant(slot) => {
                    slot.insert(asleep);
                    Admission::New
                }
            },
        }
    }
}

impl Visited {
    fn new(bounded: bool, sleeping: bool) -> Visited {
        let shards = if bounded {
            Shards::Bounded((0..VISITED_SHARDS).map(|_| HashMap::default()).collect())
        } else if sleeping {
            Shards::Sleeping((0..VISITED_SHARDS).map(|_| HashMap::default()).collect())
        } else {
            Shards::Unbounded((0..VISITED_SHARDS).map(|_| HashSet::default()).collect())
        };
        Visited { shards, len: 0 }
    }

    /// The shard of `fp`: from the second word, which the tables do not hash by, so
    /// the entries of one shard still spread over all of its buckets.
    fn shard(fp: Fingerprint) -> usize {
        (fp.0[1] >> 56) as usize % VISITED_SHARDS
    }

    /// Records a state reached with `preemptions` and, with sleep sets, the steps
    /// `asleep` on the path that reached it.
    fn admit(&mut self, fp: Fingerprint, preemptions: u32, asleep: u32) -> Admission {
        let shard = Visited::shard(fp);
        let admission = match &mut self.shards {
            Shards::Unbounded(sets) => ShardMut::Unbounded(&mut sets[shard]),
            Shards::Bounded(maps) => ShardMut::Bounded(&mut maps[shard]),
            Shards::Sleeping(maps) => ShardMut::Sleeping(&mut maps[shard]),
        }
        .admit(fp, preemptions, asleep);
        self.len += usize::from(admission == Admission::New);
        admission
    }

    /// Every shard, in order, to admit into from several threads at once (each shard
    /// in one thread); the caller then adds the new states with
    /// [`add_new`](Self::add_new).
    fn shards_mut(&mut self) -> Vec<ShardMut<'_>> {
        match &mut self.shards {
            Shards::Unbounded(sets) => sets.iter_mut().map(ShardMut::Unbounded).collect(),
            Shards::Bounded(maps) => maps.iter_mut().map(ShardMut::Bounded).collect(),
            Shards::Sleeping(maps) => maps.iter_mut().map(ShardMut::Sleeping).collect(),
        }
    }

    /// Counts `n` states admitted through [`shards_mut`](Self::shards_mut) as new.
    fn add_new(&mut self, n: usize) {
        self.len += n;
    }

    fn len(&self) -> usize {
        self.len
    }
}

/// Re-runs `handler` from its start with `results` (the last one answering
/// `performed`) and returns where it stops next. Fails if the handler does not ask for
/// the same operation again: the explorer relies on handlers being deterministic.
fn advance_handler(
    handler: &dyn PirHandler,
    entry: Option<(Vector, PostedMsiAck)>,
    results: &[u64],
    performed: CpuOp,
) -> Result<Step<CpuOp>, Violation> {
    let mut co = entry_coroutine(handler, entry);
    let mut step = co.resume(None);
    let (last, earlier) = results.split_last().expect("at least one result");
    for r in earlier {
        if step == Step::Done {
            break;
        }
        step = co.resume(Some(*r));
    }
    if step != Step::Request(performed) {
        return Err(Violation {
            invariant: Invariant::HandlerContract,
            detail: format!(
                "handler is not deterministic: given the same results it asked for {step:?} \
                 where it had asked for {performed:?}"
            ),
        });
    }
    Ok(co.resume(Some(*last)))
}

/// Where the handler stops after each history it has been replayed through, so that a
/// history reached again (most are: many interleavings of the other actors share one
/// handler history) is looked up rather than re-run. Sound because the explorer already
/// requires handlers to be deterministic in their results; only successful replays are
/// kept, so a nondeterministic handler is still caught the first time.
#[derive(Default)]
struct HandlerMemo {
    /// Histories by a hash of (entry, performed operation, results); the bucket holds
    /// every history with that hash, compared in full.
    by_hash: HashMap<u64, Vec<Replayed>>,
    /// Histories held, which [`HandlerMemo::MAX_HISTORIES`] bounds.
    held: usize,
}

struct Replayed {
    entry: Option<(Vector, PostedMsiAck)>,
    performed: CpuOp,
    results: Box<[u64]>,
    next: Step<CpuOp>,
}

impl HandlerMemo {
    /// Histories kept before the memo starts again empty. Large searches meet millions
    /// of distinct histories (the results carry PIR words): keeping them all took the
    /// 11-million-state `rfc --posts 6` search of the README from 441 to 1,410 MB peak
    /// RSS, 65,536 to 598 MB, 4,096 to 448 MB (2026-12-05), while a 74,054-state search
    /// kept its speed. The histories that repeat are those of the states being expanded
    /// now, which a memo of this size still holds.
    const MAX_HISTORIES: usize = 1 << 12;

    fn advance(
        &mut self,
        handler: &dyn PirHandler,
        entry: Option<(Vector, PostedMsiAck)>,
        results: &[u64],
        performed: CpuOp,
    ) -> Result<Step<CpuOp>, Violation> {
        if self.held >= Self::MAX_HISTORIES {
            self.by_hash.clear();
            self.held = 0;
        }
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (entry, performed, results).hash(&mut hasher);
        let bucket = self.by_hash.entry(hasher.finish()).or_default();
        if let Some(hit) = bucket
            .iter()
            .find(|r| r.entry == entry && r.performed == performed && *r.results == *results)
        {
            return Ok(hit.next);
        }
        let next = advance_handler(handler, entry, results, performed)?;
        bucket.push(Replayed {
            entry,
            performed,
            results: results.into(),
            next,
        });
        self.held += 1;
        Ok(next)
    }
}

/// Starts a fresh entry (of `handler`, or the IDT flow of a retriggered vector) and
/// returns its first suspension.
fn start_handler(handler: &dyn PirHandler, entry: Option<(Vector, PostedMsiAck)>) -> Step<CpuOp> {
    entry_coroutine(handler, entry).resume(None)
}

struct Explorer<'a> {
    handler: &'a dyn PirHandler,
    sn_software: Option<&'a dyn SnSoftware>,
    config: &'a ExploreConfig,
    sn: Vec<SnStep>,
    checks: u64,
    handler_memo: HandlerMemo,
}

/// What applying one step produced: the state after it (after the failing part, if it
/// failed), what it did, and whether an invariant failed.
struct Applied {
    state: State,
    notes: Vec<StepNote>,
    /// Read by the tests; the search itself steps with [`Explorer::apply_into`].
    #[cfg_attr(not(test), allow(dead_code))]
    violation: Option<Violation>,
}

impl<'a> Explorer<'a> {
    fn new(
        handler: &'a dyn PirHandler,
        sn_software: Option<&'a dyn SnSoftware>,
        config: &'a ExploreConfig,
    ) -> Explorer<'a> {
        Explorer {
            handler,
            sn_software,
            config,
            sn: sn_program(config),
            checks: 0,
            handler_memo: HandlerMemo::default(),
        }
    }

    fn enabled(&self, s: &State) -> Enabled {
        let w = &s.world;
        let mut out = Enabled::default();
        if w.handler_can_step() {
            out.push(Actor::Handler);
        }
        if !w.store_buffer.is_empty() {
            out.push(Actor::StoreBuffer);
        }
        if (s.next_post as usize) < self.config.posts.len() && w.fetched.is_none() {
            let choices = self.config.post_choices.len().max(1);
            // At most MAX_POST_CHOICES (validated), so the index fits.
            for k in 0..choices {
                out.push(Actor::Iommu(k as u8));
            }
        }
        if (s.next_urg as usize) < self.config.urg_posts.len() {
            out.push(Actor::IommuUrg);
        }
        if self.sn_software.is_some() {
            if s.sn_next.is_some() {
                out.push(Actor::SnCpu);
            }
        } else if (s.sn_step as usize) < self.sn.len() {
            out.push(Actor::SnCpu);
        }
        if w.can_deliver() && w.entries < self.config.entries {
            out.push(Actor::Apic);
        }
        if u32::from(s.retriggers_sent) < self.config.retriggers {
            out.push(Actor::IrqCore);
        }
        if w.can_deliver_retriggered() {
            out.push(Actor::ApicIdt);
        }
        if w.fetched.is_some() {
            out.push(Actor::IommuSwap);
        }
        if w.migration_can_step() {
            out.push(Actor::Migration);
        }
        out
    }

    /// What `actor`'s next step in `s` reads and writes (see [`super::por`]).
    fn footprint(&self, s: &State, actor: Actor) -> Footprint {
        let c = self.config;
        let post_vector = match actor {
            Actor::Iommu(k) if !c.post_choices.is_empty() => {
                c.post_choices.get(usize::from(k)).copied()
            }
            Actor::Iommu(_) => c.posts.get(usize::from(s.next_post)).copied(),
            Actor::IommuUrg => c.urg_posts.get(usize::from(s.next_urg)).copied(),
            _ => None,
        };
        let cx = StepContext {
            memory_model: c.memory_model,
            migrating: c.migration.is_some(),
            sn_software: self.sn_software.is_some(),
            sn_next: self.sn.get(usize::from(s.sn_step)).copied(),
            post_vector,
        };
        footprint(&s.world, actor, &cx)
    }

    fn apply(&mut self, s: &State, actor: Actor) -> Applied {
        let mut n = s.clone();
        let mut notes = Vec::new();
        let violation = self.apply_into(s, actor, &mut n, &mut notes);
        Applied {
            state: n,
            notes,
            violation,
        }
    }

    /// [`Explorer::apply`] into `n`, which must hold a copy of `s` (the search keeps
    /// one state and one list of notes for every step it takes, so that a step
    /// allocates nothing it has allocated before).
    fn apply_into(
        &mut self,
        s: &State,
        actor: Actor,
        n: &mut State,
        notes: &mut Vec<StepNote>,
    ) -> Option<Violation> {
        let r = self.step(n, actor, notes);
        // The store buffer is the handler CPU's own hardware: draining it neither
        // preempts the handler nor resumes it.
        n.last_was_handler = match actor {
            Actor::Handler => true,
            Actor::StoreBuffer => s.last_was_handler,
            _ => false,
        };
        r.err()
    }

    fn step(
        &mut self,
        n: &mut State,
        actor: Actor,
        notes: &mut Vec<StepNote>,
    ) -> Result<(), Violation> {
        let checks = &mut self.checks;
        let max_ops = self.config.max_handler_ops;
        match actor {
            Actor::Handler => {
                let op = n.world.run.as_ref().expect("handler enabled").pending;
                let (_, note) = n.world.handler_op(op, checks)?;
                keep(notes, note);
                let run = n.world.run.as_ref().expect("still running");
                let entry = run.retriggered.map(|v| (v, self.config.posted_msi_ack));
                let step = self
                    .handler_memo
                    .advance(self.handler, entry, &run.results, op)?;
                if let Some(note) = n.world.handler_next(step, max_ops, checks)? {
                    keep(notes, note);
                }
            }
            Actor::Iommu(_) | Actor::IommuUrg => {
                let (list, idx, urg) = if actor == Actor::IommuUrg {
                    (&self.config.urg_posts, &mut n.next_urg, true)
                } else {
                    (&self.config.posts, &mut n.next_post, false)
                };
                let vector = match actor {
                    Actor::Iommu(k) if !self.config.post_choices.is_empty() => {
                        self.config.post_choices[usize::from(k)]
                    }
                    _ => list[*idx as usize],
                };
                *idx += 1;
                if !urg && n.world.migrated == Some(vector) {
                    // A post of the migrating vector: the IRTE fetch now, the
                    // descriptor update as a step of its own.
                    keep(notes, n.world.fetch_irte(vector));
                } else {
                    let (sent, note) = n.world.post(vector, urg, checks)?;
                    keep(notes, note);
                    if sent {
                        keep(notes, n.world.notification_arrives());
                    }
                }
            }
            Actor::IommuSwap => {
                let (sent, note) = n.world.swap_fetched(checks)?;
                keep(notes, note);
                if sent {
                    keep(notes, n.world.notification_arrives());
                }
            }
            Actor::Migration => keep(notes, n.world.migration_step()),
            Actor::SnCpu if self.sn_software.is_some() => {
                let sw = self.sn_software.expect("guarded");
                let op = n.sn_next.expect("enabled only while it runs");
                let (result, sent, note) = n.world.sn_op(op, checks)?;
                keep(notes, note);
                if sent {
                    keep(notes, n.world.notification_arrives());
                }
                n.sn_results.push(result);
                n.sn_next = match advance_sn(sw, self.config.sn_toggles, &n.sn_results, Some(op))? {
                    Step::Request(next) => Some(next),
                    Step::Done => None,
                };
                n.world.set_sn_running(n.sn_next.is_some());
            }
            Actor::SnCpu => {
                let step = self.sn[n.sn_step as usize];
                n.sn_step += 1;
                match step {
                    SnStep::Set => keep(notes, n.world.set_sn(true, false, checks)?),
                    SnStep::Clear => {
                        let recheck = self.config.sn_recheck;
                        keep(notes, n.world.set_sn(false, recheck, checks)?);
                    }
                    SnStep::Recheck => {
                        let (sent, note) = n.world.sn_recheck();
                        keep(notes, note);
                        if sent {
                            keep(notes, n.world.notification_arrives());
                        }
                    }
                }
            }
            Actor::StoreBuffer => n
                .world
                .drain_one(checks)?
                .into_iter()
                .for_each(|note| keep(notes, note)),
            Actor::Apic => {
                keep(notes, n.world.deliver());
                let step = start_handler(self.handler, None);
                if let Some(note) = n.world.handler_next(step, max_ops, checks)? {
                    keep(notes, note);
                }
            }
            Actor::IrqCore => {
                n.retriggers_sent += 1;
                keep(
                    notes,
                    n.world.retrigger_arrives(self.config.retrigger_vector),
                );
            }
            Actor::ApicIdt => {
                let vector = self.config.retrigger_vector;
                keep(notes, n.world.deliver_retriggered(vector));
                let step = start_handler(self.handler, Some((vector, self.config.posted_msi_ack)));
                if let Some(note) = n.world.handler_next(step, max_ops, checks)? {
                    keep(notes, note);
                }
            }
        }
        n.world.check_nothing_lost(checks)
    }
}

/// A node of the search tree, kept to rebuild the path to a violation.
#[derive(Clone, Copy)]
struct Node {
    parent: u32,
    actor: Actor,
}

const ROOT: u32 = u32::MAX;

/// The state every search starts from.
fn initial_state(sn_software: Option<&dyn SnSoftware>, config: &ExploreConfig) -> State {
    let mut world = World::with_memory_model(config.memory_model);
    if let Some(cleanup) = config.migration {
        world.migrated = config.migrated_vector();
        world.cleanup = cleanup;
    }
    let sn_next = match sn_software {
        Some(sw) => match advance_sn(sw, config.sn_toggles, &[], None) {
            Ok(Step::Request(op)) => Some(op),
            _ => None,
        },
        None => None,
    };
    world.set_sn_running(sn_next.is_some());
    State {
        sn_results: Vec::new(),
        sn_next,
        world,
        next_post: 0,
        next_urg: 0,
        sn_step: 0,
        retriggers_sent: 0,
        last_was_handler: false,
    }
}

/// Adds what a step did, unless it said nothing (a quiet thread, see
/// [`super::model::quiet`]): a step then allocates no note list at all.
fn keep(notes: &mut Vec<StepNote>, note: StepNote) {
    if !note.is_silent() {
        notes.push(note);
    }
}

/// Rebuilds the path from the root to the step by `actor` from node `parent`, replays
/// it to record what each step did, and attaches the violation.
fn counterexample(
    ex: &Explorer<'_>,
    initial: &State,
    nodes: &[Node],
    parent: u32,
    actor: Actor,
    violation: Violation,
    at_quiescence: bool,
) -> Counterexample {
    let mut path = vec![actor];
    let mut cur = parent;
    while cur != ROOT {
        let n = nodes[cur as usize];
        path.push(n.actor);
        cur = n.parent;
    }
    path.reverse();
    // Replay with a private checker so the report's counts are unaffected.
    let mut replay = Explorer::new(ex.handler, ex.sn_software, ex.config);
    let mut state = initial.clone();
    let mut steps = Vec::with_capacity(path.len());
    for (i, a) in path.iter().enumerate() {
        let attempted = match (&state.world.run, a) {
            (Some(run), Actor::Handler) => Some(StepNote(op_text(run.pending))),
            _ => None,
        };
        let mut applied = replay.apply(&state, *a);
        if applied.notes.is_empty() {
            applied.notes.extend(attempted);
        }
        steps.push(trace_step(i + 1, *a, &applied.notes, &applied.state));
        state = applied.state;
    }
    Counterexample {
        invariant: violation.invariant,
        detail: violation.detail,
        at_quiescence,
        steps,
    }
}

/// An operation in words, for a step that failed before it could say what it returned.
fn op_text(op: CpuOp) -> String {
    match op {
        CpuOp::LoadPir { word } => format!("load PIR[{word}]"),
        CpuOp::XchgPir { word, value } => format!("xchg PIR[{word}] <- {value:#x}"),
        CpuOp::ClearOn => "clear ON".into(),
        CpuOp::TestAndClearOn => "test-and-clear ON".into(),
        CpuOp::HandleVector(v) => format!("handle vector {v}"),
        CpuOp::Eoi => "EOI".into(),
        CpuOp::StorePir { word, value } => format!("store PIR[{word}] <- {value:#x}"),
        CpuOp::StoreClearOn => "store ON=0".into(),
        CpuOp::Mfence => "mfence".into(),
    }
}

fn trace_step(n: usize, actor: Actor, notes: &[StepNote], state: &State) -> TraceStep {
    let text: Vec<&str> = notes.iter().map(|s| s.0.as_str()).collect();
    TraceStep {
        n: n as u32,
        actor: actor.name().to_string(),
        action: if text.is_empty() {
            "(no effect)".to_string()
        } else {
            text.join("; ")
        },
        after: state.world.snapshot(),
    }
}

/// Default vectors of the non-urgent posts, used in order: word 0, word 1, word 0
/// again (a repeat can merge), then words 2 and 3.
pub const DEFAULT_POST_VECTORS: [Vector; 6] = [
    Vector(0x21),
    Vector(0x61),
    Vector(0x21),
    Vector(0xa1),
    Vector(0x22),
    Vector(0xe1),
];

/// Default vectors of the urgent posts.
pub const DEFAULT_URG_VECTORS: [Vector; 3] = [Vector(0x41), Vector(0x81), Vector(0x42)];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explore::frontier::ByteQueue;
    use crate::explore::pack::unpack_all;
    use crate::explore::{ExploreResult, MemoryModel};
    use crate::kernel::posted_msi::variant_by_name;

    /// The reduced fingerprints of every state a search reaches: deduplicated by the
    /// full state when `by_reduced` is false, by the reduced fingerprint when true.
    /// A step that breaks an invariant ends its path and adds a mark of its own
    /// (`violation_mark`), so merging states whose futures break different invariants
    /// shows too. Preemption bounds are not used.
    fn reachable_classes(
        handler: &dyn PirHandler,
        sn_software: Option<&dyn SnSoftware>,
        config: &ExploreConfig,
        by_reduced: bool,
    ) -> HashSet<Fingerprint> {
        let mut ex = Explorer::new(handler, sn_software, config);
        let mut sink = ByteSink::default();
        let initial = initial_state(sn_software, config);
        let mut seen = HashSet::new();
        let mut classes = HashSet::new();
        let mut todo = vec![initial];
        while let Some(s) = todo.pop() {
            let class = s.fingerprint(&mut sink, true, false);
            let key = if by_reduced {
                class
            } else {
                s.fingerprint(&mut sink, false, true)
            };
            if !seen.insert(key) {
                continue;
            }
            classes.insert(class);
            let enabled = ex.enabled(&s);
            if enabled.is_empty() {
                if let Err(v) = s.world.check_quiescent(&mut ex.checks) {
                    classes.insert(violation_mark(class, None, &v));
                }
            }
            for &actor in enabled.iter() {
                let applied = ex.apply(&s, actor);
                match &applied.violation {
                    None => todo.push(applied.state),
                    Some(v) => {
                        classes.insert(violation_mark(class, Some(actor), v));
                    }
                }
            }
        }
        classes
    }

    /// The partial-order reduction's premise, checked in every reachable state of
    /// small searches: two enabled steps whose footprints are independent leave each
    /// other enabled, break the same invariants in either order, and end in the same
    /// state (the search's identity without the reduction).
    fn assert_independent_steps_commute(
        handler: &dyn PirHandler,
        sn_software: Option<&dyn SnSoftware>,
        config: &ExploreConfig,
    ) -> u64 {
        let mut ex = Explorer::new(handler, sn_software, config);
        let mut sink = ByteSink::default();
        let mut seen = HashSet::new();
        let mut todo = vec![initial_state(sn_software, config)];
        let mut pairs = 0;
        let invariant = |a: &Applied| a.violation.as_ref().map(|v| v.invariant);
        // A failure of the step itself, not of the state it left (the state after a
        // failed step is the one after its failing part).
        let step_failure = |a: &Applied| {
            let state_ok = a.state.world.check_nothing_lost(&mut 0).is_ok();
            a.violation
                .as_ref()
                .filter(|_| state_ok)
                .map(|v| v.invariant)
        };
        while let Some(s) = todo.pop() {
            if !seen.insert(s.fingerprint(&mut sink, false, false)) {
                continue;
            }
            let enabled = ex.enabled(&s);
            for (i, &a) in enabled.iter().enumerate() {
                let sa = ex.apply(&s, a);
                for &b in &enabled[i + 1..] {
                    if !ex.footprint(&s, a).independent(&ex.footprint(&s, b)) {
                        continue;
                    }
                    pairs += 1;
                    let sb = ex.apply(&s, b);
                    let at = format!("{a:?} and {b:?} in {:?}", s.world);
                    if sa.violation.is_some() || sb.violation.is_some() {
                        // A broken "nothing lost" rule is the state's: the state is
                        // reached either way. A failure of the step itself must come
                        // back when it is taken after the other.
                        if sb.violation.is_none() && step_failure(&sa).is_some() {
                            assert_eq!(
                                step_failure(&ex.apply(&sb.state, a)),
                                step_failure(&sa),
                                "{at}"
                            );
                        }
                        if sa.violation.is_none() && step_failure(&sb).is_some() {
                            assert_eq!(
                                step_failure(&ex.apply(&sa.state, b)),
                                step_failure(&sb),
                                "{at}"
                            );
                        }
                        continue;
                    }
                    assert!(ex.enabled(&sa.state).contains(&b), "{at}: disables");
                    assert!(ex.enabled(&sb.state).contains(&a), "{at}: disables");
                    let (ab, ba) = (ex.apply(&sa.state, b), ex.apply(&sb.state, a));
                    assert_eq!(invariant(&ab), invariant(&ba), "{at}");
                    if ab.violation.is_none() {
                        assert_eq!(
                            ab.state.fingerprint(&mut sink, false, false),
                            ba.state.fingerprint(&mut sink, false, false),
                            "{at}: the orders end in different states"
                        );
                    }
                }
                if sa.violation.is_none() {
                    todo.push(sa.state);
                }
            }
        }
        pairs
    }

    #[test]
    fn steps_called_independent_commute_in_every_reachable_state() {
        use crate::kernel::migration::MigrationCleanup;
        use crate::kernel::retrigger::PostedMsiAck;
        use crate::kernel::VARIANT_NAMES;
        let small = || ExploreConfig::with_counts(2, 2).urgent(1).sn_toggles(3);
        let mut configs = vec![
            small(),
            small().memory_model(MemoryModel::Tso),
            small().retriggers(1, Vector(0x21), PostedMsiAck::MoveIrqOnly),
            small().migrate(MigrationCleanup::IrrOnly),
            small().any_of(vec![Vector(0x21), Vector(0x22), Vector(0x61)]),
        ];
        let mut no_recheck = small();
        no_recheck.sn_recheck = false;
        configs.push(no_recheck);
        let rfc = variant_by_name("rfc", 8).unwrap();
        let mut pairs =
            assert_independent_steps_commute(rfc.as_ref(), None, &ExploreConfig::default());
        for name in VARIANT_NAMES {
            let handler = variant_by_name(name, 8).unwrap();
            for config in &configs {
                pairs += assert_independent_steps_commute(handler.as_ref(), None, config);
            }
        }
        assert!(pairs > 100_000, "only {pairs} independent pairs checked");
    }

    /// A violation seen from a class, as one more member of the reachable set: the
    /// class, the step that broke the invariant (`None`: at quiescence) and which.
    fn violation_mark(class: Fingerprint, actor: Option<Actor>, v: &Violation) -> Fingerprint {
        let mut sink = ByteSink::default();
        (class.0, actor, v.invariant).hash(&mut sink);
        Fingerprint::of(&sink.0)
    }

    /// The reduction is exact if states it identifies have the same futures up to
    /// identification: then a search that prunes by it reaches exactly the classes the
    /// full search reaches. A reduction that merged states with different futures
    /// (leaving ON out, say) prunes some of them and reaches fewer.
    #[test]
    fn the_reduced_search_reaches_every_class_the_full_search_reaches() {
        let v21 = Vector(0x21);
        let small = || ExploreConfig::with_counts(3, 2).urgent(1).sn_toggles(2);
        let mut configs = vec![
            small(),
            small().memory_model(MemoryModel::Tso),
            small().retriggers(1, v21, crate::kernel::retrigger::PostedMsiAck::MoveIrqOnly),
            small().migrate(crate::kernel::migration::MigrationCleanup::IrrOnly),
            small().any_of(vec![v21, Vector(0x61), Vector(0x22)]),
        ];
        let mut no_recheck = small();
        no_recheck.sn_recheck = false;
        configs.push(no_recheck);
        for name in [
            "copy-then-xchg",
            "rfc",
            "no-final-recheck",
            "plain-clear-on",
        ] {
            let h = variant_by_name(name, 3).unwrap();
            for c in &configs {
                let full = reachable_classes(h.as_ref(), None, c, false);
                let reduced = reachable_classes(h.as_ref(), None, c, true);
                assert_eq!(full.len(), reduced.len(), "{name} {c:?}");
                assert!(full == reduced, "{name} {c:?}");
            }
        }
        let sw = crate::kernel::sn::sn_software_by_name("recheck").unwrap();
        let h = variant_by_name("rfc", 3).unwrap();
        let c = small();
        assert!(
            reachable_classes(h.as_ref(), Some(sw.as_ref()), &c, false)
                == reachable_classes(h.as_ref(), Some(sw.as_ref()), &c, true)
        );
    }

    /// The frontier keeps states only as bytes, so a state that did not decode to
    /// itself would send the search down a path that does not exist. Checked on every
    /// state of small searches that reach the store buffer, migration, retriggers,
    /// vector choice and user SN software.
    #[test]
    fn every_reachable_state_survives_the_frontiers_encoding() {
        let v21 = Vector(0x21);
        let small = || ExploreConfig::with_counts(3, 2).urgent(1).sn_toggles(2);
        let configs = [
            small().memory_model(MemoryModel::Tso),
            small().retriggers(1, v21, crate::kernel::retrigger::PostedMsiAck::MoveIrqOnly),
            small().migrate(crate::kernel::migration::MigrationCleanup::IrrOnly),
            small().any_of(vec![v21, Vector(0x61), Vector(0x22)]),
        ];
        let sw = crate::kernel::sn::sn_software_by_name("recheck").unwrap();
        for name in ["copy-then-xchg", "plain-clear-on"] {
            let h = variant_by_name(name, 3).unwrap();
            for (c, sn) in configs
                .iter()
                .map(|c| (c, None))
                .chain([(&configs[0], Some(sw.as_ref()))])
            {
                let mut ex = Explorer::new(h.as_ref(), sn, c);
                let mut sink = ByteSink::default();
                let mut seen = HashSet::new();
                let mut todo = vec![initial_state(sn, c)];
                let mut checked = 0;
                while let Some(s) = todo.pop() {
                    if !seen.insert(s.fingerprint(&mut sink, false, false)) {
                        continue;
                    }
                    // As the search queues it: encoded by a worker, framed by the
                    // queue, decoded by another worker.
                    let mut bytes = Vec::new();
                    s.pack(&mut bytes);
                    let mut q = ByteQueue::new();
                    q.push_framed(&(7u32, 8u32), &bytes);
                    let mut body = Vec::new();
                    assert_eq!(q.pop_framed::<(u32, u32)>(&mut body), Some((7, 8)));
                    let back: State = unpack_all(&body).unwrap();
                    assert_eq!(back, s, "{name} {c:?}");
                    checked += 1;
                    for &actor in ex.enabled(&s).iter() {
                        let applied = ex.apply(&s, actor);
                        if applied.violation.is_none() {
                            todo.push(applied.state);
                        }
                    }
                }
                assert!(checked > 100, "{name} {c:?}: only {checked} states");
            }
        }
    }

    #[test]
    fn sn_program_alternates_and_rechecks_after_each_clear() {
        let c = ExploreConfig::with_counts(1, 1).sn_toggles(3);
        assert_eq!(
            sn_program(&c),
            vec![SnStep::Set, SnStep::Clear, SnStep::Recheck, SnStep::Set]
        );
    }

    #[test]
    fn replay_reaches_the_same_point() {
        let h = variant_by_name("copy-then-xchg", 3).unwrap();
        assert_eq!(
            start_handler(h.as_ref(), None),
            Step::Request(CpuOp::LoadPir { word: 0 })
        );
        let step = advance_handler(h.as_ref(), None, &[1 << 0x21], CpuOp::LoadPir { word: 0 });
        assert_eq!(step.unwrap(), Step::Request(CpuOp::LoadPir { word: 1 }));
        // A result history that does not match the recorded operation is rejected.
        let err = advance_handler(h.as_ref(), None, &[0, 0], CpuOp::ClearOn).unwrap_err();
        assert_eq!(err.invariant, Invariant::HandlerContract);
    }

    #[test]
    fn the_handler_memo_answers_as_a_replay_does_and_keys_on_the_whole_history() {
        let h = variant_by_name("copy-then-xchg", 3).unwrap();
        let mut memo = HandlerMemo::default();
        let word0 = CpuOp::LoadPir { word: 0 };
        // Three histories that differ only in one part of the key: the entry, the
        // result, or the operation performed.
        let retriggered = Some((Vector(0x21), PostedMsiAck::EoiIfInactive));
        type History<'r> = (Option<(Vector, PostedMsiAck)>, &'r [u64], CpuOp);
        let histories: [History; 4] = [
            (None, &[1 << 0x21], word0),
            (None, &[0], word0),
            // The IDT flow of a retriggered vector does not start with a PIR load.
            (retriggered, &[0], word0),
            (retriggered, &[0], CpuOp::Eoi),
        ];
        for _ in 0..2 {
            for (entry, results, op) in histories {
                let replayed = advance_handler(h.as_ref(), entry, results, op);
                let remembered = memo.advance(h.as_ref(), entry, results, op);
                assert_eq!(
                    remembered.map_err(|e| e.invariant),
                    replayed.map_err(|e| e.invariant),
                    "{entry:?} {results:?} {op:?}"
                );
            }
        }
        // A history the handler does not follow is still rejected, and stays rejected.
        for _ in 0..2 {
            let err = memo
                .advance(h.as_ref(), None, &[0, 0], CpuOp::ClearOn)
                .unwrap_err();
            assert_eq!(err.invariant, Invariant::HandlerContract);
        }
    }

    #[test]
    fn the_handler_memo_stays_bounded_and_still_answers_after_it_starts_again() {
        let h = variant_by_name("copy-then-xchg", 3).unwrap();
        let mut memo = HandlerMemo::default();
        let word0 = CpuOp::LoadPir { word: 0 };
        for word in 0..HandlerMemo::MAX_HISTORIES as u64 + 10 {
            let results = [word << 32];
            let remembered = memo.advance(h.as_ref(), None, &results, word0);
            assert!(memo.held <= HandlerMemo::MAX_HISTORIES);
            if word % 4096 == 0 {
                let replayed = advance_handler(h.as_ref(), None, &results, word0);
                assert_eq!(remembered.ok(), replayed.ok());
            }
        }
        assert_eq!(memo.held, 10, "emptied once, then refilled");
    }

    #[test]
    fn equal_states_share_a_fingerprint_and_differing_ones_do_not() {
        let s = State {
            world: World::new(),
            next_post: 0,
            next_urg: 0,
            sn_step: 0,
            retriggers_sent: 0,
            sn_results: Vec::new(),
            sn_next: None,
            last_was_handler: false,
        };
        let mut sink = ByteSink::default();
        let mut fp =
            |x: &State, reduce: bool, keep_last: bool| x.fingerprint(&mut sink, reduce, keep_last);
        for (reduce, keep_last) in [(false, false), (false, true), (true, false), (true, true)] {
            let mut t = s.clone();
            assert_eq!(fp(&s, reduce, keep_last), fp(&t, reduce, keep_last));
            t.next_post = 1;
            assert_ne!(fp(&s, reduce, keep_last), fp(&t, reduce, keep_last));
            let mut u = s.clone();
            u.retriggers_sent = 1;
            assert_ne!(fp(&s, reduce, keep_last), fp(&u, reduce, keep_last));
        }
        // The full identity is the state's whole encoding, the bytes the frontier
        // queues it as; without `keep_last`, all but its last byte.
        let mut whole = Vec::new();
        s.pack(&mut whole);
        assert_eq!(fp(&s, false, true), Fingerprint::of(&whole));
        assert_eq!(
            fp(&s, false, false),
            Fingerprint::of(&whole[..whole.len() - 1])
        );
        assert_eq!(fp(&s, false, true), State::fingerprint_packed(&whole, true));
        // The reduction identifies states that differ only in counts nothing reads...
        let mut counted = s.clone();
        counted.world.notifications = 7;
        counted.world.posts_to_new_cpu = 2;
        assert_eq!(fp(&s, true, false), fp(&counted, true, false));
        assert_ne!(fp(&s, false, false), fp(&counted, false, false));
        // ...and keeps posts minus handler calls, which the invariants read.
        let mut a = s.clone();
        let mut b = s.clone();
        for (w, posted, handled) in [(&mut a.world, 2, 1), (&mut b.world, 3, 2)] {
            w.ledger.push(super::super::model::VectorCount {
                vector: Vector(0x21),
                posted,
                handled,
                unserved: false,
            });
        }
        assert_eq!(fp(&a, true, false), fp(&b, true, false));
        assert_ne!(fp(&a, false, false), fp(&b, false, false));
        b.world.ledger[0].handled = 3;
        assert_ne!(fp(&a, true, false), fp(&b, true, false));
        // Whether the handler took the last step is kept only when asked for.
        let mut last = s.clone();
        last.last_was_handler = true;
        for reduce in [false, true] {
            assert_eq!(fp(&s, reduce, false), fp(&last, reduce, false));
            assert_ne!(fp(&s, reduce, true), fp(&last, reduce, true));
        }
    }

    #[test]
    fn the_visited_set_keeps_the_fewest_preemptions_only_under_a_bound() {
        use Admission::*;
        let all = Reopen {
            woken: u32::MAX,
            asleep: 0,
        };
        let mut bounded = Visited::new(true, false);
        let (five, other) = (Fingerprint([5, 0]), Fingerprint([5, 6 << 32]));
        assert_eq!(bounded.admit(five, 2, 0), New);
        assert_eq!(bounded.admit(five, 2, 0), Known);
        assert_eq!(bounded.admit(five, 3, 0), Known);
        assert_eq!(
            bounded.admit(five, 1, 0),
            all,
            "fewer preemptions leave more of the bound"
        );
        assert_eq!(
            bounded.admit(other, 0, 0),
            New,
            "fingerprints differing in the second word"
        );
        assert_eq!(bounded.len(), 2);
        let mut unbounded = Visited::new(false, false);
        assert_eq!(unbounded.admit(five, 2, 0), New);
        assert_eq!(
            unbounded.admit(five, 0, 0),
            Known,
            "without a bound, preemptions do not matter"
        );
        assert_eq!(unbounded.len(), 1);
    }

    /// Godefroid's table of sleep sets: a state reached again is taken up again only
    /// for the steps asleep on every earlier path and awake on this one, and its
    /// entry keeps what was asleep on all of them.
    #[test]
    fn the_visited_set_reopens_a_state_for_the_steps_woken_on_a_new_path() {
        use Admission::*;
        let mut v = Visited::new(false, true);
        let (fp, other) = (Fingerprint([7, 1 << 32]), Fingerprint([7, 2 << 32]));
        assert_eq!(v.admit(fp, 0, 0b0110), New);
        assert_eq!(v.admit(fp, 0, 0b1110), Known, "nothing newly awake");
        assert_eq!(
            v.admit(fp, 0, 0b0011),
            Reopen {
                woken: 0b0100,
                asleep: 0b0010
            }
        );
        assert_eq!(v.admit(fp, 0, 0b0010), Known, "the entry shrank to 0b0010");
        assert_eq!(
            v.admit(fp, 0, 0),
            Reopen {
                woken: 0b0010,
                asleep: 0
            }
        );
        assert_eq!(
            v.admit(other, 0, 0),
            New,
            "keys differ above bit 32 of word 1"
        );
        assert_eq!(v.len(), 2, "reopening is not a new state");
    }

    #[test]
    fn a_retriggered_entry_replays_the_posted_chips_flow() {
        use crate::kernel::retrigger::PostedMsiAck;
        let h = variant_by_name("copy-then-xchg", 3).unwrap();
        let entry = Some((Vector(0x21), PostedMsiAck::EoiIfInactive));
        assert_eq!(start_handler(h.as_ref(), entry), Step::Request(CpuOp::Eoi));
        let step = advance_handler(h.as_ref(), entry, &[0], CpuOp::Eoi).unwrap();
        assert_eq!(step, Step::Request(CpuOp::HandleVector(Vector(0x21))));
        let before = Some((Vector(0x21), PostedMsiAck::MoveIrqOnly));
        assert_eq!(
            start_handler(h.as_ref(), before),
            Step::Request(CpuOp::HandleVector(Vector(0x21)))
        );
    }

    #[test]
    fn nothing_to_do_is_a_pass_with_one_state() {
        let h = variant_by_name("rfc", 3).unwrap();
        let r = explore(h.as_ref(), None, &ExploreConfig::with_counts(0, 1));
        assert_eq!(r.result, ExploreResult::Pass);
        assert_eq!((r.states_explored, r.distinct_states), (1, 1));
    }
}
