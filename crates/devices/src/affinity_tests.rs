//! Tests of affinity spreading, placement and the CPU-to-queue map.

use super::*;
use proptest::prelude::*;

fn ids(v: &[u32]) -> Vec<CpuId> {
    v.iter().map(|c| CpuId(*c)).collect()
}

fn cpus(groups: &[Vec<CpuId>]) -> Vec<Vec<u32>> {
    groups
        .iter()
        .map(|g| g.iter().map(|c| c.0).collect())
        .collect()
}

#[test]
fn flat_cpus_split_into_contiguous_groups_larger_first() {
    let node = NodeCpus::flat(8);
    assert_eq!(
        cpus(&group_cpus_evenly(3, &node)),
        vec![vec![0, 1, 2], vec![3, 4, 5], vec![6, 7]]
    );
    assert_eq!(
        cpus(&group_cpus_evenly(1, &node)),
        vec![(0..8).collect::<Vec<_>>()]
    );
    assert_eq!(
        group_cpus_evenly(12, &node).len(),
        8,
        "at most one group per CPU"
    );
    assert!(group_cpus_evenly(0, &node).is_empty());
}

#[test]
fn smt_siblings_are_grouped_together() {
    // 4 cores x 2 threads: siblings are (0,4), (1,5), (2,6), (3,7).
    let node = NodeCpus::smt(4, 2);
    assert_eq!(
        cpus(&group_cpus_evenly(4, &node)),
        vec![vec![0, 4], vec![1, 5], vec![2, 6], vec![3, 7]]
    );
    assert_eq!(
        cpus(&group_cpus_evenly(3, &node)),
        vec![vec![0, 1, 4], vec![2, 3, 6], vec![5, 7]]
    );
}

#[test]
fn nvme_masks_keep_the_admin_vector_unmanaged_and_spread_the_io_queues() {
    let node = NodeCpus::flat(8);
    let affd = IrqAffinity {
        pre_vectors: 1,
        ..IrqAffinity::default()
    };
    let masks = irq_create_affinity_masks(5, &affd, &node).unwrap();
    assert_eq!(masks[0].cpus, node.all());
    assert!(!masks[0].managed);
    let io: Vec<_> = masks[1..].iter().map(|m| m.cpus.clone()).collect();
    assert_eq!(
        cpus(&io),
        vec![vec![0, 1], vec![2, 3], vec![4, 5], vec![6, 7]]
    );
    assert!(masks[1..].iter().all(|m| m.managed));
    // Placement: the admin vector on the first CPU, each I/O vector on the last CPU of
    // its mask (ties in managed allocation go to the last CPU).
    let placed = VectorMatrix::new(8).place(&masks);
    assert_eq!(placed, ids(&[0, 1, 3, 5, 7]));
    assert_eq!(
        cpu_to_queue(&masks[1..], 8),
        vec![
            Some(0),
            Some(0),
            Some(1),
            Some(1),
            Some(2),
            Some(2),
            Some(3),
            Some(3)
        ]
    );
}

#[test]
fn more_vectors_than_cpus_fill_the_rest_with_every_cpu_still_managed() {
    let node = NodeCpus::flat(4);
    let masks = irq_create_affinity_masks(6, &IrqAffinity::default(), &node).unwrap();
    let got: Vec<_> = masks.iter().map(|m| m.cpus.clone()).collect();
    assert_eq!(
        cpus(&got),
        vec![
            vec![0],
            vec![1],
            vec![2],
            vec![3],
            vec![0, 1, 2, 3],
            vec![0, 1, 2, 3]
        ]
    );
    assert!(masks.iter().all(|m| m.managed));
    // The extra vectors go where the fewest managed vectors are, the last on a tie.
    assert_eq!(VectorMatrix::new(4).place(&masks), ids(&[0, 1, 2, 3, 3, 2]));
}

#[test]
fn sets_are_spread_independently_and_must_add_up() {
    let node = NodeCpus::flat(4);
    let affd = IrqAffinity {
        pre_vectors: 0,
        post_vectors: 1,
        set_sizes: vec![2, 2],
    };
    let masks = irq_create_affinity_masks(5, &affd, &node).unwrap();
    let got: Vec<_> = masks.iter().map(|m| m.cpus.clone()).collect();
    assert_eq!(
        cpus(&got),
        vec![
            vec![0, 1],
            vec![2, 3],
            vec![0, 1],
            vec![2, 3],
            vec![0, 1, 2, 3]
        ]
    );
    assert!(!masks[4].managed);
    let bad = IrqAffinity {
        set_sizes: vec![1, 1],
        ..affd
    };
    assert!(irq_create_affinity_masks(5, &bad, &node).is_err());
    // Nothing to spread: every vector unmanaged on every CPU.
    let masks = irq_create_affinity_masks(
        1,
        &IrqAffinity {
            pre_vectors: 1,
            ..IrqAffinity::default()
        },
        &node,
    )
    .unwrap();
    assert_eq!(masks.len(), 1);
    assert!(!masks[0].managed);
}

