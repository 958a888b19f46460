//! Shared FIFO resources on the interrupt path: the IOMMU's remapping pipeline and
//! the system agent's interrupt-message fabric.
//!
//! ```text
//!  devices --MSI write--> [RemapPipeline] --Deliver--> [InterruptMessageFabric] --> LAPIC
//!                          one request at a            one message at a time,
//!                          time, service = the         occupancy + flight latency
//!                          remap outcome's cost        (posting notifications too)
//! ```
//!
//! Both are single-server FIFO queues described only by `busy_until`: a submission
//! starts at max(now, busy_until), occupies the server for its service time and
//! leaves. Submit in non-decreasing `now` order (the engine's event order); FIFO order
//! is submission order. O(1) per submission.
//!
//! Why a resource and not a fixed latency (DESIGN.md 4.1): the posted-MSI RFC cover
//! letter ("[PATCH RFC 00/13] Coalesced Interrupt Delivery with posted MSI", Jacob
//! Pan, Nov 2023; presented at LPC 2023, IOMMU/VFIO/PCI MC) reports that on Intel Xeon
//! the step in which the remapped interrupt is sent to the CPU is costly and must be
//! strongly ordered with respect to the device's DMA, so a high interrupt rate limits
//! DMA I/O throughput (its example: per-disk NVMe IOPS dropping as disks are added to
//! one socket). A shared server with a per-message occupancy reproduces that kind of
//! coupling: all devices behind one fabric queue behind each other, and ordering
//! behind earlier DMA is expressed with [`InterruptMessageFabric::submit_ordered`].
//! Neither the occupancy nor the latency is published; see [`FabricCosts`].

use super::remap::check_ns;
use crate::IommuError;
use serde::{Deserialize, Serialize};
use sim_core::{Duration, SimTime};

/// Queueing counters of a FIFO resource.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FifoCounters {
    /// Submissions accepted.
    pub submitted: u64,
    /// Submissions that had to wait for an earlier one.
    pub queued: u64,
    /// Sum over submissions of (start - now), picoseconds.
    pub total_wait_ps: u64,
    /// Largest single wait, picoseconds.
    pub max_wait_ps: u64,
    /// Sum of service (occupancy) time, picoseconds; busy_ps / elapsed = utilisation.
    pub busy_ps: u64,
}

/// Single-server FIFO: the common core of both resources.
#[derive(Clone, Debug, Default)]
struct FifoServer {
    busy_until: SimTime,
    counters: FifoCounters,
}

impl FifoServer {
    /// Starts a job that may not begin before `earliest`; returns (start, end).
    fn serve(&mut self, now: SimTime, earliest: SimTime, service: Duration) -> (SimTime, SimTime) {
        let start = now.max(earliest).max(self.busy_until);
        let end = start + service;
        let wait = start.since(now).as_ps();
        let c = &mut self.counters;
        c.submitted += 1;
        if self.busy_until > now.max(earliest) {
            c.queued += 1;
        }
        c.total_wait_ps += wait;
        c.max_wait_ps = c.max_wait_ps.max(wait);
        c.busy_ps += service.as_ps();
        self.busy_until = end;
        (start, end)
    }
}

/// Which devices share one interrupt-delivery path (one [`InterruptMessageFabric`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryScope {
    /// Each root port has its own path.
    Port,
    /// The root ports of one PCIe stack (one IIO) share a path.
    Stack,
    /// Every stack of a socket shares its system agent's path.
    #[default]
    Socket,
}

impl DeliveryScope {
    /// The name used in scenarios and profiles.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryScope::Port => "port",
            DeliveryScope::Stack => "stack",
            DeliveryScope::Socket => "socket",
        }
    }
}

/// Costs of the interrupt-message path from the IOMMU/system agent to a LAPIC.
/// Both fields are assumptions in the `generic` profile (COST-SOURCES.md lists no
/// published figure); platform profiles give each machine's value and source.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FabricCosts {
    /// Time one interrupt message occupies the system agent's ordered interrupt path;
    /// the next message cannot start before it ends. Nanoseconds. Default 80 ns:
    /// assumption. The message is ordered behind the device's earlier DMA writes, so
    /// the agent must see those writes committed before it sends; we charge one
    /// memory-commit round, taken as the order of the 81 ns local DRAM idle latency
    /// (FD.io CSIT Cascade Lake, Intel MLC). This caps one fabric at 12.5 M messages
    /// per second; whether that cap binds is an output of a scenario, not an input.
    pub message_occupancy_ns: f64,
    /// Flight from the system agent to the target LAPIC after the occupancy ends
    /// (pipelined: does not block the next message). Nanoseconds. Default 100 ns:
    /// assumption, about two cross-core line transfers on one socket (55.6 ns each,
    /// FD.io CSIT Cascade Lake MLC c2c) for crossing the mesh plus LAPIC acceptance.
    pub message_latency_ns: f64,
    /// Which devices share one delivery path: every root port alone (`port`), the
    /// ports of one PCIe stack (`stack`), or every stack of a socket (`socket`).
    /// Default `socket`: assumption, see the platform profiles for the reasoning.
    pub delivery_shared_by: DeliveryScope,
    /// Whether a posted MSI that sends a notification holds its root port until the
    /// notification has been handed over, as a remapped interrupt does (posts whose
    /// notification is suppressed retire at the descriptor update either way).
    /// Default false: assumption, see the platform profiles.
    pub notification_holds_port: bool,
}

