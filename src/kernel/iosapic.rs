//! Linux's IA-64 IOSAPIC driver (2.6.3 `arch/ia64/kernel/iosapic.c`, seed 001) and
//! the interrupt flow around it, beside x86's `io_apic.c`
//! ([`crate::kernel::ioapic_driver`]).
//!
//! The IOSAPIC has the IOAPIC's register interface (a select register, a window,
//! redirection entries of two 32-bit words, an EOI register), so both drivers run
//! against the same chip model. They differ in the flow:
//!
//! - `mask_irq` / `unmask_irq` change the mask bit with no `io_apic_sync` read after
//!   the mask; before seed 001's patch each read the low word through the window
//!   first ([`RteDriver::ReadModifyWrite`]), after it they write the shadow
//!   ([`RteDriver::Shadowed`]). `iosapic_set_affinity` read the low word to keep its
//!   other fields while changing the delivery mode; the patch takes it from the
//!   shadow too ([`set_affinity`]).
//! - disabling an edge interrupt is lazy: `disable_irq` only marks the descriptor
//!   IRQ_DISABLED (the chip's `disable` is a no-op for edge); an edge that arrives
//!   then is recorded as IRQ_PENDING, the second one makes the `ack` mask the entry
//!   for real, and `enable_irq` replays the interrupt with a self-IPI
//!   (`hw_resend_irq`). Nothing is lost. A level interrupt's `disable` masks the
//!   entry; the asserted line waits in the IOSAPIC.
//! - level interrupts end with a write of the vector to the IOSAPIC's EOI register,
//!   which clears Remote IRR; the CPU's own EOI (`ia64_eoi`) comes after the handler.
//!
//! [`do_irq`] is `__do_IRQ` of that kernel generation with the UIO-style action of
//! seed 001's user-level driver (Peter Chubb: the kernel stub does `disable_irq` and
//! wakes the user thread, which handles the device and calls `enable_irq` before its
//! next read): [`user_thread`].
//!
//! Sources (read for the sequence of steps; no code is taken from them): Linux 2.6.3
//! `arch/ia64/kernel/iosapic.c` (`mask_irq`, `unmask_irq`, `iosapic_set_affinity`,
//! the level and edge `hw_interrupt_type`s), `arch/ia64/kernel/irq.c` (`do_IRQ`,
//! `disable_irq_nosync`, `enable_irq`), `include/asm-ia64/hw_irq.h`
//! (`hw_resend_irq`).

use std::rc::Rc;

use serde::{Deserialize, Serialize};
use sim_core::Vector;

use super::ioapic_driver::{
    mask_irq, modify_mask, IoapicChipData, IoapicPort, PinHostOp, RteDriver,
};

/// IRQ_DISABLED in the status [`PinHostOp::DescStatus`] yields.
pub const DESC_DISABLED: u32 = 1 << 0;
/// IRQ_PENDING.
pub const DESC_PENDING: u32 = 1 << 1;
/// IRQ_INPROGRESS.
pub const DESC_INPROGRESS: u32 = 1 << 2;
/// IRQ_REPLAY.
pub const DESC_REPLAY: u32 = 1 << 3;

/// IOSAPIC delivery-mode field of the low word (bits 10:8).
const DELIVERY_SHIFT: u32 = 8;
/// Fixed delivery.
const DELIVERY_FIXED: u32 = 0;
/// Lowest-priority delivery (`redir`).
const DELIVERY_LOWEST: u32 = 1;
/// Destination field of the high word (bits 31:24, as the IOAPIC's 63:56).
const DEST_SHIFT: u32 = 24;

/// Which kernel drives the chip.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IoapicChipKind {
    /// x86 `io_apic.c`: a mask ends with the `io_apic_sync` read; the LAPIC EOI
    /// comes first (`handle_edge_irq`).
    #[default]
    X86IoApic,
    /// IA-64 `iosapic.c`: no sync read; the CPU EOI comes after the handler.
    Ia64Iosapic,
}

impl IoapicChipKind {
    /// `"x86-io-apic"` or `"ia64-iosapic"`.
    pub fn as_str(self) -> &'static str {
        match self {
            IoapicChipKind::X86IoApic => "x86-io-apic",
            IoapicChipKind::Ia64Iosapic => "ia64-iosapic",
        }
    }
}

/// How the user-level driver's flow keeps the interrupt off while it handles it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PinFlow {
    /// The hardirq masks the redirection entry itself (the chip's `irq_mask`, as
    /// with `IRQ_DISABLE_UNLAZY`); an edge while masked is lost.
    #[default]
    MaskRte,
    /// The hardirq calls `disable_irq_nosync` and the thread `enable_irq`: lazy
    /// for edge (IRQ_PENDING, then a replay), a mask for level. Nothing is lost.
    LazyDisable,
}

