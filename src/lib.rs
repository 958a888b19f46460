//! irqsim: a cycle-approximate simulator of the interrupt path.
//!
//! It models MSI sources, VT-d interrupt remapping and posting, the 64-byte
//! posted-interrupt descriptor line under MESI contention, and the x2APIC, and runs the
//! real Linux algorithms (such as the posted-MSI demultiplexing handler) against them
//! on a deterministic discrete-event engine. Every figure it prints comes from the
//! model and its documented cost tables, not from hardware.
//!
//! ```
//! use irqsim::{Scenario, System};
//!
//! let scenario = Scenario::from_toml_str(r#"
//!     duration_us = 200
//!     mode = "posted"
//!     [[devices]]
//!     kind = "dsa"
//!     vector = 0x21
//!     cpu = 0
//!     arrival = { kind = "poisson", rate_per_s = 2e6 }
//! "#, "inline").unwrap();
//! let report = System::run_scenario(&scenario).unwrap();
//! assert!(report.msis.balanced);
//! assert!(report.msis.handled > 0);
//! ```
//!
//! Layout (see ARCHITECTURE.md): [`engine`] owns time, the event queue, coroutines and
//! random streams; [`kernel`] holds the Linux algorithms; [`system`] wires components
//! into a runnable [`System`]; [`report`] and [`experiments`] turn runs into numbers.

#![warn(missing_docs)]

pub mod bench;
pub mod engine;
pub mod experiments;
pub mod explore;
pub mod fuzz;
pub mod kernel;
pub mod platform;
pub mod plot;
pub mod report;
pub mod scenarios;
pub mod sweep;
pub mod system;
pub mod topology;
pub mod validate;

pub use report::Report;
pub use system::{DeliveryMode, Scenario, ScenarioError, System};

pub use apic_sim;
pub use devices;
pub use iommu_sim;
pub use pid_model;
pub use sim_core;

/// The README's Rust examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
