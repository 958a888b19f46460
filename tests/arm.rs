//! An Arm system end to end: NVMe, NIC and DSA MSIs through the SMMUv3 and the GICv3
//! ITS to LPIs, with every MSI accounted for and faults counted by reason.

use irqsim::{Scenario, System};
use proptest::prelude::*;

fn arm_scenario(seed: u64, duration_us: f64) -> Scenario {
    let mut sc =
        Scenario::from_toml_str(irqsim::scenarios::embedded("arm-nvme").unwrap(), "arm-nvme")
            .unwrap();
    sc.seed = seed;
    sc.duration_us = duration_us;
    sc
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn arm_runs_balance(seed in any::<u64>(), iodepth in 1u32..32, nic_rate in 1e4f64..3e6) {
        let mut sc = arm_scenario(seed, 300.0);
        for j in &mut sc.jobs {
            j.iodepth = iodepth;
        }
        sc.nics[0].rx = Some(irqsim::devices::ArrivalSpec::Poisson { rate_per_s: nic_rate });
        let r = System::run_scenario(&sc).unwrap();
        prop_assert!(r.msis.balanced, "seed {}: {:?}", seed, r.msis);
        for d in &r.io.nvme {
            prop_assert_eq!(d.submitted, d.reaped + d.outstanding);
        }
        prop_assert_eq!(r.notifications.sent, 0, "no posting on Arm");
    }
}

#[test]
fn arm_nvme_and_nic_complete_end_to_end() {
    let r = System::run_scenario(&arm_scenario(1, 1000.0)).unwrap();
    assert!(r.msis.balanced);
    assert!(r.io.nvme_total.reaped > 1000, "{:?}", r.io.nvme_total);
    assert!(r.io.nics[0].rx_polled > 0);
    assert!(r.interrupts_taken > 0);
    // The misprogrammed DSA queue writes an EventID the ITS never mapped.
    let lost = r
        .msis
        .dropped
        .get("its_event_not_mapped")
        .copied()
        .unwrap_or(0);
    assert!(lost > 0, "{:?}", r.msis.dropped);
    assert_eq!(r.iommu.posted, 0);
    assert_eq!(r.pid_line.iommu_updates, 0);
}

#[test]
fn arm_is_reproducible() {
    let a = System::run_scenario(&arm_scenario(5, 300.0))
        .unwrap()
        .without_wall_clock();
    let b = System::run_scenario(&arm_scenario(5, 300.0))
        .unwrap()
        .without_wall_clock();
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
}

#[test]
fn posted_mode_on_arm_is_a_clear_error() {
    let mut sc = arm_scenario(1, 100.0);
    sc.mode = irqsim::DeliveryMode::Posted;
    let err = sc.validate().unwrap_err();
    assert_eq!(err.field(), Some("mode"));
    assert!(err.to_string().contains("VT-d"), "{err}");
}

/// A DSA queue that writes an EventID its ITT never mapped: each of its MSIs is
/// dropped by the ITS with a reason, the well-programmed queue's are all handled,
/// and every CPU acknowledged as many LPIs as it EOI'd.
#[test]
fn misprogrammed_event_ids_are_dropped_by_the_its_and_balance() {
    use irqsim::devices::ArrivalProcess;
    use irqsim::system::scenario::Arch;
    use irqsim::system::{DeliveryMode, DeviceConfig};
    let good = DeviceConfig::dsa(
        0x30,
        0,
        ArrivalProcess::Fixed {
            interval_ns: 1500.0,
        },
    );
    let mut bad = DeviceConfig::dsa(
        0x31,
        1,
        ArrivalProcess::Fixed {
            interval_ns: 2000.0,
        },
    );
    bad.source_id = 0x11;
    bad.msi_handle = Some(9);
    let sc = Scenario::builder()
        .seed(4)
        .duration_us(400.0)
        .mode(DeliveryMode::Remapped)
        .arch(Arch::Arm)
        .cpus(2)
        .device(good)
        .device(bad)
        .build()
        .unwrap();
    let r = System::run_scenario(&sc).unwrap();
    assert!(r.msis.balanced, "{:?}", r.msis);
    let dropped = r
        .msis
        .dropped
        .get("its_event_not_mapped")
        .copied()
        .unwrap_or(0);
    assert!(dropped >= 190, "{:?}", r.msis);
    assert_eq!(r.msis.dropped.len(), 1, "{:?}", r.msis.dropped);
    assert_eq!(r.msis.generated, r.msis.handled + dropped + r.msis.pending);
    assert!(r.msis.handled >= 260);
    // An interrupt may be in service when the run ends.
    assert!(
        r.cpu
            .iter()
            .all(|c| c.eois <= c.interrupts_taken && c.eois + 1 >= c.interrupts_taken),
        "{:?}",
        r.cpu
    );
}
