//! MSIs waiting together at one place (a vector's PIR or IRR bit, a VMD MSI they
//! merged into), in memory that does not grow with how many there are.
//!
//! A starved vector — its bit set in IRR while higher-priority work keeps the CPU
//! busy — merges every later MSI into the same bit for as long as it starves. Keeping
//! one token per merged MSI makes memory grow with run length. A bag keeps the first
//! [`EXACT_TOKENS`] as tokens (ids and raise times, for traces and observers) and the
//! rest as spans of raise times with a count each. Spans are merged as they age: a
//! span is never wider than [`AGE_RESOLUTION`] of its age, measured from its newest
//! raise to the newest raise in the bag, and the age only grows until the MSIs are
//! served. A latency taken at a span's midpoint is therefore within half that fraction
//! of the true one, and the number of spans grows with the logarithm of the oldest
//! age, not with the count.

use sim_core::SimTime;

use super::ledger::MsiToken;

/// MSIs a bag keeps one by one before it keeps spans.
pub const EXACT_TOKENS: usize = 64;

/// Widest a span may be, as a fraction of its age (see the module docs).
pub const AGE_RESOLUTION: f64 = 1.0 / 64.0;

/// Most spans a bag holds; past it the bag merges coarser than [`AGE_RESOLUTION`].
/// The resolution's own bound (about `ln(oldest age / 1 ps) / AGE_RESOLUTION`, some
/// 1,700 spans for one simulated second) stays below it in any run of irqsim's length.
pub const MAX_SPANS: usize = 4096;

/// Spans a bag lets accumulate before its first merge pass.
const FIRST_PASS_AT: usize = 64;

/// MSIs kept as one count, raised between `first` and `last` (inclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaiseSpan {
    /// The earliest raise time in the span.
    pub first: SimTime,
    /// The latest raise time in the span.
    pub last: SimTime,
    /// MSIs in the span (at least 1).
    pub count: u64,
}

impl RaiseSpan {
    /// The raise time a latency of this span's MSIs is measured from.
    pub fn midpoint(&self) -> SimTime {
        SimTime(self.first.0 + (self.last.0 - self.first.0) / 2)
    }
}

/// MSIs that wait and move together: exact tokens, then spans (see module docs).
///
/// Most places hold one MSI at a time, and the ledger keeps four places for every
/// vector of every CPU, so a bag keeps a lone MSI in itself and moves to a heap part
/// only for the second. That keeps the bag at 32 bytes and spares the common case a
/// second cache line: at 1,024 CPUs the ledger's slots are a good part of what an MSI
/// touches.
#[derive(Debug, Default)]
pub struct TokenBag {
    /// The bag's MSI while it holds exactly one that came by itself. When set, `more`
    /// is absent or empty.
    only: Option<MsiToken>,
    /// Every MSI once the bag has held two; kept when the bag empties, so that a
    /// place that fills and empties often does not allocate again.
    more: Option<Box<Overflow>>,
}

impl TokenBag {
    /// MSIs in the bag.
    pub fn len(&self) -> u64 {
        match (&self.only, &self.more) {
            (Some(_), _) => 1,
            (None, Some(m)) => m.len(),
            (None, None) => 0,
        }
    }

    /// Whether the bag holds no MSI.
    pub fn is_empty(&self) -> bool {
        self.only.is_none() && self.more.as_ref().is_none_or(|m| m.is_empty())
    }

    /// MSIs kept only as spans.
    pub fn in_spans(&self) -> u64 {
        self.more.as_ref().map_or(0, |m| m.span_count)
    }

    /// Moves every MSI into `exact` and `spans` (appended), leaving the bag empty with
    /// its capacity, so a place that fills and empties often does not reallocate.
    pub fn drain_into(&mut self, exact: &mut Vec<MsiToken>, spans: &mut Vec<RaiseSpan>) {
        if let Some(msi) = self.only.take() {
            exact.push(msi);
        } else if let Some(m) = &mut self.more {
            exact.append(&mut m.exact);
            spans.append(&mut m.spans);
            m.clear();
        }
    }

    /// The MSIs kept one by one, in arrival order.
    pub fn exact(&self) -> &[MsiToken] {
        match (&self.only, &self.more) {
            (Some(msi), _) => std::slice::from_ref(msi),
            (None, Some(m)) => &m.exact,
            (None, None) => &[],
        }
    }

