//! Random access sequences against the PID line, checked after every step against a
//! trivial reference: the data as a plain `[u64; 8]`, and each core's MESI state kept
//! in a small array by rules written out independently of the crate.

use pid_model::{AccessKind, Agent, LineCosts, LineOp, Mesi, OpClass, OpValue, PiDesc, PidLine};
use proptest::prelude::*;
use sim_core::{Freq, Vector};

/// Three cores (two on socket 0, one on socket 1) and the IOMMU of socket 0.
const CORES: [Agent; 3] = [
    Agent::Core {
        cpu: sim_core::CpuId(0),
        socket: 0,
    },
    Agent::Core {
        cpu: sim_core::CpuId(1),
        socket: 0,
    },
    Agent::Core {
        cpu: sim_core::CpuId(2),
        socket: 1,
    },
];
const IOMMU: Agent = Agent::Iommu { socket: 0 };

#[derive(Clone, Debug)]
struct Step {
    agent: Agent,
    op: LineOp,
}

fn bit_strategy() -> impl Strategy<Value = u32> {
    prop_oneof![Just(256u32), Just(257u32), 0u32..512]
}

fn core_op() -> impl Strategy<Value = LineOp> {
    prop_oneof![
        3 => (0usize..8).prop_map(|word| LineOp::Load { word }),
        1 => (0usize..8, any::<u64>()).prop_map(|(word, value)| LineOp::Store { word, value }),
        2 => (0usize..8, prop_oneof![Just(0u64), any::<u64>()])
            .prop_map(|(word, value)| LineOp::Xchg { word, value }),
        1 => bit_strategy().prop_map(|bit| LineOp::LockedBitSet { bit }),
        1 => bit_strategy().prop_map(|bit| LineOp::LockedBitClear { bit }),
        1 => bit_strategy().prop_map(|bit| LineOp::LockedTestAndSet { bit }),
        1 => bit_strategy().prop_map(|bit| LineOp::LockedTestAndClear { bit }),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0usize..3, core_op()).prop_map(|(i, op)| Step { agent: CORES[i], op }),
        1 => (any::<u8>(), any::<bool>()).prop_map(|(v, urg)| Step {
            agent: IOMMU,
            op: LineOp::IommuPost { vector: Vector(v), urg },
        }),
    ]
}

/// Reference data semantics, written against the raw words.
fn ref_apply(w: &mut [u64; 8], op: LineOp) -> OpValue {
    let get = |w: &[u64; 8], b: u32| w[(b / 64) as usize] >> (b % 64) & 1 == 1;
    match op {
        LineOp::Load { word } => OpValue::Word(w[word]),
        LineOp::Store { word, value } => {
            w[word] = value;
            OpValue::None
        }
        LineOp::Xchg { word, value } => OpValue::Word(std::mem::replace(&mut w[word], value)),
        LineOp::LockedBitSet { bit } | LineOp::LockedTestAndSet { bit } => {
            let old = get(w, bit);
            w[(bit / 64) as usize] |= 1 << (bit % 64);
            OpValue::Bit(old)
        }
        LineOp::LockedBitClear { bit } | LineOp::LockedTestAndClear { bit } => {
            let old = get(w, bit);
            w[(bit / 64) as usize] &= !(1 << (bit % 64));
            OpValue::Bit(old)
        }
        LineOp::IommuPost { vector, urg } => {
            let v = u32::from(vector.0);
            let already = get(w, v);
            w[(v / 64) as usize] |= 1 << (v % 64);
            let on = w[4] & 1 == 1;
            let sn = w[4] & 2 == 2;
            let notify = !on && (urg || !sn);
            if notify {
                w[4] |= 1;
            }
            // Compare the post's fields separately; return a marker here.
            OpValue::Word(
                u64::from(already)
                    | u64::from(on) << 1
                    | u64::from(sn) << 2
                    | u64::from(notify) << 3,
            )
        }
    }
}

