//! Bad scenarios get a typed error that names the field, the value and what is
//! allowed, never a panic. One test per rule.

use irqsim::{Scenario, ScenarioError, System};

const BASE: &str = r#"
duration_us = 100
mode = "posted"
[cpus]
count = 2
apic_ids = [0, 2]
[iommu]
irte_entries = 64
[[devices]]
kind = "dsa"
vector = 0x21
cpu = 0
arrival = { kind = "poisson", rate_per_s = 1e6 }
"#;

/// Applies `edit` to the base scenario text, then parses and validates it.
fn check(edit: impl Fn(&str) -> String) -> Result<Scenario, ScenarioError> {
    let text = edit(BASE);
    let sc = Scenario::from_toml_str(&text, "case.toml")?;
    sc.validate()?;
    // Building must agree with validation.
    System::new(&sc)?;
    Ok(sc)
}

fn expect_invalid(edit: impl Fn(&str) -> String, field: &str, value: &str, allowed_hint: &str) {
    match check(edit) {
        Err(e @ ScenarioError::Invalid { .. }) => {
            let msg = e.to_string();
            assert_eq!(e.field(), Some(field), "wrong field in: {msg}");
            assert!(msg.contains(value), "value {value:?} missing from: {msg}");
            assert!(
                msg.contains(allowed_hint),
                "allowed hint {allowed_hint:?} missing from: {msg}"
            );
        }
        other => panic!("expected Invalid for {field}, got {other:?}"),
    }
}

#[test]
fn base_scenario_is_valid() {
    check(|s| s.to_string()).unwrap();
}

#[test]
fn device_vector_below_32() {
    expect_invalid(
        |s| s.replace("vector = 0x21", "vector = 20"),
        "devices[0].vector",
        "20",
        "32..=255",
    );
}

#[test]
fn device_vector_in_system_range_in_posted_mode() {
    expect_invalid(
        |s| s.replace("vector = 0x21", "vector = 0xec"),
        "devices[0].vector",
        "0xec",
        "below 0xeb",
    );
}

#[test]
fn unknown_cpu() {
    expect_invalid(
        |s| s.replace("cpu = 0", "cpu = 5"),
        "devices[0].cpu",
        "5",
        "below cpus.count (2)",
    );
}

#[test]
fn unknown_apic_id() {
    expect_invalid(
        |s| s.replace("cpu = 0", "apic_id = 1"),
        "devices[0].apic_id",
        "1",
        "x2APIC ID of one of",
    );
}

#[test]
fn known_apic_id_is_accepted() {
    check(|s| s.replace("cpu = 0", "apic_id = 2")).unwrap();
}

#[test]
fn irte_index_past_the_table() {
    expect_invalid(
        |s| s.replace("cpu = 0", "cpu = 0\nirte_index = 64"),
        "devices[0].irte_index",
        "64",
        "below iommu.irte_entries (64)",
    );
}

#[test]
fn two_devices_on_one_irte() {
    expect_invalid(
        |s| {
            format!("{s}[[devices]]\nkind = \"dsa\"\nvector = 0x22\ncpu = 1\nirte_index = 0\narrival = {{ kind = \"fixed\", interval_ns = 100.0 }}\n")
        },
        "devices[1].irte_index",
        "0",
        "devices[0] has it",
    );
}

#[test]
fn two_devices_on_one_vector_of_one_cpu() {
    // The second device names CPU 0 by its x2APIC ID, so the rule sees targets, not
    // the field the scenario used.
    let second = |target: &'static str| {
        move |s: &str| {
            format!("{s}[[devices]]\nkind = \"dsa\"\nvector = 0x21\n{target}\narrival = {{ kind = \"fixed\", interval_ns = 100.0 }}\n")
        }
    };
    expect_invalid(
        second("apic_id = 0"),
        "devices[1].vector",
        "0x21",
        "no other device uses on CPU 0 (devices[0] has it)",
    );
    // The same vector on another CPU is another interrupt.
    check(second("cpu = 1")).unwrap();
}

