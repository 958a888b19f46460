//! I/O devices in a [`System`]: NVMe drives driven by fio-like jobs, VMD domains in
//! remap or bypass mode, and NIC queues with NAPI.
//!
//! The devices themselves are the `devices` crate's state machines; this module gives
//! them the host: vectors and IRTEs, the Linux handlers (`nvme_irq`, `vmd_irq`, the NIC
//! hardirq that schedules NAPI), the softirq poll, the jobs' submissions as application
//! work, and the wake-ups the devices ask for.

use devices::{
    cpu_to_queue, Affinity, ArrivalSpec, ChildClass, ChildIrq, CqEntry, NapiConfig, NicConfig,
    NicEffect, NicQueue, NodeCpus, NvmeConfig, NvmeDrive, NvmeSubmitOutcome, NvmeWrite, SpreadMemo,
    VectorMatrix, VmdConfig, VmdDomain, VmdMode, VmdRoute,
};
use hdrhistogram::Histogram;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use sim_core::SimTime;

use super::cpu::{Deferred, HandlerRef};
use super::fabric::{Landing, PortWrite};
use super::latency_log::{empty_histogram, LatencyLog};
use super::ledger::MsiToken;
use super::scenario::{Scenario, ScenarioError};
use super::stream_names;
use super::{CpuActivity, CpuState, Event, System};
use crate::engine::Priority;

/// One NVMe drive.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvmeDriveConfig {
    /// Names the drive's random stream and its queues' MSI sources.
    #[serde(default)]
    pub name: String,
    /// The drive: queues, depth, IOPS ceiling, latency, coalescing.
    #[serde(default)]
    pub drive: NvmeConfig,
    /// How its I/O queue interrupts spread over CPUs; default Linux managed spreading.
    #[serde(default)]
    pub affinity: Affinity,
    /// Index into `vmd` when the drive sits behind a VMD domain.
    #[serde(default)]
    pub vmd: Option<u32>,
    #[serde(default)]
    /// PCI requester id (bus << 8 | devfn) of the drive's MSIs.
    pub source_id: u16,
    /// The root port the drive sits behind (drives behind one switch share one);
    /// unset, a port of its own.
    #[serde(default)]
    pub port: Option<u32>,
    /// `nvme_irq`'s fixed cost per call, beyond reaping entries, in CPU cycles; unset,
    /// the platform's `costs.nvme_host.irq_cycles`.
    #[serde(default)]
    pub handler_cycles: Option<f64>,
}

/// A fio-like job: pinned to `cpu`, keeps `iodepth` reads in flight on `drive`, on the
/// queue blk-mq maps to that CPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobConfig {
    /// CPU the job runs on (index).
    pub cpu: u32,
    /// Index of the drive in `nvme`.
    pub drive: u32,
    /// Reads the job keeps in flight.
    pub iodepth: u32,
    /// Bytes each read transfers (fio `bs`); the data crosses the drive's link ahead
    /// of its CQ entry. Default 4096.
    #[serde(default = "default_block_bytes")]
    pub block_bytes: u32,
}

fn default_block_bytes() -> u32 {
    4096
}

/// One VMD domain.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmdDomainConfig {
    #[serde(default)]
    /// Names the domain in reports and its vectors' MSI sources.
    pub name: String,
    #[serde(default)]
    /// Mode (remap or bypass), vector count and forwarding delay.
    pub vmd: VmdConfig,
    #[serde(default)]
    /// PCI requester id (bus << 8 | devfn) of VMD's own MSIs.
    pub source_id: u16,
    /// The port VMD's own MSIs leave through (VMD is an endpoint of its stack, so give
    /// it a port of its stack); unset, a port of its own.
    #[serde(default)]
    pub port: Option<u32>,
    /// `vmd_irq`'s own cost per call, CPU cycles; unset, the platform's
    /// `costs.vmd.handler_cycles`.
    #[serde(default)]
    pub handler_cycles: Option<f64>,
}

/// One NIC with RX/TX queue pairs, each with its own MSI-X vector.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NicDeviceConfig {
    #[serde(default)]
    /// Names the NIC's random stream and its queues' MSI sources.
    pub name: String,
    /// Queue pairs.
    #[serde(default = "one")]
    pub queues: u32,
    #[serde(default)]
    /// How its queue interrupts spread over CPUs; default Linux managed spreading.
    pub affinity: Affinity,
    /// Packet arrivals on each RX queue; unset: none (a transmit-only NIC).
    #[serde(default)]
    pub rx: Option<ArrivalSpec>,
    /// Packets the host hands each TX queue, if any.
    #[serde(default)]
    pub tx: Option<ArrivalSpec>,
    #[serde(default)]
    /// Rings and interrupt throttling (ITR) of each queue.
    pub nic: NicConfig,
    #[serde(default)]
    /// NAPI poll budget and per-packet costs.
    pub napi: NapiConfig,
    #[serde(default)]
    /// PCI requester id (bus << 8 | devfn) of the NIC's MSIs.
    pub source_id: u16,
    /// The NIC's root port; unset, a port of its own.
    #[serde(default)]
    pub port: Option<u32>,
    /// The hardirq handler's cost, CPU cycles; unset, the platform's
    /// `costs.nic.irq_cycles`.
    #[serde(default)]
    pub handler_cycles: Option<f64>,
}

fn one() -> u32 {
    1
}

