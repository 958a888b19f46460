//! The `irqsim` command line.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use irqsim::experiments::{self, ExperimentCtx, DEFAULT_SEED};
use irqsim::report::table::{render_report_with, Detail};
use irqsim::report::trace::{ChromeTrace, TraceWindow};
use irqsim::{Scenario, ScenarioError, System};

#[derive(Parser)]
#[command(
    name = "irqsim",
    version,
    about = "Cycle-approximate simulator of the interrupt path (x2APIC, VT-d posting, PID line, MSI devices).",
    long_about = "Cycle-approximate simulator of the interrupt path.\n\nWith no command, runs the posted-vs-remapped experiment and prints its table.\nEvery figure comes from the model and its documented cost tables, not from hardware."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// The engine's ping model: N entities with one pending event each; every event
    /// schedules the next at now + U[1, 1000] ns (seeded ChaCha8). Also runs the same
    /// work on a plain BinaryHeap loop for comparison.
    Engine {
        /// Pending events (entities).
        #[arg(long, default_value_t = 1000)]
        pending: u64,
        /// Events to handle.
        #[arg(long, default_value_t = 10_000_000)]
        events: u64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// A whole scenario: simulated MSIs per wall-clock second, events per MSI, peak memory.
    Scenario {
        /// A scenario file or embedded scenario name.
        scenario: String,
        /// Run for this much simulated time instead of the scenario's `duration_us`
        /// (a longer run measures a small scenario more steadily).
        #[arg(long)]
        duration_us: Option<f64>,
        /// Skip the comparison with a plain BinaryHeap loop at the scenario's mean
        /// pending count (which costs a second, untimed run of the scenario).
        #[arg(long)]
        no_heap: bool,
        /// Run this many rounds (each the scenario, then the heap loop) and report the
        /// median round by its ratio to the heap loop, with the range over all rounds:
        /// steadier than one round on a host whose speed drifts.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
        rounds: u32,
        #[arg(long)]
        json: bool,
    },
}

fn run_bench(cmd: BenchCommand) -> Result<(), String> {
    match cmd {
        BenchCommand::Engine {
            pending,
            events,
            seed,
            json,
        } => {
            if pending == 0 || events == 0 {
                return Err("--pending and --events must be at least 1".into());
            }
            if pending > irqsim::bench::MAX_PENDING {
                return Err(format!(
                    "--pending {pending} is more than {}: each pending event is held in both \
                     queues, so memory grows with it",
                    irqsim::bench::MAX_PENDING
                ));
            }
            let ours = irqsim::bench::ping_irqsim(pending, events, seed);
            let heap = irqsim::bench::ping_binary_heap(pending, events, seed);
            if json {
                return print_stdout(
                    &serde_json::to_string_pretty(&[&ours, &heap]).expect("serializes"),
                );
            }
            for b in [&ours, &heap] {
                println!(
                    "{:<12} pending {:>8}  events {:>10}  {:>7.2} M events/s  {:>6.1} ns/event",
                    b.engine,
                    b.pending,
                    b.events,
                    b.events_per_sec / 1e6,
                    b.ns_per_event
                );
            }
            println!(
                "ratio irqsim / binary-heap time: {:.2}\nbuild: {}",
                ours.seconds / heap.seconds.max(1e-12),
                ours.build
            );
            Ok(())
        }
        BenchCommand::Scenario {
            scenario,
            duration_us,
            no_heap,
            rounds,
            json,
        } => {
            let mut sc = load_scenario(&scenario).map_err(|e| e.to_string())?;
            if let Some(us) = duration_us {
                sc.duration_us = us;
            }
            let b = irqsim::bench::bench_scenario_rounds(&sc, !no_heap, rounds)
                .map_err(|e| e.to_string())?;
            if json {
                return print_stdout(&serde_json::to_string_pretty(&b).expect("serializes"));
            }
            println!(
                "{}: {:.0} us simulated in {:.3} s wall (built in {:.3} s); {} events, {} MSIs\n  {:.2} M simulated MSIs/s, {:.2} M events/s, {:.1} events/MSI, peak memory {:.1} MiB\n  (model throughput on this machine)",
                scenario,
                b.sim_time_us,
                b.wall_seconds,
                b.build_seconds,
                b.events,
                b.msis,
                b.msis_per_sec / 1e6,
                b.events_per_sec / 1e6,
                b.events_per_msi,
                b.peak_rss_bytes as f64 / (1 << 20) as f64
            );
            if let (Some(heap), Some(ratio)) = (&b.heap, b.ratio_to_heap) {
                println!(
                    "  {:.1} ns/event at {:.1} mean pending events; a plain BinaryHeap loop at {} pending: {:.1} ns/event; ratio {:.2}",
                    b.ns_per_event, b.mean_pending, heap.pending, heap.ns_per_event, ratio
                );
            }
            if b.rounds.len() > 1 {
                let [lo, hi] = b.ns_per_event_range;
                print!(
                    "  median of {} rounds; model {:.1}-{:.1} ns/event",
                    b.rounds.len(),
                    lo,
                    hi
                );
                match b.ratio_to_heap_range {
                    Some([lo, hi]) => println!(", ratio to the heap loop {lo:.2}-{hi:.2}"),
                    None => println!(),
                }
            }
            if let Some(us) = b.suggested_duration_us {
                println!(
                    "  note: the median round ran {:.1} ms of wall clock, too short to measure steadily; --duration-us {us} would take about {} s a round",
                    b.wall_seconds * 1e3,
                    irqsim::bench::SUGGESTED_ROUND_SECONDS
                );
            }
            if let Some(mix) = &b.event_mix {
                println!("  event mix (untimed run; per MSI, share of events):");
                for row in mix.iter().take(EVENT_MIX_ROWS_SHOWN) {
                    println!(
                        "    {:<36} {:>8.2} {:>6.1}%",
                        row.kind.to_string(),
                        row.per_msi,
                        row.share * 100.0
                    );
                }
                if mix.len() > EVENT_MIX_ROWS_SHOWN {
                    println!(
                        "    ... {} more kinds (--json lists all)",
                        mix.len() - EVENT_MIX_ROWS_SHOWN
                    );
                }
            }
            println!("  build: {}", b.build);
            Ok(())
        }
    }
}