#[test]
fn two_drives_of_one_name_share_a_random_stream() {
    let drive = "[[nvme]]\nname = \"ssd\"\ndrive = { queues = 1 }\n";
    expect_invalid(
        |s| format!("{s}{drive}{drive}"),
        "nvme[1].name",
        "\"ssd\"",
        "nvme[0].name = \"ssd\" already draws from the stream \"ssd\"",
    );
}

#[test]
fn irte_table_not_a_power_of_two() {
    expect_invalid(
        |s| s.replace("irte_entries = 64", "irte_entries = 100"),
        "iommu.irte_entries",
        "100",
        "power of two",
    );
}

#[test]
fn zero_rate() {
    expect_invalid(
        |s| s.replace("rate_per_s = 1e6", "rate_per_s = 0.0"),
        "devices[0].arrival.rate_per_s",
        "0",
        "greater than zero",
    );
}

#[test]
fn negative_interval() {
    expect_invalid(
        |s| {
            s.replace(
                "kind = \"poisson\", rate_per_s = 1e6",
                "kind = \"fixed\", interval_ns = -5.0",
            )
        },
        "devices[0].arrival.interval_ns",
        "-5",
        "greater than zero",
    );
}

#[test]
fn unknown_variant_name() {
    expect_invalid(
        |s| {
            s.replace(
                "mode = \"posted\"",
                "mode = \"posted\"\nvariant = \"copy_then_xchg\"",
            )
        },
        "variant",
        "copy_then_xchg",
        "copy-then-xchg",
    );
}

#[test]
fn misaligned_pid_address() {
    expect_invalid(
        |s| {
            s.replace(
                "apic_ids = [0, 2]",
                "apic_ids = [0, 2]\npid_addresses = [0x1000, 0x1020]",
            )
        },
        "cpus.pid_addresses[1]",
        "0x1020",
        "64-byte aligned",
    );
}

#[test]
fn misaligned_pid_base() {
    expect_invalid(
        |s| s.replace("apic_ids = [0, 2]", "pid_base = 0x1008"),
        "cpus.pid_base",
        "0x1008",
        "64-byte aligned",
    );
}

#[test]
fn duplicate_apic_id() {
    expect_invalid(
        |s| s.replace("apic_ids = [0, 2]", "apic_ids = [2, 2]"),
        "cpus.apic_ids[1]",
        "2",
        "no other CPU has",
    );
}

#[test]
fn zero_duration() {
    expect_invalid(
        |s| s.replace("duration_us = 100", "duration_us = 0"),
        "duration_us",
        "0",
        "greater than zero",
    );
}

#[test]
fn negative_cost() {
    expect_invalid(
        |s| format!("{s}[costs.cpu]\nirq_flow_cycles = -1.0\n"),
        "costs.cpu.irq_flow_cycles",
        "-1",
        "greater than or equal to zero",
    );
}

#[test]
fn zero_cpus() {
    expect_invalid(
        |s| s.replace("count = 2\napic_ids = [0, 2]", "count = 0"),
        "cpus.count",
        "0",
        "1..=65536",
    );
}

#[test]
fn unknown_field_is_a_parse_error_naming_it() {
    let err =
        check(|s| s.replace("duration_us = 100", "duration_us = 100\nduraton_ms = 5")).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ScenarioError::Parse { .. }), "{msg}");
    assert!(
        msg.contains("duraton_ms") && msg.contains("case.toml"),
        "{msg}"
    );
}

#[test]
fn unknown_mode_is_a_parse_error_listing_modes() {
    let msg = check(|s| s.replace("mode = \"posted\"", "mode = \"postd\""))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("postd") && msg.contains("posted") && msg.contains("remapped"),
        "{msg}"
    );
}

#[test]
fn missing_file_is_an_io_error_naming_it() {
    let err = Scenario::load(std::path::Path::new("/nonexistent/x.toml")).unwrap_err();
    assert!(matches!(err, ScenarioError::Io { .. }));
    assert!(err.to_string().contains("/nonexistent/x.toml"));
}

