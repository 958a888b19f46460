//! I/O APIC: redirection table, indirect register access and pin semantics.
//!
//! Source: Intel 82093AA I/O Advanced Programmable Interrupt Controller (IOAPIC)
//! datasheet, 3.0 (register access through IOREGSEL/IOWIN), 3.2.4 (IOREDTBL); the EOI
//! register at offset 0x40 of version 0x20+ IOAPICs (Intel PCH datasheets) used for
//! directed EOI (SDM Vol. 3A 11.8.5); Linux `arch/x86/kernel/apic/io_apic.c` for the
//! access patterns a kernel uses (read entry: two index/window pairs; write entry: high
//! word then low word; mask and unmask from a shadow of the low word).
//!
//! Modelled: IOREGSEL/IOWIN and the EOI register; ID, version, arbitration and
//! redirection registers; edge and level pins, mask, Remote IRR (set when a level
//! message is sent, cleared by an EOI for its vector, and by switching the entry to
//! edge, which Linux relies on for IOAPICs without an EOI register); a level pin that
//! is still asserted is delivered on unmask and again after its EOI; an edge pin
//! asserted while masked is lost and reported as such (the IOAPIC keeps no pending
//! state for edge). Every register access is counted in [`IoapicAccess`] so the kernel
//! model can charge it with [`IoapicCosts`].
//!
//! Not modelled: pin polarity (inputs are logical: asserted or not; the polarity bit
//! is stored and returned only); the delivery-status bit (always 0: messages are handed
//! to the engine at once); the remappable RTE format used with interrupt remapping
//! (the iommu-sim crate owns remapping); the IOSAPIC; the APIC serial bus and
//! arbitration IDs; the 8259 (ExtINT) path; a level message the LAPIC rejects still
//! sets Remote IRR.

use crate::icr::{DeliveryMode, DestMode, TriggerMode};
use crate::ApicError;
use serde::{Deserialize, Serialize};
use sim_core::{Duration, Vector};

/// MMIO offset of the index register (IOREGSEL), a posted write.
pub const IOREGSEL: u64 = 0x00;
/// MMIO offset of the data window (IOWIN).
pub const IOWIN: u64 = 0x10;
/// MMIO offset of the EOI register (version 0x20 and later).
pub const IOEOI: u64 = 0x40;

/// Indirect register indexes.
pub const IOAPICID: u8 = 0x00;
pub const IOAPICVER: u8 = 0x01;
pub const IOAPICARB: u8 = 0x02;
/// Redirection entry n: low dword at `IOREDTBL0 + 2n`, high dword at `+ 2n + 1`.
pub const IOREDTBL0: u8 = 0x10;

/// At most 120 entries fit below index 0x100.
pub const MAX_PINS: u8 = 120;
/// Version with the EOI register (ICH/PCH IOAPICs).
pub const VERSION_WITH_EOI: u8 = 0x20;

/// IOAPICID bits 27:24.
pub const ID_SHIFT: u32 = 24;
pub const ID_MASK: u32 = 0x0f00_0000;

/// RTE bits 7:0: vector.
pub const RTE_VECTOR_MASK: u64 = 0xff;
/// RTE bits 10:8: delivery mode.
pub const RTE_DELIVERY_MODE_SHIFT: u32 = 8;
pub const RTE_DELIVERY_MODE_MASK: u64 = 0x7 << RTE_DELIVERY_MODE_SHIFT;
/// RTE bit 11: destination mode (1 = logical).
pub const RTE_DEST_LOGICAL: u64 = 1 << 11;
/// RTE bit 12: delivery status (read-only).
pub const RTE_DELIVERY_STATUS: u64 = 0x1000;
/// RTE bit 13: input pin polarity (1 = active low).
pub const RTE_POLARITY_LOW: u64 = 1 << 13;
/// RTE bit 14: Remote IRR (read-only).
pub const RTE_REMOTE_IRR: u64 = 1 << 14;
/// RTE bit 15: trigger mode (1 = level).
pub const RTE_TRIGGER_LEVEL: u64 = 1 << 15;
/// RTE bit 16: mask.
pub const RTE_MASKED: u64 = 1 << 16;
/// RTE bits 63:56: destination.
pub const RTE_DEST_SHIFT: u32 = 56;
/// Bits software can write: everything but the read-only and reserved (55:17) bits.
pub const RTE_WRITABLE: u64 = 0xff00_0000_0001_afff;

/// Input pin polarity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Polarity {
    #[default]
    ActiveHigh,
    ActiveLow,
}

/// One 64-bit redirection table entry (82093AA 3.2.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct RedirectionEntry(pub u64);

impl Default for RedirectionEntry {
    /// The reset value: masked, everything else 0.
    fn default() -> Self {
        RedirectionEntry(RTE_MASKED)
    }
}

impl RedirectionEntry {
    /// An entry from its fields (Remote IRR and delivery status clear).
    pub fn new(
        vector: Vector,
        mode: DeliveryMode,
        dest_mode: DestMode,
        trigger: TriggerMode,
        polarity: Polarity,
        masked: bool,
        destination: u8,
    ) -> RedirectionEntry {
        let mut v = vector.0 as u64
            | (mode.bits() as u64) << RTE_DELIVERY_MODE_SHIFT
            | (destination as u64) << RTE_DEST_SHIFT;
        if dest_mode == DestMode::Logical {
            v |= RTE_DEST_LOGICAL;
        }
        if trigger == TriggerMode::Level {
            v |= RTE_TRIGGER_LEVEL;
        }
        if polarity == Polarity::ActiveLow {
            v |= RTE_POLARITY_LOW;
        }
        if masked {
            v |= RTE_MASKED;
        }
        RedirectionEntry(v)
    }

