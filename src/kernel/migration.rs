//! The old CPU's vector cleanup after an interrupt's affinity changes
//! (`__vector_cleanup()` in `arch/x86/kernel/apic/vector.c`): the old vector is freed
//! unless `is_vector_pending()` finds it pending on the old CPU, and the cleanup is
//! retried later while it does. For posted MSIs a vector that the IOMMU remapped with
//! the old IRTE can be pending in the old CPU's PIR, never in its IRR; Linux commit
//! ce0a92871179 ("x86/irq: Extend checks for pending vectors to posted interrupts",
//! v6.10) made the check read the PIR too. The explorer
//! (`explore::migration`) and the System (`system::migration`) both run it.

use serde::{Deserialize, Serialize};

/// How the old CPU's vector cleanup decides that the vector is still pending.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum MigrationCleanup {
    /// IRR and PIR (Linux commit ce0a92871179).
    #[default]
    IrrAndPir,
    /// IRR only (before it): broken on purpose for posted MSIs.
    IrrOnly,
}

impl MigrationCleanup {
    /// Stable name, as scenarios and the CLI spell it.
    pub fn name(self) -> &'static str {
        match self {
            MigrationCleanup::IrrAndPir => "irr-and-pir",
            MigrationCleanup::IrrOnly => "irr-only",
        }
    }

    /// Whether the cleanup finds the vector pending, given its IRR and PIR bits on
    /// the old CPU.
    pub fn finds_pending(self, in_irr: bool, in_pir: bool) -> bool {
        in_irr || (self == MigrationCleanup::IrrAndPir && in_pir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_fixed_cleanup_sees_a_pir_bit() {
        use MigrationCleanup::*;
        assert!(IrrAndPir.finds_pending(false, true));
        assert!(!IrrOnly.finds_pending(false, true));
        assert!(IrrOnly.finds_pending(true, false) && IrrAndPir.finds_pending(true, false));
        assert!(!IrrAndPir.finds_pending(false, false));
        assert_eq!(MigrationCleanup::default(), IrrAndPir);
        assert_eq!(
            (IrrAndPir.name(), IrrOnly.name()),
            ("irr-and-pir", "irr-only")
        );
    }
}