#[test]
fn duration_past_one_hour() {
    expect_invalid(
        |s| s.replace("duration_us = 100", "duration_us = 1e12"),
        "duration_us",
        "1000000000000",
        "one hour",
    );
}

#[test]
fn absurdly_slow_arrivals() {
    expect_invalid(
        |s| s.replace("rate_per_s = 1e6", "rate_per_s = 1e-9"),
        "devices[0].arrival.rate_per_s",
        "0.000000001",
        "at least 0.001 events per second",
    );
}

#[test]
fn absurd_cost_in_a_component_table() {
    expect_invalid(
        |s| format!("{s}[costs.pid_line]\nmemory_ns = 1e300\n"),
        "costs.pid_line.memory_ns",
        "1e300",
        "at most 1e12",
    );
}

#[test]
fn absurd_handler_cost() {
    expect_invalid(
        |s| s.replace("cpu = 0", "cpu = 0\nhandler_cycles = 1e20"),
        "devices[0].handler_cycles",
        "100000000000000000000",
        "at most 1e12",
    );
}

#[test]
fn too_many_cpus() {
    expect_invalid(
        |s| s.replace("count = 2\napic_ids = [0, 2]", "count = 4000000000"),
        "cpus.count",
        "4000000000",
        "1..=65536",
    );
}

#[test]
fn device_with_both_arrival_and_closed_loop() {
    expect_invalid(
        |s| s.replace("cpu = 0", "cpu = 0\nclosed_loop = { inflight = 4 }"),
        "devices[0].closed_loop",
        "set together with arrival",
        "not both",
    );
}

#[test]
fn device_with_neither_arrival_nor_closed_loop() {
    expect_invalid(
        |s| s.replace("arrival = { kind = \"poisson\", rate_per_s = 1e6 }", ""),
        "devices[0].arrival",
        "missing",
        "closed_loop",
    );
}

#[test]
fn closed_loop_inflight_past_the_wq_depth() {
    expect_invalid(
        |s| {
            s.replace(
                "arrival = { kind = \"poisson\", rate_per_s = 1e6 }",
                "closed_loop = { inflight = 40, wq = { depth = 16 } }",
            )
        },
        "devices[0].closed_loop.inflight",
        "40",
        "closed_loop.wq.depth (16)",
    );
}

#[test]
fn closed_loop_with_zero_engines() {
    expect_invalid(
        |s| {
            s.replace(
                "arrival = { kind = \"poisson\", rate_per_s = 1e6 }",
                "closed_loop = { inflight = 4, wq = { engines = 0 } }",
            )
        },
        "devices[0].closed_loop.wq.engines",
        "0",
        "1..=64",
    );
}

#[test]
fn closed_loop_device_is_valid_and_runs() {
    let sc = check(|s| {
        s.replace(
            "arrival = { kind = \"poisson\", rate_per_s = 1e6 }",
            "closed_loop = { inflight = 8, wq = { mode = \"shared\", depth = 8 } }",
        )
    })
    .unwrap();
    let r = System::run_scenario(&sc).unwrap();
    assert!(r.msis.balanced && r.msis.handled > 0);
    assert_eq!(r.devices[0].kind, "dsa-closed-loop");
}

#[test]
fn misspelled_field_gets_a_did_you_mean() {
    let msg = check(|s| s.replace("duration_us = 100", "duraton_us = 100"))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("duraton_us") && msg.contains("did you mean `duration_us`?"),
        "{msg}"
    );
    let msg = check(|s| s.replace("irte_entries = 64", "irte_entires = 64"))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("did you mean `irte_entries`?"), "{msg}");
    let msg = check(|s| s.replace("mode = \"posted\"", "mode = \"postd\""))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("did you mean `posted`?"), "{msg}");
    // Nothing close: no suggestion.
    let msg = check(|s| s.replace("duration_us = 100", "duration_us = 100\nzzzzzzzzzzzz = 1"))
        .unwrap_err()
        .to_string();
    assert!(!msg.contains("did you mean"), "{msg}");
}

