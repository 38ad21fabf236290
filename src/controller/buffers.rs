//! CapacityBuffers under the `CapacityBuffer` feature gate, as Karpenter
//! v1.14.1's `capacitybuffer` controller and provisioner keep them
//! (the rules are [`crate::buffers`]'):
//! - at the start of each provisioning reconcile, when a buffer, a
//!   PodTemplate or a Deployment, StatefulSet or ReplicaSet changed, each
//!   buffer's template is resolved (`podTemplateRef` in its namespace, or
//!   `scalableRef` of group `apps`), its chunks computed, and its status
//!   written (`replicas`, `podTemplateRef`, `podTemplateGeneration`,
//!   `provisioningStrategy`, `ReadyForProvisioning`); a ready buffer's
//!   virtual pods are kept for the solves;
//! - every solve places them with the pending pods (never creating them:
//!   they are not pods of the cluster), after which each buffer's
//!   `Provisioning` condition says whether they fit on existing capacity,
//!   and the nodes holding some are remembered: emptiness leaves those
//!   alone, and consolidation's trials count their room as taken (a
//!   candidate's own virtual pods must find room elsewhere or on its
//!   replacement). They never nominate a node, never make consolidation
//!   wait as pending pods do, and get no pod Events.
//! - a planned virtual pod is solved for again 30 s later (the reference's
//!   buffer controller requeues every 30 s and triggers the provisioner),
//!   so a buffer whose room real pods took refills even when those pods
//!   were bound before the provisioner saw them pending.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{PodTemplate, PodTemplateSpec};

use super::Controller;
use crate::api::SlimPod;
use crate::api::capacitybuffer::{CapacityBuffer, LocalObjectRef};
use crate::buffers::{
    self, READY_FOR_PROVISIONING, REASON_POD_TEMPLATE_NOT_FOUND, REASON_RESOLUTION_FAILED,
    REASON_RESOLVED, REASON_SCALABLE_REF_NOT_FOUND,
};
use crate::cloud::CloudProvider;
use crate::cluster::{Cluster, ObjectKey};
use crate::scheduling::SolveResult;

/// How long a solve's placement of a virtual pod on ready capacity holds
/// before it is solved for again (the reference's buffer requeue).
pub const BUFFER_RESYNC: Duration = Duration::from_secs(30);

/// The buffers as last resolved, and where the last solve put their pods.
#[derive(Debug, Default)]
pub(super) struct BufferState {
    /// The revisions of the kinds a resolution reads, as of the last one.
    revisions: Option<[u64; 5]>,
    /// The virtual pods of the ready buffers.
    pub(super) pods: Vec<Arc<SlimPod>>,
    /// Virtual pod key → its buffer's `namespace/name`.
    pub(super) owners: BTreeMap<String, String>,
    /// Buffer `namespace/name` → (ready, `status.replicas`).
    ready: BTreeMap<String, (bool, Option<i32>)>,
    /// Node (or in-flight NodeClaim) → the virtual pods the last solve put
    /// on it.
    pub(super) on_nodes: BTreeMap<String, Vec<String>>,
}

/// What a buffer's references resolve to.
struct Resolved {
    template: PodTemplateSpec,
    /// The PodTemplate's name and generation, for `podTemplateRef`.
    pod_template: Option<(String, i64)>,
    /// The workload's replicas, for `scalableRef`.
    scalable_replicas: Option<i32>,
}

fn key_of(b: &CapacityBuffer) -> String {
    format!(
        "{}/{}",
        b.metadata.namespace.as_deref().unwrap_or("default"),
        b.metadata.name.as_deref().unwrap_or_default()
    )
}

impl<C: Cluster, P: CloudProvider> Controller<C, P> {
    fn buffer_revisions(&self) -> [u64; 5] {
        [
            self.cluster.revision::<CapacityBuffer>(),
            self.cluster.revision::<PodTemplate>(),
            self.cluster.revision::<Deployment>(),
            self.cluster.revision::<StatefulSet>(),
            self.cluster.revision::<ReplicaSet>(),
        ]
    }