/// Chrome trace-event output (opens in ui.perfetto.dev).
#[derive(clap::Args, Default)]
struct TraceArgs {
    /// Write a Chrome trace-event JSON file (Perfetto, chrome://tracing).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Keep only trace events from this simulated time on, in microseconds.
    #[arg(long, value_name = "US", requires = "trace")]
    trace_from: Option<f64>,
    /// Keep only trace events up to this simulated time, in microseconds.
    #[arg(long, value_name = "US", requires = "trace")]
    trace_to: Option<f64>,
}

impl TraceArgs {
    fn open(&self) -> Result<Option<ChromeTrace>, String> {
        let Some(path) = &self.trace else {
            return Ok(None);
        };
        for (flag, v) in [
            ("--trace-from", self.trace_from),
            ("--trace-to", self.trace_to),
        ] {
            if let Some(v) = v {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(format!(
                        "{flag} {v} is not allowed: expected microseconds >= 0"
                    ));
                }
            }
        }
        if let (Some(a), Some(b)) = (self.trace_from, self.trace_to) {
            if a > b {
                return Err(format!("--trace-from {a} is after --trace-to {b}"));
            }
        }
        ChromeTrace::create(path, TraceWindow::from_us(self.trace_from, self.trace_to))
            .map(Some)
            .map_err(|e| format!("cannot create trace file {}: {e}", path.display()))
    }
}

fn finish_trace(trace: Option<ChromeTrace>, path: &Option<PathBuf>) -> Result<(), String> {
    if let (Some(t), Some(p)) = (trace, path) {
        let n = t
            .finish()
            .map_err(|e| format!("cannot write trace file {}: {e}", p.display()))?;
        eprintln!(
            "trace: {n} events written to {} (open in ui.perfetto.dev)",
            p.display()
        );
    }
    Ok(())
}

