//! Interrupt command register (x2APIC), IPI messages and destination resolution.
//!
//! Intel SDM Vol. 3A: 11.6.1 (ICR fields), Table 11-3 (valid ICR combinations for
//! Pentium 4 and later), 11.12.9 (ICR in x2APIC mode: one 64-bit MSR write, 32-bit
//! destination, no delivery-status bit), 11.12.10 (logical destination in x2APIC
//! cluster mode), 11.12.11 (SELF IPI).
//!
//! Not modelled: xAPIC flat/cluster logical modes (8-bit LDR and DFR); lowest-priority
//! IPIs (delivery mode 001 is reserved in the x2APIC ICR); the focus-processor check;
//! per-hop bus arbitration.

use crate::ApicError;
use sim_core::{ApicId, Vector};

/// ICR bits 7:0: vector.
pub const ICR_VECTOR_MASK: u64 = 0xff;
/// ICR bits 10:8: delivery mode.
pub const ICR_DELIVERY_MODE_SHIFT: u32 = 8;
pub const ICR_DELIVERY_MODE_MASK: u64 = 0x7 << ICR_DELIVERY_MODE_SHIFT;
/// ICR bit 11: destination mode (0 physical, 1 logical).
pub const ICR_DEST_LOGICAL: u64 = 1 << 11;
/// ICR bit 12: delivery status in xAPIC mode; ignored on WRMSR in x2APIC mode.
pub const ICR_DELIVERY_STATUS: u64 = 0x1000;
/// ICR bit 14: level (0 de-assert, 1 assert).
pub const ICR_LEVEL_ASSERT: u64 = 1 << 14;
/// ICR bit 15: trigger mode (0 edge, 1 level).
pub const ICR_TRIGGER_LEVEL: u64 = 1 << 15;
/// ICR bits 19:18: destination shorthand.
pub const ICR_SHORTHAND_SHIFT: u32 = 18;
pub const ICR_SHORTHAND_MASK: u64 = 0x3 << ICR_SHORTHAND_SHIFT;
/// ICR bits 63:32: destination (x2APIC ID, or cluster/bitmap in logical mode).
pub const ICR_DEST_SHIFT: u32 = 32;
/// Bits that must be zero in an x2APIC ICR write (13, 17:16, 31:20); a non-zero write
/// raises #GP (SDM 11.12.1.3 reserved-bit checking).
pub const ICR_RESERVED_X2APIC: u64 = 0xfff3_2000;

/// The destination that means "every APIC" in both physical and logical x2APIC mode.
pub const BROADCAST_DEST: u32 = 0xffff_ffff;

/// Delivery mode (ICR bits 10:8, also LVT, IOAPIC RTE and MSI data bits 10:8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeliveryMode {
    Fixed,
    LowestPriority,
    Smi,
    Nmi,
    Init,
    StartUp,
    ExtInt,
}

impl DeliveryMode {
    /// Decodes the 3-bit field; `None` for the reserved encodings 011 and 110/111 as
    /// the caller's context defines (011 is always reserved).
    pub fn from_bits(bits: u8) -> Option<DeliveryMode> {
        match bits & 0x7 {
            0b000 => Some(DeliveryMode::Fixed),
            0b001 => Some(DeliveryMode::LowestPriority),
            0b010 => Some(DeliveryMode::Smi),
            0b100 => Some(DeliveryMode::Nmi),
            0b101 => Some(DeliveryMode::Init),
            0b110 => Some(DeliveryMode::StartUp),
            0b111 => Some(DeliveryMode::ExtInt),
            _ => None,
        }
    }
    pub fn bits(self) -> u8 {
        match self {
            DeliveryMode::Fixed => 0b000,
            DeliveryMode::LowestPriority => 0b001,
            DeliveryMode::Smi => 0b010,
            DeliveryMode::Nmi => 0b100,
            DeliveryMode::Init => 0b101,
            DeliveryMode::StartUp => 0b110,
            DeliveryMode::ExtInt => 0b111,
        }
    }
}

/// Destination mode (ICR bit 11, RTE bit 11).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum DestMode {
    #[default]
    Physical,
    /// x2APIC cluster mode: destination = (cluster << 16) | 16-bit member bitmap.
    Logical,
}

