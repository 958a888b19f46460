use super::*;
use crate::vtd::irte::{PostedIrte, RemappedIrte, SourceCheck, Sq, Svt, SVT};
use crate::vtd::msi::{encode_compat, encode_remappable};

const SID: u16 = 0x0310; // bus 3, device 2, function 0

fn remapper(cfg: RemapConfig) -> InterruptRemapper {
    InterruptRemapper::new(cfg).unwrap()
}

fn small() -> RemapConfig {
    RemapConfig {
        table_entries: 16,
        iec_capacity: 2,
        ..RemapConfig::default()
    }
}

fn entry(vector: u8, dest: u32) -> RemappedIrte {
    RemappedIrte {
        vector: Vector(vector),
        dest,
        dest_mode_logical: false,
        redirection_hint: false,
        level_triggered: false,
        delivery_mode: DeliveryMode::Fixed,
        fpd: false,
        source: SourceCheck::exact(SID),
    }
}

fn blocked(out: RemapOutcome) -> (FaultReason, bool) {
    match out.action {
        RemapAction::Blocked { reason, recorded } => (reason, recorded),
        other => panic!("expected Blocked, got {other:?}"),
    }
}

fn ns(x: u64) -> Duration {
    Duration::from_ns(x)
}

#[test]
fn remapped_entry_delivers() {
    let mut ir = remapper(small());
    ir.set_irte(3, Irte::remapped(entry(0x45, 0x1_0007)))
        .unwrap();
    let out = ir.remap(SimTime(0), &encode_remappable(3, false, 0), SID);
    assert_eq!(
        out.action,
        RemapAction::Deliver {
            dest: ApicId(0x1_0007),
            vector: Vector(0x45),
            level_triggered: false,
            dest_mode_logical: false,
            redirection_hint: false,
            delivery_mode: DeliveryMode::Fixed,
        }
    );
    assert_eq!(out.cost, ns(10) + ns(90), "translate + IEC miss");
    let c = ir.counters();
    assert_eq!((c.requests, c.remapped, c.blocked), (1, 1, 0));
}

#[test]
fn subhandle_selects_the_entry() {
    let mut ir = remapper(small());
    ir.set_irte(7, Irte::remapped(entry(0x50, 1))).unwrap();
    let out = ir.remap(SimTime(0), &encode_remappable(4, true, 3), SID);
    assert!(matches!(
        out.action,
        RemapAction::Deliver {
            vector: Vector(0x50),
            ..
        }
    ));
}

#[test]
fn index_beyond_table_faults_0x21() {
    let mut ir = remapper(small());
    let out = ir.remap(SimTime(9), &encode_remappable(16, false, 0), SID);
    assert_eq!(blocked(out), (FaultReason::IndexBeyondTable, true));
    assert_eq!(out.cost, ns(10), "no table read");
    assert_eq!(
        ir.fault_log().records(),
        &[FaultRecord {
            time: SimTime(9),
            reason: FaultReason::IndexBeyondTable,
            source_id: SID,
            index: Some(16)
        }]
    );
    // handle + subhandle past the table too
    let out = ir.remap(SimTime(9), &encode_remappable(10, true, 6), SID);
    assert_eq!(blocked(out).0, FaultReason::IndexBeyondTable);
    assert_eq!(FaultReason::IndexBeyondTable.code(), 0x21);
}

#[test]
fn not_present_faults_0x22_every_time() {
    let mut ir = remapper(small());
    for _ in 0..2 {
        let out = ir.remap(SimTime(0), &encode_remappable(1, false, 0), SID);
        assert_eq!(blocked(out), (FaultReason::IrteNotPresent, true));
        assert_eq!(out.cost, ns(100), "not-present entries are not cached");
    }
    assert_eq!(ir.counters().iec.misses, 2);
    assert_eq!(
        ir.counters()
            .faults
            .occurred
            .get(FaultReason::IrteNotPresent),
        2
    );
}

