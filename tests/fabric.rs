//! The I/O fabric of DESIGN.md 4.7: ordered root-port streams, the shared delivery
//! path, remapping units chosen by position, and MSIs pending behind ordered writes.

use irqsim::{Scenario, System};

/// One NVMe drive with 4 jobs x 64 reads, on port `port`, in `mode`, with the delivery
/// path's occupancy set to `occupancy_ns` and shared as `scope`.
fn drives(mode: &str, ports: &[u32], occupancy_ns: f64, scope: &str) -> Scenario {
    let mut text = format!(
        "duration_us = 400\nmode = \"{mode}\"\nseed = 5\n\
         [cpus]\ncount = {}\n[iommu]\nirte_entries = 1024\nunits = 4\n\
         [pcie]\nports_per_stack = 4\nstacks_per_socket = 4\n\
         [costs.fabric]\nmessage_occupancy_ns = {occupancy_ns}\ndelivery_shared_by = \"{scope}\"\n\
         [costs.nvme]\niops_ceiling = 5e6\nlatency_mean_ns = 10000\n",
        4 * ports.len()
    );
    for (d, p) in ports.iter().enumerate() {
        text += &format!("[[nvme]]\nname = \"nvme{d}\"\ndrive = {{ queues = 4 }}\nport = {p}\n");
        for j in 0..4 {
            text += &format!("[[jobs]]\ncpu = {}\ndrive = {d}\niodepth = 64\n", 4 * d + j);
        }
    }
    let sc = Scenario::from_toml_str(&text, "fabric.toml").unwrap();
    sc.validate().unwrap();
    sc
}

#[test]
fn a_remapped_msi_holds_its_port_so_a_slow_delivery_path_slows_the_io() {
    // 2 us per message: the drive can complete at most one I/O per 2 us through its
    // port, far below its ceiling; posted MSIs retire at the descriptor update.
    let slow = System::run_scenario(&drives("remapped", &[0], 2000.0, "socket")).unwrap();
    let iops = slow.io.nvme_total.iops;
    assert!(iops <= 0.51e6 && iops > 0.4e6, "remapped iops {iops}");
    let port = &slow.fabric.ports[0];
    assert!(
        port.stalled_behind_msi_ns > 0.5 * slow.sim_time_ns,
        "{port:?}"
    );
    assert!(slow.fabric.delivery[0].busy_frac > 0.9);
    let posted = System::run_scenario(&drives("posted", &[0], 2000.0, "socket")).unwrap();
    assert!(
        posted.io.nvme_total.iops > 2.0 * iops,
        "posted {} vs remapped {iops}",
        posted.io.nvme_total.iops
    );
    for r in [&slow, &posted] {
        assert!(r.msis.balanced);
    }
}

#[test]
fn the_delivery_path_is_shared_as_the_profile_says() {
    // Two drives on two stacks (ports 0 and 4): one socket path, or one per stack.
    let socket = System::run_scenario(&drives("remapped", &[0, 4], 1000.0, "socket")).unwrap();
    let stack = System::run_scenario(&drives("remapped", &[0, 4], 1000.0, "stack")).unwrap();
    assert_eq!(socket.fabric.delivery.len(), 1);
    assert_eq!(stack.fabric.delivery.len(), 2);
    let (a, b) = (socket.io.nvme_total.iops, stack.io.nvme_total.iops);
    assert!(b > 1.7 * a, "per stack {b} vs per socket {a}");
    // Each stack has its own remapping unit, whatever CPU the MSIs target.
    let units: Vec<u16> = stack.fabric.ports.iter().map(|p| p.unit).collect();
    assert_eq!(units, [0, 1]);
}

#[test]
fn msis_behind_ordered_writes_are_pending_in_their_port() {
    let sc = drives("remapped", &[0], 2000.0, "socket");
    let mut sys = System::new(&sc).unwrap();
    sys.run_for(sim_core::Duration::from_us(100));
    let r = sys.report();
    assert!(r.msis.pending_where.port > 0, "{:?}", r.msis.pending_where);
    assert!(r.msis.balanced);
    assert!(r.fabric.ports[0].queued > 0);
}

#[test]
fn without_merging_a_full_vmd_holds_its_children_and_merging_frees_them() {
    use irqsim::devices::VmdMode;
    use irqsim::experiments::{vmd, ExperimentCtx};
    let ctx = ExperimentCtx::new(2);
    let run = |mode, merge| {
        let mut sc = vmd::scenario(12, mode, merge, 2, &ctx);
        sc.duration_us = 600.0;
        System::run_scenario(&sc).unwrap()
    };
    let (bypass, plain, merging) = (
        run(VmdMode::Bypass, false),
        run(VmdMode::Remap, false),
        run(VmdMode::Remap, true),
    );
    let iops = |r: &irqsim::Report| r.io.nvme_total.iops;
    // Without merging VMD writes as many MSIs as its children through the same path.
    assert!((iops(&plain) / iops(&bypass) - 1.0).abs() < 0.1);
    assert!(iops(&merging) > 1.5 * iops(&bypass));
    let merged: u64 = merging.io.vmd.iter().map(|v| v.merged_child_msis).sum();
    assert!(merged > 0);
    assert_eq!(
        plain
            .io
            .vmd
            .iter()
            .map(|v| v.merged_child_msis)
            .sum::<u64>(),
        0
    );
    for r in [&bypass, &plain, &merging] {
        assert!(r.msis.balanced, "{:?}", r.msis);
    }
}
