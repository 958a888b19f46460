use super::*;
use rand::SeedableRng;

#[test]
fn skipping_a_fixed_process_or_a_burst_matches_stepping_it() {
    let fixed_bursts = |len: u32, gap_ns: f64, spacing_ns: f64| {
        format!(
            "kind = \"bursts\"\nburst_len = {{ kind = \"fixed\", value = {len} }}\n\
             gap_ns = {{ kind = \"fixed\", value = {gap_ns:?} }}\nspacing_ns = {spacing_ns:?}"
        )
    };
    let mut specs = vec![
        r#"kind = "fixed"
interval_ns = 3.3"#
            .to_string(),
        r#"kind = "bursts"
burst_len = { kind = "geometric", mean = 6 }
gap_ns = { kind = "exponential", mean = 20 }
spacing_ns = 0.0"#
            .to_string(),
        r#"kind = "poisson"
rate_per_s = 1e9"#
            .to_string(),
        // Random bursts with spacing: the untils below fall inside bursts, where only
        // the events up to `until` may be counted.
        r#"kind = "bursts"
burst_len = { kind = "geometric", mean = 40 }
gap_ns = { kind = "exponential", mean = 20 }
spacing_ns = 1.5"#
            .to_string(),
    ];
    // ON/OFF: fixed spacing in closed form; Poisson stretches below the bulk
    // threshold are stepped.
    specs.push(
        "kind = \"on_off\"\nrate_per_s = 1e11\nspacing = \"fixed\"\n\
         on_ns = { kind = \"exponential\", mean = 50 }\noff_ns = { kind = \"fixed\", value = 30 }"
            .to_string(),
    );
    specs.push(
        "kind = \"on_off\"\nrate_per_s = 1e9\n\
         on_ns = { kind = \"uniform\", low = 10, high = 400 }\noff_ns = { kind = \"exponential\", mean = 30 }"
            .to_string(),
    );
    // Bursts counted in closed form: 1 ps gaps, spaced bursts, single events.
    for (len, gap, spacing) in [
        (4, 0.001, 0.0),
        (5, 7.3, 1.1),
        (1, 2.5, 0.0),
        (1000, 50.0, 0.5),
    ] {
        specs.push(fixed_bursts(len, gap, spacing));
    }
    // Fixed ON and OFF periods: ON periods end on multiples of 80 ns plus 50 ns,
    // where an event of the 10 ps spacing would fall, so some `until` below hit
    // an end, an event, the middle of an ON period and an OFF period.
    specs.push(
        "kind = \"on_off\"\nrate_per_s = 1e11\nspacing = \"fixed\"\n\
         on_ns = { kind = \"fixed\", value = 50 }\noff_ns = { kind = \"fixed\", value = 30 }"
            .to_string(),
    );
    let untils = [
        2_000_000, 1_650_000, 1_650_010, 1_649_990, 1_625_005, 1_670_000, 1_730_000,
    ];
    for text in &specs {
        for until in untils.map(SimTime) {
            let spec: ArrivalSpec = toml::from_str(text).unwrap();
            let mut a = spec.generator("x", None).unwrap();
            let mut b = a.clone();
            let (mut ra, mut rb) = (
                rand::rngs::StdRng::seed_from_u64(9),
                rand::rngs::StdRng::seed_from_u64(9),
            );
            a.restart(SimTime::ZERO);
            b.restart(SimTime::ZERO);
            let first = a.next_arrival(&mut ra).unwrap();
            assert_eq!(b.next_arrival(&mut rb), Some(first));
            let (n, next) = a.skip_through(first, until, &mut ra);
            let mut m = 1;
            let mut t = b.next_arrival(&mut rb);
            while t.is_some_and(|t| t <= until) {
                m += 1;
                t = b.next_arrival(&mut rb);
            }
            assert_eq!((n, next), (m, t), "{text} through {until:?}");
            assert_eq!(a.emitted(), b.emitted(), "{text} through {until:?}");
        }
    }
}

/// Random numbers drawn through it, to tell a bulk count from stepping.
struct CountingRng(rand::rngs::StdRng, u64);

impl rand::RngCore for CountingRng {
    fn next_u32(&mut self) -> u32 {
        self.1 += 1;
        self.0.next_u32()
    }
    fn next_u64(&mut self) -> u64 {
        self.1 += 1;
        self.0.next_u64()
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        self.1 += 1;
        self.0.fill_bytes(dest)
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
        self.1 += 1;
        self.0.try_fill_bytes(dest)
    }
}

