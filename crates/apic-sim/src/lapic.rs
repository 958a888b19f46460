//! Local APIC in x2APIC mode: interrupt acceptance, priority and EOI.
//!
//! Intel SDM Vol. 3A chapter 11: 11.8.3 (task and processor priority), 11.8.4
//! (interrupt acceptance for fixed interrupts), 11.8.5 (EOI), 11.5.3 (error handling),
//! 11.4.7.2 (software-disabled state), 11.9 (spurious interrupt).
//!
//! Modelled: IRR/ISR/TMR (one bit per vector), TPR, PPR, SVR software enable and
//! suppress-EOI-broadcast, ESR with its write-then-read latch and the error interrupt,
//! acknowledge (INTA) and EOI with the level-triggered EOI broadcast returned as a
//! value; reception by delivery mode (fixed, NMI, SMI, INIT, SIPI; 11.6.1), the INIT
//! reset (11.4.7.3) and the wait-for-SIPI state; local (LVT) interrupt sources. The
//! register (MSR) interface is in [`crate::msr`], the timer in [`crate::timer`].
//!
//! Not modelled: xAPIC (MMIO) mode and the mode transitions of IA32_APIC_BASE; the
//! hardware-disabled state; ExtINT/8259 pass-through; the "interrupt slot" limit of old
//! P6 parts (an IRR holds one pending interrupt per vector and a second one merges);
//! the model-specific `PPR[3:0]` choice when TPR and ISRV have the same class (we take
//! `TPR[3:0]`, see [`LocalApic::ppr`]); NMI/SMI blocking and the core's reaction to
//! INIT/SIPI (returned as outcomes for the engine's CPU model).

use crate::config::LapicConfig;
use crate::icr::{DeliveryMode, IpiMessage, TriggerMode};
use crate::timer::{ApicTimer, LVT_MASKED, LVT_VECTOR_MASK};
use crate::ApicError;
use sim_core::{ApicId, SimTime, Vector, VectorSet};

/// SVR bit 8: APIC software enable (SDM 11.9, Figure 11-23).
pub const SVR_APIC_ENABLE: u32 = 1 << 8;
/// SVR bit 9: focus processor checking disabled (not used by x2APIC parts; kept for
/// reads that round-trip).
pub const SVR_FOCUS_DISABLE: u32 = 0x200;
/// SVR bit 12: suppress the EOI broadcast for level-triggered vectors (directed EOI).
pub const SVR_SUPPRESS_EOI_BROADCAST: u32 = 1 << 12;
/// SVR bits 7:0: the spurious vector.
pub const SVR_VECTOR_MASK: u32 = 0xff;

// ESR (SDM 11.5.3, Figure 11-9). Not modelled, so not named: bits 2 and 3 (send and
// receive accept errors, which need the APIC bus) and bit 7 (illegal register address,
// xAPIC only: x2APIC raises #GP instead).
/// ESR bit 4: redirectable (lowest-priority) IPI not supported.
pub const ESR_REDIRECTABLE_IPI: u32 = 1 << 4;
/// ESR bit 5: send illegal vector (an ICR or SELF_IPI write carried a vector 0-15).
pub const ESR_SEND_ILLEGAL_VECTOR: u32 = 1 << 5;
/// ESR bit 6: receive illegal vector (a message or local source carried a vector 0-15).
pub const ESR_RECEIVE_ILLEGAL_VECTOR: u32 = 1 << 6;

/// Vectors below this are illegal for fixed and lowest-priority delivery (SDM 11.5.2).
pub const FIRST_LEGAL_VECTOR: u8 = 16;

/// Why an arriving fixed interrupt did not reach the IRR. Each is a drop with a reason
/// the caller must account for (DESIGN.md principle 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// Vector 0-15: the APIC sets ESR bit 6 and does not accept it (SDM 11.5.3).
    IllegalVector,
    /// SVR bit 8 is clear. The SDM (11.4.7.2) lists what a software-disabled APIC
    /// still does (INIT, NMI, SMI, SIPI; IRR/ISR contents are held) and fixed
    /// interrupts are not in that list; KVM's `__apic_accept_irq` drops them too.
    SoftwareDisabled,
}

/// LVT bits 10:8: delivery mode (CMCI, thermal, PMI, LINT0, LINT1).
pub const LVT_DELIVERY_MODE_SHIFT: u32 = 8;
/// LVT bit 15: trigger mode (LINT0/LINT1 only; 1 = level).
pub const LVT_TRIGGER_LEVEL: u32 = 1 << 15;

/// The local interrupt sources with an LVT entry, other than the timer (which lives in
/// [`ApicTimer`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LvtSource {
    Cmci,
    Thermal,
    Pmi,
    Lint0,
    Lint1,
    Error,
}

