//! Affinity changes of posted interrupts in `System` (scenario `[[migrations]]`):
//! the IRTE moves to another CPU while posts are in flight, and the old CPU's
//! vector cleanup frees the old vector, checking IRR only (before Linux commit
//! ce0a92871179) or IRR and PIR (after it).

use irqsim::kernel::migration::MigrationCleanup;
use irqsim::{Report, Scenario, System};

fn scenario(seed: u64, cleanup: MigrationCleanup, delay_us: f64) -> Scenario {
    let text = format!(
        r#"
duration_us = 2000
mode = "posted"
seed = {seed}
vector_cleanup = "{}"
[cpus]
count = 2
[[devices]]
kind = "dsa"
name = "q0"
vector = 0x21
cpu = 0
arrival = {{ kind = "poisson", rate_per_s = 4e6 }}
[[migrations]]
device = "q0"
to_cpu = 1
at_us = 500
cleanup_delay_us = {delay_us}
"#,
        cleanup.name()
    );
    Scenario::from_toml_str(&text, "migration.toml").unwrap()
}

fn run(sc: &Scenario) -> Report {
    let r = System::run_scenario(sc).unwrap_or_else(|e| panic!("seed {}: {e}", sc.seed));
    assert!(r.msis.balanced, "seed {}: {:?}", sc.seed, r.msis);
    r
}

fn lost(r: &Report) -> u64 {
    r.msis.dropped.get("vector_freed").copied().unwrap_or(0)
}

#[test]
fn the_interrupt_moves_and_the_new_cpu_handles_it() {
    let r = run(&scenario(1, MigrationCleanup::IrrAndPir, 1000.0));
    let m = r.migrations.as_ref().expect("a migrations report");
    assert_eq!(m.vector_cleanup, "irr-and-pir");
    let mv = &m.moves[0];
    assert_eq!((mv.from_cpu, mv.to_cpu), (0, 1));
    assert_eq!(mv.to_vector, "0x21", "the first free vector on CPU 1");
    // Freed at the first cleanup, one jiffy after the IRTE write.
    assert_eq!(mv.cleanup_attempts, 1);
    assert_eq!(mv.freed_at_ns, Some(1_500_000.0));
    // Both CPUs handled MSIs: CPU 0 before 500 us, CPU 1 after.
    assert!(
        r.cpu[0].handler_calls > 500 && r.cpu[1].handler_calls > 1000,
        "{:?}",
        (r.cpu[0].handler_calls, r.cpu[1].handler_calls)
    );
    assert_eq!(lost(&r), 0);
}

#[test]
fn a_cleanup_that_checks_only_irr_can_free_a_vector_still_in_the_old_pir() {
    // A cleanup run as soon as 0.2 us after the IRTE write (an old kernel's cleanup
    // IPI, not the one-jiffy timer) can find an MSI between its post into CPU 0's
    // descriptor and the notification's arrival.
    let broken = run(&scenario(1, MigrationCleanup::IrrOnly, 0.2));
    assert_eq!(lost(&broken), 1, "{:?}", broken.msis);
    assert_eq!(broken.migrations.as_ref().unwrap().dispatched_after_free, 1);
    let fixed = run(&scenario(1, MigrationCleanup::IrrAndPir, 0.2));
    assert_eq!(lost(&fixed), 0, "{:?}", fixed.msis);
    // The fixed cleanup found the vector pending and ran again.
    assert!(fixed.migrations.as_ref().unwrap().moves[0].cleanup_attempts >= 2);
}

#[test]
fn the_fixed_cleanup_loses_nothing_at_any_delay_and_the_jiffy_hides_the_race() {
    for seed in 1..=8 {
        for delay in [0.05, 0.1, 0.2, 0.3, 0.5, 1000.0] {
            let r = run(&scenario(seed, MigrationCleanup::IrrAndPir, delay));
            assert_eq!(lost(&r), 0, "seed {seed}, delay {delay} us");
        }
        // With Linux's one-jiffy timer the old vector's MSIs are long handled.
        let r = run(&scenario(seed, MigrationCleanup::IrrOnly, 1000.0));
        assert_eq!(lost(&r), 0, "seed {seed}");
    }
}

#[test]
fn migration_fields_are_checked_by_name() {
    type Spoil = fn(&mut Scenario);
    let cases: [(&str, Spoil); 5] = [
        ("migrations[0].device", |sc| {
            sc.migrations[0].device = "nope".into()
        }),
        ("migrations[0].to_cpu", |sc| sc.migrations[0].to_cpu = 2),
        ("migrations[0].at_us", |sc| sc.migrations[0].at_us = -1.0),
        ("migrations[0].cleanup_delay_us", |sc| {
            sc.migrations[0].cleanup_delay_us = f64::INFINITY
        }),
        ("migrations", |sc| sc.mode = irqsim::DeliveryMode::Remapped),
    ];
    for (field, spoil) in cases {
        let mut sc = scenario(1, MigrationCleanup::IrrAndPir, 1000.0);
        spoil(&mut sc);
        let err = System::new(&sc).err().expect("refused");
        assert_eq!(err.field(), Some(field), "{err}");
    }
    // A move to the CPU the device already targets: Linux would move nothing.
    let mut sc = scenario(1, MigrationCleanup::IrrAndPir, 1000.0);
    sc.migrations[0].to_cpu = 0;
    let err = System::new(&sc).err().expect("refused");
    assert_eq!(err.field(), Some("migrations[0].to_cpu"), "{err}");
    assert!(err.to_string().contains("nothing would move"), "{err}");
    let mut sc = scenario(1, MigrationCleanup::IrrAndPir, 1000.0);
    sc.migrations.push(sc.migrations[0].clone());
    let err = System::new(&sc).err().expect("refused");
    assert!(
        err.to_string().contains("one migration per device"),
        "{err}"
    );
}