#[test]
fn a_shared_matrix_moves_later_devices_to_other_cpus_of_their_masks() {
    let node = NodeCpus::flat(8);
    let masks = irq_create_affinity_masks(4, &IrqAffinity::default(), &node).unwrap();
    let mut m = VectorMatrix::new(8);
    assert_eq!(m.place(&masks), ids(&[1, 3, 5, 7]));
    assert_eq!(m.place(&masks), ids(&[0, 2, 4, 6]));
    assert_eq!(spread_queues(8, &node), ids(&[0, 1, 2, 3, 4, 5, 6, 7]));
    assert_eq!(spread_queues(4, &node), ids(&[1, 3, 5, 7]));
}

#[test]
fn affinity_resolves_managed_and_checks_explicit_lists() {
    let node = NodeCpus::flat(4);
    let a: Affinity = toml::from_str("kind = \"explicit\"\ncpus = [3, 3, 0]\n").unwrap();
    assert_eq!(
        a.resolve(3, &node, "nvme[0].affinity").unwrap(),
        ids(&[3, 3, 0])
    );
    let e = a.resolve(2, &node, "nvme[0].affinity").unwrap_err();
    assert!(e.to_string().contains("nvme[0].affinity.cpus"), "{e}");
    let far = Affinity::Explicit { cpus: vec![0, 9] };
    let e = far.resolve(2, &node, "x").unwrap_err();
    assert!(e.to_string().contains("x.cpus[1]"), "{e}");
    let m: Affinity = toml::from_str("kind = \"managed\"\n").unwrap();
    assert_eq!(m.resolve(2, &node, "x").unwrap(), ids(&[1, 3]));
    assert!(toml::from_str::<Affinity>("kind = \"managed\"\ncpus = [1]\n").is_err());
}

/// `group_cpus_evenly` as first written: a scan of the whole node for the lowest free
/// CPU and for each CPU's siblings. Quadratic, and plainly the algorithm.
fn group_cpus_evenly_by_scanning(numgrps: u32, node: &NodeCpus) -> Vec<Vec<CpuId>> {
    let ncpus = node.len();
    if numgrps == 0 || ncpus == 0 {
        return Vec::new();
    }
    if numgrps == 1 {
        return vec![node.all()];
    }
    let core_of = &node.core;
    let groups = numgrps.min(ncpus);
    let mut extra = ncpus - groups * (ncpus / groups);
    let mut free = vec![true; ncpus as usize];
    let mut out = Vec::new();
    for _ in 0..groups {
        let mut want = ncpus / groups + u32::from(extra > 0);
        extra = extra.saturating_sub(1);
        let mut group = Vec::new();
        while want > 0 {
            let Some(cpu) = free.iter().position(|f| *f) else {
                break;
            };
            free[cpu] = false;
            group.push(CpuId(cpu as u32));
            want -= 1;
            for sib in 0..ncpus as usize {
                if want > 0 && free[sib] && core_of[sib] == core_of[cpu] {
                    free[sib] = false;
                    group.push(CpuId(sib as u32));
                    want -= 1;
                }
            }
        }
        group.sort();
        out.push(group);
    }
    out
}

