//! MSI sources and PCIe flow control toward the root port.
//!
//! Every MSI-X vector of every device (a DSA work queue, an NVMe I/O queue, a NIC
//! queue, a VMD vector) is one source with its own (address, data), requester id and
//! root port. A source writes an MSI only when its port has an MSI credit free;
//! otherwise the MSI waits in the device as a count (constant memory), and sources
//! waiting for credit are served round robin as credits come back.

use serde::Serialize;
use sim_core::{MsiMessage, SimTime};

use super::fabric::{Landing, PortWrite};
use super::ledger::MsiToken;
use super::{SimEvent, System};

/// One MSI-X vector of one device.
#[derive(Clone, Debug)]
pub(super) struct MsiSource {
    pub name: String,
    pub message: MsiMessage,
    pub source_id: u16,
    /// MSIs that must be written but wait for a request credit.
    pub backlog: u64,
    /// MSIs that had to wait for a credit.
    pub stalls: u64,
    /// Whether the source is queued for a credit.
    pub waiting: bool,
    /// Index of the root port its writes go through (into `System::ports`).
    pub port: u16,
    /// An open-loop device's completion record, written just before each MSI (held
    /// back with it).
    pub writes_record: bool,
    /// (VMD domain, VMD vector) when the source is one of VMD's own vectors.
    pub vmd: Option<(u16, u16)>,
    /// Whether the source's MSIs take port credits: an open-loop source (a DSA queue
    /// with an arrival process, a NIC queue) would otherwise queue without bound. A
    /// closed-loop device (NVMe, a DSA job) has as many writes outstanding as it has
    /// commands, and holding only its MSIs back would let its later CQEs pass them.
    pub flow_controlled: bool,
    /// MSIs written.
    pub written: u64,
    /// The open-loop device parked on this source while it waits (see
    /// [`System::catch_up_held`]).
    pub parked_device: Option<u32>,
}

impl MsiSource {
    pub fn new(name: String, message: MsiMessage, source_id: u16, port: u16) -> Self {
        MsiSource {
            name,
            message,
            source_id,
            port,
            writes_record: false,
            vmd: None,
            flow_controlled: false,
            backlog: 0,
            stalls: 0,
            waiting: false,
            written: 0,
            parked_device: None,
        }
    }
}

/// Flow-control figures of one source, for reports.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct SourceReport {
    /// The device's name, `<name> q<i>` for an I/O queue, or `<name> v<i>` for a VMD vector.
    pub name: String,
    /// MSIs the source wrote towards the IOMMU.
    pub msis_written: u64,
    /// MSIs still held back at the end.
    pub msi_backlog: u64,
    /// MSIs that had to wait for a root-port credit before being written.
    pub msi_stalls: u64,
}

impl System {
    /// Whether source `source` may write an MSI now: it is not flow-controlled, or its
    /// port has a credit free.
    pub(super) fn port_has_credit(&self, source: u32) -> bool {
        let s = &self.sources[source as usize];
        !s.flow_controlled || self.ports[s.port as usize].credits_free > 0
    }

    /// Source `source` wants to write an MSI now: at once if it may, else it waits in
    /// the device until a credit comes back.
    pub(super) fn raise_msi(&mut self, now: SimTime, source: u32) {
        let p = self.sources[source as usize].port as usize;
        if !self.port_has_credit(source) {
            let s = &mut self.sources[source as usize];
            s.backlog += 1;
            s.stalls += 1;
            if !s.waiting {
                s.waiting = true;
                self.ports[p].credit_waiters.push_back(source);
            }
            return;
        }
        self.write_msi(now, source);
    }

    /// A flow-controlled MSI of port `port` retired and its credit came back: the
    /// longest-waiting source writes one held MSI and, if it has more, queues again
    /// behind the others.
    pub(super) fn credit_returned(&mut self, now: SimTime, port: u16) {
        let p = port as usize;
        self.ports[p].credits_free += 1;
        let Some(source) = self.ports[p].credit_waiters.pop_front() else {
            return;
        };
        if let Some(device) = self.sources[source as usize].parked_device {
            self.catch_up_held(device, now);
        }
        let s = &mut self.sources[source as usize];
        s.backlog -= 1;
        if s.backlog > 0 {
            self.ports[p].credit_waiters.push_back(source);
        } else {
            s.waiting = false;
            // The device's next completion is scheduled before this MSI's write, the
            // order an event-per-completion run schedules them in.
            if let Some(device) = s.parked_device {
                self.unpark(device);
            }
        }
        self.write_msi(now, source);
    }

    /// A new MSI of source `source`, raised at `now`, counted in the balance.
    pub(super) fn new_msi(&mut self, now: SimTime, source: u32) -> MsiToken {
        let token = MsiToken {
            id: self.ledger.generated,
            raised: now,
        };
        self.ledger.generated += 1;
        self.emit(|| SimEvent::MsiRaised {
            t: now,
            device: source,
            msi: token,
        });
        token
    }

    /// The source writes an MSI now (after its record, for an open-loop device) into
    /// its port's ordered stream.
    fn write_msi(&mut self, now: SimTime, source: u32) {
        let s = &mut self.sources[source as usize];
        s.written += 1;
        let (port, record) = (s.port, s.writes_record);
        if s.flow_controlled {
            self.ports[port as usize].credits_free -= 1;
        }
        if record {
            self.port_push(
                now,
                port,
                PortWrite::Completion {
                    landing: Landing::Nothing,
                },
            );
        }
        let token = self.new_msi(now, source);
        self.ledger.port += 1;
        self.port_push(now, port, PortWrite::Msi { source, token });
    }

    pub(super) fn source_reports(&self) -> Vec<SourceReport> {
        self.sources
            .iter()
            .map(|s| {
                let uncounted = s.parked_device.map_or(0, |d| {
                    self.devices[d as usize].held_not_yet_counted(self.now())
                });
                SourceReport {
                    name: s.name.clone(),
                    msis_written: s.written,
                    msi_backlog: s.backlog + uncounted,
                    msi_stalls: s.stalls + uncounted,
                }
            })
            .collect()
    }
}
