//! Tests of the NIC queue: ring drops, throttling, NAPI budget and re-enable, TX, and a
//! property test of packet conservation under random host behaviour.

use super::*;
use crate::arrival::{ArrivalProcess, ArrivalSpec};
use proptest::prelude::*;
use rand::SeedableRng;

fn rng() -> rand::rngs::StdRng {
    rand::rngs::StdRng::seed_from_u64(5)
}

fn us(x: u64) -> SimTime {
    SimTime(x * 1_000_000)
}

fn every_us(n: f64) -> ArrivalGenerator {
    ArrivalGenerator::from_process(ArrivalProcess::Fixed {
        interval_ns: n * 1000.0,
    })
}

fn queue(cfg: NicConfig, rx: Option<ArrivalGenerator>) -> NicQueue {
    NicQueue::new(cfg, "nic[0]", rx, None).unwrap()
}

fn msi_times(effects: &[NicEffect]) -> Vec<SimTime> {
    effects
        .iter()
        .map(|e| match e {
            NicEffect::Msi { at } => *at,
        })
        .collect()
}

fn ring_of_8_unthrottled() -> NicConfig {
    NicConfig {
        rx_ring: 8,
        itr_interval: 0,
        ..NicConfig::default()
    }
}

#[test]
fn a_full_ring_drops_and_counts_and_the_masked_vector_stays_quiet() {
    let cfg = ring_of_8_unthrottled();
    let mut q = queue(cfg, Some(every_us(1.0)));
    let mut r = rng();
    let mut out = Vec::new();
    q.start(SimTime::ZERO, &mut r);
    q.advance(us(20), &mut r, &mut out);
    assert_eq!(msi_times(&out), vec![us(1)], "one MSI, then auto-masked");
    assert!(!q.irq_enabled());
    assert_eq!(q.rx_pending(), 8);
    assert_eq!(out.len(), 1, "drops are counted, not returned: {out:?}");
    assert_eq!(q.counters().rx_dropped_ring_full, 12);
    assert_eq!(q.counters().rx_arrived, 20);
    q.check_conservation();
}

/// Host that polls at once on each MSI and re-enables when under budget.
fn instant_napi(q: &mut NicQueue, until: SimTime, r: &mut rand::rngs::StdRng) -> Vec<SimTime> {
    let mut msis = Vec::new();
    let mut out = Vec::new();
    while let Some(t) = q.next_event() {
        if t > until {
            break;
        }
        out.clear();
        q.advance(t, r, &mut out);
        for NicEffect::Msi { at } in &out {
            msis.push(*at);
            while !q.poll(64, 256).under_budget {}
            q.unmask_irq(*at);
        }
        q.check_conservation();
    }
    msis
}

#[test]
fn throttling_spaces_interrupts_by_the_itr_interval() {
    // 25 units x 2 us = 50 us between interrupts; a packet every microsecond.
    let mut q = queue(NicConfig::default(), Some(every_us(1.0)));
    let mut r = rng();
    q.start(SimTime::ZERO, &mut r);
    let msis = instant_napi(&mut q, us(300), &mut r);
    assert_eq!(
        msis,
        vec![us(1), us(51), us(101), us(151), us(201), us(251)]
    );
    assert_eq!(q.config().itr(), Duration::from_us(50));
    // Unthrottled, every packet interrupts.
    let mut q = queue(
        NicConfig {
            itr_interval: 0,
            ..NicConfig::default()
        },
        Some(every_us(1.0)),
    );
    q.start(SimTime::ZERO, &mut r);
    assert_eq!(instant_napi(&mut q, us(300), &mut r).len(), 300);
}

