//! Whole-scenario throughput: the embedded default scenario (posted MSI, 4 DSA queues,
//! one CPU) and the posted-vs-remapped experiment's highest rate, reported as
//! simulated MSIs per wall-clock second (divan's items/s).

use divan::counter::ItemsCount;
use divan::Bencher;
use irqsim::experiments::posted_vs_remapped;
use irqsim::{DeliveryMode, Scenario, System};

fn main() {
    divan::main();
}

fn msis_of(sc: &Scenario) -> u64 {
    System::run_scenario(sc).unwrap().msis.generated
}

#[divan::bench(sample_count = 20)]
fn default_scenario(b: Bencher) {
    let sc = Scenario::from_toml_str(irqsim::scenarios::embedded("default").unwrap(), "default")
        .unwrap();
    b.counter(ItemsCount::new(msis_of(&sc)))
        .bench_local(|| System::run_scenario(&sc).unwrap().msis.handled);
}

#[divan::bench(args = ["posted", "remapped"], sample_count = 20)]
fn highest_rate_point(b: Bencher, mode: &str) {
    let mode = if mode == "posted" {
        DeliveryMode::Posted
    } else {
        DeliveryMode::Remapped
    };
    let rate = *posted_vs_remapped::RATES_MPS.last().unwrap();
    let sc = posted_vs_remapped::scenario(mode, rate, 1);
    b.counter(ItemsCount::new(msis_of(&sc)))
        .bench_local(|| System::run_scenario(&sc).unwrap().msis.handled);
}
