//! Sockets × cores × threads: x2APIC IDs as firmware assigns them, Linux CPU numbers,
//! and the distance between two logical CPUs that IPI and cache-line costs depend on.
//!
//! ```text
//!  x2APIC ID = socket << socket_shift | core << thread_bits | thread
//!
//!  2 sockets x 20 cores x 2 threads: thread_bits 1, core_bits 5, socket_shift 6
//!   socket 0: IDs 0x00..0x27 (cores 0-19, threads 0-1)   clusters 0, 1, 2
//!   socket 1: IDs 0x40..0x67                             clusters 4, 5, 6
//!  cluster = ID >> 4: 16 IDs, i.e. 8 cores x 2 threads, never straddling a socket
//! ```
//!
//! **IDs.** Intel SDM Vol. 3A 11.12.8 / Vol. 2A CPUID leaf 0BH (and 1FH): the x2APIC
//! ID is a packed bit field, one field per topology level, each field as wide as
//! needed for the *maximum* count at that level, rounded up to a power of two. Leaf
//! 0BH level 0 reports `thread_bits` as the shift to the core field and level 1
//! reports `socket_shift` as the shift to the package field. Real parts may leave
//! holes (disabled cores keep their numbers); here cores are numbered densely from 0.
//!
//! **Clusters follow the topology.** In x2APIC cluster mode the logical ID is
//! derived from the x2APIC ID (cluster = ID >> 4, SDM 11.12.10.2), so with the packed
//! IDs above a cluster is a set of whole cores of one socket (when `socket_shift >= 4`)
//! and an IPI to all CPUs of a socket needs one ICR write per cluster.
//!
//! **Linux CPU numbers.** Linux numbers CPUs in the order the ACPI MADT lists their
//! x2APIC entries (the boot CPU first). Server firmware commonly lists the first
//! thread of every core of every socket, then the second threads: on a 2 x 20 x 2
//! machine CPUs 0-19 are socket 0's first threads, 20-39 socket 1's, 40-59 socket 0's
//! second threads and 60-79 socket 1's (lscpu then shows "NUMA node0 CPU(s):
//! 0-19,40-59"). That is [`CpuNumbering::PrimaryThreadsFirst`], the default.
//! [`CpuNumbering::ThreadsAdjacent`] lists the threads of a core next to each other,
//! as some firmware does. Neither changes any APIC ID, only which CPU number names it.

use apic_sim::{ApicTopology, LapicCosts};
use serde::{Deserialize, Serialize};
use sim_core::{ApicId, CpuId, Duration};

/// Largest topology accepted: enough for any shipping server, small enough that
/// every ID fits well below the broadcast ID 0xFFFF_FFFF.
pub const MAX_SOCKETS: u32 = 64;
/// See [`MAX_SOCKETS`].
pub const MAX_CORES_PER_SOCKET: u32 = 1024;
/// See [`MAX_SOCKETS`].
pub const MAX_THREADS_PER_CORE: u32 = 8;
/// Logical CPUs per x2APIC cluster (the 16-bit member bitmap of a logical ID).
pub const CLUSTER_SIZE: u32 = 16;

/// How Linux CPU numbers are assigned to logical CPUs (the MADT order).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CpuNumbering {
    /// All first threads (socket by socket, core by core), then all second threads,
    /// and so on. The usual order on Intel servers.
    #[default]
    PrimaryThreadsFirst,
    /// The threads of a core get consecutive numbers.
    ThreadsAdjacent,
}

/// The shape of a machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologySpec {
    /// Sockets (packages), 1..=[`MAX_SOCKETS`].
    pub sockets: u32,
    /// Cores per socket, 1..=[`MAX_CORES_PER_SOCKET`].
    pub cores_per_socket: u32,
    /// Hardware threads per core, 1..=[`MAX_THREADS_PER_CORE`].
    pub threads_per_core: u32,
    /// Linux CPU numbering.
    #[serde(default)]
    pub numbering: CpuNumbering,
}

impl TopologySpec {
    /// Logical CPUs of the machine.
    pub fn cpu_count(&self) -> u64 {
        self.sockets as u64 * self.cores_per_socket as u64 * self.threads_per_core as u64
    }

