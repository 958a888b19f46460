//! x2APIC conformance, driven through apic-sim's public API the way system software
//! and kvm-unit-tests' `x86/apic.c` drive an x2APIC: RDMSR/WRMSR of the x2APIC MSRs,
//! IPIs through ICR and SELF_IPI, interrupts taken by INTA and retired by EOI.
//!
//! Each test states the rule it checks; the rules come from the Intel SDM Vol. 3A
//! chapter 11 (section numbers as in the 2023+ editions): 11.5.2-11.5.3 (illegal
//! vectors and ESR), 11.6.1 (ICR, delivery modes, Table 11-3 valid combinations),
//! 11.8.3 (TPR/PPR and priority classes), 11.8.4 (acceptance), 11.8.5 (EOI),
//! 11.12.1 (x2APIC MSR access: #GP on read-only registers and reserved bits),
//! 11.12.9 (ICR in x2APIC mode), 11.12.10 (logical destination, cluster mode),
//! 11.12.11 (SELF IPI).

use irqsim::apic_sim::lapic::{ESR_RECEIVE_ILLEGAL_VECTOR, ESR_SEND_ILLEGAL_VECTOR};
use irqsim::apic_sim::msr::{
    MSR_EOI, MSR_ESR, MSR_ICR, MSR_ID, MSR_IRR0, MSR_ISR0, MSR_LDR, MSR_LVT_ERROR, MSR_PPR,
    MSR_SELF_IPI, MSR_TPR,
};
use irqsim::apic_sim::{
    logical_id, AcceptOutcome, ApicEffect, ApicTopology, DeliveryMode, DeliveryOutcome, DestMode,
    Icr, IgnoreReason, IpiDropReason, LocalApic, MsrRead, Shorthand, TriggerMode, BROADCAST_DEST,
};
use irqsim::sim_core::{ApicId, SimTime, Vector};
use irqsim::topology::{Topology, TopologySpec};
use proptest::prelude::*;

const T0: SimTime = SimTime(0);

/// A set of x2APICs on one interrupt bus, with CPUs that take every deliverable
/// interrupt (interrupts enabled) and run a handler that writes EOI, recording the
/// vectors in the order they were handled.
struct Bus {
    topo: ApicTopology,
    apics: Vec<LocalApic>,
    handled: Vec<Vec<Vector>>,
}

impl Bus {
    fn new(ids: impl IntoIterator<Item = u32>) -> Bus {
        let ids: Vec<ApicId> = ids.into_iter().map(ApicId).collect();
        Bus {
            topo: ApicTopology::new(ids.iter().copied()).unwrap(),
            apics: ids.iter().map(|&id| LocalApic::new(id)).collect(),
            handled: vec![Vec::new(); ids.len()],
        }
    }
    fn idx(&self, id: u32) -> usize {
        self.apics
            .iter()
            .position(|a| a.id() == ApicId(id))
            .unwrap()
    }
    fn apic(&mut self, id: u32) -> &mut LocalApic {
        let i = self.idx(id);
        &mut self.apics[i]
    }
    fn rd(&mut self, id: u32, msr: u32) -> u64 {
        self.apic(id).rdmsr(T0, msr).value().expect("readable")
    }

    /// WRMSR(ICR) on `from`; every IPI it sends is delivered. Returns the effects and
    /// the APIC IDs that received the IPI.
    fn icr(&mut self, from: u32, icr: Icr) -> (Vec<ApicEffect>, Vec<u32>) {
        let fx = self.apic(from).wrmsr(T0, MSR_ICR, icr.0).to_vec();
        let mut got = Vec::new();
        for e in &fx {
            if let ApicEffect::SendIpi(msg) = e {
                for id in self.topo.resolve(msg) {
                    let _ = self.apic(id.0).receive_ipi(msg);
                    got.push(id.0);
                }
            }
        }
        (fx, got)
    }

    /// Every CPU takes and handles what its APIC presents, handler = EOI.
    fn run_handlers(&mut self) {
        for (i, a) in self.apics.iter_mut().enumerate() {
            while let Some(v) = a.acknowledge() {
                self.handled[i].push(v);
                let _ = a.wrmsr(T0, MSR_EOI, 0);
            }
        }
    }
    fn handled(&self, id: u32) -> &[Vector] {
        &self.handled[self.idx(id)]
    }
}

