//! The 64-byte posted-interrupt descriptor (PID) and the IOMMU's post on it.
//!
//! Layout (bit offsets in the 512-bit line, word `i` of [`PiDesc`] holding bits
//! `64i..64i+63`), from the Intel VT-d specification, section 5.2.3 ("Interrupt-Posting
//! Hardware Operation") and section 9.12 ("Posted Interrupt Descriptor"), and Linux
//! `arch/x86/include/asm/posted_intr.h` (`struct pi_desc`):
//!
//! ```text
//!  bits     field  meaning
//!  0..=255  PIR    posted-interrupt requests, one bit per vector
//!  256      ON     outstanding notification
//!  257      SN     suppress notification (non-urgent posts)
//!  258..271 -      reserved
//!  272..279 NV     notification vector
//!  280..287 -      reserved
//!  288..319 NDST   notification destination: x2APIC ID (xAPIC mode: 8-bit ID in 296..303)
//!  320..511 -      reserved
//! ```
//!
//! All of ON, SN, NV and NDST sit in word 4, which Linux calls `control`.

use serde::{Deserialize, Serialize};
use sim_core::{Vector, VectorSet};

/// Size and required alignment of a descriptor in bytes (VT-d 9.12: the PDA in a
/// posted IRTE holds address bits 63:6, so the descriptor is 64-byte aligned).
pub const PID_ALIGN: u64 = 64;

/// Whether `addr` is a legal descriptor address (64-byte aligned).
pub fn is_pid_aligned(addr: u64) -> bool {
    addr & (PID_ALIGN - 1) == 0
}

/// Number of 64-bit words in the descriptor.
pub const PID_WORDS: usize = 8;
/// Number of bits in the descriptor line.
pub const PID_BITS: u32 = 512;

/// Number of 64-bit PIR words (words 0..=3).
pub const PIR_WORDS: usize = 4;
/// Index of the control word holding ON, SN, NV and NDST (bits 256..319).
pub const CONTROL_WORD: usize = 4;

/// ON, outstanding notification: bit 256 of the line (VT-d 9.12; Linux `POSTED_INTR_ON`
/// is bit 0 of `control`).
pub const ON_BIT: u32 = 256;
/// SN, suppress notification: bit 257 (VT-d 9.12; Linux `POSTED_INTR_SN`, bit 1 of
/// `control`).
pub const SN_BIT: u32 = 257;
/// First bit of NV, the 8-bit notification vector: bits 272..=279 (VT-d 9.12).
pub const NV_SHIFT: u32 = 272;
/// First bit of NDST, the 32-bit notification destination: bits 288..=319 (VT-d 9.12,
/// x2APIC mode).
pub const NDST_SHIFT: u32 = 288;
/// First bit of the 8-bit APIC ID in xAPIC mode: bits 296..=303 (VT-d 9.12), i.e.
/// NDST bits 15:8 (Linux stores `(id << 8) & 0xff00` in `ndst` when x2APIC is off).
pub const NDST_XAPIC_SHIFT: u32 = 296;

const fn word_of(bit: u32) -> usize {
    (bit / 64) as usize
}
const fn shift_in_word(bit: u32) -> u32 {
    bit % 64
}

/// Bits of the control word that carry a defined field in x2APIC mode: ON (bit 0 of
/// the word), SN (1), NV (16..23), NDST (32..63). Written out rather than composed
/// from the shifts above; `each_control_bit_is_reserved_exactly_where_the_spec_says`
/// checks it bit by bit against VT-d 9.12.
const CONTROL_DEFINED_X2APIC: u64 = 0xffff_ffff_00ff_0003;
/// Bits of the control word that carry a defined field in xAPIC mode: as above, with
/// NDST narrowed to 40..47.
const CONTROL_DEFINED_XAPIC: u64 = 0x0000_ff00_00ff_0003;

/// The notification the IOMMU sends after a post that found ON clear: vector `nv` to
/// the local APIC whose ID is `ndst`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Notification {
    pub nv: Vector,
    pub ndst: u32,
}

