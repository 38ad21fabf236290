//! Volumes end to end through `dovetail simulate`: the stand-in
//! attach-detach controller attaches a pod's persistent volume to its node
//! and detaches it once the pod is gone, and termination waits for the
//! detachment before terminating the instance (Karpenter v1.14.1's
//! `awaitVolumeDetachment`).

use serde_json::Value;

use crate::support::dovetail;

fn report(name: &str) -> Value {
    let scenario = format!("tests/scenarios/volumes/{name}.yaml");
    let out = dovetail(&["simulate", &scenario, "--output", "json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    serde_json::from_str(&out.stdout).unwrap()
}

fn events<'a>(r: &'a Value, reason: &str) -> Vec<&'a Value> {
    r["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == reason)
        .collect()
}

/// Seconds since the start of the report of an RFC 3339 time.
fn at(r: &Value, t: &Value) -> f64 {
    let parse = |s: &str| s.parse::<jiff::Timestamp>().unwrap();
    parse(t.as_str().unwrap())
        .duration_since(parse(r["start"].as_str().unwrap()))
        .as_secs_f64()
}

fn t(e: &Value) -> f64 {
    e["t"].as_f64().unwrap()
}

#[test]
fn the_instance_is_terminated_only_once_the_pods_volume_is_detached() {
    let r = report("detach");
    let db = r["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "db")
        .expect("the pod");
    let node = db["node"].as_str().expect("the pod ran on a node");

    let attached = events(&r, "VolumeAttached");
    let [attached] = attached.as_slice() else {
        panic!("one attach: {attached:?}");
    };
    assert_eq!(attached["message"], format!("pv-db attached to {node}"));
    assert!(t(attached) < 300.0);

    // The NodeClaim is deleted at 5m: the pod is evicted and stops for its
    // 30 s; its volume is detached 10 s after it is gone.
    assert!(!db["deleted_at"].is_null(), "the pod was drained: {db}");
    let gone = at(&r, &db["deleted_at"]);
    assert_eq!(at(&r, &db["terminating_at"]), 300.0, "{db}");
    assert_eq!(gone, 330.0, "its 30 s grace period: {db}");
    let detached = events(&r, "VolumeDetached");
    let [detached] = detached.as_slice() else {
        panic!("one detach: {detached:?}");
    };
    assert_eq!(detached["object"], attached["object"]);
    assert_eq!(t(detached), gone + 10.0, "{detached}");

    // Meanwhile the node waits, saying for what.
    let awaiting = events(&r, "AwaitingVolumeDetachment");
    let [awaiting] = awaiting.as_slice() else {
        panic!("one Event while the same attachment is pending: {awaiting:?}");
    };
    assert_eq!(awaiting["object"], format!("Node/{node}"));
    let name = attached["object"]
        .as_str()
        .unwrap()
        .strip_prefix("VolumeAttachment/")
        .unwrap();
    assert_eq!(
        awaiting["message"],
        format!("Awaiting deletion of bound volumeattachments ({name})")
    );
    assert!(
        gone <= t(awaiting) && t(awaiting) < t(detached),
        "{awaiting}"
    );

    // Terminated after the detach, not when the drain ended.
    let terminated = events(&r, "InstanceTerminated");
    let [terminated] = terminated.as_slice() else {
        panic!("one termination: {terminated:?}");
    };
    assert!(
        t(terminated) >= t(detached),
        "{terminated} before {detached}"
    );
    let n = r["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == node)
        .unwrap();
    assert!(!n["deleted_at"].is_null(), "{n}");
}
