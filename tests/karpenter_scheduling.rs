//! Cases of Karpenter v1.14.1's own scheduling and provisioning suites, run
//! through `dovetail plan` (one solve): each test is named after the
//! reference's `It(...)` and cites its file and `Describe`/`Context`.
//!
//! The reference runs against its fake cloud provider's instance types;
//! these cases use a small catalog of their own with the same shape
//! (2, 4 and 8 cpu types, amd64 and arm64, sizes `small`, `medium` and
//! `large` as `karpenter.k8s.aws/instance-size`, zones `test-zone-1..3`),
//! so each expectation is what the reference's rule gives on this catalog.
//!
//! Files of kubernetes-sigs/karpenter at v1.14.1:
//! - `pkg/controllers/provisioning/suite_test.go` (PROVISIONING),
//! - `pkg/controllers/provisioning/scheduling/topology_test.go` (TOPOLOGY).

use serde_json::{Value, json};

use crate::support::dovetail;

/// `(name, arch, size, cpu, memory, on-demand price)`.
const TYPES: [(&str, &str, &str, &str, &str, f64); 6] = [
    ("amd.small", "amd64", "small", "2", "2Gi", 0.02),
    ("amd.medium", "amd64", "medium", "4", "4Gi", 0.04),
    ("amd.large", "amd64", "large", "8", "8Gi", 0.08),
    ("arm.small", "arm64", "small", "2", "2Gi", 0.025),
    ("arm.medium", "arm64", "medium", "4", "4Gi", 0.05),
    ("arm.large", "arm64", "large", "8", "8Gi", 0.10),
];
const ZONES: [&str; 3] = ["test-zone-1", "test-zone-2", "test-zone-3"];

