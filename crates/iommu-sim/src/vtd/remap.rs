//! The interrupt-remapping decision: from an MSI write to deliver, post or block.
//!
//! [`InterruptRemapper::remap`] follows the checks of VT-d spec 5.1.4 ("Interrupt
//! Remapping Hardware Operation" and its fault conditions table) in this order:
//!
//! 1. Decode the request (5.1.2). A compatibility-format request (address bit 4 = 0)
//!    passes through unremapped when compatibility format is enabled (GSTS_REG.CFIS =
//!    1) and the IOMMU is in xAPIC mode (IRTA_REG.EIME = 0); otherwise fault 0x25.
//! 2. Reserved request bits (data 31:16 with SHV = 1; an address outside the
//!    interrupt range): fault 0x20.
//! 3. interrupt_index (handle, plus subhandle if SHV) against the table size
//!    2^(IRTA_REG.S + 1): fault 0x21.
//! 4. Fetch `IRTE[index]` through the interrupt entry cache; a failed table read is
//!    fault 0x23.
//! 5. Present bit clear: fault 0x22.
//! 6. Reserved fields of the entry's format set (including IM = 1 when posting is not
//!    supported, and SVT = 11b): fault 0x24.
//! 7. Source-id verification (SVT/SQ/SID): fault 0x26.
//! 8. Remapped format: deliver to the destination; posted format: post to the PDA.
//!
//! Faults are logged in the [`FaultLog`]; an entry with FPD = 1 suppresses recording
//! (the VT-d FPD field description says hardware evaluates it whether or not P is
//! set, so it also applies to fault 0x22), but the request is blocked either way.
//!
//! The [`RemapOutcome::cost`] is the time the IOMMU spends on this request (decode and
//! validation plus the IEC hit or the IRTE fetch). Queueing behind other requests is
//! the job of [`super::fabric::RemapPipeline`]; the descriptor update for a post is
//! `pid-model`'s; the trip to the LAPIC is [`super::fabric::InterruptMessageFabric`]'s.

use super::fault::{FaultCounts, FaultDisposition, FaultLog, FaultReason, FaultRecord};
use super::iec::{Iec, IecCounters};
use super::irte::{DeliveryMode, Irte, IrteFormat};
use super::msi::{decode, MsiRequest};
use crate::IommuError;
use serde::{Deserialize, Serialize};
use sim_core::{ApicId, Duration, MsiMessage, SimTime, Vector};

/// Latencies of the remapping unit itself. All unmeasured in public sources
/// (COST-SOURCES.md: "interrupt-remapping and posting latency inside the IOMMU" and
/// "interrupt-entry-cache effects" are not published), so the defaults are
/// assumptions built from the memory latencies that are published.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RemapCosts {
    /// Fixed per-request work in the remapping unit: decode the address/data, compute
    /// the index, check the entry and the source id, form the interrupt message.
    /// Nanoseconds. Default 10 ns: assumption, on the order of ten cycles of a ~1 GHz
    /// uncore clock for a few dependent compare-and-select steps.
    pub translate_ns: f64,
    /// IRTE lookup that hits in the interrupt entry cache. Nanoseconds. Default 3 ns:
    /// assumption, a small on-die associative lookup of a few uncore cycles.
    pub iec_hit_ns: f64,
    /// IRTE lookup that misses in the interrupt entry cache: the failed lookup, the
    /// 16-byte read of the entry from memory, and the fill. Nanoseconds. Default
    /// 90 ns: 81 ns local DRAM idle latency (FD.io CSIT "Calibration Data -
    /// Cascadelake", Intel MLC) plus 9 ns assumption for the lookup, issuing the read
    /// from the IOMMU and filling the cache. If the table is hot in the LLC the real
    /// cost is lower (LLC hit ~77 cycles on Skylake-SP, AnandTech 11550).
    pub iec_miss_ns: f64,
}

impl Default for RemapCosts {
    fn default() -> Self {
        RemapCosts {
            translate_ns: 10.0,
            iec_hit_ns: 3.0,
            iec_miss_ns: 90.0,
        }
    }
}

pub(crate) fn check_ns(
    table: &'static str,
    field: &'static str,
    value: f64,
) -> Result<(), IommuError> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(IommuError::InvalidCost {
            table,
            field,
            value,
        })
    }
}

