//! A NIC queue pair: an RX ring fed by an arrival process, a TX ring drained onto the
//! wire, one MSI-X vector shared by both (like an ixgbe/ice "TxRx" queue vector),
//! interrupt throttling, and the device side of NAPI.
//!
//! ```text
//!  arrivals ──▶ RX ring (rx_ring slots; full: drop, counted) ──┐
//!  host transmit ──▶ TX ring ──▶ wire (tx_wire_ns each) ──done──┤ cause
//!                                                              ▼
//!            MSI when cause && enabled && now >= last MSI + ITR interval
//!            the MSI auto-masks the vector (82599 EIAM) ──▶ host: napi_schedule
//!  host poll: up to `budget` RX packets and `tx_clean_limit` TX completions;
//!             under budget ──▶ napi_complete_done ──▶ unmask_irq (fires if cause pending)
//! ```
//!
//! Interrupt throttling is the minimum interval between two interrupts of the vector,
//! `itr_interval` in the NIC's units of `itr_granularity_ns`. Defaults follow the 82599
//! and Linux's ixgbe driver: EITR's interval field (bits 11:3) counts 2 us units, which
//! is why ixgbe keeps ITR values as microseconds shifted left by 2 (ixgbe.h, "ITR
//! register values ... shifted by 2 ... with the first 3 bits reserved 0"), and at most
//! 0xFF8 >> 3 = 511 units (`IXGBE_MAX_EITR`). The E810 (Linux ice) also counts 2 us units
//! (`ICE_ITR_GRAN_US`) up to 8160 us (`ICE_ITR_MAX`): `itr_max_units = 4080`.
//!
//! The interrupt cause latches like 82599 EICR: a writeback (RX packet, TX completion)
//! sets it whether or not the vector is masked; sending the MSI clears it (EIAC
//! auto-clear). So re-enabling after a poll that already took the packets fires one more
//! interrupt, whose poll finds nothing. `cause_latch = false` models a device that only
//! interrupts on re-enable when its rings hold work.
//!
//! Model choices: RX writeback happens at the arrival time (no DMA latency); the driver
//! refills RX descriptors within the poll, so a slot frees when its packet is polled;
//! every TX descriptor reports completion; the host's TX path is the caller's.
//!
//! Inputs at `now` ([`NicQueue::rx_packet`], [`NicQueue::transmit`],
//! [`NicQueue::unmask_irq`]) assert that nothing due before `now` was left unadvanced.
//!
//! Driving it (the engine owns time): [`NicQueue::start`] once; then whenever
//! [`NicQueue::next_event`] is due call [`NicQueue::advance`], which queues arrivals,
//! completes TX descriptors and raises the MSI, appending [`NicEffect`]s. The host side
//! calls [`NicQueue::poll`] from its NAPI poll and [`NicQueue::unmask_irq`] when the poll
//! finished under budget, then asks `next_event` again.

use std::collections::VecDeque;

use rand::Rng;
use serde::{Deserialize, Serialize};
use sim_core::{Duration, SimTime};

use crate::arrival::ArrivalGenerator;
use crate::DeviceError;

/// One NIC queue pair's hardware parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NicConfig {
    /// RX descriptors. Default 512: `IXGBE_DEFAULT_RXD` (Linux ixgbe.h). 1..=65536.
    pub rx_ring: u32,
    /// TX descriptors. Default 512: `IXGBE_DEFAULT_TXD` (Linux ixgbe.h). 1..=65536.
    pub tx_ring: u32,
    /// Minimum interval between two interrupts of the vector, in `itr_granularity_ns`
    /// units (0 = no throttling). Default 25 units = 50 us = 20 K interrupts/s, ixgbe's
    /// `IXGBE_20K_ITR` (200 = 50 us << 2).
    pub itr_interval: u32,
    /// Length of one ITR unit, ns. Default 2,000: 82599 EITR interval granularity
    /// (ixgbe.h register encoding above); also E810 (`ICE_ITR_GRAN_US` = 2).
    pub itr_granularity_ns: f64,
    /// Largest `itr_interval` the register holds. Default 511: `IXGBE_MAX_EITR` =
    /// 0xFF8, bits 11:3. E810: 4080 (`ICE_ITR_MAX` = 8160 us).
    pub itr_max_units: u32,
    /// Time one TX packet occupies the wire, ns. Default 67.2: a minimum 64-byte
    /// Ethernet frame plus 8 bytes preamble and 12 bytes inter-frame gap at 10 Gb/s
    /// (IEEE 802.3), 84 bytes x 0.8 ns.
    pub tx_wire_ns: f64,
    /// Whether a writeback while masked leaves the cause set (82599 EICR semantics,
    /// default true); see the module docs.
    pub cause_latch: bool,
}

