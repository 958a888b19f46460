//! The I/O fabric of DESIGN.md 4.7: each root port's ordered stream of posted writes,
//! and the shared interrupt-delivery paths.
//!
//! ```text
//!  device ─link─flight─▶ root port: [CQE] [MSI] [CQE] [MSI] ...   (strict order)
//!                     │ read data (Relaxed Ordering) crosses the device's link ahead
//!                     │ of its CQE and commits without waiting here
//!                     │ a CQE or record: ordered commit, then it lands (host sees it)
//!                     │ an MSI: handed to the stack's remapping unit; the port waits
//!                     ▼ until the MSI retires, so later writes wait behind it
//!                   remapping unit ──remapped──▶ delivery path (shared: port, stack or
//!                     │                           socket) ── occupancy ──▶ retire;
//!                     │                                        flight ──▶ LAPIC
//!                     └─posted──▶ descriptor line (one post at a time per line) ──▶
//!                                 retire at the update; a notification, if any, takes
//!                                 the delivery path without holding the port
//! ```
//!
//! So a slow delivery path slows the device's completions, not only the CPU: while a
//! remapped MSI waits for the shared path, the CQEs behind it do not land.

use std::collections::VecDeque;

use iommu_sim::vtd::{DeliveryScope, FifoCounters, InterruptMessageFabric};
use serde::Serialize;
use sim_core::{Duration, SimTime};

use super::ledger::MsiToken;
use super::{Event, System};
use crate::engine::Priority;

/// What a landed write makes visible to the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Landing {
    /// The CQ entry of NVMe drive `drive`, queue `qid`.
    NvmeCqe { drive: u16, qid: u16 },
    /// A closed-loop DSA device's completion record.
    DsaRecord { device: u32 },
    /// Nothing the host waits for (an open-loop device's record).
    Nothing,
}

/// One write in a root port's ordered stream.
#[derive(Clone, Copy, Debug)]
pub(super) enum PortWrite {
    /// A completion record or CQE: a strictly ordered write. The read data before it
    /// carries Relaxed Ordering, so it crosses the device's link and commits without
    /// waiting at the ordering point; the record comes after it on the link.
    Completion { landing: Landing },
    /// An MSI for the remapping unit.
    Msi { source: u32, token: MsiToken },
    /// A VMD child's MSI, a posted write that VMD captures (remap mode).
    ChildMsiToVmd {
        domain: u16,
        child: devices::ChildIrq,
        token: MsiToken,
    },
}

#[derive(Clone, Copy, Debug)]
pub(super) struct PortItem {
    /// When the write reaches the port's ordering point.
    pub ready: SimTime,
    pub write: PortWrite,
}

/// The state of a root port's stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PortState {
    /// Nothing in service.
    Idle,
    /// The head is still in flight; a `PortReady` event is due.
    WaitingForHead,
    /// The head write is being committed; a `PortWriteDone` event is due.
    Writing,
    /// The head is an MSI the IOMMU holds; the port waits for it to retire.
    MsiOut { since: SimTime },
    /// The head is a child MSI for VMD, whose buffer of its own MSIs is full: the
    /// port waits until VMD delivers one.
    WaitingForVmd { since: SimTime },
}

/// One root port.
pub(super) struct Port {
    /// The port number in the scenario (`devices[].port` etc.).
    pub number: u32,
    pub stack: u32,
    pub socket: u16,
    /// The remapping unit whose scope covers the port.
    pub unit: u16,
    /// Index of its delivery path.
    pub delivery: u16,
    pub queue: VecDeque<PortItem>,
    pub state: PortState,
    /// MSI credits not taken (see `pcie.port_credits`).
    pub credits_free: u32,
    /// Sources holding MSIs back for lack of a credit, in arrival order.
    pub credit_waiters: VecDeque<u32>,
    /// Ordered writes (data, records, CQEs, child MSIs to VMD) committed.
    pub writes: u64,
    /// MSIs that retired.
    pub msis: u64,
    /// Time the port's head was an MSI out at the IOMMU while later writes waited.
    pub stalled_behind_msi: Duration,
    /// Time the head was an MSI out at the IOMMU in all.
    pub msi_out: Duration,
    /// Time spent committing writes.
    pub write_busy: Duration,
}

