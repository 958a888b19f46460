//! NIC transmit inside [`System`] (`arch = "arm"`, scenario `[[transmit]]`): sending
//! threads run [`crate::kernel::nic_tx::udp_send_thread`] as CPU tasks, mapping each
//! buffer they post to a TX queue of a scenario NIC; the NIC puts packets on one
//! wire shared by its queues at `line_gbps`; its completion interrupt (the queue's
//! vector, throttled like any NIC vector) makes the CPU run
//! [`crate::kernel::nic_tx::tx_clean`] in softirq context, which unmaps every buffer
//! with a strict-mode CMD_SYNC and frees the skbs, returning their truesize to the
//! socket. A thread whose socket is full sleeps until that happens.
//!
//! Thread `t` of a load sends on queue `t % queues` of its NIC and runs on
//! `cpus[t]` (default: the CPU that queue's interrupt is aimed at, as XPS and the
//! driver's affinity hints line them up). Throughput is measured from what the NIC
//! sent: the UDP payload of every datagram whose last fragment left the wire after
//! the warm-up, over the time since the warm-up.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use sim_core::{Duration, SimTime};

use super::cpu::{CpuState, Task, TaskCo, TaskKind, TaskOp};
use super::io::IoDev;
use super::scenario::{Arch, Scenario, ScenarioError};
use super::task::TaskIssued;
use super::System;
use crate::engine::Coroutine;
use crate::kernel::nic_tx::{
    tx_clean, udp_send_thread, TxFlow, TxOp, TxWork, ETHERNET_FRAME_OVERHEAD_BYTES,
    ETHERNET_WIRE_GAP_BYTES,
};
use crate::kernel::smmu::{SmmuCpuOp, SmmuCpuPort};

/// CPU and NIC costs of the transmit path.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TxCosts {
    /// The system call and `udp_sendmsg` per datagram, fragments excluded. Core
    /// cycles. Default 2000: assumption (a syscall round trip and socket locking are
    /// each some hundreds of cycles).
    pub sendmsg_cycles: f64,
    /// Copying user data into skbs, ns per KiB. Default 100: assumption, about
    /// 10 GB/s for a cached-source copy on one core.
    pub copy_ns_per_kib: f64,
    /// One IP fragment through `ip_fragment`, `dev_queue_xmit`, the qdisc and the
    /// driver's xmit, descriptor fill excluded. Core cycles. Default 1500:
    /// assumption.
    pub packet_xmit_cycles: f64,
    /// `dma_map_single` of one buffer through dma-iommu (IOVA from the per-CPU
    /// rcache, io-pgtable map). Nanoseconds. Default 200: assumption.
    pub map_buffer_ns: f64,
    /// Writing a packet's descriptors and the doorbell (a posted MMIO write). Core
    /// cycles. Default 150: DESIGN.md section 3 puts a posted MMIO write at about a
    /// hundred cycles, plus the descriptor stores.
    pub post_packet_cycles: f64,
    /// From the doorbell to the packet's first byte on the wire: the NIC fetching
    /// the descriptor and the data. Nanoseconds. Default 500: assumption (an
    /// on-chip NIC; COST-SOURCES.md's 700-740 ns PCIe read round trip bounds it).
    pub nic_fetch_ns: f64,
    /// Reading one completed descriptor back in the clean loop. Core cycles.
    /// Default 100: assumption (one line the NIC wrote, an LLC or memory read).
    pub reclaim_desc_cycles: f64,
    /// Returning an unmapped buffer's IOVA to the rcache. Nanoseconds. Default 50:
    /// assumption.
    pub free_iova_ns: f64,
    /// `napi_consume_skb` of one skb. Core cycles. Default 400: assumption.
    pub free_skb_cycles: f64,
    /// Waking a thread blocked on its socket and switching to it. Core cycles.
    /// Default 5000: assumption (try_to_wake_up plus a context switch, a few us).
    pub wakeup_cycles: f64,
}

