//! Command queue entries: opcodes, field layouts, encode and decode.
//!
//! Every command is 16 bytes, two little-endian 64-bit words, with the opcode in bits
//! \[7:0\] of the first (IHI 0070 4.1). Field positions follow the command descriptions of
//! IHI 0070 chapter 4: 4.3 configuration invalidation (CMD_CFGI_*), 4.4 TLB invalidation
//! (CMD_TLBI_*), 4.7.3 CMD_SYNC. Commands the model does not act on (prefetch, ATS, PRI,
//! stall, EL2/EL3 and stage-2 TLBIs) still decode, as [`Command::Other`], and cost a
//! generic consumption time; an opcode the architecture does not define, or CMD_SYNC
//! with the reserved ComplSignal 0b11, is a command error CERROR_ILL (4.7.3, 4.1).

use serde::Serialize;

/// CMD_PREFETCH_CONFIG.
pub const CMD_PREFETCH_CONFIG: u8 = 0x01;
/// CMD_PREFETCH_ADDR.
pub const CMD_PREFETCH_ADDR: u8 = 0x02;
/// CMD_CFGI_STE: invalidate cached configuration for one StreamID (4.3).
pub const CMD_CFGI_STE: u8 = 0x03;
/// CMD_CFGI_STE_RANGE; with Range = 31 it is CMD_CFGI_ALL (4.3).
pub const CMD_CFGI_STE_RANGE: u8 = 0x04;
/// CMD_CFGI_CD.
pub const CMD_CFGI_CD: u8 = 0x05;
/// CMD_CFGI_CD_ALL.
pub const CMD_CFGI_CD_ALL: u8 = 0x06;
/// CMD_TLBI_NH_ALL: all non-hypervisor stage 1 entries of a VMID (4.4).
pub const CMD_TLBI_NH_ALL: u8 = 0x10;
/// CMD_TLBI_NH_ASID: all entries of one ASID.
pub const CMD_TLBI_NH_ASID: u8 = 0x11;
/// CMD_TLBI_NH_VA: entries of one ASID for one address (or a range with NUM/SCALE).
pub const CMD_TLBI_NH_VA: u8 = 0x12;
/// CMD_TLBI_NH_VAA: one address, all ASIDs.
pub const CMD_TLBI_NH_VAA: u8 = 0x13;
/// CMD_TLBI_EL3_ALL.
pub const CMD_TLBI_EL3_ALL: u8 = 0x18;
/// CMD_TLBI_EL3_VA.
pub const CMD_TLBI_EL3_VA: u8 = 0x1A;
/// CMD_TLBI_EL2_ALL.
pub const CMD_TLBI_EL2_ALL: u8 = 0x20;
/// CMD_TLBI_EL2_ASID.
pub const CMD_TLBI_EL2_ASID: u8 = 0x21;
/// CMD_TLBI_EL2_VA.
pub const CMD_TLBI_EL2_VA: u8 = 0x22;
/// CMD_TLBI_EL2_VAA.
pub const CMD_TLBI_EL2_VAA: u8 = 0x23;
/// CMD_TLBI_S12_VMALL.
pub const CMD_TLBI_S12_VMALL: u8 = 0x28;
/// CMD_TLBI_S2_IPA.
pub const CMD_TLBI_S2_IPA: u8 = 0x2A;
/// CMD_TLBI_NSNH_ALL: every non-secure, non-hypervisor TLB entry.
pub const CMD_TLBI_NSNH_ALL: u8 = 0x30;
/// CMD_ATC_INV.
pub const CMD_ATC_INV: u8 = 0x40;
/// CMD_PRI_RESP.
pub const CMD_PRI_RESP: u8 = 0x41;
/// CMD_RESUME.
pub const CMD_RESUME: u8 = 0x44;
/// CMD_STALL_TERM.
pub const CMD_STALL_TERM: u8 = 0x45;
/// CMD_SYNC (4.7.3).
pub const CMD_SYNC: u8 = 0x46;

