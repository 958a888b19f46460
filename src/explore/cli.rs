//! `irqsim explore`: the exhaustive explorer from the command line.
//!
//! ```text
//! irqsim explore --variant NAME [--posts N] [--entries N] [--sn-toggles N]
//!                [--urg-posts N] [--preemption-bound N] [--max-loops N]
//!                [--no-sn-recheck] [--vectors LIST|any-of:LIST] [--max-states N]
//!                [--memory-model sc|tso] [--trace FILE] [--json]
//! ```
//!
//! Exit status: 0 when every invariant holds within the bounds, 1 when one fails (the
//! counterexample is printed; with `--json` it is in the JSON on stdout and also
//! printed as text on stderr), 2 for bad arguments or a search that hit its state limit.

use std::io::Write;
use std::process::ExitCode;

use serde::Serialize;

use super::{
    explore_variant, is_device_vector, ExploreConfig, ExploreError, ExploreReport, ExploreResult,
    MemoryModel, MigrationCleanup, DEFAULT_ENTRIES, DEFAULT_MAX_STATES, DEFAULT_POSTS,
    DEFAULT_SN_TOGGLES, DEFAULT_URG_POSTS, MAX_POST_CHOICES,
};
use crate::kernel::posted_msi::FIRST_EXTERNAL_VECTOR;
use crate::kernel::retrigger::PostedMsiAck;
use crate::kernel::{DEFAULT_MAX_LOOPS, POSTED_MSI_NOTIFICATION_VECTOR};
use sim_core::Vector;

/// Arguments of `irqsim explore`.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct ExploreArgs {
    /// Handler variant: copy-then-xchg, rfc, interleaved, per-word-dispatch,
    /// no-final-recheck, xchg-word0, kvm-clear-on-first, plain-clear-on,
    /// plain-clear-on-mfence.
    #[arg(long, value_name = "NAME")]
    pub variant: String,
    /// Non-urgent IOMMU posts, one atomic step each (vectors 0x21 0x61 0x21 0xa1 0x22
    /// 0xe1, in order, repeating).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_POSTS)]
    pub posts: u32,
    /// The non-urgent posts' vectors: a list used in order and repeated
    /// (`0x21,0x61`), or `any-of:0x21,0x61,0xa1` for a choice at every post, the
    /// search branching on each vector. Device vectors, hex (0x..) or decimal.
    #[arg(long, value_name = "LIST")]
    pub vectors: Option<String>,
    /// Most distinct states before the search stops as incomplete.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_STATES)]
    pub max_states: u64,
    /// Handler entries the APIC may start.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_ENTRIES)]
    pub entries: u32,
    /// SN changes by another CPU (set, clear, set, ...).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_SN_TOGGLES)]
    pub sn_toggles: u32,
    /// Posts through an IRTE with URG set (vectors 0x41 0x81 0x42, repeating).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_URG_POSTS)]
    pub urg_posts: u32,
    /// Most preemptions of a running handler per path (default: unbounded).
    #[arg(long, value_name = "N")]
    pub preemption_bound: Option<u32>,
    /// MAX_POSTED_MSI_COALESCING_LOOP of the variant (0 = unbounded).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_LOOPS)]
    pub max_loops: u32,
    /// The CPU that clears SN does not recheck PIR afterwards (shows the loss that
    /// recheck prevents).
    #[arg(long)]
    pub no_sn_recheck: bool,
    /// How the handler CPU's stores reach the descriptor: `sc` (sequential
    /// consistency) or `tso` (x86-TSO: plain stores wait in a store buffer that
    /// locked operations, mfence and IRET drain).
    #[arg(long, value_name = "MODEL", value_enum, default_value_t = MemoryModel::Sc)]
    pub memory_model: MemoryModel,
    /// Retriggers by the IRQ core (`irq_retrigger()`): IPIs of the first post vector
    /// itself, each taken through the IDT and handled by the posted chip's flow.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub retriggers: u32,
    /// The posted chip's ack a retriggered entry runs: `eoi-if-inactive` (Linux
    /// 0edc78b82bea) or `move-irq-only` (before it: no EOI).
    #[arg(long, value_name = "ACK", value_enum, default_value_t = PostedMsiAck::EoiIfInactive)]
    pub posted_msi_ack: PostedMsiAck,
    /// Migrate the first post vector's IRTE to another CPU while its posts are in
    /// flight (write the IRTE, flush the entry cache, then the old CPU's vector
    /// cleanup), the cleanup checking pending with `irr-and-pir` (Linux ce0a92871179)
    /// or `irr-only` (before it).
    #[arg(long, value_name = "CLEANUP", value_enum)]
    pub migration: Option<MigrationCleanup>,
    /// Run a shipped SN sequence as the SN actor, one step per operation:
    /// `recheck` (correct) or `no-recheck` (broken on purpose). Unset: the built-in
    /// protocol, whose recheck is one step.
    #[arg(long, value_name = "NAME")]
    pub sn_software: Option<String>,
    /// Also write a counterexample as a Chrome trace-event file (Perfetto): a track per
    /// actor, a slice per step, the descriptor's bits as counters. Nothing is written
    /// when every invariant holds.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<std::path::PathBuf>,
    /// Explore every distinct state, without identifying states that differ only in
    /// counts no step or invariant reads (the default reduction). Verdicts are the
    /// same either way; this is for checking that, and for comparing state counts.
    #[arg(long)]
    pub no_reduction: bool,
    /// Take every interleaving of independent steps, without the partial-order
    /// reduction by sleep sets (the default). Distinct states and verdicts are the
    /// same either way; only the steps taken (`states_explored`) differ.
    #[arg(long)]
    pub no_partial_order: bool,
    /// Threads that expand states (default 0: every core). The verdict, the
    /// counterexample and every count are the same for any number.
    #[arg(long, default_value_t = 0)]
    pub threads: u32,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

