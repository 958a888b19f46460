//! Builds a [`System`] from a [`Scenario`] and runs it: the engine's event loop and the
//! routing of every component's outcomes into future events.
//!
//! The path of one MSI:
//!
//! ```text
//!  device ─▶ root port's ordered stream (behind the device's earlier writes)
//!         ─▶ remapping unit of the port's stack ─remap (IEC hit/miss)─┬─ fault ─▶ dropped(reason)
//!            ├─ remapped ─▶ shared delivery path (the port waits) ─▶ LAPIC IRR
//!            └─ posted ──▶ descriptor line update (retires the MSI) ─┬─ ON 0→1: delivery path ─▶ LAPIC IRR(0xeb)
//!                                                                    └─ else: waits in PIR
//!  LAPIC ─▶ CPU (idle, IF=1): entry ─▶ kernel algorithm (one event per operation) ─▶ exit
//! ```

pub mod arm;
pub mod builder;
pub mod costs;
pub mod cpu;
mod cpu_index;
pub mod device_runtime;
pub mod event_mix;
pub mod fabric;
pub mod inject;
pub mod io;
pub mod ioapic;
pub mod ioapic_flow;
pub mod iommu;
mod latency_log;
pub mod ledger;
pub mod migration;
pub mod observe;
mod parked;
pub mod retrigger;
pub mod scenario;
pub mod smmu_costs;
pub mod smmu_host;
pub mod sources;
pub mod stream_names;
pub mod task;
pub mod token_bag;
pub mod transmit;
pub mod xcall;
pub mod xcall_2011;

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use self::device_runtime::{Device, DeviceModel};
use apic_sim::{AcceptOutcome, LocalApic};
use devices::{DsaQueue, DsaWorkQueue};
use hdrhistogram::Histogram;
use iommu_sim::vtd::{
    msi::encode_remappable, DeliveryMode as IrteDeliveryMode, FaultReason, InterruptMessageFabric,
    InterruptRemapper, Irte, PostedIrte, RemapConfig, RemapPipeline, RemappedIrte, SourceCheck,
};
use pid_model::desc::{CONTROL_WORD, ON_BIT};
use pid_model::{Agent, LineOp, PiDesc, PidLine};
use sim_core::{ApicId, Duration, Freq, SimTime, Vector};

use crate::engine::{Coroutine, EventQueue, Priority, RngStreams, Step};
use crate::kernel::{baseline, CpuOp, CpuPort, PirHandler, POSTED_MSI_NOTIFICATION_VECTOR};
use crate::report::{
    CpuReport, IommuReport, LatencySummary, MsiBalance, Notifications, PidAgentReport,
    PidLineDetail, PidLineReport, Report, MODEL_NOTE,
};
pub use builder::ScenarioBuilder;
pub use costs::{
    Costs, CpuCosts, DeviceCosts, DsaPlatformCosts, NicHostCosts, PcieCosts, VmdCosts,
};
pub use cpu::{Algorithm, CpuState, CpuTime, Deferred, HandlerRef, KernelOp, OpInFlight};
use iommu::IommuUnit;
use ledger::{Ledger, MsiToken};
pub use observe::{CpuActivity, IommuWork, Observer, SimEvent};
pub use scenario::{
    ClosedLoopConfig, CpuConfig, DeliveryMode, DeviceConfig, DeviceKind, IommuConfig, PcieConfig,
    Scenario, ScenarioError, MAX_MSI_SOURCES, MAX_SCENARIO_BYTES,
};
use sources::MsiSource;

/// Largest latency the histogram resolves (one hour, in ns); larger values saturate.
/// Fixed bounds keep the histogram's memory constant over a run.
const LATENCY_MAX_NS: u64 = 3_600_000_000_000;

/// A posted IRTE for `vector` into the descriptor at `pda`, checking `source_id`.
fn posted_irte(vector: Vector, pda: u64, source_id: u16) -> Result<Irte, iommu_sim::IommuError> {
    Irte::posted(PostedIrte {
        vector,
        pda,
        urg: false,
        fpd: false,
        source: SourceCheck::exact(source_id),
    })
}

/// The IRTE the host programs for an MSI of `vector` aimed at CPU `cpu`.
fn make_irte(
    sc: &Scenario,
    cpu: u32,
    vector: Vector,
    source_id: u16,
) -> Result<Irte, ScenarioError> {
    Ok(match sc.mode {
        DeliveryMode::Posted => posted_irte(vector, sc.pid_address_of(cpu), source_id)
            .map_err(|e| ScenarioError::invalid_from(&format!("cpus.pid_addresses[{cpu}]"), e))?,
        DeliveryMode::Remapped => Irte::remapped(RemappedIrte {
            vector,
            dest: sc.apic_id_of(cpu),
            dest_mode_logical: false,
            redirection_hint: false,
            level_triggered: false,
            delivery_mode: IrteDeliveryMode::Fixed,
            fpd: false,
            source: SourceCheck::exact(source_id),
        }),
    })
}

/// The descriptor-line access a CPU operation makes, if any, on a line whose control
/// word is `control` now (a plain store that clears ON writes the rest back as found).
fn line_op_of(op: CpuOp, control: u64) -> Option<LineOp> {
    match op {
        CpuOp::LoadPir { word } => Some(LineOp::Load { word }),
        CpuOp::XchgPir { word, value } => Some(LineOp::Xchg { word, value }),
        CpuOp::ClearOn => Some(LineOp::LockedBitClear { bit: ON_BIT }),
        CpuOp::TestAndClearOn => Some(LineOp::LockedTestAndClear { bit: ON_BIT }),
        CpuOp::StorePir { word, value } => Some(LineOp::Store { word, value }),
        CpuOp::StoreClearOn => Some(LineOp::Store {
            word: CONTROL_WORD,
            value: control & !(1 << (ON_BIT % 64)),
        }),
        CpuOp::HandleVector(_) | CpuOp::Eoi | CpuOp::Mfence => None,
    }
}

