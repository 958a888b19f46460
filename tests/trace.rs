//! The Chrome trace of a run parses as JSON and agrees with the run's report.

use irqsim::report::trace::{ChromeTrace, TraceWindow};
use irqsim::{Scenario, System};
use serde_json::Value;

fn traced_run(window: TraceWindow, tag: &str) -> (irqsim::Report, Vec<Value>) {
    let text = irqsim::scenarios::embedded("faulty-device").unwrap();
    let sc = Scenario::from_toml_str(text, "faulty-device").unwrap();
    let path = std::env::temp_dir().join(format!("irqsim-trace-{}-{tag}.json", std::process::id()));
    let trace = ChromeTrace::create(&path, window).unwrap();
    let mut sys = System::new(&sc).unwrap();
    sys.set_observer(Box::new(trace.run(
        "faulty-device",
        sys.cpu_count(),
        &sys.device_names(),
    )));
    sys.run_to_end();
    drop(sys.take_observer());
    trace.finish().unwrap();
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).expect("trace is JSON");
    let _ = std::fs::remove_file(&path);
    (
        sys.report(),
        json["traceEvents"].as_array().unwrap().clone(),
    )
}

fn count(events: &[Value], pred: impl Fn(&Value) -> bool) -> u64 {
    events.iter().filter(|e| pred(e)).count() as u64
}

fn name_starts(e: &Value, prefix: &str) -> bool {
    e["name"].as_str().is_some_and(|n| n.starts_with(prefix))
}

#[test]
fn whole_run_trace_matches_the_report() {
    let (r, ev) = traced_run(TraceWindow::ALL, "all");
    assert!(r.msis.balanced);
    // One MSI slice and one flow start per MSI raised.
    assert_eq!(
        count(&ev, |e| e["ph"] == "X" && e["cat"] == "msi"),
        r.msis.generated
    );
    // One flow (start on the device, end on a CPU track) per handled MSI.
    assert_eq!(count(&ev, |e| e["ph"] == "s"), r.msis.handled);
    assert_eq!(count(&ev, |e| e["ph"] == "f"), r.msis.handled);
    // A device's MSI slices never overlap, however close its MSIs come.
    let mut by_device: std::collections::BTreeMap<(u64, u64), Vec<(f64, f64)>> = Default::default();
    for e in ev.iter().filter(|e| e["ph"] == "X" && e["cat"] == "msi") {
        let key = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
        let ts = e["ts"].as_f64().unwrap();
        by_device
            .entry(key)
            .or_default()
            .push((ts, ts + e["dur"].as_f64().unwrap()));
    }
    for slices in by_device.values_mut() {
        slices.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in slices.windows(2) {
            assert!(w[0].1 <= w[1].0 + 1e-9, "{:?} overlaps {:?}", w[0], w[1]);
        }
    }
    // CPU tracks: an entry and an exit per interrupt taken (a run may end mid-handler),
    // a handler slice per handler call.
    let entries = count(&ev, |e| e["ph"] == "X" && name_starts(e, "irq entry"));
    assert_eq!(entries, r.interrupts_taken);
    let exits = count(&ev, |e| e["ph"] == "X" && name_starts(e, "irq exit"));
    assert!(exits <= entries && exits + r.cpu.len() as u64 >= entries);
    let handler_calls: u64 = r.cpu.iter().map(|c| c.handler_calls).sum();
    assert_eq!(
        count(&ev, |e| e["ph"] == "X" && e["cat"] == "handler"),
        handler_calls
    );
    let xchgs: u64 = r.cpu.iter().map(|c| c.pir_xchgs).sum();
    assert_eq!(
        count(&ev, |e| e["ph"] == "X" && name_starts(e, "xchg PIR")),
        xchgs
    );
    // IOMMU track: a slice per descriptor update, an instant per notification and drop.
    assert_eq!(
        count(&ev, |e| e["ph"] == "X" && name_starts(e, "post ")),
        r.pid_line.iommu_updates
    );
    assert_eq!(
        count(&ev, |e| e["ph"] == "i" && name_starts(e, "notify")),
        r.notifications.sent
    );
    let dropped: u64 = r.msis.dropped.values().sum();
    assert!(dropped > 0);
    assert_eq!(
        count(&ev, |e| e["ph"] == "i"
            && name_starts(e, "dropped: irte_not_present")),
        dropped
    );
    // Counter tracks for the PID line per agent and the PIR population.
    assert!(count(&ev, |e| e["ph"] == "C" && name_starts(e, "PID cpu")) > 0);
    assert!(count(&ev, |e| e["ph"] == "C" && name_starts(e, "PIR pending")) > 0);
    // Named tracks.
    assert!(ev
        .iter()
        .any(|e| e["ph"] == "M" && e["args"]["name"] == "cpu1"));
    assert!(ev
        .iter()
        .any(|e| e["ph"] == "M" && e["args"]["name"] == "misprogrammed"));
}