#[test]
fn napi_keeps_polling_at_budget_and_a_latched_cause_fires_on_reenable() {
    let mut q = queue(
        NicConfig {
            itr_interval: 0,
            ..NicConfig::default()
        },
        None,
    );
    let mut r = rng();
    let mut out = Vec::new();
    // As the engine would: each input at its time, advancing to it first.
    for i in 0..100 {
        q.advance(SimTime(i), &mut r, &mut out);
        assert_eq!(q.rx_packet(SimTime(i)), RxOutcome::Queued);
    }
    q.advance(SimTime(100), &mut r, &mut out);
    assert_eq!(msi_times(&out), vec![SimTime(0)]);
    let p = q.poll(64, 256);
    assert_eq!((p.rx, p.under_budget), (64, false));
    let p = q.poll(64, 256);
    assert_eq!((p.rx, p.under_budget), (36, true));
    // Packets 1..99 arrived after the MSI while masked: the cause is latched.
    assert_eq!(q.unmask_irq(SimTime(200)), Some(SimTime(200)));
    out.clear();
    q.advance(SimTime(200), &mut r, &mut out);
    assert_eq!(msi_times(&out), vec![SimTime(200)]);
    let p = q.poll(64, 256);
    assert_eq!((p.rx, p.under_budget), (0, true));
    assert_eq!(q.counters().polls_empty, 1);
    assert_eq!(q.counters().polls_at_budget, 1);

    // Without the latch, re-enabling with empty rings stays quiet.
    let mut q = queue(
        NicConfig {
            itr_interval: 0,
            cause_latch: false,
            ..NicConfig::default()
        },
        None,
    );
    let _ = q.rx_packet(SimTime(0));
    q.advance(SimTime(0), &mut r, &mut out);
    let _ = q.rx_packet(SimTime(5));
    assert!(q.poll(64, 256).under_budget);
    assert_eq!(q.unmask_irq(SimTime(10)), None);
    q.check_conservation();
}

#[test]
fn tx_leaves_at_wire_speed_completes_and_is_cleaned_by_the_poll() {
    let mut q = queue(
        NicConfig {
            tx_ring: 3,
            itr_interval: 0,
            ..NicConfig::default()
        },
        None,
    );
    let mut r = rng();
    for _ in 0..3 {
        assert_eq!(q.transmit(SimTime::ZERO), TxOutcome::Queued);
    }
    assert_eq!(q.transmit(SimTime::ZERO), TxOutcome::RingFull);
    assert_eq!(q.tx_in_flight(), 3);
    assert_eq!(q.config().tx_ring, 3);
    assert!(q.irq_enabled(), "enabled until its MSI fires");
    assert_eq!(q.next_event(), Some(SimTime(67_200)));
    let mut out = Vec::new();
    q.advance(SimTime(1_000_000), &mut r, &mut out);
    assert_eq!(msi_times(&out), vec![SimTime(67_200)]);
    assert!(!q.irq_enabled(), "the MSI masked the vector");
    assert_eq!(q.tx_in_flight(), 0);
    assert_eq!(q.tx_pending_clean(), 3);
    let p = q.poll(64, 2);
    assert_eq!(
        (p.tx, p.under_budget),
        (2, false),
        "the TX clean limit counts as budget"
    );
    let p = q.poll(64, 2);
    assert_eq!((p.tx, p.under_budget), (1, true));
    assert_eq!(q.counters().tx_rejected_ring_full, 1);
    q.check_conservation();
}

#[test]
fn generated_tx_packets_are_offered_and_rejections_reported() {
    let tx = ArrivalSpec::Fixed { interval_ns: 10.0 }
        .generator("tx", None)
        .unwrap();
    let mut q = NicQueue::new(
        NicConfig {
            tx_ring: 4,
            ..NicConfig::default()
        },
        "nic",
        None,
        Some(tx),
    )
    .unwrap();
    let mut r = rng();
    let mut out = Vec::new();
    q.start(SimTime::ZERO, &mut r);
    q.advance(SimTime(1_000_000), &mut r, &mut out);
    assert!(q.counters().tx_rejected_ring_full > 0);
    assert_eq!(
        out.len() as u64,
        q.counters().msis,
        "refusals are counted, not returned"
    );
    q.check_conservation();
}

#[test]
fn config_errors_name_the_field() {
    let e = NicConfig {
        itr_interval: 512,
        ..NicConfig::default()
    }
    .validate("nic[2]")
    .unwrap_err();
    assert!(e.to_string().contains("nic[2].itr_interval"), "{e}");
    assert!(NicConfig {
        rx_ring: 0,
        ..NicConfig::default()
    }
    .validate("n")
    .is_err());
    assert!(NicConfig {
        itr_granularity_ns: 0.0,
        ..NicConfig::default()
    }
    .validate("n")
    .is_err());
    let e = NapiConfig {
        budget: 0,
        ..NapiConfig::default()
    }
    .validate("napi")
    .unwrap_err();
    assert!(e.to_string().contains("napi.budget"), "{e}");
    let c: NicConfig =
        toml::from_str("itr_granularity_ns = 2000\nitr_max_units = 4080\nitr_interval = 4000\n")
            .unwrap();
    assert!(c.validate("n").is_ok());
    assert!(toml::from_str::<NicConfig>("itr = 3\n").is_err());
    // The interval may equal the maximum.
    let at_max = NicConfig {
        itr_max_units: 100,
        itr_interval: 100,
        ..NicConfig::default()
    };
    assert!(at_max.validate("n").is_ok());
    assert!(NicConfig {
        itr_interval: 101,
        ..at_max
    }
    .validate("n")
    .is_err());
}

