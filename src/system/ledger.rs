//! Where every MSI is, from being raised until it is handled or dropped.
//!
//! Each MSI is in exactly one place at a time. Merging (a second MSI to a vector whose
//! bit is already set in PIR or IRR) keeps both MSIs: they travel together and are both
//! handled by the next run of that vector's handler, each with its own latency. The
//! MSIs of one place are a [`TokenBag`]: a starved vector's merged MSIs take bounded
//! memory, their raise times kept to the bag's resolution.

use std::collections::BTreeMap;

use sim_core::{SimTime, Vector};

use super::token_bag::{RaiseSpan, TokenBag};

/// One MSI: its sequence number in the run (0, 1, ...) and when it was raised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsiToken {
    /// Sequence number of the MSI in the run (0 for the first raised).
    pub id: u64,
    /// When the device raised it.
    pub raised: SimTime,
}

/// MSIs waiting at one (CPU, vector).
///
/// Two cache lines, aligned: a posted MSI touches only the first (PIR, harvested), a
/// remapped one only the second (IRR, in service).
#[derive(Default, Debug)]
#[repr(align(64))]
struct Slot {
    /// Bit set in the CPU's PIR (posted mode).
    in_pir: TokenBag,
    /// Taken out of PIR by a locked exchange, not yet dispatched.
    harvested: TokenBag,
    /// Bit set in the LAPIC's IRR (remapped mode).
    in_irr: TokenBag,
    /// Acknowledged into ISR, handler not started.
    in_service: TokenBag,
}

/// The MSIs one handler call serves: the first ones as tokens, any beyond
/// [`super::token_bag::EXACT_TOKENS`] per place as spans of raise times.
#[derive(Debug, Default)]
pub struct Served {
    /// MSIs kept one by one.
    pub exact: Vec<MsiToken>,
    /// MSIs kept as counts over a range of raise times.
    pub spans: Vec<RaiseSpan>,
}

impl Served {
    /// MSIs served, exact and in spans.
    pub fn count(&self) -> u64 {
        self.exact.len() as u64 + self.in_spans()
    }

    /// MSIs served that are kept only as spans.
    pub fn in_spans(&self) -> u64 {
        self.spans.iter().map(|s| s.count).sum()
    }

    fn clear(&mut self) {
        self.exact.clear();
        self.spans.clear();
    }

    fn append(&mut self, bag: &mut TokenBag) {
        bag.drain_into(&mut self.exact, &mut self.spans);
    }
}

const NO_SLOT: u16 = u16::MAX;

/// Per-CPU table of slots, allocated only for vectors that are used.
struct CpuSlots {
    slot_of: [u16; 256],
    slots: Vec<Slot>,
}

impl CpuSlots {
    fn new() -> Self {
        CpuSlots {
            slot_of: [NO_SLOT; 256],
            slots: Vec::new(),
        }
    }

    fn get_mut(&mut self, v: Vector) -> &mut Slot {
        let idx = self.slot_of[v.0 as usize];
        if idx == NO_SLOT {
            self.slot_of[v.0 as usize] = self.slots.len() as u16;
            self.slots.push(Slot::default());
            self.slots.last_mut().expect("just pushed")
        } else {
            &mut self.slots[idx as usize]
        }
    }
}

/// Counts of MSIs that are neither handled nor dropped, by where they are.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PendingWhere {
    /// Raised and in the device's root-port stream: in flight to the port, or queued
    /// behind the device's earlier writes (strictly ordered, they cannot pass).
    pub port: u64,
    /// In an IOMMU unit: its request pipeline, or waiting for or holding the target
    /// CPU's descriptor line.
    pub iommu: u64,
    /// VMD child MSIs merged into VMD's outstanding MSI for their vector: they go
    /// wherever that MSI goes.
    pub vmd: u64,
    /// Remapped interrupt messages in the fabric, not yet at the local APIC.
    pub fabric: u64,
    /// Bits set in a CPU's PIR (posted mode), not yet exchanged out.
    pub pir: u64,
    /// Taken out of PIR by a locked exchange, handler not yet started.
    pub harvested: u64,
    /// Bits set in a local APIC's IRR (remapped mode), not yet acknowledged.
    pub irr: u64,
    /// Acknowledged into ISR, handler not yet started.
    pub in_service: u64,
    /// At a level-triggered IOAPIC pin: the assertion that raised the line, not yet
    /// delivered (the entry masked, or Remote IRR set), and events the device holds
    /// behind its line already high (served when the driver acknowledges it).
    pub ioapic_level: u64,
}