impl PinFlow {
    /// Both flows.
    pub const ALL: [PinFlow; 2] = [PinFlow::MaskRte, PinFlow::LazyDisable];
    /// `"mask-rte"` or `"lazy-disable"`.
    pub fn as_str(self) -> &'static str {
        match self {
            PinFlow::MaskRte => "mask-rte",
            PinFlow::LazyDisable => "lazy-disable",
        }
    }
}

/// How the pin's device signals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PinTrigger {
    /// A pulse per interrupt.
    #[default]
    Edge,
    /// The line stays high until the driver acknowledges the device (the DP83820 of
    /// seed 001).
    Level,
}

impl PinTrigger {
    /// `"edge"` or `"level"`.
    pub fn as_str(self) -> &'static str {
        match self {
            PinTrigger::Edge => "edge",
            PinTrigger::Level => "level",
        }
    }
}

/// Everything the flow of one pin needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PinSetup {
    /// How the mask bit is changed.
    pub driver: RteDriver,
    /// Which kernel's chip code.
    pub chip: IoapicChipKind,
    /// Mask the entry, or disable lazily.
    pub flow: PinFlow,
    /// Edge or level.
    pub trigger: PinTrigger,
}

/// The chip's `mask`: x86 with its sync read, IA-64 without.
pub async fn chip_mask(io: &IoapicPort, chip: &Rc<IoapicChipData>, s: PinSetup) {
    match s.chip {
        IoapicChipKind::X86IoApic => mask_irq(io.clone(), Rc::clone(chip), s.driver).await,
        IoapicChipKind::Ia64Iosapic => modify_mask(io, chip, s.driver, true).await,
    }
}

/// The chip's `unmask` (the same for both kernels).
pub async fn chip_unmask(io: &IoapicPort, chip: &Rc<IoapicChipData>, s: PinSetup) {
    modify_mask(io, chip, s.driver, false).await;
}

/// `iosapic_set_affinity`: aim the entry at `dest` with fixed delivery, or with
/// lowest-priority delivery if `redir`. Before the patch the low word is read back
/// to keep its other fields; after it, taken from the shadow. The high word is
/// written first, then the low word.
pub async fn set_affinity(
    io: &IoapicPort,
    chip: &Rc<IoapicChipData>,
    driver: RteDriver,
    dest: u8,
    redir: bool,
) {
    let high = (dest as u32) << DEST_SHIFT;
    let mode = if redir {
        DELIVERY_LOWEST
    } else {
        DELIVERY_FIXED
    };
    let keep = |low: u32| (low & !(7 << DELIVERY_SHIFT)) | (mode << DELIVERY_SHIFT);
    let low = match driver {
        RteDriver::ReadModifyWrite => {
            io.write_index(chip.reg_low()).await;
            keep(io.read_window().await)
        }
        RteDriver::Shadowed => {
            let low = keep(chip.entry_low());
            chip.set_entry_low(low);
            low
        }
    };
    io.write_index(chip.reg_high()).await;
    io.write_window(high).await;
    io.write_index(chip.reg_low()).await;
    io.write_window(low).await;
}

/// `disable_irq_nosync`: the chip's `disable` runs only when the depth leaves 0, and
/// is a mask for level and nothing for edge (lazy).
pub async fn disable_irq_nosync(io: &IoapicPort, chip: &Rc<IoapicChipData>, s: PinSetup) {
    if io.run(PinHostOp::DescDisable(chip.pin)).await != 0 && s.trigger == PinTrigger::Level {
        chip_mask(io, chip, s).await;
    }
}

/// `enable_irq` from the user thread: replay a pending interrupt, then the chip's
/// `enable` (an unmask, edge and level alike).
pub async fn enable_irq(io: &IoapicPort, chip: &Rc<IoapicChipData>, s: PinSetup) {
    let r = io.run(PinHostOp::DescEnable(chip.pin)).await;
    if r & 2 != 0 {
        io.run(PinHostOp::Resend(chip.pin)).await;
    }
    if r & 1 != 0 {
        chip_unmask(io, chip, s).await;
    }
}

