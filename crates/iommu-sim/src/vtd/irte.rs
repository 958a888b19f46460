//! The 128-bit Interrupt Remapping Table Entry (IRTE).
//!
//! Layouts from the Intel VT-d specification: 9.10 "Interrupt Remapping Table Entry
//! (IRTE) for Remapped Interrupts" and 9.11 "Interrupt Remapping Table Entry (IRTE)
//! for Posted Interrupts". Bit numbers below are positions in the 128-bit entry
//! (bit 0 = bit 0 of the low quadword, bit 64 = bit 0 of the high quadword).
//!
//! ```text
//!  remapped (IM=0)                         posted (IM=1)
//!  0      P                                0      P
//!  1      FPD                              1      FPD
//!  2      DM  (1 = logical)                7:2    reserved (0)
//!  3      RH  (redirection hint)           11:8   AVAIL (software)
//!  4      TM  (1 = level)                  13:12  reserved (0)
//!  7:5    DLM (delivery mode)              14     URG
//!  11:8   AVAIL (software)                 15     IM = 1
//!  14:12  reserved (0)                     23:16  vector
//!  15     IM = 0                           37:24  reserved (0)
//!  23:16  vector                           63:38  PDA[31:6]
//!  31:24  reserved (0)                     79:64  SID
//!  63:32  destination                      81:80  SQ
//!  79:64  SID                              83:82  SVT
//!  81:80  SQ                               95:84  reserved (0)
//!  83:82  SVT                              127:96 PDA[63:32]
//!  127:84 reserved (0)
//! ```
//!
//! In xAPIC mode (IRTA_REG.EIME = 0) the remapped destination holds the 8-bit APIC ID in
//! bits 47:40 and bits 39:32 and 63:48 are reserved (VT-d 9.10, DST field); in x2APIC
//! mode (EIME = 1) all 32 bits are the APIC ID. SVT = 11b is a reserved encoding
//! (VT-d 9.10, SVT field) and is reported as a reserved-field error.
//!
//! The AVAIL bits (11:8) are for software; hardware ignores them and the builders
//! leave them zero.

use crate::IommuError;
use serde::{Deserialize, Serialize};
use sim_core::Vector;

/// A contiguous bit field of the 128-bit entry: `width` bits starting at `lsb`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub lsb: u32,
    pub width: u32,
}

impl Field {
    const fn new(msb: u32, lsb: u32) -> Field {
        Field {
            lsb,
            width: msb - lsb + 1,
        }
    }
    /// Mask of this field in place (a `u128` with the field's bits set).
    pub const fn mask(self) -> u128 {
        ((1u128 << self.width) - 1) << self.lsb
    }
    fn get(self, raw: u128) -> u64 {
        ((raw & self.mask()) >> self.lsb) as u64
    }
    fn put(self, raw: u128, value: u64) -> u128 {
        let v = (value as u128) << self.lsb;
        assert!(
            v & !self.mask() == 0,
            "value {value:#x} does not fit IRTE field at bit {} width {}",
            self.lsb,
            self.width
        );
        (raw & !self.mask()) | v
    }
}

// ---- Fields shared by both formats (VT-d 9.10 / 9.11) ----
/// Present.
pub const P: Field = Field::new(0, 0);
/// Fault Processing Disable: 1 = do not record faults caused through this entry.
pub const FPD: Field = Field::new(1, 1);
/// Software-available bits, ignored by hardware.
pub const AVAIL: Field = Field::new(11, 8);
/// IRTE Mode: 0 = remapped format (9.10), 1 = posted format (9.11).
pub const IM: Field = Field::new(15, 15);
/// Vector (remapped: the interrupt's vector; posted: the vector posted into PIR).
pub const VECTOR: Field = Field::new(23, 16);
/// Source identifier (requester id, or a bus range when SVT = 10b).
pub const SID: Field = Field::new(79, 64);
/// Source-id qualifier: which function-number bits to ignore when SVT = 01b.
pub const SQ: Field = Field::new(81, 80);
/// Source validation type.
pub const SVT: Field = Field::new(83, 82);