impl PendingWhere {
    /// All pending MSIs: the sum of every place.
    pub fn total(&self) -> u64 {
        self.port
            + self.iommu
            + self.vmd
            + self.fabric
            + self.pir
            + self.harvested
            + self.irr
            + self.in_service
            + self.ioapic_level
    }
}

/// The MSI balance of a run.
pub struct Ledger {
    cpus: Vec<CpuSlots>,
    /// MSIs raised so far.
    pub generated: u64,
    /// MSIs served by a handler call (each merged MSI counts).
    pub handled: u64,
    /// MSIs that found their vector's bit already set in PIR or IRR.
    pub merged: u64,
    /// Dropped MSIs by reason (stable snake_case names).
    pub dropped: BTreeMap<String, u64>,
    /// Handler calls for a vector with no MSI behind them (a variant dispatching bits
    /// it did not take out of PIR, or a spurious vector).
    pub spurious_handler_calls: u64,
    /// MSIs in a root port's ordered stream (see [`PendingWhere::port`]).
    pub port: u64,
    /// MSIs in an IOMMU unit (pipeline or descriptor line).
    pub iommu: u64,
    /// MSIs in the fabric on their way to a local APIC.
    pub fabric: u64,
    /// Interrupts held at level-triggered IOAPIC pins (see
    /// [`PendingWhere::ioapic_level`]).
    pub ioapic_level: u64,
    /// MSIs riding on another MSI (a VMD child MSI merged into VMD's outstanding
    /// MSI), keyed by the id of the MSI they ride on; they land where it lands.
    companions: BTreeMap<u64, TokenBag>,
    companion_count: u64,
}

impl Ledger {
    /// An empty ledger for `cpus` CPUs.
    pub fn new(cpus: usize) -> Self {
        Ledger {
            cpus: (0..cpus).map(|_| CpuSlots::new()).collect(),
            generated: 0,
            handled: 0,
            merged: 0,
            dropped: BTreeMap::new(),
            spurious_handler_calls: 0,
            port: 0,
            iommu: 0,
            fabric: 0,
            ioapic_level: 0,
            companions: BTreeMap::new(),
            companion_count: 0,
        }
    }

    /// `msi` rides on `lead` from now on: it merged into it (VMD merging a child MSI
    /// into its outstanding MSI), and ends wherever `lead` ends.
    pub fn ride_on(&mut self, lead: MsiToken, msi: MsiToken) {
        self.companions.entry(lead.id).or_default().push(msi);
        self.companion_count += 1;
        self.merged += 1;
    }

    /// The MSIs riding on `lead`, if any (most MSIs carry none).
    fn take_companions(&mut self, lead: MsiToken) -> Option<TokenBag> {
        let riders = self.companions.remove(&lead.id)?;
        self.companion_count -= riders.len();
        Some(riders)
    }

    /// `msi`, and any MSI riding on it, joins the bag `place` picks at (`cpu`, `v`).
    fn arrive(
        &mut self,
        cpu: usize,
        v: Vector,
        msi: MsiToken,
        place: fn(&mut Slot) -> &mut TokenBag,
    ) {
        let riders = self.take_companions(msi);
        let bag = place(self.cpus[cpu].get_mut(v));
        bag.push(msi);
        if let Some(riders) = riders {
            bag.absorb(riders);
        }
    }

    /// How many MSIs `msi` stands for: itself and those riding on it, which leave the
    /// companion table with it.
    fn with_riders(&mut self, msi: MsiToken) -> u64 {
        1 + self.take_companions(msi).map_or(0, |c| c.len())
    }

    /// Counts `msi` (and any MSI riding on it) dropped for `reason`.
    pub fn drop_msi(&mut self, msi: MsiToken, reason: &str) {
        let n = self.with_riders(msi);
        *self.dropped.entry(reason.to_string()).or_insert(0) += n;
    }

    /// `msi` (and its riders) is served without an interrupt of its own: a level
    /// device's event that the driver's acknowledgement of the device covers. It
    /// counts as handled and merged.
    pub fn served_without_interrupt(&mut self, msi: MsiToken) {
        let n = self.with_riders(msi);
        self.handled += n;
        self.merged += n;
    }

    /// Every MSI of `bag` is served as [`Ledger::served_without_interrupt`] serves one.
    pub fn bag_served_without_interrupt(&mut self, bag: TokenBag) {
        for &t in bag.exact() {
            self.served_without_interrupt(t);
        }
        let in_spans = bag.in_spans();
        self.handled += in_spans;
        self.merged += in_spans;
    }