impl RemapCosts {
    /// Every field must be a finite, non-negative number of nanoseconds.
    pub fn validate(&self) -> Result<(), IommuError> {
        check_ns("remap_costs", "translate_ns", self.translate_ns)?;
        check_ns("remap_costs", "iec_hit_ns", self.iec_hit_ns)?;
        check_ns("remap_costs", "iec_miss_ns", self.iec_miss_ns)
    }
}

/// How the remapping hardware is set up (what IRTA_REG, GCMD and CAP_REG would hold).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RemapConfig {
    /// Interrupt remapping table entries: 2^(S+1) for IRTA_REG.S in 0..=15.
    /// Default 65536 (S = 15), what Linux allocates (INTR_REMAP_TABLE_ENTRIES).
    pub table_entries: u32,
    /// Interrupt entry cache entries. Default 64: assumption (not published). 0 = no
    /// cache.
    pub iec_capacity: usize,
    /// Fault recording registers, CAP_REG.NFR + 1 (1..=256). Default
    /// [`super::fault::DEFAULT_FAULT_RECORDS`].
    pub fault_records: usize,
    /// GSTS_REG.CFIS: compatibility-format requests pass through. Default false: Linux
    /// blocks them when it enables remapping (`iommu_set_irq_remapping` clears
    /// GCMD.CFI).
    pub compat_allowed: bool,
    /// IRTA_REG.EIME: x2APIC mode, 32-bit destination IDs. Compatibility-format
    /// requests are always blocked in this mode. Default true.
    pub x2apic_mode: bool,
    /// CAP_REG.PI: posted interrupts supported. When false, IM = 1 in an entry is a
    /// reserved-field error. Default true.
    pub posting_supported: bool,
    pub costs: RemapCosts,
}

impl Default for RemapConfig {
    fn default() -> Self {
        RemapConfig {
            table_entries: 65536,
            iec_capacity: 64,
            fault_records: super::fault::DEFAULT_FAULT_RECORDS,
            compat_allowed: false,
            x2apic_mode: true,
            posting_supported: true,
            costs: RemapCosts::default(),
        }
    }
}

impl RemapConfig {
    pub fn validate(&self) -> Result<(), IommuError> {
        let n = self.table_entries;
        if !(2..=65536).contains(&n) || !n.is_power_of_two() {
            return Err(IommuError::InvalidTableSize { entries: n });
        }
        if !(1..=256).contains(&self.fault_records) {
            return Err(IommuError::InvalidFaultRecordCount {
                value: self.fault_records,
            });
        }
        self.costs.validate()
    }
}

/// What happens to one interrupt request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RemapAction {
    /// Send an interrupt message to a LAPIC (remapped entry, or a compatibility-format
    /// request passed through).
    Deliver {
        dest: ApicId,
        vector: Vector,
        level_triggered: bool,
        dest_mode_logical: bool,
        redirection_hint: bool,
        delivery_mode: DeliveryMode,
    },
    /// Post `vector` into the descriptor at `pda` (the atomic descriptor update and any
    /// notification are the caller's, via pid-model). `fpd` is the entry's FPD bit, for
    /// recording a posting fault with [`InterruptRemapper::record_posting_fault`].
    Post {
        pda: u64,
        vector: Vector,
        urg: bool,
        index: u32,
        fpd: bool,
    },
    /// Dropped with a fault. `recorded` says whether a fault recording register took
    /// it (false when FPD suppressed it or the registers overflowed).
    Blocked { reason: FaultReason, recorded: bool },
}

/// Result of [`InterruptRemapper::remap`].
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RemapOutcome {
    /// Time the remapping unit spends on the request.
    pub cost: Duration,
    pub action: RemapAction,
}

/// Counters snapshot. `requests = remapped + posted + compat_passed + blocked`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RemapCounters {
    pub requests: u64,
    /// Delivered through a remapped-format entry.
    pub remapped: u64,
    /// Handed over for posting through a posted-format entry.
    pub posted: u64,
    /// Compatibility-format requests passed through unremapped.
    pub compat_passed: u64,
    /// Blocked with a fault (see `faults` for reasons).
    pub blocked: u64,
    pub iec: IecCounters,
    pub faults: FaultCounts,
}

