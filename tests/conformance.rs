//! Agreement with the reference: generated NodePools and EC2NodeClasses, valid
//! and subtly invalid, must be accepted by `dovetail validate` exactly when the
//! reference CRDs accept them.
//!
//! The reference verdict is computed from the v1.14.1 CRDs in
//! `../shared/reference/`: an independent structural check of their OpenAPI
//! schema (below), then their CEL rules evaluated by kube-cel (transition
//! rules are skipped, as on create). dovetail's verdict is the errors of its
//! schema, CEL, duration, schedule and label checks; its further runtime
//! checks (taint syntax and duplicates, well-known requirement values) are
//! Karpenter's runtime validation, stricter than the CRDs, so the
//! generators only produce taints and values those checks accept.
//!
//! The last section checks each compatibility rule against v1.14.1 by name.

use std::path::PathBuf;
use std::sync::OnceLock;

use kube::core::cel::{CompiledSchema, Validator, compile_schema};
use proptest::prelude::*;
use serde_json::{Value, json};

use dovetail::config::load::parse_one;
use dovetail::config::validate::{self, Options};
use dovetail::config::yaml::Limits;
use dovetail::diag::Severity;

struct Reference {
    nodepool: Value,
    ec2nodeclass: Value,
    nodepool_cel: CompiledSchema,
    ec2nodeclass_cel: CompiledSchema,
}

fn reference() -> &'static Reference {
    static R: OnceLock<Reference> = OnceLock::new();
    R.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/reference/karpenter-v1.14.1-crds");
        let schema = |f: &str| -> Value {
            let text = std::fs::read_to_string(dir.join(f))
                .unwrap_or_else(|e| panic!("{}: {e}", dir.join(f).display()));
            let crd: Value = serde_saphyr::from_str(&text).unwrap();
            crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
        };
        let nodepool = schema("karpenter.sh_nodepools.yaml");
        let ec2nodeclass = schema("karpenter.k8s.aws_ec2nodeclasses.yaml");
        Reference {
            nodepool_cel: compile_schema(&nodepool),
            ec2nodeclass_cel: compile_schema(&ec2nodeclass),
            nodepool,
            ec2nodeclass,
        }
    })
}

// ---------------------------------------------------------------------------
// An independent structural check of an OpenAPI v3 (Kubernetes structural)
// schema, covering what the reference CRDs use.

fn regex(p: &str) -> regex::Regex {
    static CACHE: OnceLock<std::sync::Mutex<std::collections::HashMap<String, regex::Regex>>> =
        OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut map = cache.lock().unwrap();
    map.entry(p.to_string())
        .or_insert_with(|| regex::Regex::new(p).unwrap())
        .clone()
}

