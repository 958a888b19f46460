//! NVMe, VMD and NIC scenarios: every MSI, I/O and packet accounted for, runs
//! reproducible from a seed, and device parameters rejected with clear errors.

use irqsim::devices::VmdMode;
use irqsim::experiments::{nic_napi, nvme_posted, vmd, ExperimentCtx};
use irqsim::{DeliveryMode, Scenario, System};
use proptest::prelude::*;

/// Runs `sc`, checks every device's own conservation laws in the running system, and
/// checks the report's I/O against the scenario: each job's reads are in the drive,
/// queued on its CPU, or refused, and every packet is dropped, in the ring or polled.
fn run_balanced(sc: &Scenario) -> irqsim::Report {
    let mut sys = System::new(sc).unwrap();
    sys.run_to_end();
    sys.check_device_conservation();
    let r = sys.report();
    assert!(r.msis.balanced, "seed {}: {:?}", r.seed, r.msis);
    for (i, d) in r.io.nvme.iter().enumerate() {
        let depth: u64 = sc
            .jobs
            .iter()
            .filter(|j| j.drive as usize == i)
            .map(|j| j.iodepth as u64)
            .sum();
        assert_eq!(
            d.outstanding + d.queued_in_jobs + d.rejected_queue_full,
            depth,
            "seed {}: {}: in the drive + queued + refused = the jobs' iodepth",
            r.seed,
            d.name
        );
        assert_eq!(
            d.submitted,
            d.reaped + d.outstanding,
            "seed {}: {}",
            r.seed,
            d.name
        );
        assert!(d.reaped <= d.completed && d.completed <= d.submitted);
    }
    for q in &r.io.nics {
        assert_eq!(
            q.rx_polled + q.packets_dropped + q.rx_in_ring,
            q.rx_packets,
            "seed {}",
            r.seed
        );
    }
    r
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn vmd_and_nvme_scenarios_balance(
        seed in any::<u64>(),
        drives in 1u32..6,
        bypass in any::<bool>(),
        merge in any::<bool>(),
    ) {
        let mode = if bypass { VmdMode::Bypass } else { VmdMode::Remap };
        let mut sc = vmd::scenario(drives, mode, merge, seed, &ExperimentCtx::new(seed));
        sc.duration_us = 200.0;
        let r = run_balanced(&sc);
        prop_assert!(r.io.nvme_total.reaped > 0);
    }

    #[test]
    fn nvme_posted_balances(seed in any::<u64>(), drives in 1u32..9, posted in any::<bool>()) {
        let mode = if posted { DeliveryMode::Posted } else { DeliveryMode::Remapped };
        let mut sc = nvme_posted::scenario(mode, drives, seed, &ExperimentCtx::new(seed));
        sc.duration_us = 200.0;
        run_balanced(&sc);
    }

    #[test]
    fn nic_scenarios_balance(seed in any::<u64>(), rate in 0.01f64..6.0, itr in 0u32..3) {
        let mut sc = nic_napi::scenario(nic_napi::ITR_US[itr as usize], rate, seed);
        sc.duration_us = 300.0;
        run_balanced(&sc);
    }
}

#[test]
fn io_runs_are_reproducible() {
    let ctx = ExperimentCtx::new(9);
    for mut sc in [
        vmd::scenario(6, VmdMode::Remap, true, 9, &ctx),
        nvme_posted::scenario(DeliveryMode::Posted, 4, 9, &ctx),
        nic_napi::scenario(10, 1.5, 9),
    ] {
        sc.duration_us = sc.duration_us.min(400.0);
        let a = System::run_scenario(&sc).unwrap().without_wall_clock();
        let b = System::run_scenario(&sc).unwrap().without_wall_clock();
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            serde_json::to_string(&b).unwrap(),
            "{}",
            sc.name
        );
    }
}

#[test]
fn vmd_remap_calls_empty_child_handlers_and_bypass_does_not() {
    let ctx = ExperimentCtx::new(1);
    let short = |mut sc: Scenario| {
        sc.duration_us = 300.0;
        System::run_scenario(&sc).unwrap()
    };
    let remap = short(vmd::scenario(4, VmdMode::Remap, false, 1, &ctx));
    let bypass = short(vmd::scenario(4, VmdMode::Bypass, false, 1, &ctx));
    for r in [&remap, &bypass] {
        assert!(r.msis.balanced);
    }
    assert!(remap.io.vmd[0].empty_child_handler_calls > 0);
    assert!(remap.io.vmd[0].vectors_used > 0);
    assert_eq!(bypass.io.vmd[0].child_handler_calls, 0);
    assert_eq!(bypass.io.vmd[0].vectors_used, 0);
}

#[test]
fn vmd_calls_the_admin_queues_handler_on_its_vector_too() {
    // One drive with one I/O queue behind a VMD with two vectors: the admin irq and
    // the I/O irq both land on vector 1 (vector 0 is kept for non-NVMe children), so
    // each VMD interrupt calls two child handlers, the admin one finding nothing.
    let sc = parse(
        "duration_us = 300\nmode = \"remapped\"\n[cpus]\ncount = 1\n\
         [[vmd]]\nvmd = { mode = \"remap\", vectors = 2 }\n\
         [[nvme]]\ndrive = { queues = 1 }\nvmd = 0\n\
         [[jobs]]\ncpu = 0\ndrive = 0\niodepth = 4\n",
    )
    .unwrap();
    let r = run_balanced(&sc);
    let v = &r.io.vmd[0];
    assert!(r.interrupts_taken > 0);
    assert_eq!(v.child_handler_calls, 2 * r.interrupts_taken);
    assert!(v.empty_child_handler_calls >= r.interrupts_taken);
}