#[test]
fn under_overload_napi_stays_in_polling_mode_and_interrupts_per_packet_fall() {
    // 10 Mpps Poisson; the host polls every 10 us with budget 64 (6.4 Mpps capacity).
    let rx = ArrivalSpec::Poisson { rate_per_s: 1e7 }
        .generator("rx", None)
        .unwrap();
    let mut q = queue(
        NicConfig {
            itr_interval: 0,
            ..NicConfig::default()
        },
        Some(rx),
    );
    let mut r = rng();
    let mut out = Vec::new();
    q.start(SimTime::ZERO, &mut r);
    let mut polling = false;
    let mut t = SimTime::ZERO;
    while t < us(10_000) {
        t += Duration::from_us(10);
        q.advance(t, &mut r, &mut out);
        if msi_times(&out).iter().any(|_| true) {
            polling = true;
        }
        out.clear();
        if polling && q.poll(64, 256).under_budget {
            polling = false;
            q.unmask_irq(t);
        }
        q.check_conservation();
    }
    let c = q.counters();
    assert!(c.rx_dropped_ring_full > 0, "overload fills the ring");
    assert!(c.msis < 10, "NAPI never re-enabled: {} MSIs", c.msis);
    assert!(c.rx_polled > 60_000);
}

#[derive(Clone, Debug)]
enum Op {
    Rx,
    Tx,
    Advance(u64),
    Poll(u32, u32),
    Unmask,
    Mask,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Rx),
        2 => Just(Op::Tx),
        3 => (0u64..20_000).prop_map(Op::Advance),
        2 => ((1u32..8), (1u32..8)).prop_map(|(b, t)| Op::Poll(b, t)),
        2 => Just(Op::Unmask),
        1 => Just(Op::Mask),
    ]
}

proptest! {
    /// Under any host behaviour: packets are conserved after every step, the vector never
    /// fires twice without an unmask in between, interrupts are at least ITR apart, and
    /// a host that finally follows NAPI drains every packet.
    #[test]
    fn conservation_throttling_and_drain(
        ops in proptest::collection::vec(op(), 1..300),
        itr in 0u32..4,
        latch in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let cfg = NicConfig {
            rx_ring: 6,
            tx_ring: 4,
            itr_interval: itr,
            itr_granularity_ns: 1000.0,
            tx_wire_ns: 500.0,
            cause_latch: latch,
            ..NicConfig::default()
        };
        let itr_span = cfg.itr();
        let mut q = queue(cfg, None);
        let mut r = rand::rngs::StdRng::seed_from_u64(seed);
        let mut now = SimTime::ZERO;
        let mut out = Vec::new();
        let mut msis: Vec<SimTime> = Vec::new();
        let mut unmasked_since_msi = true;
        for op in ops {
            match op {
                Op::Rx => { let _ = q.rx_packet(now); }
                Op::Tx => { let _ = q.transmit(now); }
                Op::Advance(dt) => {
                    now = SimTime(now.0 + dt * 1_000);
                    out.clear();
                    q.advance(now, &mut r, &mut out);
                    for at in msi_times(&out) {
                        prop_assert!(unmasked_since_msi, "fired twice without an unmask");
                        if let Some(last) = msis.last() {
                            prop_assert!(at - *last >= itr_span);
                        }
                        msis.push(at);
                        unmasked_since_msi = false;
                    }
                }
                Op::Poll(b, t) => { q.poll(b, t); }
                Op::Unmask => {
                    if !q.irq_enabled() { unmasked_since_msi = true; }
                    q.unmask_irq(now);
                }
                Op::Mask => q.mask_irq(),
            }
            q.check_conservation();
            prop_assert_eq!(q.counters().msis as usize, msis.len());
        }
        // The host now follows NAPI: one scheduled poll (the random phase may have
        // re-enabled without polling), then on each MSI poll until under budget and
        // re-enable.
        while !q.poll(4, 4).under_budget {}
        q.unmask_irq(now);
        let mut steps = 0;
        while let Some(t) = q.next_event() {
            steps += 1;
            prop_assert!(steps < 10_000);
            out.clear();
            q.advance(t, &mut r, &mut out);
            if !msi_times(&out).is_empty() {
                while !q.poll(4, 4).under_budget {}
                q.unmask_irq(t);
            }
        }
        q.check_conservation();
        prop_assert_eq!(q.rx_pending(), 0, "no packet stranded in the ring");
        prop_assert_eq!(q.tx_pending_clean(), 0);
        prop_assert_eq!(q.tx_in_flight(), 0);
    }
}