/// An overloaded Poisson ON/OFF source is counted an ON period at a time: a
/// million events in 10 periods take a few draws per period, not one per event.
#[test]
fn a_busy_poisson_on_off_source_is_counted_a_period_at_a_time() {
    let text = "kind = \"on_off\"\nrate_per_s = 1e12\n\
                on_ns = { kind = \"fixed\", value = 100000 }\n\
                off_ns = { kind = \"fixed\", value = 100000 }";
    let spec: ArrivalSpec = toml::from_str(text).unwrap();
    let mut g = spec.generator("x", None).unwrap();
    let mut rng = CountingRng(rand::rngs::StdRng::seed_from_u64(3), 0);
    g.restart(SimTime::ZERO);
    let first = g.next_arrival(&mut rng).unwrap();
    let until = SimTime(2_000_000_000); // 2 ms: 10 ON periods of 10^8 events
    let (n, _) = g.skip_through(first, until, &mut rng);
    assert!((n as f64 - 1e9).abs() < 1e6, "{n} events");
    assert!(rng.1 < 1_000, "{} draws for {n} events", rng.1);
}

/// Counts through `until` of `trials` runs, by skipping (`skip`) or by stepping.
fn counts_through(text: &str, until: SimTime, trials: u64, skip: bool) -> Vec<f64> {
    let spec: ArrivalSpec = toml::from_str(text).unwrap();
    (0..trials)
        .map(|seed| {
            let mut g = spec.generator("x", None).unwrap();
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            g.restart(SimTime::ZERO);
            let first = g.next_arrival(&mut rng).unwrap();
            if skip {
                let (n, next) = g.skip_through(first, until, &mut rng);
                assert!(next.is_some_and(|t| t > until), "{text}");
                assert_eq!(g.emitted(), n + 1, "the counted ones and the next: {text}");
                return n as f64;
            }
            let mut n = 1;
            while g.next_arrival(&mut rng).is_some_and(|t| t <= until) {
                n += 1;
            }
            n as f64
        })
        .collect()
}

fn mean_and_variance(xs: &[f64]) -> (f64, f64) {
    let m = xs.iter().sum::<f64>() / xs.len() as f64;
    let v = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64;
    (m, v)
}

/// Random bursts past the bulk threshold are counted in one draw, and ON/OFF
/// sources in one draw per period; the counts must spread as event-by-event
/// stepping spreads them, in mean and in variance, with and without spacing
/// inside a burst.
#[test]
fn bulk_counts_of_random_bursts_match_stepping_in_mean_and_spread() {
    let until = SimTime(1_000_000);
    for text in [
        "kind = \"bursts\"\nburst_len = { kind = \"geometric\", mean = 4 }\n\
         gap_ns = { kind = \"exponential\", mean = 0.01 }\nspacing_ns = 0.0",
        "kind = \"bursts\"\nburst_len = { kind = \"uniform\", low = 1, high = 9 }\n\
         gap_ns = { kind = \"lognormal\", mean = 0.05, sigma = 1.0 }\nspacing_ns = 0.002",
        // ON/OFF: a Poisson count per ON period.
        "kind = \"on_off\"\nrate_per_s = 1e10\n\
         on_ns = { kind = \"exponential\", mean = 100 }\noff_ns = { kind = \"exponential\", mean = 50 }",
    ] {
        let bulk = counts_through(text, until, 2000, true);
        let stepped = counts_through(text, until, 64, false);
        let (bm, bv) = mean_and_variance(&bulk);
        let (sm, sv) = mean_and_variance(&stepped);
        // The stepped mean is known to within its standard error, plus 0.2% for
        // stepping rounding each gap to whole picoseconds (the draw uses the
        // nominal mean).
        let tolerance = 4.0 * (sv / stepped.len() as f64).sqrt() + 2e-3 * sm;
        assert!((bm - sm).abs() < tolerance, "{text}: mean {bm} vs {sm}");
        // 64 samples estimate a variance to about 18% (one sigma).
        assert!(bv / sv > 0.5 && bv / sv < 1.8, "{text}: variance {bv} vs {sv}");
    }
}

