//! The TLB shootdown of Linux 2.6.38/39 (`arch/x86/mm/tlb.c`), the kernel seed 003
//! measured: one `flush_state` cache line per sender slot holds the lock, the mm, the
//! address and the `flush_cpumask`; the sender sends the invalidate IPI and spins
//! until the mask is empty; each target flushes, EOIs and clears its own bit with a
//! locked operation on that one line. There are no per-target CSDs (those came with
//! `smp_call_function_many` in 3.6, [`super::ipi::smp_call_function_many`]).
//!
//! ```text
//!  sender (flush_tlb_others_ipi)                   target (smp_invalidate_interrupt)
//!   spin_lock(f->tlbstate_lock)
//!   f->flush_mm, f->flush_va = ...
//!   cpumask_andnot(f->flush_cpumask, mask, self)
//!   apic->send_IPI_mask(f->flush_cpumask, ──────▶  test own bit, read flush_mm
//!                       INVALIDATE_TLB_VECTOR_START + slot)   flush; ack_APIC_irq
//!   while (!cpumask_empty(f->flush_cpumask)) ◀──── cpumask_clear_cpu (LOCK BTR on f)
//!       cpu_relax();
//!   f->flush_mm = NULL; spin_unlock
//! ```
//!
//! The slot is the sender's CPU number modulo [`NUM_INVALIDATE_TLB_VECTORS`], as
//! 2.6.37 chose it (2.6.38 spread the slots over nodes; with one sender the choice
//! does not matter). The IPI goes through the x2APIC driver of the time:
//! [`IpiMode::ClusterPerCpu`] before seed 003's patch, [`IpiMode::Cluster`] after it,
//! or [`IpiMode::Physical`].
//!
//! Sources (read for the sequence of steps; no code is taken from them): Linux
//! 2.6.38 `arch/x86/mm/tlb.c` (`flush_tlb_others_ipi`, `smp_invalidate_interrupt`),
//! `arch/x86/include/asm/irq_vectors.h` (the invalidate vectors).

use std::rc::Rc;

use sim_core::{CpuId, Vector};

use super::ipi::{send_ipi_mask_in, ApicMaps, CpuMask, IpiMode, IpiOp, IpiPort, MaskHome};

/// `INVALIDATE_TLB_VECTOR_START`: vectors 0xf0-0xf7 carried TLB-flush IPIs.
pub const INVALIDATE_TLB_VECTOR_START: u8 = 0xf0;
/// `NUM_INVALIDATE_TLB_VECTORS`: one `flush_state` slot per vector.
pub const NUM_INVALIDATE_TLB_VECTORS: u8 = 8;

/// The invalidate vector of `slot`.
pub fn invalidate_vector(slot: u8) -> Vector {
    Vector(INVALIDATE_TLB_VECTOR_START + slot % NUM_INVALIDATE_TLB_VECTORS)
}

/// The `flush_state` slot an invalidate vector names, if it is one.
pub fn slot_of_vector(vector: Vector) -> Option<u8> {
    let v = vector.0;
    (INVALIDATE_TLB_VECTOR_START..INVALIDATE_TLB_VECTOR_START + NUM_INVALIDATE_TLB_VECTORS)
        .contains(&v)
        .then(|| v - INVALIDATE_TLB_VECTOR_START)
}

/// The slot `cpu` sends from.
pub fn slot_of_sender(cpu: CpuId) -> u8 {
    (cpu.0 % NUM_INVALIDATE_TLB_VECTORS as u32) as u8
}

/// `flush_tlb_others_ipi(cpumask, mm, va)` run by `this_cpu`.
pub async fn flush_tlb_others_ipi(
    cpu: IpiPort,
    maps: Rc<ApicMaps>,
    mode: IpiMode,
    this_cpu: CpuId,
    mask: CpuMask,
) {
    let slot = slot_of_sender(this_cpu);
    // raw_spin_lock(&f->tlbstate_lock)
    while cpu.run(IpiOp::FlushStateLock(slot)).await == 0 {
        cpu.run(IpiOp::CpuRelax).await;
    }
    cpu.run(IpiOp::FlushStateFill(slot)).await;
    let mut to = mask;
    to.clear(this_cpu);
    if !to.is_empty() {
        for target in to.iter() {
            cpu.run(IpiOp::FlushMaskSet(slot, target)).await;
        }
        // 2.6.38 hands the driver `f->flush_cpumask` itself, not a copy.
        let mask = (&to, MaskHome::FlushState(slot));
        send_ipi_mask_in(&cpu, &maps, mode, this_cpu, mask, invalidate_vector(slot)).await;
        while cpu.run(IpiOp::FlushMaskPoll(slot)).await == 0 {
            cpu.run(IpiOp::CpuRelax).await;
        }
    }
    cpu.run(IpiOp::FlushStateUnlock(slot)).await;
}