    pub fn vector(self) -> Vector {
        Vector((self.0 & RTE_VECTOR_MASK) as u8)
    }
    /// `None` for the reserved encodings 011 and 110 (Start-Up is not an IOAPIC mode).
    pub fn delivery_mode(self) -> Option<DeliveryMode> {
        match DeliveryMode::from_bits(
            ((self.0 & RTE_DELIVERY_MODE_MASK) >> RTE_DELIVERY_MODE_SHIFT) as u8,
        ) {
            Some(DeliveryMode::StartUp) | None => None,
            m => m,
        }
    }
    pub fn dest_mode(self) -> DestMode {
        if self.0 & RTE_DEST_LOGICAL != 0 {
            DestMode::Logical
        } else {
            DestMode::Physical
        }
    }
    pub fn delivery_status(self) -> bool {
        self.0 & RTE_DELIVERY_STATUS != 0
    }
    pub fn polarity(self) -> Polarity {
        if self.0 & RTE_POLARITY_LOW != 0 {
            Polarity::ActiveLow
        } else {
            Polarity::ActiveHigh
        }
    }
    pub fn remote_irr(self) -> bool {
        self.0 & RTE_REMOTE_IRR != 0
    }
    pub fn trigger(self) -> TriggerMode {
        if self.0 & RTE_TRIGGER_LEVEL != 0 {
            TriggerMode::Level
        } else {
            TriggerMode::Edge
        }
    }
    pub fn masked(self) -> bool {
        self.0 & RTE_MASKED != 0
    }
    pub fn destination(self) -> u8 {
        (self.0 >> RTE_DEST_SHIFT) as u8
    }
    pub fn low(self) -> u32 {
        self.0 as u32
    }
    pub fn high(self) -> u32 {
        (self.0 >> 32) as u32
    }
    /// The same entry with the mask bit set or cleared.
    pub fn with_mask(self, masked: bool) -> RedirectionEntry {
        RedirectionEntry(if masked {
            self.0 | RTE_MASKED
        } else {
            self.0 & !RTE_MASKED
        })
    }
    fn message(self) -> Option<InterruptMessage> {
        Some(InterruptMessage {
            vector: self.vector(),
            mode: self.delivery_mode()?,
            dest_mode: self.dest_mode(),
            destination: self.destination() as u32,
            trigger: self.trigger(),
        })
    }
}

/// The interrupt message an IOAPIC sends. Route it with
/// [`ApicTopology::resolve_dest_into`](crate::ApicTopology::resolve_dest_into) (for
/// lowest priority, choose one target with
/// [`pick_lowest_priority`](crate::pick_lowest_priority)) and deliver it with
/// [`LocalApic::receive`](crate::LocalApic::receive). The destination is the 8-bit
/// RTE field; a logical destination is passed through untranslated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InterruptMessage {
    pub vector: Vector,
    pub mode: DeliveryMode,
    pub dest_mode: DestMode,
    pub destination: u32,
    pub trigger: TriggerMode,
}

/// What asserting (or de-asserting) a pin did. Every assertion ends in exactly one
/// of these; none is silent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use]
pub enum PinOutcome {
    /// A message was sent (for level, Remote IRR is now set).
    Delivered(InterruptMessage),
    /// Edge-triggered pin asserted while masked: the interrupt is lost. Count it.
    LostWhileMasked,
    /// Level-triggered pin asserted while masked: it is delivered when unmasked if
    /// still asserted then.
    PendingUntilUnmask,
    /// Level-triggered pin asserted while Remote IRR is set (the previous interrupt
    /// has not been EOI'd): it is delivered again after the EOI if still asserted.
    BlockedRemoteIrr,
    /// Edge-triggered pin asserted while already asserted: no new edge, no message
    /// (the two assertions merge).
    NoEdge,
    /// The entry's delivery mode is reserved (011, 110): nothing sent. Count it.
    ReservedDeliveryMode,
    /// The pin was de-asserted (or stayed de-asserted).
    Deasserted,
}

/// Register accesses an operation performed, for the kernel model to charge.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct IoapicAccess {
    /// IOREGSEL writes (posted).
    pub index_writes: u32,
    /// IOWIN reads (uncached, the CPU waits for the data).
    pub window_reads: u32,
    /// IOWIN writes (posted).
    pub window_writes: u32,
    /// EOI register writes (posted).
    pub eoi_writes: u32,
}

impl IoapicAccess {
    /// CPU time the accesses cost under `costs`.
    pub fn cost(&self, costs: &IoapicCosts) -> Duration {
        let n = |count: u32, each: Duration| Duration(each.0 * count as u64);
        n(self.index_writes, costs.index_write)
            + n(self.window_reads, costs.window_read)
            + n(self.window_writes, costs.window_write)
            + n(self.eoi_writes, costs.eoi_write)
    }
}

