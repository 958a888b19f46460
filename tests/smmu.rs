//! The SMMUv3 command queue and the NIC transmit path inside `System`: the
//! smmu-cmdsync rows, the two CMD_SYNC wait modes, contention, full queues, every
//! command consumed once and in order, interrupts masked across a call, transmit
//! conservation and determinism.

use std::cell::RefCell;
use std::rc::Rc;

use iommu_sim::smmuv3::{Command, SmmuFeatures};
use irqsim::devices::Affinity;
use irqsim::experiments::smmu_cmdsync;
use irqsim::report::Report;
use irqsim::system::scenario::Arch;
use irqsim::system::smmu_host::{
    load_iova, CmdqLock, MsiCompletion, SmmuLoadConfig, SmmuSetup, SmmuWorkload,
};
use irqsim::system::{DeliveryMode, Scenario, SimEvent, System};
use proptest::prelude::*;

fn arm(cpus: u32, msi: bool, sev: bool, duration_us: f64) -> Scenario {
    Scenario::builder()
        .seed(1)
        .duration_us(duration_us)
        .mode(DeliveryMode::Remapped)
        .arch(Arch::Arm)
        .cpus(cpus)
        .smmu(SmmuSetup {
            msi_polling_enabled: msi,
            features: SmmuFeatures {
                sev,
                ..SmmuFeatures::default()
            },
            ..SmmuSetup::default()
        })
        .into_unvalidated()
}

fn load(cpus: u32, workload: SmmuWorkload) -> SmmuLoadConfig {
    SmmuLoadConfig {
        name: String::new(),
        cpus: (0..cpus).collect(),
        workload,
        think_ns: 1000.0,
        think_jitter: 0.2,
        calls: None,
        warmup_us: 10.0,
        asid: 1,
    }
}

fn empty_queue(msi: bool) -> Scenario {
    let mut sc = arm(1, msi, true, 200.0);
    sc.smmu_loads.push(load(1, SmmuWorkload::SyncOnly));
    sc
}

fn run(sc: &Scenario) -> Report {
    System::run_scenario(sc).unwrap_or_else(|e| panic!("{e}"))
}

fn p50(r: &Report) -> f64 {
    r.smmu.as_ref().unwrap().loads[0].latency_ns.p50
}

#[test]
fn smmu_cmdsync_rows_have_every_key_and_both_settings() {
    let out = smmu_cmdsync::run(2);
    assert_eq!(out.experiment, "smmu-cmdsync");
    for key in [
        "msipoll",
        "cpus",
        "cmd_sync_ns_p50",
        "cmd_sync_ns_p99",
        "poll_window_ns",
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
            for workload in ["unmap", "udp-tx"] {
                let row = out
                    .rows
                    .iter()
                    .find(|r| {
                        r["msipoll"] == msipoll && r["cpus"] == cpus && r["workload"] == workload
                    })
                    .unwrap();
                let p50 = row["cmd_sync_ns_p50"].as_f64().unwrap();
                let p99 = row["cmd_sync_ns_p99"].as_f64().unwrap();
                assert!(p50 > 0.0 && p99 >= p50, "{row}");
                assert!(row["unmaps_per_sec"].as_f64().unwrap() > 0.0);
                // Only the transmit rows send anything.
                match workload {
                    "udp-tx" => assert!(row["tx_gbps"].as_f64().unwrap() > 0.0, "{row}"),
                    _ => assert!(row["tx_gbps"].is_null(), "{row}"),
                }
            }
        }
    }
    // msipoll=false falls back to CONS polling.
    assert!(out
        .rows
        .iter()
        .filter(|r| r["msipoll"] == false)
        .all(|r| r["poll_mode"] != "msi"));
}

