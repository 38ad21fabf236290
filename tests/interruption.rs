//! Interruption events: the parser on real-shaped EventBridge JSON (the
//! documented shapes, in `tests/fixtures/interruption/`, and the
//! constructors the simulation uses), malformed, unknown and oversized
//! bodies, a property test that no input panics, the decisions, and
//! `deliver` with a recording handler (which the SQS suite reuses).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use serde_json::{Value, json};

use dovetail::clock::{Clock, SystemClock, Timestamp, parse_rfc3339};
use dovetail::cloud::OfferingKey;
use dovetail::interruption::{
    Action, ClaimInfo, Detail, HandlerError, IgnoredKind, InstanceState, Kind, MAX_MESSAGE_BYTES,
    Message, MessageHandler, Metrics, Options, Outcome, ParseError, Parsed, decide, deliver,
    events, instance_id_of, parse, parse_bytes,
};

use crate::support::root;

fn fixture(name: &str) -> String {
    let path = root().join("tests/fixtures/interruption").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn ts(s: &str) -> Timestamp {
    parse_rfc3339(s).expect("valid time")
}

fn message(body: &str) -> Message {
    match parse(body) {
        Ok(Parsed::Message(m)) => m,
        other => panic!("expected a message, got {other:?}"),
    }
}

fn ignored(body: &str) -> IgnoredKind {
    match parse(body) {
        Ok(Parsed::Ignored(i)) => i.kind,
        other => panic!("expected an ignored event, got {other:?}"),
    }
}

#[test]
fn documented_spot_interruption_warning() {
    let m = message(&fixture("spot-interruption.json"));
    assert_eq!(m.id, "12345678-1234-1234-1234-123456789012");
    assert_eq!(m.time, ts("2026-03-14T09:26:53Z"));
    assert_eq!(
        m.detail,
        Detail::SpotInterruption {
            instance_id: "i-1234567890abcdef0".into(),
            action: Some("terminate".into()),
        }
    );
    assert_eq!(m.kind().as_str(), "spot-interruption");
}

#[test]
fn documented_rebalance_recommendation() {
    let m = message(&fixture("rebalance-recommendation.json"));
    assert_eq!(
        m.detail,
        Detail::Rebalance {
            instance_id: "i-1234567890abcdef0".into()
        }
    );
    assert_eq!(m.kind().as_str(), "rebalance");
}

#[test]
fn documented_scheduled_change() {
    let m = message(&fixture("scheduled-change.json"));
    assert_eq!(
        m.detail,
        Detail::ScheduledChange {
            instance_ids: vec!["i-0abcd1111ef234567".into(), "i-0abcd2222ef234567".into()],
            event_type_code: Some("AWS_EC2_PERSISTENT_INSTANCE_RETIREMENT_SCHEDULED".into()),
        }
    );
    assert_eq!(m.time, ts("2026-03-01T06:27:57Z"));
}

#[test]
fn documented_state_change_without_version() {
    let m = message(&fixture("state-change-shutting-down.json"));
    assert_eq!(
        m.detail,
        Detail::StateChange {
            instance_id: "i-0abcd1111ef234567".into(),
            state: InstanceState::ShuttingDown,
        }
    );
    assert_eq!(
        ignored(&fixture("state-change-pending.json")),
        IgnoredKind::StateChange
    );
}

#[test]
fn other_health_events_and_sources_are_ignored_by_kind() {
    assert_eq!(
        ignored(&fixture("health-issue.json")),
        IgnoredKind::HealthEvent
    );
    assert_eq!(
        ignored(&fixture("autoscaling-launch.json")),
        IgnoredKind::Unknown
    );
    let mut v: Value = serde_json::from_str(&fixture("scheduled-change.json")).unwrap();
    v["detail"]["service"] = json!("RDS");
    assert_eq!(ignored(&v.to_string()), IgnoredKind::HealthEvent);
    let mut v: Value = serde_json::from_str(&fixture("scheduled-change.json")).unwrap();
    v["detail"]["statusCode"] = json!("closed");
    assert_eq!(ignored(&v.to_string()), IgnoredKind::HealthEvent);
    let mut v: Value = serde_json::from_str(&fixture("scheduled-change.json")).unwrap();
    v["detail-type"] = json!("AWS Health Abuse Event");
    assert_eq!(ignored(&v.to_string()), IgnoredKind::HealthEvent);
    let mut v: Value = serde_json::from_str(&fixture("rebalance-recommendation.json")).unwrap();
    v["detail-type"] = json!("EC2 Fast Snapshot Restore State-change Notification");
    assert_eq!(ignored(&v.to_string()), IgnoredKind::Ec2Event);
    // An ignored event is not read further: its detail may be anything.
    v["detail"] = json!(null);
    v["time"] = json!("yesterday");
    assert_eq!(ignored(&v.to_string()), IgnoredKind::Ec2Event);
    for label in IgnoredKind::ALL.map(IgnoredKind::as_str) {
        assert!(label.starts_with("ignored-"), "{label}");
    }
}

#[test]
fn scheduled_change_keeps_instance_entities_once_in_order() {
    let mut v: Value = serde_json::from_str(&fixture("scheduled-change.json")).unwrap();
    v["detail"]["affectedEntities"] = json!([
        {"entityValue": "i-0000000000000000b"},
        {"entityValue": "vol-0123456789abcdef0"},
        {"entityValue": "i-0000000000000000a"},
        {"status": "PENDING"},
        {"entityValue": "i-0000000000000000b"},
    ]);
    let m = message(&v.to_string());
    assert_eq!(
        m.detail.instance_ids(),
        ["i-0000000000000000b", "i-0000000000000000a"]
    );
    v["detail"]
        .as_object_mut()
        .unwrap()
        .remove("affectedEntities");
    assert!(message(&v.to_string()).detail.instance_ids().is_empty());
}

#[test]
fn constructors_build_events_the_parser_reads() {
    let t = ts("2026-11-21T13:00:00Z");
    let (id, region, account) = ("i-00000000000000001", "us-east-1", "123456789012");
    let spot = events::spot_interruption(id, region, account, t);
    let m = message(&spot);
    assert_eq!(m.time, t);
    assert_eq!(
        m.detail,
        Detail::SpotInterruption {
            instance_id: id.into(),
            action: Some("terminate".into())
        }
    );
    let v: Value = serde_json::from_str(&spot).unwrap();
    assert_eq!(v["version"], "0");
    assert_eq!(v["source"], "aws.ec2");
    assert_eq!(v["detail-type"], "EC2 Spot Instance Interruption Warning");
    assert_eq!(v["time"], "2026-11-21T13:00:00Z");
    assert_eq!(
        v["resources"][0],
        "arn:aws:ec2:us-east-1:123456789012:instance/i-00000000000000001"
    );
    // Ids are UUID-shaped, deterministic and differ between events.
    let event_id = v["id"].as_str().unwrap();
    let re = regex::Regex::new("^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
        .unwrap();
    assert!(re.is_match(event_id), "{event_id}");
    assert_eq!(spot, events::spot_interruption(id, region, account, t));
    assert_ne!(
        message(&events::spot_interruption(
            "i-00000000000000002",
            region,
            account,
            t
        ))
        .id,
        m.id
    );

    let m = message(&events::rebalance_recommendation(id, region, account, t));
    assert_eq!(
        m.detail,
        Detail::Rebalance {
            instance_id: id.into()
        }
    );

    for state in InstanceState::ALL {
        let body = events::state_change(id, state, region, account, t);
        match parse(&body).unwrap() {
            Parsed::Message(m) => {
                assert!(state.is_leaving());
                assert_eq!(
                    m.detail,
                    Detail::StateChange {
                        instance_id: id.into(),
                        state
                    }
                );
            }
            Parsed::Ignored(i) => {
                assert!(!state.is_leaving());
                assert_eq!(i.kind, IgnoredKind::StateChange);
            }
        }
    }

    let ids = ["i-00000000000000001", "i-00000000000000002"];
    let body = events::scheduled_change(&ids, "cn-north-1", account, t);
    let m = message(&body);
    assert_eq!(m.detail.instance_ids(), ids);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["detail"]["startTime"], "Sat, 05 Dec 2026 13:00:00 GMT");
    assert!(
        v["detail"]["eventArn"]
            .as_str()
            .unwrap()
            .starts_with("arn:aws-cn:health:cn-north-1::event/EC2/")
    );
}

fn parse_err(body: &str) -> ParseError {
    match parse(body) {
        Err(e) => e,
        Ok(p) => panic!("expected an error, got {p:?}"),
    }
}

#[test]
fn malformed_messages_are_typed_errors() {
    let spot: Value = serde_json::from_str(&fixture("spot-interruption.json")).unwrap();
    let with = |path: &[&str], value: Option<Value>| {
        let mut v = spot.clone();
        let mut at = &mut v;
        for key in &path[..path.len() - 1] {
            at = &mut at[*key];
        }
        let last = path[path.len() - 1];
        match value {
            Some(value) => at[last] = value,
            None => {
                at.as_object_mut().unwrap().remove(last);
            }
        }
        v.to_string()
    };
    let cases: Vec<(String, &str)> = vec![
        (String::new(), "envelope"),
        ("not json".into(), "envelope"),
        ("[1,2,3]".into(), "envelope"),
        ("{}".into(), "envelope"),
        ("null".into(), "envelope"),
        (
            fixture("spot-interruption.json")[..100].to_string(),
            "envelope",
        ),
        (with(&["source"], None), "envelope"),
        (with(&["detail-type"], Some(json!(7))), "envelope"),
        (with(&["id"], None), "envelope"),
        (with(&["detail"], None), "envelope"),
        (with(&["time"], None), "envelope"),
        (with(&["resources"], Some(json!("arn"))), "envelope"),
        (with(&["time"], Some(json!("14/03/2026"))), "time"),
        (with(&["detail"], Some(json!("text"))), "detail"),
        (with(&["detail", "instance-id"], None), "detail"),
        (with(&["detail", "instance-id"], Some(json!(12))), "detail"),
        (
            with(&["detail", "instance-id"], Some(json!(""))),
            "instance_id",
        ),
        (
            with(&["detail", "instance-id"], Some(json!("vol-0123"))),
            "instance_id",
        ),
        (
            with(&["detail", "instance-id"], Some(json!("i-01 23"))),
            "instance_id",
        ),
        (
            with(
                &["detail", "instance-id"],
                Some(json!(format!("i-{}", "0".repeat(40)))),
            ),
            "instance_id",
        ),
    ];
    for (body, label) in cases {
        let e = parse_err(&body);
        assert_eq!(e.metric_label(), label, "{body}: {e}");
    }
    // Error messages quote a bounded part of what they reject.
    let e = parse_err(&with(
        &["detail", "instance-id"],
        Some(json!("x".repeat(10_000))),
    ));
    assert!(e.to_string().len() < 200, "{e}");
    let state: Value = serde_json::from_str(&fixture("state-change-shutting-down.json")).unwrap();
    let mut v = state.clone();
    v["detail"].as_object_mut().unwrap().remove("state");
    assert_eq!(parse_err(&v.to_string()).metric_label(), "detail");
    let mut v: Value = serde_json::from_str(&fixture("scheduled-change.json")).unwrap();
    v["detail"]["affectedEntities"] = json!({"entityValue": "i-0abc"});
    assert_eq!(parse_err(&v.to_string()).metric_label(), "detail");
    // Nulls for optional fields are accepted.
    let mut v = spot.clone();
    v["resources"] = json!(null);
    v["region"] = json!(null);
    v["detail"]["instance-action"] = json!(null);
    assert!(matches!(
        message(&v.to_string()).detail,
        Detail::SpotInterruption { action: None, .. }
    ));
}

#[test]
fn oversized_and_hostile_messages_are_refused() {
    // An event padded to exactly the limit is read; one byte more is not.
    let body = fixture("rebalance-recommendation.json");
    let pad = MAX_MESSAGE_BYTES - body.len() - r#","padding":"""#.len();
    let at_limit = body.replacen(
        r#""detail": {"#,
        &format!(r#""detail": {{"padding":"{}","#, "x".repeat(pad)),
        1,
    );
    assert_eq!(at_limit.len(), MAX_MESSAGE_BYTES);
    assert!(matches!(parse(&at_limit), Ok(Parsed::Message(_))));
    let over = format!("{at_limit} ");
    let e = parse_err(&over);
    assert!(matches!(e, ParseError::TooLarge { bytes } if bytes == MAX_MESSAGE_BYTES + 1));
    assert_eq!(e.metric_label(), "too_large");
    // Deep nesting is refused by the JSON reader's recursion limit, not a
    // stack overflow.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert_eq!(parse_err(&deep).metric_label(), "envelope");
    let deep = format!(
        r#"{{"id":"x","source":"aws.ec2","detail-type":"EC2 Instance Rebalance Recommendation","time":"2026-03-14T09:20:00Z","detail":{}{}}}"#,
        "[".repeat(50_000),
        "]".repeat(50_000)
    );
    assert_eq!(parse_err(&deep).metric_label(), "envelope");
    // Invalid UTF-8.
    let mut bytes = fixture("spot-interruption.json").into_bytes();
    bytes[40] = 0xff;
    assert!(matches!(parse_bytes(&bytes), Err(ParseError::Envelope(_))));
}

/// Valid bodies of every kind, for the mutation property.
fn samples() -> Vec<String> {
    let t = ts("2026-11-21T13:00:00Z");
    let id = "i-0123456789abcdef0";
    let mut out = vec![
        events::spot_interruption(id, "us-east-1", "123456789012", t),
        events::rebalance_recommendation(id, "us-east-1", "123456789012", t),
        events::scheduled_change(&[id, "i-0abc"], "us-east-1", "123456789012", t),
        events::state_change(id, InstanceState::Stopping, "us-east-1", "123456789012", t),
    ];
    for name in [
        "spot-interruption.json",
        "scheduled-change.json",
        "state-change-pending.json",
        "health-issue.json",
    ] {
        out.push(fixture(name));
    }
    out
}

/// A parse that returns a message returns one that holds its invariants.
fn check(result: Result<Parsed, ParseError>) {
    if let Ok(Parsed::Message(m)) = result {
        for id in m.detail.instance_ids() {
            assert!(id.starts_with("i-") && id.len() <= 34, "{id}");
        }
        if let Detail::StateChange { state, .. } = m.detail {
            assert!(state.is_leaving());
        }
    }
}

/// A JSON value of bounded size and depth.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        ".{0,24}".prop_map(Value::String),
        prop_oneof![
            Just("i-0123456789abcdef0"),
            Just("EC2"),
            Just("scheduledChange"),
            Just("terminated"),
            Just("aws.ec2"),
            Just("2026-11-21T13:00:00Z"),
        ]
        .prop_map(|s| Value::String(s.into())),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z-]{1,16}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Every path to a value in `v`.
fn paths(v: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    out.push(prefix.clone());
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                prefix.push(k.clone());
                paths(child, prefix, out);
                prefix.pop();
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                prefix.push(i.to_string());
                paths(child, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

fn pointer(path: &[String]) -> String {
    path.iter()
        .map(|p| format!("/{}", p.replace('~', "~0").replace('/', "~1")))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn parser_never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        check(parse_bytes(&bytes));
    }

    #[test]
    fn parser_never_panics_on_strings(s in "\\PC{0,512}") {
        check(parse(&s));
    }

    #[test]
    fn parser_never_panics_on_byte_mutations(
        sample in 0..8usize,
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0..3u8), 1..8),
    ) {
        let mut bytes = samples()[sample].clone().into_bytes();
        for (at, byte, op) in edits {
            if bytes.is_empty() {
                bytes.push(byte);
                continue;
            }
            let i = at.index(bytes.len());
            match op {
                0 => bytes[i] = byte,
                1 => { bytes.remove(i); }
                _ => bytes.insert(i, byte),
            }
        }
        check(parse_bytes(&bytes));
    }

    #[test]
    fn parser_never_panics_on_value_mutations(
        sample in 0..8usize,
        edits in prop::collection::vec((any::<prop::sample::Index>(), json_value(), any::<bool>()), 1..4),
    ) {
        let mut v: Value = serde_json::from_str(&samples()[sample]).unwrap();
        for (at, value, remove) in edits {
            let mut all = Vec::new();
            paths(&v, &mut Vec::new(), &mut all);
            let path = &all[at.index(all.len())];
            if remove && !path.is_empty() {
                let (last, parent) = path.split_last().unwrap();
                match v.pointer_mut(&pointer(parent)) {
                    Some(Value::Object(map)) => { map.remove(last); }
                    Some(Value::Array(items)) => {
                        if let Ok(i) = last.parse::<usize>() && i < items.len() { items.remove(i); }
                    }
                    _ => {}
                }
            } else if let Some(slot) = v.pointer_mut(&pointer(path)) {
                *slot = value;
            }
        }
        check(parse(&v.to_string()));
    }
}