/// The bulk draw's spread is the renewal-reward variance `W * Var(L - r*C) / E[C]`,
/// worked out here by hand for two sources. Each makes one of its two terms
/// dominant, so a wrong operator in either moves the variance by far more than the
/// 1% standard error of 20,000 draws. (The comparison with stepping above has only
/// 64 stepped samples, too few to see a 10% error.)
#[test]
fn the_spread_of_bulk_burst_counts_is_the_renewal_reward_variance() {
    let until = SimTime(100_000_000); // W = 100,000 ns
    for (text, want_variance) in [
        // Burst length dominates. L geometric, mean 5: Var(L) = 5 * 4 = 20. Gap
        // uniform on 0.9..1.1 ns: Var = 0.2^2 / 12. E[C] = 1 + 4 * 0.1 = 1.4 ns,
        // r = 5 / 1.4 per ns. Var(L - rC) = (1 - 0.1 r)^2 * 20 + r^2 * 0.04 / 12.
        (
            "kind = \"bursts\"\nburst_len = { kind = \"geometric\", mean = 5 }\n\
             gap_ns = { kind = \"uniform\", low = 0.9, high = 1.1 }\nspacing_ns = 0.1",
            {
                let r: f64 = 5.0 / 1.4;
                1e5 * ((1.0 - 0.1 * r).powi(2) * 20.0 + r * r * 0.04 / 12.0) / 1.4
            },
        ),
        // The gap dominates: L fixed at 4, gap exponential with mean 0.5 ns, so
        // Var(gap) = 0.25, r = 8 per ns and Var(L - rC) = 64 * 0.25.
        (
            "kind = \"bursts\"\nburst_len = { kind = \"fixed\", value = 4 }\n\
             gap_ns = { kind = \"exponential\", mean = 0.5 }\nspacing_ns = 0.0",
            1e5 * 64.0 * 0.25 / 0.5,
        ),
    ] {
        let counts = counts_through(text, until, 20_000, true);
        let (_, variance) = mean_and_variance(&counts);
        let ratio = variance / want_variance;
        assert!(
            (ratio - 1.0).abs() < 0.06,
            "{text}: variance {variance} vs {want_variance}"
        );
    }
}

/// Many bursts held back cost one draw: 1 ps gaps for a millisecond are 10^9
/// bursts, counted without stepping, at the process's mean rate.
#[test]
fn a_parked_random_burst_source_counts_a_billion_bursts_at_once() {
    let text = "kind = \"bursts\"\nburst_len = { kind = \"geometric\", mean = 4 }\n\
                gap_ns = { kind = \"exponential\", mean = 0.001 }\nspacing_ns = 0.0";
    let until = SimTime(1_000_000_000);
    let counts = counts_through(text, until, 8, true);
    let (m, _) = mean_and_variance(&counts);
    let want = 4.0 / 0.001 * 1e6;
    assert!((m - want).abs() / want < 1e-3, "{m} vs {want}");
}