fn catalog() -> Value {
    let types: Vec<Value> = TYPES
        .iter()
        .map(|(name, arch, size, cpu, mem, price)| {
            json!({
                "name": name,
                "labels": {
                    "node.kubernetes.io/instance-type": name,
                    "kubernetes.io/arch": arch,
                    "kubernetes.io/os": "linux",
                    "karpenter.k8s.aws/instance-size": size,
                },
                "capacity": {"cpu": cpu, "memory": mem, "pods": "110"},
                "allocatable": {"cpu": cpu, "memory": mem, "pods": "110"},
                "offerings": ZONES.iter().map(|z| json!({
                    "zone": z, "capacityType": "on-demand", "price": price, "available": true
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({ "instanceTypes": types })
}

/// The NodePool `default` (with its EC2NodeClass) as the reference's
/// `test.NodePool()` makes it: no requirements beyond the given ones.
#[derive(Default)]
struct Pool {
    /// YAML list items under `spec.template.spec.requirements`.
    requirements: Vec<&'static str>,
    /// `spec.template.metadata.labels` as YAML flow-map entries.
    labels: Vec<&'static str>,
    /// YAML list items under `taints`.
    taints: Vec<&'static str>,
    /// YAML list items under `startupTaints`.
    startup_taints: Vec<&'static str>,
}

impl Pool {
    fn yaml(&self) -> String {
        let list = |items: &[&str]| {
            if items.is_empty() {
                "[]".to_string()
            } else {
                format!("[{}]", items.join(", "))
            }
        };
        format!(
            "apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  amiSelectorTerms:
    - alias: al2023@latest
  role: KarpenterNodeRole-test
  subnetSelectorTerms:
    - tags: {{karpenter.sh/discovery: test}}
  securityGroupSelectorTerms:
    - tags: {{karpenter.sh/discovery: test}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    metadata:
      labels: {{{}}}
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
      requirements: {}
      taints: {}
      startupTaints: {}
",
            self.labels.join(", "),
            list(&self.requirements),
            list(&self.taints),
            list(&self.startup_taints),
        )
    }
}

/// A pending pod: `name`, labels, cpu and memory requests, and extra
/// `spec` fields merged in.
fn pod(name: &str, labels: Value, cpu: &str, memory: &str, spec: Value) -> Value {
    let mut resources = serde_json::Map::new();
    if !cpu.is_empty() {
        resources.insert("cpu".into(), cpu.into());
    }
    if !memory.is_empty() {
        resources.insert("memory".into(), memory.into());
    }
    let mut s = json!({
        "containers": [{"name": "c", "image": "i", "resources": {"requests": resources}}],
    });
    if let (Some(s), Some(extra)) = (s.as_object_mut(), spec.as_object()) {
        for (k, v) in extra {
            if k == "ports" {
                s["containers"][0]["ports"] = v.clone();
            } else {
                s.insert(k.clone(), v.clone());
            }
        }
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": s,
        "status": {"phase": "Pending"},
    })
}

/// A DaemonSet whose pod template requests `cpu`/`memory` with extra
/// `spec` fields (as [`pod`]).
fn daemonset(name: &str, cpu: &str, memory: &str, spec: Value) -> Value {
    let p = pod(name, json!({"ds": name}), cpu, memory, spec);
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"ds": name}},
            "template": {"metadata": {"labels": {"ds": name}}, "spec": p["spec"]},
        },
    })
}

/// An existing, ready node with `labels`, the given allocatable cpu.
fn node(name: &str, labels: Value, cpu: &str) -> Value {
    let mut labels = labels;
    labels["kubernetes.io/hostname"] = name.into();
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {
            "capacity": {"cpu": cpu, "memory": "4Gi", "pods": "110"},
            "allocatable": {"cpu": cpu, "memory": "4Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    })
}

/// A pod running on `node`.
fn bound(name: &str, labels: Value, cpu: &str, node: &str) -> Value {
    let mut p = pod(name, labels, cpu, "", json!({}));
    p["spec"]["nodeName"] = node.into();
    p["status"]["phase"] = "Running".into();
    p
}

/// `dovetail plan` of the pool, the pods and a snapshot holding `cluster`
/// (nodes, their pods, DaemonSets): the JSON report.
fn plan(pool: &Pool, pods: &[Value], cluster: &[Value]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("config.yaml"), pool.yaml()).unwrap();
    let catalog_path = dir.path().join("catalog.json");
    std::fs::write(&catalog_path, catalog().to_string()).unwrap();
    let pods_path = dir.path().join("pods.jsonl");
    let lines: Vec<String> = pods.iter().map(Value::to_string).collect();
    std::fs::write(&pods_path, lines.join("\n")).unwrap();
    let snapshot_path = dir.path().join("snapshot.json");
    std::fs::write(
        &snapshot_path,
        json!({"apiVersion": "v1", "kind": "List", "items": cluster}).to_string(),
    )
    .unwrap();
    let out = dovetail(&[
        "plan",
        &repo.display().to_string(),
        "--catalog",
        &catalog_path.display().to_string(),
        "--pods",
        &pods_path.display().to_string(),
        "--snapshot",
        &snapshot_path.display().to_string(),
        "-o",
        "json",
    ]);
    assert!(out.code <= 1, "{}{}", out.stdout, out.stderr);
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout))
}

fn claims(v: &Value) -> &Vec<Value> {
    v["nodeclaims"].as_array().unwrap()
}

/// The claim holding `pod` (`default/NAME`).
fn claim_of<'a>(v: &'a Value, pod: &str) -> &'a Value {
    let key = format!("default/{pod}");
    claims(v)
        .iter()
        .find(|c| c["pods"].as_array().unwrap().iter().any(|p| p == &key))
        .unwrap_or_else(|| panic!("{pod} is on no claim: {v:#}"))
}

