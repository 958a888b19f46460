//! Every kind of load in one run: conservation and determinism when the parts meet.
//!
//! x86: NVMe with fio-like jobs, a DSA queue, TLB shootdowns to the socket and a UIO
//! flow on an IOAPIC pin, posted and remapped. Arm: NVMe, a NIC receiving, a
//! misprogrammed DSA queue, an SMMU unmap loop and a UDP sender unmapping through
//! the same command queue.

use irqsim::devices::{ArrivalProcess, NicConfig};
use irqsim::kernel::ioapic_driver::RteDriver;
use irqsim::report::Report;
use irqsim::system::io::NicDeviceConfig;
use irqsim::system::ioapic::IoapicPinConfig;
use irqsim::system::smmu_host::{SmmuLoadConfig, SmmuWorkload};
use irqsim::system::transmit::TransmitConfig;
use irqsim::system::{DeliveryMode, DeviceConfig};
use irqsim::{Scenario, System};
use proptest::prelude::*;

fn embedded(name: &str) -> Scenario {
    Scenario::from_toml_str(irqsim::scenarios::embedded(name).unwrap(), name).unwrap()
}

fn x86_mix(seed: u64, mode: DeliveryMode) -> Scenario {
    let mut sc = embedded("shootdown-nvme");
    sc.seed = seed;
    sc.duration_us = 300.0;
    sc.mode = mode;
    // The embedded 20,000 flushes/s expects 6 in 300 us and draws none for 1 seed in
    // 400 (e^-6); at 200,000/s a run without one is e^-60.
    sc.shootdowns[0].arrival = ArrivalProcess::Poisson {
        rate_per_s: 200_000.0,
    };
    sc.devices.push(DeviceConfig::dsa(
        0x40,
        4,
        ArrivalProcess::Poisson {
            rate_per_s: 300_000.0,
        },
    ));
    sc.ioapic_pins.push(IoapicPinConfig {
        name: "uio0".into(),
        pin: 3,
        cpu: 5,
        arrival: Some(ArrivalProcess::Poisson {
            rate_per_s: 200_000.0,
        }),
        pulse_ns: 100.0,
        driver: RteDriver::ReadModifyWrite,
        hold_ns: 2000.0,
        uio: true,
        trigger: Default::default(),
        chip: Default::default(),
        flow: Default::default(),
    });
    sc
}

fn arm_mix(seed: u64) -> Scenario {
    let mut sc = embedded("arm-nvme");
    sc.seed = seed;
    sc.duration_us = 300.0;
    sc.smmu_loads.push(SmmuLoadConfig {
        name: "unmap".into(),
        cpus: vec![1],
        workload: SmmuWorkload::Unmap { pages: 2 },
        think_ns: 500.0,
        think_jitter: 0.2,
        calls: None,
        warmup_us: 0.0,
        asid: 1,
    });
    sc.nics.push(NicDeviceConfig {
        name: "tx0".into(),
        queues: 1,
        affinity: irqsim::devices::Affinity::Explicit { cpus: vec![0] },
        rx: None,
        tx: None,
        nic: NicConfig::default(),
        napi: Default::default(),
        source_id: 0x0600,
        port: None,
        handler_cycles: None,
    });
    sc.transmit.push(TransmitConfig {
        name: "netperf".into(),
        nic: 1,
        threads: 1,
        cpus: Vec::new(),
        datagram_bytes: 8192,
        mtu: 1500,
        sndbuf_bytes: 65536,
        skb_overhead_bytes: 1100,
        datagrams: None,
        line_gbps: 25.0,
        warmup_us: 0.0,
        asid: 1,
    });
    sc
}

fn json(r: &Report) -> serde_json::Value {
    let mut v = serde_json::to_value(r).unwrap();
    v["wall_time_s"] = 0.into();
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    #[test]
    fn x86_loads_together_conserve_and_repeat(seed in any::<u64>(), posted in any::<bool>()) {
        let mode = if posted { DeliveryMode::Posted } else { DeliveryMode::Remapped };
        let sc = x86_mix(seed, mode);
        let r = System::run_scenario(&sc).unwrap();
        prop_assert!(r.msis.balanced, "seed {}: {:?}", seed, r.msis);
        for d in &r.io.nvme {
            prop_assert_eq!(d.submitted, d.reaped + d.outstanding);
        }
        let x = r.cross_calls.as_ref().unwrap();
        prop_assert!(x.shootdowns[0].completed > 0, "seed {}: {:?}", seed, x.shootdowns);
        let pin = &r.ioapic[0];
        prop_assert!(pin.asserted > 0 && pin.handler_runs > 0, "{:?}", pin);
        // The pin's edges are in the balance: lost ones as drops by reason.
        prop_assert!(r.msis.dropped.get("lost_while_masked").copied().unwrap_or(0) > 0, "{:?}", r.msis);
        prop_assert_eq!(json(&r), json(&System::run_scenario(&sc).unwrap()), "seed {}", seed);
    }

    #[test]
    fn arm_loads_together_conserve_and_repeat(seed in any::<u64>()) {
        let sc = arm_mix(seed);
        let r = System::run_scenario(&sc).unwrap();
        prop_assert!(r.msis.balanced, "seed {}: {:?}", seed, r.msis);
        for d in &r.io.nvme {
            prop_assert_eq!(d.submitted, d.reaped + d.outstanding);
        }
        let s = r.smmu.as_ref().unwrap();
        prop_assert!(s.loads[0].completed > 0, "{:?}", s.loads);
        let t = &r.transmit[0];
        prop_assert!(t.datagrams_freed > 0, "{:?}", t);
        // One CMD_SYNC per load call and per transmitted fragment unmapped, nothing else.
        prop_assert!(s.cmdq.sync >= s.loads[0].completed + t.datagrams_freed * t.fragments_per_datagram as u64);
        prop_assert_eq!(s.host.command_errors, 0);
        prop_assert_eq!(json(&r), json(&System::run_scenario(&sc).unwrap()), "seed {}", seed);
    }
}

/// The seed with which CI drew no flush at the embedded rate, kept as a fixed case.
#[test]
fn the_seed_that_drew_no_flush_now_flushes() {
    let r = System::run_scenario(&x86_mix(8352479339633172772, DeliveryMode::Remapped)).unwrap();
    let x = r.cross_calls.as_ref().unwrap();
    assert!(x.shootdowns[0].completed > 0, "{:?}", x.shootdowns);
    assert!(r.msis.balanced, "{:?}", r.msis);
}
