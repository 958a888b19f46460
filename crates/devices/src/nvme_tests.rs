//! Tests of the NVMe drive: latency, ceiling, coalescing, doorbells, limits, and a
//! property test of conservation under random host behaviour.

use super::*;
use proptest::prelude::*;
use rand::SeedableRng;

fn rng() -> rand::rngs::StdRng {
    rand::rngs::StdRng::seed_from_u64(3)
}

fn fixed_latency(ns: f64) -> Dist {
    Dist::Fixed { value: ns }
}

fn drive(cfg: NvmeConfig) -> NvmeDrive {
    NvmeDrive::new(cfg, &NvmeDriveCosts::default(), "nvme[0]").unwrap()
}

/// `advance` for a host whose memory sees every entry as soon as the drive writes it:
/// lands each completion at once and collects the MSIs.
fn advance(d: &mut NvmeDrive, now: SimTime, msis: &mut Vec<NvmeMsi>) -> Option<SimTime> {
    let mut writes = Vec::new();
    let next = d.advance(now, &mut writes);
    for w in writes {
        match w {
            NvmeWrite::Completion { qid, .. } => d.land(qid),
            NvmeWrite::Msi(m) => msis.push(m),
        }
    }
    next
}

/// Advances the drive until it is idle or `until`, collecting MSIs.
fn run_until(d: &mut NvmeDrive, until: SimTime) -> Vec<NvmeMsi> {
    let mut out = Vec::new();
    while let Some(t) = d.next_event() {
        if t > until {
            break;
        }
        advance(d, t, &mut out);
        d.check_conservation();
    }
    out
}

fn us(x: u64) -> SimTime {
    SimTime(x * PS_PER_US)
}

fn ns(x: u64) -> SimTime {
    SimTime(x * 1_000)
}

#[test]
fn one_command_completes_after_its_latency_and_raises_one_msi() {
    let mut d = drive(NvmeConfig {
        latency_ns: Some(fixed_latency(3400.0)),
        ..NvmeConfig::default()
    });
    let mut r = rng();
    assert_eq!(
        d.submit(ns(100), 0, 42, &mut r),
        NvmeSubmitOutcome::Accepted
    );
    assert_eq!(d.next_event(), Some(ns(3500)));
    let mut msis = Vec::new();
    assert_eq!(advance(&mut d, ns(3499), &mut msis), Some(ns(3500)));
    assert!(msis.is_empty());
    assert_eq!(advance(&mut d, ns(3500), &mut msis), None);
    assert_eq!(
        msis,
        vec![NvmeMsi {
            at: ns(3500),
            vector: 0,
            entries: 1,
            cause: MsiCause::Immediate
        }]
    );
    let mut got = Vec::new();
    assert_eq!(d.reap(0, u32::MAX, &mut got), 1);
    assert_eq!(
        got,
        vec![CqEntry {
            tag: 42,
            submitted_at: ns(100),
            posted_at: ns(3500)
        }]
    );
    d.check_conservation();
    assert_eq!(d.outstanding(0), 0);
}

#[test]
fn the_ceiling_spaces_completions_and_the_burst_lets_some_through_together() {
    // 1 M IOPS: one completion per microsecond at most.
    let mut d = drive(NvmeConfig {
        latency_ns: Some(fixed_latency(1000.0)),
        iops_ceiling: Some(1e6),
        ..NvmeConfig::default()
    });
    let mut r = rng();
    for tag in 0..5 {
        let _ = d.submit(SimTime::ZERO, 0, tag, &mut r);
    }
    run_until(&mut d, SimTime::MAX);
    let mut got = Vec::new();
    d.reap(0, 100, &mut got);
    let posted: Vec<_> = got.iter().map(|e| e.posted_at).collect();
    assert_eq!(posted, vec![us(1), us(2), us(3), us(4), us(5)]);

    let mut d = drive(NvmeConfig {
        latency_ns: Some(fixed_latency(1000.0)),
        iops_ceiling: Some(1e6),
        iops_burst: 3,
        ..NvmeConfig::default()
    });
    for tag in 0..5 {
        let _ = d.submit(SimTime::ZERO, 0, tag, &mut r);
    }
    run_until(&mut d, SimTime::MAX);
    got.clear();
    d.reap(0, 100, &mut got);
    let posted: Vec<_> = got.iter().map(|e| e.posted_at).collect();
    assert_eq!(posted, vec![us(1), us(1), us(1), us(2), us(3)]);
}

