//! Karpenter v1.14.1's own disruption test cases, run end to end as
//! `dovetail simulate` scenarios (tests/scenarios/karpenter/). Each test
//! names the `It(...)` it ports and the file of kubernetes-sigs/karpenter
//! it comes from; the scenario files say the same.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::disruption::{
    array, assert_all_pods_run, assert_replacements_initialized_first, at, disrupted, first_event,
    nodes, report, strs,
};

fn scenario(name: &str) -> Value {
    report(&format!("tests/scenarios/karpenter/{name}.yaml"))
}

/// The NodeClaim whose node ran the first pod of a Deployment.
fn holding(r: &Value, app: &str) -> String {
    let pod = format!("default/{app}-00000");
    nodes(r)
        .into_iter()
        .find(|(_, n)| strs(&n["pods"]).contains(&pod.as_str()))
        .map(|(c, _)| c)
        .unwrap_or_else(|| panic!("no node ran {pod}"))
}

/// A pod of the report by name.
fn pod<'a>(r: &'a Value, name: &str) -> &'a Value {
    array(&r["pods"])
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no pod {name}"))
}

/// Seconds from the start until the pod was bound (its start, as the
/// simulated kubelet starts a pod when it is bound), for a pod created at
/// `created` seconds.
fn started(r: &Value, name: &str, created: f64) -> f64 {
    created + pod(r, name)["pending_seconds"].as_f64().unwrap()
}

/// Events about an object with a reason, by time.
fn events<'a>(r: &'a Value, object: &str, reason: &str) -> Vec<&'a Value> {
    array(&r["events"])
        .iter()
        .filter(|e| e["object"] == object && e["reason"] == reason)
        .collect()
}

fn started_at(r: &Value, n: &Value) -> Option<f64> {
    (!n["disruption_started_at"].is_null()).then(|| at(r, &n["disruption_started_at"]))
}

/// consolidation_test.go: "does not consolidate nodes with pods that have a
/// duration-based do-not-disrupt annotation that is still active", "can
/// consolidate nodes after duration-based do-not-disrupt annotation
/// expires", "can delete nodes, considers invalid do-not-disrupt annotation
/// format as not blocking".
#[test]
fn a_do_not_disrupt_duration_protects_a_pod_until_its_start_plus_the_duration() {
    let r = scenario("dnd-duration");
    let by_claim = nodes(&r);
    let timed = &by_claim[&holding(&r, "timed")];
    let start = started(&r, "timed-00000", 120.0);
    let consolidated = started_at(&r, timed).expect("the timed node is consolidated in the end");
    assert!(
        consolidated >= start + 3600.0,
        "consolidated at +{consolidated}s, before its pod's hour ran out (+{})",
        start + 3600.0
    );
    // Once the hour is over: a pass (10 s), consolidateAfter is long past,
    // and the 15 s validation.
    assert!(consolidated <= start + 3600.0 + 60.0, "{timed}");
    // consolidation_test.go, "should wait for the node TTL for non-empty
    // nodes before consolidating": not before consolidateAfter (30s) has
    // passed since the filler left at 5m, plus the 15 s validation.
    for app in ["free", "invalid"] {
        let n = &by_claim[&holding(&r, app)];
        let t = started_at(&r, n).unwrap_or_else(|| panic!("{app}'s node stays: {n}"));
        assert!(
            (300.0 + 30.0 + 15.0..=600.0).contains(&t),
            "{app}'s node consolidated at +{t}s"
        );
    }
    assert!(
        !events(&r, "Pod/default/invalid-00000", "InvalidDoNotDisrupt").is_empty(),
        "an invalid value is reported on the pod"
    );
    assert_all_pods_run(&r);
}