impl Default for NicConfig {
    fn default() -> Self {
        NicConfig {
            rx_ring: 512,
            tx_ring: 512,
            itr_interval: 25,
            itr_granularity_ns: 2000.0,
            itr_max_units: 511,
            tx_wire_ns: 67.2,
            cause_latch: true,
        }
    }
}

impl NicConfig {
    /// Checks every field; `field` names the NIC for the error.
    pub fn validate(&self, field: &str) -> Result<(), DeviceError> {
        let bad = |name: &str, value: String, allowed: String| {
            Err(DeviceError::invalid(field, name, value, allowed))
        };
        for (name, v) in [("rx_ring", self.rx_ring), ("tx_ring", self.tx_ring)] {
            if !(1..=65_536).contains(&v) {
                return bad(name, v.to_string(), "1..=65536 descriptors".into());
            }
        }
        if !(1..=1_000_000).contains(&self.itr_max_units) {
            return bad(
                "itr_max_units",
                self.itr_max_units.to_string(),
                "1..=1000000".into(),
            );
        }
        if self.itr_interval > self.itr_max_units {
            return bad(
                "itr_interval",
                self.itr_interval.to_string(),
                format!("0..=itr_max_units ({})", self.itr_max_units),
            );
        }
        for (name, v) in [
            ("itr_granularity_ns", self.itr_granularity_ns),
            ("tx_wire_ns", self.tx_wire_ns),
        ] {
            if !(v.is_finite() && v > 0.0 && v <= 1e9) {
                return bad(
                    name,
                    v.to_string(),
                    "a finite number of ns in (0, 1e9]".into(),
                );
            }
        }
        Ok(())
    }

    /// The throttling interval as a span.
    pub fn itr(&self) -> Duration {
        Duration::from_ns_f64(self.itr_interval as f64 * self.itr_granularity_ns)
    }
}

/// The host side of NAPI for one queue vector: limits from Linux and CPU costs the
/// root prices (cycles).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NapiConfig {
    /// RX packets one poll may process. Default 64: `NAPI_POLL_WEIGHT`
    /// (include/linux/netdevice.h).
    pub budget: u32,
    /// TX completions one poll may clean. Default 256: `IXGBE_DEFAULT_TX_WORK`
    /// (Linux ixgbe.h); a poll that hits it also counts as "at budget".
    pub tx_clean_limit: u32,
    /// CPU cycles per RX packet processed. Assumption: 1,000 (driver, buffer handling
    /// and a short stack path; no public per-packet figure is used here).
    pub rx_packet_cycles: f64,
    /// CPU cycles per TX completion cleaned. Assumption: 150 (unmap and free a buffer).
    pub tx_clean_cycles: f64,
    /// CPU cycles of one poll call besides its packets (softirq entry, NAPI
    /// bookkeeping, descriptor refill doorbell). Assumption: 500.
    pub poll_cycles: f64,
}

impl Default for NapiConfig {
    fn default() -> Self {
        NapiConfig {
            budget: 64,
            tx_clean_limit: 256,
            rx_packet_cycles: 1000.0,
            tx_clean_cycles: 150.0,
            poll_cycles: 500.0,
        }
    }
}

