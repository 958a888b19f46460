//! The explorer's own byte encoding of a search state, for the frontier.
//!
//! Every queued state is encoded once by the worker that made it and decoded once by
//! the worker that expands it; with serde and postcard that was a third of a full
//! search's instructions (about 1,600 per encode and 2,200 per decode, cachegrind,
//! 2026-12-04), spent walking serde's visitor calls field by field. This encoding
//! writes the same information directly: an integer as one byte when it is small and
//! otherwise as a length tag and its low bytes, booleans and enum tags as one byte,
//! an `Option` as a tag byte then its value, a `Vec` as its length then its items.
//! It is prefix-free, so the bytes of a state identify it, and [`Pack::unpack`] of
//! [`Pack::pack`]'s bytes gives the value back (tested over every state of several
//! searches in `search::tests`).
//!
//! Decoding reads only what encoding wrote: a malformed input returns `None`, which
//! the search treats as a bug in the search itself.

use sim_core::Vector;

use super::migration::{FetchedPost, MigrationCleanup, MigrationStep};
use super::model::{BufferedStore, MemoryModel, Run, VectorCount, World};
use crate::kernel::sn::SnOp;
use crate::kernel::CpuOp;
use pid_model::PiDesc;

/// A value the frontier can hold as bytes.
pub(crate) trait Pack: Sized {
    /// Appends the value's encoding to `out`.
    fn pack(&self, out: &mut Vec<u8>);
    /// Reads one value from the front of `input` and advances it past the value.
    fn unpack(input: &mut &[u8]) -> Option<Self>;
}

/// Decodes a whole buffer as one value: `None` if it is malformed or has bytes left.
pub(crate) fn unpack_all<T: Pack>(mut bytes: &[u8]) -> Option<T> {
    let value = T::unpack(&mut bytes)?;
    bytes.is_empty().then_some(value)
}

fn take_byte(input: &mut &[u8]) -> Option<u8> {
    let (&b, rest) = input.split_first()?;
    *input = rest;
    Some(b)
}

/// Values below this take one byte, their own; a larger value is a tag byte
/// `SMALL + n - 1` followed by its `n` low bytes, little-endian (the fewest that hold
/// it). Counters, flags and vectors are nearly always small; PIR words and the
/// descriptor's upper words are not, and take their bytes in one copy instead of a
/// loop over 7-bit groups.
const SMALL: u64 = 0xf8;

#[inline]
fn put_uint(v: u64, out: &mut Vec<u8>) {
    if v < SMALL {
        out.push(v as u8);
        return;
    }
    let n = (64 - v.leading_zeros() as usize).div_ceil(8);
    let mut buf = [0u8; 9];
    buf[0] = (SMALL as usize + n - 1) as u8;
    buf[1..].copy_from_slice(&v.to_le_bytes());
    out.extend_from_slice(&buf[..=n]);
}

#[inline]
fn take_uint(input: &mut &[u8]) -> Option<u64> {
    let (&tag, rest) = input.split_first()?;
    if u64::from(tag) < SMALL {
        *input = rest;
        return Some(u64::from(tag));
    }
    let n = usize::from(tag) - SMALL as usize + 1;
    let bytes = rest.get(..n)?;
    let mut le = [0u8; 8];
    le[..n].copy_from_slice(bytes);
    *input = &rest[n..];
    Some(u64::from_le_bytes(le))
}

macro_rules! pack_unsigned {
    ($($t:ty),*) => {$(
        impl Pack for $t {
            #[inline]
            fn pack(&self, out: &mut Vec<u8>) {
                put_uint(*self as u64, out);
            }
            #[inline]
            fn unpack(input: &mut &[u8]) -> Option<Self> {
                <$t>::try_from(take_uint(input)?).ok()
            }
        }
    )*};
}

pack_unsigned!(u16, u32, u64, usize);

impl Pack for u8 {
    #[inline]
    fn pack(&self, out: &mut Vec<u8>) {
        out.push(*self);
    }
    #[inline]
    fn unpack(input: &mut &[u8]) -> Option<Self> {
        take_byte(input)
    }
}

impl Pack for bool {
    #[inline]
    fn pack(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }
    #[inline]
    fn unpack(input: &mut &[u8]) -> Option<Self> {
        match take_byte(input)? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }
}

impl<T: Pack> Pack for Option<T> {
    fn pack(&self, out: &mut Vec<u8>) {
        match self {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                v.pack(out);
            }
        }
    }
    fn unpack(input: &mut &[u8]) -> Option<Self> {
        match take_byte(input)? {
            0 => Some(None),
            1 => Some(Some(T::unpack(input)?)),
            _ => None,
        }
    }
}

