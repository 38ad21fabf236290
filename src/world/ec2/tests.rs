use std::path::PathBuf;

use super::offerings::{ACCELERATED_SPOT_FACTOR, STANDARD_SPOT_FACTOR, is_accelerated};
use super::*;
use crate::api::NodeSelectorRequirementWithMinValues;
use crate::api::ec2nodeclass::KubeletConfiguration;
use crate::api::nodeclaim::NodeClaimResources;
use crate::api::nodepool::NodeClaimTemplateMetadata;
use crate::clock::{ManualClock, parse_rfc3339};
use crate::model::labels::{INSTANCE_TYPE, NODEPOOL};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Five real us-east-1 types (on-demand Linux prices) offered in zones
/// a, b, c, plus one type offered only in us-east-1d.
const CATALOG: &str = r#"{"instanceTypes": [
    {"name": "m5.large", "labels": {"kubernetes.io/arch": "amd64",
        "karpenter.k8s.aws/instance-family": "m5", "karpenter.k8s.aws/instance-cpu": "2"},
     "allocatable": {"cpu": "1930m", "memory": "7134Mi", "pods": "29"},
     "offerings": [{"zone": "us-east-1a", "capacityType": "on-demand", "price": 0.096},
                   {"zone": "us-east-1b", "capacityType": "on-demand", "price": 0.096},
                   {"zone": "us-east-1c", "capacityType": "on-demand", "price": 0.096},
                   {"zone": "us-east-1d", "capacityType": "on-demand", "price": 0.096}]},
    {"name": "c5.large", "labels": {"kubernetes.io/arch": "amd64",
        "karpenter.k8s.aws/instance-family": "c5", "karpenter.k8s.aws/instance-cpu": "2"},
     "allocatable": {"cpu": "1930m", "memory": "3055Mi", "pods": "29"},
     "offerings": [{"zone": "us-east-1a", "capacityType": "on-demand", "price": 0.085},
                   {"zone": "us-east-1b", "capacityType": "on-demand", "price": 0.085},
                   {"zone": "us-east-1c", "capacityType": "on-demand", "price": 0.085}]},
    {"name": "c5.xlarge", "labels": {"kubernetes.io/arch": "amd64",
        "karpenter.k8s.aws/instance-family": "c5", "karpenter.k8s.aws/instance-cpu": "4"},
     "allocatable": {"cpu": "3920m", "memory": "6525Mi", "pods": "58"},
     "offerings": [{"zone": "us-east-1a", "capacityType": "on-demand", "price": 0.17},
                   {"zone": "us-east-1b", "capacityType": "on-demand", "price": 0.17},
                   {"zone": "us-east-1c", "capacityType": "on-demand", "price": 0.17}]},
    {"name": "m6g.large", "labels": {"kubernetes.io/arch": "arm64",
        "karpenter.k8s.aws/instance-family": "m6g", "karpenter.k8s.aws/instance-cpu": "2"},
     "allocatable": {"cpu": "1930m", "memory": "7134Mi", "pods": "29"},
     "offerings": [{"zone": "us-east-1a", "capacityType": "on-demand", "price": 0.077},
                   {"zone": "us-east-1b", "capacityType": "on-demand", "price": 0.077},
                   {"zone": "us-east-1c", "capacityType": "on-demand", "price": 0.077}]},
    {"name": "g5.xlarge", "labels": {"kubernetes.io/arch": "amd64",
        "karpenter.k8s.aws/instance-family": "g5", "karpenter.k8s.aws/instance-cpu": "4",
        "karpenter.k8s.aws/instance-gpu-count": "1"},
     "allocatable": {"cpu": "3920m", "memory": "14162Mi", "pods": "58", "nvidia.com/gpu": "1"},
     "offerings": [{"zone": "us-east-1a", "capacityType": "on-demand", "price": 1.006},
                   {"zone": "us-east-1b", "capacityType": "on-demand", "price": 1.006},
                   {"zone": "us-east-1c", "capacityType": "on-demand", "price": 1.006}]},
    {"name": "m5.xlarge", "labels": {"kubernetes.io/arch": "amd64",
        "karpenter.k8s.aws/instance-family": "m5", "karpenter.k8s.aws/instance-cpu": "4"},
     "allocatable": {"cpu": "3920m", "memory": "14162Mi", "pods": "58"},
     "offerings": [{"zone": "us-east-1d", "capacityType": "on-demand", "price": 0.192}]}
]}"#;

const START: &str = "2026-01-05T00:00:00Z";

fn ts(s: &str) -> Timestamp {
    parse_rfc3339(s).expect("valid test time")
}

fn at(offset_secs: u64) -> Timestamp {
    ts(START)
        .checked_add(Duration::from_secs(offset_secs))
        .expect("in range")
}

fn config() -> SimConfig {
    SimConfig::new(parse_catalog("test.json", CATALOG).expect("valid test catalog"))
}

fn sim_with(config: SimConfig) -> (SimEc2, ManualClock) {
    let clock = ManualClock::new(ts(START));
    (SimEc2::new(config, Arc::new(clock.clone())), clock)
}

fn new_sim() -> (SimEc2, ManualClock) {
    sim_with(config())
}