/// Every opcode IHI 0070 defines for the Non-secure Command queue, for decode.
pub const DEFINED_OPCODES: [u8; 24] = [
    CMD_PREFETCH_CONFIG,
    CMD_PREFETCH_ADDR,
    CMD_CFGI_STE,
    CMD_CFGI_STE_RANGE,
    CMD_CFGI_CD,
    CMD_CFGI_CD_ALL,
    CMD_TLBI_NH_ALL,
    CMD_TLBI_NH_ASID,
    CMD_TLBI_NH_VA,
    CMD_TLBI_NH_VAA,
    CMD_TLBI_EL3_ALL,
    CMD_TLBI_EL3_VA,
    CMD_TLBI_EL2_ALL,
    CMD_TLBI_EL2_ASID,
    CMD_TLBI_EL2_VA,
    CMD_TLBI_EL2_VAA,
    CMD_TLBI_S12_VMALL,
    CMD_TLBI_S2_IPA,
    CMD_TLBI_NSNH_ALL,
    CMD_ATC_INV,
    CMD_PRI_RESP,
    CMD_RESUME,
    CMD_STALL_TERM,
    CMD_SYNC,
];

/// Opcode, word 0 bits \[7:0\].
pub const CMD_OP_MASK: u64 = 0xff;
/// CMD_CFGI_*: StreamID, word 0 bits \[63:32\].
pub const CFGI_SID_SHIFT: u32 = 32;
/// CMD_CFGI_STE: Leaf, word 1 bit 0.
pub const CFGI_LEAF: u64 = 1;
/// CMD_CFGI_STE_RANGE: Range, word 1 bits \[4:0\] (2^(Range+1) StreamIDs; 31 = all).
pub const CFGI_RANGE_MASK: u64 = 0x1f;
/// CMD_TLBI_*: NUM, word 0 bits \[16:12\] (range invalidation, SMMUv3.2 RIL).
pub const TLBI_NUM_SHIFT: u32 = 12;
/// CMD_TLBI_*: SCALE, word 0 bits \[24:20\].
pub const TLBI_SCALE_SHIFT: u32 = 20;
/// CMD_TLBI_*: VMID, word 0 bits \[47:32\].
pub const TLBI_VMID_SHIFT: u32 = 32;
/// CMD_TLBI_*: ASID, word 0 bits \[63:48\].
pub const TLBI_ASID_SHIFT: u32 = 48;
/// CMD_TLBI_*_VA: Leaf, word 1 bit 0.
pub const TLBI_LEAF: u64 = 1;
/// CMD_TLBI_*_VA: TG (translation granule of the range), word 1 bits \[11:10\].
pub const TLBI_TG_SHIFT: u32 = 10;
/// CMD_TLBI_*_VA: Address\[63:12\], word 1 bits \[63:12\].
pub const TLBI_ADDR_MASK: u64 = !0xfff;
/// CMD_SYNC: ComplSignal (CS), word 0 bits \[13:12\].
pub const SYNC_CS_SHIFT: u32 = 12;
/// CMD_SYNC: MSH, word 0 bits \[23:22\] (0b11 Inner Shareable).
pub const SYNC_MSH_SHIFT: u32 = 22;
/// CMD_SYNC: MSIAttr, word 0 bits \[27:24\] (0xF: Inner/Outer write-back cacheable).
pub const SYNC_MSIATTR_SHIFT: u32 = 24;
/// CMD_SYNC: MSIData, word 0 bits \[63:32\].
pub const SYNC_MSIDATA_SHIFT: u32 = 32;
/// CMD_SYNC: MSIAddress\[55:2\], word 1 bits \[55:2\].
pub const SYNC_MSIADDR_MASK: u64 = ((1u64 << 56) - 1) & !0x3;

/// CMD_SYNC ComplSignal (4.7.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SyncSignal {
    /// 0b00 SIG_NONE.
    None,
    /// 0b01 SIG_IRQ: an MSI write of MSIData to MSIAddress (if MSIs are supported and
    /// the address is non-zero), or the wired CMD_SYNC interrupt.
    Irq,
    /// 0b10 SIG_SEV: a WFE wake-up event, only if SMMU_IDR0.SEV; else as SIG_NONE.
    Sev,
}

