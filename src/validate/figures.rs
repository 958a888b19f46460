//! Every published figure of the seeds that an experiment reproduces: the x86 seeds
//! here, seeds 001, 003 and 004 in [`super::arm_apic_figures`].
//!
//! Values are set beside the model's value of the same quantity; comparisons (one
//! published value over another of the same test) beside the model's ratio. Sources:
//! seed 000 is the posted-MSI patch thread (`../shared/seeds/000_*`), its cover letter
//! ("[PATCH RFC 00/13] Coalesced Interrupt Delivery with posted MSI", Jacob Pan,
//! 2023-11-12) and Jacob Pan's mails to Jens Axboe of 2024-02-12 in the v1 thread;
//! seed 002 is the VMD thread (`../shared/seeds/002_*`). Only two figures, the
//! calibration inputs FIDELITY.md allows, were used to set a cost.

use super::points::{Point, Results};

/// Whether a figure is one value or a ratio of two.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// One quantity: magnitude is checked.
    Value,
    /// A ratio of two published values of one test: direction (or a tie, under 5 %) and
    /// magnitude are checked.
    Comparison,
}

/// One published figure.
pub struct Figure {
    /// Stable id.
    pub id: &'static str,
    /// The seed it belongs to.
    pub seed: &'static str,
    /// Where it was published.
    pub citation: &'static str,
    /// What it measures.
    pub what: &'static str,
    /// Unit of `published` and the model's value.
    pub unit: &'static str,
    /// The published value (for a comparison, the ratio of the two published values).
    pub published: f64,
    /// Value or comparison.
    pub kind: Kind,
    /// Whether the figure set a cost (then it is no evidence for the model).
    pub calibration: bool,
    /// The points the model's value needs.
    pub points: &'static [Point],
    /// The model's value from those points' rows.
    pub model: fn(&Results) -> f64,
}

pub(super) fn get(r: &Results, p: Point, key: &str) -> f64 {
    r.get(&p)
        .and_then(|row| row.get(key))
        .and_then(|v| v.as_f64())
        .unwrap_or(f64::NAN)
}

const PAN_0212: &str = "J. Pan to J. Axboe, 2024-02-12, posted-MSI v1 thread";
const COVER: &str = "posted-MSI RFC cover letter, J. Pan, 2023-11-12";
const SEED000: &str = "seed 000, J. Pan, 2023-11-15 (test 1, one WQ)";
const SEED000_DEC: &str = "seed 000, J. Pan, 2023-12-08 (perf, 30 s)";
const SEED002: &str = "seed 002, X. Li, 2022-12-22 (fio 4K randread)";
const SEED002_IDLE: &str = "seed 002, X. Li, 2022-12-28";

const NVME_R2: Point = Point::Nvme(false, 2);
const NVME_R4: Point = Point::Nvme(false, 4);
const NVME_P4: Point = Point::Nvme(true, 4);
const NVME_R8: Point = Point::Nvme(false, 8);
const NVME_P8: Point = Point::Nvme(true, 8);
const PIR_COPY: Point = Point::Pir("copy-then-xchg", 1);
const PIR_RFC: Point = Point::Pir("rfc", 1);
const PIR_INTER: Point = Point::Pir("interleaved", 1);
const PIR_WORD: Point = Point::Pir("per-word-dispatch", 1);
const PIR_P2: Point = Point::Pir("copy-then-xchg", 2);
const PIR_R2: Point = Point::Pir("remapped", 2);
const LOOPS_2: Point = Point::Loops("rfc", 2);
const LOOPS_3: Point = Point::Loops("rfc", 3);
const LOOPS_6: Point = Point::Loops("rfc", 6);
const VMD_B1: Point = Point::Vmd(1, true, false);
const VMD_R1: Point = Point::Vmd(1, false, false);
const VMD_M1: Point = Point::Vmd(1, false, true);
const VMD_B8: Point = Point::Vmd(8, true, false);
const VMD_R8: Point = Point::Vmd(8, false, false);
const VMD_M8: Point = Point::Vmd(8, false, true);
const VMD_B12: Point = Point::Vmd(12, true, false);
const VMD_R12: Point = Point::Vmd(12, false, false);
const VMD_M12: Point = Point::Vmd(12, false, true);

/// L1D misses on the descriptor line per second at a `pir-variants` point.
fn l1_misses_per_s(r: &Results, p: Point) -> f64 {
    get(r, p, "cpu_l1d_misses_per_notification")
        * get(r, p, "notifications_per_irq")
        * get(r, p, "irq_rate_mps")
}

