//! The GICv3 Interrupt Translation Service (IHI 0069 chapter 5).
//!
//! A device raises an MSI by writing its EventID to GITS_TRANSLATER; the interconnect
//! supplies its DeviceID (on Arm, derived from the SMMU StreamID). The ITS looks the
//! DeviceID up in the device table, which points at that device's interrupt
//! translation table (ITT); the ITT maps the EventID to an LPI INTID and a collection
//! (ICID); the collection table maps the ICID to the target redistributor.
//! Software builds the tables with ITS commands (MAPD, MAPC, MAPTI, MAPI, MOVI,
//! DISCARD), here direct method calls.
//!
//! A translation that fails at any step drops the write (IHI 0069 5.3, the
//! interrupt-translation checks: DeviceID out of range, no valid device-table entry,
//! EventID past the ITT, no valid ITT entry, collection not mapped). The model reports
//! each as an [`ItsDropReason`] so the run's balance can account for it.
//!
//! The ITS caches translations (device + ITT entry); implementations keep such caches
//! coherent with their own command processing, so every command that changes a mapping
//! drops the affected cache entries.

use super::{check_cost, GicError, LPI_BASE};
use serde::{Deserialize, Serialize};
use sim_core::{CpuId, Duration, SimTime};
use std::collections::BTreeMap;

/// GITS_CTLR, offset 0x0000 of the ITS control page.
pub const GITS_CTLR: u64 = 0x0000;
/// GITS_TYPER, offset 0x0008.
pub const GITS_TYPER: u64 = 0x0008;
/// GITS_CBASER, offset 0x0080 (command queue base; queue not modelled).
pub const GITS_CBASER: u64 = 0x0080;
/// GITS_CWRITER, offset 0x0088.
pub const GITS_CWRITER: u64 = 0x0088;
/// GITS_CREADR, offset 0x0090.
pub const GITS_CREADR: u64 = 0x0090;
/// GITS_TRANSLATER, offset 0x10040 from the ITS base (in the translation register
/// page, 64 KB above the control page). The 32-bit value written is the EventID.
pub const GITS_TRANSLATER: u64 = 0x1_0040;

/// GITS_TYPER.Devbits, bits \[17:13\]: DeviceID bits minus one.
pub const GITS_TYPER_DEVBITS_SHIFT: u32 = 13;
/// GITS_TYPER.ID_bits, bits \[12:8\]: EventID bits minus one.
pub const GITS_TYPER_IDBITS_SHIFT: u32 = 8;
/// GITS_TYPER.HCC, bits \[31:24\]: collections held in hardware.
pub const GITS_TYPER_HCC_SHIFT: u32 = 24;
/// GITS_TYPER.Physical, bit 0: physical LPIs supported.
pub const GITS_TYPER_PHYSICAL: u64 = 1;

/// ITS command opcodes (IHI 0069 5.3), for reference and traces.
pub const ITS_CMD_MOVI: u8 = 0x01;
pub const ITS_CMD_INT: u8 = 0x03;
pub const ITS_CMD_CLEAR: u8 = 0x04;
pub const ITS_CMD_SYNC: u8 = 0x05;
pub const ITS_CMD_MAPD: u8 = 0x08;
pub const ITS_CMD_MAPC: u8 = 0x09;
pub const ITS_CMD_MAPTI: u8 = 0x0A;
pub const ITS_CMD_MAPI: u8 = 0x0B;
pub const ITS_CMD_INV: u8 = 0x0C;
pub const ITS_CMD_INVALL: u8 = 0x0D;
pub const ITS_CMD_DISCARD: u8 = 0x0F;

/// Why a write to GITS_TRANSLATER produced no LPI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ItsDropReason {
    /// DeviceID >= 2^(GITS_TYPER.Devbits + 1).
    DeviceIdOutOfRange,
    /// No valid device-table entry (no MAPD, or MAPD with V = 0).
    DeviceNotMapped,
    /// EventID beyond the device's ITT (MAPD Size).
    EventIdOutOfRange,
    /// No valid ITT entry for the EventID (no MAPTI/MAPI, or DISCARDed).
    EventNotMapped,
    /// The ITT entry's collection has no target (no MAPC, or MAPC with V = 0).
    CollectionNotMapped,
}