/// VT-d interrupt remapping unit: the table, the IEC and the fault log.
///
/// - Setup: [`new`](Self::new), [`set_irte`](Self::set_irte) (a memory write, the IEC
///   is untouched), [`modify_irte`](Self::modify_irte) (write plus index-selective
///   IEC invalidation, like Linux's `modify_irte`), the `invalidate_iec_*` methods,
///   [`set_table_root_valid`](Self::set_table_root_valid) for fault injection.
/// - Input: [`remap`](Self::remap); [`record_posting_fault`](Self::record_posting_fault)
///   for faults found while updating a descriptor.
/// - Getters: [`irte`](Self::irte), [`counters`](Self::counters),
///   [`fault_log`](Self::fault_log) / [`fault_log_mut`](Self::fault_log_mut) (software
///   servicing the fault registers), [`iec`](Self::iec), [`config`](Self::config).
#[derive(Clone, Debug)]
pub struct InterruptRemapper {
    config: RemapConfig,
    table: Vec<Irte>,
    iec: Iec,
    faults: FaultLog,
    root_valid: bool,
    translate: Duration,
    iec_hit: Duration,
    iec_miss: Duration,
    requests: u64,
    remapped: u64,
    posted: u64,
    compat_passed: u64,
    blocked: u64,
}

impl InterruptRemapper {
    pub fn new(config: RemapConfig) -> Result<InterruptRemapper, IommuError> {
        config.validate()?;
        Ok(InterruptRemapper {
            table: vec![Irte::NOT_PRESENT; config.table_entries as usize],
            iec: Iec::new(config.iec_capacity),
            faults: FaultLog::new(config.fault_records)?,
            root_valid: true,
            translate: Duration::from_ns_f64(config.costs.translate_ns),
            iec_hit: Duration::from_ns_f64(config.costs.iec_hit_ns),
            iec_miss: Duration::from_ns_f64(config.costs.iec_miss_ns),
            requests: 0,
            remapped: 0,
            posted: 0,
            compat_passed: 0,
            blocked: 0,
            config,
        })
    }

    pub fn config(&self) -> &RemapConfig {
        &self.config
    }

    fn check_index(&self, index: u32) -> Result<usize, IommuError> {
        if index < self.config.table_entries {
            Ok(index as usize)
        } else {
            Err(IommuError::IrteIndexOutOfRange {
                index,
                table_entries: self.config.table_entries,
            })
        }
    }

    /// Software writes `IRTE[index]` in memory. A cached copy in the IEC stays stale
    /// until invalidated.
    pub fn set_irte(&mut self, index: u32, irte: Irte) -> Result<(), IommuError> {
        let i = self.check_index(index)?;
        self.table[i] = irte;
        Ok(())
    }

    /// Writes `IRTE[index]` and invalidates its IEC entry.
    pub fn modify_irte(&mut self, index: u32, irte: Irte) -> Result<(), IommuError> {
        self.set_irte(index, irte)?;
        self.iec.invalidate_index(index);
        Ok(())
    }

    /// `IRTE[index]` as it is in memory.
    pub fn irte(&self, index: u32) -> Result<Irte, IommuError> {
        Ok(self.table[self.check_index(index)?])
    }

    /// Index-selective interrupt entry cache invalidation. Returns whether the entry
    /// was cached.
    pub fn invalidate_iec_index(&mut self, index: u32) -> bool {
        self.iec.invalidate_index(index)
    }

    /// Global interrupt entry cache invalidation.
    pub fn invalidate_iec_all(&mut self) {
        self.iec.invalidate_all();
    }

    /// Whether table reads through IRTA_REG succeed (false models a bad table root:
    /// every IEC miss then faults with 0x23).
    pub fn set_table_root_valid(&mut self, valid: bool) {
        self.root_valid = valid;
    }

    pub fn iec(&self) -> &Iec {
        &self.iec
    }
    pub fn fault_log(&self) -> &FaultLog {
        &self.faults
    }
    pub fn fault_log_mut(&mut self) -> &mut FaultLog {
        &mut self.faults
    }

    pub fn counters(&self) -> RemapCounters {
        RemapCounters {
            requests: self.requests,
            remapped: self.remapped,
            posted: self.posted,
            compat_passed: self.compat_passed,
            blocked: self.blocked,
            iec: *self.iec.counters(),
            faults: *self.faults.counts(),
        }
    }

    /// Records a fault found while posting (0x27 descriptor access error, 0x28 reserved
    /// field in the descriptor), which the caller detects when it applies a
    /// [`RemapAction::Post`]. The interrupt is dropped; `fpd` is the entry's FPD bit.
    /// This does not change the request counters: the request already counted as
    /// posted, so a caller that balances the books subtracts these (they are in
    /// `counters().faults`).
    pub fn record_posting_fault(
        &mut self,
        now: SimTime,
        reason: FaultReason,
        source_id: u16,
        index: u32,
        fpd: bool,
    ) -> FaultDisposition {
        self.faults.record(
            FaultRecord {
                time: now,
                reason,
                source_id,
                index: Some(index),
            },
            fpd,
        )
    }