fn structural(schema: &Value, v: &Value, path: &str, errs: &mut Vec<String>) {
    if let Some(any) = schema.get("anyOf").and_then(Value::as_array)
        && !any.iter().any(|s| {
            let mut e = Vec::new();
            structural(s, v, path, &mut e);
            e.is_empty()
        })
    {
        errs.push(format!("{path}: anyOf"));
        return;
    }
    let int_or_string = schema.get("x-kubernetes-int-or-string") == Some(&json!(true));
    let ty = schema.get("type").and_then(Value::as_str);
    let type_ok = match (ty, v) {
        _ if int_or_string => v.is_string() || v.is_i64() || v.is_u64(),
        (None, _) => true,
        (Some("object"), Value::Object(_)) => true,
        (Some("array"), Value::Array(_)) => true,
        (Some("string"), Value::String(_)) => true,
        (Some("boolean"), Value::Bool(_)) => true,
        (Some("integer"), Value::Number(n)) => n.is_i64() || n.is_u64(),
        (Some("number"), Value::Number(_)) => true,
        _ => false,
    };
    if !type_ok {
        errs.push(format!("{path}: type"));
        return;
    }
    if let Some(e) = schema.get("enum").and_then(Value::as_array)
        && !e.contains(v)
    {
        errs.push(format!("{path}: enum"));
    }
    match v {
        Value::String(s) => {
            if let Some(p) = schema.get("pattern").and_then(Value::as_str)
                && !regex(p).is_match(s)
            {
                errs.push(format!("{path}: pattern"));
            }
            let n = s.chars().count() as u64;
            if schema
                .get("maxLength")
                .and_then(Value::as_u64)
                .is_some_and(|m| n > m)
            {
                errs.push(format!("{path}: maxLength"));
            }
            if schema
                .get("minLength")
                .and_then(Value::as_u64)
                .is_some_and(|m| n < m)
            {
                errs.push(format!("{path}: minLength"));
            }
            if schema.get("format").and_then(Value::as_str) == Some("date-time")
                && s.parse::<jiff::Timestamp>().is_err()
            {
                errs.push(format!("{path}: date-time"));
            }
        }
        Value::Number(n) => {
            let f = n.as_f64().unwrap();
            if schema
                .get("minimum")
                .and_then(Value::as_f64)
                .is_some_and(|m| f < m)
            {
                errs.push(format!("{path}: minimum"));
            }
            if schema
                .get("maximum")
                .and_then(Value::as_f64)
                .is_some_and(|m| f > m)
            {
                errs.push(format!("{path}: maximum"));
            }
            if schema.get("format").and_then(Value::as_str) == Some("int32")
                && n.as_i64().is_none_or(|i| i32::try_from(i).is_err())
            {
                errs.push(format!("{path}: int32"));
            }
        }
        Value::Array(items) => {
            let n = items.len() as u64;
            if schema
                .get("maxItems")
                .and_then(Value::as_u64)
                .is_some_and(|m| n > m)
            {
                errs.push(format!("{path}: maxItems"));
            }
            if schema
                .get("minItems")
                .and_then(Value::as_u64)
                .is_some_and(|m| n < m)
            {
                errs.push(format!("{path}: minItems"));
            }
            match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
                Some("set") => {
                    for (i, a) in items.iter().enumerate() {
                        if items[..i].contains(a) {
                            errs.push(format!("{path}[{i}]: duplicate"));
                        }
                    }
                }
                Some("map") => {
                    let keys: Vec<&str> = schema["x-kubernetes-list-map-keys"]
                        .as_array()
                        .map(|k| k.iter().filter_map(Value::as_str).collect())
                        .unwrap_or_default();
                    let id =
                        |x: &Value| keys.iter().map(|k| x.get(*k).cloned()).collect::<Vec<_>>();
                    for (i, a) in items.iter().enumerate() {
                        if items[..i].iter().any(|b| id(a) == id(b)) {
                            errs.push(format!("{path}[{i}]: duplicate map key"));
                        }
                    }
                }
                _ => {}
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    structural(item_schema, item, &format!("{path}[{i}]"), errs);
                }
            }
        }
        Value::Object(map) => {
            if let Some(req) = schema.get("required").and_then(Value::as_array) {
                for r in req.iter().filter_map(Value::as_str) {
                    if !map.contains_key(r) {
                        errs.push(format!("{path}.{r}: required"));
                    }
                }
            }
            let n = map.len() as u64;
            if schema
                .get("maxProperties")
                .and_then(Value::as_u64)
                .is_some_and(|m| n > m)
            {
                errs.push(format!("{path}: maxProperties"));
            }
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            for (k, child) in map {
                let p = format!("{path}.{k}");
                if let Some(s) = props.and_then(|ps| ps.get(k)) {
                    structural(s, child, &p, errs);
                } else if let Some(a) = additional.filter(|a| a.is_object()) {
                    structural(a, child, &p, errs);
                } else if props.is_some() || additional == Some(&json!(false)) {
                    // Strict field validation: unknown fields are errors.
                    errs.push(format!("{p}: unknown field"));
                }
            }
        }
        _ => {}
    }
}

/// The reference's verdict: structurally valid and every CEL rule holds.
fn reference_accepts(doc: &Value) -> Result<(), String> {
    let r = reference();
    let (schema, cel) = match doc["kind"].as_str() {
        Some("NodePool") => (&r.nodepool, &r.nodepool_cel),
        _ => (&r.ec2nodeclass, &r.ec2nodeclass_cel),
    };
    let mut errs = Vec::new();
    // The API server checks metadata itself; the CRD schema leaves it open.
    let mut body = doc.clone();
    body.as_object_mut().unwrap().remove("metadata");
    structural(schema, &body, "", &mut errs);
    if !errs.is_empty() {
        return Err(errs.join("; "));
    }
    thread_local!(static V: Validator = Validator::new());
    V.with(|v| v.validate_compiled(cel, doc, None))
        .map_err(|e| {
            e.iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        })
}

/// dovetail's verdict on the same document.
fn dovetail_accepts(doc: &Value) -> Result<(), String> {
    let text = serde_json::to_string_pretty(doc).unwrap();
    let loaded = parse_one("doc.yaml", text.as_bytes(), &Limits::default());
    assert!(loaded.diagnostics.is_empty(), "{:?}", loaded.diagnostics);
    let report = validate::validate(
        &loaded,
        &Options {
            allow_external_nodeclass: true,
            ..Options::default()
        },
    );
    let errors: Vec<String> = report
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .filter(|d| matches!(d.code, "schema" | "cel" | "duration" | "schedule" | "label"))
        .map(|d| format!("{}: {}", d.path, d.message))
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

// ---------------------------------------------------------------------------
// Generators: a valid object, then zero to two mutations, each a subtle way
// of breaking (or not breaking) one schema constraint or rule.

pub(crate) fn base_nodepool() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "gen"},
        "spec": {
            "template": {
                "metadata": {"labels": {"team": "a"}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}
                    ],
                    "expireAfter": "720h"
                }
            },
            "limits": {"cpu": "1000"},
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "1m"}
        }
    })
}

