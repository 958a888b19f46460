//! Component throughput: operations on the posted-interrupt descriptor line (MESI
//! classification, cost and effect) and the IOMMU's remap-and-post path, without the
//! engine. Reported as operations per second.

use divan::counter::ItemsCount;
use divan::Bencher;
use iommu_sim::vtd::{
    msi::encode_remappable, InterruptRemapper, Irte, PostedIrte, RemapConfig, SourceCheck,
};
use pid_model::desc::ON_BIT;
use pid_model::{Agent, LineCosts, LineOp, PiDesc, PidLine};
use sim_core::{Freq, SimTime, Vector};

const OPS: u64 = 10_000;

fn main() {
    divan::main();
}

/// The sequence a notification handler and the IOMMU produce: a post, four loads, an
/// exchange, a clear of ON.
#[divan::bench]
fn pid_line_handler_and_post(b: Bencher) {
    let costs = LineCosts::default();
    let freq = Freq::from_mhz(2000).unwrap();
    let cpu = Agent::core(0, 0);
    let iommu = Agent::iommu(0);
    let ops = [
        (
            iommu,
            LineOp::IommuPost {
                vector: Vector(0x21),
                urg: false,
            },
        ),
        (cpu, LineOp::Load { word: 0 }),
        (cpu, LineOp::Load { word: 1 }),
        (cpu, LineOp::Load { word: 2 }),
        (cpu, LineOp::Load { word: 3 }),
        (cpu, LineOp::Xchg { word: 0, value: 0 }),
        (cpu, LineOp::LockedBitClear { bit: ON_BIT }),
    ];
    b.counter(ItemsCount::new(OPS * ops.len() as u64))
        .bench_local(|| {
            let mut line = PidLine::with_desc(PiDesc::new(Vector(0xeb), 0), 0);
            let mut total = sim_core::Duration::ZERO;
            for _ in 0..OPS {
                for (agent, op) in ops {
                    total += line.cost(agent, &op, &costs, freq);
                    let _ = line.perform(agent, op);
                }
            }
            total
        });
}

/// Remapping a remappable-format MSI through a posted IRTE (IEC hit after the first)
/// and posting it into the descriptor line.
#[divan::bench]
fn iommu_remap_and_post(b: Bencher) {
    let costs = LineCosts::default();
    let freq = Freq::from_mhz(2000).unwrap();
    let mut remapper = InterruptRemapper::new(RemapConfig {
        table_entries: 256,
        ..RemapConfig::default()
    })
    .unwrap();
    for i in 0..4u32 {
        let irte = Irte::posted(PostedIrte {
            vector: Vector(0x21 + i as u8),
            pda: 0x1000,
            urg: false,
            fpd: false,
            source: SourceCheck::exact(0x100),
        })
        .unwrap();
        remapper.set_irte(i, irte).unwrap();
    }
    let msgs: Vec<_> = (0..4u16).map(|h| encode_remappable(h, false, 0)).collect();
    let iommu = Agent::iommu(0);
    b.counter(ItemsCount::new(OPS)).bench_local(|| {
        let mut line = PidLine::with_desc(PiDesc::new(Vector(0xeb), 0), 0);
        let mut t = SimTime::ZERO;
        for i in 0..OPS {
            let out = remapper.remap(t, &msgs[(i % 4) as usize], 0x100);
            t += out.cost;
            if let iommu_sim::vtd::RemapAction::Post { vector, urg, .. } = out.action {
                let op = LineOp::IommuPost { vector, urg };
                t += line.cost(iommu, &op, &costs, freq);
                let _ = line.perform(iommu, op);
            }
        }
        t
    });
}