#[test]
fn a_window_keeps_only_events_inside_it() {
    let window = TraceWindow::from_us(Some(100.0), Some(120.0));
    let (_, ev) = traced_run(window, "window");
    let (_, all) = traced_run(TraceWindow::ALL, "all2");
    assert!(ev.len() * 5 < all.len(), "{} vs {}", ev.len(), all.len());
    for e in ev.iter().filter(|e| e["ph"] != "M") {
        let ts = e["ts"].as_f64().unwrap();
        let end = ts + e["dur"].as_f64().unwrap_or(0.0);
        assert!(end >= 100.0 && ts <= 120.0, "{e}");
    }
    assert!(ev.iter().any(|e| e["ph"] == "X"));
    // Flows cut by the window are dropped whole: every start has its end.
    let ids = |ph: &str| -> std::collections::BTreeSet<u64> {
        ev.iter()
            .filter(|e| e["ph"] == ph)
            .map(|e| e["id"].as_u64().unwrap())
            .collect()
    };
    assert!(!ids("s").is_empty());
    assert_eq!(ids("s"), ids("f"));
}

/// An experiment's points share one file: each run starts after the previous one
/// ended, and flow ids do not collide.
#[test]
fn runs_of_one_file_follow_each_other_with_their_own_flow_ids() {
    let text = irqsim::scenarios::embedded("faulty-device").unwrap();
    let mut sc = Scenario::from_toml_str(text, "faulty-device").unwrap();
    sc.duration_us = 50.0;
    let path = std::env::temp_dir().join(format!("irqsim-trace-{}-two.json", std::process::id()));
    let trace = ChromeTrace::create(&path, TraceWindow::ALL).unwrap();
    for name in ["first", "second"] {
        let mut sys = System::new(&sc).unwrap();
        sys.set_observer(Box::new(trace.run(
            name,
            sys.cpu_count(),
            &sys.device_names(),
        )));
        sys.run_to_end();
        drop(sys.take_observer());
    }
    trace.finish().unwrap();
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let _ = std::fs::remove_file(&path);
    let ev = json["traceEvents"].as_array().unwrap();
    let run_of = |e: &Value| (e["pid"].as_u64().unwrap() - 1) / 4;
    let timed: Vec<&Value> = ev.iter().filter(|e| e["ph"] != "M").collect();
    let end_first = timed
        .iter()
        .filter(|e| run_of(e) == 0)
        .map(|e| e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap_or(0.0))
        .fold(0.0, f64::max);
    let start_second = timed
        .iter()
        .filter(|e| run_of(e) == 1)
        .map(|e| e["ts"].as_f64().unwrap())
        .fold(f64::MAX, f64::min);
    assert!(start_second > end_first, "{start_second} <= {end_first}");
    let flow_ids = |run: u64| -> std::collections::BTreeSet<u64> {
        timed
            .iter()
            .filter(|e| e["ph"] == "s" && run_of(e) == run)
            .map(|e| e["id"].as_u64().unwrap())
            .collect()
    };
    assert!(!flow_ids(0).is_empty());
    assert!(flow_ids(0).is_disjoint(&flow_ids(1)));
}

#[test]
fn histogram_in_the_report_holds_every_sample() {
    let (r, _) = traced_run(TraceWindow::ALL, "hist");
    let total: u64 = r.latency_ns.histogram.iter().map(|b| b[1]).sum();
    assert_eq!(total, r.latency_ns.count);
    assert!(r.latency_ns.histogram.windows(2).all(|w| w[0][0] < w[1][0]));
    assert!(r.latency_ns.p50 <= r.latency_ns.p90 && r.latency_ns.p90 <= r.latency_ns.p99);
    assert!(r.latency_ns.p99 <= r.latency_ns.p999 && r.latency_ns.p999 <= r.latency_ns.max);
}