/// Trigger mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum TriggerMode {
    #[default]
    Edge,
    Level,
}

/// Destination shorthand (ICR bits 19:18).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Shorthand {
    #[default]
    None,
    SelfOnly,
    AllIncludingSelf,
    AllExcludingSelf,
}

impl Shorthand {
    fn from_bits(bits: u8) -> Shorthand {
        match bits & 0x3 {
            0 => Shorthand::None,
            1 => Shorthand::SelfOnly,
            2 => Shorthand::AllIncludingSelf,
            _ => Shorthand::AllExcludingSelf,
        }
    }
    fn bits(self) -> u64 {
        match self {
            Shorthand::None => 0,
            Shorthand::SelfOnly => 1,
            Shorthand::AllIncludingSelf => 2,
            Shorthand::AllExcludingSelf => 3,
        }
    }
}

/// The 64-bit x2APIC ICR as a bitfield.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct Icr(pub u64);

impl Icr {
    pub fn vector(self) -> Vector {
        Vector((self.0 & ICR_VECTOR_MASK) as u8)
    }
    /// `None` for the reserved encoding 011.
    pub fn delivery_mode(self) -> Option<DeliveryMode> {
        DeliveryMode::from_bits(
            ((self.0 & ICR_DELIVERY_MODE_MASK) >> ICR_DELIVERY_MODE_SHIFT) as u8,
        )
    }
    /// The raw 3-bit delivery-mode field.
    pub fn delivery_mode_bits(self) -> u8 {
        ((self.0 & ICR_DELIVERY_MODE_MASK) >> ICR_DELIVERY_MODE_SHIFT) as u8
    }
    pub fn dest_mode(self) -> DestMode {
        if self.0 & ICR_DEST_LOGICAL != 0 {
            DestMode::Logical
        } else {
            DestMode::Physical
        }
    }
    pub fn level_assert(self) -> bool {
        self.0 & ICR_LEVEL_ASSERT != 0
    }
    pub fn trigger(self) -> TriggerMode {
        if self.0 & ICR_TRIGGER_LEVEL != 0 {
            TriggerMode::Level
        } else {
            TriggerMode::Edge
        }
    }
    pub fn shorthand(self) -> Shorthand {
        Shorthand::from_bits(((self.0 & ICR_SHORTHAND_MASK) >> ICR_SHORTHAND_SHIFT) as u8)
    }
    pub fn destination(self) -> u32 {
        (self.0 >> ICR_DEST_SHIFT) as u32
    }
    /// Bits a WRMSR must leave zero.
    pub fn reserved_bits(self) -> u64 {
        self.0 & ICR_RESERVED_X2APIC
    }

    /// Encodes the fields of an ICR write (level is set to "assert", as software does
    /// for every mode but INIT de-assert).
    pub fn encode(
        vector: Vector,
        mode: DeliveryMode,
        dest_mode: DestMode,
        trigger: TriggerMode,
        shorthand: Shorthand,
        destination: u32,
    ) -> Icr {
        let mut v = vector.0 as u64
            | (mode.bits() as u64) << ICR_DELIVERY_MODE_SHIFT
            | ICR_LEVEL_ASSERT
            | shorthand.bits() << ICR_SHORTHAND_SHIFT
            | (destination as u64) << ICR_DEST_SHIFT;
        if dest_mode == DestMode::Logical {
            v |= ICR_DEST_LOGICAL;
        }
        if trigger == TriggerMode::Level {
            v |= ICR_TRIGGER_LEVEL;
        }
        Icr(v)
    }
}

/// An IPI as it leaves the sending APIC (after the checks of Table 11-3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpiMessage {
    /// Ignored by the receiver for NMI, INIT and SMI; the start page for SIPI.
    pub vector: Vector,
    pub mode: DeliveryMode,
    pub dest_mode: DestMode,
    /// Always [`TriggerMode::Edge`] for IPIs sent from an x2APIC: the APIC overrides a
    /// level trigger to edge (Table 11-3 note 2).
    pub trigger: TriggerMode,
    pub shorthand: Shorthand,
    /// x2APIC ID (physical) or cluster/bitmap (logical); ignored with a shorthand.
    pub destination: u32,
    /// The sender; needed to resolve `SelfOnly` and `AllExcludingSelf`.
    pub source: ApicId,
}