impl Default for TxCosts {
    fn default() -> Self {
        TxCosts {
            sendmsg_cycles: 2000.0,
            copy_ns_per_kib: 100.0,
            packet_xmit_cycles: 1500.0,
            map_buffer_ns: 200.0,
            post_packet_cycles: 150.0,
            nic_fetch_ns: 500.0,
            reclaim_desc_cycles: 100.0,
            free_iova_ns: 50.0,
            free_skb_cycles: 400.0,
            wakeup_cycles: 5000.0,
        }
    }
}

impl TxCosts {
    /// The fields by name, for validation.
    pub(super) fn fields(&self) -> [(&'static str, f64); 10] {
        [
            ("sendmsg_cycles", self.sendmsg_cycles),
            ("copy_ns_per_kib", self.copy_ns_per_kib),
            ("packet_xmit_cycles", self.packet_xmit_cycles),
            ("map_buffer_ns", self.map_buffer_ns),
            ("post_packet_cycles", self.post_packet_cycles),
            ("nic_fetch_ns", self.nic_fetch_ns),
            ("reclaim_desc_cycles", self.reclaim_desc_cycles),
            ("free_iova_ns", self.free_iova_ns),
            ("free_skb_cycles", self.free_skb_cycles),
            ("wakeup_cycles", self.wakeup_cycles),
        ]
    }
}

/// Scenario `[[transmit]]`: UDP senders on a NIC's TX queues.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransmitConfig {
    /// Name in reports; empty means `transmitI`.
    #[serde(default)]
    pub name: String,
    /// Index of the NIC in `nics`.
    pub nic: u32,
    /// Sending threads, 1..=1024.
    pub threads: u32,
    /// CPU of each thread; unset: the CPU of its queue's interrupt.
    #[serde(default)]
    pub cpus: Vec<u32>,
    /// UDP payload per datagram, bytes. Default 32768 (netperf `-m 32K`).
    #[serde(default = "default_datagram")]
    pub datagram_bytes: u32,
    /// Interface MTU, bytes. Default 1500.
    #[serde(default = "default_mtu")]
    pub mtu: u32,
    /// The socket's send buffer (`sk_sndbuf`), bytes of skb truesize. Default
    /// 212992: Linux `net.core.wmem_default`.
    #[serde(default = "default_sndbuf")]
    pub sndbuf_bytes: u32,
    /// An skb's truesize beyond its IP packet, bytes. Default 1100: assumption, the
    /// kmalloc bucket of a 1.5 KB linear buffer (2 KiB) plus `struct sk_buff` and
    /// `skb_shared_info` (~576), less the packet.
    #[serde(default = "default_skb_overhead")]
    pub skb_overhead_bytes: u32,
    /// Datagrams per thread before it stops; unset means no limit.
    #[serde(default)]
    pub datagrams: Option<u64>,
    /// The port's line rate, Gbit/s. Default 100.
    #[serde(default = "default_line")]
    pub line_gbps: f64,
    /// Datagrams that leave the wire before this are not counted, us. Default 0.
    #[serde(default)]
    pub warmup_us: f64,
    /// ASID of the NIC's DMA domain. Default 1.
    #[serde(default = "default_asid")]
    pub asid: u16,
}

fn default_datagram() -> u32 {
    32768
}
fn default_mtu() -> u32 {
    1500
}
fn default_sndbuf() -> u32 {
    212_992
}
fn default_skb_overhead() -> u32 {
    1100
}
fn default_line() -> f64 {
    100.0
}
fn default_asid() -> u16 {
    1
}

