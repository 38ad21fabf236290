//! Karpenter v1.14.1's CapacityBuffer helper cases, ported and named after
//! their `It`s: pkg/controllers/capacitybuffer/helpers_test.go
//! (`calculateLimitReplicas`, `totalPodRequests`,
//! `calculatePercentageReplicas`), pkg/state/virtualpods/utilities_test.go
//! (`buildVirtualPods`, `sanitizeVirtualPodSpec`) and
//! pkg/controllers/provisioning/buffers_test.go (`bufferKeyOf`,
//! `IsVirtualPod`, `classifyBufferPods`, `computeProvisioningCondition`,
//! `bufferPodCountsFromResults`).
//!
//! Not ported: `filterVirtualPodErrors` and `filterVirtualPodMapping`
//! (they keep virtual pods out of the reference's in-memory scheduling
//! decisions; the provisioner here keeps them out of its unschedulable
//! list and pod events, tested with the controller), `SetCondition`
//! (`controller::set_condition`, shared by every condition the controller
//! writes and tested there), and the cache's locking cases.

use serde_json::json;

use super::*;
use crate::scheduling::pod::pod_requests;
use crate::scheduling::{ExistingPlacement, NewNodeClaim, Unschedulable};

fn pod(spec: serde_json::Value) -> SlimPod {
    serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "default"}, "spec": spec}))
        .unwrap()
}

fn container(requests: serde_json::Value) -> serde_json::Value {
    json!({"name": "c", "resources": {"requests": requests}})
}

fn requests(spec: serde_json::Value) -> Resources {
    let mut r = pod_requests(&pod(spec)).unwrap();
    r.0.remove(PODS);
    r
}

fn res(items: &[(&str, &str)]) -> Resources {
    Resources::parse(items.iter().copied()).unwrap()
}

// calculateLimitReplicas

fn limit(spec: serde_json::Value, limits: &[(&str, &str)]) -> Option<i32> {
    limit_replicas(&res(limits), &requests(spec))
}

#[test]
fn should_calculate_replicas_based_on_cpu_limits() {
    let spec = json!({"containers": [container(json!({"cpu": "1"}))]});
    assert_eq!(limit(spec, &[("cpu", "4")]), Some(4));
}

#[test]
fn should_calculate_replicas_based_on_memory_limits() {
    let spec = json!({"containers": [container(json!({"memory": "512Mi"}))]});
    assert_eq!(limit(spec, &[("memory", "2Gi")]), Some(4));
}

#[test]
fn should_take_the_minimum_across_multiple_resources() {
    let spec = json!({"containers": [container(json!({"cpu": "1", "memory": "1Gi"}))]});
    assert_eq!(limit(spec, &[("cpu", "8"), ("memory", "4Gi")]), Some(4));
}

#[test]
fn should_sum_requests_across_multiple_containers() {
    let spec = json!({"containers": [container(json!({"cpu": "500m"})), container(json!({"cpu": "500m"}))]});
    assert_eq!(limit(spec, &[("cpu", "3")]), Some(3));
}

#[test]
fn should_use_init_container_max_if_larger_than_sum_of_containers() {
    let spec = json!({"initContainers": [container(json!({"cpu": "4"}))],
                      "containers": [container(json!({"cpu": "1"}))]});
    assert_eq!(limit(spec, &[("cpu", "8")]), Some(2));
}

#[test]
fn should_use_container_sum_if_larger_than_init_containers() {
    let spec = json!({"initContainers": [container(json!({"cpu": "500m"}))],
                      "containers": [container(json!({"cpu": "2"}))]});
    assert_eq!(limit(spec, &[("cpu", "6")]), Some(3));
}

#[test]
fn should_return_false_when_pod_has_no_resource_requests() {
    let spec = json!({"containers": [{"name": "app"}]});
    assert_eq!(limit(spec, &[("cpu", "4")]), None);
}

#[test]
fn should_return_false_when_no_limit_resources_match_pod_requests() {
    let spec = json!({"containers": [container(json!({"cpu": "1"}))]});
    assert_eq!(limit(spec, &[("memory", "4Gi")]), None);
}