impl NapiConfig {
    pub fn validate(&self, field: &str) -> Result<(), DeviceError> {
        for (name, v) in [
            ("budget", self.budget),
            ("tx_clean_limit", self.tx_clean_limit),
        ] {
            if !(1..=65_536).contains(&v) {
                return Err(DeviceError::InvalidParameter {
                    field: format!("{field}.{name}"),
                    value: v.to_string(),
                    allowed: "1..=65536".into(),
                });
            }
        }
        crate::check_cycles(
            field,
            &[
                ("rx_packet_cycles", self.rx_packet_cycles),
                ("tx_clean_cycles", self.tx_clean_cycles),
                ("poll_cycles", self.poll_cycles),
            ],
        )
    }
}

/// Why a packet was dropped (packet drops, apart from any MSI drop downstream).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PacketDropReason {
    /// No free RX descriptor.
    RxRingFull,
}

/// What happened to an arriving packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxOutcome {
    Queued,
    Dropped(PacketDropReason),
}

/// What happened to a packet the host handed over for transmission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum TxOutcome {
    Queued,
    /// No free TX descriptor: the host keeps the packet (Linux stops the queue). Counted.
    RingFull,
}

/// Something the queue did that the engine routes. Packets dropped at a full RX ring
/// and transmissions refused at a full TX ring are counted in [`NicCounters`], not
/// returned one by one: a burst into a full ring would otherwise cost memory per
/// packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NicEffect {
    /// The queue's MSI-X vector fired; the vector is now masked.
    Msi { at: SimTime },
}

/// What a poll did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PollResult {
    pub rx: u32,
    pub tx: u32,
    /// Neither limit was reached: NAPI completes and the host re-enables the interrupt.
    pub under_budget: bool,
}

/// Counters of one queue pair.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NicCounters {
    pub rx_arrived: u64,
    pub rx_dropped_ring_full: u64,
    pub rx_polled: u64,
    pub tx_offered: u64,
    pub tx_rejected_ring_full: u64,
    pub tx_sent: u64,
    pub tx_cleaned: u64,
    pub msis: u64,
    pub polls: u64,
    pub polls_at_budget: u64,
    /// Polls that found no work (e.g. after a latched cause fired).
    pub polls_empty: u64,
    pub unmasks: u64,
}

/// One queue pair and its vector. Getters: [`config`](Self::config),
/// [`rx_pending`](Self::rx_pending), [`tx_pending_clean`](Self::tx_pending_clean),
/// [`irq_enabled`](Self::irq_enabled), [`counters`](Self::counters). Inputs:
/// [`rx_packet`](Self::rx_packet), [`transmit`](Self::transmit), [`poll`](Self::poll),
/// [`mask_irq`](Self::mask_irq), [`unmask_irq`](Self::unmask_irq). Time:
/// [`start`](Self::start), [`next_event`](Self::next_event), [`advance`](Self::advance).
#[derive(Clone, Debug)]
pub struct NicQueue {
    config: NicConfig,
    itr: Duration,
    wire: Duration,
    /// Arrival times of the packets in the RX ring.
    rx_ring: VecDeque<SimTime>,
    /// Completion times of TX descriptors still on their way to the wire (FIFO).
    tx_wire: VecDeque<SimTime>,
    /// TX descriptors completed and not yet cleaned.
    tx_done: u32,
    irq_enabled: bool,
    enabled_at: SimTime,
    /// Since when an interrupt cause is pending.
    cause_since: Option<SimTime>,
    last_msi: Option<SimTime>,
    rx_gen: Option<ArrivalGenerator>,
    next_rx: Option<SimTime>,
    tx_gen: Option<ArrivalGenerator>,
    next_tx: Option<SimTime>,
    /// The RX ring is full and arrivals come from `rx_gen`: each would only be
    /// dropped, so `next_rx` is left out of the wake-ups and the drops are counted in
    /// bulk by [`settle_rx`](NicQueue::settle_rx) when the ring may have room again.
    rx_parked: bool,
    counters: NicCounters,
}

