//! Arrival traces: CSV files of event timestamps, loaded once and replayed.
//!
//! Format, one event per line:
//! - the first column is the timestamp in nanoseconds, a non-negative integer; further
//!   columns (packet size, flow, ...) are ignored;
//! - an optional header on the first non-comment line whose first column is
//!   `timestamp_ns`;
//! - blank lines and lines starting with `#` are skipped;
//! - timestamps never decrease (equal ones are simultaneous events).
//!
//! Timestamps are offsets from the start of the replay. A trace captured with absolute
//! clock values can be replayed with `rebase = true`, which subtracts the first one.
//!
//! Any other content is a [`TraceError`] naming the file and the 1-based line.
//! The loaded timestamps sit in an `Arc<[u64]>`, so every device replaying one trace
//! shares one copy and cloning a generator is cheap.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::DeviceError;

/// Largest timestamp a trace may hold, ns: `u64` picoseconds end at 1.8e19 ps.
pub const TRACE_MAX_NS: u64 = u64::MAX / 1_000 / 2;
/// Largest trace file read, bytes (1 GiB): a bound on what a mistaken path (a device
/// file, a disk image) can make the loader read.
pub const TRACE_MAX_BYTES: u64 = 1 << 30;
/// Longest line, bytes. A timestamp and a few ignored columns fit many times over.
pub const TRACE_MAX_LINE_BYTES: usize = 4096;
/// Most events a trace may hold (8 bytes each in memory: 800 MB).
pub const TRACE_MAX_EVENTS: usize = 100_000_000;

/// Why a trace file could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    #[error("{file}: cannot read the trace: {reason}")]
    Unreadable { file: PathBuf, reason: String },
    #[error("{file}:{line}: `{text}` is not a timestamp: expected a non-negative integer number of nanoseconds (at most {TRACE_MAX_NS}) in the first column")]
    NotATimestamp {
        file: PathBuf,
        line: usize,
        text: String,
    },
    #[error("{file}:{line}: timestamp {value} ns is earlier than {previous} ns on the line before it: timestamps must not decrease")]
    Decreasing {
        file: PathBuf,
        line: usize,
        value: u64,
        previous: u64,
    },
    #[error("{file}: the trace holds no timestamps")]
    Empty { file: PathBuf },
    #[error("{file}:{line}: the line is longer than {TRACE_MAX_LINE_BYTES} bytes: is this a CSV file of timestamps?")]
    LineTooLong { file: PathBuf, line: usize },
    #[error("{file}: the trace is larger than {limit}: is this a CSV file of timestamps?")]
    TooLarge { file: PathBuf, limit: String },
}

impl TraceError {
    /// The file the error is about.
    pub fn file(&self) -> &Path {
        match self {
            TraceError::Unreadable { file, .. }
            | TraceError::NotATimestamp { file, .. }
            | TraceError::Decreasing { file, .. }
            | TraceError::Empty { file }
            | TraceError::LineTooLong { file, .. }
            | TraceError::TooLarge { file, .. } => file,
        }
    }

    /// The 1-based line the error is about, if it is about one.
    pub fn line(&self) -> Option<usize> {
        match self {
            TraceError::NotATimestamp { line, .. }
            | TraceError::Decreasing { line, .. }
            | TraceError::LineTooLong { line, .. } => Some(*line),
            _ => None,
        }
    }
}

/// A trace error as the crate's configuration error: `field` is `file:line` (or the
/// file), `value` the offending text, `allowed` what the line must hold.
impl From<TraceError> for DeviceError {
    fn from(e: TraceError) -> DeviceError {
        let file = e.file().display().to_string();
        let (field, value, allowed) = match &e {
            TraceError::Unreadable { reason, .. } => (
                file,
                format!("unreadable ({reason})"),
                "a readable CSV file of timestamps".to_string(),
            ),
            TraceError::NotATimestamp { line, text, .. } => (
                format!("{file}:{line}"),
                format!("{text:?}"),
                format!("a timestamp in ns, an integer in 0..={TRACE_MAX_NS}, in the first column"),
            ),
            TraceError::Decreasing {
                line,
                value,
                previous,
                ..
            } => (
                format!("{file}:{line}"),
                value.to_string(),
                format!("a timestamp of at least {previous} ns (timestamps must not decrease)"),
            ),
            TraceError::Empty { .. } => (
                file,
                "no timestamps".to_string(),
                "at least one timestamp".to_string(),
            ),
            TraceError::LineTooLong { line, .. } => (
                format!("{file}:{line}"),
                format!("a line of more than {TRACE_MAX_LINE_BYTES} bytes"),
                "a CSV line with a timestamp in the first column".to_string(),
            ),
            TraceError::TooLarge { limit, .. } => (
                file,
                format!("more than {limit}"),
                format!(
                    "a trace of at most {TRACE_MAX_BYTES} bytes and {TRACE_MAX_EVENTS} timestamps"
                ),
            ),
        };
        DeviceError::InvalidParameter {
            field,
            value,
            allowed,
        }
    }
}