impl LvtSource {
    pub const ALL: [LvtSource; 6] = [
        LvtSource::Cmci,
        LvtSource::Thermal,
        LvtSource::Pmi,
        LvtSource::Lint0,
        LvtSource::Lint1,
        LvtSource::Error,
    ];
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// What happened to a fixed interrupt message offered to [`LocalApic::accept`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use]
pub enum AcceptOutcome {
    /// The IRR bit was clear and is now set.
    Accepted,
    /// The IRR bit was already set: the two requests merged into one (the IRR holds one
    /// bit per vector). The caller should count this as coalesced, not as lost silently.
    AlreadyPending,
    /// Not accepted; see the reason.
    Rejected(RejectReason),
}

/// Result of an EOI write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[must_use]
pub struct EoiOutcome {
    /// The in-service vector this EOI completed (the highest ISR bit), if any.
    pub completed: Option<Vector>,
    /// Set when the completed vector was level-triggered (TMR bit set) and SVR bit 12
    /// does not suppress the broadcast: the engine sends this vector's EOI to every
    /// IOAPIC, which clear Remote IRR of entries with that vector (SDM 11.8.5).
    pub broadcast: Option<Vector>,
}

/// What a delivered message (IPI, IOAPIC or MSI message, local source) did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use]
pub enum DeliveryOutcome {
    /// Fixed or lowest-priority (after arbitration): the IRR outcome.
    Fixed(AcceptOutcome),
    /// NMI: the vector is ignored; the engine raises NMI on the core.
    Nmi,
    /// SMI: the engine raises SMI on the core.
    Smi,
    /// INIT: the APIC has been reset to its INIT state (SVR 0xFF, so software-disabled;
    /// LVTs masked; IRR/ISR/TMR, TPR, timer cleared; ID kept) and waits for SIPI.
    Init,
    /// SIPI accepted in wait-for-SIPI: the core starts at physical `vector << 12`.
    StartUp { vector: Vector },
    /// Accepted by the bus but with no effect, with the reason.
    Ignored(IgnoreReason),
}

/// Why a delivered message had no effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IgnoreReason {
    /// SIPI outside wait-for-SIPI is ignored (SDM 11.6.1, "Start-Up").
    SipiNotWaiting,
    /// ExtINT needs an 8259 to supply the vector: not modelled.
    ExtIntNotModelled,
    /// A local source whose LVT entry is masked.
    Masked,
    /// A local source with a reserved delivery mode.
    ReservedDeliveryMode,
}

/// One local APIC in x2APIC mode.
///
/// Methods, sorted as in quinn-proto:
/// - getters: [`id`](Self::id), [`irr`](Self::irr), [`isr`](Self::isr),
///   [`tmr`](Self::tmr), [`tpr`](Self::tpr), [`ppr`](Self::ppr), [`svr`](Self::svr),
///   [`software_enabled`](Self::software_enabled);
/// - inputs: [`accept`](Self::accept) (an interrupt message arrives),
///   [`set_tpr`](Self::set_tpr);
///   [`receive`](Self::receive) / [`receive_ipi`](Self::receive_ipi) (any delivery
///   mode), [`raise_local`](Self::raise_local) (an LVT source fires),
///   [`rdmsr`](Self::rdmsr) / [`wrmsr`](Self::wrmsr) (the register interface, returning
///   [`ApicEffects`](crate::ApicEffects));
/// - CPU side: [`deliverable`](Self::deliverable) (what the APIC presents to the core),
///   [`acknowledge`](Self::acknowledge) (INTA), [`eoi`](Self::eoi);
/// - timer: [`timer_next_fire`](Self::timer_next_fire), [`timer_fire`](Self::timer_fire).
///
/// After any input, the engine re-reads [`deliverable`](Self::deliverable): inputs
/// may set IRR bits (self IPI, error interrupt, timer) or change PPR.
#[derive(Clone, Debug)]
// In declaration order: the fields every interrupt reads (IRR and ISR, then ID, SVR
// and TPR) fill the struct's first 80 bytes, and the timer, which the interrupt path
// never touches, goes last. An engine keeps one of these per CPU, thousands of them.
#[repr(C)]
pub struct LocalApic {
    pub(crate) irr: VectorSet,
    pub(crate) isr: VectorSet,
    pub(crate) id: ApicId,
    pub(crate) svr: u32,
    pub(crate) tpr: u8,
    /// Set by INIT, cleared by the SIPI that starts the core.
    pub(crate) wait_for_sipi: bool,
    pub(crate) tmr: VectorSet,
    /// Errors detected since the last ESR write (not yet visible to reads).
    pub(crate) esr_pending: u32,
    /// The value ESR reads return: what `esr_pending` held at the last ESR write.
    pub(crate) esr_latched: u32,
    /// LVT entries other than the timer, indexed by [`LvtSource::index`].
    pub(crate) lvt: [u32; 6],
    /// Last value written to ICR (bit 12 cleared), for debugging reads.
    pub(crate) icr: u64,
    pub(crate) timer: ApicTimer,
}

impl LocalApic {
    /// A local APIC in x2APIC mode, software-enabled (SVR = 0x1FF: bit 8 set, spurious
    /// vector 0xFF), TPR 0, IRR/ISR/TMR empty, LVTs masked (their reset value), with
    /// the default [`LapicConfig`]. The ID is not checked; see
    /// [`with_config`](Self::with_config).
    pub fn new(id: ApicId) -> LocalApic {
        let config = LapicConfig::default();
        LocalApic {
            id,
            irr: VectorSet::EMPTY,
            isr: VectorSet::EMPTY,
            tmr: VectorSet::EMPTY,
            tpr: 0,
            svr: SVR_APIC_ENABLE | 0xff,
            esr_pending: 0,
            esr_latched: 0,
            lvt: [LVT_MASKED; 6],
            icr: 0,
            timer: ApicTimer::new(config.timer_clock, config.tsc),
            wait_for_sipi: false,
        }
    }