    fn block(
        &mut self,
        now: SimTime,
        cost: Duration,
        reason: FaultReason,
        source_id: u16,
        index: Option<u32>,
        fpd: bool,
    ) -> RemapOutcome {
        self.blocked += 1;
        let d = self.faults.record(
            FaultRecord {
                time: now,
                reason,
                source_id,
                index,
            },
            fpd,
        );
        RemapOutcome {
            cost,
            action: RemapAction::Blocked {
                reason,
                recorded: d == FaultDisposition::Recorded,
            },
        }
    }

    /// Processes one interrupt request written by the requester `source_id` (bus <<
    /// 8 | devfn) at `now`.
    pub fn remap(&mut self, now: SimTime, msg: &MsiMessage, source_id: u16) -> RemapOutcome {
        self.requests += 1;
        let mut cost = self.translate;
        let (index, reserved_set) = match decode(msg) {
            MsiRequest::NotInterrupt { .. } => {
                return self.block(
                    now,
                    cost,
                    FaultReason::RequestReservedField,
                    source_id,
                    None,
                    false,
                )
            }
            MsiRequest::Compatibility {
                dest_id,
                vector,
                dest_mode_logical,
                redirection_hint,
                delivery_mode,
                level_triggered,
                ..
            } => {
                if !self.config.compat_allowed || self.config.x2apic_mode {
                    return self.block(
                        now,
                        cost,
                        FaultReason::CompatFormatBlocked,
                        source_id,
                        None,
                        false,
                    );
                }
                self.compat_passed += 1;
                return RemapOutcome {
                    cost,
                    action: RemapAction::Deliver {
                        dest: ApicId(dest_id as u32),
                        vector,
                        level_triggered,
                        dest_mode_logical,
                        redirection_hint,
                        delivery_mode,
                    },
                };
            }
            MsiRequest::Remappable {
                index,
                reserved_set,
                ..
            } => (index, reserved_set),
        };
        if reserved_set {
            return self.block(
                now,
                cost,
                FaultReason::RequestReservedField,
                source_id,
                Some(index),
                false,
            );
        }
        if index >= self.config.table_entries {
            return self.block(
                now,
                cost,
                FaultReason::IndexBeyondTable,
                source_id,
                Some(index),
                false,
            );
        }

        let irte = match self.iec.lookup(index) {
            Some(e) => {
                cost += self.iec_hit;
                e
            }
            None => {
                cost += self.iec_miss;
                if !self.root_valid {
                    return self.block(
                        now,
                        cost,
                        FaultReason::TableRootInvalid,
                        source_id,
                        Some(index),
                        false,
                    );
                }
                let e = self.table[index as usize];
                if e.present() {
                    self.iec.fill(index, e);
                }
                e
            }
        };
        let fpd = irte.fpd();
        if !irte.present() {
            return self.block(
                now,
                cost,
                FaultReason::IrteNotPresent,
                source_id,
                Some(index),
                fpd,
            );
        }
        if irte.reserved_bits_set_in(self.config.x2apic_mode)
            || (irte.is_posted() && !self.config.posting_supported)
        {
            return self.block(
                now,
                cost,
                FaultReason::IrteReservedField,
                source_id,
                Some(index),
                fpd,
            );
        }
        if irte.source().accepts(source_id) != Some(true) {
            // `None` (SVT = 11b) was already reported as a reserved field above.
            return self.block(
                now,
                cost,
                FaultReason::SourceIdCheckFailed,
                source_id,
                Some(index),
                fpd,
            );
        }

        let action = match irte.format() {
            IrteFormat::Remapped(r) => {
                self.remapped += 1;
                let dest = if self.config.x2apic_mode {
                    r.dest
                } else {
                    (r.dest >> 8) & 0xff
                };
                RemapAction::Deliver {
                    dest: ApicId(dest),
                    vector: r.vector,
                    level_triggered: r.level_triggered,
                    dest_mode_logical: r.dest_mode_logical,
                    redirection_hint: r.redirection_hint,
                    delivery_mode: r.delivery_mode,
                }
            }
            IrteFormat::Posted(p) => {
                self.posted += 1;
                RemapAction::Post {
                    pda: p.pda,
                    vector: p.vector,
                    urg: p.urg,
                    index,
                    fpd: p.fpd,
                }
            }
        };
        RemapOutcome { cost, action }
    }
}

#[cfg(test)]
mod tests;