/// Checks `sc.transmit`, and that no CPU runs two thread-context loads.
pub(super) fn validate(sc: &Scenario) -> Result<(), ScenarioError> {
    if sc.transmit.is_empty() {
        return Ok(());
    }
    if sc.arch != Arch::Arm {
        return Err(ScenarioError::invalid(
            "transmit",
            format!("{} loads with arch = \"x86\"", sc.transmit.len()),
            "arch = \"arm\": the transmit path unmaps through the SMMUv3",
        ));
    }
    let mut thread_cpus = std::collections::BTreeSet::new();
    for l in &sc.smmu_loads {
        thread_cpus.extend(l.cpus.iter().copied());
    }
    for (i, t) in sc.transmit.iter().enumerate() {
        let f = |name: &str| format!("transmit[{i}].{name}");
        if t.nic as usize >= sc.nics.len() {
            return Err(ScenarioError::invalid(
                f("nic"),
                t.nic,
                format!("a NIC index 0..{}", sc.nics.len()),
            ));
        }
        if sc.nics[t.nic as usize].rx.is_some() {
            return Err(ScenarioError::invalid(
                format!("nics[{}].rx", t.nic),
                "an RX arrival process",
                "none on a NIC with a transmit load (its queue vectors clean TX only)",
            ));
        }
        if !(1..=1024).contains(&t.threads) {
            return Err(ScenarioError::invalid(f("threads"), t.threads, "1..=1024"));
        }
        if !t.cpus.is_empty() && t.cpus.len() != t.threads as usize {
            return Err(ScenarioError::invalid(
                f("cpus"),
                format!("{} CPUs", t.cpus.len()),
                format!("none, or one per thread ({})", t.threads),
            ));
        }
        for (j, &c) in t.cpus.iter().enumerate() {
            if c >= sc.cpus.count {
                return Err(ScenarioError::invalid(
                    format!("transmit[{i}].cpus[{j}]"),
                    c,
                    format!("a CPU 0..{}", sc.cpus.count),
                ));
            }
        }
        if !(1..=65507).contains(&t.datagram_bytes) {
            return Err(ScenarioError::invalid(
                f("datagram_bytes"),
                t.datagram_bytes,
                "1..=65507 (the largest UDP payload over IPv4)",
            ));
        }
        if !(68..=9216).contains(&t.mtu) {
            return Err(ScenarioError::invalid(f("mtu"), t.mtu, "68..=9216"));
        }
        if t.sndbuf_bytes < 4608 {
            return Err(ScenarioError::invalid(
                f("sndbuf_bytes"),
                t.sndbuf_bytes,
                "at least 4608 (Linux SOCK_MIN_SNDBUF)",
            ));
        }
        if !(t.line_gbps.is_finite() && t.line_gbps > 0.0 && t.line_gbps <= 1600.0) {
            return Err(ScenarioError::invalid(
                f("line_gbps"),
                t.line_gbps,
                "0 < x <= 1600",
            ));
        }
        if !(t.warmup_us.is_finite() && t.warmup_us >= 0.0 && t.warmup_us < sc.duration_us) {
            return Err(ScenarioError::invalid(
                f("warmup_us"),
                t.warmup_us,
                "0 <= x < duration_us",
            ));
        }
        for (j, &c) in t.cpus.iter().enumerate() {
            if !thread_cpus.insert(c) {
                return Err(ScenarioError::invalid(
                    format!("transmit[{i}].cpus[{j}]"),
                    c,
                    "a CPU that runs no other thread-context load (SMMU load or sending thread)",
                ));
            }
        }
    }
    Ok(())
}

/// A packet the NIC holds or has finished, until its clean-up frees it.
#[derive(Clone, Copy, Debug)]
struct TxPacket {
    load: u16,
    thread: u16,
    iova: u64,
    truesize: u32,
    last: bool,
    done_at: SimTime,
}

/// A sending thread.
struct TxThread {
    cpu: u32,
    queue: u16,
    in_flight: u32,
    blocked_since: Option<SimTime>,
    blocked_ns: f64,
    datagrams: u64,
}

struct TxLoad {
    name: String,
    nic: u16,
    flow: TxFlow,
    sndbuf: u32,
    warmup: SimTime,
    threads: Vec<TxThread>,
    payload_bytes: u64,
    datagrams_done: u64,
    packets: u64,
    asid: u16,
}

/// Host state of one NIC TX queue with senders.
#[derive(Default)]
struct TxQueueHost {
    /// Packets posted, oldest first (the NIC completes them in this order).
    posted: VecDeque<TxPacket>,
    /// The packet the clean loop is unmapping.
    cleaning: Option<TxPacket>,
    /// A clean poll is scheduled or running.
    clean_scheduled: bool,
    /// Threads waiting for a free descriptor.
    ring_waiters: Vec<(u16, u16)>,
}