/// What a translation produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ItsResult {
    /// Set LPI `intid` pending in the redistributor of `cpu`.
    Lpi { intid: u32, cpu: CpuId },
    /// The write is dropped.
    Dropped(ItsDropReason),
}

/// Result of [`Its::translate`].
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ItsOutcome {
    /// Time the ITS spends on the write (cache lookup or table reads).
    pub cost: Duration,
    /// From the write reaching the ITS until the target redistributor has the LPI
    /// (`cost` plus the ITS-to-redistributor message); equal to `cost` for a drop.
    pub latency: Duration,
    pub result: ItsResult,
}

/// ITS latencies. Not published for any implementation: assumptions built from the
/// published DRAM latency.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ItsCosts {
    /// Translation found in the ITS cache. Nanoseconds. Default 10 ns: assumption.
    pub cache_hit_ns: f64,
    /// Cache miss: read the device-table entry, then the ITT entry it points at.
    /// Nanoseconds. Default 162 ns: 2 x 81 ns local DRAM idle latency (FD.io CSIT
    /// "Calibration Data - Cascadelake", Intel MLC, COST-SOURCES.md). Collections are
    /// held in the ITS (GITS_TYPER.HCC), so no third read.
    pub table_walk_ns: f64,
    /// The LPI message from the ITS to the target redistributor. Nanoseconds. Default
    /// 60 ns: assumption, about one cross-core line transfer on a mesh (55.6 ns, FD.io
    /// CSIT Cascade Lake MLC c2c).
    pub to_redistributor_ns: f64,
}

impl Default for ItsCosts {
    fn default() -> Self {
        ItsCosts {
            cache_hit_ns: 10.0,
            table_walk_ns: 162.0,
            to_redistributor_ns: 60.0,
        }
    }
}

impl ItsCosts {
    pub fn validate(&self) -> Result<(), GicError> {
        check_cost("its_costs", "cache_hit_ns", self.cache_hit_ns)?;
        check_cost("its_costs", "table_walk_ns", self.table_walk_ns)?;
        check_cost("its_costs", "to_redistributor_ns", self.to_redistributor_ns)
    }
}

/// What GITS_TYPER and GICD_TYPER would report, plus the cache size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ItsConfig {
    /// DeviceID bits, GITS_TYPER.Devbits + 1, 1..=32. Default 16: a PCIe requester ID.
    pub device_id_bits: u8,
    /// EventID bits, GITS_TYPER.ID_bits + 1, 1..=32. Default 16: assumption.
    pub event_id_bits: u8,
    /// INTID bits, GICD_TYPER.IDbits + 1, 14..=32 (LPIs need INTIDs >= 8192).
    /// Default 16: LPIs 8192..65535, assumption.
    pub intid_bits: u8,
    /// Collections (ICIDs 0..collections). Default 256: assumption, enough for one
    /// per CPU as Linux allocates them.
    pub collections: u16,
    /// Translation cache entries. Default 64: assumption (implementation defined).
    pub cache_entries: usize,
    /// Physical address of the ITS control page; GITS_TRANSLATER is at + 0x10040.
    /// Default 0x0808_0000: assumption (where QEMU's `virt` board puts its ITS).
    pub base: u64,
    pub costs: ItsCosts,
}

impl Default for ItsConfig {
    fn default() -> Self {
        ItsConfig {
            device_id_bits: 16,
            event_id_bits: 16,
            intid_bits: 16,
            collections: 256,
            cache_entries: 64,
            base: 0x0808_0000,
            costs: ItsCosts::default(),
        }
    }
}

impl ItsConfig {
    pub fn validate(&self) -> Result<(), GicError> {
        let range = |field, v: u8, lo: u8, allowed| {
            if (lo..=32).contains(&v) {
                Ok(())
            } else {
                Err(GicError::InvalidConfig {
                    field,
                    value: v as u64,
                    allowed,
                })
            }
        };
        range("device_id_bits", self.device_id_bits, 1, "1..=32")?;
        range("event_id_bits", self.event_id_bits, 1, "1..=32")?;
        range("intid_bits", self.intid_bits, 14, "14..=32")?;
        if self.collections == 0 {
            return Err(GicError::InvalidConfig {
                field: "collections",
                value: 0,
                allowed: "1..=65535",
            });
        }
        self.costs.validate()
    }

    /// Physical address a device writes its EventID to.
    pub fn translater_address(&self) -> u64 {
        self.base + GITS_TRANSLATER
    }