    /// Resolves every buffer and keeps the virtual pods of the ready ones
    /// (see the module). Nothing with the gate off.
    pub(super) async fn reconcile_buffers(&mut self) {
        if !self.settings.capacity_buffer {
            if !self.buffers.pods.is_empty() || !self.buffers.on_nodes.is_empty() {
                self.buffers = BufferState::default();
            }
            return;
        }
        let revisions = self.buffer_revisions();
        if self.buffers.revisions == Some(revisions) {
            return;
        }
        let now = self.clock.now();
        let mut pods = Vec::new();
        let mut owners = BTreeMap::new();
        let mut ready = BTreeMap::new();
        for b in self.cluster.list::<CapacityBuffer>() {
            if b.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let key = key_of(&b);
            let mut updated = (*b).clone();
            let status = updated.status.get_or_insert_with(Default::default);
            status.provisioning_strategy = b.spec.provisioning_strategy.clone();
            let outcome = self.resolve_buffer(&b);
            let conds = status.conditions.get_or_insert_with(Vec::new);
            let resolved = match outcome {
                Ok(r) => {
                    let requests = crate::scheduling::pod::pod_requests(&SlimPod {
                        spec: r.template.spec.as_ref().map(crate::api::SlimPodSpec::from),
                        ..SlimPod::default()
                    })
                    .unwrap_or_default();
                    let limits = b
                        .spec
                        .limits
                        .as_ref()
                        .and_then(|l| crate::model::Resources::from_k8s(l).ok());
                    let percentage = match (b.spec.percentage, r.scalable_replicas) {
                        (Some(p), Some(n)) if n > 0 => Some(buffers::percentage_replicas(n, p)),
                        _ => None,
                    };
                    status.replicas = Some(buffers::replicas(
                        b.spec.replicas,
                        percentage,
                        limits.as_ref(),
                        &requests,
                    ));
                    match &r.pod_template {
                        Some((name, generation)) => {
                            status.pod_template_ref = Some(LocalObjectRef { name: name.clone() });
                            status.pod_template_generation = Some(*generation);
                        }
                        None => {
                            status.pod_template_ref = None;
                            status.pod_template_generation = None;
                        }
                    }
                    super::set_condition(
                        conds,
                        READY_FOR_PROVISIONING,
                        true,
                        REASON_RESOLVED,
                        "Pod template resolved successfully",
                        now,
                    );
                    Some(r.template)
                }
                Err((reason, message)) => {
                    super::set_condition(
                        conds,
                        READY_FOR_PROVISIONING,
                        false,
                        reason,
                        &message,
                        now,
                    );
                    None
                }
            };
            if let Some(c) = conds.iter_mut().find(|c| c.type_ == READY_FOR_PROVISIONING) {
                c.observed_generation = b.metadata.generation;
            }
            let replicas = updated.status.as_ref().and_then(|s| s.replicas);
            ready.insert(key.clone(), (resolved.is_some(), replicas));
            if let Some(template) = &resolved {
                for p in buffers::virtual_pods(&updated, template) {
                    owners.insert(p.key(), key.clone());
                    pods.push(Arc::new(p));
                }
            }
            if updated.status != b.status {
                if let Err(e) = self.cluster.replace_status(updated).await {
                    self.event(
                        format!("CapacityBuffer/{key}"),
                        "StatusNotRecorded",
                        e.to_string(),
                    );
                }
            }
        }
        self.buffers.pods = pods;
        self.buffers.owners = owners;
        self.buffers.ready = ready;
        // Read after the status writes, which change the buffers' revision.
        self.buffers.revisions = Some(self.buffer_revisions());
    }

