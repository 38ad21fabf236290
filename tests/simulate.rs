//! `dovetail simulate` end to end: scenario files in tests/scenarios/ run
//! through the real controller, and the JSON report is asserted on.

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;

use serde_json::Value;

use crate::support::dovetail;

fn report(args: &[&str]) -> Value {
    let mut all = vec!["simulate"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--output", "json"]);
    let out = dovetail(&all);
    assert_eq!(out.code, 0, "{}", out.stderr);
    serde_json::from_str(&out.stdout).unwrap()
}

fn reasons_for(r: &Value, object: &str) -> Vec<String> {
    r["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["object"] == object)
        .map(|e| e["reason"].as_str().unwrap().to_string())
        .collect()
}

/// The messages of the report's events with `reason`, in order.
fn messages<'a>(r: &'a Value, reason: &str) -> Vec<&'a str> {
    r["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == reason)
        .map(|e| e["message"].as_str().unwrap())
        .collect()
}

fn node_of<'a>(r: &'a Value, node: &str) -> &'a Value {
    r["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == node)
        .unwrap()
}

#[test]
fn demo_goes_from_pending_pods_to_bound_pods() {
    let r = report(&[]);
    assert_eq!(r["schema_version"], 1);
    // Every NodeClaim goes through the lifecycle in order.
    let claims: BTreeSet<String> = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["object"].as_str())
        .filter(|o| o.starts_with("NodeClaim/"))
        .map(str::to_string)
        .collect();
    assert!(!claims.is_empty());
    for c in &claims {
        // The lifecycle's own Events (a replacement's also says what the
        // disruption queue waits for).
        let reasons: Vec<_> = reasons_for(&r, c)
            .into_iter()
            .filter(|r| {
                !r.starts_with("DisruptionLaunching") && !r.starts_with("DisruptionWaiting")
            })
            .collect();
        assert_eq!(
            reasons[..4],
            ["Provisioned", "Launched", "Registered", "Initialized"],
            "{c}"
        );
    }
    // Every pod was bound to a node; jobs completed; web pods run.
    for p in r["pods"].as_array().unwrap() {
        assert!(p["node"].is_string(), "pod never bound: {p}");
    }
    let phases: BTreeMap<String, String> = r["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                format!(
                    "{}/{}",
                    p["namespace"].as_str().unwrap(),
                    p["name"].as_str().unwrap()
                ),
                p["phase"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        phases.get("ml/fine-tune-00000").map(String::as_str),
        Some("Succeeded")
    );
    assert_eq!(
        phases.get("batch/nightly-report-00023").map(String::as_str),
        Some("Succeeded")
    );
    assert!(r["unschedulable"].as_array().unwrap().is_empty());
    let s = &r["summary"];
    assert!(s["cost_usd"].as_f64().unwrap() > 0.0);
    assert!(s["max_pending_seconds"].as_f64().unwrap() < 120.0, "{s}");
}

