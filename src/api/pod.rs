//! [`SlimPod`]: a Pod as the controller reads it.
//!
//! The controller keeps every pod of the cluster in memory, and
//! k8s-openapi's `Pod` is built for the whole API: a `Pod` is 2,464 bytes
//! inline and each `Container` 2,336, however few of their fields are
//! set, and every quantity map is a B-tree node of its own. A `SlimPod`
//! has the same shape and field names, but only the fields the scheduling
//! core, the provisioner, drains and disruption read, so the code that
//! reads a pod reads either the same way. A stored pod costs about a third
//! of the memory (`BENCHMARKS.md`, the footprint benchmark).
//!
//! It deserialises straight from the JSON of a Pod: the API server's
//! fields it does not have are skipped as they are read (images,
//! environment, probes, most of the status). [`SlimPod::from`] projects a
//! k8s-openapi `Pod`; both go through [`SlimPod::slim`], which also drops
//! managedFields, `generateName`, the annotations the controller never
//! reads, the conditions other than `Ready` and an unscheduled pod's
//! `PodScheduled`, container ports without a host port and volumes that
//! claim no persistent storage. The fields a pod's template gives it are
//! [`Shared`] with the other pods of that template: about half of a
//! stored pod's memory (`BENCHMARKS.md`, the footprint benchmark).
//!
//! It is a kind of its own for kube-rs (`v1` `pods`), so the in-cluster
//! cache watches pods as `SlimPod`s; the in-memory cluster projects its
//! full pods (`world::MemoryCluster` answers `Cluster::list::<SlimPod>`).
//!
//! Every reader of pods outside the simulation's stand-in kubelet and
//! kube-scheduler takes a `SlimPod`: the in-cluster cache stores nothing else,
//! and the pods of snapshot and `plan` files are read into it.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerPort, EphemeralVolumeSource, PersistentVolumeClaimVolumeSource,
    Pod, PodCondition, PodSpec, PodStatus, Toleration, TopologySpreadConstraint, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::shared::Shared;

/// kubectl's copy of the whole object as last applied: often the largest
/// annotation, never read.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The pod conditions the controller reads: `PodScheduled` (unschedulable
/// pods) and `Ready` (PodDisruptionBudgets' healthy pods).
pub const POD_CONDITIONS: [&str; 2] = ["PodScheduled", "Ready"];

/// Whether the controller reads a pod condition: `Ready`, and
/// `PodScheduled` unless it is `True` (a scheduled pod's says nothing the
/// node name does not; most pods are scheduled, so it is dropped).
fn kept_condition(c: &PodCondition) -> bool {
    match c.type_.as_str() {
        "PodScheduled" => c.status != "True",
        t => POD_CONDITIONS.contains(&t),
    }
}

/// The pod annotations the controller reads: Karpenter's
/// (`karpenter.sh/do-not-disrupt`), dovetail's own, the deletion cost that
/// weighs a pod's eviction, and the mirror-pod marker. The others
/// (tooling's, scrape settings) are dropped.
pub const POD_ANNOTATIONS: [&str; 5] = [
    "karpenter.sh/",
    "karpenter.k8s.aws/",
    "dovetail.dev/",
    "controller.kubernetes.io/pod-deletion-cost",
    "kubernetes.io/config.mirror",
];

/// Whether the controller reads a pod annotation (a subdomain of an
/// entry's domain counts: `simulate.dovetail.dev/`).
pub fn read_on_pods(key: &str) -> bool {
    let domain = key.split_once('/').map_or("", |(d, _)| d);
    POD_ANNOTATIONS.iter().any(|k| match k.strip_suffix('/') {
        Some(d) => domain == d || domain.strip_suffix(d).is_some_and(|s| s.ends_with('.')),
        None => key == *k,
    })
}

/// Drops managedFields and kubectl's last-applied copy from metadata.
pub fn slim_metadata(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
}

/// A pod with the fields the controller reads (see the module).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct SlimPod {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Option<SlimPodSpec>,
    #[serde(default)]
    pub status: Option<SlimPodStatus>,
}

/// The part of a `PodSpec` the controller reads.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimPodSpec {
    #[serde(default)]
    pub containers: Shared<Vec<SlimContainer>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_containers: Option<Shared<Vec<SlimContainer>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overhead: Option<BTreeMap<String, Quantity>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<Shared<BTreeMap<String, String>>>,
    /// Shared: most pods have none, and `Affinity` is 144 bytes inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Shared<Affinity>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Shared<Vec<Toleration>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_spread_constraints: Option<Shared<Vec<TopologySpreadConstraint>>>,
    /// Only the volumes that claim persistent storage (volume topology).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Vec<SlimVolume>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
}

/// A container's name, resources, host ports and restart policy (which
/// makes an init container a sidecar).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimContainer {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<SlimResources>,
    /// Only the ports that take a port of the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<ContainerPort>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
}

/// A resource name and its quantity, sorted by name: a container has a
/// few, and a `BTreeMap` would cost a 540-byte node for each map.
pub type QuantityList = Vec<(String, Quantity)>;

