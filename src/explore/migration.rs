//! IRTE migration in the explorer: an affinity change of the non-urgent device's
//! interrupt from the handler's CPU (A, the one modelled) to another CPU (B) while
//! its posts are in flight, following Linux's sequence for posted MSIs:
//!
//! 1. `modify_irte()` writes the IRTE with B's vector and descriptor;
//! 2. it invalidates the interrupt entry cache (`qi_flush_iec`, with an invalidation
//!    wait); from then on the IOMMU remaps with the new entry;
//! 3. later, on A itself (the vector cleanup, `__vector_cleanup()` in
//!    `arch/x86/kernel/apic/vector.c`), the old vector is freed unless
//!    `is_vector_pending()` finds it pending, in which case the cleanup is retried.
//!    Linux commit ce0a92871179 ("x86/irq: Extend checks for pending vectors to
//!    posted interrupts", v6.10) made that check read A's PIR as well as its IRR:
//!    an IOMMU that fetched the old IRTE before step 1 can set the vector's bit in
//!    A's PIR after it ([`MigrationCleanup::IrrAndPir`]). Before it
//!    ([`MigrationCleanup::IrrOnly`]) a posted vector is never in IRR, so the
//!    cleanup frees it with its bit still in A's PIR; A's handler then dispatches a
//!    vector that has no interrupt behind it (Linux counts it spurious) and the
//!    device's MSI is lost.
//!
//! With a migration, a post of the device is two IOMMU steps, as the patch's scenario
//! draws it: the IRTE fetch (`iommu`), which finds the old entry until step 2 and the
//! new one after, and the descriptor update (`iommu-swap`). A post remapped with the
//! new entry goes to B, which is not modelled: it counts as posted and handled there.
//! Step 2 waits for a post that fetched the old entry to finish its update (an
//! assumption: the invalidation wait drains requests remapped through the entries it
//! invalidates), so no post lands in A's PIR after the flush. The cleanup runs on A,
//! so not while A's handler runs.

use serde::{Deserialize, Serialize};
use sim_core::Vector;

use super::model::{Invariant, StepNote, Violation, World};
pub use crate::kernel::migration::MigrationCleanup;

/// Where the migration of the device's interrupt has got.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MigrationStep {
    /// Not started: the IRTE names A's descriptor.
    NotStarted,
    /// The IRTE in memory names B; the IOMMU may still use the cached old entry.
    IrteWritten,
    /// The entry cache is invalidated: every post from now on goes to B.
    IecFlushed,
    /// The old vector is freed on A.
    OldVectorFreed,
}

/// A post between its IRTE fetch and its descriptor update.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FetchedPost {
    /// The vector the fetched entry names.
    pub vector: Vector,
    /// The entry fetched was the new one (B's descriptor).
    pub to_new_cpu: bool,
}

impl World {
    /// The IOMMU fetches the IRTE of a post of `vector` by the migrating device.
    pub fn fetch_irte(&mut self, vector: Vector) -> StepNote {
        let to_new_cpu = matches!(
            self.migration,
            MigrationStep::IecFlushed | MigrationStep::OldVectorFreed
        );
        self.fetched = Some(FetchedPost { vector, to_new_cpu });
        StepNote::lazy(|| {
            format!(
                "IRTE fetch for {vector}: {}",
                if to_new_cpu {
                    "the new entry (CPU B)"
                } else {
                    "the old entry (CPU A's descriptor)"
                }
            )
        })
    }

    /// The fetched post updates its descriptor: A's (a post as without migration) or
    /// B's (counted as posted and handled there). Returns whether a notification was
    /// sent to A.
    pub fn swap_fetched(&mut self, checks: &mut u64) -> Result<(bool, StepNote), Violation> {
        let post = self.fetched.take().expect("a fetched post");
        if post.to_new_cpu {
            self.posts_to_new_cpu += 1;
            return Ok((
                false,
                StepNote::lazy(|| {
                    format!(
                        "post {} into CPU B's descriptor (handled there)",
                        post.vector
                    )
                }),
            ));
        }
        self.post(post.vector, false, checks)
    }

    /// Whether the migrating CPU's next step can run now.
    pub fn migration_can_step(&self) -> bool {
        match self.migration {
            MigrationStep::NotStarted => self.migrated.is_some(),
            // The invalidation wait drains a post remapped with the old entry.
            MigrationStep::IrteWritten => self.fetched.is_none_or(|p| p.to_new_cpu),
            // The cleanup runs on A, with A's interrupts off. While it finds the
            // vector pending it is retried later; a retry that would find the same is
            // not a step of its own.
            MigrationStep::IecFlushed => self.run.is_none() && !self.cleanup_finds_pending(),
            MigrationStep::OldVectorFreed => false,
        }
    }