pub(super) struct NvmeRt {
    pub name: String,
    pub drive: NvmeDrive,
    pub rng: ChaCha8Rng,
    pub handler_cycles: f64,
    /// MSI source of each I/O queue (used when not remapped by VMD).
    pub queue_source: Vec<u32>,
    /// VMD domain and this drive's child index in it, when behind VMD.
    pub vmd: Option<(u16, u32)>,
    pub wake: Wake,
    pub latency: LatencyLog,
    pub reaped: u64,
    pub interrupts: u64,
    /// Handler calls that found the CQ empty.
    pub empty_calls: u64,
    /// Index of the drive's root port (into `System::ports`).
    pub port: u16,
    /// Link time of one read's data and its CQ entry.
    pub completion_link: sim_core::Duration,
    /// When the drive's link is free for its next upstream write.
    pub link_free: SimTime,
}

pub(super) struct JobRt {
    pub cpu: u32,
    pub drive: u16,
    pub queue: u16,
    pub next_tag: u64,
    /// Submissions waiting for the job's CPU.
    pub queued: u64,
    pub rejected: u64,
}

pub(super) struct VmdRt {
    pub name: String,
    pub domain: VmdDomain,
    pub handler_cycles: f64,
    /// MSI source of each VMD vector that has children (else `u32::MAX`).
    pub vector_source: Vec<u32>,
    /// The drive behind each child, in probe order (child i is `child_drive[i]`).
    pub child_drive: Vec<u16>,
    pub child_calls: u64,
    pub empty_child_calls: u64,
    /// Index of VMD's own port (into `System::ports`).
    pub port: u16,
    /// Per VMD vector: the outstanding VMD MSI that merging child MSIs ride on.
    pub lead: Vec<Option<MsiToken>>,
    /// VMD's own MSIs written and not yet delivered.
    pub queued: u32,
    /// How many of its own MSIs VMD holds (`pcie.port_credits`); a child MSI that
    /// would need one more waits in its port.
    pub capacity: u32,
    /// Ports whose head child MSI waits for room, in arrival order.
    pub waiting_ports: std::collections::VecDeque<u16>,
}

pub(super) struct NicRt {
    pub name: String,
    pub queues: Vec<NicQueueRt>,
    pub napi: NapiConfig,
    pub handler_cycles: f64,
}

pub(super) struct NicQueueRt {
    pub queue: NicQueue,
    /// The queue's own random stream: a queue whose full ring parks its arrivals
    /// draws them later, in bulk, without moving any other queue's draws.
    pub rng: ChaCha8Rng,
    pub source: u32,
    pub cpu: u32,
    pub wake: Wake,
    pub napi_scheduled: bool,
    pub last_poll_under_budget: bool,
    pub latency: LatencyLog,
}

/// When a device asked to be woken, and a generation that voids older wake-ups.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Wake {
    pub at: Option<SimTime>,
    pub generation: u32,
}

/// Which device a wake-up is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum IoDev {
    Nvme(u16),
    Nic { nic: u16, queue: u16 },
}

/// Everything I/O a system holds.
#[derive(Default)]
pub(super) struct Io {
    pub nvme: Vec<NvmeRt>,
    pub jobs: Vec<JobRt>,
    pub vmd: Vec<VmdRt>,
    pub nics: Vec<NicRt>,
    pub nvme_writes: Vec<NvmeWrite>,
    pub nic_effects: Vec<NicEffect>,
    pub cq: Vec<CqEntry>,
    pub arrivals: Vec<SimTime>,
    /// (CPU, job) of each job an NVMe interrupt's reaping wakes: a buffer kept across
    /// interrupts, like `cq`, so reaping allocates nothing.
    pub woken_jobs: Vec<(u32, u32)>,
}

/// Checks the I/O part of a scenario.
pub(super) fn validate(sc: &Scenario) -> Result<(), ScenarioError> {
    let ncpus = sc.cpus.count;
    let node = NodeCpus::flat(ncpus);
    for (i, d) in sc.nvme.iter().enumerate() {
        let f = format!("nvme[{i}]");
        d.drive.validate(&format!("{f}.drive"))?;
        d.affinity
            .check(d.drive.queues, &node, &format!("{f}.affinity"))?;
        if let Some(v) = d.vmd {
            if v as usize >= sc.vmd.len() {
                return Err(ScenarioError::invalid(
                    format!("{f}.vmd"),
                    v,
                    format!("an index into vmd (it has {} domains)", sc.vmd.len()),
                ));
            }
        }
        if let Some(c) = d.handler_cycles {
            super::costs::check_non_negative(&format!("{f}.handler_cycles"), c)?;
        }
    }
    for (i, j) in sc.jobs.iter().enumerate() {
        let f = format!("jobs[{i}]");
        if j.cpu >= ncpus {
            return Err(ScenarioError::invalid(
                format!("{f}.cpu"),
                j.cpu,
                format!("a CPU index below cpus.count ({ncpus})"),
            ));
        }
        let Some(drive) = sc.nvme.get(j.drive as usize) else {
            return Err(ScenarioError::invalid(
                format!("{f}.drive"),
                j.drive,
                format!("an index into nvme (it has {} drives)", sc.nvme.len()),
            ));
        };
        let limit = drive.drive.queue_entries - 1;
        if j.iodepth == 0 || j.iodepth > limit {
            return Err(ScenarioError::invalid(
                format!("{f}.iodepth"),
                j.iodepth,
                format!("1..={limit} (the queue's entries minus one)"),
            ));
        }
        if j.block_bytes == 0 || j.block_bytes > 1 << 30 {
            return Err(ScenarioError::invalid(
                format!("{f}.block_bytes"),
                j.block_bytes,
                "1..=1073741824 bytes",
            ));
        }
    }
    for (i, v) in sc.vmd.iter().enumerate() {
        let f = format!("vmd[{i}]");
        v.vmd.validate(&format!("{f}.vmd"))?;
        if let Some(c) = v.handler_cycles {
            super::costs::check_non_negative(&format!("{f}.handler_cycles"), c)?;
        }
    }
    for (i, n) in sc.nics.iter().enumerate() {
        let f = format!("nics[{i}]");
        if n.queues == 0 || n.queues > 4096 {
            return Err(ScenarioError::invalid(
                format!("{f}.queues"),
                n.queues,
                "1..=4096",
            ));
        }
        n.nic.validate(&format!("{f}.nic"))?;
        n.napi.validate(&format!("{f}.napi"))?;
        if let Some(rx) = &n.rx {
            rx.validate(&format!("{f}.rx"))?;
        }
        if let Some(tx) = &n.tx {
            tx.validate(&format!("{f}.tx"))?;
        }
        n.affinity
            .check(n.queues, &node, &format!("{f}.affinity"))?;
        if let Some(c) = n.handler_cycles {
            super::costs::check_non_negative(&format!("{f}.handler_cycles"), c)?;
        }
    }
    Ok(())
}