/// A container's requests and limits.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SlimResources {
    #[serde(
        default,
        deserialize_with = "quantity_list",
        serialize_with = "quantity_map",
        skip_serializing_if = "Option::is_none"
    )]
    pub limits: Option<QuantityList>,
    #[serde(
        default,
        deserialize_with = "quantity_list",
        serialize_with = "quantity_map",
        skip_serializing_if = "Option::is_none"
    )]
    pub requests: Option<QuantityList>,
}

/// A volume that claims persistent storage.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimVolume {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<PersistentVolumeClaimVolumeSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ephemeral: Option<Box<EphemeralVolumeSource>>,
}

/// The phase, the `Ready` and an unscheduled pod's `PodScheduled`
/// conditions, the start time and the nominated node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimPodStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<PodCondition>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nominated_node_name: Option<String>,
}

fn quantity_list<'de, D: Deserializer<'de>>(d: D) -> Result<Option<QuantityList>, D::Error> {
    // Through a map: sorted, and a repeated key keeps its last value, as
    // the API server's decoding does.
    let map: Option<BTreeMap<String, Quantity>> = Option::deserialize(d)?;
    Ok(map.map(|m| m.into_iter().collect()))
}

fn quantity_map<S: Serializer>(list: &Option<QuantityList>, s: S) -> Result<S::Ok, S::Error> {
    match list {
        Some(l) => s.collect_map(l.iter().map(|(k, v)| (k, v))),
        None => s.serialize_none(),
    }
}

impl Serialize for SlimPod {
    /// As a Pod: `apiVersion` and `kind` first.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Tagged<'a> {
            api_version: &'static str,
            kind: &'static str,
            metadata: &'a ObjectMeta,
            #[serde(skip_serializing_if = "Option::is_none")]
            spec: &'a Option<SlimPodSpec>,
            #[serde(skip_serializing_if = "Option::is_none")]
            status: &'a Option<SlimPodStatus>,
        }
        Tagged {
            api_version: "v1",
            kind: "Pod",
            metadata: &self.metadata,
            spec: &self.spec,
            status: &self.status,
        }
        .serialize(s)
    }
}

impl kube::Resource for SlimPod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("Pod")
    }

    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }

    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }

    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("pods")
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Whether a pod in this phase is done (`Succeeded` or `Failed`): it
/// holds no resources, and is never scheduled, drained or evicted again.
/// The one definition of "finished" for pods read whole or slim.
pub fn is_finished_phase(phase: Option<&str>) -> bool {
    matches!(phase, Some("Succeeded" | "Failed"))
}

/// Whether a pod is a DaemonSet's, as the reference's `IsOwnedByDaemonSet`
/// has it: an owner reference of kind `DaemonSet` in `apps/v1` (another
/// group's DaemonSet kind, such as OpenKruise's, is not one).
pub fn is_daemon_owned(meta: &ObjectMeta) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet" && o.api_version == "apps/v1")
}

/// Whether a pod is a static pod its node owns, as the reference's
/// `IsOwnedByNode`: an owner reference of kind `Node` in `v1`.
pub fn is_node_owned(meta: &ObjectMeta) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "Node" && o.api_version == "v1")
}

/// Whether a Pod read whole is finished (`is_finished_phase`).
pub fn is_finished(pod: &Pod) -> bool {
    is_finished_phase(pod.status.as_ref().and_then(|s| s.phase.as_deref()))
}

/// Whether pod conditions hold `Ready=True`.
pub fn is_ready_in(conditions: Option<&[PodCondition]>) -> bool {
    ready_condition(conditions).is_some()
}

/// The `Ready=True` condition among pod conditions, if it holds.
pub fn ready_condition(conditions: Option<&[PodCondition]>) -> Option<&PodCondition> {
    conditions?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")
}

/// Whether a Pod read whole is `Ready=True`.
pub fn is_ready(pod: &Pod) -> bool {
    is_ready_in(pod.status.as_ref().and_then(|s| s.conditions.as_deref()))
}

impl SlimPod {
    /// Whether the pod is a DaemonSet's (`is_daemon_owned`).
    pub fn is_daemon(&self) -> bool {
        is_daemon_owned(&self.metadata)
    }

    /// Whether the pod is finished (`is_finished_phase`).
    pub fn is_finished(&self) -> bool {
        is_finished_phase(self.status.as_ref().and_then(|s| s.phase.as_deref()))
    }

    /// Whether the pod is `Ready=True` (`is_ready_in`).
    pub fn is_ready(&self) -> bool {
        is_ready_in(self.status.as_ref().and_then(|s| s.conditions.as_deref()))
    }