/// suite_test.go: "should consider candidates that have do-not-disrupt pods
/// scheduled with a terminationGracePeriod set for eventual disruption",
/// "should consider candidates that have PDB-blocked pods scheduled with a
/// terminationGracePeriod set for eventual disruption", "should not consider
/// candidates that have do-not-disrupt pods scheduled with a
/// terminationGracePeriod set for graceful disruption", "should not consider
/// candidates that have PDB-blocked pods scheduled with a
/// terminationGracePeriod set for graceful disruption"; drift_test.go:
/// "should not create replacements for drifted nodes that have pods with the
/// karpenter.sh/do-not-disrupt annotation set to true"; consolidation_test.go:
/// "does not consolidate nodes with karpenter.sh/do-not-disrupt set to true on
/// pods when the NodePool's TerminationGracePeriod is not nil", "does not
/// consolidate nodes with pods with blocking PDBs when the NodePool's
/// TerminationGracePeriod is not nil".
#[test]
fn a_termination_grace_period_lets_protected_nodes_drift_but_never_be_consolidated() {
    let r = scenario("grace-drift");
    assert!(
        disrupted(&r, "Underutilized").is_empty(),
        "{}",
        r["disruptions"]
    );
    assert!(disrupted(&r, "Empty").is_empty(), "{}", r["disruptions"]);
    let drifted = disrupted(&r, "Drifted");
    let grace: Vec<String> = ["grace-dnd", "grace-pdb"]
        .iter()
        .map(|a| holding(&r, a))
        .collect();
    let plain: Vec<String> = ["plain-dnd", "plain-pdb"]
        .iter()
        .map(|a| holding(&r, a))
        .collect();
    for c in &grace {
        assert!(drifted.contains(c), "{c} not drifted: {drifted:?}");
    }
    for c in &plain {
        assert!(!drifted.contains(c), "{c} drifted: {drifted:?}");
    }
    let by_claim = nodes(&r);
    for (app, c) in ["grace-dnd", "grace-pdb"].iter().zip(&grace) {
        let deleted = first_event(&r, &format!("NodeClaim/{c}"), "DisruptionTerminating")
            .unwrap_or_else(|| panic!("{c} never deleted"));
        // Its protected pod gets its own 30 s before the 15 minutes end.
        let pod_deleted = first_event(&r, &format!("Pod/default/{app}-00000"), "Deleted")
            .unwrap_or_else(|| panic!("{app}-00000 never deleted"));
        assert!(
            (pod_deleted - (deleted + 870.0)).abs() <= 5.0,
            "{app}: NodeClaim deleted at +{deleted}s, pod deleted at +{pod_deleted}s"
        );
        let gone = at(&r, &by_claim[c]["deleted_at"]);
        assert!(gone <= deleted + 900.0 + 5.0, "{c} gone at +{gone}s");
    }
    assert_replacements_initialized_first(&r);
}