/// A new MSI source: the target CPU, its handler, its name, its requester id and the
/// index of its root port.
pub(super) struct NewSource {
    pub cpu: u32,
    pub handler: HandlerRef,
    pub name: String,
    pub source_id: u16,
    pub port: u16,
}

/// What building the I/O part needs from the rest of the build.
pub(super) struct IoBuild<'a> {
    pub sc: &'a Scenario,
    pub streams: crate::engine::RngStreams,
    /// Index (into `System::ports`) of each device's port, by the scenario's lists.
    pub ports: &'a IoPorts,
    /// Registers a vector on the source's CPU for its handler; returns the source
    /// index. Errors when the CPU has no vector left or the IRT is full.
    pub add_source: &'a mut dyn FnMut(NewSource) -> Result<u32, ScenarioError>,
}

/// Indexes into `System::ports` of the I/O devices.
pub(super) struct IoPorts {
    pub nvme: Vec<u16>,
    pub vmd: Vec<u16>,
    pub nics: Vec<u16>,
}

/// Builds the I/O devices of `b.sc`.
pub(super) fn build(b: IoBuild<'_>) -> Result<Io, ScenarioError> {
    let sc = b.sc;
    let ncpus = sc.cpus.count;
    let node = NodeCpus::flat(ncpus);
    let mut spreads = SpreadMemo::new(&node);
    let mut io = Io::default();
    // VMD domains first: their children assign vectors in probe order.
    for (i, v) in sc.vmd.iter().enumerate() {
        io.vmd.push(VmdRt {
            name: sc.vmd_name(i),
            domain: VmdDomain::new(
                v.vmd.clone(),
                sc.costs.vmd.forward_ns,
                &format!("vmd[{i}].vmd"),
            )?,
            handler_cycles: v.handler_cycles.unwrap_or(sc.costs.vmd.handler_cycles),
            vector_source: vec![u32::MAX; v.vmd.vectors as usize],
            child_drive: Vec::new(),
            child_calls: 0,
            empty_child_calls: 0,
            port: b.ports.vmd[i],
            lead: vec![None; v.vmd.vectors as usize],
            queued: 0,
            capacity: sc.pcie.port_credits,
            waiting_ports: std::collections::VecDeque::new(),
        });
    }
    let mut children_per_vmd = vec![0u32; sc.vmd.len()];
    for (i, d) in sc.nvme.iter().enumerate() {
        let name = sc.nvme_name(i);
        let targets =
            d.affinity
                .resolve_in(d.drive.queues, &mut spreads, &format!("nvme[{i}].affinity"))?;
        let mut vmd = None;
        let mut queue_source = Vec::with_capacity(targets.len());
        let remapped_by_vmd = match d.vmd {
            Some(v) => {
                let child = children_per_vmd[v as usize];
                children_per_vmd[v as usize] += 1;
                vmd = Some((v as u16, child));
                io.vmd[v as usize].child_drive.push(i as u16);
                let dom = &mut io.vmd[v as usize].domain;
                // Probe order: the admin queue's vector (0), then the I/O queues'.
                for irq in 0..=d.drive.queues {
                    dom.assign(ChildIrq { child, irq }, ChildClass::Nvme)?;
                }
                dom.config().mode == VmdMode::Remap
            }
            None => false,
        };
        for (q, cpu) in targets.iter().enumerate() {
            if remapped_by_vmd {
                queue_source.push(u32::MAX);
            } else {
                let handler = HandlerRef::NvmeQueue {
                    drive: i as u16,
                    queue: q as u16,
                };
                queue_source.push((b.add_source)(NewSource {
                    cpu: cpu.0,
                    handler,
                    name: stream_names::queue_source(&name, q),
                    source_id: d.source_id,
                    port: b.ports.nvme[i],
                })?);
            }
        }
        // The read size of the drive's jobs sets how long a completion's data holds
        // the link.
        let block = sc
            .jobs
            .iter()
            .find(|j| j.drive as usize == i)
            .map_or(4096, |j| j.block_bytes);
        io.nvme.push(NvmeRt {
            rng: b.streams.stream(&stream_names::nvme(&name)),
            name,
            drive: NvmeDrive::new(d.drive.clone(), &sc.costs.nvme, &format!("nvme[{i}].drive"))?,
            handler_cycles: d.handler_cycles.unwrap_or(sc.costs.nvme_host.irq_cycles),
            port: b.ports.nvme[i],
            completion_link: sc
                .costs
                .nvme
                .link_time(block as u64 + devices::nvme::CQE_BYTES as u64),
            link_free: SimTime::ZERO,
            queue_source,
            vmd,
            wake: Wake::default(),
            latency: LatencyLog::default(),
            reaped: 0,
            interrupts: 0,
            empty_calls: 0,
        });
    }
    // VMD's own vectors: unmanaged (all CPUs), placed by the x86 vector allocator.
    let mut matrix = VectorMatrix::new(ncpus);
    for (v, vc) in sc.vmd.iter().enumerate() {
        if vc.vmd.mode != VmdMode::Remap {
            continue;
        }
        for vec in 0..vc.vmd.vectors as u16 {
            if io.vmd[v].domain.children_on_vector(vec).is_empty() {
                continue;
            }
            let mask = devices::AffinityMask {
                cpus: node.all(),
                managed: false,
            };
            let cpu = matrix.place(std::slice::from_ref(&mask))[0].0;
            let handler = HandlerRef::Vmd {
                domain: v as u16,
                vector: vec,
            };
            let name = stream_names::vmd_vector_source(&io.vmd[v].name, vec);
            io.vmd[v].vector_source[vec as usize] = (b.add_source)(NewSource {
                cpu,
                handler,
                name,
                source_id: vc.source_id,
                port: b.ports.vmd[v],
            })?;
        }
    }
    // blk-mq's CPU-to-queue map, computed once per drive.
    let queue_maps: Vec<Vec<u16>> = sc
        .nvme
        .iter()
        .map(|d| queue_map(&d.affinity, d.drive.queues, &mut spreads))
        .collect();
    for (i, j) in sc.jobs.iter().enumerate() {
        let queue = queue_maps[j.drive as usize][j.cpu as usize];
        io.jobs.push(JobRt {
            cpu: j.cpu,
            drive: j.drive as u16,
            queue,
            next_tag: (i as u64) << 40,
            queued: j.iodepth as u64,
            rejected: 0,
        });
    }
    for (i, n) in sc.nics.iter().enumerate() {
        let name = sc.nic_name(i);
        let targets =
            n.affinity
                .resolve_in(n.queues, &mut spreads, &format!("nics[{i}].affinity"))?;
        let mut queues = Vec::with_capacity(targets.len());
        for (q, cpu) in targets.iter().enumerate() {
            let rx = match &n.rx {
                Some(r) => Some(r.generator(&format!("nics[{i}].rx"), sc.base_dir.as_deref())?),
                None => None,
            };
            let tx = match &n.tx {
                Some(t) => Some(t.generator(&format!("nics[{i}].tx"), sc.base_dir.as_deref())?),
                None => None,
            };
            let queue = NicQueue::new(n.nic.clone(), &format!("nics[{i}].nic"), rx, tx)?;
            let handler = HandlerRef::NicQueue {
                nic: i as u16,
                queue: q as u16,
            };
            let source = (b.add_source)(NewSource {
                cpu: cpu.0,
                handler,
                name: stream_names::queue_source(&name, q),
                source_id: n.source_id,
                port: b.ports.nics[i],
            })?;
            queues.push(NicQueueRt {
                queue,
                rng: b.streams.stream(&stream_names::nic_queue(&name, q)),
                source,
                cpu: cpu.0,
                wake: Wake::default(),
                napi_scheduled: false,
                last_poll_under_budget: true,
                latency: LatencyLog::default(),
            });
        }
        io.nics.push(NicRt {
            name,
            queues,
            napi: n.napi.clone(),
            handler_cycles: n.handler_cycles.unwrap_or(sc.costs.nic.irq_cycles),
        });
    }
    Ok(io)
}