// ---------------------------------------------------------------------
// Decisions

fn claim(name: &str, instance_type: &str, zone: &str, capacity_type: &str) -> ClaimInfo {
    ClaimInfo {
        name: name.into(),
        instance_type: instance_type.into(),
        zone: zone.into(),
        capacity_type: capacity_type.into(),
    }
}

/// Instances `i-0000000000000000{1,2}` back spot claims `a` and `b`;
/// `i-0000000000000000{3}` backs on-demand claim `c`.
pub fn index() -> HashMap<String, ClaimInfo> {
    HashMap::from([
        (
            "i-00000000000000001".into(),
            claim("a", "c5.large", "us-east-1a", "spot"),
        ),
        (
            "i-00000000000000002".into(),
            claim("b", "m5.large", "us-east-1b", "spot"),
        ),
        (
            "i-00000000000000003".into(),
            claim("c", "c5.large", "us-east-1a", "on-demand"),
        ),
    ])
}

fn decide_on(body: &str, options: &Options) -> Vec<Action> {
    let index = index();
    decide(&message(body), &|id: &str| index.get(id).cloned(), options)
}

pub fn t0() -> Timestamp {
    ts("2026-11-21T13:00:00Z")
}

fn offering(instance_type: &str, zone: &str, capacity_type: &str) -> OfferingKey {
    OfferingKey {
        instance_type: instance_type.into(),
        zone: zone.into(),
        capacity_type: capacity_type.into(),
    }
}