#[test]
fn threshold_coalesces_thr_plus_one_entries_into_one_msi() {
    let mut d = drive(NvmeConfig {
        latency_ns: Some(fixed_latency(1000.0)),
        iops_ceiling: Some(1e9),
        coalescing: Coalescing {
            threshold: 3,
            time_100us: 1,
        },
        ..NvmeConfig::default()
    });
    let mut r = rng();
    for tag in 0..4 {
        let _ = d.submit(ns(tag * 10), 0, tag, &mut r);
    }
    let msis = run_until(&mut d, SimTime::MAX);
    assert_eq!(msis.len(), 1);
    assert_eq!(msis[0].entries, 4);
    assert_eq!(msis[0].cause, MsiCause::Threshold);
    assert_eq!(msis[0].at, ns(1030));
    assert_eq!(d.counters(0).msis_threshold, 1);
}

#[test]
fn a_threshold_or_a_time_alone_does_not_coalesce() {
    // NVMe 2.0, FID 08h: coalescing needs both THR and TIME; either at 0 leaves every
    // entry signalled at once.
    for c in [
        Coalescing {
            threshold: 3,
            time_100us: 0,
        },
        Coalescing {
            threshold: 0,
            time_100us: 5,
        },
    ] {
        assert!(!c.enabled(), "{c:?}");
        let mut d = drive(NvmeConfig {
            latency_ns: Some(fixed_latency(1000.0)),
            iops_ceiling: Some(1e9),
            coalescing: c,
            ..NvmeConfig::default()
        });
        let mut r = rng();
        for tag in 0..4 {
            let _ = d.submit(ns(tag * 10), 0, tag, &mut r);
        }
        let msis = run_until(&mut d, SimTime::MAX);
        assert_eq!(msis.len(), 4, "{c:?}: one MSI per entry");
        assert!(msis
            .iter()
            .all(|m| m.cause == MsiCause::Immediate && m.entries == 1));
    }
    assert!(Coalescing {
        threshold: 1,
        time_100us: 1
    }
    .enabled());
}

/// A 1 us drive whose vector 0 aggregates up to 9 entries for 200 us.
fn aggregating_200us_drive() -> NvmeDrive {
    drive(NvmeConfig {
        latency_ns: Some(fixed_latency(1000.0)),
        iops_ceiling: Some(1e9),
        coalescing: Coalescing {
            threshold: 9,
            time_100us: 2,
        },
        ..NvmeConfig::default()
    })
}

#[test]
fn aggregation_time_fires_in_100us_units_after_the_first_entry() {
    let mut d = aggregating_200us_drive();
    let mut r = rng();
    let _ = d.submit(SimTime::ZERO, 0, 1, &mut r);
    assert!(run_until(&mut d, us(50)).is_empty());
    let _ = d.submit(us(50), 0, 2, &mut r);
    let msis = run_until(&mut d, SimTime::MAX);
    assert_eq!(
        msis,
        vec![NvmeMsi {
            at: us(201),
            vector: 0,
            entries: 2,
            cause: MsiCause::Timer
        }]
    );
}

/// When one `advance` finds an aggregation timer and a later completion both due, the
/// timer fires first: its MSI carries only the entry that armed it, at the timer's own
/// instant, and the later entry starts a new aggregation window.
#[test]
fn a_timer_due_before_a_completion_fires_first_within_one_advance() {
    let mut d = aggregating_200us_drive();
    let mut r = rng();
    let _ = d.submit(SimTime::ZERO, 0, 1, &mut r);
    assert!(run_until(&mut d, us(200)).is_empty());
    // Completes at 201.5 us, after the timer armed for 201 us.
    let _ = d.submit(ns(200_500), 0, 2, &mut r);
    let mut msis = Vec::new();
    let next = advance(&mut d, us(300), &mut msis);
    assert_eq!(
        msis,
        vec![NvmeMsi {
            at: us(201),
            vector: 0,
            entries: 1,
            cause: MsiCause::Timer
        }]
    );
    assert_eq!(next, Some(ns(401_500)));
}