/// The two ways Linux waits for a CMD_SYNC differ in one place each: with MSI
/// polling the SMMU writes the sync's own slot and the CPU never reads CONS; without
/// it the SMMU writes nothing and the CPU reads CONS after every wake. The SMMU's
/// register time is on both paths once (the PROD write) and on the CONS wait once
/// more (the read); the MSI write cost moves only the MSI wait.
#[test]
fn msi_and_cons_polling_each_pay_only_their_own_signal() {
    const STEP_NS: f64 = 200.0;
    let base_msi = run(&empty_queue(true));
    let base_cons = run(&empty_queue(false));
    let (m, c) = (
        base_msi.smmu.as_ref().unwrap(),
        base_cons.smmu.as_ref().unwrap(),
    );
    assert_eq!(m.poll_mode, "msi");
    assert_ne!(c.poll_mode, "msi");
    assert_eq!(m.host.cons_reads, 0);
    assert_eq!(m.cmdq.msi_writes, m.cmdq.sync);
    assert_eq!(c.cmdq.msi_writes, 0);
    assert!(c.host.cons_reads >= c.cmdq.sync, "{:?}", c.host);

    let slower_register = |msi| {
        let mut sc = empty_queue(msi);
        sc.costs.smmu_host.smmu_register_ns += STEP_NS;
        run(&sc)
    };
    let slower_msi = |msi| {
        let mut sc = empty_queue(msi);
        sc.costs.smmu_cmdq.msi_write_ns += STEP_NS;
        run(&sc)
    };
    assert_eq!(p50(&slower_msi(false)), p50(&base_cons));
    let prod_shift = p50(&slower_register(true)) - p50(&base_msi);
    let cons_shift = p50(&slower_register(false)) - p50(&base_cons) - prod_shift;
    let msi_shift = p50(&slower_msi(true)) - p50(&base_msi);
    // Latencies are kept to 3 significant digits (0.1 %).
    assert!(
        (prod_shift - STEP_NS).abs() < 2.0,
        "the PROD write moved the MSI wait {prod_shift} ns"
    );
    // The CONS read samples after the register answers, so a wait that started
    // reading just before CONS moved pays between part of and all of the read.
    assert!(
        (STEP_NS / 2.0 - 2.0..=STEP_NS + 2.0).contains(&cons_shift),
        "CONS wait moved {cons_shift} ns for {STEP_NS} ns more per read"
    );
    assert!(
        (msi_shift - STEP_NS).abs() < 2.0,
        "MSI wait moved {msi_shift} ns for {STEP_NS} ns more per write"
    );
}

#[test]
fn empty_queue_cmd_sync_latency_is_the_sum_of_its_parts() {
    let r = run(&empty_queue(true));
    let s = r.smmu.as_ref().unwrap();
    let l = &s.loads[0];
    assert!(l.measured > 50, "{l:?}");
    let (p50, p99) = (l.latency_ns.p50, l.latency_ns.p99);
    // One CPU, nothing else in the queue: calls differ by whether the CMD_SYNC
    // starts a new line of the ring and by the rare event-stream tick.
    assert!(p99 - p50 < 200.0, "p50 {p50} p99 {p99}");
    // At least PROD flight + fetch + decode + sync + MSI write + wake.
    let k = &empty_queue(true).costs;
    let c = &k.smmu_cmdq;
    let h = &k.smmu_host;
    let one_way = h.core_to_smmu().as_ps() as f64 / 1e3;
    let floor = h.prod_write_flight().as_ps() as f64 / 1e3
        + 2.0 * one_way
        + c.fetch_line_ns
        + c.decode_ns
        + c.sync_ns
        + c.msi_write_ns
        + one_way
        + h.wfe_wake_ns;
    assert!(
        p50 > floor && p50 < floor + 800.0,
        "p50 {p50} floor {floor}"
    );
    assert_eq!(s.host.cons_reads, 0);
    assert!(s.host.wakes_by_monitor >= s.cmdq.sync - 1, "{:?}", s.host);
}

#[test]
fn msi_polling_off_polls_cons_with_wfe_or_backoff() {
    let wfe = run(&empty_queue(false));
    let s = wfe.smmu.as_ref().unwrap();
    assert_eq!(s.poll_mode, "cons-wfe");
    assert!(
        s.host.cons_reads > 0 && s.host.wakes_by_sev > 0,
        "{:?}",
        s.host
    );
    let mut sc = empty_queue(false);
    sc.smmu.features.sev = false;
    let spin = run(&sc);
    let s = spin.smmu.as_ref().unwrap();
    assert_eq!(s.poll_mode, "cons-spin");
    assert!(s.host.cpu_relax > 0);
    assert_eq!(s.host.wakes_by_sev, 0);
}