fn window(
    instance_type: Option<&str>,
    zone: Option<&str>,
    capacity_type: Option<&str>,
    from: u64,
    until: Option<u64>,
) -> CapacityWindow {
    CapacityWindow {
        instance_type: instance_type.map(str::to_string),
        zone: zone.map(str::to_string),
        capacity_type: capacity_type.map(str::to_string),
        from: at(from),
        until: until.map(at),
    }
}

fn req(key: &str, op: api::Operator, values: &[&str]) -> NodeSelectorRequirementWithMinValues {
    NodeSelectorRequirementWithMinValues::new(key, op, values)
}

/// A NodeClaim of NodePool `default` with these requirements.
fn claim(name: &str, requirements: &[NodeSelectorRequirementWithMinValues]) -> NodeClaim {
    let mut c = NodeClaim::test(name);
    c.spec.requirements = requirements.to_vec();
    c.metadata.labels = Some(BTreeMap::from([(
        NODEPOOL.to_string(),
        "default".to_string(),
    )]));
    c
}

fn capacity(types: &[&str]) -> NodeSelectorRequirementWithMinValues {
    req(CAPACITY_TYPE, api::Operator::In, types)
}

fn spot_or_on_demand() -> NodeSelectorRequirementWithMinValues {
    capacity(&["spot", "on-demand"])
}

fn nodeclass() -> EC2NodeClass {
    EC2NodeClass::test("default")
}

/// No offering known to be out of capacity.
fn none() -> BTreeSet<OfferingKey> {
    BTreeSet::new()
}

fn offering(instance_type: &str, zone: &str, capacity_type: &str) -> OfferingKey {
    OfferingKey {
        instance_type: instance_type.to_string(),
        zone: zone.to_string(),
        capacity_type: capacity_type.to_string(),
    }
}

fn launched(instance: &Instance) -> OfferingKey {
    offering(
        &instance.instance_type,
        &instance.zone,
        &instance.capacity_type,
    )
}

fn price_of(sim: &SimEc2, key: &OfferingKey) -> f64 {
    sim.catalog()
        .iter()
        .find(|it| it.name == key.instance_type)
        .and_then(|it| {
            it.offerings
                .iter()
                .find(|o| o.zone == key.zone && o.capacity_type == key.capacity_type)
        })
        .map(|o| o.price)
        .expect("offering exists")
}

#[test]
fn builtin_catalog_parses_with_on_demand_offerings_in_three_zones() {
    let catalog = SimEc2::builtin_catalog().expect("the embedded catalog parses");
    assert_eq!(catalog.len(), 86);
    let sim = SimEc2::new(
        SimConfig::new(catalog),
        Arc::new(ManualClock::new(ts(START))),
    );
    assert_eq!(sim.catalog().len(), 86);
    for it in sim.catalog() {
        assert_eq!(it.offerings.len(), 6, "{}", it.name);
    }
}

#[test]
fn offerings_are_restricted_to_the_configured_zones() {
    let mut c = config();
    c.zones = vec!["us-east-1a".into(), "us-east-1d".into()];
    let (sim, _) = sim_with(c);
    let m5 = sim
        .catalog()
        .iter()
        .find(|it| it.name == "m5.large")
        .expect("m5.large offered");
    let keys: Vec<(&str, &str)> = m5
        .offerings
        .iter()
        .map(|o| (o.zone.as_str(), o.capacity_type.as_str()))
        .collect();
    assert_eq!(
        keys,
        [
            ("us-east-1a", "on-demand"),
            ("us-east-1a", "spot"),
            ("us-east-1d", "on-demand"),
            ("us-east-1d", "spot")
        ]
    );
    let zones = m5.requirements.get(ZONE).expect("zone requirement");
    assert!(zones.has("us-east-1a") && zones.has("us-east-1d") && !zones.has("us-east-1b"));
    let c5 = sim
        .catalog()
        .iter()
        .find(|it| it.name == "c5.large")
        .expect("c5.large offered");
    assert!(c5.offerings.iter().all(|o| o.zone == "us-east-1a"));

    // m5.xlarge is only offered in us-east-1d, which the default zones
    // leave out: it is dropped rather than given invented offerings.
    let (sim, _) = new_sim();
    assert!(!sim.catalog().iter().any(|it| it.name == "m5.xlarge"));
    assert_eq!(sim.catalog().len(), 5);
}