#[derive(Subcommand)]
enum Command {
    /// Run a scenario: a TOML file, or the name of an embedded scenario (see `list`).
    Run {
        /// Path of a scenario file, or an embedded scenario name such as `default`.
        scenario: String,
        /// Override the scenario's seed.
        #[arg(long)]
        seed: Option<u64>,
        /// Write the JSON report to PATH, or to stdout with `-` (the table is not printed then).
        #[arg(long, value_name = "PATH|-")]
        json: Option<String>,
        /// Print a line per device, NIC queue, VMD domain, shootdown load and IOAPIC
        /// pin and a row per CPU (by default a kind with more than 8 is summarised,
        /// and the CPU table keeps the 8 busiest of more than 16).
        #[arg(long)]
        full: bool,
        #[command(flatten)]
        trace: TraceArgs,
    },
    /// Run a built-in experiment and print its table.
    Experiment {
        /// Experiment name (see `list`).
        name: String,
        /// Print `{"experiment": NAME, "rows": [...]}` instead of the table.
        #[arg(long)]
        json: bool,
        /// Seed of every point of the experiment.
        #[arg(long, default_value_t = DEFAULT_SEED)]
        seed: u64,
        #[command(flatten)]
        trace: TraceArgs,
        /// Draw the experiment's main figure as SVG.
        #[arg(long, value_name = "FILE.svg")]
        plot: Option<PathBuf>,
        /// Run on this platform profile instead of the experiment's own (`irqsim platforms`).
        #[arg(long, value_name = "NAME")]
        platform: Option<String>,
        /// Set one scenario field on every point that has it, after the platform
        /// (e.g. `costs.fabric.message_occupancy_ns=200`); repeatable.
        #[arg(long = "set", value_name = "FIELD=VALUE")]
        sets: Vec<String>,
        /// Write each point's scenario (platform and sets applied) as a TOML file into
        /// DIR and run nothing; `irqsim run DIR/FILE.toml` runs one point alone.
        #[arg(long, value_name = "DIR")]
        scenarios: Option<PathBuf>,
    },
    /// Set every published figure of the seeds (000-004) that an experiment reproduces
    /// beside the model's value; with --sensitivity, move each assumed or calibrated
    /// cost by -20 % and +20 % and list the comparisons that change direction.
    Validate {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Also run the one-at-a-time +-20 % moves.
        #[arg(long)]
        sensitivity: bool,
        /// Worker threads (default: the machine's CPUs).
        #[arg(long)]
        threads: Option<usize>,
        /// Seed of every run.
        #[arg(long, default_value_t = DEFAULT_SEED)]
        seed: u64,
    },
    /// List the platform profiles, or show one profile's every field with its unit
    /// and source.
    Platforms {
        /// A profile to show whole.
        name: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run a parameter sweep: axes over scenario fields, every point in parallel.
    Sweep(irqsim::sweep::SweepArgs),
    /// Join the outputs of a sweep's shards (`irqsim sweep --shard K/N`).
    Merge(irqsim::sweep::MergeArgs),
    /// List built-in experiments and embedded scenarios.
    List,
    /// Measure the engine or a whole scenario.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Explore every interleaving of a handler variant with the IOMMU, SN changes and
    /// the APIC; exit 0 if every invariant holds, 1 with a counterexample if not.
    Explore(irqsim::explore::cli::ExploreArgs),
}

/// Kinds of events `bench scenario` prints in its text output; JSON has them all.
const EVENT_MIX_ROWS_SHOWN: usize = 10;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Explore(args)) => return irqsim::explore::cli::cli_main(args),
        None => run_experiment(
            "posted-vs-remapped",
            false,
            DEFAULT_SEED,
            &TraceArgs::default(),
            None,
            Overrides::default(),
        ),
        Some(Command::Experiment {
            name,
            json,
            seed,
            trace,
            plot,
            platform,
            sets,
            scenarios,
        }) => run_experiment(
            &name,
            json,
            seed,
            &trace,
            plot.as_deref(),
            Overrides {
                platform,
                sets,
                scenarios,
            },
        ),
        Some(Command::Platforms { name, json }) => platforms(name.as_deref(), json),
        Some(Command::Validate {
            json,
            sensitivity,
            threads,
            seed,
        }) => {
            let threads = threads.unwrap_or_else(irqsim::sweep::default_threads);
            if threads == 0 {
                Err("--threads 0 is not allowed: expected at least 1".to_string())
            } else {
                let v = irqsim::validate::validate(seed, sensitivity, threads);
                if json {
                    print_stdout(&serde_json::to_string_pretty(&v).expect("serializes"))
                } else {
                    print_stdout(&irqsim::validate::render(&v))
                }
            }
        }
        Some(Command::Sweep(args)) => irqsim::sweep::cli_sweep(args),
        Some(Command::Merge(args)) => irqsim::sweep::cli_merge(args),
        Some(Command::Run {
            scenario,
            seed,
            json,
            full,
            trace,
        }) => {
            let detail = if full { Detail::Full } else { Detail::Summary };
            run_scenario(&scenario, seed, json.as_deref(), detail, &trace)
        }
        Some(Command::Bench(cmd)) => run_bench(cmd),
        Some(Command::List) => {
            list();
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("error: {msg}");
            ExitCode::from(2)
        }
    }
}

