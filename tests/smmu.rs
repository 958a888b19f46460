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