fn types_of(claim: &Value) -> Vec<&str> {
    claim["instance_types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect()
}

/// The instance type a claim launches: its cheapest.
fn launched(claim: &Value) -> &str {
    types_of(claim)[0]
}

fn unschedulable(v: &Value) -> Vec<(String, String)> {
    v["unschedulable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| {
            (
                u["pod"].as_str().unwrap().to_string(),
                u["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn is_arm(t: &str) -> bool {
    t.starts_with("arm.")
}

// ---------------------------------------------------------------------
// PROVISIONING: Describe("Provisioning") / Context("Daemonsets")
// ---------------------------------------------------------------------

/// A 1 cpu / 1Gi pod beside a 2 cpu / 2Gi DaemonSet needs the 4 cpu type.
fn one_cpu_pod() -> Value {
    pod("p", json!({}), "1", "1Gi", json!({}))
}

fn ds2(spec: Value) -> Value {
    daemonset("ds", "2", "2Gi", spec)
}

/// PROVISIONING, Context("Daemonsets"): It("should account for daemonsets").
#[test]
fn should_account_for_daemonsets() {
    let v = plan(&Pool::default(), &[one_cpu_pod()], &[ds2(json!({}))]);
    let c = claim_of(&v, "p");
    assert_eq!(launched(c), "amd.medium", "{c:#}");
    // The claim's requests include the DaemonSet's.
    assert_eq!(c["requests"]["cpu"], "3", "{c:#}");
}

/// PROVISIONING, Context("Daemonsets"): It("should account for daemonset
/// hostports"): a DaemonSet holding the pod's host port on every node of
/// the pool leaves the pod nowhere; nothing is launched for it.
#[test]
fn should_account_for_daemonset_hostports() {
    let ports = json!({"ports": [{"containerPort": 8080, "hostPort": 8080}]});
    let p = pod("p", json!({}), "1", "1Gi", ports.clone());
    let v = plan(&Pool::default(), &[p], &[ds2(ports)]);
    assert!(claims(&v).is_empty(), "{v:#}");
    let u = unschedulable(&v);
    assert_eq!(u.len(), 1, "{u:?}");
    assert!(u[0].1.contains("host port 8080/TCP"), "{}", u[0].1);
}

/// PROVISIONING, Context("Daemonsets"): It("should account for daemonsets
/// (with startup taint)").
#[test]
fn should_account_for_daemonsets_with_startup_taint() {
    let pool = Pool {
        startup_taints: vec!["{key: foo.com/taint, effect: NoSchedule}"],
        ..Pool::default()
    };
    let v = plan(&pool, &[one_cpu_pod()], &[ds2(json!({}))]);
    assert_eq!(launched(claim_of(&v, "p")), "amd.medium");
}

/// PROVISIONING, Context("Daemonsets"): It("should not schedule if daemonset
/// overhead is too large").
#[test]
fn should_not_schedule_if_daemonset_overhead_is_too_large() {
    let v = plan(
        &Pool::default(),
        &[pod("p", json!({}), "", "", json!({}))],
        &[daemonset("ds", "10000", "10000Gi", json!({}))],
    );
    assert!(claims(&v).is_empty(), "{v:#}");
    assert_eq!(unschedulable(&v).len(), 1);
}

/// PROVISIONING, Context("Daemonsets"): It("should ignore daemonsets without
/// matching tolerations").
#[test]
fn should_ignore_daemonsets_without_matching_tolerations() {
    let pool = Pool {
        taints: vec!["{key: foo, value: bar, effect: NoSchedule}"],
        ..Pool::default()
    };
    let p = pod(
        "p",
        json!({}),
        "1",
        "1Gi",
        json!({"tolerations": [{"operator": "Exists"}]}),
    );
    let v = plan(&pool, &[p], &[ds2(json!({}))]);
    assert_eq!(launched(claim_of(&v, "p")), "amd.small");
}

/// PROVISIONING, Context("Daemonsets"): It("should ignore daemonsets with an
/// invalid selector").
#[test]
fn should_ignore_daemonsets_with_an_invalid_selector() {
    let v = plan(
        &Pool::default(),
        &[one_cpu_pod()],
        &[ds2(json!({"nodeSelector": {"node": "invalid"}}))],
    );
    assert_eq!(launched(claim_of(&v, "p")), "amd.small");
}

fn required(terms: Value) -> Value {
    json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": terms}}}})
}

/// PROVISIONING, Context("Daemonsets"): It("should ignore daemonsets when no
/// instance types meet the daemonset requirements").
#[test]
fn should_ignore_daemonsets_when_no_instance_types_meet_the_daemonset_requirements() {
    let ds = ds2(required(json!([{"matchExpressions": [{
        "key": "node.kubernetes.io/instance-type", "operator": "In",
        "values": ["non-existent-instance-type"]}]}])));
    let v = plan(&Pool::default(), &[one_cpu_pod()], &[ds]);
    let c = claim_of(&v, "p");
    assert_eq!(launched(c), "amd.small", "{c:#}");
    assert_eq!(c["requests"]["cpu"], "1", "{c:#}");
}

/// PROVISIONING, Context("Daemonsets"): It("should account for daemonsets
/// with a custom label nodeSelector that matches the nodepool").
#[test]
fn should_account_for_daemonsets_with_a_custom_label_node_selector_that_matches_the_nodepool() {
    let pool = Pool {
        labels: vec!["purpose: monitoring"],
        ..Pool::default()
    };
    let ds = ds2(json!({"nodeSelector": {"purpose": "monitoring"}}));
    let v = plan(&pool, &[one_cpu_pod()], &[ds]);
    assert_eq!(launched(claim_of(&v, "p")), "amd.medium");
}

/// PROVISIONING, Context("Daemonsets"): It("should filter out daemonsets
/// based on instance type requirements"): a 1 cpu DaemonSet on `small`
/// types and a 10 cpu one on `large` types; the pod fits the 2 cpu small
/// type beside the first.
#[test]
fn should_filter_out_daemonsets_based_on_instance_type_requirements() {
    let size = |s: &str| {
        required(json!([{"matchExpressions": [{
            "key": "karpenter.k8s.aws/instance-size", "operator": "In", "values": [s]}]}]))
    };
    let v = plan(
        &Pool::default(),
        &[one_cpu_pod()],
        &[
            daemonset("small", "1", "", size("small")),
            daemonset("large", "10", "", size("large")),
        ],
    );
    let c = claim_of(&v, "p");
    assert_eq!(launched(c), "amd.small", "{c:#}");
    // No `large` type is listed: with the 10 cpu DaemonSet none holds the pod.
    assert!(types_of(c).iter().all(|t| !t.ends_with(".large")), "{c:#}");
    // As in the reference, the claim's requests add the smallest overhead
    // among its types (the `medium` ones run neither DaemonSet).
    assert_eq!(c["requests"]["cpu"], "1", "{c:#}");
}

/// PROVISIONING, Context("Daemonsets"): It("should account daemonsets with
/// NotIn operator and unspecified key").
#[test]
fn should_account_daemonsets_with_not_in_operator_and_unspecified_key() {
    let ds = ds2(required(json!([{"matchExpressions": [{
        "key": "foo", "operator": "NotIn", "values": ["bar"]}]}])));
    let p = pod(
        "p",
        json!({}),
        "1",
        "1Gi",
        json!({"nodeSelector": {"topology.kubernetes.io/zone": "test-zone-2"}}),
    );
    let v = plan(&Pool::default(), &[p], &[ds]);
    assert_eq!(launched(claim_of(&v, "p")), "amd.medium");
}

/// PROVISIONING, Context("Daemonsets"): It("should consider a daemonset
/// schedulable with multiple node affinity terms"): the DaemonSet matches
/// the NodePool through its second term.
#[test]
fn should_consider_a_daemonset_schedulable_with_multiple_node_affinity_terms() {
    let pool = Pool {
        labels: vec!["foo: bar"],
        ..Pool::default()
    };
    let ds = ds2(required(json!([
        {"matchExpressions": [{"key": "foo", "operator": "In", "values": ["voo"]}]},
        {"matchExpressions": [{"key": "foo", "operator": "In", "values": ["bar"]}]},
    ])));
    let v = plan(&pool, &[one_cpu_pod()], &[ds]);
    assert_eq!(launched(claim_of(&v, "p")), "amd.medium");
}

/// PROVISIONING, Context("Daemonsets"): It("should consider a daemonset
/// schedulable with an incompatible node affinity preference").
#[test]
fn should_consider_a_daemonset_schedulable_with_an_incompatible_node_affinity_preference() {
    let ds = ds2(json!({"affinity": {"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {
            "matchExpressions": [{"key": "node", "operator": "In", "values": ["invalid"]}]}}]}}}));
    let v = plan(&Pool::default(), &[one_cpu_pod()], &[ds]);
    assert_eq!(launched(claim_of(&v, "p")), "amd.medium");
}