impl IpiMessage {
    /// A fixed, edge, physical IPI from `source` to `dest`: the common case.
    pub fn fixed(source: ApicId, dest: ApicId, vector: Vector) -> IpiMessage {
        IpiMessage {
            vector,
            mode: DeliveryMode::Fixed,
            dest_mode: DestMode::Physical,
            trigger: TriggerMode::Edge,
            shorthand: Shorthand::None,
            destination: dest.0,
            source,
        }
    }
}

/// Why an ICR write sent nothing. Every such write is reported as an effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpiDropReason {
    /// Fixed IPI with a vector 0-15: ESR "send illegal vector" (bit 5) is logged.
    IllegalVector,
    /// Delivery mode 001 (lowest priority) is reserved in the x2APIC ICR: the APIC
    /// logs ESR "redirectable IPI" (bit 4), as the SDM says for APICs that cannot send
    /// lowest-priority IPIs (11.5.3).
    LowestPriorityUnsupported,
    /// Delivery mode 011 or 111 (reserved). Assumption: nothing is sent and no ESR bit
    /// is set; the SDM does not define the behaviour.
    ReservedDeliveryMode,
    /// A combination Table 11-3 marks invalid (e.g. NMI with the "self" shorthand).
    /// Assumption: nothing is sent; the SDM does not define the behaviour.
    InvalidCombination,
    /// INIT level de-assert (INIT, level trigger, level bit 0): not supported since
    /// the Pentium 4; ignored. Linux still sends one after INIT when booting an AP.
    InitDeassert,
}

/// Turns an ICR value into the IPI the APIC sends, applying Table 11-3 of the SDM
/// (Pentium 4 and later). `Err` carries why nothing is sent; ESR logging is the
/// caller's (the register code's) job.
pub fn ipi_from_icr(icr: Icr, source: ApicId) -> Result<IpiMessage, IpiDropReason> {
    let Some(mode) = icr.delivery_mode() else {
        return Err(IpiDropReason::ReservedDeliveryMode);
    };
    let shorthand = icr.shorthand();
    match mode {
        DeliveryMode::ExtInt => return Err(IpiDropReason::ReservedDeliveryMode),
        DeliveryMode::LowestPriority => return Err(IpiDropReason::LowestPriorityUnsupported),
        DeliveryMode::Init if icr.trigger() == TriggerMode::Level && !icr.level_assert() => {
            return Err(IpiDropReason::InitDeassert)
        }
        _ => {}
    }
    let valid = match shorthand {
        Shorthand::None | Shorthand::AllExcludingSelf => true,
        Shorthand::SelfOnly | Shorthand::AllIncludingSelf => mode == DeliveryMode::Fixed,
    };
    if !valid {
        return Err(IpiDropReason::InvalidCombination);
    }
    if mode == DeliveryMode::Fixed && icr.vector().0 < crate::lapic::FIRST_LEGAL_VECTOR {
        return Err(IpiDropReason::IllegalVector);
    }
    Ok(IpiMessage {
        vector: icr.vector(),
        mode,
        dest_mode: icr.dest_mode(),
        trigger: TriggerMode::Edge,
        shorthand,
        destination: icr.destination(),
        source,
    })
}

/// x2APIC cluster-mode logical ID (SDM 11.12.10.2): cluster = `ID[19:4]` in bits 31:16,
/// and bit `ID[3:0]` set in bits 15:0.
pub fn logical_id(id: ApicId) -> u32 {
    (((id.0 >> 4) & 0xffff) << 16) | (1 << (id.0 & 0xf))
}

/// The set of APIC IDs of a system, indexed for IPI destination resolution.
///
/// Physical lookups are a binary search; a logical (cluster) lookup finds the
/// cluster's members (at most 16 of them) with a binary search and tests their bits.
/// Only broadcasts and the "all" shorthands visit every APIC, since they target all.
/// Results are in ascending APIC ID order, so resolution is deterministic.
#[derive(Clone, Debug)]
pub struct ApicTopology {
    /// Sorted ascending.
    ids: Vec<ApicId>,
    /// (cluster, ID) for every APIC, sorted by cluster then ID.
    by_cluster: Vec<(u16, ApicId)>,
}

