//! Node repair (`NodeRepair` feature gate) end to end: a node broken by the
//! simulated kubelet's `nodeCondition` step (tests/scenarios/repair/).
//! Karpenter v1.14.1's unit cases (pkg/controllers/node/health) are ported
//! next to the code, named after their It()s.

use serde_json::Value;

use crate::disruption::{array, assert_all_pods_run, at, nodes, report};

/// Events of a reason, with their times.
fn events<'a>(r: &'a Value, reason: &str) -> Vec<&'a Value> {
    array(&r["events"])
        .iter()
        .filter(|e| e["reason"] == reason)
        .collect()
}

#[test]
fn a_node_whose_ready_goes_unknown_is_replaced_after_30_minutes_but_not_while_2_of_5_are_unhealthy()
{
    let r = report("tests/scenarios/repair/repair.yaml");
    let repaired = events(&r, "Unhealthy");
    assert_eq!(repaired.len(), 2, "{repaired:?}");
    // Ready=Unknown at 5m: repaired at 35m, not before.
    assert_eq!(repaired[0]["t"].as_f64().unwrap(), 35.0 * 60.0);
    // Ready=Unknown on two of the five at 50m: held back (20% of 5 is 1)
    // from 80m until one is Ready again at 100m; then the other goes.
    let blocked = events(&r, "NodeRepairBlocked");
    assert!(!blocked.is_empty());
    for b in &blocked {
        let t = b["t"].as_f64().unwrap();
        assert!((80.0 * 60.0..100.0 * 60.0).contains(&t), "{b}");
        assert!(b["message"].as_str().unwrap().contains("(2 of 5)"), "{b}");
    }
    assert_eq!(repaired[1]["t"].as_f64().unwrap(), 100.0 * 60.0);
    // Replaced without draining: its pod deleted, not evicted, and new
    // capacity launched for it at once.
    assert!(events(&r, "Evicted").is_empty());
    let by_claim = nodes(&r);
    for e in &repaired {
        let claim = e["object"]
            .as_str()
            .unwrap()
            .trim_start_matches("NodeClaim/");
        let gone = at(&r, &by_claim[claim]["deleted_at"]);
        let t = e["t"].as_f64().unwrap();
        // Its pod is deleted with a grace period of 1 s, but the kubelet
        // stopped reporting and never confirms it: the drain stops waiting
        // a minute past the pod's deletionTimestamp (IsStuckTerminating),
        // then the instance goes.
        assert!(
            (t + 61.0..t + 70.0).contains(&gone),
            "{claim} went at +{gone}s"
        );
        let replacement = array(&r["nodes"])
            .iter()
            .filter(|n| at(&r, &n["launched_at"]) >= t)
            .map(|n| at(&r, &n["launched_at"]) - t)
            .fold(f64::INFINITY, f64::min);
        assert!(replacement < 10.0, "no node launched after +{t}s");
    }
    // Five nodes again at the end, every pod running.
    let alive = array(&r["nodes"])
        .iter()
        .filter(|n| n["deleted_at"].is_null())
        .count();
    assert_eq!(alive, 5);
    assert_all_pods_run(&r);
}