fn list() {
    println!("experiments:");
    for e in experiments::ALL {
        println!("  {:<22} {}", e.name, e.summary);
    }
    println!("embedded scenarios (irqsim run NAME):");
    for (name, _) in irqsim::scenarios::EMBEDDED {
        println!("  {name}");
    }
}

/// `--platform` and `--set` of `irqsim experiment`.
#[derive(Default)]
struct Overrides {
    platform: Option<String>,
    sets: Vec<String>,
    /// Write the points' scenarios here instead of running them.
    scenarios: Option<PathBuf>,
}

fn platforms(name: Option<&str>, json: bool) -> Result<(), String> {
    match name {
        Some(n) => {
            let p = irqsim::platform::get(n).map_err(|e| e.to_string())?;
            if json {
                print_stdout(&serde_json::to_string_pretty(p).expect("serializes"))
            } else {
                print_stdout(&irqsim::platform::render(p))
            }
        }
        None if json => print_stdout(
            &serde_json::to_string_pretty(irqsim::platform::all()).expect("serializes"),
        ),
        None => {
            let mut t = irqsim::report::table::Table::new(["name", "seeds", "machine"]);
            for p in irqsim::platform::all() {
                let seeds = if p.seeds.is_empty() {
                    "-".to_string()
                } else {
                    p.seeds.join(",")
                };
                t.row([p.name.clone(), seeds, p.machine.clone()]);
            }
            print_stdout(&format!(
                "{}(default: {}; `irqsim platforms NAME` shows every field with its source)",
                t.render(),
                irqsim::platform::DEFAULT_PLATFORM
            ))
        }
    }
}

fn run_experiment(
    name: &str,
    json: bool,
    seed: u64,
    trace: &TraceArgs,
    plot: Option<&Path>,
    overrides: Overrides,
) -> Result<(), String> {
    let Some(info) = experiments::find(name) else {
        let names: Vec<&str> = experiments::ALL.iter().map(|e| e.name).collect();
        return Err(format!(
            "unknown experiment {name:?}: expected one of {}",
            names.join(", ")
        ));
    };
    let sets = overrides
        .sets
        .iter()
        .map(|s| experiments::FieldSet::parse(s))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(p) = &overrides.platform {
        irqsim::platform::get(p).map_err(|e| e.to_string())?;
    }
    let mut ctx = ExperimentCtx::new(seed);
    ctx.platform = overrides.platform;
    ctx.sets = sets;
    (info.check)(&ctx)?;
    if let Some(dir) = &overrides.scenarios {
        return write_scenarios(info, &ctx, dir);
    }
    ctx.trace = trace.open()?;
    let mut out = (info.run)(&ctx);
    out.notes.extend(ctx.set_notes());
    finish_trace(ctx.trace, &trace.trace)?;
    if let Some(path) = plot {
        irqsim::plot::plot_experiment(&out, path)?;
        eprintln!("plot: {}", path.display());
    }
    let text = if json { out.to_json() } else { out.to_table() };
    print_stdout(&text)
}

