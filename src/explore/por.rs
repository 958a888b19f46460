//! Partial-order reduction by sleep sets (P. Godefroid, *Partial-Order Methods for the
//! Verification of Concurrent Systems*, LNCS 1032, 1996: ch. 5 for sleep sets, and
//! section 6.2 for combining them with a table of visited states).
//!
//! When two enabled steps `a` and `b` of different actors are independent (neither
//! touches what the other reads or writes, so each leaves the other enabled and both
//! orders end in the same state), exploring `a` and then `b` from a state makes the
//! path `b`, `a` from the same state redundant. The search records that by putting `a`
//! to sleep in the state reached by `b`: it is not taken there, nor in later states
//! as long as the steps taken are independent of it. Sleep sets never drop a state,
//! only steps that would lead back to states already reached along a path of the
//! same length, so the distinct states, the verdict and the counterexample's length
//! stay those of the search without them; `tests/explore_reduction.rs` compares both.
//!
//! Independence is decided from each step's *footprint* in the state both are enabled
//! in: the parts of the world it reads (to decide what it does, or whether it is
//! enabled) and writes. The footprints are conservative: a step whose effects are not
//! worth listing (the store buffer, the SN software of a user, migrations, the IDT
//! path of a retrigger) conflicts with everything.

use sim_core::Vector;

use super::model::World;
use super::search::{Actor, SnStep};
use super::MemoryModel;
use crate::kernel::CpuOp;

/// One part of the world, as a bit of a footprint's read or write set.
mod part {
    /// PIR word `w` is bit `w`.
    pub const PIR_ALL: u32 = 0b1111;
    /// The descriptor's ON bit.
    pub const ON: u32 = 1 << 4;
    /// The notification vector's IRR bit (and notifications in flight).
    pub const IRR: u32 = 1 << 5;
    /// The notification vector's ISR bit.
    pub const ISR: u32 = 1 << 6;
    /// The running handler entry, and the count of entries started.
    pub const RUN: u32 = 1 << 7;
    /// The handler CPU's store buffer.
    pub const STORE_BUFFER: u32 = 1 << 8;
    /// The retriggered device vector's IRR and ISR bits.
    pub const DEVICE_VECTOR: u32 = 1 << 9;
    /// The migration's progress and the post whose IRTE it fetched.
    pub const MIGRATION: u32 = 1 << 10;
    /// The SN owner's pending rechecks.
    pub const SN_OWNER: u32 = 1 << 11;
    /// The descriptor's SN bit. ON and SN share a word, but each step that changes
    /// one is a locked bit operation or a plain store of it alone, and a post changes
    /// only ON.
    pub const SN: u32 = 1 << 12;
}

fn pir_word(w: usize) -> u32 {
    if w < 4 {
        1 << w
    } else {
        // Out of range: the step fails on its own; claim every word.
        part::PIR_ALL
    }
}

/// What one step reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Footprint {
    reads: u32,
    writes: u32,
    /// The vector whose ledger count the step changes (a post, or a handler call).
    ledger: Option<Vector>,
    /// An IOMMU post by the non-urgent (0) or the urgent (1) device: an atomic OR
    /// into PIR and, if ON was clear, a rising ON with its notification. Posts of the
    /// two devices commute even on one word: both orders set the same bits, count the
    /// same posts and leave ON and IRR set. Two of one device are its next post's
    /// alternatives (vector choices), not two steps.
    post: Option<u8>,
    /// Conflicts with every step.
    everything: bool,
}

impl Footprint {
    const EVERYTHING: Footprint = Footprint {
        reads: u32::MAX,
        writes: u32::MAX,
        ledger: None,
        post: None,
        everything: true,
    };

    fn of(reads: u32, writes: u32) -> Footprint {
        Footprint {
            reads,
            writes,
            ledger: None,
            post: None,
            everything: false,
        }
    }