/// With `cause_latch = false` the device looks at its rings when re-enabled: TX
/// completions alone are work and fire an MSI; empty rings fire none. Unmasks are
/// counted only when the vector was masked; empty polls are counted.
#[test]
fn unmask_without_a_latch_looks_at_the_rings() {
    let cfg = NicConfig {
        tx_ring: 4,
        itr_interval: 0,
        cause_latch: false,
        ..NicConfig::default()
    };
    let mut q = queue(cfg.clone(), None);
    let mut r = rng();
    let mut out = Vec::new();
    assert_eq!(q.transmit(SimTime::ZERO), TxOutcome::Queued);
    q.advance(SimTime(1_000_000), &mut r, &mut out);
    assert_eq!(msi_times(&out).len(), 1, "{out:?}");
    assert_eq!(q.tx_pending_clean(), 1);
    let due = q.unmask_irq(SimTime(1_000_000));
    assert_eq!(
        due,
        Some(SimTime(1_000_000)),
        "a TX completion waits: fire at once"
    );
    assert_eq!(q.counters().unmasks, 1);
    let _ = q.unmask_irq(SimTime(1_000_000));
    assert_eq!(q.counters().unmasks, 1, "already enabled: not an unmask");

    let mut idle = queue(cfg, None);
    idle.mask_irq();
    assert!(!idle.irq_enabled());
    assert_eq!(idle.unmask_irq(SimTime(5)), None, "nothing in the rings");
    let p = idle.poll(64, 256);
    assert_eq!((p.rx, p.tx), (0, 0));
    assert_eq!((idle.counters().polls, idle.counters().polls_empty), (1, 1));
}

/// A masked vector raises no MSI for work that arrives while it is masked.
#[test]
fn a_masked_vector_raises_nothing() {
    let mut q = queue(
        NicConfig {
            itr_interval: 0,
            ..NicConfig::default()
        },
        None,
    );
    q.mask_irq();
    let _ = q.rx_packet(SimTime(0));
    let mut out = Vec::new();
    q.advance(SimTime(1_000_000), &mut rng(), &mut out);
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(q.counters().msis, 0);
}

#[test]
#[should_panic(expected = "RX: arrived = dropped + in ring + polled")]
fn conservation_check_fires_on_a_lost_packet() {
    let mut q = queue(NicConfig::default(), None);
    let _ = q.rx_packet(SimTime(0));
    q.rx_ring.clear();
    q.check_conservation();
}

#[test]
#[should_panic(expected = "was not advanced")]
fn input_before_a_due_event_was_advanced_is_a_schedule_bug() {
    let mut q = queue(NicConfig::default(), Some(every_us(1.0)));
    q.start(SimTime::ZERO, &mut rng());
    let _ = q.rx_packet(us(5));
}

fn picosecond_bursts() -> ArrivalGenerator {
    let spec: ArrivalSpec = toml::from_str(
        r#"kind = "bursts"
burst_len = { kind = "fixed", value = 16 }
gap_ns = { kind = "fixed", value = 0.001 }
spacing_ns = 0.0"#,
    )
    .unwrap();
    spec.generator("nics[0].rx", None).unwrap()
}

#[test]
fn a_full_ring_parks_its_arrivals_and_counts_every_drop() {
    // 16 packets every picosecond into a ring of 8 that nobody polls: 16e6 arrivals
    // in 1 us, all but 8 dropped, and the queue wakes for none of the drops.
    let cfg = ring_of_8_unthrottled();
    let mut q = queue(cfg, Some(picosecond_bursts()));
    let mut r = rng();
    let mut out = Vec::new();
    q.start(SimTime::ZERO, &mut r);
    let mut wakes = 0;
    while let Some(t) = q.next_event().filter(|t| *t <= us(1)) {
        q.advance(t, &mut r, &mut out);
        wakes += 1;
    }
    assert!(wakes <= 2, "{wakes} wake-ups for a parked ring");
    assert_eq!(
        q.counters().rx_arrived,
        16,
        "drops after the first wake are owed"
    );
    let c = q.counters_through(us(1), &r);
    assert_eq!(c.rx_arrived, 16 * 1_000_000);
    assert_eq!(c.rx_dropped_ring_full, 16 * 1_000_000 - 8);
    // Reading did not settle; advancing does, to the same figures.
    q.advance(us(1), &mut r, &mut out);
    assert_eq!(q.counters(), c);
    q.check_conservation();
}

