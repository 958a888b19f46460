//! A DSA-like work queue that completes descriptors and raises one MSI per completion.
//!
//! Open loop: descriptors complete at the times an [`ArrivalProcess`] gives (the
//! device's completion stream as the host would see it). Each completion writes a
//! completion record and raises the queue's MSI, in whatever format the host
//! programmed (remappable for VT-d). Not modelled yet: submission, service time by
//! size, shared work queues, queue depth (those come with the device models).

use rand::Rng;
use serde::Serialize;
use sim_core::{MsiMessage, SimTime};

use crate::ArrivalProcess;

/// One MSI raised by a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaisedMsi {
    pub at: SimTime,
    pub message: MsiMessage,
    /// PCI requester id (bus/device/function) the IOMMU checks against the IRTE.
    pub source_id: u16,
}

/// Counters a queue keeps about itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DsaCounters {
    pub completions: u64,
    pub msis_raised: u64,
}

/// A single DSA work queue in open loop.
#[derive(Clone, Debug)]
pub struct DsaQueue {
    message: MsiMessage,
    source_id: u16,
    arrival: ArrivalProcess,
    next_completion: Option<SimTime>,
    counters: DsaCounters,
}

impl DsaQueue {
    /// `message` is what the host programmed into the queue's MSI-X entry.
    pub fn new(message: MsiMessage, source_id: u16, arrival: ArrivalProcess) -> Self {
        DsaQueue {
            message,
            source_id,
            arrival,
            next_completion: None,
            counters: DsaCounters::default(),
        }
    }

    /// Starts the queue at `now`; returns when its first descriptor completes.
    pub fn start<R: Rng + ?Sized>(&mut self, now: SimTime, rng: &mut R) -> SimTime {
        let t = now + self.arrival.next_gap(rng);
        self.next_completion = Some(t);
        t
    }

    /// The descriptor due at `now` completes: returns the MSI it raises and when the
    /// next descriptor completes.
    ///
    /// # Panics
    /// If called at a time other than the one [`DsaQueue::start`] or the previous call
    /// returned: the engine's schedule and the device disagree.
    pub fn complete<R: Rng + ?Sized>(&mut self, now: SimTime, rng: &mut R) -> (RaisedMsi, SimTime) {
        assert_eq!(
            self.next_completion,
            Some(now),
            "DSA completion handled at the wrong time"
        );
        self.counters.completions += 1;
        self.counters.msis_raised += 1;
        let next = now + self.arrival.next_gap(rng);
        self.next_completion = Some(next);
        let msi = RaisedMsi {
            at: now,
            message: self.message,
            source_id: self.source_id,
        };
        (msi, next)
    }

    /// Completes every descriptor due at or before `until`, in order, and returns how
    /// many; for a device whose MSIs would all be held back anyway, so the caller only
    /// needs the count.
    ///
    /// The work does not grow with the count where
    /// [`ArrivalProcess::count_through`] can count without stepping.
    pub fn complete_through<R: Rng + ?Sized>(&mut self, until: SimTime, rng: &mut R) -> u64 {
        let Some(next) = self.next_completion.filter(|t| *t <= until) else {
            return 0;
        };
        let Some((completed, after)) = self.arrival.count_through(next, until, rng) else {
            let mut n = 0;
            while let Some(t) = self.next_completion.filter(|t| *t <= until) {
                self.complete(t, rng);
                n += 1;
            }
            return n;
        };
        self.next_completion = Some(after);
        self.counters.completions += completed;
        self.counters.msis_raised += completed;
        completed
    }

    pub fn counters(&self) -> DsaCounters {
        self.counters
    }

    /// When the next completion is due (`None` before [`DsaQueue::start`]).
    pub fn next_completion(&self) -> Option<SimTime> {
        self.next_completion
    }

    pub fn message(&self) -> MsiMessage {
        self.message
    }

