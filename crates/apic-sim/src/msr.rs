//! The x2APIC register interface: RDMSR/WRMSR to MSRs 0x800-0x8FF (SDM Vol. 3A
//! 11.12.1, Table 11-6) and IA32_TSC_DEADLINE (0x6E0, 11.5.4.1).
//!
//! Guest errors are modelled, never returned as `Err`: an access to a register that
//! does not exist, a WRMSR to a read-only register, an RDMSR of a write-only one, and a
//! non-zero write to reserved bits raise #GP (11.12.1.2, 11.12.1.3), which comes back
//! as [`ApicEffect::GeneralProtection`] or [`MsrRead::GeneralProtection`] and leaves
//! the APIC unchanged.
//!
//! Modelled choices:
//! - The upper 32 bits of every x2APIC MSR except ICR are reserved (a non-zero write
//!   raises #GP).
//! - Read-only bits inside a writable register (LVT delivery status and Remote IRR) are
//!   ignored on write, not checked: software writes back what it read.
//! - LVT delivery-mode values are stored as written; a reserved one makes the local
//!   source ignored when it fires ([`IgnoreReason::ReservedDeliveryMode`](crate::IgnoreReason)).
//! - The reserved timer mode 11 is treated as a reserved-bit write (#GP). Assumption:
//!   the SDM only says "reserved".
//! - While software-disabled, LVT writes keep the mask bit set (11.4.7.2).
//!
//! Not modelled: the IA32_APIC_BASE MSR and mode switches; the x2APIC "virtualized"
//! forms (APICv); reads of ICR bit 12 (returned as 0, the SDM says undefined).

use crate::icr::{ipi_from_icr, Icr, IpiDropReason, IpiMessage, ICR_DELIVERY_STATUS};
use crate::lapic::{
    AcceptOutcome, EoiOutcome, LocalApic, LvtSource, ESR_REDIRECTABLE_IPI, ESR_SEND_ILLEGAL_VECTOR,
    FIRST_LEGAL_VECTOR, SVR_APIC_ENABLE,
};
use crate::timer::{TimerMode, DCR_VALID_BITS, LVT_MASKED};
use sim_core::{SimTime, Vector};

pub const MSR_ID: u32 = 0x802;
pub const MSR_VERSION: u32 = 0x803;
pub const MSR_TPR: u32 = 0x808;
pub const MSR_PPR: u32 = 0x80a;
pub const MSR_EOI: u32 = 0x80b;
pub const MSR_LDR: u32 = 0x80d;
pub const MSR_SVR: u32 = 0x80f;
/// ISR bits 31:0 (vectors 0-31); ISR word i is at `MSR_ISR0 + i`, i in 0..8.
pub const MSR_ISR0: u32 = 0x810;
pub const MSR_TMR0: u32 = 0x818;
pub const MSR_IRR0: u32 = 0x820;
pub const MSR_ESR: u32 = 0x828;
pub const MSR_LVT_CMCI: u32 = 0x82f;
pub const MSR_ICR: u32 = 0x830;
pub const MSR_LVT_TIMER: u32 = 0x832;
pub const MSR_LVT_THERMAL: u32 = 0x833;
pub const MSR_LVT_PMI: u32 = 0x834;
pub const MSR_LVT_LINT0: u32 = 0x835;
pub const MSR_LVT_LINT1: u32 = 0x836;
pub const MSR_LVT_ERROR: u32 = 0x837;
pub const MSR_TIMER_INITIAL: u32 = 0x838;
pub const MSR_TIMER_CURRENT: u32 = 0x839;
pub const MSR_TIMER_DIVIDE: u32 = 0x83e;
pub const MSR_SELF_IPI: u32 = 0x83f;
/// IA32_TSC_DEADLINE (outside the x2APIC range, but part of the APIC timer).
pub const MSR_TSC_DEADLINE: u32 = 0x6e0;

/// The version register: version 0x15 (an integrated APIC; the value recent Xeons
/// report, assumption), max LVT entry 6 (seven entries including CMCI) in bits 23:16,
/// and bit 24: EOI-broadcast suppression supported (SDM 11.4.8).
pub const APIC_VERSION: u32 = 0x0106_0015;

// Masks are written as literals (the fields they join are in each comment) and checked
// bit by bit against the SDM figures by the tests `lvt_fields_bit_by_bit`,
// `reserved_bits_fault` and `identification_registers`.

