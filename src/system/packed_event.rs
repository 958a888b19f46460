//! Events as the queue keeps them: two whole 64-bit words.
//!
//! An event is built field by field (a four-byte kind, a two-byte port, a one-byte
//! vector) and is often popped a few hundred instructions after it was scheduled. The
//! queue moves it as one 16-byte value, so a pop, or a radix move of a bucket, read it
//! back in wider loads than the stores that wrote it, and store-to-load forwarding cannot
//! serve such a load: it waits until the stores reach the cache. Packing by hand puts
//! the fields together in registers, so every store and load of a queued event is a
//! whole word (README "Performance", eighth session).
//!
//! Layout: `head` holds the kind in its low 32 bits and field `a` in its high 32; `tail`
//! holds field `b`. The arms of `From<Event>` give each kind's `a` and `b`, and
//! [`PackedEvent::unpack`] reads them back the same way.

use super::io::IoDev;
use super::parked::Slot;
use super::Event;
use crate::engine::{EventQueue, Priority};
use sim_core::{SimTime, Vector};

/// The system's one event queue: it takes [`Event`]s, keeps them packed, and hands
/// them back packed for [`PackedEvent::unpack`] where they are handled.
pub(super) struct SystemQueue(EventQueue<PackedEvent>);

impl SystemQueue {
    pub(super) fn with_capacity(capacity: usize) -> SystemQueue {
        SystemQueue(EventQueue::with_capacity(capacity))
    }

    /// [`EventQueue::schedule`] of `event`, packed.
    #[inline(always)]
    pub(super) fn schedule(&mut self, at: SimTime, priority: Priority, event: Event) {
        self.0.schedule(at, priority, PackedEvent::from(event));
    }

    pub(super) fn pop_until(&mut self, limit: SimTime) -> Option<(SimTime, PackedEvent)> {
        self.0.pop_until(limit)
    }

    pub(super) fn pop(&mut self) -> Option<(SimTime, PackedEvent)> {
        self.0.pop()
    }

    pub(super) fn advance_to(&mut self, to: SimTime) {
        self.0.advance_to(to);
    }

    pub(super) fn now(&self) -> SimTime {
        self.0.now()
    }

    pub(super) fn events_popped(&self) -> u64 {
        self.0.events_popped()
    }

    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    pub(super) fn peek_time(&self) -> Option<SimTime> {
        self.0.peek_time()
    }
}

/// An [`Event`] packed into two words; [`PackedEvent::unpack`] gives it back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct PackedEvent {
    head: u64,
    tail: u64,
}

/// The kind numbers, one per [`Event`] variant.
mod kind {
    pub const DEVICE_COMPLETION: u32 = 0;
    pub const DSA_SUBMIT: u32 = 1;
    pub const DSA_ENGINE_DONE: u32 = 2;
    pub const IO_WAKE: u32 = 3;
    pub const PORT_READY: u32 = 4;
    pub const PORT_WRITE_DONE: u32 = 5;
    pub const PORT_MSI_RETIRED: u32 = 6;
    pub const REMAP_DONE: u32 = 7;
    pub const LINE_POST_DONE: u32 = 8;
    pub const APIC_MESSAGE: u32 = 9;
    pub const CPU_STEP: u32 = 10;
    pub const GIC_LPI: u32 = 11;
    pub const SHOOTDOWN_REQUEST: u32 = 12;
    pub const IPI_ARRIVE: u32 = 13;
    pub const MIGRATION_IRTE_WRITE: u32 = 14;
    pub const MIGRATION_CLEANUP: u32 = 15;
    pub const RETRIGGER: u32 = 16;
    pub const SMMU_CALL_REQUEST: u32 = 17;
    pub const SMMU_PROD_ARRIVE: u32 = 18;
    pub const SMMU_CONSUME_DONE: u32 = 19;
    pub const SMMU_SEV: u32 = 20;
    pub const SMMU_RESUME: u32 = 21;
    pub const SMMU_MSI_VISIBLE: u32 = 22;
    pub const SMMU_CONS_SAMPLE: u32 = 23;
    pub const SMMU_TICK: u32 = 24;
    pub const SMMU_WAKE: u32 = 25;
    pub const IOAPIC_ASSERT: u32 = 26;
    pub const IOAPIC_DEASSERT: u32 = 27;
    pub const TASK_HOLD_DONE: u32 = 28;
    pub const INJECTED_POST: u32 = 29;
    pub const INJECTED_SN: u32 = 30;
    pub const INJECTED_RECHECK: u32 = 31;
    /// How many kinds there are.
    #[cfg(test)]
    pub const COUNT: u32 = 32;
}

