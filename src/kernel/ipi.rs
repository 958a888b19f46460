//! Sending IPIs to a set of CPUs, and a TLB-shootdown-like cross call that waits for
//! every target, as Linux does them with an x2APIC.
//!
//! Each algorithm follows the kernel's C step by step and performs its hardware
//! accesses through an [`IpiPort`], one operation per access, so a driver decides
//! what each costs and when its effects land (`System` is the timed driver; see `system::xcall`).
//!
//! ```text
//!  sender (smp_call_function_many_cond, wait)        target (sysvec_call_function)
//!   for each target: csd_lock, fill, llist_add ──┐
//!   send_call_function_ipi_mask:                 │   IRR ─ INTA ─ irq entry
//!     fence; ICR x (1 per CPU | 1 per cluster) ──┼─▶ EOI
//!   for each target: csd_lock_wait ◀─────────────┤   llist_del_all(call_single_queue)
//!                                                └── func(info); csd_unlock
//! ```
//!
//! Sources (read for the sequence of steps; no code is taken from them): Linux
//! `arch/x86/kernel/apic/x2apic_phys.c` (`__x2apic_send_IPI_mask`: one ICR write per
//! CPU), `x2apic_cluster.c` (`__x2apic_send_IPI_mask`: for each CPU not yet handled,
//! OR the logical IDs of all targets of its cluster and write ICR once), `ipi.c`
//! (`native_send_call_func_ipi`: the all-but-self shorthand when the mask is every
//! online CPU but the sender), `kernel/smp.c` (`smp_call_function_many_cond`,
//! `__flush_smp_call_function_queue`), `arch/x86/mm/tlb.c` (`native_flush_tlb_multi`
//! calls the former with wait = true).
//!
//! Charged: the fence before x2APIC ICR writes (`weak_wrmsr_fence`, MFENCE; LFENCE:
//! Linux orders prior stores before the non-serializing x2APIC WRMSR), each ICR WRMSR,
//! each CSD enqueue (a locked cmpxchg on the target's queue head), the wait for each
//! CSD unlock, and on the target the EOI, the queue take, the function and the unlock.
//! A cpumask walk over the sender's own copy is not charged (a few L1 hits per CPU
//! against a 150-cycle WRMSR). A walk over a mask other CPUs write is: 2.6.38 handed
//! the x2APIC driver `f->flush_cpumask` itself ([`MaskHome::FlushState`]), which the
//! targets clear with locked operations while the pre-patch driver still walks it.
//! Not modelled: `cond_func` filtering, a sender that is also a target (it would
//! run the function locally), the idle-polling shortcut that wakes a CPU polling on
//! `TIF_POLLING_NRFLAG` without an IPI (targets here are idle in a halt state),
//! lazy-TLB filtering of `native_flush_tlb_multi`.

use std::rc::Rc;

use apic_sim::{logical_id, DeliveryMode, DestMode, Icr, Shorthand, TriggerMode};
use serde::{Deserialize, Serialize};
use sim_core::{ApicId, CpuId, Vector};

use crate::engine::{Call, Port};
use crate::topology::{Topology, CLUSTER_SIZE};

/// Linux `CALL_FUNCTION_VECTOR` (arch/x86/include/asm/irq_vectors.h).
pub const CALL_FUNCTION_VECTOR: Vector = Vector(0xfc);
/// Linux `CALL_FUNCTION_SINGLE_VECTOR`.
pub const CALL_FUNCTION_SINGLE_VECTOR: Vector = Vector(0xfb);

/// How the kernel addresses IPIs: Linux's `x2apic_phys` or `x2apic_cluster` driver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IpiMode {
    /// Physical destination mode: one ICR write per target CPU.
    Physical,
    /// Logical cluster mode: one ICR write per x2APIC cluster with targets (Linux's
    /// choice on an x2APIC machine unless physical mode is forced; the send of seed
    /// 003's patch, "x86, x2apic: minimize IPI register writes using cluster groups").
    #[default]
    Cluster,
    /// Logical cluster mode as Linux sent it before that patch (2.6.38
    /// `x2apic_cluster.c`): fence, interrupts off, one ICR write per target CPU with
    /// that CPU's logical ID.
    ClusterPerCpu,
}

impl IpiMode {
    /// Physical and today's cluster mode.
    pub const ALL: [IpiMode; 2] = [IpiMode::Physical, IpiMode::Cluster];
    /// `"physical"`, `"cluster"` or `"cluster-per-cpu"`.
    pub fn as_str(self) -> &'static str {
        match self {
            IpiMode::Physical => "physical",
            IpiMode::Cluster => "cluster",
            IpiMode::ClusterPerCpu => "cluster-per-cpu",
        }
    }
}

