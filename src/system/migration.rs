//! Affinity changes of posted DSA interrupts at given times (scenario
//! `[[migrations]]`), following Linux's sequence (see `kernel::migration`):
//!
//! 1. At `at_us` the host allocates a vector on the new CPU, registers the device's
//!    handler there, and `modify_irte()` writes the IRTE with that vector and the new
//!    CPU's descriptor, invalidating its interrupt-entry-cache entry. Requests the
//!    IOMMU remapped before (they are in its pipeline with the old entry's outcome)
//!    still post into the old CPU's descriptor: the window of Linux commit
//!    ce0a92871179.
//! 2. `cleanup_delay_us` later the old CPU runs the vector cleanup (Linux arms a
//!    timer on the old CPU for the next jiffy), as deferred work, so never inside
//!    one of its interrupt handlers. It frees the old vector unless
//!    `vector_cleanup` finds it pending (IRR, and with `"irr-and-pir"` the PIR of the
//!    old CPU's descriptor); while it does, the cleanup is retried after the same
//!    delay.
//!
//! A handler that later dispatches a freed vector finds no interrupt behind it (Linux
//! counts a spurious interrupt): its MSIs are dropped as `vector_freed`, so the
//! balance holds and the loss is visible. Not modelled: the CPU time of the IRTE
//! write, the invalidation wait and the cleanup.

use serde::{Deserialize, Serialize};
use sim_core::{Duration, SimTime, Vector};

use super::cpu::{CpuState, Deferred, HandlerRef};
use super::scenario::{
    check_list_len, check_time_in_run, Arch, DeliveryMode, Scenario, ScenarioError,
};
use super::{posted_irte, Event, System};
use crate::engine::Priority;
use crate::kernel::migration::MigrationCleanup;
use crate::kernel::POSTED_MSI_NOTIFICATION_VECTOR;

/// Most migrations a scenario may list.
pub const MAX_MIGRATIONS: usize = 4096;
/// The drop reason of an MSI dispatched at a vector the cleanup has freed.
pub const VECTOR_FREED: &str = "vector_freed";

fn default_cleanup_delay_us() -> f64 {
    1000.0
}

/// Scenario `[[migrations]]`: one affinity change of a DSA device's interrupt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigrationConfig {
    /// The device, by its `devices[].name`.
    pub device: String,
    /// The CPU the interrupt moves to, by index.
    pub to_cpu: u32,
    /// When the IRTE is rewritten, in us from the start.
    pub at_us: f64,
    /// From the IRTE write to the old CPU's vector cleanup, and between its retries,
    /// in us. Default 1000: one jiffy at CONFIG_HZ=1000 (the cleanup timer expires at
    /// `jiffies + 1`); a kernel setting, not a hardware cost.
    #[serde(default = "default_cleanup_delay_us")]
    pub cleanup_delay_us: f64,
}

/// Checks the list against the rest of the scenario.
pub(super) fn validate(sc: &Scenario) -> Result<(), ScenarioError> {
    if sc.migrations.is_empty() {
        return Ok(());
    }
    check_list_len("migrations", sc.migrations.len(), MAX_MIGRATIONS)?;
    if sc.arch == Arch::Arm || sc.mode != DeliveryMode::Posted {
        return Err(ScenarioError::invalid(
            "migrations",
            format!("a migration with mode = \"{}\"", sc.mode.as_str()),
            "mode = \"posted\" on x86: the model migrates posted IRTEs",
        ));
    }
    let names: Vec<String> = (0..sc.devices.len()).map(|i| sc.device_name(i)).collect();
    let cpu_of_apic = sc.cpu_of_apic_id();
    for (i, m) in sc.migrations.iter().enumerate() {
        let Some(device) = names.iter().position(|n| *n == m.device) else {
            return Err(ScenarioError::invalid(
                format!("migrations[{i}].device"),
                format!("{:?}", m.device),
                format!("the name of a DSA device: {}", names.join(", ")),
            ));
        };
        if m.to_cpu >= sc.cpus.count {
            return Err(ScenarioError::invalid(
                format!("migrations[{i}].to_cpu"),
                m.to_cpu,
                format!("a CPU index below cpus.count = {}", sc.cpus.count),
            ));
        }
        // Linux's assign_vector_locked() leaves an interrupt alone when its CPU is in
        // the new affinity mask: a move to the CPU it targets moves nothing. (An
        // unknown `apic_id` resolves to no CPU here; the device's own check names it.)
        if sc.device_cpu(device, &cpu_of_apic) == Some(m.to_cpu) {
            return Err(ScenarioError::invalid(
                format!("migrations[{i}].to_cpu"),
                m.to_cpu,
                format!(
                    "a CPU other than the one {:?} targets (CPU {}): Linux keeps an interrupt on its CPU when that CPU is in the new affinity, so nothing would move",
                    m.device, m.to_cpu
                ),
            ));
        }
        if sc.migrations[..i].iter().any(|o| o.device == m.device) {
            return Err(ScenarioError::invalid(
                format!("migrations[{i}].device"),
                format!("{:?}", m.device),
                "one migration per device",
            ));
        }
        check_time_in_run(format!("migrations[{i}].at_us"), m.at_us, sc.duration_us)?;
        if !(m.cleanup_delay_us.is_finite() && m.cleanup_delay_us >= 0.001) {
            return Err(ScenarioError::invalid(
                format!("migrations[{i}].cleanup_delay_us"),
                m.cleanup_delay_us,
                "a finite delay of at least 0.001 us",
            ));
        }
    }
    Ok(())
}

