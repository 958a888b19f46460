//! Flow control at saturated root ports: held-back MSIs stay counted, and a device
//! whose source waits for a port credit costs no event per held-back completion.

mod common;

use irqsim::System;
use sim_core::Duration;

fn report_json(r: &irqsim::Report) -> String {
    serde_json::to_string(&r.without_wall_clock()).unwrap()
}

#[test]
fn a_saturated_device_costs_events_per_msi_written_not_per_msi_offered() {
    // One CPU handles a few M/s; 60 M/s offered keeps every source waiting for credit.
    let sc = common::dsa_scenario("posted", 60e6, 4, 300.0, 21);
    let r = System::run_scenario(&sc).unwrap();
    let completions: u64 = r.devices.iter().map(|d| d.descriptors_completed).sum();
    let written: u64 = r.sources.iter().map(|s| s.msis_written).sum();
    let backlog: u64 = r.sources.iter().map(|s| s.msi_backlog).sum();
    assert!(
        backlog > written,
        "not saturated: backlog {backlog}, written {written}"
    );
    // An event per completion would alone cost `completions` events, on top of the
    // several events each written MSI takes through the port, the IOMMU and the CPU.
    assert!(
        r.events < completions,
        "seed 21: {} events for {completions} completions ({written} MSIs written)",
        r.events
    );
    for (d, s) in r.devices.iter().zip(&r.sources) {
        assert_eq!(
            d.msis_raised,
            s.msis_written + s.msi_backlog,
            "seed 21: {} raised != written + held back",
            d.name
        );
    }
    assert!(r.msis.balanced);
    // The balance shows what the devices still hold, so offered = generated + held back.
    assert_eq!(r.msis.held_back_in_devices, backlog);
    assert_eq!(r.msis.generated, written);
    let raised: u64 = r.devices.iter().map(|d| d.msis_raised).sum();
    assert_eq!(r.msis.generated + r.msis.held_back_in_devices, raised);
    let table = irqsim::report::table::render_report(&r);
    assert!(
        table.contains(&format!(
            "held back in devices by flow control, not yet generated: {backlog}  (offered {raised})"
        )),
        "{table}"
    );
}

#[test]
fn held_back_completions_count_the_same_however_the_run_is_cut() {
    for (rate, seed) in [(40e6, 3), (9e6, 4)] {
        let sc = common::dsa_scenario("posted", rate, 4, 200.0, seed);
        let whole = System::run_scenario(&sc).unwrap();

        let mut chunked = System::new(&sc).unwrap();
        for _ in 0..200 {
            chunked.run_for(Duration::from_us(1));
        }

        // Event by event (run_until checks its predicate after each one), then the clock
        // moves to the end of the window with nothing left to handle.
        let mut stepped = System::new(&sc).unwrap();
        let end = sim_core::SimTime::ZERO + Duration::from_us(200);
        assert!(!stepped.run_until(end, |_| false));
        stepped.run_for(end.since(stepped.now()));

        for (how, r) in [("chunked", chunked.report()), ("stepped", stepped.report())] {
            assert_eq!(
                report_json(&whole),
                report_json(&r),
                "seed {seed} at {rate}/s: a {how} run differs from one run_for"
            );
        }
        assert!(
            whole.sources.iter().any(|s| s.msi_stalls > 0),
            "no flow control at {rate}/s"
        );
    }
}

#[test]
fn a_report_between_events_counts_what_is_held_back_so_far() {
    let sc = common::dsa_scenario("posted", 40e6, 4, 200.0, 8);
    // The ports' 4 x 64 credits last until about 10 us at 40 M/s.
    for until_us in [12, 17, 64, 150] {
        // Event by event up to a point, with no catch-up of parked devices: the report
        // must count their completions on its own.
        let mut stepped = System::new(&sc).unwrap();
        let limit = sim_core::SimTime::ZERO + Duration::from_us(until_us);
        assert!(!stepped.run_until(limit, |_| false));
        let at = stepped.now();
        let mut windowed = System::new(&sc).unwrap();
        windowed.run_for(at.since(sim_core::SimTime::ZERO));
        let (a, b) = (stepped.report(), windowed.report());
        assert_eq!(report_json(&a), report_json(&b), "seed 8, at {at}");
        for (d, s) in a.devices.iter().zip(&a.sources) {
            assert_eq!(
                d.msis_raised,
                s.msis_written + s.msi_backlog,
                "seed 8, at {at}"
            );
        }
        assert!(
            a.sources.iter().any(|s| s.msi_backlog > 0),
            "nothing held at {at}"
        );
    }
}

/// The run table shows the posted-only lines (variant, notifications, descriptor line)
/// only for posted runs.
#[test]
fn remapped_runs_print_no_posted_only_lines() {
    for (mode, posted) in [("posted", true), ("remapped", false)] {
        let sc = common::dsa_scenario(mode, 1e6, 1, 50.0, 2);
        let table = irqsim::report::table::render_report(&System::run_scenario(&sc).unwrap());
        for line in ["variant ", "notifications: sent", "PID line:"] {
            assert_eq!(table.contains(line), posted, "{mode}: {line:?} in\n{table}");
        }
        assert!(table.contains("interrupts taken"), "{table}");
    }
}