/// Which kernel's TLB shootdown a load runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ShootdownKernel {
    /// Today's `native_flush_tlb_multi` -> `smp_call_function_many` (per-target CSDs;
    /// Linux 3.6 and later).
    #[default]
    SmpCallFunctionMany,
    /// Linux 2.6.38's `flush_tlb_others_ipi`: one shared `flush_state` line, cleared
    /// bit by bit by the targets ([`crate::kernel::tlb_2011`]).
    FlushTlbOthers2011,
}

impl ShootdownKernel {
    /// Both kernels.
    pub const ALL: [ShootdownKernel; 2] = [
        ShootdownKernel::FlushTlbOthers2011,
        ShootdownKernel::SmpCallFunctionMany,
    ];
    /// `"smp-call-function-many"` or `"flush-tlb-others-2011"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ShootdownKernel::SmpCallFunctionMany => "smp-call-function-many",
            ShootdownKernel::FlushTlbOthers2011 => "flush-tlb-others-2011",
        }
    }
}

/// A set of CPUs (Linux `struct cpumask`), as a bitmap over CPU numbers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CpuMask {
    words: Vec<u64>,
    nr_cpus: u32,
}

impl CpuMask {
    /// An empty mask for CPUs `0..nr_cpus`.
    pub fn new(nr_cpus: u32) -> CpuMask {
        CpuMask {
            words: vec![0; nr_cpus.div_ceil(64) as usize],
            nr_cpus,
        }
    }
    /// A mask of `cpus`.
    ///
    /// # Panics
    /// If a CPU is `>= nr_cpus`.
    pub fn from_cpus(nr_cpus: u32, cpus: impl IntoIterator<Item = CpuId>) -> CpuMask {
        let mut m = CpuMask::new(nr_cpus);
        for c in cpus {
            m.set(c);
        }
        m
    }
    /// Every CPU.
    pub fn full(nr_cpus: u32) -> CpuMask {
        CpuMask::from_cpus(nr_cpus, (0..nr_cpus).map(CpuId))
    }
    /// The size of the CPU space (not the number of CPUs set).
    pub fn nr_cpus(&self) -> u32 {
        self.nr_cpus
    }
    /// `cpumask_set_cpu`.
    pub fn set(&mut self, cpu: CpuId) {
        assert!(cpu.0 < self.nr_cpus, "CPU {} outside the mask", cpu.0);
        self.words[(cpu.0 / 64) as usize] |= 1 << (cpu.0 % 64);
    }
    /// `cpumask_clear_cpu`.
    pub fn clear(&mut self, cpu: CpuId) {
        if cpu.0 < self.nr_cpus {
            self.words[(cpu.0 / 64) as usize] &= !(1 << (cpu.0 % 64));
        }
    }
    /// `cpumask_test_cpu`.
    pub fn test(&self, cpu: CpuId) -> bool {
        cpu.0 < self.nr_cpus && self.words[(cpu.0 / 64) as usize] & (1 << (cpu.0 % 64)) != 0
    }
    /// `cpumask_weight`.
    pub fn weight(&self) -> u32 {
        self.words.iter().map(|w| w.count_ones()).sum()
    }
    /// `cpumask_empty`.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }
    /// `cpumask_next`: the first CPU set at or after `from`.
    pub fn next(&self, from: u32) -> Option<CpuId> {
        let mut i = from;
        while i < self.nr_cpus {
            let w = self.words[(i / 64) as usize] >> (i % 64);
            if w != 0 {
                let c = i + w.trailing_zeros();
                return (c < self.nr_cpus).then_some(CpuId(c));
            }
            i = (i / 64 + 1) * 64;
        }
        None
    }
    /// `cpumask_andnot(self, self, other)`.
    pub fn and_not(&mut self, other: &CpuMask) {
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a &= !b;
        }
    }
    /// The CPUs set, ascending.
    pub fn iter(&self) -> impl Iterator<Item = CpuId> + '_ {
        let mut at = 0;
        std::iter::from_fn(move || {
            let c = self.next(at)?;
            at = c.0 + 1;
            Some(c)
        })
    }
}

