//! Comparison harness: irqsim's engine "ping" benchmark, the plain `BinaryHeap` loop and
//! the same ping model written for the nexosim discrete-event framework, run one after
//! the other in a single process and printed side by side.
//!
//! nexosim is a dependency of this harness only, never of irqsim: this crate is its own
//! workspace with its own lockfile.
//!
//! # The model on each engine
//!
//! N entities, each with exactly one pending event; handling an event schedules that
//! entity's next event at now + a uniform delay in [1, 1000] ns, drawn from one seeded
//! `ChaCha8Rng` (`gen_range(1..=1000u64)`, one draw per handled event). The N initial
//! events take their delays from the same stream, in entity order, before timing starts.
//! irqsim and the binary heap come from `irqsim::bench` unchanged.
//!
//! On nexosim the model is one [`Ping`] model holding the RNG and a handled-event counter.
//! Its `init` seeds the N initial events by self-scheduling `ping(entity)`, and `ping`
//! counts, draws, and self-schedules `ping(entity)` at now + delay through its
//! [`Context`]. Only the stepping is timed: `Simulation::step` in a loop until the counter
//! reaches M.
//!
//! # Where the nexosim run differs from ours (read before quoting a ratio)
//!
//! - **Granularity of a step.** `Simulation::step` advances to the next timestamp and runs
//!   *every* event due then, so the run cannot stop in the middle of a timestamp: it may
//!   handle a few more than M events (as many as share the M-th event's timestamp). The
//!   exact count handled is what is reported and what ns/event divides by. With delays
//!   drawn in whole ns there are about N/500 events per occupied timestamp, so the
//!   overshoot is at most a few hundred out of millions.
//! - **Per-event machinery.** irqsim's loop is a pop and a push on a queue of plain
//!   values. In nexosim each self-scheduled event is a type-erased entry (boxed argument)
//!   in a mutex-guarded binary-heap scheduler queue; at each step the due entries are
//!   turned into futures, merged per origin into one sequential future, spawned on the
//!   async executor, delivered through the model's bounded mailbox channel and polled.
//!   That is what nexosim is built to do (message passing between many models that may run
//!   in parallel), and it is overhead a single self-pinging model pays without benefit.
//!   The comparison is "this model, written the natural way on each engine", not "the same
//!   data structure".
//! - **Threads.** By default the nexosim simulation is built with
//!   `SimInit::with_num_threads(1)`, which selects nexosim's single-threaded executor, so
//!   all three engines run on one thread. `--nexosim-threads 0` uses `SimInit::new()` (one
//!   worker per logical CPU), which is what nexosim's own examples call; with a single
//!   model there is nothing to parallelise, so expect that to be slower, not faster.
//! - **Counter.** The model publishes its count through an `Arc<AtomicU64>` (a relaxed
//!   load and store per event, no read-modify-write) so the driver can read it between
//!   steps. irqsim's loop counts with a loop variable. The cost is a couple of plain
//!   memory operations per event.
//! - **Serializable state.** nexosim requires models to be serde-serializable (for
//!   snapshot save/restore), so the RNG is held with rand_chacha's `serde1` feature and the
//!   shared counter is skipped by serde. Neither costs anything while running.
//! - **Time.** nexosim's clock is a `MonotonicTime` (seconds + nanoseconds); the delays
//!   are whole nanoseconds (`Duration::from_nanos`), and irqsim's are the same values in
//!   ps, so the reachable times are identical.
//! - **Same-time order and final time.** nexosim keys its queue by (time, origin model)
//!   and keeps insertion order among equal keys; with one model that is the same FIFO
//!   tie-break as the binary heap's insertion sequence, and irqsim's queue pops in the
//!   same order. Even a different tie-break could only swap which entity gets which draw
//!   inside one timestamp, which leaves the sequence of event times unchanged. The final
//!   simulated time of the nexosim run (the timestamp of its last step, which holds the
//!   M-th event) therefore equals irqsim's; the harness checks it and says so when it
//!   does not.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use irqsim::bench::{ping_binary_heap, ping_irqsim, EngineBench};
use nexosim::model::{schedulable, Context, Model};
use nexosim::simulation::{Mailbox, SimInit};
use nexosim::time::MonotonicTime;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// The ping model on nexosim: every entity's pending event is a self-scheduled
/// `ping(entity)` on this one model.
#[derive(Serialize, Deserialize)]
pub struct Ping {
    /// The single delay stream, shared by all entities.
    rng: ChaCha8Rng,
    /// Entities to seed at initialization.
    pending: u64,
    /// Events handled so far, readable from outside the simulation between steps.
    #[serde(skip)]
    handled: Arc<AtomicU64>,
}

#[Model]
impl Ping {
    fn new(pending: u64, seed: u64, handled: Arc<AtomicU64>) -> Self {
        Ping {
            rng: ChaCha8Rng::seed_from_u64(seed),
            pending,
            handled,
        }
    }

    fn delay(&mut self) -> Duration {
        Duration::from_nanos(self.rng.gen_range(1..=1000u64))
    }

    /// Seeds one pending event per entity, in entity order, from the same stream.
    #[nexosim(init)]
    async fn init(&mut self, cx: &Context<Self>) {
        for entity in 0..self.pending {
            let d = self.delay();
            cx.schedule_event(d, schedulable!(Self::ping), entity)
                .expect("a delay of at least 1 ns is in the future");
        }
    }

