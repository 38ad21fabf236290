//! Decisions on small clusters, and the property that consolidation never
//! raises the price.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::model::Resources;
use crate::scheduling::removal::Removals;
use crate::scheduling::types::{BoundPod, ExistingNode, NodeKeys, PodSpec, SolveInput};
use crate::scheduling::{Preferences, SolveOptions};

/// Prices of the test catalog's on-demand offerings (spot is 70% of it in
/// z1 and z2): small 2 cpu, medium 4, large 8.
fn price(t: &str) -> f64 {
    match t {
        "small" => 0.1,
        "medium" => 0.2,
        "large" => 0.4,
        _ => 1.5,
    }
}

fn cpu_of(t: &str) -> i64 {
    match t {
        "small" => 2000,
        "medium" => 4000,
        _ => 8000,
    }
}

#[derive(Debug)]
struct Fixture {
    input: SolveInput,
    homes: Vec<String>,
    candidates: Vec<Candidate>,
}

/// A cluster of on-demand nodes in z1, each `(name, type, [pod cpu in m])`.
fn cluster(nodes: &[(&str, &str, &[i64])]) -> Fixture {
    let mut input = SolveInput {
        nodepools: vec![crate::scheduling::NodePoolSpec {
            name: "general".into(),
            weight: 0,
            requirements: crate::model::Requirements::new(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            startup_taints: Vec::new(),
            limits: Resources::new(),
            instance_types: crate::scheduling::tests::catalog(),
        }],
        ..SolveInput::default()
    };
    let mut homes = Vec::new();
    let mut candidates = Vec::new();
    for (name, it, pods) in nodes {
        let labels: BTreeMap<String, String> = [
            ("kubernetes.io/hostname", *name),
            ("topology.kubernetes.io/zone", "z1"),
            ("karpenter.sh/nodepool", "general"),
            ("karpenter.sh/capacity-type", "on-demand"),
            ("node.kubernetes.io/instance-type", it),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let alloc = Resources::new()
            .with("cpu", cpu_of(it) - 100)
            .with("memory", (cpu_of(it) / 1000) << 32)
            .with("pods", 110);
        let mut bound = Vec::new();
        for (i, cpu) in pods.iter().enumerate() {
            let pod_name = format!("{name}-p{i}");
            let req = Resources::new()
                .with("cpu", *cpu)
                .with("memory", 256 << 20)
                .with("pods", 1);
            bound.push(Arc::new(BoundPod::new(
                "default".into(),
                pod_name.clone(),
                BTreeMap::new(),
                req.clone(),
                Vec::new(),
                Vec::new(),
            )));
            input
                .pods
                .push(std::sync::Arc::new(PodSpec::new("default", &pod_name, req)));
            homes.push(name.to_string());
        }
        input.nodes.push(Arc::new(ExistingNode {
            name: name.to_string(),
            nodepool: Some("general".into()),
            labels: Arc::new(labels),
            taints: Vec::new(),
            initialized: true,
            allocatable: alloc.clone(),
            capacity: alloc,
            pods: bound.into(),
            price: Some(price(it)),
            keys: NodeKeys::default(),
        }));
        candidates.push(Candidate {
            zone: "z1".into(),
            pods: pods.len(),
            disruption_cost: pods.len() as f64,
            ..Candidate::test(name, it, price(it))
        });
    }
    Fixture {
        input,
        homes,
        candidates,
    }
}

fn opts() -> SolveOptions {
    SolveOptions {
        preferences: Preferences::Respect,
        now_ms: 0,
    }
}

fn run(f: &Fixture, budgets: BTreeMap<String, Allowed>, consolidation: bool) -> Outcome {
    run_with(f, budgets, consolidation, BTreeSet::new())
}

fn run_with(
    f: &Fixture,
    budgets: BTreeMap<String, Allowed>,
    consolidation: bool,
    uninitialized: BTreeSet<String>,
) -> Outcome {
    run_opts(f, budgets, consolidation, uninitialized, &opts())
}

fn run_opts(
    f: &Fixture,
    budgets: BTreeMap<String, Allowed>,
    consolidation: bool,
    uninitialized: BTreeSet<String>,
    opts: &SolveOptions,
) -> Outcome {
    let homes: Vec<&str> = f.homes.iter().map(String::as_str).collect();
    let mut removals = Removals::new(&f.input, &homes, opts).unwrap();
    let pass = Pass {
        candidates: &f.candidates,
        budgets,
        consolidation,
        pools: &f.input.nodepools,
        options: Options::default(),
        uninitialized,
        statics: BTreeMap::new(),
        prepared: None,
    };
    decide(&pass, &mut removals)
}

fn unbounded() -> BTreeMap<String, Allowed> {
    BTreeMap::new()
}

fn budget(reason: Reason, n: usize) -> BTreeMap<String, Allowed> {
    let mut a = Allowed {
        total: 10,
        disrupting: 0,
        limit: BTreeMap::new(),
        scheduled: Default::default(),
    };
    for r in Reason::VOLUNTARY {
        a.limit.insert(r, None);
    }
    a.limit.insert(reason, Some(n));
    BTreeMap::from([("general".to_string(), a)])
}

fn nodes_of(cmd: &Command) -> Vec<&str> {
    cmd.candidates.iter().map(|c| &*c.node).collect()
}

#[test]
fn empty_nodes_are_deleted_within_the_empty_budget() {
    let f = cluster(&[
        ("a", "medium", &[]),
        ("b", "medium", &[]),
        ("c", "medium", &[1000]),
    ]);
    let cmd = run(&f, unbounded(), true).command.unwrap();
    assert_eq!(cmd.method, Method::Emptiness);
    assert_eq!(nodes_of(&cmd), ["a", "b"]);
    assert_eq!(cmd.decision(), "delete");
    assert!((cmd.savings - 0.4).abs() < 1e-9);
    let one = run(&f, budget(Reason::Empty, 1), true).command.unwrap();
    assert_eq!(nodes_of(&one), ["a"]);
    // Consolidation off (pods waiting for capacity): nothing.
    assert!(run(&f, unbounded(), false).command.is_none());
}

#[test]
fn underused_nodes_are_consolidated_together() {
    // Three medium nodes at 1 cpu each: two can go, their pods fit the third.
    let f = cluster(&[
        ("a", "medium", &[1000]),
        ("b", "medium", &[1000]),
        ("c", "medium", &[1000]),
    ]);
    let cmd = run(&f, unbounded(), true).command.unwrap();
    assert_eq!(cmd.method, Method::MultiNodeConsolidation);
    // All three go: their 3 cpu fit one medium node, at its spot price
    // (0.14/h), which saves more than deleting two (0.4/h).
    assert_eq!(cmd.decision(), "replace");
    assert_eq!(cmd.candidates.len(), 3);
    assert!((cmd.savings - (0.6 - 0.14)).abs() < 1e-9, "{}", cmd.savings);
    // A budget of one leaves it to single-node consolidation, one at a time.
    let one = run(&f, budget(Reason::Underutilized, 1), true)
        .command
        .unwrap();
    assert_eq!(one.method, Method::SingleNodeConsolidation);
    assert_eq!(one.candidates.len(), 1);
    // A budget of zero blocks consolidation.
    assert!(
        run(&f, budget(Reason::Underutilized, 0), true)
            .command
            .is_none()
    );
}

#[test]
fn a_node_is_replaced_by_a_strictly_cheaper_one() {
    // A large node (0.4/h) holding 1.5 cpu: a small one (0.1/h, or spot) holds it.
    let f = cluster(&[("a", "large", &[1500])]);
    let cmd = run(&f, unbounded(), true).command.unwrap();
    assert_eq!(cmd.method, Method::SingleNodeConsolidation);
    assert_eq!(cmd.decision(), "replace");
    let r = &cmd.replacements[0];
    // Every type listed has an offering strictly cheaper than the node's
    // (large itself only as spot), cheapest first.
    assert_eq!(r.instance_types, ["small", "medium", "large"]);
    assert!((r.price - 0.07).abs() < 1e-9, "{r:?}");
    assert!((cmd.savings - 0.33).abs() < 1e-9);
    // In an on-demand pool, a small node is already the cheapest that
    // holds its pod: the same type at the same price is never launched.
    let mut g = cluster(&[("a", "small", &[1500])]);
    g.input.nodepools[0].requirements.add(
        "karpenter.sh/capacity-type",
        crate::model::Requirement::in_values(["on-demand"]),
    );
    assert!(run(&g, unbounded(), true).command.is_none());
}

#[test]
fn blocked_nodes_are_left_alone_and_drift_replaces_within_budget() {
    let mut f = cluster(&[("a", "medium", &[1000]), ("b", "medium", &[1000])]);
    for c in &mut f.candidates {
        c.blocked = Some("pod default/x has karpenter.sh/do-not-disrupt".into());
        c.drift = vec![DriftReason::NodePoolTemplate { fields: vec![] }];
    }
    assert!(run(&f, unbounded(), true).command.is_none());
    for c in &mut f.candidates {
        c.blocked = None;
    }
    let cmd = run(&f, budget(Reason::Drifted, 1), true).command.unwrap();
    assert_eq!(cmd.method, Method::Drift);
    assert_eq!(cmd.candidates.len(), 1);
    // Its pod fits the other node: no replacement needed.
    assert_eq!(cmd.decision(), "delete");
    assert!(run(&f, budget(Reason::Drifted, 0), false).command.is_none());
}

#[test]
fn pods_protections_block_drift_only_without_a_termination_grace_period() {
    let mut f = cluster(&[("a", "medium", &[1000]), ("b", "medium", &[1000])]);
    for c in &mut f.candidates {
        c.pods_blocked = Some("pod default/x has karpenter.sh/do-not-disrupt".into());
        c.drift = vec![DriftReason::NodePoolTemplate { fields: vec![] }];
    }
    assert!(run(&f, unbounded(), true).command.is_none());
    for c in &mut f.candidates {
        c.termination_grace_period = true;
    }
    let cmd = run(&f, unbounded(), true).command.unwrap();
    assert_eq!(cmd.method, Method::Drift);
    // Consolidation never takes them, grace period or not.
    for c in &mut f.candidates {
        c.drift.clear();
    }
    assert!(run(&f, unbounded(), true).command.is_none());
    // A node's own do-not-disrupt blocks drift even with a grace period.
    for c in &mut f.candidates {
        c.drift = vec![DriftReason::NodePoolTemplate { fields: vec![] }];
        c.blocked = Some("node has karpenter.sh/do-not-disrupt".into());
    }
    assert!(run(&f, unbounded(), true).command.is_none());
}

#[test]
fn a_plan_never_relies_on_an_uninitialized_node() {
    // a's pod fits b alone; b is not initialized: no delete of a.
    let f = cluster(&[("a", "medium", &[1000]), ("b", "medium", &[])]);
    let mut only_a = f.candidates.clone();
    only_a.truncate(1);
    let f = Fixture {
        candidates: only_a,
        ..f
    };
    let cmd = run(&f, unbounded(), true).command.unwrap();
    assert_eq!(cmd.decision(), "delete");
    let out = run_with(&f, unbounded(), true, BTreeSet::from(["b".to_string()]));
    // Only a replacement of its own (strictly cheaper) would do.
    if let Some(cmd) = &out.command {
        assert_eq!(cmd.decision(), "replace", "{cmd:?}");
        assert!(cmd.replacements.iter().all(|r| r.price < 0.2));
    }
}

#[test]
fn two_nodes_are_not_merged_into_one_of_the_same_type() {
    // Karpenter's "won't merge 2 nodes into 1 of the same type": two
    // medium nodes whose pods fit one medium are a delete of one of them,
    // never a replacement of both by a new medium.
    let mut f = cluster(&[("a", "medium", &[1500]), ("b", "medium", &[1500])]);
    f.input.nodepools[0].requirements.add(
        "karpenter.sh/capacity-type",
        crate::model::Requirement::in_values(["on-demand"]),
    );
    let cmd = run(&f, unbounded(), true).command.unwrap();
    assert_eq!(cmd.decision(), "delete", "{cmd:?}");
    assert_eq!(cmd.candidates.len(), 1);
    for r in &cmd.replacements {
        assert!(!r.instance_types.contains(&"medium".to_string()), "{r:?}");
    }
}

#[test]
fn a_multi_node_replacement_is_cheaper_than_each_candidate_of_its_type() {
    // A large (0.4) and a small (0.1) whose pods need a medium (0.2): the
    // merge saves money, but a replacement of type small would have to cost
    // under 0.1 (it cannot hold them anyway), and medium is not among the
    // candidates' types, so it stays.
    let mut f = cluster(&[("a", "large", &[1500]), ("b", "small", &[1500])]);
    f.input.nodepools[0].requirements.add(
        "karpenter.sh/capacity-type",
        crate::model::Requirement::in_values(["on-demand"]),
    );
    let cmd = run(&f, unbounded(), true).command.unwrap();
    assert_eq!(cmd.method, Method::MultiNodeConsolidation);
    assert_eq!(cmd.replacements.len(), 1);
    assert_eq!(cmd.replacements[0].instance_types[0], "medium");
    // With the small one's price below any type that holds them, the same
    // rule leaves only types under its price: none, so no merge.
    let claim = NewNodeClaim {
        instance_types: vec!["small".into(), "medium".into()],
        ..cmd.replacements[0].clone()
    };
    let cs: Vec<&Candidate> = f.candidates.iter().collect();
    assert!((same_type_cap(&claim, &cs) - 0.1).abs() < 1e-9);
}

#[test]
fn spot_is_replaced_by_spot_only_with_enough_cheaper_types() {
    let mut f = cluster(&[("a", "large", &[1500])]);
    f.candidates[0].capacity_type = "spot".into();
    f.candidates[0].price = 0.28;
    // By default (the reference's SpotToSpotConsolidation=false) a spot
    // node is replaced by on-demand capacity only.
    let cmd = run(&f, unbounded(), true).command.unwrap();
    assert_eq!(cmd.replacements[0].capacity_types, ["on-demand"]);
    // With spot-to-spot: the test catalog has 4 types, fewer than 15
    // cheaper spot types, so no spot replacement; on-demand is dearer than
    // the spot replacement would be, so none at all.
    let homes: Vec<&str> = f.homes.iter().map(String::as_str).collect();
    let mut removals = Removals::new(&f.input, &homes, &opts()).unwrap();
    let pass = Pass {
        candidates: &f.candidates,
        budgets: unbounded(),
        consolidation: true,
        pools: &f.input.nodepools,
        options: Options { spot_to_spot: true },
        uninitialized: BTreeSet::new(),
        statics: BTreeMap::new(),
        prepared: None,
    };
    let cmd = decide(&pass, &mut removals).command;
    assert!(cmd.is_none(), "{cmd:?}");
}

/// Every command a pass returns for consolidation lowers the fleet's price:
/// the candidates' price is above what replaces them.
fn arb_cluster() -> impl Strategy<Value = Vec<(String, &'static str, Vec<i64>)>> {
    prop::collection::vec(
        (
            prop::sample::select(vec!["small", "medium", "large"]),
            prop::collection::vec(250i64..3000, 0..4),
        ),
        1..7,
    )
    .prop_map(|nodes| {
        nodes
            .into_iter()
            .enumerate()
            .map(|(i, (t, pods))| {
                // Keep each node's pods within its allocatable.
                let cap = cpu_of(t) - 100;
                let mut sum = 0;
                let pods = pods
                    .into_iter()
                    .filter(|p| {
                        sum += p;
                        sum <= cap
                    })
                    .collect();
                (format!("n{i}"), t, pods)
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn consolidation_never_raises_the_price(nodes in arb_cluster()) {
        let spec: Vec<(&str, &str, &[i64])> = nodes
            .iter()
            .map(|(n, t, p)| (n.as_str(), *t, p.as_slice()))
            .collect();
        let f = cluster(&spec);
        let out = run(&f, unbounded(), true);
        if let Some(cmd) = out.command {
            let before: f64 = cmd.candidates.iter().map(|c| c.price).sum();
            let after: f64 = cmd.replacements.iter().map(|r| r.price).sum();
            prop_assert!(after < before - 1e-9, "{cmd:?}");
            prop_assert!(cmd.savings > 0.0);
            if cmd.method != Method::Emptiness {
                prop_assert!(cmd.replacements.len() <= 1);
            }
        }
    }
}

/// `arb_cluster()`'s nodes, each candidate flagged as drawn: `grace` sets
/// a termination grace period (even) and PDB-blocked pods (a multiple of
/// 3); then drifted, blocked, consolidatable.
fn flagged(
    nodes: &[(String, &'static str, Vec<i64>)],
    flags: Vec<(u8, bool, bool, bool)>,
) -> Fixture {
    let spec: Vec<(&str, &str, &[i64])> = nodes
        .iter()
        .map(|(n, t, p)| (n.as_str(), *t, p.as_slice()))
        .collect();
    let mut f = cluster(&spec);
    for (c, (grace, drifted, blocked, consolidatable)) in f.candidates.iter_mut().zip(flags) {
        c.termination_grace_period = grace % 2 == 0;
        if grace % 3 == 0 {
            c.pods_blocked = Some("a PodDisruptionBudget".to_string());
        }
        if drifted {
            c.drift.push(DriftReason::InstanceType {
                instance_type: c.instance_type.to_string(),
                why: "no longer exists".into(),
            });
        }
        c.blocked = blocked.then(|| "a PodDisruptionBudget".to_string());
        c.consolidatable = consolidatable;
    }
    f
}

prop_compose! {
    /// A pass's facts: `arb_cluster()`'s nodes [`flagged`], no budget or one
    /// for a voluntary reason with room for fewer than `room` nodes, and
    /// whether consolidation may run.
    fn arb_pass(room: usize)(
        nodes in arb_cluster(),
        flags in prop::collection::vec((0u8..8, any::<bool>(), any::<bool>(), any::<bool>()), 7),
        consolidation in any::<bool>(),
        budget_of in prop::option::of((0u8..3, 0usize..room)),
    ) -> (Fixture, BTreeMap<String, Allowed>, bool) {
        let budgets = match budget_of {
            None => unbounded(),
            Some((r, n)) => budget(Reason::VOLUNTARY[usize::from(r)], n),
        };
        (flagged(&nodes, flags), budgets, consolidation)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]
    /// A pass with no `movers` decides the same with no
    /// scheduling input at all: the controller skips building it then.
    #[test]
    fn a_pass_that_needs_no_removals_decides_without_the_cluster(
        (f, budgets, consolidation) in arb_pass(3),
    ) {
        prop_assume!(movers(&f.candidates, &budgets, consolidation, &BTreeSet::new()).is_empty());
        let full = run(&f, budgets.clone(), consolidation);
        let bare = Fixture {
            input: SolveInput {
                nodepools: f.input.nodepools.clone(),
                ..SolveInput::default()
            },
            homes: Vec::new(),
            candidates: f.candidates.clone(),
        };
        let without = run(&bare, budgets, consolidation);
        prop_assert_eq!(full.trials, 0);
        prop_assert_eq!(full.command, without.command);
    }
}

/// The nodes `movers` names for `f`'s candidates.
fn mover_nodes(
    f: &Fixture,
    budgets: &BTreeMap<String, Allowed>,
    consolidation: bool,
) -> Vec<String> {
    movers(&f.candidates, budgets, consolidation, &BTreeSet::new())
        .iter()
        .map(|c| c.node.to_string())
        .collect()
}

/// A drifted node whose NodePool's drift budget is taken (a rollout with
/// its nodes in flight) needs no trial: the pass skips the cluster's
/// scheduling input, and decides nothing, as with the input. With room for
/// one, only the first drifted node's pods may move.
#[test]
fn a_pass_whose_budget_is_taken_needs_no_removals() {
    let mut f = cluster(&[("a", "medium", &[1000]), ("b", "large", &[500])]);
    for c in &mut f.candidates {
        let instance_type = c.instance_type.to_string();
        c.drift.push(DriftReason::InstanceType {
            instance_type,
            why: "no longer exists".into(),
        });
    }
    assert_eq!(mover_nodes(&f, &unbounded(), false).len(), 2);
    let first = by_cost(&f.candidates)[0].node.to_string();
    assert_eq!(mover_nodes(&f, &budget(Reason::Drifted, 1), false), [first]);
    let taken = budget(Reason::Drifted, 0);
    assert!(mover_nodes(&f, &taken, false).is_empty());
    assert!(run(&f, taken, false).command.is_none());
    // Another reason's budget leaves drift's room.
    assert_eq!(
        mover_nodes(&f, &budget(Reason::Underutilized, 0), false).len(),
        2
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]
    /// A pass decides the same when the scheduling input's pods that may
    /// move are only the `movers`' pods: no trial takes another node.
    #[test]
    fn a_pass_decides_the_same_with_only_the_movers_pods(
        (f, budgets, consolidation) in arb_pass(4),
    ) {
        let moving: BTreeSet<String> = mover_nodes(&f, &budgets, consolidation).into_iter().collect();
        let full = run(&f, budgets.clone(), consolidation);
        let restricted = run(&pods_of(&f, &moving), budgets, consolidation);
        prop_assert_eq!(full.command, restricted.command);
        prop_assert_eq!(full.trials, restricted.trials);
        prop_assert_eq!(full.unconsolidatable, restricted.unconsolidatable);
    }

    /// A pass over the pods of the first movers alone ([`first_movers`])
    /// decides what it decides over every mover's, or stops at a drifted
    /// node whose pods it does not hold, having decided nothing, where the
    /// full pass went on to try that node.
    #[test]
    fn a_pass_over_the_first_movers_decides_the_same_or_asks_for_the_rest(
        (f, budgets, consolidation) in arb_pass(4),
    ) {
        let none = BTreeSet::new();
        let all = movers(&f.candidates, &budgets, consolidation, &none);
        let first: BTreeSet<String> = first_movers(&all, consolidation, &none)
            .iter()
            .map(|c| c.node.to_string())
            .collect();
        let full = run(&f, budgets.clone(), consolidation);
        let only = pods_of(&f, &first);
        let homes: Vec<&str> = only.homes.iter().map(String::as_str).collect();
        let mut removals = Removals::new(&only.input, &homes, &opts()).unwrap();
        let pass = Pass {
            candidates: &only.candidates,
            budgets,
            consolidation,
            pools: &only.input.nodepools,
            options: Options::default(),
            uninitialized: BTreeSet::new(),
            statics: BTreeMap::new(),
            prepared: Some(first),
        };
        let lazy = decide(&pass, &mut removals);
        if lazy.unprepared {
            prop_assert!(!consolidation);
            prop_assert_eq!(lazy.command, None);
            prop_assert!(full.trials > lazy.trials, "{} {}", full.trials, lazy.trials);
        } else {
            prop_assert_eq!(full, lazy);
        }
    }
}

/// `f` with only the pods of `nodes` as pods that may move.
fn pods_of(f: &Fixture, nodes: &BTreeSet<String>) -> Fixture {
    let kept: Vec<usize> = (0..f.homes.len())
        .filter(|&i| nodes.contains(&f.homes[i]))
        .collect();
    Fixture {
        input: SolveInput {
            pods: kept.iter().map(|&i| f.input.pods[i].clone()).collect(),
            ..f.input.clone()
        },
        homes: kept.iter().map(|&i| f.homes[i].clone()).collect(),
        candidates: f.candidates.clone(),
    }
}

// Static NodePools: pkg/controllers/disruption/{consolidation,emptiness,
// drift,staticdrift}_test.go of Karpenter v1.14.1, named after their It()s.

/// `f`'s nodes as the nodes of a static pool `general` of `replicas`, all
/// running, with `limits.nodes` of `limit`, drifted.
fn static_fixture(
    nodes: &[(&str, &str, &[i64])],
    replicas: i64,
    limit: Option<i64>,
) -> (Fixture, BTreeMap<String, statics::StaticPool>) {
    let mut f = cluster(nodes);
    for c in &mut f.candidates {
        c.static_pool = true;
        c.drift = vec![DriftReason::NodePoolTemplate { fields: vec![] }];
    }
    let state = statics::StaticPool {
        replicas,
        node_limit: limit,
        running: nodes.len(),
        ..statics::StaticPool::default()
    };
    (f, BTreeMap::from([("general".to_string(), state)]))
}

fn run_static(
    f: &Fixture,
    budgets: BTreeMap<String, Allowed>,
    statics: BTreeMap<String, statics::StaticPool>,
) -> Option<Command> {
    let homes: Vec<&str> = f.homes.iter().map(String::as_str).collect();
    let mut removals = Removals::new(&f.input, &homes, &opts()).unwrap();
    let pass = Pass {
        candidates: &f.candidates,
        budgets,
        consolidation: true,
        pools: &f.input.nodepools,
        options: Options::default(),
        uninitialized: BTreeSet::new(),
        statics,
        prepared: None,
    };
    decide(&pass, &mut removals).command
}

#[test]
fn should_not_consolidate_static_node_pool_nodes() {
    // Two empty nodes and two underused ones: emptiness and consolidation
    // would take them all in a dynamic pool.
    let nodes: &[(&str, &str, &[i64])] = &[
        ("a", "medium", &[]),
        ("b", "medium", &[]),
        ("c", "medium", &[1000]),
        ("d", "large", &[1000]),
    ];
    let (mut f, statics) = static_fixture(nodes, 4, None);
    for c in &mut f.candidates {
        c.drift.clear();
    }
    assert!(run_static(&f, unbounded(), statics).is_none());
    assert!(movers(&f.candidates, &unbounded(), true, &BTreeSet::new()).is_empty());
}

#[test]
fn should_not_consider_static_nodepool_for_drift() {
    // Drift of a static node is static drift: a template replacement per
    // node, never a removal trial that would move its pods elsewhere.
    let (f, statics) = static_fixture(&[("a", "medium", &[1000]), ("b", "medium", &[])], 2, None);
    let cmd = run_static(&f, unbounded(), statics).unwrap();
    assert_eq!(cmd.method, Method::StaticDrift);
    assert_eq!(cmd.reason, Reason::Drifted);
    assert_eq!(cmd.candidates.len(), 2);
    assert_eq!(cmd.replacements.len(), 2);
    assert!(
        cmd.replacements
            .iter()
            .all(|r| r.nodepool == "general" && r.pods.is_empty() && r.instance_types.is_empty())
    );
    assert_eq!(cmd.decision(), "replace");
    assert!(movers(&f.candidates, &unbounded(), false, &BTreeSet::new()).is_empty());
}

#[test]
fn should_respect_disruption_budgets_nodes_count_for_static_drift() {
    let nodes: &[(&str, &str, &[i64])] = &[
        ("a", "medium", &[]),
        ("b", "medium", &[]),
        ("c", "medium", &[]),
    ];
    let (f, statics) = static_fixture(nodes, 3, None);
    let cmd = run_static(&f, budget(Reason::Drifted, 2), statics.clone()).unwrap();
    assert_eq!(cmd.candidates.len(), 2);
    assert!(run_static(&f, budget(Reason::Drifted, 0), statics).is_none());
}

#[test]
fn should_not_drift_nodes_when_we_cannot_acquire_limits() {
    let nodes: &[(&str, &str, &[i64])] = &[("a", "medium", &[]), ("b", "medium", &[])];
    let (f, statics) = static_fixture(nodes, 2, Some(2));
    assert!(run_static(&f, unbounded(), statics).is_none());
}

#[test]
fn should_drift_nodes_when_we_can_acquire_limits() {
    let nodes: &[(&str, &str, &[i64])] = &[("a", "medium", &[]), ("b", "medium", &[])];
    let (f, statics) = static_fixture(nodes, 2, Some(4));
    assert_eq!(
        run_static(&f, unbounded(), statics)
            .unwrap()
            .candidates
            .len(),
        2
    );
}

#[test]
fn should_drift_partially_when_we_can_acquire_some_limits() {
    let nodes: &[(&str, &str, &[i64])] = &[
        ("a", "medium", &[]),
        ("b", "medium", &[]),
        ("c", "medium", &[]),
    ];
    let (f, statics) = static_fixture(nodes, 3, Some(4));
    let cmd = run_static(&f, unbounded(), statics).unwrap();
    assert_eq!(nodes_of(&cmd), ["a"]);
}

#[test]
fn should_keep_drifting_partially_when_we_can_acquire_some_limits_for_each_reconcile() {
    // The next pass: `a` is being replaced (its replacement running), so
    // the limit leaves room for none until `a` is gone.
    let nodes: &[(&str, &str, &[i64])] = &[("b", "medium", &[]), ("c", "medium", &[])];
    let (f, mut statics) = static_fixture(nodes, 3, Some(4));
    let s = statics.get_mut("general").unwrap();
    s.running = 3;
    s.pending_disruption = 1;
    assert!(run_static(&f, unbounded(), statics.clone()).is_none());
    // `a` gone: one more.
    let s = statics.get_mut("general").unwrap();
    s.pending_disruption = 0;
    assert_eq!(
        run_static(&f, unbounded(), statics)
            .unwrap()
            .candidates
            .len(),
        1
    );
}

#[test]
fn should_wait_until_nodes_are_deprovisioned_when_we_are_overscaled() {
    let nodes: &[(&str, &str, &[i64])] = &[
        ("a", "medium", &[]),
        ("b", "medium", &[]),
        ("c", "medium", &[]),
    ];
    let (f, statics) = static_fixture(nodes, 2, None);
    assert!(run_static(&f, unbounded(), statics).is_none());
}

#[test]
fn should_handle_drift_for_multiple_static_node_pools_independently() {
    let nodes: &[(&str, &str, &[i64])] = &[("a", "medium", &[]), ("b", "medium", &[])];
    let (mut f, mut statics) = static_fixture(nodes, 1, None);
    f.candidates[1].nodepool = "other".into();
    let mut other = f.input.nodepools[0].clone();
    other.name = "other".into();
    f.input.nodepools.push(other);
    statics.get_mut("general").unwrap().running = 1;
    // `other` is over its replicas: it waits, `general` drifts.
    statics.insert(
        "other".into(),
        statics::StaticPool {
            replicas: 0,
            running: 1,
            ..statics::StaticPool::default()
        },
    );
    let cmd = run_static(&f, unbounded(), statics).unwrap();
    assert_eq!(nodes_of(&cmd), ["a"]);
    assert_eq!(cmd.replacements[0].nodepool, "general");
}

#[test]
fn should_ignore_nodes_without_the_drifted_status_condition() {
    let (mut f, statics) = static_fixture(&[("a", "medium", &[])], 1, None);
    f.candidates[0].drift.clear();
    assert!(run_static(&f, unbounded(), statics).is_none());
}

#[test]
fn should_ignore_nodes_with_the_karpenter_sh_do_not_disrupt_annotation() {
    let (mut f, statics) = static_fixture(&[("a", "medium", &[])], 1, None);
    f.candidates[0].blocked = Some("node a has karpenter.sh/do-not-disrupt: \"true\"".into());
    assert!(run_static(&f, unbounded(), statics).is_none());
}

#[test]
fn should_handle_missing_node_limits_gracefully() {
    let (f, statics) = static_fixture(&[("a", "medium", &[])], 1, None);
    assert_eq!(
        run_static(&f, unbounded(), statics)
            .unwrap()
            .candidates
            .len(),
        1
    );
}

// Karpenter v1.14.1's consolidation suite, "Buffer Pods"
// (disruption/consolidation_test.go): nodes holding a CapacityBuffer's
// virtual pods. The controller puts those pods in the input as pods that
// may move from their node (as the fixture's pods are), and counts them in
// `buffer_pods`.

/// `cluster`, with the last `virtual` pods of each node a buffer's.
fn with_buffers(nodes: &[(&str, &str, &[i64])], virtual_: &[(&str, usize)]) -> Fixture {
    let mut f = cluster(nodes);
    for (node, n) in virtual_ {
        let c = f.candidates.iter_mut().find(|c| *c.node == **node).unwrap();
        c.pods -= n;
        c.buffer_pods = *n;
    }
    f
}

#[test]
fn should_not_empty_consolidate_a_node_with_only_buffer_pods() {
    let f = with_buffers(
        &[("a", "large", &[1000, 1000, 1000, 1000, 1000])],
        &[("a", 5)],
    );
    assert!(run(&f, unbounded(), true).command.is_none());
}

#[test]
fn should_allow_consolidation_of_a_node_with_real_pods_and_buffer_pods_to_a_cheaper_instance() {
    // A large node with one real pod and two one-cpu chunks: a medium one
    // holds all three, and is what replaces it.
    let f = with_buffers(&[("a", "large", &[1000, 1000, 1000])], &[("a", 2)]);
    let cmd = run(&f, unbounded(), true).command.unwrap();
    assert!(cmd.method.is_consolidation());
    assert_eq!(cmd.decision(), "replace");
    let requested: i64 = cmd.replacements[0].requests.get("cpu");
    assert!(
        requested >= 3000,
        "the replacement keeps the buffer's room: {requested}"
    );
}

#[test]
fn should_skip_buffer_only_nodes_in_single_node_consolidation_but_protect_via_emptiness() {
    let f = with_buffers(
        &[
            ("a", "large", &[1000, 1000, 1000, 1000]),
            ("b", "large", &[1000, 1000, 1000]),
        ],
        &[("a", 4), ("b", 2)],
    );
    let out = run(&f, unbounded(), true);
    if let Some(cmd) = &out.command {
        assert!(!nodes_of(cmd).contains(&"a"), "{cmd:?}");
    }
}

#[test]
fn should_consolidate_a_buffer_node_once_buffer_pods_are_cleared() {
    let held = with_buffers(&[("a", "medium", &[1000, 1000, 1000])], &[("a", 3)]);
    assert!(run(&held, unbounded(), true).command.is_none());
    let cleared = cluster(&[("a", "medium", &[])]);
    let cmd = run(&cleared, unbounded(), true).command.unwrap();
    assert_eq!(cmd.method, Method::Emptiness);
    assert_eq!(nodes_of(&cmd), ["a"]);
}

#[test]
fn blocked_candidates_name_their_blocker() {
    let mut pdb = Candidate::test("a", "medium", 0.2);
    pdb.consolidatable = false;
    pdb.drift = vec![DriftReason::NodePoolTemplate { fields: vec![] }];
    pdb.pods_blocked = Some("PodDisruptionBudget shop/web allows no disruption now".into());
    let mut free = Candidate::test("b", "medium", 0.2);
    free.consolidatable = false;
    free.drift = vec![DriftReason::NodePoolTemplate { fields: vec![] }];
    let candidates = vec![pdb, free];
    let mut pass = Pass {
        candidates: &candidates,
        budgets: unbounded(),
        consolidation: true,
        pools: &[],
        options: Options::default(),
        uninitialized: BTreeSet::new(),
        statics: BTreeMap::new(),
        prepared: None,
    };
    let found = blocked(&pass);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        (
            found[0].node.as_str(),
            found[0].reason,
            found[0].blocker.as_str()
        ),
        (
            "a",
            Reason::Drifted,
            "PodDisruptionBudget shop/web allows no disruption now"
        )
    );
    // A NodePool budget of zero holds the other; a schedule's window says so.
    pass.budgets = budget(Reason::Drifted, 0);
    let found = blocked(&pass);
    assert_eq!(
        found[1].blocker,
        "NodePool general's disruption budget allows no Drifted disruption"
    );
    pass.budgets
        .get_mut("general")
        .unwrap()
        .scheduled
        .insert(Reason::Drifted);
    assert!(blocked(&pass)[1].blocker.contains("schedule window"));
    // A budget that allows some is no block: the rest wait their turn.
    pass.budgets = budget(Reason::Drifted, 1);
    assert_eq!(blocked(&pass).len(), 1);
}

/// A pass with the scheduler's preferences respected or ignored (the
/// reference's `PREFERENCE_POLICY`).
fn run_preferences(f: &Fixture, preferences: Preferences) -> Outcome {
    let opts = SolveOptions {
        preferences,
        now_ms: 0,
    };
    run_opts(f, unbounded(), true, BTreeSet::new(), &opts)
}

/// Labels every pod of the fixture `app=foo`, bound and moving alike, and
/// lets `edit` add constraints to the moving ones.
fn app_foo(f: &mut Fixture, edit: impl Fn(&mut PodSpec)) {
    for n in &mut f.input.nodes {
        let n = Arc::make_mut(n);
        n.pods = n
            .pods
            .iter()
            .map(|p| {
                let mut p = BoundPod::clone(p);
                p.labels.insert("app".into(), "foo".into());
                Arc::new(p)
            })
            .collect();
    }
    for p in &mut f.input.pods {
        let p = Arc::make_mut(p);
        Arc::make_mut(&mut p.labels).insert("app".into(), "foo".into());
        edit(p);
    }
}

// Consolidation "Preferences": "should consolidate a node through deletion
// when ignoring preferences".
#[test]
fn should_consolidate_a_node_through_deletion_when_ignoring_preferences() {
    // The cheapest on-demand type: no replacement is cheaper.
    let mut f = cluster(&[("a", "small", &[500, 500]), ("b", "small", &[500])]);
    f.input.nodepools[0].requirements.add(
        "karpenter.sh/capacity-type",
        crate::model::Requirement::in_values(["on-demand"]),
    );
    app_foo(&mut f, |p| {
        p.preferred_anti_affinity.push((
            1,
            crate::scheduling::tests::term("app", "foo", "kubernetes.io/hostname"),
        ))
    });
    let cmd = run_preferences(&f, Preferences::Ignore).command.unwrap();
    assert_eq!(cmd.decision(), "delete");
    assert_eq!(nodes_of(&cmd), ["b"]);
    // Respected, the preference keeps b's pod off a: b is not deleted.
    let respected = run_preferences(&f, Preferences::Respect).command;
    assert!(
        respected.as_ref().is_none_or(|c| c.decision() != "delete"),
        "{respected:?}"
    );
}

// Consolidation "Preferences": "should consolidate a node through
// replacement when ignoring preferences".
#[test]
fn should_consolidate_a_node_through_replacement_when_ignoring_preferences() {
    // The pod prefers the most expensive type, the one it runs on.
    let mut f = cluster(&[("a", "large", &[500])]);
    f.input.nodepools[0].requirements.add(
        "karpenter.sh/capacity-type",
        crate::model::Requirement::in_values(["on-demand"]),
    );
    app_foo(&mut f, |p| {
        let mut large = crate::model::Requirements::new();
        large.add(
            "node.kubernetes.io/instance-type",
            crate::model::Requirement::in_values(["large"]),
        );
        p.preferred_terms.push((1, large));
    });
    let cmd = run_preferences(&f, Preferences::Ignore).command.unwrap();
    assert_eq!(cmd.decision(), "replace");
    assert!(
        !cmd.replacements[0]
            .instance_types
            .contains(&"large".to_string()),
        "{:?}",
        cmd.replacements[0]
    );
    // Respected, the replacement would be the same type at the same price:
    // no consolidation.
    assert!(run_preferences(&f, Preferences::Respect).command.is_none());
}

/// Forty on-demand nodes of `instance_type`, each left with one pod of a
/// Deployment that spreads over hostnames with `ScheduleAnyway`.
fn forty_spread_nodes(instance_type: &str) -> Fixture {
    let names: Vec<String> = (0..40).map(|i| format!("n{i:02}")).collect();
    let nodes: Vec<(&str, &str, &[i64])> = names
        .iter()
        .map(|n| (n.as_str(), instance_type, &[250_i64][..]))
        .collect();
    let mut f = cluster(&nodes);
    f.input.nodepools[0].requirements.add(
        "karpenter.sh/capacity-type",
        crate::model::Requirement::in_values(["on-demand"]),
    );
    app_foo(&mut f, |p| {
        let mut s = crate::scheduling::tests::spread("app", "foo", "kubernetes.io/hostname", 1);
        s.when_unsatisfiable = crate::scheduling::Unsatisfiable::ScheduleAnyway;
        p.spread.push(s);
    });
    f
}

#[test]
fn a_schedule_anyway_hostname_spread_holds_consolidation_unless_preferences_are_ignored() {
    let f = forty_spread_nodes("small");
    // As the reference: the spread's hostname domains start at zero (a new
    // node is always a domain of its own), so each pod "prefers" a node of
    // its own, which a new node gives it; nothing is cheaper that way
    // (kubernetes-sigs/karpenter#667).
    let respected = run_preferences(&f, Preferences::Respect).command;
    assert!(respected.is_none(), "{respected:#?}");
    // Ignored, the pods pack: most of the forty go at once.
    let cmd = run_preferences(&f, Preferences::Ignore).command.unwrap();
    assert_eq!(cmd.method, Method::MultiNodeConsolidation);
    assert!(cmd.candidates.len() >= 37, "{}", cmd.candidates.len());
}

#[test]
fn a_removal_trial_does_not_relax_a_spread_to_fit_its_one_replacement() {
    // Forty medium nodes: a small one holds each pod for less. The
    // reference's scheduler gives each spread pod a new node of its own
    // rather than relax the spread, so a multi-node trial needs forty
    // replacements and fails; single-node consolidation replaces one.
    let f = forty_spread_nodes("medium");
    let cmd = run_preferences(&f, Preferences::Respect).command.unwrap();
    assert_eq!(cmd.method, Method::SingleNodeConsolidation);
    assert_eq!(cmd.candidates.len(), 1);
    assert_eq!(cmd.replacements[0].instance_types[0], "small");
}

#[test]
fn single_node_consolidation_says_why_it_cannot_take_a_node() {
    // The cheapest on-demand type already: no cheaper replacement.
    let mut f = cluster(&[("a", "small", &[1500])]);
    f.input.nodepools[0].requirements.add(
        "karpenter.sh/capacity-type",
        crate::model::Requirement::in_values(["on-demand"]),
    );
    let out = run(&f, unbounded(), true);
    assert!(out.command.is_none());
    assert_eq!(
        out.unconsolidatable,
        [(
            "a-claim".to_string(),
            "Can't replace with a cheaper node".to_string()
        )]
    );
    // A spot node whose only replacement would be spot, without
    // spot-to-spot consolidation.
    let mut g = cluster(&[("b", "medium", &[1500])]);
    g.input.nodepools[0].requirements.add(
        "karpenter.sh/capacity-type",
        crate::model::Requirement::in_values(["spot"]),
    );
    g.candidates[0].capacity_type = "spot".into();
    g.candidates[0].price = 0.14;
    let out = run(&g, unbounded(), true);
    assert!(out.command.is_none(), "{:?}", out.command);
    assert_eq!(
        out.unconsolidatable[0].1,
        "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node"
    );
}
