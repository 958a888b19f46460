//! Vocabulary every irqsim crate shares.
//!
//! - [`SimTime`] and [`Duration`]: simulated time in picoseconds. Picoseconds keep a
//!   cycle at any realistic clock (e.g. 2.1 GHz = 476.19 ps) within 0.5 ps of exact
//!   while a `u64` still covers 213 days of simulated time.
//! - [`Freq`]: a clock in MHz, converting cycle counts to [`Duration`] with integer
//!   arithmetic so results are bit-identical on every host.
//! - Ids: [`CpuId`] (dense index of a logical CPU in a system), [`ApicId`] (the
//!   architectural x2APIC ID firmware assigned it), [`Vector`] (an IDT vector).
//! - [`MsiMessage`]: the (address, data) pair a device writes to raise an MSI.
//!
//! **Architecture invariant:** nothing in this crate reads a clock or owns a queue.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::{Add, AddAssign, Sub};

pub const PS_PER_NS: u64 = 1_000;
pub const PS_PER_US: u64 = 1_000_000;
pub const PS_PER_MS: u64 = 1_000_000_000;
pub const PS_PER_S: u64 = 1_000_000_000_000;

/// `x.round() as u64` (nearest, halves away from zero, saturating), for `x >= 0`.
///
/// Costs are converted to picoseconds on every simulated operation, and `f64::round`
/// is a software routine on the baseline x86-64 target (no SSE4.1 `roundsd`). The
/// truncating conversion is one instruction, and the fraction it leaves is exact:
/// below 2^52 the subtraction of two nearby doubles loses nothing, and from 2^52 up
/// every double is already an integer.
#[inline]
pub fn round_to_u64(x: f64) -> u64 {
    const INTEGRAL_FROM: f64 = (1u64 << 52) as f64;
    if x >= INTEGRAL_FROM || x.is_nan() {
        // Integers already (or NaN, which `as` maps to 0 as `round` would).
        return x as u64;
    }
    if x <= 0.0 {
        return 0;
    }
    // Through i64: x is below 2^52 here, so the signed conversions are exact and
    // each is one instruction, where the unsigned ones take several on x86-64.
    let whole = x as i64;
    // Added as 0 or 1, not branched on: random gaps make the fraction a coin toss,
    // and a branch on it was mispredicted half the time in the arrival loops.
    (whole + i64::from(x - whole as f64 >= 0.5)) as u64
}

/// An instant of simulated time, in picoseconds since the start of the run.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct SimTime(pub u64);

/// A span of simulated time, in picoseconds.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Duration(pub u64);

impl SimTime {
    pub const ZERO: SimTime = SimTime(0);
    pub const MAX: SimTime = SimTime(u64::MAX);

    pub fn as_ps(self) -> u64 {
        self.0
    }
    pub fn as_ns_f64(self) -> f64 {
        self.0 as f64 / PS_PER_NS as f64
    }
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / PS_PER_S as f64
    }
    /// Time elapsed since `earlier`; saturates at zero rather than wrapping, because a
    /// caller asking for a negative span has a bug that should show as 0, not 2^64.
    pub fn since(self, earlier: SimTime) -> Duration {
        Duration(self.0.saturating_sub(earlier.0))
    }
}

impl Duration {
    pub const ZERO: Duration = Duration(0);

    pub const fn from_ps(ps: u64) -> Duration {
        Duration(ps)
    }
    pub const fn from_ns(ns: u64) -> Duration {
        Duration(ns * PS_PER_NS)
    }
    pub const fn from_us(us: u64) -> Duration {
        Duration(us * PS_PER_US)
    }
    pub const fn from_ms(ms: u64) -> Duration {
        Duration(ms * PS_PER_MS)
    }
    /// Converts a (possibly fractional) nanosecond figure from a cost table, rounding to
    /// the nearest picosecond. Negative or NaN inputs are rejected by scenario validation
    /// before they reach here; they clamp to zero as a last line of defence.
    pub fn from_ns_f64(ns: f64) -> Duration {
        if ns.is_nan() || ns <= 0.0 {
            return Duration::ZERO;
        }
        Duration(round_to_u64(ns * PS_PER_NS as f64))
    }
    pub fn from_secs_f64(s: f64) -> Duration {
        if s.is_nan() || s <= 0.0 {
            return Duration::ZERO;
        }
        Duration(round_to_u64(s * PS_PER_S as f64))
    }
    pub fn as_ps(self) -> u64 {
        self.0
    }
    pub fn as_ns_f64(self) -> f64 {
        self.0 as f64 / PS_PER_NS as f64
    }
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / PS_PER_S as f64
    }
    pub fn saturating_sub(self, other: Duration) -> Duration {
        Duration(self.0.saturating_sub(other.0))
    }
}

