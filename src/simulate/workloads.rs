//! The workload controllers the simulation needs in place of the real
//! kube-controller-manager: a Deployment keeps `replicas` pods (replacing
//! evicted or deleted ones), a Job runs `parallelism` pods until
//! `completions` succeeded. Pods are created pending and unscheduled; the
//! stand-in kube-scheduler binds them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus, PodTemplateSpec};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::Resource;
use kube::api::ObjectMeta;

use crate::clock::Timestamp;
use crate::cluster::{ApiError, MemoryCluster, Selector};

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

impl Workloads {
    /// Brings Deployments and Jobs to their desired pods.
    /// The disruption controller's part: writes each PodDisruptionBudget's
    /// status (expected, desired and current healthy pods, disruptions
    /// allowed) from the current pods, as kube-controller-manager does, so
    /// that what dovetail reads is what a real cluster reports. Returns the
    /// number of budgets whose status changed.
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
            let status = PodDisruptionBudgetStatus {
                current_healthy: Some(s.current_healthy),
                desired_healthy: Some(s.desired_healthy),
                disruptions_allowed: Some(s.disruptions_allowed),
                expected_pods: Some(s.expected_pods),
                observed_generation: b.metadata.generation,
                ..b.status.clone().unwrap_or_default()
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

    pub fn sync(&mut self, cluster: &MemoryCluster, now: Timestamp) -> WorkloadReport {
        let mut report = WorkloadReport::default();
        if self.seen == Some(cluster.resource_version()) {
            return report;
        }
        let pods = cluster.list::<Pod>(None, &Selector::everything()).items;
        // Each pod under the uid of its controlling owner.
        let mut by_owner: HashMap<&str, Vec<&Arc<Pod>>> = HashMap::new();
        for p in &pods {
            if let Some(o) = p
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.controller == Some(true))
            {
                by_owner.entry(o.uid.as_str()).or_default().push(p);
            }
        }
        let owned = |uid: Option<&str>| -> &[&Arc<Pod>] {
            uid.and_then(|u| by_owner.get(u))
                .map(Vec::as_slice)
                .unwrap_or_default()
        };
        for d in cluster
            .list::<Deployment>(None, &Selector::everything())
            .items
        {
            let mine = owned(d.metadata.uid.as_deref());
            self.sync_deployment(cluster, &d, mine, now, &mut report);
        }
        for j in cluster.list::<Job>(None, &Selector::everything()).items {
            let mine = owned(j.metadata.uid.as_deref());
            self.sync_job(cluster, &j, mine, now, &mut report);
        }
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
        let spec = &d.spec;
        let want = usize::try_from(spec.replicas.unwrap_or(1)).unwrap_or(0);
        let mut live: Vec<&Arc<Pod>> = pods
            .iter()
            .copied()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| !matches!(phase(p), "Succeeded" | "Failed"))
            .collect();
        let ns = d
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let base = d.metadata.name.clone().unwrap_or_default();
        // Scale down: newest first, pending before running, as a ReplicaSet does.
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
        let active = mine
            .iter()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && !matches!(phase(p), "Succeeded" | "Failed")
            })
            .count();
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
        let name = format!("{base}-{n:05}");
        *n += 1;
        let meta = template.metadata.clone().unwrap_or_default();
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some(name.clone()),
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
        };
        match cluster.create(pod) {
            Ok(_) => report.created.push(format!("{namespace}/{name}")),
            Err(ApiError::AlreadyExists { .. }) => {}
            Err(e) => report
                .errors
                .push((format!("{namespace}/{name}"), e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{ManualClock, parse_rfc3339};
    use serde_json::json;

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
}