pub(crate) fn base_ec2nodeclass() -> Value {
    json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "gen"},
        "spec": {
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "role": "node-role",
            "subnetSelectorTerms": [{"tags": {"env": "test"}}],
            "securityGroupSelectorTerms": [{"tags": {"env": "test"}}]
        }
    })
}

/// Sets the value at a JSON pointer, creating objects on the way; `~1` and
/// `~0` in a segment stand for `/` and `~` (a label key such as
/// `example.com/tier` is written `example.com~1tier`).
fn set(doc: &mut Value, pointer: &str, v: Value) {
    let unescape = |s: &str| s.replace("~1", "/").replace("~0", "~");
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    let mut cur = doc;
    for seg in parent.split('/').skip(1) {
        let seg = unescape(seg);
        if cur.get(&seg).is_none() {
            cur[&seg] = json!({});
        }
        cur = &mut cur[&seg];
    }
    cur[&unescape(key)] = v;
}

fn remove(doc: &mut Value, pointer: &str) {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    if let Some(Value::Object(m)) = doc.pointer_mut(parent) {
        m.remove(key);
    }
}

fn push(doc: &mut Value, pointer: &str, v: Value) {
    match doc.pointer_mut(pointer) {
        Some(Value::Array(a)) => a.push(v),
        _ => set(doc, pointer, json!([v])),
    }
}

/// Label keys that dovetail's stricter runtime checks accept, in domains the
/// CEL rules treat differently.
fn label_key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("team".to_string()),
        Just("example.com/tier".to_string()),
        Just("karpenter.sh/capacity-type".to_string()),
        Just("karpenter.sh/nodepool".to_string()),
        Just("karpenter.sh/custom".to_string()),
        Just("sub.karpenter.sh/x".to_string()),
        Just("karpenter.k8s.aws/instance-family".to_string()),
        Just("karpenter.k8s.aws/instance-foo".to_string()),
        Just("kubernetes.io/hostname".to_string()),
        Just("kubernetes.io/arch".to_string()),
        Just("kubernetes.io/test".to_string()),
        Just("subdomain.kubernetes.io/test".to_string()),
        Just("subdomain.k8s.io/test".to_string()),
        Just("topology.kubernetes.io/zone".to_string()),
        Just("node.kubernetes.io/instance-type".to_string()),
    ]
}

fn value_str() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("1".to_string()),
        Just("0".to_string()),
        Just("8".to_string()),
        Just("-1".to_string()),
        Just("x".to_string()),
        Just("1.5".to_string()),
        Just("99999999999999999999".to_string()),
        Just("".to_string()),
        Just("a b".to_string()),
    ]
}

fn duration_str() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("30s".to_string()),
        Just("1h30m".to_string()),
        Just("Never".to_string()),
        Just("0s".to_string()),
        Just("5d".to_string()),
        Just("1.5h".to_string()),
        Just("10".to_string()),
        Just("8h".to_string()),
        Just("8h0m0s".to_string()),
        Just("90m".to_string()),
        Just("".to_string()),
    ]
}

fn schedule_str() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("0 9 * * mon-fri".to_string()),
        Just("@daily".to_string()),
        Just("*/15 0-6 1,15 JAN-MAR *".to_string()),
        Just("@hourly".to_string()),
        Just("daily".to_string()),
        Just("* * *".to_string()),
    ]
}