fn fixed(vector: u8, dest_mode: DestMode, shorthand: Shorthand, dest: u32) -> Icr {
    Icr::encode(
        Vector(vector),
        DeliveryMode::Fixed,
        dest_mode,
        TriggerMode::Edge,
        shorthand,
        dest,
    )
}

/// The 256-bit IRR or ISR as a RDMSR of its eight 32-bit registers returns it.
fn vector_bit(a: &LocalApic, base: u32, v: u8) -> bool {
    let word = a.rdmsr(T0, base + (v / 32) as u32).value().unwrap();
    word & (1 << (v % 32)) != 0
}

// ---- self IPI ----

/// 11.6.1 / 11.12.11: a fixed IPI with the "self" shorthand reaches only the sender,
/// once; so does a physical IPI to one's own ID; SELF_IPI puts the vector in IRR
/// before the WRMSR completes.
#[test]
fn self_ipi_reaches_only_the_sender_once() {
    let mut bus = Bus::new([0, 1, 2]);
    let (_, got) = bus.icr(1, fixed(0xf1, DestMode::Physical, Shorthand::SelfOnly, 0));
    assert_eq!(got, [1]);
    bus.run_handlers();
    assert_eq!(bus.handled(1), [Vector(0xf1)]);
    assert!(bus.handled(0).is_empty() && bus.handled(2).is_empty());

    let (_, got) = bus.icr(2, fixed(0xf2, DestMode::Physical, Shorthand::None, 2));
    assert_eq!(got, [2]);

    let fx = bus.apic(0).wrmsr(T0, MSR_SELF_IPI, 0xf3).to_vec();
    assert_eq!(
        fx,
        [ApicEffect::SelfIpi {
            vector: Vector(0xf3),
            outcome: AcceptOutcome::Accepted
        }]
    );
    assert!(vector_bit(&bus.apics[0], MSR_IRR0, 0xf3));
    bus.run_handlers();
    assert_eq!(bus.handled(0), [Vector(0xf3)]);
    assert_eq!(bus.handled(2), [Vector(0xf2)]);
    for a in &bus.apics {
        assert!(a.isr().is_empty() && a.irr().is_empty());
    }
}

/// Table 11-3: only fixed IPIs may use the "self" and "all including self"
/// shorthands; NMI, INIT and SIPI to self are not sent.
#[test]
fn self_shorthand_with_other_delivery_modes_is_not_sent() {
    let mut bus = Bus::new([0, 1]);
    for mode in [DeliveryMode::Nmi, DeliveryMode::Init, DeliveryMode::StartUp] {
        for sh in [Shorthand::SelfOnly, Shorthand::AllIncludingSelf] {
            let icr = Icr::encode(
                Vector(0x10),
                mode,
                DestMode::Physical,
                TriggerMode::Edge,
                sh,
                0,
            );
            let (fx, got) = bus.icr(0, icr);
            assert!(got.is_empty(), "{mode:?} {sh:?}");
            assert!(fx.iter().any(|e| matches!(
                e,
                ApicEffect::IpiNotSent {
                    reason: IpiDropReason::InvalidCombination,
                    ..
                }
            )));
        }
    }
}

// ---- TPR, PPR, priority classes ----

/// 11.8.3-11.8.4: a pending vector is presented only if its class (v >> 4) is above
/// PPR[7:4]; PPR = TPR when TPR[7:4] >= ISRV[7:4], else ISRV[7:4] << 4.
#[test]
fn tpr_masks_by_priority_class() {
    for tpr_class in 0u8..16 {
        for v in (0x20u8..=0xff).step_by(7) {
            let mut a = LocalApic::new(ApicId(0));
            assert!(a
                .wrmsr(T0, MSR_TPR, (tpr_class << 4 | 0x3) as u64)
                .is_empty());
            assert_eq!(
                a.rdmsr(T0, MSR_PPR).value(),
                Some((tpr_class << 4 | 3) as u64)
            );
            let _ = a.wrmsr(T0, MSR_SELF_IPI, v as u64);
            let want = (v >> 4) > tpr_class;
            assert_eq!(
                a.deliverable().is_some(),
                want,
                "TPR class {tpr_class} vector {v:#x}"
            );
            // Lowering TPR releases it.
            let _ = a.wrmsr(T0, MSR_TPR, 0);
            assert_eq!(a.deliverable(), Some(Vector(v)));
        }
    }
}

