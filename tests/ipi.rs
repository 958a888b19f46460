//! Cross calls inside `System`: the right CPUs run the function, once each; ICR
//! writes per mode; distance shows in the latency; APIC faults are counted; a sender
//! spinning with interrupts enabled takes device interrupts; a target busy in a
//! handler delays the call.

use irqsim::apic_sim::{DeliveryMode as IcrDelivery, DestMode, Icr, Shorthand, TriggerMode};
use irqsim::devices::ArrivalProcess;
use irqsim::kernel::ipi::{IpiMode, ShootdownKernel};
use irqsim::report::Report;
use irqsim::sim_core::{CpuId, Vector};
use irqsim::system::xcall::ShootdownConfig;
use irqsim::system::{DeliveryMode, ScenarioError};
use irqsim::topology::{Topology, TopologySpec};
use irqsim::{Scenario, System};
use proptest::prelude::*;

/// One shootdown from `from` to `targets` at 1 us on an idle `spec` machine.
fn one_call(spec: TopologySpec, from: u32, targets: Vec<u32>, mode: IpiMode) -> Scenario {
    kernel_call(
        spec,
        from,
        targets,
        mode,
        ShootdownKernel::SmpCallFunctionMany,
    )
}

/// The same with the shootdown algorithm of `kernel`.
fn kernel_call(
    spec: TopologySpec,
    from: u32,
    targets: Vec<u32>,
    mode: IpiMode,
    kernel: ShootdownKernel,
) -> Scenario {
    Scenario::builder()
        .duration_us(2000.0)
        .mode(DeliveryMode::Remapped)
        .topology(spec)
        .shootdown(ShootdownConfig {
            name: "call".into(),
            from: vec![from],
            targets,
            target_socket: None,
            arrival: ArrivalProcess::Fixed {
                interval_ns: 1000.0,
            },
            ipi_mode: mode,
            kernel,
            calls: Some(1),
        })
        .into_unvalidated()
}

fn run(sc: &Scenario) -> (Report, System) {
    let mut sys = System::new(sc).unwrap();
    sys.run_to_end();
    (sys.report(), sys)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// For any machine and any target set, every target runs the function exactly
    /// once, no other CPU does, and the ICR writes are one per target (physical) or
    /// one per cluster spanned (cluster; one write when there is a single target).
    #[test]
    fn cross_call_reaches_exactly_the_targets(
        sockets in 1u32..3,
        cores in 1u32..24,
        threads in 1u32..3,
        sender_pick in any::<u32>(),
        bits in proptest::collection::vec(any::<bool>(), 96),
        mode_pick in 0usize..3,
        old_kernel in any::<bool>(),
    ) {
        let spec = TopologySpec::new(sockets, cores, threads);
        let topo = Topology::new(spec).unwrap();
        let n = topo.len() as u32;
        let sender = sender_pick % n;
        let targets: Vec<u32> = (0..n).filter(|&c| bits[c as usize] && c != sender).collect();
        prop_assume!(!targets.is_empty());
        let mode = [IpiMode::Physical, IpiMode::Cluster, IpiMode::ClusterPerCpu][mode_pick];
        let kernel = if old_kernel {
            ShootdownKernel::FlushTlbOthers2011
        } else {
            ShootdownKernel::SmpCallFunctionMany
        };
        let (report, sys) = run(&kernel_call(spec, sender, targets.clone(), mode, kernel));
        let x = report.cross_calls.as_ref().unwrap();
        prop_assert_eq!(x.shootdowns[0].completed, 1);
        prop_assert_eq!(x.ipis.funcs_run as usize, targets.len());
        for c in 0..n {
            let want = targets.contains(&c) as u64;
            prop_assert_eq!(report.cpu[c as usize].funcs_run, want, "cpu {}", c);
            prop_assert!(sys.apic(c).irr().is_empty() && sys.apic(c).isr().is_empty());
            prop_assert!(!sys.task_running(c));
        }
        let mut clusters: Vec<u32> = targets.iter().map(|&c| topo.cluster(CpuId(c))).collect();
        clusters.sort_unstable();
        clusters.dedup();
        let all_others = targets.len() as u32 == n - 1 && n > 2;
        // Today's call has a single-target IPI and the all-but-self shorthand; the
        // 2.6.38 shootdown always goes through the driver's mask send.
        let want_writes = match (targets.len(), mode) {
            (1, _) if !old_kernel => 1,
            _ if all_others && !old_kernel => 1,
            (t, IpiMode::Physical | IpiMode::ClusterPerCpu) => t as u64,
            (_, IpiMode::Cluster) => clusters.len() as u64,
        };
        prop_assert_eq!(x.shootdowns[0].icr_writes, want_writes);
        prop_assert_eq!(x.ipis.not_sent + x.ipis.rejected + x.ipis.general_protection, 0);
    }
}