#[test]
fn should_floor_divide_no_rounding_up() {
    let spec = json!({"containers": [container(json!({"cpu": "3"}))]});
    assert_eq!(limit(spec, &[("cpu", "10")]), Some(3));
}

#[test]
fn should_handle_millicore_level_precision() {
    let spec = json!({"containers": [container(json!({"cpu": "250m"}))]});
    assert_eq!(limit(spec, &[("cpu", "1")]), Some(4));
}

#[test]
fn should_return_0_when_limit_is_smaller_than_a_single_pod_request() {
    let spec = json!({"containers": [container(json!({"cpu": "2"}))]});
    assert_eq!(limit(spec, &[("cpu", "1")]), Some(0));
}

// totalPodRequests (here `scheduling::pod::pod_requests`, which the
// controller uses for limits as the solver does for pods)

#[test]
fn should_sum_requests_from_all_containers() {
    let r = requests(json!({"containers": [
        container(json!({"cpu": "1", "memory": "512Mi"})),
        container(json!({"cpu": "500m", "memory": "256Mi"})),
    ]}));
    assert_eq!(r.get("cpu"), 1500);
    assert_eq!(r.get("memory"), 768 << 20);
}

#[test]
fn should_take_max_of_init_containers_vs_regular_containers() {
    let r = requests(json!({
        "initContainers": [container(json!({"cpu": "4"})), container(json!({"cpu": "2"}))],
        "containers": [container(json!({"cpu": "1"}))],
    }));
    assert_eq!(r.get("cpu"), 4000);
}

#[test]
fn should_return_empty_list_for_pod_with_no_requests() {
    assert!(requests(json!({"containers": [{"name": "app"}]})).is_zero());
}

#[test]
fn should_handle_mixed_resources_across_containers() {
    let r = requests(json!({"containers": [
        container(json!({"cpu": "1"})),
        container(json!({"memory": "1Gi"})),
    ]}));
    assert_eq!((r.get("cpu"), r.get("memory")), (1000, 1 << 30));
}

fn sidecar(cpu: &str) -> serde_json::Value {
    json!({"name": "s", "restartPolicy": "Always", "resources": {"requests": {"cpu": cpu}}})
}

#[test]
fn should_sum_sidecar_init_containers_with_regular_containers() {
    let r = requests(json!({"initContainers": [sidecar("500m")],
                            "containers": [container(json!({"cpu": "1"}))]}));
    assert_eq!(r.get("cpu"), 1500);
}

#[test]
fn should_sum_multiple_sidecar_init_containers_with_regular_containers() {
    let r = requests(json!({"initContainers": [sidecar("500m"), sidecar("200m")],
                            "containers": [container(json!({"cpu": "1"}))]}));
    assert_eq!(r.get("cpu"), 1700);
}

#[test]
fn should_use_max_of_regular_init_container_plus_preceding_sidecars_vs_running_total() {
    let r = requests(
        json!({"initContainers": [sidecar("500m"), container(json!({"cpu": "4"}))],
                            "containers": [container(json!({"cpu": "1"}))]}),
    );
    assert_eq!(r.get("cpu"), 4500);
}

#[test]
fn should_handle_sidecar_after_regular_init_container() {
    let r = requests(
        json!({"initContainers": [container(json!({"cpu": "4"})), sidecar("500m")],
                            "containers": [container(json!({"cpu": "1"}))]}),
    );
    assert_eq!(r.get("cpu"), 4000);
}

#[test]
fn should_not_treat_init_containers_without_restartpolicy_as_sidecars() {
    let r = requests(json!({"initContainers": [container(json!({"cpu": "2"}))],
                            "containers": [container(json!({"cpu": "1"}))]}));
    assert_eq!(r.get("cpu"), 2000);
}

// calculatePercentageReplicas

#[test]
fn calculate_percentage_replicas() {
    // "should calculate percentage and ceil", "should ceil fractional
    // results", "should return at least 1 when percentage > 0 and
    // replicas > 0", "should return 0 when scalable has 0 replicas",
    // "should return 0 when percentage is 0", "should handle 100
    // percent", "should handle large percentages (>100)", "should handle
    // large replica counts".
    for (replicas, pct, want) in [
        (10, 20, 2),
        (3, 10, 1),
        (1, 1, 1),
        (0, 50, 0),
        (10, 0, 0),
        (5, 100, 5),
        (4, 250, 10),
        (100_000, 33, 33_000),
    ] {
        assert_eq!(
            percentage_replicas(replicas, pct),
            want,
            "{replicas} {pct}%"
        );
    }
}

