//! The non-posted path: every MSI is its own interrupt.
//!
//! x86 MSIs are handled by `handle_edge_irq`, whose `irq_ack` for a remapped vector is
//! `apic_ack_irq`, i.e. the EOI is written *before* the device handler runs
//! (kernel/irq/chip.c, arch/x86/kernel/apic/vector.c). A second MSI for the same
//! vector arriving during the handler therefore sets IRR again and is taken as a new
//! interrupt after this one returns, instead of merging.

use super::ops::CpuPort;
use sim_core::Vector;

/// One edge-triggered MSI interrupt after IDT entry: ack (EOI), then the handler.
pub async fn handle_edge_msi(cpu: &CpuPort, vector: Vector) {
    cpu.eoi().await;
    cpu.handle_vector(vector).await;
}

/// An LPI on Arm (GICv3, EOImode 0): Linux's `handle_fasteoi_irq` runs the handler and
/// then writes ICC_EOIR1 (`gic_eoi_irq`), after the acknowledge done at entry.
pub async fn handle_fasteoi_irq(cpu: &CpuPort, vector: Vector) {
    cpu.handle_vector(vector).await;
    cpu.eoi().await;
}