/// Writable bits of SVR: vector (7:0), APIC enable (8), focus disable (9), suppress EOI
/// broadcast (12).
const SVR_WRITABLE: u64 = 0x13ff;
/// Read-only LVT bits: delivery status (12) and Remote IRR (14).
const LVT_RO: u64 = 0x5000;
/// Writable bits per LVT kind (SDM Figure 11-8). Timer: vector, mask (16), timer mode
/// (18:17).
const LVT_TIMER_WRITABLE: u64 = 0x7_00ff;
/// CMCI, thermal, PMI: vector, delivery mode (10:8), mask.
const LVT_BASIC_WRITABLE: u64 = 0x1_07ff;
/// LINT0, LINT1: vector, delivery mode, polarity (13), trigger (15), mask.
const LVT_LINT_WRITABLE: u64 = 0x1_a7ff;
/// Error: vector, mask.
const LVT_ERROR_WRITABLE: u64 = 0x1_00ff;

/// Result of an RDMSR.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use]
pub enum MsrRead {
    Value(u64),
    /// #GP: no such register, or a write-only one.
    GeneralProtection {
        msr: u32,
    },
}

impl MsrRead {
    /// The value, or `None` on #GP.
    pub fn value(self) -> Option<u64> {
        match self {
            MsrRead::Value(v) => Some(v),
            MsrRead::GeneralProtection { .. } => None,
        }
    }
}

/// Something a WRMSR caused that the engine must act on or record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ApicEffect {
    /// #GP on the writing CPU; the APIC state is unchanged.
    GeneralProtection { msr: u32 },
    /// An ICR write sent this IPI: resolve it with
    /// [`ApicTopology::resolve`](crate::ApicTopology::resolve) and deliver it to each
    /// target with [`LocalApic::receive_ipi`] after the IPI latency.
    SendIpi(IpiMessage),
    /// A write that would send an IPI sent nothing; `value` is what was written.
    IpiNotSent {
        msr: u32,
        value: u64,
        reason: IpiDropReason,
    },
    /// A SELF_IPI write. Already in IRR when WRMSR completes (SDM 11.12.11), so the
    /// engine must not deliver it again; reported for accounting and traces.
    SelfIpi {
        vector: Vector,
        outcome: AcceptOutcome,
    },
    /// An EOI write and what it completed; broadcast the EOI to the IOAPICs if
    /// `broadcast` is set.
    Eoi(EoiOutcome),
    /// The timer's next expiry may have changed: reschedule it (None = not armed).
    TimerChanged { next_fire: Option<SimTime> },
    /// The write logged APIC errors (ESR bits); `interrupt` is the error vector if LVT
    /// Error raised one (it is already in IRR).
    ErrorLogged {
        esr_bits: u32,
        interrupt: Option<Vector>,
    },
}

/// Effects of one WRMSR: at most four, stored inline so register writes do not
/// allocate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[must_use]
pub struct ApicEffects {
    items: [Option<ApicEffect>; 4],
    len: u8,
}

impl ApicEffects {
    fn one(e: ApicEffect) -> ApicEffects {
        let mut s = ApicEffects::default();
        s.push(e);
        s
    }
    fn push(&mut self, e: ApicEffect) {
        assert!(
            (self.len as usize) < self.items.len(),
            "more effects than one WRMSR can cause"
        );
        self.items[self.len as usize] = Some(e);
        self.len += 1;
    }
    pub fn len(&self) -> usize {
        self.len as usize
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn iter(&self) -> impl Iterator<Item = &ApicEffect> + '_ {
        self.items[..self.len as usize].iter().flatten()
    }
    pub fn contains(&self, e: &ApicEffect) -> bool {
        self.iter().any(|x| x == e)
    }
    /// Whether the write raised #GP.
    pub fn faulted(&self) -> bool {
        self.iter()
            .any(|e| matches!(e, ApicEffect::GeneralProtection { .. }))
    }
    pub fn to_vec(&self) -> Vec<ApicEffect> {
        self.iter().copied().collect()
    }
}

impl<'a> IntoIterator for &'a ApicEffects {
    type Item = &'a ApicEffect;
    type IntoIter = std::iter::Flatten<std::slice::Iter<'a, Option<ApicEffect>>>;
    fn into_iter(self) -> Self::IntoIter {
        self.items[..self.len as usize].iter().flatten()
    }
}

fn lvt_source(msr: u32) -> Option<LvtSource> {
    Some(match msr {
        MSR_LVT_CMCI => LvtSource::Cmci,
        MSR_LVT_THERMAL => LvtSource::Thermal,
        MSR_LVT_PMI => LvtSource::Pmi,
        MSR_LVT_LINT0 => LvtSource::Lint0,
        MSR_LVT_LINT1 => LvtSource::Lint1,
        MSR_LVT_ERROR => LvtSource::Error,
        _ => return None,
    })
}

