//! Published figures of seeds 001 (IOSAPIC RTE shadowing), 003 (x2APIC cluster-mode
//! IPIs) and 004 (SMMUv3 CMD_SYNC completion). None of them set a cost: FIDELITY.md
//! lists no calibration input for these seeds.

use super::figures::{get, Figure, Kind};
use super::points::{IpiModeKey, Point};

const SEED001: &str = "seed 001, P. Chubb, 2004-02-27 (IA-64, Linux 2.6.3)";
const SEED003: &str = "seed 003, C. Gorcunov / S. Siddha, 2011-05-02/03 (Westmere-EX)";
const SEED004: &str = "seed 004, B. Song, 2020-08-18 (hi1620, commit message)";

const SMMU_MSI_EMPTY: Point = Point::Smmu(true, "empty", 1);
const SMMU_SEV_EMPTY: Point = Point::Smmu(false, "empty", 1);
const SMMU_MSI_TX1: Point = Point::Smmu(true, "udp-tx", 1);
const SMMU_SEV_TX1: Point = Point::Smmu(false, "udp-tx", 1);
const SMMU_MSI_TX1_APART: Point = Point::Smmu(true, "udp-tx-apart", 1);
const SMMU_SEV_TX1_APART: Point = Point::Smmu(false, "udp-tx-apart", 1);
const SMMU_MSI_TX16: Point = Point::Smmu(true, "udp-tx", 16);
const SMMU_SEV_TX16: Point = Point::Smmu(false, "udp-tx", 16);

const RTE_RMW: Point = Point::Rte(true);
const RTE_SHADOW: Point = Point::Rte(false);
const IPI_PRE: Point = Point::Ipi(true, IpiModeKey::ClusterPerCpu, 20);
const IPI_POST: Point = Point::Ipi(true, IpiModeKey::Cluster, 20);

