//! Chrome trace-event JSON (opens in ui.perfetto.dev and chrome://tracing).
//!
//! One trace file can hold several runs (an experiment's points): each run gets its own
//! block of process ids, named after the run. Per run:
//! - "CPUs": a track per CPU with irq entry, PID accesses, each handler, EOI, exit;
//! - "devices": a track per device with one slice per MSI raised, and a flow arrow
//!   from each MSI to the handler that served it;
//! - "IOMMU": remap lookups, descriptor updates, faults and notifications;
//! - counters: each descriptor line's MESI state per agent (M=3, E=2, S=1, I=0) and
//!   the number of vectors pending in each PIR.
//!
//! Events are streamed to the file as they happen; only those whose time falls in the
//! window are written, so long runs stay small.

use std::cell::RefCell;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::rc::Rc;

use pid_model::Mesi;
use sim_core::{Duration, SimTime};

use crate::system::{CpuActivity, IommuWork, Observer, SimEvent};

/// Which part of a run to keep, in simulated time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TraceWindow {
    /// Start: spans that end before it are left out.
    pub from: SimTime,
    /// End: spans that start after it are left out.
    pub to: SimTime,
}

impl TraceWindow {
    /// The whole run.
    pub const ALL: TraceWindow = TraceWindow {
        from: SimTime::ZERO,
        to: SimTime::MAX,
    };

    /// From `from_us` to `to_us` microseconds of simulated time.
    pub fn from_us(from_us: Option<f64>, to_us: Option<f64>) -> TraceWindow {
        TraceWindow {
            from: from_us.map_or(SimTime::ZERO, |u| {
                SimTime::ZERO + Duration::from_secs_f64(u * 1e-6)
            }),
            to: to_us.map_or(SimTime::MAX, |u| {
                SimTime::ZERO + Duration::from_secs_f64(u * 1e-6)
            }),
        }
    }

    fn keeps(&self, start: SimTime, dur: Duration) -> bool {
        start <= self.to && SimTime(start.0.saturating_add(dur.0)) >= self.from
    }
}

struct TraceFile {
    out: BufWriter<File>,
    first: bool,
    events: u64,
    error: Option<std::io::Error>,
    runs: u32,
}

impl TraceFile {
    fn write(&mut self, json: std::fmt::Arguments<'_>) {
        if self.error.is_some() {
            return;
        }
        let sep = if self.first { "" } else { ",\n" };
        self.first = false;
        self.events += 1;
        if let Err(e) = self
            .out
            .write_all(sep.as_bytes())
            .and_then(|_| self.out.write_fmt(json))
        {
            self.error = Some(e);
        }
    }
}

/// A trace file being written. Make one observer per run with [`ChromeTrace::run`],
/// attach it to the run's system, and call [`ChromeTrace::finish`] at the end.
#[derive(Clone)]
pub struct ChromeTrace {
    file: Rc<RefCell<TraceFile>>,
    window: TraceWindow,
}