impl Add<Duration> for SimTime {
    type Output = SimTime;
    fn add(self, d: Duration) -> SimTime {
        SimTime(
            self.0
                .checked_add(d.0)
                .expect("simulated time overflowed u64 picoseconds"),
        )
    }
}
impl AddAssign<Duration> for SimTime {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}
impl Sub<SimTime> for SimTime {
    type Output = Duration;
    fn sub(self, earlier: SimTime) -> Duration {
        Duration(
            self.0
                .checked_sub(earlier.0)
                .expect("subtracted a later SimTime from an earlier one"),
        )
    }
}
impl Add for Duration {
    type Output = Duration;
    fn add(self, o: Duration) -> Duration {
        Duration(self.0 + o.0)
    }
}
impl AddAssign for Duration {
    fn add_assign(&mut self, o: Duration) {
        self.0 += o.0;
    }
}
impl std::iter::Sum for Duration {
    fn sum<I: Iterator<Item = Duration>>(iter: I) -> Duration {
        iter.fold(Duration::ZERO, |a, b| a + b)
    }
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3} ns", self.as_ns_f64())
    }
}
impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3} ns", self.as_ns_f64())
    }
}

/// A clock frequency in MHz. Integer MHz is precise enough for any published core
/// clock and keeps cycle conversion exact and host-independent. Deserializing checks
/// that the clock is above 0 MHz, so no `Freq` ever divides by zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "FreqMhz", into = "FreqMhz")]
pub struct Freq {
    mhz: u32,
}

/// Serialized form of [`Freq`].
#[derive(Clone, Copy, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FreqMhz {
    mhz: u32,
}

impl TryFrom<FreqMhz> for Freq {
    type Error = String;
    fn try_from(f: FreqMhz) -> Result<Freq, String> {
        Freq::from_mhz(f.mhz)
            .ok_or_else(|| "mhz = 0 is not allowed: expected a clock above 0 MHz".into())
    }
}

impl From<Freq> for FreqMhz {
    fn from(f: Freq) -> FreqMhz {
        FreqMhz { mhz: f.mhz }
    }
}

impl Freq {
    /// Returns `None` for 0 MHz, which has no meaningful cycle time.
    pub fn from_mhz(mhz: u32) -> Option<Freq> {
        (mhz > 0).then_some(Freq { mhz })
    }
    pub fn mhz(self) -> u32 {
        self.mhz
    }
    /// Duration of `cycles` cycles, rounded to the nearest picosecond.
    pub fn cycles(self, cycles: u64) -> Duration {
        let ps = (cycles as u128 * PS_PER_US as u128 + self.mhz as u128 / 2) / self.mhz as u128;
        Duration(ps as u64)
    }
    /// Same as [`Freq::cycles`] for fractional cycle counts from cost tables.
    pub fn cycles_f64(self, cycles: f64) -> Duration {
        if cycles.is_nan() || cycles <= 0.0 {
            return Duration::ZERO;
        }
        Duration(round_to_u64(cycles * PS_PER_US as f64 / self.mhz as f64))
    }
    /// Whole cycles elapsed in `d` (truncating).
    pub fn cycles_in(self, d: Duration) -> u64 {
        ((d.0 as u128 * self.mhz as u128) / PS_PER_US as u128) as u64
    }
}

/// Dense index of a logical CPU inside one simulated system (0..n). Not an APIC ID.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct CpuId(pub u32);

/// An x2APIC ID (32 bits) as firmware assigned it.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct ApicId(pub u32);

/// An interrupt vector (IDT index). 0-15 are illegal for fixed delivery and 16-31 are
/// reserved for exceptions (Intel SDM Vol. 3A 11.5.2 / 6.2); devices use 32-255.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Vector(pub u8);

impl Vector {
    /// Lowest vector an external device may use (Linux FIRST_EXTERNAL_VECTOR).
    pub const FIRST_EXTERNAL: Vector = Vector(0x20);
    /// Priority class: the upper four bits (SDM Vol. 3A 11.8.3).
    pub fn class(self) -> u8 {
        self.0 >> 4
    }
    /// Index of the 64-bit word holding this vector in a 256-bit map (PIR, IRR, ISR).
    pub fn word(self) -> usize {
        (self.0 >> 6) as usize
    }
    /// Bit of this vector inside its 64-bit word.
    pub fn bit(self) -> u64 {
        1u64 << (self.0 & 63)
    }
}

impl fmt::Display for Vector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#04x}", self.0)
    }
}

/// The two words a device writes to raise a message-signalled interrupt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MsiMessage {
    pub address: u64,
    pub data: u32,
}

