//! The stand-in kubelet of `dovetail simulate` (with the parts of the
//! DaemonSet controller and the pod garbage collector the simulation needs).
//!
//! [`Kubelet::sync`] runs once per simulation step against the in-memory
//! API server and the simulated EC2's instance list:
//! - an instance that is alive and past its launch delay registers a Node
//!   named after it, with the instance's labels, its instance type's
//!   capacity and allocatable, `spec.providerID`, the
//!   `karpenter.sh/unregistered:NoExecute` taint (dovetail's lifecycle
//!   controller removes it) and `Ready=True`;
//! - a Node whose instance is gone is deleted, unless it has finalizers
//!   (then dovetail's termination controller owns its end); pods bound to a
//!   node that does not exist are force-deleted (grace period 0), as the
//!   pod garbage collector does with orphaned pods;
//! - a pod being deleted gracefully on a node whose kubelet runs (its
//!   `Ready` condition is not `Unknown`) stops: its `Ready` and
//!   `ContainersReady` conditions go `False` at once (its containers are
//!   being stopped), and once its `deletionTimestamp` (the end of its grace
//!   period) has come the kubelet deletes it with a grace period of 0, which
//!   removes it (<https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination>).
//!   Containers take their whole grace period to stop. On a node whose
//!   kubelet stopped reporting, terminating pods stay until the node is
//!   gone;
//! - every DaemonSet gets a running pod on each Node whose `NoSchedule` and
//!   `NoExecute` taints its pods tolerate (with the tolerations the
//!   DaemonSet controller adds) and whose labels match its node selector and
//!   required node affinity;
//! - pods bound to a Ready node start (`Running`, `Ready=True`,
//!   `startTime`); pods of a Job succeed once they have run for the Job's
//!   `simulate.dovetail.dev/duration` annotation (default 10m).
//!
//! Everything is processed in name order, so a sync is deterministic.
//! Like the real kubelets' informers, the kubelets follow the watch log:
//! a sync looks only at the pods that changed, the pods of the nodes that
//! changed and the pods whose time has come (a grace period or a Job pod's
//! run ending), and does exactly what looking at every pod would.
//!
//! # Simplifications
//! - Heartbeats are not renewed: a Node's `lastHeartbeatTime` is its
//!   registration time, and Nodes never become NotReady by themselves.
//! - DaemonSet pods are created bound and running; the DaemonSet controller
//!   does not check resources either (the kubelet would reject a pod that
//!   does not fit). Template changes do not roll out, and pods on nodes the
//!   DaemonSet no longer matches are kept.
//! - Containers have no statuses; only the pod's phase and conditions move.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// The hasher of the kubelet's indexes, which it reads at every sync.
type Hasher = foldhash::fast::RandomState;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Affinity, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus,
    Node, NodeAddress, NodeAffinity, NodeCondition, NodeSelector, NodeSelectorRequirement,
    NodeSelectorTerm, NodeSpec, NodeStatus, NodeSystemInfo, Pod, PodCondition, PodStatus,
    Taint as K8sTaint, Toleration as K8sToleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::Serialize;

use crate::api::labels::{
    LABEL_ARCH, LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, LABEL_OS,
    LABEL_REGION, LABEL_ZONE, TAINT_UNREGISTERED,
};
use crate::clock::{Timestamp, truncate_to_second};
use crate::cloud::{Instance, InstanceState};
use crate::cluster::{DeleteParams, EventType, ObjectKey, Selector};
use crate::model::{Effect, InstanceType, Taint, Toleration};
use crate::scheduling::pod::{VolumeIndex, pod_spec};
use crate::timing::{DurationSyntax, NillableDuration, parse_duration};
use crate::world::MemoryCluster;
use crate::world::ec2::InstanceView;

/// The Job annotation that says how long each of its pods runs.
pub const DURATION_ANNOTATION: &str = "simulate.dovetail.dev/duration";
/// How long a Job's pods run when the Job does not say.
pub const DEFAULT_JOB_DURATION: Duration = Duration::from_secs(10 * 60);

/// EC2 private DNS names end in this in us-east-1 ...
const US_EAST_1_DNS_SUFFIX: &str = "ec2.internal";
/// ... and in `<region>.compute.internal` elsewhere.
const OTHER_REGIONS_DNS_SUFFIX: &str = "compute.internal";
/// Node addresses are drawn from a 10.0.0.0/16 VPC: third octet 0..=255,
/// fourth 1..=254.
const ADDRESS_SPACE: u32 = 256 * 254;

/// Tolerations the DaemonSet controller adds to every DaemonSet pod
/// (`util.AddOrUpdateDaemonPodTolerations`), as (key, effect).
const DAEMON_TOLERATIONS: [(&str, Effect); 6] = [
    ("node.kubernetes.io/not-ready", Effect::NoExecute),
    ("node.kubernetes.io/unreachable", Effect::NoExecute),
    ("node.kubernetes.io/disk-pressure", Effect::NoSchedule),
    ("node.kubernetes.io/memory-pressure", Effect::NoSchedule),
    ("node.kubernetes.io/pid-pressure", Effect::NoSchedule),
    ("node.kubernetes.io/unschedulable", Effect::NoSchedule),
];
/// Added as well for DaemonSets on the host network.
const DAEMON_HOST_NETWORK_TOLERATION: (&str, Effect) =
    ("node.kubernetes.io/network-unavailable", Effect::NoSchedule);

/// What one [`Kubelet::sync`] did, for the simulation's event timeline.
/// Nodes by name, pods as `namespace/name`, each list in the order the
/// changes were made.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KubeletReport {
    /// Nodes registered for newly running instances.
    pub registered: Vec<String>,
    /// Nodes deleted because their instance is gone.
    pub deleted: Vec<String>,
    /// Pods deleted because the node they are bound to does not exist.
    pub orphans_deleted: Vec<String>,
    /// Terminating pods whose containers started stopping (`Ready=False`).
    pub stopping: Vec<String>,
    /// Terminating pods whose grace period ended: the kubelet deleted them
    /// for good.
    pub stopped: Vec<String>,
    /// DaemonSet pods created (already running).
    pub daemon_pods: Vec<String>,
    /// Pods that started running.
    pub started: Vec<String>,
    /// Job pods that succeeded; `completed.len()` is the count.
    pub completed: Vec<String>,
    /// Writes that failed or objects that could not be handled, as
    /// (object, message); the next sync retries.
    pub errors: Vec<(String, String)>,
}

impl KubeletReport {
    /// Whether the sync changed nothing and hit no error.
    pub fn is_empty(&self) -> bool {
        self.registered.is_empty()
            && self.deleted.is_empty()
            && self.orphans_deleted.is_empty()
            && self.stopping.is_empty()
            && self.stopped.is_empty()
            && self.daemon_pods.is_empty()
            && self.started.is_empty()
            && self.completed.is_empty()
            && self.errors.is_empty()
    }
}

/// The cluster's nodes by name.
type NodesByName = BTreeMap<String, Arc<Node>>;

/// The stand-in kubelet of every simulated node.
#[derive(Debug, Clone)]
pub struct Kubelet {
    launch_delay: Duration,
    /// What the kubelets know of the pods between syncs.
    watch: RefCell<PodWatch>,
    /// The nodes and instances as the last sync left them in line, when
    /// it left nothing to retry.
    nodes_settled: RefCell<Option<NodesSettled>>,
    /// The nodes by name, and the resource version they are up to: they
    /// follow the kind's watch log, so a sync after a node changed reads
    /// only the nodes changed since the last.
    nodes_listed: RefCell<Option<(u64, NodesByName)>>,
    /// The kubelets' version (`nodeInfo.kubeletVersion`), from the
    /// cluster's Kubernetes version.
    kubelet_version: String,
    /// With `Some`, a node whose instance is gone first goes `NotReady`
    /// (its kubelet stops posting status) and is removed this long after,
    /// as EKS's node lifecycle controller does; `None` removes it at once.
    node_gone_after: Option<Duration>,
}

impl Kubelet {
    /// Nodes report `kubernetes_version` (`1.33`) as their kubelet's.
    pub fn with_kubernetes_version(mut self, kubernetes_version: &str) -> Self {
        let v = kubernetes_version.trim_start_matches('v');
        self.kubelet_version = if v.split('.').count() >= 3 {
            format!("v{v}")
        } else {
            format!("v{v}.0")
        };
        self
    }

    /// Nodes of gone instances go `NotReady` first and are removed `after`
    /// that (`simulate --serve --controller none`: the cloud's node
    /// lifecycle controller, whose node-monitor grace period is 40 s).
    pub fn with_node_lifecycle(mut self, after: Duration) -> Self {
        self.node_gone_after = Some(after);
        self
    }

