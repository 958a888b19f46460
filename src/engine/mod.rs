//! The deterministic discrete-event engine: one event queue, coroutines for kernel
//! algorithms, and seeded random streams. **Architecture invariant:** only this crate
//! (the root) knows time; components receive `now` as an argument.

pub mod coro;
pub mod queue;
pub mod rng;

pub use coro::{Call, Coroutine, Port, Step};
pub use queue::{EventQueue, Priority};
pub use rng::{stable_hash, RngStreams};
