//! The simplest driver of a handler: a plain PIR and ON bit, no concurrent hardware,
//! no time. Useful to check what a variant does step by step (its operation sequence,
//! what it dispatches, what it leaves behind) before exploring it under races.

use super::ops::{CpuOp, CpuPort};
use super::posted_msi::PirHandler;
use crate::engine::{Coroutine, Step};

/// Everything one uncontended run of a handler did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UncontendedRun {
    /// Every operation, in order.
    pub ops: Vec<CpuOp>,
    /// Vectors whose handlers ran, in order.
    pub handled: Vec<u8>,
    /// PIR after the run.
    pub pir: [u64; 4],
    /// ON after the run.
    pub on: bool,
}

/// Runs `handler` once against `pir` with ON set, as the notification found it.
pub fn run_uncontended(handler: &dyn PirHandler, mut pir: [u64; 4]) -> UncontendedRun {
    let mut co = Coroutine::from_boxed(|port| handler.run(CpuPort::new(port)));
    let (mut ops, mut handled) = (Vec::new(), Vec::new());
    let mut on = true;
    let mut resp = None;
    while let Step::Request(op) = co.resume(resp.take()) {
        ops.push(op);
        resp = Some(match op {
            CpuOp::LoadPir { word } => pir[word],
            CpuOp::XchgPir { word, value } => std::mem::replace(&mut pir[word], value),
            CpuOp::ClearOn => {
                on = false;
                0
            }
            CpuOp::TestAndClearOn => std::mem::replace(&mut on, false) as u64,
            CpuOp::HandleVector(v) => {
                handled.push(v.0);
                0
            }
            CpuOp::StorePir { word, value } => {
                pir[word] = value;
                0
            }
            CpuOp::StoreClearOn => {
                on = false;
                0
            }
            CpuOp::Eoi | CpuOp::Mfence => 0,
        });
    }
    UncontendedRun {
        ops,
        handled,
        pir,
        on,
    }
}
