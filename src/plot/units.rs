//! Units of scenario fields and metrics, guessed from their names, and scaling to
//! readable magnitudes (M/s rather than 2000000).

/// The unit of a field or metric, from the last part of its name.
pub fn unit_of(name: &str) -> Option<&'static str> {
    let last = name.rsplit(['.', ']']).next().unwrap_or(name);
    let ends = |s: &str| last.ends_with(s);
    Some(match last {
        "handled_per_s" => "MSIs/s",
        "max_loops" => "iterations",
        "inflight" => "descriptors",
        "interrupts_taken" => "interrupts",
        "events" => "events",
        "duration_us" => "µs",
        // Network throughput is in bits; DSA's and PCIe's bandwidths are in bytes.
        "tx_gbps" | "wire_gbps" | "line_gbps" => "Gbit/s",
        _ if last == "iops" || ends("_iops") => "IO/s",
        _ if ends("gbytes_per_s") => "GB/s",
        _ if ends("_per_s") => "1/s",
        _ if ends("_mps") => "M/s",
        _ if ends("_ns") => "ns",
        _ if ends("_us") => "µs",
        _ if ends("_mhz") => "MHz",
        _ if ends("_cycles") => "cycles",
        _ if ends("_bytes") => "bytes",
        _ if ends("_gbps") => "GB/s",
        _ if last.contains("frac") => "fraction",
        _ if last.contains("_per_") => "ratio",
        _ if last.starts_with("msis_") && last != "msis_balanced" => "MSIs",
        _ if last.starts_with("notifications_") => "notifications",
        _ => return None,
    })
}

/// How to show values: multiply by `factor`, label the axis `label`.
#[derive(Clone, Debug, PartialEq)]
pub struct Scaled {
    /// Multiply values by this to show them.
    pub factor: f64,
    /// `name (unit)`, with the scaled unit.
    pub label: String,
}

/// The axis label `name (unit)` with the unit scaled so that `max_abs` reads as a
/// number below a thousand or so: rates in k/M/G per second, times in µs/ms, counts
/// in thousands/millions.
pub fn scale_for_display(name: &str, unit: Option<&str>, max_abs: f64) -> Scaled {
    let Some(unit) = unit else {
        return Scaled {
            factor: 1.0,
            label: name.to_string(),
        };
    };
    let (factor, unit) = match unit {
        "ns" if max_abs >= 1e7 => (1e-6, "ms".to_string()),
        "ns" if max_abs >= 1e4 => (1e-3, "µs".to_string()),
        "µs" if max_abs >= 1e4 => (1e-3, "ms".to_string()),
        "fraction" | "ratio" | "M/s" | "MHz" | "GB/s" => (1.0, unit.to_string()),
        u if u.ends_with("/s") || !u.contains('/') => {
            let (f, p) = if max_abs >= 1e9 {
                (1e-9, "G")
            } else if max_abs >= 1e6 {
                (1e-6, "M")
            } else if max_abs >= 1e4 {
                (1e-3, "k")
            } else {
                (1.0, "")
            };
            let u = match (p, u) {
                ("", u) => u.to_string(),
                (p, "1/s") => format!("{p}/s"),
                (p, u) => format!("{p} {u}"),
            };
            (f, u)
        }
        u => (1.0, u.to_string()),
    };
    // `latency_p99_ns (µs)` would read as a contradiction; `(in µs)` does not.
    let named_in_time = name.ends_with("_ns") || name.ends_with("_us");
    let label = if factor != 1.0 && named_in_time {
        format!("{name} (in {unit})")
    } else {
        format!("{name} ({unit})")
    };
    Scaled { factor, label }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_come_from_name_endings() {
        assert_eq!(unit_of("devices[*].arrival.rate_per_s"), Some("1/s"));
        assert_eq!(unit_of("handled_per_s"), Some("MSIs/s"));
        assert_eq!(unit_of("latency_p99_ns"), Some("ns"));
        assert_eq!(unit_of("cpu_busy_frac_mean"), Some("fraction"));
        assert_eq!(unit_of("costs.cpu.freq_mhz"), Some("MHz"));
        assert_eq!(unit_of("mode"), None);
    }

    #[test]
    fn scaling_picks_a_readable_prefix() {
        let s = scale_for_display("rate", Some("1/s"), 4e6);
        assert_eq!((s.factor, s.label.as_str()), (1e-6, "rate (M/s)"));
        let s = scale_for_display("handled", Some("MSIs/s"), 2e5);
        assert_eq!((s.factor, s.label.as_str()), (1e-3, "handled (k MSIs/s)"));
        let s = scale_for_display("p99", Some("ns"), 25_000.0);
        assert_eq!((s.factor, s.label.as_str()), (1e-3, "p99 (µs)"));
        let s = scale_for_display("latency_p99_ns", Some("ns"), 2.5e7);
        assert_eq!(
            (s.factor, s.label.as_str()),
            (1e-6, "latency_p99_ns (in ms)")
        );
        let s = scale_for_display("latency_p99_ns", Some("ns"), 250.0);
        assert_eq!(s.label, "latency_p99_ns (ns)");
        let s = scale_for_display("busy", Some("fraction"), 0.5);
        assert_eq!((s.factor, s.label.as_str()), (1.0, "busy (fraction)"));
        assert_eq!(scale_for_display("mode", None, 1.0).label, "mode");
    }
}
