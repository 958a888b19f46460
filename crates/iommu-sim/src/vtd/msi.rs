//! MSI address/data formats as the IOMMU sees them.
//!
//! A write to 0xFEEx_xxxx is an interrupt request. Bit 4 of the address selects the
//! format (VT-d spec 5.1.2):
//!
//! ```text
//! remappable (VT-d 5.1.2.2)             compatibility (Intel SDM Vol. 3A 11.11)
//! address 31:20 0xFEE                   address 31:20 0xFEE
//!         19:5  handle[14:0]                    19:12 destination APIC ID
//!         4     1 (interrupt format)            11:4  reserved (bit 4 = 0: format)
//!         3     SHV (subhandle valid)           3     RH (redirection hint)
//!         2     handle[15]                      2     DM (1 = logical)
//!         1:0   don't care                      1:0   don't care
//! data    31:16 reserved (0) when SHV = 1   data    31:16 reserved
//!         15:0  subhandle (when SHV = 1)            15    trigger mode (1 = level)
//!                                                   14    level (assert)
//!                                                   13:11 reserved
//!                                                   10:8  delivery mode
//!                                                   7:0   vector
//! ```
//!
//! interrupt_index = handle, or handle + subhandle when SHV = 1 (VT-d 5.1.3); the sum
//! can exceed 16 bits, so the index is a `u32`.
//!
//! Reserved request bits detected here (fault 0x20): data bits 31:16 of a remappable
//! request with SHV = 1 (VT-d 5.1.2.2; QEMU's `vtd_interrupt_remap_msi` checks the
//! same bits). A write whose address is not in 0xFEE0_0000..=0xFEEF_FFFF (upper 32
//! bits nonzero, or bits 31:20 not 0xFEE) is reported as a request-reserved-field
//! fault too, following QEMU; on hardware such a write would not be decoded as an
//! interrupt at all, so a device producing one is misconfigured.

use super::irte::DeliveryMode;
use serde::{Deserialize, Serialize};
use sim_core::{MsiMessage, Vector};

/// Address bits 31:20 of every interrupt request.
pub const ADDR_INTERRUPT_BASE: u64 = 0xFEE0_0000;
/// Mask selecting the bits that must equal [`ADDR_INTERRUPT_BASE`] (63:20).
pub const ADDR_INTERRUPT_BASE_MASK: u64 = 0xFFFF_FFFF_FFF0_0000;
/// Address bit 4: 1 = remappable format (VT-d 5.1.2).
pub const ADDR_FORMAT_REMAPPABLE: u64 = 1 << 4;
/// Remappable: address bit 3, subhandle valid.
pub const ADDR_SHV: u64 = 1 << 3;
/// Remappable: address bit 2 holds `handle[15]`.
pub const ADDR_HANDLE_15_SHIFT: u32 = 2;
/// Remappable: address bits 19:5 hold `handle[14:0]`.
pub const ADDR_HANDLE_LO_SHIFT: u32 = 5;
pub const ADDR_HANDLE_LO_MASK: u64 = 0x7fff << ADDR_HANDLE_LO_SHIFT;
/// Remappable: data bits 15:0, the subhandle when SHV = 1.
pub const DATA_SUBHANDLE_MASK: u32 = 0xffff;
/// Remappable: data bits 31:16, reserved when SHV = 1.
pub const DATA_REMAPPABLE_RESERVED: u32 = 0xffff_0000;

/// Compatibility: address bits 19:12, destination APIC ID.
pub const ADDR_COMPAT_DEST_SHIFT: u32 = 12;
/// Compatibility: address bit 3, redirection hint.
pub const ADDR_COMPAT_RH: u64 = 1 << 3;
/// Compatibility: address bit 2, destination mode (1 = logical).
pub const ADDR_COMPAT_DM: u64 = 1 << 2;
/// Compatibility: data bits 7:0, vector.
pub const DATA_VECTOR_MASK: u32 = 0xff;
/// Compatibility: data bits 10:8, delivery mode.
pub const DATA_DELIVERY_MODE_SHIFT: u32 = 8;
/// Compatibility: data bit 14, level (assert / deassert).
pub const DATA_LEVEL_ASSERT: u32 = 1 << 14;
/// Compatibility: data bit 15, trigger mode (1 = level).
pub const DATA_TRIGGER_LEVEL: u32 = 1 << 15;