impl SyncSignal {
    pub fn bits(self) -> u64 {
        match self {
            SyncSignal::None => 0b00,
            SyncSignal::Irq => 0b01,
            SyncSignal::Sev => 0b10,
        }
    }
}

/// A decoded command, with the fields the model acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Command {
    /// CMD_CFGI_STE(StreamID, Leaf).
    CfgiSte { sid: u32, leaf: bool },
    /// CMD_CFGI_STE_RANGE(StreamID, Range): 2^(range+1) StreamIDs from `sid` rounded
    /// down; range 31 is CMD_CFGI_ALL.
    CfgiSteRange { sid: u32, range: u8 },
    /// CMD_TLBI_NH_ALL(VMID).
    TlbiNhAll { vmid: u16 },
    /// CMD_TLBI_NH_ASID(VMID, ASID).
    TlbiNhAsid { vmid: u16, asid: u16 },
    /// CMD_TLBI_NH_VA(VMID, ASID, Addr, Leaf). With `tg` = 0 one address; otherwise a
    /// range of (num + 1) * 2^scale granules (SMMUv3.2 range invalidation).
    TlbiNhVa {
        vmid: u16,
        asid: u16,
        addr: u64,
        leaf: bool,
        num: u8,
        scale: u8,
        tg: u8,
    },
    /// CMD_TLBI_NSNH_ALL.
    TlbiNsnhAll,
    /// CMD_SYNC(ComplSignal, MSIAddress, MSIData).
    Sync {
        cs: SyncSignal,
        msi_addr: u64,
        msi_data: u32,
    },
    /// A defined command the model consumes without further effect.
    Other { opcode: u8 },
}

impl Command {
    /// CMD_CFGI_ALL, as Linux builds it (CMD_CFGI_STE_RANGE with Range = 31).
    pub const CFGI_ALL: Command = Command::CfgiSteRange { sid: 0, range: 31 };

    /// A single-address leaf CMD_TLBI_NH_VA, what Linux issues per unmapped page when
    /// range invalidation is not supported.
    pub fn tlbi_nh_va(asid: u16, addr: u64) -> Command {
        Command::TlbiNhVa {
            vmid: 0,
            asid,
            addr: addr & TLBI_ADDR_MASK,
            leaf: true,
            num: 0,
            scale: 0,
            tg: 0,
        }
    }

    pub fn opcode(&self) -> u8 {
        match self {
            Command::CfgiSte { .. } => CMD_CFGI_STE,
            Command::CfgiSteRange { .. } => CMD_CFGI_STE_RANGE,
            Command::TlbiNhAll { .. } => CMD_TLBI_NH_ALL,
            Command::TlbiNhAsid { .. } => CMD_TLBI_NH_ASID,
            Command::TlbiNhVa { .. } => CMD_TLBI_NH_VA,
            Command::TlbiNsnhAll => CMD_TLBI_NSNH_ALL,
            Command::Sync { .. } => CMD_SYNC,
            Command::Other { opcode } => *opcode,
        }
    }

    /// The two words of the queue entry.
    pub fn encode(&self) -> [u64; 2] {
        let op = self.opcode() as u64;
        match *self {
            Command::CfgiSte { sid, leaf } => [
                op | (sid as u64) << CFGI_SID_SHIFT,
                if leaf { CFGI_LEAF } else { 0 },
            ],
            Command::CfgiSteRange { sid, range } => [
                op | (sid as u64) << CFGI_SID_SHIFT,
                range as u64 & CFGI_RANGE_MASK,
            ],
            Command::TlbiNhAll { vmid } => [op | (vmid as u64) << TLBI_VMID_SHIFT, 0],
            Command::TlbiNhAsid { vmid, asid } => [
                op | (vmid as u64) << TLBI_VMID_SHIFT | (asid as u64) << TLBI_ASID_SHIFT,
                0,
            ],
            Command::TlbiNhVa {
                vmid,
                asid,
                addr,
                leaf,
                num,
                scale,
                tg,
            } => [
                op | (num as u64 & 0x1f) << TLBI_NUM_SHIFT
                    | (scale as u64 & 0x1f) << TLBI_SCALE_SHIFT
                    | (vmid as u64) << TLBI_VMID_SHIFT
                    | (asid as u64) << TLBI_ASID_SHIFT,
                (if leaf { TLBI_LEAF } else { 0 })
                    | ((tg as u64 & 3) << TLBI_TG_SHIFT)
                    | (addr & TLBI_ADDR_MASK),
            ],
            Command::TlbiNsnhAll => [op, 0],
            Command::Sync {
                cs,
                msi_addr,
                msi_data,
            } => [
                op | cs.bits() << SYNC_CS_SHIFT
                    | 0b11 << SYNC_MSH_SHIFT
                    | 0xf << SYNC_MSIATTR_SHIFT
                    | (msi_data as u64) << SYNC_MSIDATA_SHIFT,
                msi_addr & SYNC_MSIADDR_MASK,
            ],
            Command::Other { .. } => [op, 0],
        }
    }

