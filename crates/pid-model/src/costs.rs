//! Latencies of accesses to the descriptor line, by the kind of access
//! ([`AccessKind`]) and the kind of operation ([`OpClass`]).
//!
//! Cycle fields are converted with the requesting core's clock; nanosecond fields with
//! [`Duration::from_ns_f64`]. The IOMMU has no core clock: its costs are all in ns.
//!
//! How a cost is put together:
//!
//! - a core: `fetch(kind)` + (`locked_rmw_cycles` if the operation is locked), where
//!   `fetch(L1Hit) = l1_hit_cycles`, `fetch(LlcHit) = llc_hit_cycles` and every other
//!   kind has its own ns field;
//! - the IOMMU: `iommu_post_occupancy_ns` (which already includes reading the line from the LLC of
//!   the IOMMU's socket and writing it back) plus the extra time to get the line from
//!   anywhere else (a core holding it, another socket, memory). That sum is how long
//!   the IOMMU holds the line; `iommu_post_latency_ns` follows it without holding it.

use serde::{Deserialize, Serialize};
use sim_core::{Duration, Freq};

use crate::mesi::{AccessKind, OpClass};
use crate::PidError;

/// Cost table of the descriptor line. `Default` holds the documented typical values;
/// scenarios override any field.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LineCosts {
    /// Load or store that hits the requester's private cache (L1D), in core cycles.
    /// Source: 4 cycles, Skylake-SP, AnandTech review 11550 (Skylake-X), cache table.
    pub l1_hit_cycles: f64,

    /// Extra core cycles a locked read-modify-write (XCHG, LOCK BTS/BTR) costs on top
    /// of reaching the line in a state it may write (M, or E upgraded silently).
    /// Assumption: DESIGN.md section 3 gives ~20 cycles for a locked RMW on a line held
    /// Modified; the store-buffer drain and the locked micro-ops make up most of that,
    /// so we add 20 on top of the L1 hit (24 in total on an owned line).
    pub locked_rmw_cycles: f64,

    /// Load that misses the private caches and hits the LLC of the requester's socket
    /// (the line's home), no other core holding it, in core cycles.
    /// Source: ~77 cycles, Skylake-SP, AnandTech review 11550, cache table.
    pub llc_hit_cycles: f64,

    /// Upgrade S -> M when every other sharer is on the requester's socket: an
    /// ownership request that moves no data but waits for the invalidations, in ns.
    /// Assumption: one round trip to the caching agent and the sharers inside the
    /// socket. We take 40 ns, below both the 55.6 ns of a Modified cache-to-cache
    /// transfer (FD.io CSIT, Cascade Lake, Intel MLC) and the 44-51 ns one-way CAS
    /// ping-pong (nviennot/core-to-core-latency), because no data travels.
    pub upgrade_s_to_m_ns: f64,

    /// Upgrade S -> M when some other sharer is on another socket, in ns.
    /// Assumption: the invalidation crosses the socket link; we take 110 ns, the low
    /// end of the 108-136 ns cross-socket CAS ping-pong (nviennot/core-to-core-latency,
    /// Ice Lake and Cascade Lake), again because no data moves.
    pub upgrade_other_socket_ns: f64,

    /// Miss served by a clean copy (E or S) in another agent's cache on the requester's
    /// socket; for an ownership request this also invalidates those copies. In ns.
    /// Assumption: Intel MLC reports clean (HIT) transfers a little faster than dirty
    /// (HITM) ones; a public MLC run on a Xeon E-2388G shows 25.2 ns vs 29.3 ns
    /// (ratio 0.86). Applied to the 55.6 ns HITM of FD.io CSIT (Cascade Lake) that
    /// gives ~48 ns.
    pub remote_clean_same_socket_ns: f64,

    /// Miss served by (or, for ownership, having to invalidate) clean copies held only
    /// by agents on another socket, in ns.
    /// Assumption: the low end, 115 ns, of FD.io CSIT's 115-178 ns cross-socket
    /// cache-to-cache range (Cascade Lake, MLC c2c): a clean line needs no write-back.
    pub remote_clean_other_socket_ns: f64,

    /// Miss on a line another agent on the requester's socket holds Modified (the
    /// holder writes it back and forwards it), in ns.
    /// Source: 55.6 ns (51-60), Cascade Lake, FD.io CSIT "Calibration Data -
    /// Cascadelake" (Intel MLC c2c, local HITM).
    pub remote_modified_same_socket_ns: f64,

    /// Miss on a line an agent on another socket holds Modified, in ns.
    /// Source: FD.io CSIT (Cascade Lake, MLC c2c) measures 115-178 ns depending on the
    /// line's home; Intel MLC on Ice Lake Xeon 8360Y gives 126-129 ns. We take 130 ns.
    pub remote_modified_other_socket_ns: f64,

    /// Miss on a line nobody holds whose data sits in the LLC of its home socket, when
    /// the requester is on another socket, in ns.
    /// Assumption: a clean cross-socket read answered by the home's LLC; we take
    /// 115 ns, the low end of FD.io CSIT's 115-178 ns cross-socket transfer range and
    /// below the 130 ns remote DRAM latency from the same source.
    pub remote_llc_other_socket_ns: f64,

    /// Miss on a line that was never touched (cold, in DRAM), requester on the home
    /// socket, in ns.
    /// Source: 81 ns local idle DRAM latency, Cascade Lake 2-socket, FD.io CSIT
    /// "Calibration Data - Cascadelake" (Intel MLC).
    pub memory_ns: f64,

    /// Miss on a cold line homed on another socket, in ns.
    /// Source: 130 ns remote idle DRAM latency, same FD.io CSIT page.
    pub remote_memory_ns: f64,

    /// How long the IOMMU holds the line for one posting update when it finds the line
    /// in the LLC of its own socket with no core holding it: the read for ownership at
    /// the caching agent, the update of PIR (and ON), the write-back. The next post to
    /// the same line cannot start before this ends; posts to other lines overlap it
    /// (posting is pipelined). In ns. The extra time to take the line from a core or
    /// another socket (below) adds to it. See the platform profiles for each machine's
    /// value and source; the default is the `generic` profile's.
    pub iommu_post_occupancy_ns: f64,

    /// From the end of the IOMMU's hold on the line to the end of the posting request:
    /// the pipeline's response path, after which the notification (if any) may leave
    /// for the interrupt-delivery path. It does not hold the line or the device's
    /// write stream. In ns.
    pub iommu_post_latency_ns: f64,

    /// Extra time for the IOMMU's update when a core on the IOMMU's socket holds the
    /// line Modified: the caching agent snoops the core and takes the dirty line. In ns.
    /// Assumption: the same work as a same-socket Modified transfer between cores, so
    /// the same 55.6 ns (FD.io CSIT, Cascade Lake, MLC c2c HITM). A Modified holder on
    /// another socket costs `remote_modified_other_socket_ns` instead, and clean holders
    /// cost `upgrade_s_to_m_ns` / `upgrade_other_socket_ns` (only invalidations).
    pub iommu_snoop_modified_ns: f64,
}

