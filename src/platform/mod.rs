//! Platform profiles: the named machines the seeds ran on, as cost tables.
//!
//! A profile gives every field of [`Costs`] (and the machine's layout) a value, a unit
//! and a source of one of three kinds ([`SourceKind`]): a primary source, a value
//! `calibrated` to one named published figure, or an `assumption` with its reason.
//! Profiles are TOML files in `platforms/`, embedded in the binary and listed by
//! `irqsim platforms`. A profile may start from another (`base`) and replace fields.
//!
//! A scenario picks one with `platform = "NAME"`; its `[costs]` table then overrides
//! single fields on top (see [`crate::Scenario::from_toml_str`]). Without `platform`,
//! a scenario runs on [`DEFAULT_PLATFORM`], whose values are the `Default` of every
//! cost table.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::sweep::path::{self, FieldPath};
use crate::system::{Costs, ScenarioError};

/// The profile a scenario without `platform` runs on.
pub const DEFAULT_PLATFORM: &str = "generic";

/// (name, TOML text) of every embedded profile.
const EMBEDDED: &[(&str, &str)] = &[
    ("generic", include_str!("../../platforms/generic.toml")),
    ("spr", include_str!("../../platforms/spr.toml")),
    ("spr-2s", include_str!("../../platforms/spr-2s.toml")),
    (
        "kunpeng920",
        include_str!("../../platforms/kunpeng920.toml"),
    ),
    ("wsm-ex", include_str!("../../platforms/wsm-ex.toml")),
    ("ia64-zx1", include_str!("../../platforms/ia64-zx1.toml")),
];

/// Where a field's value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// A spec, a datasheet or a public measurement of that primitive.
    Primary,
    /// Fitted to one published figure (named in `source`) by the method given there.
    Calibrated,
    /// No source: the value is reasoned, and `source` says why.
    Assumption,
}

impl SourceKind {
    /// The name used in profiles and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Primary => "primary",
            SourceKind::Calibrated => "calibrated",
            SourceKind::Assumption => "assumption",
        }
    }
}

/// One field of a profile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlatformField {
    /// Scenario field path: `costs.<table>.<field>` or `machine.<field>`.
    pub path: String,
    /// The value (a number, or a string for an enumerated setting).
    pub value: Value,
    /// Unit of the value (`ns`, `cycles`, `MHz`, `GB/s`, `1/s`, `count`, `-`).
    pub unit: String,
    /// Primary, calibrated or assumption.
    pub kind: SourceKind,
    /// The source, or for `calibrated` the figure and the method, or for `assumption`
    /// the reasoning.
    pub source: String,
}

/// The layout of a profile's machine, for experiments that lay out CPUs and devices
/// the way the publication did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachineLayout {
    /// Sockets.
    pub sockets: u32,
    /// Physical cores per socket.
    pub cores_per_socket: u32,
    /// Hardware threads per core.
    pub threads_per_core: u32,
    /// PCIe stacks (IIO blocks, each with its own VT-d remapping unit) per socket.
    pub stacks_per_socket: u32,
    /// Root ports one stack can bifurcate into (x16 as four x4).
    pub ports_per_stack: u32,
}

impl MachineLayout {
    /// Logical CPUs of one socket.
    pub fn cpus_per_socket(&self) -> u32 {
        self.cores_per_socket * self.threads_per_core
    }
}

/// A named machine.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Platform {
    /// The name scenarios and `--platform` use.
    pub name: String,
    /// What machine it is.
    pub machine: String,
    /// The seeds (`../shared/seeds/`) measured on it.
    pub seeds: Vec<String>,
    /// A line on how the profile was put together.
    pub summary: String,
    /// The profile it starts from, if any.
    pub base: Option<String>,
    /// Every field, resolved through `base`, in path order.
    pub fields: Vec<PlatformField>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFile {
    name: String,
    machine: String,
    #[serde(default)]
    seeds: Vec<String>,
    summary: String,
    #[serde(default)]
    base: Option<String>,
    #[serde(default)]
    field: Vec<PlatformField>,
}

/// Every embedded profile, parsed and resolved once.
pub fn all() -> &'static [Platform] {
    static ALL: OnceLock<Vec<Platform>> = OnceLock::new();
    ALL.get_or_init(|| {
        let files: Vec<ProfileFile> = EMBEDDED
            .iter()
            .map(|(name, text)| {
                let f: ProfileFile = toml::from_str(text)
                    .unwrap_or_else(|e| panic!("platforms/{name}.toml is not a profile: {e}"));
                assert_eq!(f.name, *name, "platforms/{name}.toml names itself");
                f
            })
            .collect();
        let mut out: Vec<Platform> = Vec::new();
        for f in &files {
            let mut fields: Vec<PlatformField> = match &f.base {
                Some(b) => out
                    .iter()
                    .find(|p| &p.name == b)
                    .unwrap_or_else(|| panic!("profile {}: base {b} must come earlier", f.name))
                    .fields
                    .clone(),
                None => Vec::new(),
            };
            for field in &f.field {
                match fields.iter_mut().find(|x| x.path == field.path) {
                    Some(slot) => *slot = field.clone(),
                    None => fields.push(field.clone()),
                }
            }
            fields.sort_by(|a, b| a.path.cmp(&b.path));
            out.push(Platform {
                name: f.name.clone(),
                machine: f.machine.clone(),
                seeds: f.seeds.clone(),
                summary: f.summary.clone(),
                base: f.base.clone(),
                fields,
            });
        }
        out
    })
}