impl NicQueue {
    /// Validates `config` (errors name `field`). `rx_arrivals` generates packet
    /// arrivals, `tx_arrivals` packets the host hands over for transmission; either may
    /// be `None` when the caller drives [`rx_packet`](Self::rx_packet) or
    /// [`transmit`](Self::transmit) itself.
    pub fn new(
        config: NicConfig,
        field: &str,
        rx_arrivals: Option<ArrivalGenerator>,
        tx_arrivals: Option<ArrivalGenerator>,
    ) -> Result<NicQueue, DeviceError> {
        config.validate(field)?;
        Ok(NicQueue {
            itr: config.itr(),
            wire: Duration::from_ns_f64(config.tx_wire_ns).max(Duration::from_ps(1)),
            config,
            rx_ring: VecDeque::new(),
            tx_wire: VecDeque::new(),
            tx_done: 0,
            irq_enabled: true,
            enabled_at: SimTime::ZERO,
            cause_since: None,
            last_msi: None,
            rx_gen: rx_arrivals,
            next_rx: None,
            tx_gen: tx_arrivals,
            next_tx: None,
            rx_parked: false,
            counters: NicCounters::default(),
        })
    }

    pub fn config(&self) -> &NicConfig {
        &self.config
    }

    /// Packets waiting in the RX ring.
    pub fn rx_pending(&self) -> u32 {
        self.rx_ring.len() as u32
    }

    /// TX descriptors completed and waiting to be cleaned.
    pub fn tx_pending_clean(&self) -> u32 {
        self.tx_done
    }

    /// TX descriptors not yet on the wire.
    pub fn tx_in_flight(&self) -> u32 {
        self.tx_wire.len() as u32
    }

    pub fn irq_enabled(&self) -> bool {
        self.irq_enabled
    }

    pub fn counters(&self) -> NicCounters {
        self.counters
    }

    /// Starts the arrival generators at `now`; returns the first wake-up.
    pub fn start<R: Rng + ?Sized>(&mut self, now: SimTime, rng: &mut R) -> Option<SimTime> {
        self.enabled_at = now;
        if let Some(g) = &mut self.rx_gen {
            g.restart(now);
            self.next_rx = g.next_arrival(rng);
        }
        if let Some(g) = &mut self.tx_gen {
            g.restart(now);
            self.next_tx = g.next_arrival(rng);
        }
        self.next_event()
    }

    fn set_cause(&mut self, at: SimTime) {
        if self.cause_since.is_none() {
            self.cause_since = Some(at);
        }
    }

    /// When the MSI fires if nothing changes: the cause is pending, the vector enabled,
    /// and the throttling interval since the last MSI has passed.
    pub fn msi_due(&self) -> Option<SimTime> {
        if !self.irq_enabled {
            return None;
        }
        let mut t = self.cause_since?.max(self.enabled_at);
        if let Some(last) = self.last_msi {
            t = t.max(last + self.itr);
        }
        Some(t)
    }

