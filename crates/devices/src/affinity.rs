//! Which CPU each queue's interrupt targets: Linux's managed affinity spreading for one
//! NUMA node, the x86 choice of the effective CPU inside a mask, and explicit lists.
//!
//! Three steps, as in Linux:
//! 1. [`irq_create_affinity_masks`] (kernel/irq/affinity.c) gives each vector of a device
//!    a CPU mask: `pre_vectors` and `post_vectors` (e.g. NVMe's admin queue) get every
//!    CPU, unmanaged; each interrupt set is spread with [`group_cpus_evenly`]
//!    (lib/group_cpus.c); vectors the spreading could not fill get every CPU; the
//!    spread ones are managed.
//! 2. [`VectorMatrix::place`] (arch/x86/kernel/apic/vector.c over kernel/irq/matrix.c)
//!    picks one CPU of each mask, the effective affinity: a managed vector goes to the
//!    CPU of its mask with the fewest managed vectors already allocated, the *last* such
//!    CPU on a tie (`matrix_find_best_cpu_managed` skips only CPUs with more); an
//!    unmanaged one to the CPU with the most free vectors, the first on a tie
//!    (`matrix_find_best_cpu`). Managed masks reserve a vector on every CPU they hold
//!    first (`irq_matrix_reserve_managed`). Keep one matrix for the whole system and
//!    place devices in probe order, so later devices see earlier allocations.
//! 3. [`cpu_to_queue`] maps each CPU to the queue whose mask holds it, as
//!    `blk_mq_pci_map_queues` does, so a job pinned to a CPU submits to that queue.
//!
//! Assumptions: one NUMA node; every possible CPU is present and online (Linux spreads
//! present CPUs first, then the others; with all present the second pass is empty);
//! no housekeeping (isolcpus) filter; no other vectors on the CPUs beforehand.
//!
//! [`Affinity`] is the scenario-facing choice: `{ kind = "managed" }` or
//! `{ kind = "explicit", cpus = [..] }`.

use serde::{Deserialize, Serialize};
use sim_core::CpuId;

use crate::DeviceError;

/// The CPUs of one NUMA node and which of them are SMT siblings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeCpus {
    /// `core[i]` is the physical core of CPU i; CPUs sharing a core are siblings.
    core: Vec<u32>,
}

impl NodeCpus {
    /// `n` CPUs, no SMT.
    pub fn flat(n: u32) -> NodeCpus {
        NodeCpus {
            core: (0..n).collect(),
        }
    }

    /// `cores` cores of `threads` each, numbered the way Linux usually enumerates x86
    /// servers: CPU `c + k * cores` is thread k of core c (siblings are `cores` apart).
    pub fn smt(cores: u32, threads: u32) -> NodeCpus {
        NodeCpus {
            core: (0..cores * threads).map(|cpu| cpu % cores).collect(),
        }
    }

    /// CPU i belongs to core `core_of[i]`.
    pub fn with_cores(core_of: Vec<u32>) -> NodeCpus {
        NodeCpus { core: core_of }
    }

    pub fn len(&self) -> u32 {
        self.core.len() as u32
    }

    pub fn is_empty(&self) -> bool {
        self.core.is_empty()
    }

    /// Every CPU, ascending.
    pub fn all(&self) -> Vec<CpuId> {
        (0..self.len()).map(CpuId).collect()
    }
}