proptest! {
    /// The linear-time spreading gives exactly the groups of the plain scan, on any
    /// core numbering (siblings adjacent, `cores` apart, or scattered).
    #[test]
    fn spreading_matches_the_plain_scan(
        core_of in proptest::collection::vec(0u32..24, 1..80),
        numgrps in 0u32..90,
    ) {
        let node = NodeCpus::with_cores(core_of);
        prop_assert_eq!(
            group_cpus_evenly(numgrps, &node),
            group_cpus_evenly_by_scanning(numgrps, &node)
        );
    }

    /// Groups partition the node's CPUs: none empty, none shared, all covered, sizes
    /// within one of each other, larger ones first; siblings stay together when the
    /// group sizes allow it.
    #[test]
    fn groups_partition_the_cpus(
        cores in 1u32..12,
        threads in 1u32..3,
        numgrps in 1u32..30,
    ) {
        let node = NodeCpus::smt(cores, threads);
        let groups = group_cpus_evenly(numgrps, &node);
        prop_assert_eq!(groups.len() as u32, numgrps.min(node.len()));
        let mut seen: Vec<u32> = groups.iter().flatten().map(|c| c.0).collect();
        seen.sort();
        prop_assert_eq!(seen, (0..node.len()).collect::<Vec<_>>());
        let sizes: Vec<usize> = groups.iter().map(Vec::len).collect();
        prop_assert!(sizes.iter().all(|s| *s > 0));
        prop_assert!(sizes.windows(2).all(|w| w[0] >= w[1] && w[0] - w[1] <= 1));
        if groups.len() as u32 == cores && threads > 1 {
            for g in &groups {
                prop_assert!(g.iter().all(|c| c.0 % cores == g[0].0 % cores));
            }
        }
        let masks = irq_create_affinity_masks(numgrps, &IrqAffinity::default(), &node).unwrap();
        let placed = VectorMatrix::new(node.len()).place(&masks);
        for (m, c) in masks.iter().zip(&placed) {
            prop_assert!(m.cpus.contains(c));
        }
    }
}

/// A CPU has 204 device vectors (0x20..0xec): reserving 8 managed ones on CPU 0 and
/// allocating 7 on CPU 1 leaves 196 against 197, so the next unmanaged vector of the
/// two goes to CPU 1. (A CPU with only a handful of vectors would run both dry and
/// tie at 0.)
#[test]
fn the_vector_budget_is_the_device_range() {
    let mut m = VectorMatrix::new(2);
    let only = |c: u32, managed| AffinityMask {
        cpus: vec![CpuId(c)],
        managed,
    };
    m.place(&vec![only(0, true); 8]);
    m.place(&vec![only(1, false); 7]);
    let both = AffinityMask {
        cpus: ids(&[0, 1]),
        managed: false,
    };
    assert_eq!(m.place(&[both]), vec![CpuId(1)]);
}

#[test]
fn node_cpus_is_empty_only_without_cpus() {
    assert!(!NodeCpus::flat(1).is_empty());
    assert!(NodeCpus::flat(0).is_empty());
    assert_eq!(NodeCpus::flat(3).len(), 3);
}

#[test]
fn a_memo_spreads_each_queue_count_as_a_fresh_spread_would() {
    let node = NodeCpus::flat(24);
    let mut memo = SpreadMemo::new(&node);
    // Asked twice, and interleaved with other counts, each answer is the fresh one.
    for nqueues in [4, 24, 7, 4, 31, 7, 24] {
        // Worked out here from the two steps, not through `spread_queues`, which now
        // takes its answer from a memo itself.
        let fresh = irq_create_affinity_masks(nqueues, &IrqAffinity::default(), &node).unwrap();
        let placed = VectorMatrix::new(node.len()).place(&fresh);
        assert_eq!(memo.masks(nqueues), &fresh[..], "masks of {nqueues} queues");
        assert_eq!(
            memo.targets(nqueues),
            &placed[..],
            "targets of {nqueues} queues"
        );
        assert_eq!(
            Affinity::Managed {}
                .resolve_in(nqueues, &mut memo, "d")
                .unwrap(),
            placed
        );
        assert_eq!(spread_queues(nqueues, &node), placed);
    }
}

#[test]
fn checking_an_affinity_rejects_what_resolving_it_rejects() {
    let node = NodeCpus::flat(4);
    let cases = [
        (Affinity::Managed {}, 3),
        (Affinity::Explicit { cpus: vec![0, 3] }, 2),
        (Affinity::Explicit { cpus: vec![0, 1] }, 3),
        (Affinity::Explicit { cpus: vec![0, 4] }, 2),
    ];
    for (affinity, nqueues) in cases {
        assert_eq!(
            affinity.check(nqueues, &node, "nvme[0].affinity"),
            affinity
                .resolve(nqueues, &node, "nvme[0].affinity")
                .map(drop),
            "{affinity:?} with {nqueues} queues"
        );
    }
    assert!(Affinity::Explicit { cpus: vec![0, 4] }
        .check(2, &node, "nvme[0].affinity")
        .unwrap_err()
        .to_string()
        .contains("nvme[0].affinity.cpus[1]"));
}
