//! A counterexample as a Chrome trace-event file (Perfetto, `chrome://tracing`): one
//! track per actor, one slice per step, and the descriptor's and APIC's bits as
//! counters after every step.
//!
//! The explorer has no clock: steps are an order, not times. Step `n` is drawn from
//! `n - 1` to `n` microseconds, so the time axis reads as step numbers.

use serde_json::{json, Value};

use super::Counterexample;

/// Actors in the order their tracks are listed.
const ACTORS: [&str; 10] = [
    "handler",
    "iommu",
    "iommu-urg",
    "sn-cpu",
    "apic",
    "store-buffer",
    "irq-core",
    "apic-idt",
    "iommu-swap",
    "migration",
];

const PID: u32 = 1;

fn track_of(actor: &str) -> usize {
    // An actor this list does not know still gets a track of its own, after the rest.
    ACTORS
        .iter()
        .position(|a| *a == actor)
        .unwrap_or(ACTORS.len())
        + 1
}

impl Counterexample {
    /// The trace of this counterexample found for `variant`, as Chrome trace-event
    /// JSON (`{"traceEvents": [...]}`).
    pub fn chrome_trace(&self, variant: &str) -> Value {
        let mut events = vec![json!({
            "ph": "M", "name": "process_name", "pid": PID, "tid": 0,
            "args": {"name": format!("irqsim explore: {variant} (steps, not time)")}
        })];
        for (i, actor) in ACTORS.iter().enumerate() {
            events.push(json!({
                "ph": "M", "name": "thread_name", "pid": PID, "tid": i + 1,
                "args": {"name": actor}
            }));
            events.push(json!({
                "ph": "M", "name": "thread_sort_index", "pid": PID, "tid": i + 1,
                "args": {"sort_index": i + 1}
            }));
        }
        for s in &self.steps {
            let start = f64::from(s.n - 1);
            events.push(json!({
                "ph": "X", "cat": "step", "name": s.action, "pid": PID,
                "tid": track_of(&s.actor), "ts": start, "dur": 1.0,
                "args": {"step": s.n, "actor": s.actor, "after": s.after.to_string()}
            }));
            let a = &s.after;
            let ts = f64::from(s.n);
            let counter = |name: &str, args: Value| json!({"ph": "C", "name": name, "pid": PID, "tid": 0, "ts": ts, "args": args});
            events.push(counter(
                "PID ON/SN",
                json!({"ON": u8::from(a.on), "SN": u8::from(a.sn)}),
            ));
            events.push(counter(
                "PIR vectors by word",
                json!({
                    "word0": a.pir[0].count_ones(), "word1": a.pir[1].count_ones(),
                    "word2": a.pir[2].count_ones(), "word3": a.pir[3].count_ones()
                }),
            ));
            events.push(counter(
                "APIC 0xeb",
                json!({"IRR": u8::from(a.irr), "ISR": u8::from(a.isr)}),
            ));
            events.push(counter("store buffer", json!({"stores": a.buffered})));
            events.push(counter(
                "APIC retriggered vector",
                json!({"IRR": u8::from(a.device_irr), "ISR": u8::from(a.device_isr)}),
            ));
        }
        let last = self.steps.last().map_or(0, |s| s.n);
        events.push(json!({
            "ph": "i", "s": "g", "cat": "violation", "pid": PID, "tid": 0,
            "name": format!("{} violated", self.invariant), "ts": f64::from(last),
            "args": {"detail": self.detail, "at_quiescence": self.at_quiescence}
        }));
        json!({"displayTimeUnit": "ns", "traceEvents": events})
    }
}

#[cfg(test)]
mod tests {
    use crate::explore::{explore_variant, ExploreConfig};

    #[test]
    fn a_counterexample_trace_has_a_slice_per_step_on_its_actors_track_and_the_bits() {
        let r = explore_variant("no-final-recheck", 3, &ExploreConfig::with_counts(2, 2)).unwrap();
        let c = r.counterexample().unwrap();
        let t = c.chrome_trace(&r.variant);
        let events = t["traceEvents"].as_array().unwrap();
        let slices: Vec<&serde_json::Value> = events.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(slices.len(), c.steps.len());
        for (s, e) in c.steps.iter().zip(&slices) {
            assert_eq!(e["name"], s.action.as_str());
            assert_eq!(e["tid"], super::track_of(&s.actor));
            assert_eq!(e["ts"], f64::from(s.n - 1));
        }
        // The handler and the IOMMU are on different tracks.
        assert_ne!(super::track_of("handler"), super::track_of("iommu"));
        // After the last step ON is clear with a vector stranded in PIR word 1.
        let last_on = events
            .iter()
            .rfind(|e| e["ph"] == "C" && e["name"] == "PID ON/SN")
            .unwrap();
        assert_eq!(last_on["args"]["ON"], 0);
        let last_pir = events
            .iter()
            .rfind(|e| e["ph"] == "C" && e["name"] == "PIR vectors by word")
            .unwrap();
        assert_eq!(last_pir["args"]["word1"], 1);
        let v = events.iter().find(|e| e["ph"] == "i").unwrap();
        assert_eq!(v["name"], "nothing-lost violated");
    }

    #[test]
    fn a_retrigger_counterexample_has_its_own_tracks_and_the_vector_left_in_service() {
        use crate::kernel::retrigger::PostedMsiAck;
        let config = ExploreConfig::with_counts(1, 1).retriggers(
            1,
            sim_core::Vector(0x21),
            PostedMsiAck::MoveIrqOnly,
        );
        let r = explore_variant("copy-then-xchg", 3, &config).unwrap();
        let t = r.counterexample().unwrap().chrome_trace(&r.variant);
        let events = t["traceEvents"].as_array().unwrap();
        let tracks: Vec<&serde_json::Value> = events
            .iter()
            .filter(|e| e["ph"] == "X")
            .map(|e| &e["tid"])
            .collect();
        assert_eq!(tracks[0], super::track_of("irq-core"));
        assert_eq!(tracks[1], super::track_of("apic-idt"));
        assert!(super::track_of("apic-idt") <= super::ACTORS.len());
        let last = events
            .iter()
            .rfind(|e| e["ph"] == "C" && e["name"] == "APIC retriggered vector")
            .unwrap();
        assert_eq!(last["args"]["ISR"], 1);
    }
}
