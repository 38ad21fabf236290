//! Unit and property tests of the solve.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;
use crate::model::labels::{HOSTNAME, ZONE};
use crate::model::{
    Effect, InstanceType, LabelSelector, Offering, Overhead, Requirement, Requirements, Resources,
    Taint, Toleration,
};

const ZONES: [&str; 3] = ["z1", "z2", "z3"];

/// An instance type with `cpu` cores, `mem_gi` GiB and `gpus` GPUs, offered
/// on-demand in every zone and spot in z1/z2 at 70%.
fn itype(name: &str, cpu: i64, mem_gi: i64, gpus: i64, price: f64) -> InstanceType {
    let mut alloc = Resources::new()
        .with("cpu", cpu * 1000 - 100)
        .with("memory", (mem_gi << 30) - (100 << 20))
        .with("pods", 110);
    if gpus > 0 {
        alloc.set("nvidia.com/gpu", gpus);
    }
    let mut offerings: Vec<Offering> = ZONES
        .iter()
        .map(|z| Offering {
            zone: z.to_string(),
            capacity_type: "on-demand".into(),
            price,
            available: true,
            reservations: Vec::new(),
        })
        .collect();
    for z in &ZONES[..2] {
        offerings.push(Offering {
            zone: z.to_string(),
            capacity_type: "spot".into(),
            price: price * 0.7,
            available: true,
            reservations: Vec::new(),
        });
    }
    let mut it = InstanceType {
        name: name.into(),
        requirements: Requirements::new(),
        capacity: Resources::new(),
        overhead: Overhead {
            kube_reserved: Resources::new().with("cpu", 100).with("memory", 100 << 20),
            ..Overhead::default()
        },
        allocatable: alloc,
        offerings,
    };
    it.complete_capacity();
    it.complete_requirements();
    it
}

pub(crate) fn catalog() -> Vec<InstanceType> {
    vec![
        itype("small", 2, 4, 0, 0.1),
        itype("medium", 4, 16, 0, 0.2),
        itype("large", 8, 32, 0, 0.4),
        itype("gpu", 8, 32, 1, 1.5),
    ]
}

fn pool(name: &str) -> NodePoolSpec {
    NodePoolSpec {
        name: name.into(),
        weight: 0,
        requirements: Requirements::new(),
        labels: BTreeMap::new(),
        taints: Vec::new(),
        startup_taints: Vec::new(),
        limits: Resources::new(),
        instance_types: catalog(),
    }
}

fn pod(name: &str, cpu_m: i64, mem_mi: i64) -> PodSpec {
    PodSpec::new(
        "default",
        name,
        Resources::new()
            .with("cpu", cpu_m)
            .with("memory", mem_mi << 20),
    )
}

fn labelled(mut p: PodSpec, k: &str, v: &str) -> PodSpec {
    std::sync::Arc::make_mut(&mut p.labels).insert(k.into(), v.into());
    p
}

fn selector(k: &str, v: &str) -> LabelSelector {
    LabelSelector {
        match_labels: [(k.to_string(), v.to_string())].into_iter().collect(),
        match_expressions: Vec::new(),
    }
}

pub(crate) fn term(k: &str, v: &str, key: &str) -> PodAffinityTerm {
    PodAffinityTerm {
        selector: selector(k, v),
        namespaces: Namespaces::Names(["default".to_string()].into_iter().collect()),
        topology_key: key.into(),
    }
}

pub(crate) fn spread(k: &str, v: &str, key: &str, skew: u32) -> TopologySpread {
    TopologySpread {
        topology_key: key.into(),
        max_skew: skew,
        min_domains: None,
        when_unsatisfiable: Unsatisfiable::DoNotSchedule,
        selector: selector(k, v),
        honor_node_affinity: true,
        honor_node_taints: false,
    }
}