/// Everything that happens in a run is one of these.
///
/// `repr(u32)`: a four-byte tag puts every payload at an aligned offset, so an event is
/// copied in whole words. With a one-byte tag the payload starts at byte 1, and the
/// queue moved it as two overlapping unaligned halves through the stack, reloads that
/// store forwarding cannot serve. Under `repr(u32)` a variant's fields keep their
/// declared order, so each lists its narrow fields before any `u64` (the size
/// assertion below catches a variant that outgrows 16 bytes).
#[derive(Clone, Copy, Debug)]
#[repr(u32)]
enum Event {
    /// An open-loop device's next descriptor completes.
    DeviceCompletion { device: u32 },
    /// A descriptor the host wrote reaches a closed-loop work queue.
    DsaSubmit { device: u32 },
    /// An engine of a closed-loop work queue finishes a descriptor.
    DsaEngineDone { device: u32 },
    /// An NVMe drive or NIC queue asked to be woken now (stale if `generation` moved on).
    IoWake { dev: io::IoDev, generation: u32 },
    /// The head write of a root port reached the port's ordering point.
    PortReady { port: u16 },
    /// The head write of a root port is committed.
    PortWriteDone { port: u16 },
    /// The remapped MSI at the head of a root port has been handed over by the
    /// delivery path: it retires.
    PortMsiRetired { port: u16 },
    /// The oldest request of remapping unit `unit`'s pipeline is done.
    RemapDone { unit: u16 },
    /// The post holding CPU `cpu`'s descriptor line is performed.
    LinePostDone { cpu: u32 },
    /// An interrupt message reaches a local APIC. `msi` is set for device MSIs and
    /// empty for posted-interrupt notifications.
    ApicMessage {
        cpu: u32,
        vector: Vector,
        level: bool,
        msi: Option<parked::Slot>,
    },
    /// The CPU's current activity (entry, one operation, exit) completes.
    CpuStep { cpu: u32 },
    /// An LPI reaches CPU `cpu`'s redistributor (Arm).
    GicLpi {
        cpu: u32,
        intid: u32,
        msi: parked::Slot,
    },
    /// A shootdown load's initiator gets its next request.
    ShootdownRequest { load: u16, initiator: u16 },
    /// An IPI reaches CPU `cpu`'s local APIC.
    IpiArrive { cpu: u32, msg: parked::Slot },
    /// Migration `index` (scenario `migrations`) rewrites its IRTE.
    MigrationIrteWrite { index: u32 },
    /// Migration `index`'s vector cleanup timer fires on the old CPU.
    MigrationCleanup { index: u32 },
    /// The IRQ core's retrigger IPI `index` (scenario `retriggers`) reaches its APIC.
    Retrigger { index: u32 },
    /// An SMMU load's CPU wants its next call.
    SmmuCallRequest { load: u16, cpu_index: u16 },
    /// A PROD write reaches the SMMU.
    SmmuProdArrive { prod: u32 },
    /// The SMMU finishes the command in flight.
    SmmuConsumeDone,
    /// An SEV from the SMMU reaches the cores.
    SmmuSev,
    /// The SMMU's consumer may start again after holding for an MSI write's response.
    SmmuResume,
    /// A CMD_SYNC's MSI write becomes visible in memory.
    SmmuMsiVisible { data: u32, addr: u64 },
    /// A CONS read of `cpu` samples the register (stale if `generation` moved on).
    SmmuConsSample { cpu: u32, generation: u64 },
    /// The event-stream tick reaches a CPU asleep in WFE.
    SmmuTick { cpu: u32, generation: u64 },
    /// A CPU leaving WFE resumes.
    SmmuWake { cpu: u32, generation: u64 },
    /// A device asserts IOAPIC pin `pin` (index in `ioapic_pins`).
    IoapicAssert { pin: u16 },
    /// One pulse of IOAPIC pin `pin` ends.
    IoapicDeassert { pin: u16 },
    /// A thread's preemptible work ends (stale if it was preempted).
    TaskHoldDone { cpu: u32, generation: u64 },
    /// An injected IOMMU post lands (`System::inject_post`).
    InjectedPost { cpu: u32, vector: Vector, urg: bool },
    /// Another CPU changes SN (`System::inject_sn`).
    InjectedSn { cpu: u32, change: parked::Slot },
    /// The SN owner's recheck after a clear.
    InjectedRecheck { cpu: u32, by: u32 },
}

// Payloads that do not fit are parked (see `parked`): a larger event makes every queue
// entry larger.
const _: () = assert!(std::mem::size_of::<Event>() <= 16);

/// The payloads of events in flight that are too large to ride in an [`Event`].
#[derive(Default)]
struct ParkedPayloads {
    /// Device MSIs on their way to a local APIC or redistributor.
    msis: parked::Parked<MsiToken>,
    ipis: parked::Parked<apic_sim::IpiMessage>,
    sn_changes: parked::Parked<SnChange>,
}

/// An SN change that [`System::inject_sn`] scheduled: the CPU making it, set or clear,
/// and the delay of the owner's recheck after a clear.
struct SnChange {
    by: u32,
    set: bool,
    recheck_ps: u64,
}

/// A simulated machine: CPUs, the IOMMU, devices, and the event queue that drives them.
///
/// Build one with [`System::new`] (or [`System::with_handler`] to run your own
/// notification handler), advance it with [`System::run_for`], [`System::run_until`]
/// or [`System::step`], and read a [`Report`] at any point.
pub struct System {
    name: String,
    seed: u64,
    mode: DeliveryMode,
    handler: Box<dyn PirHandler>,
    costs: Costs,
    freq: Freq,
    /// `costs.pid_line` at `freq`, in picoseconds: every descriptor-line access is
    /// priced from this table.
    line_prices: pid_model::PricedLineCosts,
    queue: EventQueue<Event>,
    cpus: Vec<cpu::Cpu>,
    /// The CPU with an APIC ID.
    apic_index: cpu_index::CpuIndex,
    /// The CPU whose posted-interrupt descriptor is at an address.
    pda_index: cpu_index::CpuIndex,
    iommus: Vec<IommuUnit>,
    /// Every root port with a device on it, by index (see `Scenario::device_ports`).
    ports: Vec<fabric::Port>,
    /// The interrupt-delivery paths, one per port, stack or socket in use.
    deliveries: Vec<fabric::Delivery>,
    /// The posts of each CPU's descriptor line.
    line_posts: Vec<iommu::LinePosts>,
    devices: Vec<Device>,
    sources: Vec<MsiSource>,
    io: io::Io,
    ledger: Ledger,
    parked: ParkedPayloads,
    latency: Histogram<u64>,
    notifications_sent: u64,
    notifications_suppressed: u64,
    notifications_undeliverable: u64,
    served: ledger::Served,
    end_of_scenario: SimTime,
    wall: std::time::Duration,
    observer: Option<Box<dyn Observer>>,
    /// The SMMU, ITS and LPI tables when `arch = "arm"`.
    arm: Option<arm::ArmPath>,
    /// Shootdown loads, IPIs, and the CSD and queue-head lines of cross calls.
    xcall: xcall::Xcall,
    /// Transmit loads: sending threads, their packets, the NICs' wires.
    transmit: transmit::Transmit,
    /// The IOAPIC and its pins' loads and flows (x86).
    ioapic: Option<ioapic::IoapicHost>,
    /// The IRQ core's retriggers of device vectors (scenario `retriggers`).
    retriggers: retrigger::Retriggers,
    /// Affinity changes of posted interrupts (scenario `migrations`).
    migrations: migration::Migrations,
    /// Fixed costs converted to time once, so the hot path does no float rounding.
    timing: Timing,
}

/// Cost-table entries that every event would otherwise convert again.
#[derive(Clone, Copy, Debug)]
struct Timing {
    msi_write: Duration,
    doorbell_write: Duration,
    ordered_write: Duration,
    post_latency: Duration,
    irq_entry: Duration,
    irq_exit: Duration,
    nvme_submit: Duration,
}