fn lvt_writable(source: LvtSource) -> u64 {
    match source {
        LvtSource::Cmci | LvtSource::Thermal | LvtSource::Pmi => LVT_BASIC_WRITABLE,
        LvtSource::Lint0 | LvtSource::Lint1 => LVT_LINT_WRITABLE,
        LvtSource::Error => LVT_ERROR_WRITABLE,
    }
}

/// 32 bits `i` (0..8) of a 256-bit vector map.
fn map_word(set: &sim_core::VectorSet, i: u32) -> u64 {
    (set.0[(i / 2) as usize] >> (32 * (i % 2))) & 0xffff_ffff
}

impl LocalApic {
    /// RDMSR at `now` (the time matters for the timer's current count).
    pub fn rdmsr(&self, now: SimTime, msr: u32) -> MsrRead {
        let v: u64 = match msr {
            MSR_ID => self.id.0 as u64,
            MSR_VERSION => APIC_VERSION as u64,
            MSR_TPR => self.tpr as u64,
            MSR_PPR => self.ppr() as u64,
            MSR_LDR => self.ldr() as u64,
            MSR_SVR => self.svr as u64,
            m @ MSR_ISR0..=0x817 => map_word(&self.isr, m - MSR_ISR0),
            m @ MSR_TMR0..=0x81f => map_word(&self.tmr, m - MSR_TMR0),
            m @ MSR_IRR0..=0x827 => map_word(&self.irr, m - MSR_IRR0),
            MSR_ESR => self.esr_latched as u64,
            MSR_ICR => self.icr,
            MSR_LVT_TIMER => self.timer.lvt() as u64,
            MSR_TIMER_INITIAL => self.timer.initial_count() as u64,
            MSR_TIMER_CURRENT => self.timer.current_count(now) as u64,
            MSR_TIMER_DIVIDE => self.timer.divide_config() as u64,
            MSR_TSC_DEADLINE => self.timer.tsc_deadline(),
            m => match lvt_source(m) {
                Some(src) => self.lvt[src.index()] as u64,
                // EOI and SELF_IPI are write-only; everything else does not exist.
                None => return MsrRead::GeneralProtection { msr },
            },
        };
        MsrRead::Value(v)
    }

    /// WRMSR at `now`. Returns what the engine must do; a #GP leaves state unchanged.
    pub fn wrmsr(&mut self, now: SimTime, msr: u32, value: u64) -> ApicEffects {
        let gp = ApicEffects::one(ApicEffect::GeneralProtection { msr });
        let low = value as u32;
        if msr != MSR_ICR && msr != MSR_TSC_DEADLINE && value >> 32 != 0 {
            return gp;
        }
        match msr {
            MSR_TPR => {
                if value & !0xff != 0 {
                    return gp;
                }
                self.set_tpr(low as u8);
                ApicEffects::default()
            }
            MSR_EOI => {
                if value != 0 {
                    return gp;
                }
                ApicEffects::one(ApicEffect::Eoi(self.eoi()))
            }
            MSR_SVR => {
                if value & !SVR_WRITABLE != 0 {
                    return gp;
                }
                self.write_svr(low)
            }
            MSR_ESR => {
                if value != 0 {
                    return gp;
                }
                self.latch_esr();
                ApicEffects::default()
            }
            MSR_ICR => {
                let icr = Icr(value & !ICR_DELIVERY_STATUS);
                if icr.reserved_bits() != 0 {
                    return gp;
                }
                self.icr = icr.0;
                self.send_icr(icr)
            }
            MSR_LVT_TIMER => {
                if value & !(LVT_TIMER_WRITABLE | LVT_RO) != 0 || TimerMode::from_lvt(low).is_none()
                {
                    return gp;
                }
                let mut v = low & LVT_TIMER_WRITABLE as u32;
                if !self.software_enabled() {
                    v |= LVT_MASKED;
                }
                self.timer.write_lvt(now, v);
                self.timer_changed()
            }
            MSR_TIMER_INITIAL => {
                self.timer.write_initial(now, low);
                self.timer_changed()
            }
            MSR_TIMER_DIVIDE => {
                if value & !(DCR_VALID_BITS as u64) != 0 {
                    return gp;
                }
                self.timer.write_divide(now, low);
                self.timer_changed()
            }
            MSR_TSC_DEADLINE => {
                self.timer.write_deadline(value);
                self.timer_changed()
            }
            MSR_SELF_IPI => {
                if value & !0xff != 0 {
                    return gp;
                }
                self.self_ipi(Vector(low as u8))
            }
            m => match lvt_source(m) {
                Some(src) => {
                    let writable = lvt_writable(src);
                    if value & !(writable | LVT_RO) != 0 {
                        return gp;
                    }
                    let mut v = low & writable as u32;
                    if !self.software_enabled() {
                        v |= LVT_MASKED;
                    }
                    self.lvt[src.index()] = v;
                    ApicEffects::default()
                }
                // ID, version, PPR, LDR, ISR/TMR/IRR and current count are read-only;
                // anything else in the range does not exist in x2APIC mode.
                None => gp,
            },
        }
    }