    fn cleanup_finds_pending(&self) -> bool {
        // A posted vector is never in the APIC's IRR here (only the notification
        // vector is), so the IRR half of the check finds nothing.
        self.migrated.is_some_and(|vector| {
            self.cleanup
                .finds_pending(false, self.desc.pir().contains(vector))
        })
    }

    /// The migrating CPU's next step (see [`World::migration_can_step`]).
    pub fn migration_step(&mut self) -> StepNote {
        let vector = self.migrated.expect("a migration is configured");
        match self.migration {
            MigrationStep::NotStarted => {
                self.migration = MigrationStep::IrteWritten;
                StepNote::lazy(|| format!("modify_irte: the IRTE of {vector} now names CPU B"))
            }
            MigrationStep::IrteWritten => {
                self.migration = MigrationStep::IecFlushed;
                StepNote::lazy(|| "qi_flush_iec: the IOMMU remaps with the new entry".into())
            }
            MigrationStep::IecFlushed => {
                assert!(
                    !self.cleanup_finds_pending(),
                    "a cleanup that defers is no step"
                );
                self.migration = MigrationStep::OldVectorFreed;
                let in_pir = self.desc.pir().contains(vector);
                StepNote::lazy(|| {
                    format!(
                        "vector cleanup on A (checks {}): {vector} not pending, freed{}",
                        self.cleanup.name(),
                        if in_pir {
                            " with its PIR bit still set"
                        } else {
                            ""
                        }
                    )
                })
            }
            MigrationStep::OldVectorFreed => unreachable!("the migration is done"),
        }
    }

    /// A's handler dispatches `vector`: wrong once its vector was freed on A.
    pub(super) fn check_dispatch_after_free(&self, vector: Vector) -> Result<(), Violation> {
        if self.migration == MigrationStep::OldVectorFreed && self.migrated == Some(vector) {
            return Err(Violation::new(
                Invariant::NothingLost,
                format!(
                    "CPU A's handler dispatches {vector} after the vector cleanup freed it: \
                     no interrupt is behind the vector any more (Linux counts it spurious), \
                     so the device's MSI is lost"
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V21: Vector = Vector(0x21);

    fn migrating(cleanup: MigrationCleanup) -> World {
        let mut w = World::new();
        w.migrated = Some(V21);
        w.cleanup = cleanup;
        w
    }

    #[test]
    fn posts_follow_the_entry_cache_not_the_irte_in_memory() {
        let mut w = migrating(MigrationCleanup::IrrAndPir);
        let mut checks = 0;
        w.migration_step();
        assert_eq!(w.migration, MigrationStep::IrteWritten);
        w.fetch_irte(V21);
        // The flush waits for the post that fetched the old entry.
        assert!(!w.migration_can_step());
        w.swap_fetched(&mut checks).unwrap();
        assert!(w.desc.pir().contains(V21), "landed in A's PIR");
        assert!(w.migration_can_step());
        w.migration_step();
        w.fetch_irte(V21);
        w.swap_fetched(&mut checks).unwrap();
        assert_eq!(w.posts_to_new_cpu, 1);
    }

    #[test]
    fn only_the_pir_check_defers_the_free() {
        for (cleanup, freed) in [
            (MigrationCleanup::IrrAndPir, false),
            (MigrationCleanup::IrrOnly, true),
        ] {
            let mut w = migrating(cleanup);
            let mut checks = 0;
            w.migration_step();
            w.fetch_irte(V21);
            w.swap_fetched(&mut checks).unwrap();
            w.migration_step();
            // With the PIR bit set, only the IRR-only check lets the cleanup run.
            assert_eq!(w.migration_can_step(), freed, "{cleanup:?}");
            if freed {
                w.migration_step();
            }
            assert_eq!(
                w.migration == MigrationStep::OldVectorFreed,
                freed,
                "{cleanup:?}"
            );
            assert_eq!(w.check_dispatch_after_free(V21).is_err(), freed);
        }
    }

    #[test]
    fn the_cleanup_waits_for_cpu_a_to_leave_its_handler() {
        let mut w = migrating(MigrationCleanup::IrrAndPir);
        w.migration = MigrationStep::IecFlushed;
        w.run = Some(super::super::model::Run::starting());
        assert!(!w.migration_can_step());
    }
}