impl Timing {
    fn new(costs: &Costs, freq: Freq) -> Timing {
        Timing {
            msi_write: Duration::from_ns_f64(costs.device.msi_write_ns),
            doorbell_write: Duration::from_ns_f64(costs.device.doorbell_write_ns),
            ordered_write: Duration::from_ns_f64(costs.pcie.ordered_write_ns),
            post_latency: Duration::from_ns_f64(costs.pid_line.iommu_post_latency_ns),
            irq_entry: freq.cycles_f64(costs.cpu.irq_entry_cycles),
            irq_exit: freq.cycles_f64(costs.cpu.irq_exit_cycles),
            nvme_submit: freq.cycles_f64(costs.nvme_host.submit_cycles),
        }
    }
}

impl System {
    /// Builds the system a validated-on-the-spot scenario describes, with the handler
    /// variant it names.
    pub fn new(scenario: &Scenario) -> Result<System, ScenarioError> {
        scenario.validate()?;
        let handler =
            crate::kernel::posted_msi::variant_by_name(&scenario.variant, scenario.max_loops)
                .expect("validated: the variant exists");
        System::build(scenario, handler)
    }

    /// Like [`System::new`], but the posted-MSI notification runs `handler`, a variant
    /// of your own written against [`crate::kernel::CpuPort`].
    pub fn with_handler(
        scenario: &Scenario,
        handler: Box<dyn PirHandler>,
    ) -> Result<System, ScenarioError> {
        scenario.validate_system()?;
        System::build(scenario, handler)
    }