// ---- Remapped format only (VT-d 9.10) ----
/// Destination mode: 0 physical, 1 logical.
pub const DM: Field = Field::new(2, 2);
/// Redirection hint.
pub const RH: Field = Field::new(3, 3);
/// Trigger mode: 0 edge, 1 level.
pub const TM: Field = Field::new(4, 4);
/// Delivery mode.
pub const DLM: Field = Field::new(7, 5);
/// Destination ID (x2APIC: 32-bit APIC ID; xAPIC: APIC ID in bits 47:40).
pub const DST: Field = Field::new(63, 32);
/// xAPIC-mode APIC ID inside DST.
pub const DST_XAPIC: Field = Field::new(47, 40);

// ---- Posted format only (VT-d 9.11) ----
/// Urgent: post with notification even when the descriptor's SN is set.
pub const URG: Field = Field::new(14, 14);
/// Posted descriptor address bits 31:6.
pub const PDA_LO: Field = Field::new(63, 38);
/// Posted descriptor address bits 63:32.
pub const PDA_HI: Field = Field::new(127, 96);

/// Reserved (must be 0) bits of a remapped-format entry in any APIC mode (VT-d 9.10:
/// 14:12, 31:24, 127:84).
pub const REMAPPED_RESERVED: u128 =
    Field::new(14, 12).mask() | Field::new(31, 24).mask() | Field::new(127, 84).mask();
/// Additionally reserved in xAPIC mode (EIME = 0): DST bits 39:32 and 63:48 (VT-d 9.10).
pub const REMAPPED_RESERVED_XAPIC: u128 = Field::new(39, 32).mask() | Field::new(63, 48).mask();
/// Reserved (must be 0) bits of a posted-format entry (VT-d 9.11: 7:2, 13:12, 37:24,
/// 95:84).
pub const POSTED_RESERVED: u128 = Field::new(7, 2).mask()
    | Field::new(13, 12).mask()
    | Field::new(37, 24).mask()
    | Field::new(95, 84).mask();

/// Delivery mode of a remapped interrupt (IRTE DLM, same encoding as the MSI data
/// register, SDM Vol. 3A 11.11.2). Total over the 3-bit field so any entry decodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryMode {
    Fixed,
    LowestPriority,
    Smi,
    Reserved3,
    Nmi,
    Init,
    Reserved6,
    ExtInt,
}

impl DeliveryMode {
    pub const fn bits(self) -> u8 {
        match self {
            DeliveryMode::Fixed => 0,
            DeliveryMode::LowestPriority => 1,
            DeliveryMode::Smi => 2,
            DeliveryMode::Reserved3 => 3,
            DeliveryMode::Nmi => 4,
            DeliveryMode::Init => 5,
            DeliveryMode::Reserved6 => 6,
            DeliveryMode::ExtInt => 7,
        }
    }
    /// Decodes the low three bits of `bits`.
    pub const fn from_bits(bits: u8) -> DeliveryMode {
        match bits & 7 {
            0 => DeliveryMode::Fixed,
            1 => DeliveryMode::LowestPriority,
            2 => DeliveryMode::Smi,
            3 => DeliveryMode::Reserved3,
            4 => DeliveryMode::Nmi,
            5 => DeliveryMode::Init,
            6 => DeliveryMode::Reserved6,
            _ => DeliveryMode::ExtInt,
        }
    }
}

/// Source validation type (IRTE SVT, VT-d 9.10).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Svt {
    /// 00b: no requester-id verification.
    None,
    /// 01b: verify the requester id against SID, ignoring the function bits SQ names.
    RequesterId,
    /// 10b: verify the requester's bus number lies in `SID[15:8]..=SID[7:0]`
    /// (start bus in the upper byte, end bus in the lower byte).
    BusRange,
    /// 11b: reserved encoding.
    Reserved,
}

impl Svt {
    pub const fn bits(self) -> u8 {
        match self {
            Svt::None => 0,
            Svt::RequesterId => 1,
            Svt::BusRange => 2,
            Svt::Reserved => 3,
        }
    }
    pub const fn from_bits(bits: u8) -> Svt {
        match bits & 3 {
            0 => Svt::None,
            1 => Svt::RequesterId,
            2 => Svt::BusRange,
            _ => Svt::Reserved,
        }
    }
}

