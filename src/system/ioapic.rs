//! The IOAPIC inside [`System`] (x86, scenario `[[ioapic_pins]]`): pins asserted by a
//! load generator (edge pulses, or a level line the driver's device acknowledgement
//! drops), their messages to the local APICs, and a UIO-style driver flow per pin
//! whose register accesses are CPU operations like any other. The chip code is x86's
//! `io_apic.c` or IA-64's `iosapic.c` (the same register interface; see
//! [`crate::kernel::iosapic`]).
//!
//! ```text
//!  load ──edge pulse / level──▶ IOAPIC pin ──message (message_latency_ns)──▶ LAPIC IRR
//!                         ▲ register accesses (index write, window read/write, EOI)
//!  CPU: hardirq  do_irq: [EOI], irq flow, mask the entry or disable_irq_nosync,
//!                notify, [IOSAPIC EOI for level], [EOI]
//!       thread   user_thread: read (sleep until notified), [ack the device],
//!                hold (preemptible), syscall (interrupts off): unmask or enable_irq
//! ```
//!
//! Every assertion is an interrupt in the run's ledger: delivered ones are handled
//! like MSIs (merged when they meet in one IRR bit); an edge the IOAPIC cannot
//! deliver is dropped with its reason, `lost_while_masked` (the entry was masked:
//! an edge entry keeps no pending state), `no_edge_line_high` (the line was still
//! high: no new edge) or `reserved_delivery_mode`. So the report's `msis.dropped`
//! shows the edges a flow loses under whatever else the CPU is doing. With the lazy
//! disable, an edge the chip drops while the kernel already holds the interrupt as
//! IRQ_PENDING is served by the replay (counted merged); a level assertion while the
//! device's line is already high is served by the driver's acknowledgement of the
//! device (counted handled and merged).
//!
//! An access costs its `costs.ioapic` entry and takes effect when that time has
//! elapsed (a posted write is taken to reach the IOAPIC then). Messages go straight to
//! the LAPIC: the IOAPIC's entries are in compatibility format (no interrupt
//! remapping of IOAPIC messages is modelled).

use std::rc::Rc;

use apic_sim::{IoapicAccess, PinOutcome};
use devices::ArrivalProcess;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use sim_core::{Duration, MsiMessage, SimTime, Vector};

use super::cpu::{CpuState, HandlerRef, Task, TaskCo, TaskKind, TaskOp};
use super::scenario::{Arch, Scenario, ScenarioError};
use super::sources::MsiSource;
use super::task::TaskIssued;
use super::{Event, SimEvent, System};
use crate::engine::{Coroutine, Priority, RngStreams};
use crate::kernel::ioapic_driver::{
    linux_entry, perform, IoapicChipData, IoapicOp, IoapicPort, PinHostOp, RteDriver,
};
use crate::kernel::iosapic::{
    do_irq, user_thread, IoapicChipKind, PinFlow, PinSetup, PinTrigger, DESC_PENDING,
};

/// Number of IOAPIC inputs (an IOAPIC with 24 redirection entries).
pub const IOAPIC_PINS: u8 = 24;

/// Costs of IOAPIC accesses and of the UIO flow around them.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IoapicHostCosts {
    /// IOREGSEL write: a posted MMIO write. Nanoseconds. Default 50: DESIGN.md
    /// section 3 ("on the order of a hundred cycles"), about 50 ns at 2 GHz.
    pub index_write_ns: f64,
    /// IOWIN read: an uncached MMIO read, the CPU stalls until the data returns.
    /// Nanoseconds. Default 700: COST-SOURCES.md's 700-740 ns uncached read across
    /// PCIe, an order of magnitude (the IOAPIC sits in the PCH or the IIO).
    pub window_read_ns: f64,
    /// IOWIN write: a posted MMIO write. Nanoseconds. Default 50, as `index_write_ns`.
    pub window_write_ns: f64,
    /// EOI register write: a posted MMIO write. Nanoseconds. Default 50.
    pub eoi_write_ns: f64,
    /// From pin assertion to the message reaching the LAPIC. Nanoseconds. Default
    /// 1000: assumption, the order of an IPI (DESIGN.md section 3: 0.5-1.5 us).
    pub message_latency_ns: f64,
    /// `uio_event_notify`: count the event and wake the reader. Core cycles. Default
    /// 300: assumption (an atomic increment and a wake-up of one waiter).
    pub notify_cycles: f64,
    /// From the wake-up to the reader running on its (otherwise idle) CPU.
    /// Nanoseconds. Default 2000: assumption (a scheduler wake-up and switch).
    pub user_wakeup_ns: f64,
    /// System call entry for the unmask. Core cycles. Default 150: assumption.
    pub syscall_entry_cycles: f64,
    /// System call exit. Core cycles. Default 150: assumption.
    pub syscall_exit_cycles: f64,
    /// `disable_irq_nosync` or `enable_irq`'s own work: the descriptor's lock with
    /// interrupts saved, the depth and the status bits. Core cycles. Default 60:
    /// assumption (a spinlock round trip on a cached line and a few stores). The
    /// descriptor bookkeeping of `__do_IRQ` itself is part of
    /// `costs.cpu.irq_flow_cycles`.
    pub irq_desc_cycles: f64,
    /// The driver's read of the device's status register, which acknowledges a level
    /// interrupt. Nanoseconds. Default 700: COST-SOURCES.md's uncached read across
    /// PCIe, as `window_read_ns`.
    pub device_ack_ns: f64,
}

