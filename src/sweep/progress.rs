//! Progress on stderr: an indicatif bar when stderr is a terminal, otherwise a plain
//! line (points done, ETA) at most every 30 seconds, so batch logs stay short.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use super::ProgressMode;

/// How often a non-terminal progress line is printed.
const LINE_EVERY: Duration = Duration::from_secs(30);

pub(crate) struct Progress {
    total: usize,
    done: usize,
    quiet: bool,
    bar: Option<ProgressBar>,
    start: Instant,
    last_line: Instant,
}

impl Progress {
    pub(crate) fn new(total: usize, mode: ProgressMode) -> Progress {
        let quiet = mode == ProgressMode::Quiet;
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let bar = ProgressBar::new(total as u64);
            bar.set_style(
                ProgressStyle::with_template(
                    "sweep [{bar:32}] {pos}/{len} points, {elapsed} elapsed, ETA {eta}",
                )
                .expect("a valid template")
                .progress_chars("=> "),
            );
            bar
        });
        let now = Instant::now();
        Progress {
            total,
            done: 0,
            quiet,
            bar,
            start: now,
            last_line: now,
        }
    }

    pub(crate) fn update(&mut self, done: usize) {
        self.done = done;
        if self.quiet {
            return;
        }
        if let Some(bar) = &self.bar {
            bar.set_position(done as u64);
        } else if self.last_line.elapsed() >= LINE_EVERY && done < self.total {
            self.last_line = Instant::now();
            eprintln!("{}", self.line());
        }
    }

    /// `sweep: 12/40 points, 1m05s elapsed, ETA 2m31s`.
    pub(crate) fn line(&self) -> String {
        let elapsed = self.start.elapsed();
        let eta = if self.done == 0 {
            "unknown".to_string()
        } else {
            let per = elapsed.as_secs_f64() / self.done as f64;
            human_duration(per * (self.total - self.done) as f64)
        };
        format!(
            "sweep: {}/{} points, {} elapsed, ETA {eta}",
            self.done,
            self.total,
            human_duration(elapsed.as_secs_f64())
        )
    }

    pub(crate) fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

/// `0.42s`, `12.0s`, `3m05s`, `2h07m`.
pub fn human_duration(s: f64) -> String {
    if s < 10.0 {
        format!("{s:.2}s")
    } else if s < 60.0 {
        format!("{s:.1}s")
    } else if s < 3600.0 {
        format!("{}m{:02}s", (s / 60.0) as u64, (s % 60.0) as u64)
    } else {
        format!(
            "{}h{:02}m",
            (s / 3600.0) as u64,
            ((s % 3600.0) / 60.0) as u64
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        assert_eq!(human_duration(0.42), "0.42s");
        assert_eq!(human_duration(12.04), "12.0s");
        assert_eq!(human_duration(185.0), "3m05s");
        assert_eq!(human_duration(7620.0), "2h07m");
    }

    #[test]
    fn eta_is_unknown_before_the_first_point() {
        let p = Progress::new(10, ProgressMode::Quiet);
        assert!(p.line().contains("0/10 points"));
        assert!(p.line().ends_with("ETA unknown"));
    }
}
