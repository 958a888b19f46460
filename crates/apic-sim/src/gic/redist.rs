//! Redistributor LPI state and the CPU interface's acknowledge and EOI (IHI 0069 5.1
//! for LPI configuration and pending tables, 4.1 for the interrupt life cycle, 4.8 for
//! priorities, 12 for ICC_IAR1_EL1, ICC_EOIR1_EL1, ICC_PMR_EL1, GICR_CTLR).
//!
//! - LPI configuration (GICR_PROPBASER's table, one byte per LPI: priority in bits
//!   \[7:2\], bit 1 RES1, enable in bit 0) is shared by every redistributor
//!   ([`LpiConfigTable`]).
//! - Each redistributor keeps its CPU's pending LPIs (the pending table). LPIs are
//!   edge-triggered and have no active state: a second LPI of the same INTID while it
//!   is pending merges with it; acknowledging clears the pending bit.
//! - The CPU interface signals the highest-priority pending, enabled LPI whose priority
//!   is higher (numerically lower) than both ICC_PMR_EL1 and the running priority.
//!   Reading ICC_IAR1_EL1 returns it (or 1023, spurious) and makes its priority the
//!   running priority; writing ICC_EOIR1_EL1 drops that priority again. Linux at EL2
//!   runs with EOImode = 1, where EOIR is only the priority drop and ICC_DIR_EL1 the
//!   deactivation; for an LPI there is nothing to deactivate, so both modes look the
//!   same here.
//! - With GICR_CTLR.EnableLPIs = 0 the redistributor takes no LPIs: a forwarded LPI is
//!   lost ([`PendOutcome::LpisDisabled`]).

use super::{check_cost, is_special_intid, GicError, INTID_SPURIOUS, LPI_BASE};
use serde::{Deserialize, Serialize};
use sim_core::{CpuId, Duration, Freq};
use std::collections::{BTreeMap, BTreeSet};

/// GICR_CTLR, offset 0x0000 of the redistributor's RD_base frame.
pub const GICR_CTLR: u64 = 0x0000;
/// GICR_CTLR.EnableLPIs, bit 0.
pub const GICR_CTLR_ENABLE_LPIS: u32 = 1;
/// GICR_PROPBASER, offset 0x0070: the LPI configuration table.
pub const GICR_PROPBASER: u64 = 0x0070;
/// GICR_PENDBASER, offset 0x0078: the LPI pending table.
pub const GICR_PENDBASER: u64 = 0x0078;
/// LPI configuration byte: enable, bit 0.
pub const LPI_CFG_ENABLE: u8 = 1;
/// LPI configuration byte: bit 1 is RES1.
pub const LPI_CFG_RES1: u8 = 1 << 1;
/// LPI configuration byte: priority, bits \[7:2\] (the two low priority bits are 0).
pub const LPI_CFG_PRIORITY_MASK: u8 = 0xfc;
/// The idle running priority (no interrupt active).
pub const IDLE_PRIORITY: u8 = 0xff;
/// What Linux writes to ICC_PMR_EL1 (`DEFAULT_PMR_VALUE`, 0xf0).
pub const LINUX_DEFAULT_PMR: u8 = 0xf0;
/// What Linux writes as an LPI's priority (`LPI_PROP_DEFAULT_PRIO`, 0xa0).
pub const LINUX_LPI_PRIORITY: u8 = 0xa0;

/// One LPI's configuration byte, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LpiConfig {
    /// Priority; only bits \[7:2\] are stored. Lower is more urgent.
    pub priority: u8,
    pub enabled: bool,
}

impl LpiConfig {
    pub fn from_byte(b: u8) -> LpiConfig {
        LpiConfig {
            priority: b & LPI_CFG_PRIORITY_MASK,
            enabled: b & LPI_CFG_ENABLE != 0,
        }
    }
    pub fn to_byte(self) -> u8 {
        (self.priority & LPI_CFG_PRIORITY_MASK) | LPI_CFG_RES1 | self.enabled as u8
    }
}