#[test]
fn reserved_entry_bits_fault_0x24() {
    let mut ir = remapper(small());
    let good = Irte::remapped(entry(0x40, 1));
    ir.set_irte(0, Irte(good.0 | 1 << 13)).unwrap();
    ir.set_irte(1, good.with_field(SVT, 3)).unwrap();
    let posted = Irte::posted(PostedIrte {
        vector: Vector(0x40),
        pda: 0x1000,
        urg: false,
        fpd: false,
        source: SourceCheck::NONE,
    })
    .unwrap();
    ir.set_irte(2, Irte(posted.0 | 1 << 30)).unwrap();
    for i in 0..3 {
        let out = ir.remap(SimTime(0), &encode_remappable(i, false, 0), SID);
        assert_eq!(
            blocked(out),
            (FaultReason::IrteReservedField, true),
            "index {i}"
        );
    }
    // xAPIC mode: DST bits outside 47:40 are reserved.
    let mut x = remapper(RemapConfig {
        x2apic_mode: false,
        ..small()
    });
    x.set_irte(0, Irte::remapped(entry(0x40, 0x0000_0001)))
        .unwrap();
    x.set_irte(1, Irte::remapped(entry(0x40, 0x0000_0700)))
        .unwrap();
    let out = x.remap(SimTime(0), &encode_remappable(0, false, 0), SID);
    assert_eq!(blocked(out).0, FaultReason::IrteReservedField);
    let out = x.remap(SimTime(0), &encode_remappable(1, false, 0), SID);
    assert!(matches!(
        out.action,
        RemapAction::Deliver {
            dest: ApicId(7),
            ..
        }
    ));
}

#[test]
fn posted_entry_without_posting_support_is_reserved() {
    let mut ir = remapper(RemapConfig {
        posting_supported: false,
        ..small()
    });
    let p = Irte::posted(PostedIrte {
        vector: Vector(0x40),
        pda: 0x1000,
        urg: false,
        fpd: false,
        source: SourceCheck::NONE,
    })
    .unwrap();
    ir.set_irte(0, p).unwrap();
    let out = ir.remap(SimTime(0), &encode_remappable(0, false, 0), SID);
    assert_eq!(blocked(out).0, FaultReason::IrteReservedField);
}

#[test]
fn source_id_check_faults_0x26() {
    let mut ir = remapper(small());
    ir.set_irte(0, Irte::remapped(entry(0x40, 1))).unwrap();
    let out = ir.remap(SimTime(0), &encode_remappable(0, false, 0), SID + 1);
    assert_eq!(blocked(out), (FaultReason::SourceIdCheckFailed, true));
    // SQ masking: ignore function bits 2:0.
    let mut e = entry(0x40, 1);
    e.source = SourceCheck {
        sid: SID,
        sq: Sq::IgnoreBits2To0,
        svt: Svt::RequesterId,
    };
    ir.modify_irte(0, Irte::remapped(e)).unwrap();
    let out = ir.remap(SimTime(0), &encode_remappable(0, false, 0), SID | 7);
    assert!(matches!(out.action, RemapAction::Deliver { .. }));
    // Bus range 2..=3 accepts bus 3, rejects bus 4.
    e.source = SourceCheck {
        sid: 0x0203,
        sq: Sq::All,
        svt: Svt::BusRange,
    };
    ir.modify_irte(0, Irte::remapped(e)).unwrap();
    let out = ir.remap(SimTime(0), &encode_remappable(0, false, 0), 0x03ff);
    assert!(matches!(out.action, RemapAction::Deliver { .. }));
    let out = ir.remap(SimTime(0), &encode_remappable(0, false, 0), 0x0400);
    assert_eq!(blocked(out).0, FaultReason::SourceIdCheckFailed);
    // No verification.
    e.source = SourceCheck::NONE;
    ir.modify_irte(0, Irte::remapped(e)).unwrap();
    let out = ir.remap(SimTime(0), &encode_remappable(0, false, 0), 0xffff);
    assert!(matches!(out.action, RemapAction::Deliver { .. }));
}