/// The first time an event with this object and reason is in the report.
fn first_event(r: &Value, object: &str, reason: &str) -> Option<f64> {
    r["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["object"] == object && e["reason"] == reason)
        .map(|e| e["t"].as_f64().unwrap())
}

/// Every replacement of a disruption is initialized before the node it
/// replaces starts to drain.
fn assert_replacements_initialized_first(r: &Value) {
    for d in r["disruptions"].as_array().unwrap() {
        for c in d["nodeclaims"].as_array().unwrap() {
            let drained = first_event(
                r,
                &format!("NodeClaim/{}", c.as_str().unwrap()),
                "DisruptionTerminating",
            );
            for rep in d["replacements"].as_array().unwrap() {
                let ready = first_event(
                    r,
                    &format!("NodeClaim/{}", rep.as_str().unwrap()),
                    "Initialized",
                );
                match (ready, drained) {
                    (Some(ready), Some(drained)) => assert!(ready <= drained, "{d}"),
                    (None, Some(_)) => panic!("{c} drained without its replacement {rep}: {d}"),
                    _ => {}
                }
            }
        }
    }
}

#[test]
fn demo_consolidates_replaces_drifted_nodes_and_ends_within_twice_the_bound() {
    let r = report(&[]);
    let reasons: BTreeSet<&str> = r["disruptions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["reason"].as_str().unwrap())
        .collect();
    for want in ["Empty", "Underutilized", "Drifted"] {
        assert!(reasons.contains(want), "{reasons:?}");
    }
    assert!(
        r["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "Disruption" && e["reason"] == "Drifted")
    );
    assert_replacements_initialized_first(&r);
    // Every pod that is still there runs; none waits.
    let s = &r["summary"];
    assert_eq!(s["pods_pending"], 0, "{s}");
    for p in r["pods"].as_array().unwrap() {
        if p["deleted_at"].is_null() {
            assert!(
                matches!(p["phase"].as_str(), Some("Running" | "Succeeded")),
                "{p}"
            );
        }
    }
    let price = s["price_per_hour"].as_f64().unwrap();
    let bound = s["lower_bound_price_per_hour"].as_f64().unwrap();
    assert!(price <= 2.0 * bound, "fleet {price} vs bound {bound}");
}

#[test]
fn demo_interrupts_a_spot_node_and_replaces_it_before_ec2_reclaims_it() {
    let r = report(&[]);
    let events = r["events"].as_array().unwrap();
    let warning = events
        .iter()
        .find(|e| e["reason"] == "SpotInterruptionWarning")
        .expect("a spot interruption warning");
    let warned = warning["t"].as_f64().unwrap();
    let id = warning["object"]
        .as_str()
        .unwrap()
        .strip_prefix("Instance/")
        .unwrap();
    let nodes = r["nodes"].as_array().unwrap();
    let node = nodes.iter().find(|n| n["instance_id"] == id).unwrap();
    assert_eq!(node["nodepool"], "batch");
    assert_eq!(node["disruption_reason"], "Interrupted");
    // EC2 reclaims it two minutes after the warning; dovetail has drained
    // and terminated it by then.
    let reclaimed = warned + 120.0;
    let claim = format!("NodeClaim/{}", node["nodeclaim"].as_str().unwrap());
    let terminated = first_event(&r, &claim, "InstanceTerminated").unwrap();
    assert!(
        warned <= terminated && terminated < reclaimed,
        "{terminated}"
    );
    let interrupted: Vec<&Value> = r["disruptions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["reason"] == "Interrupted")
        .collect();
    assert_eq!(interrupted.len(), 1, "{interrupted:?}");
    assert_eq!(interrupted[0]["nodeclaims"][0], node["nodeclaim"]);
    // Another batch node is launched before the reclaim.
    let start: jiff::Timestamp = r["start"].as_str().unwrap().parse().unwrap();
    let launched_between = nodes.iter().any(|n| {
        let t: jiff::Timestamp = n["launched_at"].as_str().unwrap().parse().unwrap();
        let t = t.duration_since(start).as_secs_f64();
        n["nodepool"] == "batch" && t >= warned && t < reclaimed
    });
    assert!(
        launched_between,
        "no batch node launched between {warned} and {reclaimed}"
    );
    // No pod is lost with the instance: the drain finished first (only
    // the node's DaemonSet pod goes with its node; finished Job pods go
    // with empty nodes later).
    let lost: Vec<&Value> = events
        .iter()
        .filter(|e| e["reason"] == "PodGarbageCollected")
        .filter(|e| e["t"].as_f64().unwrap() <= reclaimed)
        .filter(|e| !e["object"].as_str().unwrap().starts_with("Pod/monitoring/"))
        .collect();
    assert!(lost.is_empty(), "{lost:?}");
}

#[test]
fn gpu_pods_land_only_on_gpu_nodes_and_others_never_do() {
    let r = report(&[]);
    for p in r["pods"].as_array().unwrap() {
        let node = node_of(&r, p["node"].as_str().unwrap());
        let is_gpu_pod = p["namespace"] == "ml";
        let is_daemon = p["namespace"] == "monitoring";
        if is_daemon {
            continue;
        }
        assert_eq!(node["nodepool"] == "gpu", is_gpu_pod, "{p} on {node}");
    }
}

#[test]
fn zone_spread_is_honoured() {
    let r = report(&["--until", "30m"]);
    let mut per_zone: BTreeMap<String, usize> = BTreeMap::new();
    for p in r["pods"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["namespace"] == "shop" && p["name"].as_str().unwrap().starts_with("web-"))
        .filter(|p| p["deleted_at"].is_null())
    {
        let node = node_of(&r, p["node"].as_str().unwrap());
        *per_zone
            .entry(node["zone"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    assert_eq!(per_zone.len(), 3, "{per_zone:?}");
    let (min, max) = (
        per_zone.values().min().unwrap(),
        per_zone.values().max().unwrap(),
    );
    assert!(max - min <= 1, "{per_zone:?}");
}

#[test]
fn limits_stop_provisioning_with_a_clear_reason() {
    let r = report(&["tests/scenarios/limits.yaml"]);
    let cpu: f64 = r["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["instance_type"].as_str().unwrap())
        .map(|t| match t.split('.').nth(1).unwrap() {
            "large" => 2.0,
            "xlarge" => 4.0,
            "2xlarge" => 8.0,
            other => panic!("unexpected size {other}"),
        })
        .sum();
    assert!(cpu <= 8.0, "the limit of 8 vCPU was exceeded: {cpu}");
    let unschedulable = r["unschedulable"].as_array().unwrap();
    assert!(!unschedulable.is_empty());
    for u in unschedulable {
        let reason = u["reason"].as_str().unwrap();
        assert!(
            reason.contains("limit") && reason.contains("small"),
            "{reason}"
        );
    }
}

#[test]
fn insufficient_capacity_falls_back_to_another_offering() {
    let r = report(&["tests/scenarios/ice.yaml"]);
    let nodes = r["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    assert_ne!(nodes[0]["instance_type"], "m7i.large");
    assert_eq!(nodes[0]["capacity_type"], "on-demand");
    let pod = &r["pods"].as_array().unwrap()[0];
    assert_eq!(pod["node"], nodes[0]["name"]);
}

/// Issue 43, reservations in the simulated EC2: a NodePool allowing
/// reserved and on-demand capacity launches into the reservation its node
/// class selects (not another team's) until it is used up, then on demand;
/// when the reservation ends its nodes run on as on-demand nodes,
/// relabelled as Karpenter's capacity-type controller relabels them, and
/// cost the on-demand price from then on.
#[test]
fn a_reservation_is_used_up_then_its_end_moves_its_nodes_on_demand() {
    let r = report(&["tests/scenarios/reservations/used-up.yaml"]);
    let launched = messages(&r, "Launched");
    assert_eq!(launched.len(), 3, "{launched:?}");
    let reserved = launched
        .iter()
        .filter(|m| m.contains("(reserved) in us-east-1a"))
        .count();
    assert_eq!(reserved, 2, "the reservation holds two: {launched:?}");
    // One solve planned all three: two into the reservation (its two
    // instances), the third at the on-demand price, not three reserved
    // claims of which the launch would find one without a reservation.
    let planned = messages(&r, "Provisioned");
    assert_eq!(planned.len(), 3, "{planned:?}");
    assert_eq!(
        planned
            .iter()
            .filter(|m| m.ends_with("at $0.0000/h"))
            .count(),
        2,
        "{planned:?}"
    );
    assert_eq!(
        launched
            .iter()
            .filter(|m| m.contains("(on-demand)"))
            .count(),
        1,
        "{launched:?}"
    );
    // At its end (2 h), the two reserved nodes are relabelled.
    let relabelled: Vec<f64> = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == "CapacityTypeChanged")
        .map(|e| e["t"].as_f64().unwrap())
        .collect();
    assert_eq!(relabelled, [7200.0, 7200.0]);
    let nodes = r["nodes"].as_array().unwrap();
    assert!(
        nodes.iter().all(|n| n["capacity_type"] == "on-demand"),
        "{nodes:?}"
    );
    // Three on-demand nodes for 3 h, less the two reserved hours of two.
    let price = nodes[0]["price_per_hour"].as_f64().unwrap();
    let cost = r["summary"]["cost_usd"].as_f64().unwrap();
    let expected = price * (3.0 * 3.0 - 2.0 * 2.0);
    assert!(
        (cost - expected).abs() < price * 0.01,
        "{cost} against {expected}"
    );
}

/// Pods that select reserved capacity launch into the reservation while an
/// instance is left in it, and wait once it is used up: they take no other
/// capacity type.
#[test]
fn pods_that_ask_for_reserved_capacity_wait_once_the_reservation_is_used_up() {
    let r = report(&["tests/scenarios/reservations/reserved-only.yaml"]);
    let nodes = r["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    assert_eq!(nodes[0]["capacity_type"], "reserved");
    assert_eq!(r["summary"]["pods_pending"], 1);
    let u = r["unschedulable"].as_array().unwrap();
    assert_eq!(u.len(), 1, "{u:?}");
    assert_eq!(u[0]["pod"], "default/reserved-only-00001");
}

/// Pods select reservations by their labels (`capacity-reservation-id`,
/// `-type`): they launch only into a reservation whose labels they allow,
/// in its zone, and wait once it is used up; pods that select nothing take
/// what is left, ordinary reservations first, then on-demand capacity.
#[test]
fn pods_select_reservations_by_id_and_type() {
    let r = report(&["tests/scenarios/reservations/select.yaml"]);
    let nodes = r["nodes"].as_array().unwrap();
    let on = |pod: &str| {
        nodes
            .iter()
            .find(|n| n["pods"].as_array().unwrap().iter().any(|p| p == pod))
            .unwrap_or_else(|| panic!("{pod} on no node: {nodes:?}"))
    };
    for pod in ["default/block-00000", "default/block-00001"] {
        assert_eq!(on(pod)["capacity_type"], "reserved");
        assert_eq!(on(pod)["zone"], "us-east-1b", "the block's zone");
        assert_eq!(on(pod)["reservation"], "cr-0b10c4000000000002");
    }
    assert_eq!(
        on("default/ordinary-00000")["reservation"],
        "cr-0a1b2c3d4e5f60718",
        "the ordinary reservation"
    );
    let later: Vec<&str> = ["default/any-00000", "default/any-00001"]
        .iter()
        .map(|p| on(p)["capacity_type"].as_str().unwrap())
        .collect();
    assert!(
        later.contains(&"reserved") && later.contains(&"on-demand"),
        "{later:?}"
    );
    // A node outside a reservation names none.
    for n in nodes.iter().filter(|n| n["capacity_type"] != "reserved") {
        assert!(n.get("reservation").is_none(), "{n}");
    }
    let u = r["unschedulable"].as_array().unwrap();
    assert_eq!(u.len(), 1, "{u:?}");
    assert_eq!(u[0]["pod"], "default/block-00002");
    assert!(
        u[0]["reason"]
            .as_str()
            .unwrap()
            .contains("no capacity reservation the pod selects has an instance left"),
        "{u:?}"
    );
}

/// A node class that selects a partition placement group: pods select a
/// partition by its label, the others go to the partitions with the fewest
/// of the group's nodes, and every node carries the group and partition.
#[test]
fn nodes_launch_into_the_placement_group_and_partition_pods_select() {
    let r = report(&["tests/scenarios/placement/partition.yaml"]);
    let nodes = r["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 5, "{nodes:?}");
    let partition_of = |pod: &str| {
        let n = nodes
            .iter()
            .find(|n| n["pods"].as_array().unwrap().iter().any(|p| p == pod))
            .unwrap_or_else(|| panic!("{pod} on no node: {nodes:?}"));
        assert_eq!(n["placement_group"], "pg-0a1b2c3d4e5f60718");
        n["placement_partition"].as_str().unwrap_or("").to_string()
    };
    for pod in ["default/second-00000", "default/second-00001"] {
        assert_eq!(partition_of(pod), "2", "{pod} asked for partition 2");
    }
    let mut others: Vec<String> = (0..3)
        .map(|i| partition_of(&format!("default/any-0000{i}")))
        .collect();
    others.sort();
    assert_eq!(others, ["1", "1", "3"], "the least used partitions first");
    assert_eq!(r["summary"]["pods_pending"], 0);
}

/// Pods spread over a partition group's partitions by topology spread on
/// the partition label, whose values the instance types define (as
/// Karpenter's per-partition offerings make them domains).
#[test]
fn pods_spread_over_the_partitions_of_a_placement_group() {
    let r = report(&["tests/scenarios/placement/spread.yaml"]);
    assert_eq!(r["summary"]["pods_pending"], 0);
    let mut partitions: Vec<&str> = r["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["placement_partition"].as_str().unwrap_or(""))
        .collect();
    partitions.sort_unstable();
    assert_eq!(partitions, ["1", "2", "3"]);
}

/// A node class whose placement group the account lacks is not ready, and
/// its NodePool is skipped (as Karpenter skips a NodePool whose node class
/// is not ready): no NodeClaim is planned to fail at launch.
#[test]
fn a_missing_placement_group_launches_nothing() {
    let r = report(&["tests/scenarios/placement/missing.yaml"]);
    assert_eq!(r["nodes"].as_array().unwrap().len(), 0);
    assert_eq!(r["summary"]["pods_pending"], 1);
    assert!(messages(&r, "Provisioned").is_empty());
    let skipped = messages(&r, "NodeClassNotReady");
    assert!(
        skipped
            .first()
            .is_some_and(|m| m.contains("PlacementGroupReady=False")),
        "{skipped:?}"
    );
}

/// A capacity block's node is deleted 40 minutes before the block ends
/// (Karpenter's capacityreservation.expiration), and its pod moves to an
/// on-demand node: the block is expiring, so nothing launches into it.
#[test]
fn an_expiring_capacity_block_moves_its_pods_on_demand_before_it_ends() {
    let r = report(&["tests/scenarios/reservations/capacity-block.yaml"]);
    let nodes = r["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2, "{nodes:?}");
    assert_eq!(nodes[0]["capacity_type"], "reserved");
    assert_eq!(nodes[0]["price_per_hour"], 0.0);
    let deleted = nodes[0]["deleted_at"].as_str().expect("deleted");
    assert!(deleted < "2026-01-05T01:21:00Z", "{deleted}");
    assert!(
        reasons_for(&r, "NodeClaim/ml-00001").contains(&"CapacityReservationExpiring".to_string())
    );
    assert_eq!(nodes[1]["capacity_type"], "on-demand");
    assert!(nodes[1]["deleted_at"].is_null());
    assert_eq!(r["summary"]["pods_pending"], 0);
}

#[test]
fn same_run_twice_gives_byte_identical_reports() {
    let a = dovetail(&["simulate", "--output", "json"]);
    let b = dovetail(&["simulate", "--output", "json"]);
    assert_eq!(a.code, 0);
    assert!(a.stdout == b.stdout, "reports differ");
}

#[test]
fn pods_larger_than_any_instance_type_are_reported() {
    let r = report(&["tests/scenarios/too-big.yaml"]);
    let u = r["unschedulable"].as_array().unwrap();
    assert_eq!(u.len(), 1, "{u:?}");
    assert_eq!(u[0]["pod"], "default/giant");
    assert!(
        u[0]["reason"].as_str().unwrap().contains("cpu"),
        "{}",
        u[0]["reason"]
    );
    assert!(r["nodes"].as_array().unwrap().is_empty());
}

#[test]
fn bad_scenarios_name_the_file_and_line() {
    for (file, expected) in [
        (
            "bad-step.yaml",
            "tests/scenarios/bad-step.yaml:10:5: error: unknown step `launch`",
        ),
        (
            "backwards.yaml",
            "tests/scenarios/backwards.yaml:5:9: error: time goes backwards",
        ),
        (
            "malformed.yaml",
            "tests/scenarios/malformed.yaml:9:21: error: Deployment/broken: spec.replicas: replicas must be an integer from 0 to 100000, not \"many\"",
        ),
    ] {
        let out = dovetail(&["simulate", &format!("tests/scenarios/{file}")]);
        assert_eq!(out.code, 2, "{file}: {}", out.stdout);
        assert!(out.stderr.starts_with(expected), "{file}: {}", out.stderr);
    }
}

/// The scenarios in tests/scenarios/ that the simulator accepts also satisfy
/// the published JSON Schema.
#[test]
fn scenario_schema_accepts_the_valid_scenarios() {
    let schema: Value =
        serde_json::from_str(include_str!("../schemas/scenario.schema.json")).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    for file in [
        "demo.yaml",
        "limits.yaml",
        "ice.yaml",
        "ice-learn.yaml",
        "mixed.yaml",
        "anti-affinity.yaml",
        "pending-end.yaml",
        "too-big.yaml",
        "backwards.yaml",
        "interruption/spot.yaml",
        "interruption/kinds.yaml",
        "reservations/used-up.yaml",
        "reservations/capacity-block.yaml",
        "reservations/reserved-only.yaml",
    ] {
        let text = std::fs::read_to_string(format!("tests/scenarios/{file}")).unwrap();
        let parsed =
            dovetail::config::yaml::parse_documents(file, text.as_bytes(), &Default::default());
        let doc = parsed.docs[0].root.to_json();
        let errors: Vec<String> = validator.iter_errors(&doc).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{file}: {errors:?}");
    }
    let bad: Value = serde_json::json!({"config": "x", "timeline": [{"at": "1m", "launch": {}}]});
    assert!(!validator.is_valid(&bad));
}

/// Launch delay (45 s) + a batch window (at most 10 s) + one re-solve and
/// its launch: about two minutes. The resync is 15 minutes.
const ONE_RESOLVE: f64 = 120.0;

fn assert_every_pod_runs_within(r: &Value, seconds: f64) {
    for p in r["pods"].as_array().unwrap() {
        assert!(p["node"].is_string(), "pod never bound: {p}");
        let pending = p["pending_seconds"].as_f64().unwrap();
        assert!(pending <= seconds, "pending {pending} s: {p}");
    }
    assert_eq!(r["summary"]["pods_pending"], 0);
    assert!(r["unschedulable"].as_array().unwrap().is_empty());
}

fn provisioned_at(r: &Value) -> Vec<f64> {
    r["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == "Provisioned")
        .map(|e| e["t"].as_f64().unwrap())
        .collect()
}

/// Regression: kube-scheduler does not follow the plan, so pods planned on
/// new nodes found their room taken by others once the nodes were ready,
/// and waited for the 15-minute resync.
#[test]
fn pods_displaced_by_kube_scheduler_get_capacity_at_once() {
    let r = report(&["tests/scenarios/mixed.yaml"]);
    assert_every_pod_runs_within(&r, ONE_RESOLVE);
    let at = provisioned_at(&r);
    assert!(at.iter().all(|t| *t < ONE_RESOLVE), "{at:?}");
    // The scheduler did disagree: a second solve was needed.
    assert!(at.iter().any(|t| *t > 10.0), "{at:?}");
}

/// Regression: 40 anti-affine pods got their nodes in waves, one per
/// resync, because each claim reserved the largest type it might launch
/// against the NodePool's limits.
#[test]
fn anti_affine_replicas_get_all_their_nodes_in_one_wave() {
    let r = report(&["tests/scenarios/anti-affinity.yaml"]);
    assert_every_pod_runs_within(&r, ONE_RESOLVE);
    let at = provisioned_at(&r);
    assert_eq!(at.len(), 40);
    assert!(at.iter().all(|t| *t <= 10.0), "{at:?}");
}

/// Insufficient capacity is learnt by failing a launch: the failure is in
/// the report, the offering is skipped for three minutes, then used again.
#[test]
fn insufficient_capacity_is_learnt_by_failing_and_skipped_for_three_minutes() {
    let r = report(&["tests/scenarios/ice-learn.yaml"]);
    assert_every_pod_runs_within(&r, ONE_RESOLVE);
    let events = r["events"].as_array().unwrap();
    let failed: Vec<&Value> = events
        .iter()
        .filter(|e| e["reason"] == "InsufficientCapacity")
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(
        failed[0]["message"]
            .as_str()
            .unwrap()
            .contains("m7i.large/us-east-1a/on-demand"),
        "{}",
        failed[0]
    );
    let t_failed = failed[0]["t"].as_f64().unwrap();
    let since_start = |n: &Value| {
        let at = n["launched_at"].as_str().unwrap();
        let t = jiff::Timestamp::from_str(at).unwrap();
        t.duration_since(jiff::Timestamp::from_str("2026-01-05T00:00:00Z").unwrap())
            .as_secs_f64()
    };
    let mut large = Vec::new();
    for n in r["nodes"].as_array().unwrap() {
        if n["instance_type"] == "m7i.large" {
            large.push(since_start(n));
        }
    }
    // Within three minutes of the failure, nothing launches on it, though
    // its window has closed; after them, it is the cheapest again (for the
    // third pod, and for the consolidation of the larger nodes).
    assert!(
        large.iter().all(|t| *t >= t_failed + 180.0),
        "m7i.large launched at {large:?}, failure at {t_failed}"
    );
    assert!(!large.is_empty());
}

/// Regression: a pod deleted while pending counted as pending until the end
/// of the run, and a pod pending at the end was not listed anywhere.
#[test]
fn pending_time_ends_at_deletion_and_pods_pending_at_the_end_are_listed() {
    let r = report(&["tests/scenarios/pending-end.yaml"]);
    let pods: BTreeMap<&str, &Value> = r["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), p))
        .collect();
    assert_eq!(pods["giant"]["pending_seconds"], 120.0);
    assert_eq!(pods["late"]["pending_seconds"], 20.0);
    assert_eq!(r["summary"]["max_pending_seconds"], 120.0);
    assert_eq!(r["summary"]["pods_pending"], 1);
    let u = r["unschedulable"].as_array().unwrap();
    assert_eq!(u.len(), 1, "{u:?}");
    assert_eq!(u[0]["pod"], "default/late");
    assert_eq!(u[0]["reason"], "waiting for capacity");
    let text = dovetail(&["simulate", "tests/scenarios/pending-end.yaml"]);
    assert!(
        text.stdout.contains("pods still pending  1"),
        "{}",
        text.stdout
    );
}

/// A launch that fails with access denied backs off, is deleted at the
/// 5-minute launch timeout (Karpenter's `launch_timeout`), and its pod
/// gets another claim that launches once the policy allows it.
#[test]
fn a_launch_denied_is_deleted_after_the_timeout_and_its_pods_get_another_claim() {
    let r = report(&["tests/scenarios/launch/access-denied.yaml"]);
    let events = r["events"].as_array().unwrap();
    let at = |e: &Value| e["t"].as_f64().unwrap_or_default();
    let failed: Vec<&Value> = events
        .iter()
        .filter(|e| e["reason"] == "LaunchFailed")
        .collect();
    let first = failed.first().expect("the launch failed");
    let claim = first["object"].as_str().unwrap();
    assert!(
        first["message"].as_str().unwrap().contains("access denied"),
        "{first}"
    );
    // Backed off: far fewer attempts than passes in five minutes.
    let attempts = failed.iter().filter(|e| e["object"] == claim).count();
    assert!((3..=12).contains(&attempts), "{attempts} attempts");
    let timeout = events
        .iter()
        .find(|e| e["object"] == claim && e["reason"] == "LaunchTimeout")
        .unwrap_or_else(|| {
            panic!(
                "{claim} deleted at the launch timeout: {:?}",
                reasons_for(&r, claim)
            )
        });
    let waited = at(timeout) - at(first);
    assert!(
        (299.0..=330.0).contains(&waited),
        "deleted {waited}s after the first failure"
    );
    // Another claim launches once the policy allows it, and the pod runs.
    let launched: Vec<&Value> = events
        .iter()
        .filter(|e| e["reason"] == "Launched")
        .collect();
    assert_eq!(launched.len(), 1, "{launched:?}");
    assert_ne!(launched[0]["object"], claim);
    assert!(at(launched[0]) >= 480.0, "{}", launched[0]);
    let pod = &r["pods"].as_array().unwrap()[0];
    assert!(pod["node"].is_string(), "{pod}");
    assert_eq!(r["nodes"].as_array().unwrap().len(), 1);
}

/// A scale-up of 1,000 pending pods while each EC2 call takes 1 s: the
/// launches go out 20 at a time, so every NodeClaim is launched within
/// ceil(claims / 20) seconds of its provisioning, plus one second for the
/// controller's one listing of instances before its first launch. One at
/// a time (`launchConcurrency: 1`) it took a second per claim.
#[test]
fn a_scale_up_reaches_all_its_launches_within_the_concurrency_bound() {
    let r = report(&["tests/scenarios/launch/scale-up.yaml"]);
    let events = r["events"].as_array().unwrap();
    let times = |reason: &str| -> Vec<f64> {
        events
            .iter()
            .filter(|e| e["reason"] == reason)
            .map(|e| e["t"].as_f64().unwrap())
            .collect()
    };
    let provisioned = times("Provisioned");
    let launched = times("Launched");
    assert!(provisioned.len() > 100, "{} claims", provisioned.len());
    assert_eq!(launched.len(), provisioned.len());
    let first = provisioned.iter().copied().fold(f64::INFINITY, f64::min);
    let last = launched.iter().copied().fold(0.0, f64::max);
    let bound = 1.0 + (provisioned.len() as f64 / 20.0).ceil();
    assert!(
        last - first <= bound,
        "{} launches took {}s, bound {bound}s",
        launched.len(),
        last - first
    );
    let pods = r["pods"].as_array().unwrap();
    assert!(pods.iter().all(|p| p["node"].is_string()));
}