/// One root port in the report.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct PortReport {
    /// Port number in the scenario.
    pub port: u32,
    /// PCIe stack of the port.
    pub stack: u32,
    /// Socket of the stack.
    pub socket: u16,
    /// Remapping unit of the stack.
    pub unit: u16,
    /// Ordered writes committed (data with its CQE or completion record; child MSIs).
    pub writes: u64,
    /// MSIs the port sent on to the IOMMU that retired.
    pub msis: u64,
    /// Fraction of the run the port was committing writes (link time included).
    pub write_busy_frac: f64,
    /// Fraction of the run the port's head was an MSI at the IOMMU (remapping,
    /// waiting for and holding the delivery path, or being posted).
    pub msi_out_frac: f64,
    /// Time later writes of the port's devices stood behind an MSI, ns: how long
    /// device writes stalled behind strictly ordered interrupts.
    pub stalled_behind_msi_ns: f64,
    /// Writes still queued in the port when the report was taken.
    pub queued: u64,
}

/// One interrupt-delivery path in the report.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct DeliveryReport {
    /// `port`, `stack` or `socket`.
    pub scope: String,
    /// Which port, stack or socket.
    pub index: u32,
    /// Messages delivered (remapped interrupts and posted-interrupt notifications).
    pub messages: u64,
    /// Fraction of the run the path was occupied.
    pub busy_frac: f64,
    /// Mean wait of a message for the path, ns.
    pub mean_wait_ns: f64,
    /// Longest wait, ns.
    pub max_wait_ns: f64,
}

/// The I/O fabric part of a report.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct FabricReport {
    /// Which devices share a delivery path.
    pub delivery_shared_by: String,
    /// Every root port that has a device, in port order.
    pub ports: Vec<PortReport>,
    /// Every delivery path in use.
    pub delivery: Vec<DeliveryReport>,
}

/// A delivery path and what it belongs to.
pub(super) struct Delivery {
    pub path: InterruptMessageFabric,
    pub index: u32,
}

/// The delivery path of every port: the index into `deliveries` of each port, and the
/// paths themselves, one per port, stack or socket in use.
pub(super) fn delivery_paths(
    ports: &mut [Port],
    scope: DeliveryScope,
    path: &InterruptMessageFabric,
) -> Vec<Delivery> {
    let mut out: Vec<Delivery> = Vec::new();
    for p in ports.iter_mut() {
        let index = match scope {
            DeliveryScope::Port => p.number,
            DeliveryScope::Stack => p.stack,
            DeliveryScope::Socket => p.socket as u32,
        };
        p.delivery = match out.iter().position(|d| d.index == index) {
            Some(i) => i as u16,
            None => {
                out.push(Delivery {
                    path: path.clone(),
                    index,
                });
                out.len() as u16 - 1
            }
        };
    }
    out
}

impl System {
    /// A device issues `write` at `now` into port `port`'s stream; it reaches the
    /// port's ordering point after the posted-write flight.
    pub(super) fn port_push(&mut self, now: SimTime, port: u16, write: PortWrite) {
        self.port_push_at(now, now + self.timing.msi_write, port, write);
    }

    /// As [`System::port_push`], for a write that reaches the ordering point at `ready`
    /// (a write VMD, inside the stack, issues itself).
    pub(super) fn port_push_at(
        &mut self,
        now: SimTime,
        ready: SimTime,
        port: u16,
        write: PortWrite,
    ) {
        self.ports[port as usize]
            .queue
            .push_back(PortItem { ready, write });
        self.port_start_head(now, port);
    }

    /// Starts serving the head of port `port` if nothing is in service.
    fn port_start_head(&mut self, now: SimTime, port: u16) {
        let p = &mut self.ports[port as usize];
        if p.state != PortState::Idle {
            return;
        }
        let Some(head) = p.queue.front().copied() else {
            return;
        };
        if head.ready > now {
            p.state = PortState::WaitingForHead;
            self.queue
                .schedule(head.ready, Priority::DEVICE, Event::PortReady { port });
            return;
        }
        match head.write {
            PortWrite::Completion { .. } => {
                let service = self.timing.ordered_write;
                self.begin_write(now, port, service);
            }
            PortWrite::ChildMsiToVmd { domain, child, .. } => {
                if !self.vmd_has_room(domain, child) {
                    self.ports[port as usize].state = PortState::WaitingForVmd { since: now };
                    self.io.vmd[domain as usize].waiting_ports.push_back(port);
                    return;
                }
                let service = self.timing.ordered_write;
                self.begin_write(now, port, service);
            }
            PortWrite::Msi { source, token } => {
                p.state = PortState::MsiOut { since: now };
                let unit = p.unit;
                self.ledger.port -= 1;
                self.ledger.iommu += 1;
                self.iommu_accept(now, unit, port, source, token);
            }
        }
    }

    fn begin_write(&mut self, now: SimTime, port: u16, service: Duration) {
        let p = &mut self.ports[port as usize];
        p.state = PortState::Writing;
        p.write_busy += service;
        self.queue.schedule(
            now + service,
            Priority::DEVICE,
            Event::PortWriteDone { port },
        );
    }