fn node(name: &str, zone: &str, cpu_m: i64, mem_gi: i64) -> ExistingNode {
    ExistingNode {
        name: name.into(),
        nodepool: None,
        labels: std::sync::Arc::new(
            [
                (ZONE.to_string(), zone.to_string()),
                (HOSTNAME.to_string(), name.to_string()),
            ]
            .into_iter()
            .collect(),
        ),
        taints: Vec::new(),
        initialized: true,
        allocatable: Resources::new()
            .with("cpu", cpu_m)
            .with("memory", mem_gi << 30)
            .with("pods", 110),
        capacity: Resources::new()
            .with("cpu", cpu_m)
            .with("memory", mem_gi << 30)
            .with("pods", 110),
        pods: BoundPodList::default(),
        price: None,
        keys: NodeKeys::default(),
    }
}

fn run(input: &SolveInput) -> SolveResult {
    solve(input, &SolveOptions::default()).unwrap()
}

/// A node's keys are what its labels and allocatable say, read once, and
/// having read them leaves it equal to a node that has not.
#[test]
fn node_keys_are_its_labels_and_allocatable() {
    let mut n = node("n1", "us-east-1b", 4000, 16);
    std::sync::Arc::make_mut(&mut n.labels)
        .insert(crate::model::labels::CAPACITY_TYPE.into(), "spot".into());
    let fresh = n.clone();
    let want = Keys {
        zone: Some("us-east-1b".into()),
        capacity_type: Some("spot".into()),
        cpu_memory_pods: [4000, 16 << 30, 110],
    };
    assert_eq!(n.keys(), &want);
    assert_eq!(n, fresh);
    let bare = ExistingNode {
        labels: std::sync::Arc::default(),
        allocatable: Resources::new(),
        ..fresh
    };
    assert_eq!(
        bare.keys(),
        &Keys {
            zone: None,
            capacity_type: None,
            cpu_memory_pods: [0, 0, 0],
        }
    );
}

#[test]
fn one_pod_gets_the_cheapest_type() {
    let input = SolveInput {
        pods: shared(vec![pod("a", 500, 512)]),
        nodepools: vec![pool("general")],
        ..SolveInput::default()
    };
    let r = run(&input);
    assert_eq!(r.nodeclaims.len(), 1);
    let c = &r.nodeclaims[0];
    assert_eq!(c.instance_types[0], "small");
    assert_eq!(c.capacity_types, vec!["on-demand", "spot"]);
    assert!((r.price - 0.07).abs() < 1e-9, "spot small: {}", r.price);
    assert!(r.lower_bound > 0.0 && r.lower_bound <= r.price + 1e-9);
    assert_eq!(c.requests.get("pods"), 1);
}

#[test]
fn pods_fill_existing_capacity_first() {
    let input = SolveInput {
        nodes: vec![std::sync::Arc::new(node("n1", "z1", 2000, 8))],
        pods: shared(vec![
            pod("a", 1000, 512),
            pod("b", 1000, 512),
            pod("c", 1000, 512),
        ]),
        nodepools: vec![pool("general")],
        ..SolveInput::default()
    };
    let r = run(&input);
    assert_eq!(r.existing.len(), 1);
    assert_eq!(r.existing[0].pods.len(), 2);
    assert_eq!(r.nodeclaims.len(), 1);
    assert_eq!(r.nodeclaims[0].pods.len(), 1);
}

/// A bound pod takes its cpu, memory and any other resource it requests
/// from its node, and one pod slot when it requests none.
#[test]
fn bound_pods_take_their_requests_and_a_pod_slot_from_their_node() {
    let bound = |name: &str, requests: Resources| {
        std::sync::Arc::new(BoundPod::new(
            "default".into(),
            name.into(),
            BTreeMap::new(),
            requests,
            Vec::new(),
            Vec::new(),
        ))
    };
    let mut gpu_node = node("gpu", "z1", 8000, 32);
    gpu_node.allocatable.set("nvidia.com/gpu", 1);
    gpu_node.allocatable.set("pods", 2);
    let mut slots_node = node("slots", "z1", 8000, 32);
    slots_node.allocatable.set("pods", 1);
    gpu_node.pods = [bound(
        "trainer",
        Resources::new().with("cpu", 1000).with("nvidia.com/gpu", 1),
    )]
    .into();
    slots_node.pods = [bound("one", Resources::new().with("cpu", 100))].into();
    let gpu_pod = |name: &str| {
        PodSpec::new(
            "default",
            name,
            Resources::new().with("cpu", 100).with("nvidia.com/gpu", 1),
        )
    };
    let input = SolveInput {
        nodes: vec![gpu_node.into(), slots_node.into()],
        pods: shared(vec![gpu_pod("second-trainer"), pod("small", 100, 100)]),
        ..SolveInput::default()
    };
    let r = run(&input);
    // The GPU is taken, and the slots node's only pod slot: the GPU pod
    // fits nowhere, the small pod only beside the trainer.
    assert_eq!(r.unschedulable.len(), 1);
    assert_eq!(r.unschedulable[0].pod, "default/second-trainer");
    assert_eq!(r.existing.len(), 1);
    assert_eq!(r.existing[0].node, "gpu");
    assert_eq!(r.existing[0].pods, ["default/small"]);
}