/// For each CPU, the I/O queue blk-mq maps it to (`blk_mq_pci_map_queues` over the
/// managed masks; with explicit affinity, the first queue aimed at the CPU).
fn queue_map(affinity: &Affinity, queues: u32, spreads: &mut SpreadMemo) -> Vec<u16> {
    let fallback = |cpu: u32| (cpu % queues) as u16;
    let ncpus = spreads.node().len();
    match affinity {
        Affinity::Managed {} => cpu_to_queue(spreads.masks(queues), ncpus)
            .into_iter()
            .enumerate()
            .map(|(c, q)| q.unwrap_or(fallback(c as u32)))
            .collect(),
        Affinity::Explicit { cpus } => (0..ncpus)
            .map(|c| {
                cpus.iter()
                    .position(|t| *t == c)
                    .map_or(fallback(c), |q| q as u16)
            })
            .collect(),
    }
}

impl System {
    /// Starts the I/O devices at time zero: jobs queue their first submissions, NICs
    /// start their arrival processes.
    pub(super) fn start_io(&mut self) {
        for j in 0..self.io.jobs.len() {
            let job = &self.io.jobs[j];
            let cpu = job.cpu;
            for _ in 0..job.queued {
                self.cpus[cpu as usize]
                    .deferred
                    .push_back(Deferred::NvmeSubmit { job: j as u32 });
            }
        }
        for n in 0..self.io.nics.len() {
            for q in 0..self.io.nics[n].queues.len() {
                let nq = &mut self.io.nics[n].queues[q];
                let _ = nq.queue.start(SimTime::ZERO, &mut nq.rng);
                self.reschedule(
                    SimTime::ZERO,
                    IoDev::Nic {
                        nic: n as u16,
                        queue: q as u16,
                    },
                );
            }
        }
        for cpu in 0..self.cpus.len() as u32 {
            self.try_take_interrupt(SimTime::ZERO, cpu);
        }
    }

    fn next_event_of(&self, dev: IoDev) -> Option<SimTime> {
        match dev {
            IoDev::Nvme(d) => self.io.nvme[d as usize].drive.next_event(),
            IoDev::Nic { nic, queue } => self.io.nics[nic as usize].queues[queue as usize]
                .queue
                .next_event(),
        }
    }

    fn wake_mut(&mut self, dev: IoDev) -> &mut Wake {
        match dev {
            IoDev::Nvme(d) => &mut self.io.nvme[d as usize].wake,
            IoDev::Nic { nic, queue } => {
                &mut self.io.nics[nic as usize].queues[queue as usize].wake
            }
        }
    }