#[test]
fn spot_interruption_marks_the_offering_then_deletes_the_claim() {
    let body = events::spot_interruption("i-00000000000000001", "us-east-1", "1", t0());
    let actions = decide_on(&body, &Options::default());
    assert_eq!(actions.len(), 2, "{actions:?}");
    assert_eq!(
        actions[0],
        Action::MarkUnavailable(offering("c5.large", "us-east-1a", "spot"))
    );
    let Action::DeleteNodeClaim {
        name,
        reason,
        message,
    } = &actions[1]
    else {
        panic!("{actions:?}");
    };
    assert_eq!((name.as_str(), *reason), ("a", "Interrupted"));
    assert_eq!(
        message,
        "spot-interruption: EC2 will terminate spot instance i-00000000000000001 (c5.large, us-east-1a, spot)"
    );
}

#[test]
fn spot_interruption_of_an_on_demand_claim_marks_nothing() {
    let body = events::spot_interruption("i-00000000000000003", "us-east-1", "1", t0());
    let actions = decide_on(&body, &Options::default());
    assert!(matches!(
        actions.as_slice(),
        [Action::DeleteNodeClaim { name, reason: "Interrupted", .. }] if name == "c"
    ));
    // A claim whose offering is not known yet is deleted, nothing marked.
    let m = message(&events::spot_interruption(
        "i-00000000000000009",
        "us-east-1",
        "1",
        t0(),
    ));
    let actions = decide(
        &m,
        &|_: &str| Some(claim("d", "", "us-east-1a", "spot")),
        &Options::default(),
    );
    assert!(matches!(
        actions.as_slice(),
        [Action::DeleteNodeClaim { .. }]
    ));
}

