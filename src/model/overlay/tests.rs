//! Karpenter v1.14.1's NodeOverlay cases (pkg/controllers/nodeoverlay/
//! suite_test.go and store_test.go), ported to the pure [`apply`], each
//! named after its `It`/`DescribeTable` (a table's entries are one test,
//! looping over them). The reference's fake cloud provider's instance
//! types are rebuilt by [`fake_defaults`] and [`single`].
//!
//! Not ported, as they test what dovetail does not have:
//! - "should have an empty instance types set when cloudprovider return an
//!   error", and the "Failure Isolation" cases: a NodePool whose instance
//!   types cannot be read is left out before overlays are applied (the
//!   provisioner reports it unusable), and overlays are applied afresh at
//!   every solve, so there is no store to keep, requeue or recover;
//! - "Store Apply Selective Copy", "Store Apply Unevaluated NodePool" and
//!   store_memory_test.go: Go pointer sharing, and a store evaluated ahead
//!   of the solves; here every solve applies the overlays to its own copy.

use std::collections::BTreeMap;

use super::*;
use crate::model::instance_type::{Offering, Overhead};
use crate::model::labels::{ARCH, INSTANCE_TYPE, OS};
use crate::model::requirements::Operator;

fn offering(zone: &str, ct: &str, price: f64) -> Offering {
    Offering {
        zone: zone.into(),
        capacity_type: ct.into(),
        price,
        available: true,
        reservations: Vec::new(),
    }
}

/// A type as the reference's `fake.NewInstanceType` builds it.
fn fake(name: &str, arch: &str, os: &[&str], offerings: Vec<Offering>) -> InstanceType {
    let mut it = InstanceType {
        name: name.into(),
        requirements: Requirements::new(),
        capacity: Resources::parse([("cpu", "4"), ("memory", "4Gi"), ("pods", "5")]).unwrap(),
        overhead: Overhead {
            kube_reserved: Resources::parse([("cpu", "100m"), ("memory", "10Mi")]).unwrap(),
            ..Overhead::default()
        },
        allocatable: Resources::new(),
        offerings,
    };
    it.requirements
        .add(INSTANCE_TYPE, Requirement::in_values([name]));
    it.requirements.add(ARCH, Requirement::in_values([arch]));
    it.requirements
        .add(OS, Requirement::in_values(os.iter().copied()));
    it.complete_capacity();
    it.complete_requirements();
    it
}

fn fake_offerings() -> Vec<Offering> {
    vec![
        offering("test-zone-1", "spot", 0.5),
        offering("test-zone-2", "spot", 0.5),
        offering("test-zone-1", "on-demand", 1.0),
        offering("test-zone-2", "on-demand", 1.0),
        offering("test-zone-3", "on-demand", 1.0),
    ]
}

const OS_DEFAULT: [&str; 3] = ["darwin", "linux", "windows"];

/// The fake cloud provider's default instance types.
fn fake_defaults() -> Vec<InstanceType> {
    let amd = |n: &str| fake(n, "amd64", &OS_DEFAULT, fake_offerings());
    vec![
        amd("default-instance-type"),
        amd("small-instance-type"),
        amd("gpu-vendor-instance-type"),
        amd("gpu-vendor-b-instance-type"),
        fake(
            "arm-instance-type",
            "arm64",
            &["darwin", "ios", "linux", "windows"],
            fake_offerings(),
        ),
        amd("single-pod-instance-type"),
    ]
}

/// The suite's `BeforeEach`: one type, one spot offering at 1.020.
fn single() -> Vec<InstanceType> {
    vec![fake(
        "default-instance-type",
        "amd64",
        &OS_DEFAULT,
        vec![offering("test-zone-1", "spot", 1.020)],
    )]
}

/// The four-offering type of the "Offering Requirements" cases.
fn four_offerings() -> Vec<InstanceType> {
    vec![fake(
        "default-instance-type",
        "amd64",
        &OS_DEFAULT,
        vec![
            offering("test-zone-1", "spot", 1.020),
            offering("test-zone-2", "on-demand", 2.020),
            offering("test-zone-3", "spot", 3.020),
            offering("test-zone-4", "reserved", 4.020),
        ],
    )]
}

fn req(key: &str, op: &str, values: &[&str]) -> (String, Operator, Vec<String>) {
    (
        key.into(),
        Operator::parse(op).unwrap(),
        values.iter().map(|v| v.to_string()).collect(),
    )
}

fn ov(name: &str, weight: i32, reqs: &[(String, Operator, Vec<String>)]) -> Overlay {
    let mut requirements = Requirements::new();
    for (k, op, values) in reqs {
        requirements.add(k, Requirement::new(k, *op, values).unwrap());
    }
    Overlay {
        name: name.into(),
        weight,
        requirements,
        price: None,
        capacity: Resources::new(),
        invalid: None,
    }
}

impl Overlay {
    fn price(mut self, p: &str) -> Self {
        self.price = Some(PriceChange::parse(p).unwrap());
        self
    }
    fn capacity(mut self, resources: &[(&str, &str)]) -> Self {
        self.capacity = Resources::parse(resources.iter().copied()).unwrap();
        self
    }
}

/// The two kinds of price change of the reference's tables.
#[derive(Clone, Copy)]
enum Kind {
    Price,
    PriceAdjustment,
}

impl Kind {
    const BOTH: [Kind; 2] = [Kind::Price, Kind::PriceAdjustment];
    fn pick<T>(self, price: T, adjustment: T) -> T {
        match self {
            Kind::Price => price,
            Kind::PriceAdjustment => adjustment,
        }
    }
}

/// A NodePool and its types.
struct Pool {
    name: &'static str,
    labels: BTreeMap<String, String>,
    types: Vec<InstanceType>,
}

fn pool(name: &'static str, types: Vec<InstanceType>) -> Pool {
    Pool {
        name,
        labels: BTreeMap::new(),
        types,
    }
}

fn run(overlays: &[Overlay], pools: &mut [Pool]) -> Outcome {
    let mut views: Vec<PoolTypes> = pools
        .iter_mut()
        .map(|p| PoolTypes {
            name: p.name,
            labels: &p.labels,
            types: &mut p.types,
        })
        .collect();
    apply(overlays, &mut views)
}