    /// Where Linux CPU `cpu` sits and its x2APIC ID, computed without building the
    /// whole [`Topology`] (which lists every CPU the same way); `None` past the last
    /// CPU.
    pub fn place(&self, cpu: u32) -> Option<LogicalCpu> {
        if cpu as u64 >= self.cpu_count() {
            return None;
        }
        let (s, c, t) = (self.sockets, self.cores_per_socket, self.threads_per_core);
        let (socket, core, thread) = match self.numbering {
            CpuNumbering::PrimaryThreadsFirst => (cpu / c % s, cpu % c, cpu / (c * s)),
            CpuNumbering::ThreadsAdjacent => (cpu / (c * t), cpu / t % c, cpu % t),
        };
        let thread_bits = field_bits(t);
        let socket_shift = thread_bits + field_bits(c);
        Some(LogicalCpu {
            cpu: CpuId(cpu),
            apic_id: ApicId(socket << socket_shift | core << thread_bits | thread),
            socket,
            core,
            thread,
        })
    }

    /// A spec with the default numbering.
    pub fn new(sockets: u32, cores_per_socket: u32, threads_per_core: u32) -> TopologySpec {
        TopologySpec {
            sockets,
            cores_per_socket,
            threads_per_core,
            numbering: CpuNumbering::default(),
        }
    }
}

/// Bad topology or cost configuration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    /// A field out of range.
    #[error("invalid configuration: {field} = {value}; allowed: {allowed}")]
    InvalidConfig {
        /// The field, e.g. `topology.sockets` or `interconnect.ipi_cross_socket_extra_ns`.
        field: &'static str,
        /// The value given.
        value: String,
        /// What is allowed.
        allowed: &'static str,
    },
    /// A CPU number the machine does not have.
    #[error("CPU {cpu} does not exist; allowed: 0..{cpus}")]
    NoSuchCpu {
        /// The CPU number given.
        cpu: u32,
        /// CPUs of the machine.
        cpus: u32,
    },
    /// A CPU mask sized for another machine.
    #[error("CPU mask covers {mask_cpus} CPUs but the machine has {cpus}")]
    MaskSize {
        /// The mask's CPU space.
        mask_cpus: u32,
        /// CPUs of the machine.
        cpus: u32,
    },
}

/// One logical CPU: its Linux number, its x2APIC ID and where it sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct LogicalCpu {
    /// Linux CPU number.
    pub cpu: CpuId,
    /// x2APIC ID.
    pub apic_id: ApicId,
    /// Socket (package) index.
    pub socket: u32,
    /// Core index within the socket.
    pub core: u32,
    /// Thread index within the core (0 = first thread).
    pub thread: u32,
}

/// How far apart two logical CPUs are, for latencies that depend on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Distance {
    /// The same logical CPU.
    SameCpu,
    /// Two threads of one core (they share L1 and L2).
    SmtSibling,
    /// Two cores of one socket (they share the LLC and the mesh or ring).
    SameSocket,
    /// Two sockets: every message and cache line crosses the socket interconnect.
    CrossSocket,
}

/// A machine's logical CPUs, indexed by Linux CPU number and by x2APIC ID.
#[derive(Clone, Debug)]
pub struct Topology {
    spec: TopologySpec,
    thread_bits: u32,
    core_bits: u32,
    /// Indexed by CPU number.
    cpus: Vec<LogicalCpu>,
    /// (APIC ID, CPU), sorted by APIC ID.
    by_apic: Vec<(ApicId, CpuId)>,
}

/// Bits needed to number `n` items (CPUID leaf 0BH rounds each level up to a power
/// of two): 1 -> 0, 2 -> 1, 3..=4 -> 2, 20 -> 5.
pub fn field_bits(n: u32) -> u32 {
    if n <= 1 {
        0
    } else {
        u32::BITS - (n - 1).leading_zeros()
    }
}