    pub fn source_id(&self) -> u16 {
        self.source_id
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn msg() -> MsiMessage {
        MsiMessage {
            address: 0xfee0_0010,
            data: 0,
        }
    }

    #[test]
    fn a_fixed_queue_counts_held_completions_in_closed_form_as_stepping_would() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0);
        let process = ArrivalProcess::Fixed { interval_ns: 0.7 };
        let mut bulk = DsaQueue::new(msg(), 1, process);
        let mut stepped = bulk.clone();
        bulk.start(SimTime::ZERO, &mut rng);
        stepped.start(SimTime::ZERO, &mut rng);
        let until = SimTime(3_000_000_007);
        let n = bulk.complete_through(until, &mut rng);
        let mut m = 0;
        while let Some(t) = stepped.next_completion().filter(|t| *t <= until) {
            stepped.complete(t, &mut rng);
            m += 1;
        }
        assert_eq!(n, m);
        assert_eq!(bulk.next_completion(), stepped.next_completion());
        assert_eq!(bulk.counters(), stepped.counters());
    }

    #[test]
    fn a_poisson_queue_draws_a_large_held_count_with_the_right_mean() {
        // 1e12/s for 1 ms: 1e9 held completions, drawn in one step.
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let mut q = DsaQueue::new(msg(), 1, ArrivalProcess::Poisson { rate_per_s: 1e12 });
        q.start(SimTime::ZERO, &mut rng);
        let until = SimTime(1_000_000_000);
        let n = q.complete_through(until, &mut rng) as f64;
        // Poisson: standard deviation sqrt(1e9) ~ 3.2e4.
        assert!((n - 1e9).abs() < 2e5, "{n}");
        assert!(q.next_completion().is_some_and(|t| t > until));
        assert_eq!(q.counters().completions as f64, n);
    }

    #[test]
    fn completes_on_schedule_and_raises_its_message() {
        let msg = MsiMessage {
            address: 0xfee0_0010,
            data: 0,
        };
        let mut q = DsaQueue::new(msg, 0x0100, ArrivalProcess::fixed_rate(1e6));
        let mut rng = rand::rngs::StdRng::seed_from_u64(0);
        let t0 = q.start(SimTime::ZERO, &mut rng);
        assert_eq!(t0, SimTime(1_000_000));
        let (msi, t1) = q.complete(t0, &mut rng);
        assert_eq!(msi.message, msg);
        assert_eq!(msi.at, t0);
        assert_eq!(t1, SimTime(2_000_000));
        assert_eq!(q.counters().msis_raised, 1);
        assert_eq!(msi.source_id, 0x0100);
        assert_eq!((q.message(), q.source_id()), (msg, 0x0100));
        let _ = q.complete(t1, &mut rng);
        assert_eq!((q.counters().completions, q.counters().msis_raised), (2, 2));
    }

    #[test]
    fn completing_through_a_time_matches_completing_one_by_one() {
        let msg = MsiMessage {
            address: 0xfee0_0010,
            data: 0,
        };
        let poisson = ArrivalProcess::Poisson { rate_per_s: 5e6 };
        let (mut bulk, mut single) = (
            DsaQueue::new(msg, 1, poisson.clone()),
            DsaQueue::new(msg, 1, poisson),
        );
        let (mut rng_bulk, mut rng_single) = (
            rand::rngs::StdRng::seed_from_u64(9),
            rand::rngs::StdRng::seed_from_u64(9),
        );
        bulk.start(SimTime::ZERO, &mut rng_bulk);
        let mut next = single.start(SimTime::ZERO, &mut rng_single);
        let until = SimTime(10_000_000);
        let mut one_by_one = 0;
        while next <= until {
            next = single.complete(next, &mut rng_single).1;
            one_by_one += 1;
        }
        assert!(one_by_one > 10);
        assert_eq!(bulk.complete_through(until, &mut rng_bulk), one_by_one);
        assert_eq!(bulk.next_completion(), Some(next));
        assert_eq!(bulk.counters(), single.counters());
        assert_eq!(bulk.complete_through(until, &mut rng_bulk), 0);
    }

    #[test]
    #[should_panic(expected = "wrong time")]
    fn out_of_schedule_completion_is_a_bug() {
        let mut q = DsaQueue::new(MsiMessage::default(), 0, ArrivalProcess::fixed_rate(1e6));
        let mut rng = rand::rngs::StdRng::seed_from_u64(0);
        q.start(SimTime::ZERO, &mut rng);
        q.complete(SimTime(5), &mut rng);
    }
}

