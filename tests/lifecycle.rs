//! One NodeClaim's life, followed version by version through the in-memory
//! API server's watch log: launch, registration, initialization, drift,
//! disruption, drain and termination, against the sequence Karpenter v1.14.1
//! writes (its lifecycle, consistency, drift, disruption and termination
//! controllers and their tests).

use std::path::Path;

use dovetail::api::NodeClaim;
use dovetail::simulate::driver::Simulation;

/// What one version of the NodeClaim changed: a condition's status
/// (`Type=Status/Reason`), the deletion, or the removal.
fn transitions(versions: &[(String, Option<NodeClaim>)]) -> Vec<String> {
    let mut seen: std::collections::BTreeMap<String, String> = Default::default();
    let mut deleting = false;
    let mut out = Vec::new();
    for (event, claim) in versions {
        let Some(claim) = claim else {
            out.push(event.clone());
            continue;
        };
        if claim.metadata.deletion_timestamp.is_some() && !deleting {
            deleting = true;
            out.push("Deleting".into());
        }
        for c in claim
            .status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
        {
            let state = format!("{:?}/{}", c.status, c.reason.as_deref().unwrap_or(""));
            if seen.get(&c.type_) != Some(&state) {
                out.push(format!("{}={state}", c.type_));
                seen.insert(c.type_.clone(), state);
            }
        }
    }
    out
}

/// Seconds from the scenario's start of an RFC 3339 time.
fn at(report: &serde_json::Value, t: &str) -> f64 {
    let parse = |s: &str| s.parse::<jiff::Timestamp>().unwrap();
    parse(t)
        .duration_since(parse(report["start"].as_str().unwrap()))
        .as_secs_f64()
}

/// Launched, Registered, Initialized and Ready as Karpenter's lifecycle
/// controller writes them; ConsistentStateFound from its consistency
/// check; Consolidatable; Drifted (AMIDrift) before the disruption
/// controller acts on it (DisruptionReason=Drifted); the deletion; then
/// termination's Drained (Unknown while draining), VolumesDetached and
/// InstanceTerminating; and the Events the disruption queue sends on the
/// way.
#[test]
fn one_nodeclaim_lives_as_karpenter_writes_it() {
    let scenario =
        dovetail::simulate::scenario::load(Path::new("tests/scenarios/disruption/lifecycle.yaml"))
            .expect("the scenario loads");
    let sim = Simulation::new(scenario, None)
        .expect("the simulation starts")
        .keeping_watch_history();
    let cluster = sim.cluster();
    let report = sim.run(None).expect("the simulation runs");
    let report = serde_json::to_value(&report).expect("the report as JSON");
    let log = cluster.watch_from::<NodeClaim>(0).expect("the watch log");
    let first = log
        .first()
        .and_then(|e| e.object.metadata.name.clone())
        .expect("a NodeClaim");
    let versions: Vec<(String, Option<NodeClaim>)> = log
        .iter()
        .filter(|e| e.object.metadata.name.as_deref() == Some(first.as_str()))
        .map(|e| {
            let kind = format!("{:?}", e.event_type);
            let obj = (kind != "Deleted").then(|| (*e.object).clone());
            (kind, obj)
        })
        .collect();
    assert_eq!(
        transitions(&versions),
        [
            "Launched=True/Launched",
            "Registered=Unknown/AwaitingReconciliation",
            "Initialized=Unknown/AwaitingReconciliation",
            "Ready=Unknown/AwaitingReconciliation",
            "Registered=True/Registered",
            "Initialized=True/Initialized",
            "Ready=True/Ready",
            "ConsistentStateFound=True/ConsistentStateFound",
            "Consolidatable=True/Consolidatable",
            "Drifted=True/AMIDrift",
            "DisruptionReason=True/Drifted",
            "Deleting",
            "Drained=Unknown/Draining",
            "Drained=True/Drained",
            "VolumesDetached=True/VolumesDetached",
            "InstanceTerminating=True/InstanceTerminating",
            "Deleted",
        ]
    );

    // The last version before the removal holds every condition, each
    // with the time it last changed, in the order of the life.
    let last = versions
        .iter()
        .rev()
        .find_map(|(_, c)| c.clone())
        .expect("a last version");
    let conds = last
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let time = |t: &str| {
        let c = conds
            .iter()
            .find(|c| c.type_ == t)
            .unwrap_or_else(|| panic!("no {t}"));
        at(
            &report,
            &dovetail::clock::format_rfc3339(c.last_transition_time.0),
        )
    };
    let order = [
        "Launched",
        "Registered",
        "Initialized",
        "Drifted",
        "DisruptionReason",
        "Drained",
        "InstanceTerminating",
    ];
    for pair in order.windows(2) {
        assert!(
            time(pair[0]) <= time(pair[1]),
            "{} after {}: {conds:?}",
            pair[0],
            pair[1]
        );
    }
    // The release came at 10m.
    assert!(
        (600.0..660.0).contains(&time("Drifted")),
        "{}",
        time("Drifted")
    );
    let drifted = conds.iter().find(|c| c.type_ == "Drifted").unwrap();
    assert_eq!(drifted.message.as_deref(), Some("AMIDrift"));
    let reason = conds
        .iter()
        .find(|c| c.type_ == "DisruptionReason")
        .unwrap();
    assert_eq!(reason.message.as_deref(), Some("Drifted"));
    // The pod's binding was a pod event.
    let pod_event = last
        .status
        .as_ref()
        .and_then(|s| s.last_pod_event_time.clone())
        .expect("lastPodEventTime");
    assert!(at(&report, &dovetail::clock::format_rfc3339(pod_event.0)) <= time("Drifted"));

    // The disruption queue's Events: the replacement launching and awaited,
    // then the candidate and its Node disrupted, in that order.
    let events: Vec<&serde_json::Value> = report["events"].as_array().unwrap().iter().collect();
    let find = |reason: &str, message: &str| {
        events
            .iter()
            .position(|e| e["reason"] == reason && e["message"] == message)
            .unwrap_or_else(|| panic!("no {reason} {message:?} in {events:#?}"))
    };
    let launching = find("DisruptionLaunching", "Launching NodeClaim: Drifted");
    let waiting = find(
        "DisruptionWaitingReadiness",
        "Waiting on readiness to continue disruption",
    );
    let terminating = find("DisruptionTerminating", "Disrupting NodeClaim: Drifted");
    let node_terminating = find("DisruptionTerminating", "Disrupting Node: Drifted");
    assert_ne!(events[launching]["object"], format!("NodeClaim/{first}"));
    assert_eq!(events[terminating]["object"], format!("NodeClaim/{first}"));
    assert!(
        events[node_terminating]["object"]
            .as_str()
            .unwrap()
            .starts_with("Node/")
    );
    assert!(
        launching <= waiting && waiting < terminating,
        "{launching} {waiting} {terminating}"
    );
}