#[test]
fn reaping_unsignalled_entries_cancels_their_msi() {
    let mut d = drive(NvmeConfig {
        latency_ns: Some(fixed_latency(1000.0)),
        iops_ceiling: Some(1e9),
        coalescing: Coalescing {
            threshold: 7,
            time_100us: 1,
        },
        ..NvmeConfig::default()
    });
    let mut r = rng();
    let _ = d.submit(SimTime::ZERO, 0, 1, &mut r);
    let _ = d.submit(SimTime::ZERO, 0, 2, &mut r);
    assert!(run_until(&mut d, us(2)).is_empty());
    assert_eq!(
        d.next_event(),
        Some(us(101)),
        "the aggregation timer is armed"
    );
    let mut got = Vec::new();
    assert_eq!(d.reap(0, 1, &mut got), 1);
    assert_eq!(
        d.next_event(),
        Some(us(101)),
        "one entry still awaits its MSI"
    );
    assert_eq!(d.reap(0, 1, &mut got), 1);
    assert_eq!(d.next_event(), None, "nothing left to signal");
    assert_eq!(d.counters(0).entries_reaped_unsignalled, 2);
    assert_eq!(d.counters(0).msis, 0);
    d.check_conservation();
}

#[test]
fn each_vector_coalesces_on_its_own_and_overrides_apply() {
    let mut d = drive(NvmeConfig {
        queues: 2,
        latency_ns: Some(fixed_latency(1000.0)),
        iops_ceiling: Some(1e9),
        coalescing: Coalescing {
            threshold: 1,
            time_100us: 1,
        },
        vector_coalescing: vec![VectorCoalescing {
            vector: 1,
            threshold: 0,
            time_100us: 0,
        }],
        ..NvmeConfig::default()
    });
    let mut r = rng();
    for q in 0..2 {
        for tag in 0..2 {
            let _ = d.submit(SimTime::ZERO, q, tag, &mut r);
        }
    }
    let msis = run_until(&mut d, SimTime::MAX);
    let of = |v| msis.iter().filter(|m| m.vector == v).count();
    assert_eq!(of(0), 1, "vector 0 pairs its two entries");
    assert_eq!(of(1), 2, "vector 1 is not coalesced");
}

#[test]
#[should_panic(expected = "was not advanced")]
fn an_input_after_a_missed_event_is_an_engine_bug() {
    let mut d = drive(NvmeConfig {
        latency_ns: Some(fixed_latency(1000.0)),
        ..NvmeConfig::default()
    });
    let mut r = rng();
    let _ = d.submit(SimTime::ZERO, 0, 1, &mut r);
    let _ = d.submit(us(5), 0, 2, &mut r);
}

#[test]
fn a_full_queue_refuses_commands_and_counts_them() {
    let mut d = drive(NvmeConfig {
        queue_entries: 4,
        ..NvmeConfig::default()
    });
    let mut r = rng();
    for tag in 0..3 {
        assert_eq!(
            d.submit(SimTime::ZERO, 0, tag, &mut r),
            NvmeSubmitOutcome::Accepted
        );
    }
    assert_eq!(
        d.submit(SimTime::ZERO, 0, 3, &mut r),
        NvmeSubmitOutcome::QueueFull
    );
    run_until(&mut d, SimTime::MAX);
    assert_eq!(
        d.submit(us(100), 0, 3, &mut r),
        NvmeSubmitOutcome::QueueFull,
        "entries in the CQ still hold their slots"
    );
    d.reap(0, 1, &mut Vec::new());
    assert_eq!(d.submit(us(100), 0, 3, &mut r), NvmeSubmitOutcome::Accepted);
    assert_eq!(d.counters(0).rejected_queue_full, 2);
    d.check_conservation();
}