impl<T: Pack> Pack for Vec<T> {
    fn pack(&self, out: &mut Vec<u8>) {
        self.len().pack(out);
        for item in self {
            item.pack(out);
        }
    }
    fn unpack(input: &mut &[u8]) -> Option<Self> {
        let len = usize::unpack(input)?;
        // Every item takes at least one byte, so a length past the input is malformed
        // (and must not reserve memory for it).
        if len > input.len() {
            return None;
        }
        let mut items = Vec::with_capacity(len);
        for _ in 0..len {
            items.push(T::unpack(input)?);
        }
        Some(items)
    }
}

/// Tuples, field by field (the frontier's frame headers).
macro_rules! pack_tuple {
    ($($t:ident $i:tt),+) => {
        impl<$($t: Pack),+> Pack for ($($t,)+) {
            #[inline]
            fn pack(&self, out: &mut Vec<u8>) {
                $(self.$i.pack(out);)+
            }
            #[inline]
            fn unpack(input: &mut &[u8]) -> Option<Self> {
                // Tuple expressions evaluate their elements left to right.
                Some(($($t::unpack(input)?,)+))
            }
        }
    };
}

pack_tuple!(A 0, B 1);
pack_tuple!(A 0, B 1, C 2, D 3, E 4);

impl Pack for Vector {
    fn pack(&self, out: &mut Vec<u8>) {
        out.push(self.0);
    }
    fn unpack(input: &mut &[u8]) -> Option<Self> {
        take_byte(input).map(Vector)
    }
}

impl Pack for PiDesc {
    fn pack(&self, out: &mut Vec<u8>) {
        for w in self.words() {
            w.pack(out);
        }
    }
    fn unpack(input: &mut &[u8]) -> Option<Self> {
        let mut d = PiDesc::ZERO;
        for w in d.0.iter_mut() {
            *w = u64::unpack(input)?;
        }
        Some(d)
    }
}

/// A field-less enum as its index in `ALL`.
macro_rules! pack_unit_enum {
    ($t:ty, [$($v:expr),* $(,)?]) => {
        impl Pack for $t {
            fn pack(&self, out: &mut Vec<u8>) {
                const ALL: &[$t] = &[$($v),*];
                let tag = ALL.iter().position(|v| v == self).expect("every variant listed");
                out.push(tag as u8);
            }
            fn unpack(input: &mut &[u8]) -> Option<Self> {
                const ALL: &[$t] = &[$($v),*];
                ALL.get(usize::from(take_byte(input)?)).copied()
            }
        }
    };
}

pack_unit_enum!(MemoryModel, [MemoryModel::Sc, MemoryModel::Tso]);
pack_unit_enum!(
    MigrationStep,
    [
        MigrationStep::NotStarted,
        MigrationStep::IrteWritten,
        MigrationStep::IecFlushed,
        MigrationStep::OldVectorFreed,
    ]
);
pack_unit_enum!(
    MigrationCleanup,
    [MigrationCleanup::IrrAndPir, MigrationCleanup::IrrOnly]
);

impl Pack for CpuOp {
    fn pack(&self, out: &mut Vec<u8>) {
        match *self {
            CpuOp::LoadPir { word } => {
                out.push(0);
                word.pack(out);
            }
            CpuOp::XchgPir { word, value } => {
                out.push(1);
                word.pack(out);
                value.pack(out);
            }
            CpuOp::ClearOn => out.push(2),
            CpuOp::TestAndClearOn => out.push(3),
            CpuOp::HandleVector(v) => {
                out.push(4);
                v.pack(out);
            }
            CpuOp::Eoi => out.push(5),
            CpuOp::StorePir { word, value } => {
                out.push(6);
                word.pack(out);
                value.pack(out);
            }
            CpuOp::StoreClearOn => out.push(7),
            CpuOp::Mfence => out.push(8),
        }
    }
    fn unpack(input: &mut &[u8]) -> Option<Self> {
        Some(match take_byte(input)? {
            0 => CpuOp::LoadPir {
                word: Pack::unpack(input)?,
            },
            1 => CpuOp::XchgPir {
                word: Pack::unpack(input)?,
                value: Pack::unpack(input)?,
            },
            2 => CpuOp::ClearOn,
            3 => CpuOp::TestAndClearOn,
            4 => CpuOp::HandleVector(Pack::unpack(input)?),
            5 => CpuOp::Eoi,
            6 => CpuOp::StorePir {
                word: Pack::unpack(input)?,
                value: Pack::unpack(input)?,
            },
            7 => CpuOp::StoreClearOn,
            8 => CpuOp::Mfence,
            _ => return None,
        })
    }
}

impl Pack for SnOp {
    fn pack(&self, out: &mut Vec<u8>) {
        match *self {
            SnOp::SetSn => out.push(0),
            SnOp::ClearSn => out.push(1),
            SnOp::LoadPir { word } => {
                out.push(2);
                word.pack(out);
            }
            SnOp::TestAndSetOn => out.push(3),
            SnOp::SendNotification => out.push(4),
        }
    }
    fn unpack(input: &mut &[u8]) -> Option<Self> {
        Some(match take_byte(input)? {
            0 => SnOp::SetSn,
            1 => SnOp::ClearSn,
            2 => SnOp::LoadPir {
                word: Pack::unpack(input)?,
            },
            3 => SnOp::TestAndSetOn,
            4 => SnOp::SendNotification,
            _ => return None,
        })
    }
}

