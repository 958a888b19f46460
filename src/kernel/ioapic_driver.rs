//! IOAPIC driver operations: `mask_irq` and `unmask_irq` on one redirection entry, in
//! the two ways Linux has done them.
//!
//! - [`RteDriver::ReadModifyWrite`] (Linux before 4.x, `__io_apic_modify_irq`):
//!   select the entry's low word, read it through the window, set or clear the mask
//!   bit, write it back through the window (the index register still selects it).
//! - [`RteDriver::Shadowed`] (current Linux, `io_apic_modify_irq` with the
//!   `mp_chip_data` copy of the entry): change the mask bit in the kernel's copy of
//!   the low word and write it: index write, window write, no read.
//!
//! Both drivers, as Linux's `mask_ioapic_irq`, follow a mask with `io_apic_sync`: a
//! dummy window read, so the posted mask write has reached the IOAPIC before the
//! function returns. An unmask has no such read. The ioapic lock (a raw spinlock with
//! interrupts off) is not charged.
//!
//! The UIO-style flows around these (the hardirq that keeps the interrupt off, the
//! user thread that turns it back on, on x86 and on IA-64) are in
//! [`crate::kernel::iosapic`].
//!
//! Every register access is one [`IoapicOp`] awaited through an [`IoapicPort`]; the
//! driver running the algorithm performs it on an [`Ioapic`] with [`perform`] and
//! charges it with [`IoapicCosts`]. [`run_now`] is the simplest driver: it performs
//! each access at once and adds up the costs.
//!
//! Sources (for the sequence of accesses; no code taken): Linux
//! `arch/x86/kernel/apic/io_apic.c` (`io_apic_read`, `io_apic_write`,
//! `io_apic_modify`, `io_apic_sync`, `mask_ioapic_irq`, `unmask_ioapic_irq`; the
//! read-modify-write form in v2.6-v4.3, the shadow since v4.5); the 82093AA datasheet
//! for IOREGSEL/IOWIN.

use std::cell::Cell;
use std::future::Future;
use std::rc::Rc;

use apic_sim::ioapic::{IOEOI, IOREDTBL0, IOREGSEL, IOWIN, RTE_MASKED};
use apic_sim::{
    DeliveryMode, DestMode, InterruptMessage, Ioapic, IoapicAccess, IoapicCosts, Polarity,
    RedirectionEntry, TriggerMode,
};
use serde::{Deserialize, Serialize};
use sim_core::{Duration, Vector};

use crate::engine::{Call, Coroutine, Port, Step};

/// One IOAPIC register access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IoapicOp {
    /// A posted write of the index register (IOREGSEL) selecting register `reg`.
    WriteIndex(u8),
    /// An uncached read of the data window (IOWIN); yields the selected register.
    ReadWindow,
    /// A posted write of the data window.
    WriteWindow(u32),
    /// A posted write of the EOI register (IOEOI; the IA-64 IOSAPIC's
    /// `IOSAPIC_EOI`) with a vector: clears Remote IRR of the level entries of it.
    WriteEoi(u8),
    /// A step of the flow around the register accesses (not an IOAPIC access).
    Host(PinHostOp),
}

/// The steps of a UIO-style flow on an IOAPIC pin that are not register accesses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PinHostOp {
    /// The x2APIC EOI (`handle_edge_irq` acknowledges before the handler).
    Eoi,
    /// The generic irq flow around the handler; serves the interrupts of `vector`.
    HandleVector(Vector),
    /// `uio_event_notify`: count the event and wake the reader.
    Notify,
    /// The user thread's `read()`: returns at once if an event is counted that it has
    /// not seen, else sleeps until `Notify`.
    WaitEvent,
    /// User-space work handling the event, `ns` long; interrupts preempt it.
    Hold {
        /// Nanoseconds left.
        ns: u64,
    },
    /// System call entry for the unmask; interrupts are off until the exit (the
    /// irq descriptor's lock is taken with interrupts saved).
    SyscallEntry,
    /// System call exit.
    SyscallExit,
    /// The driver reads the device's status and acknowledges it: a level-triggered
    /// device drops its line, and every event it had pending is served.
    AckDevice,
    /// The irq descriptor, as `__do_IRQ` enters: yields the status before the ack
    /// ([`crate::kernel::iosapic::DESC_PENDING`] and the other bits).
    DescStatus,
    /// `__do_IRQ` after the ack: sets IRQ_PENDING; unless IRQ_DISABLED or
    /// IRQ_INPROGRESS, takes it (clears PENDING, sets INPROGRESS) and yields 1.
    DescEnter,
    /// After a handler run: yields 1 (and clears it) if IRQ_PENDING was set again
    /// meanwhile, so the handler runs once more.
    DescAgain,
    /// `__do_IRQ`'s exit: clears IRQ_INPROGRESS.
    DescExit,
    /// `disable_irq_nosync` of input `pin`: depth + 1; yields 1 if it was 0
    /// (IRQ_DISABLED set, the chip's disable follows).
    DescDisable(u8),
    /// `enable_irq` of input `pin`: depth - 1; yields bit 0 when it reached 0
    /// (IRQ_DISABLED cleared, the chip's enable follows) and bit 1 when the interrupt
    /// must be replayed (IRQ_PENDING without IRQ_REPLAY: IRQ_REPLAY is set).
    DescEnable(u8),
    /// `hw_resend_irq` of input `pin`: a self-IPI of its vector to its CPU.
    Resend(u8),
}

