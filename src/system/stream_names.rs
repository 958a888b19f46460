//! The name of every random stream a system draws from.
//!
//! Each component draws from the stream its name selects ([`crate::engine::RngStreams`]).
//! Two components whose streams share a name would draw the same numbers: two drives
//! with one name would see the same media latency, command for command, and two
//! shootdown loads of one name on one CPU would call in step. Nothing in a report
//! shows such a correlation, so it would pass for a result. The builders therefore
//! take every stream's name from the functions here, [`Scenario::random_streams`] lists
//! the same names, and validation refuses a scenario in which two of them coincide.
//!
//! Component names also name MSI sources in reports and traces; two components that
//! raise MSIs under one name get a warning in [`Scenario::warnings`], not an error.

use std::collections::HashMap;

use super::scenario::{Scenario, ScenarioError};

/// A DSA device's stream: its name.
pub(super) fn dsa(device: &str) -> String {
    device.to_string()
}

/// An NVMe drive's stream: its name.
pub(super) fn nvme(drive: &str) -> String {
    drive.to_string()
}

/// A NIC queue's stream.
pub(super) fn nic_queue(nic: &str, queue: usize) -> String {
    format!("{nic} q{queue}")
}

/// A load's stream on one of its CPUs (a shootdown initiator, an SMMU load's caller).
pub(super) fn load_cpu(load: &str, cpu: u32) -> String {
    format!("{load}/cpu{cpu}")
}

/// An IOAPIC pin's stream.
pub(super) fn ioapic_pin(pin: &str) -> String {
    format!("ioapic/{pin}")
}

/// One random stream the system will draw from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamUse {
    /// The stream's name.
    pub stream: String,
    /// The scenario field whose value the name comes from (`nvme[1].name`).
    pub field: String,
    /// That field's value as the system uses it: the name given, or the default.
    pub name: String,
    /// Whether `name` is the default (the field was left out).
    pub defaulted: bool,
}

fn name_or(given: &str, default: impl FnOnce() -> String) -> String {
    if given.is_empty() {
        default()
    } else {
        given.to_string()
    }
}

impl Scenario {
    /// The name of DSA device `i` in reports and streams: its `name`, or `device<i>`.
    pub fn device_name(&self, i: usize) -> String {
        name_or(&self.devices[i].name, || format!("device{i}"))
    }

    /// An NVMe drive's name in reports and streams: its `name`, or `nvme<i>`.
    pub fn nvme_name(&self, i: usize) -> String {
        name_or(&self.nvme[i].name, || format!("nvme{i}"))
    }

    /// A NIC's name in reports and streams: its `name`, or `nic<i>`.
    pub fn nic_name(&self, i: usize) -> String {
        name_or(&self.nics[i].name, || format!("nic{i}"))
    }

    /// A shootdown load's name: its `name`, or `shootdown<i>`.
    pub fn shootdown_name(&self, i: usize) -> String {
        name_or(&self.shootdowns[i].name, || format!("shootdown{i}"))
    }

    /// An SMMU load's name: its `name`, or `smmu_load<i>`.
    pub fn smmu_load_name(&self, i: usize) -> String {
        name_or(&self.smmu_loads[i].name, || format!("smmu_load{i}"))
    }

    /// A VMD domain's name in reports and its MSI sources': its `name`, or `vmd<i>`.
    pub fn vmd_name(&self, i: usize) -> String {
        name_or(&self.vmd[i].name, || format!("vmd{i}"))
    }

    /// An IOAPIC pin's name: its `name`, or `pin<pin>`.
    pub fn ioapic_pin_name(&self, i: usize) -> String {
        let p = &self.ioapic_pins[i];
        name_or(&p.name, || format!("pin{}", p.pin))
    }