impl ExploreArgs {
    /// The exploration bounds these arguments describe; an error names a bad
    /// `--vectors` entry.
    pub fn config(&self) -> Result<ExploreConfig, String> {
        let mut c = ExploreConfig::with_counts(self.posts, self.entries)
            .urgent(self.urg_posts)
            .sn_toggles(self.sn_toggles)
            .preemption_bound(self.preemption_bound)
            .max_states(self.max_states);
        c.sn_recheck = !self.no_sn_recheck;
        c.memory_model = self.memory_model;
        if let Some(text) = &self.vectors {
            let (any_of, list) = match text.strip_prefix("any-of:") {
                Some(rest) => (true, rest),
                None => (false, text.as_str()),
            };
            let vectors = parse_vectors(list, any_of)?;
            if any_of {
                c = c.any_of(vectors);
            } else {
                c = c.post_vectors(&vectors);
            }
        }
        let vector = c
            .post_choices
            .first()
            .or(c.posts.first())
            .copied()
            .unwrap_or(c.retrigger_vector);
        c = c.retriggers(self.retriggers, vector, self.posted_msi_ack);
        c.migration = self.migration;
        c.sn_software = self.sn_software.clone();
        c.reduce = !self.no_reduction;
        c.partial_order = !self.no_partial_order;
        c.threads = self.threads;
        Ok(c)
    }
}

/// The explorer's error in the user's terms: a bound that a flag sets names the flag
/// and the number as typed (`--posts 100`), not the config field (`posts`).
fn flag_error(e: &ExploreError) -> String {
    if let ExploreError::Bound {
        field,
        value,
        allowed,
    } = e
    {
        let flag = match *field {
            "posts" => Some("--posts"),
            "urg_posts" => Some("--urg-posts"),
            "max_states" => Some("--max-states"),
            "sn_toggles" => Some("--sn-toggles"),
            "retriggers" => Some("--retriggers"),
            "entries" => Some("--entries"),
            _ => None,
        };
        if let Some(flag) = flag {
            return format!("{flag} {value} is not allowed: expected {allowed}");
        }
    }
    e.to_string()
}