    /// Whether the two steps commute and leave each other enabled.
    pub(super) fn independent(&self, other: &Footprint) -> bool {
        if self.everything || other.everything {
            return false;
        }
        if let (Some(a), Some(b)) = (self.post, other.post) {
            return a != b;
        }
        let conflict = self.writes & (other.reads | other.writes) != 0
            || other.writes & self.reads != 0
            || (self.ledger.is_some() && self.ledger == other.ledger);
        !conflict
    }
}

/// What the footprint of a step depends on besides the world.
pub(super) struct StepContext {
    pub memory_model: MemoryModel,
    /// A migration is configured: the non-urgent device's posts read its state.
    pub migrating: bool,
    /// The SN actor is a user's coroutine.
    pub sn_software: bool,
    /// The built-in SN actor's next step, if it has one.
    pub sn_next: Option<SnStep>,
    /// For an IOMMU actor, the vector its next post would post.
    pub post_vector: Option<Vector>,
}

/// The footprint of `actor`'s next step in world `w`.
pub(super) fn footprint(w: &World, actor: Actor, cx: &StepContext) -> Footprint {
    use part::*;
    match actor {
        Actor::Handler => {
            let Some(run) = w.run.as_ref() else {
                return Footprint::EVERYTHING;
            };
            if run.retriggered.is_some() {
                return Footprint::EVERYTHING;
            }
            // Whether it may step, and what it does next, are the run's; under TSO
            // its stores go to, and its loads and draining steps look at, the buffer.
            let mut reads = RUN;
            let mut writes = RUN;
            if cx.memory_model == MemoryModel::Tso {
                reads |= STORE_BUFFER;
                writes |= STORE_BUFFER;
            }
            let mut ledger = None;
            let sc = cx.memory_model == MemoryModel::Sc;
            match run.pending {
                CpuOp::LoadPir { word } => reads |= pir_word(word),
                CpuOp::StorePir { word, .. } if sc => writes |= pir_word(word),
                CpuOp::StoreClearOn if sc => writes |= ON,
                CpuOp::StorePir { .. } | CpuOp::StoreClearOn | CpuOp::Mfence => {}
                CpuOp::XchgPir { word, .. } => {
                    reads |= pir_word(word);
                    writes |= pir_word(word);
                }
                CpuOp::ClearOn | CpuOp::TestAndClearOn => {
                    reads |= ON;
                    writes |= ON;
                }
                CpuOp::HandleVector(v) => {
                    ledger = Some(v);
                    reads |= MIGRATION;
                }
                CpuOp::Eoi => {
                    reads |= ISR;
                    writes |= ISR;
                }
            }
            Footprint {
                ledger,
                ..Footprint::of(reads, writes)
            }
        }
        Actor::Iommu(_) | Actor::IommuUrg => {
            let urg = actor == Actor::IommuUrg;
            let Some(vector) = cx.post_vector else {
                return Footprint::EVERYTHING;
            };
            if !urg && cx.migrating {
                // Whether it may post, and where the post goes, are the migration's.
                return Footprint::EVERYTHING;
            }
            // With ON set a post coalesces, and an urgent one notifies whatever SN
            // says: then SN does not decide what it does. (A step that changes ON
            // conflicts with the post anyway, so this stays true until it posts.)
            let reads = if urg || w.desc.on() { ON } else { ON | SN };
            let notifies = !w.desc.on() && (urg || !w.desc.sn());
            let mut writes = pir_word(vector.word());
            if notifies {
                writes |= ON | IRR;
            }
            Footprint {
                ledger: Some(vector),
                post: Some(u8::from(urg)),
                ..Footprint::of(reads, writes)
            }
        }
        Actor::SnCpu if cx.sn_software => Footprint::EVERYTHING,
        Actor::SnCpu => match cx.sn_next {
            Some(SnStep::Set | SnStep::Clear) => Footprint::of(SN, SN | SN_OWNER),
            // With ON set the recheck changes nothing but its own count, whatever
            // PIR holds; with ON clear it reads PIR and may set ON and notify.
            Some(SnStep::Recheck) if w.desc.on() => Footprint::of(ON | SN_OWNER, SN_OWNER),
            Some(SnStep::Recheck) => Footprint::of(PIR_ALL | ON | SN_OWNER, ON | IRR | SN_OWNER),
            None => Footprint::EVERYTHING,
        },
        // Moves IRR to ISR and starts an entry, which may return at once (reading the
        // store buffer to see whether its IRET waits).
        Actor::Apic => Footprint::of(IRR | ISR | RUN | STORE_BUFFER, IRR | ISR | RUN),
        Actor::IrqCore => Footprint::of(DEVICE_VECTOR, DEVICE_VECTOR),
        Actor::StoreBuffer | Actor::ApicIdt | Actor::IommuSwap | Actor::Migration => {
            Footprint::EVERYTHING
        }
    }
}

