//! Scenario builders shared by the integration tests.
#![allow(dead_code)]

use irqsim::Scenario;

/// One CPU, `queues` DSA queues on vectors 0x21.., aggregate Poisson `rate_per_s`.
pub fn dsa_scenario(
    mode: &str,
    rate_per_s: f64,
    queues: u32,
    duration_us: f64,
    seed: u64,
) -> Scenario {
    let mut toml = format!("duration_us = {duration_us}\nmode = \"{mode}\"\n[cpus]\ncount = 1\n");
    for q in 0..queues {
        toml.push_str(&format!(
            "[[devices]]\nkind = \"dsa\"\nvector = {}\ncpu = 0\narrival = {{ kind = \"poisson\", rate_per_s = {} }}\n",
            0x21 + q,
            rate_per_s / queues as f64
        ));
    }
    let mut sc = Scenario::from_toml_str(&toml, "test").expect("test scenario parses");
    // Set after parsing: TOML integers are i64, seeds use the whole u64 range.
    sc.seed = seed;
    sc
}

/// One CPU, `queues` closed-loop DSA work queues on vectors 0x21, 0x61, 0xa1, 0xe1, ...
pub fn closed_loop_scenario(
    mode: &str,
    queues: u32,
    inflight: u32,
    shared: bool,
    depth: u32,
    seed: u64,
) -> Scenario {
    let mut toml = format!("duration_us = 300\nmode = \"{mode}\"\n");
    for q in 0..queues {
        toml.push_str(&format!(
            "[[devices]]\nkind = \"dsa\"\nvector = {}\ncpu = 0\nclosed_loop = {{ inflight = {inflight}, wq = {{ mode = \"{}\", depth = {depth}, engines = 2 }} }}\n",
            0x21 + (q % 4) * 0x40 + q / 4,
            if shared { "shared" } else { "dedicated" },
        ));
    }
    let mut sc = Scenario::from_toml_str(&toml, "test").expect("test scenario parses");
    sc.seed = seed;
    sc
}