/// The LPI configuration table (GICR_PROPBASER), shared by all redistributors.
/// Unwritten entries read as zero: priority 0, disabled.
#[derive(Clone, Debug)]
pub struct LpiConfigTable {
    id_bits: u8,
    entries: BTreeMap<u32, u8>,
}

impl LpiConfigTable {
    /// A table for INTIDs below 2^id_bits (GICR_PROPBASER.IDbits + 1), 14..=32.
    pub fn new(id_bits: u8) -> LpiConfigTable {
        LpiConfigTable {
            id_bits: id_bits.clamp(14, 32),
            entries: BTreeMap::new(),
        }
    }

    fn check(&self, intid: u32) -> Result<(), GicError> {
        if intid < LPI_BASE || (intid as u64) >> self.id_bits != 0 {
            return Err(GicError::NotAnLpi {
                intid,
                id_bits: self.id_bits,
            });
        }
        Ok(())
    }

    /// Writes an LPI's configuration byte. A redistributor that already holds the LPI
    /// pending sees the change only after [`Redistributor::inv`] (the INV command).
    pub fn set(&mut self, intid: u32, cfg: LpiConfig) -> Result<(), GicError> {
        self.check(intid)?;
        self.entries.insert(intid, cfg.to_byte());
        Ok(())
    }

    pub fn get(&self, intid: u32) -> LpiConfig {
        LpiConfig::from_byte(self.entries.get(&intid).copied().unwrap_or(0))
    }
}

/// CPU-side costs of the GIC CPU interface. No published figures; assumptions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GicCpuCosts {
    /// Reading ICC_IAR1_EL1 (a system register read that synchronises with the CPU
    /// interface). Core cycles. Default 100: assumption, the order DESIGN.md section 3
    /// gives for an x2APIC MSR access, which is the closest published class.
    pub iar_read_cycles: f64,
    /// Writing ICC_EOIR1_EL1. Core cycles. Default 60: assumption (a posted system
    /// register write, cheaper than the synchronising IAR read).
    pub eoir_write_cycles: f64,
    /// From a redistributor taking a pending LPI to the CPU seeing its IRQ.
    /// Nanoseconds. Default 20 ns: assumption, the redistributor sits next to its core.
    pub signal_ns: f64,
}

impl Default for GicCpuCosts {
    fn default() -> Self {
        GicCpuCosts {
            iar_read_cycles: 100.0,
            eoir_write_cycles: 60.0,
            signal_ns: 20.0,
        }
    }
}

impl GicCpuCosts {
    pub fn validate(&self) -> Result<(), GicError> {
        check_cost("gic_cpu_costs", "iar_read_cycles", self.iar_read_cycles)?;
        check_cost("gic_cpu_costs", "eoir_write_cycles", self.eoir_write_cycles)?;
        check_cost("gic_cpu_costs", "signal_ns", self.signal_ns)
    }
    pub fn iar_read(&self, cpu: Freq) -> Duration {
        cpu.cycles_f64(self.iar_read_cycles)
    }
    pub fn eoir_write(&self, cpu: Freq) -> Duration {
        cpu.cycles_f64(self.eoir_write_cycles)
    }
    pub fn signal(&self) -> Duration {
        Duration::from_ns_f64(self.signal_ns)
    }
}

/// What happened to an LPI forwarded to a redistributor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PendOutcome {
    /// Now pending. `signal`: the CPU interface asserts IRQ to the core (an enabled LPI
    /// can preempt the running priority and passes the priority mask).
    Pending { signal: bool },
    /// It was already pending: merged with that one.
    Merged,
    /// GICR_CTLR.EnableLPIs = 0: not recorded.
    LpisDisabled,
}