/// What one [`PiDesc::post`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[must_use]
pub struct PostResult {
    /// PIR\[vector\] was already set: this post merged into a pending one (the simulator
    /// reports it as a merged MSI).
    pub already_pending: bool,
    /// ON before the post.
    pub on_before: bool,
    /// SN before the post (the post never changes SN).
    pub sn_before: bool,
    /// The notification to send, if the post set ON.
    pub notification: Option<Notification>,
}

/// A posted-interrupt descriptor: the 512-bit line as eight little-endian 64-bit words.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PiDesc(pub [u64; PID_WORDS]);

impl PiDesc {
    /// An all-zero descriptor (empty PIR, ON = SN = 0, NV = 0, NDST = 0).
    pub const ZERO: PiDesc = PiDesc([0; PID_WORDS]);

    /// A descriptor with empty PIR, ON = SN = 0 and the given notification target.
    pub fn new(nv: Vector, ndst: u32) -> PiDesc {
        let mut d = PiDesc::ZERO;
        d.set_nv(nv);
        d.set_ndst(ndst);
        d
    }

    /// The raw words.
    pub fn words(&self) -> &[u64; PID_WORDS] {
        &self.0
    }

    /// Word `i` (0..8) of the line.
    ///
    /// # Panics
    /// If `i >= 8`.
    pub fn word(&self, i: usize) -> u64 {
        self.0[i]
    }

    /// Overwrites word `i` (0..8).
    ///
    /// # Panics
    /// If `i >= 8`.
    pub fn set_word(&mut self, i: usize, value: u64) {
        self.0[i] = value;
    }

    /// Bit `bit` (0..512) of the line.
    ///
    /// # Panics
    /// If `bit >= 512`.
    pub fn bit(&self, bit: u32) -> bool {
        assert!(bit < PID_BITS, "descriptor bit {bit} out of range 0..512");
        self.0[word_of(bit)] >> shift_in_word(bit) & 1 != 0
    }

    /// Sets bit `bit` (0..512) to `value`; returns its old value.
    ///
    /// # Panics
    /// If `bit >= 512`.
    pub fn set_bit(&mut self, bit: u32, value: bool) -> bool {
        let old = self.bit(bit);
        let mask = 1u64 << shift_in_word(bit);
        let w = &mut self.0[word_of(bit)];
        if value {
            *w |= mask;
        } else {
            *w &= !mask;
        }
        old
    }

    /// PIR word `i` (0..4), holding vectors `64i..64i+63`.
    ///
    /// # Panics
    /// If `i >= 4`.
    pub fn pir_word(&self, i: usize) -> u64 {
        assert!(i < PIR_WORDS, "PIR word {i} out of range 0..4");
        self.0[i]
    }

    /// Overwrites PIR word `i` (0..4).
    ///
    /// # Panics
    /// If `i >= 4`.
    pub fn set_pir_word(&mut self, i: usize, value: u64) {
        assert!(i < PIR_WORDS, "PIR word {i} out of range 0..4");
        self.0[i] = value;
    }

    /// The whole PIR as a vector set.
    pub fn pir(&self) -> VectorSet {
        VectorSet([self.0[0], self.0[1], self.0[2], self.0[3]])
    }

    /// Replaces the whole PIR.
    pub fn set_pir(&mut self, pir: VectorSet) {
        self.0[..PIR_WORDS].copy_from_slice(&pir.0);
    }

    /// The control word (bits 256..319: ON, SN, NV, NDST).
    pub fn control(&self) -> u64 {
        self.0[CONTROL_WORD]
    }

    /// Outstanding notification.
    pub fn on(&self) -> bool {
        self.bit(ON_BIT)
    }
    pub fn set_on(&mut self, on: bool) {
        self.set_bit(ON_BIT, on);
    }