#[test]
fn replicas_combine_replicas_percentage_and_limits_as_the_reference_does() {
    let req = res(&[("cpu", "1")]);
    let cap = res(&[("cpu", "3")]);
    assert_eq!(replicas(Some(5), None, None, &req), 5);
    assert_eq!(replicas(Some(5), None, Some(&cap), &req), 3);
    assert_eq!(replicas(Some(2), None, Some(&cap), &req), 2);
    assert_eq!(replicas(None, None, Some(&cap), &req), 3);
    assert_eq!(replicas(None, Some(4), None, &req), 4);
    assert_eq!(replicas(Some(5), Some(2), None, &req), 5);
    assert_eq!(replicas(Some(2), Some(5), Some(&cap), &req), 3);
    assert_eq!(replicas(None, None, None, &req), 0);
}

// buildVirtualPods

fn buffer(name: &str, ns: &str, replicas: i32) -> CapacityBuffer {
    serde_json::from_value(json!({
        "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
        "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}")},
        "spec": {"podTemplateRef": {"name": "t"}, "replicas": replicas},
        "status": {"replicas": replicas},
    }))
    .unwrap()
}

fn template(spec: serde_json::Value, labels: serde_json::Value) -> PodTemplateSpec {
    serde_json::from_value(json!({"metadata": {"labels": labels}, "spec": spec})).unwrap()
}

#[test]
fn should_create_the_correct_number_of_pods_with_expected_metadata() {
    let t = template(
        json!({"containers": [{"name": "app", "image": "pause:v1"}], "nodeName": "somewhere"}),
        json!({"app": "web", "env": "prod"}),
    );
    let pods = virtual_pods(&buffer("web", "default", 3), &t);
    assert_eq!(pods.len(), 3);
    for (i, p) in pods.iter().enumerate() {
        let idx = i + 1;
        assert_eq!(
            p.metadata.name.as_deref(),
            Some(format!("capacity-buffer-web-{idx}").as_str())
        );
        assert_eq!(p.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(
            p.metadata.uid.as_deref(),
            Some(format!("uid-web-{idx}").as_str())
        );
        assert!(is_virtual(p));
        assert_eq!(buffer_of(p).as_deref(), Some("default/web"));
        let labels = p.metadata.labels.as_ref().unwrap();
        assert_eq!(labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(labels.get("env").map(String::as_str), Some("prod"));
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.priority, Some(VIRTUAL_POD_PRIORITY));
        assert_eq!(spec.node_name, None);
        assert!(
            crate::scheduling::pod::is_provisionable(p),
            "pending and unschedulable"
        );
    }
}

#[test]
fn should_produce_deterministic_uids_across_calls() {
    let t = template(
        json!({"containers": [{"name": "app"}]}),
        serde_json::Value::Null,
    );
    let (a, b) = (
        virtual_pods(&buffer("web", "default", 2), &t),
        virtual_pods(&buffer("web", "default", 2), &t),
    );
    assert_eq!(a, b);
    assert!(a.iter().all(|p| p.metadata.labels.is_none()));
}

#[test]
fn should_return_nil_for_zero_replicas() {
    let t = template(
        json!({"containers": [{"name": "app"}]}),
        serde_json::Value::Null,
    );
    assert!(virtual_pods(&buffer("web", "default", 0), &t).is_empty());
}

#[test]
fn should_drop_pvc_and_ephemeral_volumes() {
    // "should drop PVC volumes and their mounts", "... ephemeral volumes
    // and their mounts", "... both together": a virtual pod reads no
    // mounts, and keeps no volume that claims storage.
    let t = template(
        json!({"containers": [{"name": "app"}], "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "my-pvc"}},
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
            {"name": "config", "configMap": {"name": "cfg"}},
        ]}),
        serde_json::Value::Null,
    );
    let pods = virtual_pods(&buffer("web", "default", 1), &t);
    let names: Vec<&str> = pods[0]
        .spec
        .as_ref()
        .unwrap()
        .volumes
        .iter()
        .flatten()
        .map(|v| v.name.as_str())
        .collect();
    assert_eq!(names, ["config"]);
    // The template's own pod would wait for its claims: the virtual one
    // does not.
    let spec = SlimPodSpec::from(t.spec.as_ref().unwrap());
    assert_eq!(spec.volumes.as_ref().map(Vec::len), Some(3));
}

