//! Device runtimes inside a [`System`]: open-loop sources and closed-loop DSA jobs,
//! and the host-side work their handlers do.

use devices::{DsaQueue, DsaWorkQueue, SubmitOutcome};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use sim_core::SimTime;

use super::fabric::{Landing, PortWrite};
use super::scenario::ClosedLoopConfig;
use super::{Event, System};
use crate::engine::Priority;

pub(super) enum DeviceModel {
    /// Completions at the times an arrival process gives.
    Open(DsaQueue),
    /// A work queue fed by a host job that resubmits one descriptor per completion.
    Closed {
        wq: DsaWorkQueue,
        job: Box<ClosedLoopConfig>,
        /// Host cycles per reaped descriptor (the job's, or the platform's).
        reap_cycles: f64,
        /// Host cycles per submitted descriptor (the job's, or the platform's).
        submit_cycles: f64,
        /// Completion records landed in host memory that no handler has reaped yet.
        unreaped: u64,
        /// Completions reaped by handlers.
        reaped: u64,
    },
}

pub(super) struct Device {
    pub name: String,
    pub model: DeviceModel,
    pub rng: ChaCha8Rng,
    pub handler_cycles: f64,
    /// Its MSI source (see [`super::sources`]); the source records whether the device
    /// is parked.
    pub source: u32,
}

/// Per-device figures in the report.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct DeviceReport {
    /// The device's name (default `device<i>`).
    pub name: String,
    /// "dsa-open" or "dsa-closed-loop".
    pub kind: &'static str,
    /// Completions that asked for an MSI (written, or still held back: `msi_backlog`).
    pub msis_raised: u64,
    /// Descriptors the device completed.
    pub descriptors_completed: u64,
    /// Descriptors the host job submitted (closed loop only; 0 in open loop).
    pub descriptors_submitted: u64,
    /// Shared-WQ submissions that got "retry" and were submitted again.
    pub submit_retries: u64,
    /// Descriptors a full dedicated WQ dropped (the job loses them).
    pub descriptors_dropped: u64,
    /// Completions reaped by handlers.
    pub descriptors_reaped: u64,
    /// Completion records written whose write had not landed when the report was
    /// taken (in the root port's ordered stream).
    pub records_in_flight: u64,
    /// MSIs the device still has to write at the end: flow control held them back.
    pub msi_backlog: u64,
    /// MSIs that had to wait for flow-control credit.
    pub msi_stalls: u64,
}

impl Device {
    pub(super) fn report(
        &self,
        sources: &[super::sources::MsiSource],
        now: SimTime,
    ) -> DeviceReport {
        let src = &sources[self.source as usize];
        let uncounted = if src.parked_device.is_some() {
            self.held_not_yet_counted(now)
        } else {
            0
        };
        let model = self.model_report();
        DeviceReport {
            msi_backlog: src.backlog + uncounted,
            msi_stalls: src.stalls + uncounted,
            msis_raised: model.msis_raised + uncounted,
            descriptors_completed: model.descriptors_completed + uncounted,
            ..model
        }
    }

    /// Completions of this parked device due by `now` that no catch-up has counted
    /// yet: what an event-per-completion run would already show. Worked out on a copy
    /// of the device and its random stream, so reading a report changes nothing.
    pub(super) fn held_not_yet_counted(&self, now: SimTime) -> u64 {
        let DeviceModel::Open(q) = &self.model else {
            return 0;
        };
        q.clone().complete_through(now, &mut self.rng.clone())
    }

    fn model_report(&self) -> DeviceReport {
        match &self.model {
            DeviceModel::Open(q) => DeviceReport {
                name: self.name.clone(),
                kind: "dsa-open",
                msis_raised: q.counters().msis_raised,
                descriptors_completed: q.counters().completions,
                ..DeviceReport::default()
            },
            DeviceModel::Closed {
                wq,
                unreaped,
                reaped,
                ..
            } => {
                let c = wq.counters();
                DeviceReport {
                    name: self.name.clone(),
                    kind: "dsa-closed-loop",
                    msis_raised: c.msis_raised,
                    descriptors_completed: c.completed,
                    descriptors_submitted: c.submitted,
                    submit_retries: c.retries,
                    descriptors_dropped: c.dropped_wq_full,
                    descriptors_reaped: *reaped,
                    records_in_flight: c.completed - reaped - unreaped,
                    ..DeviceReport::default()
                }
            }
        }
    }
}

