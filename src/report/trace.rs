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
//! window are written, so long runs stay small. A flow arrow is written only when both
//! its MSI and the handler serving it are in the window. The runs of one file follow
//! each other in time (each starts 1 us after the previous one's last event) and
//! have their own flow ids. Past 100 MB a warning goes to standard error once.

use std::cell::RefCell;
use std::collections::BTreeMap;
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

/// Size past which writing a trace prints a warning.
pub const LARGE_TRACE_BYTES: u64 = 100 * 1024 * 1024;

/// Gap between two runs of one file.
const RUN_GAP: Duration = Duration::from_us(1);

/// An MSI slice lasts this long, or up to the device's next MSI if that is sooner,
/// so slices of one device never overlap.
const MSI_SLICE: Duration = Duration::from_ns(1);

struct TraceFile {
    out: BufWriter<File>,
    first: bool,
    events: u64,
    bytes: u64,
    warned: bool,
    error: Option<std::io::Error>,
    runs: u32,
    /// The latest end of anything written, absolute picoseconds.
    end_ps: u64,
    buf: String,
}

impl TraceFile {
    fn write(&mut self, json: std::fmt::Arguments<'_>) {
        if self.error.is_some() {
            return;
        }
        use std::fmt::Write as _;
        self.buf.clear();
        if !self.first {
            self.buf.push_str(",\n");
        }
        self.first = false;
        self.events += 1;
        let _ = self.buf.write_fmt(json);
        self.bytes += self.buf.len() as u64;
        if self.bytes > LARGE_TRACE_BYTES && !self.warned {
            self.warned = true;
            eprintln!(
                "trace: more than {} MB written so far; --trace-from and --trace-to keep a window",
                LARGE_TRACE_BYTES >> 20
            );
        }
        if let Err(e) = self.out.write_all(self.buf.as_bytes()) {
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
                bytes: 0,
                warned: false,
                error: None,
                runs: 0,
                end_ps: 0,
                buf: String::new(),
            })),
            window,
        })
    }

    /// An observer for one run, named `name`, with `cpus` CPUs and these devices.
    pub fn run(&self, name: &str, cpus: u32, devices: &[String]) -> RunTrace {
        let mut f = self.file.borrow_mut();
        let base = 1 + f.runs * 4;
        let offset = if f.runs == 0 {
            Duration::ZERO
        } else {
            Duration(f.end_ps) + RUN_GAP
        };
        let id_base = (f.runs as u64) << 40;
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
            offset,
            id_base,
            last_msi: vec![None; devices.len()],
            flow_starts: BTreeMap::new(),
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

/// The observer of one run in a [`ChromeTrace`]. Dropping it writes what it still
/// holds (the last MSI slice of each device).
pub struct RunTrace {
    file: Rc<RefCell<TraceFile>>,
    window: TraceWindow,
    base: u32,
    /// Where this run's time 0 lies in the file.
    offset: Duration,
    /// Added to MSI ids to make this run's flow ids.
    id_base: u64,
    /// Per device, its last MSI (raised at, id), whose slice is written when the next
    /// one comes or at the end.
    last_msi: Vec<Option<(SimTime, u64)>>,
    /// MSIs raised in the window and not yet served: (raised at, device). At most
    /// [`MAX_OPEN_FLOWS`]: the oldest goes first, and gets no flow.
    flow_starts: BTreeMap<u64, (SimTime, u32)>,
}

/// MSIs a trace remembers while they wait, to draw their flow arrow when they are
/// served. An MSI the ledger keeps only in a span (see `system::token_bag`) is served
/// without its id, so its start would otherwise stay here for the rest of the run;
/// past this many, the oldest waiting MSI loses its arrow.
pub const MAX_OPEN_FLOWS: usize = 1 << 16;

impl RunTrace {
    fn msi_slice(&self, f: &mut TraceFile, device: u32, raised: SimTime, id: u64, dur: Duration) {
        let devs = self.base + 1;
        f.write(format_args!(
            r#"{{"ph":"X","name":"MSI","cat":"msi","pid":{devs},"tid":{device},"ts":{:.6},"dur":{:.6},"args":{{"msi":{id}}}}}"#,
            us(raised + self.offset),
            dur_us(dur),
        ));
    }
}

impl Drop for RunTrace {
    fn drop(&mut self) {
        let file = Rc::clone(&self.file);
        let mut f = file.borrow_mut();
        for d in 0..self.last_msi.len() {
            if let Some((t, id)) = self.last_msi[d].take() {
                self.msi_slice(&mut f, d as u32, t, id, MSI_SLICE);
            }
        }
    }
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
        let off = self.offset;
        let file = Rc::clone(&self.file);
        let mut f = file.borrow_mut();
        f.end_ps = f.end_ps.max((start + off).0.saturating_add(dur.0));
        let _ = devs;
        match *event {
            SimEvent::MsiRaised { t, device, msi } => {
                // A short slice anchors the flow arrow to the handler that serves it.
                let d = device as usize;
                if d >= self.last_msi.len() {
                    self.last_msi.resize(d + 1, None);
                }
                if let Some((prev, id)) = self.last_msi[d].replace((t, msi.id)) {
                    let dur = MSI_SLICE.min(t.since(prev));
                    self.msi_slice(&mut f, device, prev, id, dur);
                }
                self.flow_starts.insert(msi.id, (t, device));
                if self.flow_starts.len() > MAX_OPEN_FLOWS {
                    self.flow_starts.pop_first();
                }
            }
            SimEvent::HandlerServes { t, cpu, msis, .. } => {
                for m in msis {
                    // Both ends or neither: an MSI raised before the window has none.
                    let Some((raised, device)) = self.flow_starts.remove(&m.id) else {
                        continue;
                    };
                    let id = self.id_base + m.id;
                    f.write(format_args!(
                        r#"{{"ph":"s","name":"msi","cat":"msi","id":{id},"pid":{devs},"tid":{device},"ts":{:.6}}}"#,
                        us(raised + off)
                    ));
                    f.write(format_args!(
                        r#"{{"ph":"f","bp":"e","name":"msi","cat":"msi","id":{id},"pid":{cpus},"tid":{cpu},"ts":{:.6}}}"#,
                        us(t + off)
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
                    us(start + off),
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
                    us(start + off),
                    dur_us(dur),
                    msi.id
                ));
            }
            SimEvent::MsiDropped { t, msi, reason } => {
                self.flow_starts.remove(&msi.id);
                f.write(format_args!(
                    r#"{{"ph":"i","s":"t","name":"dropped: {}","cat":"fault","pid":{iommu},"tid":0,"ts":{:.6},"args":{{"msi":{}}}}}"#,
                    json_escape(reason),
                    us(t + off),
                    msi.id
                ));
            }
            SimEvent::NotificationSent { t, cpu, vector } => {
                f.write(format_args!(
                    r#"{{"ph":"i","s":"t","name":"notify {vector} -> cpu{cpu}","cat":"notification","pid":{iommu},"tid":0,"ts":{:.6}}}"#,
                    us(t + off)
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
                    us(t + off),
                    mesi_value(state)
                ));
            }
            // Spans and instants above already show these steps.
            SimEvent::AlgorithmStep { .. } => {}
            SimEvent::IoapicPin { t, pin, change } => {
                f.write(format_args!(
                    r#"{{"ph":"i","s":"t","name":"ioapic pin {pin} {change:?}","cat":"ioapic","pid":{iommu},"tid":2,"ts":{:.6}}}"#,
                    us(t + off)
                ));
            }
            SimEvent::SmmuConsumed { t, index, command } => {
                let name = command.map_or_else(|| "illegal".to_string(), |c| format!("{c:?}"));
                f.write(format_args!(
                    r#"{{"ph":"i","s":"t","name":"smmu: {}","cat":"smmu","pid":{iommu},"tid":1,"ts":{:.6},"args":{{"slot":{index}}}}}"#,
                    json_escape(&name),
                    us(t + off)
                ));
            }
            SimEvent::PirPopulation { t, cpu, pending } => {
                f.write(format_args!(
                    r#"{{"ph":"C","name":"PIR pending cpu{cpu}","pid":{lines},"ts":{:.6},"args":{{"vectors":{pending}}}}}"#,
                    us(t + off)
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::ledger::MsiToken;

    #[test]
    fn msis_never_served_by_id_do_not_pile_up() {
        let path = std::env::temp_dir().join(format!("irqsim-trace-{}.json", std::process::id()));
        let trace = ChromeTrace::create(&path, TraceWindow::ALL).unwrap();
        let mut run = trace.run("r", 1, &["dev".to_string()]);
        let n = MAX_OPEN_FLOWS as u64 + 1000;
        for id in 0..n {
            let t = SimTime::ZERO + sim_core::Duration::from_ns(id);
            let msi = MsiToken { id, raised: t };
            run.event(&SimEvent::MsiRaised { t, device: 0, msi });
        }
        assert_eq!(run.flow_starts.len(), MAX_OPEN_FLOWS);
        // The newest stay, so a late serve still draws its arrow.
        assert!(run.flow_starts.contains_key(&(n - 1)));
        assert!(!run.flow_starts.contains_key(&999));
        drop(run);
        trace.finish().unwrap();
        let _ = std::fs::remove_file(&path);
    }
}