#[test]
fn hostname_anti_affinity_forces_one_node_per_pod() {
    let pods: Vec<PodSpec> = (0..4)
        .map(|i| {
            let mut p = labelled(pod(&format!("p{i}"), 100, 100), "app", "web");
            p.anti_affinity.push(term("app", "web", HOSTNAME));
            p
        })
        .chain((0..4).map(|i| pod(&format!("q{i}"), 100, 100)))
        .collect();
    let input = SolveInput {
        pods: shared(pods),
        nodepools: vec![pool("general")],
        ..SolveInput::default()
    };
    let r = run(&input);
    assert_eq!(r.nodeclaims.len(), 4, "{:#?}", r.nodeclaims);
    for c in &r.nodeclaims {
        assert_eq!(c.pods.iter().filter(|p| p.contains("/p")).count(), 1);
    }
    assert!(r.unschedulable.is_empty());
}

#[test]
fn taints_need_tolerations_and_reasons_say_so() {
    let mut gpu = pool("gpu");
    gpu.taints
        .push(Taint::new("nvidia.com/gpu", "true", Effect::NoSchedule));
    let mut p = pod("needs-gpu", 1000, 1024);
    p.requests.set("nvidia.com/gpu", 1);
    let input = SolveInput {
        pods: shared(vec![p.clone()]),
        nodepools: vec![gpu.clone()],
        ..SolveInput::default()
    };
    let r = run(&input);
    assert_eq!(r.unschedulable.len(), 1);
    assert!(
        r.unschedulable[0]
            .reason
            .contains("taint nvidia.com/gpu=true:NoSchedule"),
        "{}",
        r.unschedulable[0].reason
    );
    p.tolerations.push(Toleration::any(None));
    let input = SolveInput {
        pods: shared(vec![p]),
        nodepools: vec![gpu],
        ..SolveInput::default()
    };
    let r = run(&input);
    assert!(r.unschedulable.is_empty());
    assert_eq!(r.nodeclaims[0].instance_types, vec!["gpu"]);
}

#[test]
fn too_many_gpus_is_explained() {
    let mut p = pod("big", 1000, 1024);
    p.requests.set("nvidia.com/gpu", 8);
    let input = SolveInput {
        pods: shared(vec![p]),
        nodepools: vec![pool("gpu")],
        ..SolveInput::default()
    };
    let r = run(&input);
    assert_eq!(
        r.unschedulable[0].reason,
        "no instance type in NodePool gpu has nvidia.com/gpu=8"
    );
}

#[test]
fn limits_hold_across_the_solve() {
    let mut p = pool("general");
    p.limits.set("cpu", 4000);
    let pods = (0..6)
        .map(|i| {
            let mut q = labelled(pod(&format!("p{i}"), 1500, 100), "app", "x");
            q.anti_affinity.push(term("app", "x", HOSTNAME));
            q
        })
        .map(std::sync::Arc::new)
        .collect();
    let input = SolveInput {
        pods,
        nodepools: vec![p],
        ..SolveInput::default()
    };
    let r = run(&input);
    // Each claim launches small (2 cpu), its cheapest type: two fit the
    // limit of 4 cpu. With no headroom left, neither may list medium too,
    // which could launch past the limit.
    assert_eq!(r.nodeclaims.len(), 2);
    for c in &r.nodeclaims {
        assert_eq!(c.instance_types, ["small"]);
    }
    assert_eq!(r.unschedulable.len(), 4);
    assert_eq!(
        r.unschedulable[0].reason,
        "NodePool general would exceed limit cpu=4: 4 is counted (0 on 0 node(s) and in-flight NodeClaim(s), 4 reserved by 2 NodeClaim(s) planned in this solve, each at the largest capacity among the instance types it may launch), and the smallest instance type that fits adds 2"
    );
}