/// The kernel's per-CPU APIC tables: `x86_cpu_to_apicid`,
/// `x86_cpu_to_logical_apicid` (the LDR each CPU read at boot) and the per-CPU
/// `cluster_masks` of `x2apic_cluster.c`.
#[derive(Clone, Debug)]
pub struct ApicMaps {
    apicid: Vec<ApicId>,
    logical: Vec<u32>,
    /// Index into `clusters` per CPU.
    cluster_of: Vec<usize>,
    clusters: Vec<CpuMask>,
}

impl ApicMaps {
    /// Tables for every CPU of `topology` (all online).
    pub fn new(topology: &Topology) -> ApicMaps {
        ApicMaps::from_ids(topology.cpus().iter().map(|c| c.apic_id).collect())
    }

    /// Tables for CPUs `0..apicid.len()` whose x2APIC IDs are `apicid` (all online).
    pub fn from_ids(apicid: Vec<ApicId>) -> ApicMaps {
        let n = apicid.len() as u32;
        let logical = apicid.iter().map(|&id| logical_id(id)).collect();
        // Group CPUs by cluster id, in order of first appearance.
        let mut ids: Vec<u32> = Vec::new();
        let mut clusters: Vec<CpuMask> = Vec::new();
        let mut cluster_of = Vec::with_capacity(apicid.len());
        for (cpu, id) in apicid.iter().enumerate() {
            let cluster = id.0 / CLUSTER_SIZE;
            let idx = match ids.iter().position(|&c| c == cluster) {
                Some(i) => i,
                None => {
                    ids.push(cluster);
                    clusters.push(CpuMask::new(n));
                    ids.len() - 1
                }
            };
            clusters[idx].set(CpuId(cpu as u32));
            cluster_of.push(idx);
        }
        ApicMaps {
            apicid,
            logical,
            cluster_of,
            clusters,
        }
    }
    /// Online CPUs.
    pub fn nr_cpus(&self) -> u32 {
        self.apicid.len() as u32
    }
    /// `per_cpu(x86_cpu_to_apicid, cpu)`.
    pub fn apicid(&self, cpu: CpuId) -> ApicId {
        self.apicid[cpu.0 as usize]
    }
    /// `per_cpu(x86_cpu_to_logical_apicid, cpu)`.
    pub fn logical_apicid(&self, cpu: CpuId) -> u32 {
        self.logical[cpu.0 as usize]
    }
    /// `per_cpu(cluster_masks, cpu)`: every online CPU of `cpu`'s cluster.
    pub fn cluster_mask(&self, cpu: CpuId) -> &CpuMask {
        &self.clusters[self.cluster_of[cpu.0 as usize]]
    }
}

/// One hardware access of an IPI algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpiOp {
    /// `weak_wrmsr_fence()`: MFENCE; LFENCE before x2APIC ICR writes.
    WrmsrFence,
    /// One WRMSR of this value to the x2APIC ICR.
    WriteIcr(Icr),
    /// Queue this CPU's call-single-data for `cpu`: `csd_lock`, fill in the
    /// function, `llist_add` onto `cpu`'s `call_single_queue`. Yields 1 if the queue
    /// was empty (the target needs an IPI), 0 otherwise.
    QueueCsd(CpuId),
    /// `csd_lock_wait`: spin until `cpu` has unlocked the CSD queued for it.
    WaitCsd(CpuId),
    /// One WRMSR to the x2APIC EOI register.
    Eoi,
    /// `llist_del_all` of this CPU's `call_single_queue`; yields the number of CSDs
    /// taken, which [`RunCsdFunc`](Self::RunCsdFunc) and
    /// [`UnlockCsd`](Self::UnlockCsd) then name by position.
    TakeQueue,
    /// Load the `i`-th taken CSD and run its function.
    RunCsdFunc(usize),
    /// `csd_unlock` of the `i`-th taken CSD: the release store its sender waits for.
    UnlockCsd(usize),
    /// Not an instruction: the end of the `csd_lock_wait` loop, where the loads the
    /// core ran ahead with (up to its fill buffers) must have completed before the
    /// call returns, as its exit branch depends on each of them.
    LoadsRetired,
    /// `local_irq_save()`: mask interrupts (nests).
    LocalIrqSave,
    /// `local_irq_restore()`: undo the matching save.
    LocalIrqRestore,
    /// `cpu_relax()` (PAUSE) in a polling loop.
    CpuRelax,
    /// 2.6.38 `flush_tlb_others_ipi`: `raw_spin_lock(&f->tlbstate_lock)` on the
    /// `flush_state` line of this slot.
    FlushStateLock(u8),
    /// Store `flush_mm`, `flush_va` and the start of the mask into the slot's line.
    FlushStateFill(u8),
    /// Set `cpu`'s bit of the slot's `flush_cpumask` (the sender's `cpumask_andnot`).
    FlushMaskSet(u8, CpuId),
    /// `cpumask_empty(f->flush_cpumask)`: a load of the line; yields 1 if empty.
    FlushMaskPoll(u8),
    /// The x2APIC driver reading the `flush_cpumask` it was handed
    /// ([`MaskHome::FlushState`]): one `cpumask_next` of its walk, or the patched
    /// driver's `cpumask_copy`; a load of the line.
    FlushMaskRead(u8),
    /// Clear `flush_mm` and `flush_va` and `raw_spin_unlock`: stores to the line.
    FlushStateUnlock(u8),
    /// Target: `cpumask_test_cpu(cpu, f->flush_cpumask)` and the load of
    /// `flush_mm`: one load of the slot's line; yields 1 if this CPU's bit is set.
    FlushMaskTest(u8),
    /// Target: the local flush (`__flush_tlb_one` or `local_flush_tlb`).
    FlushTlbLocal,
    /// Target: `cpumask_clear_cpu(cpu, f->flush_cpumask)`, a locked bit clear on the
    /// slot's line that every target contends for and the sender polls.
    FlushMaskClear(u8),
}