#[test]
fn skipping_a_trace_is_a_search_and_ends_with_it() {
    let dir = std::env::temp_dir().join(format!("irqsim-skip-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.csv");
    std::fs::write(&path, "10\n20\n30\n40\n").unwrap();
    let mut g = ArrivalGenerator::load_trace(&path, false).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    g.restart(SimTime::ZERO);
    let first = g.next_arrival(&mut rng).unwrap();
    assert_eq!(
        g.skip_through(first, SimTime(30_000), &mut rng),
        (3, Some(SimTime(40_000)))
    );
    let (n, next) = g.skip_through(SimTime(40_000), SimTime(1_000_000), &mut rng);
    assert_eq!((n, next), (1, None));

    // From a later origin the times shift with it, and the generator counts what
    // it skipped as a generator stepping event by event does.
    let origin = SimTime(100_000);
    let mut stepped = ArrivalGenerator::load_trace(&path, false).unwrap();
    stepped.restart(origin);
    for _ in 0..4 {
        stepped.next_arrival(&mut rng).unwrap();
    }
    g.restart(origin);
    let first = g.next_arrival(&mut rng).unwrap();
    assert_eq!(first, SimTime(110_000));
    assert_eq!(
        g.skip_through(first, SimTime(130_000), &mut rng),
        (3, Some(SimTime(140_000)))
    );
    assert_eq!(g.emitted(), stepped.emitted());
    assert_eq!(g.emitted(), 4);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A bulk Poisson count is the event at `first` plus a Poisson draw for the rest
/// of the span, and the next event follows `until` by one gap.
#[test]
fn a_bulk_poisson_count_is_the_first_event_and_a_draw_for_the_rest() {
    let p = ArrivalProcess::Poisson { rate_per_s: 1e9 };
    let (first, until) = (SimTime(0), SimTime(1_000_000_000));
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let mut twin = rng.clone();
    let (n, next) = p.count_through(first, until, &mut rng).unwrap();
    let expected = 1e9 * 1e-3;
    assert_eq!(n, 1 + poisson_count(expected, &mut twin));
    assert_eq!(next, until + p.next_gap(&mut twin));
}

#[test]
fn mean_rates_of_every_kind() {
    assert_eq!(
        ArrivalProcess::Fixed { interval_ns: 250.0 }.mean_rate_per_s(),
        4e6
    );
    assert_eq!(
        ArrivalProcess::Poisson { rate_per_s: 3e6 }.mean_rate_per_s(),
        3e6
    );
    let bursts = ArrivalSpec::Bursts {
        burst_len: Dist::Fixed { value: 4.0 },
        gap_ns: Dist::Fixed { value: 70.0 },
        spacing_ns: 10.0,
    };
    // 4 events per 3 x 10 ns of spacing plus a 70 ns gap: 4 per 100 ns.
    let r = bursts.mean_rate_per_s().unwrap();
    assert!((r - 4e7).abs() < 1e-3, "{r}");
    let on_off = ArrivalSpec::OnOff {
        rate_per_s: 1e7,
        on_ns: Dist::Fixed { value: 3000.0 },
        off_ns: Dist::Fixed { value: 1000.0 },
        spacing: Spacing::Poisson,
    };
    assert_eq!(on_off.mean_rate_per_s(), Some(7.5e6));
    // A generator states the rate of its spec.
    for spec in [bursts, on_off] {
        let g = spec.generator("a", None).unwrap();
        let (a, b) = (g.mean_rate_per_s(), spec.mean_rate_per_s().unwrap());
        assert!((a - b).abs() < 1e-6 * b, "{spec:?}: {a} vs {b}");
    }
}

/// The bounds are inclusive: a mean gap of exactly 1 ps, an ON mean of exactly
/// 1 ns, exactly 0.001 events per ON period, a burst gap of exactly 1 ps.
#[test]
fn validation_bounds_are_inclusive() {
    assert!(ArrivalProcess::Fixed { interval_ns: 0.001 }
        .validate("a")
        .is_ok());
    assert!(ArrivalProcess::Fixed {
        interval_ns: 0.0009
    }
    .validate("a")
    .is_err());
    assert!(ArrivalProcess::Poisson { rate_per_s: 1e12 }
        .validate("a")
        .is_ok());
    assert!(ArrivalProcess::Poisson { rate_per_s: 1.1e12 }
        .validate("a")
        .is_err());
    let on_off = |rate: f64, on: f64, spacing| ArrivalSpec::OnOff {
        rate_per_s: rate,
        on_ns: Dist::Fixed { value: on },
        off_ns: Dist::Fixed { value: 10.0 },
        spacing,
    };
    assert!(on_off(1e9, 1.0, Spacing::Poisson).validate("a").is_ok());
    assert!(on_off(1e9, 0.999, Spacing::Poisson).validate("a").is_err());
    // 1e3/s for 1000 ns is 0.001 events per period.
    assert!(on_off(1e3, 1000.0, Spacing::Poisson).validate("a").is_ok());
    assert!(on_off(0.9e3, 1000.0, Spacing::Poisson)
        .validate("a")
        .is_err());
    assert!(
        on_off(0.9e3, 1000.0, Spacing::Fixed).validate("a").is_ok(),
        "fixed spacing always has its first event"
    );
    let bursts = |gap: f64, spacing_ns: f64| ArrivalSpec::Bursts {
        burst_len: Dist::Fixed { value: 2.0 },
        gap_ns: Dist::Fixed { value: gap },
        spacing_ns,
    };
    assert!(bursts(1e-3, 0.0).validate("a").is_ok());
    assert!(bursts(0.9e-3, 0.0).validate("a").is_err());
    assert!(bursts(1.0, 1e12).validate("a").is_ok());
    assert!(bursts(1.0, 1.1e12).validate("a").is_err());
}

#[test]
fn fixed_is_exact() {
    let p = ArrivalProcess::fixed_rate(4e6);
    let mut rng = rand::rngs::mock::StepRng::new(0, 1);
    assert_eq!(p.next_gap(&mut rng), Duration::from_ns(250));
}

#[test]
fn poisson_mean_is_close_to_rate() {
    let p = ArrivalProcess::Poisson { rate_per_s: 1e6 };
    let mut rng = rand_pcg_like();
    let n = 20_000;
    let total: u64 = (0..n).map(|_| p.next_gap(&mut rng).as_ps()).sum();
    let mean_ns = total as f64 / n as f64 / 1e3;
    assert!((mean_ns - 1000.0).abs() < 30.0, "mean gap {mean_ns} ns");
}

fn rand_pcg_like() -> rand::rngs::StdRng {
    rand::rngs::StdRng::seed_from_u64(1)
}

#[test]
fn zero_and_negative_rates_are_rejected_with_the_field() {
    let e = ArrivalProcess::Poisson { rate_per_s: 0.0 }
        .validate("devices[2].arrival")
        .unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("devices[2].arrival.rate_per_s"), "{msg}");
    assert!(msg.contains("greater than zero"), "{msg}");
    assert!(ArrivalProcess::Fixed { interval_ns: -1.0 }
        .validate("x")
        .is_err());
    assert!(ArrivalProcess::Fixed {
        interval_ns: f64::NAN
    }
    .validate("x")
    .is_err());
    assert!(ArrivalProcess::Poisson { rate_per_s: 1e13 }
        .validate("x")
        .is_err());
}

fn rng() -> rand::rngs::StdRng {
    rand::rngs::StdRng::seed_from_u64(11)
}

fn spec(toml_text: &str) -> ArrivalSpec {
    #[derive(Deserialize)]
    struct W {
        arrival: ArrivalSpec,
    }
    toml::from_str::<W>(toml_text).unwrap().arrival
}

/// Draws `n` events from `origin` and checks they never go back in time.
fn draw(g: &mut ArrivalGenerator, origin: SimTime, n: usize) -> Vec<SimTime> {
    let mut r = rng();
    g.restart(origin);
    let mut out = Vec::with_capacity(n);
    let mut prev = origin;
    for _ in 0..n {
        let Some(t) = g.next_arrival(&mut r) else {
            break;
        };
        assert!(t >= prev, "went back in time: {t:?} after {prev:?}");
        prev = t;
        out.push(t);
    }
    out
}

#[test]
fn simple_kinds_keep_their_toml_shape_and_match_arrival_process() {
    let s = spec(r#"arrival = { kind = "fixed", interval_ns = 250 }"#);
    assert_eq!(
        s.as_process(),
        Some(ArrivalProcess::Fixed { interval_ns: 250.0 })
    );
    let s = spec(r#"arrival = { kind = "poisson", rate_per_s = 4e6 }"#);
    assert_eq!(
        s,
        ArrivalSpec::from(ArrivalProcess::Poisson { rate_per_s: 4e6 })
    );
    let mut g = ArrivalSpec::Fixed { interval_ns: 250.0 }
        .generator("a", None)
        .unwrap();
    let t = draw(&mut g, SimTime(1_000), 3);
    assert_eq!(
        t,
        vec![SimTime(251_000), SimTime(501_000), SimTime(751_000)]
    );
    assert!(
        toml::from_str::<std::collections::BTreeMap<String, ArrivalSpec>>(
            r#"arrival = { kind = "fixed", interval_ns = 1, burst = 2 }"#
        )
        .is_err(),
        "unknown fields are an error"
    );
}

#[test]
fn on_off_poisson_rate_matches_the_duty_cycle() {
    let s = spec(
        r#"
[arrival]
        kind = "on_off"
        rate_per_s = 1e7
        on_ns = { kind = "exponential", mean = 5000 }
        off_ns = { kind = "exponential", mean = 15000 }
"#,
    );
    let expect = s.mean_rate_per_s().unwrap();
    assert!((expect - 2.5e6).abs() < 1.0);
    let mut g = s.generator("a", None).unwrap();
    let t = draw(&mut g, SimTime::ZERO, 100_000);
    let rate = t.len() as f64 / t.last().unwrap().as_secs_f64();
    assert!((rate - expect).abs() / expect < 0.05, "rate {rate}");
}

#[test]
fn on_off_fixed_spacing_puts_events_only_inside_on_periods() {
    // ON 1000 ns, OFF 9000 ns, 1 event / 300 ns while ON: events at 0, 300, 600, 900
    // of each 10 us cycle.
    let s = spec(
        r#"
[arrival]
        kind = "on_off"
        rate_per_s = 3333333.3333333335
        spacing = "fixed"
        on_ns = { kind = "fixed", value = 1000 }
        off_ns = { kind = "fixed", value = 9000 }
"#,
    );
    let mut g = s.generator("a", None).unwrap();
    let t = draw(&mut g, SimTime::ZERO, 8);
    let ns: Vec<u64> = t.iter().map(|t| t.as_ps() / 1000).collect();
    assert_eq!(ns, vec![0, 300, 600, 900, 10_000, 10_300, 10_600, 10_900]);
}

#[test]
fn bursts_have_the_configured_length_spacing_and_gap() {
    let s = spec(
        r#"
[arrival]
        kind = "bursts"
        spacing_ns = 10
        burst_len = { kind = "fixed", value = 3 }
        gap_ns = { kind = "fixed", value = 1000 }
"#,
    );
    let mut g = s.generator("a", None).unwrap();
    let t = draw(&mut g, SimTime::ZERO, 6);
    let ns: Vec<u64> = t.iter().map(|t| t.as_ps() / 1000).collect();
    assert_eq!(ns, vec![1000, 1010, 1020, 2020, 2030, 2040]);
    // Mean rate: 3 events per (2 * 10 + 1000) ns.
    assert!((g.mean_rate_per_s() - 3.0 / 1020e-9).abs() < 1.0);
    let geo = spec(
        r#"
[arrival]
        kind = "bursts"
        burst_len = { kind = "geometric", mean = 16 }
        gap_ns = { kind = "exponential", mean = 20000 }
"#,
    );
    let mut g = geo.generator("a", None).unwrap();
    let t = draw(&mut g, SimTime::ZERO, 200_000);
    let rate = t.len() as f64 / t.last().unwrap().as_secs_f64();
    let expect = geo.mean_rate_per_s().unwrap();
    assert!((rate - expect).abs() / expect < 0.05, "{rate} vs {expect}");
}

#[test]
fn trace_replays_from_the_origin_and_ends() {
    let dir = std::env::temp_dir().join(format!("irqsim-arrival-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("rx.csv"), "timestamp_ns\n100\n100\n350\n").unwrap();
    let s = spec(r#"arrival = { kind = "trace", path = "rx.csv" }"#);
    assert_eq!(s.mean_rate_per_s(), None);
    let mut g = s.generator("a", Some(&dir)).unwrap();
    let t = draw(&mut g, SimTime(5_000), 10);
    assert_eq!(
        t,
        vec![SimTime(105_000), SimTime(105_000), SimTime(355_000)]
    );
    assert_eq!(g.emitted(), 3);
    // Restart replays it again.
    assert_eq!(draw(&mut g, SimTime::ZERO, 10).len(), 3);
    // A malformed trace names file and line through DeviceError.
    std::fs::write(dir.join("bad.csv"), "1\n2\nthree\n").unwrap();
    let e = spec(r#"arrival = { kind = "trace", path = "bad.csv" }"#)
        .generator("a", Some(&dir))
        .unwrap_err();
    assert!(e.to_string().contains("bad.csv:3"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn invalid_specs_name_their_field() {
    let e = spec(
        r#"
[arrival]
        kind = "on_off"
        rate_per_s = 1e6
        on_ns = { kind = "fixed", value = 0.5 }
        off_ns = { kind = "fixed", value = 10 }
"#,
    )
    .validate("devices[1].arrival")
    .unwrap_err();
    assert!(e.to_string().contains("devices[1].arrival.on_ns"), "{e}");
    let e = spec(
        r#"
[arrival]
        kind = "on_off"
        rate_per_s = 1
        on_ns = { kind = "fixed", value = 10 }
        off_ns = { kind = "fixed", value = 10 }
"#,
    )
    .validate("a")
    .unwrap_err();
    assert!(e.to_string().contains("a.rate_per_s"), "{e}");
    let e = spec(
        r#"
[arrival]
        kind = "bursts"
        burst_len = { kind = "fixed", value = 4 }
        gap_ns = { kind = "fixed", value = 0 }
"#,
    )
    .validate("a")
    .unwrap_err();
    assert!(e.to_string().contains("a.gap_ns"), "{e}");
    let e = spec(
        r#"
[arrival]
        kind = "bursts"
        burst_len = { kind = "fixed", value = 4 }
        gap_ns = { kind = "exponential", mean = -1 }
"#,
    )
    .validate("a")
    .unwrap_err();
    assert!(e.to_string().contains("a.gap_ns.mean"), "{e}");
    assert!(ArrivalSpec::Trace {
        path: PathBuf::new(),
        rebase: false
    }
    .validate("a")
    .is_err());
}

/// A generator of `text` started at time zero, its seeded stream, and its first event.
fn started(text: &str, seed: u64) -> (ArrivalGenerator, rand::rngs::StdRng, SimTime) {
    let spec: ArrivalSpec = toml::from_str(text).unwrap();
    let mut g = spec.generator("x", None).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    g.restart(SimTime::ZERO);
    let first = g.next_arrival(&mut rng).unwrap();
    (g, rng, first)
}

/// Bursts of a fixed length and gap are counted in closed form, whole cycles at a
/// time: four events every picosecond for a second is 4 x 10^12 events, which no
/// stepping would finish.
#[test]
fn fixed_bursts_count_a_second_of_picosecond_cycles_at_once() {
    let text = "kind = \"bursts\"\nburst_len = { kind = \"fixed\", value = 4 }\n\
                gap_ns = { kind = \"fixed\", value = 0.001 }\nspacing_ns = 0.0";
    let (mut g, mut rng, first) = started(text, 1);
    let until = SimTime(first.as_ps() + 1_000_000_000_000 - 1);
    let (n, next) = g.skip_through(first, until, &mut rng);
    // The first burst, then one burst per ps through the last ps before a whole second.
    assert_eq!(n, 4 * 1_000_000_000_000, "every event of 10^12 bursts");
    assert_eq!(next, Some(SimTime(until.as_ps() + 1)));
}

/// A burst that lands at one instant is taken whole while stepping too: bursts of
/// 10^12 events with random gaps count as fast as bursts of three, and exactly
/// 10^12 / 3 times as many (a fixed length draws nothing, so both see the same gaps).
#[test]
fn stepped_bursts_at_one_instant_are_counted_whole() {
    let count = |len: f64| {
        let text = format!(
            "kind = \"bursts\"\nburst_len = {{ kind = \"fixed\", value = {len:?} }}\n\
             gap_ns = {{ kind = \"exponential\", mean = 1000 }}\nspacing_ns = 0.0"
        );
        let (mut g, mut rng, first) = started(&text, 4);
        g.skip_through(first, SimTime(first.as_ps() + 20_000_000), &mut rng)
    };
    let (small, small_next) = count(3.0);
    let (big, big_next) = count(1e12);
    assert_eq!(small % 3, 0, "{small}");
    assert!(small / 3 > 5, "about 20 bursts in 20 us, got {}", small / 3);
    assert_eq!(big, small / 3 * 1_000_000_000_000);
    assert_eq!(big_next, small_next);
}

/// Fixed spacing is counted in closed form within an ON period too: 10^10 events of
/// a 1 ps spacing up to the middle of one long ON period come back at once, exactly.
#[test]
fn a_fixed_on_off_source_counts_into_an_on_period_in_closed_form() {
    let text = "kind = \"on_off\"\nrate_per_s = 1e12\nspacing = \"fixed\"\n\
                on_ns = { kind = \"fixed\", value = 2e7 }\noff_ns = { kind = \"fixed\", value = 1 }";
    let (mut g, mut rng, first) = started(text, 1);
    let until = SimTime(first.as_ps() + 10_000_000_000); // 10 ms into the 20 ms period
    let (n, next) = g.skip_through(first, until, &mut rng);
    assert_eq!(n, 10_000_000_001, "the first event and one per ps after it");
    assert_eq!(next, Some(SimTime(until.as_ps() + 1)));
}