impl std::ops::Add for IoapicAccess {
    type Output = IoapicAccess;
    fn add(self, o: IoapicAccess) -> IoapicAccess {
        IoapicAccess {
            index_writes: self.index_writes + o.index_writes,
            window_reads: self.window_reads + o.window_reads,
            window_writes: self.window_writes + o.window_writes,
            eoi_writes: self.eoi_writes + o.eoi_writes,
        }
    }
}
impl std::ops::AddAssign for IoapicAccess {
    fn add_assign(&mut self, o: IoapicAccess) {
        *self = *self + o;
    }
}

/// Costs of IOAPIC accesses, seen from the CPU that performs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct IoapicCosts {
    /// IOREGSEL write: a posted MMIO write. Default 50 ns. Assumption: DESIGN.md
    /// section 3 gives "on the order of a hundred cycles" for a posted MMIO write,
    /// i.e. about 50 ns at 2 GHz; no published IOAPIC figure (COST-SOURCES.md).
    pub index_write: Duration,
    /// IOWIN read: an uncached MMIO read, the CPU stalls until the data returns.
    /// Default 700 ns. Order of magnitude only: COST-SOURCES.md gives about 700-740 ns
    /// for an uncached read across PCIe (Gen5 x16 device, host CPU not stated); the
    /// IOAPIC sits in the PCH or the IIO, not behind that link.
    pub window_read: Duration,
    /// IOWIN write: a posted MMIO write. Default 50 ns. Assumption, as `index_write`.
    pub window_write: Duration,
    /// EOI register write: a posted MMIO write. Default 50 ns. Assumption, as
    /// `index_write`.
    pub eoi_write: Duration,
    /// From pin assertion (or unmask, or EOI) to the message reaching the LAPIC.
    /// Default 1 us. Assumption: no published figure; taken the same order as an IPI
    /// (DESIGN.md section 3: 0.5-1.5 us).
    pub message_latency: Duration,
}

impl Default for IoapicCosts {
    fn default() -> Self {
        IoapicCosts {
            index_write: Duration::from_ns(50),
            window_read: Duration::from_ns(700),
            window_write: Duration::from_ns(50),
            eoi_write: Duration::from_ns(50),
            message_latency: Duration::from_ns(1000),
        }
    }
}

/// Result of an MMIO write: a message the write caused (unmask of an asserted level
/// pin, or a level pin re-delivered after an EOI register write), and the access.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct IoapicWrite {
    /// (pin, message) pairs, in pin order.
    pub delivered: Vec<(u8, InterruptMessage)>,
    pub access: IoapicAccess,
}

/// Result of an EOI (broadcast from a LAPIC, or the EOI register).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct IoapicEoi {
    /// Entries whose Remote IRR this EOI cleared.
    pub cleared: u32,
    /// Level pins still asserted, delivered again: (pin, message), in pin order.
    pub redelivered: Vec<(u8, InterruptMessage)>,
}

/// One I/O APIC.
///
/// - device side: [`assert_pin`](Self::assert_pin);
/// - LAPIC side: [`eoi`](Self::eoi) (the EOI broadcast or a directed EOI);
/// - CPU side, raw: [`mmio_read`](Self::mmio_read), [`mmio_write`](Self::mmio_write);
///   as a kernel does it: [`read_entry`](Self::read_entry),
///   [`write_entry`](Self::write_entry), [`set_masked`](Self::set_masked) (from a
///   shadow, no read), [`eoi_register`](Self::eoi_register);
/// - getters: [`entry`](Self::entry), [`pins`](Self::pins),
///   [`asserted`](Self::asserted), [`id`](Self::id).
#[derive(Clone, Debug)]
pub struct Ioapic {
    id: u8,
    version: u8,
    ioregsel: u8,
    entries: Vec<RedirectionEntry>,
    asserted: Vec<bool>,
}

impl Ioapic {
    /// An IOAPIC with `pins` inputs (1..=120), version 0x20 (with EOI register), all
    /// entries masked.
    pub fn new(id: u8, pins: u8) -> Result<Ioapic, ApicError> {
        Ioapic::with_version(id, pins, VERSION_WITH_EOI)
    }

    /// As [`new`](Self::new) with an explicit version (0x11 is the 82093AA, which has
    /// no EOI register). The ID must fit the 4-bit field.
    pub fn with_version(id: u8, pins: u8, version: u8) -> Result<Ioapic, ApicError> {
        if pins == 0 || pins > MAX_PINS {
            return Err(ApicError::InvalidConfig {
                field: "ioapic.pins",
                value: pins.to_string(),
                allowed: "1..=120",
            });
        }
        if id > 0xf {
            return Err(ApicError::InvalidConfig {
                field: "ioapic.id",
                value: id.to_string(),
                allowed: "0..=15 (IOAPICID bits 27:24)",
            });
        }
        Ok(Ioapic {
            id,
            version,
            ioregsel: 0,
            entries: vec![RedirectionEntry::default(); pins as usize],
            asserted: vec![false; pins as usize],
        })
    }

    pub fn id(&self) -> u8 {
        self.id
    }
    pub fn pins(&self) -> u8 {
        self.entries.len() as u8
    }
    /// The entry of `pin`, as hardware holds it (not a register access).
    pub fn entry(&self, pin: u8) -> Result<RedirectionEntry, ApicError> {
        self.check_pin(pin)?;
        Ok(self.entries[pin as usize])
    }
    /// Whether `pin` is asserted.
    pub fn asserted(&self, pin: u8) -> Result<bool, ApicError> {
        self.check_pin(pin)?;
        Ok(self.asserted[pin as usize])
    }