/// An algorithm's handle on the CPU it runs on.
#[derive(Clone)]
pub struct IpiPort {
    port: Port<IpiOp, u64>,
}

impl IpiPort {
    pub(crate) fn new(port: Port<IpiOp, u64>) -> IpiPort {
        IpiPort { port }
    }
    fn op(&self, op: IpiOp) -> Call<IpiOp, u64> {
        self.port.call(op)
    }
    /// `weak_wrmsr_fence()`.
    pub async fn wrmsr_fence(&self) {
        self.op(IpiOp::WrmsrFence).await;
    }
    /// `native_x2apic_icr_write(low, id)`: one 64-bit WRMSR.
    pub async fn write_icr(&self, icr: Icr) {
        self.op(IpiOp::WriteIcr(icr)).await;
    }
    /// Queue a CSD for `cpu`; whether its queue was empty.
    pub async fn queue_csd(&self, cpu: CpuId) -> bool {
        self.op(IpiOp::QueueCsd(cpu)).await != 0
    }
    /// `csd_lock_wait(csd of cpu)`.
    pub async fn wait_csd(&self, cpu: CpuId) {
        self.op(IpiOp::WaitCsd(cpu)).await;
    }
    /// `apic_eoi()`.
    pub async fn eoi(&self) {
        self.op(IpiOp::Eoi).await;
    }
    /// `llist_del_all(this_cpu_ptr(&call_single_queue))`: CSDs taken.
    pub async fn take_queue(&self) -> usize {
        self.op(IpiOp::TakeQueue).await as usize
    }
    /// `csd->func(csd->info)` of the `i`-th taken CSD.
    pub async fn run_csd_func(&self, i: usize) {
        self.op(IpiOp::RunCsdFunc(i)).await;
    }
    /// `csd_unlock(csd)` of the `i`-th taken CSD.
    pub async fn unlock_csd(&self, i: usize) {
        self.op(IpiOp::UnlockCsd(i)).await;
    }
    /// Any other operation; yields its value.
    pub async fn run(&self, op: IpiOp) -> u64 {
        self.op(op).await
    }
}

/// `__prepare_ICR` + destination for an x2APIC: a fixed, edge IPI.
fn fixed_icr(vector: Vector, dest_mode: DestMode, shorthand: Shorthand, dest: u32) -> Icr {
    Icr::encode(
        vector,
        DeliveryMode::Fixed,
        dest_mode,
        TriggerMode::Edge,
        shorthand,
        dest,
    )
}

/// Where the mask an x2APIC driver's send is handed lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaskHome {
    /// The sender's own copy (today's `cfd->cpumask_ipi`, a caller's local mask):
    /// walking it costs nothing the model charges.
    Private,
    /// `flush_cpumask` in the `flush_state` line of this slot (Linux 2.6.38's
    /// `flush_tlb_others_ipi`): every read of the mask is a load of that line, which
    /// targets already interrupted are clearing with locked operations.
    FlushState(u8),
}

impl MaskHome {
    /// One read of the mask's words (`cpumask_next`, or `cpumask_copy`).
    async fn read(self, cpu: &IpiPort) {
        if let MaskHome::FlushState(slot) = self {
            cpu.run(IpiOp::FlushMaskRead(slot)).await;
        }
    }
}