/// The algorithm's handle on the IOAPIC.
#[derive(Clone)]
pub struct IoapicPort {
    port: Port<IoapicOp, u32>,
}

impl IoapicPort {
    /// Wraps a coroutine port.
    pub fn new(port: Port<IoapicOp, u32>) -> IoapicPort {
        IoapicPort { port }
    }
    fn op(&self, op: IoapicOp) -> Call<IoapicOp, u32> {
        self.port.call(op)
    }
    /// `writel(reg, &io_apic->index)`.
    pub async fn write_index(&self, reg: u8) {
        self.op(IoapicOp::WriteIndex(reg)).await;
    }
    /// `readl(&io_apic->data)`.
    pub async fn read_window(&self) -> u32 {
        self.op(IoapicOp::ReadWindow).await
    }
    /// `writel(value, &io_apic->data)`.
    pub async fn write_window(&self, value: u32) {
        self.op(IoapicOp::WriteWindow(value)).await;
    }
    /// One step of the flow around the accesses ([`PinHostOp`]).
    pub async fn host(&self, op: PinHostOp) {
        self.op(IoapicOp::Host(op)).await;
    }
    /// A step of the flow that yields a value (the irq descriptor's answers).
    pub async fn run(&self, op: PinHostOp) -> u32 {
        self.op(IoapicOp::Host(op)).await
    }
    /// `writel(vector, &io_apic->eoi)`: the EOI register.
    pub async fn write_eoi(&self, vector: Vector) {
        self.op(IoapicOp::WriteEoi(vector.0)).await;
    }
}

/// How the driver changes the mask bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RteDriver {
    /// Read the low word, modify, write it back.
    ReadModifyWrite,
    /// Write the kernel's shadow of the low word; no read.
    Shadowed,
}

impl RteDriver {
    /// Both drivers.
    pub const ALL: [RteDriver; 2] = [RteDriver::ReadModifyWrite, RteDriver::Shadowed];
    /// `"read-modify-write"` or `"shadowed"`.
    pub fn as_str(self) -> &'static str {
        match self {
            RteDriver::ReadModifyWrite => "read-modify-write",
            RteDriver::Shadowed => "shadowed",
        }
    }
}

/// The kernel's data for one IOAPIC pin (Linux `mp_chip_data`): the pin, and the
/// copy of the entry's low word the shadowed driver writes from.
#[derive(Debug)]
pub struct IoapicChipData {
    /// The IOAPIC input.
    pub pin: u8,
    entry_low: Cell<u32>,
}

impl IoapicChipData {
    /// Chip data for `pin` whose entry was programmed as `entry` (as
    /// `ioapic_write_entry` at setup leaves the shadow equal to the hardware).
    pub fn new(pin: u8, entry: RedirectionEntry) -> Rc<IoapicChipData> {
        Rc::new(IoapicChipData {
            pin,
            entry_low: Cell::new(entry.low()),
        })
    }
    /// The shadow of the low word.
    pub fn entry_low(&self) -> u32 {
        self.entry_low.get()
    }
    /// Replaces the shadow of the low word.
    pub fn set_entry_low(&self, low: u32) {
        self.entry_low.set(low);
    }
    /// Index of the entry's low word.
    pub fn reg_low(&self) -> u8 {
        IOREDTBL0 + 2 * self.pin
    }
    /// Index of the entry's high word.
    pub fn reg_high(&self) -> u8 {
        IOREDTBL0 + 2 * self.pin + 1
    }
}

/// `io_apic_read(apic, reg)`: select, then read the window.
pub async fn io_apic_read(io: &IoapicPort, reg: u8) -> u32 {
    io.write_index(reg).await;
    io.read_window().await
}

/// `io_apic_write(apic, reg, value)`: select, then write the window.
pub async fn io_apic_write(io: &IoapicPort, reg: u8, value: u32) {
    io.write_index(reg).await;
    io.write_window(value).await;
}

/// `io_apic_modify(apic, reg, value)` right after `io_apic_read` of the same
/// register: the index still selects it, so only the window is written (the extra
/// index write of the SiS workaround is not modelled).
pub async fn io_apic_modify(io: &IoapicPort, value: u32) {
    io.write_window(value).await;
}