    /// Suppress notification.
    pub fn sn(&self) -> bool {
        self.bit(SN_BIT)
    }
    pub fn set_sn(&mut self, sn: bool) {
        self.set_bit(SN_BIT, sn);
    }

    /// Notification vector.
    pub fn nv(&self) -> Vector {
        Vector((self.0[CONTROL_WORD] >> shift_in_word(NV_SHIFT)) as u8)
    }
    pub fn set_nv(&mut self, nv: Vector) {
        let s = shift_in_word(NV_SHIFT);
        let w = &mut self.0[CONTROL_WORD];
        *w = (*w & !(0xff << s)) | (u64::from(nv.0) << s);
    }

    /// Notification destination (x2APIC ID, all 32 bits).
    pub fn ndst(&self) -> u32 {
        (self.0[CONTROL_WORD] >> shift_in_word(NDST_SHIFT)) as u32
    }
    pub fn set_ndst(&mut self, ndst: u32) {
        let s = shift_in_word(NDST_SHIFT);
        let w = &mut self.0[CONTROL_WORD];
        *w = (*w & !(0xffff_ffff << s)) | (u64::from(ndst) << s);
    }

    /// The 8-bit xAPIC destination ID (bits 296..303, i.e. NDST bits 15:8).
    pub fn ndst_xapic(&self) -> u8 {
        (self.0[CONTROL_WORD] >> shift_in_word(NDST_XAPIC_SHIFT)) as u8
    }
    /// Writes an xAPIC destination: NDST becomes `id << 8`, as VT-d 9.12 lays it out
    /// (the other NDST bits are reserved in xAPIC mode and cleared here).
    pub fn set_ndst_xapic(&mut self, id: u8) {
        self.set_ndst(u32::from(id) << (NDST_XAPIC_SHIFT - NDST_SHIFT));
    }

    /// Whether any bit reserved in x2APIC mode is set (bits 258..271, 280..287,
    /// 320..511).
    pub fn reserved_bits_set(&self) -> bool {
        self.0[CONTROL_WORD] & !CONTROL_DEFINED_X2APIC != 0
            || self.0[CONTROL_WORD + 1..].iter().any(|w| *w != 0)
    }

    /// Whether any bit reserved in xAPIC mode is set: as [`Self::reserved_bits_set`]
    /// plus NDST bits 288..295 and 304..319.
    pub fn reserved_bits_set_xapic(&self) -> bool {
        self.0[CONTROL_WORD] & !CONTROL_DEFINED_XAPIC != 0
            || self.0[CONTROL_WORD + 1..].iter().any(|w| *w != 0)
    }