/// Writes every point's scenario of `info`, as it would run in `ctx`, into `dir`, one
/// numbered TOML file per point in row order, and lists them.
fn write_scenarios(
    info: &experiments::ExperimentInfo,
    ctx: &ExperimentCtx,
    dir: &Path,
) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut listing = String::new();
    for (i, point) in (info.scenarios)(ctx).iter().enumerate() {
        let sc = ctx.prepare(point)?;
        let slug: String = sc
            .name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        let path = dir.join(format!("{i:02}-{slug}.toml"));
        std::fs::write(&path, sc.to_toml()).map_err(|e| format!("{}: {e}", path.display()))?;
        listing.push_str(&format!("{}\n", path.display()));
    }
    print_stdout(&listing)
}

fn load_scenario(arg: &str) -> Result<Scenario, ScenarioError> {
    let path = Path::new(arg);
    if !path.exists() {
        if let Some(text) = irqsim::scenarios::embedded(arg) {
            let s = Scenario::from_toml_str(text, arg)?;
            s.validate()?;
            return Ok(s);
        }
    }
    Scenario::load(&PathBuf::from(arg))
}

fn run_scenario(
    arg: &str,
    seed: Option<u64>,
    json: Option<&str>,
    detail: Detail,
    trace: &TraceArgs,
) -> Result<(), String> {
    let mut scenario = load_scenario(arg).map_err(|e| e.to_string())?;
    if let Some(seed) = seed {
        scenario.seed = seed;
    }
    for w in scenario.warnings() {
        eprintln!("warning: {w}");
    }
    let mut sys = System::new(&scenario).map_err(|e| e.to_string())?;
    // Opened before the run, so an unwritable path is found at once, not after it.
    let json_file = match json {
        Some(path) if path != "-" => Some(
            std::fs::File::create(path).map_err(|e| format!("--json {path}: cannot write: {e}"))?,
        ),
        _ => None,
    };
    let tracer = trace.open()?;
    // `--trace-from` requires `--trace`, so a window means a trace is being written.
    if let Some(from) = trace.trace_from.filter(|&f| f > scenario.duration_us) {
        eprintln!(
            "warning: --trace-from {from} is after the run ends (duration_us = {}): the trace will hold no events",
            scenario.duration_us
        );
    }
    if let Some(t) = &tracer {
        let name = if scenario.name.is_empty() {
            arg
        } else {
            &scenario.name
        };
        sys.set_observer(Box::new(t.run(name, sys.cpu_count(), &sys.device_names())));
    }
    run_with_progress(&mut sys, scenario.duration_us);
    drop(sys.take_observer());
    finish_trace(tracer, &trace.trace)?;
    let report = sys.report();
    match json {
        Some("-") => print_stdout(&report.to_json()),
        Some(path) => {
            use std::io::Write;
            let mut file = json_file.expect("opened before the run");
            writeln!(file, "{}", report.to_json())
                .map_err(|e| format!("--json {path}: cannot write: {e}"))?;
            print_stdout(&render_report_with(&report, detail))
        }
        None => print_stdout(&render_report_with(&report, detail)),
    }
}

/// Runs to the end; when stderr is a terminal, shows simulated time done and the
/// event rate as it goes (quiet otherwise, so logs and pipes stay clean).
fn run_with_progress(sys: &mut System, duration_us: f64) {
    use std::io::IsTerminal;
    let stderr = std::io::stderr();
    if !stderr.is_terminal() {
        sys.run_to_end();
        return;
    }
    const SLICES: u32 = 100;
    let slice = sim_core::Duration::from_secs_f64(duration_us * 1e-6 / SLICES as f64);
    let started = std::time::Instant::now();
    for i in 1..=SLICES {
        if i == SLICES {
            sys.run_to_end();
        } else {
            sys.run_for(slice);
        }
        let secs = started.elapsed().as_secs_f64().max(1e-9);
        eprint!(
            "\r  simulated {:.1} of {:.1} us ({:>3}%), {} events, {:.2} M events/s ",
            sys.now().as_ns_f64() / 1e3,
            duration_us,
            i,
            sys.events(),
            sys.events() as f64 / secs / 1e6
        );
    }
    eprintln!();
}

/// Prints, treating a closed pipe (e.g. `| head`) as success rather than a panic.
fn print_stdout(text: &str) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| {
        if text.ends_with('\n') {
            Ok(())
        } else {
            out.write_all(b"\n")
        }
    }) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(format!("cannot write to stdout: {e}")),
    }
}