fn call_ns(report: &Report) -> u64 {
    report.cross_calls.as_ref().unwrap().shootdowns[0]
        .sender_phases
        .calls_ps
}

#[test]
fn another_socket_is_farther_than_the_same_socket() {
    let spec = TopologySpec::new(2, 20, 2);
    let topo = Topology::new(spec).unwrap();
    // CPU 1 is on socket 0 (another core); CPU 20 is socket 1.
    assert_eq!(topo.cpu(CpuId(1)).socket, 0);
    assert_eq!(topo.cpu(CpuId(20)).socket, 1);
    let (near, _) = run(&one_call(spec, 0, vec![1], IpiMode::Physical));
    let (far, _) = run(&one_call(spec, 0, vec![20], IpiMode::Physical));
    assert!(call_ns(&far) > call_ns(&near));
    let icr = |r: &Report| {
        r.cross_calls.as_ref().unwrap().shootdowns[0]
            .sender_phases
            .icr_ps
    };
    assert_eq!(icr(&near), icr(&far));
}

#[test]
fn a_whole_socket_costs_one_write_per_cluster_in_cluster_mode() {
    let spec = TopologySpec::new(2, 20, 2);
    let topo = Topology::new(spec).unwrap();
    let socket1: Vec<u32> = topo.socket_cpus(1).map(|c| c.0).collect();
    let (p, _) = run(&one_call(spec, 0, socket1.clone(), IpiMode::Physical));
    let (c, _) = run(&one_call(spec, 0, socket1, IpiMode::Cluster));
    let load = |r: &Report| r.cross_calls.as_ref().unwrap().shootdowns[0].clone();
    assert_eq!((load(&p).icr_writes, load(&c).icr_writes), (40, 3));
    // One ICR write costs the cost table's WRMSR-to-ICR, and every write after the
    // first waits for the previous message's cross-socket acceptance.
    let costs = irqsim::system::Costs::default();
    let icr_ps = irqsim::sim_core::Freq::from_mhz(costs.cpu.freq_mhz)
        .unwrap()
        .cycles(costs.apic.wrmsr_icr_cycles as u64)
        .as_ps();
    let accept_ps = (costs.interconnect.icr_accept_cross_socket_ns * 1e3) as u64;
    assert_eq!(load(&p).sender_phases.icr_ps, 40 * icr_ps + 39 * accept_ps);
    assert_eq!(load(&c).sender_phases.icr_ps, 3 * icr_ps + 2 * accept_ps);
    assert!(call_ns(&c) < call_ns(&p));
}

#[test]
fn an_illegal_vector_ipi_is_counted_not_delivered() {
    let mut sc = one_call(TopologySpec::new(1, 4, 1), 0, vec![1], IpiMode::Cluster);
    sc.shootdowns[0].calls = Some(1);
    sc.shootdowns[0].arrival = ArrivalProcess::Fixed { interval_ns: 1e9 };
    let mut sys = System::new(&sc).unwrap();
    let icr = Icr::encode(
        Vector(0x05),
        IcrDelivery::Fixed,
        DestMode::Physical,
        TriggerMode::Edge,
        Shorthand::AllExcludingSelf,
        0,
    );
    sys.run_on(2, move |cpu| async move {
        cpu.wrmsr_fence().await;
        cpu.write_icr(icr).await;
    })
    .unwrap();
    // One task per CPU at a time.
    assert!(sys.run_on(2, |_| async {}).is_err());
    sys.run_for(irqsim::sim_core::Duration::from_ns(10_000));
    assert!(!sys.task_running(2));
    let x = sys.report().cross_calls.unwrap();
    assert_eq!(
        (x.ipis.icr_writes, x.ipis.not_sent, x.ipis.received),
        (1, 1, 0)
    );
    assert_eq!(x.ipis.handlers_run, 0);
}