/// A table with many fields has a list of expected names longer than the message's
/// excerpt keeps; the suggestion is still found, from the whole list.
#[test]
fn a_misspelt_field_late_in_a_long_list_still_gets_a_did_you_mean() {
    let text = "duration_us = 10\nmode = \"posted\"\n[costs.pid_line]\nmemory_nss = 3\n";
    let msg = Scenario::from_toml_str(text, "typo.toml")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("did you mean `memory_ns`?"), "{msg}");
    assert!(msg.len() < 1_000, "{msg}");
}

#[test]
fn every_shipped_scenario_file_loads_and_builds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("toml") {
            continue;
        }
        let sc = Scenario::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if let Err(e) = System::new(&sc) {
            panic!("{}: {e}", path.display());
        }
        seen += 1;
    }
    assert!(
        seen >= 9,
        "only {seen} scenario files found in {}",
        dir.display()
    );
}

#[test]
fn a_huge_scenario_is_refused_by_its_size_before_parsing() {
    let text = format!("{BASE}{}", "# padding\n".repeat(500_000));
    let e = Scenario::from_toml_str(&text, "huge.toml").unwrap_err();
    assert_eq!(e.field(), Some("scenario"), "{e}");
    assert!(e.to_string().contains("4194304 bytes"), "{e}");
}

#[test]
fn more_device_tables_than_requester_ids_are_refused_first() {
    let text = format!(
        "duration_us = 10\nmode = \"remapped\"\n{}",
        "[[nvme]]\n".repeat(irqsim::system::MAX_MSI_SOURCES + 1)
    );
    let sc = Scenario::from_toml_str(&text, "many.toml").unwrap();
    let e = sc.validate().unwrap_err();
    assert_eq!(e.field(), Some("devices + nvme + nics + vmd"), "{e}");
    assert!(e.to_string().contains("65537"), "{e}");
}

/// Deeply nested input: the message quotes a short excerpt, not the whole line.
#[test]
fn a_deeply_nested_value_gives_a_short_message() {
    let depth = 100_000;
    let text = format!("a = {}{}\n", "[".repeat(depth), "]".repeat(depth));
    let e = Scenario::from_toml_str(&text, "deep.toml").unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ScenarioError::Parse { .. }), "{msg}");
    assert!(msg.len() < 4_000, "{} bytes: {}", msg.len(), &msg[..200]);
}

#[test]
fn an_nvme_kind_under_devices_points_to_its_own_table() {
    for (kind, table) in [
        ("nvme", "[[nvme]]"),
        ("nic", "[[nics]]"),
        ("vmd", "[[vmd]]"),
    ] {
        let e = check(|b| b.replace("kind = \"dsa\"", &format!("kind = \"{kind}\""))).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains(table) && msg.contains("[[devices]] holds DSA"),
            "{msg}"
        );
    }
}

/// A bad cost field is one message: its scenario path, its value, what is allowed.
#[test]
fn a_bad_cost_field_is_named_by_its_scenario_path() {
    for (set, field, value) in [
        (
            "[costs.pid_line]\nmemory_ns = nan\n",
            "costs.pid_line.memory_ns",
            "NaN",
        ),
        (
            "[costs.remap]\ntranslate_ns = -1.0\n",
            "costs.remap.translate_ns",
            "-1",
        ),
    ] {
        let e = check(|b| format!("{b}{set}")).unwrap_err();
        let msg = e.to_string();
        assert_eq!(e.field(), Some(field), "{msg}");
        assert!(
            msg.starts_with(&format!(
                "{field} = {value} is not allowed: expected a finite number"
            )),
            "{msg}"
        );
        assert!(!msg.contains("_costs."), "no internal table names: {msg}");
    }
}

/// An edit of the base scenario text.
type Edit<'a> = &'a dyn Fn(&str) -> String;