/// Sixteen CPUs unmapping at once: owners batch others' work, calls take longer than
/// alone, CONS is read only without MSI polling, and the run is a pure function of
/// the scenario.
#[test]
fn sixteen_cpus_contend_batch_and_are_deterministic() {
    for msi in [true, false] {
        let mut sc = arm(16, msi, true, 300.0);
        sc.smmu_loads
            .push(load(16, SmmuWorkload::Unmap { pages: 1 }));
        let a = run(&sc);
        let b = run(&sc);
        let strip = |r: &Report| {
            let mut v = serde_json::to_value(r).unwrap();
            v["wall_time_s"] = 0.into();
            v
        };
        assert_eq!(strip(&a), strip(&b));
        let s = a.smmu.as_ref().unwrap();
        let l = &s.loads[0];
        assert!(
            s.host.owners < l.completed,
            "owners batch others' work: {:?}",
            s.host
        );
        if msi {
            assert_eq!(s.host.cons_reads, 0);
            assert_eq!(s.cmdq.msi_writes, s.cmdq.sync);
        } else {
            assert_eq!(s.cmdq.msi_writes, 0);
            assert!(s.host.cons_reads > s.cmdq.sync, "{:?} {:?}", s.host, s.cmdq);
        }
        let mut one = arm(16, msi, true, 300.0);
        one.smmu_loads
            .push(load(1, SmmuWorkload::Unmap { pages: 1 }));
        let one = run(&one);
        assert!(
            p50(&a) > p50(&one),
            "16 CPUs {} vs 1 CPU {}",
            p50(&a),
            p50(&one)
        );
        assert!(l.calls_per_sec > one.smmu.as_ref().unwrap().loads[0].calls_per_sec);
        assert!(!s.busiest_lines.is_empty());
        assert!(s.busiest_lines.iter().any(|n| n.name == "cmdq/llq"));
    }
}

/// Every TLBI the SMMU consumed, in order, decoded to (cpu, page sequence).
fn consumed_tlbis(sc: &Scenario) -> (Report, Vec<(u32, u64)>) {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let log = Rc::clone(&seen);
    let mut sys = System::new(sc).unwrap_or_else(|e| panic!("{e}"));
    sys.set_observer(Box::new(move |e: &SimEvent<'_>| {
        if let SimEvent::SmmuConsumed {
            command: Some(Command::TlbiNhVa { addr, .. }),
            ..
        } = *e
        {
            log.borrow_mut()
                .push(((addr >> 40) as u32, (addr >> 12) & ((1 << 28) - 1)));
        }
    }));
    sys.run_to_end();
    let r = sys.report();
    let v = seen.borrow().clone();
    (r, v)
}

/// Each CPU's TLBIs were consumed exactly once, in the order it wrote them (its
/// calls' IOVAs are `load_iova(cpu, call, pages)` plus the page).
fn check_order(tlbis: &[(u32, u64)], cpus: u32, calls: u64, pages: u32) -> Result<(), String> {
    for cpu in 0..cpus {
        let mine: Vec<u64> = tlbis.iter().filter(|t| t.0 == cpu).map(|t| t.1).collect();
        let want: Vec<u64> = (0..calls)
            .flat_map(|call| {
                let base = (load_iova(cpu, call, pages) >> 12) & ((1 << 28) - 1);
                (0..pages as u64).map(move |p| base + p)
            })
            .collect();
        if mine != want {
            return Err(format!(
                "cpu {cpu}: consumed {} TLBIs, not the {} it wrote in order",
                mine.len(),
                want.len()
            ));
        }
    }
    Ok(())
}

#[test]
fn full_queue_waits_and_loses_nothing() {
    // 16 CPUs each inserting 64 TLBIs + a sync (65 entries) into a 1024-entry
    // queue: it fills, CPUs wait in poll_until_not_full, nothing is lost or
    // reordered.
    let mut sc = arm(16, true, true, 20_000.0);
    sc.smmu.cmdq_log2_entries = 10;
    let mut l = load(16, SmmuWorkload::Unmap { pages: 64 });
    l.calls = Some(3);
    l.think_ns = 0.0;
    l.warmup_us = 0.0;
    sc.smmu_loads.push(l);
    let (r, tlbis) = consumed_tlbis(&sc);
    let s = r.smmu.as_ref().unwrap();
    assert!(s.host.full_waits > 0, "{:?}", s.host);
    assert_eq!(s.loads[0].completed, 48, "{:?}", s.loads[0]);
    assert_eq!(s.cmdq.tlbi, 48 * 64);
    assert_eq!(s.cmdq.sync, 48);
    check_order(&tlbis, 16, 3, 64).unwrap();
}

