//! The small world every race tool moves: one CPU's posted-interrupt descriptor, the
//! notification vector's state in that CPU's local APIC, the progress of the handler
//! running on it, and a per-vector ledger that the invariants read.
//!
//! The exhaustive explorer ([`super::explore`]) and the timed schedules
//! ([`super::timed`]) differ only in *who decides what happens next*; both change the
//! world through the methods here, so both check exactly the same invariants. The
//! handler itself is never copied into this file: a driver resumes the variant's own
//! coroutine and reports each operation it requests to [`World::handler_op`] and each
//! suspension or return to [`World::handler_next`].
//!
//! # The model
//! - The descriptor is a [`PiDesc`]; an IOMMU post is [`PiDesc::post`], one indivisible
//!   update of the whole line as VT-d 5.2.3 describes it.
//! - The APIC keeps one IRR bit and one ISR bit for the notification vector: a
//!   notification arriving while IRR is set merges into it; delivery moves IRR to ISR
//!   and starts a handler entry; the handler's EOI clears ISR. The CPU runs the handler
//!   with interrupts disabled (Linux enters it with IF=0), so a new entry starts only
//!   after the previous one returned, and only once ISR is clear.
//! - SN is changed by another CPU (affinity change, or a vCPU blocking). Whoever clears
//!   SN owns the posts that SN suppressed; it rechecks PIR after the clear and, if PIR
//!   is not empty, test-and-sets ON and sends the notification itself when ON was
//!   clear ([`World::sn_recheck`]). KVM's `vmx_vcpu_pi_load` does the same check after
//!   clearing SN and sets ON, leaving the processing to the coming VM entry; here the
//!   notification stands for that processing.
//!
//! # Memory model
//! Under [`MemoryModel::Sc`] every handler access takes effect when it is performed.
//! Under [`MemoryModel::Tso`] the handler's CPU has a FIFO store buffer, as x86 does:
//! a plain store ([`CpuOp::StorePir`], [`CpuOp::StoreClearOn`]) enters it, a load reads
//! the youngest buffered store to its word before the descriptor, and the buffer
//! writes its oldest store to the descriptor as a step of its own
//! ([`World::drain_one`]). Operations that [`CpuOp::drains_store_buffer`] (locked
//! ones, `mfence`, the flow handler's spinlock) wait for it to be empty, and so does
//! the handler's return (IRET is serializing). The IOMMU's post and the SN CPU's
//! locked operations see only the descriptor, never the buffer.
//!
//! # What "lost" means
//! Whenever no handler entry is running (after every step, and so at quiescence, when
//! no actor can move any more), every vector that was posted must be handled or still
//! be covered by something that will handle it. A vector that is not covered could
//! only be found if some later post happened to notify, and the protocol must not rely
//! on one; so it is a loss at once, which also keeps counterexamples short.
//! - a vector in PIR with ON set is covered only by a notification pending in IRR (the
//!   entry bound may have stopped it from being taken); ON set with nothing pending is
//!   *stuck*: every later post coalesces into a notification that never comes, so it is
//!   a loss even when PIR is empty;
//! - a vector in PIR with ON clear is covered only while SN is set (the CPU that set SN
//!   owns its delivery) or while that CPU's recheck after clearing SN is still to
//!   come; otherwise it is lost;
//! - a vector no longer in PIR must have had its handler called after its last post
//!   (a call serves every post of that vector before it, as an edge MSI's handler
//!   does). A vector taken out of PIR whose handler has not run since it was posted is
//!   lost.

use std::cell::Cell;
use std::fmt;
use std::hash::{Hash, Hasher};

use pid_model::PiDesc;
use serde::{Deserialize, Serialize};
use sim_core::{Vector, VectorSet};

use crate::engine::Step;
use crate::kernel::{CpuOp, POSTED_MSI_NOTIFICATION_VECTOR};

/// The properties checked at every step and at quiescence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Invariant {
    /// Every posted vector is handled, or still pending with something that will
    /// handle it (see the module docs for the exact rule).
    NothingLost,
    /// No vector's handler runs more times than the vector was posted.
    HandledAtMostPosted,
    /// A notification is sent only when ON goes from 0 to 1 with SN clear or URG set.
    NotifyOnlyOnRisingOn,
    /// Each handler entry writes EOI exactly once, while its notification is in service.
    EoiMatchesEntry,
    /// No PIR bit is set except by a post of that vector.
    NoPirBitFromNowhere,
    /// The handler asks only for valid operations, is a deterministic function of the
    /// results it is given, and returns within the configured number of operations.
    HandlerContract,
}

impl Invariant {
    /// Every invariant, in the order reports list them.
    pub const ALL: [Invariant; 6] = [
        Invariant::NothingLost,
        Invariant::HandledAtMostPosted,
        Invariant::NotifyOnlyOnRisingOn,
        Invariant::EoiMatchesEntry,
        Invariant::NoPirBitFromNowhere,
        Invariant::HandlerContract,
    ];

    /// Stable name, as printed and as serialized.
    pub fn name(self) -> &'static str {
        match self {
            Invariant::NothingLost => "nothing-lost",
            Invariant::HandledAtMostPosted => "handled-at-most-posted",
            Invariant::NotifyOnlyOnRisingOn => "notify-only-on-rising-on",
            Invariant::EoiMatchesEntry => "eoi-matches-entry",
            Invariant::NoPirBitFromNowhere => "no-pir-bit-from-nowhere",
            Invariant::HandlerContract => "handler-contract",
        }
    }
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An invariant that failed, and why, in words.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// The invariant that failed.
    pub invariant: Invariant,
    /// Why, in words.
    pub detail: String,
}