#[test]
fn spot_prices_follow_the_documented_model() {
    assert_eq!(fnv1a64(*b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a64(*b"a"), 0xaf63_dc4c_8601_ec8c);
    // Reference values computed independently from the documented model.
    assert!((spot_factor("m5.large", "us-east-1a", false) - 0.3372).abs() < 1e-12);
    assert!((spot_factor("g5.xlarge", "us-east-1b", true) - 0.5311).abs() < 1e-12);

    let (sim, _) = new_sim();
    let m5 = offering("m5.large", "us-east-1c", "spot");
    assert!((price_of(&sim, &m5) - 0.096 * 0.30885).abs() < 1e-12);
    for it in sim.catalog() {
        let (low, high) = if it.name.starts_with("g5") {
            ACCELERATED_SPOT_FACTOR
        } else {
            STANDARD_SPOT_FACTOR
        };
        for o in it.offerings.iter().filter(|o| o.capacity_type == "spot") {
            let od = price_of(&sim, &offering(&it.name, &o.zone, "on-demand"));
            let factor = o.price / od;
            assert!(
                (low - 1e-9..=high + 1e-9).contains(&factor),
                "{} {}: {factor}",
                it.name,
                o.zone
            );
        }
    }
    // Same inputs, same prices.
    let (again, _) = sim_with(config());
    assert_eq!(sim.catalog(), again.catalog());
}

#[test]
fn spot_can_be_disabled_and_catalog_spot_prices_win() {
    let mut c = config();
    c.spot = false;
    let (sim, _) = sim_with(c);
    assert!(
        sim.catalog()
            .iter()
            .flat_map(|it| &it.offerings)
            .all(|o| o.capacity_type == "on-demand")
    );
    let ct = sim.catalog()[0]
        .requirements
        .get(CAPACITY_TYPE)
        .expect("set");
    assert!(ct.has("on-demand") && !ct.has("spot"));

    let mut c = config();
    c.catalog[0].offerings.push(Offering {
        zone: "us-east-1a".into(),
        capacity_type: "spot".into(),
        price: 0.0123,
        available: true,
        reservations: Vec::new(),
    });
    let (sim, _) = sim_with(c);
    assert_eq!(
        price_of(&sim, &offering("m5.large", "us-east-1a", "spot")),
        0.0123
    );
    let spot_in_a = sim.catalog()[0]
        .offerings
        .iter()
        .filter(|o| o.zone == "us-east-1a" && o.capacity_type == "spot")
        .count();
    assert_eq!(spot_in_a, 1);
}

#[tokio::test]
async fn create_takes_the_cheapest_spot_offering_when_spot_is_allowed() {
    let (sim, _) = new_sim();
    let i = sim
        .create(&claim("a", &[spot_or_on_demand()]), &nodeclass(), &none())
        .await
        .expect("launches")
        .instance;
    assert_eq!(launched(&i), offering("m6g.large", "us-east-1c", "spot"));
    assert_eq!(i.price, price_of(&sim, &launched(&i)));

    let amd64 = req("kubernetes.io/arch", api::Operator::In, &["amd64"]);
    let i = sim
        .create(
            &claim("b", &[spot_or_on_demand(), amd64]),
            &nodeclass(),
            &none(),
        )
        .await
        .expect("launches")
        .instance;
    assert_eq!(launched(&i), offering("m5.large", "us-east-1c", "spot"));
}

#[tokio::test]
async fn create_takes_the_cheapest_on_demand_offering_without_spot() {
    let (sim, _) = new_sim();
    let on_demand = capacity(&["on-demand"]);
    let i = sim
        .create(
            &claim("a", std::slice::from_ref(&on_demand)),
            &nodeclass(),
            &none(),
        )
        .await
        .expect("launches")
        .instance;
    // Equal prices in every zone: the first zone wins.
    assert_eq!(
        launched(&i),
        offering("m6g.large", "us-east-1a", "on-demand")
    );
    assert_eq!(i.price, 0.077);

    let zone_b = req(ZONE, api::Operator::In, &["us-east-1b"]);
    let types = req(INSTANCE_TYPE, api::Operator::In, &["m5.large", "c5.large"]);
    let i = sim
        .create(
            &claim("b", &[on_demand, zone_b, types]),
            &nodeclass(),
            &none(),
        )
        .await
        .expect("launches")
        .instance;
    assert_eq!(
        launched(&i),
        offering("c5.large", "us-east-1b", "on-demand")
    );

    // No capacity-type requirement at all: spot is allowed.
    let i = sim
        .create(&claim("c", &[]), &nodeclass(), &none())
        .await
        .expect("launches")
        .instance;
    assert_eq!(i.capacity_type, "spot");
}

#[tokio::test]
async fn create_honours_instance_label_requirements_and_requests() {
    let (sim, _) = new_sim();
    let gpu = req(
        "karpenter.k8s.aws/instance-gpu-count",
        api::Operator::Exists,
        &[],
    );
    let i = sim
        .create(
            &claim("gpu", &[spot_or_on_demand(), gpu]),
            &nodeclass(),
            &none(),
        )
        .await
        .expect("launches")
        .instance;
    assert_eq!(launched(&i), offering("g5.xlarge", "us-east-1a", "spot"));

    // A custom label is the NodePool's to set, not a property of a type.
    let team = req("team", api::Operator::In, &["a"]);
    let cpu4 = req("karpenter.k8s.aws/instance-cpu", api::Operator::Gt, &["2"]);
    let no_gpu = req(
        "karpenter.k8s.aws/instance-gpu-count",
        api::Operator::DoesNotExist,
        &[],
    );
    let i = sim
        .create(
            &claim("big", &[capacity(&["on-demand"]), team, cpu4, no_gpu]),
            &nodeclass(),
            &none(),
        )
        .await
        .expect("launches")
        .instance;
    assert_eq!(
        launched(&i),
        offering("c5.xlarge", "us-east-1a", "on-demand")
    );

    // Requests that only the 4-vCPU types fit.
    let mut c = claim("requests", &[capacity(&["on-demand"])]);
    c.spec.resources = Some(NodeClaimResources {
        requests: Some(BTreeMap::from([("cpu".to_string(), Quantity("3".into()))])),
    });
    let i = sim
        .create(&c, &nodeclass(), &none())
        .await
        .expect("launches")
        .instance;
    assert_eq!(i.instance_type, "c5.xlarge");
}

/// An instance has EFA interfaces only for a NodeClaim that requests
/// EFA, as the AWS launch attaches them; the controller then lists EFA
/// in the NodeClaim's capacity only for those.
#[tokio::test]
async fn efa_is_attached_only_for_a_nodeclaim_that_requests_it() {
    let catalog = SimEc2::builtin_catalog().expect("catalog");
    let (sim, _) = sim_with(SimConfig::new(catalog));
    let efa_type = req(INSTANCE_TYPE, api::Operator::In, &["c7g.16xlarge"]);
    let plain = sim
        .create(
            &claim("plain", &[efa_type.clone(), capacity(&["on-demand"])]),
            &nodeclass(),
            &none(),
        )
        .await
        .expect("launches")
        .instance;
    assert_eq!(plain.instance_type, "c7g.16xlarge");
    assert!(!plain.efa_attached);
    let mut wants = claim("efa", &[efa_type, capacity(&["on-demand"])]);
    wants.spec.resources = Some(NodeClaimResources {
        requests: Some(BTreeMap::from([(
            crate::cloud::aws::launch::EFA.to_string(),
            Quantity("1".into()),
        )])),
    });
    let with = sim
        .create(&wants, &nodeclass(), &none())
        .await
        .expect("launches")
        .instance;
    assert!(with.efa_attached);
}

#[tokio::test]
async fn instance_labels_carry_type_zone_region_capacity_and_nodepool() {
    let (sim, _) = new_sim();
    let i = sim
        .create(
            &claim("a", &[capacity(&["on-demand"])]),
            &nodeclass(),
            &none(),
        )
        .await
        .expect("launches")
        .instance;
    let expected: BTreeMap<String, String> = [
        ("karpenter.k8s.aws/instance-cpu", "2"),
        ("karpenter.k8s.aws/instance-family", "m6g"),
        ("karpenter.sh/capacity-type", "on-demand"),
        ("karpenter.sh/nodepool", "default"),
        ("kubernetes.io/arch", "arm64"),
        ("kubernetes.io/os", "linux"),
        ("node.kubernetes.io/instance-type", "m6g.large"),
        ("topology.kubernetes.io/region", "us-east-1"),
        ("topology.kubernetes.io/zone", "us-east-1a"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(*i.labels, expected);
    assert_eq!(i.nodepool, "default");
    assert_eq!(i.nodeclaim, "a");
}

#[tokio::test]
async fn requirements_that_allow_no_type_are_an_invalid_request() {
    let (sim, _) = new_sim();
    let unknown = req(INSTANCE_TYPE, api::Operator::In, &["m9.huge"]);
    let err = sim
        .create(
            &claim("a", &[spot_or_on_demand(), unknown]),
            &nodeclass(),
            &none(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, CloudError::InvalidRequest(_)), "{err}");

    // m5.xlarge exists in the catalog but not in the configured zones.
    let absent = req(INSTANCE_TYPE, api::Operator::In, &["m5.xlarge"]);
    let err = sim
        .create(&claim("b", &[absent]), &nodeclass(), &none())
        .await
        .unwrap_err();
    assert!(matches!(err, CloudError::InvalidRequest(_)), "{err}");
    assert!(sim.list().await.expect("lists").is_empty());
}

#[tokio::test]
async fn insufficient_capacity_falls_back_to_the_next_offering() {
    let mut c = config();
    c.insufficient_capacity = vec![window(
        Some("m6g.large"),
        Some("us-east-1c"),
        Some("spot"),
        0,
        None,
    )];
    let (sim, _) = sim_with(c);
    let launched_a = sim
        .create(&claim("a", &[spot_or_on_demand()]), &nodeclass(), &none())
        .await
        .expect("launches");
    assert_eq!(
        launched(&launched_a.instance),
        offering("m6g.large", "us-east-1a", "spot")
    );
    // The cheapest override failed first, and is reported.
    assert_eq!(
        launched_a.refused,
        [offering("m6g.large", "us-east-1c", "spot")]
    );

    // With every spot offering refused, the spot fleet fails; once the
    // caller knows them to be out of capacity, on-demand is next.
    let mut c = config();
    c.insufficient_capacity = vec![window(None, None, Some("spot"), 0, None)];
    let (sim, _) = sim_with(c);
    let err = sim
        .create(&claim("b", &[spot_or_on_demand()]), &nodeclass(), &none())
        .await
        .unwrap_err();
    let CloudError::InsufficientCapacity { offerings } = err else {
        panic!("expected insufficient capacity, got {err}");
    };
    assert_eq!(offerings.len(), 5 * 3);
    assert!(offerings.iter().all(|o| o.capacity_type == "spot"));
    let known: BTreeSet<OfferingKey> = offerings.into_iter().collect();
    let i = sim
        .create(&claim("b", &[spot_or_on_demand()]), &nodeclass(), &known)
        .await
        .expect("launches")
        .instance;
    assert_eq!(
        launched(&i),
        offering("m6g.large", "us-east-1a", "on-demand")
    );
}

#[tokio::test]
async fn insufficient_capacity_lists_the_refused_offerings_until_the_window_ends() {
    let mut c = config();
    c.insufficient_capacity = vec![
        window(Some("c5.large"), None, Some("spot"), 0, Some(600)),
        window(Some("c5.large"), Some("us-east-1b"), None, 0, Some(600)),
    ];
    let (sim, clock) = sim_with(c);
    let only = [
        req(INSTANCE_TYPE, api::Operator::In, &["c5.large"]),
        req(ZONE, api::Operator::In, &["us-east-1a", "us-east-1b"]),
        capacity(&["spot"]),
    ];
    let err = sim
        .create(&claim("a", &only), &nodeclass(), &none())
        .await
        .unwrap_err();
    assert_eq!(
        err,
        CloudError::InsufficientCapacity {
            offerings: vec![
                offering("c5.large", "us-east-1a", "spot"),
                offering("c5.large", "us-east-1b", "spot"),
            ]
        }
    );
    // On-demand is allowed too: the spot fleet fails again, then with
    // spot known to be out, on-demand launches in us-east-1a.
    let mut with_od = only.to_vec();
    with_od[2] = spot_or_on_demand();
    assert!(
        sim.create(&claim("b", &with_od), &nodeclass(), &none())
            .await
            .is_err()
    );
    let known: BTreeSet<OfferingKey> = [
        offering("c5.large", "us-east-1a", "spot"),
        offering("c5.large", "us-east-1b", "spot"),
    ]
    .into();
    let i = sim
        .create(&claim("b", &with_od), &nodeclass(), &known)
        .await
        .expect("launches")
        .instance;
    assert_eq!(
        launched(&i),
        offering("c5.large", "us-east-1a", "on-demand")
    );

    clock.set(at(599)).expect("forward");
    assert!(
        sim.create(&claim("c", &only), &nodeclass(), &none())
            .await
            .is_err()
    );
    // The windows end (exclusive): capacity is back.
    clock.set(at(600)).expect("forward");
    let i = sim
        .create(&claim("d", &only), &nodeclass(), &none())
        .await
        .expect("launches")
        .instance;
    assert_eq!(i.instance_type, "c5.large");
    assert_eq!(i.capacity_type, "spot");
}

#[test]
fn a_window_refuses_matching_offerings_from_its_start_until_its_end() {
    let w = window(None, Some("us-east-1a"), Some("spot"), 60, Some(120));
    let spot_a = offering("m5.large", "us-east-1a", "spot");
    assert!(!w.refuses(&spot_a, at(59)));
    assert!(w.refuses(&spot_a, at(60)));
    assert!(w.refuses(&spot_a, at(119)));
    assert!(!w.refuses(&spot_a, at(120)));
    assert!(!w.refuses(&offering("m5.large", "us-east-1b", "spot"), at(60)));
    assert!(!w.refuses(&offering("m5.large", "us-east-1a", "on-demand"), at(60)));
    let open = window(Some("m5.large"), None, None, 0, None);
    assert!(open.refuses(
        &offering("m5.large", "us-east-1c", "on-demand"),
        at(1_000_000)
    ));
    assert!(!open.refuses(&offering("c5.large", "us-east-1c", "on-demand"), at(0)));
}

#[tokio::test]
async fn windows_that_have_not_started_refuse_nothing() {
    let mut c = config();
    c.insufficient_capacity = vec![window(None, None, None, 60, Some(120))];
    let (sim, clock) = sim_with(c);
    assert!(
        sim.create(&claim("a", &[]), &nodeclass(), &none())
            .await
            .is_ok()
    );
    clock.set(at(60)).expect("forward");
    let err = sim
        .create(&claim("b", &[]), &nodeclass(), &none())
        .await
        .unwrap_err();
    let CloudError::InsufficientCapacity { offerings } = err else {
        panic!("expected insufficient capacity, got {err}");
    };
    // The spot fleet's overrides: five types in three zones.
    assert_eq!(offerings.len(), 5 * 3);
}

#[tokio::test]
async fn instances_run_after_the_launch_delay() {
    let (sim, clock) = new_sim();
    let i = sim
        .create(&claim("a", &[]), &nodeclass(), &none())
        .await
        .expect("launches")
        .instance;
    assert_eq!(i.state, InstanceState::Pending);
    assert_eq!(i.launched_at, at(0));
    assert_eq!(sim.running_since(&i), Some(at(45)));

    clock.set(at(44)).expect("forward");
    let got = sim.get(&i.provider_id).await.expect("exists");
    assert_eq!(got.state, InstanceState::Pending);

    clock.set(at(45)).expect("forward");
    let got = sim.get(&i.provider_id).await.expect("exists");
    assert_eq!(got.state, InstanceState::Running);
    let listed = sim.list().await.expect("lists");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].state, InstanceState::Running);
    assert_eq!(*listed[0], got);
}

/// A view shows each instance as `get` does, and shares the instances
/// that did not change since the last view: one that starts running is a
/// new allocation once, then shared again.
#[tokio::test]
async fn views_share_the_instances_that_did_not_change() {
    let (sim, clock) = new_sim();
    let launch = |name: &'static str| {
        let sim = &sim;
        async move {
            sim.create(&claim(name, &[]), &nodeclass(), &none())
                .await
                .expect("launches")
                .instance
        }
    };
    let a = launch("a").await;
    clock.set(at(30)).expect("forward");
    let b = launch("b").await;
    let by_id = |view: &crate::world::ec2::InstanceView, id: &str| {
        Arc::clone(view.iter().find(|i| i.id == id).expect("in the view"))
    };
    let first = sim.instances_now();
    clock.set(at(45)).expect("forward");
    let second = sim.instances_now();
    for i in second.iter() {
        assert_eq!(**i, sim.get(&i.provider_id).await.expect("exists"));
    }
    assert_eq!(by_id(&first, &a.id).state, InstanceState::Pending);
    assert_eq!(by_id(&second, &a.id).state, InstanceState::Running);
    assert!(!Arc::ptr_eq(&by_id(&first, &a.id), &by_id(&second, &a.id)));
    assert!(Arc::ptr_eq(&by_id(&first, &b.id), &by_id(&second, &b.id)));
    clock.set(at(75)).expect("forward");
    let third = sim.instances_now();
    assert!(Arc::ptr_eq(&by_id(&second, &a.id), &by_id(&third, &a.id)));
    assert_eq!(by_id(&third, &b.id).state, InstanceState::Running);
    assert!(!Arc::ptr_eq(&by_id(&second, &b.id), &by_id(&third, &b.id)));
    // Nothing changed since: the same view.
    assert!(Arc::ptr_eq(&third, &sim.instances_now()));
}

