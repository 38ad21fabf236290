//! Static NodePools (`spec.replicas`) and the `StaticCapacity` feature gate,
//! end to end: scenarios in tests/scenarios/static/ run through `dovetail
//! simulate`, and `validate` on their repository. Karpenter v1.14.1's
//! unit cases (pkg/controllers/static/, disruption/staticdrift_test.go)
//! are ported next to the code, named after their It()s.

use serde_json::Value;

use crate::disruption::{
    array, assert_all_pods_run, assert_replacements_initialized_first, at, disrupted, report,
};
use crate::support::dovetail;

/// The nodes of NodePool `fixed` alive at `t` seconds: launched, not yet
/// deleted.
fn alive(r: &Value, t: f64) -> Vec<&Value> {
    array(&r["nodes"])
        .iter()
        .filter(|n| n["nodepool"] == "fixed")
        .filter(|n| at(r, &n["launched_at"]) <= t)
        .filter(|n| n["deleted_at"].is_null() || at(r, &n["deleted_at"]) > t)
        .collect()
}

#[test]
fn a_static_pool_keeps_three_nodes_through_a_drift_then_follows_replicas_3_5_2() {
    let r = report("tests/scenarios/static/scale.yaml");
    assert_eq!(alive(&r, 9.0 * 60.0).len(), 3, "three replicas at first");
    // The image drifts at 10m: the budget of 1 replaces one node at a
    // time, each replacement initialized before its node goes, so the pool
    // never holds fewer than 3 nodes nor more than 4.
    let mut t = 10.0 * 60.0;
    while t < 20.0 * 60.0 {
        let n = alive(&r, t).len();
        assert!((3..=4).contains(&n), "{n} nodes at +{t}s");
        t += 1.0;
    }
    let after = alive(&r, 20.0 * 60.0);
    assert_eq!(after.len(), 3);
    assert!(
        after.iter().all(|n| at(&r, &n["launched_at"]) >= 600.0),
        "every node of the old image was replaced: {after:?}"
    );
    assert_eq!(disrupted(&r, "Drifted").len(), 3, "{}", r["disruptions"]);
    for d in array(&r["disruptions"]) {
        assert_eq!(d["decision"], "replace", "{d}");
        assert_eq!(d["replacements"].as_array().unwrap().len(), 1, "{d}");
    }
    assert_replacements_initialized_first(&r);
    // replicas: 5 at 40m, 2 at 50m.
    assert_eq!(alive(&r, 45.0 * 60.0).len(), 5);
    assert_eq!(alive(&r, 60.0 * 60.0).len(), 2);
    // Nearly empty nodes all along: a static pool is never consolidated.
    assert!(disrupted(&r, "Underutilized").is_empty());
    assert!(disrupted(&r, "Empty").is_empty());
    // The scale-down took the empty nodes first: the pods stayed put.
    let evicted_after_drift = array(&r["events"])
        .iter()
        .filter(|e| e["reason"] == "Evicted" && e["t"].as_f64().unwrap() > 1800.0)
        .count();
    assert!(evicted_after_drift <= 2, "{evicted_after_drift} evictions");
    assert_all_pods_run(&r);
}

#[test]
fn with_the_gate_off_a_static_pool_is_reported_inactive_never_silently_ignored() {
    let r = report("tests/scenarios/static/inactive.yaml");
    assert!(alive(&r, 600.0).is_empty(), "nothing is launched");
    let inactive: Vec<&Value> = array(&r["events"])
        .iter()
        .filter(|e| e["object"] == "NodePool/fixed" && e["reason"] == "StaticCapacityDisabled")
        .collect();
    assert_eq!(inactive.len(), 1, "one Event on the NodePool: {inactive:?}");
    assert!(
        inactive[0]["message"]
            .as_str()
            .unwrap()
            .contains("StaticCapacity feature gate is off")
    );
    // validate says the same, at spec.replicas.
    let out = dovetail(&["validate", "tests/scenarios/static/repo", "--worktree"]);
    assert_eq!(out.code, 0, "a warning, not an error: {}", out.stderr);
    assert!(
        out.stdout.contains("nodepools.yaml:8:3: warning: NodePool/fixed: spec.replicas: static NodePool (spec.replicas) is inactive"),
        "{}",
        out.stdout
    );
    let out = dovetail(&[
        "validate",
        "tests/scenarios/static/repo",
        "--worktree",
        "--strict",
        "--feature-gates",
        "StaticCapacity=true",
    ]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
}

#[test]
fn the_feature_gates_flag_wins_over_the_scenario_and_unknown_gates_are_usage_errors() {
    let out = dovetail(&[
        "simulate",
        "tests/scenarios/static/inactive.yaml",
        "--output",
        "json",
        "--feature-gates",
        "StaticCapacity=true",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let r: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(alive(&r, 600.0).len(), 3);
    assert_all_pods_run(&r);
    let out = dovetail(&[
        "simulate",
        "tests/scenarios/static/inactive.yaml",
        "--feature-gates",
        "StaticCapacity=true,Typo=true",
    ]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("unknown feature gate \"Typo\"")
            && out.stderr.contains("NodeRepair (default false)"),
        "{}",
        out.stderr
    );
}