impl Default for IoapicHostCosts {
    fn default() -> Self {
        IoapicHostCosts {
            index_write_ns: 50.0,
            window_read_ns: 700.0,
            window_write_ns: 50.0,
            eoi_write_ns: 50.0,
            message_latency_ns: 1000.0,
            notify_cycles: 300.0,
            user_wakeup_ns: 2000.0,
            syscall_entry_cycles: 150.0,
            syscall_exit_cycles: 150.0,
            irq_desc_cycles: 60.0,
            device_ack_ns: 700.0,
        }
    }
}

impl IoapicHostCosts {
    /// The fields by name, for validation.
    pub(super) fn fields(&self) -> [(&'static str, f64); 11] {
        [
            ("index_write_ns", self.index_write_ns),
            ("window_read_ns", self.window_read_ns),
            ("window_write_ns", self.window_write_ns),
            ("eoi_write_ns", self.eoi_write_ns),
            ("message_latency_ns", self.message_latency_ns),
            ("notify_cycles", self.notify_cycles),
            ("user_wakeup_ns", self.user_wakeup_ns),
            ("syscall_entry_cycles", self.syscall_entry_cycles),
            ("syscall_exit_cycles", self.syscall_exit_cycles),
            ("irq_desc_cycles", self.irq_desc_cycles),
            ("device_ack_ns", self.device_ack_ns),
        ]
    }

    /// CPU time of `access`.
    pub fn access_time(&self, a: &IoapicAccess) -> Duration {
        // (EOI-register writes are posted writes, `eoi_write_ns` each.)
        let ns = a.index_writes as f64 * self.index_write_ns
            + a.window_reads as f64 * self.window_read_ns
            + a.window_writes as f64 * self.window_write_ns
            + a.eoi_writes as f64 * self.eoi_write_ns;
        Duration::from_ns_f64(ns)
    }
}

/// Scenario `[[ioapic_pins]]`: an edge pin of the IOAPIC, the device asserting it,
/// and the UIO-style flow that masks it in the hardirq and unmasks it from a user
/// thread after `hold_ns`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IoapicPinConfig {
    /// Name in reports; empty means `pinN`.
    #[serde(default)]
    pub name: String,
    /// The IOAPIC input, 0..24.
    pub pin: u8,
    /// The CPU the entry delivers to; the flow's user thread runs there too.
    pub cpu: u32,
    /// Assertions: `fixed` or `poisson`, as for a device; unset, the pin is never
    /// asserted (a driver flow alone, e.g. `System::run_ioapic`).
    #[serde(default)]
    pub arrival: Option<ArrivalProcess>,
    /// How long the device holds the line high per edge, ns. Default 100:
    /// assumption (a short pulse; a new assertion while high makes no edge).
    #[serde(default = "default_pulse")]
    pub pulse_ns: f64,
    /// How the driver changes the mask bit. Default `shadowed`.
    #[serde(default = "default_driver")]
    pub driver: RteDriver,
    /// How long the user thread handles an event before unmasking, ns. Default 0.
    #[serde(default)]
    pub hold_ns: f64,
    /// Whether the UIO flow runs (hardirq masks, the thread unmasks). Default true;
    /// false leaves the pin to whoever drives it through `System::run_ioapic`, and
    /// its interrupts to a plain edge handler.
    #[serde(default = "yes")]
    pub uio: bool,
    /// `"edge"` (default: `pulse_ns` per assertion) or `"level"` (the line stays
    /// high until the flow's thread acknowledges the device).
    #[serde(default)]
    pub trigger: PinTrigger,
    /// `"x86-io-apic"` (default) or `"ia64-iosapic"`: whose chip code the flow runs.
    #[serde(default)]
    pub chip: IoapicChipKind,
    /// `"mask-rte"` (default: the hardirq masks the entry, the thread unmasks it) or
    /// `"lazy-disable"` (`disable_irq_nosync` / `enable_irq`).
    #[serde(default)]
    pub flow: PinFlow,
}