/// How a work queue accepts descriptors (Intel DSA architecture specification, 3.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WqMode {
    /// Dedicated WQ: one client submits with MOVDIR64B and must track occupancy itself;
    /// a descriptor sent to a full dedicated WQ is dropped by the device.
    Dedicated,
    /// Shared WQ: clients submit with ENQCMD, which reports "retry" when the WQ is full.
    Shared,
}

/// What a descriptor does; the service time depends on the operation and its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DsaOp {
    MemFill,
    MemCopy,
}

/// Service-time model of a DSA device. The defaults are the `generic` profile's; each
/// platform profile gives its machine's values and sources (`costs.dsa`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DsaCosts {
    /// Per-descriptor fixed work in an engine: descriptor fetch and decode, completion
    /// record write. ns. Assumption: a few hundred ns, the order of the small-transfer
    /// latencies reported by Kuper et al., "A Quantitative Analysis and Guidelines of
    /// Data Streaming Accelerator in Modern Intel Xeon Scalable Processors"
    /// (ASPLOS 2024, arXiv 2305.02480), with the submission cost left to the host.
    pub descriptor_overhead_ns: f64,
    /// Memory-fill bandwidth of one engine, GB/s. Assumption: the same paper reports
    /// device throughput on the order of 30 GB/s; we give one engine 30 GB/s for fills.
    pub fill_gbps: f64,
    /// Memory-copy bandwidth of one engine, GB/s. Assumption: half of fill, since a copy
    /// reads and writes.
    pub copy_gbps: f64,
}

impl Default for DsaCosts {
    fn default() -> Self {
        DsaCosts {
            descriptor_overhead_ns: 300.0,
            fill_gbps: 30.0,
            copy_gbps: 15.0,
        }
    }
}

/// A DSA work queue and the engines behind it, fed by the host (closed loop).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DsaWqConfig {
    pub mode: WqMode,
    /// Descriptors the WQ holds (WQCFG.WQ size).
    pub depth: u32,
    /// Engines in the WQ's group working in parallel (DSA 1.0 has up to 4 per device).
    pub engines: u32,
    pub op: DsaOp,
    /// Bytes each descriptor fills or copies.
    pub transfer_bytes: u64,
    /// Whether each descriptor asks for a completion interrupt (RCI flag).
    pub completion_interrupt: bool,
    /// The device's service-time model; unset, the platform's (`costs.dsa`).
    pub costs: Option<DsaCosts>,
}

impl Default for DsaWqConfig {
    fn default() -> Self {
        DsaWqConfig {
            mode: WqMode::Dedicated,
            depth: 128,
            engines: 4,
            op: DsaOp::MemFill,
            transfer_bytes: 256,
            completion_interrupt: true,
            costs: None,
        }
    }
}

impl DsaWqConfig {
    pub fn validate(&self, field: &str) -> Result<(), crate::DeviceError> {
        let bad = |name: &str, value: String, allowed: &str| {
            crate::DeviceError::invalid(field, name, value, allowed)
        };
        if self.depth == 0 || self.depth > 4096 {
            return Err(bad("depth", self.depth.to_string(), "1..=4096 descriptors"));
        }
        if self.engines == 0 || self.engines > 64 {
            return Err(bad("engines", self.engines.to_string(), "1..=64 engines"));
        }
        if let Some(costs) = &self.costs {
            costs.validate(&format!("{field}.costs"))?;
        }
        Ok(())
    }

