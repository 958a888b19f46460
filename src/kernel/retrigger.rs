//! A posted device vector taken through the IDT: what `irq_retrigger()` does to a
//! posted MSI, before and after Linux commit 0edc78b82bea ("x86/msi: Make
//! irq_retrigger() functional for posted MSI", v6.19, backported to 6.12.y).
//!
//! With posted MSIs, a device's interrupt normally never reaches the local APIC as
//! its own vector: the IOMMU sets the vector's PIR bit and the CPU takes the
//! notification vector (0xeb), whose handler calls `handle_edge_irq` for every
//! vector it harvests and EOIs the notification once. The posted-MSI irq chip
//! (`intel_ir_chip_post_msi`) therefore has an `irq_ack` that writes no EOI.
//!
//! The IRQ core can still raise the device's vector directly. `check_irq_resend()`
//! (an `enable_irq()` after an edge arrived while disabled, `irq_startup()`, CPU
//! hot-unplug's `fixup_irqs()`) calls `irq_retrigger()`, which for x86 vector
//! domains is `apic_retrigger_irq()`: a fixed IPI of the device's vector to its
//! target CPU. That IPI is accepted into IRR, taken through the IDT and handled by
//! `handle_edge_irq` with the same chip, so its ack runs as well:
//! - [`PostedMsiAck::MoveIrqOnly`] (v6.10 "iommu/vt-d: Enable posted mode for
//!   device MSIs", ed1e48ea4370, until the fix): `irq_move_irq()` and no EOI. The
//!   vector stays in the ISR for good; the processor priority stays at its class,
//!   so every vector of that class and below is never delivered again.
//! - [`PostedMsiAck::EoiIfInactive`] (the fix): a per-CPU
//!   `posted_msi_handler_active` flag is set for the length of the notification
//!   handler; the ack EOIs when it is clear, i.e. when the vector came through
//!   the IDT and not through the posted handler (where an EOI would acknowledge the
//!   notification vector early).
//!
//! The flag is a cache-hot per-CPU variable read with interrupts off, so reading it
//! is free in the timed model and its value is the CPU's state when the algorithm
//! starts.

use serde::{Deserialize, Serialize};
use sim_core::Vector;

use super::ops::CpuPort;

/// The `irq_ack` of Linux's posted-MSI irq chip.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum,
)]
pub enum PostedMsiAck {
    /// `irq_move_irq` only (v6.10 to the fix): a retriggered vector is never EOI'd.
    #[serde(rename = "move-irq-only")]
    #[value(name = "move-irq-only")]
    MoveIrqOnly,
    /// `intel_ack_posted_msi_irq` (commit 0edc78b82bea): EOI unless the posted
    /// handler is running.
    #[default]
    #[serde(rename = "eoi-if-inactive")]
    #[value(name = "eoi-if-inactive")]
    EoiIfInactive,
}

impl PostedMsiAck {
    /// Every variant, in scenario spelling order.
    pub const ALL: [PostedMsiAck; 2] = [PostedMsiAck::MoveIrqOnly, PostedMsiAck::EoiIfInactive];

    /// The scenario spelling.
    pub fn label(self) -> &'static str {
        match self {
            PostedMsiAck::MoveIrqOnly => "move-irq-only",
            PostedMsiAck::EoiIfInactive => "eoi-if-inactive",
        }
    }

    /// Whether the ack writes the EOI, given the CPU's `posted_msi_handler_active`.
    pub fn eois(self, posted_handler_active: bool) -> bool {
        match self {
            PostedMsiAck::MoveIrqOnly => false,
            PostedMsiAck::EoiIfInactive => !posted_handler_active,
        }
    }
}

/// `handle_edge_irq` for a posted device's vector taken through the IDT (after IDT
/// entry): the chip's ack, then the device handler. The posted handler does not call
/// this: its device handlers run inside its own EOI window.
pub async fn handle_edge_posted(
    cpu: &CpuPort,
    vector: Vector,
    ack: PostedMsiAck,
    posted_handler_active: bool,
) {
    if ack.eois(posted_handler_active) {
        cpu.eoi().await;
    }
    cpu.handle_vector(vector).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_fix_eois_and_only_outside_the_posted_handler() {
        assert!(!PostedMsiAck::MoveIrqOnly.eois(false));
        assert!(!PostedMsiAck::MoveIrqOnly.eois(true));
        assert!(PostedMsiAck::EoiIfInactive.eois(false));
        assert!(!PostedMsiAck::EoiIfInactive.eois(true));
    }

    #[test]
    fn labels_are_the_scenario_spelling() {
        for ack in PostedMsiAck::ALL {
            let toml = format!("a = \"{}\"", ack.label());
            #[derive(Deserialize)]
            struct A {
                a: PostedMsiAck,
            }
            let parsed: A = toml::from_str(&toml).unwrap();
            assert_eq!(parsed.a, ack);
        }
        assert_eq!(PostedMsiAck::default(), PostedMsiAck::EoiIfInactive);
    }
}
