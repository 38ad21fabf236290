//! Disruption end to end: scenarios in tests/scenarios/disruption/ run
//! through `dovetail simulate`, and the JSON report is asserted on.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::support::dovetail;

pub(crate) fn report(scenario: &str) -> Value {
    let out = dovetail(&["simulate", scenario, "--output", "json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    serde_json::from_str(&out.stdout).unwrap()
}

fn disruption(name: &str) -> Value {
    report(&format!("tests/scenarios/disruption/{name}.yaml"))
}

pub(crate) fn array(v: &Value) -> &Vec<Value> {
    v.as_array().unwrap()
}

pub(crate) fn strs(v: &Value) -> Vec<&str> {
    array(v).iter().map(|s| s.as_str().unwrap()).collect()
}

/// Seconds since the start of the report of an RFC 3339 time.
pub(crate) fn at(r: &Value, t: &Value) -> f64 {
    let parse = |s: &str| s.parse::<jiff::Timestamp>().unwrap();
    parse(t.as_str().unwrap())
        .duration_since(parse(r["start"].as_str().unwrap()))
        .as_secs_f64()
}

pub(crate) fn first_event(r: &Value, object: &str, reason: &str) -> Option<f64> {
    array(&r["events"])
        .iter()
        .find(|e| e["object"] == object && e["reason"] == reason)
        .map(|e| e["t"].as_f64().unwrap())
}

/// Every pod still there at the end runs, and nothing waits for capacity.
pub(crate) fn assert_all_pods_run(r: &Value) {
    assert_eq!(r["summary"]["pods_pending"], 0, "{}", r["summary"]);
    for p in array(&r["pods"]) {
        if p["deleted_at"].is_null() {
            assert!(
                matches!(p["phase"].as_str(), Some("Running" | "Succeeded")),
                "{p}"
            );
        }
    }
}

/// Each replacement is initialized before the node it replaces is drained.
pub(crate) fn assert_replacements_initialized_first(r: &Value) {
    for d in array(&r["disruptions"]) {
        for c in strs(&d["nodeclaims"]) {
            let drained = first_event(r, &format!("NodeClaim/{c}"), "DisruptionTerminating");
            for rep in strs(&d["replacements"]) {
                let ready = first_event(r, &format!("NodeClaim/{rep}"), "Initialized");
                match (ready, drained) {
                    (Some(ready), Some(drained)) => assert!(ready <= drained, "{d}"),
                    (None, Some(_)) => panic!("{c} drained before {rep} was initialized: {d}"),
                    _ => {}
                }
            }
        }
    }
}

/// NodeClaims disrupted for `reason`.
pub(crate) fn disrupted(r: &Value, reason: &str) -> BTreeSet<String> {
    array(&r["disruptions"])
        .iter()
        .filter(|d| d["reason"] == reason)
        .flat_map(|d| strs(&d["nodeclaims"]))
        .map(str::to_string)
        .collect()
}

/// The nodes of the report by NodeClaim.
pub(crate) fn nodes(r: &Value) -> BTreeMap<String, &Value> {
    array(&r["nodes"])
        .iter()
        .map(|n| (n["nodeclaim"].as_str().unwrap().to_string(), n))
        .collect()
}

#[test]
fn a_scale_down_is_consolidated_to_within_thirty_percent_of_the_bound() {
    let r = disruption("consolidation");
    let under = disrupted(&r, "Underutilized");
    assert!(!under.is_empty());
    assert_all_pods_run(&r);
    assert_replacements_initialized_first(&r);
    let s = &r["summary"];
    let (price, bound) = (
        s["price_per_hour"].as_f64().unwrap(),
        s["lower_bound_price_per_hour"].as_f64().unwrap(),
    );
    assert!(price <= 1.3 * bound, "fleet {price} vs bound {bound}");
    // Every consolidation saved money.
    for d in array(&r["disruptions"]) {
        assert!(d["savings_per_hour"].as_f64().unwrap() > 0.0, "{d}");
    }
}

#[test]
fn empty_nodes_go_once_consolidate_after_has_passed() {
    let r = disruption("emptiness");
    let empty = disrupted(&r, "Empty");
    assert_eq!(empty.len(), 4, "{empty:?}");
    let deleted_at = 600.0;
    for n in nodes(&r).values() {
        let started = at(&r, &n["disruption_started_at"]);
        // consolidateAfter is 1m; then validation (15 s) and the budget
        // (10%: one node at a time) pace them.
        assert!(started >= deleted_at + 60.0, "{n}");
        assert!(started <= deleted_at + 60.0 + 4.0 * 40.0, "{n}");
        assert_eq!(n["disruption_reason"], "Empty");
    }
    assert!(
        array(&r["nodes"])
            .iter()
            .all(|n| !n["deleted_at"].is_null())
    );
}

#[test]
fn a_ten_percent_budget_paces_drift_replacement() {
    let r = disruption("pacing");
    assert_eq!(disrupted(&r, "Drifted").len(), 20);
    // The budget is 10% of the pool's nodes, rounded up, replacements
    // included once they are up: 2 of 20, 3 while two replacements run
    // beside the two nodes they replace (a drain takes the evicted pod's
    // 30 s grace period). At no time are more nodes being disrupted than
    // 10% of the nodes running then allows.
    let mut changes: Vec<(f64, i32, i32)> = Vec::new();
    for n in array(&r["nodes"]) {
        let gone = (!n["deleted_at"].is_null()).then(|| at(&r, &n["deleted_at"]));
        changes.push((at(&r, &n["launched_at"]), 0, 1));
        if let Some(gone) = gone {
            changes.push((gone, 0, -1));
        }
        if !n["disruption_started_at"].is_null() {
            changes.push((at(&r, &n["disruption_started_at"]), 1, 0));
            changes.push((gone.expect("a disrupted node is gone"), -1, 0));
        }
    }
    changes.sort_by(|a, b| a.0.total_cmp(&b.0).then((a.1 + a.2).cmp(&(b.1 + b.2))));
    let (mut disrupting, mut running, mut most) = (0, 0, 0);
    for (t, d, n) in changes {
        disrupting += d;
        running += n;
        let allowed = (running + 9) / 10;
        assert!(
            disrupting <= allowed,
            "+{t}s: {disrupting} of {running} nodes disrupted"
        );
        most = most.max(disrupting);
    }
    assert!((2..=3).contains(&most), "{most}");
    // The budget, not the 10-s poll, paces the rollout: after a command
    // the reference's disruption controller requeues at once
    // (`singleton.RequeueImmediately`), so the second node the budget
    // allows starts within a pass of the first.
    let mut started: Vec<f64> = array(&r["nodes"])
        .iter()
        .filter(|n| !n["disruption_started_at"].is_null())
        .map(|n| at(&r, &n["disruption_started_at"]))
        .collect();
    started.sort_by(f64::total_cmp);
    assert!(started[1] - started[0] < 5.0, "{started:?}");
    assert_replacements_initialized_first(&r);
    assert_all_pods_run(&r);
}

/// When a pod of the report was gone (its kubelet deleted it), in seconds.
fn gone_at(r: &Value, namespace: &str, name: &str) -> f64 {
    let pod = array(&r["pods"])
        .iter()
        .find(|p| p["namespace"] == namespace && p["name"] == name)
        .unwrap_or_else(|| panic!("no pod {namespace}/{name}"));
    at(r, &pod["deleted_at"])
}

/// Karpenter v1.14.1's terminator: an evicted pod takes its
/// terminationGracePeriodSeconds to stop, its drain group holds the next
/// one until it is gone, and the instance is terminated only once the node
/// is drained (node/termination suite_test.go: "should not delete nodes
/// until all pods are deleted", terminator: "should evict pods in order
/// and wait until pods are fully deleted").
#[test]
fn a_drifted_node_drains_group_by_group_and_outlives_its_pods_grace_periods() {
    let r = disruption("graceful");
    assert_eq!(
        strs(&r["disruptions"][0]["nodeclaims"]),
        ["apps-00001"],
        "{}",
        r["disruptions"]
    );
    let node = nodes(&r)["apps-00001"].clone();
    let node_name = node["name"].as_str().unwrap();
    let logs = format!("logs-{}", node_name.split('.').next().unwrap());

    let slow_evicted = first_event(&r, "Pod/default/slow-00000", "Evicted").expect("evicted");
    let slow_gone = gone_at(&r, "default", "slow-00000");
    assert_eq!(slow_gone - slow_evicted, 120.0, "its own grace period");
    // The DaemonSet pods' group waits for it.
    let logs_evicted = first_event(&r, &format!("Pod/kube-system/{logs}"), "Evicted")
        .unwrap_or_else(|| panic!("{logs} never evicted"));
    assert!(
        (slow_gone..=slow_gone + 2.0).contains(&logs_evicted),
        "slow gone at +{slow_gone}s, {logs} evicted at +{logs_evicted}s"
    );
    let logs_gone = gone_at(&r, "kube-system", &logs);
    assert_eq!(logs_gone - logs_evicted, 30.0);
    // The instance is terminated, and the node released, once both are gone.
    let terminated =
        first_event(&r, "NodeClaim/apps-00001", "InstanceTerminated").expect("terminated");
    assert!(
        (logs_gone..=logs_gone + 2.0).contains(&terminated),
        "{logs} gone at +{logs_gone}s, instance terminated at +{terminated}s"
    );
    assert_eq!(at(&r, &node["deleted_at"]), terminated);
    // The Deployment replaced the evicted pod at once (a terminating pod
    // is not an available replica): it ran on the replacement before the
    // old one was gone.
    let replacement = array(&r["pods"])
        .iter()
        .find(|p| p["name"] == "slow-00001")
        .expect("a replacement pod");
    assert_eq!(
        replacement["node"].as_str(),
        nodes(&r)["apps-00002"]["name"].as_str()
    );
    assert!(replacement["deleted_at"].is_null());
    assert_all_pods_run(&r);
}

#[test]
fn a_business_hours_budget_blocks_consolidation_only_inside_its_window() {
    let r = disruption("business-hours");
    // Starts Monday 08:00; the window is 09:00-17:00; the scale-down is at
    // 09:30.
    let times: Vec<f64> = array(&r["disruptions"])
        .iter()
        .filter(|d| d["reason"] == "Underutilized")
        .map(|d| d["t"].as_f64().unwrap())
        .collect();
    assert!(!times.is_empty());
    for t in &times {
        assert!(
            !(3600.0..9.0 * 3600.0).contains(t),
            "consolidated at +{t}s, inside the window: {times:?}"
        );
    }
    assert!(times.iter().any(|t| *t >= 9.0 * 3600.0), "{times:?}");
    assert_all_pods_run(&r);
}

#[test]
fn nodes_with_do_not_disrupt_pods_or_pods_no_budget_lets_go_are_left_alone() {
    let r = disruption("blocked");
    let by_claim = nodes(&r);
    let holding = |app: &str| -> String {
        by_claim
            .iter()
            .find(|(_, n)| {
                strs(&n["pods"])
                    .iter()
                    .any(|p| p.starts_with(&format!("default/{app}-")))
            })
            .map(|(c, _)| c.clone())
            .unwrap_or_else(|| panic!("no node held {app}"))
    };
    let touched: BTreeSet<String> = array(&r["disruptions"])
        .iter()
        .flat_map(|d| strs(&d["nodeclaims"]))
        .map(str::to_string)
        .collect();
    assert!(!touched.contains(&holding("guarded")), "{touched:?}");
    assert!(!touched.contains(&holding("budgeted")), "{touched:?}");
    // The third one, holding one small pod on a large node, is replaced.
    let free = array(&r["pods"])
        .iter()
        .find(|p| p["name"] == "free-00000")
        .unwrap();
    let free_node = by_claim
        .values()
        .find(|n| n["name"] == free["node"])
        .unwrap();
    assert!(touched.contains(free_node["nodeclaim"].as_str().unwrap()));
    assert_all_pods_run(&r);
}

/// The NodeClaims of a drift scenario's apps and system pools, before the
/// change (those launched in the first minute).
fn initial_claims(r: &Value) -> BTreeMap<String, &Value> {
    nodes(r)
        .into_iter()
        .filter(|(_, n)| at(r, &n["launched_at"]) < 60.0)
        .collect()
}

fn assert_drift_of(scenario: &str, affected: impl Fn(&Value) -> bool) {
    let r = disruption(scenario);
    let initial = initial_claims(&r);
    let expected: BTreeSet<String> = initial
        .iter()
        .filter(|(_, n)| affected(n))
        .map(|(c, _)| c.clone())
        .collect();
    assert!(!expected.is_empty(), "{scenario}: nothing to drift");
    assert_eq!(disrupted(&r, "Drifted"), expected, "{scenario}");
    assert_replacements_initialized_first(&r);
    assert_all_pods_run(&r);
    // Replaced within the pools' budgets: apps (10%) one at a time, system
    // (the default 10%) one at a time.
    for d in array(&r["disruptions"]) {
        assert_eq!(array(&d["nodeclaims"]).len(), 1, "{d}");
    }
}

#[test]
fn a_published_al2023_image_drifts_exactly_the_al2023_nodes() {
    assert_drift_of("drift-image", |n| n["nodepool"] == "apps");
}

#[test]
fn a_kubernetes_upgrade_drifts_every_node() {
    assert_drift_of("drift-k8s", |_| true);
}

#[test]
fn a_pinned_alias_commit_drifts_exactly_that_node_classes_nodes() {
    assert_drift_of("drift-alias", |n| n["nodepool"] == "system");
}

#[test]
fn a_block_device_commit_drifts_exactly_that_node_classes_nodes() {
    assert_drift_of("drift-blockdevice", |n| n["nodepool"] == "apps");
}

#[test]
fn a_requirements_commit_drifts_exactly_the_nodes_that_no_longer_meet_them() {
    assert_drift_of("drift-requirements", |n| {
        n["nodepool"] == "apps" && n["instance_type"].as_str().unwrap().starts_with('c')
    });
}

#[test]
fn expired_nodes_are_deleted_at_expiry_and_their_pods_get_new_capacity() {
    let r = disruption("expiry");
    let expired = disrupted(&r, "Expired");
    assert_eq!(expired.len(), 3);
    for n in nodes(&r).values() {
        if expired.contains(n["nodeclaim"].as_str().unwrap()) {
            // expireAfter is 1h from creation: deleted then, with nothing
            // launched first (Karpenter v1's forceful expiration).
            let launched = at(&r, &n["launched_at"]);
            let started = at(&r, &n["disruption_started_at"]);
            assert!((started - (launched + 3600.0)).abs() <= 1.0, "{n}");
            assert!(n["replaced_by"].as_array().unwrap().is_empty(), "{n}");
        }
    }
    // Their pods were pending from the expiry on, and got new nodes.
    assert_all_pods_run(&r);
}

/// Regression guard against churn: a stable workload run for a day is
/// disrupted only while it first settles, and no node is ever replaced by
/// its own instance type at its own price.
#[test]
fn a_stable_workload_is_not_disrupted_after_it_settles() {
    let r = report("tests/scenarios/stable.yaml");
    let by_claim = nodes(&r);
    for d in array(&r["disruptions"]) {
        let t = d["t"].as_f64().unwrap();
        assert!(t < 3600.0, "disrupted after the first hour: {d}");
        for c in strs(&d["nodeclaims"]) {
            let old = by_claim[c];
            for rep in strs(&d["replacements"]) {
                let new = by_claim[rep];
                assert!(
                    !(new["instance_type"] == old["instance_type"]
                        && new["capacity_type"] == old["capacity_type"]
                        && (new["price_per_hour"].as_f64().unwrap()
                            - old["price_per_hour"].as_f64().unwrap())
                        .abs()
                            < 1e-9),
                    "{c} replaced by the same type at the same price: {d}"
                );
            }
        }
    }
    assert_all_pods_run(&r);
}

// Restarts: the controller is stopped and started again mid-scenario (the
// `restart` step; a leader change looks the same to the new leader: none
// of the old one's memory, only the cluster and the cloud). Execution
// must resume from what the cluster records.

fn restart(name: &str) -> Value {
    report(&format!("tests/scenarios/restart/{name}.yaml"))
}

/// `(t, object, reason)` of every event but the restart itself and those
/// a controller repeats while it waits (`DisruptionBlocked`,
/// `Unconsolidatable`, the queue's `DisruptionLaunching` and
/// `DisruptionWaitingReadiness`, termination's `FailedDraining` and
/// `TerminationGracePeriodExpiring`): a new controller says them again, as
/// a restarted Karpenter does, whose Events are deduplicated in memory.
fn timeline(r: &Value) -> Vec<(f64, String, String)> {
    array(&r["events"])
        .iter()
        .filter(|e| {
            !matches!(
                e["reason"].as_str(),
                Some(
                    "Restarted"
                        | "DisruptionBlocked"
                        | "Unconsolidatable"
                        | "DisruptionLaunching"
                        | "DisruptionWaitingReadiness"
                        | "FailedDraining"
                        | "TerminationGracePeriodExpiring"
                )
            )
        })
        .map(|e| {
            (
                e["t"].as_f64().unwrap(),
                e["object"].as_str().unwrap().to_string(),
                e["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The same events in the same order, each at the same time give or take
/// the simulation's settle step (1 s): a restarted controller's passes fall
/// at other fractions of a second once evictions are retried every 100 ms
/// and more, and a pass sees what happened since the one before.
fn assert_same_timeline(a: &[(f64, String, String)], b: &[(f64, String, String)]) {
    let what = |t: &[(f64, String, String)]| -> Vec<(String, String)> {
        t.iter().map(|(_, o, r)| (o.clone(), r.clone())).collect()
    };
    assert_eq!(what(a), what(b));
    for (x, y) in a.iter().zip(b) {
        assert!((x.0 - y.0).abs() < 1.0, "{x:?} vs {y:?}");
    }
}

/// No instance outlives its NodeClaim or runs without a Node, and no
/// NodeClaim name is handed out twice.
fn assert_nothing_leaked(r: &Value) {
    for n in array(&r["nodes"]) {
        if n["deleted_at"].is_null() {
            assert!(
                n["name"].as_str().is_some_and(|s| !s.is_empty()),
                "instance without a node at the end: {n}"
            );
        }
    }
    let provisioned: Vec<&str> = array(&r["events"])
        .iter()
        .filter(|e| e["reason"] == "Provisioned")
        .map(|e| e["object"].as_str().unwrap())
        .collect();
    let unique: BTreeSet<&str> = provisioned.iter().copied().collect();
    assert_eq!(unique.len(), provisioned.len(), "a NodeClaim name reused");
}

#[test]
fn a_restart_during_a_drift_replacement_resumes_it_with_the_same_outcome() {
    let base = restart("baseline");
    let r = restart("replacement");
    // The restart falls between the replacement's launch and its
    // initialization: the candidate is marked, the replacement in flight.
    let launched = first_event(&r, "NodeClaim/apps-00006", "Launched").unwrap();
    let ready = first_event(&r, "NodeClaim/apps-00006", "Initialized").unwrap();
    let restarted = first_event(&r, "Controller/dovetail", "Restarted").unwrap();
    assert!(
        launched < restarted && restarted < ready,
        "{launched} {restarted} {ready}"
    );
    assert_same_timeline(&timeline(&r), &timeline(&base));
    assert_eq!(
        r["summary"]["nodes_launched"],
        base["summary"]["nodes_launched"]
    );
    assert_all_pods_run(&r);
    assert_replacements_initialized_first(&r);
    assert_nothing_leaked(&r);
}

#[test]
fn a_restart_during_a_blocked_drain_resumes_it_and_forces_it_at_the_grace_period() {
    let base = restart("baseline");
    let r = restart("drain");
    let deleting = first_event(&r, "NodeClaim/apps-00004", "DisruptionTerminating").unwrap();
    let restarted = first_event(&r, "Controller/dovetail", "Restarted").unwrap();
    let gone = first_event(&r, "NodeClaim/apps-00004", "Terminated").unwrap();
    assert!(
        deleting < restarted && restarted < gone,
        "{deleting} {restarted} {gone}"
    );
    // The pool's terminationGracePeriod (10m) counts from the deletion,
    // not from the restart: the blocked pod is deleted when 30 s (its own
    // grace period) are left, and the node is gone by the end.
    let forced = array(&r["events"])
        .iter()
        .find(|e| {
            e["reason"] == "Deleted"
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("NodeClaim/apps-00004"))
        })
        .map(|e| e["t"].as_f64().unwrap())
        .expect("the blocked pod is deleted");
    assert!(
        (forced - (deleting + 570.0)).abs() <= 2.0,
        "deleted {deleting}, pod forced {forced}"
    );
    assert!(gone >= forced, "forced before the grace: {gone}");
    assert!(
        gone <= deleting + 600.0 + 2.0,
        "the restart reset the grace: {gone}"
    );
    for key in [
        "nodes_launched",
        "nodes_terminated",
        "disruptions_by_reason",
    ] {
        assert_eq!(r["summary"][key], base["summary"][key], "{key}");
    }
    assert_all_pods_run(&r);
    assert_nothing_leaked(&r);
    assert_nothing_leaked(&base);
}

/// Issue 16's adoption: Karpenter-launched NodeClaims and Nodes (its
/// labels, hash annotations and finalizer, no dovetail stamps) are stamped
/// with dovetail's drift hashes and kept as they are: no replacement, no
/// eviction, no launch.
#[test]
fn nodes_karpenter_launched_are_adopted_stamped_and_left_unchanged() {
    let r = report("tests/scenarios/adoption/adopt.yaml");
    let claims = ["default-7xk2p", "default-m4q9z", "default-tr8wd"];
    for c in claims {
        assert!(
            first_event(&r, &format!("NodeClaim/{c}"), "Stamped").is_some(),
            "{c} not stamped"
        );
    }
    assert!(array(&r["disruptions"]).is_empty(), "{}", r["disruptions"]);
    assert_eq!(r["summary"]["evictions"], 0);
    for reason in [
        "Provisioned",
        "Launched",
        "DisruptionTerminating",
        "Drifted",
    ] {
        assert!(
            !array(&r["events"]).iter().any(|e| e["reason"] == reason),
            "{reason}: {}",
            r["events"]
        );
    }
    let kept: BTreeSet<&str> = array(&r["nodes"])
        .iter()
        .filter(|n| n["deleted_at"].is_null())
        .map(|n| n["nodeclaim"].as_str().unwrap())
        .collect();
    assert_eq!(kept, claims.into_iter().collect());
    assert_all_pods_run(&r);
}

/// Forty underused nodes each keep one pod of a Deployment spread over
/// hostnames with `ScheduleAnyway`. Respected (the default, as Karpenter's
/// `PREFERENCE_POLICY=Respect`), the spread holds them: a new node is always
/// an empty hostname domain, so no removal is cheaper
/// (kubernetes-sigs/karpenter#667). `--preference-policy ignore` packs them.
#[test]
fn a_schedule_anyway_spread_holds_consolidation_unless_preferences_are_ignored() {
    let scenario = "tests/scenarios/disruption/spread-anyway.yaml";
    let live = |r: &Value| {
        array(&r["nodes"])
            .iter()
            .filter(|n| n["deleted_at"].is_null())
            .count()
    };
    let respected = report(scenario);
    assert_all_pods_run(&respected);
    assert_eq!(live(&respected), 40, "{}", respected["disruptions"]);
    assert!(
        !array(&respected["disruptions"])
            .iter()
            .any(|d| d["reason"] == "Underutilized"),
        "{}",
        respected["disruptions"]
    );
    let out = dovetail(&[
        "simulate",
        scenario,
        "--output",
        "json",
        "--preference-policy",
        "Ignore",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let ignored: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_all_pods_run(&ignored);
    assert!(live(&ignored) <= 4, "{} nodes left", live(&ignored));
    assert!(
        array(&ignored["disruptions"])
            .iter()
            .any(|d| d["reason"] == "Underutilized"),
        "{}",
        ignored["disruptions"]
    );
}

/// A drifted node a PodDisruptionBudget keeps: its NodeClaim carries
/// `Drifted` (reason and message `AMIDrift`, as Karpenter's drift
/// controller writes it) and `Consolidatable` once `consolidateAfter` has
/// passed, each with the time it became true, not rewritten at every pass.
#[test]
fn nodeclaims_carry_the_drifted_and_consolidatable_conditions() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snapshot.json");
    let out = dovetail(&[
        "simulate",
        "tests/scenarios/disruption/conditions.yaml",
        "--output",
        "json",
        "--snapshot-out",
        snap.to_str().unwrap(),
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let r: Value = serde_json::from_str(&out.stdout).unwrap();
    assert!(array(&r["disruptions"]).is_empty(), "{}", r["disruptions"]);
    let list: Value = serde_json::from_str(&std::fs::read_to_string(&snap).unwrap()).unwrap();
    let claims: Vec<&Value> = array(&list["items"])
        .iter()
        .filter(|o| o["kind"] == "NodeClaim")
        .collect();
    assert!(!claims.is_empty());
    for c in claims {
        let conds = array(&c["status"]["conditions"]);
        let get = |t: &str| {
            conds
                .iter()
                .find(|x| x["type"] == t)
                .unwrap_or_else(|| panic!("no {t} in {c}"))
        };
        let drifted = get("Drifted");
        assert_eq!(
            (&drifted["status"], &drifted["reason"], &drifted["message"]),
            (&"True".into(), &"AMIDrift".into(), &"AMIDrift".into())
        );
        // The release came at 10m; the condition was written then, once.
        let since = at(&r, &drifted["lastTransitionTime"]);
        assert!((600.0..700.0).contains(&since), "{since}");
        let consolidatable = get("Consolidatable");
        assert_eq!(consolidatable["status"], "True");
        assert!(at(&r, &consolidatable["lastTransitionTime"]) < 600.0);
    }
}

/// Each pod a launch is for is told where it will run, as Karpenter's
/// provisioner tells it: a `Nominated` Event naming the NodeClaim.
#[test]
fn pods_are_nominated_to_the_nodeclaims_launched_for_them() {
    let r = disruption("conditions");
    let claims: BTreeSet<&str> = array(&r["nodes"])
        .iter()
        .map(|n| n["nodeclaim"].as_str().unwrap())
        .collect();
    let nominated: Vec<&Value> = array(&r["events"])
        .iter()
        .filter(|e| e["reason"] == "Nominated")
        .collect();
    let pods: BTreeSet<&str> = nominated
        .iter()
        .map(|e| e["object"].as_str().unwrap())
        .collect();
    assert_eq!(pods.len(), 4, "{nominated:?}");
    for e in nominated {
        assert!(
            e["object"]
                .as_str()
                .unwrap()
                .starts_with("Pod/default/web-")
        );
        let on = e["message"]
            .as_str()
            .unwrap()
            .strip_prefix("Pod should schedule on: nodeclaim/")
            .unwrap_or_else(|| panic!("{e}"));
        assert!(claims.contains(on), "{on} not among {claims:?}");
    }
}