impl ApicTopology {
    /// Builds the index. Rejects duplicates and the reserved ID 0xFFFF_FFFF (SDM
    /// 11.12.1: it means broadcast and cannot be assigned).
    pub fn new(ids: impl IntoIterator<Item = ApicId>) -> Result<ApicTopology, ApicError> {
        let mut ids: Vec<ApicId> = ids.into_iter().collect();
        ids.sort_unstable();
        if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(ApicError::DuplicateApicId { id: w[0].0 });
        }
        if ids.last() == Some(&ApicId(BROADCAST_DEST)) {
            return Err(ApicError::ReservedApicId { id: BROADCAST_DEST });
        }
        let mut by_cluster: Vec<(u16, ApicId)> = ids
            .iter()
            .map(|&id| (((id.0 >> 4) & 0xffff) as u16, id))
            .collect();
        by_cluster.sort_unstable();
        Ok(ApicTopology { ids, by_cluster })
    }

    pub fn ids(&self) -> &[ApicId] {
        &self.ids
    }
    pub fn contains(&self, id: ApicId) -> bool {
        self.ids.binary_search(&id).is_ok()
    }

    /// APICs addressed by (destination mode, destination), without shorthand; appended
    /// to `out` in ascending ID order. This is also how an MSI or IOAPIC message in
    /// x2APIC format is routed.
    pub fn resolve_dest_into(&self, mode: DestMode, dest: u32, out: &mut Vec<ApicId>) {
        if dest == BROADCAST_DEST {
            out.extend_from_slice(&self.ids);
            return;
        }
        match mode {
            DestMode::Physical => {
                if self.contains(ApicId(dest)) {
                    out.push(ApicId(dest));
                }
            }
            DestMode::Logical => {
                let cluster = (dest >> 16) as u16;
                let bitmap = dest & 0xffff;
                let start = self.by_cluster.partition_point(|&(c, _)| c < cluster);
                let members = self.by_cluster[start..]
                    .iter()
                    .take_while(|&&(c, _)| c == cluster)
                    .filter(|&&(_, id)| bitmap & (1 << (id.0 & 0xf)) != 0)
                    .map(|&(_, id)| id);
                out.extend(members);
            }
        }
    }

    /// APICs that receive `msg`, appended to `out` in ascending ID order. For the
    /// "self" shorthands the sender is included even if the topology lacks it (the
    /// APIC delivers a self IPI internally).
    pub fn resolve_into(&self, msg: &IpiMessage, out: &mut Vec<ApicId>) {
        match msg.shorthand {
            Shorthand::None => self.resolve_dest_into(msg.dest_mode, msg.destination, out),
            Shorthand::SelfOnly => out.push(msg.source),
            Shorthand::AllIncludingSelf => out.extend_from_slice(&self.ids),
            Shorthand::AllExcludingSelf => {
                out.extend(self.ids.iter().copied().filter(|&id| id != msg.source))
            }
        }
    }

    /// Allocating convenience form of [`resolve_into`](Self::resolve_into).
    pub fn resolve(&self, msg: &IpiMessage) -> Vec<ApicId> {
        let mut out = Vec::new();
        self.resolve_into(msg, &mut out);
        out
    }
}

