//! Local APIC in x2APIC mode: interrupt acceptance, priority and EOI.
//!
//! Intel SDM Vol. 3A chapter 11: 11.8.3 (task and processor priority), 11.8.4
//! (interrupt acceptance for fixed interrupts), 11.8.5 (EOI), 11.5.3 (error handling),
//! 11.4.7.2 (software-disabled state), 11.9 (spurious interrupt).
//!
//! Modelled: IRR/ISR/TMR (one bit per vector), TPR, PPR, SVR software enable and
//! suppress-EOI-broadcast, ESR (receive illegal vector), acknowledge (INTA) and EOI with
//! the level-triggered EOI broadcast returned as a value.
//!
//! Not modelled: xAPIC (MMIO) mode and the mode transitions of IA32_APIC_BASE; the
//! hardware-disabled state; ExtINT/8259 pass-through; the "interrupt slot" limit of old
//! P6 parts (an IRR holds one pending interrupt per vector and a second one merges);
//! the model-specific PPR[3:0] choice when TPR and ISRV have the same class (we take
//! TPR[3:0], see [`LocalApic::ppr`]).

use sim_core::{ApicId, Vector, VectorSet};

/// SVR bit 8: APIC software enable (SDM 11.9, Figure 11-23).
pub const SVR_APIC_ENABLE: u32 = 1 << 8;
/// SVR bit 9: focus processor checking disabled (not used by x2APIC parts; kept for
/// reads that round-trip).
pub const SVR_FOCUS_DISABLE: u32 = 1 << 9;
/// SVR bit 12: suppress the EOI broadcast for level-triggered vectors (directed EOI).
pub const SVR_SUPPRESS_EOI_BROADCAST: u32 = 1 << 12;
/// SVR bits 7:0: the spurious vector.
pub const SVR_VECTOR_MASK: u32 = 0xff;

/// ESR bit 2: send accept error (SDM 11.5.3, Figure 11-9).
pub const ESR_SEND_ACCEPT: u32 = 1 << 2;
/// ESR bit 3: receive accept error.
pub const ESR_RECEIVE_ACCEPT: u32 = 1 << 3;
/// ESR bit 4: redirectable (lowest-priority) IPI not supported.
pub const ESR_REDIRECTABLE_IPI: u32 = 1 << 4;
/// ESR bit 5: send illegal vector (an ICR or SELF_IPI write carried a vector 0-15).
pub const ESR_SEND_ILLEGAL_VECTOR: u32 = 1 << 5;
/// ESR bit 6: receive illegal vector (a message or local source carried a vector 0-15).
pub const ESR_RECEIVE_ILLEGAL_VECTOR: u32 = 1 << 6;
/// ESR bit 7: illegal register address (xAPIC only; x2APIC raises #GP instead).
pub const ESR_ILLEGAL_REGISTER: u32 = 1 << 7;

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

/// One local APIC in x2APIC mode.
///
/// Methods, sorted as in quinn-proto:
/// - getters: [`id`](Self::id), [`irr`](Self::irr), [`isr`](Self::isr),
///   [`tmr`](Self::tmr), [`tpr`](Self::tpr), [`ppr`](Self::ppr), [`svr`](Self::svr),
///   [`software_enabled`](Self::software_enabled);
/// - inputs: [`accept`](Self::accept) (an interrupt message arrives),
///   [`set_tpr`](Self::set_tpr);
/// - CPU side: [`deliverable`](Self::deliverable) (what the APIC presents to the core),
///   [`acknowledge`](Self::acknowledge) (INTA), [`eoi`](Self::eoi).
#[derive(Clone, Debug)]
pub struct LocalApic {
    id: ApicId,
    irr: VectorSet,
    isr: VectorSet,
    tmr: VectorSet,
    tpr: u8,
    svr: u32,
    /// Errors detected since the last ESR write (not yet visible to reads).
    esr_pending: u32,
    /// The value ESR reads return: what `esr_pending` held at the last ESR write.
    esr_latched: u32,
}

impl LocalApic {
    /// A local APIC in x2APIC mode, software-enabled (SVR = 0x1FF: bit 8 set, spurious
    /// vector 0xFF), TPR 0, IRR/ISR/TMR empty.
    pub fn new(id: ApicId) -> LocalApic {
        LocalApic {
            id,
            irr: VectorSet::EMPTY,
            isr: VectorSet::EMPTY,
            tmr: VectorSet::EMPTY,
            tpr: 0,
            svr: SVR_APIC_ENABLE | 0xff,
            esr_pending: 0,
            esr_latched: 0,
        }
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
    /// SVR bit 8.
    pub fn software_enabled(&self) -> bool {
        self.svr & SVR_APIC_ENABLE != 0
    }
    /// The spurious-interrupt vector (SVR[7:0]): what the core receives when it
    /// acknowledges and nothing is deliverable any more (SDM 11.9). The engine uses it
    /// when [`acknowledge`](Self::acknowledge) returns `None` after a signalled INTR.
    pub fn spurious_vector(&self) -> Vector {
        Vector((self.svr & SVR_VECTOR_MASK) as u8)
    }

    /// Processor priority (SDM 11.8.3.1): `TPR` if `TPR[7:4] >= ISRV[7:4]`, else
    /// `ISRV[7:4] << 4`, ISRV being the highest in-service vector (0 if none).
    ///
    /// When the classes are equal the SDM leaves PPR[3:0] model-specific (TPR[3:0] or
    /// 0); we return TPR[3:0]. Only PPR[7:4] takes part in acceptance, so the choice
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

    /// Logs an error in the not-yet-visible ESR accumulator (SDM 11.5.3).
    pub(crate) fn log_error(&mut self, bits: u32) {
        self.esr_pending |= bits;
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
        assert_eq!(a.esr(), ESR_RECEIVE_ILLEGAL_VECTOR);
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
}
