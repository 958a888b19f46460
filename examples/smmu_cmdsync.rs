//! CMD_SYNC on an Arm SMMUv3 (Kunpeng 920 profile): completion by MSI write versus
//! CONS polling, on an empty queue and under TX unmaps from 1 and 16 CPUs.
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
    let get = |msipoll: bool, workload: &str, cpus: u64, key: &str| {
        out.rows
            .iter()
            .find(|r| r["msipoll"] == msipoll && r["workload"] == workload && r["cpus"] == cpus)
            .unwrap()[key]
            .as_f64()
            .unwrap()
    };
    let p50 = |msipoll, workload, cpus| get(msipoll, workload, cpus, "cmd_sync_ns_p50");
    // On this part the SMMU's MSI write goes to DRAM, so the poller reloads the line
    // from memory after its copy is invalidated; SEV plus a CONS read across to the
    // I/O die is the shorter wait (the seed's 190 vs 280 ns, here model output).
    let window = |msipoll| get(msipoll, "empty", 1, "poll_window_ns");
    assert!(window(false) < window(true));
    // Sixteen CPUs contend for the command queue: far slower than one.
    assert!(p50(true, "unmap", 16) > 5.0 * p50(true, "unmap", 1));
}