    /// The line as 64 bytes, little-endian word by word (byte `8i + k` is byte `k` of
    /// word `i`), which is how the line sits in memory on x86.
    pub fn to_bytes(&self) -> [u8; 64] {
        let mut out = [0u8; 64];
        for (chunk, w) in out.chunks_exact_mut(8).zip(self.0.iter()) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// Inverse of [`Self::to_bytes`].
    pub fn from_bytes(bytes: &[u8; 64]) -> PiDesc {
        let mut words = [0u64; PID_WORDS];
        for (w, chunk) in words.iter_mut().zip(bytes.chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            *w = u64::from_le_bytes(b);
        }
        PiDesc(words)
    }

    /// The IOMMU's posting update, one indivisible read-modify-write of the line (VT-d
    /// 5.2.3 / 9.12): set PIR\[`vector`\]; then, if ON was 0 and (`urg` or SN was 0), set
    /// ON and return the notification (NV to NDST). Otherwise the request just waits in
    /// PIR (coalescing). SN, NV and NDST are never changed by a post.
    pub fn post(&mut self, vector: Vector, urg: bool) -> PostResult {
        let on_before = self.on();
        let sn_before = self.sn();
        let w = &mut self.0[vector.word()];
        let already_pending = *w & vector.bit() != 0;
        *w |= vector.bit();
        let notify = !on_before && (urg || !sn_before);
        let notification = if notify {
            self.set_on(true);
            Some(Notification {
                nv: self.nv(),
                ndst: self.ndst(),
            })
        } else {
            None
        };
        PostResult {
            already_pending,
            on_before,
            sn_before,
            notification,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn field_positions_match_the_spec() {
        let mut d = PiDesc::ZERO;
        d.set_on(true);
        assert_eq!(d.0[4], 1);
        d = PiDesc::ZERO;
        d.set_sn(true);
        assert_eq!(d.0[4], 1 << 1);
        d = PiDesc::ZERO;
        d.set_nv(Vector(0xeb));
        assert_eq!(d.0[4], 0xeb << 16);
        d = PiDesc::ZERO;
        d.set_ndst(0xdead_beef);
        assert_eq!(d.0[4], 0xdead_beef << 32);
        d = PiDesc::ZERO;
        d.set_ndst_xapic(0x5a);
        assert_eq!(d.0[4], 0x5a << 40);
        assert_eq!(d.ndst_xapic(), 0x5a);
        assert_eq!(d.ndst(), 0x5a00);
        // Byte view: ON is bit 0 of byte 32, NV is byte 34, NDST bytes 36..40.
        let mut d = PiDesc::new(Vector(0xeb), 0x0403_0201);
        d.set_on(true);
        let b = d.to_bytes();
        assert_eq!(b[32], 1);
        assert_eq!(b[34], 0xeb);
        assert_eq!(&b[36..40], &[1, 2, 3, 4]);
    }

    #[test]
    fn control_fields_do_not_clobber_each_other_or_pir() {
        let mut d = PiDesc::ZERO;
        d.set_pir(VectorSet([u64::MAX; 4]));
        d.set_on(true);
        d.set_sn(true);
        d.set_nv(Vector(0xff));
        d.set_ndst(u32::MAX);
        assert!(!d.reserved_bits_set());
        d.set_nv(Vector(0x12));
        d.set_ndst(7);
        assert!(d.on() && d.sn());
        assert_eq!(d.pir(), VectorSet([u64::MAX; 4]));
        assert_eq!((d.nv(), d.ndst()), (Vector(0x12), 7));
        d.set_on(false);
        assert!(!d.on() && d.sn());
        assert_eq!((d.nv(), d.ndst()), (Vector(0x12), 7));
        let back = PiDesc::from_bytes(&d.to_bytes());
        assert_eq!(back, d);
    }

    #[test]
    fn reserved_bits_are_detected() {
        let mut d = PiDesc::new(Vector(0xeb), 3);
        assert!(!d.reserved_bits_set());
        for bit in (258..272).chain(280..288).chain(320..512) {
            let mut e = d;
            e.set_bit(bit, true);
            assert!(e.reserved_bits_set(), "bit {bit}");
            assert!(e.reserved_bits_set_xapic(), "bit {bit}");
        }
        // NDST bits outside 296..303 are reserved only in xAPIC mode.
        d.set_ndst(1);
        assert!(!d.reserved_bits_set());
        assert!(d.reserved_bits_set_xapic());
        d.set_ndst_xapic(0xff);
        assert!(!d.reserved_bits_set_xapic());
    }

    /// Bit by bit over the control word (VT-d 9.12): ON (256), SN (257), NV
    /// (272..279) and NDST (288..319) are defined in x2APIC mode; in xAPIC mode NDST
    /// shrinks to 296..303.
    #[test]
    fn each_control_bit_is_reserved_exactly_where_the_spec_says() {
        for bit in 256..320 {
            let mut d = PiDesc::ZERO;
            d.set_bit(bit, true);
            let defined_x2apic = matches!(bit, 256 | 257 | 272..=279 | 288..=319);
            let defined_xapic = matches!(bit, 256 | 257 | 272..=279 | 296..=303);
            assert_eq!(d.reserved_bits_set(), !defined_x2apic, "bit {bit}, x2APIC");
            assert_eq!(
                d.reserved_bits_set_xapic(),
                !defined_xapic,
                "bit {bit}, xAPIC"
            );
        }
    }

    #[test]
    fn pir_words_read_and_write_the_first_four_words_only() {
        let mut d = PiDesc::new(Vector(0xf0), 7);
        let control = d.control();
        for i in 0..PIR_WORDS {
            d.set_pir_word(i, 0x1111 * (i as u64 + 1));
        }
        for i in 0..PIR_WORDS {
            assert_eq!(d.pir_word(i), 0x1111 * (i as u64 + 1));
            assert_eq!(d.word(i), d.pir_word(i));
            assert_eq!(d.words()[i], d.pir_word(i));
        }
        assert_eq!(d.words()[CONTROL_WORD], control);
        assert_eq!(d.words(), &d.0);
        assert_eq!(d.pir().0, [0x1111, 0x2222, 0x3333, 0x4444]);
    }

    #[test]
    fn post_notifies_only_when_on_clear_and_urgent_or_unsuppressed() {
        for on in [false, true] {
            for sn in [false, true] {
                for urg in [false, true] {
                    let mut d = PiDesc::new(Vector(0xeb), 9);
                    d.set_on(on);
                    d.set_sn(sn);
                    let r = d.post(Vector(0x41), urg);
                    let expect = !on && (urg || !sn);
                    assert_eq!(
                        r.notification.is_some(),
                        expect,
                        "on={on} sn={sn} urg={urg}"
                    );
                    if expect {
                        assert_eq!(
                            r.notification,
                            Some(Notification {
                                nv: Vector(0xeb),
                                ndst: 9
                            })
                        );
                    }
                    assert_eq!((r.on_before, r.sn_before), (on, sn));
                    assert!(!r.already_pending);
                    assert!(d.pir().contains(Vector(0x41)));
                    assert_eq!(d.pir().count(), 1);
                    assert_eq!(d.on(), on || expect);
                    assert_eq!(d.sn(), sn, "post never changes SN");
                }
            }
        }
    }

    #[test]
    fn post_on_a_set_bit_reports_already_pending() {
        let mut d = PiDesc::new(Vector(0xeb), 0);
        let first = d.post(Vector(0xa0), false);
        assert!(!first.already_pending);
        assert!(first.notification.is_some());
        let second = d.post(Vector(0xa0), false);
        assert!(second.already_pending);
        assert!(second.on_before);
        assert_eq!(second.notification, None);
        let third = d.post(Vector(0xa1), false);
        assert!(!third.already_pending);
        assert_eq!(d.pir().count(), 2);
    }

    #[test]
    fn alignment_helper() {
        assert!(is_pid_aligned(0));
        assert!(is_pid_aligned(0x1000_0040));
        assert!(!is_pid_aligned(0x1000_0020));
        assert!(!is_pid_aligned(1));
    }

    proptest! {
        #[test]
        fn fields_round_trip_through_bytes(
            pir in any::<[u64; 4]>(), on: bool, sn: bool, nv: u8, ndst: u32,
        ) {
            let mut d = PiDesc::ZERO;
            d.set_ndst(ndst);
            d.set_pir(VectorSet(pir));
            d.set_nv(Vector(nv));
            d.set_sn(sn);
            d.set_on(on);
            let back = PiDesc::from_bytes(&d.to_bytes());
            prop_assert_eq!(back, d);
            prop_assert_eq!(back.pir(), VectorSet(pir));
            prop_assert_eq!(back.on(), on);
            prop_assert_eq!(back.sn(), sn);
            prop_assert_eq!(back.nv(), Vector(nv));
            prop_assert_eq!(back.ndst(), ndst);
            prop_assert!(!back.reserved_bits_set());
        }

        #[test]
        fn raw_words_round_trip_through_bytes(words in any::<[u64; 8]>()) {
            let d = PiDesc(words);
            prop_assert_eq!(PiDesc::from_bytes(&d.to_bytes()), d);
        }
    }
}