    /// Like [`new`](Self::new) with explicit clocks. Rejects the reserved ID
    /// 0xFFFF_FFFF (it means broadcast, SDM 11.12.1) and invalid clocks.
    pub fn with_config(id: ApicId, config: LapicConfig) -> Result<LocalApic, ApicError> {
        if id.0 == crate::icr::BROADCAST_DEST {
            return Err(ApicError::ReservedApicId { id: id.0 });
        }
        config.validate()?;
        let mut apic = LocalApic::new(id);
        apic.timer = ApicTimer::new(config.timer_clock, config.tsc);
        Ok(apic)
    }

    // ---- getters ----

    pub fn id(&self) -> ApicId {
        self.id
    }
    /// Interrupt request register: accepted, not yet acknowledged.
    pub fn irr(&self) -> &VectorSet {
        &self.irr
    }
    /// In-service register: acknowledged, not yet EOI'd.
    pub fn isr(&self) -> &VectorSet {
        &self.isr
    }
    /// Trigger mode register: set for vectors accepted as level-triggered.
    pub fn tmr(&self) -> &VectorSet {
        &self.tmr
    }
    pub fn tpr(&self) -> u8 {
        self.tpr
    }
    pub fn svr(&self) -> u32 {
        self.svr
    }
    /// The x2APIC logical ID (LDR), derived from the ID in cluster mode.
    pub fn ldr(&self) -> u32 {
        crate::icr::logical_id(self.id)
    }
    /// The LVT entry of a local source.
    pub fn lvt(&self, source: LvtSource) -> u32 {
        self.lvt[source.index()]
    }
    /// The timer registers.
    pub fn timer(&self) -> &ApicTimer {
        &self.timer
    }
    /// Whether the APIC is in the wait-for-SIPI state after an INIT.
    pub fn waiting_for_sipi(&self) -> bool {
        self.wait_for_sipi
    }
    /// SVR bit 8.
    pub fn software_enabled(&self) -> bool {
        self.svr & SVR_APIC_ENABLE != 0
    }
    /// The spurious-interrupt vector (`SVR[7:0]`): what the core receives when it
    /// acknowledges and nothing is deliverable any more (SDM 11.9). The engine uses it
    /// when [`acknowledge`](Self::acknowledge) returns `None` after a signalled INTR.
    pub fn spurious_vector(&self) -> Vector {
        Vector((self.svr & SVR_VECTOR_MASK) as u8)
    }

    /// Processor priority (SDM 11.8.3.1): `TPR` if `TPR[7:4] >= ISRV[7:4]`, else
    /// `ISRV[7:4] << 4`, ISRV being the highest in-service vector (0 if none).
    ///
    /// When the classes are equal the SDM leaves `PPR[3:0]` model-specific (`TPR[3:0]` or
    /// 0); we return `TPR[3:0]`. Only `PPR[7:4]` takes part in acceptance, so the choice
    /// only shows in PPR reads.
    pub fn ppr(&self) -> u8 {
        let isrv = self.isr.highest().map_or(0, |v| v.0);
        if self.tpr >> 4 >= isrv >> 4 {
            self.tpr
        } else {
            isrv & 0xf0
        }
    }

    // ---- inputs ----

    /// A fixed (or lowest-priority, once arbitrated) interrupt message arrives.
    ///
    /// - Vector 0-15: ESR "receive illegal vector" (bit 6) is logged and the message is
    ///   not accepted (SDM 11.5.3).
    /// - Software-disabled (SVR bit 8 clear): not accepted, see
    ///   [`RejectReason::SoftwareDisabled`]. The illegal-vector check comes first.
    /// - Otherwise the IRR bit is set and the TMR bit is set for level, cleared for
    ///   edge (SDM 11.8.4: "upon acceptance of an interrupt into the IRR, the
    ///   corresponding TMR bit is cleared for edge-triggered interrupts and set for
    ///   level-triggered interrupts"). This applies on a merge too, so an edge message
    ///   on a vector whose level interrupt is in service clears TMR and that
    ///   interrupt's EOI will not be broadcast: the hardware behaviour, kept on purpose.
    pub fn accept(&mut self, vector: Vector, level_triggered: bool) -> AcceptOutcome {
        if vector.0 < FIRST_LEGAL_VECTOR {
            self.log_error(ESR_RECEIVE_ILLEGAL_VECTOR);
            return AcceptOutcome::Rejected(RejectReason::IllegalVector);
        }
        if !self.software_enabled() {
            return AcceptOutcome::Rejected(RejectReason::SoftwareDisabled);
        }
        self.set_irr(vector, level_triggered)
    }