#[test]
fn claims_list_larger_types_only_within_the_headroom_of_a_limit() {
    let mut p = pool("general");
    p.limits.set("cpu", 14000);
    let pods = (0..3)
        .map(|i| {
            let mut q = labelled(pod(&format!("p{i}"), 1500, 100), "app", "x");
            q.anti_affinity.push(term("app", "x", HOSTNAME));
            q
        })
        .map(std::sync::Arc::new)
        .collect();
    let input = SolveInput {
        pods,
        nodepools: vec![p],
        ..SolveInput::default()
    };
    let r = run(&input);
    // 3 claims reserve 2 cpu each; of the 8 cpu of headroom, the first
    // takes 6 to list the 8-cpu types too (large, and gpu, which also holds
    // the pod), the second the last 2 for medium, the third lists small.
    assert_eq!(r.nodeclaims.len(), 3);
    assert!(r.unschedulable.is_empty());
    let lists: Vec<&[String]> = r
        .nodeclaims
        .iter()
        .map(|c| c.instance_types.as_slice())
        .collect();
    assert_eq!(lists[0], ["small", "medium", "large", "gpu"]);
    assert_eq!(lists[1], ["small", "medium"]);
    assert_eq!(lists[2], ["small"]);
    // Whatever each claim launches, the limit holds.
    let cap = |t: &str| match t {
        "small" => 2,
        "medium" => 4,
        "large" | "gpu" => 8,
        other => panic!("unknown type {other}"),
    };
    let worst: i64 = lists
        .iter()
        .map(|l| l.iter().map(|t| cap(t)).max().unwrap())
        .sum();
    assert_eq!(worst, 14);
}

#[test]
fn zone_spread_balances_domains() {
    let pods = (0..6)
        .map(|i| {
            let mut p = labelled(pod(&format!("p{i}"), 1500, 100), "app", "s");
            p.spread.push(spread("app", "s", ZONE, 1));
            p.anti_affinity.push(term("app", "s", HOSTNAME));
            p
        })
        .map(std::sync::Arc::new)
        .collect();
    let input = SolveInput {
        pods,
        nodepools: vec![pool("general")],
        ..SolveInput::default()
    };
    let r = run(&input);
    let mut per_zone: BTreeMap<String, usize> = BTreeMap::new();
    for c in &r.nodeclaims {
        assert_eq!(c.zones.len(), 1);
        *per_zone.entry(c.zones[0].clone()).or_default() += c.pods.len();
    }
    assert_eq!(
        per_zone.values().copied().collect::<Vec<_>>(),
        vec![2, 2, 2]
    );
}

#[test]
fn heavier_nodepools_are_tried_first() {
    let mut a = pool("a");
    a.weight = 10;
    let b = pool("b");
    let input = SolveInput {
        pods: shared(vec![pod("x", 100, 100)]),
        nodepools: vec![b, a],
        ..SolveInput::default()
    };
    assert_eq!(run(&input).nodeclaims[0].nodepool, "a");
    // A pod may select its NodePool.
    let mut p = pod("y", 100, 100);
    p.node_selector
        .add("karpenter.sh/nodepool", Requirement::in_values(["b"]));
    let mut a = pool("a");
    a.weight = 10;
    let input = SolveInput {
        pods: shared(vec![p]),
        nodepools: vec![a, pool("b")],
        ..SolveInput::default()
    };
    assert_eq!(run(&input).nodeclaims[0].nodepool, "b");
}