/// PROVISIONING, Context("Daemonsets"): It("should consider a daemonset
/// schedulable with a PreferNoSchedule taint").
#[test]
fn should_consider_a_daemonset_schedulable_with_a_prefer_no_schedule_taint() {
    let pool = Pool {
        taints: vec!["{key: test, effect: PreferNoSchedule}"],
        ..Pool::default()
    };
    let v = plan(&pool, &[one_cpu_pod()], &[ds2(json!({}))]);
    assert_eq!(launched(claim_of(&v, "p")), "amd.medium");
}

/// PROVISIONING, Context("Daemonsets"): It("should not account for daemonset
/// hostports when daemonset would not schedule on selected node"): the
/// DaemonSet holding port 8080 runs only on `large` types; the pod asks for
/// `small` ones, where a 1 cpu DaemonSet holds 8081.
#[test]
fn should_not_account_for_daemonset_hostports_when_daemonset_would_not_schedule_on_selected_node() {
    let size = |s: &str, port: u16| {
        let mut spec = required(json!([{"matchExpressions": [{
            "key": "karpenter.k8s.aws/instance-size", "operator": "In", "values": [s]}]}]));
        spec["ports"] = json!([{"containerPort": port, "hostPort": port}]);
        spec
    };
    let p = pod(
        "p",
        json!({}),
        "1",
        "1Gi",
        json!({
            "nodeSelector": {"karpenter.k8s.aws/instance-size": "small"},
            "ports": [{"containerPort": 8080, "hostPort": 8080}],
        }),
    );
    let v = plan(
        &Pool::default(),
        &[p],
        &[
            daemonset("large", "4", "4Gi", size("large", 8080)),
            daemonset("small", "1", "1Gi", size("small", 8081)),
        ],
    );
    assert_eq!(launched(claim_of(&v, "p")), "amd.small", "{v:#}");
}

