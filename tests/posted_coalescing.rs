//! Posted mode: one notification per MSI when MSIs are far apart, far fewer when the
//! CPU is saturated.

mod common;

use irqsim::System;

#[test]
fn low_rate_takes_one_notification_per_msi() {
    // 20 k MSIs/s: about 50 us between MSIs against a ~1 us handler.
    let sc = common::dsa_scenario("posted", 20e3, 4, 50_000.0, 3);
    let r = System::run_scenario(&sc).unwrap();
    assert!(r.msis.generated > 500);
    let per_msi = r.notifications.sent as f64 / r.msis.generated as f64;
    assert!(per_msi > 0.97, "notifications per MSI {per_msi}");
    assert_eq!(r.interrupts_taken, r.notifications.sent);
    assert!(r.msis.merged * 100 < r.msis.generated);
}

#[test]
fn past_saturation_takes_far_fewer_notifications_than_msis() {
    let sc = common::dsa_scenario("posted", 25e6, 4, 1000.0, 3);
    let r = System::run_scenario(&sc).unwrap();
    assert!(
        r.cpu[0].busy_frac > 0.95,
        "CPU should be saturated: {}",
        r.cpu[0].busy_frac
    );
    let per_msi = r.notifications.sent as f64 / r.msis.generated as f64;
    assert!(per_msi < 0.1, "notifications per MSI {per_msi}");
    assert!(r.notifications.suppressed > 10 * r.notifications.sent);
}

#[test]
fn remapped_mode_takes_one_interrupt_per_msi_at_low_rate_and_sends_no_notifications() {
    let sc = common::dsa_scenario("remapped", 20e3, 4, 50_000.0, 3);
    let r = System::run_scenario(&sc).unwrap();
    assert_eq!(r.notifications.sent, 0);
    assert_eq!(r.pid_line.iommu_updates, 0);
    let per_msi = r.interrupts_taken as f64 / r.msis.generated as f64;
    assert!(per_msi > 0.97, "interrupts per MSI {per_msi}");
}

#[test]
fn posted_mode_costs_less_cpu_per_msi_than_remapped_at_a_moderate_rate() {
    let p = System::run_scenario(&common::dsa_scenario("posted", 2e6, 4, 2000.0, 8)).unwrap();
    let m = System::run_scenario(&common::dsa_scenario("remapped", 2e6, 4, 2000.0, 8)).unwrap();
    let per = |r: &irqsim::Report| r.cpu[0].busy_ns / r.msis.handled as f64;
    assert!(
        per(&p) < per(&m),
        "posted {} ns/MSI vs remapped {} ns/MSI",
        per(&p),
        per(&m)
    );
}

#[test]
fn latency_counts_from_raise_to_handler_start() {
    // One MSI (at 1 ms), nothing else, on the generic profile. Its path, each step
    // from a cost table:
    let sc = irqsim::Scenario::from_toml_str(
        "duration_us = 1500\nmode = \"posted\"\n\
         [[devices]]\nkind = \"dsa\"\nvector = 0x21\n\
         arrival = { kind = \"fixed\", interval_ns = 1e6 }\n",
        "one-msi",
    )
    .unwrap();
    let r = System::run_scenario(&sc).unwrap();
    assert_eq!((r.msis.generated, r.msis.handled), (1, 1));
    let c = &sc.costs;
    let cycles = |n: f64| n / (c.cpu.freq_mhz as f64 / 1000.0);
    let expected = c.device.msi_write_ns          // the record and MSI fly to the port
        + c.pcie.ordered_write_ns                 // the record commits first
        + c.remap.translate_ns + c.remap.iec_miss_ns // first lookup of the IRTE
        + c.pid_line.iommu_post_occupancy_ns + c.pid_line.memory_ns // cold line
        + c.pid_line.iommu_post_latency_ns
        + c.fabric.message_occupancy_ns + c.fabric.message_latency_ns // notification
        + cycles(c.cpu.irq_entry_cycles)
        + cycles(c.pid_line.llc_hit_cycles)       // load PIR[0]: the IOMMU left it in LLC
        + 3.0 * cycles(c.pid_line.l1_hit_cycles)  // loads PIR[1..4]
        + cycles(c.pid_line.l1_hit_cycles + c.pid_line.locked_rmw_cycles); // xchg PIR[0]
    let lat = r.latency_ns.max;
    assert!(
        (lat - expected).abs() <= 1.0,
        "latency {lat} ns, cost tables give {expected} ns"
    );
}