impl Pack for BufferedStore {
    fn pack(&self, out: &mut Vec<u8>) {
        match *self {
            BufferedStore::Pir { word, value } => {
                out.push(0);
                word.pack(out);
                value.pack(out);
            }
            BufferedStore::ClearOn => out.push(1),
        }
    }
    fn unpack(input: &mut &[u8]) -> Option<Self> {
        Some(match take_byte(input)? {
            0 => BufferedStore::Pir {
                word: Pack::unpack(input)?,
                value: Pack::unpack(input)?,
            },
            1 => BufferedStore::ClearOn,
            _ => return None,
        })
    }
}

/// `Pack` for a struct: its fields in declaration order, destructured in full so that a
/// field added to the struct and not listed here is a compile error.
macro_rules! pack_struct {
    ($t:ident { $($field:ident),* $(,)? }) => {
        impl Pack for $t {
            fn pack(&self, out: &mut Vec<u8>) {
                let $t { $($field),* } = self;
                $($field.pack(out);)*
            }
            fn unpack(input: &mut &[u8]) -> Option<Self> {
                // Struct expressions evaluate their fields in the order written.
                Some($t { $($field: Pack::unpack(input)?),* })
            }
        }
    };
}
pub(crate) use pack_struct;

pack_struct!(VectorCount {
    vector,
    posted,
    handled,
    unserved
});

pack_struct!(FetchedPost { vector, to_new_cpu });

pack_struct!(Run {
    results,
    pending,
    eois,
    returned,
    retriggered
});

pack_struct!(World {
    desc,
    in_flight,
    irr,
    isr,
    entries,
    run,
    ledger,
    notifications,
    rechecks_due,
    memory_model,
    store_buffer,
    device_irr,
    device_isr,
    migrated,
    migration,
    fetched,
    posts_to_new_cpu,
    cleanup,
    notify_owed,
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_round_trip_at_every_length_and_short_input_is_refused() {
        for (v, len) in [
            (0u64, 1),
            (1, 1),
            (0xf7, 1),
            (0xf8, 2),
            (0xff, 2),
            (0x100, 3),
            (1 << 32, 6),
            (u64::MAX - 1, 9),
            (u64::MAX, 9),
        ] {
            let mut out = Vec::new();
            v.pack(&mut out);
            assert_eq!(out.len(), len, "{v:#x}");
            assert_eq!(unpack_all::<u64>(&out), Some(v), "{v:#x}");
            // Cut short by a byte: refused.
            assert_eq!(unpack_all::<u64>(&out[..len - 1]), None, "{v:#x}");
        }
        // A u16 refuses what does not fit.
        let mut out = Vec::new();
        70_000u64.pack(&mut out);
        assert_eq!(unpack_all::<u16>(&out), None);
    }

    #[test]
    fn malformed_and_trailing_bytes_are_refused() {
        assert_eq!(unpack_all::<bool>(&[2]), None);
        assert_eq!(unpack_all::<Option<u8>>(&[2, 0]), None);
        assert_eq!(unpack_all::<CpuOp>(&[9]), None);
        assert_eq!(unpack_all::<u8>(&[1, 2]), None);
        // A length longer than the input is refused before anything is reserved.
        assert_eq!(unpack_all::<Vec<u64>>(&[0xf9, 0xff, 0xff]), None);
        assert_eq!(unpack_all::<MemoryModel>(&[2]), None);
    }

    #[test]
    fn every_cpu_op_and_sn_op_round_trips() {
        let ops = [
            CpuOp::LoadPir { word: 3 },
            CpuOp::XchgPir {
                word: 1,
                value: u64::MAX,
            },
            CpuOp::ClearOn,
            CpuOp::TestAndClearOn,
            CpuOp::HandleVector(Vector(0xef)),
            CpuOp::Eoi,
            CpuOp::StorePir {
                word: 2,
                value: 1 << 63,
            },
            CpuOp::StoreClearOn,
            CpuOp::Mfence,
        ];
        for op in ops {
            let mut out = Vec::new();
            op.pack(&mut out);
            assert_eq!(unpack_all::<CpuOp>(&out), Some(op));
        }
        for op in [
            SnOp::SetSn,
            SnOp::ClearSn,
            SnOp::LoadPir { word: 2 },
            SnOp::TestAndSetOn,
            SnOp::SendNotification,
        ] {
            let mut out = Vec::new();
            op.pack(&mut out);
            assert_eq!(unpack_all::<SnOp>(&out), Some(op));
        }
    }
}