    /// A kubelet that registers a node `launch_delay` after its instance
    /// was launched (the scenario's `cloud.launchDelay`).
    pub fn new(launch_delay: Duration) -> Self {
        Kubelet {
            launch_delay,
            watch: RefCell::default(),
            nodes_settled: RefCell::default(),
            nodes_listed: RefCell::default(),
            kubelet_version: "v1.33.0".to_string(),
            node_gone_after: None,
        }
    }

    /// When the next terminating pod's grace period ends (its kubelet then
    /// deletes it), as the last [`Kubelet::sync`] saw the pods.
    pub fn next_stop(&self) -> Option<Timestamp> {
        self.watch.borrow().stops.first().map(|(t, _)| *t)
    }

    /// When the next running Job pod's run ends (its kubelet then marks it
    /// `Succeeded`), as the last [`Kubelet::sync`] saw the pods.
    pub fn next_job_done(&self) -> Option<Timestamp> {
        self.watch.borrow().jobs.first().map(|(t, _)| *t)
    }

    /// When the node of `instance` registers: `launched_at` plus the launch
    /// delay; `None` if the instance is shutting down or terminated.
    pub fn ready_at(&self, instance: &Instance) -> Option<Timestamp> {
        if !is_alive(instance) {
            return None;
        }
        instance.launched_at.checked_add(self.launch_delay).ok()
    }

    /// Brings the cluster in line with the instances at `now`; see the
    /// module documentation. `catalog` gives each instance type's capacity
    /// and allocatable.
    pub fn sync(
        &self,
        cluster: &MemoryCluster,
        instances: &InstanceView,
        catalog: &[InstanceType],
        now: Timestamp,
    ) -> KubeletReport {
        let mut report = KubeletReport::default();
        let mut kept = self.nodes_listed.borrow_mut();
        let settled = self.nodes_settled.borrow().as_ref().is_some_and(|s| {
            s.nodes == cluster.kind_revision::<Node>()
                && Arc::ptr_eq(&s.instances, instances)
                && s.next_registration.is_none_or(|t| t > now)
        });
        let mut listed = false;
        if !settled {
            let nodes = nodes_now(cluster, &mut kept);
            let errors = report.errors.len();
            let next_registration =
                self.register_nodes(cluster, instances, catalog, now, nodes, &mut report);
            delete_nodes_without_instance(
                cluster,
                instances,
                nodes,
                &mut report,
                self.node_gone_after.map(|after| (after, now)),
            );
            // With the node lifecycle, a gone instance's node is removed
            // some time after: not settled.
            *self.nodes_settled.borrow_mut() = (report.errors.len() == errors
                && self.node_gone_after.is_none())
            .then(|| NodesSettled {
                nodes: cluster.kind_revision::<Node>(),
                instances: instances.clone(),
                next_registration,
            });
            listed = true;
        }
        let mut watch = self.watch.borrow_mut();
        let pods = watch.catch_up(cluster, now);
        if pods.is_empty() && !watch.daemons_changed {
            return report;
        }
        // Those the sync wrote are in the kept nodes already.
        let nodes: &NodesByName = if listed {
            kept.as_ref().map(|(_, n)| n).expect("listed")
        } else {
            nodes_now(cluster, &mut kept)
        };
        let mut jobs = JobDurations::default();
        for pod in &pods {
            match pod_action(cluster, pod, nodes, now, &mut jobs, &mut report) {
                Ok(Some(due)) => watch.due(due, pod),
                Ok(None) => {}
                Err(()) => {
                    watch.retry.insert(ObjectKey::of(pod.as_ref()));
                }
            }
        }
        if watch.daemons_changed {
            run_daemon_sets(cluster, nodes, &watch, now, &mut report);
            watch.daemons_changed = false;
        }
        report
    }

    fn register_nodes(
        &self,
        cluster: &MemoryCluster,
        instances: &[Arc<Instance>],
        catalog: &[InstanceType],
        now: Timestamp,
        nodes: &mut BTreeMap<String, Arc<Node>>,
        report: &mut KubeletReport,
    ) -> Option<Timestamp> {
        let registered: HashSet<&str, foldhash::fast::RandomState> = nodes
            .values()
            .filter_map(|n| n.spec.as_ref()?.provider_id.as_deref())
            .collect();
        let unregistered = || {
            instances
                .iter()
                .map(|i| &**i)
                .filter(|i| !registered.contains(i.provider_id.as_str()))
                .filter_map(|i| Some((i, self.ready_at(i)?)))
        };
        let next = unregistered().map(|(_, t)| t).filter(|t| *t > now).min();
        let mut due: Vec<&Instance> = unregistered()
            .filter(|(_, t)| *t <= now)
            .map(|(i, _)| i)
            .collect();
        due.sort_by(|a, b| a.id.cmp(&b.id));
        for instance in due {
            let Some(instance_type) = catalog.iter().find(|t| t.name == instance.instance_type)
            else {
                report.errors.push((
                    format!("instance/{}", instance.id),
                    format!(
                        "instance type {} is not in the catalog",
                        instance.instance_type
                    ),
                ));
                continue;
            };
            let address = free_address(&instance.id, |a| {
                nodes.contains_key(&node_name_for(a, instance))
            });
            let mut node = new_node(instance, instance_type, address, now);
            if let Some(status) = node.status.as_mut() {
                status.node_info = Some(node_info(
                    &node.metadata,
                    &self.kubelet_version,
                    &instance.id,
                ));
            }
            let name = node.metadata.name.clone().unwrap_or_default();
            match cluster.create(node) {
                Ok(created) => {
                    nodes.insert(name.clone(), created);
                    report.registered.push(name);
                }
                Err(e) => report.errors.push((name, e.to_string())),
            }
        }
        next
    }
}

/// The cluster's nodes by name: `kept` (with the resource version it is up
/// to) brought up to date through the kind's watch log, or listed anew
/// when there is none or the log no longer reaches back to it. Nodes a
/// caller wrote into it itself since (as a sync does) are written again by
/// their events, to the same end.
fn nodes_now<'k>(
    cluster: &MemoryCluster,
    kept: &'k mut Option<(u64, NodesByName)>,
) -> &'k mut NodesByName {
    let events = kept
        .as_ref()
        .and_then(|(at, _)| cluster.watch_from::<Node>(*at).ok());
    match (events, kept) {
        (Some(events), Some((at, nodes))) => {
            for e in events {
                *at = (*at).max(e.resource_version);
                let name = e.object.metadata.name.clone().unwrap_or_default();
                match e.event_type {
                    EventType::Deleted => drop(nodes.remove(&name)),
                    EventType::Added | EventType::Modified => drop(nodes.insert(name, e.object)),
                }
            }
            nodes
        }
        (_, kept) => {
            let listed = cluster.list::<Node>(None, &Selector::everything());
            let nodes = listed
                .items
                .into_iter()
                .map(|n| (n.metadata.name.clone().unwrap_or_default(), n))
                .collect();
            &mut kept.insert((listed.resource_version, nodes)).1
        }
    }
}

/// The inputs of the nodes' part of a sync that left everything in line:
/// while the Nodes and the instances are these and no registration is due,
/// it has nothing to do.
#[derive(Debug, Clone)]
struct NodesSettled {
    /// The Node kind's revision after it.
    nodes: u64,
    /// The instance list it saw (shared and never changed in place; held,
    /// so its address identifies it).
    instances: InstanceView,
    /// When the next instance's node registers.
    next_registration: Option<Timestamp>,
}

/// When a pod needs its kubelet again although nothing changes: the end
/// of its grace period, or the end of its Job pod's run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Due {
    Stop(Timestamp),
    JobDone(Timestamp),
}

/// What the kubelets know of the pods between syncs, caught up from the
/// watch log as the real kubelets' informers are: a sync looks only at the
/// pods that changed, the pods of the nodes that changed, and the pods
/// whose time has come (or whose last write failed). The first sync, and
/// one after the log was compacted past the last, look at every pod.
#[derive(Debug, Clone, Default)]
struct PodWatch {
    /// The cluster's resource version the watch has seen up to; `None`
    /// before the first sync.
    revision: Option<u64>,
    /// Bound pods by node name.
    on_node: HashMap<String, BTreeSet<ObjectKey>, Hasher>,
    /// Each bound pod's node, and the uid of its DaemonSet if it is a
    /// DaemonSet's pod.
    bound: HashMap<ObjectKey, (String, Option<String>), Hasher>,
    /// The bound DaemonSet pods: how many by DaemonSet uid and node.
    daemon_pods: HashMap<String, HashMap<String, u32, Hasher>, Hasher>,
    /// Terminating pods by the end of their grace period.
    stops: BTreeSet<(Timestamp, ObjectKey)>,
    /// Running Job pods by the end of their run.
    jobs: BTreeSet<(Timestamp, ObjectKey)>,
    due_of: HashMap<ObjectKey, Due, Hasher>,
    /// Pods whose last write failed.
    retry: BTreeSet<ObjectKey>,
    /// Whether a node, a pod or a DaemonSet changed since the DaemonSets
    /// were last brought to every node.
    daemons_changed: bool,
}