/// Every transmit load, the NIC queues they use and the NICs' wires.
#[derive(Default)]
pub(super) struct Transmit {
    loads: Vec<TxLoad>,
    queues: BTreeMap<(u16, u16), TxQueueHost>,
    wire_free: BTreeMap<u16, SimTime>,
    line_gbps: BTreeMap<u16, f64>,
    /// Per CPU, the queues whose clean polls wait for its softirq slot.
    pending_cleans: Vec<VecDeque<(u16, u16)>>,
    next_iova: u64,
}

impl Transmit {
    /// Builds the loads; `queue_cpu(nic, queue)` is the CPU a queue's interrupt goes
    /// to and `queues(nic)` a NIC's queue count.
    /// Errors when two threads would share a CPU (a CPU has one thread slot), or a
    /// thread would share one with an SMMU load.
    pub(super) fn new(
        sc: &Scenario,
        queue_cpu: impl Fn(u16, u16) -> u32,
        queues: impl Fn(u16) -> u16,
    ) -> Result<Transmit, ScenarioError> {
        let mut taken: std::collections::BTreeMap<u32, String> = sc
            .smmu_loads
            .iter()
            .enumerate()
            .flat_map(|(i, l)| l.cpus.iter().map(move |&c| (c, format!("smmu_loads[{i}]"))))
            .collect();
        let mut t = Transmit {
            pending_cleans: vec![VecDeque::new(); sc.cpus.count as usize],
            next_iova: 1,
            ..Transmit::default()
        };
        for (i, c) in sc.transmit.iter().enumerate() {
            let nic = c.nic as u16;
            let n = queues(nic).max(1);
            let mut threads = Vec::with_capacity(c.threads as usize);
            for th in 0..c.threads {
                let queue = (th % n as u32) as u16;
                t.queues.entry((nic, queue)).or_default();
                let cpu = c
                    .cpus
                    .get(th as usize)
                    .copied()
                    .unwrap_or_else(|| queue_cpu(nic, queue));
                let me = format!("transmit[{i}] thread {th}");
                if let Some(other) = taken.insert(cpu, me) {
                    return Err(ScenarioError::invalid(
                        format!("transmit[{i}].threads"),
                        c.threads,
                        format!(
                            "threads on CPUs of their own: thread {th} would share CPU {cpu} with {other} (give `cpus`, or at most one thread per queue)"
                        ),
                    ));
                }
                threads.push(TxThread {
                    cpu,
                    queue,
                    in_flight: 0,
                    blocked_since: None,
                    blocked_ns: 0.0,
                    datagrams: 0,
                });
            }
            t.wire_free.insert(nic, SimTime::ZERO);
            t.line_gbps.insert(nic, c.line_gbps);
            t.loads.push(TxLoad {
                name: if c.name.is_empty() {
                    format!("transmit{i}")
                } else {
                    c.name.clone()
                },
                nic,
                flow: TxFlow {
                    datagram_bytes: c.datagram_bytes,
                    mtu: c.mtu,
                    skb_overhead_bytes: c.skb_overhead_bytes,
                    datagrams: c.datagrams,
                },
                sndbuf: c.sndbuf_bytes,
                warmup: SimTime::ZERO + Duration::from_ns_f64(c.warmup_us * 1e3),
                threads,
                payload_bytes: 0,
                datagrams_done: 0,
                packets: 0,
                asid: c.asid,
            });
        }
        Ok(t)
    }

    /// Whether NIC queue (nic, queue) carries a transmit load.
    pub(super) fn owns_queue(&self, nic: u16, queue: u16) -> bool {
        self.queues.contains_key(&(nic, queue))
    }
}

impl System {
    /// Starts every sending thread on its CPU.
    pub(super) fn start_transmit(&mut self) {
        let now = self.now();
        let mut starts = Vec::new();
        for (l, load) in self.transmit.loads.iter().enumerate() {
            for (th, t) in load.threads.iter().enumerate() {
                starts.push((l as u16, th as u16, t.cpu, load.flow));
            }
        }
        for (load, thread, cpu, flow) in starts {
            let co = Coroutine::new(move |port| udp_send_thread(SmmuCpuPort::new(port), flow));
            // Building checked that every thread has a CPU of its own.
            self.cpus[cpu as usize].task = Some(Task::new(
                TaskCo::Smmu(co),
                TaskKind::TxThread { load, thread },
                now,
            ));
            self.try_take_interrupt(now, cpu);
        }
    }

