//! The software around SN (Suppress Notification), written as a coroutine like a
//! notification handler, so the explorer can check a user's own sequence.
//!
//! Another CPU than the handler's sets SN in the descriptor (the owner is going to
//! sleep or be descheduled; VT-d 5.2.3: while SN is set the IOMMU posts without
//! notifying, unless the IRTE has URG), later clears it, and must then look for what
//! was posted meanwhile: nothing else will notify for those posts. The built-in
//! correct sequence ([`SnRecheck`]) re-reads PIR after the clear and, if anything is
//! there, sets ON with a locked test-and-set and notifies if ON was clear;
//! [`SnNoRecheck`] leaves the recheck out (broken on purpose).
//!
//! [`SnPort`] has one method per operation, each one atomic step of the explorer:
//! `set_sn`/`clear_sn` (locked bit operations on the control word), `load_pir`, a
//! locked `test_and_set_on`, and `send_notification` (the IPI of the notification
//! vector to the handler's CPU). It is a port of its own, not [`super::CpuPort`],
//! because the handler's CPU never performs these: they belong to the other CPU.

use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};

use crate::engine::{Call, Port};

/// One operation of the SN-changing CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SnOp {
    /// `lock bts` of SN.
    SetSn,
    /// `lock btr` of SN.
    ClearSn,
    /// `READ_ONCE(pir[word])`.
    LoadPir {
        /// Which of the four PIR words.
        word: usize,
    },
    /// `lock bts` of ON; yields the old bit.
    TestAndSetOn,
    /// An IPI of the notification vector to the descriptor's CPU.
    SendNotification,
}

/// The SN-changing CPU's operations, each awaited once.
pub struct SnPort {
    port: Port<SnOp, u64>,
}

impl SnPort {
    pub(crate) fn new(port: Port<SnOp, u64>) -> Self {
        SnPort { port }
    }

    fn op(&self, op: SnOp) -> Call<SnOp, u64> {
        self.port.call(op)
    }

    /// Sets SN.
    pub async fn set_sn(&self) {
        self.op(SnOp::SetSn).await;
    }

    /// Clears SN.
    pub async fn clear_sn(&self) {
        self.op(SnOp::ClearSn).await;
    }

    /// Reads PIR word `word`.
    pub async fn load_pir(&self, word: usize) -> u64 {
        self.op(SnOp::LoadPir { word }).await
    }

    /// Sets ON; whether it was set before.
    pub async fn test_and_set_on(&self) -> bool {
        self.op(SnOp::TestAndSetOn).await != 0
    }

    /// Sends the notification vector to the descriptor's CPU.
    pub async fn send_notification(&self) {
        self.op(SnOp::SendNotification).await;
    }
}

/// The future an [`SnSoftware`] returns.
pub type SnFuture = Pin<Box<dyn Future<Output = ()>>>;

/// A sequence of SN changes by another CPU, as the explorer runs it. Like a
/// [`super::PirHandler`] it is replayed from its start and shared by the explorer's
/// threads, hence `Send + Sync`.
pub trait SnSoftware: Send + Sync {
    /// Stable name, as the CLI takes it and reports print it.
    fn name(&self) -> &str;
    /// True for sequences that are wrong on purpose.
    fn is_broken(&self) -> bool {
        false
    }
    /// The whole program: `toggles` SN changes, set first, then clear, set, ...
    /// (the explorer's `sn_toggles`), with whatever else the sequence does around them.
    fn run(&self, cpu: SnPort, toggles: u32) -> SnFuture;
}

/// After each clear: re-read PIR; if anything is pending, set ON and notify if ON was
/// clear (the protocol the explorer's built-in SN actor runs as one step).
pub struct SnRecheck;

/// SN changes with no recheck after a clear: posts suppressed while SN was set wait
/// for some later notification. Broken on purpose.
pub struct SnNoRecheck;

/// Names of the shipped sequences.
pub const SN_SOFTWARE_NAMES: [&str; 2] = ["recheck", "no-recheck"];

/// A shipped sequence by name.
pub fn sn_software_by_name(name: &str) -> Option<Box<dyn SnSoftware>> {
    match name {
        "recheck" => Some(Box::new(SnRecheck)),
        "no-recheck" => Some(Box::new(SnNoRecheck)),
        _ => None,
    }
}

async fn toggles(cpu: &SnPort, n: u32, recheck: bool) {
    for i in 0..n {
        if i % 2 == 0 {
            cpu.set_sn().await;
            continue;
        }
        cpu.clear_sn().await;
        if !recheck {
            continue;
        }
        let mut pending = false;
        for word in 0..4 {
            pending |= cpu.load_pir(word).await != 0;
        }
        if pending && !cpu.test_and_set_on().await {
            cpu.send_notification().await;
        }
    }
}

impl SnSoftware for SnRecheck {
    fn name(&self) -> &str {
        "recheck"
    }
    fn run(&self, cpu: SnPort, n: u32) -> SnFuture {
        Box::pin(async move { toggles(&cpu, n, true).await })
    }
}

impl SnSoftware for SnNoRecheck {
    fn name(&self) -> &str {
        "no-recheck"
    }
    fn is_broken(&self) -> bool {
        true
    }
    fn run(&self, cpu: SnPort, n: u32) -> SnFuture {
        Box::pin(async move { toggles(&cpu, n, false).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Coroutine, Step};

    fn ops_of(sw: &dyn SnSoftware, n: u32, pir: u64, on: bool) -> Vec<SnOp> {
        let mut co: Coroutine<SnOp, u64> = Coroutine::from_boxed(|p| sw.run(SnPort::new(p), n));
        let mut out = Vec::new();
        let mut step = co.resume(None);
        while let Step::Request(op) = step {
            out.push(op);
            let r = match op {
                SnOp::LoadPir { word: 0 } => pir,
                SnOp::TestAndSetOn => u64::from(on),
                _ => 0,
            };
            step = co.resume(Some(r));
        }
        out
    }

    #[test]
    fn the_recheck_notifies_only_for_pending_bits_with_on_clear() {
        use SnOp::*;
        let loads = [
            LoadPir { word: 0 },
            LoadPir { word: 1 },
            LoadPir { word: 2 },
            LoadPir { word: 3 },
        ];
        let mut want = vec![SetSn, ClearSn];
        want.extend(loads);
        want.extend([TestAndSetOn, SendNotification]);
        assert_eq!(ops_of(&SnRecheck, 2, 1 << 33, false), want);
        // ON already set: no second notification.
        want.pop();
        assert_eq!(ops_of(&SnRecheck, 2, 1 << 33, true), want);
        // Nothing pending: no ON, no notification.
        assert_eq!(ops_of(&SnRecheck, 2, 0, false)[2..], loads);
        assert_eq!(
            ops_of(&SnNoRecheck, 3, 1, false),
            vec![SetSn, ClearSn, SetSn]
        );
        assert!(SnNoRecheck.is_broken() && !SnRecheck.is_broken());
        for name in SN_SOFTWARE_NAMES {
            assert_eq!(sn_software_by_name(name).unwrap().name(), name);
        }
        assert!(sn_software_by_name("x").is_none());
    }
}