/// A ring of 8 fed a packet every microsecond, advanced to 8 us: full, its MSI fired
/// (so the vector is masked), its arrivals parked.
fn full_parked_ring() -> (NicQueue, rand::rngs::StdRng) {
    let mut q = queue(ring_of_8_unthrottled(), Some(every_us(1.0)));
    let mut r = rng();
    q.start(SimTime::ZERO, &mut r);
    q.advance(us(8), &mut r, &mut Vec::new());
    (q, r)
}

#[test]
fn a_poll_unparks_the_ring_after_its_drops_are_settled() {
    let (mut q, mut r) = full_parked_ring();
    let mut out = Vec::new();
    assert_eq!(q.rx_pending(), 8);
    assert_eq!(
        q.next_event(),
        None,
        "the MSI fired and masked itself, and a full ring wakes for no arrival"
    );
    // Drops at 9..=20 us, then a poll at 20 us frees the ring.
    q.settle_rx(us(20), &mut r);
    assert_eq!(q.counters().rx_dropped_ring_full, 12);
    assert_eq!(q.poll(64, 256).rx, 8);
    assert_eq!(
        q.next_event(),
        Some(us(21)),
        "the next arrival after the poll"
    );
    out.clear();
    q.advance(us(21), &mut r, &mut out);
    assert_eq!(q.rx_pending(), 1, "the arrival at 21 us found room");
    assert_eq!(q.counters().rx_arrived, 21);
    q.check_conservation();
}

#[test]
fn a_shared_wire_completes_each_packet_at_its_time_but_never_before_the_one_ahead() {
    let mut q = queue(
        NicConfig {
            tx_ring: 4,
            itr_interval: 0,
            ..NicConfig::default()
        },
        None,
    );
    let mut r = rng();
    assert!(q.tx_has_room());
    // The caller's schedule: 5 us, then 3 us (not before the packet ahead), then 9 us.
    for done in [5, 3, 9] {
        assert_eq!(q.transmit_done_at(us(1), us(done)), TxOutcome::Queued);
        assert!(
            q.tx_has_room(),
            "{} of 4 descriptors used",
            q.tx_in_flight()
        );
    }
    assert_eq!(q.transmit_done_at(us(1), us(2)), TxOutcome::Queued);
    assert!(!q.tx_has_room(), "4 of 4 in flight");
    assert_eq!(q.transmit_done_at(us(1), us(2)), TxOutcome::RingFull);
    let c = q.counters();
    assert_eq!((c.tx_offered, c.tx_rejected_ring_full), (5, 1));
    assert_eq!(q.next_event(), Some(us(5)));

    // The first two complete together at 5 us; their MSI masks the vector.
    let mut out = Vec::new();
    assert_eq!(q.advance(us(5), &mut r, &mut out), Some(us(9)));
    assert_eq!(msi_times(&out), vec![us(5)]);
    assert_eq!((q.tx_in_flight(), q.tx_pending_clean()), (2, 2));
    assert!(
        !q.tx_has_room(),
        "completed descriptors hold the ring until cleaned"
    );
    assert_eq!(q.transmit_done_at(us(5), us(6)), TxOutcome::RingFull);
    assert_eq!(q.poll(64, 1).tx, 1);
    assert!(q.tx_has_room(), "3 of 4 after one clean");
    assert_eq!(q.transmit_done_at(us(5), us(6)), TxOutcome::Queued);
    assert!(!q.tx_has_room());

    // The one queued at 6 us waits for the 9 us one ahead of it; the last at 9 us too.
    out.clear();
    q.advance(us(9), &mut r, &mut out);
    assert_eq!((q.tx_in_flight(), q.tx_pending_clean()), (0, 4));
    assert_eq!(q.counters().tx_sent, 5);
    assert_eq!(q.counters().tx_offered, 7);
    q.check_conservation();
}

#[test]
fn an_empty_poll_of_a_full_parked_ring_leaves_it_parked() {
    let (mut q, _) = full_parked_ring();
    assert_eq!((q.rx_pending(), q.next_event()), (8, None));
    // A poll with no RX budget takes nothing and frees no room: still no wake-up for
    // arrivals that could only be dropped.
    let p = q.poll(0, 64);
    assert_eq!((p.rx, p.tx, p.under_budget), (0, 0, false));
    assert_eq!(q.next_event(), None);
    assert_eq!(q.counters().polls_empty, 1);
    assert_eq!(q.counters().polls_at_budget, 1);
    q.check_conservation();
}