impl PodWatch {
    /// The pods to look at now, in key order, with the indexes brought up
    /// to date.
    fn catch_up(&mut self, cluster: &MemoryCluster, now: Timestamp) -> Vec<Arc<Pod>> {
        let changes = self.revision.and_then(|rv| {
            Some((
                cluster.watch_from::<Pod>(rv).ok()?,
                cluster.watch_from::<Node>(rv).ok()?,
                cluster.watch_from::<Job>(rv).ok()?,
                cluster.watch_from::<DaemonSet>(rv).ok()?,
            ))
        });
        let revision = cluster.resource_version();
        let Some((pod_events, node_events, job_events, daemon_set_events)) = changes else {
            let pods = cluster.list::<Pod>(None, &Selector::everything()).items;
            *self = PodWatch {
                revision: Some(revision),
                daemons_changed: true,
                ..PodWatch::default()
            };
            for pod in &pods {
                self.index(pod);
            }
            return pods;
        };
        self.revision = Some(revision);
        self.daemons_changed |=
            !pod_events.is_empty() || !node_events.is_empty() || !daemon_set_events.is_empty();
        let mut examine = std::mem::take(&mut self.retry);
        examine.extend(pod_events.iter().map(|e| ObjectKey::of(e.object.as_ref())));
        for e in &node_events {
            let name = e.object.metadata.name.as_deref().unwrap_or_default();
            examine.extend(self.on_node.get(name).into_iter().flatten().cloned());
        }
        // A Job's duration may have changed: its running pods look again.
        if !job_events.is_empty() {
            examine.extend(self.jobs.iter().map(|(_, key)| key.clone()));
        }
        for due in [&mut self.stops, &mut self.jobs] {
            while due.first().is_some_and(|(t, _)| *t <= now) {
                examine.extend(due.pop_first().map(|(_, key)| key));
            }
        }
        let mut pods = Vec::with_capacity(examine.len());
        for key in examine {
            self.unindex(&key);
            if let Some(pod) = cluster.get_opt::<Pod>(&key) {
                self.index(&pod);
                pods.push(pod);
            }
        }
        pods
    }

    fn index(&mut self, pod: &Pod) {
        let Some(node) = node_name(pod) else {
            return;
        };
        let key = ObjectKey::of(pod);
        let daemon_set = controller_of_kind(pod, "DaemonSet").map(|r| r.uid.clone());
        self.unindex_node(&key);
        self.on_node
            .entry(node.to_string())
            .or_default()
            .insert(key.clone());
        if let Some(uid) = &daemon_set {
            *self
                .daemon_pods
                .entry(uid.clone())
                .or_default()
                .entry(node.to_string())
                .or_default() += 1;
        }
        self.bound.insert(key, (node.to_string(), daemon_set));
    }

    /// Forgets the pod at `key`: its node and anything due.
    fn unindex(&mut self, key: &ObjectKey) {
        self.unindex_node(key);
        match self.due_of.remove(key) {
            Some(Due::Stop(t)) => self.stops.remove(&(t, key.clone())),
            Some(Due::JobDone(t)) => self.jobs.remove(&(t, key.clone())),
            None => false,
        };
    }

    /// Forgets the node the pod at `key` is bound to.
    fn unindex_node(&mut self, key: &ObjectKey) {
        let Some((node, daemon_set)) = self.bound.remove(key) else {
            return;
        };
        if let Some(on_node) = self.on_node.get_mut(&node) {
            on_node.remove(key);
            if on_node.is_empty() {
                self.on_node.remove(&node);
            }
        }
        if let Some(uid) = daemon_set
            && let Some(by_node) = self.daemon_pods.get_mut(&uid)
        {
            if let Some(count) = by_node.get_mut(&node) {
                *count -= 1;
                if *count == 0 {
                    by_node.remove(&node);
                }
            }
            if by_node.is_empty() {
                self.daemon_pods.remove(&uid);
            }
        }
    }

    fn due(&mut self, due: Due, pod: &Pod) {
        let key = ObjectKey::of(pod);
        match due {
            Due::Stop(t) => self.stops.insert((t, key.clone())),
            Due::JobDone(t) => self.jobs.insert((t, key.clone())),
        };
        self.due_of.insert(key, due);
    }

    /// Whether a pod of the DaemonSet `uid` is bound to `node`.
    fn has_daemon_pod(&self, uid: &str, node: &str) -> bool {
        self.daemon_pods
            .get(uid)
            .is_some_and(|by_node| by_node.contains_key(node))
    }
}

/// What the pod's kubelet does with it now (see the module
/// documentation), and when it must look at it again; `Err` when a write
/// failed (in the report's errors).
fn pod_action(
    cluster: &MemoryCluster,
    pod: &Pod,
    nodes: &NodesByName,
    now: Timestamp,
    jobs: &mut JobDurations,
    report: &mut KubeletReport,
) -> Result<Option<Due>, ()> {
    let Some(node_name) = node_name(pod) else {
        return Ok(None);
    };
    let key = ObjectKey::of(pod);
    let failed = |report: &mut KubeletReport, e: crate::cluster::ApiError| {
        report.errors.push((key.to_string(), e.to_string()));
        Err(())
    };
    // A pod already deleted with a grace period of 0 waits for its
    // finalizers alone.
    let forced = pod.metadata.deletion_grace_period_seconds == Some(0);
    let Some(node) = nodes.get(node_name) else {
        if pod.metadata.deletion_timestamp.is_some() && forced {
            return Ok(None);
        }
        return match cluster.delete_with::<Pod>(&key, &DeleteParams::with_grace_period(0)) {
            Ok(_) => {
                report.orphans_deleted.push(key.to_string());
                Ok(None)
            }
            Err(e) => failed(report, e),
        };
    };
    if let Some(deleted) = &pod.metadata.deletion_timestamp {
        if forced || !kubelet_runs(node) {
            return Ok(None);
        }
        if deleted.0 <= now {
            return match cluster.delete_with::<Pod>(&key, &DeleteParams::with_grace_period(0)) {
                Ok(_) => {
                    report.stopped.push(key.to_string());
                    Ok(None)
                }
                Err(e) if e.is_not_found() => Ok(None),
                Err(e) => failed(report, e),
            };
        }
        if crate::api::pod::is_ready(pod) {
            match cluster.update_status_with::<Pod>(&key, |p| stop_pod(p, now)) {
                Ok(_) => report.stopping.push(key.to_string()),
                Err(e) => return failed(report, e),
            }
        }
        return Ok(Some(Due::Stop(deleted.0)));
    }
    match phase(pod) {
        None | Some("Pending") if crate::api::node::is_ready(node) => {
            match cluster.update_status_with::<Pod>(&key, |p| start_pod(p, now)) {
                Ok(_) => report.started.push(key.to_string()),
                Err(e) => return failed(report, e),
            }
        }
        Some("Running") => {
            let Some(job) = controller_of_kind(pod, "Job") else {
                return Ok(None);
            };
            let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
            let duration = jobs.get(cluster, namespace, &job.name, report);
            let started = pod
                .status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .or(pod.metadata.creation_timestamp.as_ref())
                .map(|t| t.0);
            let Some(end) = started.and_then(|s| s.checked_add(duration).ok()) else {
                return Ok(None);
            };
            if end > now {
                return Ok(Some(Due::JobDone(end)));
            }
            match cluster.update_status_with::<Pod>(&key, |p| complete_pod(p, now)) {
                Ok(_) => report.completed.push(key.to_string()),
                Err(e) => return failed(report, e),
            }
        }
        _ => {}
    }
    Ok(None)
}

fn is_alive(instance: &Instance) -> bool {
    matches!(
        instance.state,
        InstanceState::Pending | InstanceState::Running
    )
}