#[test]
fn ppr_follows_the_in_service_class() {
    let mut a = LocalApic::new(ApicId(0));
    let _ = a.wrmsr(T0, MSR_SELF_IPI, 0x84);
    assert_eq!(a.acknowledge(), Some(Vector(0x84)));
    let ppr = |a: &LocalApic| a.rdmsr(T0, MSR_PPR).value().unwrap();
    assert_eq!(ppr(&a), 0x80, "ISRV class above TPR: PPR = ISRV[7:4] << 4");
    let _ = a.wrmsr(T0, MSR_TPR, 0x35);
    assert_eq!(ppr(&a), 0x80);
    let _ = a.wrmsr(T0, MSR_TPR, 0x95);
    assert_eq!(ppr(&a), 0x95, "TPR class above ISRV: PPR = TPR");
    // Same class as in service: held; higher class: presented (nesting).
    let _ = a.wrmsr(T0, MSR_TPR, 0);
    let _ = a.wrmsr(T0, MSR_SELF_IPI, 0x8f);
    assert_eq!(a.deliverable(), None, "0x8f is in the in-service class");
    let _ = a.wrmsr(T0, MSR_SELF_IPI, 0x90);
    assert_eq!(a.deliverable(), Some(Vector(0x90)));
    // PPR is read-only.
    assert!(a.wrmsr(T0, MSR_PPR, 0).faulted());
}

// ---- EOI ordering ----

/// 11.8.5: an EOI retires the highest-priority in-service vector; nested
/// interrupts retire innermost first; a pending vector of a class that was blocked
/// by an in-service one is presented after that one's EOI.
#[test]
fn eoi_retires_in_service_vectors_highest_first() {
    let mut a = LocalApic::new(ApicId(0));
    let mut in_service = Vec::new();
    for v in [0x31u8, 0x52, 0x73, 0xe4] {
        let _ = a.wrmsr(T0, MSR_SELF_IPI, v as u64);
        in_service.push(a.acknowledge().unwrap());
    }
    assert_eq!(in_service, [0x31, 0x52, 0x73, 0xe4].map(Vector));
    // A same-class vector for every level waits in IRR.
    for v in [0x3au8, 0x5a, 0x7a] {
        let _ = a.wrmsr(T0, MSR_SELF_IPI, v as u64);
    }
    assert_eq!(a.deliverable(), None);
    let mut retired = Vec::new();
    for _ in 0..4 {
        let top = a.isr().highest().unwrap();
        assert!(vector_bit(&a, MSR_ISR0, top.0));
        let fx = a.wrmsr(T0, MSR_EOI, 0).to_vec();
        let [ApicEffect::Eoi(out)] = fx[..] else {
            panic!("{fx:?}")
        };
        retired.push(out.completed.unwrap());
        assert_eq!(out.broadcast, None, "edge vectors are not broadcast");
        if retired.len() == 1 {
            // 0x73 still in service: 0x7a (same class) still held.
            assert_eq!(a.deliverable(), None);
        }
    }
    assert_eq!(retired, [0xe4, 0x73, 0x52, 0x31].map(Vector));
    assert_eq!(a.deliverable(), Some(Vector(0x7a)));
    // An EOI with nothing in service completes nothing.
    let mut idle = LocalApic::new(ApicId(1));
    let fx = idle.wrmsr(T0, MSR_EOI, 0).to_vec();
    assert!(matches!(fx[..], [ApicEffect::Eoi(o)] if o.completed.is_none()));
    // x2APIC: a non-zero EOI write raises #GP.
    assert!(idle.wrmsr(T0, MSR_EOI, 1).faulted());
}

/// 11.8.5: the EOI of a level-triggered vector (TMR set) is broadcast to IOAPICs.
#[test]
fn level_eoi_is_broadcast() {
    let mut a = LocalApic::new(ApicId(0));
    let _ = a.receive(DeliveryMode::Fixed, Vector(0x61), TriggerMode::Level);
    assert_eq!(a.acknowledge(), Some(Vector(0x61)));
    let fx = a.wrmsr(T0, MSR_EOI, 0).to_vec();
    assert!(matches!(fx[..], [ApicEffect::Eoi(o)] if o.broadcast == Some(Vector(0x61))));
}