    /// The GITS_TYPER value this configuration reports.
    pub fn typer(&self) -> u64 {
        GITS_TYPER_PHYSICAL
            | ((self.device_id_bits - 1) as u64) << GITS_TYPER_DEVBITS_SHIFT
            | ((self.event_id_bits - 1) as u64) << GITS_TYPER_IDBITS_SHIFT
            | (self.collections.min(255) as u64) << GITS_TYPER_HCC_SHIFT
    }
}

/// Counters snapshot. `writes = translated + sum(dropped)`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ItsCounters {
    pub writes: u64,
    pub translated: u64,
    pub dropped: BTreeMap<ItsDropReason, u64>,
    pub cache_hits: u64,
    pub cache_misses: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Itte {
    intid: u32,
    icid: u16,
}

#[derive(Clone, Debug)]
struct Dte {
    itt_bits: u8,
    itt: BTreeMap<u32, Itte>,
}

/// One ITS.
#[derive(Clone, Debug)]
pub struct Its {
    config: ItsConfig,
    /// Cache hit, table walk, ITS-to-redistributor message.
    costs: (Duration, Duration, Duration),
    devices: BTreeMap<u32, Dte>,
    collections: Vec<Option<CpuId>>,
    /// (DeviceID, EventID) -> (ITT entry, last-use stamp), and its age index.
    cache: BTreeMap<(u32, u32), (Itte, u64)>,
    cache_age: BTreeMap<u64, (u32, u32)>,
    stamp: u64,
    counters: ItsCounters,
}

impl Its {
    pub fn new(config: ItsConfig) -> Result<Its, GicError> {
        config.validate()?;
        let c = &config.costs;
        let d = Duration::from_ns_f64;
        Ok(Its {
            costs: (
                d(c.cache_hit_ns),
                d(c.table_walk_ns),
                d(c.to_redistributor_ns),
            ),
            collections: vec![None; config.collections as usize],
            config,
            devices: BTreeMap::new(),
            cache: BTreeMap::new(),
            cache_age: BTreeMap::new(),
            stamp: 0,
            counters: ItsCounters::default(),
        })
    }

    pub fn config(&self) -> &ItsConfig {
        &self.config
    }
    pub fn counters(&self) -> &ItsCounters {
        &self.counters
    }

    fn check_device(&self, device_id: u32) -> Result<(), GicError> {
        let bits = self.config.device_id_bits;
        if (device_id as u64) >> bits != 0 {
            return Err(GicError::DeviceIdOutOfRange { device_id, bits });
        }
        Ok(())
    }

    fn check_icid(&self, icid: u16) -> Result<(), GicError> {
        if icid >= self.config.collections {
            return Err(GicError::IcidOutOfRange {
                icid,
                collections: self.config.collections,
            });
        }
        Ok(())
    }

    fn uncache(&mut self, device_id: u32, events: impl Iterator<Item = u32>) {
        for e in events {
            if let Some((_, age)) = self.cache.remove(&(device_id, e)) {
                self.cache_age.remove(&age);
            }
        }
    }

    fn uncache_device(&mut self, device_id: u32) {
        let keys: Vec<u32> = self
            .cache
            .range((device_id, 0)..=(device_id, u32::MAX))
            .map(|(k, _)| k.1)
            .collect();
        self.uncache(device_id, keys.into_iter());
    }

    /// MAPD: `Some(bits)` maps `device_id` with an ITT of 2^bits EventIDs (the
    /// command's Size field is bits - 1), replacing any previous ITT; `None` (V = 0)
    /// unmaps it.
    pub fn mapd(&mut self, device_id: u32, itt_bits: Option<u8>) -> Result<(), GicError> {
        self.check_device(device_id)?;
        self.uncache_device(device_id);
        match itt_bits {
            None => {
                self.devices.remove(&device_id);
            }
            Some(bits) => {
                if bits == 0 || bits > self.config.event_id_bits {
                    return Err(GicError::InvalidConfig {
                        field: "itt_bits",
                        value: bits as u64,
                        allowed: "1..=event_id_bits",
                    });
                }
                self.devices.insert(
                    device_id,
                    Dte {
                        itt_bits: bits,
                        itt: BTreeMap::new(),
                    },
                );
            }
        }
        Ok(())
    }