/// Deletes Nodes whose provider id names no live instance.
fn delete_nodes_without_instance(
    cluster: &MemoryCluster,
    instances: &[Arc<Instance>],
    nodes: &mut BTreeMap<String, Arc<Node>>,
    report: &mut KubeletReport,
    lifecycle: Option<(Duration, Timestamp)>,
) {
    let alive: HashSet<&str, foldhash::fast::RandomState> = instances
        .iter()
        .filter(|i| is_alive(i))
        .map(|i| i.provider_id.as_str())
        .collect();
    let gone: Vec<String> = nodes
        .iter()
        .filter(|(_, n)| {
            let provider_id = n.spec.as_ref().and_then(|s| s.provider_id.as_deref());
            provider_id.is_some_and(|p| !p.is_empty() && !alive.contains(p))
                && n.metadata.finalizers.as_ref().is_none_or(Vec::is_empty)
        })
        .map(|(name, _)| name.clone())
        .collect();
    for name in gone {
        if let Some((after, now)) = lifecycle
            && !unreachable_for(cluster, &name, after, now, report)
        {
            continue;
        }
        match cluster.delete::<Node>(&ObjectKey::cluster(&name)) {
            Ok(outcome) if outcome.is_deleted() => {
                nodes.remove(&name);
                report.deleted.push(name);
            }
            // A finalizer appeared since the list: the controller owns it.
            Ok(_) => {}
            Err(e) => report.errors.push((name, e.to_string())),
        }
    }
}

/// Marks a node whose instance is gone `Ready=Unknown` and tainted
/// unreachable, as the node lifecycle controller does when its kubelet
/// stops posting status; whether it has been so for `after` (then the
/// cloud's node lifecycle controller removes it).
fn unreachable_for(
    cluster: &MemoryCluster,
    name: &str,
    after: Duration,
    now: Timestamp,
    report: &mut KubeletReport,
) -> bool {
    let key = ObjectKey::cluster(name);
    let Some(node) = cluster.get_opt::<Node>(&key) else {
        return false;
    };
    let since = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| {
            c.iter()
                .find(|c| c.type_ == "Ready" && c.status == "Unknown")
        })
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0);
    if let Some(since) = since {
        return now.duration_since(since) >= jiff_span(after);
    }
    let stamp = Time(truncate_to_second(now));
    let marked = cluster.update_status_with::<Node>(&key, |n| {
        let status = n.status.get_or_insert_default();
        for c in status.conditions.get_or_insert_default().iter_mut() {
            if c.type_ == "Ready" {
                c.status = "Unknown".into();
                c.reason = Some("NodeStatusUnknown".into());
                c.message = Some("Kubelet stopped posting node status.".into());
                c.last_transition_time = Some(stamp.clone());
            }
        }
    });
    let tainted = cluster.update_with::<Node>(&key, |n| {
        let taints = n
            .spec
            .get_or_insert_default()
            .taints
            .get_or_insert_default();
        if !taints.iter().any(|t| t.key == TAINT_UNREACHABLE) {
            taints.push(K8sTaint {
                key: TAINT_UNREACHABLE.into(),
                effect: "NoExecute".into(),
                time_added: Some(stamp.clone()),
                ..K8sTaint::default()
            });
        }
    });
    if let Err(e) = marked.and(tainted) {
        report.errors.push((name.to_string(), e.to_string()));
    }
    after.is_zero()
}

fn jiff_span(d: Duration) -> k8s_openapi::jiff::SignedDuration {
    k8s_openapi::jiff::SignedDuration::try_from(d).unwrap_or(k8s_openapi::jiff::SignedDuration::MAX)
}

/// The taint the node lifecycle controller puts on a node whose kubelet
/// stopped posting status.
const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";

/// What a kubelet reports of its machine (`status.nodeInfo`).
fn node_info(meta: &ObjectMeta, kubelet_version: &str, instance_id: &str) -> NodeSystemInfo {
    let label = |k: &str| {
        meta.labels
            .as_ref()
            .and_then(|l| l.get(k))
            .cloned()
            .unwrap_or_default()
    };
    NodeSystemInfo {
        architecture: label(LABEL_ARCH),
        operating_system: label(LABEL_OS),
        kubelet_version: kubelet_version.to_string(),
        kube_proxy_version: kubelet_version.to_string(),
        os_image: "Amazon Linux 2023".into(),
        kernel_version: "6.1.0".into(),
        container_runtime_version: "containerd://1.7.27".into(),
        machine_id: instance_id.to_string(),
        system_uuid: instance_id.to_string(),
        boot_id: instance_id.to_string(),
        ..NodeSystemInfo::default()
    }
}

/// A deterministic private address for an instance: a hash of its id,
/// probing forward past addresses whose node name is `taken`.
fn free_address(id: &str, taken: impl Fn(u32) -> bool) -> u32 {
    let start = u32::try_from(fnv1a(id) % u64::from(ADDRESS_SPACE)).unwrap_or(0);
    (0..ADDRESS_SPACE)
        .map(|i| (start + i) % ADDRESS_SPACE)
        .find(|a| !taken(*a))
        .unwrap_or(start)
}

fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn octets(address: u32) -> (u32, u32) {
    (address / 254, address % 254 + 1)
}

fn region_of(instance: &Instance) -> String {
    match instance.labels.get(LABEL_REGION) {
        Some(r) => r.clone(),
        None => instance
            .zone
            .trim_end_matches(|c: char| c.is_ascii_lowercase())
            .to_string(),
    }
}

/// `ip-10-0-<n>-<m>.ec2.internal` (or `.<region>.compute.internal`).
fn node_name_for(address: u32, instance: &Instance) -> String {
    let (n, m) = octets(address);
    let region = region_of(instance);
    if region == "us-east-1" {
        format!("ip-10-0-{n}-{m}.{US_EAST_1_DNS_SUFFIX}")
    } else {
        format!("ip-10-0-{n}-{m}.{region}.{OTHER_REGIONS_DNS_SUFFIX}")
    }
}

/// The Node an instance registers.
fn new_node(
    instance: &Instance,
    instance_type: &InstanceType,
    address: u32,
    now: Timestamp,
) -> Node {
    let name = node_name_for(address, instance);
    let (n, m) = octets(address);
    let mut labels = (*instance.labels).clone();
    let mut set = |k: &str, v: &str| {
        if !v.is_empty() {
            labels.insert(k.to_string(), v.to_string());
        }
    };
    set(LABEL_HOSTNAME, &name);
    set(LABEL_INSTANCE_TYPE, &instance.instance_type);
    set(LABEL_ZONE, &instance.zone);
    set(LABEL_REGION, &region_of(instance));
    set(LABEL_CAPACITY_TYPE, &instance.capacity_type);
    set(LABEL_NODEPOOL, &instance.nodepool);
    for (key, default) in [(LABEL_ARCH, "amd64"), (LABEL_OS, "linux")] {
        if !labels.contains_key(key) {
            let value = instance_type
                .requirements
                .single_value(key)
                .unwrap_or(default);
            labels.insert(key.to_string(), value.to_string());
        }
    }
    let now = Time(truncate_to_second(now));
    Node {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(instance.provider_id.clone()),
            taints: Some(vec![K8sTaint {
                key: TAINT_UNREGISTERED.to_string(),
                effect: Effect::NoExecute.as_str().to_string(),
                ..K8sTaint::default()
            }]),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            capacity: Some(instance_type.capacity.to_quantities()),
            allocatable: Some(instance_type.allocatable.to_quantities()),
            addresses: Some(vec![
                NodeAddress {
                    type_: "InternalIP".into(),
                    address: format!("10.0.{n}.{m}"),
                },
                NodeAddress {
                    type_: "InternalDNS".into(),
                    address: name.clone(),
                },
                NodeAddress {
                    type_: "Hostname".into(),
                    address: name,
                },
            ]),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: Some("KubeletReady".into()),
                message: Some("kubelet is posting ready status".into()),
                last_heartbeat_time: Some(now.clone()),
                last_transition_time: Some(now),
            }]),
            ..NodeStatus::default()
        }),
    }
}

/// Whether the node's kubelet runs: it reports the node's `Ready`
/// condition (`True` or `False`; `Unknown` means it stopped reporting).
fn kubelet_runs(node: &Node) -> bool {
    !node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Ready" && c.status == "Unknown")
        })
}

/// Whether a pod has the condition `Ready=True`.
fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()?
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.phase.as_deref()
}

fn controller_of_kind<'a>(pod: &'a Pod, kind: &str) -> Option<&'a OwnerReference> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true) && r.kind == kind)
}

/// Sets a pod condition, keeping the transition time when the status is
/// unchanged.
fn set_condition(
    status: &mut PodStatus,
    type_: &str,
    value: bool,
    reason: Option<&str>,
    now: &Time,
) {
    let conditions = status.conditions.get_or_insert_default();
    let value = if value { "True" } else { "False" };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) if c.status == value => c.reason = reason.map(Into::into),
        Some(c) => {
            c.status = value.into();
            c.reason = reason.map(Into::into);
            c.last_transition_time = Some(now.clone());
        }
        None => conditions.push(PodCondition {
            type_: type_.into(),
            status: value.into(),
            reason: reason.map(Into::into),
            last_transition_time: Some(now.clone()),
            ..PodCondition::default()
        }),
    }
}