    /// The hardirq of a transmit queue: schedule its clean poll on this CPU.
    pub(super) fn schedule_tx_clean(&mut self, cpu: u32, nic: u16, queue: u16) {
        let q = self
            .transmit
            .queues
            .get_mut(&(nic, queue))
            .expect("a TX queue");
        if !q.clean_scheduled {
            q.clean_scheduled = true;
            self.transmit.pending_cleans[cpu as usize].push_back((nic, queue));
        }
    }

    /// Starts the next pending clean poll of `cpu` in its softirq slot.
    pub(super) fn start_queued_tx_clean(&mut self, now: SimTime, cpu: u32) -> bool {
        let c = cpu as usize;
        if self.cpus[c].softirq.is_some() {
            return true;
        }
        let Some((nic, queue)) = self.transmit.pending_cleans[c].pop_front() else {
            return false;
        };
        let Some(arm) = self.arm.as_ref() else {
            return false;
        };
        let drv = arm.host.drv;
        let asid = self
            .transmit
            .loads
            .iter()
            .find(|l| l.nic == nic)
            .map_or(1, |l| l.asid);
        let co = Coroutine::new(move |port| tx_clean(SmmuCpuPort::new(port), drv, asid, 1));
        self.cpus[c].softirq = Some(Task::new(
            TaskCo::Smmu(co),
            TaskKind::TxClean { nic, queue },
            now,
        ));
        true
    }

    fn tx_thread_of(&self, cpu: u32) -> (u16, u16) {
        match self.cpus[cpu as usize].task.as_ref().map(|t| t.kind) {
            Some(TaskKind::TxThread { load, thread }) => (load, thread),
            other => unreachable!("a sender's operation from task {other:?}"),
        }
    }

    fn tx_queue_of(&self, cpu: u32) -> (u16, u16) {
        match self.cpus[cpu as usize].softirq.as_ref().map(|t| t.kind) {
            Some(TaskKind::TxClean { nic, queue }) => (nic, queue),
            other => unreachable!("a clean poll's operation from task {other:?}"),
        }
    }

