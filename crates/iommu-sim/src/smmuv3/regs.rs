//! SMMUv3 register map, ID-register features, and the Linux rule that picks how a CPU
//! waits for CMD_SYNC.
//!
//! Offsets and fields from Arm IHI 0070 ("Arm System Memory Management Unit
//! Architecture Specification, SMMU architecture version 3"), chapter 6: 6.3.1
//! SMMU_IDR0, 6.3.2 SMMU_IDR1, 6.3.26 SMMU_CMDQ_BASE, 6.3.27 SMMU_CMDQ_PROD, 6.3.28
//! SMMU_CMDQ_CONS. Only what the command queue and translation models use is named.

use serde::{Deserialize, Serialize};

/// SMMU_IDR0, page 0 offset 0x0000 (IHI 0070 6.3.1).
pub const SMMU_IDR0: u32 = 0x0000;
/// SMMU_IDR1, page 0 offset 0x0004 (6.3.2).
pub const SMMU_IDR1: u32 = 0x0004;
/// SMMU_CR0, page 0 offset 0x0020.
pub const SMMU_CR0: u32 = 0x0020;
/// SMMU_GERROR, page 0 offset 0x0060.
pub const SMMU_GERROR: u32 = 0x0060;
/// SMMU_STRTAB_BASE, page 0 offset 0x0080.
pub const SMMU_STRTAB_BASE: u32 = 0x0080;
/// SMMU_STRTAB_BASE_CFG, page 0 offset 0x0088.
pub const SMMU_STRTAB_BASE_CFG: u32 = 0x0088;
/// SMMU_CMDQ_BASE, page 0 offset 0x0090 (6.3.26).
pub const SMMU_CMDQ_BASE: u32 = 0x0090;
/// SMMU_CMDQ_PROD, page 0 offset 0x0098 (6.3.27).
pub const SMMU_CMDQ_PROD: u32 = 0x0098;
/// SMMU_CMDQ_CONS, page 0 offset 0x009C (6.3.28).
pub const SMMU_CMDQ_CONS: u32 = 0x009C;

/// SMMU_IDR0.COHACC, bit 4: coherent access to tables, queues and MSIs (incl. CMD_SYNC MSIs).
pub const IDR0_COHACC: u32 = 0x10;
/// SMMU_IDR0.MSI, bit 13: message-signalled interrupts supported.
pub const IDR0_MSI: u32 = 0x2000;
/// SMMU_IDR0.SEV, bit 14: the SMMU and system can send WFE wake-up events to PEs.
pub const IDR0_SEV: u32 = 0x4000;
/// SMMU_IDR0.S1P, bit 1: stage 1 translation supported.
pub const IDR0_S1P: u32 = 0x2;
/// SMMU_IDR0.S2P, bit 0: stage 2 translation supported.
pub const IDR0_S2P: u32 = 0x1;

/// SMMU_IDR1.CMDQS, bits \[25:21\]: maximum log2 of the Command queue entries (<= 19).
pub const IDR1_CMDQS_SHIFT: u32 = 21;
pub const IDR1_CMDQS_MASK: u32 = 0x1f;
/// SMMU_IDR1.EVENTQS, bits \[20:16\]: maximum log2 of the Event queue entries.
pub const IDR1_EVENTQS_SHIFT: u32 = 16;

/// SMMU_CMDQ_BASE.LOG2SIZE, bits \[4:0\].
pub const CMDQ_BASE_LOG2SIZE_MASK: u64 = 0x1f;
/// SMMU_CMDQ_BASE.ADDR, bits \[55:5\].
pub const CMDQ_BASE_ADDR_MASK: u64 = 0x00ff_ffff_ffff_ffe0;

/// SMMU_CMDQ_PROD.WR / SMMU_CMDQ_CONS.RD: bits \[19:0\], index in [QS-1:0] and the wrap
/// flag at bit \[QS\] (6.3.27, 6.3.28).
pub const QUEUE_INDEX_FIELD_MASK: u32 = 0x000f_ffff;
/// SMMU_CMDQ_CONS.ERR, bits \[30:24\]: reason code of the active command error.
pub const CMDQ_CONS_ERR_SHIFT: u32 = 24;
pub const CMDQ_CONS_ERR_MASK: u32 = 0x7f;

/// SMMU_GERROR.CMDQ_ERR, bit 0: a command error is active.
pub const GERROR_CMDQ_ERR: u32 = 0x1;

/// Size of one Command queue entry in bytes (IHI 0070 4.1: commands are 16 bytes).
pub const CMDQ_ENTRY_BYTES: u64 = 16;

/// The SMMU_IDR0 features that decide how CMD_SYNC completion is signalled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SmmuFeatures {
    /// SMMU_IDR0.MSI. Default true: an SMMU in a GICv3 system with an ITS normally
    /// supports MSIs (Arm MMU-600 and MMU-700 do; assumption for the modelled part).
    pub msi: bool,
    /// SMMU_IDR0.COHACC. Default true: server SMMUs sit on a coherent interconnect.
    /// Assumption for the modelled part.
    pub cohacc: bool,
    /// SMMU_IDR0.SEV. Default true: assumption for the modelled part.
    pub sev: bool,
}

impl Default for SmmuFeatures {
    fn default() -> Self {
        SmmuFeatures {
            msi: true,
            cohacc: true,
            sev: true,
        }
    }
}

impl SmmuFeatures {
    /// Decodes the three bits from an SMMU_IDR0 value.
    pub fn from_idr0(idr0: u32) -> SmmuFeatures {
        SmmuFeatures {
            msi: idr0 & IDR0_MSI != 0,
            cohacc: idr0 & IDR0_COHACC != 0,
            sev: idr0 & IDR0_SEV != 0,
        }
    }