/// Valid scenarios with likely mistakes get a warning that names the field.
#[test]
fn likely_mistakes_are_warned_about_by_field() {
    let ok = check(|b| b.to_string()).unwrap();
    assert!(ok.warnings().is_empty(), "{:?}", ok.warnings());
    let cases: [(Edit, &str); 3] = [
        (
            &|b: &str| {
                b.replace(
                    "apic_ids = [0, 2]",
                    "apic_ids = [0, 2]\npid_addresses = [0x1000, 0x1000]",
                )
            },
            "cpus.pid_addresses: CPUs 0 and 1 share",
        ),
        (
            &|b: &str| format!("max_loops = 100000\n{b}"),
            "max_loops = 100000",
        ),
        (
            &|b: &str| {
                b.replace(
                    "arrival = { kind = \"poisson\", rate_per_s = 1e6 }",
                    "closed_loop = { inflight = 4, wq = { completion_interrupt = false } }",
                )
            },
            "devices[0].closed_loop.wq.completion_interrupt = false",
        ),
    ];
    for (edit, start) in cases {
        let sc = check(edit).unwrap();
        let w = sc.warnings();
        assert!(w.len() == 1 && w[0].starts_with(start), "{w:?}");
    }
}

#[test]
fn vmd_on_arm_is_warned_about() {
    let text =
        "duration_us = 10\narch = \"arm\"\nmode = \"remapped\"\n[[vmd]]\n[[nvme]]\nvmd = 0\n[[jobs]]\ncpu = 0\ndrive = 0\niodepth = 4\n";
    let sc = Scenario::from_toml_str(text, "arm-vmd.toml").unwrap();
    sc.validate().unwrap();
    let w = sc.warnings();
    assert!(
        w.len() == 1 && w[0].starts_with("vmd: 1 VMD domain(s) on arch = \"arm\""),
        "{w:?}"
    );
}

/// A drive no job reads from and a NIC with no traffic count as loads, so the
/// scenario is valid, but neither raises an MSI: the run would report nothing from them.
#[test]
fn a_drive_without_jobs_and_a_nic_without_traffic_are_warned_about() {
    let text =
        "duration_us = 10\nmode = \"posted\"\n[[nvme]]\n[[nvme]]\n[[jobs]]\ncpu = 0\ndrive = 1\niodepth = 4\n[[nics]]\n";
    let sc = Scenario::from_toml_str(text, "idle.toml").unwrap();
    sc.validate().unwrap();
    assert_eq!(
        sc.warnings(),
        vec![
            "nvme[0]: no entry of `jobs` reads from this drive (jobs[*].drive = 0), so it raises no MSI".to_string(),
            "nics[0]: neither `rx` nor `tx` is set and no `transmit` load sends on it, so no packet moves and the NIC raises no MSI".to_string(),
        ]
    );
    let busy = text.replace(
        "[[jobs]]\ncpu = 0\ndrive = 1\niodepth = 4\n",
        "[[jobs]]\ncpu = 0\ndrive = 0\niodepth = 4\n[[jobs]]\ncpu = 0\ndrive = 1\niodepth = 4\n",
    ) + "tx = { kind = \"poisson\", rate_per_s = 1e5 }\n";
    let sc = Scenario::from_toml_str(&busy, "busy.toml").unwrap();
    sc.validate().unwrap();
    assert!(sc.warnings().is_empty(), "{:?}", sc.warnings());
}

/// serde names the Rust enum a table deserializes into ("internally tagged enum
/// Dist"); the message says what the scenario writes instead.
#[test]
fn a_number_where_a_distribution_belongs_says_what_to_write() {
    let text = "duration_us = 10\nmode = \"remapped\"\n[[nics]]\n\
                rx = { kind = \"bursts\", burst_len = 1e9, gap_ns = { kind = \"fixed\", value = 1 } }\n";
    let msg = Scenario::from_toml_str(text, "b.toml")
        .unwrap_err()
        .to_string();
    assert!(!msg.contains("enum") && !msg.contains("Dist"), "{msg}");
    assert!(
        msg.contains("a distribution table") && msg.contains("{ kind = \"fixed\", value = 16 }"),
        "{msg}"
    );
    let text =
        "duration_us = 10\nmode = \"remapped\"\n[[devices]]\nvector = 0x21\ncpu = 0\narrival = 5\n";
    let msg = Scenario::from_toml_str(text, "a.toml")
        .unwrap_err()
        .to_string();
    assert!(!msg.contains("enum "), "{msg}");
}