    fn build(sc: &Scenario, handler: Box<dyn PirHandler>) -> Result<System, ScenarioError> {
        let costs = sc.costs.clone();
        let freq = Freq::from_mhz(costs.cpu.freq_mhz).expect("validated: freq_mhz > 0");
        let streams = RngStreams::new(sc.seed);

        let mut cpus = Vec::with_capacity(sc.cpus.count as usize);
        let mut apic_to_cpu = BTreeMap::new();
        let mut pda_to_cpu = BTreeMap::new();
        let mut first_of_core = BTreeMap::new();
        for c in 0..sc.cpus.count {
            let apic_id = sc.apic_id_of(c);
            // Hyper-threads of one core share its L1 and L2 (Intel SDM Vol. 3A, "Intel
            // Hyper-Threading Technology Architecture"), so they are one agent of the
            // line model, named by the core's first logical CPU. Their sharing of the
            // pipeline is not modelled.
            let cache_cpu = *first_of_core.entry(sc.place_of(c)).or_insert(c);
            let desc = PiDesc::new(POSTED_MSI_NOTIFICATION_VECTOR, apic_id);
            // CPUs fill sockets in order; each CPU's descriptor lives on its socket.
            let socket = sc.socket_of(c);
            let line = PidLine::with_desc(desc, socket);
            cpus.push(cpu::Cpu::new(
                LocalApic::new(ApicId(apic_id)),
                line,
                Agent::core(cache_cpu, socket),
            ));
            apic_to_cpu.insert(apic_id, c);
            pda_to_cpu.insert(sc.pid_address_of(c), c);
        }

        let remap_config = RemapConfig {
            table_entries: sc.iommu.irte_entries,
            iec_capacity: sc.iommu.iec_entries as usize,
            compat_allowed: sc.iommu.compat_allowed,
            costs: costs.remap.clone(),
            ..RemapConfig::default()
        };
        let mut remapper = InterruptRemapper::new(remap_config)
            .map_err(|e| ScenarioError::invalid_from("iommu", e))?;

        let mut arm = match sc.arch {
            scenario::Arch::Arm => {
                let config = sc.smmu.config(&costs.smmu_cmdq);
                let smmu = iommu_sim::smmuv3::Smmu::new(&config)
                    .map_err(|e| ScenarioError::invalid_from("smmu", e))?;
                let host = smmu_host::SmmuHost::new(sc, &smmu, &streams)?;
                Some(arm::ArmPath::new(sc.cpus.count, &config, host)?)
            }
            scenario::Arch::X86 => None,
        };
        if arm.is_some() {
            for (c, cpu) in cpus.iter_mut().enumerate() {
                let mut rd = apic_sim::gic::Redistributor::new(sim_core::CpuId(c as u32));
                rd.set_enable_lpis(true);
                cpu.gic = Some(Box::new(rd));
            }
        }
        let fabric = InterruptMessageFabric::new(&costs.fabric)
            .map_err(|e| ScenarioError::invalid_from("costs.fabric", e))?;

        // Root ports: every port a device sits on, in port order.
        let dp = sc.device_ports();
        let mut numbers: Vec<u32> = dp
            .devices
            .iter()
            .chain(&dp.nvme)
            .chain(&dp.vmd)
            .chain(&dp.nics)
            .copied()
            .collect();
        numbers.sort_unstable();
        numbers.dedup();
        let port_index = |n: u32| numbers.binary_search(&n).expect("collected") as u16;
        let mut ports: Vec<fabric::Port> = numbers
            .iter()
            .map(|&n| {
                let credits = sc.pcie.port_credits;
                fabric::Port {
                    number: n,
                    stack: sc.stack_of_port(n),
                    socket: sc.socket_of_port(n),
                    unit: sc.unit_of_port(n),
                    delivery: 0,
                    queue: VecDeque::new(),
                    state: fabric::PortState::Idle,
                    credits_free: credits,
                    credit_waiters: VecDeque::new(),
                    writes: 0,
                    msis: 0,
                    stalled_behind_msi: Duration::ZERO,
                    msi_out: Duration::ZERO,
                    write_busy: Duration::ZERO,
                }
            })
            .collect();
        let deliveries =
            fabric::delivery_paths(&mut ports, costs.fabric.delivery_shared_by, &fabric);
        let unit_socket: Vec<u16> = (0..sc.iommu.units)
            .map(|u| {
                ports
                    .iter()
                    .find(|p| p.unit as u32 == u)
                    .map_or(0, |p| p.socket)
            })
            .collect();

        let mut devices = Vec::with_capacity(sc.devices.len());
        let mut sources = Vec::with_capacity(sc.devices.len());
        for (i, d) in sc.devices.iter().enumerate() {
            let cpu = sc.target_cpu_of(i, &apic_to_cpu);
            let vector = Vector(d.vector as u8);
            let index = sc.irte_index_of(i);
            cpus[cpu as usize].register_handler(vector, HandlerRef::Dsa(i as u32));
            let message = match &mut arm {
                Some(arm) => arm.add_source(d.source_id, cpu, vector, d.msi_handle)?,
                None => {
                    let irte = make_irte(sc, cpu, vector, d.source_id)?;
                    remapper.set_irte(index, irte).map_err(|e| {
                        ScenarioError::invalid_from(&format!("devices[{i}].irte_index"), e)
                    })?;
                    encode_remappable(d.msi_handle.unwrap_or(index) as u16, false, 0)
                }
            };
            let name = sc.device_name(i);
            let model = match (&d.arrival, &d.closed_loop) {
                (Some(arrival), _) => {
                    DeviceModel::Open(DsaQueue::new(message, d.source_id, arrival.clone()))
                }
                (None, Some(job)) => DeviceModel::Closed {
                    wq: DsaWorkQueue::new(
                        job.wq.clone(),
                        &costs.dsa.device(),
                        message,
                        d.source_id,
                    ),
                    job: Box::new(job.clone()),
                    reap_cycles: job.reap_cycles.unwrap_or(costs.dsa.reap_cycles),
                    submit_cycles: job.submit_cycles.unwrap_or(costs.dsa.submit_cycles),
                    unreaped: 0,
                    reaped: 0,
                },
                (None, None) => unreachable!("validated: a device has arrival or closed_loop"),
            };
            let mut source = MsiSource::new(
                name.clone(),
                message,
                d.source_id,
                port_index(dp.devices[i]),
            );
            source.writes_record = matches!(model, DeviceModel::Open(_));
            source.flow_controlled = matches!(model, DeviceModel::Open(_));
            sources.push(source);
            devices.push(Device {
                rng: streams.stream(&stream_names::dsa(&name)),
                name,
                model,
                handler_cycles: d.handler_cycles.unwrap_or(costs.dsa.handler_cycles),
                source: sources.len() as u32 - 1,
            });
        }

        // I/O devices take the next free vector on their CPU and the next free IRTE.
        let mut used_irtes: std::collections::BTreeSet<u32> =
            (0..sc.devices.len()).map(|i| sc.irte_index_of(i)).collect();
        let mut next_irte = 0u32;
        // Posted: below the notification vector. Remapped: below Linux's call-function
        // vectors (0xfb, 0xfc), which cross calls use.
        let vector_limit = match sc.mode {
            DeliveryMode::Posted => POSTED_MSI_NOTIFICATION_VECTOR.0,
            DeliveryMode::Remapped => crate::kernel::ipi::CALL_FUNCTION_SINGLE_VECTOR.0,
        };
        let mut add_source = |new: io::NewSource| -> Result<u32, ScenarioError> {
            let io::NewSource {
                cpu,
                handler,
                name,
                source_id,
                port,
            } = new;
            let vector = cpus[cpu as usize]
                .free_vector(vector_limit)
                .ok_or_else(|| {
                    ScenarioError::invalid(
                        format!("{name}: interrupt vector on CPU {cpu}"),
                        "none free",
                        format!("at most {} device vectors per CPU", vector_limit - 0x21),
                    )
                })?;
            while used_irtes.contains(&next_irte) {
                next_irte += 1;
            }
            if next_irte >= sc.iommu.irte_entries {
                return Err(ScenarioError::invalid(
                    "iommu.irte_entries",
                    sc.iommu.irte_entries,
                    format!("enough entries for every MSI source ({name} needs one more)"),
                ));
            }
            let index = next_irte;
            used_irtes.insert(index);
            let message = match &mut arm {
                Some(arm) => arm.add_source(source_id, cpu, vector, None)?,
                None => {
                    remapper
                        .set_irte(index, make_irte(sc, cpu, vector, source_id)?)
                        .map_err(|e| ScenarioError::invalid_from("iommu.irte_entries", e))?;
                    encode_remappable(index as u16, false, 0)
                }
            };
            cpus[cpu as usize].register_handler(vector, handler);
            let mut source = MsiSource::new(name, message, source_id, port);
            match handler {
                HandlerRef::Vmd { domain, vector } => source.vmd = Some((domain, vector)),
                HandlerRef::NicQueue { .. } => source.flow_controlled = true,
                _ => {}
            }
            sources.push(source);
            Ok(sources.len() as u32 - 1)
        };
        let io_ports = io::IoPorts {
            nvme: dp.nvme.iter().map(|&n| port_index(n)).collect(),
            vmd: dp.vmd.iter().map(|&n| port_index(n)).collect(),
            nics: dp.nics.iter().map(|&n| port_index(n)).collect(),
        };
        let xcall = xcall::Xcall::new(sc, &streams)?;
        let io = io::build(io::IoBuild {
            sc,
            streams,
            ports: &io_ports,
            add_source: &mut add_source,
        })?;

        let ioapic = System::build_ioapic(sc, &mut cpus, &mut sources, &streams, vector_limit)?;
        let transmit = transmit::Transmit::new(
            sc,
            |nic, q| io.nics[nic as usize].queues[q as usize].cpu,
            |nic| io.nics[nic as usize].queues.len() as u16,
        )?;
        let queue = EventQueue::with_capacity(1024);
        let costs_for_timing = costs.clone();
        let migrations = migration::Migrations::new(sc, &apic_to_cpu);
        let mut system = System {
            name: sc.name.clone(),
            seed: sc.seed,
            mode: sc.mode,
            handler,
            line_prices: pid_model::PricedLineCosts::new(&costs.pid_line, freq),
            freq,
            queue,
            ledger: Ledger::new(cpus.len()),
            parked: ParkedPayloads::default(),
            cpus,
            apic_index: cpu_index::CpuIndex::new(
                apic_to_cpu.iter().map(|(&id, &cpu)| (u64::from(id), cpu)),
                0,
            ),
            pda_index: cpu_index::CpuIndex::new(pda_to_cpu, pid_model::PID_ALIGN.trailing_zeros()),
            iommus: (0..sc.iommu.units)
                .map(|u| IommuUnit {
                    remapper: remapper.clone(),
                    pipeline: RemapPipeline::new(),
                    in_pipeline: VecDeque::new(),
                    agent: Agent::iommu(unit_socket[u as usize]),
                    updates: 0,
                })
                .collect(),
            line_posts: (0..sc.cpus.count).map(|_| Default::default()).collect(),
            ports,
            deliveries,
            devices,
            sources,
            io,
            latency: Histogram::new_with_bounds(1, LATENCY_MAX_NS, 3)
                .expect("static histogram bounds are valid"),
            notifications_sent: 0,
            notifications_suppressed: 0,
            notifications_undeliverable: 0,
            served: ledger::Served::default(),
            end_of_scenario: SimTime::ZERO + Duration::from_secs_f64(sc.duration_us * 1e-6),
            costs,
            wall: std::time::Duration::ZERO,
            observer: None,
            arm,
            xcall,
            transmit,
            ioapic,
            retriggers: retrigger::Retriggers::new(sc),
            migrations,
            timing: Timing::new(&costs_for_timing, freq),
        };
        system.check_retrigger_vectors()?;
        system.start_devices();
        system.start_io();
        system.start_shootdowns();
        system.start_smmu_loads();
        system.start_transmit();
        system.start_ioapic();
        system.start_retriggers();
        system.start_migrations();
        Ok(system)
    }

    /// Runs a scenario for its `duration_us` and returns the report.
    pub fn run_scenario(scenario: &Scenario) -> Result<Report, ScenarioError> {
        let mut sys = System::new(scenario)?;
        sys.run_to_end();
        Ok(sys.report())
    }

    /// Runs until the scenario's `duration_us` has elapsed.
    pub fn run_to_end(&mut self) {
        let end = self.end_of_scenario;
        if end > self.now() {
            self.run_for(end.since(self.now()));
        }
    }

    /// Current simulated time.
    pub fn now(&self) -> SimTime {
        self.queue.now()
    }

    /// Events handled so far.
    pub fn events(&self) -> u64 {
        self.queue.events_popped()
    }

    /// Events scheduled and not yet handled (the engine queue's length).
    pub fn pending_events(&self) -> usize {
        self.queue.len()
    }

