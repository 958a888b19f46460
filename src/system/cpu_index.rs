//! The CPU behind an APIC ID or a posted-interrupt descriptor address, looked up on
//! every remapped or posted MSI.
//!
//! Both are dense in every machine irqsim builds: APIC IDs are a few bits of socket,
//! core and thread (SDM Vol. 3A 9.4.5), and descriptors sit one cache line apart. So
//! the index is a table over `(id - base) >> shift`, one load per lookup. An id set
//! that is not dense (a scenario may give any APIC IDs and descriptor addresses) keeps
//! an ordered map, with the same answers.

use std::collections::BTreeMap;

/// A table slot with no CPU.
const NONE: u32 = u32::MAX;

/// How much larger than the number of ids a table may be before the map is used.
const MAX_SPREAD: u64 = 4;

/// Slack on top of that, so that small machines with gaps in their IDs still index.
const TABLE_SLACK: u64 = 256;

/// Id to CPU, for ids that are multiples of `1 << shift` apart (see the module docs).
#[derive(Clone, Debug)]
pub(super) enum CpuIndex {
    Table {
        base: u64,
        shift: u32,
        cpus: Vec<u32>,
    },
    Map(BTreeMap<u64, u32>),
}

impl CpuIndex {
    /// Indexes `(id, cpu)` pairs; ids are expected `1 << shift` apart.
    pub(super) fn new(pairs: impl IntoIterator<Item = (u64, u32)>, shift: u32) -> CpuIndex {
        let map: BTreeMap<u64, u32> = pairs.into_iter().collect();
        let (Some((&base, _)), Some((&last, _))) = (map.first_key_value(), map.last_key_value())
        else {
            return CpuIndex::Map(map);
        };
        let aligned = map.keys().all(|id| (id - base).trailing_zeros() >= shift);
        let slots = ((last - base) >> shift).saturating_add(1);
        if !aligned || slots > MAX_SPREAD * map.len() as u64 + TABLE_SLACK {
            return CpuIndex::Map(map);
        }
        let mut cpus = vec![NONE; slots as usize];
        for (id, cpu) in map {
            cpus[((id - base) >> shift) as usize] = cpu;
        }
        CpuIndex::Table { base, shift, cpus }
    }

    /// The CPU of `id`, if the machine has one.
    pub(super) fn get(&self, id: u64) -> Option<u32> {
        match self {
            CpuIndex::Table { base, shift, cpus } => {
                let offset = id.checked_sub(*base)?;
                if offset & ((1 << *shift) - 1) != 0 {
                    return None;
                }
                let cpu = *cpus.get(usize::try_from(offset >> *shift).ok()?)?;
                (cpu != NONE).then_some(cpu)
            }
            CpuIndex::Map(map) => map.get(&id).copied(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn index_and_map(pairs: &[(u64, u32)], shift: u32) -> (CpuIndex, BTreeMap<u64, u32>) {
        (
            CpuIndex::new(pairs.iter().copied(), shift),
            pairs.iter().copied().collect(),
        )
    }

    #[test]
    fn dense_ids_get_a_table_and_sparse_ones_a_map() {
        // x2APIC IDs of two sockets of 20 threads, with the gap a socket's ID bits leave.
        let apic: Vec<(u64, u32)> = (0..40u32)
            .map(|c| (u64::from((c / 20) * 64 + c % 20), c))
            .collect();
        let (index, map) = index_and_map(&apic, 0);
        assert!(matches!(index, CpuIndex::Table { .. }));
        for id in 0..200 {
            assert_eq!(index.get(id), map.get(&id).copied(), "id {id}");
        }
        // Descriptors one line apart from an arbitrary base.
        let pda: Vec<(u64, u32)> = (0..1024u32)
            .map(|c| (0xfee0_1000 + 64 * u64::from(c), c))
            .collect();
        let (index, map) = index_and_map(&pda, 6);
        assert!(matches!(index, CpuIndex::Table { .. }));
        for id in [
            0,
            0xfee0_0fc0,
            0xfee0_1000,
            0xfee0_1001,
            0xfee0_1040,
            0xfee1_1000,
        ] {
            assert_eq!(index.get(id), map.get(&id).copied(), "pda {id:#x}");
        }
        // Two ids far apart would make a huge table.
        let (index, _) = index_and_map(&[(0, 0), (1 << 40, 1)], 0);
        assert!(matches!(index, CpuIndex::Map(_)));
        assert_eq!(
            (index.get(0), index.get(1 << 40), index.get(1)),
            (Some(0), Some(1), None)
        );
        // Misaligned descriptors too.
        let (index, _) = index_and_map(&[(0x1000, 0), (0x1020, 1)], 6);
        assert!(matches!(index, CpuIndex::Map(_)));
        assert_eq!(index.get(0x1020), Some(1));
    }

    proptest! {
        #[test]
        fn answers_as_the_ordered_map_does(
            ids in proptest::collection::btree_set(
                prop_oneof![0u64..600, 0u64..(1 << 20), any::<u64>()], 0..80),
            shift in prop_oneof![Just(0u32), Just(6u32)],
            base in any::<u64>(),
            probes in proptest::collection::vec(any::<u64>(), 0..40),
        ) {
            // Ids shifted and offset, wrapping, so tables, maps and edges all occur.
            let pairs: Vec<(u64, u32)> = ids
                .iter()
                .enumerate()
                .map(|(cpu, id)| ((id << shift).wrapping_add(base), cpu as u32))
                .collect();
            let (index, map) = index_and_map(&pairs, shift);
            for &(id, _) in &pairs {
                prop_assert_eq!(index.get(id), map.get(&id).copied());
                for near in [id.wrapping_add(1), id.wrapping_sub(1), id.wrapping_add(64)] {
                    prop_assert_eq!(index.get(near), map.get(&near).copied());
                }
            }
            for id in probes {
                prop_assert_eq!(index.get(id), map.get(&id).copied());
            }
        }
    }
}