#[test]
fn compat_format_blocked_0x25_or_passed() {
    let msg = encode_compat(0x21, Vector(0x33), false, DeliveryMode::Fixed);
    let mut ir = remapper(small());
    let out = ir.remap(SimTime(0), &msg, SID);
    assert_eq!(blocked(out), (FaultReason::CompatFormatBlocked, true));
    assert_eq!(ir.fault_log().records()[0].index, None);
    // Allowed, but x2APIC mode (EIME) still blocks.
    let mut ir = remapper(RemapConfig {
        compat_allowed: true,
        ..small()
    });
    assert_eq!(
        blocked(ir.remap(SimTime(0), &msg, SID)).0,
        FaultReason::CompatFormatBlocked
    );
    let mut ir = remapper(RemapConfig {
        compat_allowed: true,
        x2apic_mode: false,
        ..small()
    });
    let out = ir.remap(SimTime(0), &msg, SID);
    assert_eq!(
        out.action,
        RemapAction::Deliver {
            dest: ApicId(0x21),
            vector: Vector(0x33),
            level_triggered: false,
            dest_mode_logical: false,
            redirection_hint: false,
            delivery_mode: DeliveryMode::Fixed
        }
    );
    assert_eq!(out.cost, ns(10));
    assert_eq!(ir.counters().compat_passed, 1);
}

#[test]
fn reserved_request_bits_fault_0x20() {
    let mut ir = remapper(small());
    ir.set_irte(2, Irte::remapped(entry(0x40, 1))).unwrap();
    let mut msg = encode_remappable(1, true, 1);
    msg.data |= 0x8000_0000;
    assert_eq!(
        blocked(ir.remap(SimTime(0), &msg, SID)).0,
        FaultReason::RequestReservedField
    );
    let stray = MsiMessage {
        address: 0xFED0_0010,
        data: 0,
    };
    assert_eq!(
        blocked(ir.remap(SimTime(0), &stray, SID)).0,
        FaultReason::RequestReservedField
    );
    assert_eq!(
        ir.counters()
            .faults
            .occurred
            .get(FaultReason::RequestReservedField),
        2
    );
}

#[test]
fn table_root_invalid_faults_0x23_on_miss() {
    let mut ir = remapper(small());
    ir.set_irte(0, Irte::remapped(entry(0x40, 1))).unwrap();
    ir.set_table_root_valid(false);
    assert_eq!(
        blocked(ir.remap(SimTime(0), &encode_remappable(0, false, 0), SID)).0,
        FaultReason::TableRootInvalid
    );
}

#[test]
fn fpd_suppresses_recording_but_still_blocks() {
    let mut ir = remapper(small());
    let mut e = entry(0x40, 1);
    e.fpd = true;
    ir.set_irte(0, Irte::remapped(e)).unwrap();
    let out = ir.remap(SimTime(0), &encode_remappable(0, false, 0), SID + 1);
    assert_eq!(blocked(out), (FaultReason::SourceIdCheckFailed, false));
    assert!(ir.fault_log().records().is_empty());
    let c = ir.counters();
    assert_eq!(c.blocked, 1);
    assert_eq!(c.faults.suppressed.get(FaultReason::SourceIdCheckFailed), 1);
    assert_eq!(c.faults.occurred.get(FaultReason::SourceIdCheckFailed), 1);
    // FPD on a not-present entry is honoured too.
    ir.set_irte(1, Irte(0b10)).unwrap();
    let out = ir.remap(SimTime(0), &encode_remappable(1, false, 0), SID);
    assert_eq!(blocked(out), (FaultReason::IrteNotPresent, false));
}

#[test]
fn fault_registers_overflow_without_losing_counts() {
    let mut ir = remapper(RemapConfig {
        fault_records: 1,
        ..small()
    });
    for _ in 0..3 {
        let _ = ir.remap(SimTime(0), &encode_remappable(9, false, 0), SID);
    }
    assert!(ir.fault_log().overflow());
    let c = ir.counters().faults;
    assert_eq!(c.recorded.get(FaultReason::IrteNotPresent), 1);
    assert_eq!(c.overflowed.get(FaultReason::IrteNotPresent), 2);
    assert_eq!(ir.fault_log_mut().take_records().len(), 1);
}

