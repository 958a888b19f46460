//! Masking and unmasking an IOAPIC pin: read-modify-write vs a shadowed low word, and
//! what masking an edge pin costs in lost interrupts.
//!
//! - `rte-cache`: the cycles of `mask_irq` and `unmask_irq` with each driver (an
//!   uncached window read is the expensive part; the shadow skips it);
//! - `ioapic-mask`: a device raising edges while a user-space-driver-like flow masks
//!   the pin, "handles", and unmasks; every edge that arrives while masked is lost
//!   and counted with its reason.
//!
//! ```text
//!  CPU ──IOREGSEL (posted)──▶ IOAPIC ◀──edge── device
//!      ──IOWIN read (uncached, ~700 ns)──▶
//!      ──IOWIN write (posted)──▶ RTE.mask
//! ```
//!
//! Run with `cargo run --release --example rte_cache`. Figures come from the model.

use irqsim::experiments::{ioapic_mask, rte_cache};
use irqsim::kernel::ioapic_driver::RteDriver;
use irqsim::system::System;

fn main() {
    let out = rte_cache::run(1);
    print!("{}", out.to_table());
    for chip in ["x86-io-apic", "ia64-iosapic"] {
        let get = |driver: &str, k: &str| {
            out.rows
                .iter()
                .find(|r| r["driver"] == driver && r["chip"] == chip)
                .unwrap()[k]
                .as_u64()
                .unwrap()
        };
        assert!(get("shadowed", "unmask_cycles") < get("read-modify-write", "unmask_cycles"));
        assert!(get("shadowed", "mask_cycles") < get("read-modify-write", "mask_cycles"));
    }

    let lost = ioapic_mask::run(1);
    print!("{}", lost.to_table());
    for r in &lost.rows {
        assert_eq!(r["balanced"], true, "{r}");
    }
    // The same flow as a scenario of your own: one System run, the pin's edges in the
    // MSI balance, lost ones dropped by reason.
    let scenario = ioapic_mask::scenario(1, 10.0, RteDriver::Shadowed);
    let r = System::run_scenario(&scenario).expect("a valid scenario");
    println!(
        "hold 10 us, shadowed: asserted {} = handled {} + dropped {:?} + pending {}",
        r.ioapic[0].asserted, r.msis.handled, r.msis.dropped, r.msis.pending
    );
    assert!(r.msis.dropped["lost_while_masked"] > 0 && r.msis.balanced);
    // The same with the lazy disable: nothing lost, the edges replayed.
    for row in lost.rows.iter().filter(|r| r["flow"] == "lazy-disable") {
        assert_eq!(row["lost_while_masked"], 0, "{row}");
    }
}