    /// The SMMU_IDR0 bits these features set (stage 1 is always reported: it is the
    /// only translation stage modelled).
    pub fn to_idr0(self) -> u32 {
        let mut v = IDR0_S1P;
        if self.msi {
            v |= IDR0_MSI;
        }
        if self.cohacc {
            v |= IDR0_COHACC;
        }
        if self.sev {
            v |= IDR0_SEV;
        }
        v
    }
}

/// How the CPU that issued a CMD_SYNC waits for it (what Linux's
/// `arm_smmu_cmdq_poll_until_sync` does).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SyncPollMode {
    /// The CMD_SYNC is built with CS = SIG_IRQ and its MSI address pointed at its own
    /// queue slot; the CPU waits for the first 32-bit word of that slot to become 0
    /// (the MSI data). Linux's ARM_SMMU_OPT_MSIPOLL.
    MsiWrite,
    /// The CMD_SYNC is built with CS = SIG_SEV and the CPU re-reads SMMU_CMDQ_CONS until
    /// it passes the CMD_SYNC. `wfe`: between reads it waits with WFE (SMMU_IDR0.SEV);
    /// otherwise it spins, then backs off with growing delays.
    ConsPoll { wfe: bool },
}

impl SyncPollMode {
    /// Linux's choice (`arm_smmu_device_hw_probe`): MSI polling only when the SMMU has
    /// MSIs, the SMMU is coherent, and the `disable_msipolling` module parameter is not
    /// set (`msi_polling_enabled` here). `coherent` is the firmware's coherency
    /// attribute, which Linux prefers over SMMU_IDR0.COHACC; pass `features.cohacc` when
    /// firmware agrees with the ID register. WFE is used for CONS polling exactly when
    /// SMMU_IDR0.SEV is set (`queue_poll_init`).
    pub fn linux(
        features: SmmuFeatures,
        coherent: bool,
        msi_polling_enabled: bool,
    ) -> SyncPollMode {
        if features.msi && coherent && msi_polling_enabled {
            SyncPollMode::MsiWrite
        } else {
            SyncPollMode::ConsPoll { wfe: features.sev }
        }
    }

    /// Short label for tables ("msi", "cons-wfe", "cons-spin").
    pub fn label(self) -> &'static str {
        match self {
            SyncPollMode::MsiWrite => "msi",
            SyncPollMode::ConsPoll { wfe: true } => "cons-wfe",
            SyncPollMode::ConsPoll { wfe: false } => "cons-spin",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idr0_round_trip_and_bit_positions() {
        let f = SmmuFeatures {
            msi: true,
            cohacc: false,
            sev: true,
        };
        let idr0 = f.to_idr0();
        assert_eq!(idr0 & (1 << 13), 1 << 13);
        assert_eq!(idr0 & (1 << 14), 1 << 14);
        assert_eq!(idr0 & (1 << 4), 0);
        assert_eq!(SmmuFeatures::from_idr0(idr0), f);
        // IHI 0070 6.3.1: S1P bit 1, COHACC bit 4, MSI bit 13, SEV bit 14.
        assert_eq!(SmmuFeatures::default().to_idr0(), 0x6012);
        let none = SmmuFeatures {
            msi: false,
            cohacc: false,
            sev: false,
        };
        assert_eq!(none.to_idr0(), 0x2);
        assert_eq!(SmmuFeatures::from_idr0(0), none);
        assert_eq!(
            SmmuFeatures::from_idr0(!0x6010),
            none,
            "other bits are not features"
        );
        for (bit, f) in [
            (
                4,
                SmmuFeatures {
                    cohacc: true,
                    ..none
                },
            ),
            (13, SmmuFeatures { msi: true, ..none }),
            (14, SmmuFeatures { sev: true, ..none }),
        ] {
            assert_eq!(SmmuFeatures::from_idr0(1 << bit), f, "bit {bit}");
        }
    }

    /// The literal masks are the fields of IHI 0070 6.3.26-6.3.28 and 6.3.1.
    #[test]
    fn masks_are_the_register_fields() {
        assert_eq!(CMDQ_BASE_ADDR_MASK, ((1u64 << 56) - 1) & !0x1f);
        assert_eq!(QUEUE_INDEX_FIELD_MASK, (1 << 20) - 1);
        assert_eq!(
            (IDR0_S2P, IDR0_S1P, GERROR_CMDQ_ERR),
            (1 << 0, 1 << 1, 1 << 0)
        );
    }

    #[test]
    fn linux_uses_msi_polling_only_with_msi_coherency_and_the_option() {
        let all = SmmuFeatures::default();
        assert_eq!(SyncPollMode::linux(all, true, true), SyncPollMode::MsiWrite);
        assert_eq!(
            SyncPollMode::linux(all, true, false),
            SyncPollMode::ConsPoll { wfe: true }
        );
        assert_eq!(
            SyncPollMode::linux(all, false, true),
            SyncPollMode::ConsPoll { wfe: true }
        );
        let no_msi = SmmuFeatures { msi: false, ..all };
        assert_eq!(
            SyncPollMode::linux(no_msi, true, true),
            SyncPollMode::ConsPoll { wfe: true }
        );
        let no_sev = SmmuFeatures {
            msi: false,
            sev: false,
            ..all
        };
        assert_eq!(
            SyncPollMode::linux(no_sev, true, true),
            SyncPollMode::ConsPoll { wfe: false }
        );
        assert_eq!(SyncPollMode::MsiWrite.label(), "msi");
    }
}