    /// Decodes an entry as the SMMU would; an undefined opcode or a reserved CMD_SYNC
    /// ComplSignal is a command error.
    pub fn decode(words: [u64; 2]) -> Result<Command, CommandError> {
        let [w0, w1] = words;
        let op = (w0 & CMD_OP_MASK) as u8;
        if !DEFINED_OPCODES.contains(&op) {
            return Err(CommandError::Illegal);
        }
        let field = |shift: u32, bits: u32| (w0 >> shift) & ((1u64 << bits) - 1);
        Ok(match op {
            CMD_CFGI_STE => Command::CfgiSte {
                sid: field(CFGI_SID_SHIFT, 32) as u32,
                leaf: w1 & CFGI_LEAF != 0,
            },
            CMD_CFGI_STE_RANGE => Command::CfgiSteRange {
                sid: field(CFGI_SID_SHIFT, 32) as u32,
                range: (w1 & CFGI_RANGE_MASK) as u8,
            },
            CMD_TLBI_NH_ALL => Command::TlbiNhAll {
                vmid: field(TLBI_VMID_SHIFT, 16) as u16,
            },
            CMD_TLBI_NH_ASID => Command::TlbiNhAsid {
                vmid: field(TLBI_VMID_SHIFT, 16) as u16,
                asid: field(TLBI_ASID_SHIFT, 16) as u16,
            },
            CMD_TLBI_NH_VA => Command::TlbiNhVa {
                vmid: field(TLBI_VMID_SHIFT, 16) as u16,
                asid: field(TLBI_ASID_SHIFT, 16) as u16,
                addr: w1 & TLBI_ADDR_MASK,
                leaf: w1 & TLBI_LEAF != 0,
                num: field(TLBI_NUM_SHIFT, 5) as u8,
                scale: field(TLBI_SCALE_SHIFT, 5) as u8,
                tg: ((w1 >> TLBI_TG_SHIFT) & 3) as u8,
            },
            CMD_TLBI_NSNH_ALL => Command::TlbiNsnhAll,
            CMD_SYNC => {
                let cs = match field(SYNC_CS_SHIFT, 2) {
                    0b00 => SyncSignal::None,
                    0b01 => SyncSignal::Irq,
                    0b10 => SyncSignal::Sev,
                    _ => return Err(CommandError::Illegal),
                };
                Command::Sync {
                    cs,
                    msi_addr: w1 & SYNC_MSIADDR_MASK,
                    msi_data: field(SYNC_MSIDATA_SHIFT, 32) as u32,
                }
            }
            other => Command::Other { opcode: other },
        })
    }

