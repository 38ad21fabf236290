//! What the in-cluster caches keep of the objects they hold in the largest
//! numbers: pods and nodes lose the parts the controller never reads before
//! they are stored, so a cluster of 100,000 pods fits the controller's
//! memory budget (`BENCHMARKS.md`, the footprint benchmark).
//!
//! Pods are watched as [`SlimPod`]s, which have only the fields the
//! controller reads (`api::pod`); of those, [`pod`] drops what it does not
//! need. Everything the scheduling core, the drain and the disruption
//! logic read is kept: a test converts a pod with every such field with
//! and without slimming and compares the results.
//! [`super::KubeCluster::watch_with`] applies these as the watch's
//! transform.

use k8s_openapi::api::core::v1::{Node, NodeStatus};

use crate::api::SlimPod;
pub use crate::api::pod::slim_metadata as metadata;

/// A pod as the controller reads it: [`SlimPod::slim`]. The pods are
/// watched as [`SlimPod`]s, which keep only the fields the controller
/// reads; this drops, of those, managedFields, `generateName`, the
/// annotations the controller never reads, the conditions other than
/// `Ready` and an unscheduled pod's `PodScheduled`, ports without a host
/// port and volumes that claim no storage, and shares the fields of the
/// pod's template with its other pods.
pub fn pod(p: &mut SlimPod) {
    p.slim();
}

/// A node as the controller reads it: metadata without managedFields and
/// the last-applied annotation; of the status, capacity, allocatable,
/// conditions and phase (the images it holds, its addresses, volumes,
/// system info and daemon endpoints go).
pub fn node(n: &mut Node) {
    metadata(&mut n.metadata);
    if let Some(status) = n.status.take() {
        n.status = Some(NodeStatus {
            capacity: status.capacity,
            allocatable: status.allocatable,
            conditions: status.conditions,
            phase: status.phase,
            ..NodeStatus::default()
        });
    }
}

