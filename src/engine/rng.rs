//! Random streams derived from (seed, component name).
//!
//! Each component draws from its own ChaCha8 stream: the run seed is the key and a
//! 64-bit hash of the component's name selects the ChaCha stream. Adding a device
//! therefore never changes what an existing device draws, and the streams are
//! identical on every platform (ChaCha is specified bit for bit).

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Factory of per-component random streams for one run.
#[derive(Clone, Copy, Debug)]
pub struct RngStreams {
    seed: u64,
}

impl RngStreams {
    /// Streams of the run with this seed.
    pub fn new(seed: u64) -> Self {
        RngStreams { seed }
    }

    /// The run's seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The stream for `component`. Same seed and name: same stream, always. A system's
    /// components take their names from `system::stream_names`, whose list validation
    /// checks for repeats; a new kind of component that draws must be added there
    /// (a test there compares that list with the names this is called with).
    pub fn stream(&self, component: &str) -> ChaCha8Rng {
        #[cfg(test)]
        STREAMS_HANDED_OUT.with(|names| {
            if let Some(names) = names.borrow_mut().as_mut() {
                names.push(component.to_string());
            }
        });
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        rng.set_stream(stable_hash(component.as_bytes()));
        rng
    }
}

#[cfg(test)]
thread_local! {
    /// While `Some`, the name of every stream [`RngStreams::stream`] hands out on this
    /// thread, in order.
    pub(crate) static STREAMS_HANDED_OUT: std::cell::RefCell<Option<Vec<String>>> =
        const { std::cell::RefCell::new(None) };
}

/// FNV-1a, 64-bit: stable across Rust versions and platforms, unlike `DefaultHasher`.
pub fn stable_hash(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |h, b| (h ^ *b as u64).wrapping_mul(PRIME))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn same_name_same_stream_other_name_other_stream() {
        let s = RngStreams::new(7);
        let draws = |mut r: ChaCha8Rng| -> Vec<u64> { (0..4).map(|_| r.gen()).collect() };
        let a = draws(s.stream("dsa0"));
        assert_eq!(a, draws(s.stream("dsa0")));
        assert_ne!(a, draws(s.stream("dsa1")));
        assert_ne!(a, draws(RngStreams::new(8).stream("dsa0")));
    }

    #[test]
    fn the_streams_report_the_seed_they_were_made_with() {
        for seed in [0, 1, 7, u64::MAX] {
            assert_eq!(RngStreams::new(seed).seed(), seed);
        }
    }

    #[test]
    fn fnv_matches_reference_vector() {
        // Published FNV-1a 64 test vector for "a".
        assert_eq!(stable_hash(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