impl Default for LineCosts {
    fn default() -> Self {
        LineCosts {
            l1_hit_cycles: 4.0,
            locked_rmw_cycles: 20.0,
            llc_hit_cycles: 77.0,
            upgrade_s_to_m_ns: 40.0,
            upgrade_other_socket_ns: 110.0,
            remote_clean_same_socket_ns: 48.0,
            remote_clean_other_socket_ns: 115.0,
            remote_modified_same_socket_ns: 55.6,
            remote_modified_other_socket_ns: 130.0,
            remote_llc_other_socket_ns: 115.0,
            memory_ns: 81.0,
            remote_memory_ns: 130.0,
            iommu_post_occupancy_ns: 150.0,
            iommu_post_latency_ns: 0.0,
            iommu_snoop_modified_ns: 55.6,
        }
    }
}

impl LineCosts {
    /// Every field with its name, in declaration order.
    pub fn fields(&self) -> [(&'static str, f64); 15] {
        [
            ("l1_hit_cycles", self.l1_hit_cycles),
            ("locked_rmw_cycles", self.locked_rmw_cycles),
            ("llc_hit_cycles", self.llc_hit_cycles),
            ("upgrade_s_to_m_ns", self.upgrade_s_to_m_ns),
            ("upgrade_other_socket_ns", self.upgrade_other_socket_ns),
            (
                "remote_clean_same_socket_ns",
                self.remote_clean_same_socket_ns,
            ),
            (
                "remote_clean_other_socket_ns",
                self.remote_clean_other_socket_ns,
            ),
            (
                "remote_modified_same_socket_ns",
                self.remote_modified_same_socket_ns,
            ),
            (
                "remote_modified_other_socket_ns",
                self.remote_modified_other_socket_ns,
            ),
            (
                "remote_llc_other_socket_ns",
                self.remote_llc_other_socket_ns,
            ),
            ("memory_ns", self.memory_ns),
            ("remote_memory_ns", self.remote_memory_ns),
            ("iommu_post_occupancy_ns", self.iommu_post_occupancy_ns),
            ("iommu_post_latency_ns", self.iommu_post_latency_ns),
            ("iommu_snoop_modified_ns", self.iommu_snoop_modified_ns),
        ]
    }

    /// Rejects any field that is NaN, infinite or negative, naming the first such field.
    pub fn validate(&self) -> Result<(), PidError> {
        for (field, value) in self.fields() {
            if !value.is_finite() || value < 0.0 {
                return Err(PidError::InvalidCost { field, value });
            }
        }
        Ok(())
    }

    /// Latency of one access of `kind` performing an operation of class `class`.
    /// `freq` is the requesting core's clock (ignored for [`OpClass::IommuPost`]).
    pub fn access_cost(&self, kind: AccessKind, class: OpClass, freq: Freq) -> Duration {
        let ns = Duration::from_ns_f64;
        if class == OpClass::IommuPost {
            let extra = match kind {
                // The IOMMU never holds the line, so it never hits or upgrades; treat
                // those like its normal case should a caller construct them.
                AccessKind::L1Hit | AccessKind::Upgrade | AccessKind::LlcHit => Duration::ZERO,
                AccessKind::UpgradeOtherSocket => ns(self.upgrade_other_socket_ns),
                AccessKind::RemoteCleanSameSocket => ns(self.upgrade_s_to_m_ns),
                AccessKind::RemoteCleanOtherSocket => ns(self.upgrade_other_socket_ns),
                AccessKind::RemoteModifiedSameSocket => ns(self.iommu_snoop_modified_ns),
                AccessKind::RemoteModifiedOtherSocket => ns(self.remote_modified_other_socket_ns),
                AccessKind::RemoteLlcOtherSocket => ns(self.remote_llc_other_socket_ns),
                AccessKind::Memory => ns(self.memory_ns),
                AccessKind::RemoteMemory => ns(self.remote_memory_ns),
            };
            return ns(self.iommu_post_occupancy_ns) + extra;
        }
        let fetch = match kind {
            AccessKind::L1Hit => freq.cycles_f64(self.l1_hit_cycles),
            AccessKind::Upgrade => ns(self.upgrade_s_to_m_ns),
            AccessKind::UpgradeOtherSocket => ns(self.upgrade_other_socket_ns),
            AccessKind::LlcHit => freq.cycles_f64(self.llc_hit_cycles),
            AccessKind::RemoteLlcOtherSocket => ns(self.remote_llc_other_socket_ns),
            AccessKind::Memory => ns(self.memory_ns),
            AccessKind::RemoteMemory => ns(self.remote_memory_ns),
            AccessKind::RemoteCleanSameSocket => ns(self.remote_clean_same_socket_ns),
            AccessKind::RemoteCleanOtherSocket => ns(self.remote_clean_other_socket_ns),
            AccessKind::RemoteModifiedSameSocket => ns(self.remote_modified_same_socket_ns),
            AccessKind::RemoteModifiedOtherSocket => ns(self.remote_modified_other_socket_ns),
        };
        match class {
            OpClass::LockedRmw => fetch + freq.cycles_f64(self.locked_rmw_cycles),
            _ => fetch,
        }
    }
}

/// [`LineCosts::access_cost`] of every (kind, class) at one core clock, worked out once:
/// the same durations, without a float-to-picosecond rounding per access.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PricedLineCosts {
    table: [[Duration; AccessKind::ALL.len()]; OpClass::ALL.len()],
}

