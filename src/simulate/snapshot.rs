//! The simulated cluster as a snapshot (`simulate --snapshot-out`): the
//! kinds `dovetail snapshot` lists from a live cluster, in its order and
//! its format (a `v1/List` of objects as `kubectl get -o json` prints them,
//! without `managedFields`), so a forecast or a plan can start from any
//! simulated cluster as from a real one.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::{Value, json};

use crate::api::{EC2NodeClass, NodeClaim, NodePool};
use crate::cluster::{Object, Selector};
use crate::world::MemoryCluster;

/// Every object of `K`, as JSON with its `apiVersion` and `kind`.
fn objects<K: Object>(cluster: &MemoryCluster, out: &mut Vec<Value>) {
    for o in cluster.list::<K>(None, &Selector::everything()).items {
        let Ok(mut value) = serde_json::to_value(o.as_ref()) else {
            continue;
        };
        if let Some(object) = value.as_object_mut() {
            object.insert("apiVersion".into(), K::api_version(&()).into());
            object.insert("kind".into(), K::kind(&()).into());
            if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("managedFields");
            }
        }
        out.push(value);
    }
}

/// The kinds written, in order: those of `dovetail snapshot`.
pub const KINDS: [&str; 14] = [
    "Node",
    "Pod",
    "NodeClaim",
    "NodePool",
    "EC2NodeClass",
    "DaemonSet",
    "PodDisruptionBudget",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "StorageClass",
    "Deployment",
    "ReplicaSet",
    "StatefulSet",
    "Job",
];

/// The cluster as a snapshot: a `v1/List` of every object of [`KINDS`].
pub fn snapshot(cluster: &MemoryCluster) -> Value {
    let mut items = Vec::new();
    objects::<Node>(cluster, &mut items);
    objects::<Pod>(cluster, &mut items);
    objects::<NodeClaim>(cluster, &mut items);
    objects::<NodePool>(cluster, &mut items);
    objects::<EC2NodeClass>(cluster, &mut items);
    objects::<DaemonSet>(cluster, &mut items);
    objects::<PodDisruptionBudget>(cluster, &mut items);
    objects::<PersistentVolume>(cluster, &mut items);
    objects::<PersistentVolumeClaim>(cluster, &mut items);
    objects::<StorageClass>(cluster, &mut items);
    objects::<Deployment>(cluster, &mut items);
    objects::<ReplicaSet>(cluster, &mut items);
    objects::<StatefulSet>(cluster, &mut items);
    objects::<Job>(cluster, &mut items);
    json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items})
}