    /// Asks the device when it next needs waking and makes sure a wake-up is scheduled
    /// no later than that. A wake-up already scheduled earlier is kept (it finds
    /// nothing due, and reschedules); only an earlier need voids it and schedules
    /// anew, so moving wake-ups leave few stale events in the queue.
    pub(super) fn reschedule(&mut self, now: SimTime, dev: IoDev) {
        let Some(next) = self.next_event_of(dev).map(|t| t.max(now)) else {
            return;
        };
        let wake = self.wake_mut(dev);
        if wake.at.is_some_and(|t| t <= next) {
            return;
        }
        wake.generation = wake.generation.wrapping_add(1);
        wake.at = Some(next);
        let generation = wake.generation;
        self.queue
            .schedule(next, Priority::DEVICE, Event::IoWake { dev, generation });
    }

    /// A device's wake-up fires: it performs what is due and its effects are routed.
    pub(super) fn on_io_wake(&mut self, now: SimTime, dev: IoDev, generation: u32) {
        let wake = self.wake_mut(dev);
        if wake.generation != generation {
            return;
        }
        wake.at = None;
        match dev {
            IoDev::Nvme(d) => {
                let mut writes = std::mem::take(&mut self.io.nvme_writes);
                writes.clear();
                let rt = &mut self.io.nvme[d as usize];
                rt.drive.advance(now, &mut writes);
                let (port, link) = (rt.port, rt.completion_link);
                for w in &writes {
                    match *w {
                        NvmeWrite::Completion { qid, .. } => {
                            // The data and then the CQE cross the drive's own link, one
                            // completion after another.
                            let rt = &mut self.io.nvme[d as usize];
                            rt.link_free = rt.link_free.max(now) + link;
                            let ready = rt.link_free + self.timing.msi_write;
                            self.port_push_at(
                                now,
                                ready,
                                port,
                                PortWrite::Completion {
                                    landing: Landing::NvmeCqe { drive: d, qid },
                                },
                            );
                        }
                        NvmeWrite::Msi(m) => self.route_nvme_msi(now, d, m.vector),
                    }
                }
                self.io.nvme_writes = writes;
            }
            IoDev::Nic { nic, queue } => {
                let mut effects = std::mem::take(&mut self.io.nic_effects);
                effects.clear();
                let nq = &mut self.io.nics[nic as usize].queues[queue as usize];
                nq.queue.advance(now, &mut nq.rng, &mut effects);
                let source = nq.source;
                for NicEffect::Msi { .. } in &effects {
                    self.raise_msi(now, source);
                }
                self.io.nic_effects = effects;
            }
        }
        self.reschedule(now, dev);
    }

    /// An NVMe completion-queue MSI: straight to its IRTE, or (VMD remap mode) a write
    /// to VMD that VMD turns into an MSI of its own.
    fn route_nvme_msi(&mut self, now: SimTime, drive: u16, queue: u16) {
        let rt = &mut self.io.nvme[drive as usize];
        rt.interrupts += 1;
        let port = rt.port;
        if let Some((domain, child)) = rt.vmd {
            let vmd = &self.io.vmd[domain as usize];
            if vmd.domain.config().mode == VmdMode::Remap {
                let child = ChildIrq {
                    child,
                    irq: queue as u32 + 1,
                };
                let vector = vmd
                    .domain
                    .vector_of(child)
                    .expect("every child irq of a remapping domain has a vector");
                let token = self.new_msi(now, vmd.vector_source[vector as usize]);
                self.ledger.port += 1;
                self.port_push(
                    now,
                    port,
                    PortWrite::ChildMsiToVmd {
                        domain,
                        child,
                        token,
                    },
                );
                return;
            }
        }
        let source = self.io.nvme[drive as usize].queue_source[queue as usize];
        self.raise_msi(now, source);
    }

    /// VMD captured a child's MSI: it writes its own MSI for the child's vector into its
    /// port's ordered stream, or the child MSI rides on VMD's outstanding one.
    pub(super) fn vmd_capture(
        &mut self,
        now: SimTime,
        domain: u16,
        child: ChildIrq,
        msi: MsiToken,
    ) {
        let vmd = &mut self.io.vmd[domain as usize];
        match vmd.domain.child_msi(now, child) {
            VmdRoute::Vector { vector, at } => {
                vmd.lead[vector as usize] = Some(msi);
                vmd.queued += 1;
                let (source, port) = (vmd.vector_source[vector as usize], vmd.port);
                self.sources[source as usize].written += 1;
                self.port_push_at(
                    now,
                    at.max(now),
                    port,
                    PortWrite::Msi { source, token: msi },
                );
            }
            VmdRoute::Merged { vector } => {
                let lead = vmd.lead[vector as usize].expect("a merge rides on an outstanding MSI");
                self.ledger.port -= 1;
                self.ledger.ride_on(lead, msi);
            }
            VmdRoute::Direct => unreachable!("only remapping domains capture child MSIs"),
        }
    }

    /// Whether VMD can take `child`'s MSI now: it merges into an outstanding one, or
    /// VMD has room for one more of its own.
    pub(super) fn vmd_has_room(&self, domain: u16, child: ChildIrq) -> bool {
        let vmd = &self.io.vmd[domain as usize];
        let merges = vmd.domain.config().merge_while_outstanding
            && vmd
                .domain
                .vector_of(child)
                .is_some_and(|v| vmd.domain.is_outstanding(v));
        merges || vmd.queued < vmd.capacity
    }

    /// An MSI of source `source` retired from its port: if it was VMD's, a later child
    /// MSI on its vector makes VMD write a new one, and a child port waiting for room
    /// goes on.
    pub(super) fn vmd_msi_left(&mut self, now: SimTime, source: u32) {
        if let Some((domain, vector)) = self.sources[source as usize].vmd {
            let vmd = &mut self.io.vmd[domain as usize];
            vmd.domain.vmd_msi_delivered(vector);
            vmd.lead[vector as usize] = None;
            vmd.queued -= 1;
            if let Some(port) = vmd.waiting_ports.pop_front() {
                self.port_vmd_room(now, port);
            }
        }
    }