/// Issue 28's case beside the reference's: a DaemonSet that runs only on
/// arm64 nodes is not counted on a claim for an amd64-only pod.
#[test]
fn arm64_only_daemonset_is_not_counted_on_an_amd64_claim() {
    let ds = ds2(json!({"nodeSelector": {"kubernetes.io/arch": "arm64"}}));
    let p = pod(
        "p",
        json!({}),
        "1",
        "1Gi",
        json!({"nodeSelector": {"kubernetes.io/arch": "amd64"}}),
    );
    let v = plan(&Pool::default(), &[p], &[ds]);
    let c = claim_of(&v, "p");
    assert_eq!(launched(c), "amd.small", "{c:#}");
    assert_eq!(c["requests"]["cpu"], "1", "{c:#}");
}

/// PROVISIONING, Context("NodeClaim Creation"): It("should not double-count
/// daemon overhead when multiple pods are scheduled to the same nodeclaim").
#[test]
fn should_not_double_count_daemon_overhead_when_multiple_pods_are_scheduled_to_the_same_nodeclaim()
{
    let pods = [
        pod("p1", json!({}), "1", "1Mi", json!({})),
        pod("p2", json!({}), "1", "1Mi", json!({})),
    ];
    let v = plan(
        &Pool::default(),
        &pods,
        &[daemonset("ds", "1", "1Mi", json!({}))],
    );
    assert_eq!(claims(&v).len(), 1, "{v:#}");
    let r = &claims(&v)[0]["requests"];
    assert_eq!(r["cpu"], "3", "{r}");
    assert_eq!(r["memory"], "3Mi", "{r}");
    assert_eq!(r["pods"], "3", "{r}");
}