/// A loaded trace: timestamps in ns from the start of the replay.
#[derive(Clone, PartialEq, Eq)]
pub struct TraceArrival {
    file: PathBuf,
    times_ns: Arc<[u64]>,
}

impl fmt::Debug for TraceArrival {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceArrival")
            .field("file", &self.file)
            .field("events", &self.times_ns.len())
            .finish()
    }
}

impl TraceArrival {
    /// Reads and parses `path` as a stream, line by line; with `rebase`, the first
    /// timestamp becomes 0. The file, each line and the event count are bounded
    /// ([`TRACE_MAX_BYTES`], [`TRACE_MAX_LINE_BYTES`], [`TRACE_MAX_EVENTS`]), so a wrong
    /// path such as `/dev/zero` is an error, not an endless read.
    pub fn load(path: &Path, rebase: bool) -> Result<TraceArrival, TraceError> {
        let file = std::fs::File::open(path).map_err(|e| TraceError::Unreadable {
            file: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        TraceArrival::read(path, std::io::BufReader::new(file), rebase)
    }

    /// Parses CSV `text`; `file` only names the source in errors.
    pub fn parse(file: &Path, text: &str, rebase: bool) -> Result<TraceArrival, TraceError> {
        TraceArrival::read(file, text.as_bytes(), rebase)
    }

    /// Parses CSV from `input` under the same bounds as [`load`](Self::load).
    pub fn read(
        file: &Path,
        input: impl std::io::BufRead,
        rebase: bool,
    ) -> Result<TraceArrival, TraceError> {
        TraceArrival::read_bounded(file, input, rebase, TRACE_MAX_BYTES)
    }

    fn read_bounded(
        file: &Path,
        input: impl std::io::BufRead,
        rebase: bool,
        max_bytes: u64,
    ) -> Result<TraceArrival, TraceError> {
        use std::io::BufRead;
        let unreadable = |e: std::io::Error| TraceError::Unreadable {
            file: file.to_path_buf(),
            reason: e.to_string(),
        };
        // One byte past each bound tells "at the bound" from "past it".
        let mut input = input.take(max_bytes + 1);
        let mut times: Vec<u64> = Vec::new();
        let mut seen_content = false;
        let mut buf = Vec::with_capacity(64);
        let mut line = 0;
        loop {
            buf.clear();
            let n = std::io::Read::take(&mut input, TRACE_MAX_LINE_BYTES as u64 + 1)
                .read_until(b'\n', &mut buf)
                .map_err(unreadable)?;
            if n == 0 {
                break;
            }
            line += 1;
            if input.limit() == 0 {
                return Err(TraceError::TooLarge {
                    file: file.to_path_buf(),
                    limit: format!("{max_bytes} bytes"),
                });
            }
            let ended = buf.last() == Some(&b'\n');
            if buf.len() > TRACE_MAX_LINE_BYTES && !(ended && buf.len() == TRACE_MAX_LINE_BYTES + 1)
            {
                return Err(TraceError::LineTooLong {
                    file: file.to_path_buf(),
                    line,
                });
            }
            let raw = String::from_utf8_lossy(&buf);
            let trimmed = raw.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let first = trimmed.split(',').next().unwrap_or("").trim();
            let header = !seen_content && first.eq_ignore_ascii_case("timestamp_ns");
            seen_content = true;
            if header {
                continue;
            }
            let value = first
                .parse::<u64>()
                .ok()
                .filter(|v| *v <= TRACE_MAX_NS)
                .ok_or_else(|| TraceError::NotATimestamp {
                    file: file.to_path_buf(),
                    line,
                    text: first.chars().take(64).collect(),
                })?;
            if let Some(&previous) = times.last() {
                if value < previous {
                    return Err(TraceError::Decreasing {
                        file: file.to_path_buf(),
                        line,
                        value,
                        previous,
                    });
                }
            }
            if times.len() == TRACE_MAX_EVENTS {
                return Err(TraceError::TooLarge {
                    file: file.to_path_buf(),
                    limit: format!("{TRACE_MAX_EVENTS} timestamps"),
                });
            }
            times.push(value);
        }
        if times.is_empty() {
            return Err(TraceError::Empty {
                file: file.to_path_buf(),
            });
        }
        if rebase {
            let t0 = times[0];
            times.iter_mut().for_each(|t| *t -= t0);
        }
        Ok(TraceArrival {
            file: file.to_path_buf(),
            times_ns: times.into(),
        })
    }

    /// The file the trace came from.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The timestamps, ns, non-decreasing.
    pub fn times_ns(&self) -> &[u64] {
        &self.times_ns
    }

    /// Number of events.
    pub fn len(&self) -> usize {
        self.times_ns.len()
    }

    /// Always false: an empty trace does not load.
    pub fn is_empty(&self) -> bool {
        self.times_ns.is_empty()
    }

    /// Events per second over the trace's span (first to last timestamp); infinite
    /// when every event has the same timestamp.
    pub fn mean_rate_per_s(&self) -> f64 {
        let span_ns = self.times_ns[self.times_ns.len() - 1] - self.times_ns[0];
        if span_ns == 0 {
            return f64::INFINITY;
        }
        (self.times_ns.len() - 1) as f64 / (span_ns as f64 * 1e-9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<TraceArrival, TraceError> {
        TraceArrival::parse(Path::new("t.csv"), text, false)
    }

    #[test]
    fn header_comments_blank_lines_and_extra_columns_are_accepted() {
        let t = parse("# capture 1\ntimestamp_ns,bytes\n\n100,64\n250,1500\n250\n").unwrap();
        assert_eq!(t.times_ns(), &[100, 250, 250]);
        assert_eq!(t.len(), 3);
    }

    /// `/dev/zero` (or any endless stream without newlines) stops at the first line's
    /// bound instead of being read to the end.
    #[test]
    fn an_endless_stream_without_newlines_is_refused_at_line_one() {
        let zeros = std::io::BufReader::new(std::io::repeat(0));
        let e = TraceArrival::read(Path::new("/dev/zero"), zeros, false).unwrap_err();
        assert_eq!(
            e,
            TraceError::LineTooLong {
                file: "/dev/zero".into(),
                line: 1
            }
        );
        let d = DeviceError::from(e).to_string();
        assert!(d.contains("/dev/zero:1"), "{d}");
    }

    #[test]
    fn a_line_at_the_bound_is_read_and_one_past_it_is_refused() {
        let pad = |n: usize| format!("7,{}\n", "x".repeat(n - 2));
        let at = pad(TRACE_MAX_LINE_BYTES);
        assert_eq!(parse(&format!("5\n{at}")).unwrap().times_ns(), &[5, 7]);
        let past = pad(TRACE_MAX_LINE_BYTES + 1);
        let e = parse(&format!("5\n{past}9\n")).unwrap_err();
        assert_eq!(e.line(), Some(2));
        assert!(matches!(e, TraceError::LineTooLong { .. }), "{e:?}");
    }

    /// An endless stream of valid lines stops at the file-size bound.
    #[test]
    fn an_endless_stream_of_lines_stops_at_the_size_bound() {
        // Blank lines cost no memory, so the byte bound is what stops them. The bound is
        // lowered here so the test reads kilobytes, not a gigabyte.
        let blank = std::io::BufReader::new(std::io::repeat(b'\n'));
        let e = TraceArrival::read_bounded(Path::new("blank"), blank, false, 10_000).unwrap_err();
        assert_eq!(
            e,
            TraceError::TooLarge {
                file: "blank".into(),
                limit: "10000 bytes".into()
            }
        );
        // A file of exactly the bound is read.
        let ok = "1\n".repeat(5_000);
        let t = TraceArrival::read_bounded(Path::new("ok"), ok.as_bytes(), false, 10_000).unwrap();
        assert_eq!(t.len(), 5_000);
    }

    #[test]
    fn a_last_line_of_exactly_the_bound_without_a_newline_is_read() {
        let last = format!("7,{}", "x".repeat(TRACE_MAX_LINE_BYTES - 2));
        assert_eq!(parse(&format!("5\n{last}")).unwrap().times_ns(), &[5, 7]);
    }

    /// Picoseconds in a u64 end at 1.8e19: the largest timestamp is 9 223 372 036 854 775
    /// ns (half of that range, so replays can still add offsets).
    #[test]
    fn the_largest_timestamp() {
        assert!(parse("9223372036854775\n").is_ok());
        let e = parse("9223372036854776\n").unwrap_err();
        assert!(
            matches!(e, TraceError::NotATimestamp { line: 1, .. }),
            "{e:?}"
        );
    }

    #[test]
    fn mean_rate_over_the_span_without_rebase() {
        let t = parse("1000\n1500\n2000\n").unwrap();
        assert!((t.mean_rate_per_s() - 2e6).abs() < 1e-3);
        assert!(!t.is_empty() && t.len() == 3);
        assert_eq!(parse("5\n5\n").unwrap().mean_rate_per_s(), f64::INFINITY);
    }

    #[test]
    fn rebase_subtracts_the_first_timestamp() {
        let t = TraceArrival::parse(Path::new("t.csv"), "1000\n1500\n", true).unwrap();
        assert_eq!(t.times_ns(), &[0, 500]);
        assert!((t.mean_rate_per_s() - 2e6).abs() < 1e-3);
    }

    #[test]
    fn malformed_lines_name_file_and_line() {
        let e = parse("timestamp_ns\n10\n2x0\n").unwrap_err();
        assert_eq!(e.line(), Some(3));
        assert_eq!(e.file(), Path::new("t.csv"));
        assert!(e.to_string().starts_with("t.csv:3:"), "{e}");
        let e = parse("10\n-5\n").unwrap_err();
        assert!(
            matches!(e, TraceError::NotATimestamp { line: 2, .. }),
            "{e:?}"
        );
        let e = parse("10\n1.5\n").unwrap_err();
        assert_eq!(e.line(), Some(2));
        // A header is only allowed before the first timestamp.
        let e = parse("10\ntimestamp_ns\n").unwrap_err();
        assert_eq!(e.line(), Some(2));
    }

    #[test]
    fn decreasing_timestamps_and_empty_files_are_errors() {
        let e = parse("10\n20\n15\n").unwrap_err();
        assert!(
            matches!(
                e,
                TraceError::Decreasing {
                    line: 3,
                    value: 15,
                    previous: 20,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(matches!(
            parse("# nothing\n\n").unwrap_err(),
            TraceError::Empty { .. }
        ));
        let too_big = format!("{}\n", TRACE_MAX_NS + 1);
        assert_eq!(parse(&too_big).unwrap_err().line(), Some(1));
    }

    #[test]
    fn missing_file_is_unreadable_and_converts_to_a_device_error() {
        let e = TraceArrival::load(Path::new("/nonexistent/irqsim/trace.csv"), false).unwrap_err();
        assert!(matches!(e, TraceError::Unreadable { .. }));
        let d: DeviceError = parse("1\nx\n").unwrap_err().into();
        let msg = d.to_string();
        assert!(msg.contains("t.csv:2"), "{msg}");
    }

    #[test]
    fn load_reads_a_real_file() {
        let dir = std::env::temp_dir().join(format!("irqsim-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ok.csv");
        std::fs::write(&path, "timestamp_ns\n0\n1000\n").unwrap();
        let t = TraceArrival::load(&path, false).unwrap();
        assert_eq!(t.times_ns(), &[0, 1000]);
        std::fs::write(&path, "0\nabc\n").unwrap();
        let e = TraceArrival::load(&path, false).unwrap_err();
        assert!(e.to_string().contains("ok.csv:2"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