/// `io_apic_sync`: a dummy window read that waits for posted writes to land.
pub async fn io_apic_sync(io: &IoapicPort) {
    io.read_window().await;
}

/// Sets or clears the mask bit of `chip`'s entry with `driver`, with no sync read.
pub async fn modify_mask(io: &IoapicPort, chip: &IoapicChipData, driver: RteDriver, masked: bool) {
    let mask = RTE_MASKED as u32;
    match driver {
        RteDriver::ReadModifyWrite => {
            // reg = io_apic_read(apic, 0x10 + pin * 2); reg &= and; reg |= or;
            let mut reg = io_apic_read(io, chip.reg_low()).await;
            if masked {
                reg |= mask;
            } else {
                reg &= !mask;
            }
            io_apic_modify(io, reg).await;
        }
        RteDriver::Shadowed => {
            // data->entry.masked = masked; io_apic_write(apic, 0x10 + 2 * pin, w1);
            let low = if masked {
                chip.entry_low.get() | mask
            } else {
                chip.entry_low.get() & !mask
            };
            chip.entry_low.set(low);
            io_apic_write(io, chip.reg_low(), low).await;
        }
    }
}

/// `mask_ioapic_irq`: set the mask bit, then `io_apic_sync`.
pub async fn mask_irq(io: IoapicPort, chip: Rc<IoapicChipData>, driver: RteDriver) {
    modify_mask(&io, &chip, driver, true).await;
    io_apic_sync(&io).await;
}

/// `unmask_ioapic_irq`: clear the mask bit.
pub async fn unmask_irq(io: IoapicPort, chip: Rc<IoapicChipData>, driver: RteDriver) {
    modify_mask(&io, &chip, driver, false).await;
}

/// What performing one access did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpEffect {
    /// The value read (0 for writes).
    pub value: u32,
    /// The access, to be charged.
    pub access: IoapicAccess,
    /// Messages the access caused (unmasking an asserted level pin), (pin, message).
    pub delivered: Vec<(u8, InterruptMessage)>,
}

/// Performs `op` on `io`.
pub fn perform(io: &mut Ioapic, op: IoapicOp) -> OpEffect {
    let write = |io: &mut Ioapic, offset, value| {
        let w = io.mmio_write(offset, value);
        OpEffect {
            value: 0,
            access: w.access,
            delivered: w.delivered,
        }
    };
    match op {
        IoapicOp::WriteIndex(reg) => write(io, IOREGSEL, reg as u32),
        IoapicOp::ReadWindow => {
            let (value, access) = io.mmio_read(IOWIN);
            OpEffect {
                value,
                access,
                delivered: Vec::new(),
            }
        }
        IoapicOp::WriteWindow(v) => write(io, IOWIN, v),
        IoapicOp::WriteEoi(vector) => write(io, IOEOI, vector as u32),
        // Not a register access: the driver of the flow performs it.
        IoapicOp::Host(_) => OpEffect::default(),
    }
}

/// What [`run_now`] measured.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DriverRun {
    /// CPU time of all accesses under the cost table.
    pub time: Duration,
    /// The accesses.
    pub access: IoapicAccess,
    /// Every access, in order.
    pub ops: Vec<IoapicOp>,
    /// Messages the accesses caused, (pin, message).
    pub delivered: Vec<(u8, InterruptMessage)>,
}

/// The entry Linux programs for a legacy edge interrupt of `vector` at APIC `dest`:
/// fixed delivery, physical destination, active high, unmasked.
pub fn linux_edge_entry(vector: Vector, dest: u8) -> RedirectionEntry {
    linux_entry(vector, dest, TriggerMode::Edge)
}

/// The same with `trigger` (a PCI INTx line is level-triggered; Linux programs it
/// active low on x86, which this model does not distinguish).
pub fn linux_entry(vector: Vector, dest: u8, trigger: TriggerMode) -> RedirectionEntry {
    RedirectionEntry::new(
        vector,
        DeliveryMode::Fixed,
        DestMode::Physical,
        trigger,
        Polarity::ActiveHigh,
        false,
        dest,
    )
}

/// An IOAPIC (id 0, 24 pins) with `pin` programmed with [`linux_edge_entry`] at APIC
/// 0. Returns the chip and the entry written.
pub fn ioapic_with_edge_pin(vector: Vector, pin: u8) -> (Ioapic, RedirectionEntry) {
    let entry = linux_edge_entry(vector, 0);
    let mut io = Ioapic::new(0, 24).expect("24 pins");
    let _ = io.write_entry(pin, entry).expect("pin exists");
    (io, entry)
}