#[test]
fn preferences_are_relaxed_or_ignored() {
    let mk = |i: usize| {
        let mut p = labelled(pod(&format!("p{i}"), 100, 1024), "app", "nginx");
        let mut z1 = Requirements::new();
        z1.add(ZONE, Requirement::in_values(["z1"]));
        p.preferred_terms.push((1, z1));
        p.preferred_anti_affinity
            .push((10, term("app", "nginx", ZONE)));
        p.preferred_anti_affinity
            .push((1, term("app", "nginx", HOSTNAME)));
        p
    };
    let input = SolveInput {
        pods: shared((0..5).map(mk)),
        nodepools: vec![pool("general")],
        ..SolveInput::default()
    };
    let r = run(&input);
    assert_eq!(r.nodeclaims.len(), 5);
    assert!(r.nodeclaims.iter().all(|c| c.zones == vec!["z1"]));
    let ignored = solve(
        &input,
        &SolveOptions {
            preferences: Preferences::Ignore,
            now_ms: 0,
        },
    )
    .unwrap();
    assert_eq!(ignored.nodeclaims.len(), 1);
}

#[test]
fn daemonset_overhead_is_counted_on_new_nodes() {
    let ds = DaemonSetSpec {
        name: "agent".into(),
        pod: pod("agent", 500, 256),
    };
    let input = SolveInput {
        pods: shared(vec![pod("a", 1500, 512)]),
        nodepools: vec![pool("general")],
        daemonsets: vec![ds],
        ..SolveInput::default()
    };
    let r = run(&input);
    let c = &r.nodeclaims[0];
    assert_eq!(c.requests.get("cpu"), 2000);
    assert_eq!(c.requests.get("pods"), 2);
    assert_eq!(
        c.instance_types[0], "medium",
        "1.9 cpu small cannot hold 2 cpu"
    );
}

#[test]
fn required_node_affinity_terms_are_tried_in_turn() {
    let mut p = pod("a", 100, 100);
    let mut nope = Requirements::new();
    nope.add("team", Requirement::in_values(["x"]));
    let mut z3 = Requirements::new();
    z3.add(ZONE, Requirement::in_values(["z3"]));
    p.required_terms = vec![nope, z3];
    let input = SolveInput {
        pods: shared(vec![p]),
        nodepools: vec![pool("general")],
        ..SolveInput::default()
    };
    let r = run(&input);
    assert_eq!(r.nodeclaims[0].zones, vec!["z3"]);
    assert_eq!(r.nodeclaims[0].capacity_types, vec!["on-demand"]);
}

#[test]
fn pod_affinity_follows_placed_pods() {
    let mut leader = labelled(pod("leader", 1000, 100), "app", "db");
    leader
        .node_selector
        .add(ZONE, Requirement::in_values(["z2"]));
    let mut follower = pod("follower", 2000, 100);
    follower.affinity.push(term("app", "db", ZONE));
    let mut alone = pod("alone", 100, 100);
    alone.affinity.push(term("app", "nobody", ZONE));
    let input = SolveInput {
        pods: shared(vec![follower, leader, alone]),
        nodepools: vec![pool("general")],
        ..SolveInput::default()
    };
    let r = run(&input);
    for c in &r.nodeclaims {
        assert_eq!(c.zones, vec!["z2"]);
    }
    assert_eq!(r.unschedulable.len(), 1);
    assert!(r.unschedulable[0].reason.contains("pod affinity on zone"));
}

// ---------------------------------------------------------------- properties

fn arb_pod(i: usize) -> impl Strategy<Value = PodSpec> {
    (
        prop_oneof![
            Just(100i64),
            Just(250),
            Just(500),
            Just(1000),
            Just(1500),
            Just(3000)
        ],
        prop_oneof![Just(128i64), Just(512), Just(1024), Just(4096)],
        0usize..7,
        0usize..4,
        any::<bool>(),
        0usize..3,
    )
        .prop_map(move |(cpu, mem, kind, zone, tol, app)| {
            let app = ["a", "b", "c"][app];
            let mut p = labelled(pod(&format!("p{i:03}"), cpu, mem), "app", app);
            p.created_ms = i as i64;
            match kind {
                1 => p.anti_affinity.push(term("app", app, HOSTNAME)),
                2 => p.spread.push(spread("app", app, ZONE, 1)),
                3 => p.affinity.push(term("app", app, ZONE)),
                4 => p.requests.set("nvidia.com/gpu", 1),
                5 => p.spread.push(spread("app", app, HOSTNAME, 1)),
                _ => {}
            }
            if zone < 3 {
                p.node_selector
                    .add(ZONE, Requirement::in_values([ZONES[zone]]));
            }
            if tol {
                p.tolerations.push(Toleration::any(None));
            }
            p
        })
}

