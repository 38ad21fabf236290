//! Interruption end to end: scenarios in tests/scenarios/interruption/ run
//! through `dovetail simulate` (the JSON report), and through the library
//! for the controller's interruption metrics.

use std::path::Path;

use serde_json::Value;

use crate::support::dovetail;

fn report(name: &str) -> Value {
    let scenario = format!("tests/scenarios/interruption/{name}.yaml");
    let out = dovetail(&["simulate", &scenario, "--output", "json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    serde_json::from_str(&out.stdout).unwrap()
}

fn array(v: &Value) -> &Vec<Value> {
    v.as_array().unwrap()
}

/// Seconds since the start of the report of an RFC 3339 time.
fn at(r: &Value, t: &Value) -> f64 {
    let parse = |s: &str| s.parse::<jiff::Timestamp>().unwrap();
    parse(t.as_str().unwrap())
        .duration_since(parse(r["start"].as_str().unwrap()))
        .as_secs_f64()
}

fn events<'a>(r: &'a Value, reason: &str) -> Vec<&'a Value> {
    array(&r["events"])
        .iter()
        .filter(|e| e["reason"] == reason)
        .collect()
}

fn first_event(r: &Value, object: &str, reason: &str) -> Option<f64> {
    array(&r["events"])
        .iter()
        .find(|e| e["object"] == object && e["reason"] == reason)
        .map(|e| e["t"].as_f64().unwrap())
}

fn offering(n: &Value) -> (String, String, String) {
    let s = |k: &str| n[k].as_str().unwrap().to_string();
    (s("instance_type"), s("zone"), s("capacity_type"))
}

/// Every pod still there at the end runs, and nothing waits for capacity.
fn assert_all_pods_run(r: &Value) {
    assert_eq!(r["summary"]["pods_pending"], 0, "{}", r["summary"]);
    let mut running = 0;
    for p in array(&r["pods"]) {
        if p["deleted_at"].is_null() {
            assert_eq!(p["phase"], "Running", "{p}");
            running += 1;
        }
    }
    assert!(running > 0);
}