#[tokio::test]
async fn deleted_instances_are_gone() {
    let (sim, _) = new_sim();
    let a = sim
        .create(&claim("a", &[]), &nodeclass(), &none())
        .await
        .expect("launches")
        .instance;
    let b = sim
        .create(&claim("b", &[]), &nodeclass(), &none())
        .await
        .expect("launches")
        .instance;
    sim.delete(&a.provider_id).await.expect("deletes");
    assert_eq!(
        sim.get(&a.provider_id).await.unwrap_err(),
        CloudError::NotFound(a.provider_id.clone())
    );
    assert_eq!(
        sim.delete(&a.provider_id).await.unwrap_err(),
        CloudError::NotFound(a.provider_id.clone())
    );
    let ids: Vec<String> = sim
        .list()
        .await
        .expect("lists")
        .iter()
        .map(|i| i.id.clone())
        .collect();
    assert_eq!(ids, [b.id.as_str()]);

    // A provider id naming the wrong zone, or no instance, is not found.
    let wrong_zone = b.provider_id.replace(&b.zone, "us-east-1z");
    assert!(matches!(
        sim.get(&wrong_zone).await,
        Err(CloudError::NotFound(_))
    ));
    assert!(matches!(sim.get("").await, Err(CloudError::NotFound(_))));
}

