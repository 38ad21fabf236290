//! Reading a large cluster snapshot, as `dovetail snapshot` writes it: a
//! `v1/List` of N running pods on N/50 nodes, in YAML and in JSON.
//!
//! `cargo bench --bench snapshot -- [--pods N] [--write DIR]`
//!
//! - `--write DIR`: writes `DIR/snapshot-N.yaml` and `DIR/snapshot-N.json`
//!   (generated here, never committed) and `DIR/one-pod.yaml`, then exits;
//!   time a whole `dovetail plan --snapshot` on them with an external timer
//!   such as `/usr/bin/time -v` (BENCHMARKS.md has the command).
//! - otherwise: generates them in a temporary directory and reads each
//!   once in this process, printing the time and the objects read.
//!
//! The pods are what a Deployment's pods look like in `kubectl get -o yaml`
//! without managedFields (which `dovetail snapshot` strips): labels,
//! annotations, an owner, a container with env, ports, probes, resources
//! and a projected service-account volume, tolerations, and status.

use std::path::Path;
use std::time::Instant;

use serde_json::{Value, json};

fn pod(i: usize) -> Value {
    let node = i / 50;
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("web-{}-{i}", i / 1000),
            "namespace": format!("team-{}", i % 20),
            "uid": format!("6f1c2a4e-0000-4000-8000-{i:012}"),
            "resourceVersion": format!("{}", 1000 + i),
            "creationTimestamp": "2026-01-05T00:00:00Z",
            "generateName": format!("web-{}-7d9f8c6b5-", i / 1000),
            "labels": {"app": format!("web-{}", i / 1000), "pod-template-hash": "7d9f8c6b5", "tier": "frontend"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z", "prometheus.io/scrape": "true"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("web-{}-7d9f8c6b5", i / 1000), "uid": "0b3e6f1c-0000-4000-8000-000000000000", "controller": true, "blockOwnerDeletion": true}]
        },
        "spec": {
            "nodeName": format!("ip-10-0-{}-{}.ec2.internal", node / 250, node % 250),
            "schedulerName": "default-scheduler",
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "containers": [{
                "name": "web",
                "image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/web:1.4.2",
                "imagePullPolicy": "IfNotPresent",
                "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                "env": [
                    {"name": "MODE", "value": "production"},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}
                ],
                "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "512Mi"}},
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"}, "periodSeconds": 10, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
                "volumeMounts": [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": "kube-api-access", "readOnly": true}],
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File"
            }],
            "tolerations": [
                {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": 300},
                {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable", "operator": "Exists", "tolerationSeconds": 300}
            ],
            "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}
            ]}}]
        },
        "status": {
            "phase": "Running",
            "hostIP": format!("10.0.{}.{}", node / 250, node % 250),
            "podIP": format!("10.1.{}.{}", i / 250 % 250, i % 250),
            "qosClass": "Burstable",
            "startTime": "2026-01-05T00:00:01Z",
            "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-01-05T00:00:01Z"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-05T00:01:00Z"},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": "2026-01-05T00:01:00Z"},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-05T00:00:01Z"}
            ],
            "containerStatuses": [{"name": "web", "ready": true, "restartCount": 0, "started": true,
                "image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/web:1.4.2",
                "imageID": "123456789012.dkr.ecr.us-east-1.amazonaws.com/web@sha256:0000",
                "containerID": format!("containerd://{i:064}"),
                "state": {"running": {"startedAt": "2026-01-05T00:00:30Z"}}}]
        }
    })
}

fn node(n: usize) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": format!("ip-10-0-{}-{}.ec2.internal", n / 250, n % 250),
            "labels": {
                "karpenter.sh/nodepool": "general",
                "karpenter.sh/initialized": "true",
                "karpenter.sh/capacity-type": "on-demand",
                "node.kubernetes.io/instance-type": "m7i.8xlarge",
                "topology.kubernetes.io/zone": format!("us-east-1{}", ["a", "b", "c"][n % 3]),
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux"
            }
        },
        "spec": {"providerID": format!("aws:///us-east-1a/i-{n:017x}")},
        "status": {
            "capacity": {"cpu": "32", "memory": "128Gi", "pods": "234", "ephemeral-storage": "20Gi"},
            "allocatable": {"cpu": "31850m", "memory": "124Gi", "pods": "234", "ephemeral-storage": "18Gi"}
        }
    })
}

/// The snapshot as `dovetail snapshot` writes it: YAML and JSON.
fn snapshot(pods: usize) -> (String, String) {
    let mut items: Vec<Value> = (0..pods.div_ceil(50)).map(node).collect();
    items.extend((0..pods).map(pod));
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    let yaml = dovetail::config::diff::normalise::to_yaml(&list);
    let json = serde_json::to_string_pretty(&list).expect("json") + "\n";
    (yaml, json)
}

fn write(dir: &Path, pods: usize) -> [std::path::PathBuf; 2] {
    let (yaml, json) = snapshot(pods);
    let y = dir.join(format!("snapshot-{pods}.yaml"));
    let j = dir.join(format!("snapshot-{pods}.json"));
    std::fs::write(&y, yaml).expect("write the YAML snapshot");
    std::fs::write(&j, json).expect("write the JSON snapshot");
    std::fs::write(
        dir.join("one-pod.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: pending, namespace: default}\nspec:\n  containers:\n  - name: c\n    resources: {requests: {cpu: '1', memory: 1Gi}}\n",
    )
    .expect("write the pod");
    [y, j]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let pods: usize = value("--pods").map_or(100_000, |p| p.parse().expect("--pods N"));
    if let Some(dir) = value("--write") {
        for f in write(Path::new(&dir), pods) {
            let size = std::fs::metadata(&f).map(|m| m.len()).unwrap_or(0);
            println!("{} ({} MB)", f.display(), size / 1_000_000);
        }
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    for f in write(dir.path(), pods) {
        let start = Instant::now();
        let s = dovetail::snapshot::read_snapshot(&f).expect("read the snapshot");
        println!(
            "{}: {} pods, {} nodes in {:.2} s",
            f.file_name().unwrap_or_default().to_string_lossy(),
            s.pods.len(),
            s.nodes.len(),
            start.elapsed().as_secs_f64()
        );
    }
}
