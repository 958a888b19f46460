//! Your own posted-MSI handler, explored through the library without changing irqsim.
//!
//! - Two handlers written here against the public `PirHandler` trait and `CpuPort`:
//!   `dispatch-then-clear`, which dispatches from its plain loads and then zeroes each
//!   word (a post landing between the load and the zeroing is wiped out), and
//!   `drain-until-empty`, which exchanges words until PIR stays empty, clears ON and
//!   drains again.
//! - The exhaustive explorer runs each against the IOMMU, an SN-changing CPU, an urgent
//!   device and the APIC, with the default bounds.
//! - The broken one's shortest counterexample is printed; the example asserts both
//!   verdicts, so it is also a test (`cargo run --release --example
//!   explore_custom_handler`).
//!
//! ```text
//!   iommu / iommu-urg ──post──▶ PID (PIR, ON, SN) ◀──load/xchg/clear ON── your handler
//!   sn-cpu ──set/clear SN──▶        │ ON 0->1: notification ──▶ apic ──entry──▶
//! ```

use irqsim::explore::{explore, ExploreConfig, Invariant};
use irqsim::kernel::posted_msi::dispatch_pending;
use irqsim::kernel::{CpuPort, HandlerFuture, PirHandler};

/// Dispatches what the plain loads saw, then zeroes each non-empty word with an
/// exchange whose result it ignores. Anything posted between a word's load and its
/// exchange is thrown away. Otherwise it has mainline's shape: up to two rounds, clear
/// ON, one more round, EOI.
struct DispatchThenClear;

/// One round; whether it found anything.
async fn dispatch_then_clear(cpu: &CpuPort) -> bool {
    let mut seen = [0u64; 4];
    for (word, slot) in seen.iter_mut().enumerate() {
        *slot = cpu.load_pir(word).await;
    }
    dispatch_pending(cpu, seen).await;
    for (word, bits) in seen.iter().enumerate() {
        if *bits != 0 {
            cpu.xchg_pir(word, 0).await; // the bug: what it returns is dropped
        }
    }
    seen != [0; 4]
}

impl PirHandler for DispatchThenClear {
    fn name(&self) -> &str {
        "dispatch-then-clear"
    }

    fn run(&self, cpu: CpuPort) -> HandlerFuture {
        Box::pin(async move {
            for _ in 0..2 {
                if !dispatch_then_clear(&cpu).await {
                    break;
                }
            }
            cpu.clear_on().await;
            dispatch_then_clear(&cpu).await;
            cpu.eoi().await;
        })
    }
}

/// Exchanges every word and dispatches what the exchanges returned, until a round
/// finds nothing; clears ON; drains again; EOI.
struct DrainUntilEmpty;

async fn drain(cpu: &CpuPort) {
    loop {
        let mut got = [0u64; 4];
        for (word, slot) in got.iter_mut().enumerate() {
            *slot = cpu.xchg_pir(word, 0).await;
        }
        if got == [0; 4] {
            return;
        }
        dispatch_pending(cpu, got).await;
    }
}

impl PirHandler for DrainUntilEmpty {
    fn name(&self) -> &str {
        "drain-until-empty"
    }

    fn run(&self, cpu: CpuPort) -> HandlerFuture {
        Box::pin(async move {
            drain(&cpu).await;
            cpu.clear_on().await;
            drain(&cpu).await;
            cpu.eoi().await;
        })
    }
}

fn main() {
    let config = ExploreConfig::default();

    let good = explore(&DrainUntilEmpty, &config);
    print!("{good}");
    assert!(good.passed());

    let bad = explore(&DispatchThenClear, &config);
    print!("{bad}");
    let c = bad
        .counterexample()
        .expect("dispatch-then-clear loses a post");
    assert_eq!(c.invariant, Invariant::NothingLost);
}