    fn check_pin(&self, pin: u8) -> Result<(), ApicError> {
        if (pin as usize) < self.entries.len() {
            Ok(())
        } else {
            Err(ApicError::NoSuchPin {
                pin,
                pins: self.pins(),
            })
        }
    }

    /// Sends the entry's message; sets Remote IRR for level.
    fn send(&mut self, pin: u8) -> PinOutcome {
        let e = &mut self.entries[pin as usize];
        let Some(msg) = e.message() else {
            return PinOutcome::ReservedDeliveryMode;
        };
        if e.trigger() == TriggerMode::Level {
            e.0 |= RTE_REMOTE_IRR;
        }
        PinOutcome::Delivered(msg)
    }

    /// A device drives `pin`: `level` true asserts it, false de-asserts it (logical
    /// levels; polarity is not modelled). See [`PinOutcome`] for what can happen. An
    /// out-of-range pin is an API error.
    pub fn assert_pin(&mut self, pin: u8, level: bool) -> Result<PinOutcome, ApicError> {
        self.check_pin(pin)?;
        let p = pin as usize;
        let was = std::mem::replace(&mut self.asserted[p], level);
        if !level {
            return Ok(PinOutcome::Deasserted);
        }
        let e = self.entries[p];
        Ok(match e.trigger() {
            TriggerMode::Edge if was => PinOutcome::NoEdge,
            TriggerMode::Edge if e.masked() => PinOutcome::LostWhileMasked,
            TriggerMode::Edge => self.send(pin),
            TriggerMode::Level if e.masked() => PinOutcome::PendingUntilUnmask,
            TriggerMode::Level if e.remote_irr() => PinOutcome::BlockedRemoteIrr,
            TriggerMode::Level => self.send(pin),
        })
    }

    /// A level pin that is asserted, unmasked and has Remote IRR clear is sent.
    fn level_ready(&mut self, pin: u8) -> Option<(u8, InterruptMessage)> {
        let e = self.entries[pin as usize];
        if e.trigger() == TriggerMode::Level
            && !e.masked()
            && !e.remote_irr()
            && self.asserted[pin as usize]
        {
            if let PinOutcome::Delivered(m) = self.send(pin) {
                return Some((pin, m));
            }
        }
        None
    }

    /// An EOI for `vector` (the LAPIC's broadcast, or a directed EOI): clears Remote
    /// IRR of every level entry with that vector and re-delivers those still asserted.
    /// Visits every entry of this IOAPIC, as the hardware compares them all.
    pub fn eoi(&mut self, vector: Vector) -> IoapicEoi {
        let mut out = IoapicEoi::default();
        for pin in 0..self.pins() {
            let e = &mut self.entries[pin as usize];
            if e.remote_irr() && e.vector() == vector {
                e.0 &= !RTE_REMOTE_IRR;
                out.cleared += 1;
                out.redelivered.extend(self.level_ready(pin));
            }
        }
        out
    }

    fn read_register(&self, index: u8) -> u32 {
        match index {
            IOAPICID => (self.id as u32) << ID_SHIFT,
            IOAPICVER => self.version as u32 | ((self.pins() as u32 - 1) << 16),
            IOAPICARB => (self.id as u32) << ID_SHIFT,
            i if i >= IOREDTBL0 => {
                let n = ((i - IOREDTBL0) / 2) as usize;
                match self.entries.get(n) {
                    Some(e) if (i - IOREDTBL0) & 1 == 0 => e.low(),
                    Some(e) => e.high(),
                    None => 0,
                }
            }
            _ => 0,
        }
    }

    fn write_register(&mut self, index: u8, value: u32) -> Vec<(u8, InterruptMessage)> {
        match index {
            IOAPICID => {
                self.id = ((value & ID_MASK) >> ID_SHIFT) as u8;
                Vec::new()
            }
            i if i >= IOREDTBL0 && (((i - IOREDTBL0) / 2) as usize) < self.entries.len() => {
                let pin = (i - IOREDTBL0) / 2;
                let e = &mut self.entries[pin as usize];
                let (shift, half) = if (i - IOREDTBL0) & 1 == 0 {
                    (0, 0xffff_ffffu64)
                } else {
                    (32, 0xffff_ffff << 32)
                };
                let writable = RTE_WRITABLE & half;
                e.0 = (e.0 & !writable) | (((value as u64) << shift) & writable);
                if e.trigger() == TriggerMode::Edge {
                    // Linux's workaround for IOAPICs without an EOI register.
                    e.0 &= !RTE_REMOTE_IRR;
                }
                self.level_ready(pin).into_iter().collect()
            }
            // Version and arbitration are read-only; other indexes do not exist.
            _ => Vec::new(),
        }
    }

    /// An MMIO read at `offset` from the IOAPIC base. IOWIN returns the register
    /// IOREGSEL selects; other offsets read 0 (and count as no access).
    pub fn mmio_read(&self, offset: u64) -> (u32, IoapicAccess) {
        match offset {
            IOWIN => (
                self.read_register(self.ioregsel),
                IoapicAccess {
                    window_reads: 1,
                    ..Default::default()
                },
            ),
            IOREGSEL => (
                self.ioregsel as u32,
                IoapicAccess {
                    window_reads: 1,
                    ..Default::default()
                },
            ),
            _ => (0, IoapicAccess::default()),
        }
    }