    /// VMD has room again: port `port`, whose head is a child MSI for it, goes on.
    pub(super) fn port_vmd_room(&mut self, now: SimTime, port: u16) {
        let p = &mut self.ports[port as usize];
        let PortState::WaitingForVmd { since } = p.state else {
            unreachable!("port {port} was not waiting for VMD");
        };
        let waited = now.since(since);
        p.msi_out += waited;
        if p.queue.len() > 1 {
            p.stalled_behind_msi += waited;
        }
        p.state = PortState::Idle;
        self.port_start_head(now, port);
    }

    /// The head of port `port` reached the ordering point.
    pub(super) fn on_port_ready(&mut self, now: SimTime, port: u16) {
        self.ports[port as usize].state = PortState::Idle;
        self.port_start_head(now, port);
    }

    /// The head write of port `port` is committed: it lands, and the next write goes.
    pub(super) fn on_port_write_done(&mut self, now: SimTime, port: u16) {
        let p = &mut self.ports[port as usize];
        let item = p.queue.pop_front().expect("a write was in service");
        p.state = PortState::Idle;
        p.writes += 1;
        match item.write {
            PortWrite::Completion { landing, .. } => self.land(now, landing),
            PortWrite::ChildMsiToVmd {
                domain,
                child,
                token,
            } => self.vmd_capture(now, domain, child, token),
            PortWrite::Msi { .. } => unreachable!("an MSI retires through the IOMMU"),
        }
        self.port_start_head(now, port);
    }

    /// The MSI at the head of port `port` retired (delivered, posted, or dropped): the
    /// port's later writes may go, and its credit comes back.
    pub(super) fn port_msi_retired(&mut self, now: SimTime, port: u16) {
        let p = &mut self.ports[port as usize];
        let PortState::MsiOut { since } = p.state else {
            unreachable!("port {port} retired an MSI it did not send");
        };
        let item = p.queue.pop_front().expect("the MSI is the head");
        let out = now.since(since);
        p.msi_out += out;
        if !p.queue.is_empty() {
            p.stalled_behind_msi += out;
        }
        p.msis += 1;
        p.state = PortState::Idle;
        if let PortWrite::Msi { source, .. } = item.write {
            self.vmd_msi_left(now, source);
            if self.sources[source as usize].flow_controlled {
                self.credit_returned(now, port);
            }
        }
        self.port_start_head(now, port);
    }

    /// Makes a landed write visible to the host.
    fn land(&mut self, now: SimTime, landing: Landing) {
        match landing {
            Landing::NvmeCqe { drive, qid } => self.io.nvme[drive as usize].drive.land(qid),
            Landing::DsaRecord { device } => self.dsa_record_landed(now, device),
            Landing::Nothing => {}
        }
    }

    pub(super) fn fabric_report(&self) -> FabricReport {
        let elapsed = self.now().as_ns_f64().max(1e-9);
        let frac = |d: Duration| d.as_ns_f64() / elapsed;
        let scope = self.costs.fabric.delivery_shared_by;
        FabricReport {
            delivery_shared_by: scope.as_str().into(),
            ports: self
                .ports
                .iter()
                .map(|p| {
                    // The part of an MSI still out at the IOMMU counts up to now.
                    let open = match p.state {
                        PortState::MsiOut { since } | PortState::WaitingForVmd { since } => {
                            self.now().since(since)
                        }
                        _ => Duration::ZERO,
                    };
                    let stalled = if p.queue.len() > 1 {
                        open
                    } else {
                        Duration::ZERO
                    };
                    PortReport {
                        port: p.number,
                        stack: p.stack,
                        socket: p.socket,
                        unit: p.unit,
                        writes: p.writes,
                        msis: p.msis,
                        write_busy_frac: frac(p.write_busy).min(1.0),
                        msi_out_frac: frac(p.msi_out + open),
                        stalled_behind_msi_ns: (p.stalled_behind_msi + stalled).as_ns_f64(),
                        queued: p.queue.len() as u64,
                    }
                })
                .collect(),
            delivery: self
                .deliveries
                .iter()
                .map(|d| {
                    let c: &FifoCounters = d.path.counters();
                    DeliveryReport {
                        scope: scope.as_str().into(),
                        index: d.index,
                        messages: c.submitted,
                        busy_frac: (c.busy_ps as f64 / 1e3 / elapsed).min(1.0),
                        mean_wait_ns: if c.submitted > 0 {
                            c.total_wait_ps as f64 / 1e3 / c.submitted as f64
                        } else {
                            0.0
                        },
                        max_wait_ns: c.max_wait_ps as f64 / 1e3,
                    }
                })
                .collect(),
        }
    }
}
