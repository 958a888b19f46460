//! Field paths into a scenario tree: `max_loops`, `costs.cpu.freq_mhz`,
//! `devices[0].arrival.rate_per_s`, `devices[*].vector` (every device).

use serde_json::Value;

/// One step of a path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    /// `.name`: a table's field.
    Key(String),
    /// `[N]`: one element of a list.
    Index(usize),
    /// `[*]`: every element of an array.
    All,
}

/// A parsed field path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldPath(
    /// The steps, from the scenario's root.
    pub Vec<Segment>,
);

impl FieldPath {
    /// Parses `key(.key|[N]|[*])*`; keys are letters, digits, `_` and `-`.
    pub fn parse(text: &str) -> Result<FieldPath, String> {
        let bad = |why: &str| format!("`{text}` is not a field path: {why}");
        let mut segs = Vec::new();
        let mut rest = text;
        let mut expect_key = true;
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix('[') {
                let end = after
                    .find(']')
                    .ok_or_else(|| bad("`[` without a closing `]`"))?;
                let inner = &after[..end];
                if segs.is_empty() {
                    return Err(bad("a path starts with a field name"));
                }
                segs.push(if inner == "*" {
                    Segment::All
                } else {
                    Segment::Index(
                        inner
                            .parse()
                            .map_err(|_| bad("an index is a number or `*`"))?,
                    )
                });
                rest = &after[end + 1..];
                expect_key = false;
                continue;
            }
            if !expect_key {
                rest = rest
                    .strip_prefix('.')
                    .ok_or_else(|| bad("expected `.` or `[` after a field or an index"))?;
            }
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
                .unwrap_or(rest.len());
            if end == 0 {
                return Err(bad("empty field name"));
            }
            segs.push(Segment::Key(rest[..end].to_string()));
            rest = &rest[end..];
            expect_key = false;
        }
        if segs.is_empty() {
            return Err(bad("empty"));
        }
        Ok(FieldPath(segs))
    }
}

impl std::fmt::Display for FieldPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, s) in self.0.iter().enumerate() {
            match s {
                Segment::Key(k) if i == 0 => write!(f, "{k}")?,
                Segment::Key(k) => write!(f, ".{k}")?,
                Segment::Index(n) => write!(f, "[{n}]")?,
                Segment::All => write!(f, "[*]")?,
            }
        }
        Ok(())
    }
}

/// Why a field could not be set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetError {
    /// The path leads somewhere this tree does not have: a field its table lacks, an
    /// index past its list's end, or `[*]` over an empty list. Another scenario of
    /// the same kind may have it (an experiment's points differ in their tables).
    Absent(String),
    /// The path crosses a value of the wrong kind (indexing a table, a field of a
    /// number): no scenario of this kind has it.
    Mismatch(String),
}

impl std::fmt::Display for SetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SetError::Absent(m) | SetError::Mismatch(m) => f.write_str(m),
        }
    }
}

impl From<SetError> for String {
    fn from(e: SetError) -> String {
        e.to_string()
    }
}

/// Sets the field at `path` to `value`. A `null` met before the last step is an unset
/// optional table and becomes `{}` (so `devices[0].closed_loop.inflight` creates
/// `closed_loop` with its defaults). A number replacing an integer is stored as an
/// integer when it has no fractional part.
pub fn set(tree: &mut Value, path: &FieldPath, value: &Value) -> Result<(), SetError> {
    set_at(tree, &path.0, value, String::new())
}

fn set_at(node: &mut Value, segs: &[Segment], value: &Value, at: String) -> Result<(), SetError> {
    let Some((first, rest)) = segs.split_first() else {
        *node = coerce(node, value);
        return Ok(());
    };
    let here = |at: &str| {
        if at.is_empty() {
            "the scenario".to_string()
        } else {
            format!("`{at}`")
        }
    };
    if node.is_null() && matches!(first, Segment::Key(_)) {
        *node = Value::Object(Default::default());
    }
    match (first, node) {
        (Segment::Key(k), Value::Object(map)) => {
            let next = if at.is_empty() {
                k.clone()
            } else {
                format!("{at}.{k}")
            };
            if !map.contains_key(k) {
                if !map.is_empty() {
                    return Err(SetError::Absent(format!(
                        "{} has no field `{k}` (fields: {})",
                        here(&at),
                        map.keys().cloned().collect::<Vec<_>>().join(", ")
                    )));
                }
                // A table created from null: its fields are whatever its type
                // accepts, checked when the scenario is deserialized.
                map.insert(k.clone(), Value::Null);
            }
            set_at(map.get_mut(k).expect("present"), rest, value, next)
        }
        (Segment::Index(i), Value::Array(items)) => {
            let n = items.len();
            match items.get_mut(*i) {
                Some(child) => set_at(child, rest, value, format!("{at}[{i}]")),
                None => Err(SetError::Absent(format!(
                    "{} has {n} entries, so there is no index {i}",
                    here(&at)
                ))),
            }
        }
        (Segment::All, Value::Array(items)) => {
            if items.is_empty() {
                return Err(SetError::Absent(format!(
                    "{} is empty, so `[*]` sets nothing",
                    here(&at)
                )));
            }
            for (i, child) in items.iter_mut().enumerate() {
                set_at(child, rest, value, format!("{at}[{i}]"))?;
            }
            Ok(())
        }
        (Segment::Key(k), other) => Err(SetError::Mismatch(format!(
            "{} is {}, not a table, so it has no field `{k}`",
            here(&at),
            kind(other)
        ))),
        (_, other) => Err(SetError::Mismatch(format!(
            "{} is {}, not a list, so it cannot be indexed",
            here(&at),
            kind(other)
        ))),
    }
}