/// Reference MESI over the three cores (the IOMMU never keeps a copy). Returns how many
/// other agents changed state.
fn ref_mesi(states: &mut [Mesi; 3], requester: Option<usize>, own: bool) -> u64 {
    let mut passive = 0;
    match requester {
        None => {
            for s in states.iter_mut() {
                if *s != Mesi::I {
                    *s = Mesi::I;
                    passive += 1;
                }
            }
        }
        Some(r) if own => {
            for (i, s) in states.iter_mut().enumerate() {
                if i != r && *s != Mesi::I {
                    *s = Mesi::I;
                    passive += 1;
                }
            }
            states[r] = Mesi::M;
        }
        Some(r) => {
            if states[r] == Mesi::I {
                let mut others = false;
                for (i, s) in states.iter_mut().enumerate() {
                    if i == r || *s == Mesi::I {
                        continue;
                    }
                    others = true;
                    if matches!(*s, Mesi::M | Mesi::E) {
                        *s = Mesi::S;
                        passive += 1;
                    }
                }
                states[r] = if others { Mesi::S } else { Mesi::E };
            }
        }
    }
    passive
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_sequences_keep_invariants_and_match_the_reference(
        home in 0u16..2,
        init in any::<[u64; 8]>(),
        steps in prop::collection::vec(step(), 0..64),
    ) {
        let costs = LineCosts::default();
        let freq = Freq::from_mhz(2400).unwrap();
        let mut line = PidLine::with_desc(PiDesc(init), home);
        let mut data = init;
        let mut states = [Mesi::I; 3];
        let mut loads = [0u64; 4];
        let mut writes = [0u64; 4];
        let mut passive_total = 0u64;
        let mut requester_entries = 0u64;
        let mut invalidations = 0u64;

        for (n, st) in steps.iter().enumerate() {
            let idx = CORES.iter().position(|a| *a == st.agent);
            let own = st.op.needs_ownership();
            let before = idx.map_or(Mesi::I, |i| states[i]);

            let predicted_kind = line.classify(st.agent, &st.op);
            let predicted_cost = line.cost(st.agent, &st.op, &costs, freq);
            let r = line.perform(st.agent, st.op);

            // cost() and perform() agree.
            prop_assert_eq!(r.kind, predicted_kind, "step {}", n);
            prop_assert_eq!(predicted_cost, costs.access_cost(r.kind, st.op.class(), freq));

            // A hit exactly when the reference state suffices.
            let hit = match idx {
                None => false,
                Some(_) if own => matches!(before, Mesi::M | Mesi::E),
                Some(_) => before != Mesi::I,
            };
            prop_assert_eq!(r.kind == AccessKind::L1Hit, hit, "step {} {:?}", n, st);
            prop_assert_eq!(r.from, before);

            // Data.
            let expect = ref_apply(&mut data, st.op);
            match (r.value, expect) {
                (OpValue::Post(p), OpValue::Word(m)) => {
                    prop_assert_eq!(p.already_pending, m & 1 == 1);
                    prop_assert_eq!(p.on_before, m & 2 == 2);
                    prop_assert_eq!(p.sn_before, m & 4 == 4);
                    prop_assert_eq!(p.notification.is_some(), m & 8 == 8);
                    if let Some(note) = p.notification {
                        prop_assert_eq!(u64::from(note.nv.0), data[4] >> 16 & 0xff);
                        prop_assert_eq!(u64::from(note.ndst), data[4] >> 32);
                    }
                }
                (got, want) => prop_assert_eq!(got, want),
            }
            prop_assert_eq!(line.desc().0, data);

            // States.
            let passive = ref_mesi(&mut states, idx, own);
            passive_total += passive;
            if own {
                invalidations += passive;
            }
            requester_entries += if st.agent == IOMMU { 2 } else { 1 };
            for (i, a) in CORES.iter().enumerate() {
                prop_assert_eq!(line.state(*a), states[i], "step {} agent {}", n, a);
            }
            prop_assert_eq!(line.state(IOMMU), Mesi::I);
            prop_assert_eq!(r.to, idx.map_or(Mesi::I, |i| states[i]));
            if let Err(e) = line.check_invariants() {
                return Err(TestCaseError::fail(format!("step {n}: {e}")));
            }

            let slot = idx.unwrap_or(3);
            if st.op.class() == OpClass::Load {
                loads[slot] += 1;
            } else {
                writes[slot] += 1;
            }
        }

        // Counters.
        let all: Vec<Agent> = CORES.iter().copied().chain([IOMMU]).collect();
        let mut inval_sum = 0;
        let mut trans_sum = 0;
        for (slot, a) in all.iter().enumerate() {
            let c = line.counters(*a);
            prop_assert_eq!(c.loads, loads[slot]);
            prop_assert_eq!(c.stores_or_rmw, writes[slot]);
            prop_assert!(c.l1_misses <= c.loads + c.stores_or_rmw);
            prop_assert!(c.rfos <= c.stores_or_rmw);
            prop_assert!(c.rfos <= c.l1_misses);
            prop_assert!(c.modified_transfers <= c.l1_misses);
            inval_sum += c.invalidations_received;
            trans_sum += line.transitions(*a).total();
        }
        let io = line.counters(IOMMU);
        prop_assert_eq!(io.l1_misses, io.stores_or_rmw);
        prop_assert_eq!(io.rfos, io.stores_or_rmw);
        prop_assert_eq!(io.invalidations_received, 0);
        prop_assert_eq!(inval_sum, invalidations);
        prop_assert_eq!(trans_sum, requester_entries + passive_total);
        prop_assert_eq!(line.all_counters().len(), line.all_transitions().len());
    }
}