/// `smp_invalidate_interrupt` for `slot`'s vector, after IDT entry: flush if this CPU
/// is in the mask, EOI, then clear its bit (which it does either way).
pub async fn smp_invalidate_interrupt(cpu: IpiPort, slot: u8) {
    if cpu.run(IpiOp::FlushMaskTest(slot)).await != 0 {
        cpu.run(IpiOp::FlushTlbLocal).await;
    }
    cpu.eoi().await;
    cpu.run(IpiOp::FlushMaskClear(slot)).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Coroutine, Step};
    use crate::topology::{Topology, TopologySpec};

    fn sender_ops(mode: IpiMode, targets: u32, empty_after: usize) -> Vec<IpiOp> {
        let topo = Topology::new(TopologySpec::new(2, 10, 2)).unwrap();
        let maps = Rc::new(ApicMaps::new(&topo));
        let mask = CpuMask::from_cpus(40, topo.socket_cpus(1).take(targets as usize));
        let mut co: Coroutine<IpiOp, u64> = Coroutine::new(move |port| {
            flush_tlb_others_ipi(IpiPort::new(port), maps, mode, CpuId(0), mask)
        });
        let (mut ops, mut polls) = (Vec::new(), 0);
        let mut step = co.resume(None);
        while let Step::Request(op) = step {
            ops.push(op);
            let v = match op {
                IpiOp::FlushMaskPoll(_) => {
                    polls += 1;
                    (polls > empty_after) as u64
                }
                _ => 1,
            };
            step = co.resume(Some(v));
        }
        ops
    }

    fn icr_writes(ops: &[IpiOp]) -> usize {
        ops.iter()
            .filter(|o| matches!(o, IpiOp::WriteIcr(_)))
            .count()
    }

    #[test]
    fn the_pre_patch_send_writes_icr_per_cpu_and_the_patch_per_cluster() {
        // 20 logical CPUs of socket 1 (10 cores x 2 threads) span two clusters.
        let pre = sender_ops(IpiMode::ClusterPerCpu, 20, 0);
        let post = sender_ops(IpiMode::Cluster, 20, 0);
        assert_eq!((icr_writes(&pre), icr_writes(&post)), (20, 2));
        let count = |ops: &[IpiOp], op: IpiOp| ops.iter().filter(|&&o| o == op).count();
        // Both drivers mask interrupts around their writes.
        for ops in [&pre, &post] {
            assert_eq!(count(ops, IpiOp::LocalIrqSave), 1);
            assert_eq!(count(ops, IpiOp::LocalIrqRestore), 1);
        }
        // 2.6.38 hands the driver `f->flush_cpumask` itself: the pre-patch driver
        // walks it (one `cpumask_next` per target and one that finds none), each
        // read before the write it decides; the patch copies it once.
        assert_eq!(count(&pre, IpiOp::FlushMaskRead(0)), 21);
        assert_eq!(count(&post, IpiOp::FlushMaskRead(0)), 1);
        for (i, op) in pre.iter().enumerate() {
            if let IpiOp::WriteIcr(_) = op {
                assert_eq!(pre[i - 1], IpiOp::FlushMaskRead(0));
            }
        }
        let first_icr = post.iter().position(|o| matches!(o, IpiOp::WriteIcr(_)));
        let copy = post.iter().position(|&o| o == IpiOp::FlushMaskRead(0));
        assert!(copy < first_icr);
        for ops in [&pre, &post] {
            assert_eq!(ops[0], IpiOp::FlushStateLock(0));
            assert_eq!(ops.last(), Some(&IpiOp::FlushStateUnlock(0)));
            let sets = ops
                .iter()
                .filter(|o| matches!(o, IpiOp::FlushMaskSet(..)))
                .count();
            assert_eq!(sets, 20);
        }
    }

    #[test]
    fn the_sender_spins_until_the_mask_is_empty() {
        let ops = sender_ops(IpiMode::Cluster, 4, 3);
        let polls = ops
            .iter()
            .filter(|o| matches!(o, IpiOp::FlushMaskPoll(_)))
            .count();
        let relaxes = ops.iter().filter(|o| **o == IpiOp::CpuRelax).count();
        assert_eq!((polls, relaxes), (4, 3));
    }

    #[test]
    fn the_target_flushes_only_if_named_but_always_acks_and_clears() {
        for (named, flushes) in [(1, true), (0, false)] {
            let mut co: Coroutine<IpiOp, u64> =
                Coroutine::new(move |port| smp_invalidate_interrupt(IpiPort::new(port), 3));
            let mut ops = Vec::new();
            let mut step = co.resume(None);
            while let Step::Request(op) = step {
                ops.push(op);
                step = co.resume(Some(named));
            }
            assert_eq!(ops.contains(&IpiOp::FlushTlbLocal), flushes);
            assert_eq!(
                &ops[ops.len() - 2..],
                &[IpiOp::Eoi, IpiOp::FlushMaskClear(3)]
            );
        }
    }

    #[test]
    fn vectors_and_slots_round_trip() {
        for slot in 0..NUM_INVALIDATE_TLB_VECTORS {
            assert_eq!(slot_of_vector(invalidate_vector(slot)), Some(slot));
        }
        assert_eq!(slot_of_vector(Vector(0xef)), None);
        assert_eq!(slot_of_vector(Vector(0xf8)), None);
        assert_eq!(slot_of_sender(CpuId(9)), 1);
    }
}