#[test]
fn a_spot_interruption_drains_the_node_and_replaces_it_before_ec2_reclaims_it() {
    let r = report("spot");
    let warned = 600.0;
    let reclaimed = warned + 120.0;

    // The warning.
    let warnings = events(&r, "SpotInterruptionWarning");
    let [warning] = warnings.as_slice() else {
        panic!("one warning: {warnings:?}");
    };
    assert_eq!(warning["t"], warned);
    let instance = warning["object"].as_str().unwrap();

    // The interrupted node: a spot node, disrupted with reason Interrupted
    // when the warning arrived, gone when EC2 reclaimed it.
    let id = instance.strip_prefix("Instance/").unwrap();
    let nodes = array(&r["nodes"]);
    let node = nodes.iter().find(|n| n["instance_id"] == id).unwrap();
    assert_eq!(node["capacity_type"], "spot");
    assert_eq!(node["disruption_reason"], "Interrupted");
    assert_eq!(at(&r, &node["disruption_started_at"]), warned);
    assert!(at(&r, &node["deleted_at"]) <= reclaimed, "{node}");
    let claim = node["nodeclaim"].as_str().unwrap();

    // One disruption decision: delete, reason Interrupted, at the warning.
    let disruptions: Vec<&Value> = array(&r["disruptions"])
        .iter()
        .filter(|d| d["reason"] == "Interrupted")
        .collect();
    let [d] = disruptions.as_slice() else {
        panic!("one interruption: {disruptions:?}");
    };
    assert_eq!(d["t"], warned);
    assert_eq!(d["decision"], "delete");
    assert_eq!(d["nodeclaims"], serde_json::json!([claim]));
    assert_eq!(r["summary"]["disruptions_by_reason"]["Interrupted"], 1);
    let object = format!("NodeClaim/{claim}");
    let decision = array(&r["events"])
        .iter()
        .find(|e| e["kind"] == "Disruption" && e["object"] == object.as_str())
        .unwrap();
    assert_eq!(decision["reason"], "Interrupted");
    assert_eq!(decision["t"], warned);
    assert!(
        decision["message"]
            .as_str()
            .unwrap()
            .contains("spot-interruption"),
        "{decision}"
    );

    // The offering is marked unavailable, and a replacement is launched on
    // another offering before the instance is reclaimed.
    let (ty, zone, ct) = offering(node);
    assert_eq!(
        first_event(
            &r,
            &format!("Offering/{ty}/{zone}/{ct}"),
            "OfferingUnavailable"
        ),
        Some(warned)
    );
    let replacements: Vec<&Value> = nodes
        .iter()
        .filter(|n| {
            let t = at(&r, &n["launched_at"]);
            t >= warned && t < reclaimed
        })
        .collect();
    assert!(
        !replacements.is_empty(),
        "no launch between the warning and the reclaim"
    );
    for n in &replacements {
        assert_ne!(offering(n), offering(node), "{n}");
    }

    // The node is drained: its pods are evicted before the reclaim (the
    // PodDisruptionBudget paces them), and none is lost with the instance.
    let drained: Vec<f64> = events(&r, "Evicted")
        .iter()
        .filter(|e| e["message"] == format!("evicted to drain {object}").as_str())
        .map(|e| e["t"].as_f64().unwrap())
        .collect();
    assert!(!drained.is_empty());
    assert!(
        drained.iter().all(|t| *t >= warned && *t < reclaimed),
        "{drained:?}"
    );
    assert!(events(&r, "PodGarbageCollected").is_empty());
    // Each evicted pod's report says when its termination began (the
    // eviction), and it was gone no earlier; pods never deleted say
    // nothing (CONVENTIONS: `pods[]`, `terminating_at`).
    for e in events(&r, "Evicted")
        .iter()
        .filter(|e| e["message"] == format!("evicted to drain {object}").as_str())
    {
        let key = e["object"].as_str().unwrap().strip_prefix("Pod/").unwrap();
        let pod = array(&r["pods"])
            .iter()
            .find(|p| {
                format!(
                    "{}/{}",
                    p["namespace"].as_str().unwrap(),
                    p["name"].as_str().unwrap()
                ) == key
            })
            .unwrap();
        assert_eq!(
            at(&r, &pod["terminating_at"]),
            e["t"].as_f64().unwrap(),
            "{pod}"
        );
        assert!(
            at(&r, &pod["deleted_at"]) >= at(&r, &pod["terminating_at"]),
            "{pod}"
        );
    }
    assert!(
        array(&r["pods"])
            .iter()
            .filter(|p| p["deleted_at"].is_null())
            .all(|p| p.get("terminating_at").is_none()),
        "a running pod never terminated"
    );
    assert!(
        events(&r, "EvictionBlocked")
            .iter()
            .any(|e| e["object"] == object.as_str()),
        "the budget should hold back part of the drain"
    );

    // dovetail terminated the drained instance itself before EC2 came for
    // it, so there was nothing left to reclaim.
    let terminated = first_event(&r, &object, "InstanceTerminated").unwrap();
    assert!(last_drained(&drained) <= terminated && terminated < reclaimed);
    assert_eq!(first_event(&r, instance, "SpotReclaimed"), None);

    // The report's timeline: warning, decision, launch, drain, reclaim.
    let launched = replacements
        .iter()
        .map(|n| at(&r, &n["launched_at"]))
        .fold(f64::INFINITY, f64::min);
    let last_drained = last_drained(&drained);
    assert!(warned <= launched && launched < reclaimed);
    assert!(last_drained < reclaimed);
    let ts: Vec<f64> = array(&r["events"])
        .iter()
        .map(|e| e["t"].as_f64().unwrap())
        .collect();
    assert!(ts.windows(2).all(|w| w[0] <= w[1]), "events out of order");

    assert_all_pods_run(&r);
}

fn last_drained(drained: &[f64]) -> f64 {
    drained.iter().copied().fold(0.0, f64::max)
}