impl Topology {
    /// Builds the topology and numbers its CPUs.
    pub fn new(spec: TopologySpec) -> Result<Topology, TopologyError> {
        let check = |field, value: u32, max: u32, allowed| {
            if value == 0 || value > max {
                Err(TopologyError::InvalidConfig {
                    field,
                    value: value.to_string(),
                    allowed,
                })
            } else {
                Ok(())
            }
        };
        check(
            "topology.sockets",
            spec.sockets,
            MAX_SOCKETS,
            "1..=64 sockets",
        )?;
        check(
            "topology.cores_per_socket",
            spec.cores_per_socket,
            MAX_CORES_PER_SOCKET,
            "1..=1024 cores per socket",
        )?;
        check(
            "topology.threads_per_core",
            spec.threads_per_core,
            MAX_THREADS_PER_CORE,
            "1..=8 threads per core",
        )?;
        let thread_bits = field_bits(spec.threads_per_core);
        let core_bits = field_bits(spec.cores_per_socket);
        let socket_shift = thread_bits + core_bits;

        // Firmware's MADT order, which Linux turns into CPU numbers.
        let mut order = Vec::with_capacity(
            (spec.sockets * spec.cores_per_socket * spec.threads_per_core) as usize,
        );
        match spec.numbering {
            CpuNumbering::PrimaryThreadsFirst => {
                for thread in 0..spec.threads_per_core {
                    for socket in 0..spec.sockets {
                        for core in 0..spec.cores_per_socket {
                            order.push((socket, core, thread));
                        }
                    }
                }
            }
            CpuNumbering::ThreadsAdjacent => {
                for socket in 0..spec.sockets {
                    for core in 0..spec.cores_per_socket {
                        for thread in 0..spec.threads_per_core {
                            order.push((socket, core, thread));
                        }
                    }
                }
            }
        }
        let cpus: Vec<LogicalCpu> = order
            .into_iter()
            .enumerate()
            .map(|(n, (socket, core, thread))| LogicalCpu {
                cpu: CpuId(n as u32),
                apic_id: ApicId(socket << socket_shift | core << thread_bits | thread),
                socket,
                core,
                thread,
            })
            .collect();
        let mut by_apic: Vec<(ApicId, CpuId)> = cpus.iter().map(|c| (c.apic_id, c.cpu)).collect();
        by_apic.sort_unstable();
        Ok(Topology {
            spec,
            thread_bits,
            core_bits,
            cpus,
            by_apic,
        })
    }

    /// The spec this topology was built from.
    pub fn spec(&self) -> &TopologySpec {
        &self.spec
    }
    /// Logical CPUs.
    pub fn len(&self) -> usize {
        self.cpus.len()
    }
    /// Never true: a topology has at least one CPU.
    pub fn is_empty(&self) -> bool {
        self.cpus.is_empty()
    }
    /// Every logical CPU, by CPU number.
    pub fn cpus(&self) -> &[LogicalCpu] {
        &self.cpus
    }
    /// One logical CPU.
    ///
    /// # Panics
    /// If `cpu` is not a CPU of this topology (an API misuse).
    pub fn cpu(&self, cpu: CpuId) -> &LogicalCpu {
        &self.cpus[cpu.0 as usize]
    }
    /// x2APIC ID of `cpu`.
    pub fn apic_id(&self, cpu: CpuId) -> ApicId {
        self.cpu(cpu).apic_id
    }
    /// The CPU with x2APIC ID `id`, if any.
    pub fn cpu_of(&self, id: ApicId) -> Option<CpuId> {
        self.by_apic
            .binary_search_by_key(&id, |&(a, _)| a)
            .ok()
            .map(|i| self.by_apic[i].1)
    }
    /// Width of the thread field (CPUID.0BH level 0 shift).
    pub fn thread_bits(&self) -> u32 {
        self.thread_bits
    }
    /// Width of the core field.
    pub fn core_bits(&self) -> u32 {
        self.core_bits
    }
    /// Shift of the socket field (CPUID.0BH level 1 shift).
    pub fn socket_shift(&self) -> u32 {
        self.thread_bits + self.core_bits
    }
    /// x2APIC cluster of `cpu` (ID >> 4).
    pub fn cluster(&self, cpu: CpuId) -> u32 {
        self.apic_id(cpu).0 / CLUSTER_SIZE
    }
    /// The CPUs of `socket`, in CPU-number order.
    pub fn socket_cpus(&self, socket: u32) -> impl Iterator<Item = CpuId> + '_ {
        self.cpus
            .iter()
            .filter(move |c| c.socket == socket)
            .map(|c| c.cpu)
    }
    /// How far apart `a` and `b` are.
    pub fn distance(&self, a: CpuId, b: CpuId) -> Distance {
        let (x, y) = (self.cpu(a), self.cpu(b));
        if a == b {
            Distance::SameCpu
        } else if x.socket != y.socket {
            Distance::CrossSocket
        } else if x.core != y.core {
            Distance::SameSocket
        } else {
            Distance::SmtSibling
        }
    }
    /// The APIC-side index of every ID, for IPI destination resolution.
    pub fn apic_topology(&self) -> ApicTopology {
        ApicTopology::new(self.cpus.iter().map(|c| c.apic_id))
            .expect("packed topology IDs are unique and below the broadcast ID")
    }
}