    /// The next time [`advance`](Self::advance) has work: an arrival, a TX completion
    /// or the MSI.
    pub fn next_event(&self) -> Option<SimTime> {
        [
            self.next_rx_wake(),
            self.next_tx,
            self.tx_wire.front().copied(),
            self.msi_due(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Performs everything due at or before `now` in time order (at one instant:
    /// arrival, TX offer, TX completion, then the MSI, so the MSI covers them); appends
    /// effects to `out`; returns the next wake-up.
    pub fn advance<R: Rng + ?Sized>(
        &mut self,
        now: SimTime,
        rng: &mut R,
        out: &mut Vec<NicEffect>,
    ) -> Option<SimTime> {
        loop {
            let due = [
                self.next_rx_wake(),
                self.next_tx,
                self.tx_wire.front().copied(),
                self.msi_due(),
            ];
            let Some((kind, t)) = due
                .iter()
                .enumerate()
                .filter_map(|(k, t)| t.filter(|t| *t <= now).map(|t| (k, t)))
                .min_by_key(|&(k, t)| (t, k))
            else {
                break;
            };
            match kind {
                0 => {
                    // A drop is counted by rx_packet.
                    let _ = self.rx_packet(t);
                    self.next_rx = self.rx_gen.as_mut().and_then(|g| g.next_arrival(rng));
                    self.rx_parked = self.rx_ring.len() as u32 >= self.config.rx_ring;
                }
                1 => {
                    // A full ring is counted by transmit.
                    let _ = self.transmit(t);
                    self.next_tx = self.tx_gen.as_mut().and_then(|g| g.next_arrival(rng));
                }
                2 => {
                    self.tx_wire.pop_front();
                    self.tx_done += 1;
                    self.counters.tx_sent += 1;
                    self.set_cause(t);
                }
                _ => {
                    out.push(NicEffect::Msi { at: t });
                    self.counters.msis += 1;
                    self.last_msi = Some(t);
                    self.cause_since = None;
                    self.irq_enabled = false;
                }
            }
        }
        // Arrivals a full ring left out of the loop: drops, counted through `now`.
        self.settle_rx(now, rng);
        self.next_event()
    }

    fn next_rx_wake(&self) -> Option<SimTime> {
        self.next_rx.filter(|_| !self.rx_parked)
    }

    /// Counts the RX arrivals a full ring dropped while parked, through `now`.
    /// [`advance`](Self::advance) ends with this; a caller with an RX generator that
    /// polls without advancing to the poll's time calls it before
    /// [`poll`](Self::poll) (the only input that frees ring space), so those drops are
    /// counted through the time they happened and arrivals after the poll find room.
    /// A no-op when not parked.
    pub fn settle_rx<R: Rng + ?Sized>(&mut self, now: SimTime, rng: &mut R) {
        if !self.rx_parked {
            return;
        }
        let (Some(first), Some(g)) = (self.next_rx, self.rx_gen.as_mut()) else {
            return;
        };
        let (n, next) = g.skip_through(first, now, rng);
        self.next_rx = next;
        self.counters.rx_arrived += n;
        self.counters.rx_dropped_ring_full += n;
    }

    /// [`counters`](Self::counters) with the drops a parked ring owes through `now`
    /// counted, worked out on copies so reading changes nothing.
    pub fn counters_through<R: Rng + Clone>(&self, now: SimTime, rng: &R) -> NicCounters {
        if !self.rx_parked {
            return self.counters;
        }
        let mut copy = self.clone();
        copy.settle_rx(now, &mut rng.clone());
        copy.counters
    }

    fn assert_advanced(&self, now: SimTime) {
        if let Some(t) = self.next_event() {
            assert!(
                t >= now,
                "NIC input at {now} while an event due at {t} was not advanced"
            );
        }
    }

    /// A packet arrives at `now` (the NIC writes it back to a free RX descriptor).
    /// Sets the interrupt cause; ask [`next_event`](Self::next_event) again.
    pub fn rx_packet(&mut self, now: SimTime) -> RxOutcome {
        self.assert_advanced(now);
        self.counters.rx_arrived += 1;
        if self.rx_ring.len() as u32 >= self.config.rx_ring {
            self.counters.rx_dropped_ring_full += 1;
            return RxOutcome::Dropped(PacketDropReason::RxRingFull);
        }
        self.rx_ring.push_back(now);
        self.set_cause(now);
        RxOutcome::Queued
    }

    /// The host posts one packet for transmission at `now`; it leaves on the wire after
    /// the packets before it. Ask [`next_event`](Self::next_event) again.
    pub fn transmit(&mut self, now: SimTime) -> TxOutcome {
        self.assert_advanced(now);
        self.counters.tx_offered += 1;
        if self.tx_wire.len() as u32 + self.tx_done >= self.config.tx_ring {
            self.counters.tx_rejected_ring_full += 1;
            return TxOutcome::RingFull;
        }
        let start = self.tx_wire.back().copied().unwrap_or(now).max(now);
        self.tx_wire.push_back(start + self.wire);
        TxOutcome::Queued
    }

    /// The host posts one packet at `now` that the caller has scheduled onto a wire
    /// shared with other queues: it completes at `done` (not before the queue's
    /// previous packet). Ask [`next_event`](Self::next_event) again.
    pub fn transmit_done_at(&mut self, now: SimTime, done: SimTime) -> TxOutcome {
        self.assert_advanced(now);
        self.counters.tx_offered += 1;
        if !self.tx_has_room() {
            self.counters.tx_rejected_ring_full += 1;
            return TxOutcome::RingFull;
        }
        let after = self.tx_wire.back().copied().unwrap_or(now).max(now);
        self.tx_wire.push_back(done.max(after));
        TxOutcome::Queued
    }

    /// Whether the TX ring has a free descriptor.
    pub fn tx_has_room(&self) -> bool {
        (self.tx_wire.len() as u32 + self.tx_done) < self.config.tx_ring
    }

    /// One NAPI poll: cleans up to `tx_limit` TX completions and takes up to `budget`
    /// RX packets, oldest first.
    pub fn poll(&mut self, budget: u32, tx_limit: u32) -> PollResult {
        self.poll_inner(budget, tx_limit, None)
    }

    /// [`poll`](Self::poll), also appending the arrival time of each RX packet taken
    /// (for packet latency).
    pub fn poll_with_arrivals(
        &mut self,
        budget: u32,
        tx_limit: u32,
        arrivals: &mut Vec<SimTime>,
    ) -> PollResult {
        self.poll_inner(budget, tx_limit, Some(arrivals))
    }

    fn poll_inner(
        &mut self,
        budget: u32,
        tx_limit: u32,
        arrivals: Option<&mut Vec<SimTime>>,
    ) -> PollResult {
        let tx = self.tx_done.min(tx_limit);
        self.tx_done -= tx;
        let rx = (self.rx_ring.len() as u32).min(budget);
        if rx > 0 {
            self.rx_parked = false;
        }
        match arrivals {
            Some(a) => a.extend(self.rx_ring.drain(..rx as usize)),
            None => {
                self.rx_ring.drain(..rx as usize);
            }
        }
        let c = &mut self.counters;
        c.tx_cleaned += tx as u64;
        c.rx_polled += rx as u64;
        c.polls += 1;
        let under_budget = rx < budget && tx < tx_limit;
        if !under_budget {
            c.polls_at_budget += 1;
        }
        if rx == 0 && tx == 0 {
            c.polls_empty += 1;
        }
        PollResult {
            rx,
            tx,
            under_budget,
        }
    }

    /// Masks the vector (for drivers that mask in the handler; the MSI already
    /// auto-masks).
    pub fn mask_irq(&mut self) {
        self.irq_enabled = false;
    }

    /// Re-enables the vector at `now` (napi_complete_done after a poll under budget).
    /// A pending cause fires, subject to throttling. Returns the next wake-up.
    pub fn unmask_irq(&mut self, now: SimTime) -> Option<SimTime> {
        self.assert_advanced(now);
        if !self.irq_enabled {
            self.counters.unmasks += 1;
        }
        self.irq_enabled = true;
        self.enabled_at = now;
        if !self.config.cause_latch {
            let work = !self.rx_ring.is_empty() || self.tx_done > 0;
            self.cause_since = work.then_some(now);
        }
        self.next_event()
    }

    /// Asserts the queue's conservation laws: every arrival is queued, dropped or
    /// polled; every TX packet offered is rejected, in flight, completed or cleaned.
    pub fn check_conservation(&self) {
        let c = &self.counters;
        assert_eq!(
            c.rx_arrived,
            c.rx_dropped_ring_full + self.rx_ring.len() as u64 + c.rx_polled,
            "RX: arrived = dropped + in ring + polled"
        );
        assert_eq!(
            c.tx_offered,
            c.tx_rejected_ring_full + self.tx_wire.len() as u64 + c.tx_sent,
            "TX: offered = rejected + in flight + sent"
        );
        assert_eq!(
            c.tx_sent,
            c.tx_cleaned + self.tx_done as u64,
            "TX: sent = cleaned + done"
        );
        assert!(self.rx_ring.len() as u32 <= self.config.rx_ring);
        assert!(self.tx_wire.len() as u32 + self.tx_done <= self.config.tx_ring);
    }
}

#[cfg(test)]
#[path = "nic_tests.rs"]
mod tests;