/// Source-id qualifier (IRTE SQ, VT-d 9.10), used when SVT = 01b.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sq {
    /// 00b: compare all 16 bits.
    All,
    /// 01b: ignore requester-id bit 2.
    IgnoreBit2,
    /// 10b: ignore requester-id bits 2:1.
    IgnoreBits2To1,
    /// 11b: ignore requester-id bits 2:0.
    IgnoreBits2To0,
}

impl Sq {
    pub const fn bits(self) -> u8 {
        match self {
            Sq::All => 0,
            Sq::IgnoreBit2 => 1,
            Sq::IgnoreBits2To1 => 2,
            Sq::IgnoreBits2To0 => 3,
        }
    }
    pub const fn from_bits(bits: u8) -> Sq {
        match bits & 3 {
            0 => Sq::All,
            1 => Sq::IgnoreBit2,
            2 => Sq::IgnoreBits2To1,
            _ => Sq::IgnoreBits2To0,
        }
    }
    /// Mask of the requester-id bits that take part in the comparison.
    pub const fn compare_mask(self) -> u16 {
        match self {
            Sq::All => 0xffff,
            Sq::IgnoreBit2 => 0xfffb,
            Sq::IgnoreBits2To1 => 0xfff9,
            Sq::IgnoreBits2To0 => 0xfff8,
        }
    }
}

/// Source-id verification fields common to both formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SourceCheck {
    pub sid: u16,
    pub sq: Sq,
    pub svt: Svt,
}

impl SourceCheck {
    /// No verification (SVT = 00b).
    pub const NONE: SourceCheck = SourceCheck {
        sid: 0,
        sq: Sq::All,
        svt: Svt::None,
    };
    /// Verify the full requester id (what Linux programs for a PCI function).
    pub const fn exact(sid: u16) -> SourceCheck {
        SourceCheck {
            sid,
            sq: Sq::All,
            svt: Svt::RequesterId,
        }
    }
    /// Whether a request from `source_id` passes. `None` for the reserved SVT encoding,
    /// which the entry's reserved-field check reports first.
    pub fn accepts(&self, source_id: u16) -> Option<bool> {
        match self.svt {
            Svt::None => Some(true),
            Svt::RequesterId => {
                let m = self.sq.compare_mask();
                Some(source_id & m == self.sid & m)
            }
            Svt::BusRange => {
                let start = (self.sid >> 8) as u8;
                let end = self.sid as u8;
                let bus = (source_id >> 8) as u8;
                Some(start <= bus && bus <= end)
            }
            Svt::Reserved => None,
        }
    }
}

/// Decoded remapped-format entry (IM = 0), VT-d 9.10.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RemappedIrte {
    pub vector: Vector,
    /// The raw 32-bit DST field. In x2APIC mode this is the APIC ID; in xAPIC mode the
    /// APIC ID sits in bits 15:8 of it (entry bits 47:40).
    pub dest: u32,
    pub dest_mode_logical: bool,
    pub redirection_hint: bool,
    pub level_triggered: bool,
    pub delivery_mode: DeliveryMode,
    pub fpd: bool,
    pub source: SourceCheck,
}

/// Decoded posted-format entry (IM = 1), VT-d 9.11.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PostedIrte {
    pub vector: Vector,
    /// Posted-interrupt descriptor address (64-byte aligned).
    pub pda: u64,
    pub urg: bool,
    pub fpd: bool,
    pub source: SourceCheck,
}

/// The two formats a present entry can have, chosen by IM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum IrteFormat {
    Remapped(RemappedIrte),
    Posted(PostedIrte),
}

/// One raw 128-bit IRTE as it sits in the interrupt remapping table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Irte(pub u128);

impl Irte {
    /// All zeroes: not present (what Linux writes when it frees an entry).
    pub const NOT_PRESENT: Irte = Irte(0);