    /// `msi` joins the interrupt of `v` pending in service at `cpu` (an edge the
    /// chip did not deliver while the kernel already holds that interrupt as
    /// IRQ_PENDING, to be replayed): it is handled with it. Counts as merged.
    pub fn coalesced_into_pending(&mut self, cpu: usize, v: Vector, msi: MsiToken) {
        self.merged += 1;
        self.arrive(cpu, v, msi, |s| &mut s.in_service);
    }

    /// Vector `v`'s MSIs harvested or in service at `cpu` reach a vector with no
    /// interrupt behind it any more: each is dropped for `reason`. Returns how many.
    pub fn drop_served(&mut self, cpu: usize, v: Vector, reason: &str) -> u64 {
        let slot = self.cpus[cpu].get_mut(v);
        let mut bag = slot.harvested.take();
        bag.move_from(&mut slot.in_service);
        let before = self.dropped_total();
        *self.dropped.entry(reason.to_string()).or_insert(0) += bag.in_spans();
        for &t in bag.exact() {
            self.drop_msi(t, reason);
        }
        self.dropped_total() - before
    }

    /// Dropped MSIs, all reasons together.
    pub fn dropped_total(&self) -> u64 {
        self.dropped.values().sum()
    }

    /// The IOMMU set `PIR[v]` of `cpu` for `msi`.
    pub fn posted(&mut self, cpu: usize, v: Vector, msi: MsiToken, merged: bool) {
        if merged {
            self.merged += 1;
        }
        self.arrive(cpu, v, msi, |s| &mut s.in_pir);
    }

    /// The LAPIC of `cpu` set `IRR[v]` for `msi`.
    pub fn accepted_in_irr(&mut self, cpu: usize, v: Vector, msi: MsiToken, merged: bool) {
        if merged {
            self.merged += 1;
        }
        self.arrive(cpu, v, msi, |s| &mut s.in_irr);
    }

    /// A locked exchange on PIR word `word` of `cpu` returned `bits`: every MSI behind
    /// those bits has left PIR.
    pub fn harvested_word(&mut self, cpu: usize, word: usize, bits: u64) {
        let mut b = bits;
        while b != 0 {
            let v = Vector((word as u32 * 64 + b.trailing_zeros()) as u8);
            b &= b - 1;
            let slot = self.cpus[cpu].get_mut(v);
            slot.harvested.move_from(&mut slot.in_pir);
        }
    }

    /// The LAPIC moved vector `v` from IRR to ISR.
    pub fn acknowledged(&mut self, cpu: usize, v: Vector) {
        let slot = self.cpus[cpu].get_mut(v);
        slot.in_service.move_from(&mut slot.in_irr);
    }

    /// Vector `v`'s handler starts on `cpu`; fills `out` with the MSIs it serves
    /// (empty for a spurious call).
    pub fn handler_started(&mut self, cpu: usize, v: Vector, out: &mut Served) {
        out.clear();
        let slot = self.cpus[cpu].get_mut(v);
        out.append(&mut slot.harvested);
        out.append(&mut slot.in_service);
        let n = out.count();
        if n == 0 {
            self.spurious_handler_calls += 1;
        }
        self.handled += n;
    }

    /// MSIs pending at CPU `cpu` (in PIR, harvested, in IRR or in service), by vector,
    /// only vectors with some.
    pub fn pending_by_vector(&self, cpu: usize) -> Vec<(Vector, u64)> {
        let c = &self.cpus[cpu];
        (0..=255u8)
            .filter_map(|v| {
                let idx = c.slot_of[v as usize];
                if idx == NO_SLOT {
                    return None;
                }
                let s = &c.slots[idx as usize];
                let n = s.in_pir.len() + s.harvested.len() + s.in_irr.len() + s.in_service.len();
                (n > 0).then_some((Vector(v), n))
            })
            .collect()
    }

    /// MSIs neither handled nor dropped, by where they are.
    pub fn pending(&self) -> PendingWhere {
        let mut p = PendingWhere {
            port: self.port,
            iommu: self.iommu,
            vmd: self.companion_count,
            fabric: self.fabric,
            ioapic_level: self.ioapic_level,
            ..PendingWhere::default()
        };
        for c in &self.cpus {
            for s in &c.slots {
                p.pir += s.in_pir.len();
                p.harvested += s.harvested.len();
                p.irr += s.in_irr.len();
                p.in_service += s.in_service.len();
            }
        }
        p
    }