fn coerce(old: &Value, new: &Value) -> Value {
    if let (Value::Number(o), Value::Number(n)) = (old, new) {
        if (o.is_i64() || o.is_u64()) && n.is_f64() {
            let f = n.as_f64().expect("f64");
            if f.fract() == 0.0 && (0.0..1.8e19).contains(&f) {
                return Value::from(f as u64);
            }
            if f.fract() == 0.0 && f < 0.0 && f > -9.2e18 {
                return Value::from(f as i64);
            }
        }
    }
    new.clone()
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "unset",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a table",
    }
}

/// Reads the value at a concrete path (no `[*]`).
pub fn get<'a>(tree: &'a Value, path: &FieldPath) -> Option<&'a Value> {
    path.0.iter().try_fold(tree, |node, s| match s {
        Segment::Key(k) => node.get(k),
        Segment::Index(i) => node.get(i),
        Segment::All => None,
    })
}

/// Whether the concrete field named `field` (as in a validation error, e.g.
/// `devices[2].arrival.rate_per_s`) lies at or under `path`.
pub fn covers(path: &FieldPath, field: &str) -> bool {
    let Ok(FieldPath(segs)) = FieldPath::parse(field) else {
        return false;
    };
    path.0.len() <= segs.len()
        && path.0.iter().zip(&segs).all(|(p, s)| match (p, s) {
            (Segment::All, Segment::Index(_)) => true,
            _ => p == s,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_and_prints_paths() {
        for text in [
            "max_loops",
            "costs.cpu.freq_mhz",
            "devices[0].arrival.rate_per_s",
            "devices[*].vector",
            "a[1][2].b",
        ] {
            assert_eq!(FieldPath::parse(text).unwrap().to_string(), text);
        }
        for bad in ["", ".a", "a..b", "a[", "a[x]", "[0]", "a b", "a.[0]"] {
            assert!(FieldPath::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn sets_fields_indices_and_every_element() {
        let mut t = json!({"a": 1, "d": [{"r": 1.0}, {"r": 2.0}], "o": null});
        set(&mut t, &FieldPath::parse("d[*].r").unwrap(), &json!(5.5)).unwrap();
        assert_eq!(t["d"], json!([{"r": 5.5}, {"r": 5.5}]));
        set(&mut t, &FieldPath::parse("a").unwrap(), &json!(3.0)).unwrap();
        assert_eq!(t["a"], json!(3));
        assert!(t["a"].is_u64());
        set(&mut t, &FieldPath::parse("o.x.y").unwrap(), &json!(true)).unwrap();
        assert_eq!(t["o"], json!({"x": {"y": true}}));
    }

    #[test]
    fn errors_name_the_place() {
        let mut t = json!({"a": 1, "d": [{"r": 1.0}]});
        let e = set(&mut t, &FieldPath::parse("b").unwrap(), &json!(1)).unwrap_err();
        assert!(matches!(e, SetError::Absent(_)), "{e:?}");
        let e = e.to_string();
        assert!(
            e.contains("no field `b`") && e.contains("fields: a, d"),
            "{e}"
        );
        let e = set(&mut t, &FieldPath::parse("d[3].r").unwrap(), &json!(1)).unwrap_err();
        assert!(matches!(e, SetError::Absent(_)), "{e:?}");
        assert!(e.to_string().contains("`d` has 1 entries"), "{e}");
        let mut empty = json!({"d": []});
        let e = set(&mut empty, &FieldPath::parse("d[*].r").unwrap(), &json!(1)).unwrap_err();
        assert!(matches!(e, SetError::Absent(_)), "{e:?}");
        let e = set(&mut t, &FieldPath::parse("a.x").unwrap(), &json!(1)).unwrap_err();
        assert!(matches!(e, SetError::Mismatch(_)), "{e:?}");
        assert!(e.to_string().contains("`a` is a number"), "{e}");
    }

    #[test]
    fn covers_matches_wildcards_and_subfields() {
        let p = FieldPath::parse("devices[*].arrival").unwrap();
        assert!(covers(&p, "devices[2].arrival.rate_per_s"));
        assert!(!covers(&p, "devices[2].vector"));
        assert!(covers(&FieldPath::parse("mode").unwrap(), "mode"));
    }
}