// ---- logical cluster mode ----

/// 11.12.10: LDR = cluster (ID[19:4]) in bits 31:16 and bit ID[3:0] in bits 15:0; a
/// logical IPI reaches exactly the APICs of the destination's cluster whose bit is
/// set. As kvm-unit-tests does, every single target and extra bits for absent
/// members are tried.
#[test]
fn logical_cluster_ipis_reach_exactly_the_intended_cpus() {
    // Cluster 0 holds IDs 0-3, cluster 1 holds 0x10 and 0x12, cluster 2 holds 0x2f.
    let ids = [0u32, 1, 2, 3, 0x10, 0x12, 0x2f];
    let mut bus = Bus::new(ids);
    for &target in &ids {
        let ldr = bus.rd(target, MSR_LDR) as u32;
        assert_eq!(ldr, ((target >> 4) << 16) | 1 << (target & 0xf));
        let cluster = ldr & 0xffff_0000;
        for extra in 0u32..0x10000 {
            if extra & ldr & 0xffff != 0 || extra.count_ones() > 2 {
                continue;
            }
            let dest = ldr | extra;
            let (_, mut got) = bus.icr(0, fixed(0xf1, DestMode::Logical, Shorthand::None, dest));
            got.sort_unstable();
            let want: Vec<u32> = ids
                .iter()
                .copied()
                .filter(|&id| (id >> 4) << 16 == cluster && dest & (1 << (id & 0xf)) != 0)
                .collect();
            assert_eq!(got, want, "dest {dest:#010x}");
        }
    }
    bus.run_handlers();
}

/// The same through the topology firmware would build: one ICR write per cluster
/// of socket 1 reaches exactly socket 1.
#[test]
fn one_write_per_cluster_reaches_a_whole_socket() {
    let topo = Topology::new(TopologySpec::new(2, 20, 2)).unwrap();
    let mut bus = Bus::new(topo.cpus().iter().map(|c| c.apic_id.0));
    let mut per_cluster: std::collections::BTreeMap<u32, u32> = Default::default();
    for c in topo.socket_cpus(1) {
        let id = topo.apic_id(c);
        *per_cluster.entry(id.0 >> 4).or_default() |= logical_id(id);
    }
    assert_eq!(per_cluster.len(), 3);
    let mut reached = Vec::new();
    for (_, dest) in per_cluster {
        reached.extend(
            bus.icr(0, fixed(0xfc, DestMode::Logical, Shorthand::None, dest))
                .1,
        );
    }
    reached.sort_unstable();
    let mut socket1: Vec<u32> = topo.socket_cpus(1).map(|c| topo.apic_id(c).0).collect();
    socket1.sort_unstable();
    assert_eq!(reached, socket1);
}

/// 11.12.9 / kvm-unit-tests physical_broadcast: destination 0xFFFFFFFF and the
/// "all including self" shorthand reach every APIC, sender included; "all
/// excluding self" reaches the others.
#[test]
fn broadcast_and_all_shorthands() {
    let mut bus = Bus::new([0, 1, 0x20, 0x41]);
    for icr in [
        fixed(0xcf, DestMode::Physical, Shorthand::None, BROADCAST_DEST),
        fixed(0xcf, DestMode::Logical, Shorthand::None, BROADCAST_DEST),
        fixed(0xcf, DestMode::Physical, Shorthand::AllIncludingSelf, 0),
    ] {
        let (_, got) = bus.icr(1, icr);
        assert_eq!(got, [0, 1, 0x20, 0x41]);
        bus.run_handlers();
    }
    let (_, got) = bus.icr(
        1,
        fixed(0xcf, DestMode::Physical, Shorthand::AllExcludingSelf, 0),
    );
    assert_eq!(got, [0, 0x20, 0x41]);
    bus.run_handlers();
    assert_eq!(bus.handled(1).len(), 3);
    assert_eq!(bus.handled(0).len(), 4);
}

// ---- illegal vectors ----