    /// The cycles of an I/O device handler run on `cpu` at `now`, doing its work
    /// (reaping, scheduling NAPI) as it starts.
    pub(super) fn io_handler_cycles(&mut self, now: SimTime, cpu: u32, handler: HandlerRef) -> f64 {
        match handler {
            HandlerRef::NvmeQueue { drive, queue } => self.nvme_irq(now, drive, queue),
            HandlerRef::Vmd { domain, vector } => {
                let vmd = &mut self.io.vmd[domain as usize];
                let mut cycles = vmd.handler_cycles;
                let children: Vec<ChildIrq> = vmd.domain.dispatch(vector).to_vec();
                for child in children {
                    // Child 0's irq 0 is the admin queue: not modelled, but its handler
                    // still runs (and finds nothing).
                    let Some(drive) = self.drive_of_child(domain, child.child) else {
                        continue;
                    };
                    let vmd = &mut self.io.vmd[domain as usize];
                    vmd.child_calls += 1;
                    if child.irq == 0 {
                        vmd.empty_child_calls += 1;
                        cycles += self.io.nvme[drive as usize].handler_cycles;
                        continue;
                    }
                    let before = self.io.nvme[drive as usize].reaped;
                    cycles += self.nvme_irq(now, drive, (child.irq - 1) as u16);
                    if self.io.nvme[drive as usize].reaped == before {
                        self.io.vmd[domain as usize].empty_child_calls += 1;
                    }
                }
                cycles
            }
            HandlerRef::NicQueue { nic, queue } if self.transmit.owns_queue(nic, queue) => {
                self.schedule_tx_clean(cpu, nic, queue);
                self.io.nics[nic as usize].handler_cycles
            }
            HandlerRef::NicQueue { nic, queue } => {
                let n = &mut self.io.nics[nic as usize];
                let q = &mut n.queues[queue as usize];
                if !q.napi_scheduled {
                    q.napi_scheduled = true;
                    self.cpus[cpu as usize]
                        .deferred
                        .push_back(Deferred::NapiPoll { nic, queue });
                }
                n.handler_cycles
            }
            // An IOAPIC pin's handler body is its flow's operations.
            HandlerRef::Dsa(_) | HandlerRef::IoapicPin(_) | HandlerRef::None => 0.0,
        }
    }

    fn drive_of_child(&self, domain: u16, child: u32) -> Option<u16> {
        self.io.vmd[domain as usize]
            .child_drive
            .get(child as usize)
            .copied()
    }

    /// `nvme_irq`: reaps every new CQ entry, completes each request (the job resubmits
    /// from its CPU), and returns the cycles spent.
    fn nvme_irq(&mut self, now: SimTime, drive: u16, queue: u16) -> f64 {
        let reap_cycles = self.costs.nvme_host.reap_entry_cycles;
        let mut wake_jobs = std::mem::take(&mut self.io.woken_jobs);
        wake_jobs.clear();
        let mut cq = std::mem::take(&mut self.io.cq);
        cq.clear();
        let rt = &mut self.io.nvme[drive as usize];
        let n = rt.drive.reap(queue, u32::MAX, &mut cq);
        rt.reaped += n as u64;
        if n == 0 {
            rt.empty_calls += 1;
        }
        let cycles = rt.handler_cycles + n as f64 * reap_cycles;
        for e in &cq {
            let ns = now.since(e.submitted_at).as_ps().div_ceil(1000);
            rt.latency.record(ns);
            let job = (e.tag >> 40) as u32;
            let j = &mut self.io.jobs[job as usize];
            j.queued += 1;
            wake_jobs.push((j.cpu, job));
        }
        self.io.cq = cq;
        for &(cpu, job) in &wake_jobs {
            self.push_deferred(now, cpu, Deferred::NvmeSubmit { job });
        }
        self.io.woken_jobs = wake_jobs;
        // Reaping moves the CQ head: the drive may now post entries it held back.
        self.reschedule(now, IoDev::Nvme(drive));
        cycles
    }

    /// Queues deferred work on `cpu`, starting it at once if that CPU is idle (a job
    /// woken by a completion reaped on another CPU).
    pub(super) fn push_deferred(&mut self, now: SimTime, cpu: u32, work: Deferred) {
        self.cpus[cpu as usize].deferred.push_back(work);
        if self.cpus[cpu as usize].state == CpuState::Idle {
            self.try_take_interrupt(now, cpu);
        }
    }