    /// Every random stream a system built from this scenario draws from, in build
    /// order, with the field that names it.
    pub fn random_streams(&self) -> Vec<StreamUse> {
        let mut out = Vec::new();
        // `given` is the field as written: empty when the name is the default.
        let mut add = |stream: String, field: String, name: &str, given: &str| {
            out.push(StreamUse {
                stream,
                field,
                name: name.to_string(),
                defaulted: given.is_empty(),
            })
        };
        for (i, d) in self.devices.iter().enumerate() {
            let name = self.device_name(i);
            add(dsa(&name), format!("devices[{i}].name"), &name, &d.name);
        }
        for (i, d) in self.nvme.iter().enumerate() {
            let name = self.nvme_name(i);
            add(nvme(&name), format!("nvme[{i}].name"), &name, &d.name);
        }
        for (i, n) in self.nics.iter().enumerate() {
            let name = self.nic_name(i);
            for q in 0..n.queues as usize {
                add(
                    nic_queue(&name, q),
                    format!("nics[{i}].name"),
                    &name,
                    &n.name,
                );
            }
        }
        for (i, l) in self.shootdowns.iter().enumerate() {
            let name = self.shootdown_name(i);
            for &cpu in &l.from {
                let stream = load_cpu(&name, cpu);
                add(stream, format!("shootdowns[{i}].name"), &name, &l.name);
            }
        }
        for (i, l) in self.smmu_loads.iter().enumerate() {
            let name = self.smmu_load_name(i);
            for &cpu in &l.cpus {
                let stream = load_cpu(&name, cpu);
                add(stream, format!("smmu_loads[{i}].name"), &name, &l.name);
            }
        }
        for (i, p) in self.ioapic_pins.iter().enumerate() {
            let name = self.ioapic_pin_name(i);
            add(
                ioapic_pin(&name),
                format!("ioapic_pins[{i}].name"),
                &name,
                &p.name,
            );
        }
        out
    }
}

/// The MSI source of a drive's or a NIC's queue `queue`.
pub(super) fn queue_source(component: &str, queue: usize) -> String {
    format!("{component} q{queue}")
}

/// The MSI source of a VMD domain's own vector `vector` (remap mode).
pub(super) fn vmd_vector_source(domain: &str, vector: u16) -> String {
    format!("{domain} v{vector}")
}

/// Every MSI source name the scenario's components could raise under, with the field
/// that names the component and the component's name. A drive behind a VMD domain in
/// remap mode raises through the domain's vectors, not its own queues. A domain is
/// listed with every vector it has, used or not: the children land on them only when
/// the system is built.
fn source_names(sc: &Scenario) -> Vec<(String, String, String)> {
    use devices::VmdMode;
    let mut out = Vec::new();
    fn queues(out: &mut Vec<(String, String, String)>, name: String, field: String, count: u32) {
        for q in 0..count as usize {
            out.push((queue_source(&name, q), field.clone(), name.clone()));
        }
    }
    for i in 0..sc.devices.len() {
        let name = sc.device_name(i);
        out.push((name.clone(), format!("devices[{i}].name"), name));
    }
    for (i, d) in sc.nvme.iter().enumerate() {
        let behind_remapping_vmd = d
            .vmd
            .and_then(|v| sc.vmd.get(v as usize))
            .is_some_and(|v| v.vmd.mode == VmdMode::Remap);
        if behind_remapping_vmd {
            continue;
        }
        queues(
            &mut out,
            sc.nvme_name(i),
            format!("nvme[{i}].name"),
            d.drive.queues,
        );
    }
    for (i, n) in sc.nics.iter().enumerate() {
        queues(
            &mut out,
            sc.nic_name(i),
            format!("nics[{i}].name"),
            n.queues,
        );
    }
    for (i, v) in sc.vmd.iter().enumerate() {
        if v.vmd.mode != VmdMode::Remap {
            continue;
        }
        let name = sc.vmd_name(i);
        for vector in 0..v.vmd.vectors as u16 {
            out.push((
                vmd_vector_source(&name, vector),
                format!("vmd[{i}].name"),
                name.clone(),
            ));
        }
    }
    for i in 0..sc.ioapic_pins.len() {
        let name = sc.ioapic_pin_name(i);
        out.push((name.clone(), format!("ioapic_pins[{i}].name"), name));
    }
    out
}

/// Components whose MSI sources would share a name, each a sentence for
/// [`Scenario::warnings`]: two components of one name (a drive and a NIC both `eth`,
/// whose first queues are both `eth q0`), or a name that equals another component's
/// source (a DSA device named `ssd q0` beside a drive `ssd`). Report rows and trace
/// tracks would not tell their MSIs apart. Only a warning: unlike a shared stream, it
/// changes no figure, and the pairs that would share a stream are refused before this
/// runs. One sentence per pair of components.
pub(super) fn shared_source_names(sc: &Scenario) -> Vec<String> {
    let mut first_user: HashMap<String, (String, String)> = HashMap::new();
    let mut pairs_told: Vec<(String, String)> = Vec::new();
    let mut out = Vec::new();
    for (source, field, name) in source_names(sc) {
        let Some((first_field, first_name)) = first_user.get(&source) else {
            first_user.insert(source, (field, name));
            continue;
        };
        let pair = (first_field.clone(), field.clone());
        if pairs_told.contains(&pair) {
            continue;
        }
        out.push(if *first_name == name {
            format!(
                "{field} = {name:?} is also {first_field}'s name: their MSI sources cannot be told apart in reports and traces"
            )
        } else {
            format!(
                "{field} = {name:?} raises MSIs as {source:?}, and so does {first_field} = {first_name:?}: their MSI sources cannot be told apart in reports and traces"
            )
        });
        pairs_told.push(pair);
    }
    out
}