/// The names of every profile.
pub fn names() -> Vec<&'static str> {
    all().iter().map(|p| p.name.as_str()).collect()
}

/// The profile called `name`; the error names the field (`platform`) and lists the
/// profiles there are.
pub fn get(name: &str) -> Result<&'static Platform, ScenarioError> {
    all().iter().find(|p| p.name == name).ok_or_else(|| {
        ScenarioError::invalid(
            "platform",
            format!("{name:?}"),
            format!("one of {} (irqsim platforms)", names().join(", ")),
        )
    })
}

impl Platform {
    /// The profile's cost tables.
    pub fn costs(&self) -> Costs {
        let tree = self.costs_tree();
        serde_json::from_value(tree).unwrap_or_else(|e| {
            panic!(
                "profile {}: its costs do not fit the tables: {e}",
                self.name
            )
        })
    }

    /// The profile's cost tables as a JSON tree (every field of [`Costs`]).
    pub fn costs_tree(&self) -> Value {
        let mut tree = serde_json::to_value(Costs::default()).expect("costs serialize");
        for f in self.fields.iter().filter(|f| f.path.starts_with("costs.")) {
            let p = FieldPath::parse(&f.path["costs.".len()..]).expect("checked paths");
            path::set(&mut tree, &p, &f.value)
                .unwrap_or_else(|e| panic!("profile {}: {}: {e}", self.name, f.path));
        }
        tree
    }

    /// The machine's layout.
    pub fn layout(&self) -> MachineLayout {
        let mut map = serde_json::Map::new();
        for f in self
            .fields
            .iter()
            .filter(|f| f.path.starts_with("machine."))
        {
            map.insert(f.path["machine.".len()..].to_string(), f.value.clone());
        }
        serde_json::from_value(Value::Object(map))
            .unwrap_or_else(|e| panic!("profile {}: machine layout: {e}", self.name))
    }

    /// The field at `path` (e.g. `costs.fabric.message_occupancy_ns`).
    pub fn field(&self, path: &str) -> Option<&PlatformField> {
        self.fields.iter().find(|f| f.path == path)
    }

    /// Named-choice cost fields that are `calibrated` or `assumption`, each with the
    /// choices it does not take here: the ones `irqsim validate --sensitivity`
    /// switches.
    pub fn switchable_fields(
        &self,
    ) -> impl Iterator<Item = (&PlatformField, Vec<&'static str>)> + '_ {
        self.fields.iter().filter_map(|f| {
            if !f.path.starts_with("costs.") || f.kind == SourceKind::Primary {
                return None;
            }
            let now = f.value.as_str()?;
            let others = choices(&f.path)?
                .iter()
                .copied()
                .filter(|c| *c != now)
                .collect();
            Some((f, others))
        })
    }

    /// Numeric cost fields that are `calibrated` or `assumption`: the ones
    /// `irqsim validate --sensitivity` moves.
    pub fn movable_fields(&self) -> impl Iterator<Item = &PlatformField> {
        self.fields.iter().filter(|f| {
            f.path.starts_with("costs.")
                && f.kind != SourceKind::Primary
                && f.value.as_f64().is_some_and(|v| v != 0.0)
        })
    }
}

/// The values a named-choice cost field can take, as profiles and `--set` spell them.
/// Every string-valued cost field of a profile has an entry (a test checks it, and
/// that each value is accepted).
pub fn choices(path: &str) -> Option<&'static [&'static str]> {
    Some(match path {
        "costs.fabric.delivery_shared_by" => &["port", "stack", "socket"],
        "costs.smmu_host.io_write_lands" => &["llc", "memory"],
        "costs.smmu_host.fetch_snoop" => &["keep", "share"],
        "costs.smmu_host.msi_completion" => &["in-order", "acknowledged"],
        _ => return None,
    })
}

/// Every leaf field path of a JSON tree, `prefix`ed, in order.
pub fn leaf_paths(tree: &Value, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    collect_leaves(tree, prefix, &mut out);
    out
}

fn collect_leaves(v: &Value, at: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                collect_leaves(child, &format!("{at}.{k}"), out);
            }
        }
        _ => out.push(at.to_string()),
    }
}

