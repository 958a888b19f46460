//! `irqsim validate`: every figure is compared, the calibration is current, and the
//! sensitivity moves really move the model.

use irqsim::validate::{self, Direction};

#[test]
fn every_figure_gets_a_model_value_and_the_calibration_is_current() {
    let v = validate::validate(1, false, 2);
    assert_eq!(v.figures.len(), validate::figures::all().count());
    for c in &v.figures {
        assert!(
            c.model.is_finite() && c.model > 0.0,
            "{}: {}",
            c.id,
            c.model
        );
        assert_eq!(
            c.direction_holds.is_some(),
            c.kind == "comparison",
            "{}",
            c.id
        );
    }
    // The delivery occupancy of the spr profile was bisected on this figure; if the
    // model moved, the profile's value (and its note) must be redone.
    let cal = v
        .figures
        .iter()
        .find(|c| c.id == "000-nvme4-remapped-msis-per-vector")
        .unwrap();
    assert!(
        (cal.ratio - 1.0).abs() < 0.02,
        "calibration is stale: model {} vs published {}",
        cal.model,
        cal.published
    );
    assert!(cal.calibration);
    // Same seed, same table.
    let again = validate::validate(1, false, 1);
    assert_eq!(
        serde_json::to_string(&v).unwrap(),
        serde_json::to_string(&again).unwrap(),
        "thread count or rerun changed the result"
    );
}

#[test]
fn moving_the_delivery_occupancy_moves_the_remapped_nvme_points() {
    use irqsim::experiments::{nvme_posted, ExperimentCtx, FieldSet};
    let base = ExperimentCtx::new(1);
    let mut slow = ExperimentCtx::new(1);
    slow.sets = vec![FieldSet::parse("costs.fabric.message_occupancy_ns=400").unwrap()];
    let a = nvme_posted::point(&base, irqsim::DeliveryMode::Remapped, 4);
    let b = nvme_posted::point(&slow, irqsim::DeliveryMode::Remapped, 4);
    assert!(
        b.iops_per_drive < 0.6 * a.iops_per_drive,
        "{} vs {}",
        b.iops_per_drive,
        a.iops_per_drive
    );
    assert_eq!(Direction::of(1.2), Direction::Above);
}