    fn timer_changed(&self) -> ApicEffects {
        ApicEffects::one(ApicEffect::TimerChanged {
            next_fire: self.timer.next_fire(),
        })
    }

    /// SVR write. Clearing bit 8 sets the mask bit of every LVT entry (11.4.7.2);
    /// setting it again leaves them masked.
    fn write_svr(&mut self, svr: u32) -> ApicEffects {
        let disabling = svr & SVR_APIC_ENABLE == 0;
        self.set_svr_raw(svr);
        if !disabling {
            return ApicEffects::default();
        }
        for e in self.lvt.iter_mut() {
            *e |= LVT_MASKED;
        }
        let before = self.timer.next_fire();
        self.timer.mask();
        if before != self.timer.next_fire() {
            self.timer_changed()
        } else {
            ApicEffects::default()
        }
    }

    fn send_icr(&mut self, icr: Icr) -> ApicEffects {
        match ipi_from_icr(icr, self.id) {
            Ok(msg) => ApicEffects::one(ApicEffect::SendIpi(msg)),
            Err(reason) => {
                let mut out = ApicEffects::one(ApicEffect::IpiNotSent {
                    msr: MSR_ICR,
                    value: icr.0,
                    reason,
                });
                let bits = match reason {
                    IpiDropReason::IllegalVector => ESR_SEND_ILLEGAL_VECTOR,
                    IpiDropReason::LowestPriorityUnsupported => ESR_REDIRECTABLE_IPI,
                    _ => 0,
                };
                if bits != 0 {
                    let interrupt = self.log_error(bits);
                    out.push(ApicEffect::ErrorLogged {
                        esr_bits: bits,
                        interrupt,
                    });
                }
                out
            }
        }
    }