#[test]
fn config_errors_name_the_field_and_toml_uses_defaults() {
    let e = NvmeConfig {
        coalescing: Coalescing {
            threshold: 256,
            time_100us: 1,
        },
        ..NvmeConfig::default()
    }
    .validate("nvme[1]")
    .unwrap_err();
    assert!(
        e.to_string().contains("nvme[1].coalescing.threshold"),
        "{e}"
    );
    let e = NvmeConfig {
        queues: 2,
        vector_coalescing: vec![VectorCoalescing {
            vector: 2,
            threshold: 1,
            time_100us: 1,
        }],
        ..NvmeConfig::default()
    }
    .validate("n")
    .unwrap_err();
    assert!(
        e.to_string().contains("n.vector_coalescing[0].vector"),
        "{e}"
    );
    for bad in [
        NvmeConfig {
            queues: 0,
            ..NvmeConfig::default()
        },
        NvmeConfig {
            queue_entries: 1,
            ..NvmeConfig::default()
        },
        NvmeConfig {
            iops_ceiling: Some(f64::INFINITY),
            ..NvmeConfig::default()
        },
        NvmeConfig {
            iops_burst: 0,
            ..NvmeConfig::default()
        },
        NvmeConfig {
            latency_ns: Some(Dist::Exponential { mean: -1.0 }),
            ..NvmeConfig::default()
        },
    ] {
        assert!(bad.validate("n").is_err(), "{bad:?}");
    }
    let c: NvmeConfig = toml::from_str(
        "queues = 4\ncoalescing = { threshold = 7, time_100us = 1 }\n\
         latency_ns = { kind = \"fixed\", value = 80000 }\n",
    )
    .unwrap();
    assert_eq!(c.queue_entries, 1024);
    assert_eq!(c.coalescing_of(3).entries(), 8);
    assert!(toml::from_str::<NvmeConfig>("queus = 4\n").is_err());
    assert!(NvmeHostCosts::default().validate("h").is_ok());
    assert!(NvmeDriveCosts::default().validate("costs.nvme").is_ok());
    let e = NvmeDriveCosts {
        link_gbytes_per_s: 0.0,
        ..NvmeDriveCosts::default()
    }
    .validate("costs.nvme")
    .unwrap_err();
    assert!(
        e.to_string().contains("costs.nvme.link_gbytes_per_s"),
        "{e}"
    );
}

#[test]
fn entries_are_reapable_only_once_landed_and_land_in_write_order() {
    let mut d = drive(NvmeConfig {
        latency_ns: Some(fixed_latency(1000.0)),
        iops_ceiling: Some(1e9),
        ..NvmeConfig::default()
    });
    let mut r = rng();
    for tag in 0..3 {
        let _ = d.submit(SimTime::ZERO, 0, tag, &mut r);
    }
    let mut writes = Vec::new();
    d.advance(ns(1010), &mut writes);
    // Each completion is followed by its MSI (no coalescing), in the drive's order.
    let kinds: Vec<bool> = writes.iter().map(|w| w.msi().is_some()).collect();
    assert_eq!(kinds, [false, true, false, true, false, true]);
    let mut got = Vec::new();
    assert_eq!(d.reap(0, u32::MAX, &mut got), 0, "nothing landed yet");
    assert_eq!((d.cq_len(0), d.cq_in_flight(0)), (0, 3));
    d.land(0);
    d.land(0);
    assert_eq!(d.reap(0, u32::MAX, &mut got), 2);
    assert_eq!(got.iter().map(|e| e.tag).collect::<Vec<_>>(), [0, 1]);
    d.land(0);
    assert_eq!(d.reap(0, u32::MAX, &mut got), 1);
    assert_eq!(got[2].tag, 2);
    d.check_conservation();
}

#[test]
#[should_panic(expected = "never written")]
fn landing_more_than_was_written_is_an_engine_bug() {
    let mut d = drive(NvmeConfig::default());
    d.land(0);
}

