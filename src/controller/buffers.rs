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

use super::{Conditioned, Controller};
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
            // The CRD's default, which an API server applies on create.
            status.provisioning_strategy = Some(
                b.spec
                    .provisioning_strategy
                    .clone()
                    .unwrap_or_else(|| crate::api::capacitybuffer::ACTIVE_CAPACITY.into()),
            );
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
                let _ = self.record_status(updated).await;
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
            let conds = updated.conditions_mut();
            if !super::set_condition(conds, buffers::PROVISIONING, ok, reason, &message, now) {
                continue;
            }
            if let Some(c) = conds.iter_mut().find(|c| c.type_ == buffers::PROVISIONING) {
                c.observed_generation = b.metadata.generation;
            }
            let _ = self.record_status(updated).await;
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

#[cfg(test)]
mod tests {
    //! Karpenter v1.14.1's capacitybuffer controller cases
    //! (pkg/controllers/capacitybuffer/suite_test.go) and virtual pod cache
    //! cases (pkg/state/virtualpods/virtualpods_test.go), against the
    //! in-memory API server, named after their `It`s. Not ported: the
    //! `podTemplateToBuffers` mapping (every buffer is resolved again when
    //! any PodTemplate or workload changes), the cache's hydration and
    //! locking cases (the state is rebuilt whole from the cluster's cache),
    //! and "should NOT trigger the provisioner when resolution fails" as
    //! such (an unresolved buffer has no virtual pods to solve for, tested
    //! below).

    use serde_json::{Value, json};

    use super::*;
    use crate::api::NodeClaim;
    use crate::controller::Settings;
    use crate::testing::{Env, World, example_class, example_pool};

    fn env() -> Env {
        World::new().env(Settings {
            capacity_buffer: true,
            ..Settings::default()
        })
    }

    fn obj<K: serde::de::DeserializeOwned>(v: Value) -> K {
        serde_json::from_value(v).unwrap()
    }

    fn template(name: &str, cpu: &str) -> PodTemplate {
        obj(json!({"apiVersion": "v1", "kind": "PodTemplate",
            "metadata": {"name": name, "namespace": "default"},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [
                {"name": "app", "image": "i", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}}}))
    }

