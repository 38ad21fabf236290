//! CapacityBuffers and the `CapacityBuffer` feature gate, end to end:
//! tests/scenarios/buffer/refill.yaml through `dovetail simulate` (a buffer
//! of five one-cpu chunks in the repository, a burst of five web pods of
//! the same shape at 5m), with the gate on and, from the command line, off.
//! Karpenter v1.14.1's own cases (pkg/controllers/capacitybuffer/,
//! pkg/state/virtualpods/, provisioning/buffers_test.go, the consolidation
//! suite's "Buffer Pods") are ported beside the code, named after their
//! It()s.

use serde_json::Value;

use crate::disruption::{array, at};
use crate::support::dovetail;

const SCENARIO: &str = "tests/scenarios/buffer/refill.yaml";
const BURST: f64 = 300.0;

fn run(extra: &[&str]) -> Value {
    let mut args = vec!["simulate", SCENARIO, "--output", "json"];
    args.extend_from_slice(extra);
    let out = dovetail(&args);
    assert_eq!(out.code, 0, "{}", out.stderr);
    serde_json::from_str(&out.stdout).unwrap()
}

/// The nodes launched before `t` seconds, and the cpu they hold in whole
/// one-cpu chunks.
fn launched_before(r: &Value, t: f64) -> Vec<&Value> {
    array(&r["nodes"])
        .iter()
        .filter(|n| at(r, &n["launched_at"]) < t)
        .collect()
}

fn web_pods(r: &Value) -> Vec<&Value> {
    array(&r["pods"])
        .iter()
        .filter(|p| p["name"].as_str().unwrap().starts_with("web-"))
        .collect()
}

#[test]
fn a_buffer_of_5_chunks_keeps_room_a_burst_lands_without_a_launch_and_the_buffer_refills() {
    let r = run(&[]);
    // Room for the five chunks before any real pod: nodes launched for the
    // virtual pods alone, kept although empty (consolidateAfter: 0s).
    let early = launched_before(&r, BURST);
    assert!(!early.is_empty(), "no node was launched for the buffer");
    let chunks: i64 = early
        .iter()
        .map(|n| n["instance_type"].as_str().unwrap())
        .map(|t| match t {
            "c6i.large" => 1,
            "c6i.xlarge" => 3,
            "c6i.2xlarge" => 7,
            other => panic!("unexpected type {other}"),
        })
        .sum();
    assert!(chunks >= 5, "room for {chunks} chunks");
    assert!(
        r["summary"]["disruptions_by_reason"]
            .as_object()
            .unwrap()
            .is_empty(),
        "the buffer's nodes were disrupted: {}",
        r["disruptions"]
    );
    // The burst: every web pod runs on a node launched before it came,
    // without waiting.
    let web = web_pods(&r);
    assert_eq!(web.len(), 5);
    let early_names: Vec<&str> = early.iter().map(|n| n["name"].as_str().unwrap()).collect();
    for p in &web {
        assert!(
            early_names.contains(&p["node"].as_str().unwrap()),
            "{p} did not land on the buffer's room"
        );
        assert_eq!(p["pending_seconds"].as_f64(), Some(0.0), "{p}");
    }
    // The refill: capacity launched after the burst, within the buffer's
    // 30 s resync and a batch, for the chunks the burst displaced.
    let late: Vec<&Value> = array(&r["nodes"])
        .iter()
        .filter(|n| at(&r, &n["launched_at"]) >= BURST)
        .collect();
    assert!(!late.is_empty(), "the buffer did not refill");
    for n in &late {
        let t = at(&r, &n["launched_at"]);
        assert!(t <= BURST + 45.0, "refilled late, at {t}s");
    }
    // No real pod is pending at the end, and no Event names a virtual pod.
    assert_eq!(r["summary"]["pods_pending"], 0);
    assert!(
        array(&r["events"])
            .iter()
            .all(|e| !e["object"].as_str().unwrap().contains("capacity-buffer-")),
        "an Event names a virtual pod"
    );
}

#[test]
fn with_the_gate_off_the_burst_waits_for_a_launch() {
    let r = run(&["--feature-gates", "CapacityBuffer=false"]);
    assert!(launched_before(&r, BURST).is_empty(), "{}", r["nodes"]);
    let web = web_pods(&r);
    assert_eq!(web.len(), 5);
    assert!(
        web.iter()
            .all(|p| p["pending_seconds"].as_f64().unwrap() > 10.0),
        "{web:?}"
    );
}

#[test]
fn validate_warns_that_buffers_keep_no_capacity_while_the_gate_is_off() {
    let repo = "tests/scenarios/buffer/repo";
    let out = dovetail(&["validate", repo, "--worktree"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains(
            "warning: CapacityBuffer/web-headroom: CapacityBuffer keeps no capacity: the CapacityBuffer feature gate is off"
        ),
        "{}",
        out.stdout
    );
    let on = dovetail(&[
        "validate",
        repo,
        "--worktree",
        "--strict",
        "--feature-gates",
        "CapacityBuffer=true",
    ]);
    assert_eq!(on.code, 0, "{}{}", on.stdout, on.stderr);
}