/// The hardirq of a pin with the UIO-style action (the kernel stub disables the
/// interrupt and wakes the reader), as `__do_IRQ` runs it. With [`PinFlow::MaskRte`]
/// the stub masks the entry itself; with [`PinFlow::LazyDisable`] it calls
/// `disable_irq_nosync`.
pub async fn do_irq(io: IoapicPort, chip: Rc<IoapicChipData>, s: PinSetup, vector: Vector) {
    let x86 = s.chip == IoapicChipKind::X86IoApic;
    if x86 {
        io.host(PinHostOp::Eoi).await;
    }
    let status = io.run(PinHostOp::DescStatus).await;
    // The edge ack masks for real once an interrupt is already pending while
    // disabled ("this prevents IRQ storms from unhandled devices").
    let both = DESC_PENDING | DESC_DISABLED;
    if s.trigger == PinTrigger::Edge && status & both == both {
        chip_mask(&io, &chip, s).await;
    }
    if io.run(PinHostOp::DescEnter).await != 0 {
        loop {
            io.host(PinHostOp::HandleVector(vector)).await;
            match s.flow {
                PinFlow::MaskRte => chip_mask(&io, &chip, s).await,
                PinFlow::LazyDisable => disable_irq_nosync(&io, &chip, s).await,
            }
            io.host(PinHostOp::Notify).await;
            if io.run(PinHostOp::DescAgain).await == 0 {
                break;
            }
        }
        io.run(PinHostOp::DescExit).await;
    }
    if s.trigger == PinTrigger::Level {
        io.write_eoi(vector).await;
    }
    if !x86 {
        io.host(PinHostOp::Eoi).await;
    }
}

/// The user-level driver's thread: read (sleep until an event), handle the device
/// (a level device drops its line when acknowledged) for `hold_ns`, then re-enable
/// the interrupt through a system call: `enable_irq`, or for [`PinFlow::MaskRte`]
/// the chip's unmask.
pub async fn user_thread(io: IoapicPort, chip: Rc<IoapicChipData>, s: PinSetup, hold_ns: u64) {
    loop {
        io.host(PinHostOp::WaitEvent).await;
        if s.trigger == PinTrigger::Level {
            io.host(PinHostOp::AckDevice).await;
        }
        io.host(PinHostOp::Hold { ns: hold_ns }).await;
        io.host(PinHostOp::SyscallEntry).await;
        match s.flow {
            PinFlow::MaskRte => chip_unmask(&io, &chip, s).await,
            PinFlow::LazyDisable => enable_irq(&io, &chip, s).await,
        }
        io.host(PinHostOp::SyscallExit).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::ioapic_driver::{ioapic_with_edge_pin, run_now};
    use apic_sim::IoapicCosts;

    #[test]
    fn the_patch_takes_the_affinity_path_read_away_too() {
        for (driver, reads) in [(RteDriver::ReadModifyWrite, 1), (RteDriver::Shadowed, 0)] {
            let (mut io, entry) = ioapic_with_edge_pin(Vector(0x41), 5);
            let chip = IoapicChipData::new(5, entry);
            let c = Rc::clone(&chip);
            let run = run_now(&mut io, &IoapicCosts::default(), move |p| async move {
                set_affinity(&p, &c, driver, 3, true).await
            });
            assert_eq!(run.access.window_reads, reads, "{driver:?}");
            assert_eq!(run.access.window_writes, 2);
            let e = io.entry(5).unwrap();
            assert_eq!(e.destination(), 3);
            assert_eq!(e.vector(), Vector(0x41));
            assert_eq!((e.low() >> DELIVERY_SHIFT) & 7, DELIVERY_LOWEST);
        }
    }

    #[test]
    fn the_ia64_mask_has_no_sync_read() {
        let s = |chip| PinSetup {
            driver: RteDriver::Shadowed,
            chip,
            flow: PinFlow::MaskRte,
            trigger: PinTrigger::Level,
        };
        for (kind, reads) in [
            (IoapicChipKind::X86IoApic, 1),
            (IoapicChipKind::Ia64Iosapic, 0),
        ] {
            let (mut io, entry) = ioapic_with_edge_pin(Vector(0x41), 5);
            let chip = IoapicChipData::new(5, entry);
            let c = Rc::clone(&chip);
            let setup = s(kind);
            let run = run_now(&mut io, &IoapicCosts::default(), move |p| async move {
                chip_mask(&p, &c, setup).await
            });
            assert_eq!(run.access.window_reads, reads, "{kind:?}");
            assert!(io.entry(5).unwrap().masked());
        }
    }

    #[test]
    fn names_are_the_scenario_spellings() {
        assert_eq!(IoapicChipKind::Ia64Iosapic.as_str(), "ia64-iosapic");
        assert_eq!(PinFlow::LazyDisable.as_str(), "lazy-disable");
        assert_eq!(PinTrigger::Level.as_str(), "level");
        let flow: PinFlow = serde_json::from_str("\"mask-rte\"").unwrap();
        assert_eq!(flow, PinFlow::MaskRte);
    }
}