/// One ICR write per CPU of `mask` (without `this_cpu` when `exclude_self`), walking
/// the mask where it lives: `for_each_cpu` calls `cpumask_next` once per CPU found and
/// once more to find none. Bits ahead of the walk are only cleared by CPUs that have
/// had their IPI, which they get after the walk has passed them, so the walk finds
/// the CPUs of `mask`; what the live mask changes is the cost of each read.
async fn icr_per_cpu(
    cpu: &IpiPort,
    this_cpu: CpuId,
    mask: &CpuMask,
    home: MaskHome,
    exclude_self: bool,
    icr_of: impl Fn(CpuId) -> Icr,
) {
    for query_cpu in mask.iter() {
        home.read(cpu).await;
        if !(exclude_self && query_cpu == this_cpu) {
            cpu.write_icr(icr_of(query_cpu)).await;
        }
    }
    home.read(cpu).await;
}

/// `x2apic_phys.c` `__x2apic_send_IPI_mask`: fence, interrupts off, one ICR write per
/// CPU of `mask` (without the sender when `exclude_self`), walking `mask` where it
/// lives, interrupts back on (2.6.38 and today alike).
pub async fn x2apic_phys_send_ipi_mask(
    cpu: &IpiPort,
    maps: &ApicMaps,
    this_cpu: CpuId,
    (mask, home): (&CpuMask, MaskHome),
    vector: Vector,
    exclude_self: bool,
) {
    cpu.wrmsr_fence().await;
    cpu.run(IpiOp::LocalIrqSave).await;
    icr_per_cpu(cpu, this_cpu, mask, home, exclude_self, |c| {
        fixed_icr(
            vector,
            DestMode::Physical,
            Shorthand::None,
            maps.apicid(c).0,
        )
    })
    .await;
    cpu.run(IpiOp::LocalIrqRestore).await;
}

/// `x2apic_cluster.c` `__x2apic_send_IPI_mask` (seed 003's patch and today): fence,
/// interrupts off; then, walking a copy of the mask (one read of `mask` where it
/// lives, the `cpumask_copy` into the per-CPU `ipi_mask`), for each CPU still in it OR
/// the logical IDs of every CPU of the copy in the same cluster, write ICR once in
/// logical mode, and remove that cluster from the copy; interrupts back on.
pub async fn x2apic_cluster_send_ipi_mask(
    cpu: &IpiPort,
    maps: &ApicMaps,
    this_cpu: CpuId,
    (mask, home): (&CpuMask, MaskHome),
    vector: Vector,
    exclude_self: bool,
) {
    cpu.wrmsr_fence().await;
    cpu.run(IpiOp::LocalIrqSave).await;
    home.read(cpu).await;
    let mut tmpmsk = mask.clone();
    if exclude_self {
        tmpmsk.clear(this_cpu);
    }
    let mut at = 0;
    while let Some(c) = tmpmsk.next(at) {
        at = c.0 + 1;
        let cmsk = maps.cluster_mask(c);
        let mut dest = 0u32;
        for clustercpu in tmpmsk.iter().filter(|&x| cmsk.test(x)) {
            dest |= maps.logical_apicid(clustercpu);
        }
        if dest == 0 {
            continue;
        }
        cpu.write_icr(fixed_icr(vector, DestMode::Logical, Shorthand::None, dest))
            .await;
        tmpmsk.and_not(cmsk);
    }
    cpu.run(IpiOp::LocalIrqRestore).await;
}

/// 2.6.38 `x2apic_cluster.c` `x2apic_send_IPI_mask`, before seed 003's patch: fence,
/// interrupts off, one logical-mode ICR write per CPU of `mask` with that CPU's
/// logical ID, walking `mask` itself where it lives, interrupts back on.
pub async fn x2apic_cluster_send_ipi_mask_per_cpu(
    cpu: &IpiPort,
    maps: &ApicMaps,
    this_cpu: CpuId,
    (mask, home): (&CpuMask, MaskHome),
    vector: Vector,
    exclude_self: bool,
) {
    cpu.wrmsr_fence().await;
    cpu.run(IpiOp::LocalIrqSave).await;
    icr_per_cpu(cpu, this_cpu, mask, home, exclude_self, |c| {
        fixed_icr(
            vector,
            DestMode::Logical,
            Shorthand::None,
            maps.logical_apicid(c),
        )
    })
    .await;
    cpu.run(IpiOp::LocalIrqRestore).await;
}

