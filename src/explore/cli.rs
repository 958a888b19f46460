//! `irqsim explore`: the exhaustive explorer from the command line.
//!
//! ```text
//! irqsim explore --variant NAME [--posts N] [--entries N] [--sn-toggles N]
//!                [--urg-posts N] [--preemption-bound N] [--max-loops N]
//!                [--no-sn-recheck] [--json]
//! ```
//!
//! Exit status: 0 when every invariant holds within the bounds, 1 when one fails (the
//! counterexample is printed; with `--json` it is in the JSON on stdout and also
//! printed as text on stderr), 2 for bad arguments or a search that hit its state limit.

use std::io::Write;
use std::process::ExitCode;

use serde::Serialize;

use super::{
    explore_variant, ExploreConfig, ExploreReport, ExploreResult, DEFAULT_ENTRIES, DEFAULT_POSTS,
    DEFAULT_SN_TOGGLES, DEFAULT_URG_POSTS,
};
use crate::kernel::DEFAULT_MAX_LOOPS;

/// Arguments of `irqsim explore`.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct ExploreArgs {
    /// Handler variant: copy-then-xchg, rfc, interleaved, per-word-dispatch,
    /// no-final-recheck, xchg-word0, kvm-clear-on-first.
    #[arg(long, value_name = "NAME")]
    pub variant: String,
    /// Non-urgent IOMMU posts, one atomic step each (vectors 0x21 0x61 0x21 0xa1 0x22
    /// 0xe1, in order, repeating).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_POSTS)]
    pub posts: u32,
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
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

impl ExploreArgs {
    /// The exploration bounds these arguments describe.
    pub fn config(&self) -> ExploreConfig {
        let mut c = ExploreConfig::with_counts(self.posts, self.entries)
            .urgent(self.urg_posts)
            .sn_toggles(self.sn_toggles)
            .preemption_bound(self.preemption_bound);
        c.sn_recheck = !self.no_sn_recheck;
        c
    }
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
    let report = match explore_variant(&args.variant, args.max_loops, &args.config()) {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
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

    fn run_str(argv: &[&str]) -> (u8, String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run(&parse(argv), &mut out, &mut err);
        (
            code,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
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
        let c = a.config();
        assert_eq!((c.posts.len(), c.entries, c.sn_toggles), (2, 1, 0));
        assert_eq!(c.preemption_bound, Some(1));
        assert!(a.json && c.sn_recheck);
    }

    #[test]
    fn pass_exits_0_and_fail_exits_1_with_the_trace() {
        let small = ["--posts", "2", "--sn-toggles", "0", "--urg-posts", "0"];
        let mut argv = vec!["--variant", "copy-then-xchg"];
        argv.extend(small);
        let (code, out, _) = run_str(&argv);
        assert_eq!(code, 0, "{out}");
        assert!(
            out.contains("PASS") && out.contains("distinct states"),
            "{out}"
        );

        let mut argv = vec!["--variant", "no-final-recheck"];
        argv.extend(small);
        let (code, out, _) = run_str(&argv);
        assert_eq!(code, 1, "{out}");
        assert!(
            out.contains("counterexample") && out.contains("  1. iommu"),
            "{out}"
        );
    }

    #[test]
    fn json_carries_the_counterexample_and_stderr_the_text() {
        let (code, out, err) = run_str(&[
            "--variant",
            "xchg-word0",
            "--posts",
            "2",
            "--sn-toggles",
            "0",
            "--urg-posts",
            "0",
            "--json",
        ]);
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
    fn unknown_variant_exits_2_naming_the_choices() {
        let (code, _, err) = run_str(&["--variant", "copy_then_xchg"]);
        assert_eq!(code, 2);
        assert!(err.contains("unknown variant") && err.contains("per-word-dispatch"));
    }
}