    /// What the command invalidates, if anything.
    pub fn invalidation(&self) -> Option<Invalidation> {
        Some(match *self {
            Command::CfgiSte { sid, .. } => Invalidation::Ste { sid },
            Command::CfgiSteRange { range: 31, .. } => Invalidation::AllSte,
            Command::CfgiSteRange { sid, range } => {
                let span = 1u64 << (range as u32 + 1);
                let first = (sid as u64) & !(span - 1);
                Invalidation::SteRange {
                    first: first as u32,
                    last: (first + span - 1).min(u32::MAX as u64) as u32,
                }
            }
            Command::TlbiNhAll { .. } | Command::TlbiNsnhAll => Invalidation::AllTlb,
            Command::TlbiNhAsid { asid, .. } => Invalidation::Asid { asid },
            Command::TlbiNhVa {
                asid,
                addr,
                num,
                scale,
                tg,
                ..
            } => {
                // With TG != 0 the command covers (NUM + 1) * 2^SCALE granules; the model
                // has only the 4 KB granule (TG = 0b01).
                let pages = if tg == 0 {
                    1
                } else {
                    (num as u64 + 1) << scale
                };
                Invalidation::Va {
                    asid,
                    addr: addr & TLBI_ADDR_MASK,
                    pages,
                }
            }
            Command::Sync { .. } | Command::Other { .. } => return None,
        })
    }
}

/// The cache state a consumed invalidation command removes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Invalidation {
    /// TLB entries of `asid` for `pages` 4 KB pages from `addr`.
    Va { asid: u16, addr: u64, pages: u64 },
    /// Every TLB entry of `asid`.
    Asid { asid: u16 },
    /// Every TLB entry.
    AllTlb,
    /// Cached configuration (STE and CD) of one StreamID.
    Ste { sid: u32 },
    /// Cached configuration of StreamIDs `first..=last`.
    SteRange { first: u32, last: u32 },
    /// All cached configuration.
    AllSte,
}

/// Command errors reported in SMMU_CMDQ_CONS.ERR (IHI 0070 4.1: CERROR_*).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandError {
    /// CERROR_ILL (0x01): undefined opcode or a reserved field value.
    Illegal,
    /// CERROR_ABT (0x02): an abort on the command fetch.
    FetchAbort,
    /// CERROR_ATC_INV_SYNC (0x03): an ATS invalidation timed out.
    AtcInvSync,
}