    /// Delivers a message of any delivery mode (SDM 11.6.1): fixed and lowest-priority
    /// go through [`accept`](Self::accept); NMI and SMI are passed to the core (they
    /// are honoured even when software-disabled, 11.4.7.2); INIT resets the APIC and
    /// enters wait-for-SIPI; SIPI is accepted only in wait-for-SIPI.
    pub fn receive(
        &mut self,
        mode: DeliveryMode,
        vector: Vector,
        trigger: TriggerMode,
    ) -> DeliveryOutcome {
        match mode {
            DeliveryMode::Fixed | DeliveryMode::LowestPriority => {
                DeliveryOutcome::Fixed(self.accept(vector, trigger == TriggerMode::Level))
            }
            DeliveryMode::Nmi => DeliveryOutcome::Nmi,
            DeliveryMode::Smi => DeliveryOutcome::Smi,
            DeliveryMode::Init => {
                self.init_reset();
                DeliveryOutcome::Init
            }
            DeliveryMode::StartUp => {
                if self.wait_for_sipi {
                    self.wait_for_sipi = false;
                    DeliveryOutcome::StartUp { vector }
                } else {
                    DeliveryOutcome::Ignored(IgnoreReason::SipiNotWaiting)
                }
            }
            DeliveryMode::ExtInt => DeliveryOutcome::Ignored(IgnoreReason::ExtIntNotModelled),
        }
    }

    /// Delivers an IPI that [`ApicTopology::resolve`](crate::ApicTopology::resolve)
    /// routed here.
    pub fn receive_ipi(&mut self, msg: &IpiMessage) -> DeliveryOutcome {
        self.receive(msg.mode, msg.vector, msg.trigger)
    }

    /// A local interrupt source fires (a PMI, a thermal event, a LINT pin, a CMCI):
    /// delivered per its LVT entry, or ignored when masked. LINT entries use their
    /// trigger bit; the others are edge.
    pub fn raise_local(&mut self, source: LvtSource) -> DeliveryOutcome {
        let lvt = self.lvt[source.index()];
        if lvt & LVT_MASKED != 0 {
            return DeliveryOutcome::Ignored(IgnoreReason::Masked);
        }
        let vector = Vector((lvt & LVT_VECTOR_MASK) as u8);
        let mode = match source {
            LvtSource::Error => Some(DeliveryMode::Fixed),
            _ => DeliveryMode::from_bits((lvt >> LVT_DELIVERY_MODE_SHIFT) as u8),
        };
        let level =
            matches!(source, LvtSource::Lint0 | LvtSource::Lint1) && lvt & LVT_TRIGGER_LEVEL != 0;
        match mode {
            Some(DeliveryMode::StartUp | DeliveryMode::LowestPriority) | None => {
                DeliveryOutcome::Ignored(IgnoreReason::ReservedDeliveryMode)
            }
            Some(m) => self.receive(
                m,
                vector,
                if level {
                    TriggerMode::Level
                } else {
                    TriggerMode::Edge
                },
            ),
        }
    }

    /// Sets TPR (bits 7:0 of the TPR register). Raising it can make a pending vector
    /// non-deliverable; lowering it can make one deliverable: the engine re-checks
    /// [`deliverable`](Self::deliverable) after calling this.
    pub fn set_tpr(&mut self, tpr: u8) {
        self.tpr = tpr;
    }

    // ---- CPU side ----

    /// The vector the APIC presents to the core: the highest IRR vector, if its class
    /// exceeds PPR's class (SDM 11.8.4: only the highest-priority pending interrupt is
    /// considered). Whether the core takes it (RFLAGS.IF, interrupt shadow) is the
    /// engine's business. IRR bits held while software-disabled stay deliverable (SDM
    /// 11.4.7.2: they "require masking or handling by the CPU").
    pub fn deliverable(&self) -> Option<Vector> {
        let v = self.irr.highest()?;
        (v.class() > self.ppr() >> 4).then_some(v)
    }

    /// The core acknowledges the interrupt (INTA): the deliverable vector moves from
    /// IRR to ISR and is returned. `None` when nothing is deliverable; if the core had
    /// been signalled, the engine delivers [`spurious_vector`](Self::spurious_vector)
    /// instead (no ISR bit, no EOI expected).
    pub fn acknowledge(&mut self) -> Option<Vector> {
        let v = self.deliverable()?;
        self.irr.remove(v);
        self.isr.insert(v);
        Some(v)
    }

    /// An EOI write: clears the highest ISR bit (SDM 11.8.5). If that vector's TMR bit
    /// is set and SVR bit 12 is clear, the EOI is broadcast to the IOAPICs. An EOI with
    /// nothing in service completes nothing and is not an error.
    pub fn eoi(&mut self) -> EoiOutcome {
        let Some(v) = self.isr.highest() else {
            return EoiOutcome::default();
        };
        self.isr.remove(v);
        let level = self.tmr.contains(v);
        let suppressed = self.svr & SVR_SUPPRESS_EOI_BROADCAST != 0;
        EoiOutcome {
            completed: Some(v),
            broadcast: (level && !suppressed).then_some(v),
        }
    }

    // ---- internals shared with the register and timer code ----