/// Parses `0x21,0x61` (hex with `0x`, or decimal) into device vectors; `choice` (the
/// list after `any-of:`) also refuses a repeat.
///
/// The explorer's own validation would refuse the same lists, but it names its
/// config's fields (`posts`, `post_choices`) and prints a vector in decimal; these
/// errors name the flag and the entry as the user wrote it.
fn parse_vectors(list: &str, choice: bool) -> Result<Vec<Vector>, String> {
    let flag = if choice {
        format!("--vectors \"any-of:{list}\"")
    } else {
        format!("--vectors {list:?}")
    };
    let mut vectors: Vec<Vector> = Vec::new();
    for item in list.split(',').map(str::trim) {
        let hex = item.strip_prefix("0x").or_else(|| item.strip_prefix("0X"));
        let parsed = match hex {
            Some(digits) => u8::from_str_radix(digits, 16),
            None => item.parse::<u8>(),
        };
        let v = parsed.map(Vector).map_err(|_| {
            format!(
                "{flag}: {item:?} is not a vector: expected a number 0..=255 \
                 (hex with 0x, or decimal), comma-separated, optionally after `any-of:`"
            )
        })?;
        if !is_device_vector(v) {
            let shown = match hex {
                Some(_) => item.to_string(),
                None => format!("{item} ({:#04x})", v.0),
            };
            return Err(format!(
                "{flag}: {shown} is not a device vector: expected {FIRST_EXTERNAL_VECTOR:#04x}..{:#04x} \
                 (below the posted-MSI notification vector)",
                POSTED_MSI_NOTIFICATION_VECTOR.0
            ));
        }
        if choice && vectors.contains(&v) {
            return Err(format!(
                "{flag}: {:#04x} appears twice: expected each vector of a choice once",
                v.0
            ));
        }
        vectors.push(v);
    }
    // The search branches on each vector of a choice at every post, and keeps one
    // actor per vector in a fixed array.
    if choice && vectors.len() > MAX_POST_CHOICES {
        return Err(format!(
            "{flag}: {} vectors: expected at most {MAX_POST_CHOICES} in a choice",
            vectors.len()
        ));
    }
    Ok(vectors)
}

#[derive(Serialize)]
struct JsonOut<'a> {
    max_loops: u32,
    #[serde(flatten)]
    report: &'a ExploreReport,
}

/// Runs `irqsim explore`, writing the report to `out` and diagnostics to `err`.
/// Returns the exit status (0 pass, 1 invariant violated, 2 error or incomplete).
pub fn run(args: &ExploreArgs, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let config = match args.config() {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            return 2;
        }
    };
    let report = match explore_variant(&args.variant, args.max_loops, &config) {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(err, "error: {}", flag_error(&e));
            return 2;
        }
    };
    let text = if args.json {
        let json = JsonOut {
            max_loops: args.max_loops,
            report: &report,
        };
        serde_json::to_string_pretty(&json).expect("the report serializes") + "\n"
    } else {
        format!("max loops {}\n{report}", args.max_loops)
    };
    if let Err(e) = out.write_all(text.as_bytes()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            let _ = writeln!(err, "error: cannot write the report: {e}");
            return 2;
        }
    }
    if let Some(path) = &args.trace {
        match &report.result {
            ExploreResult::Fail(c) => {
                let text = c.chrome_trace(&report.variant).to_string();
                if let Err(e) = std::fs::write(path, text) {
                    let _ = writeln!(err, "error: --trace {}: {e}", path.display());
                    return 2;
                }
                let _ = writeln!(err, "trace: counterexample written to {}", path.display());
            }
            _ => {
                let _ = writeln!(
                    err,
                    "trace: no counterexample, {} not written",
                    path.display()
                );
            }
        }
    }
    match &report.result {
        ExploreResult::Pass => 0,
        ExploreResult::Fail(c) => {
            if args.json {
                let _ = writeln!(err, "{c}");
            }
            1
        }
        ExploreResult::Incomplete { reason } => {
            let _ = writeln!(err, "error: exploration incomplete: {reason}");
            2
        }
    }
}