/// Every figure of the x86 seeds (000, 002), seed by seed.
pub const X86_FIGURES: &[Figure] = &[
    // ---- seed 000: NVMe ----
    Figure {
        id: "000-nvme4-remapped-msis-per-vector",
        seed: "000",
        citation: PAN_0212,
        what: "4 Gen5 drives, libaio, remapped: MSIs per second per vector (32 vectors)",
        unit: "1/s",
        published: 182_218.0,
        kind: Kind::Value,
        calibration: true,
        points: &[NVME_R4],
        model: |r| get(r, NVME_R4, "msis_per_s_per_vector"),
    },
    Figure {
        id: "000-polled-iops",
        seed: "000",
        citation: PAN_0212,
        what: "4 Gen5 drives, io_uring polled: total IOPS (model: the drive ceiling it set, x4; no run)",
        unit: "1/s",
        published: 13.0e6,
        kind: Kind::Value,
        calibration: true,
        points: &[],
        model: |_| {
            4.0 * crate::platform::get("spr")
                .expect("embedded")
                .costs()
                .nvme
                .iops_ceiling
        },
    },
    Figure {
        id: "000-nvme4-remapped-iops",
        seed: "000",
        citation: PAN_0212,
        what: "4 drives, libaio, remapped: IOPS per drive (6,348 k / 4)",
        unit: "1/s",
        published: 1_587_000.0,
        kind: Kind::Value,
        calibration: false,
        points: &[NVME_R4],
        model: |r| get(r, NVME_R4, "iops_per_drive"),
    },
    Figure {
        id: "000-nvme4-posted-iops",
        seed: "000",
        citation: PAN_0212,
        what: "4 drives, libaio, posted: IOPS per drive (8,295 k / 4)",
        unit: "1/s",
        published: 2_073_750.0,
        kind: Kind::Value,
        calibration: false,
        points: &[NVME_P4],
        model: |r| get(r, NVME_P4, "iops_per_drive"),
    },
    Figure {
        id: "000-nvme4-posted-vs-remapped",
        seed: "000",
        citation: PAN_0212,
        what: "4 drives, libaio: posted / remapped IOPS",
        unit: "ratio",
        published: 8295.0 / 6348.0,
        kind: Kind::Comparison,
        calibration: false,
        points: &[NVME_P4, NVME_R4],
        model: |r| get(r, NVME_P4, "iops_per_drive") / get(r, NVME_R4, "iops_per_drive"),
    },
    Figure {
        id: "000-nvme4-posted-msis-per-vector",
        seed: "000",
        citation: PAN_0212,
        what: "4 drives, libaio, posted: MSIs per second per vector (table row 'aio w/ posted MSI')",
        unit: "1/s",
        published: 185_545.0,
        kind: Kind::Value,
        calibration: false,
        points: &[NVME_P4],
        model: |r| get(r, NVME_P4, "msis_per_s_per_vector"),
    },
    Figure {
        id: "000-nvme4-posted-notifications-per-msi",
        seed: "000",
        citation: PAN_0212,
        what: "4 drives, posted: notifications (PMN) per MSI (measured with io_uring; the model runs libaio costs)",
        unit: "ratio",
        published: 0.78,
        kind: Kind::Value,
        calibration: false,
        points: &[NVME_P4],
        model: |r| get(r, NVME_P4, "notifications_per_msi"),
    },
    Figure {
        id: "000-nvme4-ios-per-msi-posted-vs-remapped",
        seed: "000",
        citation: PAN_0212,
        what: "4 drives, libaio: I/Os per MSI, posted / remapped (1.397 / 1.089)",
        unit: "ratio",
        published: (8295.0 / (32.0 * 185.545)) / (6348.0 / (32.0 * 182.218)),
        kind: Kind::Comparison,
        calibration: false,
        points: &[NVME_P4, NVME_R4],
        model: |r| get(r, NVME_P4, "ios_per_msi") / get(r, NVME_R4, "ios_per_msi"),
    },
    Figure {
        id: "000-nvme2-remapped-iops",
        seed: "000",
        citation: COVER,
        what: "2 drives, remapped: IOPS per drive",
        unit: "1/s",
        published: 1_991_000.0,
        kind: Kind::Value,
        calibration: false,
        points: &[NVME_R2],
        model: |r| get(r, NVME_R2, "iops_per_drive"),
    },
    Figure {
        id: "000-nvme8-remapped-iops",
        seed: "000",
        citation: COVER,
        what: "8 drives, remapped: IOPS per drive",
        unit: "1/s",
        published: 834_000.0,
        kind: Kind::Value,
        calibration: false,
        points: &[NVME_R8],
        model: |r| get(r, NVME_R8, "iops_per_drive"),
    },
    Figure {
        id: "000-nvme8-posted-iops",
        seed: "000",
        citation: COVER,
        what: "8 drives, posted: IOPS per drive",
        unit: "1/s",
        published: 1_943_000.0,
        kind: Kind::Value,
        calibration: false,
        points: &[NVME_P8],
        model: |r| get(r, NVME_P8, "iops_per_drive"),
    },
    Figure {
        id: "000-nvme8-posted-vs-remapped",
        seed: "000",
        citation: COVER,
        what: "8 drives: posted / remapped IOPS (+132 %)",
        unit: "ratio",
        published: 1.943 / 0.834,
        kind: Kind::Comparison,
        calibration: false,
        points: &[NVME_P8, NVME_R8],
        model: |r| get(r, NVME_P8, "iops_per_drive") / get(r, NVME_R8, "iops_per_drive"),
    },
    Figure {
        id: "000-nvme-remapped-2-vs-8-drives",
        seed: "000",
        citation: COVER,
        what: "remapped IOPS per drive, 2 drives / 8 drives on one socket",
        unit: "ratio",
        published: 1.991 / 0.834,
        kind: Kind::Comparison,
        calibration: false,
        points: &[NVME_R2, NVME_R8],
        model: |r| get(r, NVME_R2, "iops_per_drive") / get(r, NVME_R8, "iops_per_drive"),
    },
    Figure {
        id: "000-nvme-remapped-4-vs-8-drives",
        seed: "000",
        citation: COVER,
        what: "remapped IOPS per drive, 4 drives / 8 drives",
        unit: "ratio",
        published: 1.136 / 0.834,
        kind: Kind::Comparison,
        calibration: false,
        points: &[NVME_R4, NVME_R8],
        model: |r| get(r, NVME_R4, "iops_per_drive") / get(r, NVME_R8, "iops_per_drive"),
    },
    // ---- seed 000: DSA ----
    Figure {
        id: "000-dsa1-copy-then-xchg-irq-rate",
        seed: "000",
        citation: SEED000,
        what: "one DSA WQ, one CPU, posted, copy-then-xchg: completed descriptors per second",
        unit: "M/s",
        published: 9.54,
        kind: Kind::Value,
        calibration: false,
        points: &[PIR_COPY],
        model: |r| get(r, PIR_COPY, "irq_rate_mps"),
    },
    Figure {
        id: "000-dsa1-copy-vs-rfc",
        seed: "000",
        citation: SEED000,
        what: "one WQ: copy-then-xchg / rfc IRQ rate (9.54 / 9.29, a tie under 5 %)",
        unit: "ratio",
        published: 9.54 / 9.29,
        kind: Kind::Comparison,
        calibration: false,
        points: &[PIR_COPY, PIR_RFC],
        model: |r| get(r, PIR_COPY, "irq_rate_mps") / get(r, PIR_RFC, "irq_rate_mps"),
    },
    Figure {
        id: "000-dsa1-copy-vs-interleaved",
        seed: "000",
        citation: SEED000,
        what: "one WQ: copy-then-xchg / Peter Zijlstra's interleaved proposal IRQ rate (9.54 / 8.82)",
        unit: "ratio",
        published: 9.54 / 8.82,
        kind: Kind::Comparison,
        calibration: false,
        points: &[PIR_COPY, PIR_INTER],
        model: |r| get(r, PIR_COPY, "irq_rate_mps") / get(r, PIR_INTER, "irq_rate_mps"),
    },
    Figure {
        id: "000-dsa1-fill-bandwidth",
        seed: "000",
        citation: SEED000_DEC,
        what: "one WQ, with PIR copy: memfill bandwidth (the thread's 'Gbps' read as GB/s: 5.029 GB/s / 512 B = 9.8 M/s)",
        unit: "GB/s",
        published: 5.029,
        kind: Kind::Value,
        calibration: false,
        points: &[PIR_COPY],
        model: |r| get(r, PIR_COPY, "fill_gbytes_per_s"),
    },
    Figure {
        id: "000-dsa1-copy-vs-per-word-bandwidth",
        seed: "000",
        citation: SEED000_DEC,
        what: "with / without PIR copy: memfill bandwidth (5.029 / 4.944, a tie under 5 %)",
        unit: "ratio",
        published: 5.029 / 4.944,
        kind: Kind::Comparison,
        calibration: false,
        points: &[PIR_COPY, PIR_WORD],
        model: |r| get(r, PIR_COPY, "fill_gbytes_per_s") / get(r, PIR_WORD, "fill_gbytes_per_s"),
    },
    Figure {
        id: "000-dsa1-per-word-vs-copy-l1-misses",
        seed: "000",
        citation: SEED000_DEC,
        what: "without / with PIR copy: L1D load misses per second (perf counts all loads; the model counts the descriptor line's)",
        unit: "ratio",
        published: 8_279_458.0 / 7_762_311.0,
        kind: Kind::Comparison,
        calibration: false,
        points: &[PIR_COPY, PIR_WORD],
        model: |r| l1_misses_per_s(r, PIR_WORD) / l1_misses_per_s(r, PIR_COPY),
    },
    Figure {
        id: "000-dsa2-remapped-irq-rate",
        seed: "000",
        citation: COVER,
        what: "two DSA devices on one CPU, remapped: IRQs per second",
        unit: "M/s",
        published: 5.157,
        kind: Kind::Value,
        calibration: false,
        points: &[PIR_R2],
        model: |r| get(r, PIR_R2, "irq_rate_mps"),
    },
    Figure {
        id: "000-dsa2-posted-irq-rate",
        seed: "000",
        citation: COVER,
        what: "two DSA devices on one CPU, posted: IRQs per second",
        unit: "M/s",
        published: 8.987,
        kind: Kind::Value,
        calibration: false,
        points: &[PIR_P2],
        model: |r| get(r, PIR_P2, "irq_rate_mps"),
    },
    Figure {
        id: "000-dsa2-posted-vs-remapped",
        seed: "000",
        citation: COVER,
        what: "two DSA devices on one CPU: posted / remapped IRQ rate (+74 %)",
        unit: "ratio",
        published: 8.987 / 5.157,
        kind: Kind::Comparison,
        calibration: false,
        points: &[PIR_P2, PIR_R2],
        model: |r| get(r, PIR_P2, "irq_rate_mps") / get(r, PIR_R2, "irq_rate_mps"),
    },
    Figure {
        id: "000-maxloop-6-vs-2",
        seed: "000",
        citation: COVER,
        what: "DSA memfill, RFC handler: IRQ rate at MAX_LOOPS 6 / 2 (6,662,425 / 6,157,107)",
        unit: "ratio",
        published: 6_662_425.0 / 6_157_107.0,
        kind: Kind::Comparison,
        calibration: false,
        points: &[LOOPS_6, LOOPS_2],
        model: |r| get(r, LOOPS_6, "irq_rate_mps") / get(r, LOOPS_2, "irq_rate_mps"),
    },
    Figure {
        id: "000-maxloop-3-vs-2",
        seed: "000",
        citation: COVER,
        what: "DSA memfill, RFC handler: IRQ rate at MAX_LOOPS 3 / 2 (a tie under 5 %)",
        unit: "ratio",
        published: 6_226_611.0 / 6_157_107.0,
        kind: Kind::Comparison,
        calibration: false,
        points: &[LOOPS_3, LOOPS_2],
        model: |r| get(r, LOOPS_3, "irq_rate_mps") / get(r, LOOPS_2, "irq_rate_mps"),
    },
    // ---- seed 002: VMD ----
    Figure {
        id: "002-vmd1-bypass-vs-remap",
        seed: "002",
        citation: SEED002,
        what: "1 drive: bypass / remap IOPS (1183 k / 1171 k, a tie under 5 %), VMD not merging",
        unit: "ratio",
        published: 1183.0 / 1171.0,
        kind: Kind::Comparison,
        calibration: false,
        points: &[VMD_B1, VMD_R1],
        model: |r| get(r, VMD_B1, "iops_per_drive") / get(r, VMD_R1, "iops_per_drive"),
    },
    Figure {
        id: "002-vmd1-bypass-vs-remap-merging",
        seed: "002",
        citation: SEED002,
        what: "1 drive: bypass / remap IOPS (a tie), VMD merging",
        unit: "ratio",
        published: 1183.0 / 1171.0,
        kind: Kind::Comparison,
        calibration: false,
        points: &[VMD_B1, VMD_M1],
        model: |r| get(r, VMD_B1, "iops_per_drive") / get(r, VMD_M1, "iops_per_drive"),
    },
    Figure {
        id: "002-vmd8-bypass-vs-remap-merging",
        seed: "002",
        citation: SEED002,
        what: "8 drives: bypass / remap IOPS ('about 30 % drop'), VMD merging",
        unit: "ratio",
        published: 0.70,
        kind: Kind::Comparison,
        calibration: false,
        points: &[VMD_B8, VMD_M8],
        model: |r| get(r, VMD_B8, "iops_per_drive") / get(r, VMD_M8, "iops_per_drive"),
    },
    Figure {
        id: "002-vmd8-bypass-vs-remap",
        seed: "002",
        citation: SEED002,
        what: "8 drives: bypass / remap IOPS ('about 30 % drop'), VMD not merging",
        unit: "ratio",
        published: 0.70,
        kind: Kind::Comparison,
        calibration: false,
        points: &[VMD_B8, VMD_R8],
        model: |r| get(r, VMD_B8, "iops_per_drive") / get(r, VMD_R8, "iops_per_drive"),
    },
    Figure {
        id: "002-vmd12-bypass-vs-remap-merging",
        seed: "002",
        citation: SEED002,
        what: "12 drives: bypass / remap IOPS (562 k / 1144 k), VMD merging",
        unit: "ratio",
        published: 562.0 / 1144.0,
        kind: Kind::Comparison,
        calibration: false,
        points: &[VMD_B12, VMD_M12],
        model: |r| get(r, VMD_B12, "iops_per_drive") / get(r, VMD_M12, "iops_per_drive"),
    },
    Figure {
        id: "002-vmd12-bypass-vs-remap",
        seed: "002",
        citation: SEED002,
        what: "12 drives: bypass / remap IOPS (562 k / 1144 k), VMD not merging",
        unit: "ratio",
        published: 562.0 / 1144.0,
        kind: Kind::Comparison,
        calibration: false,
        points: &[VMD_B12, VMD_R12],
        model: |r| get(r, VMD_B12, "iops_per_drive") / get(r, VMD_R12, "iops_per_drive"),
    },
    Figure {
        id: "002-vmd12-bypass-iops",
        seed: "002",
        citation: SEED002,
        what: "12 drives, bypass: IOPS per drive",
        unit: "1/s",
        published: 562_000.0,
        kind: Kind::Value,
        calibration: false,
        points: &[VMD_B12],
        model: |r| get(r, VMD_B12, "iops_per_drive"),
    },
    Figure {
        id: "002-vmd12-remap-iops-merging",
        seed: "002",
        citation: SEED002,
        what: "12 drives, remap: IOPS per drive, VMD merging",
        unit: "1/s",
        published: 1_144_000.0,
        kind: Kind::Value,
        calibration: false,
        points: &[VMD_M12],
        model: |r| get(r, VMD_M12, "iops_per_drive"),
    },
    Figure {
        id: "002-vmd12-bypass-idle",
        seed: "002",
        citation: SEED002_IDLE,
        what: "12 drives, bypass: CPU idle over all 192 CPUs",
        unit: "fraction",
        published: 0.91,
        kind: Kind::Value,
        calibration: false,
        points: &[VMD_B12],
        model: |r| get(r, VMD_B12, "cpu_idle_frac"),
    },
    Figure {
        id: "002-vmd12-remap-idle-merging",
        seed: "002",
        citation: SEED002_IDLE,
        what: "12 drives, remap: CPU idle over all 192 CPUs, VMD merging",
        unit: "fraction",
        published: 0.78,
        kind: Kind::Value,
        calibration: false,
        points: &[VMD_M12],
        model: |r| get(r, VMD_M12, "cpu_idle_frac"),
    },
    Figure {
        id: "002-vmd12-idle-bypass-vs-remap-merging",
        seed: "002",
        citation: SEED002_IDLE,
        what: "12 drives: CPU idle, bypass / remap (0.91 / 0.78), VMD merging",
        unit: "ratio",
        published: 0.91 / 0.78,
        kind: Kind::Comparison,
        calibration: false,
        points: &[VMD_B12, VMD_M12],
        model: |r| get(r, VMD_B12, "cpu_idle_frac") / get(r, VMD_M12, "cpu_idle_frac"),
    },
];

/// Every figure: the x86 seeds', then seeds 001, 003 and 004.
pub fn all() -> impl Iterator<Item = &'static Figure> {
    X86_FIGURES
        .iter()
        .chain(super::arm_apic_figures::FIGURES.iter())
}