/// One migration's progress.
#[derive(Clone, Debug)]
struct Move {
    device: u32,
    irte_index: u32,
    source_id: u16,
    from_cpu: u32,
    old_vector: Vector,
    to_cpu: u32,
    to_pda: u64,
    new_vector: Option<Vector>,
    at: SimTime,
    cleanup_delay: Duration,
    cleanup_attempts: u32,
    freed_at: Option<SimTime>,
}

/// The migrations of a run.
#[derive(Debug, Default)]
pub(super) struct Migrations {
    cleanup: MigrationCleanup,
    moves: Vec<Move>,
    dispatched_after_free: u64,
}

impl Migrations {
    pub(super) fn new(sc: &Scenario, cpu_of_apic: &std::collections::BTreeMap<u32, u32>) -> Self {
        let moves = sc
            .migrations
            .iter()
            .map(|m| {
                let d = (0..sc.devices.len())
                    .find(|&i| sc.device_name(i) == m.device)
                    .expect("validated: the device exists");
                Move {
                    device: d as u32,
                    irte_index: sc.irte_index_of(d),
                    source_id: sc.devices[d].source_id,
                    from_cpu: sc.target_cpu_of(d, cpu_of_apic),
                    old_vector: Vector(sc.devices[d].vector as u8),
                    to_cpu: m.to_cpu,
                    to_pda: sc.pid_address_of(m.to_cpu),
                    new_vector: None,
                    at: SimTime::ZERO + Duration::from_secs_f64(m.at_us * 1e-6),
                    cleanup_delay: Duration::from_secs_f64(m.cleanup_delay_us * 1e-6),
                    cleanup_attempts: 0,
                    freed_at: None,
                }
            })
            .collect();
        Migrations {
            cleanup: sc.vector_cleanup,
            moves,
            dispatched_after_free: 0,
        }
    }

    /// Whether `vector` on `cpu` was freed by a migration's cleanup.
    pub(super) fn is_freed(&self, cpu: u32, vector: Vector) -> bool {
        self.moves
            .iter()
            .any(|m| m.freed_at.is_some() && m.from_cpu == cpu && m.old_vector == vector)
    }
}

/// One migration in the report.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MigrationReport {
    /// The device's name.
    pub device: String,
    /// Old CPU and vector (`"0x21"`).
    pub from_cpu: u32,
    /// The vector on the old CPU.
    pub from_vector: String,
    /// New CPU.
    pub to_cpu: u32,
    /// The vector allocated on the new CPU (empty before the IRTE write).
    pub to_vector: String,
    /// Cleanup runs on the old CPU so far (one more per retry while pending).
    pub cleanup_attempts: u32,
    /// When the old vector was freed, in ns (absent while it is not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub freed_at_ns: Option<f64>,
}

/// The `migrations` part of the report.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MigrationsReport {
    /// How the cleanup checks pending (`"irr-and-pir"` or `"irr-only"`).
    pub vector_cleanup: &'static str,
    /// Each migration.
    pub moves: Vec<MigrationReport>,
    /// Handler dispatches of a freed vector (their MSIs are in
    /// `msis.dropped.vector_freed`).
    pub dispatched_after_free: u64,
}

impl System {
    /// Schedules every migration's IRTE write.
    pub(super) fn start_migrations(&mut self) {
        for index in 0..self.migrations.moves.len() {
            let at = self.migrations.moves[index].at;
            self.queue.schedule(
                at,
                Priority::DEVICE,
                Event::MigrationIrteWrite {
                    index: index as u32,
                },
            );
        }
    }