    pub const fn from_quads(lo: u64, hi: u64) -> Irte {
        Irte((hi as u128) << 64 | lo as u128)
    }
    pub const fn lo(self) -> u64 {
        self.0 as u64
    }
    pub const fn hi(self) -> u64 {
        (self.0 >> 64) as u64
    }
    pub fn field(self, f: Field) -> u64 {
        f.get(self.0)
    }
    /// Returns a copy with field `f` set to `value`.
    ///
    /// # Panics
    /// If `value` does not fit the field: a bug in the caller.
    pub fn with_field(self, f: Field, value: u64) -> Irte {
        Irte(f.put(self.0, value))
    }

    fn shared(fpd: bool, vector: Vector, s: SourceCheck) -> Irte {
        Irte(0)
            .with_field(P, 1)
            .with_field(FPD, fpd as u64)
            .with_field(VECTOR, vector.0 as u64)
            .with_field(SID, s.sid as u64)
            .with_field(SQ, s.sq.bits() as u64)
            .with_field(SVT, s.svt.bits() as u64)
    }

    /// A present remapped-format entry.
    pub fn remapped(r: RemappedIrte) -> Irte {
        Irte::shared(r.fpd, r.vector, r.source)
            .with_field(DM, r.dest_mode_logical as u64)
            .with_field(RH, r.redirection_hint as u64)
            .with_field(TM, r.level_triggered as u64)
            .with_field(DLM, r.delivery_mode.bits() as u64)
            .with_field(DST, r.dest as u64)
    }

    /// A present posted-format entry. The PDA must be 64-byte aligned because the entry
    /// only stores bits 63:6 of it.
    pub fn posted(p: PostedIrte) -> Result<Irte, IommuError> {
        if p.pda & 63 != 0 {
            return Err(IommuError::UnalignedPda { pda: p.pda });
        }
        Ok(Irte::shared(p.fpd, p.vector, p.source)
            .with_field(IM, 1)
            .with_field(URG, p.urg as u64)
            .with_field(PDA_LO, (p.pda >> 6) & 0x03ff_ffff)
            .with_field(PDA_HI, p.pda >> 32))
    }

    pub fn present(self) -> bool {
        self.field(P) != 0
    }
    pub fn fpd(self) -> bool {
        self.field(FPD) != 0
    }
    pub fn is_posted(self) -> bool {
        self.field(IM) != 0
    }
    pub fn source(self) -> SourceCheck {
        SourceCheck {
            sid: self.field(SID) as u16,
            sq: Sq::from_bits(self.field(SQ) as u8),
            svt: Svt::from_bits(self.field(SVT) as u8),
        }
    }

    /// Decodes the entry by its IM bit. Does not look at P or the reserved bits.
    pub fn format(self) -> IrteFormat {
        let vector = Vector(self.field(VECTOR) as u8);
        let fpd = self.fpd();
        let source = self.source();
        if self.is_posted() {
            IrteFormat::Posted(PostedIrte {
                vector,
                pda: (self.field(PDA_HI) << 32) | (self.field(PDA_LO) << 6),
                urg: self.field(URG) != 0,
                fpd,
                source,
            })
        } else {
            IrteFormat::Remapped(RemappedIrte {
                vector,
                dest: self.field(DST) as u32,
                dest_mode_logical: self.field(DM) != 0,
                redirection_hint: self.field(RH) != 0,
                level_triggered: self.field(TM) != 0,
                delivery_mode: DeliveryMode::from_bits(self.field(DLM) as u8),
                fpd,
                source,
            })
        }
    }

    /// Whether any reserved field of the entry's format is set, for an IOMMU in x2APIC
    /// mode (IRTA_REG.EIME = 1, the mode Linux uses whenever x2APIC is on). Includes the
    /// reserved SVT encoding 11b. See [`Irte::reserved_bits_set_in`] for xAPIC mode.
    pub fn reserved_bits_set(self) -> bool {
        self.reserved_bits_set_in(true)
    }