#[test]
fn unset_fields_take_the_platform_drive() {
    let platform = NvmeDriveCosts {
        iops_ceiling: 1e6,
        latency_mean_ns: 10_000.0,
        latency_sigma: 0.0,
        ..NvmeDriveCosts::default()
    };
    let mut d = NvmeDrive::new(NvmeConfig::default(), &platform, "n").unwrap();
    let mut r = rng();
    let _ = d.submit(SimTime::ZERO, 0, 0, &mut r);
    let _ = d.submit(SimTime::ZERO, 0, 1, &mut r);
    // Latency 10 us, then one completion per microsecond through the gate.
    assert_eq!(d.next_event(), Some(us(10)));
    let mut msis = Vec::new();
    advance(&mut d, us(10), &mut msis);
    assert_eq!(d.next_event(), Some(us(11)));
    let bad = NvmeDriveCosts {
        iops_ceiling: -1.0,
        ..NvmeDriveCosts::default()
    };
    let e = NvmeDrive::new(NvmeConfig::default(), &bad, "nvme[3]").unwrap_err();
    assert!(e.to_string().contains("nvme[3].iops_ceiling"), "{e}");
}

/// A closed-loop fio-like job per queue, as the lead's host side would run it: keep
/// `iodepth` in flight, reap everything on each MSI at once (no CPU cost), resubmit.
fn closed_loop(cfg: NvmeConfig, iodepth: u32, duration: SimTime) -> (NvmeDrive, u64, u64) {
    let mut d = drive(cfg);
    let mut r = rng();
    let queues = d.queues();
    let mut tag = 0;
    for q in 0..queues {
        for _ in 0..iodepth {
            let _ = d.submit(SimTime::ZERO, q, tag, &mut r);
            tag += 1;
        }
    }
    let (mut msis, mut got) = (Vec::new(), Vec::new());
    let mut reaped = 0;
    while let Some(t) = d.next_event() {
        if t > duration {
            break;
        }
        msis.clear();
        advance(&mut d, t, &mut msis);
        for m in &msis {
            got.clear();
            d.reap(m.vector, u32::MAX, &mut got);
            for _ in &got {
                reaped += 1;
                let _ = d.submit(t, m.vector, tag, &mut r);
                tag += 1;
            }
        }
        d.check_conservation();
    }
    let msis = d.totals().msis;
    (d, reaped, msis)
}

#[test]
fn closed_loop_iops_is_bounded_by_latency_at_low_depth_and_by_the_ceiling_at_high() {
    let cfg = NvmeConfig {
        queues: 4,
        latency_ns: Some(fixed_latency(10_000.0)),
        iops_ceiling: Some(1e6),
        ..NvmeConfig::default()
    };
    let window = SimTime(10 * 1_000_000_000); // 10 ms
                                              // 4 queues x QD1 at 10 us: 400 K IOPS, under the ceiling.
    let (_, reaped, msis) = closed_loop(cfg.clone(), 1, window);
    let iops = reaped as f64 / window.as_secs_f64();
    assert!((iops - 4e5).abs() / 4e5 < 0.01, "{iops}");
    assert_eq!(msis, reaped, "no coalescing: one MSI per I/O");
    // 4 x QD64: demand 25.6 M IOPS, the ceiling holds it at 1 M.
    let (_, reaped, _) = closed_loop(cfg.clone(), 64, window);
    let iops = reaped as f64 / window.as_secs_f64();
    assert!((iops - 1e6).abs() / 1e6 < 0.01, "{iops}");
    // Coalescing 8 entries cuts interrupts per I/O to about 1/8.
    let coalesced = NvmeConfig {
        coalescing: Coalescing {
            threshold: 7,
            time_100us: 1,
        },
        ..cfg
    };
    let (d, reaped, msis) = closed_loop(coalesced, 64, window);
    // Each queue completes 8 entries in 32 us, well inside the 100 us aggregation
    // time, so every MSI is a threshold MSI covering exactly 8 entries, all reaped.
    let t = d.totals();
    assert_eq!(t.msis_timer, 0);
    assert_eq!(t.msis_threshold, msis);
    assert_eq!(msis * 8, reaped, "{msis} MSIs for {reaped} I/Os");
}