    /// Time one engine spends on one descriptor, with `platform`'s service model when
    /// the config sets none.
    pub fn service_time(&self, platform: &DsaCosts) -> sim_core::Duration {
        let costs = self.costs.as_ref().unwrap_or(platform);
        let gbps = match self.op {
            DsaOp::MemFill => costs.fill_gbps,
            DsaOp::MemCopy => costs.copy_gbps,
        };
        // bytes / (GB/s) = ns
        sim_core::Duration::from_ns_f64(
            costs.descriptor_overhead_ns + self.transfer_bytes as f64 / gbps,
        )
    }
}

impl DsaCosts {
    /// Checks every field; errors name `field` (e.g. `costs.dsa`).
    pub fn validate(&self, field: &str) -> Result<(), crate::DeviceError> {
        for (name, v, positive) in [
            ("descriptor_overhead_ns", self.descriptor_overhead_ns, false),
            ("fill_gbps", self.fill_gbps, true),
            ("copy_gbps", self.copy_gbps, true),
        ] {
            let ok = v.is_finite() && if positive { v > 0.0 } else { v >= 0.0 } && v <= 1e12;
            if !ok {
                return Err(crate::DeviceError::InvalidParameter {
                    field: format!("{field}.{name}"),
                    value: v.to_string(),
                    allowed: "a finite number, >= 0 (bandwidths > 0), at most 1e12".into(),
                });
            }
        }
        Ok(())
    }
}

/// Result of offering a descriptor to the WQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum SubmitOutcome {
    /// Accepted. `completes_at` is set when an idle engine started it at once.
    Accepted { completes_at: Option<SimTime> },
    /// Shared WQ full: ENQCMD returned retry; the host must submit again.
    Retry,
    /// Dedicated WQ full: the device drops the descriptor (software broke the
    /// occupancy contract). Counted, never silent.
    Dropped,
}

/// Counters of a closed-loop work queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DsaWqCounters {
    pub submitted: u64,
    pub retries: u64,
    pub dropped_wq_full: u64,
    pub completed: u64,
    pub msis_raised: u64,
}

/// A work queue with `engines` parallel engines; descriptors wait in FIFO order.
#[derive(Clone, Debug)]
pub struct DsaWorkQueue {
    config: DsaWqConfig,
    message: MsiMessage,
    source_id: u16,
    service: sim_core::Duration,
    /// Submission times of descriptors waiting for an engine.
    waiting: std::collections::VecDeque<SimTime>,
    busy_engines: u32,
    counters: DsaWqCounters,
}

impl DsaWorkQueue {
    /// A work queue with `config`; `platform` is the device service model used when the
    /// config sets none.
    pub fn new(
        config: DsaWqConfig,
        platform: &DsaCosts,
        message: MsiMessage,
        source_id: u16,
    ) -> Self {
        let service = config.service_time(platform);
        DsaWorkQueue {
            config,
            message,
            source_id,
            service,
            waiting: std::collections::VecDeque::new(),
            busy_engines: 0,
            counters: DsaWqCounters::default(),
        }
    }

    /// Descriptors in the WQ or in an engine.
    pub fn occupancy(&self) -> u32 {
        self.waiting.len() as u32 + self.busy_engines
    }

    /// A descriptor arrives at `now` (the portal write landed).
    pub fn submit(&mut self, now: SimTime) -> SubmitOutcome {
        if self.waiting.len() as u32 >= self.config.depth {
            return match self.config.mode {
                WqMode::Shared => {
                    self.counters.retries += 1;
                    SubmitOutcome::Retry
                }
                WqMode::Dedicated => {
                    self.counters.dropped_wq_full += 1;
                    SubmitOutcome::Dropped
                }
            };
        }
        self.counters.submitted += 1;
        if self.busy_engines < self.config.engines {
            self.busy_engines += 1;
            SubmitOutcome::Accepted {
                completes_at: Some(now + self.service),
            }
        } else {
            self.waiting.push_back(now);
            SubmitOutcome::Accepted { completes_at: None }
        }
    }

