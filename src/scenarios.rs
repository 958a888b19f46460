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
}