fn default_pulse() -> f64 {
    100.0
}
fn default_driver() -> RteDriver {
    RteDriver::Shadowed
}
fn yes() -> bool {
    true
}

/// Checks `sc.ioapic_pins`.
pub(super) fn validate(sc: &Scenario) -> Result<(), ScenarioError> {
    if sc.ioapic_pins.is_empty() {
        return Ok(());
    }
    if sc.arch != Arch::X86 {
        return Err(ScenarioError::invalid(
            "ioapic_pins",
            format!("{} pins with arch = \"arm\"", sc.ioapic_pins.len()),
            "arch = \"x86\": the IOAPIC is an x86 part",
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut thread_cpus: std::collections::BTreeSet<u32> = sc
        .shootdowns
        .iter()
        .flat_map(|l| l.from.iter().copied())
        .collect();
    for (i, p) in sc.ioapic_pins.iter().enumerate() {
        let f = |name: &str| format!("ioapic_pins[{i}].{name}");
        if p.pin >= IOAPIC_PINS {
            return Err(ScenarioError::invalid(
                f("pin"),
                p.pin,
                format!("0..{IOAPIC_PINS}"),
            ));
        }
        if !seen.insert(p.pin) {
            return Err(ScenarioError::invalid(f("pin"), p.pin, "each pin once"));
        }
        if p.cpu >= sc.cpus.count {
            return Err(ScenarioError::invalid(
                f("cpu"),
                p.cpu,
                format!("a CPU 0..{}", sc.cpus.count),
            ));
        }
        if let Some(a) = &p.arrival {
            a.validate(&f("arrival"))
                .map_err(|e| ScenarioError::invalid_from(&f("arrival"), e))?;
        }
        for (name, v) in [("pulse_ns", p.pulse_ns), ("hold_ns", p.hold_ns)] {
            if !(v.is_finite() && (0.0..=1e12).contains(&v)) {
                return Err(ScenarioError::invalid(f(name), v, "0..=1e12 ns"));
            }
        }
        if p.uio && !thread_cpus.insert(p.cpu) {
            return Err(ScenarioError::invalid(
                f("cpu"),
                p.cpu,
                "a CPU that runs no other thread-context load (a shootdown initiator or another pin's reader)",
            ));
        }
    }
    Ok(())
}

/// One pin's state and counters.
pub(super) struct Pin {
    pub(super) name: String,
    pub(super) pin: u8,
    pub(super) cpu: u32,
    pub(super) vector: Vector,
    pub(super) arrival: Option<ArrivalProcess>,
    pub(super) rng: ChaCha8Rng,
    pub(super) pulse: Duration,
    pub(super) driver: RteDriver,
    pub(super) setup: PinSetup,
    pub(super) hold_ns: u64,
    pub(super) uio: bool,
    pub(super) chip: Rc<IoapicChipData>,
    /// The irq descriptor: IRQ_* status bits and the disable depth.
    pub(super) desc_status: u32,
    pub(super) desc_depth: u32,
    /// Level: the device's line is high (its interrupt unacknowledged).
    pub(super) level_high: bool,
    /// Level: the assertion that raised the line, while not yet delivered.
    pub(super) level_undelivered: Option<super::ledger::MsiToken>,
    /// Level: assertions while the line was already high.
    pub(super) level_riders: super::token_bag::TokenBag,
    /// Replays by `enable_irq` (self-IPIs).
    pub(super) replays: u64,
    /// Index of the pin's interrupt source in the ledger's sources.
    pub(super) source: u32,
    pub(super) pulses_high: u32,
    pub(super) asserted: u64,
    /// Events notified to the reader, and those it has read.
    pub(super) events: u64,
    pub(super) seen: u64,
    pub(super) reader_blocked: bool,
    pub(super) masks: u64,
    pub(super) unmasks: u64,
    pub(super) masked_since: Option<SimTime>,
    pub(super) masked_total: Duration,
    pub(super) handler_runs: u64,
}

/// The IOAPIC and its pins.
pub(super) struct IoapicHost {
    pub io: apic_sim::Ioapic,
    pub(super) pins: Vec<Pin>,
    /// The pin of each input, by input number.
    pub(super) by_pin: [Option<u16>; IOAPIC_PINS as usize],
    access: IoapicAccess,
}

impl System {
    /// Builds the IOAPIC of `sc` (None without pins): programs each pin's entry at
    /// its CPU's APIC on a free vector below `vector_limit`, and registers a source.
    pub(super) fn build_ioapic(
        sc: &Scenario,
        cpus: &mut [super::cpu::Cpu],
        sources: &mut Vec<MsiSource>,
        streams: &RngStreams,
        vector_limit: u8,
    ) -> Result<Option<IoapicHost>, ScenarioError> {
        if sc.ioapic_pins.is_empty() {
            return Ok(None);
        }
        let mut io = apic_sim::Ioapic::new(0, IOAPIC_PINS)
            .map_err(|e| ScenarioError::invalid_from("ioapic_pins", e))?;
        let mut pins = Vec::new();
        let mut by_pin = [None; IOAPIC_PINS as usize];
        for (i, p) in sc.ioapic_pins.iter().enumerate() {
            let f = format!("ioapic_pins[{i}]");
            let vector = cpus[p.cpu as usize]
                .free_vector(vector_limit)
                .ok_or_else(|| {
                    ScenarioError::invalid(
                        format!("{f}.cpu"),
                        p.cpu,
                        "a CPU with a free device vector",
                    )
                })?;
            let apic_id = sc.apic_id_of(p.cpu);
            let dest = u8::try_from(apic_id).map_err(|_| {
                ScenarioError::invalid(
                    format!("{f}.cpu"),
                    p.cpu,
                    "a CPU whose APIC ID is below 256 (a compatibility-format entry has an 8-bit destination)",
                )
            })?;
            let trigger = match p.trigger {
                PinTrigger::Edge => apic_sim::TriggerMode::Edge,
                PinTrigger::Level => apic_sim::TriggerMode::Level,
            };
            let entry = linux_entry(vector, dest, trigger);
            let _ = io
                .write_entry(p.pin, entry)
                .map_err(|e| ScenarioError::invalid_from(&format!("{f}.pin"), e))?;
            let name = sc.ioapic_pin_name(i);
            cpus[p.cpu as usize].register_handler(vector, HandlerRef::IoapicPin(i as u16));
            sources.push(MsiSource::new(
                name.clone(),
                MsiMessage {
                    address: 0xfee0_0000 | (sc.apic_id_of(p.cpu) << 12) as u64,
                    data: vector.0 as u32,
                },
                0,
                u16::MAX,
            ));
            by_pin[p.pin as usize] = Some(i as u16);
            pins.push(Pin {
                rng: streams.stream(&super::stream_names::ioapic_pin(&name)),
                name,
                pin: p.pin,
                cpu: p.cpu,
                vector,
                arrival: p.arrival.clone(),
                pulse: Duration::from_ns_f64(p.pulse_ns),
                driver: p.driver,
                setup: PinSetup {
                    driver: p.driver,
                    chip: p.chip,
                    flow: p.flow,
                    trigger: p.trigger,
                },
                hold_ns: p.hold_ns.round() as u64,
                uio: p.uio,
                chip: IoapicChipData::new(p.pin, entry),
                desc_status: 0,
                desc_depth: 0,
                level_high: false,
                level_undelivered: None,
                level_riders: Default::default(),
                replays: 0,
                source: sources.len() as u32 - 1,
                pulses_high: 0,
                asserted: 0,
                events: 0,
                seen: 0,
                reader_blocked: false,
                masks: 0,
                unmasks: 0,
                masked_since: None,
                masked_total: Duration::ZERO,
                handler_runs: 0,
            });
        }
        Ok(Some(IoapicHost {
            io,
            pins,
            by_pin,
            access: IoapicAccess::default(),
        }))
    }

    pub(super) fn ioapic_mut(&mut self) -> &mut IoapicHost {
        self.ioapic
            .as_mut()
            .expect("IOAPIC operations need ioapic_pins")
    }

    /// Schedules each pin's first assertion and starts each UIO reader.
    pub(super) fn start_ioapic(&mut self) {
        let now = self.now();
        let Some(host) = self.ioapic.as_mut() else {
            return;
        };
        let mut first = Vec::new();
        let mut readers = Vec::new();
        for (i, p) in host.pins.iter_mut().enumerate() {
            if let Some(a) = &p.arrival {
                first.push((i as u16, now + a.next_gap(&mut p.rng)));
            }
            if p.uio {
                readers.push((i as u16, p.cpu, Rc::clone(&p.chip), p.setup, p.hold_ns));
            }
        }
        for (pin, at) in first {
            self.queue
                .schedule(at, Priority::DEVICE, Event::IoapicAssert { pin });
        }
        for (pin, cpu, chip, setup, hold) in readers {
            let co =
                Coroutine::new(move |port| user_thread(IoapicPort::new(port), chip, setup, hold));
            self.cpus[cpu as usize].task = Some(Task::new(
                TaskCo::Ioapic(co),
                TaskKind::IoapicThread(pin),
                now,
            ));
            self.try_take_interrupt(now, cpu);
        }
    }

    /// The device asserts pin `pin` (index in `ioapic_pins`) for one pulse.
    pub(super) fn on_ioapic_assert(&mut self, now: SimTime, pin: u16) {
        if self.ioapic_mut().pins[pin as usize].setup.trigger == PinTrigger::Level {
            return self.on_level_assert(now, pin);
        }
        let host = self.ioapic_mut();
        let p = &mut host.pins[pin as usize];
        p.asserted += 1;
        p.pulses_high += 1;
        let (input, source, pulse) = (p.pin, p.source, p.pulse);
        let next = p.arrival.as_ref().map(|a| now + a.next_gap(&mut p.rng));
        let outcome = host.io.assert_pin(input, true).expect("validated pin");
        self.emit(|| SimEvent::IoapicPin {
            t: now,
            pin: input,
            change: PinChange::Asserted,
        });
        let token = self.new_msi(now, source);
        match outcome {
            PinOutcome::Delivered(msg) => self.send_pin_message(now, msg, Some(token)),
            PinOutcome::LostWhileMasked => {
                let p = &self.ioapic_mut().pins[pin as usize];
                if p.setup.flow == PinFlow::LazyDisable && p.desc_status & DESC_PENDING != 0 {
                    // The kernel already holds this interrupt for a replay.
                    let (cpu, vector) = (p.cpu as usize, p.vector);
                    self.ledger.coalesced_into_pending(cpu, vector, token);
                } else {
                    self.drop_msi(now, token, "lost_while_masked");
                }
            }
            PinOutcome::NoEdge => self.drop_msi(now, token, "no_edge_line_high"),
            PinOutcome::ReservedDeliveryMode => self.drop_msi(now, token, "reserved_delivery_mode"),
            // Only a level entry answers these; this is the edge path.
            PinOutcome::PendingUntilUnmask
            | PinOutcome::BlockedRemoteIrr
            | PinOutcome::Deasserted => unreachable!("an edge entry answered {outcome:?}"),
        }
        self.queue
            .schedule(now + pulse, Priority::DEVICE, Event::IoapicDeassert { pin });
        if let Some(at) = next {
            self.queue
                .schedule(at, Priority::DEVICE, Event::IoapicAssert { pin });
        }
    }

    /// One pulse of pin `pin` ends; overlapping pulses keep the line high.
    pub(super) fn on_ioapic_deassert(&mut self, now: SimTime, pin: u16) {
        let host = self.ioapic_mut();
        let p = &mut host.pins[pin as usize];
        p.pulses_high -= 1;
        if p.pulses_high == 0 {
            let input = p.pin;
            let _ = host.io.assert_pin(input, false);
            self.emit(|| SimEvent::IoapicPin {
                t: now,
                pin: input,
                change: PinChange::Deasserted,
            });
        }
    }

    /// The hardirq of pin `pin`'s vector: the UIO flow, or a plain edge handler.
    pub(super) fn ioapic_hardirq(&mut self, pin: u16, vector: Vector) -> Option<super::Algorithm> {
        let p = &mut self.ioapic.as_mut()?.pins[pin as usize];
        if !p.uio {
            // The plain edge handler runs (the caller's fallback): count its entry
            // here, as the UIO flow counts its runs at the notify.
            p.handler_runs += 1;
            return None;
        }
        let (chip, setup) = (Rc::clone(&p.chip), p.setup);
        Some(super::Algorithm::Ioapic(Coroutine::new(move |port| {
            do_irq(IoapicPort::new(port), chip, setup, vector)
        })))
    }

    /// The CPU time of an IOAPIC access or flow step, at issue (zero for the steps
    /// that park a thread: a read with nothing to read, preemptible user work).
    /// The EOI and the irq flow are the CPU's own operations (`CpuOp::Eoi`,
    /// `CpuOp::HandleVector`), issued and applied where every handler's are.
    fn ioapic_op_cost(&self, op: IoapicOp) -> Duration {
        let k = self.costs.ioapic;
        let f = self.freq;
        match op {
            IoapicOp::WriteIndex(_) => Duration::from_ns_f64(k.index_write_ns),
            IoapicOp::ReadWindow => Duration::from_ns_f64(k.window_read_ns),
            IoapicOp::WriteWindow(_) => Duration::from_ns_f64(k.window_write_ns),
            IoapicOp::WriteEoi(_) => Duration::from_ns_f64(k.eoi_write_ns),
            IoapicOp::Host(h) => match h {
                PinHostOp::Eoi | PinHostOp::HandleVector(_) => {
                    unreachable!("{h:?} runs as the CPU's own operation")
                }
                PinHostOp::Notify => f.cycles_f64(k.notify_cycles),
                PinHostOp::SyscallEntry => f.cycles_f64(k.syscall_entry_cycles),
                PinHostOp::SyscallExit => f.cycles_f64(k.syscall_exit_cycles),
                PinHostOp::WaitEvent | PinHostOp::Hold { .. } => Duration::ZERO,
                // Inside `__do_IRQ`: part of costs.cpu.irq_flow_cycles.
                PinHostOp::DescStatus
                | PinHostOp::DescEnter
                | PinHostOp::DescAgain
                | PinHostOp::DescExit => Duration::ZERO,
                PinHostOp::DescDisable(_) | PinHostOp::DescEnable(_) => {
                    f.cycles_f64(k.irq_desc_cycles)
                }
                PinHostOp::AckDevice => Duration::from_ns_f64(k.device_ack_ns),
                PinHostOp::Resend(_) => self.costs.apic.msr_time(apic_sim::msr::MSR_ICR, f),
            },
        }
    }

    /// Issues a hardirq's IOAPIC operation; returns its cost.
    pub(super) fn start_irq_ioapic_op(&mut self, now: SimTime, cpu: u32, op: IoapicOp) -> Duration {
        if let Some(cpu_op) = cpu_op_of(op) {
            self.cpus[cpu as usize].ops.count(cpu_op);
            return self.start_op(now, cpu, cpu_op);
        }
        let d = self.ioapic_op_cost(op);
        self.emit_cpu_span(cpu, now, d, || super::CpuActivity::Ioapic { op });
        self.cpus[cpu as usize].time.handlers += d;
        d
    }

    /// Applies an IOAPIC operation (hardirq or thread) when it completes; returns the
    /// value read.
    pub(super) fn complete_ioapic_op(&mut self, now: SimTime, cpu: u32, op: IoapicOp) -> u64 {
        if let Some(cpu_op) = cpu_op_of(op) {
            return self.complete_op(now, cpu, cpu_op);
        }
        match op {
            IoapicOp::Host(PinHostOp::Notify) => {
                // A notify outside a pin's flow (a `run_ioapic` algorithm) has no reader.
                let Some(pin) = self.flow_pin(cpu) else {
                    return 0;
                };
                let p = &mut self.ioapic_mut().pins[pin as usize];
                p.events += 1;
                p.handler_runs += 1;
                if p.reader_blocked {
                    self.wake_reader(now, pin);
                }
                0
            }
            IoapicOp::Host(h) => self.complete_flow_op(now, cpu, h),
            reg => {
                let host = self.ioapic_mut();
                let before: Vec<bool> = host
                    .pins
                    .iter()
                    .map(|p| host.io.entry(p.pin).is_ok_and(|e| e.masked()))
                    .collect();
                let fx = perform(&mut host.io, reg);
                host.access += fx.access;
                let mut changes = Vec::new();
                for (i, was) in before.into_iter().enumerate() {
                    let is = host.io.entry(host.pins[i].pin).is_ok_and(|e| e.masked());
                    let p = &mut host.pins[i];
                    let change = match (was, is) {
                        (false, true) => {
                            p.masks += 1;
                            p.masked_since = Some(now);
                            PinChange::Masked
                        }
                        (true, false) => {
                            p.unmasks += 1;
                            if let Some(since) = p.masked_since.take() {
                                p.masked_total += now.since(since);
                            }
                            PinChange::Unmasked
                        }
                        _ => continue,
                    };
                    changes.push((p.pin, change));
                }
                for (pin, change) in changes {
                    self.emit(|| SimEvent::IoapicPin {
                        t: now,
                        pin,
                        change,
                    });
                }
                for (input, msg) in fx.delivered {
                    self.deliver_level(now, input, msg);
                }
                fx.value as u64
            }
        }
    }

    /// Issues a thread task's IOAPIC operation.
    pub(super) fn issue_task_ioapic_op(
        &mut self,
        now: SimTime,
        cpu: u32,
        op: IoapicOp,
    ) -> TaskIssued {
        let c = cpu as usize;
        match op {
            IoapicOp::Host(PinHostOp::WaitEvent) => {
                // Only a pin's reader has events to wait for; anyone else reads nothing.
                let Some(pin) = self.flow_pin(cpu) else {
                    return TaskIssued::Busy(Duration::ZERO, 0);
                };
                let wake = Duration::from_ns_f64(self.costs.ioapic.user_wakeup_ns);
                let p = &mut self.ioapic_mut().pins[pin as usize];
                if p.events > p.seen {
                    p.seen = p.events;
                    let d = if std::mem::take(&mut p.reader_blocked) {
                        wake
                    } else {
                        Duration::ZERO
                    };
                    self.cpus[c].time.app += d;
                    return TaskIssued::Busy(d, 0);
                }
                p.reader_blocked = true;
                self.park(now, cpu, TaskOp::Ioapic(op));
                TaskIssued::Parked
            }
            IoapicOp::Host(PinHostOp::Hold { ns }) => {
                if ns == 0 {
                    return TaskIssued::Busy(Duration::ZERO, 0);
                }
                let d = Duration::from_ns(ns);
                let task = self.cpus[c].task.as_mut().expect("a reader");
                task.wait = Some((TaskOp::Ioapic(op), now));
                let generation = task.started.as_ps() ^ now.as_ps();
                self.queue.schedule(
                    now + d,
                    Priority::CPU,
                    Event::TaskHoldDone { cpu, generation },
                );
                // Charged when it ends or is preempted, not ahead.
                self.cpus[c].state = CpuState::Waiting;
                self.cpus[c].activity_end = now;
                TaskIssued::Parked
            }
            _ => {
                let task = self.cpus[c].task.as_mut().expect("a thread task");
                match op {
                    IoapicOp::Host(PinHostOp::SyscallEntry) => task.irq_off += 1,
                    IoapicOp::Host(PinHostOp::SyscallExit) => {
                        task.irq_off = task.irq_off.saturating_sub(1)
                    }
                    _ => {}
                }
                let d = self.ioapic_op_cost(op);
                self.cpus[c].time.app += d;
                self.emit_cpu_span(cpu, now, d, || super::CpuActivity::Ioapic { op });
                TaskIssued::Busy(d, 0)
            }
        }
    }

    fn park(&mut self, now: SimTime, cpu: u32, op: TaskOp) {
        let c = cpu as usize;
        self.cpus[c].task.as_mut().expect("a thread task").wait = Some((op, now));
        self.cpus[c].state = CpuState::Waiting;
        self.cpus[c].activity_end = now;
    }

    /// The reader of pin `pin` was notified: its read is issued again.
    fn wake_reader(&mut self, now: SimTime, pin: u16) {
        let cpu = self.ioapic_mut().pins[pin as usize].cpu;
        let c = cpu as usize;
        let Some(task) = self.cpus[c].task.as_mut() else {
            return;
        };
        if task.kind != TaskKind::IoapicThread(pin) {
            return;
        }
        if let Some((op, _)) = task.wait.take() {
            task.reissue = Some(op);
            if self.cpus[c].state == CpuState::Waiting {
                self.cpus[c].state = CpuState::Idle;
                self.try_take_interrupt(now, cpu);
            }
        }
    }

    /// Preemptible user work of `cpu`'s thread ends (stale if preempted meanwhile).
    pub(super) fn on_task_hold_done(&mut self, now: SimTime, cpu: u32, generation: u64) {
        let c = cpu as usize;
        let Some(task) = self.cpus[c].task.as_ref() else {
            return;
        };
        let Some((TaskOp::Ioapic(IoapicOp::Host(PinHostOp::Hold { .. })), since)) = task.wait
        else {
            return;
        };
        if task.started.as_ps() ^ since.as_ps() != generation {
            return;
        }
        self.cpus[c].time.app += now.since(since);
        let op = IoapicOp::Host(PinHostOp::Hold {
            ns: now.since(since).as_ps() / 1000,
        });
        self.emit_cpu_span(cpu, since, now.since(since), || {
            super::CpuActivity::Ioapic { op }
        });
        self.end_wait(now, cpu, 0);
    }

    /// An interrupt preempts preemptible user work: the rest is issued again after it.
    pub(super) fn break_hold(&mut self, now: SimTime, cpu: u32, ns: u64, since: SimTime) -> TaskOp {
        let done = now.since(since);
        self.cpus[cpu as usize].time.app += done;
        let op = IoapicOp::Host(PinHostOp::Hold {
            ns: done.as_ps() / 1000,
        });
        self.emit_cpu_span(cpu, since, done, || super::CpuActivity::Ioapic { op });
        let left = ns.saturating_sub(done.as_ps() / 1000);
        TaskOp::Ioapic(IoapicOp::Host(PinHostOp::Hold { ns: left }))
    }

    /// Runs `algorithm` against the IOAPIC as CPU `cpu`'s thread task (a mask, an
    /// unmask, a driver of your own); its accesses are timed like any other and take
    /// effect when they complete. Errors: no IOAPIC, no such CPU, or a task running.
    pub fn run_ioapic<F>(
        &mut self,
        cpu: u32,
        algorithm: impl FnOnce(IoapicPort) -> F,
    ) -> Result<(), ScenarioError>
    where
        F: std::future::Future<Output = ()> + 'static,
    {
        if self.ioapic.is_none() {
            return Err(ScenarioError::invalid(
                "run_ioapic",
                "a system without ioapic_pins",
                "a scenario with at least one IOAPIC pin",
            ));
        }
        if cpu >= self.cpu_count() || self.cpus[cpu as usize].task.is_some() {
            return Err(ScenarioError::invalid(
                "run_ioapic cpu",
                cpu,
                format!("an idle CPU 0..{}", self.cpu_count()),
            ));
        }
        let now = self.now();
        let co = Coroutine::new(|port| algorithm(IoapicPort::new(port)));
        self.cpus[cpu as usize].task = Some(Task::new(TaskCo::Ioapic(co), TaskKind::User, now));
        self.try_take_interrupt(now, cpu);
        Ok(())
    }

    /// The kernel's chip data (pin and entry shadow) of input `pin`, for algorithms
    /// run with [`System::run_ioapic`].
    pub fn ioapic_chip(&self, pin: u8) -> Option<Rc<IoapicChipData>> {
        let host = self.ioapic.as_ref()?;
        let i = (*host.by_pin.get(pin as usize)?)?;
        Some(Rc::clone(&host.pins[i as usize].chip))
    }

    /// IOAPIC register accesses of every CPU so far.
    pub fn ioapic_accesses(&self) -> IoapicAccess {
        self.ioapic
            .as_ref()
            .map_or_else(IoapicAccess::default, |h| h.access)
    }

    /// The IOAPIC in a report.
    pub(super) fn ioapic_report(&self) -> Vec<IoapicPinReport> {
        let Some(host) = self.ioapic.as_ref() else {
            return Vec::new();
        };
        let now = self.now();
        host.pins
            .iter()
            .map(|p| {
                let masked =
                    p.masked_total + p.masked_since.map_or(Duration::ZERO, |s| now.since(s));
                IoapicPinReport {
                    name: p.name.clone(),
                    pin: p.pin,
                    cpu: p.cpu,
                    vector: format!("{:#04x}", p.vector.0),
                    driver: p.driver.as_str(),
                    trigger: p.setup.trigger.as_str(),
                    chip: p.setup.chip.as_str(),
                    flow: p.setup.flow.as_str(),
                    replays: p.replays,
                    asserted: p.asserted,
                    handler_runs: p.handler_runs,
                    masks: p.masks,
                    unmasks: p.unmasks,
                    masked_frac: if now.as_ps() > 0 {
                        masked.as_ps() as f64 / now.as_ps() as f64
                    } else {
                        0.0
                    },
                }
            })
            .collect()
    }
}

/// The CPU's own operation a flow step is, if it is one.
fn cpu_op_of(op: IoapicOp) -> Option<crate::kernel::CpuOp> {
    match op {
        IoapicOp::Host(PinHostOp::Eoi) => Some(crate::kernel::CpuOp::Eoi),
        IoapicOp::Host(PinHostOp::HandleVector(v)) => Some(crate::kernel::CpuOp::HandleVector(v)),
        _ => None,
    }
}

/// A change of an IOAPIC pin, for observers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PinChange {
    /// The device raised the line.
    Asserted,
    /// The line fell.
    Deasserted,
    /// The entry's mask bit was set.
    Masked,
    /// The entry's mask bit was cleared.
    Unmasked,
}

/// One IOAPIC pin in a report. Its interrupts are in the run's `msis` balance;
/// edges it could not deliver are in `msis.dropped` by reason.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IoapicPinReport {
    /// The pin's name.
    pub name: String,
    /// The IOAPIC input.
    pub pin: u8,
    /// The CPU its entry delivers to.
    pub cpu: u32,
    /// The entry's vector.
    pub vector: String,
    /// `"read-modify-write"` or `"shadowed"`.
    pub driver: &'static str,
    /// `"edge"` or `"level"`.
    pub trigger: &'static str,
    /// `"x86-io-apic"` or `"ia64-iosapic"`.
    pub chip: &'static str,
    /// `"mask-rte"` or `"lazy-disable"`.
    pub flow: &'static str,
    /// Interrupts `enable_irq` replayed (self-IPIs).
    pub replays: u64,
    /// Assertions by the device.
    pub asserted: u64,
    /// Hardirq runs: those of the UIO flow that notified the reader, or, for a pin
    /// without UIO, entries of the plain edge handler.
    pub handler_runs: u64,
    /// Times the entry went from unmasked to masked.
    pub masks: u64,
    /// Times the entry went from masked to unmasked.
    pub unmasks: u64,
    /// Fraction of the run the entry was masked.
    pub masked_frac: f64,
}