fn arb_input() -> impl Strategy<Value = SolveInput> {
    let pods = (0usize..18).prop_flat_map(|n| (0..n).map(arb_pod).collect::<Vec<_>>());
    let nodes = proptest::collection::vec((0usize..3, 1i64..5), 0..3);
    (pods, nodes, any::<bool>(), 0i64..3, any::<bool>()).prop_map(
        |(pods, nodes, tainted, limit, second)| {
            let mut general = pool("general");
            if limit > 0 {
                general.limits.set("cpu", limit * 8000);
            }
            let mut pools = vec![general];
            if second {
                let mut gpu = pool("gpu");
                gpu.weight = 5;
                if tainted {
                    gpu.taints
                        .push(Taint::new("nvidia.com/gpu", "", Effect::NoSchedule));
                }
                pools.push(gpu);
            }
            let nodes = nodes
                .into_iter()
                .enumerate()
                .map(|(i, (z, c))| {
                    std::sync::Arc::new(node(&format!("n{i}"), ZONES[z], c * 1000, c * 2))
                })
                .collect();
            SolveInput {
                nodes,
                pods: shared(pods),
                nodepools: pools,
                daemonsets: Vec::new(),
            }
        },
    )
}

/// A node or claim in a result: its labels, pods and zones.
type Target<'a> = (BTreeMap<String, String>, Vec<&'a PodSpec>, BTreeSet<String>);

/// Pods as the solver's input holds them.
pub(crate) fn shared(pods: impl IntoIterator<Item = PodSpec>) -> Vec<std::sync::Arc<PodSpec>> {
    pods.into_iter().map(std::sync::Arc::new).collect()
}