#[test]
fn rebalance_is_recorded_unless_it_counts_as_an_interruption() {
    let body = events::rebalance_recommendation("i-00000000000000002", "us-east-1", "1", t0());
    let actions = decide_on(&body, &Options::default());
    let [
        Action::Record {
            object,
            reason,
            message,
        },
    ] = actions.as_slice()
    else {
        panic!("{actions:?}");
    };
    assert_eq!(object, "NodeClaim/b");
    assert_eq!(*reason, "RebalanceRecommendation");
    assert!(message.starts_with("rebalance: "), "{message}");
    let opted_in = Options {
        rebalance_as_interruption: true,
    };
    let actions = decide_on(&body, &opted_in);
    assert!(matches!(
        actions.as_slice(),
        [Action::DeleteNodeClaim { name, reason: "Interrupted", .. }] if name == "b"
    ));
}

#[test]
fn scheduled_change_deletes_every_managed_instance_and_records_the_rest() {
    let ids = [
        "i-00000000000000002",
        "i-0000000000000000f",
        "i-00000000000000003",
    ];
    let body = events::scheduled_change(&ids, "us-east-1", "1", t0());
    let actions = decide_on(&body, &Options::default());
    assert_eq!(actions.len(), 3, "{actions:?}");
    assert!(
        matches!(&actions[0], Action::DeleteNodeClaim { name, message, .. }
        if name == "b" && message == "scheduled-change: AWS Health AWS_EC2_PERSISTENT_INSTANCE_RETIREMENT_SCHEDULED for instance i-00000000000000002")
    );
    assert!(
        matches!(&actions[1], Action::Record { object, reason: "InstanceNotManaged", .. }
        if object == "Instance/i-0000000000000000f")
    );
    assert!(matches!(&actions[2], Action::DeleteNodeClaim { name, .. } if name == "c"));
}