    /// Starts the next piece of deferred work on an idle CPU; returns whether it did.
    pub(super) fn start_deferred(&mut self, now: SimTime, cpu: u32) -> bool {
        let Some(work) = self.cpus[cpu as usize].deferred.pop_front() else {
            return false;
        };
        let freq = self.freq;
        let cost = match work {
            Deferred::NvmeSubmit { .. } => {
                let d = self.timing.nvme_submit;
                self.cpus[cpu as usize].time.app += d;
                d
            }
            Deferred::DsaSubmit { device } => {
                let d = freq.cycles_f64(self.dsa_submit_cycles(device));
                self.cpus[cpu as usize].time.app += d;
                d
            }
            // The cleanup's own CPU time is not modelled (see `system::migration`).
            Deferred::VectorCleanup { .. } => sim_core::Duration::ZERO,
            Deferred::NapiPoll { nic, queue } => {
                let mut arrivals = std::mem::take(&mut self.io.arrivals);
                arrivals.clear();
                let n = &mut self.io.nics[nic as usize];
                let napi = n.napi.clone();
                let q = &mut n.queues[queue as usize];
                q.queue.settle_rx(now, &mut q.rng);
                let r = q
                    .queue
                    .poll_with_arrivals(napi.budget, napi.tx_clean_limit, &mut arrivals);
                let cycles = napi.poll_cycles
                    + r.rx as f64 * napi.rx_packet_cycles
                    + r.tx as f64 * napi.tx_clean_cycles;
                let d = freq.cycles_f64(cycles);
                let done = now + d;
                for a in &arrivals {
                    q.latency.record(done.since(*a).as_ps().div_ceil(1000));
                }
                q.last_poll_under_budget = r.under_budget;
                self.io.arrivals = arrivals;
                // A ring that was full has room again: its parked arrivals wake it.
                self.reschedule(now, IoDev::Nic { nic, queue });
                self.cpus[cpu as usize].time.softirq += d;
                d
            }
        };
        self.cpus[cpu as usize].state = CpuState::Deferred(work);
        self.schedule_cpu_step(cpu, now + cost);
        self.emit_cpu_span(cpu, now, cost, || CpuActivity::Deferred { work });
        true
    }

    /// A piece of deferred work ends on `cpu`.
    pub(super) fn finish_deferred(&mut self, now: SimTime, cpu: u32, work: Deferred) {
        match work {
            Deferred::NvmeSubmit { job } => {
                let j = &mut self.io.jobs[job as usize];
                j.queued -= 1;
                let tag = j.next_tag;
                j.next_tag += 1;
                let (drive, queue) = (j.drive, j.queue);
                let rt = &mut self.io.nvme[drive as usize];
                if rt.drive.submit(now, queue, tag, &mut rt.rng) == NvmeSubmitOutcome::QueueFull {
                    self.io.jobs[job as usize].rejected += 1;
                }
                self.reschedule(now, IoDev::Nvme(drive));
            }
            Deferred::VectorCleanup { index } => self.run_vector_cleanup(now, index),
            Deferred::DsaSubmit { device } => {
                let at = now + self.timing.doorbell_write;
                self.queue
                    .schedule(at, Priority::DEVICE, Event::DsaSubmit { device });
            }
            Deferred::NapiPoll { nic, queue } => {
                let q = &mut self.io.nics[nic as usize].queues[queue as usize];
                // A poll that used its whole budget polls again (napi stays scheduled);
                // one under budget completes NAPI and re-enables the interrupt.
                if !q.last_poll_under_budget {
                    self.cpus[cpu as usize]
                        .deferred
                        .push_back(Deferred::NapiPoll { nic, queue });
                } else {
                    q.napi_scheduled = false;
                    let _ = q.queue.unmask_irq(now);
                    self.reschedule(now, IoDev::Nic { nic, queue });
                }
            }
        }
        self.cpus[cpu as usize].state = CpuState::Idle;
        self.try_take_interrupt(now, cpu);
    }
}

/// Latency percentiles of one histogram, in microseconds.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct LatencyUs {
    /// Samples recorded.
    pub count: u64,
    /// Median, us.
    pub p50: f64,
    /// 99th percentile, us.
    pub p99: f64,
    /// 99.9th percentile, us.
    pub p999: f64,
    /// Largest sample, us.
    pub max: f64,
}

impl LatencyUs {
    fn of(h: &Histogram<u64>) -> LatencyUs {
        if h.is_empty() {
            return LatencyUs::default();
        }
        let us = |v: u64| v as f64 / 1e3;
        LatencyUs {
            count: h.len(),
            p50: us(h.value_at_quantile(0.5)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            max: us(h.max()),
        }
    }
}

/// One NVMe drive (or all of them) in the report.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct NvmeReport {
    /// Drive name (`total` for the sum over all drives).
    pub name: String,
    /// Completions reaped by handlers per simulated second.
    pub iops: f64,
    /// Commands the drive accepted.
    pub submitted: u64,
    /// Completion entries the drive posted to its CQs.
    pub completed: u64,
    /// Completion entries the handlers reaped.
    pub reaped: u64,
    /// Commands in the drive or its CQs at the end, as the drive counts them.
    pub outstanding: u64,
    /// Submissions the jobs still had queued on their CPUs at the end.
    pub queued_in_jobs: u64,
    /// Job submissions the drive refused because the SQ was full.
    pub rejected_queue_full: u64,
    /// MSIs the drive raised (before VMD).
    pub interrupts: u64,
    /// `interrupts` per reaped completion.
    pub interrupts_per_io: f64,
    /// Handler calls that found no new completion.
    pub empty_handler_calls: u64,
    /// From submission to the handler reaping the completion.
    pub latency_us: LatencyUs,
}

/// One NIC queue in the report.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct NicReport {
    /// Name of the NIC the queue belongs to.
    pub name: String,
    /// Queue number within the NIC.
    pub queue: u32,
    /// CPU the queue's interrupt targets (index).
    pub cpu: u32,
    /// Packets that arrived on the RX queue, dropped ones included.
    pub rx_packets: u64,
    /// Packets NAPI polls took off the RX ring.
    pub rx_polled: u64,
    /// Packets dropped because the RX ring was full (not MSI drops).
    pub packets_dropped: u64,
    /// Packets in the RX ring at the end, not yet polled.
    pub rx_in_ring: u64,
    /// Packets the TX queue put on the wire.
    pub tx_sent: u64,
    /// MSIs the queue raised.
    pub interrupts: u64,
    /// `interrupts` per arrived RX packet.
    pub interrupts_per_packet: f64,
    /// NAPI polls of the queue.
    pub polls: u64,
    /// Polls that hit the RX budget or TX clean limit, so NAPI polled again.
    pub polls_at_budget: u64,
    /// From arrival to the end of the poll that took the packet.
    pub latency_us: LatencyUs,
}