/// A 256-bit vector map (IRR, ISR, TMR, PIR), word i holding vectors 64i..64i+63.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct VectorSet(pub [u64; 4]);

impl VectorSet {
    pub const EMPTY: VectorSet = VectorSet([0; 4]);

    pub fn contains(&self, v: Vector) -> bool {
        self.0[v.word()] & v.bit() != 0
    }
    /// Sets `v`; returns whether it was already set.
    pub fn insert(&mut self, v: Vector) -> bool {
        let was = self.contains(v);
        self.0[v.word()] |= v.bit();
        was
    }
    /// Clears `v`; returns whether it was set.
    pub fn remove(&mut self, v: Vector) -> bool {
        let was = self.contains(v);
        self.0[v.word()] &= !v.bit();
        was
    }
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }
    pub fn count(&self) -> u32 {
        self.0.iter().map(|w| w.count_ones()).sum()
    }
    /// Highest set vector, scanning from word 3 down as the APIC's priority logic does.
    pub fn highest(&self) -> Option<Vector> {
        (0..4).rev().find_map(|i| {
            let w = self.0[i];
            (w != 0).then(|| Vector((i as u32 * 64 + 63 - w.leading_zeros()) as u8))
        })
    }
    /// Set vectors in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = Vector> + '_ {
        (0..4usize).flat_map(move |i| {
            let mut w = self.0[i];
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros();
                w &= w - 1;
                Some(Vector((i as u32 * 64 + b) as u8))
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_to_u64_matches_the_library_round_everywhere() {
        let reference = |x: f64| x.round() as u64;
        let mut edges = vec![
            0.0,
            -0.0,
            0.5,
            1.5,
            2.5,
            0.49999999999999994,
            0.5000000000000001,
            4503599627370495.5,
            4503599627370496.0,
            9007199254740993.0,
            1.8446744073709552e19,
            1e30,
            f64::MAX,
            f64::INFINITY,
            f64::NAN,
            -0.4,
            -0.6,
            -3.5,
            f64::MIN_POSITIVE,
            5e-324,
        ];
        for k in 0..2000u64 {
            let half = k as f64 + 0.5;
            edges.extend([
                half,
                f64::from_bits(half.to_bits() - 1),
                f64::from_bits(half.to_bits() + 1),
            ]);
        }
        for x in edges {
            assert_eq!(
                round_to_u64(x),
                reference(x),
                "x = {x:e} ({:#x})",
                x.to_bits()
            );
        }
        // Every exponent a cost can have, through a fixed bit-pattern stream.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2_000_000 {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            // Non-negative doubles from 2^-20 to 2^70.
            let exponent = 1003 + (z >> 52) % 90;
            let x = f64::from_bits((exponent << 52) | (z & ((1 << 52) - 1)));
            assert_eq!(
                round_to_u64(x),
                reference(x),
                "x = {x:e} ({:#x})",
                x.to_bits()
            );
        }
    }

    #[test]
    fn cycles_convert_exactly_at_round_clocks() {
        let f = Freq::from_mhz(2000).unwrap();
        assert_eq!(f.cycles(1), Duration(500));
        assert_eq!(f.cycles(4), Duration::from_ns(2));
        assert_eq!(f.cycles_in(Duration::from_ns(2)), 4);
        let odd = Freq::from_mhz(2100).unwrap();
        assert_eq!(odd.cycles(1), Duration(476));
        assert_eq!(odd.cycles(2100), Duration::from_ns(1000));
        assert!(Freq::from_mhz(0).is_none());
    }

    #[test]
    fn fractional_ns_rounds_to_ps() {
        assert_eq!(Duration::from_ns_f64(55.6), Duration(55_600));
        assert_eq!(Duration::from_ns_f64(-3.0), Duration::ZERO);
    }

    #[test]
    fn vector_set_orders_and_finds_highest() {
        let mut s = VectorSet::EMPTY;
        assert!(!s.insert(Vector(0x21)));
        assert!(s.insert(Vector(0x21)));
        s.insert(Vector(0xeb));
        s.insert(Vector(0x80));
        assert_eq!(s.highest(), Some(Vector(0xeb)));
        let v: Vec<u8> = s.iter().map(|v| v.0).collect();
        assert_eq!(v, vec![0x21, 0x80, 0xeb]);
        assert!(s.remove(Vector(0xeb)));
        assert_eq!(s.highest(), Some(Vector(0x80)));
        assert_eq!(s.count(), 2);
    }

    #[test]
    #[should_panic(expected = "earlier")]
    fn negative_span_is_a_bug() {
        let _ = SimTime(1) - SimTime(2);
    }
}