#[test]
fn state_change_deletes_the_claim() {
    for state in [
        InstanceState::Stopping,
        InstanceState::Stopped,
        InstanceState::ShuttingDown,
        InstanceState::Terminated,
    ] {
        let body = events::state_change("i-00000000000000001", state, "us-east-1", "1", t0());
        let actions = decide_on(&body, &Options::default());
        let [
            Action::DeleteNodeClaim {
                name,
                reason,
                message,
            },
        ] = actions.as_slice()
        else {
            panic!("{actions:?}");
        };
        assert_eq!((name.as_str(), *reason), ("a", "Interrupted"));
        assert_eq!(
            message,
            &format!("state-change: instance i-00000000000000001 is {state}")
        );
    }
}

#[test]
fn an_unmanaged_instance_is_recorded_only() {
    let body = events::spot_interruption("i-0000000000000000f", "us-east-1", "1", t0());
    let actions = decide_on(&body, &Options::default());
    assert!(
        matches!(actions.as_slice(), [Action::Record { object, reason: "InstanceNotManaged", message }]
        if object == "Instance/i-0000000000000000f" && message.starts_with("spot-interruption: "))
    );
}

#[test]
fn claims_are_indexed_by_the_instance_id_of_their_provider_id() {
    assert_eq!(instance_id_of("aws:///us-east-1a/i-0abc"), Some("i-0abc"));
    assert_eq!(instance_id_of("aws:///us-east-1a/"), None);
    assert_eq!(instance_id_of("kind://node/i-0abc"), None);
    assert_eq!(instance_id_of("aws:///us-east-1a/vol-1"), None);
    let claim: dovetail::api::NodeClaim = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "default-x1", "labels": {
            "node.kubernetes.io/instance-type": "c5.large",
            "karpenter.sh/capacity-type": "spot",
        }},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}, "requirements": []},
        "status": {"providerID": "aws:///us-east-1b/i-00000000000000007"},
    }))
    .unwrap();
    let (id, info) = ClaimInfo::from_nodeclaim(&claim).unwrap();
    assert_eq!(id, "i-00000000000000007");
    assert_eq!(
        info,
        self::claim("default-x1", "c5.large", "us-east-1b", "spot")
    );
    assert_eq!(
        info.offering(),
        Some(offering("c5.large", "us-east-1b", "spot"))
    );
    let mut unlaunched = claim.clone();
    unlaunched.status = None;
    assert!(ClaimInfo::from_nodeclaim(&unlaunched).is_none());
}