impl PricedLineCosts {
    /// The prices of `costs` for a core at `freq`.
    pub fn new(costs: &LineCosts, freq: Freq) -> Self {
        PricedLineCosts {
            table: OpClass::ALL
                .map(|class| AccessKind::ALL.map(|kind| costs.access_cost(kind, class, freq))),
        }
    }

    /// The latency of an access of `kind` performing an operation of class `class`.
    #[inline]
    pub fn get(&self, kind: AccessKind, class: OpClass) -> Duration {
        self.table[class as usize][kind as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priced_costs_are_the_access_costs_of_every_kind_and_class() {
        let costs = LineCosts {
            memory_ns: 91.3,
            locked_rmw_cycles: 17.5,
            ..LineCosts::default()
        };
        for mhz in [1000, 2400, 3333] {
            let f = Freq::from_mhz(mhz).unwrap();
            let priced = PricedLineCosts::new(&costs, f);
            for (i, kind) in AccessKind::ALL.into_iter().enumerate() {
                assert_eq!(kind as usize, i, "AccessKind::ALL is in declaration order");
                for (j, class) in OpClass::ALL.into_iter().enumerate() {
                    assert_eq!(class as usize, j, "OpClass::ALL is in declaration order");
                    assert_eq!(priced.get(kind, class), costs.access_cost(kind, class, f));
                }
            }
        }
    }

    fn ghz2() -> Freq {
        Freq::from_mhz(2000).unwrap()
    }

    #[test]
    fn defaults_are_valid() {
        LineCosts::default().validate().unwrap();
    }

    #[test]
    fn validate_names_the_bad_field() {
        let c = LineCosts {
            memory_ns: -1.0,
            ..LineCosts::default()
        };
        let e = c.validate().unwrap_err();
        assert_eq!(
            e,
            PidError::InvalidCost {
                field: "memory_ns",
                value: -1.0
            }
        );
        assert!(e.to_string().contains("memory_ns"));
        let c = LineCosts {
            iommu_post_occupancy_ns: f64::NAN,
            ..LineCosts::default()
        };
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("iommu_post_occupancy_ns"));
        let c = LineCosts {
            l1_hit_cycles: f64::INFINITY,
            ..LineCosts::default()
        };
        assert!(c.validate().is_err());
    }

    #[test]
    fn serde_fills_defaults_and_rejects_unknown_fields() {
        // serde_json is not a dependency; exercise serde through the derive with a
        // tiny hand-made deserializer instead: the value-based one in serde itself.
        use serde::de::value::{Error, MapDeserializer};
        let map = vec![("memory_ns", 90.0f64)];
        let c: LineCosts =
            LineCosts::deserialize(MapDeserializer::<_, Error>::new(map.into_iter())).unwrap();
        assert_eq!(c.memory_ns, 90.0);
        assert_eq!(c.l1_hit_cycles, 4.0);
        let bad = vec![("memroy_ns", 90.0f64)];
        let e =
            LineCosts::deserialize(MapDeserializer::<_, Error>::new(bad.into_iter())).unwrap_err();
        assert!(e.to_string().contains("memroy_ns"), "{e}");
    }

    #[test]
    fn core_costs_convert_cycles_with_the_core_clock() {
        let c = LineCosts::default();
        let f = ghz2();
        assert_eq!(
            c.access_cost(AccessKind::L1Hit, OpClass::Load, f),
            Duration::from_ns(2)
        );
        assert_eq!(
            c.access_cost(AccessKind::L1Hit, OpClass::LockedRmw, f),
            Duration::from_ns(12)
        );
        assert_eq!(
            c.access_cost(AccessKind::LlcHit, OpClass::Load, f),
            Duration::from_ps(38_500)
        );
        assert_eq!(
            c.access_cost(AccessKind::RemoteModifiedSameSocket, OpClass::LockedRmw, f),
            Duration::from_ps(55_600 + 10_000)
        );
        assert_eq!(
            c.access_cost(AccessKind::Upgrade, OpClass::Store, f),
            Duration::from_ns(40)
        );
    }

    #[test]
    fn iommu_costs_ignore_the_clock() {
        let c = LineCosts::default();
        let a = c.access_cost(AccessKind::LlcHit, OpClass::IommuPost, ghz2());
        let b = c.access_cost(
            AccessKind::LlcHit,
            OpClass::IommuPost,
            Freq::from_mhz(3000).unwrap(),
        );
        assert_eq!(a, b);
        assert_eq!(a, Duration::from_ns(150));
        assert_eq!(
            c.access_cost(
                AccessKind::RemoteModifiedSameSocket,
                OpClass::IommuPost,
                ghz2()
            ),
            Duration::from_ps(205_600)
        );
    }
}