/// Result of an ICC_EOIR1_EL1 write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EoiOutcome {
    /// The most recently acknowledged interrupt's priority was dropped.
    PriorityDropped,
    /// The INTID is active but not the most recent: EOIs out of order (UNPREDICTABLE in
    /// the architecture; the model drops its priority anyway).
    OutOfOrder,
    /// No such active interrupt (or a special INTID): ignored.
    Ignored,
}

/// Counters snapshot of one redistributor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RedistCounters {
    pub forwarded: u64,
    pub pended: u64,
    pub merged: u64,
    pub lost_disabled: u64,
    pub acknowledged: u64,
    pub spurious: u64,
    pub eois: u64,
    pub eoi_errors: u64,
}

/// The redistributor and CPU interface of one CPU.
#[derive(Clone, Debug)]
pub struct Redistributor {
    cpu: CpuId,
    enable_lpis: bool,
    /// Pending LPIs with the priority/enable read when they became pending.
    pending: BTreeMap<u32, LpiConfig>,
    /// Pending and enabled, by (priority, INTID): the first is the best candidate.
    ready: BTreeSet<(u8, u32)>,
    pmr: u8,
    /// Acknowledged, not yet EOI'd: (INTID, priority), most recent last.
    active: Vec<(u32, u8)>,
    counters: RedistCounters,
}

impl Redistributor {
    /// LPIs disabled (GICR_CTLR reset value) and ICC_PMR_EL1 at Linux's 0xf0.
    pub fn new(cpu: CpuId) -> Redistributor {
        Redistributor {
            cpu,
            enable_lpis: false,
            pending: BTreeMap::new(),
            ready: BTreeSet::new(),
            pmr: LINUX_DEFAULT_PMR,
            active: Vec::new(),
            counters: RedistCounters::default(),
        }
    }