/// Splits the node's CPUs into `numgrps` groups the way `group_cpus_evenly` does for
/// one node: one group of all CPUs if `numgrps` is 1; otherwise `min(numgrps, CPUs)`
/// groups, the first `CPUs mod groups` of them one CPU larger, each filled from the
/// lowest CPU not yet taken and then its SMT siblings. Returns the groups it filled
/// (Linux's `nummasks`); no group is empty and no CPU is in two.
pub fn group_cpus_evenly(numgrps: u32, node: &NodeCpus) -> Vec<Vec<CpuId>> {
    let ncpus = node.len();
    if numgrps == 0 || ncpus == 0 {
        return Vec::new();
    }
    if numgrps == 1 {
        return vec![node.all()];
    }
    let groups = numgrps.min(ncpus);
    let mut extra = ncpus - groups * (ncpus / groups);
    let mut free: Vec<bool> = vec![true; ncpus as usize];
    // Each core's CPUs, ascending, so a CPU's siblings are found without scanning the
    // node (a 1,024-CPU node with thousands of queues spreads many times at build).
    let mut siblings: std::collections::BTreeMap<u32, Vec<usize>> = Default::default();
    for (cpu, core) in node.core.iter().enumerate() {
        siblings.entry(*core).or_default().push(cpu);
    }
    // CPUs are never freed, so the lowest free one only moves up.
    let mut lowest_free = 0usize;
    let mut out = Vec::with_capacity(groups as usize);
    for _ in 0..groups {
        let mut want = ncpus / groups;
        if extra > 0 {
            want += 1;
            extra -= 1;
        }
        let mut group = Vec::with_capacity(want as usize);
        while want > 0 {
            while lowest_free < free.len() && !free[lowest_free] {
                lowest_free += 1;
            }
            if lowest_free == free.len() {
                break;
            }
            let cpu = lowest_free;
            free[cpu] = false;
            group.push(CpuId(cpu as u32));
            want -= 1;
            for &sib in &siblings[&node.core[cpu]] {
                if want == 0 {
                    break;
                }
                if free[sib] {
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

/// How a device's vectors are to be spread (Linux `struct irq_affinity`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IrqAffinity {
    /// Leading vectors not spread (NVMe: 1, the admin queue).
    pub pre_vectors: u32,
    /// Trailing vectors not spread.
    pub post_vectors: u32,
    /// Sizes of the interrupt sets spread independently; empty means one set of all
    /// spreadable vectors (`default_calc_sets`).
    pub set_sizes: Vec<u32>,
}

/// The CPUs one vector may target and whether the kernel manages it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AffinityMask {
    pub cpus: Vec<CpuId>,
    pub managed: bool,
}

/// Masks for `nvecs` vectors as `irq_create_affinity_masks` builds them (see the module
/// docs). With nothing to spread every vector gets every CPU, unmanaged (Linux returns
/// no masks then). Errors if `set_sizes` does not add up to the spreadable vectors.
pub fn irq_create_affinity_masks(
    nvecs: u32,
    affd: &IrqAffinity,
    node: &NodeCpus,
) -> Result<Vec<AffinityMask>, DeviceError> {
    let all = AffinityMask {
        cpus: node.all(),
        managed: false,
    };
    let reserved = affd.pre_vectors + affd.post_vectors;
    let affvecs = nvecs.saturating_sub(reserved);
    if affvecs == 0 {
        return Ok(vec![all; nvecs as usize]);
    }
    let sets = if affd.set_sizes.is_empty() {
        vec![affvecs]
    } else {
        affd.set_sizes.clone()
    };
    let total: u64 = sets.iter().map(|s| *s as u64).sum();
    if total != affvecs as u64 {
        return Err(DeviceError::InvalidParameter {
            field: "irq_affinity.set_sizes".into(),
            value: format!("{sets:?}"),
            allowed: format!("sizes adding up to the {affvecs} vectors to spread"),
        });
    }
    let mut masks: Vec<AffinityMask> = vec![all.clone(); affd.pre_vectors as usize];
    for size in sets {
        // A set smaller than the CPUs fills all its vectors; a larger one only as many
        // as there are CPUs, and the next set starts right after them.
        masks.extend(
            group_cpus_evenly(size, node)
                .into_iter()
                .map(|cpus| AffinityMask {
                    cpus,
                    managed: true,
                }),
        );
    }
    // Vectors the spreading could not fill, then the post vectors: every CPU.
    masks.resize(nvecs as usize, all);
    // Linux marks every vector between the pre and post vectors managed, filled or not.
    let managed = affd.pre_vectors as usize..(nvecs - affd.post_vectors) as usize;
    for (i, m) in masks.iter_mut().enumerate() {
        m.managed = managed.contains(&i);
    }
    Ok(masks)
}

/// The x86 vector allocator's view of the CPUs: how many vectors each has free and how
/// many managed vectors it serves. One per system.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VectorMatrix {
    available: Vec<u32>,
    managed_allocated: Vec<u32>,
}

/// Device vectors a CPU offers at start: 0x20..0xec minus nothing else (an assumption:
/// no legacy or system vectors in the device range; only differences matter here).
pub const DEVICE_VECTORS_PER_CPU: u32 = 204; // 0xec - 0x20

impl VectorMatrix {
    pub fn new(ncpus: u32) -> VectorMatrix {
        VectorMatrix {
            available: vec![DEVICE_VECTORS_PER_CPU; ncpus as usize],
            managed_allocated: vec![0; ncpus as usize],
        }
    }

    /// Places one device's vectors (all reserved first, then activated in order);
    /// returns the effective CPU of each. Panics if a mask names a CPU the matrix does
    /// not have (a caller bug).
    pub fn place(&mut self, masks: &[AffinityMask]) -> Vec<CpuId> {
        for m in masks.iter().filter(|m| m.managed) {
            for c in &m.cpus {
                let a = &mut self.available[c.0 as usize];
                *a = a.saturating_sub(1);
            }
        }
        masks
            .iter()
            .map(|m| {
                assert!(!m.cpus.is_empty(), "an empty affinity mask");
                if m.managed {
                    let mut best = m.cpus[0];
                    for c in &m.cpus {
                        if self.managed_allocated[c.0 as usize]
                            <= self.managed_allocated[best.0 as usize]
                        {
                            best = *c;
                        }
                    }
                    self.managed_allocated[best.0 as usize] += 1;
                    best
                } else {
                    let mut best = m.cpus[0];
                    for c in &m.cpus {
                        if self.available[c.0 as usize] > self.available[best.0 as usize] {
                            best = *c;
                        }
                    }
                    let a = &mut self.available[best.0 as usize];
                    *a = a.saturating_sub(1);
                    best
                }
            })
            .collect()
    }
}

/// For each CPU, the queue whose mask holds it (`blk_mq_pci_map_queues`: queues in
/// order, a later mask overriding an earlier one); `None` for a CPU no mask holds.
pub fn cpu_to_queue(queue_masks: &[AffinityMask], ncpus: u32) -> Vec<Option<u16>> {
    let mut map = vec![None; ncpus as usize];
    for (q, m) in queue_masks.iter().enumerate() {
        for c in &m.cpus {
            if let Some(slot) = map.get_mut(c.0 as usize) {
                *slot = Some(q as u16);
            }
        }
    }
    map
}

/// Target CPUs of `nqueues` queue interrupts of one device spread like Linux with no
/// pre/post vectors, placed on a fresh matrix. For several devices, or NVMe's admin
/// vector, use [`irq_create_affinity_masks`] and a shared [`VectorMatrix`].
pub fn spread_queues(nqueues: u32, node: &NodeCpus) -> Vec<CpuId> {
    SpreadMemo::new(node).targets(nqueues).to_vec()
}

/// How a scenario chooses the CPUs of a device's queue interrupts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Affinity {
    /// Linux managed affinity ([`spread_queues`], or the root's shared matrix). (A
    /// struct variant so that stray fields are rejected.)
    Managed {},
    /// Queue i targets `cpus[i]`.
    Explicit { cpus: Vec<u32> },
}

impl Default for Affinity {
    fn default() -> Self {
        Affinity::Managed {}
    }
}

/// Managed spreads of one node, worked out once per queue count: a system of many
/// identical devices (hundreds of drives of 64 queues in a large scenario) spreads each
/// queue count once instead of once per device, and once instead of again for its
/// blk-mq map.
#[derive(Debug)]
pub struct SpreadMemo<'a> {
    node: &'a NodeCpus,
    spreads: std::collections::BTreeMap<u32, (Vec<AffinityMask>, Vec<CpuId>)>,
}