// ---------------------------------------------------------------------
// A recording handler, and `deliver`

/// Decides with a fixed index and records the actions. It fails the
/// first `failures` deliveries of a message about a listed instance.
pub struct Recorder {
    index: HashMap<String, ClaimInfo>,
    options: Options,
    metrics: Metrics,
    failures: Mutex<HashMap<String, usize>>,
    pub actions: Mutex<Vec<Action>>,
    pub calls: AtomicUsize,
}

impl Recorder {
    pub fn new(index: HashMap<String, ClaimInfo>, metrics: Metrics) -> Self {
        Recorder {
            index,
            options: Options::default(),
            metrics,
            failures: Mutex::new(HashMap::new()),
            actions: Mutex::new(Vec::new()),
            calls: AtomicUsize::new(0),
        }
    }

    /// Fails the first `n` deliveries of a message about `instance_id`.
    pub fn fail(&self, instance_id: &str, n: usize) {
        self.failures
            .lock()
            .unwrap()
            .insert(instance_id.to_string(), n);
    }

    pub fn actions(&self) -> Vec<Action> {
        self.actions.lock().unwrap().clone()
    }
}

impl MessageHandler for Recorder {
    async fn handle(&self, message: Message, received_at: Timestamp) -> Result<(), HandlerError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        {
            let mut failures = self.failures.lock().unwrap();
            for id in message.detail.instance_ids() {
                if let Some(n) = failures.get_mut(id)
                    && *n > 0
                {
                    *n -= 1;
                    return Err(HandlerError::Failed(format!("injected failure for {id}")));
                }
            }
        }
        let actions = decide(
            &message,
            &|id: &str| self.index.get(id).cloned(),
            &self.options,
        );
        let now = SystemClock.now();
        for action in &actions {
            if let Action::DeleteNodeClaim { .. } = action {
                self.metrics.observe_marked(received_at, now);
            }
        }
        self.actions.lock().unwrap().extend(actions);
        Ok(())
    }
}