    /// Issues a transmit-path operation of the running task.
    pub(super) fn issue_tx_op(&mut self, now: SimTime, cpu: u32, op: TxOp) -> TaskIssued {
        let k = self.costs.tx;
        let f = self.freq;
        let cost = match op {
            TxOp::Work(w) => match w {
                TxWork::Sendmsg => f.cycles_f64(k.sendmsg_cycles),
                TxWork::CopyBytes(b) => {
                    Duration::from_ns_f64(k.copy_ns_per_kib * b as f64 / 1024.0)
                }
                TxWork::PacketXmit => f.cycles_f64(k.packet_xmit_cycles),
                TxWork::MapBuffer => Duration::from_ns_f64(k.map_buffer_ns),
                TxWork::ReclaimDesc => f.cycles_f64(k.reclaim_desc_cycles),
                TxWork::FreeIova => Duration::from_ns_f64(k.free_iova_ns),
                TxWork::FreeSkb => f.cycles_f64(k.free_skb_cycles),
            },
            TxOp::WaitSndbuf { truesize } => {
                let (l, th) = self.tx_thread_of(cpu);
                let load = &mut self.transmit.loads[l as usize];
                let sndbuf = load.sndbuf;
                let t = &mut load.threads[th as usize];
                if t.in_flight > 0 && t.in_flight + truesize > sndbuf {
                    t.blocked_since.get_or_insert(now);
                    return self.tx_block(now, cpu, op);
                }
                t.in_flight += truesize;
                match t.blocked_since.take() {
                    Some(since) => {
                        t.blocked_ns += now.since(since).as_ns_f64();
                        f.cycles_f64(k.wakeup_cycles)
                    }
                    None => Duration::ZERO,
                }
            }
            TxOp::PostPacket { ip_bytes, last, .. } => {
                let (l, th) = self.tx_thread_of(cpu);
                let (nic, queue) = {
                    let load = &self.transmit.loads[l as usize];
                    (load.nic, load.threads[th as usize].queue)
                };
                if !self.io.nics[nic as usize].queues[queue as usize]
                    .queue
                    .tx_has_room()
                {
                    let q = self
                        .transmit
                        .queues
                        .get_mut(&(nic, queue))
                        .expect("a TX queue");
                    if !q.ring_waiters.contains(&(l, th)) {
                        q.ring_waiters.push((l, th));
                    }
                    return self.tx_block(now, cpu, op);
                }
                let cost = f.cycles_f64(k.post_packet_cycles);
                let gbps = self.transmit.line_gbps[&nic];
                let wire_bytes = ip_bytes + ETHERNET_FRAME_OVERHEAD_BYTES + ETHERNET_WIRE_GAP_BYTES;
                let wire = Duration::from_ns_f64(wire_bytes as f64 * 8.0 / gbps);
                let ready = now + cost + Duration::from_ns_f64(k.nic_fetch_ns);
                let free = self
                    .transmit
                    .wire_free
                    .get_mut(&nic)
                    .expect("a NIC with senders");
                let done_at = ready.max(*free) + wire;
                *free = done_at;
                let _ = self.io.nics[nic as usize].queues[queue as usize]
                    .queue
                    .transmit_done_at(now, done_at);
                let iova = self.transmit.next_iova << 12;
                self.transmit.next_iova = (self.transmit.next_iova + 1) & ((1 << 36) - 1);
                let load = &mut self.transmit.loads[l as usize];
                load.packets += 1;
                let truesize = ip_bytes + load.flow.skb_overhead_bytes;
                self.transmit
                    .queues
                    .get_mut(&(nic, queue))
                    .expect("a TX queue")
                    .posted
                    .push_back(TxPacket {
                        load: l,
                        thread: th,
                        iova,
                        truesize,
                        last,
                        done_at,
                    });
                self.reschedule(now, IoDev::Nic { nic, queue });
                cost
            }
            TxOp::NextCompleted
            | TxOp::BufferIova { .. }
            | TxOp::FreePacket
            | TxOp::NapiComplete => Duration::ZERO,
        };
        self.cpus[cpu as usize].time.tx += cost;
        self.emit_cpu_span(cpu, now, cost, || super::CpuActivity::Smmu {
            op: SmmuCpuOp::Tx(op),
        });
        TaskIssued::Busy(cost, 0)
    }

    /// The running thread blocks in `op` until the clean path frees room.
    fn tx_block(&mut self, now: SimTime, cpu: u32, op: TxOp) -> TaskIssued {
        let c = cpu as usize;
        let task = self.cpus[c].task.as_mut().expect("a sender");
        task.wait = Some((TaskOp::Smmu(SmmuCpuOp::Tx(op)), now));
        self.cpus[c].state = CpuState::Waiting;
        self.cpus[c].activity_end = now;
        TaskIssued::Parked
    }

    /// A blocked thread may try again: its operation is issued afresh.
    fn tx_unblock(&mut self, now: SimTime, load: u16, thread: u16) {
        let cpu = self.transmit.loads[load as usize].threads[thread as usize].cpu;
        let c = cpu as usize;
        let Some(task) = self.cpus[c].task.as_mut() else {
            return;
        };
        if task.kind != (TaskKind::TxThread { load, thread }) {
            return;
        }
        let Some((op, _)) = task.wait.take() else {
            return;
        };
        task.reissue = Some(op);
        if self.cpus[c].state == CpuState::Waiting && self.cpus[c].softirq.is_none() {
            self.cpus[c].state = CpuState::Idle;
            self.try_take_interrupt(now, cpu);
        }
    }