/// Two 16-bit fields in one 32-bit `a`.
fn pair(low: u16, high: u16) -> u32 {
    u32::from(low) | u32::from(high) << 16
}

fn low16(a: u32) -> u16 {
    a as u16
}

fn high16(a: u32) -> u16 {
    (a >> 16) as u16
}

/// `b` of a parked payload's slot (slots are never zero, so zero stands for none).
fn slot_bits(slot: Option<Slot>) -> u64 {
    u64::from(slot.map_or(0, Slot::number))
}

fn slot_of(bits: u64) -> Option<Slot> {
    Slot::from_number(bits as u32)
}

fn parked(bits: u64) -> Slot {
    slot_of(bits).expect("an event that parks a payload carries its slot")
}

/// An I/O device in a `b`: NVMe drives below 2^32, NIC queues with bit 32 set.
fn io_dev_bits(dev: IoDev) -> u64 {
    match dev {
        IoDev::Nvme(drive) => u64::from(drive),
        IoDev::Nic { nic, queue } => 1 << 32 | u64::from(pair(nic, queue)),
    }
}

fn io_dev_of(bits: u64) -> IoDev {
    let a = bits as u32;
    if bits >> 32 == 0 {
        IoDev::Nvme(low16(a))
    } else {
        IoDev::Nic {
            nic: low16(a),
            queue: high16(a),
        }
    }
}

/// A vector, a flag and a parked slot in one `b`: bits 0-7, bit 8 and bits 32-63.
fn vector_flag_slot(vector: Vector, flag: bool, slot: Option<Slot>) -> u64 {
    u64::from(vector.0) | u64::from(flag) << 8 | slot_bits(slot) << 32
}

impl From<Event> for PackedEvent {
    #[inline(always)]
    fn from(event: Event) -> PackedEvent {
        use kind::*;
        let (kind, a, b): (u32, u32, u64) = match event {
            Event::DeviceCompletion { device } => (DEVICE_COMPLETION, device, 0),
            Event::DsaSubmit { device } => (DSA_SUBMIT, device, 0),
            Event::DsaEngineDone { device } => (DSA_ENGINE_DONE, device, 0),
            Event::IoWake { dev, generation } => (IO_WAKE, generation, io_dev_bits(dev)),
            Event::PortReady { port } => (PORT_READY, port.into(), 0),
            Event::PortWriteDone { port } => (PORT_WRITE_DONE, port.into(), 0),
            Event::PortMsiRetired { port } => (PORT_MSI_RETIRED, port.into(), 0),
            Event::RemapDone { unit } => (REMAP_DONE, unit.into(), 0),
            Event::LinePostDone { cpu } => (LINE_POST_DONE, cpu, 0),
            Event::ApicMessage {
                cpu,
                vector,
                level,
                msi,
            } => (APIC_MESSAGE, cpu, vector_flag_slot(vector, level, msi)),
            Event::CpuStep { cpu } => (CPU_STEP, cpu, 0),
            Event::GicLpi { cpu, intid, msi } => {
                (GIC_LPI, cpu, u64::from(intid) | slot_bits(Some(msi)) << 32)
            }
            Event::ShootdownRequest { load, initiator } => {
                (SHOOTDOWN_REQUEST, pair(load, initiator), 0)
            }
            Event::IpiArrive { cpu, msg } => (IPI_ARRIVE, cpu, slot_bits(Some(msg))),
            Event::MigrationIrteWrite { index } => (MIGRATION_IRTE_WRITE, index, 0),
            Event::MigrationCleanup { index } => (MIGRATION_CLEANUP, index, 0),
            Event::Retrigger { index } => (RETRIGGER, index, 0),
            Event::SmmuCallRequest { load, cpu_index } => {
                (SMMU_CALL_REQUEST, pair(load, cpu_index), 0)
            }
            Event::SmmuProdArrive { prod } => (SMMU_PROD_ARRIVE, prod, 0),
            Event::SmmuConsumeDone => (SMMU_CONSUME_DONE, 0, 0),
            Event::SmmuSev => (SMMU_SEV, 0, 0),
            Event::SmmuResume => (SMMU_RESUME, 0, 0),
            Event::SmmuMsiVisible { data, addr } => (SMMU_MSI_VISIBLE, data, addr),
            Event::SmmuConsSample { cpu, generation } => (SMMU_CONS_SAMPLE, cpu, generation),
            Event::SmmuTick { cpu, generation } => (SMMU_TICK, cpu, generation),
            Event::SmmuWake { cpu, generation } => (SMMU_WAKE, cpu, generation),
            Event::IoapicAssert { pin } => (IOAPIC_ASSERT, pin.into(), 0),
            Event::IoapicDeassert { pin } => (IOAPIC_DEASSERT, pin.into(), 0),
            Event::TaskHoldDone { cpu, generation } => (TASK_HOLD_DONE, cpu, generation),
            Event::InjectedPost { cpu, vector, urg } => {
                (INJECTED_POST, cpu, vector_flag_slot(vector, urg, None))
            }
            Event::InjectedSn { cpu, change } => (INJECTED_SN, cpu, slot_bits(Some(change))),
            Event::InjectedRecheck { cpu, by } => (INJECTED_RECHECK, cpu, by.into()),
        };
        PackedEvent {
            head: u64::from(kind) | u64::from(a) << 32,
            tail: b,
        }
    }
}