/// One VMD domain in the report.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct VmdReport {
    /// Domain name.
    pub name: String,
    /// `remap` or `bypass`.
    pub mode: String,
    /// VMD vectors that have children.
    pub vectors_used: u32,
    /// Child handler calls made by `vmd_irq`.
    pub child_handler_calls: u64,
    /// Of those, calls that found nothing to do.
    pub empty_child_handler_calls: u64,
    /// Child MSIs VMD captured (remap mode).
    pub child_msis: u64,
    /// MSIs VMD wrote on its own vectors.
    pub vmd_msis: u64,
    /// Child MSIs that merged into an outstanding VMD MSI (`merge_while_outstanding`).
    pub merged_child_msis: u64,
    /// Whether merging was on.
    pub merge_while_outstanding: bool,
}

/// The I/O part of a report.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct IoReport {
    /// One entry per drive, in scenario order.
    pub nvme: Vec<NvmeReport>,
    /// All drives together (latency percentiles over every I/O).
    pub nvme_total: NvmeReport,
    /// One entry per NIC queue, NIC by NIC.
    pub nics: Vec<NicReport>,
    /// One entry per VMD domain, in scenario order.
    pub vmd: Vec<VmdReport>,
}

impl System {
    /// Asserts every NVMe drive's, NIC queue's and VMD domain's own conservation laws
    /// (see their `check_conservation`): for tests and debugging; a failure is an
    /// irqsim bug.
    pub fn check_device_conservation(&self) {
        for d in &self.io.nvme {
            d.drive.check_conservation();
        }
        for n in &self.io.nics {
            for q in &n.queues {
                q.queue.check_conservation();
            }
        }
        for v in &self.io.vmd {
            v.domain.check_conservation();
        }
    }

    pub(super) fn io_report(&self) -> IoReport {
        let secs = self.now().as_secs_f64().max(1e-12);
        let mut total_hist = empty_histogram();
        let mut total = NvmeReport {
            name: "total".into(),
            ..NvmeReport::default()
        };
        let mut nvme = Vec::new();
        for (d, rt) in self.io.nvme.iter().enumerate() {
            let t = rt.drive.totals();
            let (queued, rejected) = self
                .io
                .jobs
                .iter()
                .filter(|j| j.drive as usize == d)
                .fold((0, 0), |(q, r), j| (q + j.queued, r + j.rejected));
            let latency = rt.latency.histogram();
            let r = NvmeReport {
                name: rt.name.clone(),
                iops: rt.reaped as f64 / secs,
                submitted: t.submitted,
                completed: t.completed,
                reaped: rt.reaped,
                outstanding: (0..rt.drive.queues())
                    .map(|q| rt.drive.outstanding(q) as u64)
                    .sum(),
                queued_in_jobs: queued,
                rejected_queue_full: rejected,
                interrupts: rt.interrupts,
                interrupts_per_io: rt.interrupts as f64 / rt.reaped.max(1) as f64,
                empty_handler_calls: rt.empty_calls,
                latency_us: LatencyUs::of(&latency),
            };
            total_hist.add(&*latency).expect("same bounds");
            total.iops += r.iops;
            total.submitted += r.submitted;
            total.completed += r.completed;
            total.reaped += r.reaped;
            total.outstanding += r.outstanding;
            total.queued_in_jobs += r.queued_in_jobs;
            total.rejected_queue_full += r.rejected_queue_full;
            total.interrupts += r.interrupts;
            total.empty_handler_calls += r.empty_handler_calls;
            nvme.push(r);
        }
        total.interrupts_per_io = total.interrupts as f64 / total.reaped.max(1) as f64;
        total.latency_us = LatencyUs::of(&total_hist);
        let mut nics = Vec::new();
        for rt in &self.io.nics {
            for (q, qr) in rt.queues.iter().enumerate() {
                let c = qr.queue.counters_through(self.now(), &qr.rng);
                nics.push(NicReport {
                    name: rt.name.clone(),
                    queue: q as u32,
                    cpu: qr.cpu,
                    rx_packets: c.rx_arrived,
                    rx_polled: c.rx_polled,
                    packets_dropped: c.rx_dropped_ring_full,
                    rx_in_ring: qr.queue.rx_pending() as u64,
                    tx_sent: c.tx_sent,
                    interrupts: c.msis,
                    interrupts_per_packet: c.msis as f64 / c.rx_arrived.max(1) as f64,
                    polls: c.polls,
                    polls_at_budget: c.polls_at_budget,
                    latency_us: LatencyUs::of(&qr.latency.histogram()),
                });
            }
        }
        let vmd = self
            .io
            .vmd
            .iter()
            .map(|v| VmdReport {
                name: v.name.clone(),
                mode: match v.domain.config().mode {
                    VmdMode::Remap => "remap".into(),
                    VmdMode::Bypass => "bypass".into(),
                },
                vectors_used: v.vector_source.iter().filter(|s| **s != u32::MAX).count() as u32,
                child_handler_calls: v.child_calls,
                empty_child_handler_calls: v.empty_child_calls,
                child_msis: (0..v.vector_source.len() as u16)
                    .map(|i| v.domain.counters(i).child_msis)
                    .sum(),
                vmd_msis: (0..v.vector_source.len() as u16)
                    .map(|i| v.domain.counters(i).vmd_msis)
                    .sum(),
                merged_child_msis: (0..v.vector_source.len() as u16)
                    .map(|i| v.domain.counters(i).merged_child_msis)
                    .sum(),
                merge_while_outstanding: v.domain.config().merge_while_outstanding,
            })
            .collect();
        IoReport {
            nvme,
            nvme_total: total,
            nics,
            vmd,
        }
    }
}