/// What an MSI write asks the IOMMU for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MsiRequest {
    /// Remappable format: look up `IRTE[index]`.
    Remappable {
        handle: u16,
        shv: bool,
        subhandle: u16,
        /// handle, plus subhandle when `shv`.
        index: u32,
        /// Reserved request bits are set (data 31:16 with SHV = 1): fault 0x20.
        reserved_set: bool,
    },
    /// Compatibility format: an xAPIC-style MSI that bypasses the table.
    Compatibility {
        dest_id: u8,
        vector: Vector,
        dest_mode_logical: bool,
        redirection_hint: bool,
        delivery_mode: DeliveryMode,
        level_triggered: bool,
        assert: bool,
    },
    /// The address is outside 0xFEE0_0000..=0xFEEF_FFFF: not a valid interrupt request.
    NotInterrupt { address: u64 },
}

/// The message a device programmed with a remappable-format handle writes.
pub fn encode_remappable(handle: u16, shv: bool, subhandle: u16) -> MsiMessage {
    let h = handle as u64;
    let address = ADDR_INTERRUPT_BASE
        | ((h & 0x7fff) << ADDR_HANDLE_LO_SHIFT)
        | ADDR_FORMAT_REMAPPABLE
        | if shv { ADDR_SHV } else { 0 }
        | ((h >> 15) << ADDR_HANDLE_15_SHIFT);
    MsiMessage {
        address,
        data: if shv { subhandle as u32 } else { 0 },
    }
}

/// A compatibility-format message (edge-triggered, asserted) to an 8-bit APIC ID.
pub fn encode_compat(
    dest_id: u8,
    vector: Vector,
    dest_mode_logical: bool,
    delivery_mode: DeliveryMode,
) -> MsiMessage {
    MsiMessage {
        address: ADDR_INTERRUPT_BASE
            | (dest_id as u64) << ADDR_COMPAT_DEST_SHIFT
            | if dest_mode_logical { ADDR_COMPAT_DM } else { 0 },
        data: vector.0 as u32
            | (delivery_mode.bits() as u32) << DATA_DELIVERY_MODE_SHIFT
            | DATA_LEVEL_ASSERT,
    }
}