fn running_status(status: &mut PodStatus, now: Timestamp) {
    let now = Time(truncate_to_second(now));
    status.phase = Some("Running".into());
    status.start_time.get_or_insert_with(|| now.clone());
    for type_ in [
        "PodReadyToStartContainers",
        "Initialized",
        "ContainersReady",
        "Ready",
    ] {
        set_condition(status, type_, true, None, &now);
    }
}

fn start_pod(pod: &mut Pod, now: Timestamp) {
    running_status(pod.status.get_or_insert_default(), now);
    let started = Time(truncate_to_second(now));
    let statuses = container_statuses(
        pod,
        |_| ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(started.clone()),
            }),
            ..ContainerState::default()
        },
        true,
    );
    pod.status.get_or_insert_default().container_statuses = Some(statuses);
}

/// A terminating pod whose containers are being stopped: no longer ready.
fn stop_pod(pod: &mut Pod, now: Timestamp) {
    let status = pod.status.get_or_insert_default();
    let now = Time(truncate_to_second(now));
    for type_ in ["ContainersReady", "Ready"] {
        set_condition(status, type_, false, Some("PodTerminating"), &now);
    }
}

/// A status per container of the pod, each in `state`.
fn container_statuses(
    pod: &Pod,
    state: impl Fn(&str) -> ContainerState,
    ready: bool,
) -> Vec<ContainerStatus> {
    pod.spec
        .iter()
        .flat_map(|s| &s.containers)
        .map(|c| ContainerStatus {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            image_id: String::new(),
            ready,
            started: Some(ready),
            restart_count: 0,
            state: Some(state(&c.name)),
            ..ContainerStatus::default()
        })
        .collect()
}

fn complete_pod(pod: &mut Pod, now: Timestamp) {
    let finished = Time(truncate_to_second(now));
    let statuses = container_statuses(
        pod,
        |_| ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 0,
                reason: Some("Completed".into()),
                finished_at: Some(finished.clone()),
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        },
        false,
    );
    pod.status.get_or_insert_default().container_statuses = Some(statuses);
    let status = pod.status.get_or_insert_default();
    status.phase = Some("Succeeded".into());
    let now = Time(truncate_to_second(now));
    for type_ in ["ContainersReady", "Ready"] {
        set_condition(status, type_, false, Some("PodCompleted"), &now);
    }
}

/// Job durations, read once per sync.
#[derive(Default)]
struct JobDurations(HashMap<(String, String), Duration>);

impl JobDurations {
    fn get(
        &mut self,
        cluster: &MemoryCluster,
        namespace: &str,
        name: &str,
        report: &mut KubeletReport,
    ) -> Duration {
        let key = (namespace.to_string(), name.to_string());
        if let Some(d) = self.0.get(&key) {
            return *d;
        }
        let object = ObjectKey::new(namespace, name);
        let annotation = cluster.get_opt::<Job>(&object).and_then(|job| {
            job.metadata
                .annotations
                .as_ref()?
                .get(DURATION_ANNOTATION)
                .cloned()
        });
        let duration = match annotation.map(|a| parse_duration(&a, DurationSyntax::Hms)) {
            None => DEFAULT_JOB_DURATION,
            Some(Ok(NillableDuration::After(d))) => d,
            Some(Ok(NillableDuration::Never)) => DEFAULT_JOB_DURATION,
            Some(Err(e)) => {
                report.errors.push((
                    format!("job/{object}"),
                    format!("{DURATION_ANNOTATION}: {e}; using the default"),
                ));
                DEFAULT_JOB_DURATION
            }
        };
        self.0.insert(key, duration);
        duration
    }
}

/// One DaemonSet, ready to be matched against nodes.
struct Daemon<'a> {
    ds: &'a DaemonSet,
    /// The pod every node gets, before binding.
    template: Pod,
    tolerations: Vec<Toleration>,
    spec: crate::scheduling::PodSpec,
}

impl Daemon<'_> {
    fn should_run_on(&self, node: &Node) -> bool {
        let labels = node.metadata.labels.clone().unwrap_or_default();
        if self.spec.node_selector.matches_labels(&labels).is_err() {
            return false;
        }
        if !self.spec.required_terms.is_empty()
            && !self
                .spec
                .required_terms
                .iter()
                .any(|t| t.matches_labels(&labels).is_ok())
        {
            return false;
        }
        node.spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|t| Taint::from_k8s(t).ok())
            .filter(|t| t.effect != Effect::PreferNoSchedule)
            .all(|t| self.tolerations.iter().any(|tol| tol.tolerates(&t)))
    }
}

/// The DaemonSet's pod template with the tolerations its controller adds.
fn daemon<'a>(ds: &'a DaemonSet) -> Result<Daemon<'a>, String> {
    let template = ds.spec.template.clone();
    let mut spec = template.spec.unwrap_or_default();
    let mut added: Vec<(&str, Effect)> = DAEMON_TOLERATIONS.to_vec();
    if spec.host_network == Some(true) {
        added.push(DAEMON_HOST_NETWORK_TOLERATION);
    }
    let tolerations = spec.tolerations.get_or_insert_default();
    for (key, effect) in added {
        let present = tolerations.iter().any(|t| {
            t.key.as_deref() == Some(key)
                && t.operator.as_deref() == Some("Exists")
                && t.effect.as_deref() == Some(effect.as_str())
        });
        if !present {
            tolerations.push(K8sToleration {
                key: Some(key.into()),
                operator: Some("Exists".into()),
                effect: Some(effect.as_str().into()),
                ..K8sToleration::default()
            });
        }
    }
    let meta = template.metadata.unwrap_or_default();
    let template = Pod {
        metadata: ObjectMeta {
            namespace: ds.metadata.namespace.clone(),
            labels: meta.labels,
            annotations: meta.annotations,
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "DaemonSet".into(),
                name: ds.metadata.name.clone().unwrap_or_default(),
                uid: ds.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    };
    let parsed = pod_spec(
        &crate::api::SlimPod::from(&template),
        &VolumeIndex::default(),
        0,
    )
    .map_err(|e| e.message)?;
    Ok(Daemon {
        ds,
        tolerations: parsed.tolerations.clone(),
        spec: parsed,
        template,
    })
}

/// The pod of `daemon` for `node`: bound, pinned with the `matchFields`
/// node affinity the DaemonSet controller uses, and already running.
fn daemon_pod(daemon: &Daemon<'_>, node: &str, now: Timestamp) -> Pod {
    let mut pod = daemon.template.clone();
    let ds_name = daemon.ds.metadata.name.as_deref().unwrap_or_default();
    let suffix = node.split('.').next().unwrap_or(node);
    pod.metadata.name = Some(format!("{ds_name}-{suffix}"));
    let spec = pod.spec.get_or_insert_default();
    spec.node_name = Some(node.to_string());
    let pin = NodeSelector {
        node_selector_terms: vec![NodeSelectorTerm {
            match_fields: Some(vec![NodeSelectorRequirement {
                key: "metadata.name".into(),
                operator: "In".into(),
                values: Some(vec![node.to_string()]),
            }]),
            match_expressions: None,
        }],
    };
    let affinity = spec.affinity.get_or_insert_with(Affinity::default);
    affinity
        .node_affinity
        .get_or_insert_with(NodeAffinity::default)
        .required_during_scheduling_ignored_during_execution = Some(pin);
    let status = pod.status.get_or_insert_default();
    running_status(status, now);
    set_condition(
        status,
        "PodScheduled",
        true,
        None,
        &Time(truncate_to_second(now)),
    );
    pod
}