impl System {
    /// Starts every device at time zero.
    pub(super) fn start_devices(&mut self) {
        for i in 0..self.devices.len() {
            let device = i as u32;
            let d = &mut self.devices[i];
            match &mut d.model {
                DeviceModel::Open(q) => {
                    let first = q.start(SimTime::ZERO, &mut d.rng);
                    self.queue.schedule(
                        first,
                        Priority::DEVICE,
                        Event::DeviceCompletion { device },
                    );
                }
                DeviceModel::Closed { job, wq, .. } => {
                    let service = wq.service_time();
                    for _ in 0..job.inflight {
                        // A random phase within one service time, so descriptors do not
                        // run in lockstep from time 0.
                        let at = if job.random_start {
                            use rand::Rng;
                            SimTime(d.rng.gen_range(0..service.as_ps().max(1)))
                        } else {
                            SimTime::ZERO
                        };
                        self.queue
                            .schedule(at, Priority::DEVICE, Event::DsaSubmit { device });
                    }
                }
            }
        }
    }

    /// An open-loop source completes a descriptor.
    ///
    /// When its source has no request credit, the MSI joins the source's backlog and
    /// the device parks: until the source is served, each further completion would
    /// only add one to that backlog, so instead of costing an event each they are
    /// counted in bulk by [`System::catch_up_held`] when the source is served (and at
    /// the end of a run window; a report in between counts them on a copy). A
    /// saturated device then costs events per MSI written, not per MSI offered.
    pub(super) fn on_device_completion(&mut self, now: SimTime, device: u32) {
        let d = &mut self.devices[device as usize];
        let DeviceModel::Open(q) = &mut d.model else {
            unreachable!("DeviceCompletion for a closed-loop device");
        };
        let (_msi, next) = q.complete(now, &mut d.rng);
        let source = d.source;
        if !self.port_has_credit(source) {
            self.raise_msi(now, source);
            self.sources[source as usize].parked_device = Some(device);
            return;
        }
        self.queue
            .schedule(next, Priority::DEVICE, Event::DeviceCompletion { device });
        self.raise_msi(now, source);
    }

    /// Takes every completion of parked device `device` due at or before `until`:
    /// each is one more MSI held back by its source. Completions on the same
    /// picosecond as the caller's event count first, as a device event would.
    pub(super) fn catch_up_held(&mut self, device: u32, until: SimTime) {
        let d = &mut self.devices[device as usize];
        debug_assert_eq!(
            self.sources[d.source as usize].parked_device,
            Some(device),
            "catch-up of a device that is not parked"
        );
        let DeviceModel::Open(q) = &mut d.model else {
            unreachable!("only open-loop devices park");
        };
        let held = q.complete_through(until, &mut d.rng);
        let s = &mut self.sources[d.source as usize];
        s.backlog += held;
        s.stalls += held;
    }

    /// Source `source` was served and has nothing held back: its parked device's
    /// completions become events again.
    pub(super) fn unpark(&mut self, device: u32) {
        let d = &self.devices[device as usize];
        self.sources[d.source as usize].parked_device = None;
        let DeviceModel::Open(q) = &d.model else {
            unreachable!("only open-loop devices park");
        };
        let next = q
            .next_completion()
            .expect("an open-loop device always has a next completion");
        self.queue
            .schedule(next, Priority::DEVICE, Event::DeviceCompletion { device });
    }

    /// Brings every parked device's backlog up to `now` (end of a run window), so the
    /// copies a report works on stay short.
    pub(super) fn catch_up_all_held(&mut self, now: SimTime) {
        for i in 0..self.devices.len() as u32 {
            let source = self.devices[i as usize].source as usize;
            if self.sources[source].parked_device == Some(i) {
                self.catch_up_held(i, now);
            }
        }
    }

