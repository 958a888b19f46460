//! Per-device latency samples: a short buffer in front of a histogram.
//!
//! A system keeps one latency histogram per NVMe drive and per NIC queue. With three
//! significant digits up to milliseconds each histogram's counts run to tens of KiB,
//! so a `large` run (256 NIC queues, 16 drives) spread 26 MB of counters over the
//! heap, and every sample incremented one counter far from any other the run had just
//! touched. Most of those histograms see a few hundred samples in a whole run.
//!
//! A [`LatencyLog`] appends each sample to a small vector and adds the vector to the
//! histogram only when it fills, and once more when the histogram is read. A histogram
//! holds counts, not order, so the counts, and every percentile and extreme read from
//! them, are exactly those of recording each sample as it came. A log that never fills
//! its buffer never allocates a histogram at all: even at its smallest range one holds
//! 2,048 counters (16 KiB) at three significant digits.

use hdrhistogram::Histogram;
use std::borrow::Cow;

/// Samples a log holds before it adds them to its histogram: 4 KiB of `u64`s.
const BUFFERED_SAMPLES: usize = 512;

/// Latency samples of one device, in ns, read back as a histogram.
#[derive(Clone, Debug, Default)]
pub(super) struct LatencyLog {
    /// Created when the buffer first fills.
    histogram: Option<Histogram<u64>>,
    unflushed: Vec<u64>,
}

/// `LatencyLog::default()` is an empty log; it allocates nothing until its first sample.
impl LatencyLog {
    /// Takes one sample.
    pub fn record(&mut self, ns: u64) {
        if self.unflushed.capacity() == 0 {
            self.unflushed.reserve_exact(BUFFERED_SAMPLES);
        }
        self.unflushed.push(ns);
        if self.unflushed.len() == BUFFERED_SAMPLES {
            add_all(
                self.histogram.get_or_insert_with(empty_histogram),
                &self.unflushed,
            );
            self.unflushed.clear();
        }
    }

    /// Every sample taken so far, as one histogram. Borrowed when nothing waits in the
    /// buffer; otherwise a copy with the buffer added, so reading never changes the log.
    pub fn histogram(&self) -> Cow<'_, Histogram<u64>> {
        match (&self.histogram, self.unflushed.is_empty()) {
            (Some(h), true) => Cow::Borrowed(h),
            (h, _) => {
                let mut h = h.clone().unwrap_or_else(empty_histogram);
                add_all(&mut h, &self.unflushed);
                Cow::Owned(h)
            }
        }
    }
}

/// A histogram that starts at the smallest range and grows to the largest sample it is
/// given, with buckets, and so percentiles, identical to one allocated for the whole
/// range up front. The growth is bounded: no latency exceeds the run's length, which
/// `LATENCY_MAX_NS` caps.
pub(super) fn empty_histogram() -> Histogram<u64> {
    let mut h = Histogram::new_with_bounds(1, 2, 3).expect("static histogram bounds are valid");
    h.auto(true);
    h
}

/// Records every value, growing the histogram as needed (`saturating_record` alone
/// would clamp to its current top instead of growing).
fn add_all(h: &mut Histogram<u64>, values: &[u64]) {
    for &ns in values {
        if h.record(ns).is_err() {
            h.saturating_record(ns);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn direct(values: &[u64]) -> Histogram<u64> {
        let mut h = empty_histogram();
        add_all(&mut h, values);
        h
    }

    fn summary(h: &Histogram<u64>) -> Vec<u64> {
        let mut s = vec![h.len(), h.min(), h.max()];
        for q in [0.0, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0] {
            s.push(h.value_at_quantile(q));
        }
        s.extend(h.iter_recorded().map(|v| v.count_at_value()));
        s
    }

    #[test]
    fn a_log_reads_back_the_histogram_of_recording_each_sample_as_it_came() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        // Fewer samples than the buffer holds, exactly a buffer, and several buffers
        // plus a remainder; values spread over six decades so the histogram grows.
        for n in [0, 1, 37, BUFFERED_SAMPLES, 3 * BUFFERED_SAMPLES + 5] {
            let values: Vec<u64> = (0..n)
                .map(|_| 10f64.powf(rng.gen_range(0.0..6.0)) as u64 + 1)
                .collect();
            let mut log = LatencyLog::default();
            for &v in &values {
                log.record(v);
            }
            let expected = direct(&values);
            assert_eq!(summary(&log.histogram()), summary(&expected), "{n} samples");
            assert_eq!(*log.histogram(), expected, "{n} samples");
        }
    }

    #[test]
    fn a_log_read_between_samples_still_counts_every_sample_taken_after() {
        // Reads before, at and after each flush: what a read returns, and what later
        // samples add to, must both be the whole stream so far.
        let values: Vec<u64> = (0..2 * BUFFERED_SAMPLES as u64 + 3)
            .map(|i| 1 + i * 7919 % 100_000)
            .collect();
        let mut log = LatencyLog::default();
        for (i, &v) in values.iter().enumerate() {
            log.record(v);
            let n = i + 1;
            if n % 97 == 0 || n % BUFFERED_SAMPLES <= 1 {
                assert_eq!(*log.histogram(), direct(&values[..n]), "after {n} samples");
            }
        }
        assert_eq!(*log.histogram(), direct(&values), "all samples");
    }

    #[test]
    fn a_log_allocates_its_histogram_only_when_its_buffer_fills() {
        let mut log = LatencyLog::default();
        for v in 0..(BUFFERED_SAMPLES as u64 - 1) {
            log.record(1_000_000 + v);
        }
        assert!(log.histogram.is_none());
        assert_eq!(log.histogram().max(), direct(&[1_000_000 + 510]).max());
        log.record(5);
        assert!(log.histogram.is_some());
        assert!(log.unflushed.is_empty());
        assert_eq!(log.histogram().min(), direct(&[5]).min());
    }
}