/// Decodes a device's MSI write.
pub fn decode(msg: &MsiMessage) -> MsiRequest {
    let a = msg.address;
    if a & ADDR_INTERRUPT_BASE_MASK != ADDR_INTERRUPT_BASE {
        return MsiRequest::NotInterrupt { address: a };
    }
    if a & ADDR_FORMAT_REMAPPABLE != 0 {
        let handle = (((a & ADDR_HANDLE_LO_MASK) >> ADDR_HANDLE_LO_SHIFT)
            | ((a >> ADDR_HANDLE_15_SHIFT) & 1) << 15) as u16;
        let shv = a & ADDR_SHV != 0;
        let subhandle = if shv {
            (msg.data & DATA_SUBHANDLE_MASK) as u16
        } else {
            0
        };
        MsiRequest::Remappable {
            handle,
            shv,
            subhandle,
            index: handle as u32 + subhandle as u32,
            reserved_set: shv && msg.data & DATA_REMAPPABLE_RESERVED != 0,
        }
    } else {
        let d = msg.data;
        MsiRequest::Compatibility {
            dest_id: (a >> ADDR_COMPAT_DEST_SHIFT) as u8,
            vector: Vector((d & DATA_VECTOR_MASK) as u8),
            dest_mode_logical: a & ADDR_COMPAT_DM != 0,
            redirection_hint: a & ADDR_COMPAT_RH != 0,
            delivery_mode: DeliveryMode::from_bits((d >> DATA_DELIVERY_MODE_SHIFT) as u8),
            level_triggered: d & DATA_TRIGGER_LEVEL != 0,
            assert: d & DATA_LEVEL_ASSERT != 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn remappable_layout() {
        let m = encode_remappable(0x8003, false, 0);
        assert_eq!(m.address, 0xFEE0_0000 | 3 << 5 | 1 << 4 | 1 << 2);
        assert_eq!(m.data, 0);
        let m = encode_remappable(0x10, true, 5);
        assert_eq!(m.address & ADDR_SHV, ADDR_SHV);
        assert_eq!(
            decode(&m),
            MsiRequest::Remappable {
                handle: 0x10,
                shv: true,
                subhandle: 5,
                index: 0x15,
                reserved_set: false
            }
        );
    }

    #[test]
    fn subhandle_sum_can_pass_16_bits() {
        match decode(&encode_remappable(0xffff, true, 0xffff)) {
            MsiRequest::Remappable { index, .. } => assert_eq!(index, 0x1fffe),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn reserved_data_bits_only_matter_with_shv() {
        let mut m = encode_remappable(7, true, 1);
        m.data |= 1 << 16;
        assert!(matches!(
            decode(&m),
            MsiRequest::Remappable {
                reserved_set: true,
                ..
            }
        ));
        let mut m = encode_remappable(7, false, 0);
        m.data = 0x1_0041;
        assert!(matches!(
            decode(&m),
            MsiRequest::Remappable {
                reserved_set: false,
                index: 7,
                ..
            }
        ));
    }

    #[test]
    fn compat_layout_per_sdm() {
        let m = encode_compat(0x12, Vector(0x61), true, DeliveryMode::LowestPriority);
        assert_eq!(m.address, 0xFEE1_2004);
        assert_eq!(m.data, 0x4161);
        assert_eq!(
            decode(&m),
            MsiRequest::Compatibility {
                dest_id: 0x12,
                vector: Vector(0x61),
                dest_mode_logical: true,
                redirection_hint: false,
                delivery_mode: DeliveryMode::LowestPriority,
                level_triggered: false,
                assert: true
            }
        );
        // SDM 11.11.1-2: RH is address bit 3, the trigger mode data bit 15.
        let level = MsiMessage {
            address: 0xFEE0_3008,
            data: 0xc030,
        };
        assert_eq!(
            decode(&level),
            MsiRequest::Compatibility {
                dest_id: 0x03,
                vector: Vector(0x30),
                dest_mode_logical: false,
                redirection_hint: true,
                delivery_mode: DeliveryMode::Fixed,
                level_triggered: true,
                assert: true
            }
        );
        // Data bit 14 clear: a de-assert message.
        let deassert = MsiMessage {
            address: 0xFEE0_3000,
            data: 0x8030,
        };
        assert!(matches!(
            decode(&deassert),
            MsiRequest::Compatibility {
                assert: false,
                level_triggered: true,
                ..
            }
        ));
    }

    #[test]
    fn non_interrupt_addresses() {
        for address in [0xFED0_0000u64, 0x1_FEE0_0000, 0] {
            assert_eq!(
                decode(&MsiMessage { address, data: 0 }),
                MsiRequest::NotInterrupt { address }
            );
        }
    }

    proptest! {
        #[test]
        fn remappable_round_trips(handle in any::<u16>(), shv in any::<bool>(), sub in any::<u16>()) {
            let m = encode_remappable(handle, shv, sub);
            let sub = if shv { sub } else { 0 };
            prop_assert_eq!(decode(&m), MsiRequest::Remappable {
                handle, shv, subhandle: sub, index: handle as u32 + sub as u32, reserved_set: false });
        }
    }
}