#[test]
fn deliver_counts_every_outcome_and_hands_messages_to_the_handler() {
    let metrics = Metrics::new();
    let recorder = Recorder::new(index(), metrics.clone());
    recorder.fail("i-00000000000000002", 1);
    let received = t0() + std::time::Duration::from_secs(3);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let run = |body: String, queued: Option<Timestamp>| {
        rt.block_on(deliver(&body, queued, received, &recorder, &metrics))
    };
    let spot = events::spot_interruption("i-00000000000000001", "us-east-1", "1", t0());
    assert!(matches!(
        run(spot, None),
        Outcome::Handled(Kind::SpotInterruption)
    ));
    let state = events::state_change(
        "i-00000000000000002",
        InstanceState::Stopped,
        "us-east-1",
        "1",
        t0(),
    );
    let failed = run(state.clone(), Some(received));
    assert!(matches!(failed, Outcome::Failed(HandlerError::Failed(_))) && !failed.delete());
    assert!(matches!(
        run(state, Some(received)),
        Outcome::Handled(Kind::StateChange)
    ));
    let running = events::state_change(
        "i-00000000000000002",
        InstanceState::Running,
        "us-east-1",
        "1",
        t0(),
    );
    let ignored = run(running, None);
    assert!(matches!(ignored, Outcome::Ignored(IgnoredKind::StateChange)) && ignored.delete());
    let bad = run("{\"not\": \"an event\"}".into(), None);
    assert!(matches!(bad, Outcome::Undecodable(_)) && bad.delete());

    assert_eq!(recorder.calls.load(Ordering::SeqCst), 3);
    let actions = recorder.actions();
    assert_eq!(actions.len(), 3, "{actions:?}");
    assert!(matches!(&actions[2], Action::DeleteNodeClaim { name, .. } if name == "b"));

    // Karpenter's message kinds; an undecodable message is not received.
    assert_eq!(metrics.received("spot_interrupted"), 1);
    assert_eq!(metrics.received("instance_stopped"), 2);
    assert_eq!(metrics.received("no_op"), 1);
    assert_eq!(metrics.received("undecodable"), 0);
    assert_eq!(metrics.undecodable("envelope"), 1);
    assert_eq!(metrics.handler_errors("failed"), 1);
    assert_eq!(metrics.handling().0, 2);
    let text = metrics.text();
    // The spot message waited 3 s (from the event's time); the others
    // were stamped as queued at receipt.
    assert!(
        text.contains("karpenter_interruption_message_queue_duration_seconds_sum 3"),
        "{text}"
    );
    assert!(text.contains("karpenter_interruption_message_queue_duration_seconds_count 3"));
    assert!(
        text.contains(
            "karpenter_interruption_received_messages_total{message_type=\"rebalance_recommendation\"} 0"
        )
    );
    assert!(text.contains("karpenter_interruption_deleted_messages_total 0"));
    assert!(text.contains("dovetail_interruption_handling_seconds_count 2"));
    for kind in dovetail::interruption::message::METRIC_KINDS {
        assert!(text.contains(&format!("message_type=\"{kind}\"")), "{kind}");
    }
}