    /// An MMIO write at `offset`: IOREGSEL selects a register, IOWIN writes it, IOEOI
    /// (version 0x20+) is a directed EOI for the vector in bits 7:0. Writes elsewhere,
    /// or to IOEOI on an older IOAPIC, are ignored.
    pub fn mmio_write(&mut self, offset: u64, value: u32) -> IoapicWrite {
        match offset {
            IOREGSEL => {
                self.ioregsel = value as u8;
                IoapicWrite {
                    delivered: Vec::new(),
                    access: IoapicAccess {
                        index_writes: 1,
                        ..Default::default()
                    },
                }
            }
            IOWIN => IoapicWrite {
                delivered: self.write_register(self.ioregsel, value),
                access: IoapicAccess {
                    window_writes: 1,
                    ..Default::default()
                },
            },
            IOEOI => {
                let delivered = if self.version >= VERSION_WITH_EOI {
                    self.eoi(Vector(value as u8)).redelivered
                } else {
                    Vec::new()
                };
                IoapicWrite {
                    delivered,
                    access: IoapicAccess {
                        eoi_writes: 1,
                        ..Default::default()
                    },
                }
            }
            _ => IoapicWrite::default(),
        }
    }

    /// Reads `pin`'s entry as Linux's `__ioapic_read_entry` does: select and read the
    /// low word, then the high word (two index writes, two window reads).
    pub fn read_entry(&mut self, pin: u8) -> Result<(RedirectionEntry, IoapicAccess), ApicError> {
        self.check_pin(pin)?;
        let mut access = self
            .mmio_write(IOREGSEL, (IOREDTBL0 + 2 * pin) as u32)
            .access;
        let (low, a) = self.mmio_read(IOWIN);
        access += a;
        access += self
            .mmio_write(IOREGSEL, (IOREDTBL0 + 2 * pin + 1) as u32)
            .access;
        let (high, a) = self.mmio_read(IOWIN);
        access += a;
        Ok((RedirectionEntry(low as u64 | (high as u64) << 32), access))
    }

    /// Writes `pin`'s entry as Linux's `__ioapic_write_entry` does: high word first,
    /// then low word (which may unmask). Read-only bits of `entry` are ignored.
    pub fn write_entry(
        &mut self,
        pin: u8,
        entry: RedirectionEntry,
    ) -> Result<IoapicWrite, ApicError> {
        self.check_pin(pin)?;
        let mut out = self.mmio_write(IOREGSEL, (IOREDTBL0 + 2 * pin + 1) as u32);
        let w = self.mmio_write(IOWIN, entry.high());
        out.access += w.access;
        out.delivered.extend(w.delivered);
        let w = self.mmio_write(IOREGSEL, (IOREDTBL0 + 2 * pin) as u32);
        out.access += w.access;
        let w = self.mmio_write(IOWIN, entry.low());
        out.access += w.access;
        out.delivered.extend(w.delivered);
        Ok(out)
    }

    /// Masks or unmasks `pin` from the kernel's shadow of the low word: one index
    /// write and one window write, no read. Unmasking an asserted level pin with Remote
    /// IRR clear delivers it. `shadow_low` is what the kernel believes the low word
    /// holds; a stale shadow writes stale fields, as on hardware.
    pub fn set_masked(
        &mut self,
        pin: u8,
        shadow_low: u32,
        masked: bool,
    ) -> Result<IoapicWrite, ApicError> {
        self.check_pin(pin)?;
        let low = RedirectionEntry(shadow_low as u64).with_mask(masked).low();
        let mut out = self.mmio_write(IOREGSEL, (IOREDTBL0 + 2 * pin) as u32);
        let w = self.mmio_write(IOWIN, low);
        out.access += w.access;
        out.delivered.extend(w.delivered);
        Ok(out)
    }

