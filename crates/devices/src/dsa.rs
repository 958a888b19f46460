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

    pub fn counters(&self) -> DsaCounters {
        self.counters
    }

    pub fn message(&self) -> MsiMessage {
        self.message
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

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