#[tokio::test]
async fn ids_and_launches_are_deterministic() {
    async fn run() -> Vec<Instance> {
        let (sim, clock) = new_sim();
        let mut out = Vec::new();
        for (n, reqs) in [
            vec![],
            vec![capacity(&["on-demand"])],
            vec![spot_or_on_demand()],
        ]
        .into_iter()
        .enumerate()
        {
            clock.set(at(10 * n as u64)).expect("forward");
            out.push(
                sim.create(&claim(&format!("c{n}"), &reqs), &nodeclass(), &none())
                    .await
                    .expect("launches")
                    .instance,
            );
        }
        out
    }
    let first = run().await;
    assert_eq!(first, run().await);
    let ids: Vec<&str> = first.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "i-00000000000000001",
            "i-00000000000000002",
            "i-00000000000000003"
        ]
    );
    assert_eq!(
        first[0].provider_id,
        "aws:///us-east-1c/i-00000000000000001"
    );
}

#[tokio::test]
async fn terminate_externally_removes_the_instance() {
    let (sim, _) = new_sim();
    let i = sim
        .create(&claim("a", &[]), &nodeclass(), &none())
        .await
        .expect("launches")
        .instance;
    sim.terminate_externally(&i.id, "spot reclaim")
        .expect("terminates");
    assert!(matches!(
        sim.get(&i.provider_id).await,
        Err(CloudError::NotFound(_))
    ));
    assert_eq!(
        sim.terminate_externally(&i.id, "again"),
        Err(CloudError::NotFound(i.id.clone()))
    );
    let last = sim.calls().pop().expect("recorded");
    assert_eq!(
        last.call,
        Call::TerminateExternally {
            instance_id: i.id.clone(),
            reason: "again".into(),
            result: Err(CloudError::NotFound(i.id.clone())),
        }
    );
}