    /// MAPC: maps collection `icid` to the redistributor of `target` (`None`: V = 0).
    pub fn mapc(&mut self, icid: u16, target: Option<CpuId>) -> Result<(), GicError> {
        self.check_icid(icid)?;
        self.collections[icid as usize] = target;
        Ok(())
    }

    fn itt_slot(&mut self, device_id: u32, event_id: u32) -> Result<&mut Dte, GicError> {
        self.check_device(device_id)?;
        let dte = self
            .devices
            .get_mut(&device_id)
            .ok_or(GicError::DeviceNotMapped { device_id })?;
        if (event_id as u64) >> dte.itt_bits != 0 {
            return Err(GicError::EventIdOutOfRange {
                device_id,
                event_id,
                bits: dte.itt_bits,
            });
        }
        Ok(dte)
    }

    /// MAPTI: EventID `event_id` of `device_id` raises LPI `intid` in collection `icid`.
    pub fn mapti(
        &mut self,
        device_id: u32,
        event_id: u32,
        intid: u32,
        icid: u16,
    ) -> Result<(), GicError> {
        let id_bits = self.config.intid_bits;
        if intid < LPI_BASE || (intid as u64) >> id_bits != 0 {
            return Err(GicError::NotAnLpi { intid, id_bits });
        }
        self.check_icid(icid)?;
        self.itt_slot(device_id, event_id)?
            .itt
            .insert(event_id, Itte { intid, icid });
        self.uncache(device_id, std::iter::once(event_id));
        Ok(())
    }

    /// MAPI: MAPTI with the INTID equal to the EventID.
    pub fn mapi(&mut self, device_id: u32, event_id: u32, icid: u16) -> Result<(), GicError> {
        self.mapti(device_id, event_id, event_id, icid)
    }

    /// MOVI: moves an event to another collection. Returns whether it was mapped.
    pub fn movi(&mut self, device_id: u32, event_id: u32, icid: u16) -> Result<bool, GicError> {
        self.check_icid(icid)?;
        let moved = match self.itt_slot(device_id, event_id)?.itt.get_mut(&event_id) {
            Some(e) => {
                e.icid = icid;
                true
            }
            None => false,
        };
        self.uncache(device_id, std::iter::once(event_id));
        Ok(moved)
    }

    /// DISCARD: removes an event's mapping. Returns whether it was mapped.
    pub fn discard(&mut self, device_id: u32, event_id: u32) -> Result<bool, GicError> {
        let removed = self
            .itt_slot(device_id, event_id)?
            .itt
            .remove(&event_id)
            .is_some();
        self.uncache(device_id, std::iter::once(event_id));
        Ok(removed)
    }

    fn drop_with(&mut self, reason: ItsDropReason, cost: Duration) -> ItsOutcome {
        *self.counters.dropped.entry(reason).or_insert(0) += 1;
        ItsOutcome {
            cost,
            latency: cost,
            result: ItsResult::Dropped(reason),
        }
    }