    pub fn cpu(&self) -> CpuId {
        self.cpu
    }
    /// GICR_CTLR.EnableLPIs.
    pub fn set_enable_lpis(&mut self, on: bool) {
        self.enable_lpis = on;
    }
    /// ICC_PMR_EL1.
    pub fn set_pmr(&mut self, pmr: u8) {
        self.pmr = pmr;
    }
    /// ICC_RPR_EL1: the priority of the most recent active interrupt, or idle (0xff).
    pub fn running_priority(&self) -> u8 {
        self.active.last().map_or(IDLE_PRIORITY, |a| a.1)
    }
    pub fn is_pending(&self, intid: u32) -> bool {
        self.pending.contains_key(&intid)
    }
    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }
    pub fn active_count(&self) -> usize {
        self.active.len()
    }
    pub fn counters(&self) -> &RedistCounters {
        &self.counters
    }

    /// The INTID the CPU interface signals now, if any.
    pub fn highest_signalled(&self) -> Option<u32> {
        let &(prio, intid) = self.ready.first()?;
        (prio < self.pmr && prio < self.running_priority()).then_some(intid)
    }

    /// Whether IRQ is asserted to the core.
    pub fn irq_asserted(&self) -> bool {
        self.highest_signalled().is_some()
    }

    /// The ITS forwards LPI `intid` here.
    pub fn set_pending(&mut self, intid: u32, config: &LpiConfigTable) -> PendOutcome {
        self.counters.forwarded += 1;
        if !self.enable_lpis {
            self.counters.lost_disabled += 1;
            return PendOutcome::LpisDisabled;
        }
        if self.pending.contains_key(&intid) {
            self.counters.merged += 1;
            return PendOutcome::Merged;
        }
        let cfg = config.get(intid);
        self.pending.insert(intid, cfg);
        if cfg.enabled {
            self.ready.insert((cfg.priority, intid));
        }
        self.counters.pended += 1;
        PendOutcome::Pending {
            signal: self.irq_asserted(),
        }
    }

    /// INV: re-read a pending LPI's configuration (after software changed it).
    pub fn inv(&mut self, intid: u32, config: &LpiConfigTable) {
        if let Some(old) = self.pending.get_mut(&intid) {
            self.ready.remove(&(old.priority, intid));
            *old = config.get(intid);
            if old.enabled {
                self.ready.insert((old.priority, intid));
            }
        }
    }

    /// ICC_IAR1_EL1 read: the signalled LPI (now no longer pending, its priority now
    /// running), or 1023 when nothing can be signalled.
    pub fn acknowledge(&mut self) -> u32 {
        let Some(intid) = self.highest_signalled() else {
            self.counters.spurious += 1;
            return INTID_SPURIOUS;
        };
        let cfg = self.pending.remove(&intid).expect("ready implies pending");
        self.ready.remove(&(cfg.priority, intid));
        self.active.push((intid, cfg.priority));
        self.counters.acknowledged += 1;
        intid
    }

    /// ICC_EOIR1_EL1 write.
    pub fn eoi(&mut self, intid: u32) -> EoiOutcome {
        if is_special_intid(intid) {
            return EoiOutcome::Ignored;
        }
        match self.active.iter().rposition(|a| a.0 == intid) {
            Some(i) if i + 1 == self.active.len() => {
                self.active.pop();
                self.counters.eois += 1;
                EoiOutcome::PriorityDropped
            }
            Some(i) => {
                self.active.remove(i);
                self.counters.eoi_errors += 1;
                EoiOutcome::OutOfOrder
            }
            None => {
                self.counters.eoi_errors += 1;
                EoiOutcome::Ignored
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> LpiConfigTable {
        let mut t = LpiConfigTable::new(16);
        t.set(
            8192,
            LpiConfig {
                priority: 0xa0,
                enabled: true,
            },
        )
        .unwrap();
        t.set(
            8193,
            LpiConfig {
                priority: 0x80,
                enabled: true,
            },
        )
        .unwrap();
        t.set(
            8194,
            LpiConfig {
                priority: 0xa0,
                enabled: false,
            },
        )
        .unwrap();
        t
    }

    #[test]
    fn priority_order_preemption_and_running_priority() {
        let t = table();
        let mut r = Redistributor::new(CpuId(0));
        r.set_enable_lpis(true);
        assert_eq!(
            r.set_pending(8192, &t),
            PendOutcome::Pending { signal: true }
        );
        assert_eq!(r.acknowledge(), 8192);
        assert_eq!(r.running_priority(), 0xa0);
        // Same priority cannot preempt the running one; a higher one can.
        assert_eq!(
            r.set_pending(8192, &t),
            PendOutcome::Pending { signal: false }
        );
        assert_eq!(
            r.set_pending(8193, &t),
            PendOutcome::Pending { signal: true }
        );
        assert_eq!(r.acknowledge(), 8193);
        assert_eq!(r.acknowledge(), INTID_SPURIOUS);
        assert_eq!(r.eoi(8193), EoiOutcome::PriorityDropped);
        assert_eq!(r.eoi(8192), EoiOutcome::PriorityDropped);
        assert_eq!(r.acknowledge(), 8192);
        assert_eq!(r.eoi(8192), EoiOutcome::PriorityDropped);
        assert_eq!(r.eoi(8192), EoiOutcome::Ignored);
    }

    #[test]
    fn disabled_masked_and_lpis_off() {
        let mut t = table();
        let mut r = Redistributor::new(CpuId(1));
        assert_eq!(r.set_pending(8192, &t), PendOutcome::LpisDisabled);
        r.set_enable_lpis(true);
        // A disabled LPI stays pending without signalling; enabling it + INV signals.
        assert_eq!(
            r.set_pending(8194, &t),
            PendOutcome::Pending { signal: false }
        );
        assert_eq!(r.acknowledge(), INTID_SPURIOUS);
        t.set(
            8194,
            LpiConfig {
                priority: 0x90,
                enabled: true,
            },
        )
        .unwrap();
        r.inv(8194, &t);
        assert!(r.irq_asserted());
        // The priority mask hides priorities at or below it.
        r.set_pmr(0x90);
        assert!(!r.irq_asserted());
        r.set_pmr(LINUX_DEFAULT_PMR);
        assert_eq!(r.acknowledge(), 8194);
        let c = r.counters();
        assert_eq!(
            (c.lost_disabled, c.pended, c.acknowledged, c.spurious),
            (1, 1, 1, 1)
        );
    }

    #[test]
    fn config_byte_layout() {
        let c = LpiConfig {
            priority: 0xa3,
            enabled: true,
        };
        assert_eq!(c.to_byte(), 0xa0 | 0b11);
        assert_eq!(
            LpiConfig::from_byte(0xa3),
            LpiConfig {
                priority: 0xa0,
                enabled: true
            }
        );
        let mut t = LpiConfigTable::new(16);
        assert!(matches!(t.set(8191, c), Err(GicError::NotAnLpi { .. })));
        assert!(matches!(t.set(1 << 16, c), Err(GicError::NotAnLpi { .. })));
        assert!(GicCpuCosts {
            signal_ns: f64::INFINITY,
            ..GicCpuCosts::default()
        }
        .validate()
        .is_err());
    }

    #[test]
    fn counts_of_pending_merged_and_active() {
        let t = table();
        let mut r = Redistributor::new(CpuId(4));
        assert_eq!(r.cpu(), CpuId(4));
        r.set_enable_lpis(true);
        assert!(!r.is_pending(8192));
        let _ = r.set_pending(8192, &t);
        let _ = r.set_pending(8193, &t);
        assert_eq!(r.set_pending(8192, &t), PendOutcome::Merged);
        assert!(r.is_pending(8192) && r.is_pending(8193) && !r.is_pending(8194));
        assert_eq!((r.pending_count(), r.active_count()), (2, 0));
        assert_eq!(r.acknowledge(), 8193);
        assert_eq!((r.pending_count(), r.active_count()), (1, 1));
        let c = r.counters();
        assert_eq!(
            (c.forwarded, c.pended, c.merged, c.acknowledged),
            (3, 2, 1, 1)
        );
    }

    /// An EOI for an interrupt that is active but not the most recent one deactivates
    /// it and leaves the newer one running (software should drop priorities in the
    /// reverse order of acknowledgement; the model counts the error).
    #[test]
    fn an_out_of_order_eoi_leaves_the_newer_interrupt_running() {
        let t = table();
        let mut r = Redistributor::new(CpuId(0));
        r.set_enable_lpis(true);
        let _ = r.set_pending(8192, &t);
        assert_eq!(r.acknowledge(), 8192);
        let _ = r.set_pending(8193, &t);
        assert_eq!(r.acknowledge(), 8193, "0x80 preempts 0xa0");
        assert_eq!(r.eoi(8192), EoiOutcome::OutOfOrder);
        assert_eq!((r.active_count(), r.running_priority()), (1, 0x80));
        assert_eq!(r.eoi(8193), EoiOutcome::PriorityDropped);
        assert_eq!(r.eoi(8193), EoiOutcome::Ignored);
        assert_eq!(r.eoi(INTID_SPURIOUS), EoiOutcome::Ignored);
        let c = r.counters();
        assert_eq!(
            (c.eois, c.eoi_errors),
            (1, 2),
            "the special INTID is not an error"
        );
    }

    #[test]
    fn cpu_interface_costs() {
        let costs = GicCpuCosts {
            iar_read_cycles: 100.0,
            eoir_write_cycles: 60.0,
            signal_ns: 12.5,
        };
        let cpu = Freq::from_mhz(2000).unwrap();
        assert_eq!(costs.iar_read(cpu), Duration::from_ns(50));
        assert_eq!(costs.eoir_write(cpu), Duration::from_ns(30));
        assert_eq!(costs.signal(), Duration::from_ps(12_500));
    }
}