#[tokio::test]
async fn a_spot_interruption_reclaims_the_instance_two_minutes_after_the_warning() {
    use crate::interruption::{Detail, Kind, Parsed, parse};
    let (sim, clock) = new_sim();
    let spot = sim
        .create(&claim("a", &[spot_or_on_demand()]), &nodeclass(), &none())
        .await
        .expect("launches")
        .instance;
    let on_demand = sim
        .create(
            &claim("b", &[capacity(&["on-demand"])]),
            &nodeclass(),
            &none(),
        )
        .await
        .expect("launches")
        .instance;
    assert_eq!(spot.capacity_type, "spot");
    // EC2 interrupts only spot instances, and knows its instances.
    assert!(matches!(
        sim.interrupt(
            Kind::SpotInterruption,
            std::slice::from_ref(&on_demand.id),
            None
        ),
        Err(CloudError::InvalidRequest(_))
    ));
    assert_eq!(
        sim.interrupt(Kind::Rebalance, &["i-00000000000000fff".to_string()], None),
        Err(CloudError::NotFound("i-00000000000000fff".into()))
    );
    assert_eq!(sim.next_reclaim(), None);

    clock.set(at(10)).expect("forward");
    let bodies = sim
        .interrupt(Kind::SpotInterruption, std::slice::from_ref(&spot.id), None)
        .expect("sent");
    let [body] = bodies.as_slice() else {
        panic!("one event per instance: {bodies:?}");
    };
    let Ok(Parsed::Message(m)) = parse(body) else {
        panic!("the event parses: {body}");
    };
    assert_eq!(m.kind(), Kind::SpotInterruption);
    assert!(
        matches!(&m.detail, Detail::SpotInterruption { instance_id, .. } if *instance_id == spot.id)
    );
    assert_eq!(m.time, at(10));
    assert_eq!(sim.next_reclaim(), Some(at(130)));

    clock.set(at(129)).expect("forward");
    assert!(sim.take_reclaimed().is_empty());
    assert!(sim.get(&spot.provider_id).await.is_ok());
    clock.set(at(200)).expect("forward");
    // Reclaimed at its own time, whenever it is next looked at.
    let listed = sim.list().await.expect("lists");
    assert_eq!(listed.len(), 1);
    assert_eq!(sim.take_reclaimed(), vec![(at(130), spot.id.clone())]);
    assert!(sim.take_reclaimed().is_empty());
    assert_eq!(sim.next_reclaim(), None);
    assert!(sim.calls().iter().any(|c| c.at == at(130)
        && c.call
            == Call::TerminateExternally {
                instance_id: spot.id.clone(),
                reason: "spot reclaim".into(),
                result: Ok(()),
            }));
}