impl Violation {
    pub(crate) fn new(invariant: Invariant, detail: String) -> Violation {
        Violation { invariant, detail }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.invariant, self.detail)
    }
}

/// How the handling CPU's stores reach the descriptor.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum MemoryModel {
    /// Sequential consistency: every access takes effect when performed.
    #[default]
    Sc,
    /// x86-TSO: plain stores wait in a FIFO store buffer (see the module docs).
    Tso,
}

impl MemoryModel {
    /// Stable name, as the CLI takes it and reports print it.
    pub fn name(self) -> &'static str {
        match self {
            MemoryModel::Sc => "sc",
            MemoryModel::Tso => "tso",
        }
    }
}

impl fmt::Display for MemoryModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A plain store of the handler's CPU that has not reached the descriptor yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BufferedStore {
    /// PIR word `word` is to become `value`.
    Pir {
        /// Which of the four PIR words.
        word: usize,
        /// The value stored.
        value: u64,
    },
    /// ON is to be cleared.
    ClearOn,
}

impl fmt::Display for BufferedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BufferedStore::Pir { word, value } => write!(f, "PIR[{word}] <- {value:#x}"),
            BufferedStore::ClearOn => f.write_str("ON=0"),
        }
    }
}

/// Posts and handler calls of one vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct VectorCount {
    /// The vector.
    pub vector: Vector,
    /// Posts of it (merged ones included).
    pub posted: u32,
    /// Calls of its handler.
    pub handled: u32,
    /// Posted since its handler last ran.
    pub unserved: bool,
}

/// One handler entry in progress, suspended on an operation.
///
/// The coroutine itself cannot be cloned or hashed, so a run is identified by the
/// results it has been given: a handler is a deterministic function of them, and
/// replaying them into a fresh coroutine brings it back to the same point.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Run {
    /// Results delivered to the coroutine so far, in order.
    pub results: Vec<u64>,
    /// The operation it is suspended on.
    pub pending: CpuOp,
    /// EOIs written in this entry.
    pub eois: u8,
    /// The handler has returned and its IRET waits for the store buffer to drain.
    pub returned: bool,
    /// `Some(v)`: the IDT entry of device vector `v` raised by a retrigger (see
    /// [`super::retrigger`]), not a notification entry.
    pub retriggered: Option<Vector>,
}

impl Run {
    /// An entry that has performed nothing yet.
    pub fn starting() -> Run {
        Run {
            results: Vec::new(),
            pending: CpuOp::Eoi, // replaced by handler_next before anyone reads it
            eois: 0,
            returned: false,
            retriggered: None,
        }
    }
}

/// What one step did, for traces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepNote(pub String);

thread_local! {
    /// Whether steps on this thread say what they did. The search turns it off: it
    /// takes hundreds of thousands of steps and reads none of their notes, and making
    /// them was a tenth of its time. A counterexample is replayed with it on.
    static NARRATING: Cell<bool> = const { Cell::new(true) };
}

impl StepNote {
    /// A note whose text is made only if this thread narrates (see [`quiet`]).
    pub fn lazy(text: impl FnOnce() -> String) -> StepNote {
        StepNote(narrate(text))
    }

    /// Whether the note was left empty because the thread was quiet.
    pub fn is_silent(&self) -> bool {
        self.0.is_empty()
    }
}

/// `text()`, or an empty string without calling it on a quiet thread.
pub(crate) fn narrate(text: impl FnOnce() -> String) -> String {
    if NARRATING.with(Cell::get) {
        text()
    } else {
        String::new()
    }
}

/// Steps on this thread make no notes until the guard is dropped.
pub(crate) struct Quiet {
    was: bool,
}

/// Silences this thread's step notes (see [`StepNote::lazy`]) while the guard lives.
pub(crate) fn quiet() -> Quiet {
    Quiet {
        was: NARRATING.with(|n| n.replace(false)),
    }
}

impl Drop for Quiet {
    fn drop(&mut self) {
        NARRATING.with(|n| n.set(self.was));
    }
}

/// The state of the descriptor, the APIC's notification bits, the handler and the
/// ledger. Everything that decides the future is in here, so two equal worlds behave
/// the same (which is what lets the explorer prune duplicates).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct World {
    /// The descriptor line's data.
    pub desc: PiDesc,
    /// Notifications sent and not yet arrived at the APIC (only the timed driver has
    /// any: the explorer delivers a notification into IRR in the same step).
    pub in_flight: u32,
    /// The notification vector is pending in IRR.
    pub irr: bool,
    /// The notification vector is in service (ISR), from delivery until EOI.
    pub isr: bool,
    /// Handler entries started so far.
    pub entries: u32,
    /// The entry in progress, if any.
    pub run: Option<Run>,
    /// Per-vector counts, sorted by vector.
    pub ledger: Vec<VectorCount>,
    /// Notifications sent (by posts, and by the SN owner's recheck).
    pub notifications: u32,
    /// SN clears whose recheck of PIR has not happened yet.
    pub rechecks_due: u32,
    /// How the handler's stores reach the descriptor.
    pub memory_model: MemoryModel,
    /// The handler CPU's store buffer, oldest first (always empty under SC).
    pub store_buffer: Vec<BufferedStore>,
    /// The retriggered device vector is requested in IRR.
    pub device_irr: bool,
    /// The retriggered device vector is in service (ISR).
    pub device_isr: bool,
    /// The vector whose IRTE migrates to another CPU, if any (see
    /// [`super::migration`]).
    pub migrated: Option<Vector>,
    /// How far the migration has got.
    pub migration: super::migration::MigrationStep,
    /// A post of the migrating vector between its IRTE fetch and its update.
    pub fetched: Option<super::migration::FetchedPost>,
    /// Posts remapped with the new entry (to the other CPU).
    pub posts_to_new_cpu: u32,
    /// How the old CPU's vector cleanup checks for a pending vector.
    pub cleanup: super::migration::MigrationCleanup,
    /// The SN software set ON and has not sent the notification it owes yet.
    pub notify_owed: bool,
}