impl Default for FabricCosts {
    fn default() -> Self {
        FabricCosts {
            message_occupancy_ns: 80.0,
            message_latency_ns: 100.0,
            delivery_shared_by: DeliveryScope::Socket,
            notification_holds_port: false,
        }
    }
}

impl FabricCosts {
    pub fn validate(&self) -> Result<(), IommuError> {
        check_ns(
            "fabric_costs",
            "message_occupancy_ns",
            self.message_occupancy_ns,
        )?;
        check_ns(
            "fabric_costs",
            "message_latency_ns",
            self.message_latency_ns,
        )
    }
}

/// When one message went through an [`InterruptMessageFabric`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageTiming {
    /// The path took the message (after any queueing).
    pub start: SimTime,
    /// The path is free again: the message has been handed to the target.
    pub occupancy_ends: SimTime,
    /// The message is in the target LAPIC.
    pub arrives: SimTime,
}

/// The system agent's interrupt-message path, shared by every device behind it (one
/// per socket or per IOMMU, as the scenario decides). Carries remapped interrupts and
/// posted-interrupt notification events alike.
#[derive(Clone, Debug)]
pub struct InterruptMessageFabric {
    occupancy: Duration,
    latency: Duration,
    server: FifoServer,
}

impl InterruptMessageFabric {
    pub fn new(costs: &FabricCosts) -> Result<InterruptMessageFabric, IommuError> {
        costs.validate()?;
        Ok(InterruptMessageFabric {
            occupancy: Duration::from_ns_f64(costs.message_occupancy_ns),
            latency: Duration::from_ns_f64(costs.message_latency_ns),
            server: FifoServer::default(),
        })
    }

    /// Submits a message ready at `now`; returns when it reaches the LAPIC:
    /// max(now, busy_until) + occupancy + latency.
    pub fn submit(&mut self, now: SimTime) -> SimTime {
        self.submit_ordered(now, SimTime::ZERO)
    }

    /// As [`submit`](Self::submit), but the message may not start before
    /// `prior_writes_visible`: the time the same device's earlier DMA writes become
    /// globally visible (the strong ordering of the interrupt behind its data).
    pub fn submit_ordered(&mut self, now: SimTime, prior_writes_visible: SimTime) -> SimTime {
        self.submit_timed(now, prior_writes_visible).arrives
    }

    /// Submits a message ready at `now` (and not before `earliest`) and says when it
    /// starts, when its occupancy ends (the path is free again, and a strictly ordered
    /// writer may go on) and when it reaches the LAPIC.
    pub fn submit_timed(&mut self, now: SimTime, earliest: SimTime) -> MessageTiming {
        let (start, end) = self.server.serve(now, earliest, self.occupancy);
        MessageTiming {
            start,
            occupancy_ends: end,
            arrives: end + self.latency,
        }
    }

    /// When the path is free for the next message.
    pub fn busy_until(&self) -> SimTime {
        self.server.busy_until
    }
    pub fn counters(&self) -> &FifoCounters {
        &self.server.counters
    }
}

/// The IOMMU's remapping unit as a FIFO server (assumption: one request at a time, in
/// arrival order; interrupt requests are posted writes, which PCIe keeps in order per
/// requester, and we extend that to one queue for all requesters). The service time
/// of each request is the [`super::remap::RemapOutcome::cost`] the remapper returned,
/// so IEC misses hold up the requests behind them.
#[derive(Clone, Debug, Default)]
pub struct RemapPipeline {
    server: FifoServer,
}