/// `apic->send_IPI(cpu, vector)`: one CPU, fenced; physical ID or logical ID.
pub async fn send_ipi_one(
    cpu: &IpiPort,
    maps: &ApicMaps,
    mode: IpiMode,
    target: CpuId,
    vector: Vector,
) {
    cpu.wrmsr_fence().await;
    let icr = match mode {
        IpiMode::Physical => fixed_icr(
            vector,
            DestMode::Physical,
            Shorthand::None,
            maps.apicid(target).0,
        ),
        IpiMode::Cluster | IpiMode::ClusterPerCpu => fixed_icr(
            vector,
            DestMode::Logical,
            Shorthand::None,
            maps.logical_apicid(target),
        ),
    };
    cpu.write_icr(icr).await;
}

/// `apic->send_IPI_mask` of the chosen driver (the sender included if in `mask`),
/// handed a mask of the sender's own.
pub async fn send_ipi_mask(
    cpu: &IpiPort,
    maps: &ApicMaps,
    mode: IpiMode,
    this_cpu: CpuId,
    mask: &CpuMask,
    vector: Vector,
) {
    send_ipi_mask_in(cpu, maps, mode, this_cpu, (mask, MaskHome::Private), vector).await
}

/// `apic->send_IPI_mask` of the chosen driver, handed a mask that lives at `home`.
pub async fn send_ipi_mask_in(
    cpu: &IpiPort,
    maps: &ApicMaps,
    mode: IpiMode,
    this_cpu: CpuId,
    mask: (&CpuMask, MaskHome),
    vector: Vector,
) {
    match mode {
        IpiMode::Physical => {
            x2apic_phys_send_ipi_mask(cpu, maps, this_cpu, mask, vector, false).await
        }
        IpiMode::Cluster => {
            x2apic_cluster_send_ipi_mask(cpu, maps, this_cpu, mask, vector, false).await
        }
        IpiMode::ClusterPerCpu => {
            x2apic_cluster_send_ipi_mask_per_cpu(cpu, maps, this_cpu, mask, vector, false).await
        }
    }
}

/// `__x2apic_send_IPI_shorthand`: fence, one ICR write with a shorthand (the
/// destination field is ignored).
pub async fn send_ipi_shorthand(cpu: &IpiPort, vector: Vector, which: Shorthand) {
    cpu.wrmsr_fence().await;
    cpu.write_icr(fixed_icr(vector, DestMode::Physical, which, 0))
        .await;
}

/// `native_send_call_func_ipi(mask)` with IPI shorthands enabled (Linux's default
/// once every possible CPU is online): if `mask` plus the sender is every online
/// CPU, one shorthand write (all, or all-but-self); otherwise the driver's mask send.
pub async fn send_call_function_ipi_mask(
    cpu: &IpiPort,
    maps: &ApicMaps,
    mode: IpiMode,
    this_cpu: CpuId,
    mask: &CpuMask,
) {
    let mut or_self = mask.clone();
    or_self.set(this_cpu);
    if or_self.weight() != maps.nr_cpus() {
        return send_ipi_mask(cpu, maps, mode, this_cpu, mask, CALL_FUNCTION_VECTOR).await;
    }
    if mask.test(this_cpu) {
        send_ipi_shorthand(cpu, CALL_FUNCTION_VECTOR, Shorthand::AllIncludingSelf).await;
    } else if maps.nr_cpus() > 1 {
        send_ipi_shorthand(cpu, CALL_FUNCTION_VECTOR, Shorthand::AllExcludingSelf).await;
    }
}