    /// Sets IRR (and TMR per trigger) for a vector already checked legal.
    pub(crate) fn set_irr(&mut self, vector: Vector, level_triggered: bool) -> AcceptOutcome {
        if level_triggered {
            self.tmr.insert(vector);
        } else {
            self.tmr.remove(vector);
        }
        if self.irr.insert(vector) {
            AcceptOutcome::AlreadyPending
        } else {
            AcceptOutcome::Accepted
        }
    }

    /// Logs an error in the not-yet-visible ESR accumulator (SDM 11.5.3) and raises
    /// the error interrupt through LVT Error if it is unmasked; returns its vector if
    /// that set an IRR bit. An error LVT with an illegal vector logs "receive illegal
    /// vector" and stops there.
    pub(crate) fn log_error(&mut self, bits: u32) -> Option<Vector> {
        self.esr_pending |= bits;
        let lvt = self.lvt[LvtSource::Error.index()];
        if lvt & LVT_MASKED != 0 || !self.software_enabled() {
            return None;
        }
        let v = Vector((lvt & LVT_VECTOR_MASK) as u8);
        if v.0 < FIRST_LEGAL_VECTOR {
            self.esr_pending |= ESR_RECEIVE_ILLEGAL_VECTOR;
            return None;
        }
        let _ = self.set_irr(v, false);
        Some(v)
    }

    /// The INIT reset (SDM 11.4.7.3, and 11.12.5.1 for x2APIC): as after power-up
    /// except that the ID, the clocks and x2APIC mode are kept. Enters wait-for-SIPI.
    pub(crate) fn init_reset(&mut self) {
        let mut fresh = LocalApic::new(self.id);
        fresh.timer = ApicTimer::new(self.timer.clock(), self.timer.tsc_clock());
        fresh.svr = 0xff;
        fresh.wait_for_sipi = true;
        *self = fresh;
    }

    /// When the timer next raises its interrupt (see [`ApicTimer::next_fire`]); the
    /// engine schedules a call to [`timer_fire`](Self::timer_fire) then.
    pub fn timer_next_fire(&self) -> Option<SimTime> {
        self.timer.next_fire()
    }

    /// The engine's timer event: if an expiry is due, the timer re-arms (periodic) or
    /// disarms, and its vector is put into IRR (edge) and returned. `None` for a stale
    /// event, a masked timer, or an illegal LVT vector (ESR bit 6 is then logged).
    pub fn timer_fire(&mut self, now: SimTime) -> Option<Vector> {
        let v = self.timer.fire(now)?;
        match self.accept(v, false) {
            AcceptOutcome::Accepted | AcceptOutcome::AlreadyPending => Some(v),
            AcceptOutcome::Rejected(_) => None,
        }
    }

    /// Current-count register at `now`.
    pub fn timer_current_count(&self, now: SimTime) -> u32 {
        self.timer.current_count(now)
    }

    /// ESR as a read returns it (the errors latched at the last ESR write).
    pub fn esr(&self) -> u32 {
        self.esr_latched
    }

    /// An ESR write: latches the errors detected since the previous write, for reads,
    /// and clears the accumulator (SDM 11.5.3: write before read).
    pub fn latch_esr(&mut self) {
        self.esr_latched = self.esr_pending;
        self.esr_pending = 0;
    }