    /// The earliest raise time of any MSI in the bag (exact: a span's `first` is one
    /// of its MSIs' raise times).
    pub fn oldest(&self) -> Option<SimTime> {
        let exact = self.exact().iter().map(|t| t.raised);
        exact.chain(self.spans().first().map(|s| s.first)).min()
    }

    /// The MSIs kept as counts, in order of raise time.
    pub fn spans(&self) -> &[RaiseSpan] {
        self.more.as_ref().map_or(&[], |m| &m.spans)
    }

    /// Adds one MSI.
    pub fn push(&mut self, msi: MsiToken) {
        if self.is_empty() {
            self.only = Some(msi);
        } else {
            self.overflow().push(msi);
        }
    }

    /// Moves every MSI of `other` into this bag.
    pub fn absorb(&mut self, mut other: TokenBag) {
        self.move_from(&mut other);
    }

    /// Moves every MSI of `other` into this bag and leaves `other` empty, with
    /// buffers. MSIs pass through the same places (PIR, harvested, in service) over
    /// and over, so the buffers go round with them instead of being freed at one
    /// place and allocated again at the next.
    pub fn move_from(&mut self, other: &mut TokenBag) {
        if self.is_empty() {
            std::mem::swap(self, other);
            other.clear();
            return;
        }
        if other.is_empty() {
            return;
        }
        let into = self.overflow();
        match (&other.only, &other.more) {
            (Some(msi), _) => into.push(*msi),
            (None, Some(from)) => {
                for &msi in &from.exact {
                    into.push(msi);
                }
                into.newest = into.newest.max(from.newest);
                for &s in &from.spans {
                    into.add_span(s);
                }
            }
            (None, None) => {}
        }
        other.clear();
    }

    /// Empties the bag, keeping its buffers.
    fn clear(&mut self) {
        self.only = None;
        if let Some(m) = &mut self.more {
            m.clear();
        }
    }

    /// Empties the bag, returning what it held.
    pub fn take(&mut self) -> TokenBag {
        std::mem::take(self)
    }

    /// The heap part, holding every MSI of the bag: a lone MSI moves into it first.
    fn overflow(&mut self) -> &mut Overflow {
        let m = self.more.get_or_insert_with(Box::default);
        if let Some(msi) = self.only.take() {
            m.push(msi);
        }
        m
    }
}

/// A bag's MSIs once it has held two: exact tokens, then spans.
#[derive(Debug, Default)]
struct Overflow {
    exact: Vec<MsiToken>,
    /// In order of raise time.
    spans: Vec<RaiseSpan>,
    span_count: u64,
    /// The newest raise time in the bag: ages are measured back from it.
    newest: SimTime,
    /// Span count at which the next merge pass runs.
    pass_at: usize,
}

impl Overflow {
    fn len(&self) -> u64 {
        self.exact.len() as u64 + self.span_count
    }

    fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.span_count == 0
    }

    fn clear(&mut self) {
        self.exact.clear();
        self.spans.clear();
        self.span_count = 0;
        self.newest = SimTime::ZERO;
        self.pass_at = 0;
    }

    fn push(&mut self, msi: MsiToken) {
        self.newest = self.newest.max(msi.raised);
        if self.exact.len() < EXACT_TOKENS && self.spans.is_empty() {
            self.exact.push(msi);
            return;
        }
        self.add_span(RaiseSpan {
            first: msi.raised,
            last: msi.raised,
            count: 1,
        });
    }

    fn add_span(&mut self, s: RaiseSpan) {
        self.newest = self.newest.max(s.last);
        self.span_count += s.count;
        // MSIs reach a place nearly in raise order; the rare earlier one is inserted.
        match self.spans.last() {
            Some(l) if l.first > s.first => {
                let at = self.spans.partition_point(|x| x.first <= s.first);
                self.spans.insert(at, s);
            }
            _ => self.spans.push(s),
        }
        if self.spans.len() >= self.pass_at.max(FIRST_PASS_AT) {
            self.merge_pass(AGE_RESOLUTION);
            let mut resolution = AGE_RESOLUTION;
            while self.spans.len() > MAX_SPANS {
                resolution *= 2.0;
                self.merge_pass(resolution);
            }
            self.pass_at = 2 * self.spans.len();
        }
    }

    /// Merges neighbouring spans, oldest first, while the merged span stays within
    /// `resolution` of its age.
    fn merge_pass(&mut self, resolution: f64) {
        let newest = self.newest;
        let mut merged: Vec<RaiseSpan> = Vec::with_capacity(self.spans.len());
        for s in self.spans.drain(..) {
            if let Some(m) = merged.last_mut() {
                let first = m.first.min(s.first);
                let last = m.last.max(s.last);
                let width = (last.0 - first.0) as f64;
                let age = newest.0.saturating_sub(last.0) as f64;
                if width <= resolution * age {
                    *m = RaiseSpan {
                        first,
                        last,
                        count: m.count + s.count,
                    };
                    continue;
                }
            }
            merged.push(s);
        }
        self.spans = merged;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tok(id: u64, raised_ps: u64) -> MsiToken {
        MsiToken {
            id,
            raised: SimTime(raised_ps),
        }
    }

    #[test]
    fn the_first_msis_stay_exact() {
        let mut b = TokenBag::default();
        for i in 0..EXACT_TOKENS as u64 {
            b.push(tok(i, i * 1000));
        }
        assert_eq!(b.exact().len(), EXACT_TOKENS);
        assert!(b.spans().is_empty());
        b.push(tok(99, 1_000_000));
        assert_eq!(
            (b.exact().len(), b.spans().len(), b.len()),
            (EXACT_TOKENS, 1, 65)
        );
    }

    #[test]
    fn a_million_msis_take_bounded_spans_and_keep_their_count() {
        // One MSI every 33 ns for 33 ms: a starved vector at 30 M/s.
        let mut b = TokenBag::default();
        let n = 1_000_000u64;
        for i in 0..n {
            b.push(tok(i, i * 33_000));
        }
        assert_eq!(b.len(), n);
        assert_eq!(b.spans().iter().map(|s| s.count).sum::<u64>() + 64, n);
        assert!(b.spans().len() < 2000, "{} spans", b.spans().len());
        // Every span stays within the resolution of its age at the newest raise.
        let newest = (n - 1) * 33_000;
        for s in b.spans() {
            let width = (s.last.0 - s.first.0) as f64;
            let age = (newest - s.last.0) as f64;
            assert!(width <= AGE_RESOLUTION * age + 1.0, "{s:?}");
        }
    }

    #[test]
    fn midpoint_latency_is_within_the_resolution() {
        let mut b = TokenBag::default();
        let n = 200_000u64;
        for i in 0..n {
            b.push(tok(i, i * 10_000));
        }
        let served_at = n * 10_000;
        // The exact latency sum against the spans' midpoint estimate.
        let exact: f64 = (0..n).map(|i| (served_at - i * 10_000) as f64).sum();
        let estimate: f64 = b
            .exact()
            .iter()
            .map(|t| (served_at - t.raised.0) as f64)
            .chain(
                b.spans()
                    .iter()
                    .map(|s| (served_at - s.midpoint().0) as f64 * s.count as f64),
            )
            .sum();
        assert!(
            ((estimate - exact) / exact).abs() < AGE_RESOLUTION / 2.0,
            "{estimate} vs {exact}"
        );
    }

    #[test]
    fn absorb_keeps_every_msi_and_the_order() {
        let mut a = TokenBag::default();
        let mut b = TokenBag::default();
        for i in 0..100 {
            a.push(tok(i, 2 * i * 1000));
            b.push(tok(1000 + i, (2 * i + 1) * 1000));
        }
        a.absorb(b);
        assert_eq!(a.len(), 200);
        assert!(a.spans().windows(2).all(|w| w[0].first <= w[1].first));
        let mut c = TokenBag::default();
        c.absorb(a.take());
        assert_eq!((c.len(), a.len()), (200, 0));
        assert!(a.is_empty());
    }

    #[test]
    fn drain_into_empties_the_bag_and_hands_over_every_msi() {
        let mut b = TokenBag::default();
        for i in 0..100 {
            b.push(tok(i, i * 1000));
        }
        let (mut exact, mut spans) = (Vec::new(), Vec::new());
        b.drain_into(&mut exact, &mut spans);
        assert!(b.is_empty() && b.spans().is_empty());
        assert_eq!(exact.len(), EXACT_TOKENS);
        assert_eq!(spans.iter().map(|s| s.count).sum::<u64>(), 100 - 64);
        // An emptied bag starts over with exact tokens.
        b.push(tok(200, 5));
        assert_eq!((b.exact().len(), b.in_spans()), (1, 0));
    }

    #[test]
    fn moved_msis_keep_their_order_and_the_buffers_go_round() {
        // PIR, harvested and served, as one vector's MSIs pass through them.
        let (mut pir, mut harvested) = (TokenBag::default(), TokenBag::default());
        let (mut exact, mut spans) = (Vec::new(), Vec::new());
        for round in 0..3u64 {
            for i in 0..3 {
                pir.push(tok(10 * round + i, 10 * round + i));
            }
            if round == 1 {
                // A harvest that finds MSIs already there appends behind them.
                harvested.push(tok(99, 1));
            }
            harvested.move_from(&mut pir);
            assert!(pir.is_empty() && pir.spans().is_empty());
            exact.clear();
            harvested.drain_into(&mut exact, &mut spans);
            let ids: Vec<u64> = exact.iter().map(|t| t.id).collect();
            let mut want: Vec<u64> = (0..3).map(|i| 10 * round + i).collect();
            if round == 1 {
                want.insert(0, 99);
            }
            assert_eq!(ids, want, "round {round}");
            // From the second round on, neither place allocates: each holds a buffer.
            if round > 0 {
                let capacity = |b: &TokenBag| b.more.as_ref().map_or(0, |m| m.exact.capacity());
                assert!(capacity(&pir) >= 3 && capacity(&harvested) >= 3);
            }
        }
        // Spans move too, and count.
        for i in 0..100 {
            pir.push(tok(i, i * 1000));
        }
        harvested.push(tok(500, 0));
        harvested.move_from(&mut pir);
        assert_eq!((harvested.len(), pir.len()), (101, 0));
        assert_eq!(harvested.in_spans(), 101 - EXACT_TOKENS as u64);
    }

    #[test]
    fn a_lone_msi_stays_in_the_bag_and_a_second_moves_both_to_the_heap_in_order() {
        let mut b = TokenBag::default();
        b.push(tok(1, 10));
        assert!(b.more.is_none(), "one MSI needs no heap part");
        assert_eq!((b.len(), b.exact()), (1, &[tok(1, 10)][..]));
        b.push(tok(2, 5));
        assert!(b.only.is_none());
        assert_eq!(b.exact(), &[tok(1, 10), tok(2, 5)][..]);
        // A lone MSI moved into a bag that holds some joins behind them.
        let mut lone = TokenBag::default();
        lone.push(tok(3, 30));
        b.move_from(&mut lone);
        assert!(lone.is_empty() && lone.exact().is_empty());
        assert_eq!(
            b.exact().iter().map(|t| t.id).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        // Emptied, the bag keeps its heap part and takes the next MSI by itself.
        let (mut exact, mut spans) = (Vec::new(), Vec::new());
        b.drain_into(&mut exact, &mut spans);
        assert_eq!((exact.len(), b.len()), (3, 0));
        b.push(tok(4, 40));
        assert!(b.only.is_some() && b.more.is_some());
        assert_eq!(b.exact(), &[tok(4, 40)][..]);
        assert!(std::mem::size_of::<TokenBag>() <= 32);
    }

    #[test]
    fn the_oldest_raise_is_found_among_tokens_and_spans() {
        let mut b = TokenBag::default();
        assert_eq!(b.oldest(), None);
        b.push(tok(0, 500));
        assert_eq!(b.oldest(), Some(SimTime(500)));
        // Tokens arrive out of raise order; the earliest wins wherever it sits.
        b.push(tok(1, 300));
        assert_eq!(b.oldest(), Some(SimTime(300)));
        for i in 0..100 {
            b.push(tok(10 + i, 1_000 + i));
        }
        b.push(tok(200, 7));
        assert!(b.in_spans() > 0);
        assert_eq!(b.oldest(), Some(SimTime(7)));
    }

    #[test]
    fn a_late_earlier_raise_is_inserted_in_order() {
        let mut b = TokenBag::default();
        for i in 0..70 {
            b.push(tok(i, 1_000 * (i + 10)));
        }
        b.push(tok(70, 5));
        assert_eq!(b.spans()[0].first, SimTime(5));
        assert_eq!(b.len(), 71);
    }
}