/// Every figure of seeds 001, 003 and 004.
pub const FIGURES: &[Figure] = &[
    // ---- seed 001: IOSAPIC RTE shadowing ----
    Figure {
        id: "001-enable-irq-prepatch-cycles",
        seed: "001",
        citation: SEED001,
        what: "enable_irq() of the NIC's level interrupt before the patch (read-modify-write of the RTE low word): '~4000 cycles per call'",
        unit: "cycles",
        published: 4000.0,
        kind: Kind::Value,
        calibration: false,
        points: &[RTE_RMW],
        model: |r| get(r, RTE_RMW, "enable_irq_cycles"),
    },
    Figure {
        id: "001-enable-irq-patch-cycles",
        seed: "001",
        citation: SEED001,
        what: "enable_irq() after the patch (shadowed low word): 'around 260 cycles'",
        unit: "cycles",
        published: 260.0,
        kind: Kind::Value,
        calibration: false,
        points: &[RTE_SHADOW],
        model: |r| get(r, RTE_SHADOW, "enable_irq_cycles"),
    },
    Figure {
        id: "001-enable-irq-prepatch-vs-patch",
        seed: "001",
        citation: SEED001,
        what: "enable_irq() cycles, before / after the patch (4000 / 260)",
        unit: "ratio",
        published: 4000.0 / 260.0,
        kind: Kind::Comparison,
        calibration: false,
        points: &[RTE_RMW, RTE_SHADOW],
        model: |r| get(r, RTE_RMW, "enable_irq_cycles") / get(r, RTE_SHADOW, "enable_irq_cycles"),
    },
    // ---- seed 003: x2APIC cluster-mode IPIs ----
    Figure {
        id: "003-flush20-icr-writes-patch",
        seed: "003",
        citation: SEED003,
        what: "flush_tlb_others() to the 20 CPUs of another socket, after the patch: ICR writes ('2 batches of grouped IPI's')",
        unit: "count",
        published: 2.0,
        kind: Kind::Value,
        calibration: false,
        points: &[IPI_POST],
        model: |r| get(r, IPI_POST, "icr_writes"),
    },
    Figure {
        id: "003-flush20-prepatch-vs-patch",
        seed: "003",
        citation: SEED003,
        what: "flush_tlb_others() to the 20 CPUs of another socket, Linux 2.6.38: sender cycles, per-CPU send / per-cluster send ('3x times better')",
        unit: "ratio",
        published: 3.0,
        kind: Kind::Comparison,
        calibration: false,
        points: &[IPI_PRE, IPI_POST],
        model: |r| get(r, IPI_PRE, "sender_cycles") / get(r, IPI_POST, "sender_cycles"),
    },
    // ---- seed 004: SMMUv3 CMD_SYNC ----
    Figure {
        id: "004-empty-msi-poll-window",
        seed: "004",
        citation: SEED004,
        what: "CMD_SYNC into an empty queue, MSI polling: wait for completion (model: PROD write to poll return)",
        unit: "ns",
        published: 280.0,
        kind: Kind::Value,
        calibration: false,
        points: &[SMMU_MSI_EMPTY],
        model: |r| get(r, SMMU_MSI_EMPTY, "poll_window_ns"),
    },
    Figure {
        id: "004-empty-sev-poll-window",
        seed: "004",
        citation: SEED004,
        what: "CMD_SYNC into an empty queue, MSI polling off (SEV + CONS): wait for completion",
        unit: "ns",
        published: 190.0,
        kind: Kind::Value,
        calibration: false,
        points: &[SMMU_SEV_EMPTY],
        model: |r| get(r, SMMU_SEV_EMPTY, "poll_window_ns"),
    },
    Figure {
        id: "004-empty-sev-vs-msi",
        seed: "004",
        citation: SEED004,
        what: "empty-queue CMD_SYNC wait, SEV / MSI (190 / 280 ns)",
        unit: "ratio",
        published: 190.0 / 280.0,
        kind: Kind::Comparison,
        calibration: false,
        points: &[SMMU_SEV_EMPTY, SMMU_MSI_EMPTY],
        model: |r| {
            get(r, SMMU_SEV_EMPTY, "poll_window_ns") / get(r, SMMU_MSI_EMPTY, "poll_window_ns")
        },
    },
    Figure {
        id: "004-tx1-msi-gbps",
        seed: "004",
        citation: SEED004,
        what: "hns3 100G, UDP 32 KB, strict mode, 1 netperf thread, MSI polling: TX throughput",
        unit: "Gbit/s",
        published: 7.0,
        kind: Kind::Value,
        calibration: false,
        points: &[SMMU_MSI_TX1],
        model: |r| get(r, SMMU_MSI_TX1, "tx_gbps"),
    },
    Figure {
        id: "004-tx1-sev-vs-msi",
        seed: "004",
        citation: SEED004,
        what: "1 netperf thread: TX throughput, MSI polling off / on (7.7 / 7 Gbit/s)",
        unit: "ratio",
        published: 7.7 / 7.0,
        kind: Kind::Comparison,
        calibration: false,
        points: &[SMMU_SEV_TX1, SMMU_MSI_TX1],
        model: |r| get(r, SMMU_SEV_TX1, "tx_gbps") / get(r, SMMU_MSI_TX1, "tx_gbps"),
    },
    Figure {
        id: "004-tx1-apart-msi-gbps",
        seed: "004",
        citation: SEED004,
        what: "as 004-tx1-msi-gbps, with the sender on a CPU that takes no queue interrupt (the seed does not say where its thread ran)",
        unit: "Gbit/s",
        published: 7.0,
        kind: Kind::Value,
        calibration: false,
        points: &[SMMU_MSI_TX1_APART],
        model: |r| get(r, SMMU_MSI_TX1_APART, "tx_gbps"),
    },
    Figure {
        id: "004-tx1-apart-sev-vs-msi",
        seed: "004",
        citation: SEED004,
        what: "as 004-tx1-sev-vs-msi, with the sender on a CPU that takes no queue interrupt (7.7 / 7 Gbit/s)",
        unit: "ratio",
        published: 7.7 / 7.0,
        kind: Kind::Comparison,
        calibration: false,
        points: &[SMMU_SEV_TX1_APART, SMMU_MSI_TX1_APART],
        model: |r| {
            get(r, SMMU_SEV_TX1_APART, "tx_gbps") / get(r, SMMU_MSI_TX1_APART, "tx_gbps")
        },
    },
    Figure {
        id: "004-tx16-msi-gbps",
        seed: "004",
        citation: SEED004,
        what: "hns3 100G, UDP 32 KB, strict mode, 16 netperf threads, MSI polling: TX throughput",
        unit: "Gbit/s",
        published: 25.0,
        kind: Kind::Value,
        calibration: false,
        points: &[SMMU_MSI_TX16],
        model: |r| get(r, SMMU_MSI_TX16, "tx_gbps"),
    },
    Figure {
        id: "004-tx16-sev-vs-msi",
        seed: "004",
        citation: SEED004,
        what: "16 netperf threads: TX throughput, MSI polling off / on (27 / 25 Gbit/s)",
        unit: "ratio",
        published: 27.0 / 25.0,
        kind: Kind::Comparison,
        calibration: false,
        points: &[SMMU_SEV_TX16, SMMU_MSI_TX16],
        model: |r| get(r, SMMU_SEV_TX16, "tx_gbps") / get(r, SMMU_MSI_TX16, "tx_gbps"),
    },
];