#[test]
fn nic_overload_drops_packets_not_msis() {
    let r = System::run_scenario(&nic_napi::scenario(0, 5.0, 1)).unwrap();
    assert!(r.io.nics[0].packets_dropped > 0);
    assert!(r.msis.dropped.is_empty(), "{:?}", r.msis.dropped);
}

#[test]
fn throttling_bounds_the_interrupt_rate() {
    let r = System::run_scenario(&nic_napi::scenario(50, 0.5, 1)).unwrap();
    let max = r.sim_time_ns / 1e3 / 50.0 + 1.0;
    assert!(r.io.nics[0].interrupts as f64 <= max);
}

fn parse(text: &str) -> Result<Scenario, irqsim::ScenarioError> {
    let sc = Scenario::from_toml_str(text, "io.toml")?;
    sc.validate()?;
    Ok(sc)
}

#[test]
fn bad_device_parameters_name_the_field() {
    let base = "duration_us = 10\nmode = \"remapped\"\n[cpus]\ncount = 2\n";
    let cases = [
        (format!("{base}[[nvme]]\ndrive = {{ queues = 0 }}\n"), "nvme[0].drive.queues"),
        (format!("{base}[[nvme]]\ndrive = {{ queues = 2 }}\n[[jobs]]\ncpu = 5\ndrive = 0\niodepth = 4\n"), "jobs[0].cpu"),
        (format!("{base}[[nvme]]\ndrive = {{ queues = 2 }}\n[[jobs]]\ncpu = 0\ndrive = 3\niodepth = 4\n"), "jobs[0].drive"),
        (format!("{base}[[nvme]]\ndrive = {{ queues = 2 }}\n[[jobs]]\ncpu = 0\ndrive = 0\niodepth = 0\n"), "jobs[0].iodepth"),
        (format!("{base}[[nvme]]\nvmd = 2\n"), "nvme[0].vmd"),
        (format!("{base}[[vmd]]\nvmd = {{ vectors = 0 }}\n[[nvme]]\nvmd = 0\n"), "vmd[0].vmd.vectors"),
        (format!("{base}[[nics]]\nrx = {{ kind = \"poisson\", rate_per_s = 0.0 }}\n"), "nics[0].rx.rate_per_s"),
        (format!("{base}[[nics]]\nqueues = 2\naffinity = {{ kind = \"explicit\", cpus = [0] }}\nrx = {{ kind = \"poisson\", rate_per_s = 1e6 }}\n"), "nics[0].affinity.cpus"),
    ];
    for (text, field) in cases {
        let err = parse(&text).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(field), "expected {field} in: {msg}");
    }
}

#[test]
fn malformed_trace_file_names_the_file_and_line() {
    let dir = std::env::temp_dir().join(format!("irqsim-trace-csv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("arrivals.csv");
    std::fs::write(&path, "100\n200\nabc\n").unwrap();
    let text = format!(
        "duration_us = 10\nmode = \"remapped\"\n[[nics]]\nrx = {{ kind = \"trace\", path = \"{}\" }}\n",
        path.display()
    );
    let sc = Scenario::from_toml_str(&text, "io.toml").unwrap();
    let err = System::new(&sc)
        .err()
        .expect("a malformed trace is an error");
    let msg = err.to_string();
    assert!(msg.contains("arrivals.csv") && msg.contains('3'), "{msg}");
}

/// README: a trace's relative path resolves against the scenario file's folder, not the
/// current directory (the test runs from the package root, the files sit elsewhere).
#[test]
fn a_relative_trace_path_resolves_against_the_scenario_folder() {
    let dir = std::env::temp_dir().join(format!("irqsim-rel-trace-{}", std::process::id()));
    let sub = dir.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::write(sub.join("rx.csv"), "100\n200\n300\n").unwrap();
    let scenario = sub.join("x.toml");
    std::fs::write(
        &scenario,
        "duration_us = 10\nmode = \"remapped\"\n[[nics]]\nrx = { kind = \"trace\", path = \"rx.csv\" }\n",
    )
    .unwrap();
    assert!(!std::path::Path::new("rx.csv").exists());
    let sc = Scenario::load(&scenario).unwrap();
    let mut sys = System::new(&sc).expect("rx.csv is found next to x.toml");
    sys.run_to_end();
    let nic = &sys.report().io.nics[0];
    assert_eq!(nic.rx_packets, 3, "{nic:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A trace path that is not a CSV file (here an endless device) is refused at its
/// first line, and the message names the scenario field and the file.
#[test]
fn a_trace_of_dev_zero_is_refused_by_field_and_file() {
    let text = "duration_us = 10\nmode = \"remapped\"\n[[nics]]\nrx = { kind = \"trace\", path = \"/dev/zero\" }\n";
    let sc = Scenario::from_toml_str(text, "io.toml").unwrap();
    let msg = System::new(&sc).err().expect("refused").to_string();
    assert!(
        msg.contains("nics[0].rx.path") && msg.contains("/dev/zero:1"),
        "{msg}"
    );
}