/// 11.5.2-11.5.3: vectors 0-15 are illegal. A fixed IPI carrying one is not sent and
/// sets ESR bit 5 (send illegal vector); a message carrying one is not accepted and
/// sets ESR bit 6 (receive illegal vector). ESR reads show errors latched by the
/// last ESR write. Vectors 16-31 are reserved but accepted; NMI ignores the vector.
#[test]
fn illegal_vectors_set_esr_and_deliver_nothing() {
    let mut bus = Bus::new([0, 1]);
    for v in 0u8..16 {
        let (fx, got) = bus.icr(0, fixed(v, DestMode::Physical, Shorthand::None, 1));
        assert!(got.is_empty(), "vector {v}");
        assert!(fx.iter().any(|e| matches!(
            e,
            ApicEffect::IpiNotSent {
                reason: IpiDropReason::IllegalVector,
                ..
            }
        )));
    }
    let _ = bus.apic(0).wrmsr(T0, MSR_ESR, 0);
    assert_eq!(bus.rd(0, MSR_ESR), ESR_SEND_ILLEGAL_VECTOR as u64);
    let _ = bus.apic(0).wrmsr(T0, MSR_ESR, 0);
    assert_eq!(bus.rd(0, MSR_ESR), 0, "the next write latches nothing new");

    let a = bus.apic(1);
    assert_eq!(
        a.receive(DeliveryMode::Fixed, Vector(7), TriggerMode::Edge),
        DeliveryOutcome::Fixed(AcceptOutcome::Rejected(
            irqsim::apic_sim::RejectReason::IllegalVector
        ))
    );
    assert!(a.irr().is_empty());
    let _ = a.wrmsr(T0, MSR_ESR, 0);
    assert_eq!(bus.rd(1, MSR_ESR), ESR_RECEIVE_ILLEGAL_VECTOR as u64);

    // SELF_IPI with an illegal vector: send error, and the error LVT interrupt.
    let a = bus.apic(0);
    let _ = a.wrmsr(T0, MSR_LVT_ERROR, 0xfe);
    let _ = a.wrmsr(T0, MSR_SELF_IPI, 0x03);
    assert_eq!(a.deliverable(), Some(Vector(0xfe)));

    let (_, got) = bus.icr(0, fixed(0x10, DestMode::Physical, Shorthand::None, 1));
    assert_eq!(got, [1], "vector 16 is reserved, not illegal");
    let nmi = Icr::encode(
        Vector(0),
        DeliveryMode::Nmi,
        DestMode::Physical,
        TriggerMode::Edge,
        Shorthand::None,
        1,
    );
    let (_, got) = bus.icr(0, nmi);
    assert_eq!(got, [1]);
}

// ---- read-only registers ----

/// 11.12.1-11.12.2 / kvm-unit-tests "non-writeable x2apic id": in x2APIC mode the ID
/// and LDR are read-only; a WRMSR raises #GP and changes nothing.
#[test]
fn id_and_ldr_are_read_only() {
    let mut a = LocalApic::new(ApicId(0x53));
    let ldr = a.rdmsr(T0, MSR_LDR).value().unwrap();
    assert_eq!(ldr, 0x0005_0008);
    for (msr, value) in [(MSR_LDR, 0x0001_0001u64), (MSR_LDR, ldr), (MSR_ID, 0x54)] {
        assert!(a.wrmsr(T0, msr, value).faulted(), "{msr:#x}");
    }
    assert_eq!(a.rdmsr(T0, MSR_LDR), MsrRead::Value(ldr));
    assert_eq!(a.rdmsr(T0, MSR_ID), MsrRead::Value(0x53));
    // EOI and SELF_IPI are write-only.
    assert!(matches!(
        a.rdmsr(T0, MSR_EOI),
        MsrRead::GeneralProtection { .. }
    ));
    assert!(matches!(
        a.rdmsr(T0, MSR_SELF_IPI),
        MsrRead::GeneralProtection { .. }
    ));
}

// ---- delivery modes ----