impl PackedEvent {
    /// The event that was packed.
    #[inline(always)]
    pub(super) fn unpack(self) -> Event {
        use kind::*;
        let a = (self.head >> 32) as u32;
        let b = self.tail;
        let vector = Vector(b as u8);
        let flag = b & 1 << 8 != 0;
        match self.head as u32 {
            DEVICE_COMPLETION => Event::DeviceCompletion { device: a },
            DSA_SUBMIT => Event::DsaSubmit { device: a },
            DSA_ENGINE_DONE => Event::DsaEngineDone { device: a },
            IO_WAKE => Event::IoWake {
                dev: io_dev_of(b),
                generation: a,
            },
            PORT_READY => Event::PortReady { port: low16(a) },
            PORT_WRITE_DONE => Event::PortWriteDone { port: low16(a) },
            PORT_MSI_RETIRED => Event::PortMsiRetired { port: low16(a) },
            REMAP_DONE => Event::RemapDone { unit: low16(a) },
            LINE_POST_DONE => Event::LinePostDone { cpu: a },
            APIC_MESSAGE => Event::ApicMessage {
                cpu: a,
                vector,
                level: flag,
                msi: slot_of(b >> 32),
            },
            CPU_STEP => Event::CpuStep { cpu: a },
            GIC_LPI => Event::GicLpi {
                cpu: a,
                intid: b as u32,
                msi: parked(b >> 32),
            },
            SHOOTDOWN_REQUEST => Event::ShootdownRequest {
                load: low16(a),
                initiator: high16(a),
            },
            IPI_ARRIVE => Event::IpiArrive {
                cpu: a,
                msg: parked(b),
            },
            MIGRATION_IRTE_WRITE => Event::MigrationIrteWrite { index: a },
            MIGRATION_CLEANUP => Event::MigrationCleanup { index: a },
            RETRIGGER => Event::Retrigger { index: a },
            SMMU_CALL_REQUEST => Event::SmmuCallRequest {
                load: low16(a),
                cpu_index: high16(a),
            },
            SMMU_PROD_ARRIVE => Event::SmmuProdArrive { prod: a },
            SMMU_CONSUME_DONE => Event::SmmuConsumeDone,
            SMMU_SEV => Event::SmmuSev,
            SMMU_RESUME => Event::SmmuResume,
            SMMU_MSI_VISIBLE => Event::SmmuMsiVisible { data: a, addr: b },
            SMMU_CONS_SAMPLE => Event::SmmuConsSample {
                cpu: a,
                generation: b,
            },
            SMMU_TICK => Event::SmmuTick {
                cpu: a,
                generation: b,
            },
            SMMU_WAKE => Event::SmmuWake {
                cpu: a,
                generation: b,
            },
            IOAPIC_ASSERT => Event::IoapicAssert { pin: low16(a) },
            IOAPIC_DEASSERT => Event::IoapicDeassert { pin: low16(a) },
            TASK_HOLD_DONE => Event::TaskHoldDone {
                cpu: a,
                generation: b,
            },
            INJECTED_POST => Event::InjectedPost {
                cpu: a,
                vector,
                urg: flag,
            },
            INJECTED_SN => Event::InjectedSn {
                cpu: a,
                change: parked(b),
            },
            INJECTED_RECHECK => Event::InjectedRecheck {
                cpu: a,
                by: b as u32,
            },
            other => unreachable!("no event kind {other}: only From<Event> packs events"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// One event of every kind, with fields at their widest so that a field packed into
    /// too few bits, or onto another's bits, comes back different.
    fn one_of_each() -> Vec<Event> {
        let slot = |n| Slot::from_number(n).expect("non-zero");
        let top = slot(u32::MAX);
        vec![
            Event::DeviceCompletion { device: u32::MAX },
            Event::DsaSubmit { device: 7 },
            Event::DsaEngineDone {
                device: u32::MAX - 1,
            },
            Event::IoWake {
                dev: IoDev::Nvme(u16::MAX),
                generation: u32::MAX,
            },
            Event::IoWake {
                dev: IoDev::Nic {
                    nic: 0,
                    queue: u16::MAX,
                },
                generation: 3,
            },
            Event::IoWake {
                dev: IoDev::Nic {
                    nic: u16::MAX,
                    queue: 0,
                },
                generation: 0,
            },
            Event::PortReady { port: u16::MAX },
            Event::PortWriteDone { port: 1 },
            Event::PortMsiRetired { port: u16::MAX - 2 },
            Event::RemapDone { unit: u16::MAX },
            Event::LinePostDone { cpu: u32::MAX },
            Event::ApicMessage {
                cpu: u32::MAX,
                vector: Vector(0xff),
                level: true,
                msi: Some(top),
            },
            Event::ApicMessage {
                cpu: 0,
                vector: Vector(0xec),
                level: false,
                msi: None,
            },
            Event::CpuStep { cpu: 1023 },
            Event::GicLpi {
                cpu: u32::MAX,
                intid: u32::MAX,
                msi: top,
            },
            Event::ShootdownRequest {
                load: u16::MAX,
                initiator: 1,
            },
            Event::IpiArrive { cpu: 5, msg: top },
            Event::MigrationIrteWrite { index: u32::MAX },
            Event::MigrationCleanup { index: 2 },
            Event::Retrigger { index: u32::MAX },
            Event::SmmuCallRequest {
                load: 1,
                cpu_index: u16::MAX,
            },
            Event::SmmuProdArrive { prod: u32::MAX },
            Event::SmmuConsumeDone,
            Event::SmmuSev,
            Event::SmmuResume,
            Event::SmmuMsiVisible {
                data: u32::MAX,
                addr: u64::MAX,
            },
            Event::SmmuConsSample {
                cpu: u32::MAX,
                generation: u64::MAX,
            },
            Event::SmmuTick {
                cpu: 9,
                generation: u64::MAX - 1,
            },
            Event::SmmuWake {
                cpu: u32::MAX,
                generation: 1 << 63,
            },
            Event::IoapicAssert { pin: u16::MAX },
            Event::IoapicDeassert { pin: 0 },
            Event::TaskHoldDone {
                cpu: u32::MAX,
                generation: u64::MAX,
            },
            Event::InjectedPost {
                cpu: u32::MAX,
                vector: Vector(0xff),
                urg: true,
            },
            Event::InjectedPost {
                cpu: 1,
                vector: Vector(0x21),
                urg: false,
            },
            Event::InjectedSn {
                cpu: u32::MAX,
                change: slot(1),
            },
            Event::InjectedRecheck {
                cpu: u32::MAX,
                by: u32::MAX,
            },
        ]
    }

    #[test]
    fn every_kind_unpacks_to_the_event_that_was_packed() {
        let mut kinds = BTreeSet::new();
        for event in one_of_each() {
            let packed = PackedEvent::from(event);
            kinds.insert(packed.head as u32);
            assert_eq!(
                format!("{:?}", packed.unpack()),
                format!("{event:?}"),
                "packed as {packed:x?}"
            );
        }
        assert_eq!(
            kinds,
            (0..kind::COUNT).collect::<BTreeSet<_>>(),
            "the samples cover every kind, and the kinds are numbered without gaps"
        );
    }

    #[test]
    #[should_panic(expected = "no event kind")]
    fn a_kind_no_event_has_is_caught() {
        PackedEvent {
            head: u64::from(kind::COUNT),
            tail: 0,
        }
        .unpack();
    }
}