#[test]
fn should_preserve_tolerations_nodeselector_and_affinity() {
    let t = template(
        json!({"containers": [{"name": "app"}],
               "tolerations": [{"key": "dedicated", "operator": "Exists"}],
               "nodeSelector": {"disk": "ssd"},
               "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                   "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}}),
        serde_json::Value::Null,
    );
    let spec = virtual_pods(&buffer("web", "default", 1), &t)[0]
        .spec
        .clone()
        .unwrap();
    assert_eq!(spec.tolerations.as_ref().map(|t| t.len()), Some(1));
    assert_eq!(
        spec.node_selector
            .as_ref()
            .and_then(|s| s.get("disk"))
            .map(String::as_str),
        Some("ssd")
    );
    assert!(spec.affinity.is_some());
}

// bufferKeyOf / IsVirtualPod

fn annotated(annotations: serde_json::Value) -> SlimPod {
    serde_json::from_value(json!({"metadata": {"name": "p", "annotations": annotations}})).unwrap()
}

#[test]
fn buffer_key_of() {
    // "should return empty string for non-virtual pod", "... when
    // namespace annotation is missing", "... when name annotation is
    // missing", "should return namespace/name for complete virtual pod".
    assert_eq!(buffer_of(&SlimPod::default()), None);
    assert_eq!(buffer_of(&annotated(json!({"other": "x"}))), None);
    let fake = FAKE_POD_ANNOTATION;
    assert_eq!(
        buffer_of(&annotated(
            json!({fake: "true", BUFFER_NAME_ANNOTATION: "b"})
        )),
        None
    );
    assert_eq!(
        buffer_of(&annotated(
            json!({fake: "true", BUFFER_NAMESPACE_ANNOTATION: "ns"})
        )),
        None
    );
    assert_eq!(
        buffer_of(&annotated(json!({
            fake: "true", BUFFER_NAME_ANNOTATION: "b", BUFFER_NAMESPACE_ANNOTATION: "ns"
        })))
        .as_deref(),
        Some("ns/b")
    );
}

#[test]
fn is_virtual_pod() {
    // "should return false for pod without annotations", "should return
    // true for virtual pod", "should return false for pod with other
    // annotations only".
    assert!(!is_virtual(&SlimPod::default()));
    assert!(is_virtual(&annotated(json!({FAKE_POD_ANNOTATION: "true"}))));
    assert!(!is_virtual(&annotated(json!({"app": "true"}))));
    assert!(!is_virtual(&annotated(
        json!({FAKE_POD_ANNOTATION: "false"})
    )));
}

// classifyBufferPods / bufferPodCountsFromResults

fn result(existing: &[(&str, &[&str])], claims: &[&[&str]], failed: &[&str]) -> SolveResult {
    let strs = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    SolveResult {
        existing: existing
            .iter()
            .map(|(n, pods)| ExistingPlacement {
                node: n.to_string(),
                pods: strs(pods),
            })
            .collect(),
        nodeclaims: claims
            .iter()
            .map(|pods| NewNodeClaim {
                nodepool: "general".into(),
                requirements: crate::model::Requirements::new(),
                instance_types: Vec::new(),
                zones: Vec::new(),
                capacity_types: Vec::new(),
                pods: strs(pods),
                requests: Resources::new(),
                price: 0.0,
            })
            .collect(),
        unschedulable: failed
            .iter()
            .map(|p| Unschedulable {
                pod: p.to_string(),
                reason: "no room".into(),
            })
            .collect(),
        price: 0.0,
        lower_bound: 0.0,
    }
}

fn owners(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(p, b)| (p.to_string(), b.to_string()))
        .collect()
}