    /// Step 1: a vector on the new CPU, the handler there, the IRTE rewritten and its
    /// cached copy invalidated in every remapping unit.
    pub(super) fn on_migration_irte_write(&mut self, now: SimTime, index: u32) {
        let m = self.migrations.moves[index as usize].clone();
        let to = m.to_cpu as usize;
        let Some(vector) = self.cpus[to].free_vector(POSTED_MSI_NOTIFICATION_VECTOR.0) else {
            // No vector left on the new CPU: Linux's set_affinity fails and the
            // interrupt stays where it is (the report shows no new vector).
            return;
        };
        self.cpus[to].register_handler(vector, HandlerRef::Dsa(m.device));
        let irte = posted_irte(vector, m.to_pda, m.source_id)
            .expect("the descriptor address was accepted for the first IRTEs");
        for unit in &mut self.iommus {
            unit.remapper
                .modify_irte(m.irte_index, irte)
                .expect("validated: the device's IRTE index is in the table");
        }
        self.migrations.moves[index as usize].new_vector = Some(vector);
        self.queue.schedule(
            now + m.cleanup_delay,
            Priority::DEVICE,
            Event::MigrationCleanup { index },
        );
    }

    /// Step 2: the cleanup timer fires on the old CPU; the cleanup itself runs there
    /// as deferred work, outside its interrupt handlers.
    pub(super) fn on_migration_cleanup_due(&mut self, now: SimTime, index: u32) {
        let from = self.migrations.moves[index as usize].from_cpu;
        self.push_deferred(now, from, Deferred::VectorCleanup { index });
    }

    /// The old CPU's vector cleanup: frees the old vector, or retries while pending.
    pub(super) fn run_vector_cleanup(&mut self, now: SimTime, index: u32) {
        let m = &self.migrations.moves[index as usize];
        let (cpu, vector, delay) = (m.from_cpu, m.old_vector, m.cleanup_delay);
        let c = &self.cpus[cpu as usize];
        debug_assert!(!matches!(c.state, CpuState::Running(_)));
        let in_irr = c.apic.irr().contains(vector);
        let in_pir = c.pid.desc().pir().contains(vector);
        // Linux runs the cleanup after modify_irte() returned, which waits for the
        // entry cache invalidation; that wait is taken to drain the requests remapped
        // with the old entry (an assumption), so their posts land first.
        let draining = self.old_entry_posts_in_flight(index);
        let pending = draining || self.migrations.cleanup.finds_pending(in_irr, in_pir);
        let m = &mut self.migrations.moves[index as usize];
        m.cleanup_attempts += 1;
        if pending {
            self.queue.schedule(
                now + delay,
                Priority::DEVICE,
                Event::MigrationCleanup { index },
            );
            return;
        }
        m.freed_at = Some(now);
        self.cpus[cpu as usize].register_handler(vector, HandlerRef::None);
    }

    /// Requests the IOMMU remapped with migration `index`'s old entry that have not
    /// updated the old CPU's descriptor yet.
    fn old_entry_posts_in_flight(&self, index: u32) -> bool {
        use iommu_sim::vtd::RemapAction;
        let m = &self.migrations.moves[index as usize];
        let in_pipeline = self.iommus.iter().any(|u| {
            u.in_pipeline.iter().any(|r| {
                matches!(
                    r.outcome,
                    super::iommu::UnitOutcome::Remap(RemapAction::Post { index, vector, .. })
                        if index == m.irte_index && vector == m.old_vector
                )
            })
        });
        let line = &self.line_posts[m.from_cpu as usize];
        let at_line = line
            .current
            .iter()
            .map(|(p, _)| p)
            .chain(line.waiting.iter())
            .any(|p| p.vector == m.old_vector);
        in_pipeline || at_line
    }

    /// A handler dispatches a vector the cleanup freed: its MSIs are lost. Returns
    /// the cost, the generic flow's (Linux's `handle_irq` finds VECTOR_UNUSED).
    pub(super) fn dispatch_freed_vector(&mut self, cpu: u32, vector: Vector) -> Duration {
        self.migrations.dispatched_after_free += 1;
        self.ledger.drop_served(cpu as usize, vector, VECTOR_FREED);
        self.cpus[cpu as usize].handler_calls += 1;
        self.freq.cycles_f64(self.costs.cpu.irq_flow_cycles)
    }

    /// The `migrations` part of the report; absent without migrations.
    pub(super) fn migrations_report(&self) -> Option<MigrationsReport> {
        if self.migrations.moves.is_empty() {
            return None;
        }
        let moves = self
            .migrations
            .moves
            .iter()
            .map(|m| MigrationReport {
                device: self.devices[m.device as usize].name.clone(),
                from_cpu: m.from_cpu,
                from_vector: format!("{:#04x}", m.old_vector.0),
                to_cpu: m.to_cpu,
                to_vector: m
                    .new_vector
                    .map_or(String::new(), |v| format!("{:#04x}", v.0)),
                cleanup_attempts: m.cleanup_attempts,
                freed_at_ns: m.freed_at.map(|t| t.as_ns_f64()),
            })
            .collect();
        Some(MigrationsReport {
            vector_cleanup: self.migrations.cleanup.name(),
            moves,
            dispatched_after_free: self.migrations.dispatched_after_free,
        })
    }
}