impl CommandError {
    /// The SMMU_CMDQ_CONS.ERR code.
    pub fn code(self) -> u8 {
        match self {
            CommandError::Illegal => 0x01,
            CommandError::FetchAbort => 0x02,
            CommandError::AtcInvSync => 0x03,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_modelled_command() {
        let cmds = [
            Command::CfgiSte {
                sid: 0xdead,
                leaf: true,
            },
            Command::CFGI_ALL,
            Command::TlbiNhAll { vmid: 7 },
            Command::TlbiNhAsid { vmid: 1, asid: 42 },
            Command::tlbi_nh_va(42, 0x1234_5000),
            Command::TlbiNhVa {
                vmid: 0,
                asid: 3,
                addr: 0x8000,
                leaf: false,
                num: 3,
                scale: 2,
                tg: 1,
            },
            Command::TlbiNsnhAll,
            Command::Sync {
                cs: SyncSignal::Irq,
                msi_addr: 0x8_0000_0040,
                msi_data: 0,
            },
            Command::Sync {
                cs: SyncSignal::Sev,
                msi_addr: 0,
                msi_data: 0,
            },
            Command::Other {
                opcode: CMD_PREFETCH_CONFIG,
            },
        ];
        for c in cmds {
            assert_eq!(Command::decode(c.encode()), Ok(c), "{c:?}");
        }
    }

    #[test]
    fn field_positions() {
        let w = Command::tlbi_nh_va(0x1234, 0xabc_d000).encode();
        assert_eq!(w[0] & 0xff, 0x12);
        assert_eq!(w[0] >> 48, 0x1234);
        assert_eq!(w[1], 0xabc_d000 | 1);
        let s = Command::Sync {
            cs: SyncSignal::Irq,
            msi_addr: 0x1000,
            msi_data: 0,
        }
        .encode();
        assert_eq!(s[0] & 0xff, 0x46);
        assert_eq!((s[0] >> 12) & 3, 0b01);
        assert_eq!(s[1], 0x1000);
        // The opcode sits in the first 32-bit word, so a CMD_SYNC that the SMMU
        // overwrites with MSIData = 0 reads back as word 0 == 0 (what Linux polls).
        assert_ne!(s[0] as u32, 0);
    }

    /// Whole entries against IHI 0070 4.3-4.7 field by field, with every field at a
    /// value that shows its width: fields wider than their slot are cut, not spread.
    #[test]
    fn entries_word_by_word() {
        let cases = [
            (
                Command::CfgiSte {
                    sid: 0x1234,
                    leaf: true,
                },
                [0x0000_1234_0000_0003, 1],
            ),
            (
                Command::CfgiSte {
                    sid: 0x1234,
                    leaf: false,
                },
                [0x0000_1234_0000_0003, 0],
            ),
            (
                Command::CfgiSteRange {
                    sid: 0x40,
                    range: 0x25,
                },
                [0x0000_0040_0000_0004, 0x05],
            ),
            (
                Command::TlbiNhAll { vmid: 0x77 },
                [0x0000_0077_0000_0010, 0],
            ),
            (
                Command::TlbiNhAsid {
                    vmid: 0x12,
                    asid: 0x3456,
                },
                [0x3456_0012_0000_0011, 0],
            ),
            (
                Command::TlbiNhVa {
                    vmid: 0x12,
                    asid: 0x3456,
                    addr: 0xdead_beef_f123,
                    leaf: true,
                    num: 0x3f,
                    scale: 0x25,
                    tg: 7,
                },
                [0x3456_0012_0051_f012, 0xdead_beef_fc01],
            ),
            (
                Command::Sync {
                    cs: SyncSignal::Sev,
                    msi_addr: 0xff12_3456_7890_abcf,
                    msi_data: 0xcafe,
                },
                [0x0000_cafe_0fc0_2046, 0x0012_3456_7890_abcc],
            ),
            (Command::TlbiNsnhAll, [0x30, 0]),
        ];
        for (cmd, words) in cases {
            assert_eq!(cmd.encode(), words, "{cmd:?}");
            assert_eq!(Command::decode(words).unwrap().encode(), words, "{cmd:?}");
        }
        // Decoding reads each field from its own bits only.
        assert_eq!(
            Command::decode([0x0000_1234_0000_0003, !1]),
            Ok(Command::CfgiSte {
                sid: 0x1234,
                leaf: false
            })
        );
        assert_eq!(
            Command::decode([0x0000_0040_0000_0004, !0x1f | 0x05]),
            Ok(Command::CfgiSteRange {
                sid: 0x40,
                range: 0x05
            })
        );
    }

    /// SMMU_CMDQ_CONS.ERR codes (IHI 0070 4.7 and 7.1).
    #[test]
    fn command_error_codes() {
        assert_eq!(CommandError::Illegal.code(), 0x01);
        assert_eq!(CommandError::FetchAbort.code(), 0x02);
        assert_eq!(CommandError::AtcInvSync.code(), 0x03);
    }

    #[test]
    fn undefined_opcode_and_reserved_cs_are_illegal() {
        assert_eq!(Command::decode([0x07, 0]), Err(CommandError::Illegal));
        assert_eq!(Command::decode([0, 0]), Err(CommandError::Illegal));
        let bad_cs = CMD_SYNC as u64 | 0b11 << SYNC_CS_SHIFT;
        assert_eq!(Command::decode([bad_cs, 0]), Err(CommandError::Illegal));
        assert_eq!(CommandError::Illegal.code(), 1);
    }

    #[test]
    fn invalidation_scopes() {
        assert_eq!(
            Command::tlbi_nh_va(5, 0x3000).invalidation(),
            Some(Invalidation::Va {
                asid: 5,
                addr: 0x3000,
                pages: 1
            })
        );
        assert_eq!(Command::CFGI_ALL.invalidation(), Some(Invalidation::AllSte));
        assert_eq!(
            Command::CfgiSteRange { sid: 5, range: 1 }.invalidation(),
            Some(Invalidation::SteRange { first: 4, last: 7 })
        );
        let ranged = Command::TlbiNhVa {
            vmid: 0,
            asid: 1,
            addr: 0,
            leaf: true,
            num: 1,
            scale: 3,
            tg: 1,
        };
        assert_eq!(
            ranged.invalidation(),
            Some(Invalidation::Va {
                asid: 1,
                addr: 0,
                pages: 16
            })
        );
    }
}