    /// As [`Irte::reserved_bits_set`], choosing the APIC mode: with `x2apic_mode`
    /// false, the remapped format's DST bits 39:32 and 63:48 are reserved too.
    pub fn reserved_bits_set_in(self, x2apic_mode: bool) -> bool {
        let mask = if self.is_posted() {
            POSTED_RESERVED
        } else if x2apic_mode {
            REMAPPED_RESERVED
        } else {
            REMAPPED_RESERVED | REMAPPED_RESERVED_XAPIC
        };
        self.0 & mask != 0 || self.source().svt == Svt::Reserved
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample_remapped() -> RemappedIrte {
        RemappedIrte {
            vector: Vector(0x41),
            dest: 0x0001_0203,
            dest_mode_logical: true,
            redirection_hint: true,
            level_triggered: false,
            delivery_mode: DeliveryMode::LowestPriority,
            fpd: false,
            source: SourceCheck {
                sid: 0x3a10,
                sq: Sq::IgnoreBit2,
                svt: Svt::RequesterId,
            },
        }
    }

    #[test]
    fn remapped_fields_land_on_spec_bits() {
        let e = Irte::remapped(sample_remapped());
        assert_eq!(e.lo() & 1, 1, "P at bit 0");
        assert_eq!((e.lo() >> 2) & 1, 1, "DM at bit 2");
        assert_eq!((e.lo() >> 3) & 1, 1, "RH at bit 3");
        assert_eq!((e.lo() >> 5) & 7, 1, "DLM at 7:5");
        assert_eq!((e.lo() >> 15) & 1, 0, "IM clear");
        assert_eq!((e.lo() >> 16) & 0xff, 0x41, "vector at 23:16");
        assert_eq!(e.lo() >> 32, 0x0001_0203, "DST at 63:32");
        assert_eq!(e.hi() & 0xffff, 0x3a10, "SID at 79:64");
        assert_eq!((e.hi() >> 16) & 3, 1, "SQ at 81:80");
        assert_eq!((e.hi() >> 18) & 3, 1, "SVT at 83:82");
        assert!(!e.reserved_bits_set());
        assert_eq!(e.format(), IrteFormat::Remapped(sample_remapped()));
    }

    #[test]
    fn posted_fields_land_on_spec_bits() {
        let p = PostedIrte {
            vector: Vector(0x72),
            pda: 0x0000_0012_3456_7840,
            urg: true,
            fpd: true,
            source: SourceCheck::exact(0x0100),
        };
        let e = Irte::posted(p).unwrap();
        assert_eq!(e.lo() & 3, 3, "P and FPD");
        assert_eq!((e.lo() >> 14) & 1, 1, "URG at 14");
        assert_eq!((e.lo() >> 15) & 1, 1, "IM at 15");
        assert_eq!(e.lo() >> 38, 0x3456_7840 >> 6, "PDA[31:6] at 63:38");
        assert_eq!(e.hi() >> 32, 0x12, "PDA[63:32] at 127:96");
        assert!(!e.reserved_bits_set());
        assert_eq!(e.format(), IrteFormat::Posted(p));
    }

    #[test]
    fn unaligned_pda_is_an_api_error() {
        let p = PostedIrte {
            vector: Vector(0x30),
            pda: 0x1000 + 8,
            urg: false,
            fpd: false,
            source: SourceCheck::NONE,
        };
        assert_eq!(
            Irte::posted(p),
            Err(IommuError::UnalignedPda { pda: 0x1008 })
        );
    }

    #[test]
    fn reserved_bits_per_format() {
        let r = Irte::remapped(sample_remapped());
        for bit in [12u32, 13, 14, 24, 31, 84, 100, 127] {
            assert!(
                Irte(r.0 | 1 << bit).reserved_bits_set(),
                "remapped bit {bit}"
            );
        }
        // AVAIL is not reserved; DST high bits only in xAPIC mode.
        assert!(!Irte(r.0 | 1 << 9).reserved_bits_set());
        assert!(!r.reserved_bits_set_in(true));
        assert!(r.reserved_bits_set_in(false), "DST 39:32 set, xAPIC mode");
        let xapic = Irte::remapped(RemappedIrte {
            dest: 0x0000_0500,
            ..sample_remapped()
        });
        assert!(!xapic.reserved_bits_set_in(false));

        let p = Irte::posted(PostedIrte {
            vector: Vector(0x30),
            pda: 0x4000,
            urg: false,
            fpd: false,
            source: SourceCheck::NONE,
        })
        .unwrap();
        for bit in [2u32, 7, 12, 13, 24, 37, 84, 95] {
            assert!(Irte(p.0 | 1 << bit).reserved_bits_set(), "posted bit {bit}");
        }
        assert!(!Irte(p.0 | 1 << 10).reserved_bits_set());
        // Reserved SVT encoding.
        assert!(r.with_field(SVT, 3).reserved_bits_set());
    }

    #[test]
    fn source_checks() {
        let exact = SourceCheck::exact(0x0108);
        assert_eq!(exact.accepts(0x0108), Some(true));
        assert_eq!(exact.accepts(0x010c), Some(false));
        let q = SourceCheck {
            sid: 0x0108,
            sq: Sq::IgnoreBit2,
            svt: Svt::RequesterId,
        };
        assert_eq!(q.accepts(0x010c), Some(true));
        assert_eq!(q.accepts(0x010a), Some(false));
        let q3 = SourceCheck {
            sq: Sq::IgnoreBits2To0,
            ..q
        };
        assert_eq!(q3.accepts(0x010f), Some(true));
        assert_eq!(q3.accepts(0x0110), Some(false));
        // Buses 0x10..=0x1f, start in the upper byte.
        let bus = SourceCheck {
            sid: 0x101f,
            sq: Sq::All,
            svt: Svt::BusRange,
        };
        assert_eq!(bus.accepts(0x1000), Some(true));
        assert_eq!(bus.accepts(0x1fff), Some(true));
        assert_eq!(bus.accepts(0x20ff), Some(false));
        assert_eq!(bus.accepts(0x0fff), Some(false));
    }

    fn any_source() -> impl Strategy<Value = SourceCheck> {
        (any::<u16>(), 0u8..4, 0u8..3).prop_map(|(sid, sq, svt)| SourceCheck {
            sid,
            sq: Sq::from_bits(sq),
            svt: Svt::from_bits(svt),
        })
    }

    proptest! {
        #[test]
        fn remapped_round_trips(v in any::<u8>(), dest in any::<u32>(), dm in any::<bool>(),
                                rh in any::<bool>(), tm in any::<bool>(), dlm in 0u8..8,
                                fpd in any::<bool>(), source in any_source()) {
            let r = RemappedIrte { vector: Vector(v), dest, dest_mode_logical: dm,
                redirection_hint: rh, level_triggered: tm,
                delivery_mode: DeliveryMode::from_bits(dlm), fpd, source };
            let e = Irte::remapped(r);
            prop_assert!(e.present());
            prop_assert!(!e.reserved_bits_set());
            prop_assert_eq!(e.format(), IrteFormat::Remapped(r));
            prop_assert_eq!(Irte::from_quads(e.lo(), e.hi()), e);
        }

        #[test]
        fn posted_round_trips(v in any::<u8>(), pda in any::<u64>(), urg in any::<bool>(),
                              fpd in any::<bool>(), source in any_source()) {
            let p = PostedIrte { vector: Vector(v), pda: pda & !63, urg, fpd, source };
            let e = Irte::posted(p).unwrap();
            prop_assert!(!e.reserved_bits_set());
            prop_assert_eq!(e.format(), IrteFormat::Posted(p));
        }

        /// Any raw entry without reserved or AVAIL bits rebuilds bit-identically from
        /// its decoded form.
        #[test]
        fn raw_decodes_and_rebuilds(raw in any::<u128>()) {
            let e = Irte(raw | 1);
            let reserved = if e.is_posted() { POSTED_RESERVED } else { REMAPPED_RESERVED };
            let mut e = Irte(e.0 & !reserved & !AVAIL.mask());
            if e.source().svt == Svt::Reserved {
                e = e.with_field(SVT, 0);
            }
            prop_assert!(!e.reserved_bits_set());
            let rebuilt = match e.format() {
                IrteFormat::Remapped(r) => Irte::remapped(r),
                IrteFormat::Posted(p) => Irte::posted(p).unwrap(),
            };
            prop_assert_eq!(rebuilt, e);
        }
    }
}