/// Latencies between logical CPUs that depend on their [`Distance`]. Cache-line
/// transfers are not here: every shared line is a `pid_model::Line`, priced by
/// `costs.pid_line` (one coherence model).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InterconnectCosts {
    /// What an IPI to another socket takes on top of
    /// [`LapicCosts::ipi_latency_ns`] (which is the same-socket flight), ns. Default
    /// 75. Assumption: an interrupt message to another socket crosses the socket
    /// interconnect once, as a cache line does; COST-SOURCES.md gives one-way
    /// core-to-core compare-and-swap latencies of 44-51 ns within a socket and
    /// 108-136 ns across sockets (Ice Lake, Cascade Lake), a difference of 57-92 ns;
    /// 75 ns is its middle.
    pub ipi_cross_socket_extra_ns: f64,
    /// From an ICR write's message leaving the sender's APIC until that APIC takes
    /// the next write, when every destination is on the sender's socket: the hand-off
    /// of the message to the interrupt fabric and its acknowledgement (Suresh Siddha,
    /// seed 003: the ICR writes are "serialized (at least the sending part)"). ns.
    /// Default 50. Assumption: no published figure (COST-SOURCES.md); one on-die
    /// request and acknowledgement, the 44-51 ns one-way core-to-core CAS of
    /// COST-SOURCES.md.
    pub icr_accept_same_socket_ns: f64,
    /// The same when a destination is on another socket: the acknowledgement crosses
    /// the socket link. ns. Default 120. Assumption: COST-SOURCES.md's 108-136 ns
    /// cross-socket one-way CAS.
    pub icr_accept_cross_socket_ns: f64,
}

impl Default for InterconnectCosts {
    fn default() -> Self {
        InterconnectCosts {
            ipi_cross_socket_extra_ns: 75.0,
            icr_accept_same_socket_ns: 50.0,
            icr_accept_cross_socket_ns: 120.0,
        }
    }
}

impl InterconnectCosts {
    /// Checks that every field is a finite number >= 0 (1e12 at most).
    pub fn validate(&self) -> Result<(), TopologyError> {
        for (field, v) in [
            (
                "interconnect.ipi_cross_socket_extra_ns",
                self.ipi_cross_socket_extra_ns,
            ),
            (
                "interconnect.icr_accept_same_socket_ns",
                self.icr_accept_same_socket_ns,
            ),
            (
                "interconnect.icr_accept_cross_socket_ns",
                self.icr_accept_cross_socket_ns,
            ),
        ] {
            if !(v.is_finite() && (0.0..=1e12).contains(&v)) {
                return Err(TopologyError::InvalidConfig {
                    field,
                    value: v.to_string(),
                    allowed: "a finite number of ns, 0..=1e12",
                });
            }
        }
        Ok(())
    }

    /// From the end of the ICR write on the sender until the vector is in the
    /// target's IRR: [`LapicCosts::ipi_latency_ns`] within a socket (a self IPI and
    /// a sibling thread included), plus
    /// [`ipi_cross_socket_extra_ns`](Self::ipi_cross_socket_extra_ns) across sockets.
    pub fn ipi_flight(&self, apic: &LapicCosts, distance: Distance) -> Duration {
        let extra = match distance {
            Distance::CrossSocket => self.ipi_cross_socket_extra_ns,
            Distance::SameCpu | Distance::SmtSibling | Distance::SameSocket => 0.0,
        };
        Duration::from_ns_f64(apic.ipi_latency_ns + extra)
    }