#[test]
fn iec_hit_is_cheaper_than_miss_and_lru_evicts() {
    let mut ir = remapper(small()); // IEC of 2
    for i in 0..3 {
        ir.set_irte(i, Irte::remapped(entry(0x40 + i as u8, 1)))
            .unwrap();
    }
    let go = |ir: &mut InterruptRemapper, i: u16| {
        ir.remap(SimTime(0), &encode_remappable(i, false, 0), SID)
            .cost
    };
    let miss = go(&mut ir, 0);
    let hit = go(&mut ir, 0);
    assert_eq!(miss, ns(100));
    assert_eq!(hit, ns(13));
    assert!(hit < miss);
    assert_eq!(go(&mut ir, 1), miss); // cache {0, 1}
    assert_eq!(go(&mut ir, 0), hit); // 1 is now LRU
    assert_eq!(go(&mut ir, 2), miss); // evicts 1
    assert_eq!(go(&mut ir, 0), hit);
    assert_eq!(go(&mut ir, 1), miss);
    let c = ir.counters().iec;
    assert_eq!((c.hits, c.misses, c.evictions), (3, 4, 2));
}

#[test]
fn stale_iec_entry_until_invalidated() {
    let mut ir = remapper(small());
    ir.set_irte(0, Irte::remapped(entry(0x40, 1))).unwrap();
    let _ = ir.remap(SimTime(0), &encode_remappable(0, false, 0), SID);
    ir.set_irte(0, Irte::remapped(entry(0x41, 2))).unwrap();
    let out = ir.remap(SimTime(0), &encode_remappable(0, false, 0), SID);
    assert!(
        matches!(
            out.action,
            RemapAction::Deliver {
                vector: Vector(0x40),
                ..
            }
        ),
        "stale copy"
    );
    assert!(ir.invalidate_iec_index(0));
    let out = ir.remap(SimTime(0), &encode_remappable(0, false, 0), SID);
    assert!(matches!(
        out.action,
        RemapAction::Deliver {
            vector: Vector(0x41),
            dest: ApicId(2),
            ..
        }
    ));
    // modify_irte invalidates by itself; freeing the entry takes effect at once.
    ir.modify_irte(0, Irte::NOT_PRESENT).unwrap();
    assert_eq!(
        blocked(ir.remap(SimTime(0), &encode_remappable(0, false, 0), SID)).0,
        FaultReason::IrteNotPresent
    );
    ir.invalidate_iec_all();
    assert!(ir.iec().is_empty());
}

#[test]
fn posted_entry_yields_post() {
    let mut ir = remapper(small());
    let pda = 0x0000_0001_2345_6780;
    ir.set_irte(
        4,
        Irte::posted(PostedIrte {
            vector: Vector(0x61),
            pda,
            urg: true,
            fpd: false,
            source: SourceCheck::exact(SID),
        })
        .unwrap(),
    )
    .unwrap();
    let out = ir.remap(SimTime(0), &encode_remappable(4, false, 0), SID);
    assert_eq!(
        out.action,
        RemapAction::Post {
            pda,
            vector: Vector(0x61),
            urg: true,
            index: 4,
            fpd: false
        }
    );
    assert_eq!(ir.counters().posted, 1);
    let d = ir.record_posting_fault(SimTime(5), FaultReason::PidAccessError, SID, 4, false);
    assert_eq!(d, FaultDisposition::Recorded);
    assert_eq!(ir.fault_log().records()[0].reason.code(), 0x27);
}