impl RemapPipeline {
    pub fn new() -> RemapPipeline {
        RemapPipeline::default()
    }
    /// Queues a request arriving at `now` needing `service`; returns when its outcome
    /// is ready.
    pub fn submit(&mut self, now: SimTime, service: Duration) -> SimTime {
        self.server.serve(now, SimTime::ZERO, service).1
    }
    pub fn busy_until(&self) -> SimTime {
        self.server.busy_until
    }
    pub fn counters(&self) -> &FifoCounters {
        &self.server.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fabric(occ: f64, lat: f64) -> InterruptMessageFabric {
        InterruptMessageFabric::new(&FabricCosts {
            message_occupancy_ns: occ,
            message_latency_ns: lat,
            ..FabricCosts::default()
        })
        .unwrap()
    }

    /// A message that arrives just as the path frees up does not queue; one that
    /// arrives a picosecond earlier does.
    #[test]
    fn queued_counts_only_messages_that_waited() {
        let mut f = fabric(80.0, 100.0);
        let t0 = SimTime(5_000);
        let a = f.submit_timed(t0, SimTime::ZERO);
        assert_eq!(f.busy_until(), a.occupancy_ends);
        let _ = f.submit_timed(a.occupancy_ends, SimTime::ZERO);
        assert_eq!((f.counters().submitted, f.counters().queued), (2, 0));
        let _ = f.submit_timed(SimTime(f.busy_until().0 - 1), SimTime::ZERO);
        assert_eq!(f.counters().queued, 1);
        assert_eq!(f.counters().max_wait_ps, 1);
    }

    #[test]
    fn delivery_scope_names_are_the_scenario_words() {
        for (scope, name) in [
            (DeliveryScope::Port, "port"),
            (DeliveryScope::Stack, "stack"),
            (DeliveryScope::Socket, "socket"),
        ] {
            assert_eq!(scope.as_str(), name);
            assert_eq!(serde_json::to_value(scope).unwrap(), name);
        }
    }

    #[test]
    fn timed_submission_separates_occupancy_from_flight() {
        let mut f = fabric(80.0, 100.0);
        let t0 = SimTime(5_000);
        let a = f.submit_timed(t0, SimTime::ZERO);
        assert_eq!(a.start, t0);
        assert_eq!(a.occupancy_ends, t0 + Duration::from_ns(80));
        assert_eq!(a.arrives, t0 + Duration::from_ns(180));
        // A second message waits for the first's occupancy, not its flight.
        let b = f.submit_timed(t0, SimTime::ZERO);
        assert_eq!(b.start, a.occupancy_ends);
        assert_eq!(b.arrives, t0 + Duration::from_ns(260));
    }

    #[test]
    fn back_to_back_messages_queue_fifo() {
        let mut f = fabric(80.0, 100.0);
        let t0 = SimTime(1_000_000);
        let a = f.submit(t0);
        let b = f.submit(t0);
        let c = f.submit(t0);
        assert_eq!(a, t0 + Duration::from_ns(180));
        assert_eq!(b, t0 + Duration::from_ns(260));
        assert_eq!(c, t0 + Duration::from_ns(340));
        let k = f.counters();
        assert_eq!(k.submitted, 3);
        assert_eq!(k.queued, 2);
        assert_eq!(k.total_wait_ps, Duration::from_ns(80 + 160).as_ps());
        assert_eq!(k.max_wait_ps, Duration::from_ns(160).as_ps());
        assert_eq!(k.busy_ps, Duration::from_ns(240).as_ps());
        // An idle gap resets the queue.
        let later = t0 + Duration::from_us(1);
        assert_eq!(f.submit(later), later + Duration::from_ns(180));
        assert_eq!(f.counters().queued, 2);
    }

    #[test]
    fn ordering_behind_dma_delays_start() {
        let mut f = fabric(80.0, 100.0);
        let t = SimTime(0);
        let dma_done = SimTime(0) + Duration::from_ns(500);
        assert_eq!(
            f.submit_ordered(t, dma_done),
            dma_done + Duration::from_ns(180)
        );
        // The next message, although ready at 0, waits behind the ordered one.
        assert_eq!(f.submit(t), dma_done + Duration::from_ns(260));
    }

    #[test]
    fn pipeline_uses_request_cost_as_service() {
        let mut p = RemapPipeline::new();
        let t = SimTime(0);
        assert_eq!(
            p.submit(t, Duration::from_ns(100)),
            SimTime(0) + Duration::from_ns(100)
        );
        assert_eq!(
            p.submit(t, Duration::from_ns(13)),
            SimTime(0) + Duration::from_ns(113)
        );
        assert_eq!(p.busy_until(), SimTime(0) + Duration::from_ns(113));
        assert_eq!(p.counters().max_wait_ps, 100_000);
    }

    #[test]
    fn bad_costs_are_named() {
        let e = InterruptMessageFabric::new(&FabricCosts {
            message_occupancy_ns: -1.0,
            ..FabricCosts::default()
        })
        .unwrap_err();
        assert_eq!(
            e,
            IommuError::InvalidCost {
                table: "fabric_costs",
                field: "message_occupancy_ns",
                value: -1.0
            }
        );
        assert!(e.to_string().contains("fabric_costs.message_occupancy_ns"));
        let e = FabricCosts {
            message_latency_ns: f64::NAN,
            ..FabricCosts::default()
        }
        .validate()
        .unwrap_err();
        assert!(matches!(
            e,
            IommuError::InvalidCost {
                field: "message_latency_ns",
                ..
            }
        ));
    }

    #[test]
    fn costs_reject_unknown_fields() {
        let err = serde_json::from_str::<FabricCosts>(r#"{"message_ocupancy_ns": 3}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field"));
        let c: FabricCosts = serde_json::from_str(r#"{"message_latency_ns": 7}"#).unwrap();
        assert_eq!(c.message_latency_ns, 7.0);
        assert_eq!(
            c.message_occupancy_ns,
            FabricCosts::default().message_occupancy_ns
        );
    }
}