    /// A directed EOI through the EOI register (one posted write).
    pub fn eoi_register(&mut self, vector: Vector) -> IoapicWrite {
        self.mmio_write(IOEOI, vector.0 as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level_entry(vector: u8, masked: bool) -> RedirectionEntry {
        RedirectionEntry::new(
            Vector(vector),
            DeliveryMode::Fixed,
            DestMode::Physical,
            TriggerMode::Level,
            Polarity::ActiveLow,
            masked,
            3,
        )
    }
    fn edge_entry(vector: u8, masked: bool) -> RedirectionEntry {
        RedirectionEntry::new(
            Vector(vector),
            DeliveryMode::Fixed,
            DestMode::Physical,
            TriggerMode::Edge,
            Polarity::ActiveHigh,
            masked,
            3,
        )
    }
    fn ioapic_with(pin: u8, e: RedirectionEntry) -> Ioapic {
        let mut io = Ioapic::new(2, 24).unwrap();
        let _ = io.write_entry(pin, e).unwrap();
        io
    }

    #[test]
    fn entry_is_one_u64_and_fields_roundtrip() {
        assert_eq!(std::mem::size_of::<RedirectionEntry>(), 8);
        let e = RedirectionEntry::new(
            Vector(0x31),
            DeliveryMode::LowestPriority,
            DestMode::Logical,
            TriggerMode::Level,
            Polarity::ActiveLow,
            true,
            0xa5,
        );
        assert_eq!(e.0, 0xa500_0000_0001_a931);
        assert_eq!(e.vector(), Vector(0x31));
        assert_eq!(e.delivery_mode(), Some(DeliveryMode::LowestPriority));
        assert_eq!(e.dest_mode(), DestMode::Logical);
        assert_eq!(e.polarity(), Polarity::ActiveLow);
        assert_eq!(e.trigger(), TriggerMode::Level);
        assert!(e.masked() && !e.remote_irr() && !e.delivery_status());
        assert_eq!(e.destination(), 0xa5);
        assert_eq!(
            RedirectionEntry(6 << 8).delivery_mode(),
            None,
            "Start-Up is reserved here"
        );
        assert_eq!(RedirectionEntry::default().0, RTE_MASKED);
    }

    #[test]
    fn config_errors() {
        assert!(matches!(
            Ioapic::new(0, 0),
            Err(ApicError::InvalidConfig {
                field: "ioapic.pins",
                ..
            })
        ));
        assert!(matches!(
            Ioapic::new(0, 121),
            Err(ApicError::InvalidConfig { .. })
        ));
        assert!(matches!(
            Ioapic::new(16, 24),
            Err(ApicError::InvalidConfig {
                field: "ioapic.id",
                ..
            })
        ));
        let mut io = Ioapic::new(0, 24).unwrap();
        assert_eq!(
            io.assert_pin(24, true),
            Err(ApicError::NoSuchPin { pin: 24, pins: 24 })
        );
    }

    #[test]
    fn indirect_access_and_identification() {
        let mut io = Ioapic::new(5, 24).unwrap();
        let w = io.mmio_write(IOREGSEL, IOAPICVER as u32);
        assert_eq!(
            w.access,
            IoapicAccess {
                index_writes: 1,
                ..Default::default()
            }
        );
        let (ver, a) = io.mmio_read(IOWIN);
        assert_eq!(ver, 0x0017_0020);
        assert_eq!(a.window_reads, 1);
        let _ = io.mmio_write(IOREGSEL, IOAPICID as u32);
        assert_eq!(io.mmio_read(IOWIN).0, 5 << 24);
        let _ = io.mmio_write(IOREGSEL, IOAPICVER as u32);
        let _ = io.mmio_write(IOWIN, 0);
        assert_eq!(io.mmio_read(IOWIN).0, 0x0017_0020, "version is read-only");
    }

    #[test]
    fn read_and_write_entry_count_accesses_like_linux() {
        let mut io = Ioapic::new(0, 24).unwrap();
        let w = io.write_entry(7, level_entry(0x41, false)).unwrap();
        assert_eq!(
            w.access,
            IoapicAccess {
                index_writes: 2,
                window_writes: 2,
                ..Default::default()
            }
        );
        let (e, a) = io.read_entry(7).unwrap();
        assert_eq!(e, level_entry(0x41, false));
        assert_eq!(
            a,
            IoapicAccess {
                index_writes: 2,
                window_reads: 2,
                ..Default::default()
            }
        );
        let costs = IoapicCosts::default();
        assert_eq!(a.cost(&costs), Duration::from_ns(2 * 50 + 2 * 700));
        let m = io.set_masked(7, e.low(), true).unwrap();
        assert_eq!(
            m.access,
            IoapicAccess {
                index_writes: 1,
                window_writes: 1,
                ..Default::default()
            }
        );
        assert!(io.entry(7).unwrap().masked());
    }

    #[test]
    fn read_only_and_reserved_bits_are_not_written() {
        let mut io = Ioapic::new(0, 4).unwrap();
        let _ = io
            .write_entry(1, RedirectionEntry(0x00ff_ffff_fffe_5041))
            .unwrap();
        let e = io.entry(1).unwrap();
        assert_eq!(
            e.0, 0x0000_0000_0000_0041,
            "bits 12, 14 and 55:17 ignored; mask cleared"
        );
    }

    #[test]
    fn edge_pin_delivers_on_each_rising_edge() {
        let mut io = ioapic_with(2, edge_entry(0x30, false));
        let msg = InterruptMessage {
            vector: Vector(0x30),
            mode: DeliveryMode::Fixed,
            dest_mode: DestMode::Physical,
            destination: 3,
            trigger: TriggerMode::Edge,
        };
        assert_eq!(io.assert_pin(2, true), Ok(PinOutcome::Delivered(msg)));
        assert_eq!(io.assert_pin(2, true), Ok(PinOutcome::NoEdge));
        assert_eq!(io.assert_pin(2, false), Ok(PinOutcome::Deasserted));
        assert_eq!(io.assert_pin(2, true), Ok(PinOutcome::Delivered(msg)));
        assert!(
            !io.entry(2).unwrap().remote_irr(),
            "edge never sets Remote IRR"
        );
    }

    #[test]
    fn edge_assertion_while_masked_is_lost_not_pending() {
        let mut io = ioapic_with(2, edge_entry(0x30, true));
        assert_eq!(io.assert_pin(2, true), Ok(PinOutcome::LostWhileMasked));
        let w = io
            .set_masked(2, edge_entry(0x30, true).low(), false)
            .unwrap();
        assert!(
            w.delivered.is_empty(),
            "unmasking an edge pin delivers nothing"
        );
    }

    #[test]
    fn level_pin_remote_irr_and_eoi() {
        let mut io = ioapic_with(4, level_entry(0x50, false));
        let Ok(PinOutcome::Delivered(m)) = io.assert_pin(4, true) else {
            panic!()
        };
        assert_eq!(m.trigger, TriggerMode::Level);
        assert!(io.entry(4).unwrap().remote_irr());
        // The device re-asserts (or stays asserted): blocked until EOI.
        assert_eq!(io.assert_pin(4, true), Ok(PinOutcome::BlockedRemoteIrr));
        // EOI for another vector does nothing.
        assert_eq!(io.eoi(Vector(0x51)), IoapicEoi::default());
        // EOI while still asserted: cleared and delivered again at once.
        let eoi = io.eoi(Vector(0x50));
        assert_eq!((eoi.cleared, eoi.redelivered.len()), (1, 1));
        assert!(io.entry(4).unwrap().remote_irr());
        // Device de-asserts, then EOI: cleared, nothing more.
        let _ = io.assert_pin(4, false);
        let eoi = io.eoi(Vector(0x50));
        assert_eq!((eoi.cleared, eoi.redelivered.len()), (1, 0));
        assert!(!io.entry(4).unwrap().remote_irr());
    }

    #[test]
    fn level_pin_asserted_while_masked_is_delivered_on_unmask() {
        let mut io = ioapic_with(1, level_entry(0x60, true));
        assert_eq!(io.assert_pin(1, true), Ok(PinOutcome::PendingUntilUnmask));
        let w = io
            .set_masked(1, level_entry(0x60, true).low(), false)
            .unwrap();
        assert_eq!(w.delivered.len(), 1);
        assert_eq!(w.delivered[0].0, 1);
        assert!(io.entry(1).unwrap().remote_irr());
        // Masked and de-asserted before unmask: nothing.
        let mut io = ioapic_with(1, level_entry(0x60, true));
        let _ = io.assert_pin(1, true);
        let _ = io.assert_pin(1, false);
        assert!(io
            .set_masked(1, level_entry(0x60, true).low(), false)
            .unwrap()
            .delivered
            .is_empty());
    }

    #[test]
    fn eoi_register_and_edge_switch_clear_remote_irr() {
        let mut io = ioapic_with(3, level_entry(0x70, false));
        let _ = io.assert_pin(3, true);
        let _ = io.assert_pin(3, false);
        let w = io.eoi_register(Vector(0x70));
        assert_eq!(w.access.eoi_writes, 1);
        assert!(!io.entry(3).unwrap().remote_irr());
        // Old IOAPIC: no EOI register; Linux flips the entry to edge and back.
        let mut old = Ioapic::with_version(0, 24, 0x11).unwrap();
        let _ = old.write_entry(3, level_entry(0x70, false)).unwrap();
        let _ = old.assert_pin(3, true);
        let _ = old.assert_pin(3, false);
        let _ = old.eoi_register(Vector(0x70));
        assert!(
            old.entry(3).unwrap().remote_irr(),
            "0x11 has no EOI register"
        );
        let _ = old.write_entry(3, edge_entry(0x70, true)).unwrap();
        let _ = old.write_entry(3, level_entry(0x70, false)).unwrap();
        assert!(!old.entry(3).unwrap().remote_irr());
    }

    /// The literal masks are the named fields of 82093AA 3.2.4 and 3.2.1.
    #[test]
    fn masks_are_the_datasheet_fields() {
        assert_eq!(ID_MASK, 0xf << ID_SHIFT);
        assert_eq!(RTE_DELIVERY_STATUS, 1 << 12);
        assert_eq!(
            RTE_WRITABLE,
            RTE_VECTOR_MASK
                | RTE_DELIVERY_MODE_MASK
                | RTE_DEST_LOGICAL
                | RTE_POLARITY_LOW
                | RTE_TRIGGER_LEVEL
                | RTE_MASKED
                | (0xff << RTE_DEST_SHIFT)
        );
    }

    #[test]
    fn single_bit_fields_read_only_their_bit() {
        assert!(RedirectionEntry(1 << 12).delivery_status());
        assert!(!RedirectionEntry(!(1 << 12)).delivery_status());
        assert_eq!(RedirectionEntry(0).polarity(), Polarity::ActiveHigh);
        assert_eq!(
            RedirectionEntry(!(1 << 13)).polarity(),
            Polarity::ActiveHigh
        );
        assert_eq!(RedirectionEntry(1 << 13).polarity(), Polarity::ActiveLow);
        let masked = level_entry(0x40, true);
        assert!(
            masked.with_mask(true).masked(),
            "masking a masked entry keeps it masked"
        );
        assert_eq!(masked.with_mask(true), masked);
        assert!(!masked.with_mask(false).masked());
        assert_eq!(masked.with_mask(false).with_mask(true), masked);
    }

    #[test]
    fn access_counts_add_field_by_field() {
        let a = IoapicAccess {
            index_writes: 1,
            window_reads: 2,
            window_writes: 3,
            eoi_writes: 4,
        };
        let b = IoapicAccess {
            index_writes: 10,
            window_reads: 20,
            window_writes: 30,
            eoi_writes: 40,
        };
        let sum = IoapicAccess {
            index_writes: 11,
            window_reads: 22,
            window_writes: 33,
            eoi_writes: 44,
        };
        assert_eq!(a + b, sum);
        let mut c = a;
        c += b;
        assert_eq!(c, sum);
    }

    #[test]
    fn largest_id_and_pin_count_are_accepted() {
        let io = Ioapic::with_version(15, MAX_PINS, 0x11).unwrap();
        assert_eq!((io.id(), io.pins()), (15, 120));
        assert_eq!(Ioapic::new(1, 1).unwrap().id(), 1);
    }

    #[test]
    fn asserted_follows_the_device() {
        let mut io = ioapic_with(5, edge_entry(0x30, false));
        assert_eq!(io.asserted(5), Ok(false));
        let _ = io.assert_pin(5, true).unwrap();
        assert_eq!((io.asserted(5), io.asserted(4)), (Ok(true), Ok(false)));
        let _ = io.assert_pin(5, false).unwrap();
        assert_eq!(io.asserted(5), Ok(false));
        assert_eq!(
            io.asserted(24),
            Err(ApicError::NoSuchPin { pin: 24, pins: 24 })
        );
    }

    fn read_index(io: &mut Ioapic, index: u8) -> u32 {
        let _ = io.mmio_write(IOREGSEL, index as u32);
        io.mmio_read(IOWIN).0
    }

    /// 82093AA 3.2.1-3.2.3: IOAPICID bits 27:24 are writable, the arbitration ID
    /// follows it, indexes 0x03-0x0f hold nothing, and IOREGSEL reads back.
    #[test]
    fn identification_registers_through_the_window() {
        let mut io = Ioapic::new(5, 24).unwrap();
        assert_eq!(read_index(&mut io, IOAPICARB), 5 << 24);
        let _ = io.mmio_write(IOREGSEL, IOAPICID as u32);
        let _ = io.mmio_write(IOWIN, 0xfa00_0000);
        assert_eq!(io.id(), 0xa, "only bits 27:24 are the ID");
        assert_eq!(read_index(&mut io, IOAPICID), 0x0a00_0000);
        assert_eq!(read_index(&mut io, IOAPICARB), 0x0a00_0000);
        for index in 0x03..IOREDTBL0 {
            assert_eq!(read_index(&mut io, index), 0, "index {index:#x}");
        }
        let _ = io.mmio_write(IOREGSEL, 0x12);
        let (sel, access) = io.mmio_read(IOREGSEL);
        assert_eq!(sel, 0x12);
        assert_eq!(
            access.window_reads, 1,
            "an uncached read, charged like IOWIN"
        );
    }

    /// The last entries of a 120-pin IOAPIC sit at indexes 0xfe and 0xff; indexes past
    /// the last entry of a smaller IOAPIC read 0 and ignore writes.
    #[test]
    fn entries_at_the_top_of_the_index_space() {
        let mut io = Ioapic::new(0, MAX_PINS).unwrap();
        let e = level_entry(0x77, true);
        let _ = io.write_entry(119, e).unwrap();
        assert_eq!(io.entry(119).unwrap(), e);
        assert_eq!(io.read_entry(119).unwrap().0, e);
        assert_eq!(read_index(&mut io, 0xfe), e.low());
        assert_eq!(read_index(&mut io, 0xff), e.high());
        assert_eq!(io.entry(118).unwrap(), RedirectionEntry::default());

        let mut io = Ioapic::new(0, 24).unwrap();
        let past = IOREDTBL0 + 2 * 24;
        let _ = io.mmio_write(IOREGSEL, past as u32);
        let w = io.mmio_write(IOWIN, 0x41);
        assert!(w.delivered.is_empty());
        assert_eq!(read_index(&mut io, past), 0);
        assert!((0..24).all(|p| io.entry(p).unwrap() == RedirectionEntry::default()));
        // Each pin's words land in that pin's entry only.
        for pin in [0u8, 1, 9, 23] {
            let _ = io.write_entry(pin, edge_entry(0x30 + pin, true)).unwrap();
        }
        for pin in 0..24u8 {
            let want = if [0, 1, 9, 23].contains(&pin) {
                edge_entry(0x30 + pin, true)
            } else {
                RedirectionEntry::default()
            };
            assert_eq!(io.entry(pin).unwrap(), want, "pin {pin}");
        }
    }

    /// Rewriting a level entry (as an affinity change does) keeps its Remote IRR: only
    /// switching the entry to edge clears it.
    #[test]
    fn rewriting_a_level_entry_keeps_remote_irr() {
        let mut io = ioapic_with(4, level_entry(0x50, false));
        let _ = io.assert_pin(4, true).unwrap();
        assert!(io.entry(4).unwrap().remote_irr());
        let w = io.write_entry(4, level_entry(0x50, false)).unwrap();
        assert!(w.delivered.is_empty(), "still in service");
        assert!(io.entry(4).unwrap().remote_irr());
    }

    #[test]
    fn reserved_delivery_mode_is_reported() {
        let mut io = ioapic_with(0, RedirectionEntry(0x30 | 3 << 8));
        assert_eq!(io.assert_pin(0, true), Ok(PinOutcome::ReservedDeliveryMode));
    }
}