impl ChromeTrace {
    /// Creates (truncates) the file at `path` and writes the JSON header; only events
    /// overlapping `window` are written.
    pub fn create(path: &Path, window: TraceWindow) -> std::io::Result<ChromeTrace> {
        let mut out = BufWriter::new(File::create(path)?);
        out.write_all(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n")?;
        Ok(ChromeTrace {
            file: Rc::new(RefCell::new(TraceFile {
                out,
                first: true,
                events: 0,
                error: None,
                runs: 0,
            })),
            window,
        })
    }

    /// An observer for one run, named `name`, with `cpus` CPUs and these devices.
    pub fn run(&self, name: &str, cpus: u32, devices: &[String]) -> RunTrace {
        let mut f = self.file.borrow_mut();
        let base = 1 + f.runs * 4;
        f.runs += 1;
        let name = json_escape(name);
        for (pid, what) in [
            (base, "CPUs"),
            (base + 1, "devices"),
            (base + 2, "IOMMU"),
            (base + 3, "PID lines"),
        ] {
            f.write(format_args!(
                r#"{{"ph":"M","name":"process_name","pid":{pid},"tid":0,"args":{{"name":"{name}: {what}"}}}}"#
            ));
            f.write(format_args!(
                r#"{{"ph":"M","name":"process_sort_index","pid":{pid},"tid":0,"args":{{"sort_index":{pid}}}}}"#
            ));
        }
        for c in 0..cpus {
            f.write(format_args!(
                r#"{{"ph":"M","name":"thread_name","pid":{base},"tid":{c},"args":{{"name":"cpu{c}"}}}}"#
            ));
        }
        for (d, dname) in devices.iter().enumerate() {
            let dname = json_escape(dname);
            f.write(format_args!(
                r#"{{"ph":"M","name":"thread_name","pid":{},"tid":{d},"args":{{"name":"{dname}"}}}}"#,
                base + 1
            ));
        }
        f.write(format_args!(
            r#"{{"ph":"M","name":"thread_name","pid":{},"tid":0,"args":{{"name":"remap / post"}}}}"#,
            base + 2
        ));
        RunTrace {
            file: Rc::clone(&self.file),
            window: self.window,
            base,
        }
    }

    /// Closes the JSON and flushes; returns how many trace events were written.
    pub fn finish(self) -> std::io::Result<u64> {
        let mut f = self.file.borrow_mut();
        if let Some(e) = f.error.take() {
            return Err(e);
        }
        f.out.write_all(b"\n]}\n")?;
        f.out.flush()?;
        Ok(f.events)
    }
}

/// The observer of one run in a [`ChromeTrace`].
pub struct RunTrace {
    file: Rc<RefCell<TraceFile>>,
    window: TraceWindow,
    base: u32,
}

fn us(t: SimTime) -> f64 {
    t.0 as f64 / 1e6
}

fn dur_us(d: Duration) -> f64 {
    d.0 as f64 / 1e6
}

fn mesi_value(s: Mesi) -> u8 {
    match s {
        Mesi::M => 3,
        Mesi::E => 2,
        Mesi::S => 1,
        Mesi::I => 0,
    }
}

fn json_escape(s: &str) -> String {
    serde_json::to_string(s)
        .expect("strings serialize")
        .trim_matches('"')
        .to_string()
}

impl Observer for RunTrace {
    fn event(&mut self, event: &SimEvent<'_>) {
        let (start, dur) = match *event {
            SimEvent::MsiRaised { t, .. }
            | SimEvent::MsiDropped { t, .. }
            | SimEvent::NotificationSent { t, .. }
            | SimEvent::HandlerServes { t, .. }
            | SimEvent::PidLineState { t, .. }
            | SimEvent::PirPopulation { t, .. }
            | SimEvent::SmmuConsumed { t, .. }
            | SimEvent::IoapicPin { t, .. }
            | SimEvent::AlgorithmStep { t, .. } => (t, Duration::ZERO),
            SimEvent::IommuWork { start, dur, .. } | SimEvent::CpuSpan { start, dur, .. } => {
                (start, dur)
            }
        };
        if !self.window.keeps(start, dur) {
            return;
        }
        let (cpus, devs, iommu, lines) = (self.base, self.base + 1, self.base + 2, self.base + 3);
        let mut f = self.file.borrow_mut();
        match *event {
            SimEvent::MsiRaised { t, device, msi } => {
                // A 1 ns slice to anchor the flow arrow to the handler that serves it.
                f.write(format_args!(
                    r#"{{"ph":"X","name":"MSI","cat":"msi","pid":{devs},"tid":{device},"ts":{:.6},"dur":0.001,"args":{{"msi":{}}}}}"#,
                    us(t),
                    msi.id
                ));
                f.write(format_args!(
                    r#"{{"ph":"s","name":"msi","cat":"msi","id":{},"pid":{devs},"tid":{device},"ts":{:.6}}}"#,
                    msi.id,
                    us(t)
                ));
            }
            SimEvent::HandlerServes { t, cpu, msis, .. } => {
                for m in msis {
                    f.write(format_args!(
                        r#"{{"ph":"f","bp":"e","name":"msi","cat":"msi","id":{},"pid":{cpus},"tid":{cpu},"ts":{:.6}}}"#,
                        m.id,
                        us(t)
                    ));
                }
            }
            SimEvent::CpuSpan {
                cpu,
                start,
                dur,
                activity,
            } => {
                let cat = match activity {
                    CpuActivity::IrqEntry { .. } | CpuActivity::IrqExit => "irq",
                    CpuActivity::Handler { .. } => "handler",
                    CpuActivity::PidAccess { .. } => "pid",
                    CpuActivity::Eoi => "eoi",
                    CpuActivity::Deferred { .. } => "deferred",
                    CpuActivity::CrossCall { .. } => "xcall",
                    CpuActivity::Smmu { .. } => "smmu",
                    CpuActivity::Ioapic { .. } => "ioapic",
                };
                f.write(format_args!(
                    r#"{{"ph":"X","name":"{}","cat":"{cat}","pid":{cpus},"tid":{cpu},"ts":{:.6},"dur":{:.6}}}"#,
                    activity.name(),
                    us(start),
                    dur_us(dur)
                ));
            }
            SimEvent::IommuWork {
                start,
                dur,
                msi,
                what,
            } => {
                let name = match what {
                    IommuWork::Remapped { cpu, vector } => format!("remap {vector} -> cpu{cpu}"),
                    IommuWork::PostLookup { cpu, vector } => {
                        format!("posted IRTE {vector} -> cpu{cpu}")
                    }
                    IommuWork::Posted {
                        cpu,
                        vector,
                        merged,
                        notified,
                    } => format!(
                        "post {vector} into PID cpu{cpu}{}{}",
                        if merged { " (merged)" } else { "" },
                        if notified { " + notify" } else { "" }
                    ),
                    IommuWork::Fault { code } => format!("fault {code:#04x}"),
                };
                f.write(format_args!(
                    r#"{{"ph":"X","name":"{name}","cat":"iommu","pid":{iommu},"tid":0,"ts":{:.6},"dur":{:.6},"args":{{"msi":{}}}}}"#,
                    us(start),
                    dur_us(dur),
                    msi.id
                ));
            }
            SimEvent::MsiDropped { t, msi, reason } => {
                f.write(format_args!(
                    r#"{{"ph":"i","s":"t","name":"dropped: {}","cat":"fault","pid":{iommu},"tid":0,"ts":{:.6},"args":{{"msi":{}}}}}"#,
                    json_escape(reason),
                    us(t),
                    msi.id
                ));
            }
            SimEvent::NotificationSent { t, cpu, vector } => {
                f.write(format_args!(
                    r#"{{"ph":"i","s":"t","name":"notify {vector} -> cpu{cpu}","cat":"notification","pid":{iommu},"tid":0,"ts":{:.6}}}"#,
                    us(t)
                ));
            }
            SimEvent::PidLineState {
                t,
                line,
                agent,
                state,
            } => {
                let agent = agent.map_or_else(|| "iommu".to_string(), |c| format!("cpu{c}"));
                f.write(format_args!(
                    r#"{{"ph":"C","name":"PID cpu{line} {agent} (M3 E2 S1 I0)","pid":{lines},"ts":{:.6},"args":{{"state":{}}}}}"#,
                    us(t),
                    mesi_value(state)
                ));
            }
            // Spans and instants above already show these steps.
            SimEvent::AlgorithmStep { .. } => {}
            SimEvent::IoapicPin { t, pin, change } => {
                f.write(format_args!(
                    r#"{{"ph":"i","s":"t","name":"ioapic pin {pin} {change:?}","cat":"ioapic","pid":{iommu},"tid":2,"ts":{:.6}}}"#,
                    us(t)
                ));
            }
            SimEvent::SmmuConsumed { t, index, command } => {
                let name = command.map_or_else(|| "illegal".to_string(), |c| format!("{c:?}"));
                f.write(format_args!(
                    r#"{{"ph":"i","s":"t","name":"smmu: {}","cat":"smmu","pid":{iommu},"tid":1,"ts":{:.6},"args":{{"slot":{index}}}}}"#,
                    json_escape(&name),
                    us(t)
                ));
            }
            SimEvent::PirPopulation { t, cpu, pending } => {
                f.write(format_args!(
                    r#"{{"ph":"C","name":"PIR pending cpu{cpu}","pid":{lines},"ts":{:.6},"args":{{"vectors":{pending}}}}}"#,
                    us(t)
                ));
            }
        }
    }
}