    /// Drops what the controller never reads from a pod read whole (see
    /// the module), and the spare capacity lists grew with while they were
    /// deserialised, which 100,000 pods pay for.
    pub fn slim(&mut self) {
        slim_metadata(&mut self.metadata);
        self.metadata.generate_name = None;
        if let Some(annotations) = self.metadata.annotations.as_mut() {
            annotations.retain(|k, _| read_on_pods(k));
            if annotations.is_empty() {
                self.metadata.annotations = None;
            }
        }
        if let Some(owners) = self.metadata.owner_references.as_mut() {
            owners.shrink_to_fit();
        }
        if let Some(spec) = self.spec.as_mut() {
            let containers = &mut *spec.containers;
            containers.iter_mut().for_each(SlimContainer::slim);
            containers.shrink_to_fit();
            if let Some(init) = spec.init_containers.as_deref_mut() {
                init.iter_mut().for_each(SlimContainer::slim);
                init.shrink_to_fit();
            }
            if let Some(volumes) = spec.volumes.as_mut() {
                volumes.retain(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some());
                volumes.shrink_to_fit();
                if volumes.is_empty() {
                    spec.volumes = None;
                }
            }
            if let Some(t) = spec.tolerations.as_deref_mut() {
                t.shrink_to_fit();
            }
            if let Some(t) = spec.topology_spread_constraints.as_deref_mut() {
                t.shrink_to_fit();
            }
            spec.intern();
        }
        if let Some(conditions) = self.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            conditions.retain(kept_condition);
            conditions.shrink_to_fit();
        }
    }

    /// `namespace/name`, the namespace `default` when unset.
    pub fn key(&self) -> String {
        format!(
            "{}/{}",
            self.metadata.namespace.as_deref().unwrap_or("default"),
            self.metadata.name.as_deref().unwrap_or_default()
        )
    }
}

impl SlimPodSpec {
    /// Shares the fields a pod's template gives it with the pods of the
    /// same template (`Shared::intern`): containers, init containers, node
    /// selector, affinity, tolerations and spread constraints.
    pub fn intern(&mut self) {
        self.containers.intern();
        if let Some(v) = self.init_containers.as_mut() {
            v.intern();
        }
        if let Some(v) = self.node_selector.as_mut() {
            v.intern();
        }
        if let Some(v) = self.affinity.as_mut() {
            v.intern();
        }
        if let Some(v) = self.tolerations.as_mut() {
            v.intern();
        }
        if let Some(v) = self.topology_spread_constraints.as_mut() {
            v.intern();
        }
    }
}

impl SlimContainer {
    fn slim(&mut self) {
        if let Some(ports) = self.ports.as_mut() {
            ports.retain(|p| p.host_port.is_some_and(|h| h > 0));
            ports.shrink_to_fit();
            if ports.is_empty() {
                self.ports = None;
            }
        }
        if let Some(r) = self.resources.as_mut() {
            for list in [&mut r.limits, &mut r.requests].into_iter().flatten() {
                list.shrink_to_fit();
            }
        }
    }
}

impl From<&Container> for SlimContainer {
    fn from(c: &Container) -> Self {
        let list = |m: &Option<BTreeMap<String, Quantity>>| {
            m.as_ref()
                .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        };
        SlimContainer {
            name: c.name.clone(),
            resources: c.resources.as_ref().map(|r| SlimResources {
                limits: list(&r.limits),
                requests: list(&r.requests),
            }),
            ports: c.ports.clone(),
            restart_policy: c.restart_policy.clone(),
        }
    }
}

impl From<&Volume> for SlimVolume {
    fn from(v: &Volume) -> Self {
        SlimVolume {
            name: v.name.clone(),
            persistent_volume_claim: v.persistent_volume_claim.clone(),
            ephemeral: v.ephemeral.clone().map(Box::new),
        }
    }
}

impl From<&PodSpec> for SlimPodSpec {
    /// The fields the controller reads, as they are (nothing dropped: see
    /// [`SlimPod::slim`]).
    fn from(s: &PodSpec) -> Self {
        SlimPodSpec {
            containers: Shared::new(s.containers.iter().map(SlimContainer::from).collect()),
            init_containers: s
                .init_containers
                .as_ref()
                .map(|cs| Shared::new(cs.iter().map(SlimContainer::from).collect())),
            overhead: s.overhead.clone(),
            node_name: s.node_name.clone(),
            node_selector: s.node_selector.clone().map(Shared::new),
            affinity: s.affinity.clone().map(Shared::new),
            tolerations: s.tolerations.clone().map(Shared::new),
            topology_spread_constraints: s.topology_spread_constraints.clone().map(Shared::new),
            volumes: s
                .volumes
                .as_ref()
                .map(|vs| vs.iter().map(SlimVolume::from).collect()),
            priority: s.priority,
            priority_class_name: s.priority_class_name.clone(),
            termination_grace_period_seconds: s.termination_grace_period_seconds,
        }
    }
}

impl From<&PodStatus> for SlimPodStatus {
    fn from(s: &PodStatus) -> Self {
        SlimPodStatus {
            phase: s.phase.clone(),
            conditions: s.conditions.clone(),
            start_time: s.start_time.clone(),
            nominated_node_name: s.nominated_node_name.clone(),
        }
    }
}

impl From<&Pod> for SlimPod {
    /// The pod as the controller keeps it ([`SlimPod::slim`]).
    fn from(p: &Pod) -> Self {
        let mut slim = SlimPod {
            metadata: p.metadata.clone(),
            spec: p.spec.as_ref().map(SlimPodSpec::from),
            status: p.status.as_ref().map(SlimPodStatus::from),
        };
        slim.slim();
        slim
    }
}