impl Default for World {
    fn default() -> Self {
        World::new()
    }
}

impl Run {
    /// Becomes a copy of `src`, reusing this run's buffer of results.
    pub(crate) fn assign_from(&mut self, src: &Run) {
        let Run {
            results,
            pending,
            eois,
            returned,
            retriggered,
        } = src;
        self.results.clone_from(results);
        self.pending = *pending;
        self.eois = *eois;
        self.returned = *returned;
        self.retriggered = *retriggered;
    }
}

impl World {
    /// Becomes a copy of `src`, reusing this world's buffers: the explorer copies a
    /// state once per step it takes from it, and a fresh clone allocates each buffer.
    pub(crate) fn assign_from(&mut self, src: &World) {
        // Destructured in full, so that a new field cannot be left uncopied.
        let World {
            desc,
            in_flight,
            irr,
            isr,
            entries,
            run,
            ledger,
            notifications,
            rechecks_due,
            memory_model,
            store_buffer,
            device_irr,
            device_isr,
            migrated,
            migration,
            fetched,
            posts_to_new_cpu,
            cleanup,
            notify_owed,
        } = src;
        self.desc = *desc;
        self.in_flight = *in_flight;
        self.irr = *irr;
        self.isr = *isr;
        self.entries = *entries;
        match (&mut self.run, run) {
            (Some(mine), Some(theirs)) => mine.assign_from(theirs),
            (mine, theirs) => mine.clone_from(theirs),
        }
        self.ledger.clone_from(ledger);
        self.notifications = *notifications;
        self.rechecks_due = *rechecks_due;
        self.memory_model = *memory_model;
        self.store_buffer.clone_from(store_buffer);
        self.device_irr = *device_irr;
        self.device_isr = *device_isr;
        self.migrated = *migrated;
        self.migration = *migration;
        self.fetched = *fetched;
        self.posts_to_new_cpu = *posts_to_new_cpu;
        self.cleanup = *cleanup;
        self.notify_owed = *notify_owed;
    }
}

/// The fields the trace prints after each step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    /// The four PIR words (serialized as hex strings).
    #[serde(serialize_with = "hex_words")]
    pub pir: [u64; 4],
    /// Outstanding notification.
    pub on: bool,
    /// Suppress notification.
    pub sn: bool,
    /// The notification vector is pending in the APIC's IRR.
    pub irr: bool,
    /// The notification vector is in service.
    pub isr: bool,
    /// Stores in the handler CPU's store buffer (x86-TSO only).
    pub buffered: u8,
    /// The retriggered device vector is requested in IRR.
    pub device_irr: bool,
    /// The retriggered device vector is in service.
    pub device_isr: bool,
}

fn hex_words<S: serde::Serializer>(w: &[u64; 4], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(w.iter().map(|w| format!("{w:#x}")))
}

impl World {
    /// Feeds `h` what decides this world's future: two worlds that feed the same bytes
    /// allow the same steps, with the same verdicts, from here on. Left out are the
    /// counts no step or invariant reads (`notifications`, `posts_to_new_cpu`), and the
    /// ledger keeps, per vector, only posts minus handler calls: the one invariant that
    /// compares the two (`handled-at-most-posted`) depends on nothing else. The
    /// explorer's reduction ([`super::ExploreConfig::reduce`]) identifies states by this.
    pub fn hash_behaviour<H: Hasher>(&self, h: &mut H) {
        // Destructured in full, so that a new field must be placed here or left out
        // on purpose.
        let World {
            desc,
            in_flight,
            irr,
            isr,
            entries,
            run,
            ledger,
            notifications: _,
            rechecks_due,
            memory_model,
            store_buffer,
            device_irr,
            device_isr,
            migrated,
            migration,
            fetched,
            posts_to_new_cpu: _,
            cleanup,
            notify_owed,
        } = self;
        desc.hash(h);
        (in_flight, irr, isr, entries, run).hash(h);
        h.write_usize(ledger.len());
        for c in ledger {
            // In a search handled <= posted, or the step that broke it already failed;
            // this is public, so a world that breaks it still hashes (to a distinct
            // value) instead of overflowing.
            (c.vector, c.posted.wrapping_sub(c.handled), c.unserved).hash(h);
        }
        (
            rechecks_due,
            memory_model,
            store_buffer,
            device_irr,
            device_isr,
        )
            .hash(h);
        (migrated, migration, fetched, cleanup, notify_owed).hash(h);
    }
}

impl World {
    /// Empty PIR, ON = SN = 0, nothing pending, no handler running, sequential
    /// consistency.
    pub fn new() -> World {
        World::with_memory_model(MemoryModel::Sc)
    }