#[derive(Clone, Debug)]
enum Op {
    Submit(u16),
    Advance(u64),
    Reap(u16, u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u16..3).prop_map(Op::Submit),
        3 => (0u64..300_000).prop_map(Op::Advance),
        2 => ((0u16..3), (0u32..6)).prop_map(|(q, m)| Op::Reap(q, m)),
    ]
}

proptest! {
    /// Under any host behaviour: conservation after every step; completions respect the
    /// latency floor and the ceiling's spacing; and once the host stops, every entry it
    /// has not consumed gets signalled (nothing is stranded).
    #[test]
    fn conservation_and_no_stranded_entries(
        ops in proptest::collection::vec(op(), 1..200),
        thr in 0u32..4,
        time in 0u32..3,
        seed in any::<u64>(),
    ) {
        let mut d = drive(NvmeConfig {
            queues: 3,
            queue_entries: 8,
            iops_ceiling: Some(5e6),
            latency_ns: Some(Dist::ShiftedExponential { min: 2000.0, mean_above_min: 3000.0 }),
            coalescing: Coalescing { threshold: thr, time_100us: time },
            ..NvmeConfig::default()
        });
        let mut r = rand::rngs::StdRng::seed_from_u64(seed);
        let mut now = SimTime::ZERO;
        let (mut msis, mut got) = (Vec::new(), Vec::new());
        let mut tag = 0;
        let mut refused = 0;
        for op in ops {
            match op {
                Op::Submit(q) => {
                    if d.submit(now, q, tag, &mut r) == NvmeSubmitOutcome::QueueFull {
                        refused += 1;
                        prop_assert_eq!(d.outstanding(q), 7);
                    }
                    tag += 1;
                }
                Op::Advance(dt) => {
                    now = SimTime(now.0 + dt * 1_000);
                    advance(&mut d, now, &mut msis);
                }
                Op::Reap(q, m) => { d.reap(q, m, &mut got); }
            }
            d.check_conservation();
            prop_assert!(d.next_event().is_none_or(|t| t > now));
        }
        let t = d.totals();
        prop_assert_eq!(t.submitted + refused, tag);
        // Drain without reaping: every command completes, every entry is signalled.
        advance(&mut d, SimTime(u64::MAX / 2), &mut msis);
        d.check_conservation();
        let t = d.totals();
        prop_assert_eq!(t.completed, t.submitted);
        prop_assert_eq!(t.completed, t.entries_signalled + t.entries_reaped_unsignalled);
        prop_assert_eq!(msis.iter().map(|m| m.entries as u64).sum::<u64>(), t.entries_signalled);
        prop_assert!(msis.windows(2).all(|w| w[0].at <= w[1].at));
        for q in 0..3 {
            got.clear();
            d.reap(q, u32::MAX, &mut got);
        }
        d.check_conservation();
        prop_assert_eq!(d.totals().reaped, d.totals().submitted);
        prop_assert_eq!(refused, d.totals().rejected_queue_full);
        // Totals are the per-queue counters summed, field by field.
        let fields = |c: NvmeQueueCounters| match serde_json::to_value(c).unwrap() {
            serde_json::Value::Object(m) => m,
            other => panic!("{other}"),
        };
        let total = fields(d.totals());
        for (name, v) in &total {
            let sum: u64 = (0..3).map(|q| fields(d.counters(q))[name].as_u64().unwrap()).sum();
            prop_assert_eq!(v.as_u64().unwrap(), sum, "{}", name);
        }
    }
}