/// Runs an algorithm against `io` with nothing else happening: each access is
/// performed at once and charged with `costs`.
pub fn run_now<F>(
    io: &mut Ioapic,
    costs: &IoapicCosts,
    algorithm: impl FnOnce(IoapicPort) -> F,
) -> DriverRun
where
    F: Future<Output = ()> + 'static,
{
    let mut co: Coroutine<IoapicOp, u32> = Coroutine::new(|port| algorithm(IoapicPort::new(port)));
    let mut run = DriverRun::default();
    let mut step = co.resume(None);
    while let Step::Request(op) = step {
        let fx = perform(io, op);
        run.time += fx.access.cost(costs);
        run.access += fx.access;
        run.ops.push(op);
        run.delivered.extend(fx.delivered);
        step = co.resume(Some(fx.value));
    }
    run
}

#[cfg(test)]
mod tests {
    use super::*;
    use apic_sim::{DeliveryMode, DestMode, PinOutcome, Polarity, TriggerMode};
    use sim_core::Vector;

    fn entry(trigger: TriggerMode) -> RedirectionEntry {
        RedirectionEntry::new(
            Vector(0x41),
            DeliveryMode::Fixed,
            DestMode::Physical,
            trigger,
            Polarity::ActiveHigh,
            false,
            0,
        )
    }

    fn setup(trigger: TriggerMode) -> (Ioapic, Rc<IoapicChipData>) {
        let mut io = Ioapic::new(0, 24).unwrap();
        let e = entry(trigger);
        let _ = io.write_entry(5, e).unwrap();
        (io, IoapicChipData::new(5, e))
    }

    #[test]
    fn access_sequences_follow_linux() {
        let costs = IoapicCosts::default();
        let reg = IOREDTBL0 + 10;
        for (driver, mask_ops, unmask_ops) in [
            (
                RteDriver::ReadModifyWrite,
                vec![
                    IoapicOp::WriteIndex(reg),
                    IoapicOp::ReadWindow,
                    IoapicOp::WriteWindow(entry(TriggerMode::Edge).low() | RTE_MASKED as u32),
                    IoapicOp::ReadWindow,
                ],
                vec![
                    IoapicOp::WriteIndex(reg),
                    IoapicOp::ReadWindow,
                    IoapicOp::WriteWindow(entry(TriggerMode::Edge).low()),
                ],
            ),
            (
                RteDriver::Shadowed,
                vec![
                    IoapicOp::WriteIndex(reg),
                    IoapicOp::WriteWindow(entry(TriggerMode::Edge).low() | RTE_MASKED as u32),
                    IoapicOp::ReadWindow,
                ],
                vec![
                    IoapicOp::WriteIndex(reg),
                    IoapicOp::WriteWindow(entry(TriggerMode::Edge).low()),
                ],
            ),
        ] {
            let (mut io, chip) = setup(TriggerMode::Edge);
            let c = Rc::clone(&chip);
            let m = run_now(&mut io, &costs, move |p| mask_irq(p, c, driver));
            assert_eq!(m.ops, mask_ops, "{driver:?}");
            assert!(io.entry(5).unwrap().masked());
            let c = Rc::clone(&chip);
            let u = run_now(&mut io, &costs, move |p| unmask_irq(p, c, driver));
            assert_eq!(u.ops, unmask_ops, "{driver:?}");
            assert_eq!(io.entry(5).unwrap(), entry(TriggerMode::Edge));
            assert_eq!(u.time, u.access.cost(&costs));
        }
    }

    #[test]
    fn unmasking_an_asserted_level_pin_delivers_it() {
        for driver in RteDriver::ALL {
            let (mut io, chip) = setup(TriggerMode::Level);
            let c = Rc::clone(&chip);
            let _ = run_now(&mut io, &IoapicCosts::default(), move |p| {
                mask_irq(p, c, driver)
            });
            assert_eq!(io.assert_pin(5, true), Ok(PinOutcome::PendingUntilUnmask));
            let c = Rc::clone(&chip);
            let u = run_now(&mut io, &IoapicCosts::default(), move |p| {
                unmask_irq(p, c, driver)
            });
            assert_eq!(u.delivered.len(), 1, "{driver:?}");
            assert_eq!(u.delivered[0].1.vector, Vector(0x41));
        }
    }

    #[test]
    fn a_stale_shadow_writes_stale_fields() {
        // Someone retargeted the entry behind the shadowed driver's back: its next
        // unmask writes the old low word back (vector 0x41), as hardware would take it.
        let (mut io, chip) = setup(TriggerMode::Edge);
        let mut moved = entry(TriggerMode::Edge);
        moved.0 = (moved.0 & !0xff) | 0x42;
        let _ = io.write_entry(5, moved).unwrap();
        let _ = run_now(&mut io, &IoapicCosts::default(), move |p| {
            unmask_irq(p, chip, RteDriver::Shadowed)
        });
        assert_eq!(io.entry(5).unwrap().vector(), Vector(0x41));
    }
}