    /// How long the sender's APIC is busy with a message to a destination this far
    /// away after it leaves ([`icr_accept_same_socket_ns`](Self::icr_accept_same_socket_ns)
    /// or [`icr_accept_cross_socket_ns`](Self::icr_accept_cross_socket_ns)).
    pub fn icr_accept(&self, distance: Distance) -> Duration {
        Duration::from_ns_f64(match distance {
            Distance::CrossSocket => self.icr_accept_cross_socket_ns,
            Distance::SameCpu | Distance::SmtSibling | Distance::SameSocket => {
                self.icr_accept_same_socket_ns
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_widths_round_up_to_powers_of_two() {
        let widths: Vec<u32> = [1, 2, 3, 4, 5, 8, 20, 32, 33].map(field_bits).to_vec();
        assert_eq!(widths, [0, 1, 2, 2, 3, 3, 5, 5, 6]);
    }

    #[test]
    fn two_sockets_twenty_cores_two_threads() {
        let t = Topology::new(TopologySpec::new(2, 20, 2)).unwrap();
        assert_eq!(t.len(), 80);
        assert_eq!(
            (t.thread_bits(), t.core_bits(), t.socket_shift()),
            (1, 5, 6)
        );
        // Primary threads first: CPU 20 is socket 1 core 0 thread 0 = ID 0x40;
        // CPU 40 is socket 0 core 0 thread 1 = ID 1.
        assert_eq!(t.apic_id(CpuId(0)), ApicId(0));
        assert_eq!(t.apic_id(CpuId(19)), ApicId(38));
        assert_eq!(t.apic_id(CpuId(20)), ApicId(0x40));
        assert_eq!(t.apic_id(CpuId(40)), ApicId(1));
        assert_eq!(t.apic_id(CpuId(79)), ApicId(0x40 + 39));
        assert_eq!(t.cpu_of(ApicId(0x41)), Some(CpuId(60)));
        assert_eq!(t.cpu_of(ApicId(0x28)), None, "core 20 does not exist");
        // Socket 1 spans clusters 4, 5 and 6.
        let mut clusters: Vec<u32> = t.socket_cpus(1).map(|c| t.cluster(c)).collect();
        clusters.sort_unstable();
        clusters.dedup();
        assert_eq!(clusters, [4, 5, 6]);
        assert_eq!(t.distance(CpuId(0), CpuId(40)), Distance::SmtSibling);
        assert_eq!(t.distance(CpuId(0), CpuId(1)), Distance::SameSocket);
        assert_eq!(t.distance(CpuId(0), CpuId(20)), Distance::CrossSocket);
        assert_eq!(t.distance(CpuId(3), CpuId(3)), Distance::SameCpu);
        assert_eq!(t.apic_topology().ids().len(), 80);
    }

    #[test]
    fn threads_adjacent_numbering_keeps_the_ids() {
        let mut spec = TopologySpec::new(2, 20, 2);
        spec.numbering = CpuNumbering::ThreadsAdjacent;
        let t = Topology::new(spec).unwrap();
        assert_eq!(t.apic_id(CpuId(1)), ApicId(1));
        assert_eq!(t.apic_id(CpuId(40)), ApicId(0x40));
        let a = Topology::new(TopologySpec::new(2, 20, 2)).unwrap();
        let mut x: Vec<ApicId> = t.cpus().iter().map(|c| c.apic_id).collect();
        let mut y: Vec<ApicId> = a.cpus().iter().map(|c| c.apic_id).collect();
        x.sort_unstable();
        y.sort_unstable();
        assert_eq!(x, y);
    }

    #[test]
    fn bad_specs_are_errors() {
        for (spec, field) in [
            (TopologySpec::new(0, 1, 1), "topology.sockets"),
            (TopologySpec::new(1, 0, 1), "topology.cores_per_socket"),
            (TopologySpec::new(1, 1, 9), "topology.threads_per_core"),
        ] {
            match Topology::new(spec) {
                Err(TopologyError::InvalidConfig { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{other:?}"),
            }
        }
        let bad = InterconnectCosts {
            ipi_cross_socket_extra_ns: f64::NAN,
            ..InterconnectCosts::default()
        };
        assert!(bad.validate().is_err());
        let bad = InterconnectCosts {
            icr_accept_cross_socket_ns: -1.0,
            ..InterconnectCosts::default()
        };
        assert!(bad.validate().is_err());
        assert!(InterconnectCosts::default().validate().is_ok());
    }

    #[test]
    fn place_agrees_with_the_built_topology() {
        for numbering in [
            CpuNumbering::PrimaryThreadsFirst,
            CpuNumbering::ThreadsAdjacent,
        ] {
            for (s, c, t) in [(2, 20, 2), (1, 3, 1), (3, 5, 4)] {
                let spec = TopologySpec {
                    numbering,
                    ..TopologySpec::new(s, c, t)
                };
                let topo = Topology::new(spec).unwrap();
                for lc in topo.cpus() {
                    assert_eq!(spec.place(lc.cpu.0), Some(*lc), "{spec:?}");
                }
                assert_eq!(spec.place(topo.len() as u32), None);
            }
        }
    }

    #[test]
    fn ipi_flight_is_longer_across_sockets() {
        let c = InterconnectCosts::default();
        let apic = LapicCosts::default();
        let same = c.ipi_flight(&apic, Distance::SameSocket);
        let cross = c.ipi_flight(&apic, Distance::CrossSocket);
        assert_eq!(same, Duration::from_ns_f64(apic.ipi_latency_ns));
        assert!(cross > same);
    }
}