fn ok(out: &Outcome, name: &str) -> bool {
    out.verdict(name) == Some(&Verdict::Applied)
}

fn conflict(out: &Outcome, name: &str) -> bool {
    out.verdict(name) == Some(&Verdict::Conflict)
}

fn price_of(types: &[InstanceType], name: &str, zone: &str) -> f64 {
    let it = types.iter().find(|t| t.name == name).unwrap();
    it.offerings.iter().find(|o| o.zone == zone).unwrap().price
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

const IT: &str = "node.kubernetes.io/instance-type";
const ZONE_KEY: &str = "topology.kubernetes.io/zone";
const CT: &str = "karpenter.sh/capacity-type";

// Validation

#[test]
fn should_return_the_same_instance_type_when_zero_overlay_are_applied() {
    let mut pools = [pool("default", single())];
    let out = run(&[], &mut pools);
    assert!(out.verdicts.is_empty());
    assert_eq!(pools[0].types, single());
}

#[test]
fn should_pass_with_a_single_overlay() {
    let mut pools = [pool("default", single())];
    let out = run(
        &[ov("a", 10, &[req(IT, "In", &["default-instance-type"])])],
        &mut pools,
    );
    assert!(ok(&out, "a"));
}

#[test]
fn should_fail_validation_for_invalid_requirements_values() {
    // The runtime validation itself is `convert::overlay`'s (a key too
    // long is tested there); an invalid overlay is reported and not
    // applied.
    let mut bad = ov("a", 10, &[req(IT, "In", &["default-instance-type"])]).price("5");
    bad.invalid = Some("invalid value: key ... in requirements, restricted".into());
    let mut pools = [pool("default", single())];
    let out = run(&[bad], &mut pools);
    assert_eq!(
        out.verdict("a").and_then(Verdict::reason),
        Some("RuntimeValidation")
    );
    assert!(close(
        price_of(&pools[0].types, "default-instance-type", "test-zone-1"),
        1.02
    ));
}

#[test]
fn should_fail_when_requirements_overlays_overlap() {
    let mut pools = [pool("default", fake_defaults())];
    let out = run(
        &[
            ov("overlay-a", 10, &[req(ARCH, "In", &["arm64"])]).price("1.03"),
            ov("overlay-b", 10, &[req(CT, "Exists", &[])]).price("23"),
        ],
        &mut pools,
    );
    assert!(conflict(&out, "overlay-a"), "{out:?}");
    assert_eq!(
        out.verdict("overlay-a").and_then(Verdict::reason),
        Some("Conflict")
    );
    assert!(ok(&out, "overlay-b"));
}

#[test]
fn should_succeed_with_requirements_overlays_dont_overlap() {
    let types = vec![
        fake(
            "arm-instance-type",
            "arm64",
            &["darwin", "linux", "windows"],
            fake_offerings(),
        ),
        fake("amd-instance-type", "amd64", &["ios"], fake_offerings()),
    ];
    let mut pools = [pool("default", types)];
    let out = run(
        &[
            ov("overlay-a", 10, &[req(ARCH, "In", &["arm64"])]).price("1.03"),
            ov("overlay-b", 10, &[req(OS, "In", &["ios"])]).price("23"),
        ],
        &mut pools,
    );
    assert!(ok(&out, "overlay-a") && ok(&out, "overlay-b"), "{out:?}");
}

#[test]
fn should_fail_with_requirements_overlays_overlap_on_zone() {
    let mut pools = [pool("default", four_offerings())];
    let out = run(
        &[
            ov(
                "overlay-a",
                10,
                &[req(ZONE_KEY, "In", &["test-zone-1", "test-zone-4"])],
            )
            .price("1.03"),
            ov("overlay-b", 10, &[req(CT, "Exists", &[])]).price("23"),
        ],
        &mut pools,
    );
    assert!(
        conflict(&out, "overlay-a") && ok(&out, "overlay-b"),
        "{out:?}"
    );
}

#[test]
fn should_fail_with_requirements_overlays_overlap_on_capacity_type() {
    let mut pools = [pool("default", four_offerings())];
    let out = run(
        &[
            ov("overlay-a", 10, &[req(CT, "Exists", &[])]).price("1.03"),
            ov("overlay-b", 10, &[req(CT, "In", &["spot"])]).price("23"),
        ],
        &mut pools,
    );
    assert!(
        conflict(&out, "overlay-a") && ok(&out, "overlay-b"),
        "{out:?}"
    );
}

#[test]
fn offering_requirements_should_succeed_with_requirements_overlays_dont_overlap() {
    let mut pools = [pool("default", four_offerings())];
    let out = run(
        &[
            ov(
                "overlay-a",
                10,
                &[req(ZONE_KEY, "In", &["test-zone-6", "test-zone-4"])],
            )
            .price("1.03"),
            ov("overlay-b", 10, &[req(CT, "In", &["spot"])]).price("23"),
        ],
        &mut pools,
    );
    assert!(ok(&out, "overlay-a") && ok(&out, "overlay-b"), "{out:?}");
    // Each changed only its own offerings.
    let t = &pools[0].types;
    assert!(close(
        price_of(t, "default-instance-type", "test-zone-4"),
        1.03
    ));
    assert!(close(
        price_of(t, "default-instance-type", "test-zone-1"),
        23.0
    ));
    assert!(close(
        price_of(t, "default-instance-type", "test-zone-2"),
        2.02
    ));
}

#[test]
fn should_fail_with_requirements_overlays_overlap() {
    let mut pools = [pool("default", four_offerings())];
    let out = run(
        &[
            ov(
                "overlay-a",
                10,
                &[req(ZONE_KEY, "In", &["test-zone-1", "test-zone-4"])],
            )
            .price("1.03"),
            ov("overlay-b", 10, &[req(CT, "In", &["spot"])]).price("23"),
        ],
        &mut pools,
    );
    assert!(
        conflict(&out, "overlay-a") && ok(&out, "overlay-b"),
        "{out:?}"
    );
}

// Pricing Updates

fn two_price_overlays(
    a_values: &[&str],
    a_op: &str,
    a_weight: i32,
    a_change: &str,
    b_values: &[&str],
    b_weight: i32,
    b_change: &str,
) -> Outcome {
    let mut pools = [pool("default", fake_defaults())];
    run(
        &[
            ov("overlay-a", a_weight, &[req(IT, "In", a_values)]).price(a_change),
            ov("overlay-b", b_weight, &[req(IT, a_op, b_values)]).price(b_change),
        ],
        &mut pools,
    )
}

#[test]
fn should_fail_with_conflicting_pricing_updates_overlays_with_overlapping_requirements() {
    for kind in Kind::BOTH {
        let out = two_price_overlays(
            &["default-instance-type", "small-instance-type"],
            "In",
            10,
            kind.pick("1.03", "+54"),
            &["default-instance-type", "gpu-vendor-instance-type"],
            10,
            kind.pick("23", "-2"),
        );
        assert!(
            conflict(&out, "overlay-a") && ok(&out, "overlay-b"),
            "{out:?}"
        );
    }
}

#[test]
fn should_fail_with_pricing_updates_are_the_same_overlays_with_overlapping_requirements() {
    for kind in Kind::BOTH {
        let change = kind.pick("100", "+100");
        let out = two_price_overlays(
            &["default-instance-type", "small-instance-type"],
            "In",
            10,
            change,
            &["default-instance-type", "gpu-vendor-instance-type"],
            10,
            change,
        );
        assert!(
            conflict(&out, "overlay-a") && ok(&out, "overlay-b"),
            "{out:?}"
        );
    }
}

#[test]
fn should_pass_with_conflicting_pricing_updates_overlays_with_mutually_exclusive_requirements() {
    for kind in Kind::BOTH {
        let out = two_price_overlays(
            &["default-instance-type"],
            "NotIn",
            10,
            kind.pick("54", "+54"),
            &["default-instance-type"],
            10,
            kind.pick("23", "-2"),
        );
        assert!(ok(&out, "overlay-a") && ok(&out, "overlay-b"), "{out:?}");
    }
}

#[test]
fn should_pass_with_conflicting_pricing_update_overlays_with_mutually_exclusive_weights() {
    for kind in Kind::BOTH {
        let out = two_price_overlays(
            &["default-instance-type"],
            "In",
            10,
            kind.pick("34", "-4"),
            &["default-instance-type", "gpu-vendor-instance-type"],
            20,
            kind.pick("2", "-2"),
        );
        assert!(ok(&out, "overlay-a") && ok(&out, "overlay-b"), "{out:?}");
    }
}

// Capacity Adjustment

fn two_capacity_overlays(
    a: (&[&str], &str, i32, &str),
    b: (&[&str], &str, i32, &str),
    resource: &str,
) -> (Outcome, Vec<InstanceType>) {
    let mut pools = [pool("default", fake_defaults())];
    let out = run(
        &[
            ov("overlay-a", a.2, &[req(IT, a.1, a.0)]).capacity(&[(resource, a.3)]),
            ov("overlay-b", b.2, &[req(IT, b.1, b.0)]).capacity(&[(resource, b.3)]),
        ],
        &mut pools,
    );
    let [p] = pools;
    (out, p.types)
}

const FUSE: &str = "smarter-devices/fuse";

fn capacity_of(types: &[InstanceType], name: &str, resource: &str) -> i64 {
    types
        .iter()
        .find(|t| t.name == name)
        .unwrap()
        .capacity
        .get(resource)
}

#[test]
fn should_fail_with_conflicting_capacity_overlays_with_overlapping_requirements() {
    let (out, _) = two_capacity_overlays(
        (
            &["default-instance-type", "small-instance-type"],
            "In",
            10,
            "1",
        ),
        (
            &["default-instance-type", "gpu-vendor-instance-type"],
            "In",
            10,
            "54",
        ),
        FUSE,
    );
    assert!(
        conflict(&out, "overlay-a") && ok(&out, "overlay-b"),
        "{out:?}"
    );
}

#[test]
fn should_fail_with_conflicting_capacity_overlays_with_multiple_overlays() {
    let mut pools = [pool("default", fake_defaults())];
    let out = run(
        &[
            ov(
                "conflicting-overlay-1",
                10,
                &[req(
                    IT,
                    "In",
                    &["default-instance-type", "small-instance-type"],
                )],
            )
            .capacity(&[("hugepage-1Gi", "2Gi")]),
            ov(
                "good-overlay-1",
                10,
                &[req(IT, "In", &["default-instance-type"])],
            )
            .capacity(&[(FUSE, "1")]),
            ov(
                "conflicting-overlay-2",
                10,
                &[req(IT, "In", &["default-instance-type"])],
            )
            .capacity(&[("hugepage-1Gi", "3Gi")]),
        ],
        &mut pools,
    );
    assert!(conflict(&out, "conflicting-overlay-1"), "{out:?}");
    assert!(ok(&out, "good-overlay-1") && ok(&out, "conflicting-overlay-2"));
}

#[test]
fn should_pass_with_capacity_adjustment_are_the_same_overlays_with_overlapping_requirements() {
    // The reference's name says "pass"; its expectations (and dovetail)
    // say the earlier name conflicts, even with the same value.
    let (out, _) = two_capacity_overlays(
        (
            &["default-instance-type", "small-instance-type"],
            "In",
            10,
            "54",
        ),
        (
            &["default-instance-type", "gpu-vendor-instance-type"],
            "In",
            10,
            "54",
        ),
        FUSE,
    );
    assert!(
        conflict(&out, "overlay-a") && ok(&out, "overlay-b"),
        "{out:?}"
    );
}

#[test]
fn should_pass_with_conflicting_capacity_overlays_with_mutually_exclusive_requirements() {
    let (out, types) = two_capacity_overlays(
        (&["default-instance-type"], "In", 10, "54"),
        (&["default-instance-type"], "NotIn", 10, "5"),
        FUSE,
    );
    assert!(ok(&out, "overlay-a") && ok(&out, "overlay-b"), "{out:?}");
    assert_eq!(capacity_of(&types, "default-instance-type", FUSE), 54);
    assert_eq!(capacity_of(&types, "small-instance-type", FUSE), 5);
}

#[test]
fn should_pass_with_conflicting_capacity_overlays_with_mutually_exclusive_weights() {
    let (out, types) = two_capacity_overlays(
        (&["default-instance-type"], "In", 10, "55"),
        (
            &["default-instance-type", "gpu-vendor-instance-type"],
            "In",
            20,
            "5",
        ),
        FUSE,
    );
    assert!(ok(&out, "overlay-a") && ok(&out, "overlay-b"), "{out:?}");
    // The heavier overlay wins on the type both select.
    assert_eq!(capacity_of(&types, "default-instance-type", FUSE), 5);
}

#[test]
fn should_pass_with_non_conflicting_capacity_overlays_with_overlapping_requirements() {
    let mut pools = [pool("default", fake_defaults())];
    let out = run(
        &[
            ov(
                "overlay-a",
                10,
                &[req(IT, "In", &["default-instance-type"])],
            )
            .capacity(&[(FUSE, "55")]),
            ov(
                "overlay-b",
                10,
                &[req(IT, "In", &["default-instance-type"])],
            )
            .capacity(&[("hugepages-2Mi", "100Mi")]),
        ],
        &mut pools,
    );
    assert!(ok(&out, "overlay-a") && ok(&out, "overlay-b"), "{out:?}");
    let types = &pools[0].types;
    assert_eq!(capacity_of(types, "default-instance-type", FUSE), 55);
    assert_eq!(
        capacity_of(types, "default-instance-type", "hugepages-2Mi"),
        100 << 20
    );
}

// Instance Type Controller: price updates

#[test]
fn should_pass_with_conflicting_pricing_update_overlays_with_mutually_exclusive_weights_by_nodepool()
 {
    for kind in Kind::BOTH {
        let mut pools = [pool("default", single()), pool("two", single())];
        let o = ov("a", 10, &[req(NODEPOOL, "In", &["default"])])
            .price(kind.pick("13234.223", "+1000"));
        run(&[o], &mut pools);
        let want = kind.pick(13234.223, 1001.020);
        assert!(close(
            price_of(&pools[0].types, "default-instance-type", "test-zone-1"),
            want
        ));
        assert!(close(
            price_of(&pools[1].types, "default-instance-type", "test-zone-1"),
            1.020
        ));
    }
}

#[test]
fn should_pass_with_conflicting_pricing_update_overlays_for_all_nodepools() {
    for kind in Kind::BOTH {
        let mut pools = [pool("default", single()), pool("two", single())];
        let out = run(
            &[
                ov("a", 10, &[req(NODEPOOL, "In", &["default"])])
                    .price(kind.pick("13234.223", "+1000")),
                ov("b", 10, &[req(NODEPOOL, "In", &["two"])]).price(kind.pick("232.11", "+2500")),
            ],
            &mut pools,
        );
        assert!(ok(&out, "a") && ok(&out, "b"), "{out:?}");
        let one = price_of(&pools[0].types, "default-instance-type", "test-zone-1");
        let two = price_of(&pools[1].types, "default-instance-type", "test-zone-1");
        assert!(close(one, kind.pick(13234.223, 1001.020)), "{one}");
        assert!(close(two, kind.pick(232.11, 2501.020)), "{two}");
    }
}

#[test]
fn should_only_apply_pricing_updates_for_nodeclaim_spec_labels_that_defined_in_the_overlay_requirements()
 {
    for kind in Kind::BOTH {
        let mut two = pool("two", single());
        two.labels.insert("test-label".into(), "test-value".into());
        let mut pools = [pool("default", single()), two];
        run(
            &[ov("a", 10, &[req("test-label", "In", &["test-value"])])
                .price(kind.pick("13234.223", "+1000"))],
            &mut pools,
        );
        assert!(close(
            price_of(&pools[0].types, "default-instance-type", "test-zone-1"),
            1.020
        ));
        assert!(close(
            price_of(&pools[1].types, "default-instance-type", "test-zone-1"),
            kind.pick(13234.223, 1001.020)
        ));
    }
}

#[test]
fn should_not_apply_pricing_updates_for_invalid_overlays() {
    for kind in Kind::BOTH {
        let mut o = ov("a", 10, &[req("test.com.test/test", "Exists", &[])])
            .price(kind.pick("13234.223", "+1000"));
        o.invalid = Some("key too long".into());
        let mut pools = [pool("default", single())];
        let out = run(&[o], &mut pools);
        assert!(matches!(out.verdict("a"), Some(Verdict::Invalid(_))));
        assert!(close(
            price_of(&pools[0].types, "default-instance-type", "test-zone-1"),
            1.02
        ));
    }
}

#[test]
fn should_not_apply_adjustments_for_overlays_that_do_not_overlap_with_instance_types_requirements()
{
    for kind in Kind::BOTH {
        let mut pools = [pool("default", single())];
        let out = run(
            &[ov(
                "a",
                10,
                &[req(IT, "In", &["default-instance-type-not-found"])],
            )
            .price(kind.pick("13234.223", "+1000"))],
            &mut pools,
        );
        assert!(ok(&out, "a"));
        assert!(close(
            price_of(&pools[0].types, "default-instance-type", "test-zone-1"),
            1.02
        ));
        assert!(out.price_overlaid.is_empty());
    }
}

#[test]
fn should_apply_pricing_updates_for_instances_types() {
    for kind in Kind::BOTH {
        let mut pools = [pool("default", single())];
        let out = run(
            &[ov("a", 10, &[req(IT, "In", &["default-instance-type"])])
                .price(kind.pick("13234.223", "+1000"))],
            &mut pools,
        );
        assert!(close(
            price_of(&pools[0].types, "default-instance-type", "test-zone-1"),
            kind.pick(13234.223, 1001.020)
        ));
        assert!(
            out.price_overlaid
                .contains(&("default".into(), "default-instance-type".into()))
        );
    }
}

#[test]
fn should_apply_pricing_updates_for_instances_types_for_capacity_type() {
    for kind in Kind::BOTH {
        let mut pools = [pool("default", four_offerings())];
        run(
            &[ov("a", 10, &[req(CT, "In", &["on-demand"])]).price(kind.pick("12321.32", "+1000"))],
            &mut pools,
        );
        let t = &pools[0].types;
        assert!(close(
            price_of(t, "default-instance-type", "test-zone-2"),
            kind.pick(12321.32, 1002.020)
        ));
        for (zone, price) in [
            ("test-zone-1", 1.02),
            ("test-zone-3", 3.02),
            ("test-zone-4", 4.02),
        ] {
            assert!(
                close(price_of(t, "default-instance-type", zone), price),
                "{zone}"
            );
        }
    }
}

#[test]
fn should_apply_pricing_updates_for_instances_types_for_availability_zone() {
    for kind in Kind::BOTH {
        let mut pools = [pool("default", four_offerings())];
        run(
            &[ov("a", 10, &[req(ZONE_KEY, "In", &["test-zone-1"])])
                .price(kind.pick("121.421", "+1000"))],
            &mut pools,
        );
        let t = &pools[0].types;
        assert!(close(
            price_of(t, "default-instance-type", "test-zone-1"),
            kind.pick(121.421, 1001.020)
        ));
        assert!(close(
            price_of(t, "default-instance-type", "test-zone-2"),
            2.02
        ));
    }
}

/// Spot in zone 1, on-demand in zone 2, reserved in zone 4.
fn three_offerings() -> Vec<InstanceType> {
    vec![fake(
        "default-instance-type",
        "amd64",
        &OS_DEFAULT,
        vec![
            offering("test-zone-1", "spot", 1.020),
            offering("test-zone-2", "on-demand", 2.020),
            offering("test-zone-4", "reserved", 4.020),
        ],
    )]
}

#[test]
fn should_update_price_updates_offerings_instance_types_from_multiple_overlays() {
    for kind in Kind::BOTH {
        let mut pools = [pool("default", three_offerings())];
        let out = run(
            &[
                ov(
                    "a",
                    10,
                    &[req(ZONE_KEY, "In", &["test-zone-2", "test-zone-4"])],
                )
                .price(kind.pick("121.421", "+201")),
                ov("b", 10, &[req(CT, "In", &["spot"])]).price(kind.pick("165.421", "-0.5")),
            ],
            &mut pools,
        );
        assert!(ok(&out, "a") && ok(&out, "b"), "{out:?}");
        let t = &pools[0].types;
        let expected = [
            ("test-zone-2", kind.pick(121.421, 203.020)),
            ("test-zone-4", kind.pick(121.421, 205.020)),
            ("test-zone-1", kind.pick(165.421, 0.52)),
        ];
        for (zone, want) in expected {
            let got = price_of(t, "default-instance-type", zone);
            assert!(close(got, want), "{zone}: {got} != {want}");
        }
    }
}

#[test]
fn should_update_price_updates_offerings_instance_types_from_multiple_overlays_with_different_weights()
 {
    for kind in Kind::BOTH {
        let mut pools = [pool("default", three_offerings())];
        let out = run(
            &[
                ov("a-test-100", 20, &[req(ZONE_KEY, "In", &["test-zone-2"])])
                    .price(kind.pick("121.421", "+201")),
                ov(
                    "b-test-100",
                    10,
                    &[req(ZONE_KEY, "In", &["test-zone-2", "test-zone-4"])],
                )
                .price(kind.pick("165.421", "-1.5")),
            ],
            &mut pools,
        );
        assert!(ok(&out, "a-test-100") && ok(&out, "b-test-100"), "{out:?}");
        let t = &pools[0].types;
        // Zone 2: the heavier overlay; zone 4: the only one selecting it.
        assert!(close(
            price_of(t, "default-instance-type", "test-zone-2"),
            kind.pick(121.421, 203.020)
        ));
        assert!(close(
            price_of(t, "default-instance-type", "test-zone-4"),
            kind.pick(165.421, 2.520)
        ));
    }
}

#[test]
fn should_not_partial_apply_instance_types_in_a_nodepool() {
    for kind in Kind::BOTH {
        let mut pools = [pool("default", fake_defaults())];
        let out = run(
            &[
                ov(
                    "overlay-a",
                    10,
                    &[req(
                        IT,
                        "In",
                        &[
                            "default-instance-type",
                            "small-instance-type",
                            "gpu-vendor-b-instance-type",
                        ],
                    )],
                )
                .price(kind.pick("382", "-23")),
                ov(
                    "overlay-b",
                    10,
                    &[req(
                        IT,
                        "In",
                        &["small-instance-type", "gpu-vendor-instance-type"],
                    )],
                )
                .price(kind.pick("100", "+10")),
            ],
            &mut pools,
        );
        assert!(
            conflict(&out, "overlay-a") && ok(&out, "overlay-b"),
            "{out:?}"
        );
        let applied = |t: &str| out.price_overlaid.contains(&("default".into(), t.into()));
        assert!(!applied("default-instance-type"));
        assert!(applied("gpu-vendor-instance-type"));
        assert!(!applied("gpu-vendor-b-instance-type"));
        assert!(applied("small-instance-type"));
    }
}

#[test]
fn should_not_partial_apply_for_a_subset_of_nodepools() {
    // The reference narrows the NodePools' requirements, but overlays see
    // every type the cloud provider returns for a NodePool (its fake
    // returns them all), as here.
    for kind in Kind::BOTH {
        let mut pools = [
            pool("default", fake_defaults()),
            pool("two", fake_defaults()),
        ];
        let out = run(
            &[
                ov(
                    "overlay-a",
                    10,
                    &[req(
                        IT,
                        "In",
                        &[
                            "default-instance-type",
                            "small-instance-type",
                            "gpu-vendor-b-instance-type",
                        ],
                    )],
                )
                .price(kind.pick("382", "+10")),
                ov(
                    "overlay-b",
                    10,
                    &[req(
                        IT,
                        "In",
                        &["small-instance-type", "gpu-vendor-instance-type"],
                    )],
                )
                .price(kind.pick("100", "-23")),
            ],
            &mut pools,
        );
        assert!(
            conflict(&out, "overlay-a") && ok(&out, "overlay-b"),
            "{out:?}"
        );
        for p in ["default", "two"] {
            let applied = |t: &str| out.price_overlaid.contains(&(p.into(), t.into()));
            assert!(!applied("default-instance-type"), "{p}");
            assert!(!applied("gpu-vendor-b-instance-type"), "{p}");
            assert!(applied("gpu-vendor-instance-type"), "{p}");
            assert!(applied("small-instance-type"), "{p}");
        }
    }
}

#[test]
fn an_overlay_in_conflict_in_one_nodepool_is_applied_to_none() {
    for kind in Kind::BOTH {
        let mut pools = [
            pool("default", fake_defaults()),
            pool("two", fake_defaults()),
        ];
        let out = run(
            &[
                // Selects both pools; conflicts with b in pool two only.
                ov(
                    "overlay-a",
                    10,
                    &[req(IT, "In", &["default-instance-type"])],
                )
                .price(kind.pick("382", "-23")),
                ov(
                    "overlay-b",
                    10,
                    &[
                        req(IT, "In", &["default-instance-type"]),
                        req(NODEPOOL, "In", &["two"]),
                    ],
                )
                .price(kind.pick("100", "+10")),
            ],
            &mut pools,
        );
        assert!(
            conflict(&out, "overlay-a") && ok(&out, "overlay-b"),
            "{out:?}"
        );
        assert!(
            !out.price_overlaid
                .contains(&("default".into(), "default-instance-type".into()))
        );
        assert!(
            out.price_overlaid
                .contains(&("two".into(), "default-instance-type".into()))
        );
    }
}

// Instance Type Controller: capacity

#[test]
fn should_only_apply_override_for_nodepool_that_defined_in_the_overlay_requirements() {
    let mut pools = [pool("default", single()), pool("two", single())];
    run(
        &[ov("a", 10, &[req(NODEPOOL, "In", &["default"])]).capacity(&[(FUSE, "1")])],
        &mut pools,
    );
    assert_eq!(
        capacity_of(&pools[0].types, "default-instance-type", FUSE),
        1
    );
    assert_eq!(
        capacity_of(&pools[1].types, "default-instance-type", FUSE),
        0
    );
}

#[test]
fn should_pass_with_conflicting_capcaity_update_overlays_for_all_nodepools() {
    let mut pools = [pool("default", single()), pool("two", single())];
    let out = run(
        &[
            ov("a", 10, &[req(NODEPOOL, "In", &["default"])]).capacity(&[(FUSE, "1")]),
            ov("b", 10, &[req(NODEPOOL, "In", &["two"])]).capacity(&[(FUSE, "5")]),
        ],
        &mut pools,
    );
    assert!(ok(&out, "a") && ok(&out, "b"), "{out:?}");
    assert_eq!(
        capacity_of(&pools[0].types, "default-instance-type", FUSE),
        1
    );
    assert_eq!(
        capacity_of(&pools[1].types, "default-instance-type", FUSE),
        5
    );
}

#[test]
fn should_only_apply_price_adjustments_for_nodeclaim_spec_labels_that_defined_in_the_overlay_requirements()
 {
    let mut two = pool("two", single());
    two.labels.insert("test-label".into(), "test-value".into());
    let mut pools = [pool("default", single()), two];
    run(
        &[ov("a", 10, &[req("test-label", "In", &["test-value"])]).capacity(&[(FUSE, "3")])],
        &mut pools,
    );
    assert_eq!(
        capacity_of(&pools[0].types, "default-instance-type", FUSE),
        0
    );
    assert_eq!(
        capacity_of(&pools[1].types, "default-instance-type", FUSE),
        3
    );
}

#[test]
fn should_not_apply_capacity_adjustments_for_invalid_overlay() {
    let mut o = ov("a", 10, &[req(IT, "In", &["default-instance-type"])]).capacity(&[(FUSE, "3")]);
    o.invalid = Some("invalid capacity: cpu in resource, restricted".into());
    let mut pools = [pool("default", single())];
    let out = run(&[o], &mut pools);
    assert!(matches!(out.verdict("a"), Some(Verdict::Invalid(_))));
    assert_eq!(
        capacity_of(&pools[0].types, "default-instance-type", FUSE),
        0
    );
}

#[test]
fn should_not_apply_capacity_adjustments_for_instances_types_that_do_not_overlap() {
    let mut pools = [pool("default", single())];
    run(
        &[ov("a", 10, &[req(IT, "In", &["not-found"])]).capacity(&[(FUSE, "3")])],
        &mut pools,
    );
    assert_eq!(pools[0].types, single());
}

#[test]
fn should_apply_capacity_adjustments_for_instances_types() {
    let mut pools = [pool("default", single())];
    let out = run(
        &[ov("a", 10, &[req(IT, "In", &["default-instance-type"])])
            .capacity(&[("hugepages-1Gi", "2Gi")])],
        &mut pools,
    );
    let it = &pools[0].types[0];
    assert_eq!(it.capacity.get("hugepages-1Gi"), 2 << 30);
    // Pods may request it: allocatable has it too (no overhead on it).
    assert_eq!(it.allocatable.get("hugepages-1Gi"), 2 << 30);
    // Standard resources are untouched.
    assert_eq!(it.capacity.get("cpu"), 4000);
    assert!(
        out.capacity_overlaid
            .contains(&("default".into(), "default-instance-type".into()))
    );
}

#[test]
fn should_update_capacity_for_instance_types_from_multiple_overlays() {
    let types = vec![
        fake(
            "zone-one",
            "amd64",
            &OS_DEFAULT,
            vec![offering("test-zone-1", "spot", 1.02)],
        ),
        fake(
            "zone-two",
            "amd64",
            &OS_DEFAULT,
            vec![offering("test-zone-2", "on-demand", 2.02)],
        ),
        fake(
            "zone-four",
            "amd64",
            &OS_DEFAULT,
            vec![offering("test-zone-4", "reserved", 4.02)],
        ),
    ];
    let mut pools = [pool("default", types)];
    let out = run(
        &[
            ov(
                "a",
                10,
                &[req(ZONE_KEY, "In", &["test-zone-2", "test-zone-4"])],
            )
            .capacity(&[(FUSE, "1")]),
            ov("b", 10, &[req(CT, "In", &["spot"])]).capacity(&[("hugepages-1Gi", "2Gi")]),
        ],
        &mut pools,
    );
    assert!(ok(&out, "a") && ok(&out, "b"), "{out:?}");
    let t = &pools[0].types;
    assert_eq!(capacity_of(t, "zone-one", "hugepages-1Gi"), 2 << 30);
    assert_eq!(capacity_of(t, "zone-two", FUSE), 1);
    assert_eq!(capacity_of(t, "zone-four", FUSE), 1);
    assert!(close(price_of(t, "zone-one", "test-zone-1"), 1.02));
}

#[test]
fn should_update_capacity_for_one_instance_types_from_multiple_overlays() {
    let mut pools = [pool("default", single())];
    let out = run(
        &[
            ov("a", 10, &[req(IT, "In", &["default-instance-type"])]).capacity(&[(FUSE, "1")]),
            ov("b", 10, &[req(IT, "In", &["default-instance-type"])])
                .capacity(&[("hugepages-1Gi", "2Gi")]),
        ],
        &mut pools,
    );
    assert!(ok(&out, "a") && ok(&out, "b"), "{out:?}");
    let t = &pools[0].types;
    assert_eq!(capacity_of(t, "default-instance-type", FUSE), 1);
    assert_eq!(
        capacity_of(t, "default-instance-type", "hugepages-1Gi"),
        2 << 30
    );
}

#[test]
fn should_update_price_offerings_instance_types_from_multiple_overlays_with_different_weights() {
    let types = vec![
        fake(
            "zone-two",
            "amd64",
            &OS_DEFAULT,
            vec![offering("test-zone-2", "on-demand", 2.02)],
        ),
        fake(
            "zone-four",
            "amd64",
            &OS_DEFAULT,
            vec![offering("test-zone-4", "reserved", 4.02)],
        ),
    ];
    let mut pools = [pool("default", types)];
    run(
        &[
            ov("a", 20, &[req(ZONE_KEY, "In", &["test-zone-2"])]).capacity(&[(FUSE, "1")]),
            ov(
                "b",
                10,
                &[req(ZONE_KEY, "In", &["test-zone-2", "test-zone-4"])],
            )
            .capacity(&[("hugepages-1Gi", "2Gi")]),
        ],
        &mut pools,
    );
    let t = &pools[0].types;
    assert_eq!(capacity_of(t, "zone-two", FUSE), 1);
    assert_eq!(capacity_of(t, "zone-four", "hugepages-1Gi"), 2 << 30);
    assert!(close(price_of(t, "zone-two", "test-zone-2"), 2.02));
}

#[test]
fn should_apply_higher_weight_overlay_when_multiple_overlays_match_the_same_instance_type() {
    let mut pools = [pool("default", single())];
    let out = run(
        &[
            ov(
                "overlay-a",
                10,
                &[req(IT, "In", &["default-instance-type"])],
            )
            .capacity(&[(FUSE, "5")]),
            ov(
                "overlay-b",
                20,
                &[req(IT, "In", &["default-instance-type"])],
            )
            .capacity(&[(FUSE, "99")]),
        ],
        &mut pools,
    );
    assert!(ok(&out, "overlay-a") && ok(&out, "overlay-b"), "{out:?}");
    assert_eq!(
        capacity_of(&pools[0].types, "default-instance-type", FUSE),
        99
    );
}

#[test]
fn should_that_there_is_not_a_partial_application_for_instance_types() {
    let mut pools = [pool("default", fake_defaults())];
    let out = run(
        &[
            ov(
                "overlay-a",
                10,
                &[req(
                    IT,
                    "In",
                    &["default-instance-type", "small-instance-type"],
                )],
            )
            .capacity(&[(FUSE, "1")]),
            ov(
                "overlay-b",
                10,
                &[req(
                    IT,
                    "In",
                    &["small-instance-type", "gpu-vendor-instance-type"],
                )],
            )
            .capacity(&[(FUSE, "2")]),
        ],
        &mut pools,
    );
    assert!(
        conflict(&out, "overlay-a") && ok(&out, "overlay-b"),
        "{out:?}"
    );
    let t = &pools[0].types;
    assert_eq!(capacity_of(t, "default-instance-type", FUSE), 0);
    assert_eq!(capacity_of(t, "small-instance-type", FUSE), 2);
    assert_eq!(capacity_of(t, "gpu-vendor-instance-type", FUSE), 2);
}

#[test]
fn should_that_there_is_not_a_partial_application_for_nodepools() {
    let mut pools = [
        pool("default", fake_defaults()),
        pool("two", fake_defaults()),
    ];
    let out = run(
        &[
            ov(
                "overlay-a",
                10,
                &[req(IT, "In", &["default-instance-type"])],
            )
            .capacity(&[(FUSE, "1")]),
            ov(
                "overlay-b",
                10,
                &[
                    req(IT, "In", &["default-instance-type"]),
                    req(NODEPOOL, "In", &["two"]),
                ],
            )
            .capacity(&[(FUSE, "2")]),
        ],
        &mut pools,
    );
    assert!(
        conflict(&out, "overlay-a") && ok(&out, "overlay-b"),
        "{out:?}"
    );
    assert_eq!(
        capacity_of(&pools[0].types, "default-instance-type", FUSE),
        0
    );
    assert_eq!(
        capacity_of(&pools[1].types, "default-instance-type", FUSE),
        2
    );
}

#[test]
fn should_apply_pricing_and_capacity_adjustment_from_two_overlays_on_the_same_instance_type() {
    let mut pools = [pool("default", single())];
    let out = run(
        &[
            ov("a", 10, &[req(IT, "In", &["default-instance-type"])]).price("+1"),
            ov("b", 10, &[req(IT, "In", &["default-instance-type"])]).capacity(&[(FUSE, "4")]),
        ],
        &mut pools,
    );
    assert!(ok(&out, "a") && ok(&out, "b"), "{out:?}");
    assert!(close(
        price_of(&pools[0].types, "default-instance-type", "test-zone-1"),
        2.02
    ));
    assert_eq!(
        capacity_of(&pools[0].types, "default-instance-type", FUSE),
        4
    );
}

#[test]
fn should_have_an_empty_instance_types_set_when_cloudprovider_does_not_return_instance_types() {
    let mut pools = [pool("default", Vec::new())];
    let out = run(
        &[ov("a", 10, &[req(IT, "Exists", &[])]).price("1")],
        &mut pools,
    );
    assert!(pools[0].types.is_empty());
    assert!(ok(&out, "a"));
}

#[test]
fn should_not_return_instance_type_requirements_with_nodepool_nodeclass_and_custom_nodepool_labels()
{
    let mut p = pool("default", single());
    p.labels.insert("custom".into(), "value".into());
    let mut pools = [p];
    run(
        &[ov("a", 10, &[req("custom", "In", &["value"])]).price("3")],
        &mut pools,
    );
    let reqs = &pools[0].types[0].requirements;
    assert!(reqs.get(NODEPOOL).is_none());
    assert!(reqs.get("custom").is_none());
    assert_eq!(*reqs, single()[0].requirements);
}

// store_test.go

#[test]
fn should_correctly_apply_price_overlay_to_specific_offerings() {
    let mut pools = [pool("default", four_offerings())];
    run(
        &[ov("a", 10, &[req(ZONE_KEY, "In", &["test-zone-1"])]).price("-50%")],
        &mut pools,
    );
    let t = &pools[0].types;
    assert!(close(
        price_of(t, "default-instance-type", "test-zone-1"),
        0.51
    ));
    assert!(close(
        price_of(t, "default-instance-type", "test-zone-3"),
        3.02
    ));
}

#[test]
fn should_correctly_apply_capacity_overlay() {
    let mut pools = [pool("default", single())];
    run(
        &[ov("a", 10, &[req(IT, "Exists", &[])]).capacity(&[("nvidia.com/gpu", "2")])],
        &mut pools,
    );
    let it = &pools[0].types[0];
    assert_eq!(it.capacity.get("nvidia.com/gpu"), 2);
    assert_eq!(it.capacity.get("memory"), 4 << 30);
}

#[test]
fn should_apply_different_overlays_to_different_node_pools() {
    let mut pools = [pool("a", single()), pool("b", single())];
    run(
        &[
            ov("for-a", 10, &[req(NODEPOOL, "In", &["a"])]).price("7"),
            ov("for-b", 10, &[req(NODEPOOL, "In", &["b"])]).capacity(&[(FUSE, "1")]),
        ],
        &mut pools,
    );
    assert!(close(
        price_of(&pools[0].types, "default-instance-type", "test-zone-1"),
        7.0
    ));
    assert_eq!(
        capacity_of(&pools[0].types, "default-instance-type", FUSE),
        0
    );
    assert!(close(
        price_of(&pools[1].types, "default-instance-type", "test-zone-1"),
        1.02
    ));
    assert_eq!(
        capacity_of(&pools[1].types, "default-instance-type", FUSE),
        1
    );
}

// dovetail's own

#[test]
fn equal_weights_are_taken_in_reverse_alphabetical_order_whatever_the_input_order() {
    for order in [["a", "b"], ["b", "a"]] {
        let mut pools = [pool("default", single())];
        let overlays: Vec<Overlay> = order
            .iter()
            .map(|n| ov(n, 0, &[req(IT, "Exists", &[])]).price(if *n == "a" { "1" } else { "2" }))
            .collect();
        let out = run(&overlays, &mut pools);
        assert_eq!(out.verdicts[0].0, "b");
        assert!(conflict(&out, "a"));
        assert!(close(
            price_of(&pools[0].types, "default-instance-type", "test-zone-1"),
            2.0
        ));
    }
}

#[test]
fn price_changes_parse_as_the_reference_reads_them_and_never_go_below_zero() {
    assert_eq!(PriceChange::parse("0.5"), Ok(PriceChange::Set(0.5)));
    assert_eq!(PriceChange::parse("+0.1"), Ok(PriceChange::Add(0.1)));
    assert_eq!(PriceChange::parse("-50%"), Ok(PriceChange::Percent(-50.0)));
    assert!(close(PriceChange::parse("-50%").unwrap().apply(0.2), 0.1));
    assert!(close(PriceChange::parse("+10%").unwrap().apply(1.0), 1.1));
    assert_eq!(PriceChange::parse("-5").unwrap().apply(1.0), 0.0);
    assert_eq!(PriceChange::parse("-100%").unwrap().apply(3.0), 0.0);
    assert!(PriceChange::parse("ten").is_err());
    assert!(PriceChange::parse("-x%").is_err());
}

/// A measurement, not a check: `cargo test --lib timing_on_the_aws_catalog
/// -- --ignored --nocapture` prints how long applying ten overlays to four
/// NodePools of the shared AWS catalog takes (one solve's cost).
#[test]
#[ignore = "a measurement, not a check; run with --ignored --nocapture"]
fn timing_on_the_aws_catalog() {
    let catalog = crate::model::catalog::read_catalog(std::path::Path::new(
        "../shared/data/aws-catalog.json",
    ))
    .unwrap();
    let overlays: Vec<Overlay> = [
        "m5", "m6i", "c5", "c6i", "r5", "r6i", "m7i", "c7i", "t3", "m6g",
    ]
    .iter()
    .enumerate()
    .map(|(i, f)| {
        ov(
            &format!("o{i}"),
            (i % 3) as i32,
            &[req("karpenter.k8s.aws/instance-family", "In", &[f])],
        )
        .price("-10%")
    })
    .collect();
    let mut pools: Vec<Pool> = ["a", "b", "c", "d"]
        .into_iter()
        .map(|n| pool(n, catalog.clone()))
        .collect();
    let t = std::time::Instant::now();
    let out = run(&overlays, &mut pools);
    eprintln!(
        "{} types x {} pools x {} overlays: {:?}, {} priced",
        catalog.len(),
        pools.len(),
        overlays.len(),
        t.elapsed(),
        out.price_overlaid.len()
    );
}