    /// [`World::new`] under `memory_model`.
    pub fn with_memory_model(memory_model: MemoryModel) -> World {
        World {
            desc: PiDesc::new(POSTED_MSI_NOTIFICATION_VECTOR, 0),
            in_flight: 0,
            irr: false,
            isr: false,
            entries: 0,
            run: None,
            ledger: Vec::new(),
            notifications: 0,
            rechecks_due: 0,
            memory_model,
            store_buffer: Vec::new(),
            device_irr: false,
            device_isr: false,
            migrated: None,
            migration: super::migration::MigrationStep::NotStarted,
            fetched: None,
            posts_to_new_cpu: 0,
            cleanup: super::migration::MigrationCleanup::IrrAndPir,
            notify_owed: false,
        }
    }

    /// The fields a trace prints.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            pir: self.desc.pir().0,
            on: self.desc.on(),
            sn: self.desc.sn(),
            irr: self.irr,
            isr: self.isr,
            buffered: self.store_buffer.len().min(u8::MAX as usize) as u8,
            device_irr: self.device_irr,
            device_isr: self.device_isr,
        }
    }

    fn count_mut(&mut self, vector: Vector) -> &mut VectorCount {
        let i = match self.ledger.binary_search_by_key(&vector, |c| c.vector) {
            Ok(i) => i,
            Err(i) => {
                self.ledger.insert(
                    i,
                    VectorCount {
                        vector,
                        posted: 0,
                        handled: 0,
                        unserved: false,
                    },
                );
                i
            }
        };
        &mut self.ledger[i]
    }

    /// Counts of `vector` (zero if it was never posted nor handled).
    pub fn count(&self, vector: Vector) -> VectorCount {
        match self.ledger.binary_search_by_key(&vector, |c| c.vector) {
            Ok(i) => self.ledger[i],
            Err(_) => VectorCount {
                vector,
                posted: 0,
                handled: 0,
                unserved: false,
            },
        }
    }

    /// Whether the handler may be entered now: a notification pending, none in
    /// service, and no entry running.
    pub fn can_deliver(&self) -> bool {
        self.irr && !self.isr && self.run.is_none()
    }

    /// PIR bits may only be cleared, or set by a post of that vector.
    pub(super) fn check_pir_source(
        &self,
        before: &PiDesc,
        allowed: u64,
        allowed_word: usize,
        checks: &mut u64,
    ) -> Result<(), Violation> {
        *checks += 1;
        for w in 0..4 {
            let mut appeared = self.desc.pir_word(w) & !before.pir_word(w);
            if w == allowed_word {
                appeared &= !allowed;
            }
            if appeared != 0 {
                let v = Vector((w as u32 * 64 + appeared.trailing_zeros()) as u8);
                return Err(Violation::new(
                    Invariant::NoPirBitFromNowhere,
                    format!("PIR bit of vector {v} was set, but no post of {v} did it"),
                ));
            }
        }
        Ok(())
    }

    /// The IOMMU's atomic post of `vector`. Returns whether it sent a notification
    /// (now in flight to the APIC) and a description.
    pub fn post(
        &mut self,
        vector: Vector,
        urg: bool,
        checks: &mut u64,
    ) -> Result<(bool, StepNote), Violation> {
        let before = self.desc;
        let r = self.desc.post(vector, urg);
        let c = self.count_mut(vector);
        c.posted += 1;
        c.unserved = true;
        *checks += 1;
        let expect = !r.on_before && (urg || !r.sn_before);
        if r.notification.is_some() != expect || self.desc.on() != (r.on_before || expect) {
            return Err(Violation::new(
                Invariant::NotifyOnlyOnRisingOn,
                format!(
                    "post of {vector} with ON={} SN={} URG={} {} a notification and left ON={}",
                    r.on_before as u8,
                    r.sn_before as u8,
                    urg as u8,
                    if r.notification.is_some() {
                        "sent"
                    } else {
                        "did not send"
                    },
                    self.desc.on() as u8
                ),
            ));
        }
        self.check_pir_source(&before, vector.bit(), vector.word(), checks)?;
        let urg_note = if urg { " (URG)" } else { "" };
        let what = if r.notification.is_some() {
            self.notifications += 1;
            self.in_flight += 1;
            "ON 0->1, notification sent"
        } else if r.on_before {
            "ON already set: coalesced, no notification"
        } else {
            "SN set: suppressed, no notification"
        };
        let merged = if r.already_pending {
            ", bit already pending"
        } else {
            ""
        };
        Ok((
            r.notification.is_some(),
            StepNote::lazy(|| format!("post {vector}{urg_note}: {what}{merged}")),
        ))
    }

    /// A notification reaches the APIC: IRR is set (a second one merges into it).
    pub fn notification_arrives(&mut self) -> StepNote {
        assert!(self.in_flight > 0, "no notification in flight");
        self.in_flight -= 1;
        let merged = std::mem::replace(&mut self.irr, true);
        StepNote::lazy(|| {
            if merged {
                "notification arrives: merges into pending IRR".into()
            } else {
                "notification arrives: IRR set".into()
            }
        })
    }

    /// Another CPU sets or clears SN (a locked bit operation on the control word).
    /// `recheck_follows`: a clear will be followed by that CPU's [`World::sn_recheck`].
    pub fn set_sn(
        &mut self,
        sn: bool,
        recheck_follows: bool,
        checks: &mut u64,
    ) -> Result<StepNote, Violation> {
        let before = self.desc;
        self.desc.set_sn(sn);
        if !sn && recheck_follows {
            self.rechecks_due += 1;
        }
        self.check_pir_source(&before, 0, 0, checks)?;
        Ok(StepNote::lazy(|| {
            format!("{} SN", if sn { "set" } else { "clear" })
        }))
    }

    /// The SN owner's recheck after clearing SN: if PIR holds anything, test-and-set
    /// ON and, if it was clear, send the notification (a self-IPI of the notification
    /// vector). Returns whether it sent one.
    pub fn sn_recheck(&mut self) -> (bool, StepNote) {
        self.rechecks_due = self.rechecks_due.saturating_sub(1);
        if self.desc.pir().is_empty() {
            return (
                false,
                StepNote::lazy(|| "recheck after SN clear: PIR empty".into()),
            );
        }
        if self.desc.on() {
            return (
                false,
                StepNote::lazy(|| "recheck after SN clear: PIR pending, ON already set".into()),
            );
        }
        self.desc.set_on(true);
        self.notifications += 1;
        self.in_flight += 1;
        (
            true,
            StepNote::lazy(|| {
                "recheck after SN clear: PIR pending, ON 0->1, notification sent".into()
            }),
        )
    }

    /// The APIC delivers the pending notification: IRR moves to ISR and a handler entry
    /// begins. The driver then starts the handler and reports its first suspension with
    /// [`World::handler_next`].
    pub fn deliver(&mut self) -> StepNote {
        assert!(
            self.can_deliver(),
            "deliver() while delivery is not possible"
        );
        self.irr = false;
        self.isr = true;
        self.entries += 1;
        self.run = Some(Run::starting());
        StepNote::lazy(|| {
            format!(
                "deliver notification {}: IRR->ISR, handler entry {}",
                POSTED_MSI_NOTIFICATION_VECTOR, self.entries
            )
        })
    }

    /// Whether the running handler can perform the operation it is suspended on now:
    /// under TSO a draining operation waits for an empty store buffer, and a returned
    /// entry has nothing left to perform.
    pub fn handler_can_step(&self) -> bool {
        self.run.as_ref().is_some_and(|r| {
            !r.returned && (self.store_buffer.is_empty() || !r.pending.drains_store_buffer())
        })
    }

    /// A plain store: performed at once under SC, buffered under TSO.
    fn store(&mut self, store: BufferedStore) -> (u64, String) {
        match self.memory_model {
            MemoryModel::Sc => {
                self.write_store(store);
                (0, narrate(|| format!("store {store}")))
            }
            MemoryModel::Tso => {
                self.store_buffer.push(store);
                (
                    0,
                    narrate(|| format!("store {store} (into the store buffer)")),
                )
            }
        }
    }

    fn write_store(&mut self, store: BufferedStore) {
        match store {
            BufferedStore::Pir { word, value } => self.desc.set_pir_word(word, value),
            BufferedStore::ClearOn => self.desc.set_on(false),
        }
    }

    /// The oldest buffered store reaches the descriptor.
    fn drain_store(&mut self, checks: &mut u64) -> Result<StepNote, Violation> {
        let before = self.desc;
        let store = self.store_buffer.remove(0);
        self.write_store(store);
        self.check_pir_source(&before, 0, 0, checks)?;
        Ok(StepNote::lazy(|| {
            format!("store buffer drains {store} to the descriptor")
        }))
    }

    /// One step of the handler CPU's store buffer: its oldest store reaches the
    /// descriptor, and if that empties the buffer of an entry that has returned, the
    /// entry ends (its IRET was waiting).
    ///
    /// # Panics
    /// If the buffer is empty.
    pub fn drain_one(&mut self, checks: &mut u64) -> Result<Vec<StepNote>, Violation> {
        assert!(
            !self.store_buffer.is_empty(),
            "drain of an empty store buffer"
        );
        let mut notes = vec![self.drain_store(checks)?];
        if self.store_buffer.is_empty() && self.run.as_ref().is_some_and(|r| r.returned) {
            notes.push(self.end_entry(checks)?);
        }
        Ok(notes)
    }

    fn end_entry(&mut self, checks: &mut u64) -> Result<StepNote, Violation> {
        let run = self
            .run
            .take()
            .expect("handler returned with no entry running");
        *checks += 2;
        if let Some(vector) = run.retriggered {
            World::retriggered_return(vector, run.eois)?;
            return Ok(StepNote::lazy(|| "IDT entry returns (irq_exit)".into()));
        }
        if run.eois != 1 {
            return Err(Violation::new(
                Invariant::EoiMatchesEntry,
                format!("handler entry returned after {} EOIs, not 1", run.eois),
            ));
        }
        Ok(StepNote::lazy(|| "handler returns (irq_exit)".into()))
    }

    fn run_mut(&mut self) -> &mut Run {
        self.run
            .as_mut()
            .expect("handler operation with no handler running")
    }

    /// Performs the operation the running handler is suspended on and returns its
    /// result (also appended to the run's results).
    pub fn handler_op(
        &mut self,
        op: CpuOp,
        checks: &mut u64,
    ) -> Result<(u64, StepNote), Violation> {
        let bad_word = |word: usize| {
            Violation::new(
                Invariant::HandlerContract,
                format!("{op:?}: PIR word {word} does not exist (0..4)"),
            )
        };
        if op.drains_store_buffer() {
            // Drivers wait for the buffer first (see `handler_can_step`); one that
            // does not still gets x86's meaning: the buffer drains, then the op.
            while !self.store_buffer.is_empty() {
                self.drain_store(checks)?;
            }
        }
        let before = self.desc;
        let buffered = |s: &Self, w: usize| {
            s.store_buffer.iter().rev().find_map(|b| match *b {
                BufferedStore::Pir { word, value } if word == w => Some(value),
                _ => None,
            })
        };
        let (result, note) = match op {
            CpuOp::LoadPir { word } => {
                *checks += 1;
                if word >= 4 {
                    return Err(bad_word(word));
                }
                match buffered(self, word) {
                    Some(v) => (
                        v,
                        narrate(|| format!("load PIR[{word}] -> {v:#x} (own store buffer)")),
                    ),
                    None => {
                        let v = self.desc.pir_word(word);
                        (v, narrate(|| format!("load PIR[{word}] -> {v:#x}")))
                    }
                }
            }
            CpuOp::StorePir { word, value } => {
                *checks += 1;
                if word >= 4 {
                    return Err(bad_word(word));
                }
                self.store(BufferedStore::Pir { word, value })
            }
            CpuOp::StoreClearOn => self.store(BufferedStore::ClearOn),
            CpuOp::Mfence => (0, narrate(|| "mfence".into())),
            CpuOp::XchgPir { word, value } => {
                *checks += 1;
                if word >= 4 {
                    return Err(bad_word(word));
                }
                let old = self.desc.pir_word(word);
                self.desc.set_pir_word(word, value);
                (
                    old,
                    narrate(|| format!("xchg PIR[{word}] <- {value:#x} -> {old:#x}")),
                )
            }
            CpuOp::ClearOn => {
                self.desc.set_on(false);
                (0, narrate(|| "clear ON".into()))
            }
            CpuOp::TestAndClearOn => {
                let was = self.desc.on();
                self.desc.set_on(false);
                (
                    was as u64,
                    narrate(|| format!("test-and-clear ON -> {}", was as u8)),
                )
            }
            CpuOp::HandleVector(v)
                if self.run.as_ref().is_some_and(|r| r.retriggered.is_some()) =>
            {
                (
                    0,
                    narrate(|| format!("handle vector {v} (no PIR bit behind it)")),
                )
            }
            CpuOp::HandleVector(v) => {
                self.check_dispatch_after_free(v)?;
                let c = self.count_mut(v);
                c.handled += 1;
                c.unserved = false;
                let c = *c;
                *checks += 1;
                if c.handled > c.posted {
                    return Err(Violation::new(
                        Invariant::HandledAtMostPosted,
                        format!(
                            "vector {v} handled {} times but posted {} times",
                            c.handled, c.posted
                        ),
                    ));
                }
                (0, narrate(|| format!("handle vector {v}")))
            }
            CpuOp::Eoi if self.run.as_ref().is_some_and(|r| r.retriggered.is_some()) => {
                *checks += 1;
                let vector = self.run_mut().retriggered.expect("guarded");
                (0, self.eoi_retriggered(vector)?)
            }
            CpuOp::Eoi => {
                *checks += 1;
                let isr = self.isr;
                let run = self.run_mut();
                run.eois += 1;
                if run.eois > 1 || !isr {
                    return Err(Violation::new(
                        Invariant::EoiMatchesEntry,
                        format!(
                            "EOI number {} of this entry, with the notification {}",
                            run.eois,
                            if isr {
                                "in service"
                            } else {
                                "no longer in service"
                            }
                        ),
                    ));
                }
                self.isr = false;
                (0, narrate(|| "EOI".into()))
            }
        };
        self.check_pir_source(&before, 0, 0, checks)?;
        self.run_mut().results.push(result);
        Ok((result, StepNote(note)))
    }

    /// Records what the handler did after being started or resumed: suspended on
    /// another operation, or returned. `max_ops` bounds one entry's operations.
    pub fn handler_next(
        &mut self,
        step: Step<CpuOp>,
        max_ops: u32,
        checks: &mut u64,
    ) -> Result<Option<StepNote>, Violation> {
        match step {
            Step::Request(op) => {
                let run = self.run_mut();
                run.pending = op;
                *checks += 1;
                if run.results.len() as u64 >= u64::from(max_ops) {
                    return Err(Violation::new(
                        Invariant::HandlerContract,
                        format!("handler entry still running after {max_ops} operations"),
                    ));
                }
                Ok(None)
            }
            Step::Done if !self.store_buffer.is_empty() => {
                self.run_mut().returned = true;
                Ok(Some(StepNote::lazy(|| {
                    format!(
                        "handler returns; IRET waits for {} buffered store(s)",
                        self.store_buffer.len()
                    )
                })))
            }
            Step::Done => self.end_entry(checks).map(Some),
        }
    }

    /// The "nothing lost" rules of the module docs, checked after every step: they
    /// apply whenever no handler entry is running.
    pub fn check_nothing_lost(&self, checks: &mut u64) -> Result<(), Violation> {
        if self.run.is_some() {
            return Ok(());
        }
        let on = self.desc.on();
        let sn = self.desc.sn();
        let pending = self.irr || self.isr || self.in_flight > 0 || self.notify_owed;
        *checks += 1;
        if let Some(v) = self.desc.pir().iter().next() {
            if on && !pending {
                return Err(Violation::new(
                    Invariant::NothingLost,
                    format!(
                        "vector {v} is in PIR with ON set but no notification pending or \
                         in service: ON is stuck, nothing will ever harvest it"
                    ),
                ));
            }
            if !on && !sn && !pending && self.rechecks_due == 0 {
                return Err(Violation::new(
                    Invariant::NothingLost,
                    format!(
                        "vector {v} is in PIR with ON clear, SN clear and no handler \
                         running or notification pending: lost interrupt"
                    ),
                ));
            }
        }
        *checks += 1;
        if on && !pending {
            return Err(Violation::new(
                Invariant::NothingLost,
                "ON is left set with no notification pending or in service: every later \
                 post will coalesce into a notification that never comes"
                    .into(),
            ));
        }
        *checks += 1;
        let pir = self.desc.pir();
        match self
            .ledger
            .iter()
            .find(|c| c.unserved && !pir.contains(c.vector))
        {
            Some(c) => Err(Violation::new(
                Invariant::NothingLost,
                format!(
                    "vector {} was taken out of PIR but its handler has not run since it \
                     was last posted: lost interrupt",
                    c.vector
                ),
            )),
            None => Ok(()),
        }
    }

    /// The checks at quiescence: nothing can move any more (no handler running, no
    /// notification deliverable within the bounds, no hardware step left).
    pub fn check_quiescent(&self, checks: &mut u64) -> Result<(), Violation> {
        assert!(self.run.is_none(), "quiescence with a handler running");
        self.check_nothing_lost(checks)
    }
}