    /// The time of the next scheduled event, if any.
    pub fn next_event_time(&self) -> Option<SimTime> {
        self.queue.peek_time()
    }

    /// Where the scenario's `duration_us` ends, the time [`System::run_to_end`] runs to.
    pub fn end_of_scenario(&self) -> SimTime {
        self.end_of_scenario
    }

    /// Advances simulated time by `d`, handling every event due before the end.
    pub fn run_for(&mut self, d: Duration) {
        let started = Instant::now();
        let end = self.now() + d;
        while let Some((t, ev)) = self.queue.pop_until(end) {
            self.handle(t, ev);
        }
        self.queue.advance_to(end);
        self.catch_up_all_held(end);
        self.wall += started.elapsed();
    }

    /// Handles events until `done(self)` holds (checked after each event) or no event
    /// is due before `limit`. Returns whether the predicate held.
    pub fn run_until(&mut self, limit: SimTime, mut done: impl FnMut(&System) -> bool) -> bool {
        let started = Instant::now();
        let mut hit = done(self);
        while !hit {
            match self.queue.pop_until(limit) {
                Some((t, ev)) => {
                    self.handle(t, ev);
                    hit = done(self);
                }
                None => break,
            }
        }
        self.wall += started.elapsed();
        hit
    }

    /// Handles exactly one event; returns its time, or `None` if nothing is scheduled.
    pub fn step(&mut self) -> Option<SimTime> {
        let (t, ev) = self.queue.pop()?;
        self.handle(t, ev);
        Some(t)
    }

    /// Number of CPUs.
    pub fn cpu_count(&self) -> u32 {
        self.cpus.len() as u32
    }

    /// Names of the MSI sources (one per device vector), in the order the trace and
    /// [`SimEvent::MsiRaised`] number them.
    pub fn device_names(&self) -> Vec<String> {
        self.sources.iter().map(|s| s.name.clone()).collect()
    }

    /// MSIs handled so far.
    pub fn msis_handled(&self) -> u64 {
        self.ledger.handled
    }

    /// MSIs raised so far.
    pub fn msis_generated(&self) -> u64 {
        self.ledger.generated
    }

    fn handle(&mut self, now: SimTime, ev: Event) {
        match ev {
            Event::DeviceCompletion { device } => self.on_device_completion(now, device),
            Event::DsaSubmit { device } => self.on_dsa_submit(now, device),
            Event::DsaEngineDone { device } => self.on_dsa_engine_done(now, device),
            Event::IoWake { dev, generation } => self.on_io_wake(now, dev, generation),
            Event::PortReady { port } => self.on_port_ready(now, port),
            Event::PortWriteDone { port } => self.on_port_write_done(now, port),
            Event::PortMsiRetired { port } => self.port_msi_retired(now, port),
            Event::RemapDone { unit } => self.on_remap_done(now, unit),
            Event::LinePostDone { cpu } => self.on_line_post_done(now, cpu),
            Event::ApicMessage {
                cpu,
                vector,
                level,
                msi,
            } => {
                let msi = msi.map(|slot| self.parked.msis.take(slot));
                self.on_apic_message(now, cpu, vector, level, msi)
            }
            Event::CpuStep { cpu } => self.on_cpu_step(now, cpu),
            Event::GicLpi { cpu, intid, msi } => {
                let msi = self.parked.msis.take(msi);
                self.on_gic_lpi(now, cpu, intid, msi)
            }
            Event::ShootdownRequest { load, initiator } => {
                self.on_shootdown_request(now, load, initiator)
            }
            Event::IpiArrive { cpu, msg } => {
                let msg = self.parked.ipis.take(msg);
                self.on_ipi_arrive(now, cpu, msg)
            }
            Event::Retrigger { index } => self.on_retrigger(now, index),
            Event::MigrationIrteWrite { index } => self.on_migration_irte_write(now, index),
            Event::MigrationCleanup { index } => self.on_migration_cleanup_due(now, index),
            Event::SmmuCallRequest { load, cpu_index } => {
                self.on_smmu_call_request(now, load, cpu_index)
            }
            Event::SmmuProdArrive { prod } => self.on_smmu_prod_arrive(now, prod),
            Event::SmmuConsumeDone => self.on_smmu_consume_done(now),
            Event::SmmuSev => self.on_smmu_sev(now),
            Event::SmmuResume => self.smmu_try_consume(now),
            Event::SmmuMsiVisible { addr, data } => self.on_smmu_msi_visible(now, addr, data),
            Event::SmmuConsSample { cpu, generation } => self.on_smmu_cons_sample(cpu, generation),
            Event::SmmuTick { cpu, generation } => self.on_smmu_tick(now, cpu, generation),
            Event::SmmuWake { cpu, generation } => self.on_smmu_wake(now, cpu, generation),
            Event::IoapicAssert { pin } => self.on_ioapic_assert(now, pin),
            Event::IoapicDeassert { pin } => self.on_ioapic_deassert(now, pin),
            Event::TaskHoldDone { cpu, generation } => self.on_task_hold_done(now, cpu, generation),
            Event::InjectedPost { cpu, vector, urg } => {
                self.on_injected_post(now, cpu, vector, urg)
            }
            Event::InjectedSn { cpu, change } => {
                let change = self.parked.sn_changes.take(change);
                self.on_injected_sn(now, cpu, change)
            }
            Event::InjectedRecheck { cpu, by } => self.on_injected_recheck(now, cpu, by),
        }
    }

    fn on_apic_message(
        &mut self,
        now: SimTime,
        cpu: u32,
        vector: Vector,
        level: bool,
        msi: Option<MsiToken>,
    ) {
        let c = cpu as usize;
        let outcome = self.cpus[c].apic.accept(vector, level);
        if msi.is_none() && self.is_notification(vector) {
            self.emit_step(now, cpu, inject::AlgorithmStep::NotificationArrived);
        }
        if let Some(msi) = msi {
            self.ledger.fabric -= 1;
            match outcome {
                AcceptOutcome::Accepted => self.ledger.accepted_in_irr(c, vector, msi, false),
                AcceptOutcome::AlreadyPending => self.ledger.accepted_in_irr(c, vector, msi, true),
                AcceptOutcome::Rejected(reason) => self.drop_msi(
                    now,
                    msi,
                    match reason {
                        apic_sim::RejectReason::IllegalVector => "apic_illegal_vector",
                        apic_sim::RejectReason::SoftwareDisabled => "apic_software_disabled",
                    },
                ),
            }
        }
        self.try_take_interrupt(now, cpu);
    }