#[derive(Debug, Clone)]
pub(crate) enum NpMutation {
    Weight(i64),
    Replicas(i64, bool),
    RemoveRequired(&'static str),
    UnknownField(&'static str),
    Operator(&'static str, Vec<String>, Option<i64>),
    RequirementKey(String),
    TemplateLabel(String),
    Budget(Option<String>, Option<String>, String),
    Duration(&'static str, String),
    Policy(String),
    NodeClassRef(&'static str, String),
    Taint(String, &'static str),
    LimitsValue(Value),
}

pub(crate) fn np_mutation() -> impl Strategy<Value = NpMutation> {
    prop_oneof![
        (-5i64..120).prop_map(NpMutation::Weight),
        (-1i64..5, any::<bool>()).prop_map(|(r, l)| NpMutation::Replicas(r, l)),
        prop_oneof![
            Just("/spec/template/spec/nodeClassRef"),
            Just("/spec/template/spec/requirements"),
            Just("/spec/template/spec/nodeClassRef/group"),
            Just("/spec/disruption/consolidateAfter"),
            Just("/spec/template"),
        ]
        .prop_map(NpMutation::RemoveRequired),
        prop_oneof![
            Just("/spec/foo"),
            Just("/spec/template/spec/kubelet"),
            Just("/spec/disruption/expireAfter")
        ]
        .prop_map(NpMutation::UnknownField),
        (
            prop_oneof![
                Just("In"),
                Just("NotIn"),
                Just("Exists"),
                Just("DoesNotExist"),
                Just("Gt"),
                Just("Lt"),
                Just("Gte"),
                Just("Lte"),
                Just("Equals")
            ],
            prop::collection::vec(value_str(), 0..3),
            prop::option::of(0i64..4),
        )
            .prop_map(|(o, v, m)| NpMutation::Operator(o, v, m)),
        label_key().prop_map(NpMutation::RequirementKey),
        label_key().prop_map(NpMutation::TemplateLabel),
        (
            prop::option::of(schedule_str()),
            prop::option::of(duration_str()),
            prop_oneof![
                Just("10%".to_string()),
                Just("0".to_string()),
                Just("101%".to_string()),
                Just("x".to_string())
            ]
        )
            .prop_map(|(s, d, n)| NpMutation::Budget(s, d, n)),
        (
            prop_oneof![
                Just("/spec/disruption/consolidateAfter"),
                Just("/spec/template/spec/expireAfter"),
                Just("/spec/template/spec/terminationGracePeriod")
            ],
            duration_str()
        )
            .prop_map(|(p, d)| NpMutation::Duration(p, d)),
        prop_oneof![
            Just("WhenEmpty".to_string()),
            Just("Balanced".to_string()),
            Just("WhenUnderutilized".to_string())
        ]
        .prop_map(NpMutation::Policy),
        (
            prop_oneof![Just("group"), Just("kind"), Just("name")],
            prop_oneof![
                Just("".to_string()),
                Just("a/b".to_string()),
                Just("other".to_string())
            ]
        )
            .prop_map(|(f, v)| NpMutation::NodeClassRef(f, v)),
        (
            prop_oneof![
                Just("dedicated".to_string()),
                Just("example.com/gpu".to_string())
            ],
            prop_oneof![
                Just("NoSchedule"),
                Just("PreferNoSchedule"),
                Just("NoExecute"),
                Just("Sometimes")
            ]
        )
            .prop_map(|(k, e)| NpMutation::Taint(k, e)),
        prop_oneof![
            Just(json!("10")),
            Just(json!(10)),
            Just(json!("10Gi")),
            Just(json!("ten")),
            Just(json!(1.5)),
            Just(json!("-1"))
        ]
        .prop_map(NpMutation::LimitsValue),
    ]
}

pub(crate) fn apply_np(doc: &mut Value, m: &NpMutation) {
    match m {
        NpMutation::Weight(w) => set(doc, "/spec/weight", json!(w)),
        NpMutation::Replicas(r, keep_limits) => {
            set(doc, "/spec/replicas", json!(r));
            if !keep_limits {
                set(doc, "/spec/limits", json!({"nodes": "5"}));
            }
        }
        NpMutation::RemoveRequired(p) => remove(doc, p),
        NpMutation::UnknownField(p) => set(doc, p, json!("x")),
        NpMutation::Operator(op, values, min) => {
            let mut r = json!({"key": "example.com/size", "operator": op, "values": values});
            if let Some(m) = min {
                r["minValues"] = json!(m);
            }
            push(doc, "/spec/template/spec/requirements", r);
        }
        NpMutation::RequirementKey(k) => push(
            doc,
            "/spec/template/spec/requirements",
            json!({"key": k, "operator": "Exists"}),
        ),
        NpMutation::TemplateLabel(k) => set(
            doc,
            &format!("/spec/template/metadata/labels/{}", k.replace('/', "~1")),
            json!("v"),
        ),
        NpMutation::Budget(s, d, n) => {
            let mut b = json!({"nodes": n});
            if let Some(s) = s {
                b["schedule"] = json!(s);
            }
            if let Some(d) = d {
                b["duration"] = json!(d);
            }
            push(doc, "/spec/disruption/budgets", b);
        }
        NpMutation::Duration(p, d) => set(doc, p, json!(d)),
        NpMutation::Policy(p) => set(doc, "/spec/disruption/consolidationPolicy", json!(p)),
        NpMutation::NodeClassRef(f, v) => set(
            doc,
            &format!("/spec/template/spec/nodeClassRef/{f}"),
            json!(v),
        ),
        NpMutation::Taint(k, e) => push(
            doc,
            "/spec/template/spec/taints",
            json!({"key": k, "effect": e}),
        ),
        NpMutation::LimitsValue(v) => set(doc, "/spec/limits/memory", v.clone()),
    }
}

#[derive(Debug, Clone)]
pub(crate) enum NcMutation {
    Identity(bool, bool, bool),
    Alias(String),
    AmiFamily(String),
    AmiTerms(Vec<Value>),
    SubnetTerms(Vec<Value>),
    SecurityGroupTerms(Vec<Value>),
    Tag(String, String),
    Kubelet(Value),
    BlockDevices(Vec<Value>),
    Placement(Value),
    NetworkInterfaces(Vec<Value>),
    CapacityReservations(Vec<Value>),
    Metadata(Value),
}

fn term() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!({"tags": {"a": "b"}})),
        Just(json!({"id": "x-1"})),
        Just(json!({"name": "n"})),
        Just(json!({"id": "x-1", "tags": {"a": "b"}})),
        Just(json!({"id": "x-1", "name": "n"})),
        Just(json!({"name": "n", "tags": {"a": "b"}})),
        Just(json!({})),
        Just(json!({"tags": {"a": ""}})),
    ]
}

pub(crate) fn nc_mutation() -> impl Strategy<Value = NcMutation> {
    prop_oneof![
        (any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(r, p, e)| NcMutation::Identity(r, p, e)),
        prop_oneof![
            Just("al2@latest"), Just("al2023@v20240807"), Just("bottlerocket@latest"), Just("windows2022@latest"),
            Just("windows2019@v1"), Just("ubuntu@latest"), Just("al2023"), Just("al2023@"), Just("al-2023@latest"),
            Just("windows2025")
        ]
        .prop_map(|s| NcMutation::Alias(s.to_string())),
        prop_oneof![
            Just("AL2"), Just("AL2023"), Just("Bottlerocket"), Just("Custom"), Just("Windows2022"), Just("Ubuntu")
        ]
        .prop_map(|s| NcMutation::AmiFamily(s.to_string())),
        prop::collection::vec(
            prop_oneof![
                Just(json!({"alias": "al2023@latest"})),
                Just(json!({"id": "ami-1"})),
                Just(json!({"id": "ami-1", "owner": "self"})),
                Just(json!({"name": "my-ami", "owner": "self"})),
                Just(json!({"tags": {"a": "b"}})),
                Just(json!({"ssmParameter": "/aws/x"})),
                Just(json!({"alias": "al2023@latest", "owner": "self"})),
                Just(json!({})),
            ],
            0..3
        )
        .prop_map(NcMutation::AmiTerms),
        prop::collection::vec(term(), 0..3).prop_map(NcMutation::SubnetTerms),
        prop::collection::vec(term(), 0..3).prop_map(NcMutation::SecurityGroupTerms),
        (
            prop_oneof![
                Just("team"), Just(""), Just("eks:eks-cluster-name"), Just("kubernetes.io/cluster/a"),
                Just("karpenter.sh/nodepool"), Just("karpenter.sh/nodeclaim"), Just("karpenter.k8s.aws/ec2nodeclass"),
                Just("karpenter.sh/other")
            ],
            prop_oneof![Just(""), Just("v")]
        )
            .prop_map(|(k, v)| NcMutation::Tag(k.to_string(), v.to_string())),
        prop_oneof![
            Just(json!({"imageGCHighThresholdPercent": 80, "imageGCLowThresholdPercent": 70})),
            Just(json!({"imageGCHighThresholdPercent": 70, "imageGCLowThresholdPercent": 70})),
            Just(json!({"imageGCHighThresholdPercent": 101})),
            Just(json!({"evictionSoft": {"memory.available": "5%"}})),
            Just(json!({"evictionSoft": {"memory.available": "5%"}, "evictionSoftGracePeriod": {"memory.available": "1m"}})),
            Just(json!({"evictionSoftGracePeriod": {"nodefs.available": "1m"}})),
            Just(json!({"evictionHard": {"memory.free": "5%"}})),
            Just(json!({"kubeReserved": {"cpu": "100m"}})),
            Just(json!({"kubeReserved": {"gpu": "1"}})),
            Just(json!({"systemReserved": {"memory": "-1Gi"}})),
            Just(json!({"maxPods": 0})),
            Just(json!({"maxPods": 110, "podsPerCore": 10})),
            Just(json!({"clusterDNS": ["10.0.0.10"]})),
            Just(json!({"cpuCFSQuota": "yes"})),
        ]
        .prop_map(NcMutation::Kubelet),
        prop::collection::vec(
            prop_oneof![
                Just(json!({"deviceName": "/dev/xvda", "rootVolume": true, "ebs": {"volumeSize": "20Gi"}})),
                Just(json!({"deviceName": "/dev/xvdb", "ebs": {"volumeType": "gp3"}})),
                Just(json!({"deviceName": "/dev/xvdc", "ebs": {"snapshotID": "snap-1", "volumeInitializationRate": 100}})),
                Just(json!({"deviceName": "/dev/xvdd", "ebs": {"volumeSize": "20Gi", "volumeInitializationRate": 100}})),
                Just(json!({"deviceName": "/dev/xvde", "ebs": {"volumeSize": "twenty"}})),
                Just(json!({"deviceName": "/dev/xvdf", "ebs": {"volumeSize": "20Gi", "volumeType": "magnetic"}})),
            ],
            0..3
        )
        .prop_map(NcMutation::BlockDevices),
        prop_oneof![
            Just(json!({"name": "pg"})),
            Just(json!({"id": "pg-0123456789abcdef0"})),
            Just(json!({})),
            Just(json!({"name": "pg", "id": "pg-0123456789abcdef0"})),
        ]
        .prop_map(NcMutation::Placement),
        prop::collection::vec(
            prop_oneof![
                Just(json!({"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"})),
                Just(json!({"networkCardIndex": 0, "deviceIndex": 1, "interfaceType": "efa-only"})),
                Just(json!({"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "interface"})),
                Just(json!({"networkCardIndex": 0, "deviceIndex": 2, "interfaceType": "efa-only"})),
            ],
            0..3
        )
        .prop_map(NcMutation::NetworkInterfaces),
        prop::collection::vec(
            prop_oneof![
                Just(json!({"id": "cr-0123456789abcdef0"})),
                Just(json!({"id": "cr-0123456789abcdef0", "ownerID": "012345678901"})),
                Just(json!({"tags": {"a": "b"}})),
                Just(json!({"instanceMatchCriteria": "open"})),
                Just(json!({})),
            ],
            0..3
        )
        .prop_map(NcMutation::CapacityReservations),
        prop_oneof![
            Just(json!({"httpTokens": "optional"})),
            Just(json!({"httpTokens": "sometimes"})),
            Just(json!({"httpPutResponseHopLimit": 65})),
            Just(json!({"httpEndpoint": "disabled", "httpProtocolIPv6": "enabled"})),
        ]
        .prop_map(NcMutation::Metadata),
    ]
}

pub(crate) fn apply_nc(doc: &mut Value, m: &NcMutation) {
    match m {
        NcMutation::Identity(role, profile, empty) => {
            let v = if *empty { "" } else { "x" };
            remove(doc, "/spec/role");
            if *role {
                set(doc, "/spec/role", json!(v));
            }
            if *profile {
                set(doc, "/spec/instanceProfile", json!(v));
            }
        }
        NcMutation::Alias(a) => set(doc, "/spec/amiSelectorTerms", json!([{"alias": a}])),
        NcMutation::AmiFamily(f) => set(doc, "/spec/amiFamily", json!(f)),
        NcMutation::AmiTerms(t) => set(doc, "/spec/amiSelectorTerms", json!(t)),
        NcMutation::SubnetTerms(t) => set(doc, "/spec/subnetSelectorTerms", json!(t)),
        NcMutation::SecurityGroupTerms(t) => set(doc, "/spec/securityGroupSelectorTerms", json!(t)),
        NcMutation::Tag(k, v) => set(
            doc,
            &format!("/spec/tags/{}", k.replace('/', "~1")),
            json!(v),
        ),
        NcMutation::Kubelet(k) => set(doc, "/spec/kubelet", k.clone()),
        NcMutation::BlockDevices(b) => set(doc, "/spec/blockDeviceMappings", json!(b)),
        NcMutation::Placement(p) => set(doc, "/spec/placementGroupSelector", p.clone()),
        NcMutation::NetworkInterfaces(n) => set(doc, "/spec/networkInterfaces", json!(n)),
        NcMutation::CapacityReservations(c) => {
            set(doc, "/spec/capacityReservationSelectorTerms", json!(c))
        }
        NcMutation::Metadata(m) => set(doc, "/spec/metadataOptions", m.clone()),
    }
}

fn check(doc: &Value) -> Result<(), TestCaseError> {
    let reference = reference_accepts(doc);
    let ours = dovetail_accepts(doc);
    prop_assert_eq!(
        reference.is_ok(),
        ours.is_ok(),
        "verdicts differ for {}\nreference: {:?}\ndovetail: {:?}",
        serde_json::to_string(doc).unwrap(),
        reference,
        ours
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    #[test]
    fn nodepool_verdicts_agree_with_the_reference(ms in prop::collection::vec(np_mutation(), 0..3)) {
        let mut doc = base_nodepool();
        for m in &ms {
            apply_np(&mut doc, m);
        }
        check(&doc)?;
    }

    #[test]
    fn ec2nodeclass_verdicts_agree_with_the_reference(ms in prop::collection::vec(nc_mutation(), 0..3)) {
        let mut doc = base_ec2nodeclass();
        for m in &ms {
            apply_nc(&mut doc, m);
        }
        check(&doc)?;
    }
}

/// The generators must produce both verdicts in quantity, or agreement
/// would be vacuous.
#[test]
fn generators_cover_both_verdicts() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut ok, mut bad) = (0, 0);
    for _ in 0..300 {
        let ms = prop::collection::vec(np_mutation(), 0..3)
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let mut doc = base_nodepool();
        for m in &ms {
            apply_np(&mut doc, m);
        }
        if reference_accepts(&doc).is_ok() {
            ok += 1
        } else {
            bad += 1
        }
    }
    assert!(
        ok > 50 && bad > 50,
        "NodePools: accepted {ok}, rejected {bad}"
    );
    let (mut ok, mut bad) = (0, 0);
    for _ in 0..300 {
        let ms = prop::collection::vec(nc_mutation(), 0..3)
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let mut doc = base_ec2nodeclass();
        for m in &ms {
            apply_nc(&mut doc, m);
        }
        if reference_accepts(&doc).is_ok() {
            ok += 1
        } else {
            bad += 1
        }
    }
    assert!(
        ok > 50 && bad > 50,
        "EC2NodeClasses: accepted {ok}, rejected {bad}"
    );
}

// ---------------------------------------------------------------------------
// Karpenter v1.14.1 compatibility, rule by rule. Each test names the rule's
// source: the reference CRD (`../shared/reference/karpenter-v1.14.1-crds`)
// or Karpenter's runtime validation in that release.

/// Every error and warning dovetail reports for one document.
fn findings(doc: &Value, strict_codes: bool) -> Vec<String> {
    let text = serde_json::to_string_pretty(doc).unwrap();
    let loaded = parse_one("doc.yaml", text.as_bytes(), &Limits::default());
    let report = validate::validate(
        &loaded,
        &Options {
            allow_external_nodeclass: true,
            ..Options::default()
        },
    );
    report
        .diagnostics
        .iter()
        .filter(|d| strict_codes || d.severity == Severity::Error)
        .map(|d| format!("{} {}: {}: {}", d.severity, d.code, d.path, d.message))
        .collect()
}

fn nodepool_with(labels: Value, requirements: Value) -> Value {
    let mut doc = base_nodepool();
    set(&mut doc, "/spec/template/metadata/labels", labels);
    set(&mut doc, "/spec/template/spec/requirements", requirements);
    doc
}

/// Source: karpenter.sh_nodepools.yaml v1.14.1, the x-kubernetes-validations
/// of spec.template.metadata.labels and of requirements[].key: only
/// karpenter.sh (except capacity-type and nodepool; nodepool also not as a
/// label), karpenter.k8s.aws (except its list) and kubernetes.io/hostname are
/// restricted; and Karpenter's RestrictedLabelDomains = {karpenter.sh} since
/// v1.9 ("relax cel restrictions"). kubernetes.io and k8s.io were restricted
/// by dovetail until now.
#[test]
fn v1_14_1_restricts_only_karpenter_domains_and_the_hostname() {
    for key in [
        "kubernetes.io/test",
        "subdomain.kubernetes.io/test",
        "subdomain.k8s.io/test",
        "k8s.io/foo",
        "node-restriction.kubernetes.io/pool",
        "topology.kubernetes.io/zone",
    ] {
        let doc = nodepool_with(
            json!({ key: "x" }),
            json!([{"key": key, "operator": "In", "values": ["x"]}]),
        );
        assert!(
            reference_accepts(&doc).is_ok(),
            "{key}: {:?}",
            reference_accepts(&doc)
        );
        assert_eq!(findings(&doc, false), Vec::<String>::new(), "{key}");
    }
    for key in [
        "karpenter.sh/custom",
        "sub.karpenter.sh/x",
        "karpenter.k8s.aws/instance-foo",
        "kubernetes.io/hostname",
    ] {
        let doc = nodepool_with(json!({ key: "x" }), json!([]));
        assert!(reference_accepts(&doc).is_err(), "{key}");
        assert!(!findings(&doc, false).is_empty(), "{key}");
        let doc = nodepool_with(
            json!({}),
            json!([{"key": key, "operator": "In", "values": ["x"]}]),
        );
        assert!(reference_accepts(&doc).is_err(), "{key}");
        assert!(!findings(&doc, false).is_empty(), "{key}");
    }
}

/// Source: the same CEL rules, their exception lists: dovetail's lists of
/// allowed karpenter.sh and karpenter.k8s.aws labels are the reference's,
/// read from the v1.14.1 CRD.
#[test]
fn the_allowed_karpenter_labels_are_the_v1_14_1_lists() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/reference/karpenter-v1.14.1-crds");
    let crd = std::fs::read_to_string(dir.join("karpenter.sh_nodepools.yaml")).unwrap();
    let list_before = |domain: &str| -> std::collections::BTreeSet<String> {
        let marker = format!("|| !self.find(\"^([^/]+)\").endsWith(\"{domain}\")");
        let line = crd
            .lines()
            .find(|l| l.contains("rule: self in [") && l.contains(&marker))
            .unwrap_or_else(|| panic!("no requirement rule for {domain}"));
        let inner = &line[line.find('[').unwrap() + 1..line.find(']').unwrap()];
        inner
            .split(", ")
            .map(|v| v.trim_matches('"').to_string())
            .collect()
    };
    let aws: std::collections::BTreeSet<String> = dovetail::api::ALLOWED_KARPENTER_AWS_LABELS
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(aws, list_before("karpenter.k8s.aws"));
    let core: std::collections::BTreeSet<String> = dovetail::api::ALLOWED_KARPENTER_LABELS
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(core, list_before("karpenter.sh"));
}

/// Source: Karpenter v1.14.1 validateWellKnownValues (NodePool readiness):
/// an In requirement on a key with well-known values (capacity-type in
/// core's WellKnownValuesForRequirements, instance-tenancy in the AWS
/// provider's) is an error only when all its values are unknown; otherwise
/// Karpenter logs and continues. dovetail rejected [on-demand, xspot].
#[test]
fn well_known_values_fail_open_like_v1_14_1() {
    for (key, mixed, unknown) in [
        (
            "karpenter.sh/capacity-type",
            json!(["on-demand", "xspot"]),
            json!(["xspot"]),
        ),
        (
            "karpenter.k8s.aws/instance-tenancy",
            json!(["default", "shared"]),
            json!(["shared"]),
        ),
    ] {
        let doc = nodepool_with(
            json!({}),
            json!([{"key": key, "operator": "In", "values": mixed}]),
        );
        assert!(reference_accepts(&doc).is_ok());
        assert_eq!(findings(&doc, false), Vec::<String>::new(), "{key}");
        let all = findings(&doc, true);
        assert_eq!(all.len(), 1, "{all:?}");
        assert!(all[0].starts_with("warning requirement-value: "), "{all:?}");
        let doc = nodepool_with(
            json!({}),
            json!([{"key": key, "operator": "In", "values": unknown}]),
        );
        let errors = findings(&doc, false);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].contains("no valid values found in ["),
            "{errors:?}"
        );
    }
}

/// Source: karpenter.sh_nodepools.yaml v1.14.1, spec.disruption `required:
/// [consolidateAfter]`. v1beta1-era manifests omit it; the error says how to
/// keep their behaviour.
#[test]
fn a_missing_consolidate_after_gets_a_hint() {
    let mut doc = base_nodepool();
    set(
        &mut doc,
        "/spec/disruption",
        json!({"consolidationPolicy": "WhenEmptyOrUnderutilized"}),
    );
    assert!(reference_accepts(&doc).is_err());
    let text = serde_json::to_string_pretty(&doc).unwrap();
    let loaded = parse_one("doc.yaml", text.as_bytes(), &Limits::default());
    let report = validate::validate(&loaded, &Options::default());
    let d = report
        .diagnostics
        .iter()
        .find(|d| d.message == "missing required field `consolidateAfter`")
        .expect("the schema error");
    assert_eq!(
        d.hint.as_deref(),
        Some("karpenter.sh/v1 requires consolidateAfter here; \"0s\" keeps the v1beta1 behaviour")
    );
}

/// Source: the v1.14.1 CRDs serve only karpenter.sh/v1 and
/// karpenter.k8s.aws/v1. A repository of v1beta1 objects gets its migration
/// findings, and not also "no NodePool or EC2NodeClass found".
#[test]
fn old_api_versions_get_only_their_migration_findings() {
    let text = "apiVersion: karpenter.sh/v1beta1\nkind: NodePool\nmetadata:\n  name: old\nspec:\n  template:\n    spec:\n      nodeClassRef: {name: default}\n---\napiVersion: karpenter.k8s.aws/v1beta1\nkind: EC2NodeClass\nmetadata:\n  name: default\nspec:\n  amiFamily: AL2\n";
    let loaded = parse_one("old.yaml", text.as_bytes(), &Limits::default());
    let report = validate::validate(&loaded, &Options::default());
    let codes: std::collections::BTreeSet<&str> =
        report.diagnostics.iter().map(|d| d.code).collect();
    assert!(codes.contains("retired-api"), "{codes:?}");
    assert!(!codes.contains("empty-repository"), "{codes:?}");
}

/// Source: not a Karpenter rule but how its manifests are applied: kubectl
/// (k8s.io/apimachinery's YAML decoder), kubeconform and kubectl-validate
/// skip an empty document, a trailing `---` or one followed only by a
/// comment. So does `validate`, and so do the pod and snapshot readers,
/// where a trailing `---` was the hard error "document 2 is empty".
#[test]
fn empty_documents_are_skipped_as_kubectl_skips_them() {
    let pool = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: gen\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n";
    for text in [
        format!("{pool}---\n"),
        format!("---\n{pool}--- # only a comment\n---\n"),
        format!("# header\n---\n{pool}---\n# trailing comment\n"),
    ] {
        let loaded = parse_one("pools.yaml", text.as_bytes(), &Limits::default());
        let report = validate::validate(
            &loaded,
            &Options {
                allow_external_nodeclass: true,
                ..Options::default()
            },
        );
        let errors: Vec<String> = report
            .diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .map(ToString::to_string)
            .collect();
        assert_eq!(errors, Vec::<String>::new(), "{text}");
        let objects = dovetail::snapshot::parse_objects("pools.yaml", &text).unwrap();
        assert_eq!(objects.len(), 1, "{text}");
    }
}