proptest! {
    /// The gate never lets completions closer than 1 / ceiling (burst 1), and none
    /// completes before its submission plus the latency floor.
    #[test]
    fn ceiling_and_latency_floor_hold(
        submits in proptest::collection::vec((0u64..20_000, 0u16..2), 1..100),
        seed in any::<u64>(),
    ) {
        let mut d = drive(NvmeConfig {
            queues: 2,
            iops_ceiling: Some(2e6),
            latency_ns: Some(Dist::ShiftedExponential { min: 1000.0, mean_above_min: 500.0 }),
            ..NvmeConfig::default()
        });
        let mut r = rand::rngs::StdRng::seed_from_u64(seed);
        let mut times: Vec<_> = submits.iter().map(|(t, q)| (ns(*t), *q)).collect();
        times.sort();
        let mut msis = Vec::new();
        for (i, (t, q)) in times.iter().enumerate() {
            advance(&mut d, *t, &mut msis);
            let _ = d.submit(*t, *q, i as u64, &mut r);
        }
        run_until(&mut d, SimTime::MAX);
        let mut got = Vec::new();
        d.reap(0, u32::MAX, &mut got);
        d.reap(1, u32::MAX, &mut got);
        prop_assert_eq!(got.len(), times.len());
        for e in &got {
            prop_assert!(e.posted_at >= e.submitted_at + Duration::from_ns(1000));
        }
        let mut posted: Vec<_> = got.iter().map(|e| e.posted_at).collect();
        posted.sort();
        prop_assert!(posted.windows(2).all(|w| w[1] - w[0] >= Duration::from_ns(500)));
    }
}

/// THR and TIME are 8-bit fields of Set Features FID 08h: 255 is the largest value.
#[test]
fn coalescing_fields_are_eight_bits() {
    let with = |threshold, time_100us| NvmeConfig {
        coalescing: Coalescing {
            threshold,
            time_100us,
        },
        ..NvmeConfig::default()
    };
    assert!(with(255, 255).validate("nvme[0]").is_ok());
    for (thr, time, field) in [
        (256, 0, "nvme[0].coalescing.threshold"),
        (0, 256, "nvme[0].coalescing.time_100us"),
    ] {
        let e = with(thr, time).validate("nvme[0]").unwrap_err().to_string();
        assert!(e.contains(field), "{e}");
    }
}

/// Landed and in-flight CQ entries, per queue and summed over queues.
#[test]
fn landing_counts_and_totals_per_queue() {
    let cfg = NvmeConfig {
        queues: 2,
        latency_ns: Some(fixed_latency(1000.0)),
        ..NvmeConfig::default()
    };
    let mut d = drive(cfg.clone());
    assert_eq!(d.config(), &cfg);
    let mut r = rng();
    for tag in 0..3 {
        assert_eq!(d.submit(ns(0), 0, tag, &mut r), NvmeSubmitOutcome::Accepted);
    }
    assert_eq!(d.submit(ns(0), 1, 9, &mut r), NvmeSubmitOutcome::Accepted);
    let mut writes = Vec::new();
    while let Some(t) = d.next_event() {
        d.advance(t, &mut writes);
    }
    assert_eq!(
        (d.cq_len(0), d.cq_in_flight(0)),
        (0, 3),
        "written, not landed"
    );
    d.land(0);
    assert_eq!((d.cq_len(0), d.cq_in_flight(0)), (1, 2));
    d.land(0);
    d.land(1);
    assert_eq!((d.cq_len(0), d.cq_in_flight(0), d.cq_len(1)), (2, 1, 1));
    let t = d.totals();
    assert_eq!((t.submitted, t.completed), (4, 4));
    assert_eq!(d.counters(0).submitted, 3);
    let msis = writes
        .iter()
        .filter(|w| matches!(w, NvmeWrite::Msi(_)))
        .count() as u64;
    assert_eq!(t.msis, msis);
    assert_eq!(t.msis, d.counters(0).msis + d.counters(1).msis);
}