    /// A CPU with interrupts enabled (idle, or a task spinning) takes the highest
    /// deliverable interrupt; an idle CPU with none starts deferred work, or else
    /// continues its task.
    fn try_take_interrupt(&mut self, now: SimTime, cpu: u32) {
        let c = &self.cpus[cpu as usize];
        let spinning = c.state == CpuState::Spinning;
        let waiting = c.state == CpuState::Waiting;
        if c.state != CpuState::Idle && !spinning && !waiting {
            return;
        }
        let deliverable = self.interrupt_pending(cpu);
        let masked = self.irqs_masked(cpu);
        if !deliverable || masked {
            if waiting {
                if deliverable {
                    // WFE wakes on a pending interrupt even while it is masked.
                    self.smmu_wake_for_interrupt(now, cpu);
                }
            } else if !spinning && (masked || !self.start_deferred(now, cpu)) {
                self.run_task(now, cpu);
            }
            return;
        }
        if spinning {
            self.break_spin(now, cpu);
        }
        if waiting {
            self.break_wait(now, cpu);
        }
        let c = &mut self.cpus[cpu as usize];
        let mut cost = self.timing.irq_entry;
        let vector = if let Some(gic) = c.gic.as_mut() {
            // ICC_IAR1_EL1: acknowledge the highest pending LPI.
            let intid = gic.acknowledge();
            let arm = self.arm.as_ref().expect("a GIC means an Arm system");
            let Some((_, slot)) = arm.slot_of(intid) else {
                return; // spurious (1023): nothing to run
            };
            c.gic_active.push(intid);
            cost += arm.cpu_costs.iar_read(self.freq);
            slot
        } else {
            c.apic.acknowledge().expect("deliverable() was Some")
        };
        if self.is_notification(vector) {
            self.emit_step(now, cpu, inject::AlgorithmStep::Delivered);
        }
        let c = &mut self.cpus[cpu as usize];
        c.interrupts_taken += 1;
        c.state = CpuState::Entering(vector);
        c.time.irq_entry += cost;
        if !self.is_notification(vector) && !self.is_cross_call(vector) {
            self.ledger.acknowledged(cpu as usize, vector);
        }
        self.schedule_cpu_step(cpu, now + cost);
        self.emit_cpu_span(cpu, now, cost, || CpuActivity::IrqEntry { vector });
    }

    /// Whether `cpu` has an interrupt it would take if it could.
    fn interrupt_pending(&self, cpu: u32) -> bool {
        let c = &self.cpus[cpu as usize];
        match c.gic.as_ref() {
            Some(gic) => gic.highest_signalled().is_some(),
            None => c.apic.deliverable().is_some(),
        }
    }

    /// An LPI reaches a redistributor: pending (or merged with a pending one), or
    /// dropped when the redistributor has LPIs disabled.
    fn on_gic_lpi(&mut self, now: SimTime, cpu: u32, intid: u32, msi: MsiToken) {
        use apic_sim::gic::PendOutcome;
        self.ledger.fabric -= 1;
        let arm = self.arm.as_ref().expect("LPIs only on Arm");
        let (_, slot) = arm.slot_of(intid).expect("every mapped LPI has a slot");
        let c = cpu as usize;
        let gic = self.cpus[c]
            .gic
            .as_mut()
            .expect("an Arm CPU has a redistributor");
        match gic.set_pending(intid, &arm.lpis) {
            PendOutcome::Pending { .. } => self.ledger.accepted_in_irr(c, slot, msi, false),
            PendOutcome::Merged => self.ledger.accepted_in_irr(c, slot, msi, true),
            PendOutcome::LpisDisabled => self.drop_msi(now, msi, "lpis_disabled"),
        }
        self.try_take_interrupt(now, cpu);
    }

    /// The CPU's current activity ends at `at`.
    fn schedule_cpu_step(&mut self, cpu: u32, at: SimTime) {
        self.cpus[cpu as usize].activity_end = at;
        self.queue
            .schedule(at, Priority::CPU, Event::CpuStep { cpu });
    }

    fn is_notification(&self, vector: Vector) -> bool {
        self.mode == DeliveryMode::Posted && vector == POSTED_MSI_NOTIFICATION_VECTOR
    }

    /// A call-function IPI on an x86 system (on Arm, slots are LPIs).
    fn is_cross_call(&self, vector: Vector) -> bool {
        self.arm.is_none() && xcall::is_call_function_vector(vector)
    }

    // Always inlined into `handle`, its one caller: CPU steps are most of `large`'s
    // events, and LLVM's size heuristics otherwise make this arm a call.
    #[inline(always)]
    fn on_cpu_step(&mut self, now: SimTime, cpu: u32) {
        let c = cpu as usize;
        match self.cpus[c].state {
            CpuState::Idle => unreachable!("CpuStep for idle CPU {cpu}"),
            CpuState::Entering(vector) => {
                let co = if self.is_notification(vector) {
                    self.cpus[c].posted_handler_active = true;
                    Algorithm::Irq(Coroutine::from_boxed(|port| {
                        self.handler.run(CpuPort::new(port))
                    }))
                } else if self.is_cross_call(vector) {
                    self.call_function_handler()
                } else if let Some(alg) = self.invalidate_handler(vector) {
                    alg
                } else if let Some(alg) = match self.cpus[c].handler_of(vector) {
                    HandlerRef::IoapicPin(pin) => self.ioapic_hardirq(pin, vector),
                    _ => None,
                } {
                    alg
                } else if let Some(alg) = self.posted_vector_through_idt(cpu, vector) {
                    alg
                } else if self.arm.is_some() {
                    Algorithm::Irq(Coroutine::new(move |port| async move {
                        baseline::handle_fasteoi_irq(&CpuPort::new(port), vector).await
                    }))
                } else {
                    Algorithm::Irq(Coroutine::new(move |port| async move {
                        baseline::handle_edge_msi(&CpuPort::new(port), vector).await
                    }))
                };
                self.cpus[c].coroutine = Some(co);
                self.cpus[c].state = CpuState::Running(vector);
                self.resume_algorithm(now, cpu, None);
            }
            CpuState::Running(vector) => {
                let result = match self.cpus[c]
                    .op_in_flight
                    .take()
                    .expect("running CPU stepped with no operation in flight")
                {
                    OpInFlight::Cpu(op) => {
                        let value = self.complete_op(now, cpu, op);
                        if self.observing() && self.is_notification(vector) {
                            self.emit_step(
                                now,
                                cpu,
                                inject::AlgorithmStep::Completed { op, value },
                            );
                        }
                        value
                    }
                    OpInFlight::Ipi(op, value) => {
                        self.complete_ipi_op(now, cpu, op);
                        value
                    }
                    OpInFlight::Ioapic(op) => self.complete_ioapic_op(now, cpu, op),
                };
                self.resume_algorithm(now, cpu, Some(result));
            }
            CpuState::Task => self.on_task_step(now, cpu),
            CpuState::Spinning => unreachable!("CpuStep for spinning CPU {cpu}"),
            CpuState::Waiting => unreachable!("CpuStep for waiting CPU {cpu}"),
            CpuState::Exiting => {
                self.cpus[c].state = CpuState::Idle;
                self.try_take_interrupt(now, cpu);
            }
            CpuState::Deferred(work) => self.finish_deferred(now, cpu, work),
        }
    }