    /// A descriptor written by the host reaches a closed-loop work queue.
    pub(super) fn on_dsa_submit(&mut self, now: SimTime, device: u32) {
        let retry_after = self.timing.doorbell_write;
        let DeviceModel::Closed { wq, .. } = &mut self.devices[device as usize].model else {
            unreachable!("DsaSubmit for an open-loop device");
        };
        match wq.submit(now) {
            SubmitOutcome::Accepted { completes_at } => {
                if let Some(t) = completes_at {
                    self.queue
                        .schedule(t, Priority::DEVICE, Event::DsaEngineDone { device });
                }
            }
            // ENQCMD said retry: the submitting CPU tries again after a round trip.
            SubmitOutcome::Retry => {
                self.queue.schedule(
                    now + retry_after,
                    Priority::DEVICE,
                    Event::DsaSubmit { device },
                );
            }
            SubmitOutcome::Dropped => {}
        }
    }

    /// An engine of a closed-loop work queue finishes a descriptor: it writes the
    /// completion record, then (if asked for) the MSI, into its port's ordered stream.
    pub(super) fn on_dsa_engine_done(&mut self, now: SimTime, device: u32) {
        let DeviceModel::Closed { wq, .. } = &mut self.devices[device as usize].model else {
            unreachable!("DsaEngineDone for an open-loop device");
        };
        let (msi, next) = wq.complete(now);
        if let Some(t) = next {
            self.queue
                .schedule(t, Priority::DEVICE, Event::DsaEngineDone { device });
        }
        let source = self.devices[device as usize].source;
        let port = self.sources[source as usize].port;
        self.port_push(
            now,
            port,
            PortWrite::Completion {
                landing: Landing::DsaRecord { device },
            },
        );
        if msi.is_some() {
            self.raise_msi(now, source);
        }
    }

    /// A closed-loop device's completion record landed: the host can reap it.
    pub(super) fn dsa_record_landed(&mut self, _now: SimTime, device: u32) {
        let DeviceModel::Closed { unreaped, .. } = &mut self.devices[device as usize].model else {
            unreachable!("only closed-loop devices write records the host reaps");
        };
        *unreaped += 1;
    }

    /// Cycles the device handler of `device` spends when it runs at `now` serving
    /// `served` MSIs (more than one when MSIs merged). For a closed-loop job each served
    /// MSI is one completion: the handler reaps its descriptor and submits a new one,
    /// the portal writes landing after the handler body.
    pub(super) fn device_handler_cycles(
        &mut self,
        now: SimTime,
        device: u32,
        served: usize,
    ) -> f64 {
        let freq = self.freq;
        let doorbell = self.timing.doorbell_write;
        let d = &mut self.devices[device as usize];
        let body = d.handler_cycles;
        let DeviceModel::Closed {
            job,
            unreaped,
            reaped: total_reaped,
            reap_cycles,
            submit_cycles,
            ..
        } = &mut d.model
        else {
            return body;
        };
        // A handler run with nothing behind it (spurious) reaps nothing.
        let reaped = (served as u64).min(*unreaped);
        *unreaped -= reaped;
        *total_reaped += reaped;
        match job.submit_cpu {
            // A submitter job on its own CPU writes the replacements.
            Some(cpu) => {
                let cycles = body + reaped as f64 * *reap_cycles;
                for _ in 0..reaped {
                    self.push_deferred(now, cpu, super::cpu::Deferred::DsaSubmit { device });
                }
                cycles
            }
            None => {
                let cycles = body + reaped as f64 * (*reap_cycles + *submit_cycles);
                let lands = now + freq.cycles_f64(cycles) + doorbell;
                for _ in 0..reaped {
                    self.queue
                        .schedule(lands, Priority::DEVICE, Event::DsaSubmit { device });
                }
                cycles
            }
        }
    }

    /// Cycles a submitter job spends writing one descriptor of `device`.
    pub(super) fn dsa_submit_cycles(&self, device: u32) -> f64 {
        match &self.devices[device as usize].model {
            DeviceModel::Closed { submit_cycles, .. } => *submit_cycles,
            DeviceModel::Open(_) => unreachable!("only closed-loop devices are resubmitted"),
        }
    }
}
