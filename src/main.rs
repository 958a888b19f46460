//! The `irqsim` command line.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use irqsim::experiments::{self, DEFAULT_SEED};
use irqsim::report::table::render_report;
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
    },
    /// List built-in experiments and embedded scenarios.
    List,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        None => run_experiment("posted-vs-remapped", false, DEFAULT_SEED),
        Some(Command::Experiment { name, json, seed }) => run_experiment(&name, json, seed),
        Some(Command::Run {
            scenario,
            seed,
            json,
        }) => run_scenario(&scenario, seed, json.as_deref()),
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

fn run_experiment(name: &str, json: bool, seed: u64) -> Result<(), String> {
    let Some(info) = experiments::find(name) else {
        let names: Vec<&str> = experiments::ALL.iter().map(|e| e.name).collect();
        return Err(format!(
            "unknown experiment {name:?}: expected one of {}",
            names.join(", ")
        ));
    };
    let out = (info.run)(seed);
    let text = if json { out.to_json() } else { out.to_table() };
    print_stdout(&text)
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

fn run_scenario(arg: &str, seed: Option<u64>, json: Option<&str>) -> Result<(), String> {
    let mut scenario = load_scenario(arg).map_err(|e| e.to_string())?;
    if let Some(seed) = seed {
        scenario.seed = seed;
    }
    let report = System::run_scenario(&scenario).map_err(|e| e.to_string())?;
    match json {
        Some("-") => print_stdout(&report.to_json()),
        Some(path) => {
            std::fs::write(path, report.to_json() + "\n")
                .map_err(|e| format!("cannot write {path}: {e}"))?;
            print_stdout(&render_report(&report))
        }
        None => print_stdout(&render_report(&report)),
    }
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
