//! The workload controllers the simulation needs in place of the real
//! kube-controller-manager: a Deployment keeps `replicas` pods (replacing
//! evicted or deleted ones), a ReplicaSet likewise, a StatefulSet keeps one
//! pod per ordinal (`name-0` ...) with its volume claims, and a Job runs
//! `parallelism` pods until `completions` succeeded. Pods are created
//! pending and unscheduled; the stand-in kube-scheduler binds them.
//!
//! A Deployment that controls ReplicaSets (a cluster restored from a
//! snapshot) works through them, as the real one does: its newest
//! ReplicaSet is scaled to its `replicas` and the older ones to zero (a
//! rollout in progress is completed at once). A Deployment without
//! ReplicaSets (one a scenario applies) keeps its pods itself.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodCondition, PodStatus,
    PodTemplateSpec, Volume,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use kube::Resource;
use kube::api::ObjectMeta;

use crate::clock::{Timestamp, truncate_to_second};
use crate::cluster::{ApiError, EventType, ObjectKey, Selector};
use crate::world::MemoryCluster;

/// The condition of a PodDisruptionBudget's status that says whether it
/// allows a disruption now.
const DISRUPTION_ALLOWED: &str = "DisruptionAllowed";

/// What one sync did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkloadReport {
    pub created: Vec<String>,
    pub deleted: Vec<String>,
    pub errors: Vec<(String, String)>,
}

/// Deployment and Job controllers for the simulation.
#[derive(Debug, Default)]
pub struct Workloads {
    /// Next pod suffix per owner, so names are never reused.
    next: BTreeMap<String, u64>,
    /// The cluster's resourceVersion after the last pass: the controllers
    /// act on state alone, so with no change since there is nothing to do.
    seen: Option<u64>,
    /// The Pod and PodDisruptionBudget revisions the budgets' status was
    /// last written for.
    budgets_seen: Option<(u64, u64)>,
    /// Per Job uid, the uids of its pods counted as succeeded: a completion
    /// stays counted when the pod is deleted afterwards (with its node), as
    /// the Job controller's pod-tracking finalizers ensure.
    succeeded: HashMap<String, std::collections::HashSet<String>>,
    /// The pods of each controlling owner.
    owned: OwnedPods,
}

/// The pods under each controlling owner's uid, kept from the cluster's
/// watch as kube-controller-manager's informers keep them: a sync reads
/// what changed since the last, not every pod.
#[derive(Debug, Default)]
struct OwnedPods {
    /// The resource version the index is current to; `None` before the
    /// first list.
    seen: Option<u64>,
    /// Per owner uid, its pods in the order the cluster lists them.
    by_owner: HashMap<String, Owned>,
    /// The owner uid of each pod in `by_owner`.
    owner_of: HashMap<ObjectKey, String>,
}

/// One owner's pods, and how many of them are live ([`is_live`]): a
/// controller whose live pods are as many as it wants has nothing to do,
/// and most of a large cluster's have not changed since the last sync.
#[derive(Debug, Default)]
struct Owned {
    pods: BTreeMap<ObjectKey, Arc<Pod>>,
    live: usize,
}

impl OwnedPods {
    /// Applies the pod changes since the last sync; lists every pod again
    /// on the first sync or when the watch no longer reaches back.
    fn sync(&mut self, cluster: &MemoryCluster) {
        if let Some(Ok(events)) = self.seen.map(|rv| cluster.watch_from::<Pod>(rv)) {
            for event in events {
                self.seen = Some(event.resource_version);
                let key = ObjectKey::of(event.object.as_ref());
                self.remove(&key);
                if event.event_type != EventType::Deleted {
                    self.insert(key, event.object);
                }
            }
            return;
        }
        let list = cluster.list::<Pod>(None, &Selector::everything());
        *self = OwnedPods {
            seen: Some(list.resource_version),
            ..OwnedPods::default()
        };
        for pod in list.items {
            self.insert(ObjectKey::of(pod.as_ref()), pod);
        }
    }

    fn insert(&mut self, key: ObjectKey, pod: Arc<Pod>) {
        let Some(uid) = controller_uid(&pod.metadata).map(str::to_string) else {
            return;
        };
        self.owner_of.insert(key.clone(), uid.clone());
        let owned = self.by_owner.entry(uid).or_default();
        owned.live += usize::from(is_live(&pod));
        if let Some(old) = owned.pods.insert(key, pod) {
            owned.live -= usize::from(is_live(&old));
        }
    }