    /// The earliest raise time among the MSIs waiting at a CPU (in PIR, harvested, in
    /// IRR or in service); `None` when no MSI waits there. MSIs in a port, an IOMMU or
    /// the fabric are only counted, not timed, and are not looked at.
    pub fn oldest_at_cpus(&self) -> Option<SimTime> {
        self.cpus
            .iter()
            .flat_map(|c| &c.slots)
            .flat_map(|s| [&s.in_pir, &s.harvested, &s.in_irr, &s.in_service])
            .filter_map(TokenBag::oldest)
            .min()
    }

    /// generated == handled + pending + dropped. False means a simulator bug.
    pub fn is_balanced(&self) -> bool {
        self.generated == self.handled + self.pending().total() + self.dropped_total()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tok(id: u64, raised: u64) -> MsiToken {
        MsiToken {
            id,
            raised: SimTime(raised),
        }
    }

    #[test]
    fn merged_msis_are_each_handled_once() {
        let mut l = Ledger::new(1);
        l.generated = 2;
        l.posted(0, Vector(0x21), tok(0, 10), false);
        l.posted(0, Vector(0x21), tok(1, 20), true);
        assert!(l.is_balanced());
        l.harvested_word(0, 0, 1 << 0x21);
        let mut served = Served::default();
        l.handler_started(0, Vector(0x21), &mut served);
        assert_eq!(served.exact, vec![tok(0, 10), tok(1, 20)]);
        assert_eq!((l.handled, l.merged), (2, 1));
        assert!(l.is_balanced());
        l.handler_started(0, Vector(0x21), &mut served);
        assert_eq!(served.count(), 0);
        assert_eq!(l.spurious_handler_calls, 1);
    }

    #[test]
    fn the_oldest_msi_at_a_cpu_is_found_in_any_place_and_leaves_with_it() {
        let mut l = Ledger::new(2);
        assert_eq!(l.oldest_at_cpus(), None);
        l.posted(1, Vector(0x40), tok(0, 900), false);
        l.accepted_in_irr(0, Vector(0x21), tok(1, 400), false);
        l.accepted_in_irr(0, Vector(0x22), tok(2, 700), false);
        assert_eq!(l.oldest_at_cpus(), Some(SimTime(400)));
        // Acknowledged into ISR, it still waits for its handler.
        l.acknowledged(0, Vector(0x21));
        assert_eq!(l.oldest_at_cpus(), Some(SimTime(400)));
        let mut served = Served::default();
        l.handler_started(0, Vector(0x21), &mut served);
        assert_eq!(l.oldest_at_cpus(), Some(SimTime(700)));
        l.acknowledged(0, Vector(0x22));
        l.handler_started(0, Vector(0x22), &mut served);
        // Only CPU 1's posted MSI is left; taken out of PIR, it still waits.
        assert_eq!(l.oldest_at_cpus(), Some(SimTime(900)));
        l.harvested_word(1, 1, 1 << (0x40 - 64));
        assert_eq!(l.oldest_at_cpus(), Some(SimTime(900)));
        l.handler_started(1, Vector(0x40), &mut served);
        assert_eq!(l.oldest_at_cpus(), None);
    }

    #[test]
    fn an_msi_in_no_place_unbalances_the_ledger() {
        let mut l = Ledger::new(1);
        assert!(l.is_balanced());
        l.generated = 3;
        l.port = 1;
        l.accepted_in_irr(0, Vector(0x30), tok(0, 1), false);
        // Two MSIs are somewhere; the third was raised but is in no place.
        assert!(
            !l.is_balanced(),
            "an MSI that is in no place must unbalance"
        );
        l.fabric = 1;
        assert!(l.is_balanced());
        l.drop_msi(tok(7, 9), "irte_not_present");
        assert!(
            !l.is_balanced(),
            "a drop of an MSI never raised must unbalance"
        );
    }

    #[test]
    fn every_place_is_counted_in_its_own_field() {
        let mut l = Ledger::new(2);
        let v = Vector(0x41);
        // Three in IRR on CPU 0, one acknowledged into service there.
        for i in 0..3 {
            l.accepted_in_irr(0, v, tok(i, i), i > 0);
        }
        l.acknowledged(0, v);
        for i in 3..5 {
            l.accepted_in_irr(0, v, tok(i, i), i > 3);
        }
        // Four posted on CPU 1, two of them harvested.
        let w = Vector(0x42);
        l.posted(1, w, tok(10, 1), false);
        l.harvested_word(1, 1, 1 << (0x42 - 64));
        l.posted(1, w, tok(11, 2), false);
        l.posted(1, w, tok(12, 3), true);
        (l.port, l.iommu, l.fabric) = (5, 6, 7);
        let p = l.pending();
        assert_eq!(
            (
                p.port,
                p.iommu,
                p.fabric,
                p.pir,
                p.harvested,
                p.irr,
                p.in_service
            ),
            (5, 6, 7, 2, 1, 2, 3)
        );
        assert_eq!(p.total(), 5 + 6 + 7 + 2 + 1 + 2 + 3);
        assert_eq!(
            l.pending_by_vector(0),
            vec![(v, 5)],
            "IRR and in service of one vector together"
        );
        assert_eq!(l.pending_by_vector(1), vec![(w, 3)]);
    }

    #[test]
    fn a_merge_into_irr_counts_and_a_first_handler_call_is_not_spurious() {
        let mut l = Ledger::new(1);
        let v = Vector(0x30);
        l.generated = 2;
        l.accepted_in_irr(0, v, tok(0, 1), false);
        l.accepted_in_irr(0, v, tok(1, 2), true);
        assert_eq!(l.merged, 1);
        l.acknowledged(0, v);
        let mut served = Served::default();
        l.handler_started(0, v, &mut served);
        assert_eq!((served.count(), l.spurious_handler_calls), (2, 0));
        // The vector's slot still exists, with nothing in it: not listed as pending.
        assert!(l.pending_by_vector(0).is_empty());
        l.handler_started(0, v, &mut served);
        assert_eq!(l.spurious_handler_calls, 1);
        assert!(l.is_balanced());
    }

    #[test]
    fn an_edge_joining_a_pending_interrupt_is_served_with_it() {
        let mut l = Ledger::new(1);
        let v = Vector(0x22);
        l.generated = 3;
        l.accepted_in_irr(0, v, tok(0, 1), false);
        l.acknowledged(0, v);
        l.ride_on(tok(1, 2), tok(2, 3));
        let merged = l.merged;
        l.coalesced_into_pending(0, v, tok(1, 2));
        assert_eq!(l.merged, merged + 1);
        assert_eq!(l.pending().in_service, 3, "the edge and its rider join");
        assert!(l.is_balanced());
        let mut served = Served::default();
        l.handler_started(0, v, &mut served);
        assert_eq!(served.count(), 3);
        assert!(l.is_balanced());
    }

    #[test]
    fn level_pin_riders_are_reported_in_their_place() {
        let mut l = Ledger::new(1);
        l.ioapic_level = 5;
        assert_eq!(l.pending().ioapic_level, 5);
        assert_eq!(l.pending().total(), 5);
    }

    #[test]
    fn the_total_adds_every_place_once() {
        // Powers of two: any place left out, counted twice or subtracted shows.
        let p = PendingWhere {
            port: 1,
            iommu: 2,
            vmd: 4,
            fabric: 8,
            pir: 16,
            harvested: 32,
            irr: 64,
            in_service: 128,
            ioapic_level: 256,
        };
        assert_eq!(p.total(), 511);
    }

    #[test]
    fn an_msi_served_without_an_interrupt_is_handled_and_merged_with_its_riders() {
        let mut l = Ledger::new(1);
        l.generated = 3;
        l.ioapic_level = 3;
        l.ride_on(tok(0, 1), tok(1, 2));
        l.ride_on(tok(0, 1), tok(2, 3));
        // The riders wait with their lead (in `vmd` until it lands); the level pin
        // holds the lead itself.
        l.ioapic_level -= 2;
        assert!(l.is_balanced());
        l.ioapic_level -= 1;
        let merged_riding = l.merged;
        assert_eq!(merged_riding, 2, "riding on a lead is a merge");
        l.served_without_interrupt(tok(0, 1));
        assert_eq!((l.handled, l.merged - merged_riding), (3, 3));
        assert!(l.is_balanced(), "{:?}", l.pending());
        // A second lead with no riders counts once.
        l.generated += 1;
        l.served_without_interrupt(tok(5, 9));
        assert_eq!((l.handled, l.merged - merged_riding), (4, 4));
        assert!(l.is_balanced());
    }

    #[test]
    fn a_bag_served_without_an_interrupt_counts_its_exact_tokens_and_its_spans() {
        let mut l = Ledger::new(1);
        let mut bag = TokenBag::default();
        let n: u64 = 200;
        for i in 0..n {
            bag.push(tok(i, i * 10));
        }
        assert!(bag.in_spans() > 0 && !bag.exact().is_empty(), "both kinds");
        l.generated = n;
        l.bag_served_without_interrupt(bag);
        assert_eq!((l.handled, l.merged), (n, n));
        assert!(l.is_balanced());
    }

    #[test]
    fn msis_served_at_a_freed_vector_are_dropped_with_their_riders() {
        let mut l = Ledger::new(1);
        let v = Vector(0x21);
        l.generated = 4;
        l.fabric = 1;
        l.ride_on(tok(0, 1), tok(1, 2));
        l.fabric -= 1;
        l.posted(0, v, tok(0, 1), false);
        l.posted(0, v, tok(2, 3), true);
        l.harvested_word(0, 0, v.bit());
        l.posted(0, v, tok(3, 4), false);
        assert!(l.is_balanced());
        // Harvested: the two posts and the rider; the third post is still in PIR.
        assert_eq!(l.drop_served(0, v, "vector_freed"), 3);
        assert_eq!(l.dropped["vector_freed"], 3);
        assert_eq!(l.pending().pir, 1);
        assert!(l.is_balanced());
    }

    #[test]
    fn a_freed_vector_drops_its_spans_too_and_returns_only_its_own_drops() {
        let mut l = Ledger::new(1);
        let v = Vector(0x21);
        let n: u64 = 200;
        l.generated = n + 1;
        l.fabric = 1;
        l.drop_msi(tok(999, 1), "irte_not_present");
        l.fabric = 0;
        for i in 0..n {
            l.posted(0, v, tok(i, i * 10), i > 0);
        }
        l.harvested_word(0, 0, v.bit());
        assert_eq!(
            l.drop_served(0, v, "vector_freed"),
            n,
            "an earlier drop is not counted"
        );
        assert_eq!(l.dropped["vector_freed"], n, "exact tokens and spans alike");
        assert!(l.is_balanced());
    }

    #[test]
    fn riders_land_with_their_lead_or_drop_with_it() {
        let mut l = Ledger::new(1);
        l.generated = 4;
        l.fabric = 2;
        l.ride_on(tok(0, 1), tok(1, 2));
        l.ride_on(tok(0, 1), tok(2, 3));
        assert_eq!(l.pending().vmd, 2);
        assert!(l.is_balanced());
        l.fabric -= 1;
        l.accepted_in_irr(0, Vector(0x30), tok(0, 1), false);
        assert_eq!((l.pending().vmd, l.pending().irr), (0, 3));
        l.ride_on(tok(3, 4), tok(9, 5));
        l.generated += 1;
        l.fabric -= 1;
        l.drop_msi(tok(3, 4), "irte_not_present");
        assert_eq!(l.dropped["irte_not_present"], 2);
        assert!(l.is_balanced());
        assert_eq!(l.merged, 3);
    }

    #[test]
    fn posts_after_harvest_wait_for_the_next_harvest() {
        let mut l = Ledger::new(1);
        l.posted(0, Vector(0x40), tok(0, 1), false);
        l.harvested_word(0, 1, 1 << 0);
        l.posted(0, Vector(0x40), tok(1, 2), false);
        let mut served = Served::default();
        l.handler_started(0, Vector(0x40), &mut served);
        assert_eq!(served.exact, vec![tok(0, 1)]);
        assert_eq!(l.pending().pir, 1);
    }

    #[test]
    fn a_starved_irr_bit_keeps_a_million_merges_in_bounded_memory() {
        let mut l = Ledger::new(1);
        let v = Vector(0x30);
        let n = 1_000_000u64;
        for i in 0..n {
            l.generated += 1;
            l.accepted_in_irr(0, v, tok(i, i * 33_000), i > 0);
        }
        assert_eq!(l.pending().irr, n);
        assert!(l.is_balanced());
        let slot = l.cpus[0].get_mut(v);
        assert_eq!(
            slot.in_irr.exact().len(),
            super::super::token_bag::EXACT_TOKENS
        );
        assert!(slot.in_irr.spans().len() < 2000);
        l.acknowledged(0, v);
        let mut served = Served::default();
        l.handler_started(0, v, &mut served);
        assert_eq!((served.count(), l.handled, l.pending().total()), (n, n, 0));
        assert_eq!(served.in_spans(), n - 64);
        assert!(l.is_balanced());
    }
}