/// Lowest-priority arbitration for messages (IOAPIC, MSI) that carry that delivery
/// mode: the candidate with the lowest processor priority wins, ties going to the
/// lowest APIC ID. Assumption: the SDM leaves the choice to the chipset in x2APIC
/// systems (11.6.2.4); lowest PPR then lowest ID is deterministic and close to the
/// original arbitration rule.
pub fn pick_lowest_priority(candidates: impl IntoIterator<Item = (ApicId, u8)>) -> Option<ApicId> {
    candidates
        .into_iter()
        .min_by_key(|&(id, ppr)| (ppr, id))
        .map(|(id, _)| id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn icr_is_one_u64() {
        assert_eq!(std::mem::size_of::<Icr>(), 8);
    }

    #[test]
    fn icr_encode_decode_roundtrip() {
        let icr = Icr::encode(
            Vector(0xfd),
            DeliveryMode::Fixed,
            DestMode::Logical,
            TriggerMode::Edge,
            Shorthand::None,
            0x0003_0005,
        );
        assert_eq!(icr.0, 0x0003_0005_0000_48fd);
        assert_eq!(icr.vector(), Vector(0xfd));
        assert_eq!(icr.delivery_mode(), Some(DeliveryMode::Fixed));
        assert_eq!(icr.dest_mode(), DestMode::Logical);
        assert_eq!(icr.trigger(), TriggerMode::Edge);
        assert_eq!(icr.shorthand(), Shorthand::None);
        assert_eq!(icr.destination(), 0x0003_0005);
        assert!(icr.level_assert());
        assert_eq!(icr.reserved_bits(), 0);
        // Every mode and shorthand survives the round trip.
        for mode in [
            DeliveryMode::Nmi,
            DeliveryMode::Init,
            DeliveryMode::StartUp,
            DeliveryMode::Smi,
        ] {
            for sh in [
                Shorthand::SelfOnly,
                Shorthand::AllIncludingSelf,
                Shorthand::AllExcludingSelf,
            ] {
                let i = Icr::encode(
                    Vector(9),
                    mode,
                    DestMode::Physical,
                    TriggerMode::Level,
                    sh,
                    7,
                );
                assert_eq!(
                    (i.delivery_mode(), i.shorthand(), i.trigger()),
                    (Some(mode), sh, TriggerMode::Level)
                );
            }
        }
        assert_eq!(Icr(3 << 8).delivery_mode(), None);
        assert_eq!(Icr(0).dest_mode(), DestMode::Physical);
        assert_eq!(Icr(!(1 << 11)).dest_mode(), DestMode::Physical);
        assert_eq!(Icr(1 << 11).dest_mode(), DestMode::Logical);
    }

    /// SDM 11.6.1: the 3-bit field decodes to the seven modes it names; 011 is
    /// reserved. Every other bit of the ICR leaves the decoding alone.
    #[test]
    fn every_delivery_mode_encoding() {
        let modes = [
            (0b000, Some(DeliveryMode::Fixed)),
            (0b001, Some(DeliveryMode::LowestPriority)),
            (0b010, Some(DeliveryMode::Smi)),
            (0b011, None),
            (0b100, Some(DeliveryMode::Nmi)),
            (0b101, Some(DeliveryMode::Init)),
            (0b110, Some(DeliveryMode::StartUp)),
            (0b111, Some(DeliveryMode::ExtInt)),
        ];
        for (bits, mode) in modes {
            assert_eq!(DeliveryMode::from_bits(bits), mode, "{bits:03b}");
            assert_eq!(
                DeliveryMode::from_bits(bits | 0xf8),
                mode,
                "only bits 2:0 count"
            );
            if let Some(m) = mode {
                assert_eq!(m.bits(), bits);
            }
            let icr = Icr(((bits as u64) << 8) | 0xffff_ffff_0000_f8ff);
            assert_eq!(icr.delivery_mode_bits(), bits);
            assert_eq!(icr.delivery_mode(), mode);
        }
    }

    /// SDM 11.12.1.3 and 11.12.9: bits 13, 17:16 and 31:20 are reserved in the x2APIC
    /// ICR; the vector, mode, destination mode, delivery status (12, ignored), level,
    /// trigger, shorthand and destination bits are not.
    #[test]
    fn reserved_bits_of_the_x2apic_icr() {
        for bit in (13..14).chain(16..18).chain(20..32) {
            assert_eq!(Icr(1 << bit).reserved_bits(), 1 << bit, "bit {bit}");
        }
        for bit in (0..13).chain(14..16).chain(18..20).chain(32..64) {
            assert_eq!(Icr(1 << bit).reserved_bits(), 0, "bit {bit}");
        }
        assert_eq!(ICR_DELIVERY_STATUS, 1 << 12);
    }

    #[test]
    fn table_11_3_checks() {
        let src = ApicId(1);
        let mk = |v, m, sh| Icr::encode(Vector(v), m, DestMode::Physical, TriggerMode::Edge, sh, 2);
        assert!(ipi_from_icr(mk(0x40, DeliveryMode::Fixed, Shorthand::SelfOnly), src).is_ok());
        assert_eq!(
            ipi_from_icr(mk(0, DeliveryMode::Nmi, Shorthand::SelfOnly), src),
            Err(IpiDropReason::InvalidCombination)
        );
        assert_eq!(
            ipi_from_icr(mk(0, DeliveryMode::Init, Shorthand::AllIncludingSelf), src),
            Err(IpiDropReason::InvalidCombination)
        );
        assert!(ipi_from_icr(
            mk(0x08, DeliveryMode::StartUp, Shorthand::AllExcludingSelf),
            src
        )
        .is_ok());
        assert_eq!(
            ipi_from_icr(mk(0x0f, DeliveryMode::Fixed, Shorthand::None), src),
            Err(IpiDropReason::IllegalVector)
        );
        // NMI ignores the vector, so vector 0 is fine.
        assert!(ipi_from_icr(mk(0, DeliveryMode::Nmi, Shorthand::None), src).is_ok());
        assert_eq!(
            ipi_from_icr(mk(0x40, DeliveryMode::LowestPriority, Shorthand::None), src),
            Err(IpiDropReason::LowestPriorityUnsupported)
        );
        assert_eq!(
            ipi_from_icr(Icr(0x40 | 3 << 8), src),
            Err(IpiDropReason::ReservedDeliveryMode)
        );
        // Level trigger is overridden to edge.
        let lvl = Icr::encode(
            Vector(0x40),
            DeliveryMode::Fixed,
            DestMode::Physical,
            TriggerMode::Level,
            Shorthand::None,
            2,
        );
        assert_eq!(ipi_from_icr(lvl, src).unwrap().trigger, TriggerMode::Edge);
        // INIT de-assert (level trigger, level bit clear) is dropped; INIT assert sent.
        let deassert = Icr(5 << 8 | ICR_TRIGGER_LEVEL | 2 << 32);
        assert_eq!(
            ipi_from_icr(deassert, src),
            Err(IpiDropReason::InitDeassert)
        );
        let assert = Icr(5 << 8 | ICR_TRIGGER_LEVEL | ICR_LEVEL_ASSERT | 2 << 32);
        assert_eq!(ipi_from_icr(assert, src).unwrap().mode, DeliveryMode::Init);
    }

    #[test]
    fn extint_and_vectors_below_16() {
        let src = ApicId(1);
        let mk = |v, m| {
            Icr::encode(
                Vector(v),
                m,
                DestMode::Physical,
                TriggerMode::Edge,
                Shorthand::None,
                2,
            )
        };
        assert_eq!(
            ipi_from_icr(mk(0x40, DeliveryMode::ExtInt), src),
            Err(IpiDropReason::ReservedDeliveryMode),
            "ExtINT is not an IPI mode (Table 11-3)"
        );
        assert_eq!(
            ipi_from_icr(mk(15, DeliveryMode::Fixed), src),
            Err(IpiDropReason::IllegalVector)
        );
        assert_eq!(
            ipi_from_icr(mk(16, DeliveryMode::Fixed), src).map(|m| m.vector),
            Ok(Vector(16))
        );
        assert_eq!(
            ipi_from_icr(mk(3, DeliveryMode::Nmi), src).map(|m| m.mode),
            Ok(DeliveryMode::Nmi),
            "NMI ignores the vector"
        );
    }

    #[test]
    fn logical_id_follows_cluster_formula() {
        assert_eq!(logical_id(ApicId(0)), 0x0000_0001);
        assert_eq!(logical_id(ApicId(0x13)), 0x0001_0008);
        assert_eq!(logical_id(ApicId(0x2f)), 0x0002_8000);
    }

    fn topo() -> ApicTopology {
        // Two clusters: 0 (ids 0..4) and 1 (ids 16, 18), plus cluster 3 (id 0x30).
        ApicTopology::new([0, 1, 2, 3, 16, 18, 0x30].map(ApicId)).unwrap()
    }

    fn msg(dest_mode: DestMode, shorthand: Shorthand, dest: u32) -> IpiMessage {
        IpiMessage {
            dest_mode,
            shorthand,
            destination: dest,
            ..IpiMessage::fixed(ApicId(2), ApicId(0), Vector(0x40))
        }
    }

    #[test]
    fn physical_and_broadcast_destinations() {
        let t = topo();
        let ids = |v: Vec<ApicId>| v.into_iter().map(|a| a.0).collect::<Vec<_>>();
        assert_eq!(
            ids(t.resolve(&msg(DestMode::Physical, Shorthand::None, 18))),
            [18]
        );
        assert!(t
            .resolve(&msg(DestMode::Physical, Shorthand::None, 17))
            .is_empty());
        let all = [0, 1, 2, 3, 16, 18, 0x30];
        assert_eq!(
            ids(t.resolve(&msg(DestMode::Physical, Shorthand::None, BROADCAST_DEST))),
            all
        );
        assert_eq!(
            ids(t.resolve(&msg(DestMode::Logical, Shorthand::None, BROADCAST_DEST))),
            all
        );
    }

    #[test]
    fn logical_cluster_destinations() {
        let t = topo();
        let ids = |v: Vec<ApicId>| v.into_iter().map(|a| a.0).collect::<Vec<_>>();
        // Cluster 0, bits 0, 2 and 9 (no APIC 9): APICs 0 and 2.
        assert_eq!(
            ids(t.resolve(&msg(DestMode::Logical, Shorthand::None, 0x0000_0205))),
            [0, 2]
        );
        // Cluster 1, bits 0 and 2: APICs 16 and 18.
        assert_eq!(
            ids(t.resolve(&msg(DestMode::Logical, Shorthand::None, 0x0001_0005))),
            [16, 18]
        );
        // Empty bitmap and an absent cluster reach nobody.
        assert!(t
            .resolve(&msg(DestMode::Logical, Shorthand::None, 0x0001_0000))
            .is_empty());
        assert!(t
            .resolve(&msg(DestMode::Logical, Shorthand::None, 0x0002_ffff))
            .is_empty());
        // One write per cluster reaches what physical mode needs one write per CPU for.
        let mut out = Vec::new();
        for id in [0, 1, 3] {
            t.resolve_dest_into(DestMode::Physical, id, &mut out);
        }
        let mut cluster = Vec::new();
        t.resolve_dest_into(
            DestMode::Logical,
            logical_id(ApicId(0)) | logical_id(ApicId(1)) | logical_id(ApicId(3)),
            &mut cluster,
        );
        assert_eq!(out, cluster);
    }

    #[test]
    fn shorthands() {
        let t = topo();
        let ids = |v: Vec<ApicId>| v.into_iter().map(|a| a.0).collect::<Vec<_>>();
        assert_eq!(
            ids(t.resolve(&msg(DestMode::Physical, Shorthand::SelfOnly, 99))),
            [2]
        );
        assert_eq!(
            ids(t.resolve(&msg(DestMode::Physical, Shorthand::AllExcludingSelf, 0))),
            [0, 1, 3, 16, 18, 0x30]
        );
        assert_eq!(
            ids(t.resolve(&msg(DestMode::Logical, Shorthand::AllIncludingSelf, 0))).len(),
            7
        );
    }

    #[test]
    fn topology_rejects_bad_ids() {
        assert_eq!(
            ApicTopology::new([ApicId(1), ApicId(2), ApicId(1)]).unwrap_err(),
            ApicError::DuplicateApicId { id: 1 }
        );
        assert_eq!(
            ApicTopology::new([ApicId(BROADCAST_DEST)]).unwrap_err(),
            ApicError::ReservedApicId { id: BROADCAST_DEST }
        );
        let t = ApicTopology::new([ApicId(0x21), ApicId(3), ApicId(0x10)]).unwrap();
        assert_eq!(t.ids(), &[ApicId(3), ApicId(0x10), ApicId(0x21)], "sorted");
    }

    #[test]
    fn lowest_priority_picks_lowest_class_then_id() {
        let c = [(ApicId(4), 0x20), (ApicId(2), 0x2f), (ApicId(7), 0x10)];
        assert_eq!(pick_lowest_priority(c), Some(ApicId(7)));
        let tie = [(ApicId(4), 0x20), (ApicId(2), 0x20)];
        assert_eq!(pick_lowest_priority(tie), Some(ApicId(2)));
        assert_eq!(pick_lowest_priority([]), None);
    }
}
