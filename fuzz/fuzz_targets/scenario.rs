//! Scenario TOML: the first byte picks raw bytes, a field-level mutation or a
//! byte-level mutation of an embedded scenario; the rest are the choices.
#![no_main]

use irqsim::fuzz::{mutate_bytes, mutate_toml, scenario_case, CaseOutcome};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let docs = irqsim::scenarios::EMBEDDED;
    let doc = docs[rest.first().copied().unwrap_or(0) as usize % docs.len()].1;
    let words: Vec<u64> = rest
        .chunks(8)
        .map(|c| c.iter().fold(0u64, |w, &b| w << 8 | b as u64))
        .collect();
    let input = match mode % 3 {
        0 => rest.to_vec(),
        1 => mutate_toml(doc, &words).into_bytes(),
        _ => mutate_bytes(doc.as_bytes(), &words),
    };
    let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    if let CaseOutcome::Ran { balanced, .. } = scenario_case(&input, &base) {
        assert!(balanced, "unbalanced MSI ledger");
    }
});