// ---------------------------------------------------------------------
// TOPOLOGY: Describe("Topology") / Context("Pod Affinity/Anti-Affinity")
// ---------------------------------------------------------------------

fn hostname_spread(labels: &Value) -> Value {
    json!([{"topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": labels}, "maxSkew": 1}])
}

fn term(labels: &Value, key: &str) -> Value {
    json!([{"labelSelector": {"matchLabels": labels}, "topologyKey": key}])
}

/// TOPOLOGY, Context("Pod Affinity/Anti-Affinity"): It("should respect pod
/// affinity (arch)"): the second pod follows the first onto arm64, on a
/// claim of its own (hostname spread), and that claim lists only arm64 types.
#[test]
fn should_respect_pod_affinity_arch() {
    let labels = json!({"security": "s2"});
    let p1 = pod(
        "aff1",
        labels.clone(),
        "2",
        "",
        json!({"topologySpreadConstraints": hostname_spread(&labels),
               "nodeSelector": {"kubernetes.io/arch": "arm64"}}),
    );
    let p2 = pod(
        "aff2",
        labels.clone(),
        "1",
        "",
        json!({"topologySpreadConstraints": hostname_spread(&labels),
               "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                   term(&labels, "kubernetes.io/arch")}}}),
    );
    let v = plan(&Pool::default(), &[p1, p2], &[]);
    let (c1, c2) = (claim_of(&v, "aff1"), claim_of(&v, "aff2"));
    assert_ne!(c1, c2, "{v:#}");
    for c in [c1, c2] {
        assert!(types_of(c).iter().all(|t| is_arm(t)), "{c:#}");
    }
}

/// TOPOLOGY, Context("Pod Affinity/Anti-Affinity"): It("should not violate
/// pod anti-affinity (arch)"): the second pod avoids arm64, so its claim
/// lists, and is priced as, amd64 types only.
#[test]
fn should_not_violate_pod_anti_affinity_arch() {
    let labels = json!({"security": "s2"});
    let p1 = pod(
        "aff1",
        labels.clone(),
        "2",
        "",
        json!({"topologySpreadConstraints": hostname_spread(&labels),
               "nodeSelector": {"kubernetes.io/arch": "arm64"}}),
    );
    let p2 = pod(
        "aff2",
        labels.clone(),
        "1",
        "",
        json!({"topologySpreadConstraints": hostname_spread(&labels),
               "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                   term(&labels, "kubernetes.io/arch")}}}),
    );
    let v = plan(&Pool::default(), &[p1, p2], &[]);
    let (c1, c2) = (claim_of(&v, "aff1"), claim_of(&v, "aff2"));
    assert!(types_of(c1).iter().all(|t| is_arm(t)), "{c1:#}");
    assert!(types_of(c2).iter().all(|t| !is_arm(t)), "{c2:#}");
    assert_eq!(c2["price_per_hour"], 0.02, "{c2:#}");
}

/// TOPOLOGY, Context("Pod Affinity/Anti-Affinity"): It("should separate
/// nodes using simple pod anti-affinity on hostname").
#[test]
fn should_separate_nodes_using_simple_pod_anti_affinity_on_hostname() {
    let labels = json!({"security": "s2"});
    let p1 = pod("aff1", labels.clone(), "", "", json!({}));
    let p2 = pod(
        "aff2",
        json!({}),
        "",
        "",
        json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            term(&labels, "kubernetes.io/hostname")}}}),
    );
    let v = plan(&Pool::default(), &[p2, p1], &[]);
    assert_ne!(claim_of(&v, "aff1"), claim_of(&v, "aff2"), "{v:#}");
}