#[test]
fn should_bucket_virtual_pods_by_buffer_namespace_name_across_existing_and_new_nodes() {
    let o = owners(&[
        ("default/a-1", "default/a"),
        ("default/a-2", "default/a"),
        ("default/a-3", "default/a"),
        ("default/b-1", "default/b"),
        ("default/b-2", "default/b"),
    ]);
    let r = result(
        &[("n1", &["default/a-1", "default/a-2"])],
        &[&["default/a-3", "default/b-1", "default/b-2"]],
        &[],
    );
    let s = classify(&r, &o);
    assert_eq!((s["default/a"].existing, s["default/a"].new_claims), (2, 1));
    assert_eq!((s["default/b"].existing, s["default/b"].new_claims), (0, 2));
}

#[test]
fn should_ignore_real_pods() {
    let r = result(&[("n1", &["default/real"])], &[], &["default/other"]);
    assert!(classify(&r, &owners(&[])).is_empty());
    assert!(counts_by_node(&r, &owners(&[])).is_empty());
}

#[test]
fn should_distinguish_buffers_with_the_same_name_in_different_namespaces() {
    let o = owners(&[
        ("ns-a/buffer-1", "ns-a/buffer"),
        ("ns-a/buffer-2", "ns-a/buffer"),
        ("ns-b/buffer-1", "ns-b/buffer"),
        ("ns-b/buffer-2", "ns-b/buffer"),
        ("ns-b/buffer-3", "ns-b/buffer"),
    ]);
    let r = result(
        &[("n1", &["ns-a/buffer-1", "ns-b/buffer-1", "ns-b/buffer-2"])],
        &[&["ns-a/buffer-2", "ns-b/buffer-3"]],
        &[],
    );
    let s = classify(&r, &o);
    assert_eq!(
        (s["ns-a/buffer"].existing, s["ns-a/buffer"].new_claims),
        (1, 1)
    );
    assert_eq!(
        (s["ns-b/buffer"].existing, s["ns-b/buffer"].new_claims),
        (2, 1)
    );
}

#[test]
fn should_count_virtual_pods_per_providerid_on_existing_nodes() {
    // "should return empty map for empty results" too.
    let o = owners(&[
        ("d/a-1", "d/a"),
        ("d/a-2", "d/a"),
        ("d/a-3", "d/a"),
        ("d/b-1", "d/b"),
        ("d/b-2", "d/b"),
    ]);
    let r = result(
        &[
            ("node-a", &["d/a-1", "d/a-2", "d/real"]),
            ("node-b", &["d/b-1", "d/b-2"]),
        ],
        &[&["d/a-3"]],
        &[],
    );
    let counts = counts_by_node(&r, &o);
    assert_eq!(counts["node-a"].len(), 2);
    assert_eq!(counts["node-b"].len(), 2);
    assert!(counts_by_node(&result(&[], &[], &[]), &o).is_empty());
}

// computeProvisioningCondition

#[test]
fn compute_provisioning_condition() {
    let placed = |existing, new_claims, failed| Placed {
        existing,
        new_claims,
        failed,
    };
    // True/FitsExistingCapacity when all pods fit.
    let c = provisioning_condition(true, Some(3), Some(&placed(3, 0, 0))).unwrap();
    assert_eq!((c.0, c.1), (true, REASON_FITS_EXISTING_CAPACITY));
    // False/RequiresNewCapacity when new nodes are needed.
    let c = provisioning_condition(true, Some(3), Some(&placed(1, 2, 0))).unwrap();
    assert_eq!((c.0, c.1), (false, REASON_REQUIRES_NEW_CAPACITY));
    assert_eq!(c.2, "2/3 virtual pods required new capacity, 0 failed");
    let c = provisioning_condition(true, Some(3), Some(&placed(2, 0, 1))).unwrap();
    assert_eq!(c.1, REASON_REQUIRES_NEW_CAPACITY);
    // False/NotReadyForProvisioning when the buffer is not ready.
    let c = provisioning_condition(false, Some(3), None).unwrap();
    assert_eq!((c.0, c.1), (false, REASON_NOT_READY_FOR_PROVISIONING));
    // False/BufferEmpty when replicas is zero.
    let c = provisioning_condition(true, Some(0), None).unwrap();
    assert_eq!((c.0, c.1), (false, REASON_BUFFER_EMPTY));
    // Nothing when ready but no results observed.
    assert_eq!(provisioning_condition(true, Some(3), None), None);
}