#[test]
fn config_errors_name_field_and_allowed_values() {
    for bad in [0u32, 1, 3, 48, 131072] {
        let e = InterruptRemapper::new(RemapConfig {
            table_entries: bad,
            ..RemapConfig::default()
        })
        .unwrap_err();
        assert_eq!(e, IommuError::InvalidTableSize { entries: bad });
        assert!(e.to_string().contains("table_entries"));
    }
    for good in [2u32, 4, 256, 65536] {
        assert!(InterruptRemapper::new(RemapConfig {
            table_entries: good,
            ..RemapConfig::default()
        })
        .is_ok());
    }
    let e = InterruptRemapper::new(RemapConfig {
        costs: RemapCosts {
            iec_miss_ns: f64::INFINITY,
            ..RemapCosts::default()
        },
        ..RemapConfig::default()
    })
    .unwrap_err();
    assert!(matches!(
        e,
        IommuError::InvalidCost {
            field: "iec_miss_ns",
            ..
        }
    ));
    assert!(InterruptRemapper::new(RemapConfig {
        fault_records: 0,
        ..RemapConfig::default()
    })
    .is_err());
}

#[test]
fn irte_index_past_table_is_an_api_error() {
    let mut ir = remapper(small());
    let e = ir.set_irte(16, Irte::NOT_PRESENT).unwrap_err();
    assert_eq!(
        e,
        IommuError::IrteIndexOutOfRange {
            index: 16,
            table_entries: 16
        }
    );
    assert!(e.to_string().contains("0..=15"));
    assert!(ir.irte(99).is_err());
    assert_eq!(ir.irte(15), Ok(Irte::NOT_PRESENT));
}

#[test]
fn config_serde_defaults_and_rejects_unknown() {
    let c: RemapConfig =
        serde_json::from_str(r#"{"table_entries": 256, "costs": {"iec_hit_ns": 1.5}}"#).unwrap();
    assert_eq!(c.table_entries, 256);
    assert_eq!(c.costs.iec_hit_ns, 1.5);
    assert_eq!(c.costs.iec_miss_ns, RemapCosts::default().iec_miss_ns);
    assert!(serde_json::from_str::<RemapConfig>(r#"{"table_size": 256}"#).is_err());
    assert!(serde_json::from_str::<RemapCosts>(r#"{"iec_hit": 1}"#).is_err());
}

#[test]
fn counters_balance_and_serialize() {
    let mut ir = remapper(small());
    ir.set_irte(0, Irte::remapped(entry(0x40, 1))).unwrap();
    let _ = ir.remap(SimTime(0), &encode_remappable(0, false, 0), SID);
    let _ = ir.remap(SimTime(0), &encode_remappable(1, false, 0), SID);
    let _ = ir.remap(SimTime(0), &encode_remappable(99, false, 0), SID);
    let c = ir.counters();
    assert_eq!(
        c.requests,
        c.remapped + c.posted + c.compat_passed + c.blocked
    );
    assert_eq!(c.blocked, c.faults.occurred.total());
    let v = serde_json::to_value(c).unwrap();
    assert_eq!(v["remapped"], 1);
    assert_eq!(v["faults"]["occurred"]["irte_not_present"], 1);
    assert_eq!(v["faults"]["occurred"]["index_beyond_table"], 1);
}

/// A global IEC invalidation drops every cached entry, so entries rewritten in memory
/// without an index invalidation take effect.
#[test]
fn global_iec_invalidation_drops_every_stale_entry() {
    let cfg = small();
    let mut ir = remapper(cfg.clone());
    assert_eq!(ir.config(), &cfg);
    for i in 0..2u16 {
        ir.set_irte(i as u32, Irte::remapped(entry(0x40 + i as u8, 1)))
            .unwrap();
        let _ = ir.remap(SimTime(0), &encode_remappable(i, false, 0), SID);
    }
    assert_eq!(ir.iec().len(), 2);
    for i in 0..2u16 {
        ir.set_irte(i as u32, Irte::remapped(entry(0x50 + i as u8, 1)))
            .unwrap();
    }
    ir.invalidate_iec_all();
    assert!(ir.iec().is_empty());
    for i in 0..2u16 {
        let out = ir.remap(SimTime(0), &encode_remappable(i, false, 0), SID);
        assert!(
            matches!(out.action, RemapAction::Deliver { vector, .. } if vector == Vector(0x50 + i as u8)),
            "{:?}",
            out.action
        );
    }
}