/// TOPOLOGY, Context("Pod Affinity/Anti-Affinity"): It("should not violate
/// pod anti-affinity on zone").
#[test]
fn should_not_violate_pod_anti_affinity_on_zone() {
    let labels = json!({"security": "s2"});
    let mut pods: Vec<Value> = ZONES
        .iter()
        .enumerate()
        .map(|(i, z)| {
            pod(
                &format!("zone{}", i + 1),
                labels.clone(),
                "2",
                "",
                json!({"nodeSelector": {"topology.kubernetes.io/zone": z}}),
            )
        })
        .collect();
    pods.push(pod(
        "aff",
        json!({}),
        "",
        "",
        json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            term(&labels, "topology.kubernetes.io/zone")}}}),
    ));
    let v = plan(&Pool::default(), &pods, &[]);
    for z in ["zone1", "zone2", "zone3"] {
        claim_of(&v, z);
    }
    let u = unschedulable(&v);
    assert_eq!(u.len(), 1, "{u:?}");
    assert_eq!(u[0].0, "default/aff");
}

/// TOPOLOGY, Context("Pod Affinity/Anti-Affinity"): It("should not schedule
/// pods with affinity to a non-existent pod").
#[test]
fn should_not_schedule_pods_with_affinity_to_a_non_existent_pod() {
    let labels = json!({"security": "s2"});
    let pods: Vec<Value> = (0..10)
        .map(|i| {
            pod(
                &format!("aff{i}"),
                json!({}),
                "",
                "",
                json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                    term(&labels, "topology.kubernetes.io/zone")}}}),
            )
        })
        .collect();
    let v = plan(&Pool::default(), &pods, &[]);
    assert!(claims(&v).is_empty(), "{v:#}");
    assert_eq!(unschedulable(&v).len(), 10);
}

// ---------------------------------------------------------------------
// TOPOLOGY: Context("NodeAffinityPolicy")
// ---------------------------------------------------------------------

/// The NodeAffinityPolicy cases: the pool adds `fake-label=baz` and
/// `selector=value`; two existing full nodes carry `fake-label` foo and bar
/// with `selector=mismatch`; five pods select `selector=value` and spread on
/// `fake-label` with maxSkew 1 and the given policy.
fn node_affinity_policy(policy: &str) -> Value {
    let pool = Pool {
        labels: vec!["fake-label: baz", "selector: value"],
        ..Pool::default()
    };
    let labels = json!({"test": "test"});
    let nodes = [
        node(
            "node-foo",
            json!({"fake-label": "foo", "selector": "mismatch"}),
            "100m",
        ),
        node(
            "node-bar",
            json!({"fake-label": "bar", "selector": "mismatch"}),
            "100m",
        ),
    ];
    let pods: Vec<Value> = (0..5)
        .map(|i| {
            pod(
                &format!("p{i}"),
                labels.clone(),
                "1",
                "",
                json!({
                    "nodeSelector": {"selector": "value"},
                    "topologySpreadConstraints": [{
                        "topologyKey": "fake-label", "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": labels}, "maxSkew": 1,
                        "nodeAffinityPolicy": policy}],
                }),
            )
        })
        .collect();
    plan(&pool, &pods, &nodes)
}

fn placed(v: &Value) -> usize {
    claims(v)
        .iter()
        .map(|c| c["pods"].as_array().unwrap().len())
        .sum()
}