/// 11.6.1: NMI is delivered regardless of the vector and leaves IRR alone; INIT resets
/// the APIC (ID kept) into wait-for-SIPI; SIPI is honoured only there; x2APIC ICRs
/// do not send lowest-priority IPIs.
#[test]
fn nmi_init_and_sipi() {
    let mut bus = Bus::new([0, 1]);
    let ipi = |mode, vector| {
        Icr::encode(
            Vector(vector),
            mode,
            DestMode::Physical,
            TriggerMode::Edge,
            Shorthand::None,
            1,
        )
    };
    let fx = bus
        .apic(0)
        .wrmsr(T0, MSR_ICR, ipi(DeliveryMode::Nmi, 0).0)
        .to_vec();
    let [ApicEffect::SendIpi(msg)] = fx[..] else {
        panic!("{fx:?}")
    };
    assert_eq!(bus.apic(1).receive_ipi(&msg), DeliveryOutcome::Nmi);
    assert!(bus.apic(1).irr().is_empty());

    let fx = bus
        .apic(0)
        .wrmsr(T0, MSR_ICR, ipi(DeliveryMode::StartUp, 0x9a).0)
        .to_vec();
    let [ApicEffect::SendIpi(sipi)] = fx[..] else {
        panic!("{fx:?}")
    };
    assert_eq!(
        bus.apic(1).receive_ipi(&sipi),
        DeliveryOutcome::Ignored(IgnoreReason::SipiNotWaiting)
    );
    let _ = bus.apic(1).wrmsr(T0, MSR_SELF_IPI, 0x40);
    let fx = bus
        .apic(0)
        .wrmsr(T0, MSR_ICR, ipi(DeliveryMode::Init, 0).0)
        .to_vec();
    let [ApicEffect::SendIpi(init)] = fx[..] else {
        panic!("{fx:?}")
    };
    assert_eq!(bus.apic(1).receive_ipi(&init), DeliveryOutcome::Init);
    let a = bus.apic(1);
    assert!(a.waiting_for_sipi() && a.irr().is_empty() && !a.software_enabled());
    assert_eq!(a.id(), ApicId(1));
    assert_eq!(
        a.receive_ipi(&sipi),
        DeliveryOutcome::StartUp {
            vector: Vector(0x9a)
        }
    );
    assert!(!a.waiting_for_sipi());

    let (fx, got) = bus.icr(0, ipi(DeliveryMode::LowestPriority, 0x40));
    assert!(got.is_empty());
    assert!(fx.iter().any(|e| matches!(
        e,
        ApicEffect::IpiNotSent {
            reason: IpiDropReason::LowestPriorityUnsupported,
            ..
        }
    )));
}

/// 11.12.9: ICR bits 13, 17:16 and 31:20 are reserved in x2APIC mode (#GP); the
/// delivery-status bit 12 is ignored on write.
#[test]
fn icr_reserved_bits_fault() {
    let mut a = LocalApic::new(ApicId(0));
    let base = fixed(0x40, DestMode::Physical, Shorthand::None, 1).0;
    for bit in [13u32, 16, 17, 20, 25, 31] {
        assert!(a.wrmsr(T0, MSR_ICR, base | 1 << bit).faulted(), "bit {bit}");
    }
    assert!(!a.wrmsr(T0, MSR_ICR, base | 1 << 12).faulted());
}

proptest! {
    /// Over random firmware topologies and random logical destinations, the APICs
    /// reached are exactly those of the destination's cluster with their bit set.
    #[test]
    fn cluster_resolution_matches_the_rule(
        sockets in 1u32..4,
        cores in 1u32..24,
        threads in 1u32..3,
        picks in proptest::collection::vec((0u32..8, any::<u16>()), 1..8),
    ) {
        let topo = Topology::new(TopologySpec::new(sockets, cores, threads)).unwrap();
        let ids: Vec<u32> = topo.cpus().iter().map(|c| c.apic_id.0).collect();
        let apics = ApicTopology::new(ids.iter().copied().map(ApicId)).unwrap();
        for (cluster, bitmap) in picks {
            let dest = cluster << 16 | bitmap as u32;
            let mut got = Vec::new();
            apics.resolve_dest_into(DestMode::Logical, dest, &mut got);
            let mut want: Vec<u32> = ids
                .iter()
                .copied()
                .filter(|&id| id >> 4 == cluster && bitmap & (1 << (id & 0xf)) != 0)
                .collect();
            want.sort_unstable();
            prop_assert_eq!(got.iter().map(|a| a.0).collect::<Vec<_>>(), want);
        }
    }
}