/// Refuses two components that would draw from one stream (see the module docs).
pub(super) fn validate(sc: &Scenario) -> Result<(), ScenarioError> {
    let streams = sc.random_streams();
    let mut first_user: HashMap<&str, &StreamUse> = HashMap::with_capacity(streams.len());
    for s in &streams {
        let Some(first) = first_user.insert(&s.stream, s) else {
            continue;
        };
        // Never two CPUs of one load: their lists were checked distinct before this
        // runs, so a repeat is always two components.
        let value = if s.defaulted {
            format!("{:?} (the default, as the field is left out)", s.name)
        } else {
            format!("{:?}", s.name)
        };
        let first_value = if first.defaulted {
            format!("{:?} by default", first.name)
        } else {
            format!("{:?}", first.name)
        };
        return Err(ScenarioError::invalid(
            &s.field,
            value,
            format!(
                "a name no other component's random stream uses: {} = {first_value} already draws from the stream \"{}\", and two components on one stream would draw the same numbers",
                first.field, s.stream
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str =
        "name = \"t\"\nseed = 1\nduration_us = 100\nmode = \"posted\"\n[cpus]\ncount = 4\n";

    fn parse(body: &str) -> Result<Scenario, ScenarioError> {
        let sc = Scenario::from_toml_str(&format!("{HEAD}{body}"), "t.toml")?;
        sc.validate()?;
        Ok(sc)
    }

    fn drive(name: &str) -> String {
        let name = if name.is_empty() {
            String::new()
        } else {
            format!("name = \"{name}\"\n")
        };
        format!("[[nvme]]\n{name}drive = {{ queues = 2 }}\n")
    }

    fn dsa(name: &str) -> String {
        format!("[[devices]]\nkind = \"dsa\"\nname = \"{name}\"\nvector = 0x21\ncpu = 1\narrival = {{ kind = \"poisson\", rate_per_s = 1e5 }}\n")
    }

    fn nic(name: &str, queues: u32) -> String {
        format!("[[nics]]\nname = \"{name}\"\nqueues = {queues}\nrx = {{ kind = \"poisson\", rate_per_s = 1e5 }}\n")
    }

    #[test]
    fn two_drives_of_one_name_are_refused_at_the_second() {
        let err = parse(&(drive("ssd") + &drive("ssd"))).unwrap_err();
        assert_eq!(err.field(), Some("nvme[1].name"));
        let text = err.to_string();
        assert!(text.contains("nvme[0].name = \"ssd\""), "{text}");
        assert!(text.contains("stream \"ssd\""), "{text}");
        assert!(parse(&(drive("ssd") + &drive("ssd2"))).is_ok());
    }

    #[test]
    fn a_given_name_that_equals_another_components_default_is_refused() {
        let err = parse(&(dsa("nvme0") + &drive(""))).unwrap_err();
        assert_eq!(err.field(), Some("nvme[0].name"));
        assert!(err.to_string().contains("(the default"), "{err}");
        // Unnamed drives take distinct defaults.
        assert!(parse(&(drive("") + &drive(""))).is_ok());
    }

    #[test]
    fn nic_queue_streams_collide_only_on_a_shared_name() {
        let err = parse(&(nic("eth", 2) + &nic("eth", 2))).unwrap_err();
        assert_eq!(err.field(), Some("nics[1].name"));
        assert!(err.to_string().contains("stream \"eth q0\""), "{err}");
        assert!(parse(&(nic("eth0", 2) + &nic("eth1", 2))).is_ok());
    }

    #[test]
    fn shootdown_loads_of_one_name_collide_only_on_a_shared_cpu() {
        let load = |from: &str| {
            format!("[[shootdowns]]\nname = \"flush\"\nfrom = [{from}]\ntargets = [3]\narrival = {{ kind = \"poisson\", rate_per_s = 1e4 }}\n")
        };
        let err = parse(&(load("0, 1") + &load("1"))).unwrap_err();
        assert_eq!(err.field(), Some("shootdowns[1].name"));
        assert!(err.to_string().contains("stream \"flush/cpu1\""), "{err}");
        assert!(parse(&(load("0") + &load("1"))).is_ok());
    }

    #[test]
    fn an_smmu_load_calls_from_each_cpu_once() {
        use crate::system::smmu_host::SmmuWorkload;
        let workload = SmmuWorkload::Unmap { pages: 1 };
        let mut sc = crate::experiments::smmu_cmdsync::load_scenario(false, workload, 2, 1);
        sc.validate().unwrap();
        sc.smmu_loads[0].cpus = vec![1, 1];
        let err = sc.validate().unwrap_err();
        assert_eq!(err.field(), Some("smmu_loads[0].cpus[1]"));
    }

    #[test]
    fn a_drive_and_a_nic_of_one_name_are_valid_but_warned_about() {
        let sc = parse(&(drive("ssd") + &nic("ssd", 1))).unwrap();
        // Through `Scenario::warnings`, as `irqsim run` prints them.
        let warnings = sc.warnings();
        assert!(
            warnings
                .iter()
                .any(|w| w.starts_with("nics[0].name = \"ssd\" is also nvme[0].name's name")),
            "{warnings:?}"
        );
        let sc = parse(&(drive("ssd") + &nic("eth", 1))).unwrap();
        assert!(
            shared_source_names(&sc).is_empty(),
            "{:?}",
            shared_source_names(&sc)
        );
    }

    #[test]
    fn a_component_named_like_another_components_source_is_warned_about() {
        // The drive's second queue raises as "ssd q1".
        let sc = parse(&(dsa("ssd q1") + &drive("ssd"))).unwrap();
        assert_eq!(
            shared_source_names(&sc),
            vec![
                "nvme[0].name = \"ssd\" raises MSIs as \"ssd q1\", and so does devices[0].name = \"ssd q1\": their MSI sources cannot be told apart in reports and traces"
                    .to_string()
            ]
        );
        // The drive has two queues, q0 and q1.
        let sc = parse(&(dsa("ssd q2") + &drive("ssd"))).unwrap();
        assert!(
            shared_source_names(&sc).is_empty(),
            "{:?}",
            shared_source_names(&sc)
        );
    }

    #[test]
    fn a_drive_and_a_nic_of_one_name_are_told_once() {
        // Both queues collide; one sentence names the pair.
        let sc = parse(&(drive("ssd") + &nic("ssd", 2))).unwrap();
        assert_eq!(
            shared_source_names(&sc).len(),
            1,
            "{:?}",
            shared_source_names(&sc)
        );
    }

    /// Every source a built system names is among those the warning compares.
    #[test]
    fn the_listed_source_names_cover_the_built_systems() {
        let scenarios = crate::scenarios::every_builtin_scenario();
        let mut kinds_seen = std::collections::BTreeSet::new();
        for sc in &scenarios {
            let listed: HashMap<String, String> = source_names(sc)
                .into_iter()
                .map(|(source, field, _)| (source, field))
                .collect();
            let sys = crate::system::System::new(sc).unwrap();
            for name in sys.device_names() {
                let Some(field) = listed.get(&name) else {
                    panic!("{}: source {name:?} is not listed", sc.name);
                };
                kinds_seen.insert(field.split('[').next().unwrap_or_default().to_string());
            }
        }
        for kind in ["devices", "nvme", "nics", "vmd", "ioapic_pins"] {
            assert!(
                kinds_seen.contains(kind),
                "no built system has a {kind} source"
            );
        }
    }

    /// The streams `System::new` takes, by name, sorted.
    fn streams_the_build_takes(sc: &Scenario) -> Vec<String> {
        use crate::engine::rng::STREAMS_HANDED_OUT;
        STREAMS_HANDED_OUT.with(|names| *names.borrow_mut() = Some(Vec::new()));
        let built = crate::system::System::new(sc);
        let mut names = STREAMS_HANDED_OUT
            .with(|names| names.borrow_mut().take())
            .unwrap();
        if let Err(e) = built {
            panic!("{}: {e}", sc.name);
        }
        names.sort();
        names
    }

    /// The list validation checks is the list the builders draw from, for every
    /// embedded scenario and every experiment's points, which between them have every
    /// kind of component that draws.
    #[test]
    fn the_builders_take_exactly_the_listed_streams() {
        let scenarios = crate::scenarios::every_builtin_scenario();
        for kind in [
            "devices[",
            "nvme[",
            "nics[",
            "shootdowns[",
            "smmu_loads[",
            "ioapic_pins[",
        ] {
            assert!(
                scenarios.iter().any(|sc| sc
                    .random_streams()
                    .iter()
                    .any(|s| s.field.starts_with(kind))),
                "no scenario has {kind}..]"
            );
        }
        for sc in &scenarios {
            let mut listed: Vec<String> =
                sc.random_streams().into_iter().map(|s| s.stream).collect();
            listed.sort();
            assert_eq!(listed, streams_the_build_takes(sc), "{}", sc.name);
        }
    }
}