/// An initiator never interrupts itself, as in Linux: a load whose only target is its
/// initiator would report calls that sent no IPI as zero-latency shootdowns.
#[test]
fn a_shootdown_initiator_needs_a_target_besides_itself() {
    fn load(from: &'static str, to: &'static str) -> impl Fn(&str) -> String {
        move |b: &str| {
            format!("{b}[[shootdowns]]\nfrom = {from}\n{to}\narrival = {{ kind = \"poisson\", rate_per_s = 1e4 }}\n")
        }
    }
    expect_invalid(
        load("[0]", "targets = [0, 0]"),
        "shootdowns[0].targets",
        "[0, 0]",
        "CPU 0 initiates, never interrupts itself, and would have no target",
    );
    // The second initiator is left with nothing; the first has CPU 1.
    expect_invalid(
        load("[0, 1]", "targets = [1]"),
        "shootdowns[0].targets",
        "[1]",
        "CPU 1 initiates",
    );
    // Both CPUs sit on socket 0, so each initiator has the other.
    assert!(check(load("[0, 1]", "target_socket = 0")).is_ok());
    assert!(check(load("[0]", "targets = [0, 1]")).is_ok());
}

/// Linux creates at most one I/O queue per CPU; more would be queues no CPU submits to.
#[test]
fn a_drive_with_more_queues_than_cpus_is_warned_about() {
    let text = |queues: u32| {
        format!("duration_us = 10\nmode = \"posted\"\n[cpus]\ncount = 4\n[[nvme]]\ndrive = {{ queues = {queues} }}\n[[jobs]]\ncpu = 0\ndrive = 0\niodepth = 4\n")
    };
    let sc = Scenario::from_toml_str(&text(16), "q.toml").unwrap();
    sc.validate().unwrap();
    assert_eq!(
        sc.warnings(),
        vec!["nvme[0].drive.queues = 16 is more than cpus.count = 4: Linux creates at most one I/O queue per CPU, and no CPU would submit to the other 12".to_string()]
    );
    let sc = Scenario::from_toml_str(&text(4), "q.toml").unwrap();
    assert!(sc.warnings().is_empty(), "{:?}", sc.warnings());
}

/// CPUs split unevenly over sockets: valid (the split is defined), but no server has it.
#[test]
fn cpus_that_do_not_split_evenly_over_the_sockets_are_warned_about() {
    let text = |count: u32, sockets: u32| {
        format!("duration_us = 10\nmode = \"posted\"\n[cpus]\ncount = {count}\nsockets = {sockets}\n[[devices]]\nkind = \"dsa\"\nvector = 0x30\narrival = {{ kind = \"fixed\", interval_ns = 1000 }}\n")
    };
    let sc = Scenario::from_toml_str(&text(4, 3), "s.toml").unwrap();
    sc.validate().unwrap();
    assert_eq!(
        sc.warnings(),
        vec!["cpus.count = 4 is not a multiple of cpus.sockets = 3: the sockets get 2, 1, 1 CPUs, where a server's sockets each have the same number".to_string()]
    );
    let sc = Scenario::from_toml_str(&text(6, 3), "s.toml").unwrap();
    assert!(sc.warnings().is_empty(), "{:?}", sc.warnings());
    // Not yet validated, zero sockets: validation refuses it, and the warnings, which
    // a library user may ask for first, do not panic on it.
    let sc = Scenario::from_toml_str(&text(4, 0), "s.toml").unwrap();
    assert!(sc.validate().is_err());
    assert!(sc.warnings().is_empty(), "{:?}", sc.warnings());
    // Nor on more sockets than validation allows (one tally per socket would be 16 GiB
    // here): validation names the field, and the warnings leave it to it.
    let sc = Scenario::from_toml_str(&text(4, u32::MAX), "s.toml").unwrap();
    assert!(sc
        .validate()
        .unwrap_err()
        .to_string()
        .contains("cpus.sockets"));
    assert!(sc.warnings().is_empty(), "{:?}", sc.warnings());
}