    /// Sets SVR as written, after validation by the caller.
    pub(crate) fn set_svr_raw(&mut self, svr: u32) {
        self.svr = svr;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sim_core::Freq;

    fn apic() -> LocalApic {
        LocalApic::new(ApicId(3))
    }

    /// Puts `v` in service by accepting and acknowledging it.
    fn in_service(a: &mut LocalApic, v: u8) {
        assert_eq!(a.accept(Vector(v), false), AcceptOutcome::Accepted);
        assert_eq!(a.acknowledge(), Some(Vector(v)));
    }

    #[test]
    fn new_apic_is_enabled_with_tpr_zero() {
        let a = apic();
        assert_eq!(a.id(), ApicId(3));
        assert!(a.software_enabled());
        assert_eq!(a.tpr(), 0);
        assert_eq!(a.ppr(), 0);
        assert!(a.irr().is_empty() && a.isr().is_empty() && a.tmr().is_empty());
        assert_eq!(a.deliverable(), None);
        assert_eq!(a.spurious_vector(), Vector(0xff));
    }

    #[test]
    fn ppr_follows_tpr_or_isrv_class() {
        // (tpr, in-service vector, expected ppr)
        let cases: [(u8, Option<u8>, u8); 7] = [
            (0x00, None, 0x00),
            (0x45, None, 0x45),
            (0x00, Some(0x31), 0x30),
            (0x20, Some(0x31), 0x30), // TPR class lower: ISRV class
            (0x3a, Some(0x31), 0x3a), // equal class: TPR (model-specific choice)
            (0x51, Some(0x31), 0x51), // TPR class higher: TPR
            (0x10, Some(0xeb), 0xe0),
        ];
        for (tpr, isv, want) in cases {
            let mut a = apic();
            if let Some(v) = isv {
                in_service(&mut a, v);
            }
            a.set_tpr(tpr);
            assert_eq!(a.ppr(), want, "tpr={tpr:#x} isr={isv:?}");
        }
    }

    #[test]
    fn ppr_uses_highest_in_service_vector() {
        let mut a = apic();
        in_service(&mut a, 0x41);
        in_service(&mut a, 0x92); // higher class preempts
        assert_eq!(a.ppr(), 0x90);
        let _ = a.eoi();
        assert_eq!(a.ppr(), 0x40);
    }

    #[test]
    fn same_class_waits_higher_class_is_deliverable() {
        let mut a = apic();
        in_service(&mut a, 0x51);
        assert_eq!(a.accept(Vector(0x5e), false), AcceptOutcome::Accepted);
        assert_eq!(a.deliverable(), None, "same class as ISRV must wait");
        assert_eq!(a.acknowledge(), None);
        assert_eq!(a.accept(Vector(0x60), false), AcceptOutcome::Accepted);
        assert_eq!(a.deliverable(), Some(Vector(0x60)));
        assert_eq!(a.acknowledge(), Some(Vector(0x60)));
        // 0x5e still waits behind 0x60 and 0x51; after both EOIs it is deliverable.
        assert_eq!(a.deliverable(), None);
        assert_eq!(a.eoi().completed, Some(Vector(0x60)));
        assert_eq!(a.deliverable(), None);
        assert_eq!(a.eoi().completed, Some(Vector(0x51)));
        assert_eq!(a.deliverable(), Some(Vector(0x5e)));
    }

    #[test]
    fn tpr_blocks_classes_at_or_below_it() {
        let mut a = apic();
        let _ = a.accept(Vector(0x45), false);
        a.set_tpr(0x40);
        assert_eq!(a.deliverable(), None);
        a.set_tpr(0x3f);
        assert_eq!(a.deliverable(), Some(Vector(0x45)));
    }

    #[test]
    fn only_highest_pending_is_considered() {
        let mut a = apic();
        let _ = a.accept(Vector(0x30), false);
        let _ = a.accept(Vector(0x80), false);
        assert_eq!(a.acknowledge(), Some(Vector(0x80)));
        // 0x30 pending, 0x80 in service: 0x30 must wait for the EOI.
        assert_eq!(a.deliverable(), None);
        let _ = a.eoi();
        assert_eq!(a.acknowledge(), Some(Vector(0x30)));
        assert!(a.irr().is_empty());
    }

    #[test]
    fn eoi_clears_highest_isr_and_broadcasts_level() {
        let mut a = apic();
        let _ = a.accept(Vector(0x40), true);
        assert!(a.tmr().contains(Vector(0x40)));
        assert_eq!(a.acknowledge(), Some(Vector(0x40)));
        in_service(&mut a, 0x70);
        let first = a.eoi();
        assert_eq!(
            first,
            EoiOutcome {
                completed: Some(Vector(0x70)),
                broadcast: None
            }
        );
        let second = a.eoi();
        assert_eq!(second.completed, Some(Vector(0x40)));
        assert_eq!(second.broadcast, Some(Vector(0x40)));
        assert_eq!(a.eoi(), EoiOutcome::default(), "nothing in service");
    }

    #[test]
    fn suppress_eoi_broadcast_bit_stops_broadcast() {
        let mut a = apic();
        a.set_svr_raw(SVR_APIC_ENABLE | SVR_SUPPRESS_EOI_BROADCAST | 0xff);
        let _ = a.accept(Vector(0x40), true);
        let _ = a.acknowledge();
        assert_eq!(
            a.eoi(),
            EoiOutcome {
                completed: Some(Vector(0x40)),
                broadcast: None
            }
        );
    }

    #[test]
    fn illegal_vector_sets_esr_and_is_rejected() {
        let mut a = apic();
        for v in [0u8, 7, 15] {
            assert_eq!(
                a.accept(Vector(v), false),
                AcceptOutcome::Rejected(RejectReason::IllegalVector)
            );
        }
        assert!(a.irr().is_empty());
        // Reserved-but-legal vectors 16-31 are accepted by the APIC.
        assert_eq!(a.accept(Vector(16), false), AcceptOutcome::Accepted);
        // ESR: not visible until written (write-then-read).
        assert_eq!(a.esr(), 0);
        a.latch_esr();
        assert_eq!(a.esr(), 0x40, "ESR bit 6 (SDM 11.5.3)");
        a.latch_esr();
        assert_eq!(a.esr(), 0);
    }

    #[test]
    fn second_request_merges_into_pending() {
        let mut a = apic();
        assert_eq!(a.accept(Vector(0x50), false), AcceptOutcome::Accepted);
        assert_eq!(a.accept(Vector(0x50), false), AcceptOutcome::AlreadyPending);
        assert_eq!(a.irr().count(), 1);
        assert_eq!(a.acknowledge(), Some(Vector(0x50)));
        // In service but not pending: a new one is Accepted again.
        assert_eq!(a.accept(Vector(0x50), false), AcceptOutcome::Accepted);
    }

    #[test]
    fn edge_accept_clears_tmr() {
        let mut a = apic();
        let _ = a.accept(Vector(0x50), true);
        assert_eq!(a.accept(Vector(0x50), false), AcceptOutcome::AlreadyPending);
        assert!(!a.tmr().contains(Vector(0x50)));
    }

    #[test]
    fn software_disabled_rejects_fixed_but_holds_pending() {
        let mut a = apic();
        let _ = a.accept(Vector(0x50), false);
        a.set_svr_raw(0xff);
        assert_eq!(
            a.accept(Vector(0x60), false),
            AcceptOutcome::Rejected(RejectReason::SoftwareDisabled)
        );
        assert_eq!(a.deliverable(), Some(Vector(0x50)), "held IRR bit stays");
    }

    #[test]
    fn nmi_ignores_vector_and_works_while_disabled() {
        let mut a = apic();
        a.set_svr_raw(0xff);
        assert_eq!(
            a.receive(DeliveryMode::Nmi, Vector(0), TriggerMode::Edge),
            DeliveryOutcome::Nmi
        );
        assert_eq!(
            a.receive(DeliveryMode::Smi, Vector(0), TriggerMode::Edge),
            DeliveryOutcome::Smi
        );
        assert!(a.irr().is_empty());
        assert_eq!(a.esr_pending, 0, "vector 0 is not an error for NMI");
    }

    #[test]
    fn init_resets_and_only_then_sipi_starts() {
        let mut a = apic();
        in_service(&mut a, 0x40);
        let _ = a.accept(Vector(0x50), true);
        a.set_tpr(0x20);
        assert_eq!(
            a.receive(DeliveryMode::StartUp, Vector(0x9a), TriggerMode::Edge),
            DeliveryOutcome::Ignored(IgnoreReason::SipiNotWaiting)
        );
        assert_eq!(
            a.receive(DeliveryMode::Init, Vector(0), TriggerMode::Edge),
            DeliveryOutcome::Init
        );
        assert!(a.waiting_for_sipi());
        assert!(a.irr().is_empty() && a.isr().is_empty() && a.tmr().is_empty());
        assert_eq!((a.tpr(), a.svr(), a.id()), (0, 0xff, ApicId(3)));
        assert!(!a.software_enabled());
        assert!(LvtSource::ALL.iter().all(|&s| a.lvt(s) & LVT_MASKED != 0));
        assert_eq!(
            a.receive(DeliveryMode::StartUp, Vector(0x9a), TriggerMode::Edge),
            DeliveryOutcome::StartUp {
                vector: Vector(0x9a)
            }
        );
        assert!(!a.waiting_for_sipi());
        assert_eq!(
            a.receive(DeliveryMode::StartUp, Vector(0x9a), TriggerMode::Edge),
            DeliveryOutcome::Ignored(IgnoreReason::SipiNotWaiting)
        );
    }

    #[test]
    fn fixed_and_lowest_priority_messages_go_to_irr() {
        let mut a = apic();
        assert_eq!(
            a.receive(
                DeliveryMode::LowestPriority,
                Vector(0x61),
                TriggerMode::Level
            ),
            DeliveryOutcome::Fixed(AcceptOutcome::Accepted)
        );
        assert!(a.tmr().contains(Vector(0x61)));
        let ipi = IpiMessage::fixed(ApicId(0), ApicId(3), Vector(0x62));
        assert_eq!(
            a.receive_ipi(&ipi),
            DeliveryOutcome::Fixed(AcceptOutcome::Accepted)
        );
        assert_eq!(
            a.receive(DeliveryMode::ExtInt, Vector(0x20), TriggerMode::Edge),
            DeliveryOutcome::Ignored(IgnoreReason::ExtIntNotModelled)
        );
    }

    #[test]
    fn local_sources_follow_their_lvt() {
        let mut a = apic();
        assert_eq!(
            a.raise_local(LvtSource::Pmi),
            DeliveryOutcome::Ignored(IgnoreReason::Masked)
        );
        a.lvt[LvtSource::Pmi.index()] = 0xf0;
        assert_eq!(
            a.raise_local(LvtSource::Pmi),
            DeliveryOutcome::Fixed(AcceptOutcome::Accepted)
        );
        a.lvt[LvtSource::Lint1.index()] = 4 << LVT_DELIVERY_MODE_SHIFT;
        assert_eq!(a.raise_local(LvtSource::Lint1), DeliveryOutcome::Nmi);
        a.lvt[LvtSource::Lint0.index()] = 0x70 | LVT_TRIGGER_LEVEL;
        assert_eq!(
            a.raise_local(LvtSource::Lint0),
            DeliveryOutcome::Fixed(AcceptOutcome::Accepted)
        );
        assert!(a.tmr().contains(Vector(0x70)));
        a.lvt[LvtSource::Thermal.index()] = 3 << LVT_DELIVERY_MODE_SHIFT;
        assert_eq!(
            a.raise_local(LvtSource::Thermal),
            DeliveryOutcome::Ignored(IgnoreReason::ReservedDeliveryMode)
        );
        // LINT1 without the trigger bit is edge: its vector stays out of the TMR.
        a.lvt[LvtSource::Lint1.index()] = 0x71;
        assert_eq!(
            a.raise_local(LvtSource::Lint1),
            DeliveryOutcome::Fixed(AcceptOutcome::Accepted)
        );
        assert!(!a.tmr().contains(Vector(0x71)));
    }

    #[test]
    fn each_local_source_has_its_own_lvt_entry() {
        let mut a = apic();
        for (k, source) in LvtSource::ALL.into_iter().enumerate() {
            a.lvt[source.index()] = 0x40 + k as u32;
        }
        for (k, source) in LvtSource::ALL.into_iter().enumerate() {
            assert_eq!(a.lvt(source), 0x40 + k as u32, "{source:?}");
        }
    }

    #[test]
    fn spurious_vector_is_svr_bits_7_0() {
        let mut a = apic();
        a.svr = 0x13ff;
        assert_eq!(a.spurious_vector(), Vector(0xff));
        a.svr = 0x1100 | 0x27;
        assert_eq!(a.spurious_vector(), Vector(0x27));
    }

    #[test]
    fn with_config_rejects_reserved_id_and_zero_clock() {
        assert_eq!(
            LocalApic::with_config(ApicId(u32::MAX), LapicConfig::default()).unwrap_err(),
            ApicError::ReservedApicId { id: u32::MAX }
        );
        let hz_for_mhz = LapicConfig {
            tsc: Freq::from_mhz(2_000_000).unwrap(),
            ..LapicConfig::default()
        };
        assert!(matches!(
            LocalApic::with_config(ApicId(1), hz_for_mhz),
            Err(ApicError::InvalidConfig { field: "tsc", .. })
        ));
        assert!(LocalApic::with_config(ApicId(1), LapicConfig::default()).is_ok());
    }

    /// Reference model: a plain list of pending and in-service vectors, with the SDM
    /// rules written the obvious way. The real APIC must agree after every step.
    mod reference {
        use super::*;
        use proptest::prelude::*;

        #[derive(Clone, Debug)]
        enum Op {
            Accept(u8, bool),
            Ack,
            Eoi,
            Tpr(u8),
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                4 => (any::<u8>(), any::<bool>()).prop_map(|(v, l)| Op::Accept(v, l)),
                2 => Just(Op::Ack),
                2 => Just(Op::Eoi),
                1 => any::<u8>().prop_map(Op::Tpr),
            ]
        }

        proptest! {
            #[test]
            fn apic_matches_reference(ops in proptest::collection::vec(op(), 1..200)) {
                let mut a = LocalApic::new(ApicId(0));
                let mut pending: Vec<u8> = Vec::new();
                let mut in_service: Vec<u8> = Vec::new();
                let mut level: Vec<u8> = Vec::new();
                let mut tpr = 0u8;
                let (mut offered, mut accepted, mut merged, mut rejected) = (0u32, 0u32, 0u32, 0u32);
                let mut acks = 0u32;
                for op in ops {
                    match op {
                        Op::Accept(v, l) => {
                            offered += 1;
                            let out = a.accept(Vector(v), l);
                            let want = if v < 16 {
                                AcceptOutcome::Rejected(RejectReason::IllegalVector)
                            } else if pending.contains(&v) {
                                AcceptOutcome::AlreadyPending
                            } else {
                                AcceptOutcome::Accepted
                            };
                            prop_assert_eq!(out, want);
                            match out {
                                AcceptOutcome::Accepted => { accepted += 1; pending.push(v); }
                                AcceptOutcome::AlreadyPending => merged += 1,
                                AcceptOutcome::Rejected(_) => rejected += 1,
                            }
                            if v >= 16 {
                                level.retain(|&x| x != v);
                                if l { level.push(v); }
                            }
                        }
                        Op::Ack => {
                            let isrv = in_service.iter().copied().max().unwrap_or(0);
                            let ppr_class = (tpr >> 4).max(isrv >> 4);
                            let want = pending.iter().copied().max().filter(|&v| v >> 4 > ppr_class);
                            prop_assert_eq!(a.acknowledge(), want.map(Vector));
                            if let Some(v) = want {
                                acks += 1;
                                pending.retain(|&x| x != v);
                                in_service.push(v);
                            }
                        }
                        Op::Eoi => {
                            let top = in_service.iter().copied().max();
                            let out = a.eoi();
                            prop_assert_eq!(out.completed, top.map(Vector));
                            let lvl = top.filter(|v| level.contains(v));
                            prop_assert_eq!(out.broadcast, lvl.map(Vector));
                            in_service.retain(|&x| Some(x) != top);
                        }
                        Op::Tpr(t) => { tpr = t; a.set_tpr(t); }
                    }
                    // Invariants after every step.
                    prop_assert_eq!(a.irr().count() as usize, pending.len());
                    prop_assert_eq!(a.isr().count() as usize, in_service.len());
                    let isrv = in_service.iter().copied().max().unwrap_or(0);
                    let want_ppr = if tpr >> 4 >= isrv >> 4 { tpr } else { isrv & 0xf0 };
                    prop_assert_eq!(a.ppr(), want_ppr);
                    // Conservation, against the APIC's own state: every vector
                    // accepted and not yet acknowledged is in IRR, whatever merged
                    // with it or was refused.
                    prop_assert_eq!(offered, accepted + merged + rejected);
                    let acked_or_pending = a.irr().count() + acks;
                    prop_assert_eq!(accepted, acked_or_pending);
                }
            }
        }
    }
}