/// Linux masks interrupts for the whole `issue_cmdlist`, its CMD_SYNC wait
/// included: an MSI aimed at a CPU that keeps issuing waits for the call to end,
/// while the same MSIs on an idle CPU are served at once.
#[test]
fn interrupts_wait_for_the_masked_cmd_sync_wait() {
    use devices::ArrivalProcess;
    use irqsim::system::DeviceConfig;
    let device = |cpu| {
        DeviceConfig::dsa(
            0x30,
            cpu,
            ArrivalProcess::Poisson {
                rate_per_s: 200_000.0,
            },
        )
    };
    let with_calls = |cpu: u32| {
        let mut sc = arm(2, true, true, 2000.0);
        let mut l = load(1, SmmuWorkload::Unmap { pages: 1 });
        l.think_ns = 0.0;
        sc.smmu_loads.push(l);
        sc.devices.push(device(cpu));
        run(&sc)
    };
    let busy = with_calls(0);
    let idle = with_calls(1);
    assert!(busy.msis.balanced && idle.msis.balanced);
    let call = p50(&busy);
    // On the idle CPU the MSI's latency is the delivery path alone; on the issuing
    // CPU it waits on average half a masked call more.
    assert!(
        busy.latency_ns.mean > idle.latency_ns.mean + call / 4.0,
        "busy {} idle {} call {call}",
        busy.latency_ns.mean,
        idle.latency_ns.mean
    );
    assert!(busy.latency_ns.max >= call * 0.9, "{:?}", busy.latency_ns);
}