    /// The pod template of a buffer's reference, or the reason and
    /// message of `ReadyForProvisioning=False`.
    fn resolve_buffer(&self, b: &CapacityBuffer) -> Result<Resolved, (&'static str, String)> {
        let ns = b
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        if let Some(r) = &b.spec.pod_template_ref {
            let Some(t) = self
                .cluster
                .get::<PodTemplate>(&ObjectKey::new(ns.clone(), r.name.clone()))
            else {
                return Err((
                    REASON_POD_TEMPLATE_NOT_FOUND,
                    format!("podtemplates {:?} not found", r.name),
                ));
            };
            return Ok(Resolved {
                template: t.template.clone().unwrap_or_default(),
                pod_template: Some((r.name.clone(), t.metadata.generation.unwrap_or(0))),
                scalable_replicas: None,
            });
        }
        let Some(r) = &b.spec.scalable_ref else {
            return Err((
                REASON_RESOLUTION_FAILED,
                "Neither podTemplateRef nor scalableRef is set".into(),
            ));
        };
        let group = r
            .api_group
            .as_deref()
            .filter(|g| !g.is_empty())
            .unwrap_or("apps");
        if group != "apps" {
            return Err((
                REASON_RESOLUTION_FAILED,
                format!(
                    "unsupported scalableRef API group {:?}",
                    r.api_group.clone().unwrap_or_default()
                ),
            ));
        }
        let key = ObjectKey::new(ns, r.name.clone());
        let not_found = |plural: &str| {
            (
                REASON_SCALABLE_REF_NOT_FOUND,
                format!("{plural}.apps {:?} not found", r.name),
            )
        };
        let (template, replicas) = match r.kind.as_str() {
            "Deployment" => {
                let d = self
                    .cluster
                    .get::<Deployment>(&key)
                    .ok_or_else(|| not_found("deployments"))?;
                let s = d.spec.clone();
                (s.template, s.replicas)
            }
            "StatefulSet" => {
                let d = self
                    .cluster
                    .get::<StatefulSet>(&key)
                    .ok_or_else(|| not_found("statefulsets"))?;
                let s = d.spec.clone();
                (s.template, s.replicas)
            }
            "ReplicaSet" => {
                let d = self
                    .cluster
                    .get::<ReplicaSet>(&key)
                    .ok_or_else(|| not_found("replicasets"))?;
                let s = d.spec.clone();
                (s.template.unwrap_or_default(), s.replicas)
            }
            other => {
                return Err((
                    REASON_RESOLUTION_FAILED,
                    format!("unsupported kind {other:?}"),
                ));
            }
        };
        Ok(Resolved {
            template,
            pod_template: None,
            // An unset `replicas` is one, as the API server defaults it.
            scalable_replicas: Some(replicas.unwrap_or(1)),
        })
    }

    /// After a solve: each buffer's `Provisioning` condition, and the
    /// nodes holding its virtual pods.
    pub(super) async fn record_buffer_solve(&mut self, result: &SolveResult) {
        if !self.settings.capacity_buffer {
            return;
        }
        let before = self.buffer_revisions();
        self.buffers.on_nodes = buffers::counts_by_node(result, &self.buffers.owners);
        let placed = buffers::classify(result, &self.buffers.owners);
        let now = self.clock.now();
        for b in self.cluster.list::<CapacityBuffer>() {
            let key = key_of(&b);
            let (ready, replicas) = self
                .buffers
                .ready
                .get(&key)
                .copied()
                .unwrap_or((false, None));
            let Some((ok, reason, message)) =
                buffers::provisioning_condition(ready, replicas, placed.get(&key))
            else {
                continue;
            };
            let mut updated = (*b).clone();
            let conds = updated
                .status
                .get_or_insert_with(Default::default)
                .conditions
                .get_or_insert_with(Vec::new);
            if !super::set_condition(conds, buffers::PROVISIONING, ok, reason, &message, now) {
                continue;
            }
            if let Some(c) = conds.iter_mut().find(|c| c.type_ == buffers::PROVISIONING) {
                c.observed_generation = b.metadata.generation;
            }
            if let Err(e) = self.cluster.replace_status(updated).await {
                self.event(
                    format!("CapacityBuffer/{key}"),
                    "StatusNotRecorded",
                    e.to_string(),
                );
            }
        }
        // The status writes are the controller's own: they do not call for
        // another resolution (a change from elsewhere since still does).
        if self.buffers.revisions == Some(before) {
            self.buffers.revisions = Some(self.buffer_revisions());
        }
    }

    /// The virtual pods the last solve put on existing capacity, as if
    /// bound there and running: what disruption's trials count as the
    /// room buffers keep.
    pub(super) fn virtual_pods_bound(&self) -> Vec<Arc<SlimPod>> {
        let node_of: BTreeMap<&str, &str> = self
            .buffers
            .on_nodes
            .iter()
            .flat_map(|(n, pods)| pods.iter().map(move |p| (p.as_str(), n.as_str())))
            .collect();
        self.buffers
            .pods
            .iter()
            .filter_map(|p| {
                let node = node_of.get(p.key().as_str())?;
                let mut bound = (**p).clone();
                if let Some(spec) = bound.spec.as_mut() {
                    spec.node_name = Some((*node).to_string());
                }
                bound.status = Some(crate::api::SlimPodStatus {
                    phase: Some("Running".into()),
                    ..Default::default()
                });
                Some(Arc::new(bound))
            })
            .collect()
    }

    /// Whether a pod key is a buffer's virtual pod.
    pub(super) fn is_virtual(&self, pod: &str) -> bool {
        self.buffers.owners.contains_key(pod)
    }
}
