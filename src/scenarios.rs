//! Scenarios shipped inside the binary, so `irqsim run NAME` works without files.

/// (name, TOML text) of every embedded scenario; the files live in `scenarios/`.
pub const EMBEDDED: &[(&str, &str)] = &[
    ("default", include_str!("../scenarios/default.toml")),
    ("remapped", include_str!("../scenarios/remapped.toml")),
    (
        "faulty-device",
        include_str!("../scenarios/faulty-device.toml"),
    ),
    ("nvme-posted", include_str!("../scenarios/nvme-posted.toml")),
    ("vmd-remap", include_str!("../scenarios/vmd-remap.toml")),
    ("nic-napi", include_str!("../scenarios/nic-napi.toml")),
    ("large", include_str!("../scenarios/large.toml")),
    ("arm-nvme", include_str!("../scenarios/arm-nvme.toml")),
    (
        "shootdown-nvme",
        include_str!("../scenarios/shootdown-nvme.toml"),
    ),
    (
        "retrigger-stall",
        include_str!("../scenarios/retrigger-stall.toml"),
    ),
];

/// The TOML text of an embedded scenario.
pub fn embedded(name: &str) -> Option<&'static str> {
    EMBEDDED.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// Every embedded scenario and every point of every experiment: between them, every
/// kind of component a scenario can have.
#[cfg(test)]
pub(crate) fn every_builtin_scenario() -> Vec<crate::Scenario> {
    let mut scenarios: Vec<crate::Scenario> = EMBEDDED
        .iter()
        .map(|(name, text)| crate::Scenario::from_toml_str(text, name).unwrap())
        .collect();
    let ctx = crate::experiments::ExperimentCtx::new(1);
    for e in crate::experiments::ALL {
        scenarios.extend((e.scenarios)(&ctx));
    }
    scenarios
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Scenario;

    #[test]
    fn every_embedded_scenario_parses_and_validates() {
        for (name, text) in EMBEDDED {
            let s = Scenario::from_toml_str(text, name).unwrap();
            s.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    /// The shipped setups are the ones users copy: none should carry a likely mistake.
    #[test]
    fn no_builtin_scenario_is_warned_about() {
        for sc in every_builtin_scenario() {
            assert_eq!(sc.warnings(), Vec::<String>::new(), "{}", sc.name);
        }
    }
}
