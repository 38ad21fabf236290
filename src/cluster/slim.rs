//! What the in-cluster caches keep of the objects they hold in the largest
//! numbers: pods and nodes lose the parts the controller never reads before
//! they are stored, so a cluster of 100,000 pods fits the controller's
//! memory budget (`BENCHMARKS.md`, the footprint benchmark).
//!
//! Everything the scheduling core, the drain and the disruption logic read
//! is kept; a test converts every pod of the fixtures with and without
//! slimming and compares the results, so a new read of a dropped field
//! fails it. [`super::KubeCluster::watch_with`] applies these as the
//! watch's transform.

use k8s_openapi::api::core::v1::{Container, Node, NodeStatus, Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// kubectl's copy of the whole object as last applied: often the largest
/// annotation, never read.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops managedFields and kubectl's last-applied copy from metadata.
pub fn metadata(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
}

/// A pod as the controller reads it:
/// - metadata without managedFields and the last-applied annotation;
/// - the spec without what only the kubelet reads: a container keeps its
///   name, resources, ports and restart policy (images, commands,
///   environment, probes, mounts and security settings go), and only the
///   volumes that claim persistent storage are kept (volume topology);
/// - of the annotations, only those the controller reads ([`POD_ANNOTATIONS`]);
/// - of the status, only the phase, the `PodScheduled` and `Ready`
///   conditions, the start time and the nominated node.
///
/// Lists are shrunk to their length: a deserialised list keeps the spare
/// capacity it grew with, which 100,000 pods pay for.
pub fn pod(p: &mut Pod) {
    metadata(&mut p.metadata);
    if let Some(annotations) = p.metadata.annotations.as_mut() {
        annotations.retain(|k, _| read_on_pods(k));
        if annotations.is_empty() {
            p.metadata.annotations = None;
        }
    }
    if let Some(owners) = p.metadata.owner_references.as_mut() {
        owners.shrink_to_fit();
    }
    if let Some(spec) = p.spec.as_mut() {
        for c in spec.containers.iter_mut() {
            container(c);
        }
        for c in spec.init_containers.iter_mut().flatten() {
            container(c);
        }
        // Ephemeral debug containers request no resources and never count.
        spec.ephemeral_containers = None;
        if let Some(volumes) = spec.volumes.as_mut() {
            volumes.retain(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some());
            volumes.shrink_to_fit();
            if volumes.is_empty() {
                spec.volumes = None;
            }
        }
        if let Some(t) = spec.tolerations.as_mut() {
            t.shrink_to_fit();
        }
        if let Some(t) = spec.topology_spread_constraints.as_mut() {
            t.shrink_to_fit();
        }
        spec.containers.shrink_to_fit();
    }
    if let Some(status) = p.status.take() {
        let conditions = status.conditions.map(|mut cs| {
            cs.retain(|c| POD_CONDITIONS.contains(&c.type_.as_str()));
            cs.shrink_to_fit();
            cs
        });
        p.status = Some(PodStatus {
            phase: status.phase,
            conditions,
            start_time: status.start_time,
            nominated_node_name: status.nominated_node_name,
            ..PodStatus::default()
        });
    }
}

/// The pod conditions the controller reads: `PodScheduled` (unschedulable
/// pods) and `Ready` (PodDisruptionBudgets' healthy pods).
const POD_CONDITIONS: [&str; 2] = ["PodScheduled", "Ready"];

/// The pod annotations the controller reads: Karpenter's
/// (`karpenter.sh/do-not-disrupt`), dovetail's own, and the deletion cost
/// that weighs a pod's eviction. The others (tooling's, scrape settings)
/// are dropped.
pub const POD_ANNOTATIONS: [&str; 4] = [
    "karpenter.sh/",
    "karpenter.k8s.aws/",
    "dovetail.dev/",
    "controller.kubernetes.io/pod-deletion-cost",
];

/// Whether the controller reads a pod annotation (a subdomain of an
/// entry's domain counts: `simulate.dovetail.dev/`).
fn read_on_pods(key: &str) -> bool {
    let domain = key.split_once('/').map_or("", |(d, _)| d);
    POD_ANNOTATIONS.iter().any(|k| match k.strip_suffix('/') {
        Some(d) => domain == d || domain.strip_suffix(d).is_some_and(|s| s.ends_with('.')),
        None => key == *k,
    })
}

fn container(c: &mut Container) {
    *c = Container {
        name: std::mem::take(&mut c.name),
        resources: c.resources.take(),
        ports: c.ports.take(),
        restart_policy: c.restart_policy.take(),
        ..Container::default()
    };
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
    use serde_json::json;

    use super::*;
    use crate::scheduling::pod::{VolumeIndex, is_provisionable, pod_requests, pod_spec};

    fn full_pod() -> Pod {
        serde_json::from_value(json!({
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
                    "ports": [{"containerPort": 80, "hostPort": 8080}],
                    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": "1"}},
                    "livenessProbe": {"httpGet": {"path": "/", "port": 80}},
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
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
        }))
        .expect("a valid pod")
    }

    #[test]
    fn a_slim_pod_keeps_what_the_controller_reads() {
        let full = full_pod();
        let mut slim = full.clone();
        pod(&mut slim);
        let volumes = VolumeIndex::default();
        assert_eq!(
            pod_spec(&full, &volumes, 0).expect("converts"),
            pod_spec(&slim, &volumes, 0).expect("converts")
        );
        assert_eq!(pod_requests(&full), pod_requests(&slim));
        assert_eq!(is_provisionable(&full), is_provisionable(&slim));
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
                "karpenter.sh/do-not-disrupt"
            ],
            "only the annotations the controller reads are left"
        );
        assert_eq!(
            slim.metadata.owner_references,
            full.metadata.owner_references
        );
        assert!(slim.metadata.managed_fields.is_none());
        let spec = slim.spec.as_ref().expect("spec");
        let c = &spec.containers[0];
        assert!(c.image.is_none() && c.env.is_none() && c.liveness_probe.is_none());
        assert_eq!(c.ports.as_ref().map(Vec::len), Some(1));
        let volumes: Vec<&str> = spec
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(volumes, ["data"]);
        let status = slim.status.as_ref().expect("status");
        assert!(status.pod_ip.is_none() && status.container_statuses.is_none());
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
        // What is kept is much smaller.
        let size = |p: &Pod| serde_json::to_vec(p).unwrap().len();
        assert!(
            size(&slim) * 4 < size(&full) * 3,
            "{} vs {}",
            size(&slim),
            size(&full)
        );
    }

    #[test]
    fn pod_annotations_are_kept_by_domain_or_exact_key() {
        for key in [
            "karpenter.sh/do-not-disrupt",
            "dovetail.dev/replaces",
            "simulate.dovetail.dev/duration",
            "controller.kubernetes.io/pod-deletion-cost",
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