#[test]
fn smmu_scenario_errors_name_the_field() {
    let mut x86 = arm(2, true, true, 100.0);
    x86.arch = Arch::X86;
    x86.smmu_loads.push(load(1, SmmuWorkload::SyncOnly));
    let e = System::new(&x86).err().unwrap().to_string();
    assert!(e.contains("smmu_loads") && e.contains("arm"), "{e}");

    let mut small = arm(2, true, true, 100.0);
    small.smmu.cmdq_log2_entries = 6;
    small.smmu_loads.push(load(1, SmmuWorkload::SyncOnly));
    let e = System::new(&small).err().unwrap().to_string();
    assert!(e.contains("smmu.cmdq_log2_entries"), "{e}");
    small.smmu.cmdq_log2_entries = 7;
    assert!(System::new(&small).is_ok());

    let mut bad = arm(2, true, true, 100.0);
    bad.smmu_loads
        .push(load(1, SmmuWorkload::Unmap { pages: 0 }));
    let e = System::new(&bad).err().unwrap().to_string();
    assert!(e.contains("smmu_loads[0].workload.pages"), "{e}");

    let mut cpu = arm(2, true, true, 100.0);
    let mut l = load(1, SmmuWorkload::SyncOnly);
    l.cpus = vec![5];
    cpu.smmu_loads.push(l);
    let e = System::new(&cpu).err().unwrap().to_string();
    assert!(e.contains("smmu_loads[0].cpus[0]"), "{e}");

    let mut cost = empty_queue(true);
    cost.costs.smmu_host.smmu_register_ns = -1.0;
    let e = System::new(&cost).err().unwrap().to_string();
    assert!(e.contains("costs.smmu_host.smmu_register_ns"), "{e}");

    let toml = r#"
        duration_us = 100
        mode = "remapped"
        arch = "arm"
        [cpus]
        count = 2
        [[smmu_loads]]
        cpus = [0, 1]
        workload = { kind = "unmap", pages = 2 }
    "#;
    let sc: Scenario = toml::from_str(toml).unwrap();
    assert!(System::new(&sc).is_ok());
    assert!(toml::from_str::<Scenario>(&toml.replace("pages", "page")).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
    /// Across CPU counts, batch sizes, queue sizes, wait modes and seeds: every
    /// call returns, and every command is consumed once, in per-CPU order.
    #[test]
    fn no_command_lost_or_reordered(
        cpus in 1u32..9, pages in 1u32..80, log2 in 9u8..11,
        msi in any::<bool>(), sev in any::<bool>(), seed in 0u64..1000, think in 0.0f64..2000.0,
    ) {
        let mut sc = arm(cpus, msi, sev, 20_000.0);
        sc.seed = seed;
        sc.smmu.cmdq_log2_entries = log2;
        let mut l = load(cpus, SmmuWorkload::Unmap { pages });
        l.calls = Some(4);
        l.think_ns = think;
        l.warmup_us = 0.0;
        sc.smmu_loads.push(l);
        let (r, tlbis) = consumed_tlbis(&sc);
        let s = r.smmu.as_ref().unwrap();
        prop_assert_eq!(s.loads[0].completed, cpus as u64 * 4);
        prop_assert_eq!(s.cmdq.tlbi, cpus as u64 * 4 * pages as u64);
        prop_assert_eq!(s.cmdq.sync, cpus as u64 * 4);
        prop_assert_eq!(s.cmdq.consumed, s.cmdq.tlbi + s.cmdq.sync);
        let order = check_order(&tlbis, cpus, 4, pages);
        prop_assert!(order.is_ok(), "seed {}: {:?}", seed, order);
    }
}

fn transmit(threads: u32, datagrams: Option<u64>, duration_us: f64) -> Scenario {
    let mut sc = smmu_cmdsync::tx_scenario(true, threads, 3);
    sc.duration_us = duration_us;
    sc.transmit[0].datagrams = datagrams;
    sc.transmit[0].warmup_us = 0.0;
    sc
}

/// Every datagram a thread sends is fragmented, each fragment mapped, sent, and
/// unmapped with one CMD_SYNC; every skb comes back to its socket.
#[test]
fn transmit_unmaps_every_fragment_once_and_frees_every_datagram() {
    let sc = transmit(4, Some(20), 20_000.0);
    let r = run(&sc);
    let t = &r.transmit[0];
    assert_eq!(t.fragments_per_datagram, 23);
    assert_eq!(t.datagrams_freed, 4 * 20, "{t:?}");
    assert_eq!(t.packets_posted, 4 * 20 * 23);
    let s = r.smmu.as_ref().unwrap();
    assert_eq!(s.cmdq.sync, t.packets_posted, "one CMD_SYNC per unmap");
    assert_eq!(s.cmdq.tlbi, t.packets_posted);
    assert!(r.msis.balanced, "{:?}", r.msis);
    assert!(r.cpu.iter().any(|c| c.tx_ns > 0.0 && c.smmu_ns > 0.0));
    // What the NIC sent, over the whole run.
    let bits = (4 * 20 * 32768 * 8) as f64;
    let want = bits / (r.sim_time_ns * 1e-9) / 1e9;
    assert!((t.tx_gbps - want).abs() < 1e-9, "{} vs {want}", t.tx_gbps);
}

#[test]
fn transmit_is_deterministic_and_scales_with_threads() {
    let a = run(&transmit(16, None, 2000.0));
    let b = run(&transmit(16, None, 2000.0));
    let strip = |r: &Report| {
        let mut v = serde_json::to_value(r).unwrap();
        v["wall_time_s"] = 0.into();
        v
    };
    assert_eq!(strip(&a), strip(&b));
    let one = run(&transmit(1, None, 2000.0));
    assert!(
        a.transmit[0].tx_gbps > 2.0 * one.transmit[0].tx_gbps,
        "16 threads {} vs 1 {}",
        a.transmit[0].tx_gbps,
        one.transmit[0].tx_gbps
    );
    assert!(a.transmit[0].tx_gbps <= 100.0, "never above the line rate");
}

/// A socket holds `sndbuf_bytes` of skbs: with a tiny buffer the thread blocks on
/// it, sends less, and still loses nothing.
#[test]
fn a_small_send_buffer_blocks_the_sender() {
    let mut small = transmit(1, None, 2000.0);
    small.transmit[0].sndbuf_bytes = 64 * 1024;
    let s = run(&small);
    let big = run(&transmit(1, None, 2000.0));
    assert!(
        s.transmit[0].threads_blocked_ns > 0.0,
        "{:?}",
        s.transmit[0]
    );
    assert!(s.transmit[0].tx_gbps < big.transmit[0].tx_gbps);
    assert!(s.msis.balanced);
}

#[test]
fn transmit_scenario_errors_name_the_field() {
    let mut x86 = transmit(1, None, 100.0);
    x86.arch = Arch::X86;
    let e = System::new(&x86).err().unwrap().to_string();
    assert!(e.contains("transmit") && e.contains("arm"), "{e}");
    let mut nic = transmit(1, None, 100.0);
    nic.transmit[0].nic = 3;
    let e = System::new(&nic).err().unwrap().to_string();
    assert!(e.contains("transmit[0].nic"), "{e}");
    let mut threads = transmit(1, None, 100.0);
    threads.transmit[0].threads = 0;
    let e = System::new(&threads).err().unwrap().to_string();
    assert!(e.contains("transmit[0].threads"), "{e}");
    let mut size = transmit(1, None, 100.0);
    size.transmit[0].datagram_bytes = 70_000;
    let e = System::new(&size).err().unwrap().to_string();
    assert!(e.contains("transmit[0].datagram_bytes"), "{e}");
    let mut shared = transmit(32, None, 100.0);
    shared.cpus.count = 64;
    let e = System::new(&shared).err().unwrap().to_string();
    assert!(
        e.contains("transmit[0].threads") && e.contains("share CPU"),
        "{e}"
    );
    let mut rx = transmit(1, None, 100.0);
    rx.nics[0].rx = Some(devices::ArrivalSpec::Poisson { rate_per_s: 1e3 });
    let e = System::new(&rx).err().unwrap().to_string();
    assert!(e.contains("nics[0].rx"), "{e}");
}

fn window(r: &Report) -> f64 {
    r.smmu.as_ref().unwrap().poll_window_ns.p50
}

/// The path is built from hops: a wait by MSI crosses the die-to-die link four times
/// (PROD, the fetch there and back, the MSI write to the home agent), a wait by SEV
/// six times (PROD, the fetch, the SEV, the CONS read there and back).
#[test]
fn each_die_crossing_is_on_the_poll_window_once_per_hop() {
    const STEP_NS: f64 = 50.0;
    let crossing = |msi: bool, d2d: f64| {
        let mut sc = empty_queue(msi);
        sc.costs.smmu_host.die_to_die_ns = d2d;
        window(&run(&sc))
    };
    let msi = crossing(true, STEP_NS) - crossing(true, 0.0);
    let sev = crossing(false, STEP_NS) - crossing(false, 0.0);
    assert!((msi - 4.0 * STEP_NS).abs() < 3.0, "MSI window moved {msi}");
    assert!((sev - 6.0 * STEP_NS).abs() < 3.0, "SEV window moved {sev}");
}

/// Where the SMMU's MSI write leaves the line decides where the poller reloads it
/// from; the SEV wait never touches that line after the SMMU's write.
#[test]
fn the_msi_reload_comes_from_where_the_write_landed() {
    use irqsim::system::smmu_host::IoWriteLands;
    let lands = |msi: bool, at: IoWriteLands| {
        let mut sc = empty_queue(msi);
        sc.costs.smmu_host.io_write_lands = at;
        window(&run(&sc))
    };
    let k = &empty_queue(true).costs;
    let llc_ns = k.pid_line.llc_hit_cycles / k.cpu.freq_mhz as f64 * 1e3;
    let shift = lands(true, IoWriteLands::Memory) - lands(true, IoWriteLands::Llc);
    assert!(
        (shift - (k.pid_line.memory_ns - llc_ns)).abs() < 3.0,
        "reload moved {shift} ns"
    );
    assert_eq!(
        lands(false, IoWriteLands::Memory),
        lands(false, IoWriteLands::Llc)
    );
}

/// The SMMU's command fetch is a ReadOnce: the core that wrote the command keeps its
/// Modified copy, so its next command into that line is a hit. A fetch that snoops the
/// line to Shared makes that write an upgrade. The SEV wait itself is the same.
#[test]
fn a_fetch_that_keeps_the_writers_copy_spares_its_next_command_an_upgrade() {
    use irqsim::system::smmu_host::FetchSnoop;
    let with = |snoop: FetchSnoop| {
        let mut sc = empty_queue(false);
        sc.costs.smmu_host.fetch_snoop = snoop;
        run(&sc)
    };
    let (keep, share) = (with(FetchSnoop::Keep), with(FetchSnoop::Share));
    assert_eq!(window(&keep), window(&share));
    let upgrade_ns = empty_queue(false).costs.pid_line.upgrade_s_to_m_ns;
    let saved = p50(&share) - p50(&keep);
    assert!(
        (saved - upgrade_ns).abs() < 3.0,
        "a call saved {saved} ns, the upgrade costs {upgrade_ns} ns"
    );
}

/// Sixteen CPUs issuing bare CMD_SYNCs with no think time keep the SMMU busy.
fn back_to_back_syncs(msi: bool, completion: MsiCompletion) -> Report {
    let mut sc = arm(16, msi, true, 100.0);
    sc.costs.smmu_host.msi_completion = completion;
    let mut l = load(16, SmmuWorkload::SyncOnly);
    l.think_ns = 0.0;
    sc.smmu_loads.push(l);
    run(&sc)
}

/// A CMD_SYNC completes only once the MSI writes of the CMD_SYNCs before it are
/// visible (IHI 0070 4.7.3), and the SMMU learns that from each write's response:
/// back to back, the syncs cannot complete faster than one MSI round trip apart, however
/// cheap the sync itself. Waiting by SEV has no write to wait for.
#[test]
fn back_to_back_syncs_complete_no_faster_than_one_msi_round_trip_apart() {
    let k = &arm(1, true, true, 1.0).costs;
    let round_trip_ns = k.smmu_cmdq.msi_write_ns + 2.0 * k.smmu_host.core_to_smmu().as_ns_f64();
    let rate = |r: &Report| r.smmu.as_ref().unwrap().cmdq.sync as f64 / 100e3;
    let msi = rate(&back_to_back_syncs(true, MsiCompletion::InOrder));
    let sev = rate(&back_to_back_syncs(false, MsiCompletion::InOrder));
    assert!(
        msi * round_trip_ns <= 1.0,
        "{msi} syncs/ns with a {round_trip_ns} ns round trip"
    );
    assert!(sev * round_trip_ns > 1.0, "SEV: {sev} syncs/ns");
}

/// An SMMU that holds the commands after a CMD_SYNC until its MSI write is
/// acknowledged serves back-to-back syncs more slowly; a lone caller, whose next
/// sync comes after the response, loses nothing; waiting by SEV is not affected.
#[test]
fn holding_the_queue_for_each_msi_response_slows_only_back_to_back_msi_syncs() {
    let syncs =
        |msi: bool, c: MsiCompletion| back_to_back_syncs(msi, c).smmu.as_ref().unwrap().cmdq.sync;
    let (in_order, held) = (
        syncs(true, MsiCompletion::InOrder),
        syncs(true, MsiCompletion::Acknowledged),
    );
    assert!(
        (held as f64) < 0.9 * in_order as f64,
        "held {held}, in order {in_order}"
    );
    assert_eq!(
        syncs(false, MsiCompletion::InOrder),
        syncs(false, MsiCompletion::Acknowledged)
    );
    let lone = |c: MsiCompletion| {
        let mut sc = empty_queue(true);
        sc.costs.smmu_host.msi_completion = c;
        let r = run(&sc);
        (window(&r), p50(&r))
    };
    assert_eq!(
        lone(MsiCompletion::InOrder),
        lone(MsiCompletion::Acknowledged)
    );
}

fn eight_cpus_on_a_512_entry_queue(lock: CmdqLock) -> Scenario {
    let mut sc = arm(8, false, false, 20_000.0);
    sc.seed = 0;
    sc.smmu.cmdq_log2_entries = 9;
    sc.smmu.cmdq_lock = lock;
    let mut l = load(8, SmmuWorkload::Unmap { pages: 64 });
    l.calls = Some(4);
    l.think_ns = 0.0;
    l.warmup_us = 0.0;
    sc.smmu_loads.push(l);
    sc
}

/// Eight CPUs each inserting 64 TLBIs + a sync (520 entries) into a 512-entry queue,
/// waiting by CONS polling with no think time. With the lock Linux had from v5.5 to
/// 2025, the CPU that finds no space retakes the exclusive lock every ~20 ns while
/// the CPUs that reserved space wait for the shared lock; their increments are reset
/// at each unlock and their reload always comes too late, so nobody sets a valid
/// bit, the owner never writes PROD, and the queue never drains: the shared-lock
/// starvation commit df180b1a4cc5 fixed. With the fixed lock every call returns.
#[test]
fn the_old_cmdq_lock_starves_shared_waiters_and_the_fixed_one_does_not() {
    let (old, _) = consumed_tlbis(&eight_cpus_on_a_512_entry_queue(CmdqLock::SetRelease));
    let s = old.smmu.as_ref().unwrap();
    assert_eq!(s.cmdq.prod_writes, 0, "{:?}", s.cmdq);
    assert_eq!(s.loads[0].completed, 0);
    assert_eq!(s.loads[0].started, 8);
    assert!(s.host.full_waits > 1000, "{:?}", s.host);

    let (r, tlbis) = consumed_tlbis(&eight_cpus_on_a_512_entry_queue(CmdqLock::AndNotRelease));
    let s = r.smmu.as_ref().unwrap();
    assert_eq!(s.loads[0].completed, 32, "{:?}", s.cmdq);
    assert_eq!(s.cmdq.tlbi, 32 * 64);
    assert_eq!(s.cmdq.sync, 32);
    assert_eq!(s.cmdq.consumed, s.cmdq.tlbi + s.cmdq.sync);
    check_order(&tlbis, 8, 4, 64).unwrap();
}

/// A sender apart from its queue's interrupt CPU only sends: the unmaps and their
/// CMD_SYNCs run where the queue's completion interrupt goes. Sending and cleaning
/// then overlap on two CPUs, so one thread moves more than when one CPU does both,
/// but at most twice as much: the slower of the two stages still takes at least half
/// of what both took on one CPU.
#[test]
fn a_sender_apart_from_its_queues_interrupt_overlaps_sending_with_cleaning() {
    let same = run(&transmit(1, None, 4000.0));
    let mut sc = smmu_cmdsync::tx_apart_scenario(true, 1, 3);
    sc.duration_us = 4000.0;
    sc.transmit[0].warmup_us = 0.0;
    let sender_cpu = sc.transmit[0].cpus[0];
    let Affinity::Explicit { cpus: queue_cpus } = &sc.nics[0].affinity else {
        panic!("the apart scenario aims its queue interrupts explicitly");
    };
    let cleaner_cpu = queue_cpus[0];
    assert_ne!(sender_cpu, cleaner_cpu);
    let apart = run(&sc);
    let sender = &apart.cpu[sender_cpu as usize];
    assert!(sender.tx_ns > 0.0, "{sender:?}");
    assert_eq!(sender.smmu_ns, 0.0, "the sender issues no CMD_SYNC");
    let cleaner = &apart.cpu[cleaner_cpu as usize];
    assert!(cleaner.smmu_ns > 0.0, "{cleaner:?}");
    let (g1, g2) = (same.transmit[0].tx_gbps, apart.transmit[0].tx_gbps);
    assert!(
        g2 > g1 && g2 <= 2.0 * g1,
        "same CPU {g1} Gbit/s, apart {g2}"
    );
}

#[test]
fn a_set_reaches_the_points_that_have_its_field_and_a_typo_reaches_none() {
    use irqsim::experiments::{ExperimentCtx, FieldSet};
    let seed = 1;
    let bare = smmu_cmdsync::load_scenario(true, SmmuWorkload::SyncOnly, 1, seed);
    let tx = smmu_cmdsync::tx_scenario(true, 1, seed);
    let with = |set: &str| {
        let mut ctx = ExperimentCtx::new(seed);
        ctx.sets = vec![FieldSet::parse(set).unwrap()];
        ctx
    };

    // The transmit rows have a sender; the bare CMD_SYNC rows do not.
    let ctx = with("transmit[0].datagram_bytes=16384");
    smmu_cmdsync::check(&ctx).expect("the udp-tx points have transmit[0]");
    let lone = ctx.check(&bare).unwrap_err();
    assert!(lone.contains("`transmit` has 0 entries"), "{lone}");
    assert_eq!(ctx.prepared(&tx).transmit[0].datagram_bytes, 16384);
    let bare_run = ctx.prepared(&bare);
    assert!(bare_run.transmit.is_empty());
    assert_eq!(bare_run.costs, ctx.prepare(&bare).unwrap().costs);
    let uses = ctx.set_uses();
    assert_eq!((uses[0].applied, uses[0].absent), (1, 1));
    let notes = ctx.set_notes();
    assert!(notes[0].contains("applied to 1 of 2 points"), "{notes:?}");

    // A value that one point's field refuses (one sender CPU, sixteen threads) is
    // refused before anything runs, naming the point.
    let refused = smmu_cmdsync::check(&with("transmit[0].cpus=[20]")).unwrap_err();
    assert!(refused.contains("udp-tx x16"), "{refused}");
    assert!(with("transmit[0].cpus=[20]").check(&tx).is_ok());

    // A field no point has is a typo, named with what the first point has instead.
    let typo = smmu_cmdsync::check(&with("transmit[0].cpuz=[20]")).unwrap_err();
    assert!(
        typo.contains("no point of this experiment has that field")
            && typo.contains("`transmit` has 0 entries"),
        "{typo}"
    );
    // A path through a value of the wrong kind, or a bad value, fails at once.
    let through = smmu_cmdsync::check(&with("costs.cpu.freq_mhz.x=1")).unwrap_err();
    assert!(through.contains("is a number, not a table"), "{through}");
    let bad = smmu_cmdsync::check(&with("transmit[0].cpus=[999]")).unwrap_err();
    assert!(bad.contains("transmit[0].cpus"), "{bad}");
    let typed = smmu_cmdsync::check(&with("transmit[0].mtu=-1")).unwrap_err();
    assert!(typed.contains("--set transmit[0].mtu=-1"), "{typed}");

    // Costs reach every point.
    let ctx = with("costs.smmu_host.smmu_register_ns=200");
    smmu_cmdsync::check(&ctx).unwrap();
    ctx.prepared(&bare);
    ctx.prepared(&tx);
    assert!(ctx.set_notes()[0].contains("applied to every point (2)"));
}