/// Any other kind: metadata only.
pub fn other<K: kube::Resource>(obj: &mut K) {
    metadata(obj.meta_mut());
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    use super::*;
    use crate::api::pod::{LAST_APPLIED, read_on_pods};
    use crate::api::shared::Shared;
    use crate::api::{SlimPodSpec, SlimPodStatus};
    use crate::scheduling::pod::{VolumeIndex, is_provisionable, pod_requests, pod_spec};

    fn full_pod_json() -> serde_json::Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "web-1",
                "namespace": "shop",
                "uid": "u-1",
                "labels": {"app": "web"},
                "annotations": {
                    "karpenter.sh/do-not-disrupt": "true",
                    "controller.kubernetes.io/pod-deletion-cost": "100",
                    "kubernetes.io/config.mirror": "abc",
                    "prometheus.io/scrape": "true",
                    "kubectl.kubernetes.io/restartedAt": "2026-01-05T00:00:00Z",
                    LAST_APPLIED: "{\"a\": \"very long copy\"}",
                },
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs", "controller": true}],
                "managedFields": [{"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
            },
            "spec": {
                "containers": [{
                    "name": "app",
                    "image": "registry.example/app:1",
                    "command": ["/app"],
                    "args": ["--serve"],
                    "env": [{"name": "A", "value": "1"}],
                    "ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 9090, "name": "metrics"}],
                    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": "1"}},
                    "livenessProbe": {"httpGet": {"path": "/", "port": 80}},
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }, {
                    "name": "proxy",
                    "image": "proxy:1",
                    "resources": {"requests": {"cpu": "50m"}, "limits": {"memory": "64Mi"}},
                }],
                "initContainers": [
                    {"name": "sidecar", "image": "s:1", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
                    {"name": "init", "image": "i:1", "resources": {"requests": {"cpu": "2"}}},
                ],
                "volumes": [
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-1"}},
                    {"name": "config", "configMap": {"name": "web"}},
                    {"name": "scratch", "emptyDir": {}},
                ],
                "nodeSelector": {"kubernetes.io/arch": "arm64"},
                "tolerations": [{"key": "gpu", "operator": "Exists"}],
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}}}
                ]}},
                "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}],
                "priorityClassName": "system-cluster-critical",
                "priority": 2000000000,
                "overhead": {"cpu": "10m"},
                "terminationGracePeriodSeconds": 30,
                "schedulerName": "default-scheduler",
                "securityContext": {"fsGroup": 1000},
            },
            "status": {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"},
                    {"type": "Initialized", "status": "True"},
                    {"type": "Ready", "status": "False"},
                    {"type": "ContainersReady", "status": "False"},
                ],
                "startTime": "2026-01-05T00:00:00Z",
                "podIP": "10.0.0.1",
                "hostIP": "10.0.1.1",
                "qosClass": "Burstable",
                "containerStatuses": [{"name": "app", "image": "app", "imageID": "sha", "ready": false, "restartCount": 3}],
            },
        })
    }

    /// Every field a `SlimPod` has, as the pod has it: nothing dropped.
    fn whole_view(p: &Pod) -> SlimPod {
        SlimPod {
            metadata: p.metadata.clone(),
            spec: p.spec.as_ref().map(SlimPodSpec::from),
            status: p.status.as_ref().map(SlimPodStatus::from),
        }
    }

    #[test]
    fn a_pod_read_slim_is_the_projection_of_the_whole_pod() {
        let full: Pod = serde_json::from_value(full_pod_json()).expect("a valid pod");
        let mut read: SlimPod = serde_json::from_value(full_pod_json()).expect("reads");
        pod(&mut read);
        assert_eq!(
            read,
            SlimPod::from(&full),
            "the watch's reading and the projection"
        );
        // And it serialises back as a Pod that k8s-openapi reads.
        let json = serde_json::to_value(&read).unwrap();
        assert_eq!(
            (json["apiVersion"].as_str(), json["kind"].as_str()),
            (Some("v1"), Some("Pod"))
        );
        let back: Pod = serde_json::from_value(json).expect("a Pod");
        assert_eq!(SlimPod::from(&back), read);
    }

    #[test]
    fn pods_of_one_template_hold_its_fields_once() {
        let read = |name: &str, node: &str| {
            let mut json = full_pod_json();
            json["metadata"]["name"] = json!(name);
            json["spec"]["nodeName"] = json!(node);
            let mut pod: SlimPod = serde_json::from_value(json).expect("a pod");
            super::pod(&mut pod);
            pod
        };
        let (a, b) = (read("web-1", "node-a"), read("web-2", "node-b"));
        let (a, b) = (a.spec.expect("spec"), b.spec.expect("spec"));
        assert!(Shared::ptr_eq(&a.containers, &b.containers));
        let tolerations = |s: &SlimPodSpec| s.tolerations.clone().expect("tolerations");
        assert!(Shared::ptr_eq(&tolerations(&a), &tolerations(&b)));
        let mut other = full_pod_json();
        other["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!("3");
        let mut other: SlimPod = serde_json::from_value(other).expect("a pod");
        super::pod(&mut other);
        let other = other.spec.expect("spec");
        assert!(!Shared::ptr_eq(&a.containers, &other.containers));
        assert_ne!(a.containers, other.containers);
        assert_eq!(a.node_name.as_deref(), Some("node-a"));
        assert_eq!(b.node_name.as_deref(), Some("node-b"));
    }

    #[test]
    fn a_scheduled_pod_keeps_its_ready_condition_only() {
        let mut json = full_pod_json();
        json["status"]["conditions"][0] = json!({"type": "PodScheduled", "status": "True"});
        json["status"]["conditions"][2] = json!({"type": "Ready", "status": "True"});
        json["metadata"]["generateName"] = json!("web-");
        let mut running: SlimPod = serde_json::from_value(json).expect("a pod");
        super::pod(&mut running);
        let conditions = running
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_deref());
        let kept: Vec<(&str, &str)> = conditions
            .into_iter()
            .flatten()
            .map(|c| (c.type_.as_str(), c.status.as_str()))
            .collect();
        assert_eq!(kept, [("Ready", "True")]);
        assert!(running.is_ready());
        assert!(!is_provisionable(&running));
        assert!(running.metadata.generate_name.is_none());
    }

    #[test]
    fn a_slim_pod_keeps_what_the_controller_reads() {
        let full: Pod = serde_json::from_value(full_pod_json()).expect("a valid pod");
        let whole = whole_view(&full);
        let slim = SlimPod::from(&full);
        let volumes = VolumeIndex::default();
        assert_eq!(
            pod_spec(&whole, &volumes, 0).expect("converts"),
            pod_spec(&slim, &volumes, 0).expect("converts")
        );
        assert_eq!(pod_requests(&whole), pod_requests(&slim));
        assert_eq!(is_provisionable(&whole), is_provisionable(&slim));
        assert_eq!(full.metadata.labels, slim.metadata.labels);
        assert_eq!(
            slim.metadata
                .annotations
                .iter()
                .flatten()
                .map(|(k, _)| k.as_str())
                .collect::<Vec<_>>(),
            [
                "controller.kubernetes.io/pod-deletion-cost",
                "karpenter.sh/do-not-disrupt",
                "kubernetes.io/config.mirror",
            ],
            "only the annotations the controller reads are left"
        );
        assert_eq!(
            slim.metadata.owner_references,
            full.metadata.owner_references
        );
        assert!(slim.metadata.managed_fields.is_none());
        let spec = slim.spec.as_ref().expect("spec");
        assert_eq!(spec.containers.len(), 2);
        let ports: Vec<i32> = spec.containers[0]
            .ports
            .iter()
            .flatten()
            .map(|p| p.container_port)
            .collect();
        assert_eq!(ports, [80], "only the port that takes a host port");
        assert!(spec.containers[1].ports.is_none());
        let volumes: Vec<&str> = spec
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(volumes, ["data"]);
        assert_eq!(spec.priority, Some(2_000_000_000));
        assert_eq!(spec.termination_grace_period_seconds, Some(30));
        let status = slim.status.as_ref().expect("status");
        assert_eq!(status.phase.as_deref(), Some("Pending"));
        assert!(status.start_time.is_some());
        let kept: Vec<&str> = status
            .conditions
            .iter()
            .flatten()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(kept, ["PodScheduled", "Ready"]);
        assert_eq!(
            status.conditions.as_ref().map(Vec::capacity),
            Some(2),
            "no spare capacity is kept"
        );
        // What is kept is much smaller, and much smaller in memory: no
        // inline k8s-openapi Container.
        let (slim_json, full_json) = (
            serde_json::to_vec(&slim).unwrap().len(),
            serde_json::to_vec(&full).unwrap().len(),
        );
        assert!(slim_json * 3 < full_json * 2, "{slim_json} vs {full_json}");
        assert!(std::mem::size_of::<SlimPod>() * 2 < std::mem::size_of::<Pod>());
        assert!(
            std::mem::size_of::<crate::api::SlimContainer>() * 10
                < std::mem::size_of::<k8s_openapi::api::core::v1::Container>()
        );
    }

    #[test]
    fn pod_annotations_are_kept_by_domain_or_exact_key() {
        for key in [
            "karpenter.sh/do-not-disrupt",
            "dovetail.dev/replaces",
            "simulate.dovetail.dev/duration",
            "controller.kubernetes.io/pod-deletion-cost",
            "kubernetes.io/config.mirror",
        ] {
            assert!(read_on_pods(key), "{key}");
        }
        for key in [
            "notkarpenter.sh/x",
            "controller.kubernetes.io/other",
            "prometheus.io/scrape",
            "karpenter.sh",
        ] {
            assert!(!read_on_pods(key), "{key}");
        }
    }

    #[test]
    fn a_slim_node_keeps_capacity_conditions_and_labels() {
        let full: Node = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "n1",
                "labels": {"karpenter.sh/nodepool": "general"},
                "managedFields": [{"manager": "kubelet", "operation": "Update"}],
            },
            "spec": {"providerID": "aws:///us-east-1a/i-1", "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {
                "capacity": {"cpu": "4"},
                "allocatable": {"cpu": "3920m"},
                "conditions": [{"type": "Ready", "status": "True"}],
                "images": [{"names": ["registry.example/app:1"], "sizeBytes": 1000}],
                "volumesInUse": ["kubernetes.io/csi/ebs^vol-1"],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            },
        }))
        .expect("a valid node");
        let mut slim = full.clone();
        node(&mut slim);
        assert_eq!(slim.spec, full.spec);
        assert_eq!(slim.metadata.labels, full.metadata.labels);
        assert!(slim.metadata.managed_fields.is_none());
        let (s, f) = (slim.status.unwrap(), full.status.unwrap());
        assert_eq!(s.capacity, f.capacity);
        assert_eq!(s.allocatable, f.allocatable);
        assert_eq!(s.conditions, f.conditions);
        assert!(s.images.is_none() && s.volumes_in_use.is_none() && s.daemon_endpoints.is_none());
    }
}