#[test]
fn a_drain_that_cannot_finish_loses_its_pods_when_ec2_reclaims_the_instance() {
    let r = report("reclaim");
    let (warned, reclaimed) = (600.0, 720.0);
    let warnings = events(&r, "SpotInterruptionWarning");
    let [warning] = warnings.as_slice() else {
        panic!("one warning: {warnings:?}");
    };
    let instance = warning["object"].as_str().unwrap();
    // EC2 reclaims it two minutes after the warning: the do-not-disrupt pod
    // was never evicted, and is lost with the instance.
    assert_eq!(first_event(&r, instance, "SpotReclaimed"), Some(reclaimed));
    assert!(events(&r, "Evicted").is_empty());
    let id = instance.strip_prefix("Instance/").unwrap();
    let node = array(&r["nodes"])
        .iter()
        .find(|n| n["instance_id"] == id)
        .unwrap();
    assert_eq!(node["disruption_reason"], "Interrupted");
    assert_eq!(at(&r, &node["deleted_at"]), reclaimed);
    let object = format!("NodeClaim/{}", node["nodeclaim"].as_str().unwrap());
    assert_eq!(first_event(&r, &object, "DrainSkipped"), Some(reclaimed));
    let lost = events(&r, "PodGarbageCollected");
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert_eq!(lost[0]["t"], reclaimed);
    // Its replacement capacity was launched at the warning, so the pod
    // that takes its place is bound at once.
    let launched_between = array(&r["nodes"]).iter().any(|n| {
        let t = at(&r, &n["launched_at"]);
        t >= warned && t < reclaimed && offering(n) != offering(node)
    });
    assert!(launched_between);
    let replacement = array(&r["pods"]).iter().find(|p| {
        p["deleted_at"].is_null() && p["pending_seconds"] == 0.0 && {
            let name = p["name"].as_str().unwrap();
            name.starts_with("pinned-") && name != "pinned-00000" && name != "pinned-00001"
        }
    });
    assert!(replacement.is_some(), "{:?}", r["pods"]);
    assert_all_pods_run(&r);
}

#[test]
fn rebalance_is_recorded_and_scheduled_and_state_changes_delete_their_nodeclaims() {
    let r = report("kinds");
    // Rebalance: an event per node, nothing disrupted.
    let rebalance = events(&r, "RebalanceRecommendation");
    assert!(
        rebalance.iter().filter(|e| e["kind"] == "Instance").count() >= 4,
        "{rebalance:?}"
    );
    assert!(
        rebalance
            .iter()
            .filter(|e| e["kind"] == "NodeClaim")
            .all(|e| e["message"].as_str().unwrap().contains("not disrupted"))
    );
    let interrupted: Vec<&Value> = array(&r["disruptions"])
        .iter()
        .filter(|d| d["reason"] == "Interrupted")
        .collect();
    let times: Vec<f64> = interrupted
        .iter()
        .map(|d| d["t"].as_f64().unwrap())
        .collect();
    // The scheduled change at 12m and the state change at 20m.
    assert_eq!(times, [720.0, 1200.0], "{interrupted:?}");
    assert_eq!(r["summary"]["disruptions_by_reason"]["Interrupted"], 2);
    assert!(events(&r, "ScheduledChange").len() == 1);
    assert!(events(&r, "StateChange").len() == 1);
    // Only a spot interruption takes an offering out of use.
    assert!(events(&r, "OfferingUnavailable").is_empty());
    assert_all_pods_run(&r);
}

#[test]
fn the_controller_counts_and_times_interruption_messages() {
    let path = Path::new("tests/scenarios/interruption/spot.yaml");
    let scenario = dovetail::simulate::scenario::load(path).expect("the scenario loads");
    let report = dovetail::simulate::driver::Simulation::new(scenario, None)
        .expect("the simulation starts")
        .run(None)
        .expect("the simulation runs");
    let metrics = report
        .interruption_metrics
        .as_ref()
        .expect("the controller's interruption metrics");
    assert_eq!(metrics.received("spot_interrupted"), 1);
    assert_eq!(metrics.received("rebalance_recommendation"), 0);
    // One NodeClaim marked for deletion, on the virtual clock (no time
    // passes while the controller handles the message).
    assert_eq!(metrics.handling(), (1, 0.0));
    let text = metrics.text();
    for name in [
        "karpenter_interruption_received_messages_total{message_type=\"spot_interrupted\"} 1",
        "karpenter_interruption_message_queue_duration_seconds_count 1",
        "karpenter_interruption_deleted_messages_total 0",
        "dovetail_interruption_handling_seconds_count 1",
    ] {
        assert!(text.contains(name), "{name} missing from:\n{text}");
    }
    // Receipt to NodeClaim marked for deletion, on the wall clock.
    assert_eq!(report.interruption_handling.len(), 1);
    assert!(report.interruption_handling[0] < std::time::Duration::from_secs(5));
}