/// TOPOLOGY, Context("NodeAffinityPolicy"): It("should balance pods across a
/// label (NodeAffinityPolicy=ignore)"): three domains count, only `baz` can
/// get nodes, so one pod is placed.
#[test]
fn should_balance_pods_across_a_label_node_affinity_policy_ignore() {
    let v = node_affinity_policy("Ignore");
    assert_eq!(placed(&v), 1, "{v:#}");
    assert_eq!(unschedulable(&v).len(), 4);
}

/// TOPOLOGY, Context("NodeAffinityPolicy"): It("should balance pods across a
/// label (NodeAffinityPolicy=honor)"): the nodes the pods' nodeSelector
/// excludes are not domains, so all five go to `baz`.
#[test]
fn should_balance_pods_across_a_label_node_affinity_policy_honor() {
    let v = node_affinity_policy("Honor");
    assert_eq!(placed(&v), 5, "{v:#}");
    assert!(unschedulable(&v).is_empty(), "{v:#}");
}

// ---------------------------------------------------------------------
// TOPOLOGY: Context("Zonal")
// ---------------------------------------------------------------------

fn zone_spread(labels: &Value) -> Value {
    json!([{"topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": labels}, "maxSkew": 1}])
}

/// Pods per zone over the claims (`zones` of a claim with one zone).
fn per_zone(v: &Value) -> Vec<usize> {
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    for c in claims(v) {
        let zones = c["zones"].as_array().unwrap();
        assert_eq!(zones.len(), 1, "a spread claim has one zone: {c:#}");
        *counts
            .entry(zones[0].as_str().unwrap().to_string())
            .or_default() += c["pods"].as_array().unwrap().len();
    }
    let mut out: Vec<usize> = counts.into_values().collect();
    out.sort();
    out
}

/// TOPOLOGY, Context("Zonal"): It("should balance pods across zones (match
/// labels)").
#[test]
fn should_balance_pods_across_zones_match_labels() {
    let labels = json!({"test": "test"});
    let pods: Vec<Value> = (0..4)
        .map(|i| {
            pod(
                &format!("p{i}"),
                labels.clone(),
                "",
                "",
                json!({"topologySpreadConstraints": zone_spread(&labels)}),
            )
        })
        .collect();
    let v = plan(&Pool::default(), &pods, &[]);
    assert_eq!(per_zone(&v), [1, 1, 2], "{v:#}");
}

/// TOPOLOGY, Context("Zonal"): It("should not violate max-skew when unsat =
/// do not schedule"): one pod already runs in test-zone-1, the NodePool may
/// only launch in zones 2 and 3, so two pods go to each and six stay
/// pending, with a reason that names the spread constraint.
#[test]
fn should_not_violate_max_skew_when_unsat_do_not_schedule() {
    let labels = json!({"test": "test"});
    let pool = Pool {
        requirements: vec![
            "{key: topology.kubernetes.io/zone, operator: In, values: [test-zone-2, test-zone-3]}",
        ],
        ..Pool::default()
    };
    let cluster = [
        node(
            "zone1-node",
            json!({"topology.kubernetes.io/zone": "test-zone-1"}),
            "1100m",
        ),
        bound("existing", labels.clone(), "1100m", "zone1-node"),
    ];
    let pods: Vec<Value> = (0..10)
        .map(|i| {
            pod(
                &format!("p{i}"),
                labels.clone(),
                "1100m",
                "",
                json!({"topologySpreadConstraints": zone_spread(&labels)}),
            )
        })
        .collect();
    let v = plan(&pool, &pods, &cluster);
    assert_eq!(per_zone(&v), [2, 2], "{v:#}");
    let u = unschedulable(&v);
    assert_eq!(u.len(), 6, "{u:?}");
    for (_, reason) in &u {
        assert!(
            reason.contains("topology spread on zone (maxSkew 1) allows only test-zone-1"),
            "{reason}"
        );
    }
}