/// Entry point for the `explore` subcommand of the `irqsim` binary.
pub fn cli_main(args: ExploreArgs) -> ExitCode {
    let code = run(
        &args,
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
    );
    ExitCode::from(code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: ExploreArgs,
    }

    fn parse(argv: &[&str]) -> ExploreArgs {
        Wrapper::try_parse_from(std::iter::once("explore").chain(argv.iter().copied()))
            .unwrap()
            .args
    }

    /// Two posts, no SN changes, no urgent posts: a small search.
    const SMALL: [&str; 6] = ["--posts", "2", "--sn-toggles", "0", "--urg-posts", "0"];

    fn run_str(argv: &[&str]) -> (u8, String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run(&parse(argv), &mut out, &mut err);
        (
            code,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    /// `argv` with `--json` and the [`SMALL`] bounds: the exit status, the JSON report
    /// and stderr.
    fn run_small_json(argv: &[&str]) -> (u8, serde_json::Value, String) {
        let mut argv = argv.to_vec();
        argv.push("--json");
        argv.extend(SMALL);
        let (code, out, err) = run_str(&argv);
        (code, serde_json::from_str(&out).unwrap(), err)
    }

    #[test]
    fn defaults_and_flags_parse() {
        let a = parse(&["--variant", "rfc"]);
        assert_eq!(a.posts, DEFAULT_POSTS);
        assert_eq!(a.entries, DEFAULT_ENTRIES);
        assert_eq!(a.preemption_bound, None);
        assert!(!a.json);
        let a = parse(&[
            "--variant",
            "rfc",
            "--posts",
            "2",
            "--entries",
            "1",
            "--sn-toggles",
            "0",
            "--urg-posts",
            "0",
            "--preemption-bound",
            "1",
            "--json",
        ]);
        let c = a.config().unwrap();
        assert_eq!((c.posts.len(), c.entries, c.sn_toggles), (2, 1, 0));
        assert_eq!(c.preemption_bound, Some(1));
        assert!(a.json && c.sn_recheck);
    }

    #[test]
    fn pass_exits_0_and_fail_exits_1_with_the_trace() {
        let mut argv = vec!["--variant", "copy-then-xchg"];
        argv.extend(SMALL);
        let (code, out, _) = run_str(&argv);
        assert_eq!(code, 0, "{out}");
        assert!(
            out.contains("PASS") && out.contains("distinct states"),
            "{out}"
        );

        let mut argv = vec!["--variant", "no-final-recheck"];
        argv.extend(SMALL);
        let (code, out, _) = run_str(&argv);
        assert_eq!(code, 1, "{out}");
        assert!(
            out.contains("counterexample") && out.contains("  1. iommu"),
            "{out}"
        );
    }

    #[test]
    fn json_carries_the_counterexample_and_stderr_the_text() {
        let mut argv = vec!["--variant", "xchg-word0", "--json"];
        argv.extend(SMALL);
        let (code, out, err) = run_str(&argv);
        assert_eq!(code, 1);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["variant"], "xchg-word0");
        assert_eq!(v["max_loops"], 3);
        assert_eq!(v["result"]["verdict"], "fail");
        assert!(!v["result"]["steps"].as_array().unwrap().is_empty());
        assert!(v["states_explored"].as_u64().unwrap() > 0);
        assert!(err.contains("counterexample"), "{err}");
    }

    #[test]
    fn vectors_in_order_or_as_a_choice() {
        let c = parse(&["--variant", "rfc", "--vectors", "0x21, 0x22"])
            .config()
            .unwrap();
        assert_eq!(c.posts, [0x21, 0x22, 0x21, 0x22].map(Vector).to_vec());
        assert!(c.post_choices.is_empty());
        let c = parse(&["--variant", "rfc", "--vectors", "any-of:0x21,97"])
            .config()
            .unwrap();
        assert_eq!(c.post_choices, vec![Vector(0x21), Vector(0x61)]);
        assert_eq!(c.posts.len(), DEFAULT_POSTS as usize, "the count stays");
        let err = parse(&["--variant", "rfc", "--vectors", "0x21,0xzz"])
            .config()
            .unwrap_err();
        assert!(err.contains("\"0xzz\" is not a vector"), "{err}");
    }

    /// A choice at every post explores every assignment of vectors: more states than
    /// any one fixed list, mainline still passes, broken variants still fail, and a
    /// word-confusion bug shows only when the choice spans two PIR words.
    #[test]
    fn a_choice_of_vectors_branches_at_every_post() {
        let states = |variant: &str, vectors: &str| {
            let (code, v, _) = run_small_json(&["--variant", variant, "--vectors", vectors]);
            assert!(v["states_per_s"].as_f64().unwrap() > 0.0);
            (code, v["distinct_states"].as_u64().unwrap())
        };
        let (code, fixed) = states("copy-then-xchg", "0x21,0x61");
        assert_eq!(code, 0);
        let (code, any) = states("copy-then-xchg", "any-of:0x21,0x61");
        assert_eq!(code, 0);
        assert!(any > fixed, "{any} states with a choice, {fixed} without");
        assert_eq!(states("no-final-recheck", "any-of:0x21,0x61").0, 1);
        // xchg-word0 handles only PIR word 0: choices within that word hide the bug,
        // a choice across words finds it.
        assert_eq!(states("xchg-word0", "any-of:0x21,0x22").0, 0);
        assert_eq!(states("xchg-word0", "any-of:0x21,0x61").0, 1);
    }

    #[test]
    fn retrigger_migration_and_sn_software_flags_reach_the_config_and_the_verdict() {
        let c = parse(&[
            "--variant",
            "rfc",
            "--vectors",
            "0x61,0x21",
            "--retriggers",
            "2",
        ])
        .config()
        .unwrap();
        assert_eq!((c.retriggers, c.retrigger_vector), (2, Vector(0x61)));
        assert_eq!(c.posted_msi_ack, PostedMsiAck::EoiIfInactive);
        assert_eq!((c.migration, c.sn_software.as_deref()), (None, None));
        let cases: [(&[&str], u8); 6] = [
            (
                &["--retriggers", "1", "--posted-msi-ack", "move-irq-only"],
                1,
            ),
            (
                &["--retriggers", "1", "--posted-msi-ack", "eoi-if-inactive"],
                0,
            ),
            (&["--migration", "irr-only"], 1),
            (&["--migration", "irr-and-pir"], 0),
            (&["--sn-software", "no-recheck", "--sn-toggles", "2"], 1),
            (&["--sn-software", "recheck", "--sn-toggles", "2"], 0),
        ];
        for (flags, want) in cases {
            let mut argv = vec!["--variant", "copy-then-xchg"];
            argv.extend_from_slice(flags);
            argv.extend(["--json", "--posts", "2", "--urg-posts", "0"]);
            let (code, out, err) = run_str(&argv);
            assert_eq!(code, want, "{flags:?}: {err}");
            let v: serde_json::Value = serde_json::from_str(&out).unwrap();
            assert!(v["config"].get("retriggers").is_some());
        }
        let (code, _, err) = run_str(&["--variant", "rfc", "--sn-software", "nope"]);
        assert_eq!(code, 2);
        assert!(err.contains("recheck, no-recheck"), "{err}");
    }

    #[test]
    fn no_reduction_reaches_the_config_and_explores_no_fewer_states_with_the_same_verdict() {
        assert!(parse(&["--variant", "rfc"]).config().unwrap().reduce);
        assert!(
            !parse(&["--variant", "rfc", "--no-reduction"])
                .config()
                .unwrap()
                .reduce
        );
        for variant in ["copy-then-xchg", "no-final-recheck"] {
            let (code, reduced, _) = run_small_json(&["--variant", variant]);
            let (full_code, full, _) = run_small_json(&["--variant", variant, "--no-reduction"]);
            assert_eq!(code, full_code, "{variant}");
            assert_eq!(
                (
                    reduced["config"]["reduce"].as_bool(),
                    full["config"]["reduce"].as_bool()
                ),
                (Some(true), Some(false))
            );
            let states = |v: &serde_json::Value| v["distinct_states"].as_u64().unwrap();
            assert!(states(&reduced) <= states(&full), "{variant}");
            assert!(reduced["states_per_s"].as_f64().unwrap() > 0.0);
        }
    }

    #[test]
    fn threads_reach_the_config_and_change_no_count() {
        assert_eq!(parse(&["--variant", "rfc"]).config().unwrap().threads, 0);
        let c = parse(&["--variant", "rfc", "--threads", "3"])
            .config()
            .unwrap();
        assert_eq!(c.threads, 3);
        let (_, one, _) = run_small_json(&["--variant", "no-final-recheck", "--threads", "1"]);
        let (_, three, _) = run_small_json(&["--variant", "no-final-recheck", "--threads", "3"]);
        assert_eq!(three["config"]["threads"], 3);
        for key in [
            "states_explored",
            "distinct_states",
            "invariants_checked",
            "result",
        ] {
            assert_eq!(one[key], three[key], "{key}");
        }
    }

    #[test]
    fn no_partial_order_takes_every_step_and_reaches_the_same_states() {
        assert!(parse(&["--variant", "rfc"]).config().unwrap().partial_order);
        let (code, slept, _) = run_small_json(&["--variant", "rfc"]);
        let (full_code, full, _) = run_small_json(&["--variant", "rfc", "--no-partial-order"]);
        assert_eq!((code, full_code), (0, 0));
        assert_eq!(slept["config"]["partial_order"], true);
        assert_eq!(full["config"]["partial_order"], false);
        let field = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap();
        assert_eq!(
            field(&slept, "distinct_states"),
            field(&full, "distinct_states")
        );
        assert!(field(&slept, "steps_slept") > 0);
        assert_eq!(field(&full, "steps_slept"), 0);
        assert!(field(&slept, "states_explored") < field(&full, "states_explored"));
    }

    #[test]
    fn the_memory_model_flag_picks_sc_or_tso() {
        let run_model = |variant: &str, model: &str| {
            let (code, v, err) = run_small_json(&["--variant", variant, "--memory-model", model]);
            assert_eq!(v["config"]["memory_model"], model);
            (code, err)
        };
        assert_eq!(parse(&["--variant", "rfc"]).memory_model, MemoryModel::Sc);
        assert_eq!(run_model("plain-clear-on", "sc").0, 0);
        let (code, err) = run_model("plain-clear-on", "tso");
        assert_eq!(code, 1);
        assert!(err.contains("store-buffer"), "{err}");
        assert_eq!(run_model("copy-then-xchg", "tso").0, 0);
        let bad = Wrapper::try_parse_from(["explore", "--variant", "rfc", "--memory-model", "pso"]);
        let err = bad.err().expect("pso is not a model").to_string();
        assert!(err.contains("sc") && err.contains("tso"), "{err}");
    }

    #[test]
    fn trace_writes_a_counterexample_and_nothing_for_a_pass() {
        let dir = std::env::temp_dir().join(format!("irqsim-explore-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("cx.json");
        let f = file.to_str().unwrap();
        let mut argv = vec![
            "--variant",
            "plain-clear-on",
            "--memory-model",
            "tso",
            "--trace",
            f,
        ];
        argv.extend(SMALL);
        let (code, _, err) = run_str(&argv);
        assert_eq!(code, 1, "{err}");
        let t: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        let events = t["traceEvents"].as_array().unwrap();
        assert!(events
            .iter()
            .any(|e| e["ph"] == "M" && e["args"]["name"] == "store-buffer"));
        assert!(events
            .iter()
            .any(|e| e["ph"] == "C" && e["name"] == "store buffer"));
        std::fs::remove_file(&file).unwrap();
        argv[3] = "sc";
        let (code, _, err) = run_str(&argv);
        assert_eq!(code, 0);
        assert!(err.contains("not written") && !file.exists(), "{err}");
        let bad = dir.join("no-such-dir").join("cx.json");
        argv[3] = "tso";
        argv[5] = bad.to_str().unwrap();
        let (code, _, err) = run_str(&argv);
        assert_eq!(code, 2);
        assert!(err.contains("--trace"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_choices_and_a_low_state_limit_exit_2() {
        let (code, _, err) = run_str(&["--variant", "rfc", "--vectors", "any-of:0x21,33"]);
        assert_eq!(code, 2);
        assert!(
            err.contains("--vectors \"any-of:0x21,33\": 0x21 appears twice")
                && err.contains("each vector of a choice once"),
            "{err}"
        );
        // A repeat in an ordered list is a sequence, not an error.
        assert!(parse(&["--variant", "rfc", "--vectors", "0x21,0x21"])
            .config()
            .is_ok());
        for (flag, shown) in [("any-of:0x10", ": 0x10 is"), ("0x21,16", ": 16 (0x10) is")] {
            let (code, _, err) = run_str(&["--variant", "rfc", "--vectors", flag]);
            assert_eq!(code, 2);
            assert!(
                err.contains(&format!("{shown} not a device vector: expected 0x20..0xeb")),
                "{err}"
            );
        }
        let seventeen = (0x21..0x32)
            .map(|v| format!("{v:#04x}"))
            .collect::<Vec<_>>()
            .join(",");
        let (code, _, err) = run_str(&[
            "--variant",
            "rfc",
            "--vectors",
            &format!("any-of:{seventeen}"),
        ]);
        assert_eq!(code, 2);
        assert!(
            err.contains("17 vectors: expected at most 16 in a choice"),
            "{err}"
        );
        let (code, _, err) = run_str(&["--variant", "rfc", "--vectors", "0xeb"]);
        assert_eq!(code, 2, "{err}");
        let (code, _, err) = run_str(&["--variant", "rfc", "--max-states", "10"]);
        assert_eq!(code, 2);
        assert!(err.contains("more than 10 distinct states"), "{err}");
    }

    #[test]
    fn out_of_range_bounds_name_the_flag_as_typed() {
        for (flag, value, allowed) in [
            ("--posts", "65", "at most 64"),
            ("--urg-posts", "100", "at most 64"),
            ("--sn-toggles", "65", "at most 64"),
            ("--retriggers", "65", "at most 64"),
            ("--max-states", "0", "at least 1"),
            (
                "--entries",
                "0",
                "at least 1: with no handler entry the variant never runs",
            ),
        ] {
            let (code, _, err) = run_str(&["--variant", "rfc", flag, value]);
            assert_eq!(code, 2, "{flag}");
            let want = format!("error: {flag} {value} is not allowed: expected {allowed}");
            assert!(err.starts_with(&want), "{err}");
        }
    }

    #[test]
    fn unknown_variant_exits_2_naming_the_choices() {
        let (code, _, err) = run_str(&["--variant", "copy_then_xchg"]);
        assert_eq!(code, 2);
        assert!(err.contains("unknown variant") && err.contains("per-word-dispatch"));
    }
}
