//! The smmu-cmdsync experiment's rows.

use irqsim::experiments::smmu_cmdsync;

#[test]
fn smmu_cmdsync_rows_have_every_key_and_both_settings() {
    let out = smmu_cmdsync::run(2);
    assert_eq!(out.experiment, "smmu-cmdsync");
    for key in [
        "msipoll",
        "cpus",
        "cmd_sync_ns_p50",
        "cmd_sync_ns_p99",
        "unmaps_per_sec",
        "tx_gbps",
    ] {
        assert!(
            out.rows.iter().all(|r| r.get(key).is_some()),
            "missing {key}"
        );
    }
    for msipoll in [true, false] {
        for cpus in [1u64, 16] {
            let row = out
                .rows
                .iter()
                .find(|r| r["msipoll"] == msipoll && r["cpus"] == cpus && r["workload"] == "unmap")
                .unwrap();
            let p50 = row["cmd_sync_ns_p50"].as_f64().unwrap();
            let p99 = row["cmd_sync_ns_p99"].as_f64().unwrap();
            assert!(p50 > 0.0 && p99 >= p50, "{row}");
            assert!(row["unmaps_per_sec"].as_f64().unwrap() > 0.0);
            assert!(row["tx_gbps"].as_f64().unwrap() > 0.0);
        }
    }
    // msipoll=false falls back to CONS polling.
    assert!(out
        .rows
        .iter()
        .filter(|r| r["msipoll"] == false)
        .all(|r| r["poll_mode"] != "msi"));
}

use irqsim::kernel::smmu::{run_cmdsync_bench, BenchWorkload, CmdSyncBenchConfig};

fn empty_queue(msipoll: bool) -> CmdSyncBenchConfig {
    let mut c = CmdSyncBenchConfig {
        cpus: 1,
        workload: BenchWorkload::SyncOnly,
        duration_us: 200.0,
        warmup_us: 10.0,
        ..CmdSyncBenchConfig::default()
    };
    c.smmu.msi_polling_enabled = msipoll;
    c
}

/// The two ways Linux waits for a CMD_SYNC differ in one place each: with MSI
/// polling the SMMU writes the sync's own slot and the CPU never reads CONS; without
/// it the SMMU writes nothing and the CPU reads CONS after every wake. So the MMIO
/// read cost moves only the CONS wait, and the MSI write cost moves only the MSI
/// wait, each by one read or one write per sync on an empty queue.
#[test]
fn msi_and_cons_polling_each_pay_only_their_own_signal() {
    const STEP_NS: f64 = 200.0;
    let base_msi = run_cmdsync_bench(&empty_queue(true)).unwrap();
    let base_cons = run_cmdsync_bench(&empty_queue(false)).unwrap();
    assert_eq!(base_msi.poll_mode.label(), "msi");
    assert_ne!(base_cons.poll_mode.label(), "msi");
    assert_eq!(base_msi.host.cons_reads, 0);
    assert_eq!(base_msi.cmdq.msi_writes, base_msi.cmdq.sync);
    assert_eq!(base_cons.cmdq.msi_writes, 0);
    assert!(
        base_cons.host.cons_reads >= base_cons.cmdq.sync,
        "{:?}",
        base_cons.host
    );

    let slower_read = |msipoll| {
        let mut c = empty_queue(msipoll);
        c.cpu_costs.mmio_read_ns += STEP_NS;
        run_cmdsync_bench(&c).unwrap()
    };
    let slower_msi = |msipoll| {
        let mut c = empty_queue(msipoll);
        c.smmu.cmdq.costs.msi_write_ns += STEP_NS;
        run_cmdsync_bench(&c).unwrap()
    };
    assert_eq!(slower_read(true).p50_ns(), base_msi.p50_ns());
    assert_eq!(slower_msi(false).p50_ns(), base_cons.p50_ns());
    let cons_shift = slower_read(false).p50_ns() - base_cons.p50_ns();
    let msi_shift = slower_msi(true).p50_ns() - base_msi.p50_ns();
    // The CONS read is sampled halfway, so a read is worth between half and all of
    // its round trip to the wait; the MSI write is on the path in full.
    assert!(
        (STEP_NS / 2.0 - 1.0..=STEP_NS + 1.0).contains(&cons_shift),
        "CONS wait moved {cons_shift} ns for {STEP_NS} ns more per read"
    );
    assert!(
        (msi_shift - STEP_NS).abs() < 1.0,
        "MSI wait moved {msi_shift} ns for {STEP_NS} ns more per write"
    );
}

/// Sixteen CPUs unmapping at once: with CONS polling every waiter reads CONS, so
/// there are more reads than syncs; with MSI polling, none. Both finish every
/// iteration they start before the window closes, less those still in flight.
#[test]
fn sixteen_waiters_read_cons_only_without_msi_polling() {
    for msipoll in [true, false] {
        let mut c = empty_queue(msipoll);
        c.cpus = 16;
        c.workload = BenchWorkload::Unmap { pages: 1 };
        let r = run_cmdsync_bench(&c).unwrap();
        if msipoll {
            assert_eq!(r.host.cons_reads, 0, "{:?}", r.host);
            assert_eq!(r.cmdq.msi_writes, r.cmdq.sync);
        } else {
            assert_eq!(r.cmdq.msi_writes, 0);
            assert!(r.host.cons_reads > r.cmdq.sync, "{:?} {:?}", r.host, r.cmdq);
        }
        assert!(
            r.host.iterations_started - r.host.iterations_done <= 16,
            "{:?}",
            r.host
        );
    }
}