impl<'a> SpreadMemo<'a> {
    /// An empty memo for `node`.
    pub fn new(node: &'a NodeCpus) -> Self {
        SpreadMemo {
            node,
            spreads: std::collections::BTreeMap::new(),
        }
    }

    /// The node the spreads are for.
    pub fn node(&self) -> &'a NodeCpus {
        self.node
    }

    fn spread(&mut self, nqueues: u32) -> &(Vec<AffinityMask>, Vec<CpuId>) {
        let node = self.node;
        self.spreads.entry(nqueues).or_insert_with(|| {
            let masks = irq_create_affinity_masks(nqueues, &IrqAffinity::default(), node)
                .expect("one set always adds up");
            let targets = VectorMatrix::new(node.len()).place(&masks);
            (masks, targets)
        })
    }

    /// The managed masks of `nqueues` queue interrupts (as [`irq_create_affinity_masks`]
    /// with no pre/post vectors).
    pub fn masks(&mut self, nqueues: u32) -> &[AffinityMask] {
        &self.spread(nqueues).0
    }

    /// Their target CPUs on a fresh matrix (as [`spread_queues`]).
    pub fn targets(&mut self, nqueues: u32) -> &[CpuId] {
        &self.spread(nqueues).1
    }
}

impl Affinity {
    /// Target CPU per queue on a fresh matrix; errors name `field`.
    pub fn resolve(
        &self,
        nqueues: u32,
        node: &NodeCpus,
        field: &str,
    ) -> Result<Vec<CpuId>, DeviceError> {
        self.resolve_in(nqueues, &mut SpreadMemo::new(node), field)
    }

    /// Checks the affinity against `nqueues` queues on `node` without spreading a
    /// managed one (which always succeeds); errors as [`Self::resolve`]'s.
    pub fn check(&self, nqueues: u32, node: &NodeCpus, field: &str) -> Result<(), DeviceError> {
        match self {
            Affinity::Managed {} => Ok(()),
            Affinity::Explicit { .. } => self.resolve(nqueues, node, field).map(drop),
        }
    }

    /// [`Self::resolve`] taking a managed spread from `memo`.
    pub fn resolve_in(
        &self,
        nqueues: u32,
        memo: &mut SpreadMemo,
        field: &str,
    ) -> Result<Vec<CpuId>, DeviceError> {
        let node = memo.node();
        match self {
            Affinity::Managed {} => Ok(memo.targets(nqueues).to_vec()),
            Affinity::Explicit { cpus } => {
                if cpus.len() != nqueues as usize {
                    return Err(DeviceError::InvalidParameter {
                        field: format!("{field}.cpus"),
                        value: format!("{} entries", cpus.len()),
                        allowed: format!("one CPU per queue ({nqueues})"),
                    });
                }
                if let Some((i, c)) = cpus.iter().enumerate().find(|(_, c)| **c >= node.len()) {
                    return Err(DeviceError::InvalidParameter {
                        field: format!("{field}.cpus[{i}]"),
                        value: c.to_string(),
                        allowed: format!("a CPU index below {}", node.len()),
                    });
                }
                Ok(cpus.iter().map(|c| CpuId(*c)).collect())
            }
        }
    }
}

#[cfg(test)]
#[path = "affinity_tests.rs"]
mod tests;