    fn remove(&mut self, key: &ObjectKey) {
        let Some(uid) = self.owner_of.remove(key) else {
            return;
        };
        if let Some(owned) = self.by_owner.get_mut(&uid) {
            if let Some(old) = owned.pods.remove(key) {
                owned.live -= usize::from(is_live(&old));
            }
            if owned.pods.is_empty() {
                self.by_owner.remove(&uid);
            }
        }
    }

    /// The pods whose controlling owner has `uid`.
    fn of(&self, uid: Option<&str>) -> Vec<&Arc<Pod>> {
        uid.and_then(|u| self.by_owner.get(u))
            .map(|owned| owned.pods.values().collect())
            .unwrap_or_default()
    }

    /// How many of the pods whose controlling owner has `uid` are live.
    fn live(&self, uid: Option<&str>) -> usize {
        uid.and_then(|u| self.by_owner.get(u))
            .map_or(0, |owned| owned.live)
    }
}

fn owner_ref<K: Resource<DynamicType = ()>>(obj: &K) -> Option<OwnerReference> {
    let meta = obj.meta();
    Some(OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: meta.name.clone()?,
        uid: meta.uid.clone()?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

/// A budget's conditions with `DisruptionAllowed` set as the disruption
/// controller sets it: `True` (`SufficientPods`) while a disruption is
/// allowed, else `False` (`InsufficientPods`), at the budget's generation.
/// Its transition time changes only when its status does.
fn disruption_allowed(
    conditions: &[Condition],
    allowed: bool,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    let (status, reason) = if allowed {
        ("True", "SufficientPods")
    } else {
        ("False", "InsufficientPods")
    };
    let mut out: Vec<Condition> = conditions.to_vec();
    let existing = out.iter_mut().find(|c| c.type_ == DISRUPTION_ALLOWED);
    let since = match &existing {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => Time(truncate_to_second(now)),
    };
    let condition = Condition {
        type_: DISRUPTION_ALLOWED.into(),
        status: status.into(),
        reason: reason.into(),
        message: String::new(),
        observed_generation: generation,
        last_transition_time: since,
    };
    match existing {
        Some(c) => *c = condition,
        None => out.push(condition),
    }
    out
}

impl Workloads {
    /// The disruption controller's part: writes each PodDisruptionBudget's
    /// status (expected, desired and current healthy pods, disruptions
    /// allowed, and the `DisruptionAllowed` condition) from the current
    /// pods, as kube-controller-manager does, so that what dovetail reads is
    /// what a real cluster reports. Returns the number of budgets whose
    /// status changed.
    pub fn disruption_budgets(&mut self, cluster: &MemoryCluster) -> usize {
        let seen = (
            cluster.kind_revision::<Pod>(),
            cluster.kind_revision::<PodDisruptionBudget>(),
        );
        if self.budgets_seen == Some(seen) {
            return 0;
        }
        let mut changed = 0;
        for b in cluster
            .list::<PodDisruptionBudget>(None, &Selector::everything())
            .items
        {
            let Ok(s) = cluster.disruption_budget_status(&b) else {
                continue;
            };
            let old = b.status.clone().unwrap_or_default();
            let conditions = disruption_allowed(
                old.conditions.as_deref().unwrap_or_default(),
                s.disruptions_allowed > 0,
                b.metadata.generation,
                cluster.clock().now(),
            );
            let status = PodDisruptionBudgetStatus {
                current_healthy: Some(s.current_healthy),
                desired_healthy: Some(s.desired_healthy),
                disruptions_allowed: Some(s.disruptions_allowed),
                expected_pods: Some(s.expected_pods),
                observed_generation: b.metadata.generation,
                conditions: Some(conditions),
                ..old
            };
            if b.status.as_ref() != Some(&status) {
                let mut updated = (*b).clone();
                updated.status = Some(status);
                if cluster.update_status(updated).is_ok() {
                    changed += 1;
                }
            }
        }
        self.budgets_seen = Some((
            cluster.kind_revision::<Pod>(),
            cluster.kind_revision::<PodDisruptionBudget>(),
        ));
        changed
    }

    /// Brings Deployments and Jobs to their desired pods.
    pub fn sync(&mut self, cluster: &MemoryCluster, now: Timestamp) -> WorkloadReport {
        let mut report = WorkloadReport::default();
        if self.seen == Some(cluster.resource_version()) {
            return report;
        }
        // Taken out while the controllers below borrow `self`.
        let mut index = std::mem::take(&mut self.owned);
        index.sync(cluster);
        let owned = |uid: Option<&str>| index.of(uid);
        let replica_sets = cluster
            .list::<ReplicaSet>(None, &Selector::everything())
            .items;
        for d in cluster
            .list::<Deployment>(None, &Selector::everything())
            .items
        {
            let uid = d.metadata.uid.as_deref();
            let sets: Vec<&Arc<ReplicaSet>> = replica_sets
                .iter()
                .filter(|rs| uid.is_some() && controller_uid(&rs.metadata) == uid)
                .collect();
            if sets.is_empty() {
                // A Deployment whose live pods are as many as it wants
                // would neither create nor delete one.
                if index.live(uid) != replicas_wanted(d.spec.replicas) {
                    self.sync_deployment(cluster, &d, &owned(uid), now, &mut report);
                }
            } else {
                scale_replica_sets(cluster, &d, &sets, &mut report);
            }
        }
        // Scaled above or not, each ReplicaSet as it stands now.
        for rs in cluster
            .list::<ReplicaSet>(None, &Selector::everything())
            .items
        {
            let uid = rs.metadata.uid.as_deref();
            let spec = &rs.spec;
            let want = replicas_wanted(spec.replicas);
            if index.live(uid) == want {
                continue;
            }
            let mine = owned(uid);
            let Some(owner) = owner_ref(rs.as_ref()) else {
                continue;
            };
            let template = spec.template.clone().unwrap_or_default();
            self.keep_replicas(
                cluster,
                &rs.metadata,
                &template,
                owner,
                want,
                &mine,
                now,
                &mut report,
            );
        }
        for s in cluster
            .list::<StatefulSet>(None, &Selector::everything())
            .items
        {
            let mine = owned(s.metadata.uid.as_deref());
            sync_stateful_set(cluster, &s, &mine, now, &mut report);
        }
        for j in cluster.list::<Job>(None, &Selector::everything()).items {
            let mine = owned(j.metadata.uid.as_deref());
            self.sync_job(cluster, &j, &mine, now, &mut report);
        }
        self.owned = index;
        self.seen = Some(cluster.resource_version());
        report
    }

    fn sync_deployment(
        &mut self,
        cluster: &MemoryCluster,
        d: &Deployment,
        pods: &[&Arc<Pod>],
        now: Timestamp,
        report: &mut WorkloadReport,
    ) {
        let Some(owner) = owner_ref(d) else {
            return;
        };
        let want = replicas_wanted(d.spec.replicas);
        self.keep_replicas(
            cluster,
            &d.metadata,
            &d.spec.template,
            owner,
            want,
            pods,
            now,
            report,
        );
    }

    /// Keeps `want` live pods of `template` under `owner`: deletes the
    /// surplus (newest first, pending before running, as a ReplicaSet
    /// does), creates the missing.
    #[allow(clippy::too_many_arguments)]
    fn keep_replicas(
        &mut self,
        cluster: &MemoryCluster,
        meta: &ObjectMeta,
        template: &PodTemplateSpec,
        owner: OwnerReference,
        want: usize,
        pods: &[&Arc<Pod>],
        now: Timestamp,
        report: &mut WorkloadReport,
    ) {
        let mut live: Vec<&Arc<Pod>> = pods.iter().copied().filter(|p| is_live(p)).collect();
        let ns = meta.namespace.clone().unwrap_or_else(|| "default".into());
        let base = meta.name.clone().unwrap_or_default();
        if live.len() > want {
            live.sort_by_key(|p| {
                let bound = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
                (
                    bound,
                    std::cmp::Reverse(p.metadata.creation_timestamp.clone().map(|t| t.0)),
                    p.metadata.name.clone(),
                )
            });
            for p in &live[..live.len() - want] {
                let key = crate::cluster::ObjectKey::of(p.as_ref());
                match cluster.delete::<Pod>(&key) {
                    Ok(_) => report.deleted.push(key.to_string()),
                    Err(e) => report.errors.push((key.to_string(), e.to_string())),
                }
            }
            return;
        }
        for _ in live.len()..want {
            self.create_pod(cluster, &ns, &base, template, owner.clone(), now, report);
        }
    }

    fn sync_job(
        &mut self,
        cluster: &MemoryCluster,
        j: &Job,
        mine: &[&Arc<Pod>],
        now: Timestamp,
        report: &mut WorkloadReport,
    ) {
        let Some(owner) = owner_ref(j) else {
            return;
        };
        let Some(spec) = j.spec.as_ref() else { return };
        let counted = self
            .succeeded
            .entry(j.metadata.uid.clone().unwrap_or_default())
            .or_default();
        for p in mine.iter().filter(|p| phase(p) == "Succeeded") {
            counted.insert(p.metadata.uid.clone().unwrap_or_default());
        }
        let succeeded = counted.len();
        let active = mine.iter().filter(|p| is_live(p)).count();
        let completions = usize::try_from(spec.completions.unwrap_or(1)).unwrap_or(1);
        let parallelism = usize::try_from(spec.parallelism.unwrap_or(1)).unwrap_or(1);
        let remaining = completions.saturating_sub(succeeded);
        let want_active = parallelism.min(remaining);
        let ns = j
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let base = j.metadata.name.clone().unwrap_or_default();
        let reported = j.status.as_ref().and_then(|s| s.succeeded);
        let total = i32::try_from(succeeded).unwrap_or(i32::MAX);
        if reported != Some(total) {
            let mut updated = j.clone();
            let status = updated.status.get_or_insert_with(Default::default);
            status.succeeded = Some(total);
            status.active = Some(i32::try_from(active).unwrap_or(i32::MAX));
            let _ = cluster.update_status(updated);
        }
        for _ in active..want_active {
            self.create_pod(
                cluster,
                &ns,
                &base,
                &spec.template,
                owner.clone(),
                now,
                report,
            );
        }
    }

    /// Creates a pending pod of `template` named `base-NNNNN`, with the
    /// next number not taken (a cluster restored from a snapshot may hold
    /// pods of those names already).
    #[allow(clippy::too_many_arguments)]
    fn create_pod(
        &mut self,
        cluster: &MemoryCluster,
        namespace: &str,
        base: &str,
        template: &PodTemplateSpec,
        owner: OwnerReference,
        now: Timestamp,
        report: &mut WorkloadReport,
    ) {
        let n = self.next.entry(format!("{namespace}/{base}")).or_insert(0);
        loop {
            let name = format!("{base}-{n:05}");
            *n += 1;
            let pod = pending_pod(namespace, &name, template, owner.clone(), now);
            match cluster.create(pod) {
                Ok(_) => report.created.push(format!("{namespace}/{name}")),
                Err(ApiError::AlreadyExists { .. }) => continue,
                Err(e) => report
                    .errors
                    .push((format!("{namespace}/{name}"), e.to_string())),
            }
            return;
        }
    }
}

/// A new pod of `template`, pending and not yet scheduled.
fn pending_pod(
    namespace: &str,
    name: &str,
    template: &PodTemplateSpec,
    owner: OwnerReference,
    now: Timestamp,
) -> Pod {
    let meta = template.metadata.clone().unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            labels: meta.labels,
            annotations: meta.annotations,
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: template.spec.clone(),
        status: Some(PodStatus {
            phase: Some("Pending".into()),
            conditions: Some(vec![PodCondition {
                type_: "PodScheduled".into(),
                status: "False".into(),
                reason: Some("Unschedulable".into()),
                message: Some("waiting for the scheduler".into()),
                last_transition_time: Some(Time(now)),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        }),
    }
}

/// Not deleting and not finished.
/// The pods a Deployment's or ReplicaSet's `replicas` asks for (1 when
/// unset, none when negative).
fn replicas_wanted(replicas: Option<i32>) -> usize {
    usize::try_from(replicas.unwrap_or(1)).unwrap_or(0)
}

fn is_live(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none() && !crate::api::pod::is_finished(p)
}

/// The uid of an object's controlling owner.
fn controller_uid(meta: &ObjectMeta) -> Option<&str> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

/// The Deployment controller's part for a Deployment with ReplicaSets: the
/// newest (highest `deployment.kubernetes.io/revision`, then the latest
/// created) gets the Deployment's replicas, the others none.
fn scale_replica_sets(
    cluster: &MemoryCluster,
    d: &Deployment,
    sets: &[&Arc<ReplicaSet>],
    report: &mut WorkloadReport,
) {
    let revision = |rs: &ReplicaSet| {
        rs.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("deployment.kubernetes.io/revision"))
            .and_then(|r| r.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let Some(newest) = sets.iter().max_by_key(|rs| {
        (
            revision(rs),
            rs.metadata.creation_timestamp.clone().map(|t| t.0),
            rs.metadata.name.clone(),
        )
    }) else {
        return;
    };
    let want = d.spec.replicas.unwrap_or(1);
    for rs in sets {
        let target = if Arc::ptr_eq(rs, newest) { want } else { 0 };
        let current = rs.spec.replicas.unwrap_or(1);
        if current == target {
            continue;
        }
        let mut updated = (***rs).clone();
        updated.spec.replicas = Some(target);
        let key = crate::cluster::ObjectKey::of(&updated);
        if let Err(e) = cluster.replace(updated) {
            report
                .errors
                .push((format!("ReplicaSet/{key}"), e.to_string()));
        }
    }
}

/// The StatefulSet controller: one pod per ordinal below `replicas`, named
/// `name-ORDINAL`, with a claim per volume claim template
/// (`TEMPLATE-name-ORDINAL`, created when missing and kept when the pod
/// goes, as the real controller keeps them), so a recreated pod finds its
/// volume. A missing ordinal is created once its old pod is gone (the name
/// is taken while it terminates); ordinals at or above `replicas` are
/// deleted.
fn sync_stateful_set(
    cluster: &MemoryCluster,
    s: &StatefulSet,
    pods: &[&Arc<Pod>],
    now: Timestamp,
    report: &mut WorkloadReport,
) {
    let Some(owner) = owner_ref(s) else { return };
    let spec = &s.spec;
    let ns = s
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let base = s.metadata.name.clone().unwrap_or_default();
    let want = u64::try_from(spec.replicas.unwrap_or(1)).unwrap_or(0);
    let ordinal = |p: &Pod| {
        p.metadata
            .name
            .as_deref()?
            .strip_prefix(base.as_str())?
            .strip_prefix('-')?
            .parse::<u64>()
            .ok()
    };
    let mut present = std::collections::HashSet::new();
    for p in pods {
        let Some(o) = ordinal(p) else { continue };
        present.insert(o);
        if o >= want && p.metadata.deletion_timestamp.is_none() {
            let key = crate::cluster::ObjectKey::of(p.as_ref());
            match cluster.delete::<Pod>(&key) {
                Ok(_) => report.deleted.push(key.to_string()),
                Err(e) => report.errors.push((key.to_string(), e.to_string())),
            }
        }
    }
    for o in (0..want).filter(|o| !present.contains(o)) {
        let name = format!("{base}-{o}");
        let mut template = spec.template.clone();
        let pod_spec = template.spec.get_or_insert_with(Default::default);
        for claim in spec.volume_claim_templates.iter().flatten() {
            let Some(claim_name) = claim.metadata.name.as_deref() else {
                continue;
            };
            let pvc_name = format!("{claim_name}-{name}");
            let key = crate::cluster::ObjectKey::new(ns.clone(), pvc_name.clone());
            if cluster.get_opt::<PersistentVolumeClaim>(&key).is_none() {
                let pvc = PersistentVolumeClaim {
                    metadata: ObjectMeta {
                        name: Some(pvc_name.clone()),
                        namespace: Some(ns.clone()),
                        labels: claim.metadata.labels.clone(),
                        ..ObjectMeta::default()
                    },
                    spec: claim.spec.clone(),
                    status: None,
                };
                if let Err(e) = cluster.create(pvc) {
                    report
                        .errors
                        .push((format!("{ns}/{pvc_name}"), e.to_string()));
                    continue;
                }
            }
            let volumes = pod_spec.volumes.get_or_insert_with(Vec::new);
            volumes.retain(|v| v.name != claim_name);
            volumes.push(Volume {
                name: claim_name.to_string(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: pvc_name,
                    read_only: None,
                }),
                ..Volume::default()
            });
        }
        let pod = pending_pod(&ns, &name, &template, owner.clone(), now);
        match cluster.create(pod) {
            Ok(_) => report.created.push(format!("{ns}/{name}")),
            // Its predecessor still terminates: the next pass creates it.
            Err(ApiError::AlreadyExists { .. }) => {}
            Err(e) => report.errors.push((format!("{ns}/{name}"), e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{ManualClock, parse_rfc3339};
    use serde_json::json;
    use std::time::Duration;

    fn cluster() -> (MemoryCluster, Timestamp) {
        let t = parse_rfc3339("2026-01-05T00:00:00Z").unwrap();
        (MemoryCluster::new(Arc::new(ManualClock::new(t))), t)
    }

    fn deployment(replicas: i32) -> Deployment {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "i"}]}}}
        }))
        .unwrap()
    }

    fn pods(c: &MemoryCluster) -> Vec<String> {
        c.list::<Pod>(None, &Selector::everything())
            .items
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect()
    }

    /// The disruption controller's `DisruptionAllowed` condition, as the
    /// real one writes it (pkg/controller/disruption): `False` with
    /// `InsufficientPods` while the budget allows nothing, `True` with
    /// `SufficientPods` once it allows a disruption, at the budget's
    /// generation, its transition time kept while its status holds.
    #[test]
    fn budgets_get_the_disruption_allowed_condition() {
        let t = parse_rfc3339("2026-01-05T00:00:00Z").unwrap();
        let clock = Arc::new(ManualClock::new(t));
        let c = MemoryCluster::new(clock.clone());
        let budget: PodDisruptionBudget = serde_json::from_value(json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}
        }))
        .unwrap();
        c.create(budget).unwrap();
        let running = |name: &str| -> Pod {
            serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
                "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
                "status": {"phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True"}]}
            }))
            .unwrap()
        };
        let condition = |c: &MemoryCluster| {
            let b = c
                .get::<PodDisruptionBudget>(&crate::cluster::ObjectKey::new("default", "web"))
                .unwrap();
            let status = b.status.clone().unwrap();
            let conditions = status.conditions.unwrap_or_default();
            assert_eq!(conditions.len(), 1, "{conditions:?}");
            let d = conditions[0].clone();
            assert_eq!(
                (d.type_.as_str(), d.message.as_str(), d.observed_generation),
                ("DisruptionAllowed", "", b.metadata.generation)
            );
            (
                status.disruptions_allowed,
                d.status,
                d.reason,
                d.last_transition_time.0,
            )
        };
        let mut w = Workloads::default();
        c.create(running("web-1")).unwrap();
        assert_eq!(w.disruption_budgets(&c), 1);
        assert_eq!(
            condition(&c),
            (Some(0), "False".into(), "InsufficientPods".into(), t)
        );
        let t1 = clock.advance(Duration::from_secs(60)).unwrap();
        c.create(running("web-2")).unwrap();
        assert_eq!(w.disruption_budgets(&c), 1);
        assert_eq!(
            condition(&c),
            (Some(1), "True".into(), "SufficientPods".into(), t1)
        );
        clock.advance(Duration::from_secs(60)).unwrap();
        c.create(running("web-3")).unwrap();
        assert_eq!(w.disruption_budgets(&c), 1);
        assert_eq!(
            condition(&c),
            (Some(2), "True".into(), "SufficientPods".into(), t1),
            "the transition time holds while the status does"
        );
        assert_eq!(w.disruption_budgets(&c), 0, "nothing changed since");
    }

    /// The owned-pod index brought up to date from where the last sync left
    /// it (before that sync's own writes), and as a fresh list gives it.
    fn owned_now(w: &mut Workloads, c: &MemoryCluster) -> (Vec<ObjectKey>, Vec<ObjectKey>) {
        w.owned.sync(c);
        let keys = |o: &OwnedPods| -> Vec<ObjectKey> {
            let mut keys: Vec<ObjectKey> = o.owner_of.keys().cloned().collect();
            keys.sort();
            keys
        };
        let mut fresh = OwnedPods::default();
        fresh.sync(c);
        for o in [&w.owned, &fresh] {
            for owned in o.by_owner.values() {
                let live = owned.pods.values().filter(|p| is_live(p)).count();
                assert_eq!(owned.live, live, "the live count is the live pods'");
            }
        }
        (keys(&w.owned), keys(&fresh))
    }

    #[test]
    fn owned_pods_follow_the_watch_and_list_again_once_it_is_compacted() {
        let (c, t) = cluster();
        c.create(deployment(3)).unwrap();
        let mut w = Workloads::default();
        assert_eq!(w.sync(&c, t).created.len(), 3);
        // A change within the watch log is applied as an event.
        c.delete::<Pod>(&ObjectKey::new("default", "web-00001"))
            .unwrap();
        assert_eq!(w.sync(&c, t).created, ["default/web-00003"]);
        let (kept, fresh) = owned_now(&mut w, &c);
        assert_eq!(kept, fresh);
        // Changes the log no longer holds: the index lists every pod again.
        c.set_watch_log_capacity(1);
        for name in ["web-00000", "web-00002"] {
            c.delete::<Pod>(&ObjectKey::new("default", name)).unwrap();
        }
        assert_eq!(
            w.sync(&c, t).created,
            ["default/web-00004", "default/web-00005"]
        );
        assert!(w.sync(&c, t).created.is_empty(), "nothing changed since");
        assert_eq!(pods(&c), ["web-00003", "web-00004", "web-00005"]);
        let (kept, fresh) = owned_now(&mut w, &c);
        assert_eq!(kept.len(), 3);
        assert_eq!(kept, fresh);
    }

    #[test]
    fn a_pod_that_fails_is_replaced_and_no_longer_counted_live() {
        let (c, t) = cluster();
        c.create(deployment(3)).unwrap();
        let mut w = Workloads::default();
        assert_eq!(w.sync(&c, t).created.len(), 3);
        let key = ObjectKey::new("default", "web-00001");
        let mut failed = (*c.get::<Pod>(&key).unwrap()).clone();
        failed.status.get_or_insert_with(Default::default).phase = Some("Failed".into());
        c.update_status(failed).unwrap();
        assert_eq!(w.sync(&c, t).created, ["default/web-00003"]);
        assert!(w.sync(&c, t).created.is_empty(), "nothing changed since");
        let (kept, fresh) = owned_now(&mut w, &c);
        assert_eq!(kept.len(), 4, "the failed pod is still owned");
        assert_eq!(kept, fresh);
    }

    #[test]
    fn deployments_keep_their_replicas() {
        let (c, t) = cluster();
        c.create(deployment(3)).unwrap();
        let mut w = Workloads::default();
        assert_eq!(w.sync(&c, t).created.len(), 3);
        assert_eq!(pods(&c), ["web-00000", "web-00001", "web-00002"]);
        assert!(
            w.sync(&c, t).created.is_empty(),
            "a second sync changes nothing"
        );
        c.delete::<Pod>(&crate::cluster::ObjectKey::new("default", "web-00001"))
            .unwrap();
        assert_eq!(w.sync(&c, t).created, ["default/web-00003"]);
        let mut d = (*c
            .get::<Deployment>(&crate::cluster::ObjectKey::new("default", "web"))
            .unwrap())
        .clone();
        d.spec.replicas = Some(1);
        c.replace(d).unwrap();
        assert_eq!(w.sync(&c, t).deleted.len(), 2);
        assert_eq!(pods(&c).len(), 1);
    }

    #[test]
    fn jobs_run_parallelism_pods_until_completions() {
        let (c, t) = cluster();
        let job: Job = serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "batch", "namespace": "default"},
            "spec": {"completions": 3, "parallelism": 2,
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}
        }))
        .unwrap();
        c.create(job).unwrap();
        let mut w = Workloads::default();
        assert_eq!(w.sync(&c, t).created.len(), 2);
        for name in ["batch-00000", "batch-00001"] {
            let key = crate::cluster::ObjectKey::new("default", name);
            let mut p = (*c.get::<Pod>(&key).unwrap()).clone();
            p.status.as_mut().unwrap().phase = Some("Succeeded".into());
            c.update_status(p).unwrap();
        }
        assert_eq!(w.sync(&c, t).created, ["default/batch-00002"]);
        let mut p = (*c
            .get::<Pod>(&crate::cluster::ObjectKey::new("default", "batch-00002"))
            .unwrap())
        .clone();
        p.status.as_mut().unwrap().phase = Some("Succeeded".into());
        c.update_status(p).unwrap();
        assert!(w.sync(&c, t).created.is_empty());
    }

    #[test]
    fn a_deployment_with_replica_sets_works_through_its_newest() {
        let (c, t) = cluster();
        let d = c.create(deployment(3)).unwrap();
        let uid = d.metadata.uid.clone().unwrap();
        let rs = |name: &str, revision: &str, replicas: i32| -> ReplicaSet {
            serde_json::from_value(json!({
                "apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": name, "namespace": "default",
                    "annotations": {"deployment.kubernetes.io/revision": revision},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                        "name": "web", "uid": uid, "controller": true}]},
                "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                        "spec": {"containers": [{"name": "c", "image": "i"}]}}}
            }))
            .unwrap()
        };
        c.create(rs("web-old", "1", 2)).unwrap();
        c.create(rs("web-new", "2", 1)).unwrap();
        let mut w = Workloads::default();
        let first = w.sync(&c, t);
        // The Deployment keeps no pods of its own: its ReplicaSets do.
        assert!(
            first
                .created
                .iter()
                .all(|p| !p.starts_with("default/web-0")),
            "{first:?}"
        );
        w.sync(&c, t);
        let replicas = |name: &str| {
            c.get::<ReplicaSet>(&crate::cluster::ObjectKey::new("default", name))
                .unwrap()
                .spec
                .replicas
        };
        assert_eq!(
            (replicas("web-new"), replicas("web-old")),
            (Some(3), Some(0))
        );
        let mut names = pods(&c);
        names.sort();
        assert_eq!(names, ["web-new-00000", "web-new-00001", "web-new-00002"]);
    }

    #[test]
    fn replica_sets_replace_pods_past_names_already_taken() {
        let (c, t) = cluster();
        let rs: ReplicaSet = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "api", "namespace": "default"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "api"}},
                "template": {"metadata": {"labels": {"app": "api"}},
                    "spec": {"containers": [{"name": "c", "image": "i"}]}}}
        }))
        .unwrap();
        let rs = c.create(rs).unwrap();
        // A bare pod holding the first name the controller would use.
        let bare: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "api-00000", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "i"}]}
        }))
        .unwrap();
        c.create(bare).unwrap();
        let mut w = Workloads::default();
        assert_eq!(
            w.sync(&c, t).created,
            ["default/api-00001", "default/api-00002"],
            "both replicas in one pass, past the taken name"
        );
        let owned = c
            .list::<Pod>(None, &Selector::everything())
            .items
            .iter()
            .filter(|p| controller_uid(&p.metadata) == rs.metadata.uid.as_deref())
            .count();
        assert_eq!(owned, 2, "the bare pod is not adopted");
    }

    #[test]
    fn stateful_sets_keep_ordinals_and_their_claims() {
        let (c, t) = cluster();
        let s: StatefulSet = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": "default"},
            "spec": {"replicas": 2, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                "template": {"metadata": {"labels": {"app": "db"}},
                    "spec": {"containers": [{"name": "c", "image": "i"}]}},
                "volumeClaimTemplates": [{"metadata": {"name": "data"},
                    "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "gp3",
                        "resources": {"requests": {"storage": "10Gi"}}}}]}
        }))
        .unwrap();
        c.create(s).unwrap();
        let mut w = Workloads::default();
        assert_eq!(w.sync(&c, t).created, ["default/db-0", "default/db-1"]);
        let pod = c
            .get::<Pod>(&crate::cluster::ObjectKey::new("default", "db-1"))
            .unwrap();
        let claim = pod.spec.as_ref().unwrap().volumes.as_ref().unwrap()[0]
            .persistent_volume_claim
            .clone()
            .unwrap();
        assert_eq!(claim.claim_name, "data-db-1");
        assert!(
            c.get_opt::<PersistentVolumeClaim>(&crate::cluster::ObjectKey::new(
                "default",
                "data-db-1"
            ))
            .is_some()
        );
        // db-0 goes (its node is drained): the same name comes back, with
        // the same claim.
        c.delete::<Pod>(&crate::cluster::ObjectKey::new("default", "db-0"))
            .unwrap();
        assert_eq!(w.sync(&c, t).created, ["default/db-0"]);
        let mut s = (*c
            .get::<StatefulSet>(&crate::cluster::ObjectKey::new("default", "db"))
            .unwrap())
        .clone();
        s.spec.replicas = Some(1);
        c.replace(s).unwrap();
        assert_eq!(
            w.sync(&c, t).deleted,
            ["default/db-1"],
            "the highest ordinal goes"
        );
    }
}