/// Checks every invariant of a result against its input.
pub(crate) fn check(input: &SolveInput, r: &SolveResult) -> Result<(), TestCaseError> {
    let pods: BTreeMap<String, &PodSpec> = input.pods.iter().map(|p| (p.key(), &**p)).collect();
    let types: BTreeMap<&str, &InstanceType> = input
        .nodepools
        .iter()
        .flat_map(|p| p.instance_types.iter())
        .map(|t| (t.name.as_str(), t))
        .collect();
    // Every pod is in exactly one place.
    let mut seen = BTreeSet::new();
    for k in r
        .nodeclaims
        .iter()
        .flat_map(|c| c.pods.iter())
        .chain(r.existing.iter().flat_map(|e| e.pods.iter()))
        .chain(r.unschedulable.iter().map(|u| &u.pod))
    {
        prop_assert!(seen.insert(k.clone()), "{} placed twice", k);
    }
    prop_assert_eq!(seen.len(), input.pods.len());
    // (target labels, pods) for topology checks; each claim is its own host.
    let mut placed: Vec<Target> = Vec::new();
    for e in &r.existing {
        let n = input.nodes.iter().find(|n| n.name == e.node).unwrap();
        let mut sum = Resources::new();
        for k in &e.pods {
            let p = pods[k];
            sum.add(&p.requests);
            prop_assert!(p.node_selector.matches_labels(&n.labels).is_ok());
            prop_assert!(
                crate::model::taints::first_untolerated(&n.taints, &p.tolerations, true).is_none()
            );
        }
        prop_assert!(
            sum.fits_in(&n.allocatable),
            "node {} over allocatable",
            n.name
        );
        let zones = n.labels.get(ZONE).into_iter().cloned().collect();
        placed.push((
            (*n.labels).clone(),
            e.pods.iter().map(|k| pods[k]).collect(),
            zones,
        ));
    }
    let mut cap_used: BTreeMap<&str, i64> = BTreeMap::new();
    for c in &r.nodeclaims {
        let np = input
            .nodepools
            .iter()
            .find(|p| p.name == c.nodepool)
            .unwrap();
        prop_assert!(!c.instance_types.is_empty());
        let mut sum = Resources::new();
        for k in &c.pods {
            let p = pods[k];
            sum.add(&p.requests);
            prop_assert!(
                crate::model::taints::first_untolerated(&np.taints, &p.tolerations, true).is_none(),
                "pod {} on tainted pool {}",
                k,
                np.name
            );
            if let Some(zr) = p.node_selector.get(ZONE) {
                prop_assert!(
                    c.zones.iter().all(|z| zr.has(z)),
                    "zones {:?} for {}",
                    c.zones,
                    k
                );
            }
        }
        prop_assert_eq!(&sum.get("cpu"), &c.requests.get("cpu"));
        let mut max_cpu = 0;
        for t in &c.instance_types {
            let it = types[t.as_str()];
            prop_assert!(sum.fits_in(&it.allocatable), "{} cannot hold its pods", t);
            prop_assert!(it.offerings.iter().any(|o| o.available
                && c.zones.contains(&o.zone)
                && c.capacity_types.contains(&o.capacity_type)));
            max_cpu = max_cpu.max(it.capacity.get("cpu"));
        }
        *cap_used.entry(np.name.as_str()).or_default() += max_cpu;
        let cheapest = c
            .instance_types
            .iter()
            .flat_map(|t| types[t.as_str()].offerings.iter())
            .filter(|o| {
                o.available
                    && c.zones.contains(&o.zone)
                    && c.capacity_types.contains(&o.capacity_type)
            })
            .map(|o| o.price)
            .fold(f64::INFINITY, f64::min);
        prop_assert!((cheapest - c.price).abs() < 1e-9);
        let labels = BTreeMap::new();
        placed.push((
            labels,
            c.pods.iter().map(|k| pods[k]).collect(),
            c.zones.iter().cloned().collect(),
        ));
    }
    for np in &input.nodepools {
        let lim = np.limits.get("cpu");
        if np.limits.0.contains_key("cpu") {
            prop_assert!(cap_used.get(np.name.as_str()).copied().unwrap_or(0) <= lim);
        }
    }
    // Anti-affinity on hostname and zone affinity.
    for (_, ps, zones) in &placed {
        for p in ps {
            for t in &p.anti_affinity {
                let clash = ps
                    .iter()
                    .filter(|q| q.key() != p.key() && t.selector.matches(&q.labels))
                    .count();
                prop_assert_eq!(clash, 0, "anti-affinity of {} broken", p.key());
            }
            for t in &p.affinity {
                prop_assert_eq!(
                    zones.len(),
                    1,
                    "affinity pod {} on multi-zone target",
                    p.key()
                );
                let z = zones.iter().next().unwrap();
                let peers = placed
                    .iter()
                    .filter(|(_, _, zs)| zs.len() == 1 && zs.contains(z))
                    .flat_map(|(_, qs, _)| qs.iter())
                    .filter(|q| t.selector.matches(&q.labels))
                    .count();
                prop_assert!(peers > 0);
            }
            if p.spread.iter().any(|s| s.topology_key == ZONE) {
                prop_assert_eq!(
                    zones.len(),
                    1,
                    "spread pod {} on multi-zone target",
                    p.key()
                );
            }
        }
    }
    prop_assert!(
        r.price + 1e-6 >= r.lower_bound,
        "price {} below lower bound {}",
        r.price,
        r.lower_bound
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn solutions_are_valid(input in arb_input()) {
        let r = solve(&input, &SolveOptions::default()).unwrap();
        check(&input, &r)?;
        let ignored = solve(&input, &SolveOptions { preferences: Preferences::Ignore, now_ms: 0 }).unwrap();
        check(&input, &ignored)?;
    }

    /// The bound computed alone is bit for bit the one a solve reports.
    #[test]
    fn the_bound_alone_is_the_solves(input in arb_input()) {
        for opts in [SolveOptions::default(), SolveOptions { preferences: Preferences::Ignore, now_ms: 0 }] {
            let r = solve(&input, &opts).unwrap();
            let alone = crate::scheduling::lower_bound_only(&input, &opts).unwrap();
            prop_assert_eq!(alone.to_bits(), r.lower_bound.to_bits());
        }
    }

    /// The trial order is cpu, then memory (both largest first), creation
    /// time, namespace and name, then input position: pods alike in all but
    /// position keep their input order.
    #[test]
    fn pods_are_tried_in_size_age_and_name_order(
        pods in proptest::collection::vec(
            (0..3i64, 0..3i64, 0..3i64, 0..2usize, 0..3usize), 0..40),
    ) {
        let pods: Vec<std::sync::Arc<PodSpec>> = pods
            .into_iter()
            .map(|(cpu, mem, created, ns, name)| {
                let mut p = PodSpec::new(
                    ["a", "b"][ns],
                    ["x", "y", "z"][name],
                    Resources::new().with(CPU, cpu * 500).with(MEMORY, mem << 30),
                );
                p.created_ms = created;
                std::sync::Arc::new(p)
            })
            .collect();
        let order = crate::scheduling::pod_order(&pods);
        let mut sorted: Vec<usize> = (0..pods.len()).collect();
        prop_assert_eq!(order.len(), sorted.len());
        sorted.sort_by_key(|&i| {
            let p = &pods[i];
            (
                std::cmp::Reverse(p.requests.get(CPU)),
                std::cmp::Reverse(p.requests.get(MEMORY)),
                p.created_ms,
                p.namespace.clone(),
                p.name.clone(),
            )
        });
        prop_assert_eq!(order, sorted);
    }

    #[test]
    fn deterministic_and_independent_of_input_order(input in arb_input(), seed in any::<u64>()) {
        let a = solve(&input, &SolveOptions::default()).unwrap();
        let b = solve(&input, &SolveOptions::default()).unwrap();
        prop_assert_eq!(&a, &b);
        let mut shuffled = input.clone();
        let rot = |n: usize| if n == 0 { 0 } else { (seed as usize) % n };
        let k = rot(shuffled.nodes.len());
        shuffled.nodes.rotate_left(k);
        shuffled.nodepools.reverse();
        let k = rot(shuffled.pods.len());
        shuffled.pods.rotate_left(k);
        let c = solve(&shuffled, &SolveOptions::default()).unwrap();
        prop_assert_eq!(&a.nodeclaims, &c.nodeclaims);
        prop_assert_eq!(&a.existing, &c.existing);
        prop_assert_eq!(&a.unschedulable, &c.unschedulable);
    }
}

/// Topology spread on a key the instance types define and the NodePool
/// does not (a placement group's partitions): its values are domains, and
/// each claim is pinned to one, as Karpenter's per-partition offerings make
/// them.
#[test]
fn spread_over_a_key_the_instance_types_define() {
    const PARTITION: &str = "karpenter.k8s.aws/placement-group-partition";
    let mut np = pool("general");
    for it in &mut np.instance_types {
        it.requirements
            .add(PARTITION, Requirement::in_values(["1", "2", "3"]));
    }
    let pods: Vec<PodSpec> = (0..6)
        .map(|i| {
            let mut p = labelled(pod(&format!("p{i}"), 1500, 512), "app", "hpc");
            p.spread.push(spread("app", "hpc", PARTITION, 1));
            p
        })
        .collect();
    let input = SolveInput {
        pods: shared(pods),
        nodepools: vec![np],
        ..SolveInput::default()
    };
    let r = run(&input);
    assert!(r.unschedulable.is_empty(), "{:?}", r.unschedulable);
    let mut per: BTreeMap<String, usize> = BTreeMap::new();
    for c in &r.nodeclaims {
        let p = c
            .requirements
            .single_value(PARTITION)
            .unwrap_or_else(|| panic!("each claim pinned to a partition: {c:?}"));
        *per.entry(p.to_string()).or_default() += c.pods.len();
    }
    assert_eq!(
        per.into_iter().collect::<Vec<_>>(),
        [("1".into(), 2), ("2".into(), 2), ("3".into(), 2)]
    );
}