    fn workload<K: serde::de::DeserializeOwned>(
        kind: &str,
        name: &str,
        replicas: Option<i32>,
    ) -> K {
        let mut spec = json!({"selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [
                {"name": "app", "image": "i", "resources": {"requests": {"cpu": "1"}}}]}}});
        if let Some(r) = replicas {
            spec["replicas"] = json!(r);
        }
        if kind == "StatefulSet" {
            spec["serviceName"] = json!(name);
        }
        obj(json!({"apiVersion": "apps/v1", "kind": kind,
            "metadata": {"name": name, "namespace": "default"}, "spec": spec}))
    }

    fn buffer(name: &str, spec: Value) -> CapacityBuffer {
        obj(
            json!({"apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
            "metadata": {"name": name, "namespace": "default"}, "spec": spec}),
        )
    }

    /// The buffers' pass, and what it made of each buffer.
    trait Buffers {
        fn reconcile(&mut self);
        fn read(&self, name: &str) -> CapacityBuffer;
        fn ready(&self, name: &str) -> (String, String);
        fn replicas(&self, name: &str) -> Option<i32>;
        fn virtual_pods_of(&self, name: &str) -> usize;
    }

    impl Buffers for Env {
        fn reconcile(&mut self) {
            self.rt.block_on(self.controller.reconcile_buffers());
        }

        fn read(&self, name: &str) -> CapacityBuffer {
            (*self.get::<CapacityBuffer>(&ObjectKey::new("default", name))).clone()
        }

        /// `(status, reason)` of `ReadyForProvisioning`.
        fn ready(&self, name: &str) -> (String, String) {
            let b = self.read(name);
            let c = crate::api::common::find_condition(
                b.status.as_ref().and_then(|s| s.conditions.as_deref()),
                READY_FOR_PROVISIONING,
            )
            .cloned()
            .unwrap();
            (format!("{:?}", c.status), c.reason.unwrap_or_default())
        }

        fn replicas(&self, name: &str) -> Option<i32> {
            self.read(name).status.and_then(|s| s.replicas)
        }

        fn virtual_pods_of(&self, name: &str) -> usize {
            let key = format!("default/{name}");
            self.controller
                .buffers
                .owners
                .values()
                .filter(|b| **b == key)
                .count()
        }
    }

    #[test]
    fn should_resolve_a_podtemplate_and_set_readyforprovisioning_true() {
        let mut e = env();
        e.cluster.create(template("test-template", "1")).unwrap();
        e.cluster
            .create(buffer(
                "test-buffer",
                json!({"podTemplateRef": {"name": "test-template"}, "replicas": 5}),
            ))
            .unwrap();
        e.reconcile();
        assert_eq!(
            e.ready("test-buffer"),
            ("True".into(), REASON_RESOLVED.into())
        );
        let status = e.read("test-buffer").status.unwrap();
        assert_eq!(status.pod_template_ref.unwrap().name, "test-template");
        assert_eq!(status.pod_template_generation, Some(1));
        assert_eq!(status.replicas, Some(5));
        assert_eq!(
            status.provisioning_strategy.as_deref(),
            Some("buffer.x-k8s.io/active-capacity")
        );
    }

    #[test]
    fn should_set_readyforprovisioning_false_when_podtemplate_is_not_found() {
        let mut e = env();
        e.cluster
            .create(buffer(
                "test-buffer-missing",
                json!({"podTemplateRef": {"name": "nonexistent"}, "replicas": 3}),
            ))
            .unwrap();
        e.reconcile();
        assert_eq!(
            e.ready("test-buffer-missing"),
            ("False".into(), REASON_POD_TEMPLATE_NOT_FOUND.into())
        );
        assert_eq!(e.virtual_pods_of("test-buffer-missing"), 0);
    }

    #[test]
    fn should_resolve_a_deployment_and_calculate_percentage_based_replicas() {
        let mut e = env();
        e.cluster
            .create(workload::<Deployment>("Deployment", "my-app", Some(10)))
            .unwrap();
        e.cluster
            .create(buffer(
                "test-buffer-scalable",
                json!({"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "my-app"}, "percentage": 20}),
            ))
            .unwrap();
        e.reconcile();
        assert_eq!(e.ready("test-buffer-scalable").0, "True");
        assert_eq!(e.replicas("test-buffer-scalable"), Some(2));
        assert!(
            e.read("test-buffer-scalable")
                .status
                .unwrap()
                .pod_template_ref
                .is_none()
        );
    }

    #[test]
    fn should_set_readyforprovisioning_false_when_scalable_ref_is_not_found() {
        let mut e = env();
        e.cluster
            .create(buffer(
                "test-buffer-missing-ref",
                json!({"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "nonexistent"}, "replicas": 3}),
            ))
            .unwrap();
        e.reconcile();
        assert_eq!(
            e.ready("test-buffer-missing-ref"),
            ("False".into(), REASON_SCALABLE_REF_NOT_FOUND.into())
        );
    }

    #[test]
    fn should_resolve_a_statefulset() {
        let mut e = env();
        e.cluster
            .create(workload::<StatefulSet>("StatefulSet", "my-sts", Some(5)))
            .unwrap();
        e.cluster
            .create(buffer(
                "test-buffer-sts",
                json!({"scalableRef": {"apiGroup": "apps", "kind": "StatefulSet", "name": "my-sts"}, "percentage": 20}),
            ))
            .unwrap();
        e.reconcile();
        assert_eq!(e.ready("test-buffer-sts").0, "True");
        assert_eq!(e.replicas("test-buffer-sts"), Some(1));
    }

    #[test]
    fn should_return_error_for_unsupported_kind_and_api_group() {
        // The reference fails the reconcile (and retries); here the buffer
        // is marked not ready with the reason, and keeps no capacity.
        let mut e = env();
        for (name, group, kind) in [
            ("bad-kind", "batch", "Job"),
            ("bad-group", "batch", "Deployment"),
        ] {
            e.cluster
                .create(buffer(
                    name,
                    json!({"scalableRef": {"apiGroup": group, "kind": kind, "name": "x"}, "percentage": 20}),
                ))
                .unwrap();
        }
        e.reconcile();
        for name in ["bad-kind", "bad-group"] {
            assert_eq!(
                e.ready(name),
                ("False".into(), REASON_RESOLUTION_FAILED.into())
            );
            assert_eq!(e.virtual_pods_of(name), 0);
        }
    }

    #[test]
    fn should_default_to_1_replica_when_workload_has_nil_spec_replicas() {
        let mut e = env();
        e.cluster
            .create(workload::<Deployment>(
                "Deployment",
                "nil-replicas-app",
                None,
            ))
            .unwrap();
        e.cluster
            .create(buffer(
                "test-buffer-nil-replicas",
                json!({"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "nil-replicas-app"}, "percentage": 100}),
            ))
            .unwrap();
        e.reconcile();
        assert_eq!(e.replicas("test-buffer-nil-replicas"), Some(1));
    }

    #[test]
    fn should_resolve_buffer_replicas_from_replicas_percentage_and_limits() {
        let mut e = env();
        e.cluster.create(template("pt", "1")).unwrap();
        let d = |name: &str, replicas| workload::<Deployment>("Deployment", name, Some(replicas));
        for (name, r) in [("d-10", 10), ("d-1", 1)] {
            e.cluster.create(d(name, r)).unwrap();
        }
        let pt = |extra: Value| {
            let mut s = json!({"podTemplateRef": {"name": "pt"}});
            for (k, v) in extra.as_object().unwrap() {
                s[k] = v.clone();
            }
            s
        };
        let sr = |deploy: &str, extra: Value| {
            let mut s =
                json!({"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": deploy}});
            for (k, v) in extra.as_object().unwrap() {
                s[k] = v.clone();
            }
            s
        };
        let cases = [
            ("fixed-replicas-only", pt(json!({"replicas": 7})), 7),
            (
                "replicas-capped-by-binding-limit",
                pt(json!({"replicas": 10, "limits": {"cpu": "3"}})),
                3,
            ),
            (
                "non-binding-limit-does-not-reduce",
                pt(json!({"replicas": 3, "limits": {"cpu": "10"}})),
                3,
            ),
            ("limits-only", pt(json!({"limits": {"cpu": "5"}})), 5),
            ("percentage-only", sr("d-10", json!({"percentage": 20})), 2),
            (
                "replicas-gt-percentage",
                sr("d-10", json!({"replicas": 5, "percentage": 20})),
                5,
            ),
            (
                "percentage-gt-replicas",
                sr("d-10", json!({"replicas": 5, "percentage": 80})),
                8,
            ),
            (
                "max-capped-by-limit",
                sr(
                    "d-10",
                    json!({"replicas": 5, "percentage": 80, "limits": {"cpu": "4"}}),
                ),
                4,
            ),
            (
                "percentage-rounds-up-to-1",
                sr("d-1", json!({"percentage": 10})),
                1,
            ),
        ];
        for (name, spec, _) in &cases {
            e.cluster.create(buffer(name, spec.clone())).unwrap();
        }
        e.reconcile();
        for (name, _, want) in cases {
            assert_eq!(e.replicas(name), Some(want), "{name}");
            assert_eq!(
                e.virtual_pods_of(name),
                usize::try_from(want).unwrap(),
                "{name}"
            );
        }
    }

    #[test]
    fn should_re_resolve_the_template_when_its_generation_changes() {
        let mut e = env();
        e.cluster.create(template("watched-template", "1")).unwrap();
        e.cluster
            .create(buffer(
                "b",
                json!({"podTemplateRef": {"name": "watched-template"}, "limits": {"cpu": "4"}}),
            ))
            .unwrap();
        e.reconcile();
        assert_eq!(e.replicas("b"), Some(4));
        let mut t = (*e
            .cluster
            .get_opt::<PodTemplate>(&ObjectKey::new("default", "watched-template"))
            .unwrap())
        .clone();
        t.template = template("watched-template", "2").template;
        e.cluster.replace(t).unwrap();
        e.reconcile();
        assert_eq!(e.replicas("b"), Some(2), "4 cpu hold two 2-cpu chunks");
        assert_eq!(e.read("b").status.unwrap().pod_template_generation, Some(2));
    }

    #[test]
    fn should_populate_the_cache_after_a_successful_reconcile_and_evict_it_when_the_buffer_is_deleted()
     {
        let mut e = env();
        e.cluster.create(template("t", "1")).unwrap();
        e.cluster
            .create(buffer(
                "b",
                json!({"podTemplateRef": {"name": "t"}, "replicas": 3}),
            ))
            .unwrap();
        e.reconcile();
        assert_eq!(e.virtual_pods_of("b"), 3);
        e.cluster
            .delete::<CapacityBuffer>(&ObjectKey::new("default", "b"))
            .unwrap();
        e.reconcile();
        assert_eq!(e.virtual_pods_of("b"), 0);
    }

    #[test]
    fn should_remove_the_cache_entry_when_resolution_fails_with_notfound() {
        let mut e = env();
        e.cluster.create(template("t", "1")).unwrap();
        e.cluster
            .create(buffer(
                "b",
                json!({"podTemplateRef": {"name": "t"}, "replicas": 3}),
            ))
            .unwrap();
        e.reconcile();
        assert_eq!(e.virtual_pods_of("b"), 3);
        e.cluster
            .delete::<PodTemplate>(&ObjectKey::new("default", "t"))
            .unwrap();
        e.reconcile();
        assert_eq!(e.virtual_pods_of("b"), 0);
        assert_eq!(e.ready("b").1, REASON_POD_TEMPLATE_NOT_FOUND);
    }

    #[test]
    fn should_not_touch_the_cache_when_a_buffer_has_neither_ref_set() {
        let mut e = env();
        e.cluster
            .create(buffer("b", json!({"replicas": 3})))
            .unwrap();
        e.reconcile();
        assert_eq!(e.virtual_pods_of("b"), 0);
        assert_eq!(
            e.ready("b"),
            ("False".into(), REASON_RESOLUTION_FAILED.into())
        );
    }

    #[test]
    fn nothing_with_the_gate_off() {
        let mut e = env();
        e.controller.settings.capacity_buffer = false;
        e.cluster.create(template("t", "1")).unwrap();
        e.cluster
            .create(buffer(
                "b",
                json!({"podTemplateRef": {"name": "t"}, "replicas": 3}),
            ))
            .unwrap();
        e.reconcile();
        assert_eq!(e.virtual_pods_of("b"), 0);
        assert!(e.read("b").status.is_none());
    }

    /// "should trigger the provisioner after a successful reconcile": the
    /// virtual pods get a NodeClaim; they are never created as pods, and
    /// the buffer's `Provisioning` says they need new capacity.
    #[test]
    fn should_trigger_the_provisioner_after_a_successful_reconcile() {
        let mut e = env();
        e.cluster.create(example_class()).unwrap();
        e.cluster.create(example_pool()).unwrap();
        e.cluster.create(template("t", "1")).unwrap();
        e.cluster
            .create(buffer(
                "b",
                json!({"podTemplateRef": {"name": "t"}, "replicas": 2}),
            ))
            .unwrap();
        let pass = |e: &mut Env, by: Duration| {
            e.clock.advance(by).unwrap();
            e.rt.block_on(e.controller.reconcile_provisioning());
        };
        pass(&mut e, Duration::ZERO);
        pass(&mut e, crate::controller::BATCH_IDLE);
        let claims = Cluster::list::<NodeClaim>(e.cluster.as_ref());
        assert!(!claims.is_empty(), "no NodeClaim for the chunks");
        let requested: i64 = claims
            .iter()
            .filter_map(|c| {
                c.spec
                    .resources
                    .as_ref()?
                    .requests
                    .as_ref()?
                    .get("cpu")
                    .cloned()
            })
            .map(|q| crate::model::quantity::parse_quantity("cpu", &q.0).unwrap())
            .sum();
        assert!(
            requested >= 2000,
            "the claims hold the two chunks: {requested}m"
        );
        assert!(Cluster::list::<SlimPod>(e.cluster.as_ref()).is_empty());
        let b = e.read("b");
        let provisioning = crate::api::common::find_condition(
            b.status.as_ref().and_then(|s| s.conditions.as_deref()),
            buffers::PROVISIONING,
        )
        .cloned()
        .unwrap();
        assert_eq!(
            provisioning.reason.as_deref(),
            Some(buffers::REASON_REQUIRES_NEW_CAPACITY)
        );
        assert!(e.controller.unschedulable().is_empty());
        assert!(
            e.controller
                .drain_events()
                .iter()
                .all(|ev| !ev.object.contains("capacity-buffer-")),
            "no Event names a virtual pod"
        );
    }
}