/// `smp_call_function_many_cond(mask, func, info, SCF_WAIT, NULL)` run by
/// `this_cpu`, which is not in `mask` (it is removed if it is): queue a CSD for every
/// target, send the call-function IPI to the targets whose queue was empty (the
/// single-CPU vector when there is only one), then wait for every CSD to be unlocked.
/// This is what `native_flush_tlb_multi` does for a TLB shootdown.
pub async fn smp_call_function_many(
    cpu: IpiPort,
    maps: Rc<ApicMaps>,
    mode: IpiMode,
    this_cpu: CpuId,
    mask: CpuMask,
) {
    // cpumask_and(cfd->cpumask, mask, cpu_online_mask); clear this CPU.
    let mut cfd_mask = mask;
    cfd_mask.clear(this_cpu);
    let mut cpumask_ipi = CpuMask::new(maps.nr_cpus());
    let mut nr_cpus = 0;
    let mut last_cpu = None;
    for target in cfd_mask.iter() {
        // csd_lock(csd); csd->func = func; csd->info = info;
        // if (llist_add(&csd->node.llist, &per_cpu(call_single_queue, cpu)))
        if cpu.queue_csd(target).await {
            cpumask_ipi.set(target);
            nr_cpus += 1;
            last_cpu = Some(target);
        }
    }
    // Choose the most efficient way to send an IPI.
    if nr_cpus == 1 {
        let target = last_cpu.expect("one CPU was queued");
        send_ipi_one(&cpu, &maps, mode, target, CALL_FUNCTION_SINGLE_VECTOR).await;
    } else if nr_cpus > 1 {
        send_call_function_ipi_mask(&cpu, &maps, mode, this_cpu, &cpumask_ipi).await;
    }
    // if (wait) for_each_cpu(cpu, cfd->cpumask) csd_lock_wait(csd);
    for target in cfd_mask.iter() {
        cpu.wait_csd(target).await;
    }
    cpu.run(IpiOp::LoadsRetired).await;
}

/// `sysvec_call_function` / `sysvec_call_function_single` after IDT entry: EOI
/// first, then `generic_smp_call_function_interrupt` ->
/// `__flush_smp_call_function_queue`: take the whole queue, and for each
/// synchronous CSD run its function, then unlock it.
pub async fn call_function_interrupt(cpu: IpiPort) {
    cpu.eoi().await;
    let taken = cpu.take_queue().await;
    for i in 0..taken {
        cpu.run_csd_func(i).await;
        cpu.unlock_csd(i).await;
    }
}

/// Costs of the cross-call algorithm beyond APIC registers and cache lines.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IpiCosts {
    /// `weak_wrmsr_fence()` (MFENCE; LFENCE) with nothing outstanding, core cycles.
    /// Default 40. Assumption: no public figure for the pair on a drained store
    /// buffer; a few tens of cycles, small against the ICR WRMSR it precedes.
    pub fence_cycles: f64,
    /// Local part of queueing one CSD (`csd_lock` on the sender's own CSD, storing
    /// func and info), core cycles. Default 30. Assumption: a few L1-hit stores and
    /// a locked operation on an owned line (DESIGN.md section 3: ~20 cycles).
    /// The remote cmpxchg on the target's queue head is charged as a line transfer.
    pub csd_setup_cycles: f64,
    /// The cross-called function, e.g. `flush_tlb_func` invalidating a few pages,
    /// core cycles. Default 500. Assumption: a handful of INVLPGs plus the function's
    /// bookkeeping; no public bare-metal figure.
    pub func_cycles: f64,
    /// One `cpu_relax()` (PAUSE) in a polling loop, core cycles. Default 140:
    /// Intel's optimization manual gives PAUSE about 140 cycles from Skylake on (it
    /// was about 10 before); a Westmere profile sets its own.
    pub pause_cycles: f64,
    /// `local_irq_save()` or `local_irq_restore()` on x86 (PUSHF; CLI, or POPF),
    /// core cycles. Default 10: assumption, a few cycles for CLI and more for POPF,
    /// which writes the whole flags register.
    pub irq_save_cycles: f64,
}