    /// An engine finishes a descriptor at `now`: the completion record is written and,
    /// if asked for, the MSI raised. Returns the MSI and, when a waiting descriptor
    /// starts on the freed engine, when that one completes.
    ///
    /// # Panics
    /// If no engine is busy: the engine's schedule and the device disagree.
    pub fn complete(&mut self, now: SimTime) -> (Option<RaisedMsi>, Option<SimTime>) {
        assert!(self.busy_engines > 0, "DSA completion with no busy engine");
        self.counters.completed += 1;
        let next = match self.waiting.pop_front() {
            Some(_) => Some(now + self.service),
            None => {
                self.busy_engines -= 1;
                None
            }
        };
        let msi = self.config.completion_interrupt.then(|| {
            self.counters.msis_raised += 1;
            RaisedMsi {
                at: now,
                message: self.message,
                source_id: self.source_id,
            }
        });
        (msi, next)
    }

    pub fn counters(&self) -> DsaWqCounters {
        self.counters
    }

    pub fn config(&self) -> &DsaWqConfig {
        &self.config
    }

    /// Time one engine spends on one descriptor.
    pub fn service_time(&self) -> sim_core::Duration {
        self.service
    }

    pub fn message(&self) -> MsiMessage {
        self.message
    }

    pub fn source_id(&self) -> u16 {
        self.source_id
    }
}

#[cfg(test)]
mod wq_tests {
    use super::*;

    fn wq(mode: WqMode, depth: u32, engines: u32) -> DsaWorkQueue {
        DsaWorkQueue::new(
            DsaWqConfig {
                mode,
                depth,
                engines,
                ..DsaWqConfig::default()
            },
            &DsaCosts::default(),
            MsiMessage::default(),
            0,
        )
    }

    /// Depth 1..=4096 and engines 1..=64, both ends included; costs must be finite,
    /// non-negative, bandwidths positive, at most 1e12.
    #[test]
    fn work_queue_limits_are_inclusive() {
        let with = |depth, engines| DsaWqConfig {
            depth,
            engines,
            ..DsaWqConfig::default()
        };
        for (depth, engines) in [(1, 1), (4096, 64)] {
            assert!(
                with(depth, engines).validate("wq").is_ok(),
                "{depth} {engines}"
            );
        }
        for (depth, engines, field) in [
            (0, 1, "wq.depth"),
            (4097, 1, "wq.depth"),
            (1, 0, "wq.engines"),
            (1, 65, "wq.engines"),
        ] {
            let e = with(depth, engines).validate("wq").unwrap_err().to_string();
            assert!(e.contains(field), "{e}");
        }
        let costs = |over: f64, fill: f64| DsaCosts {
            descriptor_overhead_ns: over,
            fill_gbps: fill,
            ..DsaCosts::default()
        };
        assert!(costs(0.0, 1e12).validate("c").is_ok());
        assert!(costs(1e12, 1e-9).validate("c").is_ok());
        for (c, field) in [
            (costs(-1.0, 30.0), "c.descriptor_overhead_ns"),
            (costs(1.1e12, 30.0), "c.descriptor_overhead_ns"),
            (costs(0.0, 0.0), "c.fill_gbps"),
            (costs(0.0, 1.1e12), "c.fill_gbps"),
        ] {
            let e = c.validate("c").unwrap_err().to_string();
            assert!(e.contains(field), "{c:?}: {e}");
        }
        let bad_costs = DsaWqConfig {
            costs: Some(costs(-1.0, 30.0)),
            ..DsaWqConfig::default()
        };
        assert!(bad_costs
            .validate("wq")
            .unwrap_err()
            .to_string()
            .contains("wq.costs.descriptor_overhead_ns"));
    }