    /// SELF_IPI: fixed, edge, to this APIC, logged in IRR before WRMSR completes. An
    /// illegal vector logs "send illegal vector" only (the message is not sent, so it
    /// is not received either; the SDM's wording allows both readings).
    fn self_ipi(&mut self, vector: Vector) -> ApicEffects {
        if vector.0 < FIRST_LEGAL_VECTOR {
            let mut out = ApicEffects::one(ApicEffect::IpiNotSent {
                msr: MSR_SELF_IPI,
                value: vector.0 as u64,
                reason: IpiDropReason::IllegalVector,
            });
            let interrupt = self.log_error(ESR_SEND_ILLEGAL_VECTOR);
            out.push(ApicEffect::ErrorLogged {
                esr_bits: ESR_SEND_ILLEGAL_VECTOR,
                interrupt,
            });
            return out;
        }
        let outcome = self.accept(vector, false);
        ApicEffects::one(ApicEffect::SelfIpi { vector, outcome })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::icr::{DeliveryMode, DestMode, Shorthand, TriggerMode};
    use crate::lapic::RejectReason;
    use sim_core::ApicId;

    const T0: SimTime = SimTime(0);

    fn apic(id: u32) -> LocalApic {
        LocalApic::new(ApicId(id))
    }
    fn read(a: &LocalApic, msr: u32) -> u64 {
        a.rdmsr(T0, msr)
            .value()
            .unwrap_or_else(|| panic!("#GP reading {msr:#x}"))
    }
    fn gp(msr: u32) -> ApicEffect {
        ApicEffect::GeneralProtection { msr }
    }

    #[test]
    fn identification_registers() {
        let a = apic(0x25);
        assert_eq!(read(&a, MSR_ID), 0x25);
        assert_eq!(read(&a, MSR_VERSION), 0x0106_0015);
        assert_eq!(read(&a, MSR_LDR), 0x0002_0020);
        assert_eq!(read(&a, MSR_SVR), 0x1ff);
    }

    /// SDM Figure 11-8, bit by bit for every LVT: writable fields read back, delivery
    /// status (12) and Remote IRR (14) are read-only (written, ignored), anything else
    /// is reserved and raises #GP (11.12.1.3).
    #[test]
    fn lvt_fields_bit_by_bit() {
        const VECTOR: u64 = 0xff;
        const MODE: u64 = 0x700;
        const POLARITY: u64 = 1 << 13;
        const TRIGGER: u64 = 1 << 15;
        const MASK: u64 = 1 << 16;
        const TIMER_MODE: u64 = 0x3 << 17;
        let kinds = [
            (MSR_LVT_CMCI, VECTOR | MODE | MASK),
            (MSR_LVT_THERMAL, VECTOR | MODE | MASK),
            (MSR_LVT_PMI, VECTOR | MODE | MASK),
            (MSR_LVT_LINT0, VECTOR | MODE | POLARITY | TRIGGER | MASK),
            (MSR_LVT_LINT1, VECTOR | MODE | POLARITY | TRIGGER | MASK),
            (MSR_LVT_ERROR, VECTOR | MASK),
            (MSR_LVT_TIMER, VECTOR | MASK | TIMER_MODE),
        ];
        for (msr, writable) in kinds {
            for bit in 0..32 {
                let mut a = apic(1);
                let value = 1u64 << bit;
                let fx = a.wrmsr(T0, msr, value);
                if writable & value != 0 {
                    assert!(!fx.faulted(), "{msr:#x} bit {bit} is writable");
                    assert_eq!(read(&a, msr), value, "{msr:#x} bit {bit} reads back");
                } else if bit == 12 || bit == 14 {
                    assert!(
                        !fx.faulted(),
                        "{msr:#x} bit {bit} is read-only, not reserved"
                    );
                    assert_eq!(read(&a, msr), 0, "{msr:#x} bit {bit} is not stored");
                } else {
                    assert!(fx.faulted(), "{msr:#x} bit {bit} is reserved");
                }
            }
        }
        // SVR (SDM 11.9): vector, APIC enable (8), focus disable (9), suppress EOI
        // broadcast (12, offered by APIC_VERSION bit 24).
        for bit in 0..64 {
            let mut a = apic(1);
            let value = 1u64 << bit;
            let fx = a.wrmsr(T0, MSR_SVR, value);
            if 0x13ff & value != 0 {
                assert!(!fx.faulted(), "SVR bit {bit}");
                assert_eq!(read(&a, MSR_SVR), value, "SVR bit {bit}");
            } else {
                assert!(fx.faulted(), "SVR bit {bit} is reserved");
            }
        }
    }

    #[test]
    fn effects_hold_what_was_pushed() {
        let e = ApicEffects::one(gp(MSR_TPR));
        assert!(!e.is_empty());
        assert_eq!(e.len(), 1);
        assert!(e.contains(&gp(MSR_TPR)));
        assert!(!e.contains(&gp(MSR_EOI)));
        assert!(ApicEffects::default().is_empty());
        assert!(!ApicEffects::default().contains(&gp(MSR_TPR)));
    }

    /// Only ICR and IA32_TSC_DEADLINE are 64-bit; a write of bits 63:32 to any other
    /// x2APIC MSR raises #GP, including registers with no field check of their own.
    #[test]
    fn upper_half_is_reserved_outside_icr_and_tsc_deadline() {
        let mut a = apic(1);
        assert_eq!(
            a.wrmsr(T0, MSR_TIMER_INITIAL, 1 << 32).to_vec(),
            vec![gp(MSR_TIMER_INITIAL)]
        );
        // TSC-deadline mode: the MSR is ignored in the other timer modes (SDM 11.5.4.1).
        let _ = a.wrmsr(T0, MSR_LVT_TIMER, 0xec | 2 << 17);
        assert!(!a.wrmsr(T0, MSR_TSC_DEADLINE, 1 << 40).faulted());
        assert_eq!(read(&a, MSR_TSC_DEADLINE), 1 << 40);
        assert!(!a.wrmsr(T0, MSR_ICR, 0x30 | 1 << 32).faulted());
    }

    #[test]
    fn read_only_registers_fault_on_write() {
        let mut a = apic(1);
        for msr in [
            MSR_ID,
            MSR_VERSION,
            MSR_PPR,
            MSR_LDR,
            MSR_ISR0,
            0x817,
            MSR_TMR0,
            MSR_IRR0,
            0x827,
            MSR_TIMER_CURRENT,
        ] {
            let fx = a.wrmsr(T0, msr, 0);
            assert_eq!(fx.to_vec(), vec![gp(msr)], "msr {msr:#x}");
        }
        assert_eq!(read(&a, MSR_ID), 1);
    }

    #[test]
    fn write_only_and_absent_registers_fault_on_read() {
        let a = apic(1);
        for msr in [
            MSR_EOI,
            MSR_SELF_IPI,
            0x800,
            0x809,
            0x80c,
            0x80e,
            0x831,
            0x83d,
            0x840,
            0x8ff,
        ] {
            assert_eq!(
                a.rdmsr(T0, msr),
                MsrRead::GeneralProtection { msr },
                "msr {msr:#x}"
            );
        }
        let mut a = a;
        assert!(
            a.wrmsr(T0, 0x809, 0).faulted(),
            "ARBPRI does not exist in x2APIC mode"
        );
    }

    #[test]
    fn reserved_bits_fault() {
        let mut a = apic(1);
        assert!(a.wrmsr(T0, MSR_TPR, 0x100).faulted());
        assert!(a.wrmsr(T0, MSR_TPR, 1 << 32).faulted());
        assert!(a.wrmsr(T0, MSR_SVR, 0x1ff | 1 << 10).faulted());
        // Bits 9 (focus disable) and 12 (suppress EOI broadcast) are writable (SDM 11.9).
        assert!(!a.wrmsr(T0, MSR_SVR, 0x13ff).faulted());
        assert_eq!(read(&a, MSR_SVR), 0x13ff);
        assert!(
            a.wrmsr(T0, MSR_LVT_ERROR, 0x700).faulted(),
            "error LVT has no delivery mode"
        );
        assert!(a.wrmsr(T0, MSR_LVT_LINT0, 1 << 11).faulted());
        assert!(
            a.wrmsr(T0, MSR_LVT_TIMER, 3 << 17).faulted(),
            "reserved timer mode"
        );
        assert!(a.wrmsr(T0, MSR_TIMER_DIVIDE, 0b0100).faulted());
        assert!(a.wrmsr(T0, MSR_SELF_IPI, 0x1_40).faulted());
        assert!(a.wrmsr(T0, MSR_ICR, 1 << 13).faulted());
        assert!(a.wrmsr(T0, MSR_ICR, 1 << 20).faulted());
        assert_eq!(a.tpr(), 0);
        // Read-only LVT bits are ignored, not faulted.
        assert!(!a.wrmsr(T0, MSR_LVT_LINT0, 0x1_4030).faulted());
        assert_eq!(read(&a, MSR_LVT_LINT0), 0x1_0030);
    }

    #[test]
    fn tpr_ppr_and_vector_maps() {
        let mut a = apic(1);
        let _ = a.accept(Vector(0x21), false);
        let _ = a.accept(Vector(0x80), true);
        assert_eq!(a.acknowledge(), Some(Vector(0x80)));
        assert!(a.wrmsr(T0, MSR_TPR, 0x35).is_empty());
        assert_eq!(read(&a, MSR_TPR), 0x35);
        assert_eq!(a.tpr(), 0x35);
        assert_eq!(read(&a, MSR_PPR), 0x80);
        assert_eq!(read(&a, MSR_IRR0 + 1), 1 << 1); // vector 0x21 is bit 1 of word 1
        assert_eq!(read(&a, MSR_ISR0 + 4), 1); // vector 0x80 is bit 0 of word 4
        assert_eq!(read(&a, MSR_TMR0 + 4), 1);
        assert_eq!(read(&a, MSR_IRR0 + 4), 0);
    }

    #[test]
    fn eoi_write_completes_and_non_zero_faults() {
        let mut a = apic(1);
        let _ = a.accept(Vector(0x40), true);
        let _ = a.acknowledge();
        assert!(a.wrmsr(T0, MSR_EOI, 1).faulted());
        assert!(a.isr().contains(Vector(0x40)), "#GP leaves ISR alone");
        let fx = a.wrmsr(T0, MSR_EOI, 0);
        let want = EoiOutcome {
            completed: Some(Vector(0x40)),
            broadcast: Some(Vector(0x40)),
        };
        assert_eq!(fx.to_vec(), vec![ApicEffect::Eoi(want)]);
    }

    #[test]
    fn esr_is_write_then_read() {
        let mut a = apic(1);
        let _ = a.accept(Vector(3), false);
        assert_eq!(read(&a, MSR_ESR), 0);
        assert!(
            a.wrmsr(T0, MSR_ESR, 0x40).faulted(),
            "only 0 may be written"
        );
        assert!(a.wrmsr(T0, MSR_ESR, 0).is_empty());
        assert_eq!(
            read(&a, MSR_ESR),
            0x40,
            "ESR bit 6: receive illegal vector (SDM 11.5.3)"
        );
        let _ = a.wrmsr(T0, MSR_ESR, 0);
        assert_eq!(read(&a, MSR_ESR), 0);
    }

    /// An error LVT with a vector below 16 cannot deliver: the error is still logged,
    /// with "receive illegal vector" added (SDM 11.5.3). Vector 16 is legal.
    #[test]
    fn error_lvt_with_an_illegal_vector() {
        // (error LVT vector, the interrupt it raises, ESR after the latch)
        for (lvt, interrupt, esr) in [(0x0f, None, 0x60), (0x10, Some(Vector(0x10)), 0x20)] {
            let mut a = apic(1);
            let _ = a.wrmsr(T0, MSR_LVT_ERROR, lvt);
            let fx = a.wrmsr(T0, MSR_SELF_IPI, 0x05);
            assert!(fx.contains(&ApicEffect::ErrorLogged {
                esr_bits: 0x20,
                interrupt
            }));
            assert_eq!(a.deliverable(), interrupt);
            let _ = a.wrmsr(T0, MSR_ESR, 0);
            assert_eq!(read(&a, MSR_ESR), esr, "LVT vector {lvt:#x}");
        }
    }

    #[test]
    fn error_interrupt_through_lvt_error() {
        let mut a = apic(1);
        let _ = a.wrmsr(T0, MSR_LVT_ERROR, 0xfe);
        let fx = a.wrmsr(T0, MSR_SELF_IPI, 0x05);
        assert!(fx.contains(&ApicEffect::ErrorLogged {
            esr_bits: ESR_SEND_ILLEGAL_VECTOR,
            interrupt: Some(Vector(0xfe))
        }));
        assert!(fx.contains(&ApicEffect::IpiNotSent {
            msr: MSR_SELF_IPI,
            value: 5,
            reason: IpiDropReason::IllegalVector
        }));
        assert_eq!(a.deliverable(), Some(Vector(0xfe)));
        let _ = a.wrmsr(T0, MSR_ESR, 0);
        assert_eq!(read(&a, MSR_ESR), 0x20, "ESR bit 5: send illegal vector");
    }

    #[test]
    fn svr_disable_masks_lvts_and_keeps_them_masked() {
        let mut a = apic(1);
        let _ = a.wrmsr(T0, MSR_LVT_PMI, 0xf0);
        let _ = a.wrmsr(T0, MSR_LVT_TIMER, 0xef | 1 << 17);
        let _ = a.wrmsr(T0, MSR_TIMER_INITIAL, 1000);
        assert!(a.timer_next_fire().is_some());
        let fx = a.wrmsr(T0, MSR_SVR, 0xff);
        assert_eq!(
            fx.to_vec(),
            vec![ApicEffect::TimerChanged { next_fire: None }]
        );
        assert_eq!(read(&a, MSR_LVT_PMI), 0x1_00f0);
        assert_eq!(
            read(&a, MSR_LVT_TIMER) & LVT_MASKED as u64,
            LVT_MASKED as u64
        );
        // Attempts to unmask while disabled are ignored.
        let _ = a.wrmsr(T0, MSR_LVT_PMI, 0xf0);
        assert_eq!(read(&a, MSR_LVT_PMI), 0x1_00f0);
        assert_eq!(
            a.accept(Vector(0x40), false),
            AcceptOutcome::Rejected(RejectReason::SoftwareDisabled)
        );
        // Re-enabling leaves the LVTs masked until software unmasks them.
        let _ = a.wrmsr(T0, MSR_SVR, 0x1ff);
        assert_eq!(read(&a, MSR_LVT_PMI), 0x1_00f0);
        let _ = a.wrmsr(T0, MSR_LVT_PMI, 0xf0);
        assert_eq!(read(&a, MSR_LVT_PMI), 0xf0);
    }

    #[test]
    fn icr_write_sends_ipi() {
        let mut a = apic(0x11);
        let icr = Icr::encode(
            Vector(0xfb),
            DeliveryMode::Fixed,
            DestMode::Logical,
            TriggerMode::Edge,
            Shorthand::None,
            0x0002_0003,
        );
        // Bit 12 (delivery status) is ignored on WRMSR in x2APIC mode (SDM 11.12.9).
        let fx = a.wrmsr(T0, MSR_ICR, icr.0 | (1 << 12));
        let ApicEffect::SendIpi(msg) = fx.to_vec()[0] else {
            panic!("{fx:?}")
        };
        assert_eq!(msg.vector, Vector(0xfb));
        assert_eq!(msg.dest_mode, DestMode::Logical);
        assert_eq!(msg.destination, 0x0002_0003);
        assert_eq!(msg.source, ApicId(0x11));
        assert_eq!(read(&a, MSR_ICR), icr.0, "bit 12 is ignored on write");
    }

    #[test]
    fn icr_illegal_vector_logs_send_error_and_sends_nothing() {
        let mut a = apic(1);
        let icr = Icr::encode(
            Vector(0x0a),
            DeliveryMode::Fixed,
            DestMode::Physical,
            TriggerMode::Edge,
            Shorthand::None,
            2,
        );
        let fx = a.wrmsr(T0, MSR_ICR, icr.0);
        assert_eq!(
            fx.to_vec(),
            vec![
                ApicEffect::IpiNotSent {
                    msr: MSR_ICR,
                    value: icr.0,
                    reason: IpiDropReason::IllegalVector
                },
                ApicEffect::ErrorLogged {
                    esr_bits: ESR_SEND_ILLEGAL_VECTOR,
                    interrupt: None
                },
            ]
        );
        let lowest = Icr::encode(
            Vector(0x40),
            DeliveryMode::LowestPriority,
            DestMode::Physical,
            TriggerMode::Edge,
            Shorthand::None,
            2,
        );
        let _ = a.wrmsr(T0, MSR_ICR, lowest.0);
        let _ = a.wrmsr(T0, MSR_ESR, 0);
        assert_eq!(
            read(&a, MSR_ESR),
            0x30,
            "ESR bits 5 and 4: illegal vector, redirectable IPI"
        );
    }

    #[test]
    fn self_ipi_lands_in_irr_synchronously() {
        let mut a = apic(1);
        let fx = a.wrmsr(T0, MSR_SELF_IPI, 0x55);
        assert_eq!(
            fx.to_vec(),
            vec![ApicEffect::SelfIpi {
                vector: Vector(0x55),
                outcome: AcceptOutcome::Accepted
            }]
        );
        assert_eq!(a.deliverable(), Some(Vector(0x55)));
        let fx = a.wrmsr(T0, MSR_SELF_IPI, 0x55);
        assert_eq!(
            fx.to_vec(),
            vec![ApicEffect::SelfIpi {
                vector: Vector(0x55),
                outcome: AcceptOutcome::AlreadyPending
            }]
        );
        // Vector 16 is the first legal one (SDM 11.5.2).
        let fx = a.wrmsr(T0, MSR_SELF_IPI, 0x10);
        assert_eq!(
            fx.to_vec(),
            vec![ApicEffect::SelfIpi {
                vector: Vector(0x10),
                outcome: AcceptOutcome::Accepted
            }]
        );
    }

    /// A software-disabled APIC masks an LVT timer entry written as unmasked
    /// (SDM 11.4.7.2), as it does the other LVTs.
    #[test]
    fn software_disabled_apic_masks_the_timer_lvt() {
        let mut a = apic(1);
        let _ = a.wrmsr(T0, MSR_SVR, 0xff);
        let _ = a.wrmsr(T0, MSR_LVT_TIMER, 0xec | 1 << 17);
        assert_eq!(read(&a, MSR_LVT_TIMER), 0x1_00ec | 1 << 17);
    }

    #[test]
    fn timer_through_registers() {
        let mut a = apic(1);
        let us = |n: u64| SimTime(n * 1_000_000);
        let _ = a.wrmsr(T0, MSR_TIMER_DIVIDE, 0b1011); // divide by 1: 40 ns per count at 25 MHz
        let _ = a.wrmsr(T0, MSR_LVT_TIMER, 0xec | 1 << 17); // periodic, unmasked
        let fx = a.wrmsr(T0, MSR_TIMER_INITIAL, 25); // 1 us period
        assert_eq!(
            fx.to_vec(),
            vec![ApicEffect::TimerChanged {
                next_fire: Some(us(1))
            }]
        );
        assert_eq!(
            a.rdmsr(SimTime(500_000), MSR_TIMER_CURRENT),
            MsrRead::Value(13)
        );
        assert_eq!(a.timer_current_count(SimTime(500_000)), 13);
        assert_eq!(a.timer_current_count(SimTime(120_000)), 22);
        assert_eq!(a.timer_fire(us(1)), Some(Vector(0xec)));
        assert_eq!(a.deliverable(), Some(Vector(0xec)));
        assert_eq!(a.timer_next_fire(), Some(us(2)));
        // Switch to TSC-deadline (disarms), then arm with IA32_TSC_DEADLINE.
        let fx = a.wrmsr(us(1), MSR_LVT_TIMER, 0xec | 2 << 17);
        assert_eq!(
            fx.to_vec(),
            vec![ApicEffect::TimerChanged { next_fire: None }]
        );
        let fx = a.wrmsr(us(1), MSR_TSC_DEADLINE, 2000 * 3); // 2 GHz default TSC: 3 us
        assert_eq!(
            fx.to_vec(),
            vec![ApicEffect::TimerChanged {
                next_fire: Some(us(3))
            }]
        );
        assert_eq!(read(&a, MSR_TSC_DEADLINE), 6000);
        assert_eq!(read(&a, MSR_TIMER_CURRENT), 0);
    }

    #[test]
    fn effects_capacity_holds_the_worst_case() {
        assert_eq!(std::mem::size_of::<ApicEffects>() % 8, 0);
        let mut e = ApicEffects::default();
        for _ in 0..4 {
            e.push(gp(0));
        }
        assert_eq!(e.len(), 4);
        assert_eq!((&e).into_iter().count(), 4);
    }
}