impl Default for IpiCosts {
    fn default() -> Self {
        IpiCosts {
            fence_cycles: 40.0,
            csd_setup_cycles: 30.0,
            func_cycles: 500.0,
            pause_cycles: 140.0,
            irq_save_cycles: 10.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Coroutine, Step};
    use crate::topology::TopologySpec;

    fn run_sender(maps: Rc<ApicMaps>, mode: IpiMode, this_cpu: CpuId, mask: CpuMask) -> Vec<IpiOp> {
        let mut co: Coroutine<IpiOp, u64> = Coroutine::new(move |port| {
            smp_call_function_many(IpiPort::new(port), maps, mode, this_cpu, mask)
        });
        let mut ops = Vec::new();
        let mut step = co.resume(None);
        while let Step::Request(op) = step {
            ops.push(op);
            step = co.resume(Some(1));
        }
        ops
    }

    fn icrs(ops: &[IpiOp]) -> Vec<Icr> {
        ops.iter()
            .filter_map(|op| match op {
                IpiOp::WriteIcr(i) => Some(*i),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn cpumask_walks_like_linux() {
        let mut m = CpuMask::from_cpus(130, [1, 64, 65, 129].map(CpuId));
        assert_eq!(m.weight(), 4);
        assert_eq!(m.next(2), Some(CpuId(64)));
        assert_eq!(m.next(130), None);
        let other = CpuMask::from_cpus(130, [64, 129].map(CpuId));
        m.and_not(&other);
        assert_eq!(m.iter().collect::<Vec<_>>(), [CpuId(1), CpuId(65)]);
        assert!(!CpuMask::new(0).test(CpuId(0)));
        assert_eq!(CpuMask::full(70).weight(), 70);
    }

    #[test]
    fn cluster_mode_writes_once_per_cluster_physical_once_per_cpu() {
        let topo = Topology::new(TopologySpec::new(2, 20, 2)).unwrap();
        let maps = Rc::new(ApicMaps::new(&topo));
        let socket1 = CpuMask::from_cpus(80, topo.socket_cpus(1));
        let phys = run_sender(maps.clone(), IpiMode::Physical, CpuId(0), socket1.clone());
        let clus = run_sender(maps.clone(), IpiMode::Cluster, CpuId(0), socket1);
        assert_eq!(icrs(&phys).len(), 40);
        let c = icrs(&clus);
        assert_eq!(c.len(), 3);
        // Clusters 4 and 5 are full (16 threads each), cluster 6 holds 8.
        let dests: Vec<u32> = c.iter().map(|i| i.destination()).collect();
        assert_eq!(dests, [0x0004_ffff, 0x0005_ffff, 0x0006_00ff]);
        assert!(c
            .iter()
            .all(|i| i.dest_mode() == DestMode::Logical && i.vector() == CALL_FUNCTION_VECTOR));
        // Order: 40 CSD enqueues, one fence, interrupts off, the writes (the mask is
        // the sender's own, so reading it is not an operation), interrupts on, 40
        // waits, the loads retire.
        assert!(clus[..40].iter().all(|o| matches!(o, IpiOp::QueueCsd(_))));
        assert_eq!(clus[40..42], [IpiOp::WrmsrFence, IpiOp::LocalIrqSave]);
        assert!(clus[42..45].iter().all(|o| matches!(o, IpiOp::WriteIcr(_))));
        assert_eq!(clus[45], IpiOp::LocalIrqRestore);
        assert!(clus[46..86].iter().all(|o| matches!(o, IpiOp::WaitCsd(_))));
        assert_eq!(clus[86], IpiOp::LoadsRetired);
        assert_eq!(clus.len(), 40 + 2 + 3 + 1 + 40 + 1);
        assert!(!phys.iter().any(|o| matches!(o, IpiOp::FlushMaskRead(_))));
    }

    #[test]
    fn one_target_uses_the_single_vector_and_all_but_self_uses_the_shorthand() {
        let topo = Topology::new(TopologySpec::new(1, 4, 1)).unwrap();
        let maps = Rc::new(ApicMaps::new(&topo));
        let one = run_sender(
            maps.clone(),
            IpiMode::Cluster,
            CpuId(0),
            CpuMask::from_cpus(4, [CpuId(2)]),
        );
        let i = icrs(&one);
        assert_eq!(i.len(), 1);
        assert_eq!(i[0].vector(), CALL_FUNCTION_SINGLE_VECTOR);
        assert_eq!(i[0].destination(), logical_id(ApicId(2)));
        let all = run_sender(maps, IpiMode::Physical, CpuId(0), CpuMask::full(4));
        let i = icrs(&all);
        assert_eq!(i.len(), 1);
        assert_eq!(i[0].shorthand(), Shorthand::AllExcludingSelf);
    }

    #[test]
    fn target_handler_eois_first_then_runs_and_unlocks_each_csd() {
        let mut co: Coroutine<IpiOp, u64> =
            Coroutine::new(|port| call_function_interrupt(IpiPort::new(port)));
        assert_eq!(co.resume(None), Step::Request(IpiOp::Eoi));
        assert_eq!(co.resume(Some(0)), Step::Request(IpiOp::TakeQueue));
        assert_eq!(co.resume(Some(2)), Step::Request(IpiOp::RunCsdFunc(0)));
        assert_eq!(co.resume(Some(0)), Step::Request(IpiOp::UnlockCsd(0)));
        assert_eq!(co.resume(Some(0)), Step::Request(IpiOp::RunCsdFunc(1)));
        assert_eq!(co.resume(Some(0)), Step::Request(IpiOp::UnlockCsd(1)));
        assert_eq!(co.resume(Some(0)), Step::Done);
    }
}