    /// Applies the effect of an operation at its completion time and returns its result.
    fn complete_op(&mut self, now: SimTime, cpu: u32, op: CpuOp) -> u64 {
        // Taken before the CPU is borrowed, so that the unobserved path indexes it once.
        // Whether `op` touches the line does not depend on the control word.
        let before = if self.observing() && line_op_of(op, 0).is_some() {
            self.line_snapshot(cpu)
        } else {
            Vec::new()
        };
        let c = &mut self.cpus[cpu as usize];
        if let Some(line_op) = line_op_of(op, c.pid.desc().control()) {
            let stored_over = match op {
                CpuOp::StorePir { word, .. } => c.pid.desc().pir_word(word),
                _ => 0,
            };
            let result = c.pid.perform(c.agent, line_op);
            let value = match op {
                CpuOp::StorePir { word, value } => {
                    // Bits a plain store clears have left PIR as surely as an
                    // exchange's: whatever handles them now is the variant's business.
                    self.ledger
                        .harvested_word(cpu as usize, word, stored_over & !value);
                    0
                }
                CpuOp::LoadPir { .. } => result.word().expect("a load yields a word"),
                CpuOp::XchgPir { word, .. } => {
                    let old = result.word().expect("an exchange yields the old word");
                    self.ledger.harvested_word(cpu as usize, word, old);
                    old
                }
                CpuOp::TestAndClearOn => {
                    result.bit().expect("test-and-clear yields the old bit") as u64
                }
                _ => 0,
            };
            self.emit_line_changes(now, cpu, &before);
            return value;
        }
        if op == CpuOp::Eoi {
            match c.gic.as_mut() {
                Some(gic) => {
                    let intid = c.gic_active.pop().expect("EOI of an acknowledged LPI");
                    let _ = gic.eoi(intid);
                }
                None => {
                    let _ = c.apic.eoi();
                }
            }
        }
        0
    }

    /// Resumes the CPU's algorithm and schedules its next operation, or the exit.
    fn resume_algorithm(&mut self, now: SimTime, cpu: u32, result: Option<u64>) {
        let c = cpu as usize;
        let step = self.cpus[c]
            .coroutine
            .as_mut()
            .expect("running CPU has an algorithm")
            .resume(result);
        if self.observing() {
            if let CpuState::Running(v) = self.cpus[c].state {
                if self.is_notification(v) {
                    let s = match step {
                        Step::Request(KernelOp::Cpu(op)) => inject::AlgorithmStep::Requested { op },
                        _ => inject::AlgorithmStep::Returned,
                    };
                    self.emit_step(now, cpu, s);
                }
            }
        }
        let (in_flight, cost) = match step {
            Step::Done => {
                if let CpuState::Running(v) = self.cpus[c].state {
                    if self.is_notification(v) {
                        self.cpus[c].posted_handler_active = false;
                    }
                }
                self.cpus[c].coroutine = None;
                self.cpus[c].state = CpuState::Exiting;
                let cost = self.timing.irq_exit;
                self.cpus[c].time.irq_exit += cost;
                self.emit_cpu_span(cpu, now, cost, || CpuActivity::IrqExit);
                (None, cost)
            }
            Step::Request(KernelOp::Cpu(op)) => {
                let cost = self.start_op(now, cpu, op);
                (Some(OpInFlight::Cpu(op)), cost)
            }
            Step::Request(KernelOp::Ioapic(op)) => {
                let cost = self.start_irq_ioapic_op(now, cpu, op);
                (Some(OpInFlight::Ioapic(op)), cost)
            }
            Step::Request(KernelOp::Ipi(op)) => {
                let (in_flight, cost) = self.start_handler_ipi_op(now, cpu, op);
                (Some(in_flight), cost)
            }
        };
        // The operation in flight, its count and the step's end, under one index of
        // the CPU: what `schedule_cpu_step` does, without indexing the CPU again.
        let at = now + cost;
        let cpu_ref = &mut self.cpus[c];
        if let Some(in_flight) = in_flight {
            if let OpInFlight::Cpu(op) = in_flight {
                cpu_ref.ops.count(op);
            }
            cpu_ref.op_in_flight = Some(in_flight);
        }
        cpu_ref.activity_end = at;
        self.queue
            .schedule(at, Priority::CPU, Event::CpuStep { cpu });
    }

    /// Charges an operation at issue and does what happens at its start.
    fn start_op(&mut self, now: SimTime, cpu: u32, op: CpuOp) -> Duration {
        let c = cpu as usize;
        let cpu_ref = &mut self.cpus[c];
        if let Some(line_op) = line_op_of(op, cpu_ref.pid.desc().control()) {
            // A miss waits while the line is in flight to another agent (an IOMMU
            // post holding it, another CPU's transfer); a hit does not touch it.
            let cost =
                cpu_ref
                    .pid
                    .timed_cost_priced(cpu_ref.agent, &line_op, now, &self.line_prices);
            cpu_ref.time.pid_access += cost;
            self.emit_cpu_span(cpu, now, cost, || CpuActivity::PidAccess { op });
            return cost;
        }
        match op {
            CpuOp::HandleVector(vector) if self.migrations.is_freed(cpu, vector) => {
                let cost = self.dispatch_freed_vector(cpu, vector);
                self.cpus[c].time.handlers += cost;
                self.emit_cpu_span(cpu, now, cost, || CpuActivity::Handler { vector });
                cost
            }
            CpuOp::HandleVector(vector) => {
                self.ledger.handler_started(c, vector, &mut self.served);
                for msi in &self.served.exact {
                    let ns = now.since(msi.raised).as_ps().div_ceil(1000);
                    self.latency.saturating_record(ns);
                }
                for span in &self.served.spans {
                    let ns = now.since(span.midpoint()).as_ps().div_ceil(1000);
                    self.latency.saturating_record_n(ns, span.count);
                }
                self.cpus[c].handler_calls += 1;
                let body = match self.cpus[c].handler_of(vector) {
                    HandlerRef::Dsa(d) => {
                        self.device_handler_cycles(now, d, self.served.count() as usize)
                    }
                    HandlerRef::None => 0.0,
                    other => self.io_handler_cycles(now, cpu, other),
                };
                let cost = self.freq.cycles_f64(self.costs.cpu.irq_flow_cycles + body);
                self.cpus[c].time.handlers += cost;
                if let Some(o) = self.observer.as_deref_mut() {
                    o.event(&SimEvent::HandlerServes {
                        t: now,
                        cpu,
                        vector,
                        msis: &self.served.exact,
                        more: self.served.in_spans(),
                    });
                }
                self.emit_cpu_span(cpu, now, cost, || CpuActivity::Handler { vector });
                cost
            }
            CpuOp::Eoi => {
                let cost = match &self.arm {
                    Some(arm) => arm.cpu_costs.eoir_write(self.freq),
                    None => self.freq.cycles(self.costs.apic.wrmsr_eoi_cycles as u64),
                };
                self.cpus[c].time.eoi += cost;
                self.emit_cpu_span(cpu, now, cost, || CpuActivity::Eoi);
                cost
            }
            CpuOp::Mfence => {
                let cost = self.freq.cycles_f64(self.costs.cpu.mfence_cycles);
                self.cpus[c].time.pid_access += cost;
                self.emit_cpu_span(cpu, now, cost, || CpuActivity::PidAccess { op });
                cost
            }
            _ => unreachable!("line operations returned above"),
        }
    }

