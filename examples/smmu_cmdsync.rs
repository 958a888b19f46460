//! CMD_SYNC on an Arm SMMUv3: completion by MSI write versus CONS polling, on an empty
//! queue and under TX unmaps from 1 and 16 CPUs.
//!
//! ```text
//!  CPU: reserve slots (CAS llq) ─▶ write TLBI + CMD_SYNC ─▶ PROD ─▶ SMMU consumes ─┬─ MSI write into the CMD_SYNC slot ─▶ CPU polls it
//!                                                                                 └─ CONS update (+SEV) ─▶ CPU polls CONS (WFE)
//! ```
//!
//! Run with `cargo run --release --example smmu_cmdsync`. Figures come from the model.

use irqsim::experiments::smmu_cmdsync;

fn main() {
    let out = smmu_cmdsync::run(1);
    print!("{}", out.to_table());
    let p50 = |msipoll: bool, workload: &str, cpus: u64| {
        out.rows
            .iter()
            .find(|r| r["msipoll"] == msipoll && r["workload"] == workload && r["cpus"] == cpus)
            .unwrap()["cmd_sync_ns_p50"]
            .as_f64()
            .unwrap()
    };
    // With one CPU, waiting on the MSI write is quicker than polling CONS with WFE:
    // the write lands in the waiter's cache, CONS is an uncached MMIO read.
    assert!(p50(true, "empty", 1) < p50(false, "empty", 1));
    // Sixteen CPUs contend for the command queue: far slower than one.
    assert!(p50(true, "unmap", 16) > 5.0 * p50(true, "unmap", 1));
}