#[test]
fn bad_shootdown_loads_name_the_field() {
    let spec = TopologySpec::new(1, 4, 1);
    type Edit = Box<dyn Fn(&mut Scenario)>;
    let cases: Vec<(Edit, &str)> = vec![
        (
            Box::new(|s| s.shootdowns[0].from = vec![9]),
            "shootdowns[0].from[0]",
        ),
        (
            Box::new(|s| s.shootdowns[0].from = vec![]),
            "shootdowns[0].from",
        ),
        (
            Box::new(|s| s.shootdowns[0].targets = vec![1, 7]),
            "shootdowns[0].targets[1]",
        ),
        (
            Box::new(|s| s.shootdowns[0].target_socket = Some(0)),
            "shootdowns[0].targets",
        ),
        (
            Box::new(|s| {
                s.shootdowns[0].targets.clear();
                s.shootdowns[0].target_socket = Some(3)
            }),
            "shootdowns[0].target_socket",
        ),
        (
            Box::new(|s| s.shootdowns[0].calls = Some(0)),
            "shootdowns[0].calls",
        ),
        (Box::new(|s| s.cpus.count = 5), "cpus.count"),
        (
            Box::new(|s| s.cpus.apic_ids = vec![0, 1, 2, 3]),
            "cpus.apic_ids",
        ),
    ];
    for (edit, field) in cases {
        let mut sc = one_call(spec, 0, vec![1], IpiMode::Cluster);
        edit(&mut sc);
        match sc.validate() {
            Err(ScenarioError::Invalid { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: {other:?}"),
        }
    }
    let mut bad = one_call(spec, 0, vec![1], IpiMode::Cluster);
    bad.shootdowns[0].targets = vec![9];
    assert!(System::new(&bad).is_err());
}

/// Device MSIs at `rate` per second on every target, and a shootdown every 20 us.
fn under_load(mode: DeliveryMode, rate: f64) -> Scenario {
    let mut b = Scenario::builder()
        .seed(7)
        .duration_us(2000.0)
        .mode(mode)
        .topology(TopologySpec::new(1, 8, 1))
        .shootdown(ShootdownConfig {
            name: "tlb".into(),
            from: vec![0],
            targets: (1..8).collect(),
            target_socket: None,
            arrival: ArrivalProcess::Poisson { rate_per_s: 50e3 },
            ipi_mode: IpiMode::Cluster,
            kernel: Default::default(),
            calls: None,
        });
    for cpu in 0..8 {
        b = b.dsa(0x30, cpu, ArrivalProcess::Poisson { rate_per_s: rate });
    }
    b.build().unwrap()
}

#[test]
fn interrupts_on_the_targets_lengthen_shootdowns_and_the_sender_takes_them_while_spinning() {
    let (quiet, _) = run(&under_load(DeliveryMode::Remapped, 1e3));
    let (busy, _) = run(&under_load(DeliveryMode::Remapped, 1e6));
    let p99 = |r: &Report| r.cross_calls.as_ref().unwrap().shootdowns[0].latency_ns.p99;
    assert!(
        p99(&busy) > p99(&quiet),
        "{} vs {}",
        p99(&busy),
        p99(&quiet)
    );
    for r in [&quiet, &busy] {
        assert!(r.msis.balanced, "{:?}", r.msis);
        let l = &r.cross_calls.as_ref().unwrap().shootdowns[0];
        assert!(l.completed > 50 && l.requested >= l.completed);
    }
    // The sender (CPU 0) has a device queue too: it takes those interrupts between
    // operations and in the middle of its spins, so its calls still complete and its
    // device's MSIs are handled.
    assert!(busy.cpu[0].interrupts_taken > 100);
    assert!(busy.cpu[0].cross_call_ns > 0.0);
}

#[test]
fn mixed_loads_are_deterministic() {
    let sc = under_load(DeliveryMode::Posted, 3e5);
    let (a, _) = run(&sc);
    let (b, _) = run(&sc);
    let strip = |r: &Report| {
        let mut v = serde_json::to_value(r).unwrap();
        v.as_object_mut().unwrap().remove("wall_time_s");
        v
    };
    assert_eq!(strip(&a), strip(&b));
    assert!(a.msis.balanced);
}

/// Linux 2.6.38's shootdown to a whole socket of Westmere-EX: the pre-patch send
/// writes ICR once per CPU, walking the shared mask the targets clear, and is slower;
/// with the patch's two writes the targets reach the shared flush_state line together
/// and queue for it.
#[test]
fn the_2011_shootdown_pays_for_per_cpu_writes_and_contends_on_one_line() {
    use irqsim::experiments::{ipi_cluster, ExperimentCtx};
    let ctx = ExperimentCtx::new(1);
    let config = ipi_cluster::Config::of(&ctx).unwrap();
    assert_eq!(
        (config.topology.sockets, config.topology.cores_per_socket),
        (4, 10)
    );
    let row = |mode| {
        ipi_cluster::point(
            &ctx,
            &config,
            ShootdownKernel::FlushTlbOthers2011,
            mode,
            20,
            "socket1",
        )
    };
    let (pre, post) = (row(IpiMode::ClusterPerCpu), row(IpiMode::Cluster));
    assert_eq!((pre.icr_writes, post.icr_writes), (20, 2));
    assert_eq!((pre.funcs_run, post.funcs_run), (20, 20));
    assert!(pre.sender_cycles > post.sender_cycles, "{pre:?} {post:?}");
    assert!(
        pre.sender_send_cycles > 10 * post.sender_send_cycles,
        "{pre:?} {post:?}"
    );
    // Arriving together, the targets' tests and locked clears wait for the line in
    // flight: more than one wait per target.
    assert!(post.line_waits > post.funcs_run as u64, "{post:?}");
    // The pre-patch driver walks `f->flush_cpumask` itself while the targets it has
    // already interrupted clear their bits in it: its 20 writes take longer than the
    // same 20 writes of today's physical send, which walks the sender's own copy.
    let today = ipi_cluster::point(
        &ctx,
        &config,
        ShootdownKernel::SmpCallFunctionMany,
        IpiMode::Physical,
        20,
        "socket1",
    );
    assert_eq!(today.icr_writes, 20);
    assert!(
        pre.sender_send_cycles as f64 > 1.2 * today.sender_send_cycles as f64,
        "{pre:?} {today:?}"
    );
}

/// An ICR write waits for the APIC to hand off the previous message: the per-write
/// cost grows with the acceptance latency of the distance.
#[test]
fn icr_writes_wait_for_the_previous_message_to_be_accepted() {
    let spec = TopologySpec::new(2, 20, 2);
    let targets: Vec<u32> = (20..30).collect();
    let send = |accept_ns: f64| {
        let mut sc = one_call(spec, 0, targets.clone(), IpiMode::Physical);
        sc.costs.interconnect.icr_accept_cross_socket_ns = accept_ns;
        let (r, _) = run(&sc);
        r.cross_calls.unwrap().shootdowns[0].sender_phases.icr_ps
    };
    let (slow, fast) = (send(500.0), send(100.0));
    // Nine of the ten writes wait for the one before.
    let waited = (slow - fast) as f64 / 1e3;
    assert!((waited - 9.0 * 400.0).abs() < 5.0, "{waited} ns");
}

/// Hyper-threads of one core share its private caches (Intel SDM Vol. 3A,
/// "Intel Hyper-Threading Technology Architecture"): in Linux 2.6.38's shootdown,
/// two sibling targets clear their bits in the shared `flush_cpumask` line where one
/// of them already holds it, while targets on two cores pass it between their caches.
/// Everything else (ICR writes, IPI flight, handler work) is the same for both pairs.
#[test]
fn sibling_targets_share_their_cores_copy_of_the_flush_line() {
    let spec = TopologySpec::new(2, 2, 2);
    let topo = Topology::new(spec).unwrap();
    let on_socket1: Vec<CpuId> = topo.socket_cpus(1).collect();
    let place = |c: CpuId| spec.place(c.0).unwrap();
    let a = on_socket1[0];
    let sibling = *on_socket1
        .iter()
        .find(|&&c| c != a && place(c).core == place(a).core)
        .unwrap();
    let other_core = *on_socket1
        .iter()
        .find(|&&c| place(c).core != place(a).core)
        .unwrap();
    let call = |pair: Vec<u32>| {
        let sc = kernel_call(
            spec,
            0,
            pair,
            IpiMode::Physical,
            ShootdownKernel::FlushTlbOthers2011,
        );
        call_ns(&run(&sc).0)
    };
    let siblings = call(vec![a.0, sibling.0]);
    let two_cores = call(vec![a.0, other_core.0]);
    assert!(
        siblings < two_cores,
        "siblings {siblings} ps, two cores {two_cores} ps"
    );
}