/// The bit of `actor` in a sleep set.
pub(super) fn sleep_bit(actor: Actor) -> u32 {
    let index = match actor {
        Actor::Handler => 0,
        Actor::StoreBuffer => 1,
        Actor::IommuUrg => 2,
        Actor::SnCpu => 3,
        Actor::Apic => 4,
        Actor::IrqCore => 5,
        Actor::ApicIdt => 6,
        Actor::IommuSwap => 7,
        Actor::Migration => 8,
        // At most MAX_POST_CHOICES (16) choices, so 9 + k < 32.
        Actor::Iommu(k) => 9 + u32::from(k),
    };
    1 << index
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post(device: u8, word: u32, notifies: bool) -> Footprint {
        let mut writes = 1 << word;
        if notifies {
            writes |= part::ON | part::IRR;
        }
        Footprint {
            ledger: Some(Vector(0x20 + word as u8 * 64)),
            post: Some(device),
            ..Footprint::of(part::ON | part::SN, writes)
        }
    }

    #[test]
    fn posts_commute_with_each_other_and_with_steps_elsewhere_only() {
        assert!(post(0, 0, true).independent(&post(1, 0, true)));
        assert!(
            !post(0, 0, false).independent(&post(0, 1, false)),
            "one device's alternatives"
        );
        let xchg_word1 = Footprint::of(part::RUN | 2, part::RUN | 2);
        assert!(post(0, 0, true).independent(&xchg_word1));
        assert!(!post(0, 1, false).independent(&xchg_word1));
        let clear_on = Footprint::of(part::RUN | part::ON, part::RUN | part::ON);
        // A post reads ON; clearing it changes what the post does.
        assert!(!post(0, 0, false).independent(&clear_on));
        let deliver = Footprint::of(part::IRR | part::ISR | part::RUN, part::IRR | part::ISR);
        assert!(post(0, 0, false).independent(&deliver));
        assert!(!post(0, 0, true).independent(&deliver), "the post sets IRR");
        assert!(!Footprint::EVERYTHING.independent(&Footprint::of(0, 0)));
        assert!(!Footprint::of(0, 0).independent(&Footprint::EVERYTHING));
    }

    #[test]
    fn a_handler_call_conflicts_with_a_post_of_its_own_vector() {
        let v = Vector(0x21);
        let call = Footprint {
            ledger: Some(v),
            ..Footprint::of(part::RUN, part::RUN)
        };
        let post_of = |vector| Footprint {
            ledger: Some(vector),
            post: Some(0),
            ..Footprint::of(part::ON | part::SN, 1)
        };
        assert!(!call.independent(&post_of(v)));
        assert!(call.independent(&post_of(Vector(0x22))));
    }

    #[test]
    fn sleep_bits_are_distinct() {
        let mut actors = vec![
            Actor::Handler,
            Actor::StoreBuffer,
            Actor::IommuUrg,
            Actor::SnCpu,
            Actor::Apic,
            Actor::IrqCore,
            Actor::ApicIdt,
            Actor::IommuSwap,
            Actor::Migration,
        ];
        actors.extend((0..super::super::MAX_POST_CHOICES as u8).map(Actor::Iommu));
        let mut seen = 0u32;
        for a in actors {
            let bit = sleep_bit(a);
            assert_eq!(bit.count_ones(), 1);
            assert_eq!(seen & bit, 0, "{a:?}");
            seen |= bit;
        }
    }
}