/// Lists the vectors of a PIR, e.g. `{0x21 0x61}`.
pub fn pir_vectors(pir: [u64; 4]) -> String {
    let set = VectorSet(pir);
    let items: Vec<String> = set.iter().map(|v| v.to_string()).collect();
    format!("{{{}}}", items.join(" "))
}

impl fmt::Display for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "PIR={} ON={} SN={} | IRR={} ISR={}",
            pir_vectors(self.pir),
            self.on as u8,
            self.sn as u8,
            self.irr as u8,
            self.isr as u8
        )?;
        if self.buffered > 0 {
            write!(f, " | buffered stores={}", self.buffered)?;
        }
        if self.device_irr || self.device_isr {
            write!(
                f,
                " | retriggered IRR={} ISR={}",
                self.device_irr as u8, self.device_isr as u8
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V21: Vector = Vector(0x21);

    #[test]
    fn post_notifies_once_and_coalesces_after() {
        let mut w = World::new();
        let mut checks = 0;
        let (sent, _) = w.post(V21, false, &mut checks).unwrap();
        assert!(sent);
        let (sent, note) = w.post(Vector(0x61), false, &mut checks).unwrap();
        assert!(!sent);
        assert!(note.0.contains("coalesced"), "{}", note.0);
        assert_eq!(w.notifications, 1);
        assert!(checks >= 4);
    }

    #[test]
    fn a_quiet_thread_makes_no_notes_and_the_same_world() {
        let (mut loud, mut hushed) = (World::new(), World::new());
        let mut checks = (0, 0);
        let (sent, note) = loud.post(V21, false, &mut checks.0).unwrap();
        assert!(note.0.starts_with("post"), "{}", note.0);
        {
            let _quiet = quiet();
            let (hushed_sent, hushed_note) = hushed.post(V21, false, &mut checks.1).unwrap();
            assert_eq!(hushed_sent, sent);
            assert!(hushed_note.is_silent(), "{}", hushed_note.0);
            // Nested guards restore what they found, so the outer one still holds.
            drop(quiet());
            assert!(StepNote::lazy(|| unreachable!("a quiet thread formats nothing")).is_silent());
        }
        assert_eq!(hushed, loud, "notes never change the state");
        assert_eq!(checks.0, checks.1);
        assert!(!StepNote::lazy(|| "heard again".into()).is_silent());
    }
    #[test]
    fn suppressed_post_is_parked_while_sn_is_set_and_lost_once_cleared() {
        let mut w = World::new();
        let mut checks = 0;
        w.set_sn(true, true, &mut checks).unwrap();
        let (sent, _) = w.post(V21, false, &mut checks).unwrap();
        assert!(!sent);
        assert!(w.check_quiescent(&mut checks).is_ok(), "parked under SN");
        let mut bare = w.clone();
        w.set_sn(false, true, &mut checks).unwrap();
        assert!(
            w.check_nothing_lost(&mut checks).is_ok(),
            "the recheck is due"
        );
        bare.set_sn(false, false, &mut checks).unwrap();
        let err = bare.check_quiescent(&mut checks).unwrap_err();
        assert_eq!(err.invariant, Invariant::NothingLost);
        // The owner's recheck turns it into a pending notification.
        let (sent, _) = w.sn_recheck();
        assert!(sent);
        w.notification_arrives();
        assert!(w.check_quiescent(&mut checks).is_ok());
    }

    #[test]
    fn stuck_on_is_a_loss_even_with_empty_pir() {
        let mut w = World::new();
        w.desc.set_on(true);
        let err = w.check_quiescent(&mut 0).unwrap_err();
        assert!(err.detail.contains("ON is left set"), "{err}");
    }

    #[test]
    fn handler_ops_account_and_check() {
        let mut w = World::new();
        let mut checks = 0;
        w.post(V21, false, &mut checks).unwrap();
        w.notification_arrives();
        w.deliver();
        w.handler_next(Step::Request(CpuOp::LoadPir { word: 0 }), 100, &mut checks)
            .unwrap();
        let (r, _) = w
            .handler_op(CpuOp::XchgPir { word: 0, value: 0 }, &mut checks)
            .unwrap();
        assert_eq!(r, V21.bit());
        assert!(w.count(V21).unserved);
        // Returning before handling what was harvested loses it.
        let mut lost = w.clone();
        lost.handler_op(CpuOp::ClearOn, &mut checks).unwrap();
        lost.handler_op(CpuOp::Eoi, &mut checks).unwrap();
        lost.handler_next(Step::Done, 100, &mut checks).unwrap();
        let err = lost.check_nothing_lost(&mut checks).unwrap_err();
        assert_eq!(err.invariant, Invariant::NothingLost);
        assert!(err.detail.contains("taken out of PIR"), "{err}");
        w.handler_op(CpuOp::HandleVector(V21), &mut checks).unwrap();
        let err = w
            .handler_op(CpuOp::HandleVector(V21), &mut checks)
            .unwrap_err();
        assert_eq!(err.invariant, Invariant::HandledAtMostPosted);
    }

    #[test]
    fn pir_bits_from_nowhere_and_double_eoi_are_caught() {
        let mut w = World::new();
        let mut checks = 0;
        w.post(V21, false, &mut checks).unwrap();
        w.notification_arrives();
        w.deliver();
        let mut forged = w.clone();
        let err = forged
            .handler_op(CpuOp::XchgPir { word: 1, value: 1 }, &mut checks)
            .unwrap_err();
        assert_eq!(err.invariant, Invariant::NoPirBitFromNowhere);
        w.handler_op(CpuOp::Eoi, &mut checks).unwrap();
        let err = w.handler_op(CpuOp::Eoi, &mut checks).unwrap_err();
        assert_eq!(err.invariant, Invariant::EoiMatchesEntry);
    }

    /// A world with a handler entry running on vector 0x21's notification.
    fn running(model: MemoryModel) -> World {
        let mut w = World::with_memory_model(model);
        w.post(V21, false, &mut 0).unwrap();
        w.notification_arrives();
        w.deliver();
        w
    }

    #[test]
    fn under_tso_a_plain_store_waits_in_the_buffer_and_loads_see_their_own() {
        let mut w = running(MemoryModel::Tso);
        let mut checks = 0;
        w.handler_op(CpuOp::StorePir { word: 0, value: 0 }, &mut checks)
            .unwrap();
        w.handler_op(CpuOp::StoreClearOn, &mut checks).unwrap();
        // Memory still holds the post and ON; the CPU's own load sees its store.
        assert!(w.desc.on() && w.desc.pir().contains(V21));
        let (v, note) = w
            .handler_op(CpuOp::LoadPir { word: 0 }, &mut checks)
            .unwrap();
        assert_eq!(v, 0, "{}", note.0);
        assert!(note.0.contains("own store buffer"), "{}", note.0);
        assert_eq!(w.snapshot().buffered, 2);
        // The IOMMU sees memory: ON still set, so a post coalesces.
        let (sent, _) = w.post(Vector(0x22), false, &mut checks).unwrap();
        assert!(!sent);
        // Oldest first: PIR word 0 (which also wipes 0x22, a plain store's hazard),
        // then ON.
        w.handler_next(Step::Request(CpuOp::Eoi), 100, &mut checks)
            .unwrap();
        w.drain_one(&mut checks).unwrap();
        assert!(w.desc.on() && w.desc.pir().is_empty());
        w.drain_one(&mut checks).unwrap();
        assert!(!w.desc.on() && w.store_buffer.is_empty());
    }

    #[test]
    fn under_sc_the_same_stores_take_effect_at_once() {
        let mut w = running(MemoryModel::Sc);
        w.handler_op(CpuOp::StoreClearOn, &mut 0).unwrap();
        assert!(!w.desc.on() && w.store_buffer.is_empty());
        let (sent, _) = w.post(Vector(0x61), false, &mut 0).unwrap();
        assert!(sent, "ON was clear in memory: the post notifies");
    }

    #[test]
    fn draining_operations_and_the_return_wait_for_an_empty_buffer() {
        let mut w = running(MemoryModel::Tso);
        let mut checks = 0;
        w.handler_op(CpuOp::StoreClearOn, &mut checks).unwrap();
        for (op, waits) in [
            (CpuOp::LoadPir { word: 1 }, false),
            (CpuOp::Eoi, false),
            (CpuOp::StorePir { word: 1, value: 0 }, false),
            (CpuOp::XchgPir { word: 0, value: 0 }, true),
            (CpuOp::ClearOn, true),
            (CpuOp::TestAndClearOn, true),
            (CpuOp::Mfence, true),
            (CpuOp::HandleVector(V21), true),
        ] {
            w.handler_next(Step::Request(op), 100, &mut checks).unwrap();
            assert_eq!(w.handler_can_step(), !waits, "{op:?}");
        }
        w.handler_op(CpuOp::Eoi, &mut checks).unwrap();
        // The handler returns; the entry ends only when the buffer has drained.
        let note = w.handler_next(Step::Done, 100, &mut checks).unwrap();
        assert!(note.unwrap().0.contains("IRET waits"));
        assert!(w.run.is_some() && !w.handler_can_step());
        let notes = w.drain_one(&mut checks).unwrap();
        assert!(w.run.is_none(), "{notes:?}");
        assert!(notes.last().unwrap().0.contains("irq_exit"));
    }

    #[test]
    fn a_draining_operation_performed_early_drains_first() {
        // A driver that does not wait still gets x86's order: buffer, then the op.
        let mut w = running(MemoryModel::Tso);
        w.handler_op(CpuOp::StoreClearOn, &mut 0).unwrap();
        let (old, _) = w
            .handler_op(CpuOp::XchgPir { word: 0, value: 0 }, &mut 0)
            .unwrap();
        assert_eq!(old, V21.bit());
        assert!(!w.desc.on() && w.store_buffer.is_empty());
    }

    #[test]
    fn snapshot_prints_pending_vectors() {
        let mut w = World::new();
        w.post(Vector(0x61), false, &mut 0).unwrap();
        w.post(V21, false, &mut 0).unwrap();
        let s = w.snapshot().to_string();
        assert!(s.starts_with("PIR={0x21 0x61} ON=1 SN=0"), "{s}");
    }
}