/// A table of a profile's fields, for `irqsim platforms NAME`.
pub fn render(p: &Platform) -> String {
    use crate::report::table::Table;
    let mut s = format!(
        "platform {}: {}\nseeds: {}\n{}\n",
        p.name,
        p.machine,
        if p.seeds.is_empty() {
            "-".to_string()
        } else {
            p.seeds.join(", ")
        },
        p.summary
    );
    if let Some(b) = &p.base {
        s.push_str(&format!("starts from: {b}\n"));
    }
    let mut t = Table::new(["field", "value", "unit", "kind", "source"]);
    for f in &p.fields {
        let value = match &f.value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        t.row([
            f.path.clone(),
            value,
            f.unit.clone(),
            f.kind.as_str().to_string(),
            f.source.clone(),
        ]);
    }
    s.push_str(&t.render());
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_profile_gives_every_cost_and_layout_field_exactly_once_with_a_source() {
        let cost_leaves = leaf_paths(
            &serde_json::to_value(Costs::default()).expect("serializes"),
            "costs",
        );
        let layout_leaves = [
            "machine.cores_per_socket",
            "machine.ports_per_stack",
            "machine.sockets",
            "machine.stacks_per_socket",
            "machine.threads_per_core",
        ];
        for p in all() {
            let mut expected: Vec<String> = cost_leaves.clone();
            expected.extend(layout_leaves.iter().map(|s| s.to_string()));
            expected.sort();
            let got: Vec<String> = p.fields.iter().map(|f| f.path.clone()).collect();
            assert_eq!(
                got, expected,
                "profile {} covers exactly the fields",
                p.name
            );
            for f in &p.fields {
                assert!(
                    f.source.len() > 10 && !f.unit.is_empty(),
                    "{} {}: a unit and a real source",
                    p.name,
                    f.path
                );
                if f.kind == SourceKind::Calibrated {
                    assert!(
                        f.source.contains("calibrated to"),
                        "{} {}: a calibrated field names its figure (`calibrated to ...`)",
                        p.name,
                        f.path
                    );
                }
            }
            // Resolving never panics and the layout is sensible.
            p.costs()
                .validate()
                .unwrap_or_else(|e| panic!("{}: {e}", p.name));
            let l = p.layout();
            assert!(l.sockets >= 1 && l.cpus_per_socket() >= 1 && l.ports_per_stack >= 1);
        }
    }

    #[test]
    fn every_movable_field_takes_a_value_moved_by_twenty_percent() {
        // The sensitivity sweep writes 0.8x and 1.2x into each movable field, as here;
        // an integer field whose moved value is not whole (a count of 1 moved to 0.8)
        // would refuse it and panic the sweep.
        for p in all() {
            for f in p.movable_fields() {
                for factor in [0.8, 1.2] {
                    let mut tree = p.costs_tree();
                    let at = FieldPath::parse(&f.path["costs.".len()..]).unwrap();
                    let moved = Value::from(f.value.as_f64().unwrap() * factor);
                    path::set(&mut tree, &at, &moved).unwrap();
                    let costs: Result<Costs, _> = serde_json::from_value(tree);
                    assert!(costs.is_ok(), "{} {} x{factor}: {costs:?}", p.name, f.path);
                }
            }
        }
    }

    #[test]
    fn every_named_choice_field_lists_its_choices_and_each_is_accepted_but_no_other() {
        for p in all() {
            for f in p.fields.iter().filter(|f| f.value.is_string()) {
                let list = choices(&f.path)
                    .unwrap_or_else(|| panic!("{} {}: no entry in choices()", p.name, f.path));
                assert!(
                    list.contains(&f.value.as_str().unwrap()),
                    "{} {}: {} is not one of {list:?}",
                    p.name,
                    f.path,
                    f.value
                );
                let at = FieldPath::parse(&f.path["costs.".len()..]).unwrap();
                for value in list.iter().copied().chain(["no-such-choice"]) {
                    let mut tree = p.costs_tree();
                    path::set(&mut tree, &at, &Value::from(value)).unwrap();
                    let accepted =
                        serde_json::from_value::<Costs>(tree).is_ok_and(|c| c.validate().is_ok());
                    assert_eq!(
                        accepted,
                        value != "no-such-choice",
                        "{} {} = {value}",
                        p.name,
                        f.path
                    );
                }
            }
            // Switching offers every other choice of an assumed field, and only those.
            for (f, others) in p.switchable_fields() {
                assert_ne!(f.kind, SourceKind::Primary);
                assert_eq!(others.len() + 1, choices(&f.path).unwrap().len());
                assert!(!others.contains(&f.value.as_str().unwrap()));
            }
        }
        let kunpeng: Vec<String> = get("kunpeng920")
            .unwrap()
            .switchable_fields()
            .map(|(f, _)| f.path.clone())
            .collect();
        assert!(
            kunpeng.contains(&"costs.smmu_host.msi_completion".to_string()),
            "{kunpeng:?}"
        );
    }

    #[test]
    fn the_generic_profile_is_the_default_of_every_table() {
        assert_eq!(get(DEFAULT_PLATFORM).unwrap().costs(), Costs::default());
    }

    #[test]
    fn profiles_differ_where_their_machines_do_and_unknown_names_are_errors() {
        let spr = get("spr").unwrap();
        assert_ne!(spr.costs(), Costs::default());
        assert_eq!(spr.costs().cpu.freq_mhz, 2700);
        let e = get("sapphire").unwrap_err();
        assert_eq!(e.field(), Some("platform"));
        assert!(e.to_string().contains("spr"), "{e}");
    }
}