    /// The report of the run so far.
    pub fn report(&self) -> Report {
        let now = self.now();
        let pending = self.ledger.pending();
        let balanced = self.ledger.is_balanced();
        let elapsed_ns = now.as_ns_f64();

        let mut pid = PidLineReport::default();
        let mut cpu_reports = Vec::with_capacity(self.cpus.len());
        for (i, c) in self.cpus.iter().enumerate() {
            for (agent, counters) in c.pid.all_counters() {
                if agent.is_iommu() {
                    pid.iommu_modified_transfers += counters.modified_transfers;
                } else {
                    pid.cpu_misses += counters.l1_misses;
                    pid.cpu_loads += counters.loads;
                    pid.cpu_locked_ops += counters.stores_or_rmw;
                    pid.cpu_rfos += counters.rfos;
                    pid.cpu_invalidations_received += counters.invalidations_received;
                    pid.cpu_modified_transfers += counters.modified_transfers;
                }
            }
            let mut agents = Vec::new();
            for (agent, tr) in c.pid.all_transitions() {
                let mut transitions = BTreeMap::new();
                for from in pid_model::Mesi::ALL {
                    for to in pid_model::Mesi::ALL {
                        let n = tr.get(from, to);
                        if n > 0 {
                            transitions.insert(format!("{from:?}->{to:?}"), n);
                            if !agent.is_iommu() {
                                *pid.cpu_transitions
                                    .entry(format!("{from:?}->{to:?}"))
                                    .or_insert(0) += n;
                            }
                        }
                    }
                }
                agents.push(PidAgentReport {
                    agent: match agent {
                        Agent::Core { cpu, .. } => format!("cpu{}", cpu.0),
                        Agent::Iommu { .. } => "iommu".into(),
                        Agent::Dma { id, .. } => format!("dma{id}"),
                    },
                    state: format!("{:?}", c.pid.state(*agent)),
                    counters: c.pid.counters(*agent),
                    transitions,
                });
            }
            pid.lines.push(PidLineDetail {
                cpu: i as u32,
                agents,
            });
            // Work is charged when it starts; leave out the part of the activity in
            // progress that lies after `now`.
            let busy = c.time.busy().saturating_sub(c.activity_end.since(now));
            cpu_reports.push(CpuReport {
                cpu: i as u32,
                apic_id: c.apic.id().0,
                busy_ns: busy.as_ns_f64(),
                busy_frac: if elapsed_ns > 0.0 {
                    busy.as_ns_f64() / elapsed_ns
                } else {
                    0.0
                },
                irq_entry_ns: c.time.irq_entry.as_ns_f64(),
                irq_exit_ns: c.time.irq_exit.as_ns_f64(),
                handlers_ns: c.time.handlers.as_ns_f64(),
                pid_access_ns: c.time.pid_access.as_ns_f64(),
                eoi_ns: c.time.eoi.as_ns_f64(),
                softirq_ns: c.time.softirq.as_ns_f64(),
                app_ns: c.time.app.as_ns_f64(),
                cross_call_ns: c.time.cross_call.as_ns_f64(),
                smmu_ns: c.time.smmu.as_ns_f64(),
                tx_ns: c.time.tx.as_ns_f64(),
                funcs_run: c.funcs_run,
                interrupts_taken: c.interrupts_taken,
                handler_calls: c.handler_calls,
                pir_loads: c.ops.pir_loads,
                pir_xchgs: c.ops.pir_xchgs,
                on_clears: c.ops.on_clears,
                eois: c.ops.eois,
                pir_stores: c.ops.pir_stores,
                fences: c.ops.fences,
                pid_l1_misses: c.pid.counters(c.agent).l1_misses,
                pending_by_vector: self
                    .ledger
                    .pending_by_vector(i)
                    .into_iter()
                    .map(|(v, n)| (format!("{:#04x}", v.0), n))
                    .collect(),
            });
        }
        pid.iommu_updates = self.iommus.iter().map(|u| u.updates).sum();

        let mut iommu = IommuReport {
            units: self.iommus.len() as u32,
            ..IommuReport::default()
        };
        let (mut wait_ps, mut max_wait_ps) = (0u64, 0u64);
        for d in &self.deliveries {
            let c = d.path.counters();
            iommu.fabric_messages += c.submitted;
            wait_ps += c.total_wait_ps;
            max_wait_ps = max_wait_ps.max(c.max_wait_ps);
        }
        for unit in &self.iommus {
            let rc = unit.remapper.counters();
            let faults = unit.remapper.fault_log().counts();
            let iec = unit.remapper.iec().counters();
            iommu.remapped += rc.remapped;
            iommu.posted += rc.posted;
            for r in FaultReason::ALL {
                let n = faults.occurred.get(r);
                if n > 0 {
                    *iommu.faults.entry(r.name().to_string()).or_insert(0) += n;
                }
            }
            iommu.fault_records_kept += unit.remapper.fault_log().records().len() as u64;
            iommu.iec_hits += iec.hits;
            iommu.iec_misses += iec.misses;
        }
        if iommu.fabric_messages > 0 {
            iommu.fabric_mean_wait_ns = wait_ps as f64 / 1e3 / iommu.fabric_messages as f64;
        }
        iommu.fabric_max_wait_ns = max_wait_ps as f64 / 1e3;

        let latency_ns = LatencySummary::of(&self.latency);

        let interrupts_taken = self.cpus.iter().map(|c| c.interrupts_taken).sum();
        let sources = self.source_reports();
        let held_back = sources.iter().map(|s| s.msi_backlog).sum();
        Report {
            scenario: self.name.clone(),
            seed: self.seed,
            mode: self.mode.as_str().into(),
            variant: self.handler.name().into(),
            variant_broken: self.handler.is_broken(),
            sim_time_ns: elapsed_ns,
            events: self.queue.events_popped(),
            msis: MsiBalance {
                generated: self.ledger.generated,
                handled: self.ledger.handled,
                pending: pending.total(),
                pending_where: pending,
                dropped: self.ledger.dropped.clone(),
                merged: self.ledger.merged,
                spurious_handler_calls: self.ledger.spurious_handler_calls,
                held_back_in_devices: held_back,
                oldest_pending_at_cpu_age_ns: self
                    .ledger
                    .oldest_at_cpus()
                    .map(|raised| self.now().since(raised).as_ns_f64()),
                balanced,
            },
            notifications: Notifications {
                sent: self.notifications_sent,
                suppressed: self.notifications_suppressed,
            },
            interrupts_taken,
            cpu: cpu_reports,
            pid_line: pid,
            iommu,
            devices: self
                .devices
                .iter()
                .map(|d| d.report(&self.sources, self.now()))
                .collect(),
            io: self.io_report(),
            fabric: self.fabric_report(),
            sources,
            cross_calls: self.xcall_report(),
            smmu: self.smmu_report(),
            ioapic: self.ioapic_report(),
            retriggers: self.retrigger_report(),
            migrations: self.migrations_report(),
            transmit: self.transmit_report(),
            latency_ns,
            handled_per_s: if elapsed_ns > 0.0 {
                self.ledger.handled as f64 / (elapsed_ns * 1e-9)
            } else {
                0.0
            },
            wall_time_s: self.wall.as_secs_f64(),
            note: MODEL_NOTE,
        }
    }
}