    /// A write of `event_id` to GITS_TRANSLATER from `device_id`, arriving at `now`.
    pub fn translate(&mut self, _now: SimTime, device_id: u32, event_id: u32) -> ItsOutcome {
        let (hit, walk, to_redist) = self.costs;
        self.counters.writes += 1;
        if (device_id as u64) >> self.config.device_id_bits != 0 {
            return self.drop_with(ItsDropReason::DeviceIdOutOfRange, Duration::ZERO);
        }
        self.stamp += 1;
        let stamp = self.stamp;
        let key = (device_id, event_id);
        let (itte, cost) = match self.cache.get_mut(&key) {
            Some((itte, age)) => {
                let old = std::mem::replace(age, stamp);
                self.cache_age.remove(&old);
                self.cache_age.insert(stamp, key);
                self.counters.cache_hits += 1;
                (*itte, hit)
            }
            None => {
                self.counters.cache_misses += 1;
                let cost = walk;
                let Some(dte) = self.devices.get(&device_id) else {
                    return self.drop_with(ItsDropReason::DeviceNotMapped, cost);
                };
                if (event_id as u64) >> dte.itt_bits != 0 {
                    return self.drop_with(ItsDropReason::EventIdOutOfRange, cost);
                }
                let Some(itte) = dte.itt.get(&event_id).copied() else {
                    return self.drop_with(ItsDropReason::EventNotMapped, cost);
                };
                // With no cache entries the new one is its own victim.
                self.cache.insert(key, (itte, stamp));
                self.cache_age.insert(stamp, key);
                if self.cache.len() > self.config.cache_entries {
                    let (_, victim) = self.cache_age.pop_first().expect("non-empty");
                    self.cache.remove(&victim);
                }
                (itte, cost)
            }
        };
        let Some(cpu) = self.collections[itte.icid as usize] else {
            return self.drop_with(ItsDropReason::CollectionNotMapped, cost);
        };
        self.counters.translated += 1;
        ItsOutcome {
            cost,
            latency: cost + to_redist,
            result: ItsResult::Lpi {
                intid: itte.intid,
                cpu,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn its() -> Its {
        let mut its = Its::new(ItsConfig {
            cache_entries: 2,
            ..ItsConfig::default()
        })
        .unwrap();
        its.mapd(1, Some(2)).unwrap();
        its.mapc(0, Some(CpuId(0))).unwrap();
        its.mapti(1, 0, 8192, 0).unwrap();
        its
    }

    #[test]
    fn every_drop_reason_in_order() {
        let mut its = its();
        let t = |its: &mut Its, dev, ev| its.translate(SimTime::ZERO, dev, ev).result;
        use ItsDropReason::*;
        assert_eq!(
            t(&mut its, 1 << 16, 0),
            ItsResult::Dropped(DeviceIdOutOfRange)
        );
        assert_eq!(t(&mut its, 2, 0), ItsResult::Dropped(DeviceNotMapped));
        assert_eq!(t(&mut its, 1, 4), ItsResult::Dropped(EventIdOutOfRange));
        assert_eq!(t(&mut its, 1, 3), ItsResult::Dropped(EventNotMapped));
        its.mapti(1, 1, 8193, 5).unwrap();
        assert_eq!(t(&mut its, 1, 1), ItsResult::Dropped(CollectionNotMapped));
        assert_eq!(
            t(&mut its, 1, 0),
            ItsResult::Lpi {
                intid: 8192,
                cpu: CpuId(0)
            }
        );
        let c = its.counters();
        assert_eq!(c.writes, c.translated + c.dropped.values().sum::<u64>());
        assert_eq!(c.dropped.len(), 5);
    }

    #[test]
    fn commands_keep_the_cache_coherent() {
        let mut its = its();
        let _ = its.translate(SimTime::ZERO, 1, 0);
        its.mapc(1, Some(CpuId(3))).unwrap();
        assert!(its.movi(1, 0, 1).unwrap());
        assert_eq!(
            its.translate(SimTime::ZERO, 1, 0).result,
            ItsResult::Lpi {
                intid: 8192,
                cpu: CpuId(3)
            }
        );
        assert!(its.discard(1, 0).unwrap());
        assert_eq!(
            its.translate(SimTime::ZERO, 1, 0).result,
            ItsResult::Dropped(ItsDropReason::EventNotMapped)
        );
        its.mapd(1, None).unwrap();
        assert_eq!(
            its.translate(SimTime::ZERO, 1, 0).result,
            ItsResult::Dropped(ItsDropReason::DeviceNotMapped)
        );
    }

    #[test]
    fn misuse_is_typed_and_typer_encodes_the_sizes() {
        let mut its = its();
        assert!(matches!(
            its.mapti(1, 0, 100, 0),
            Err(GicError::NotAnLpi { intid: 100, .. })
        ));
        assert!(matches!(
            its.mapti(9, 0, 8192, 0),
            Err(GicError::DeviceNotMapped { device_id: 9 })
        ));
        assert!(matches!(
            its.mapti(1, 4, 8192, 0),
            Err(GicError::EventIdOutOfRange { .. })
        ));
        assert!(matches!(
            its.mapc(256, None),
            Err(GicError::IcidOutOfRange { .. })
        ));
        assert!(matches!(
            its.mapd(1 << 16, Some(1)),
            Err(GicError::DeviceIdOutOfRange { .. })
        ));
        let cfg = ItsConfig::default();
        assert_eq!((cfg.typer() >> 13) & 0x1f, 15);
        assert_eq!(cfg.translater_address(), 0x0809_0040);
        let bad = ItsConfig {
            costs: ItsCosts {
                cache_hit_ns: -1.0,
                ..ItsCosts::default()
            },
            ..ItsConfig::default()
        };
        assert!(matches!(
            bad.validate(),
            Err(GicError::InvalidCost {
                field: "cache_hit_ns",
                ..
            })
        ));
    }

    /// GICv3 12.19.19 (GITS_TYPER): Physical (bit 0), ID_bits (12:8) and Devbits
    /// (17:13) as the number of bits minus one, HCC (31:24) saturating at 255.
    #[test]
    fn typer_fields_by_hand() {
        let cfg = ItsConfig {
            device_id_bits: 20,
            event_id_bits: 10,
            collections: 300,
            ..ItsConfig::default()
        };
        assert_eq!(cfg.typer(), 0xff02_6901);
        let cfg = ItsConfig {
            device_id_bits: 1,
            event_id_bits: 32,
            collections: 16,
            ..ItsConfig::default()
        };
        assert_eq!(cfg.typer(), 0x1000_1f01);
        assert_eq!(Its::new(cfg.clone()).unwrap().config(), &cfg);
    }

    #[test]
    fn itt_sizes_from_one_bit_to_event_id_bits() {
        let mut its = its();
        let max = its.config().event_id_bits;
        assert!(its.mapd(2, Some(max)).is_ok());
        assert!(its.mapd(3, Some(1)).is_ok());
        for bad in [0, max + 1] {
            assert!(
                matches!(
                    its.mapd(4, Some(bad)),
                    Err(GicError::InvalidConfig {
                        field: "itt_bits",
                        ..
                    })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn mapi_raises_the_lpi_of_the_event_number() {
        let mut its = its();
        its.mapd(7, Some(14)).unwrap();
        its.mapi(7, 8200, 0).unwrap();
        assert_eq!(
            its.translate(SimTime::ZERO, 7, 8200).result,
            ItsResult::Lpi {
                intid: 8200,
                cpu: CpuId(0)
            }
        );
        assert!(matches!(
            its.mapi(7, 5, 0),
            Err(GicError::NotAnLpi { intid: 5, .. })
        ));
    }

    /// A MAPD that replaces a device's ITT drops its cached translations with it.
    #[test]
    fn remapping_a_device_forgets_its_cached_translations() {
        let mut its = its();
        let _ = its.translate(SimTime::ZERO, 1, 0);
        its.mapd(1, Some(2)).unwrap();
        assert_eq!(
            its.translate(SimTime::ZERO, 1, 0).result,
            ItsResult::Dropped(ItsDropReason::EventNotMapped)
        );
    }

    /// Each write is counted once, as a hit or a miss; a cache of two entries holds two
    /// translations and evicts the least recently used for a third.
    #[test]
    fn hits_misses_and_a_two_entry_cache() {
        let mut its = its();
        its.mapti(1, 1, 8193, 0).unwrap();
        its.mapti(1, 2, 8194, 0).unwrap();
        let mut t = |ev| its.translate(SimTime::ZERO, 1, ev).result;
        for ev in [0, 1, 0, 1] {
            assert!(matches!(t(ev), ItsResult::Lpi { .. }));
        }
        let _ = t(2); // evicts event 0, the least recently used
        let _ = t(1);
        let _ = t(0);
        let c = its.counters();
        assert_eq!((c.writes, c.translated), (7, 7));
        assert_eq!((c.cache_misses, c.cache_hits), (4, 3));
        let _ = its.translate(SimTime::ZERO, 1, 3);
        let _ = its.translate(SimTime::ZERO, 1, 3);
        let c = its.counters();
        assert_eq!(c.dropped[&ItsDropReason::EventNotMapped], 2);
        assert_eq!((c.writes, c.cache_misses), (9, 6));
    }

    #[test]
    fn without_a_cache_every_write_walks_the_tables() {
        let mut its = Its::new(ItsConfig {
            cache_entries: 0,
            ..ItsConfig::default()
        })
        .unwrap();
        its.mapd(1, Some(2)).unwrap();
        its.mapc(0, Some(CpuId(0))).unwrap();
        its.mapti(1, 0, 8192, 0).unwrap();
        for _ in 0..3 {
            assert!(matches!(
                its.translate(SimTime::ZERO, 1, 0).result,
                ItsResult::Lpi { .. }
            ));
        }
        assert_eq!(
            (its.counters().cache_misses, its.counters().cache_hits),
            (3, 0)
        );
    }
}