#[tokio::test]
async fn other_events_leave_instances_running_except_a_state_change() {
    use crate::interruption::{InstanceState, Kind, Parsed, parse};
    let (sim, _) = new_sim();
    let mut ids = Vec::new();
    for name in ["a", "b"] {
        ids.push(
            sim.create(&claim(name, &[]), &nodeclass(), &none())
                .await
                .expect("launches")
                .instance
                .id,
        );
    }
    let rebalance = sim.interrupt(Kind::Rebalance, &ids, None).expect("sent");
    assert_eq!(rebalance.len(), 2);
    let health = sim
        .interrupt(Kind::ScheduledChange, &ids, None)
        .expect("sent");
    let [health] = health.as_slice() else {
        panic!("one AWS Health event for every instance");
    };
    let Ok(Parsed::Message(m)) = parse(health) else {
        panic!("the event parses");
    };
    assert_eq!(m.detail.instance_ids(), ids.as_slice());
    assert_eq!(sim.list().await.expect("lists").len(), 2);
    assert_eq!(sim.next_reclaim(), None);

    let stopped = sim
        .interrupt(Kind::StateChange, &ids[..1], Some(InstanceState::Stopped))
        .expect("sent");
    assert_eq!(stopped.len(), 1);
    let listed = sim.list().await.expect("lists");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, ids[1]);
}

#[tokio::test]
async fn instance_types_apply_kubelet_settings_nodepool_requirements_and_windows() {
    let mut c = config();
    c.insufficient_capacity = vec![window(Some("c5.large"), Some("us-east-1b"), None, 0, None)];
    let (sim, _) = sim_with(c);
    let mut class = nodeclass();
    class.spec.kubelet = Some(KubeletConfiguration {
        max_pods: Some(110),
        ..KubeletConfiguration::default()
    });
    let pool = NodePool::test("default").with_requirement(req(
        "kubernetes.io/arch",
        api::Operator::In,
        &["amd64"],
    ));
    let types = sim.instance_types(&pool, &class).await.expect("lists");
    let names: Vec<&str> = types.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["m5.large", "c5.large", "c5.xlarge", "g5.xlarge"]);
    assert!(types.iter().all(|t| t.allocatable.get("pods") == 110));
    // A capacity window hides nothing ahead of a launch: EC2 lists the
    // offering and fails the launch.
    assert!(
        types
            .iter()
            .all(|t| t.offerings.iter().all(|o| o.available))
    );

    // Without kubelet settings, the catalog's allocatable is kept; a
    // template label that is not an instance property filters nothing.
    let mut pool = NodePool::test("default");
    pool.spec.template.metadata = Some(NodeClaimTemplateMetadata {
        labels: Some(BTreeMap::from([("team".to_string(), "a".to_string())])),
        ..NodeClaimTemplateMetadata::default()
    });
    let types = sim
        .instance_types(&pool, &nodeclass())
        .await
        .expect("lists");
    assert_eq!(types.len(), 5);
    assert_eq!(types[0].allocatable.get("pods"), 29);
}

#[tokio::test]
async fn kubelet_max_pods_limits_what_a_launch_can_fit() {
    let (sim, _) = new_sim();
    let mut class = nodeclass();
    class.spec.kubelet = Some(KubeletConfiguration {
        max_pods: Some(8),
        ..KubeletConfiguration::default()
    });
    let mut c = claim("a", &[]);
    c.spec.resources = Some(NodeClaimResources {
        requests: Some(BTreeMap::from([(
            "pods".to_string(),
            Quantity("10".into()),
        )])),
    });
    let err = sim.create(&c, &class, &none()).await.unwrap_err();
    assert!(matches!(err, CloudError::InvalidRequest(_)), "{err}");
    assert!(sim.create(&c, &nodeclass(), &none()).await.is_ok());
}