fn run_daemon_sets(
    cluster: &MemoryCluster,
    nodes: &BTreeMap<String, Arc<Node>>,
    existing: &PodWatch,
    now: Timestamp,
    report: &mut KubeletReport,
) {
    let daemon_sets = cluster
        .list::<DaemonSet>(None, &Selector::everything())
        .items;
    for ds in &daemon_sets {
        if ds.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let uid = ds.metadata.uid.as_deref().unwrap_or_default();
        let missing: BTreeSet<&str> = nodes
            .keys()
            .map(String::as_str)
            .filter(|n| !existing.has_daemon_pod(uid, n))
            .collect();
        if missing.is_empty() {
            continue;
        }
        let daemon = match daemon(ds) {
            Ok(d) => d,
            Err(e) => {
                report
                    .errors
                    .push((format!("daemonset/{}", ObjectKey::of(ds.as_ref())), e));
                continue;
            }
        };
        for name in missing {
            let Some(node) = nodes.get(name) else {
                continue;
            };
            if node.metadata.deletion_timestamp.is_some() || !daemon.should_run_on(node) {
                continue;
            }
            let pod = daemon_pod(&daemon, name, now);
            let key = ObjectKey::of(&pod);
            match cluster.create(pod) {
                Ok(_) => report.daemon_pods.push(key.to_string()),
                Err(e) => report.errors.push((key.to_string(), e.to_string())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::clock::{Clock, ManualClock, parse_rfc3339};
    use crate::model::{Overhead, Requirements, Resources};
    use crate::testing::{node, pod};

    const DELAY: Duration = Duration::from_secs(45);

    fn start() -> Timestamp {
        parse_rfc3339("2026-01-05T00:00:00Z").expect("valid time")
    }

    fn cluster() -> (MemoryCluster, ManualClock) {
        let clock = ManualClock::new(start());
        (MemoryCluster::new(Arc::new(clock.clone())), clock)
    }

    fn catalog() -> Vec<InstanceType> {
        let mut requirements = Requirements::new();
        requirements.add(LABEL_ARCH, crate::model::Requirement::in_values(["arm64"]));
        vec![InstanceType {
            name: "m7g.large".into(),
            requirements,
            capacity: Resources::parse([("cpu", "2"), ("memory", "8Gi"), ("pods", "29")])
                .expect("valid"),
            overhead: Overhead::default(),
            allocatable: Resources::parse([("cpu", "1930m"), ("memory", "7Gi"), ("pods", "29")])
                .expect("valid"),
            offerings: Vec::new(),
        }]
    }

    fn view(instances: Vec<Instance>) -> InstanceView {
        Arc::new(instances.into_iter().map(Arc::new).collect())
    }

    fn instance(id: &str, launched_at: Timestamp) -> Instance {
        Instance {
            id: id.into(),
            provider_id: format!("aws:///us-east-1a/{id}"),
            instance_type: "m7g.large".into(),
            zone: "us-east-1a".into(),
            capacity_type: "spot".into(),
            price: 0.05,
            launched_at,
            state: InstanceState::Running,
            nodeclaim: "default-abcde".into(),
            nodepool: "default".into(),
            labels: BTreeMap::from([("team".to_string(), "platform".to_string())]).into(),
            image_id: None,
            subnet_id: None,
            security_group_ids: Vec::new(),
            launch_batch: Vec::new(),
            efa_attached: false,
        }
    }

    fn at(seconds: u64) -> Timestamp {
        start()
            .checked_add(Duration::from_secs(seconds))
            .expect("in range")
    }

    fn nodes(cluster: &MemoryCluster) -> Vec<Arc<Node>> {
        cluster.list::<Node>(None, &Selector::everything()).items
    }

    fn pods(cluster: &MemoryCluster) -> Vec<Arc<Pod>> {
        cluster.list::<Pod>(None, &Selector::everything()).items
    }

    #[test]
    fn a_running_instance_registers_its_node_after_the_launch_delay() {
        let (cluster, _) = cluster();
        let kubelet = Kubelet::new(DELAY);
        let instances = view(vec![instance("i-0abc", start())]);
        assert!(
            kubelet
                .sync(&cluster, &instances, &catalog(), at(44))
                .is_empty()
        );
        assert!(nodes(&cluster).is_empty());
        let report = kubelet.sync(&cluster, &instances, &catalog(), at(45));
        assert_eq!(report.registered.len(), 1, "{report:?}");
        let node = &nodes(&cluster)[0];
        let name = node.metadata.name.clone().unwrap_or_default();
        assert!(
            name.starts_with("ip-10-0-") && name.ends_with(".ec2.internal"),
            "{name}"
        );
        let spec = node.spec.as_ref().expect("spec");
        assert_eq!(
            spec.provider_id.as_deref(),
            Some("aws:///us-east-1a/i-0abc")
        );
        let taints = spec.taints.as_ref().expect("taints");
        assert_eq!(taints.len(), 1);
        assert_eq!(taints[0].key, TAINT_UNREGISTERED);
        assert_eq!(taints[0].effect, "NoExecute");
        let labels = node.metadata.labels.as_ref().expect("labels");
        for (key, value) in [
            (LABEL_HOSTNAME, name.as_str()),
            (LABEL_INSTANCE_TYPE, "m7g.large"),
            (LABEL_ZONE, "us-east-1a"),
            (LABEL_REGION, "us-east-1"),
            (LABEL_CAPACITY_TYPE, "spot"),
            (LABEL_NODEPOOL, "default"),
            (LABEL_ARCH, "arm64"),
            (LABEL_OS, "linux"),
            ("team", "platform"),
        ] {
            assert_eq!(labels.get(key).map(String::as_str), Some(value), "{key}");
        }
        let status = node.status.as_ref().expect("status");
        let allocatable = status.allocatable.as_ref().expect("allocatable");
        assert_eq!(allocatable["cpu"].0, "1930m");
        assert_eq!(allocatable["memory"].0, "7Gi");
        assert_eq!(status.capacity.as_ref().expect("capacity")["cpu"].0, "2");
        assert!(crate::api::node::is_ready(node));
        let ready = &status.conditions.as_ref().expect("conditions")[0];
        assert_eq!(ready.last_heartbeat_time, Some(Time(at(45))));
        // Registered once.
        assert!(
            kubelet
                .sync(&cluster, &instances, &catalog(), at(60))
                .is_empty()
        );
        // The same instances, but the Node was deleted: it registers again.
        cluster
            .delete::<Node>(&ObjectKey::cluster(&name))
            .expect("deleted");
        let report = kubelet.sync(&cluster, &instances, &catalog(), at(61));
        assert_eq!(report.registered, std::slice::from_ref(&name));
        // A new list without the instance: its node goes.
        let report = kubelet.sync(&cluster, &Arc::default(), &catalog(), at(62));
        assert_eq!(report.deleted, [name]);
    }

    #[test]
    fn node_names_are_deterministic_and_unique() {
        let instances: Vec<Instance> = (0..300)
            .map(|i| instance(&format!("i-{i:017x}"), start()))
            .collect();
        let names = |order: &[Instance]| {
            let (cluster, _) = cluster();
            Kubelet::new(DELAY).sync(&cluster, &view(order.to_vec()), &catalog(), at(60));
            nodes(&cluster)
                .iter()
                .map(|n| {
                    let p = n.spec.as_ref().and_then(|s| s.provider_id.clone());
                    (
                        p.unwrap_or_default(),
                        n.metadata.name.clone().unwrap_or_default(),
                    )
                })
                .collect::<BTreeMap<_, _>>()
        };
        let forward = names(&instances);
        let mut reversed = instances.clone();
        reversed.reverse();
        assert_eq!(forward.len(), 300);
        assert_eq!(forward, names(&reversed));
        let unique: HashSet<&String> = forward.values().collect();
        assert_eq!(unique.len(), 300);
    }

    #[test]
    fn nodes_of_gone_instances_are_deleted_unless_finalized_and_orphans_go() {
        let (cluster, _) = cluster();
        let kubelet = Kubelet::new(DELAY);
        let both = view(vec![instance("i-1", start()), instance("i-2", start())]);
        kubelet.sync(&cluster, &both, &catalog(), at(60));
        let by_provider = |id: &str| {
            nodes(&cluster)
                .into_iter()
                .find(|n| {
                    n.spec.as_ref().and_then(|s| s.provider_id.as_deref())
                        == Some(&format!("aws:///us-east-1a/{id}"))
                })
                .expect("node registered")
        };
        let kept = by_provider("i-1").metadata.name.clone().unwrap_or_default();
        let gone = by_provider("i-2").metadata.name.clone().unwrap_or_default();
        cluster
            .update_with::<Node>(&ObjectKey::cluster(&kept), |n| {
                n.metadata.finalizers = Some(vec!["karpenter.sh/termination".into()]);
            })
            .expect("finalizer added");
        let orphan: Pod = serde_json::from_value(json!({
            "metadata": {"name": "orphan", "namespace": "default"},
            "spec": {"nodeName": gone, "containers": [{"name": "c"}]},
        }))
        .expect("valid pod");
        cluster.create(orphan).expect("created");
        let report = kubelet.sync(&cluster, &Arc::default(), &catalog(), at(120));
        assert_eq!(report.deleted, vec![gone]);
        assert_eq!(report.orphans_deleted, vec!["default/orphan".to_string()]);
        let left: Vec<String> = nodes(&cluster)
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        assert_eq!(
            left,
            vec![kept],
            "the finalizer keeps it for the controller"
        );
    }

    fn condition(pod: &Pod, type_: &str) -> Option<String> {
        pod.status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| c.status.clone())
    }

    #[test]
    fn a_terminating_pod_stops_being_ready_and_is_gone_when_its_grace_period_ends() {
        let (cluster, clock) = cluster();
        let kubelet = Kubelet::new(DELAY);
        cluster.create(node("n1").ready().build()).unwrap();
        cluster
            .create(pod("default", "slow").on("n1").grace(120).running().build())
            .unwrap();
        cluster
            .create(pod("default", "quick").on("n1").grace(10).running().build())
            .unwrap();
        assert!(
            kubelet
                .sync(&cluster, &Arc::default(), &catalog(), start())
                .is_empty()
        );
        assert_eq!(kubelet.next_stop(), None);

        for name in ["slow", "quick"] {
            cluster
                .delete::<Pod>(&ObjectKey::new("default", name))
                .unwrap();
        }
        let report = kubelet.sync(&cluster, &Arc::default(), &catalog(), start());
        assert_eq!(report.stopping, ["default/quick", "default/slow"]);
        assert!(report.stopped.is_empty());
        for p in pods(&cluster) {
            assert_eq!(condition(&p, "Ready").as_deref(), Some("False"));
            assert_eq!(condition(&p, "ContainersReady").as_deref(), Some("False"));
        }
        // The simulation wakes when the first grace period ends.
        assert_eq!(kubelet.next_stop(), Some(at(10)));
        assert!(
            kubelet
                .sync(&cluster, &Arc::default(), &catalog(), at(9))
                .is_empty()
        );

        clock.set(at(10)).unwrap();
        let report = kubelet.sync(&cluster, &Arc::default(), &catalog(), at(10));
        assert_eq!(report.stopped, ["default/quick"]);
        assert_eq!(kubelet.next_stop(), Some(at(120)));
        clock.set(at(120)).unwrap();
        let report = kubelet.sync(&cluster, &Arc::default(), &catalog(), at(120));
        assert_eq!(report.stopped, ["default/slow"]);
        assert!(pods(&cluster).is_empty());
        assert_eq!(kubelet.next_stop(), None);
    }

    #[test]
    fn a_node_whose_kubelet_stopped_reporting_keeps_its_terminating_pods() {
        let (cluster, clock) = cluster();
        let kubelet = Kubelet::new(DELAY);
        let stopped = node("n1").condition("Ready", "Unknown").build();
        cluster.create(stopped).unwrap();
        cluster
            .create(pod("default", "a").on("n1").grace(30).running().build())
            .unwrap();
        cluster
            .delete::<Pod>(&ObjectKey::new("default", "a"))
            .unwrap();
        clock.set(at(600)).unwrap();
        assert!(
            kubelet
                .sync(&cluster, &Arc::default(), &catalog(), at(600))
                .is_empty()
        );
        assert_eq!(pods(&cluster).len(), 1, "nothing confirms it stopped");
        assert_eq!(kubelet.next_stop(), None);
        // Once the node is gone, the pod garbage collector force-deletes it.
        cluster.delete::<Node>(&ObjectKey::cluster("n1")).unwrap();
        let report = kubelet.sync(&cluster, &Arc::default(), &catalog(), at(601));
        assert_eq!(report.orphans_deleted, ["default/a"]);
        assert!(pods(&cluster).is_empty());
    }

    #[test]
    fn orphaned_pods_are_force_deleted_once_even_when_a_finalizer_holds_them() {
        let (cluster, _) = cluster();
        let kubelet = Kubelet::new(DELAY);
        let mut held = pod("default", "held")
            .on("gone")
            .grace(300)
            .running()
            .build();
        held.metadata.finalizers = Some(vec!["x/hold".into()]);
        cluster.create(held).unwrap();
        cluster
            .create(
                pod("default", "plain")
                    .on("gone")
                    .grace(300)
                    .running()
                    .build(),
            )
            .unwrap();
        let report = kubelet.sync(&cluster, &Arc::default(), &catalog(), start());
        assert_eq!(report.orphans_deleted, ["default/held", "default/plain"]);
        let left = pods(&cluster);
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].metadata.deletion_grace_period_seconds, Some(0));
        // Its finalizer is not the kubelet's: nothing more to do.
        assert!(
            kubelet
                .sync(&cluster, &Arc::default(), &catalog(), at(1))
                .is_empty()
        );
    }

    fn daemon_set(name: &str, template_spec: Value) -> DaemonSet {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": "kube-system"},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": template_spec},
            },
        }))
        .expect("valid daemonset")
    }

    #[test]
    fn daemon_set_pods_land_only_on_matching_tolerating_nodes() {
        let (cluster, _) = cluster();
        let linux = |name| node(name).label("kubernetes.io/os", "linux");
        for node in [
            linux("ip-10-0-0-1.ec2.internal"),
            linux("ip-10-0-0-2.ec2.internal").taint("nvidia.com/gpu", "NoSchedule"),
            linux("ip-10-0-0-3.ec2.internal").taint(TAINT_UNREGISTERED, "NoExecute"),
            node("ip-10-0-0-4.ec2.internal").label("kubernetes.io/os", "windows"),
            // Tolerated by every DaemonSet pod.
            linux("ip-10-0-0-5.ec2.internal")
                .taint("node.kubernetes.io/unschedulable", "NoSchedule"),
        ] {
            cluster.create(node.ready().build()).expect("node created");
        }
        let container = json!([{"name": "c"}]);
        cluster
            .create(daemon_set(
                "logs",
                json!({"nodeSelector": {"kubernetes.io/os": "linux"}, "containers": container}),
            ))
            .expect("created");
        cluster
            .create(daemon_set(
                "everywhere",
                json!({"tolerations": [{"operator": "Exists"}], "containers": container}),
            ))
            .expect("created");
        let kubelet = Kubelet::new(DELAY);
        let report = kubelet.sync(&cluster, &Arc::default(), &[], start());
        assert_eq!(
            report.daemon_pods,
            vec![
                "kube-system/everywhere-ip-10-0-0-1",
                "kube-system/everywhere-ip-10-0-0-2",
                "kube-system/everywhere-ip-10-0-0-3",
                "kube-system/everywhere-ip-10-0-0-4",
                "kube-system/everywhere-ip-10-0-0-5",
                "kube-system/logs-ip-10-0-0-1",
                "kube-system/logs-ip-10-0-0-5",
            ]
        );
        let pod: Arc<Pod> = cluster
            .get(&ObjectKey::new("kube-system", "logs-ip-10-0-0-1"))
            .expect("exists");
        assert_eq!(
            pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            Some("ip-10-0-0-1.ec2.internal")
        );
        assert_eq!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Running")
        );
        let owner = &pod.metadata.owner_references.as_ref().expect("owned")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("DaemonSet", "logs")
        );
        assert!(
            kubelet
                .sync(&cluster, &Arc::default(), &[], start())
                .is_empty(),
            "no duplicates"
        );
    }

    #[test]
    fn bound_pods_start_and_job_pods_complete_after_their_duration() {
        let (cluster, clock) = cluster();
        cluster
            .create(node("n1").ready().build())
            .expect("node created");
        let job: Job = serde_json::from_value(json!({
            "metadata": {"name": "nightly", "namespace": "default",
                         "annotations": {DURATION_ANNOTATION: "30m"}},
            "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}},
        }))
        .expect("valid job");
        let job = cluster.create(job).expect("created");
        let job_pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "nightly-x", "namespace": "default", "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "Job", "name": "nightly",
                "uid": job.metadata.uid, "controller": true,
            }]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
        }))
        .expect("valid pod");
        let web: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
        }))
        .expect("valid pod");
        let pending: Pod = serde_json::from_value(json!({
            "metadata": {"name": "pending", "namespace": "default"},
            "spec": {"containers": [{"name": "c"}]},
        }))
        .expect("valid pod");
        for p in [job_pod, web, pending] {
            cluster.create(p).expect("created");
        }
        let kubelet = Kubelet::new(DELAY);
        let report = kubelet.sync(&cluster, &Arc::default(), &[], clock.now());
        assert_eq!(report.started, vec!["default/nightly-x", "default/web"]);
        let web: Arc<Pod> = cluster
            .get(&ObjectKey::new("default", "web"))
            .expect("exists");
        let status = web.status.as_ref().expect("status");
        assert_eq!(status.start_time, Some(Time(start())));
        assert!(
            crate::world::apiserver::is_pod_healthy(&web),
            "running and ready"
        );

        clock
            .advance(Duration::from_secs(29 * 60))
            .expect("in range");
        assert!(
            kubelet
                .sync(&cluster, &Arc::default(), &[], clock.now())
                .is_empty()
        );
        // The end of the run, for the simulation to wake at.
        let end = start().checked_add(Duration::from_secs(30 * 60)).ok();
        assert_eq!(kubelet.next_job_done(), end);
        clock.advance(Duration::from_secs(60)).expect("in range");
        let report = kubelet.sync(&cluster, &Arc::default(), &[], clock.now());
        assert_eq!(report.completed, vec!["default/nightly-x"]);
        assert_eq!(kubelet.next_job_done(), None);
        let done: Arc<Pod> = cluster
            .get(&ObjectKey::new("default", "nightly-x"))
            .expect("exists");
        assert_eq!(
            done.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded")
        );
        assert_eq!(pods(&cluster).len(), 3);
        assert!(
            kubelet
                .sync(&cluster, &Arc::default(), &[], clock.now())
                .is_empty()
        );
    }

    /// A kubelet that follows the watch log does what one that looks at
    /// every pod at every sync does, step by step: pods bound to a node
    /// that becomes Ready later, Job pods whose Job's duration changes,
    /// graceful deletes, a node whose kubelet stops reporting, a deleted
    /// node's orphans, a DaemonSet created late, and a watch log compacted
    /// under it.
    #[test]
    fn following_the_watch_log_does_what_a_full_look_does() {
        let twins = [cluster(), cluster()];
        let kubelet = Kubelet::new(DELAY);
        let both = |step: &dyn Fn(&MemoryCluster)| {
            for (c, _) in &twins {
                step(c);
            }
        };
        let mut seconds = 0;
        let mut sync = |advance: u64| {
            seconds += advance;
            let now = at(seconds);
            for (_, clock) in &twins {
                clock.set(now).expect("in range");
            }
            let followed = kubelet.sync(&twins[0].0, &Arc::default(), &catalog(), now);
            let fresh = Kubelet::new(DELAY);
            let full = fresh.sync(&twins[1].0, &Arc::default(), &catalog(), now);
            assert_eq!(followed, full, "at {seconds} s");
            assert_eq!(kubelet.next_stop(), fresh.next_stop(), "at {seconds} s");
            followed
        };
        let job = |minutes: u32| -> Job {
            serde_json::from_value(json!({
                "metadata": {"name": "nightly", "namespace": "default",
                             "annotations": {DURATION_ANNOTATION: format!("{minutes}m")}},
                "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}},
            }))
            .expect("valid job")
        };
        let job_pod = |name: &str, node: &str| {
            let p = pod("default", name).owned_by("Job", "nightly");
            p.on(node).build()
        };
        let set_ready = |c: &MemoryCluster, node: &str, status: &str| {
            c.update_status_with::<Node>(&ObjectKey::cluster(node), |n| {
                n.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = status.into();
            })
            .expect("updated");
        };
        both(&|c| {
            c.create(node("n1").ready().build()).unwrap();
            c.create(node("n2").ready().build()).unwrap();
            set_ready(c, "n2", "False");
            c.create(job(30)).unwrap();
            c.create(job_pod("nightly-a", "n1")).unwrap();
            c.create(pod("default", "web").on("n2").grace(30).running().build())
                .unwrap();
            c.create(pod("default", "slow").on("n1").grace(300).running().build())
                .unwrap();
        });
        let first = sync(0);
        assert_eq!(first.started, ["default/nightly-a"]);

        both(&|c| {
            let pending = pod("default", "late").on("n2").grace(30);
            c.create(pending.build()).unwrap();
        });
        assert!(sync(60).is_empty(), "n2 is not Ready");
        both(&|c| set_ready(c, "n2", "True"));
        assert_eq!(sync(1).started, ["default/late"]);

        // The Job now runs its pods for 5 minutes: its running pod is done.
        both(&|c| {
            c.update_with::<Job>(&ObjectKey::new("default", "nightly"), |j| {
                j.metadata.annotations = job(5).metadata.annotations;
            })
            .unwrap();
        });
        assert_eq!(sync(239).completed, ["default/nightly-a"]);

        both(&|c| {
            c.delete::<Pod>(&ObjectKey::new("default", "slow")).unwrap();
            c.delete::<Pod>(&ObjectKey::new("default", "web")).unwrap();
        });
        assert_eq!(sync(1).stopping, ["default/slow", "default/web"]);
        assert_eq!(sync(30).stopped, ["default/web"]);

        // n1's kubelet stops reporting: slow's end does not come; then n1
        // goes, and its pods with it.
        both(&|c| set_ready(c, "n1", "Unknown"));
        sync(1);
        assert_eq!(kubelet.next_stop(), None);
        assert!(sync(600).is_empty());
        both(&|c| {
            c.create(job_pod("nightly-b", "n2")).unwrap();
            c.delete::<Node>(&ObjectKey::cluster("n1")).unwrap();
        });
        let report = sync(1);
        assert_eq!(
            report.orphans_deleted,
            ["default/nightly-a", "default/slow"]
        );
        assert_eq!(report.started, ["default/nightly-b"]);

        both(&|c| {
            c.create(daemon_set("logs", json!({"containers": [{"name": "c"}]})))
                .unwrap();
        });
        let made = sync(1).daemon_pods;
        assert_eq!(made.len(), 1);
        // Its pod gone, the DaemonSet's next pod is made on the same node.
        both(&|c| {
            let (namespace, name) = made[0].split_once('/').expect("a pod key");
            let key = ObjectKey::new(namespace, name);
            c.delete_with::<Pod>(&key, &DeleteParams::with_grace_period(0))
                .unwrap();
        });
        assert_eq!(sync(1).daemon_pods.len(), 1);
        assert!(sync(1).daemon_pods.is_empty(), "one pod per node");

        // The log forgets what the kubelet has not seen: it looks at every
        // pod again.
        twins[0].0.set_watch_log_capacity(1);
        both(&|c| {
            c.create(job_pod("nightly-c", "n2")).unwrap();
            c.create(pod("default", "api").on("n2").grace(30).running().build())
                .unwrap();
        });
        assert_eq!(sync(1).started, ["default/nightly-c"]);
        assert_eq!(
            sync(300).completed,
            ["default/nightly-b", "default/nightly-c"]
        );
    }

    #[test]
    fn job_pods_default_to_ten_minutes() {
        let (cluster, clock) = cluster();
        cluster
            .create(node("n1").ready().build())
            .expect("node created");
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "batch-x", "namespace": "default", "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "Job", "name": "batch", "uid": "u", "controller": true,
            }]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
        }))
        .expect("valid pod");
        cluster.create(pod).expect("created");
        let kubelet = Kubelet::new(DELAY);
        kubelet.sync(&cluster, &Arc::default(), &[], clock.now());
        let now = clock
            .advance(Duration::from_secs(9 * 60 + 59))
            .expect("in range");
        assert!(
            kubelet
                .sync(&cluster, &Arc::default(), &[], now)
                .completed
                .is_empty()
        );
        let now = clock.advance(Duration::from_secs(1)).expect("in range");
        assert_eq!(
            kubelet
                .sync(&cluster, &Arc::default(), &[], now)
                .completed
                .len(),
            1
        );
    }

    /// Speed of a sync with nothing to do on the simulation's largest
    /// state: 2,000 nodes, 40,000 running pods, three DaemonSets. Run with
    /// `cargo test --release --lib kubelet -- --ignored --nocapture`.
    #[test]
    #[ignore = "benchmark; run in release"]
    fn bench_idle_sync_2000_nodes_40000_pods() {
        use std::time::Instant;
        let (cluster, _) = cluster();
        let instances = view(
            (0..2000)
                .map(|i| instance(&format!("i-{i:017x}"), start()))
                .collect(),
        );
        let kubelet = Kubelet::new(DELAY);
        for name in ["logs", "metrics", "cni"] {
            cluster
                .create(daemon_set(
                    name,
                    json!({"tolerations": [{"operator": "Exists"}], "containers": [{"name": "c"}]}),
                ))
                .expect("created");
        }
        let t = Instant::now();
        let report = kubelet.sync(&cluster, &instances, &catalog(), at(60));
        eprintln!(
            "register 2000 nodes and 6000 daemon pods: {:?}",
            t.elapsed()
        );
        assert_eq!(report.daemon_pods.len(), 6000);
        let names: Vec<String> = nodes(&cluster)
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        for i in 0..40_000 {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("p{i:05}"), "namespace": "default"},
                "spec": {"nodeName": names[i % names.len()], "containers": [{"name": "c"}]},
            }))
            .expect("valid pod");
            cluster.create(pod).expect("created");
        }
        let t = Instant::now();
        assert_eq!(
            kubelet
                .sync(&cluster, &instances, &catalog(), at(61))
                .started
                .len(),
            40_000
        );
        eprintln!("start 40000 pods: {:?}", t.elapsed());
        let t = Instant::now();
        for _ in 0..100 {
            assert!(
                kubelet
                    .sync(&cluster, &instances, &catalog(), at(62))
                    .is_empty()
            );
        }
        eprintln!("idle sync: {:?}", t.elapsed() / 100);
    }
}