    /// Handles one event of `entity` and schedules that entity's next one.
    #[nexosim(schedulable)]
    fn ping(&mut self, entity: u64, cx: &Context<Self>) {
        let n = self.handled.load(Ordering::Relaxed) + 1;
        self.handled.store(n, Ordering::Relaxed);
        let d = self.delay();
        cx.schedule_event(d, schedulable!(Self::ping), entity)
            .expect("a delay of at least 1 ns is in the future");
    }
}

/// One nexosim measurement, with the number of `step` calls it took.
fn ping_nexosim(pending: u64, events: u64, seed: u64, threads: usize) -> (EngineBench, u64) {
    let handled = Arc::new(AtomicU64::new(0));
    let model = Ping::new(pending, seed, handled.clone());
    let mbox = Mailbox::new();
    let bench = if threads == 0 {
        SimInit::new()
    } else {
        SimInit::with_num_threads(threads)
    };
    let t0 = MonotonicTime::EPOCH;
    let mut simu = bench
        .add_model(model, mbox, "ping")
        .init(t0)
        .expect("the ping bench initializes");

    let start = Instant::now();
    let mut steps = 0u64;
    while handled.load(Ordering::Relaxed) < events {
        simu.step().expect("a ping step runs");
        steps += 1;
    }
    let secs = start.elapsed().as_secs_f64();

    let handled = handled.load(Ordering::Relaxed);
    let end_ns = simu.time().duration_since(t0).as_nanos() as u64;
    let bench = EngineBench::new("nexosim", pending, handled, secs, end_ns * 1000);
    (bench, steps)
}

/// The engine ping benchmark on irqsim, a plain binary heap and nexosim, side by side.
#[derive(Parser, Debug)]
#[command(name = "nexosim-ping", version)]
struct Args {
    /// Entities, each with one event pending at all times.
    #[arg(long, default_value_t = 1000)]
    pending: u64,
    /// Events handled in each timed loop (nexosim may handle a few more: see the docs).
    #[arg(long, default_value_t = 10_000_000)]
    events: u64,
    /// Seed of the ChaCha8 delay stream.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Times to run the three engines (in order irqsim, binary-heap, nexosim each time).
    #[arg(long, default_value_t = 1)]
    repeat: u32,
    /// Worker threads of the nexosim executor; 0 = one per logical CPU (`SimInit::new`).
    #[arg(long, default_value_t = 1)]
    nexosim_threads: usize,
    /// Print the measurements as a JSON array instead of text.
    #[arg(long)]
    json: bool,
}

/// One line of the JSON output.
#[derive(Serialize)]
struct Measurement {
    /// Which repeat (from 0) this measurement belongs to.
    repeat: u32,
    #[serde(flatten)]
    bench: EngineBench,
    /// nexosim only: `Simulation::step` calls (distinct timestamps) in the timed loop.
    #[serde(skip_serializing_if = "Option::is_none")]
    steps: Option<u64>,
    /// nexosim only: worker threads of its executor.
    #[serde(skip_serializing_if = "Option::is_none")]
    threads: Option<usize>,
}

fn print_line(b: &EngineBench) {
    println!(
        "{:<12} pending {:>8}  events {:>10}  {:>7.2} M events/s  {:>6.1} ns/event",
        b.engine,
        b.pending,
        b.events,
        b.events_per_sec / 1e6,
        b.ns_per_event
    );
}

fn main() {
    let args = Args::parse();
    if args.pending == 0 || args.events == 0 {
        eprintln!("error: --pending and --events must be at least 1");
        std::process::exit(2);
    }
    let threads = if args.nexosim_threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        args.nexosim_threads
    };

    let mut all = Vec::new();
    for repeat in 0..args.repeat {
        let ours = ping_irqsim(args.pending, args.events, args.seed);
        let heap = ping_binary_heap(args.pending, args.events, args.seed);
        let (nexo, steps) =
            ping_nexosim(args.pending, args.events, args.seed, args.nexosim_threads);

        if !args.json {
            if args.repeat > 1 {
                println!("repeat {repeat}");
            }
            for b in [&ours, &heap, &nexo] {
                print_line(b);
            }
            println!(
                "ratio irqsim / binary-heap time: {:.2}",
                ours.seconds / heap.seconds.max(1e-12)
            );
            // Per event, since nexosim may have handled a few more events than M.
            println!(
                "ratio irqsim / nexosim time:     {:.2}  (per event; nexosim: {} steps, {:.2} events/step, {} executor thread{})",
                ours.ns_per_event / nexo.ns_per_event.max(1e-12),
                steps,
                nexo.events as f64 / steps.max(1) as f64,
                threads,
                if threads == 1 { "" } else { "s" }
            );
            if nexo.final_time_ps != ours.final_time_ps {
                println!(
                    "note: final simulated time differs: irqsim {} ps, nexosim {} ps",
                    ours.final_time_ps, nexo.final_time_ps
                );
            }
        }
        all.push(Measurement {
            repeat,
            bench: ours,
            steps: None,
            threads: None,
        });
        all.push(Measurement {
            repeat,
            bench: heap,
            steps: None,
            threads: None,
        });
        all.push(Measurement {
            repeat,
            bench: nexo,
            steps: Some(steps),
            threads: Some(threads),
        });
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&all).expect("measurements serialize")
        );
    }
}