#[tokio::test]
async fn the_call_log_records_every_call_and_injected_errors() {
    let (sim, clock) = new_sim();
    let i = sim
        .create(&claim("a", &[]), &nodeclass(), &none())
        .await
        .expect("launches")
        .instance;
    clock.set(at(5)).expect("forward");
    sim.fail_next(CloudError::Api("throttled".into()));
    assert_eq!(
        sim.get(&i.provider_id).await.unwrap_err(),
        CloudError::Api("throttled".into())
    );
    // The injected error is used once.
    assert_eq!(
        sim.get(&i.provider_id).await.expect("exists").state,
        InstanceState::Pending
    );
    sim.list().await.expect("lists");
    sim.instance_types(&NodePool::test("default"), &nodeclass())
        .await
        .expect("lists");
    clock.set(at(50)).expect("forward");
    sim.delete(&i.provider_id).await.expect("deletes");

    let launch = Launch {
        instance_id: i.id.clone(),
        offering: launched(&i),
        price: i.price,
        refused: Vec::new(),
    };
    let pid = i.provider_id.clone();
    let expected = vec![
        CallRecord {
            at: at(0),
            call: Call::Create {
                nodeclaim: "a".into(),
                result: Ok(launch),
            },
        },
        CallRecord {
            at: at(5),
            call: Call::Get {
                provider_id: pid.clone(),
                result: Err(CloudError::Api("throttled".into())),
            },
        },
        CallRecord {
            at: at(5),
            call: Call::Get {
                provider_id: pid.clone(),
                result: Ok(InstanceState::Pending),
            },
        },
        CallRecord {
            at: at(5),
            call: Call::List { result: Ok(1) },
        },
        CallRecord {
            at: at(5),
            call: Call::InstanceTypes {
                nodepool: "default".into(),
                nodeclass: "default".into(),
                result: Ok(5),
            },
        },
        CallRecord {
            at: at(50),
            call: Call::Delete {
                provider_id: pid,
                result: Ok(()),
            },
        },
    ];
    assert_eq!(sim.calls(), expected);
    let methods: Vec<&str> = sim.calls().iter().map(|c| c.call.method()).collect();
    assert_eq!(
        methods,
        ["create", "get", "get", "list", "instance_types", "delete"]
    );

    // A failed create is logged with its error.
    let bad = req(INSTANCE_TYPE, api::Operator::In, &["m9.huge"]);
    let err = sim
        .create(&claim("b", &[bad]), &nodeclass(), &none())
        .await
        .unwrap_err();
    let last = sim.calls().pop().expect("recorded");
    assert_eq!(
        last.call,
        Call::Create {
            nodeclaim: "b".into(),
            result: Err(err)
        }
    );
    assert_eq!(sim.call_count(), sim.calls().len());
}

#[tokio::test]
async fn without_the_call_log_calls_are_counted_not_kept() {
    let mut config = config();
    config.call_log = false;
    let (sim, _clock) = sim_with(config);
    let i = sim
        .create(&claim("a", &[]), &nodeclass(), &none())
        .await
        .expect("launches")
        .instance;
    sim.fail_next(CloudError::Api("throttled".into()));
    sim.get(&i.provider_id).await.unwrap_err();
    sim.list().await.expect("lists");
    assert_eq!(sim.call_count(), 3);
    assert!(sim.calls().is_empty());
}

/// The shared data directory: beside the repository, or in an ancestor
/// of it (worktrees live elsewhere).
fn shared_catalog() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let beside = manifest.join("../shared/data/aws-catalog.json");
    if beside.is_file() {
        return beside;
    }
    manifest
        .ancestors()
        .map(|dir| dir.join("shared/data/aws-catalog.json"))
        .find(|p| p.is_file())
        .unwrap_or(beside)
}

#[tokio::test]
async fn the_full_shared_catalog_loads_and_launches() {
    let path = shared_catalog();
    let catalog =
        SimEc2::load_catalog(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    assert_eq!(catalog.len(), 1345);
    let clock = ManualClock::new(ts(START));
    let sim = SimEc2::new(SimConfig::new(catalog), Arc::new(clock));
    assert_eq!(sim.catalog().len(), 1345);
    assert!(sim.catalog().iter().all(|it| it.offerings.len() == 6));
    let gpu = sim
        .catalog()
        .iter()
        .find(|it| is_accelerated(it))
        .expect("the catalog has GPU types");
    let od = price_of(&sim, &offering(&gpu.name, "us-east-1a", "on-demand"));
    let spot = price_of(&sim, &offering(&gpu.name, "us-east-1a", "spot"));
    assert!((0.40 - 1e-9..=0.55 + 1e-9).contains(&(spot / od)));

    let i = sim
        .create(
            &claim("a", &[capacity(&["on-demand"])]),
            &nodeclass(),
            &none(),
        )
        .await
        .expect("launches")
        .instance;
    let cheapest = sim
        .catalog()
        .iter()
        .flat_map(|it| &it.offerings)
        .filter(|o| o.capacity_type == "on-demand")
        .map(|o| o.price)
        .fold(f64::INFINITY, f64::min);
    assert_eq!(i.price, cheapest);
    let types = sim
        .instance_types(&NodePool::test("default"), &nodeclass())
        .await
        .expect("lists");
    assert_eq!(types.len(), 1345);
}