#[test]
fn link_time_and_host_cost_fields() {
    let c = NvmeDriveCosts {
        link_gbytes_per_s: 8.0,
        ..NvmeDriveCosts::default()
    };
    assert_eq!(c.link_time(4096), Duration::from_ns(512));
    for field in ["submit_cycles", "reap_entry_cycles", "irq_cycles"] {
        let mut h = NvmeHostCosts::default();
        match field {
            "submit_cycles" => h.submit_cycles = -1.0,
            "reap_entry_cycles" => h.reap_entry_cycles = f64::NAN,
            _ => h.irq_cycles = f64::INFINITY,
        }
        let e = h.validate("host").unwrap_err().to_string();
        assert!(e.contains(&format!("host.{field}")), "{e}");
    }
    assert!(NvmeHostCosts::default().validate("host").is_ok());
}

// A queue's submitted count is derived from where its commands are, so a command lost
// from the queue's count shows as one the media holds for no queue.
#[test]
#[should_panic(expected = "media holds every in-device command")]
fn conservation_check_fires_on_a_lost_command() {
    let mut d = drive(NvmeConfig::default());
    let _ = d.submit(ns(0), 0, 1, &mut rng());
    d.queues[0].in_device = 0;
    d.check_conservation();
}

#[test]
fn commands_ready_at_one_instant_complete_in_submission_order() {
    // A 1 M IOPS ceiling with no burst: of two commands ready together, the second
    // waits 1 us at the gate, so the order shows in the completion times as well.
    let mut d = drive(NvmeConfig {
        queues: 2,
        latency_ns: Some(fixed_latency(2000.0)),
        iops_ceiling: Some(1e6),
        iops_burst: 1,
        ..NvmeConfig::default()
    });
    let mut r = rng();
    // Tag and queue order both disagree with submission order.
    for (qid, tag) in [(1, 9), (0, 7), (0, 4)] {
        assert_eq!(
            d.submit(us(1), qid, tag, &mut r),
            NvmeSubmitOutcome::Accepted
        );
    }
    run_until(&mut d, us(100));
    let mut done = Vec::new();
    for qid in [0, 1] {
        let mut out = Vec::new();
        d.reap(qid, 8, &mut out);
        done.extend(out.iter().map(|e| (e.posted_at, qid, e.tag)));
    }
    done.sort();
    let order: Vec<(u16, u64)> = done.iter().map(|&(_, q, t)| (q, t)).collect();
    assert_eq!(order, [(1, 9), (0, 7), (0, 4)], "{done:?}");
    assert!(done.windows(2).all(|w| w[0].0 < w[1].0), "{done:?}");
    d.check_conservation();
}

/// A queue's counters read while its commands are in every place at once: in the
/// media, in the CQ and reaped (the derived counts must add all three).
#[test]
fn counters_count_commands_wherever_they_are() {
    let mut d = drive(NvmeConfig {
        queues: 1,
        queue_entries: 4,
        latency_ns: Some(fixed_latency(1000.0)),
        ..NvmeConfig::default()
    });
    let mut r = rng();
    for tag in 0..2 {
        assert_eq!(d.submit(ns(0), 0, tag, &mut r), NvmeSubmitOutcome::Accepted);
    }
    // `run_until` lands each entry as it is written.
    let msis = run_until(&mut d, us(50));
    assert_eq!(msis.len(), 2);
    let mut out = Vec::new();
    assert_eq!(d.reap(0, 1, &mut out), 1);
    // One entry in the CQ, so two more fit below `queue_entries - 1`; the third does not.
    let outcomes: Vec<_> = (2..5).map(|tag| d.submit(us(60), 0, tag, &mut r)).collect();
    assert_eq!(
        outcomes,
        [
            NvmeSubmitOutcome::Accepted,
            NvmeSubmitOutcome::Accepted,
            NvmeSubmitOutcome::QueueFull
        ]
    );
    let c = d.counters(0);
    assert_eq!(
        (c.submitted, c.completed, c.reaped, c.rejected_queue_full),
        (4, 2, 1, 1),
        "{c:?}"
    );
    assert_eq!(
        (c.msis, c.msis_immediate, c.entries_signalled),
        (2, 2, 2),
        "{c:?}"
    );
    assert_eq!(d.outstanding(0), 3);
    assert_eq!(d.totals(), c);
    d.check_conservation();
}