    /// Applies a transmit-path operation at its completion; returns its value.
    pub(super) fn complete_tx_op(&mut self, now: SimTime, cpu: u32, op: TxOp) -> u64 {
        match op {
            TxOp::NextCompleted => {
                let (nic, queue) = self.tx_queue_of(cpu);
                let nq = &mut self.io.nics[nic as usize].queues[queue as usize];
                if nq.queue.tx_pending_clean() == 0 {
                    return 0;
                }
                nq.queue.settle_rx(now, &mut nq.rng);
                let _ = nq.queue.poll(1, 1);
                self.reschedule(now, super::io::IoDev::Nic { nic, queue });
                let q = self
                    .transmit
                    .queues
                    .get_mut(&(nic, queue))
                    .expect("a TX queue");
                q.cleaning = q.posted.pop_front();
                q.cleaning.is_some() as u64
            }
            TxOp::BufferIova { .. } => {
                let (nic, queue) = self.tx_queue_of(cpu);
                self.transmit.queues[&(nic, queue)]
                    .cleaning
                    .map_or(0, |p| p.iova)
            }
            TxOp::FreePacket => {
                let (nic, queue) = self.tx_queue_of(cpu);
                let q = self
                    .transmit
                    .queues
                    .get_mut(&(nic, queue))
                    .expect("a TX queue");
                let Some(p) = q.cleaning.take() else { return 0 };
                let waiters = std::mem::take(&mut q.ring_waiters);
                let load = &mut self.transmit.loads[p.load as usize];
                let t = &mut load.threads[p.thread as usize];
                t.in_flight = t.in_flight.saturating_sub(p.truesize);
                if p.last {
                    t.datagrams += 1;
                    load.datagrams_done += 1;
                    if p.done_at >= load.warmup {
                        load.payload_bytes += load.flow.datagram_bytes as u64;
                    }
                }
                let blocked = t.blocked_since.is_some();
                if blocked {
                    self.tx_unblock(now, p.load, p.thread);
                }
                for (l, th) in waiters {
                    self.tx_unblock(now, l, th);
                }
                0
            }
            TxOp::NapiComplete => {
                let (nic, queue) = self.tx_queue_of(cpu);
                if let Some(q) = self.transmit.queues.get_mut(&(nic, queue)) {
                    q.clean_scheduled = false;
                }
                let _ = self.io.nics[nic as usize].queues[queue as usize]
                    .queue
                    .unmask_irq(now);
                self.reschedule(now, IoDev::Nic { nic, queue });
                0
            }
            TxOp::Work(_) | TxOp::WaitSndbuf { .. } | TxOp::PostPacket { .. } => 0,
        }
    }

    /// The transmit loads in a report.
    pub(super) fn transmit_report(&self) -> Vec<TransmitReport> {
        let now = self.now();
        self.transmit
            .loads
            .iter()
            .enumerate()
            .map(|(l, load)| {
                // Datagrams that left the wire but whose clean-up has not run yet count
                // too: throughput is what the NIC sent.
                let mut payload = load.payload_bytes;
                for q in self.transmit.queues.values() {
                    for p in q.cleaning.iter().chain(q.posted.iter()) {
                        if p.load as usize == l
                            && p.last
                            && p.done_at >= load.warmup
                            && p.done_at <= now
                        {
                            payload += load.flow.datagram_bytes as u64;
                        }
                    }
                }
                let window = now.since(load.warmup.min(now));
                let secs = window.as_secs_f64();
                TransmitReport {
                    name: load.name.clone(),
                    threads: load.threads.len() as u32,
                    datagram_bytes: load.flow.datagram_bytes,
                    fragments_per_datagram: load.flow.fragments().len() as u32,
                    packets_posted: load.packets,
                    datagrams_freed: load.datagrams_done,
                    tx_gbps: if secs > 0.0 {
                        payload as f64 * 8.0 / secs / 1e9
                    } else {
                        0.0
                    },
                    threads_blocked_ns: load.threads.iter().map(|t| t.blocked_ns).sum(),
                }
            })
            .collect()
    }
}

/// One transmit load's outcome.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TransmitReport {
    /// The load's name.
    pub name: String,
    /// Sending threads.
    pub threads: u32,
    /// UDP payload per datagram.
    pub datagram_bytes: u32,
    /// IP fragments (packets, buffers, unmaps) per datagram.
    pub fragments_per_datagram: u32,
    /// Packets handed to the NIC.
    pub packets_posted: u64,
    /// Datagrams whose last skb was freed.
    pub datagrams_freed: u64,
    /// UDP payload the NIC sent after the warm-up, Gbit/s (model output).
    pub tx_gbps: f64,
    /// Time the threads spent blocked on their sockets, ns, all threads together.
    pub threads_blocked_ns: f64,
}