/// consolidation_test.go: "won't merge 2 nodes into 1 of the same type".
#[test]
fn two_nodes_are_never_merged_into_one_of_their_own_type() {
    let r = scenario("same-type");
    let ds = array(&r["disruptions"]);
    let under: Vec<&Value> = ds
        .iter()
        .filter(|d| d["reason"] == "Underutilized")
        .collect();
    assert!(!under.is_empty(), "the scale-down is consolidated: {ds:?}");
    let types: BTreeMap<String, String> = array(&r["nodes"])
        .iter()
        .map(|n| {
            (
                n["nodeclaim"].as_str().unwrap().to_string(),
                n["instance_type"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for d in &under {
        let own: Vec<&str> = strs(&d["nodeclaims"])
            .iter()
            .map(|c| types[*c].as_str())
            .collect();
        for replacement in array(&d["replacement_types"]) {
            let cheapest = replacement[0].as_str().unwrap();
            assert!(
                !own.contains(&cheapest),
                "{d}: replaced {own:?} by their own type {cheapest}"
            );
        }
    }
    // The outcome: the node with fewer pods deleted, nothing launched.
    assert_eq!(under.len(), 1, "{under:?}");
    assert_eq!(under[0]["decision"], "delete", "{}", under[0]);
    assert_eq!(strs(&under[0]["nodeclaims"]), ["plain-a0001"]);
    assert_eq!(r["summary"]["nodes_launched"], 2, "{}", r["summary"]);
}

/// nodeclaim/expiration: "should delete expired NodeClaims"; node/termination
/// suite_test.go: "should preemptively delete pods to satisfy their
/// terminationGracePeriodSeconds"; disruption: the nodes the pods of a
/// deleting node are headed for are nominated, never Empty.
#[test]
fn expiration_is_forceful_and_bounded_by_the_grace_period() {
    let r = scenario("expiration");
    // WhenEmpty: never Underutilized; a Drifted budget of 0: never Drifted.
    assert!(
        disrupted(&r, "Underutilized").is_empty(),
        "{}",
        r["disruptions"]
    );
    assert!(disrupted(&r, "Drifted").is_empty(), "{}", r["disruptions"]);
    let expired = disrupted(&r, "Expired");
    let by_claim = nodes(&r);
    let first: Vec<(&String, &&Value)> = by_claim
        .iter()
        .filter(|(_, n)| at(&r, &n["launched_at"]) < 60.0)
        .collect();
    assert_eq!(first.len(), 5, "one node per pod: {first:?}");
    for (c, n) in &first {
        assert!(expired.contains(*c), "{c} did not expire: {expired:?}");
        let created = at(&r, &n["launched_at"]);
        // Deleted at expiry, not after a replacement launched.
        let deleted = first_event(&r, &format!("NodeClaim/{c}"), "DisruptionTerminating").unwrap();
        assert!(
            (deleted - (created + 3600.0)).abs() <= 2.0,
            "{c}: created +{created}s, deleted +{deleted}s"
        );
        // Gone within expireAfter + terminationGracePeriod.
        let gone = at(&r, &n["deleted_at"]);
        assert!(
            gone <= created + 3600.0 + 900.0 + 1.0,
            "{c}: gone at +{gone}s"
        );
    }
    // The do-not-disrupt pod with a 300 s grace period is deleted 600 s
    // into the 900 s.
    let keeper = holding(&r, "keeper");
    let deleted = first_event(&r, &format!("NodeClaim/{keeper}"), "DisruptionTerminating").unwrap();
    let pod_deleted = first_event(&r, "Pod/default/keeper-00000", "Deleted").unwrap();
    assert!(
        (pod_deleted - (deleted + 600.0)).abs() <= 5.0,
        "deleted +{deleted}s, keeper deleted +{pod_deleted}s"
    );
    // No node launched for the drained pods is taken away as Empty while
    // they are still on their way to it.
    let empty = disrupted(&r, "Empty");
    for c in &empty {
        let n = &by_claim[c];
        assert!(
            strs(&n["pods"]).is_empty(),
            "{c} was deleted as Empty after holding pods: {n}"
        );
    }
    // The replacements of `app` pods (past the four created at the start)
    // evicted after the first waited for no launch: their capacity was
    // launched at expiry, and kept for them.
    let slow: Vec<&Value> = array(&r["pods"])
        .iter()
        .filter(|p| {
            p["name"]
                .as_str()
                .unwrap()
                .strip_prefix("app-")
                .and_then(|n| u64::from_str_radix(n, 16).ok())
                .is_some_and(|n| n >= 4)
                && p["pending_seconds"].as_f64().unwrap() > 60.0
        })
        .collect();
    assert!(slow.len() <= 1, "pods waited for capacity: {slow:?}");
    assert_all_pods_run(&r);
}

/// drift_test.go and suite_test.go: a PodDisruptionBudget paces drift
/// without stalling it: every drifted node of the pool is replaced.
#[test]
fn a_pod_disruption_budget_paces_drift_without_stalling_it() {
    let r = scenario("pdb-drift");
    // consolidateAfter: Never: no consolidation, however underused.
    assert!(
        disrupted(&r, "Underutilized").is_empty(),
        "{}",
        r["disruptions"]
    );
    assert!(disrupted(&r, "Empty").is_empty(), "{}", r["disruptions"]);
    let drifted = disrupted(&r, "Drifted");
    let by_claim = nodes(&r);
    let before: Vec<&String> = by_claim
        .iter()
        .filter(|(_, n)| at(&r, &n["launched_at"]) < 600.0)
        .map(|(c, _)| c)
        .collect();
    assert!(before.len() >= 3, "{before:?}");
    // Some node holds more of the budget's pods than it allows at once.
    let most = before
        .iter()
        .map(|c| {
            strs(&by_claim[*c]["pods"])
                .iter()
                .filter(|p| p.starts_with("default/web-"))
                .count()
        })
        .max()
        .unwrap();
    assert!(most > 2, "no node holds more than two web pods");
    for c in &before {
        assert!(drifted.contains(*c), "{c} never replaced: {drifted:?}");
    }
    // One at a time (10% of the pool), each within minutes of the last.
    let last = before
        .iter()
        .map(|c| at(&r, &by_claim[*c]["deleted_at"]))
        .fold(0.0, f64::max);
    assert!(
        last <= 600.0 + 3600.0,
        "the last drifted node went at +{last}s"
    );
    assert_replacements_initialized_first(&r);
    assert_all_pods_run(&r);
}

/// consolidation_test.go: "cannot replace spot with spot if the
/// spotToSpotConsolidation is disabled", and the gate on.
#[test]
fn spot_to_spot_consolidation_is_off_unless_its_feature_gate_is_on() {
    let r = scenario("spot-default");
    assert!(
        disrupted(&r, "Underutilized").is_empty(),
        "{}",
        r["disruptions"]
    );
    let r = scenario("spot-to-spot");
    let under: Vec<&Value> = array(&r["disruptions"])
        .iter()
        .filter(|d| d["reason"] == "Underutilized")
        .collect();
    assert_eq!(under.len(), 1, "{under:?}");
    assert_eq!(under[0]["decision"], "replace");
    assert!(under[0]["savings_per_hour"].as_f64().unwrap() > 0.0);
    assert_all_pods_run(&r);
}

/// consolidation_test.go: "won't delete node if it would require pods to
/// schedule on an uninitialized node".
#[test]
fn consolidation_never_sends_pods_to_a_node_still_launching() {
    let r = scenario("uninitialized");
    assert!(
        !disrupted(&r, "Drifted").is_empty(),
        "the rocket node drifts: {}",
        r["disruptions"]
    );
    assert!(
        !disrupted(&r, "Underutilized").is_empty(),
        "the plain nodes are consolidated: {}",
        r["disruptions"]
    );
    // Pods moved by drift and consolidation found a place at once.
    for p in array(&r["pods"]) {
        let name = p["name"].as_str().unwrap();
        if name.starts_with("filler-") {
            continue;
        }
        let waited = p["pending_seconds"].as_f64().unwrap();
        let first = name.ends_with("-00000") || name == "small-00001";
        assert!(first || waited < 30.0, "{name} waited {waited}s: {p}");
    }
    assert_all_pods_run(&r);
}