    #[test]
    fn a_work_queue_keeps_what_it_was_built_with() {
        let cfg = DsaWqConfig {
            depth: 7,
            ..DsaWqConfig::default()
        };
        let msg = MsiMessage {
            address: 0xfee0_1000,
            data: 3,
        };
        let q = DsaWorkQueue::new(cfg.clone(), &DsaCosts::default(), msg, 0x42);
        assert_eq!(q.config(), &cfg);
        assert_eq!((q.message(), q.source_id()), (msg, 0x42));
        assert_eq!(q.service_time(), cfg.service_time(&DsaCosts::default()));
        assert!(q.service_time() > sim_core::Duration::ZERO);
    }

    #[test]
    fn service_time_grows_with_size() {
        let p = DsaCosts::default();
        let small = DsaWqConfig::default().service_time(&p);
        let big = DsaWqConfig {
            transfer_bytes: 1 << 20,
            ..DsaWqConfig::default()
        }
        .service_time(&p);
        assert_eq!(small, sim_core::Duration::from_ns_f64(300.0 + 256.0 / 30.0));
        assert!(big > small);
    }

    #[test]
    fn engines_run_in_parallel_then_descriptors_wait_in_order() {
        let mut q = wq(WqMode::Shared, 4, 2);
        let t = SimTime(0);
        let svc = q.config().service_time(&DsaCosts::default());
        assert_eq!(
            q.submit(t),
            SubmitOutcome::Accepted {
                completes_at: Some(t + svc)
            }
        );
        assert_eq!(
            q.submit(t),
            SubmitOutcome::Accepted {
                completes_at: Some(t + svc)
            }
        );
        assert_eq!(q.submit(t), SubmitOutcome::Accepted { completes_at: None });
        assert_eq!(q.occupancy(), 3);
        let (msi, next) = q.complete(t + svc);
        assert!(msi.is_some());
        assert_eq!(next, Some(t + svc + svc));
        let (_, next) = q.complete(t + svc);
        assert_eq!(next, None);
        assert_eq!(q.occupancy(), 1);
        assert_eq!((q.counters().completed, q.counters().msis_raised), (2, 2));
    }

    #[test]
    fn full_shared_wq_retries_and_dedicated_drops_both_counted() {
        let mut s = wq(WqMode::Shared, 1, 1);
        let _ = s.submit(SimTime(0)); // in the engine
        let _ = s.submit(SimTime(0)); // waiting: WQ full now
        assert_eq!(s.submit(SimTime(0)), SubmitOutcome::Retry);
        assert_eq!(s.counters().retries, 1);
        let mut d = wq(WqMode::Dedicated, 1, 1);
        let _ = d.submit(SimTime(0));
        let _ = d.submit(SimTime(0));
        assert_eq!(d.submit(SimTime(0)), SubmitOutcome::Dropped);
        assert_eq!(d.counters().dropped_wq_full, 1);
        assert_eq!(d.counters().submitted, 2);
    }

    #[test]
    fn bad_config_names_the_field() {
        let e = DsaWqConfig {
            engines: 0,
            ..DsaWqConfig::default()
        }
        .validate("devices[1].dsa")
        .unwrap_err();
        assert!(e.to_string().contains("devices[1].dsa.engines"));
        let e = DsaWqConfig {
            costs: Some(DsaCosts {
                fill_gbps: 0.0,
                ..DsaCosts::default()
            }),
            ..DsaWqConfig::default()
        }
        .validate("devices[0].closed_loop.wq")
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("devices[0].closed_loop.wq.costs.fill_gbps"),
            "{e}"
        );
    }

    #[test]
    fn a_config_without_costs_uses_the_platform_model() {
        let p = DsaCosts {
            descriptor_overhead_ns: 100.0,
            fill_gbps: 10.0,
            copy_gbps: 5.0,
        };
        let cfg = DsaWqConfig {
            transfer_bytes: 512,
            ..DsaWqConfig::default()
        };
        assert_eq!(cfg.service_time(&p), sim_core::Duration::from_ns_f64(151.2));
        let own = DsaWqConfig {
            costs: Some(DsaCosts::default()),
            ..cfg.clone()
        };
        assert_ne!(own.service_time(&p), cfg.service_time(&p));
    }
}
