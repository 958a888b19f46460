//! The host side of Linux 2.6.38's TLB shootdown ([`crate::kernel::tlb_2011`]): the
//! per-slot `flush_state` line, one [`DataLine`] shared by the sender (lock, fill,
//! mask set, polling) and every target (the test of its bit, the locked clear).
//!
//! | operation | CPU time | effect |
//! |---|---|---|
//! | `FlushStateLock(s)` | locked exchange on the line | acquired unless held (yields 0 then) |
//! | `FlushStateFill(s)` | two stores (mm, va) | none |
//! | `FlushMaskSet(s, t)` | a store to the mask word | t's bit set at issue |
//! | `FlushMaskPoll(s)` | a load of the line | yields 1 if the mask is empty |
//! | `FlushMaskRead(s)` | a load of the line | none (the x2APIC driver's walk of the mask) |
//! | `FlushStateUnlock(s)` | two stores (mm, lock) | released at issue |
//! | `FlushMaskTest(s)` | a load of the line | yields 1 if this CPU's bit is set |
//! | `FlushTlbLocal` | `ipi.func_cycles` | none |
//! | `FlushMaskClear(s)` | `LOCK BTR` on the line | the bit clears when it completes |
//!
//! The lines are homed on socket 0: `flush_state` is a static array of the kernel
//! image, which lives on the boot node.

use pid_model::{DataLine, LineOp, Words};
use sim_core::{CpuId, SimTime};

use super::cpu::Algorithm;
use super::xcall::{line_access, Issued};
use super::System;
use crate::engine::Coroutine;
use crate::kernel::ipi::{CpuMask, IpiOp, IpiPort};
use crate::kernel::tlb_2011::{slot_of_vector, smp_invalidate_interrupt};

/// CPUs whose bits fit the mask words of one line (words 3..8 of eight).
pub const MAX_MASK_CPUS: u32 = 5 * 64;
/// Word 0: the lock; 1: `flush_mm`; 2: `flush_va`; 3..8: `flush_cpumask`.
const LOCK_WORD: usize = 0;
const MM_WORD: usize = 1;
const VA_WORD: usize = 2;
const MASK_WORD: usize = 3;

/// One slot's `flush_state`.
pub struct FlushState {
    /// The line everyone shares (its words price the accesses; the state is below).
    pub line: DataLine,
    /// `flush_cpumask`: targets that have not cleared their bit.
    mask: CpuMask,
    locked: bool,
}

fn mask_bit(cpu: u32) -> u32 {
    MASK_WORD as u32 * 64 + cpu
}

impl System {
    fn flush_state(&mut self, slot: u8) -> &mut FlushState {
        let n = self.cpus.len() as u32;
        self.xcall
            .flush_states
            .entry(slot)
            .or_insert_with(|| FlushState {
                line: DataLine::with_data(Words::default(), 0),
                mask: CpuMask::new(n),
                locked: false,
            })
    }

    /// Issues one of the `flush_state` operations of `cpu` at `now`.
    pub(super) fn issue_flush_op(&mut self, now: SimTime, cpu: u32, op: IpiOp) -> Issued {
        let agent = self.cpus[cpu as usize].agent;
        let prices = self.line_prices.clone();
        let access = |f: &mut FlushState, op: LineOp, at: SimTime| {
            line_access(&mut f.line, agent, op, at, &prices)
        };
        match op {
            IpiOp::FlushStateLock(slot) => {
                let f = self.flush_state(slot);
                let d = access(
                    f,
                    LineOp::Xchg {
                        word: LOCK_WORD,
                        value: 1,
                    },
                    now,
                );
                let acquired = !f.locked;
                f.locked = true;
                Issued::Busy(d, acquired as u64)
            }
            IpiOp::FlushStateFill(slot) => {
                let f = self.flush_state(slot);
                let mut d = access(
                    f,
                    LineOp::Store {
                        word: MM_WORD,
                        value: 1,
                    },
                    now,
                );
                d += access(
                    f,
                    LineOp::Store {
                        word: VA_WORD,
                        value: 1,
                    },
                    now + d,
                );
                Issued::Busy(d, 0)
            }
            IpiOp::FlushMaskSet(slot, target) => {
                let f = self.flush_state(slot);
                f.mask.set(target);
                let word = MASK_WORD + (target.0 / 64) as usize;
                let d = access(f, LineOp::Store { word, value: 1 }, now);
                Issued::Busy(d, 0)
            }
            IpiOp::FlushMaskPoll(slot) => {
                let f = self.flush_state(slot);
                let d = access(f, LineOp::Load { word: MASK_WORD }, now);
                Issued::Busy(d, f.mask.is_empty() as u64)
            }
            IpiOp::FlushMaskRead(slot) => {
                let f = self.flush_state(slot);
                let d = access(f, LineOp::Load { word: MASK_WORD }, now);
                Issued::Busy(d, 0)
            }
            IpiOp::FlushStateUnlock(slot) => {
                let f = self.flush_state(slot);
                let mut d = access(
                    f,
                    LineOp::Store {
                        word: MM_WORD,
                        value: 0,
                    },
                    now,
                );
                d += access(
                    f,
                    LineOp::Store {
                        word: LOCK_WORD,
                        value: 0,
                    },
                    now + d,
                );
                f.locked = false;
                Issued::Busy(d, 0)
            }
            IpiOp::FlushMaskTest(slot) => {
                let f = self.flush_state(slot);
                let d = access(f, LineOp::Load { word: MASK_WORD }, now);
                Issued::Busy(d, f.mask.test(CpuId(cpu)) as u64)
            }
            IpiOp::FlushTlbLocal => {
                self.xcall.ipis.funcs_run += 1;
                self.cpus[cpu as usize].funcs_run += 1;
                Issued::Busy(self.freq.cycles_f64(self.costs.ipi.func_cycles), 0)
            }
            IpiOp::FlushMaskClear(slot) => {
                let f = self.flush_state(slot);
                let bit = mask_bit(cpu);
                let d = access(f, LineOp::LockedBitClear { bit }, now);
                Issued::Busy(d, 0)
            }
            other => unreachable!("{other:?} is not a flush_state operation"),
        }
    }

    /// A target's locked clear completes: its bit is gone from the mask the sender
    /// polls.
    pub(super) fn complete_flush_clear(&mut self, cpu: u32, slot: u8) {
        self.flush_state(slot).mask.clear(CpuId(cpu));
    }

    /// The handler of a 2.6.38 invalidate vector, if `vector` is one and a load runs
    /// that kernel.
    pub(super) fn invalidate_handler(&mut self, vector: sim_core::Vector) -> Option<Algorithm> {
        if self.arm.is_some() || !self.xcall.runs_2011() {
            return None;
        }
        let slot = slot_of_vector(vector)?;
        self.xcall.ipis.handlers_run += 1;
        Some(Algorithm::CrossCall(Coroutine::new(move |port| {
            smp_invalidate_interrupt(IpiPort::new(port), slot)
        })))
    }
}
