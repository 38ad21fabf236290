//! The stand-in kube-scheduler of `dovetail simulate`.
//!
//! [`KubeScheduler::schedule`] binds pending pods to nodes the way
//! kube-scheduler's default profile does — not the way dovetail plans — so
//! the simulation shows where the real cluster would put pods and which
//! pods dovetail must provision for.
//!
//! # What matches the default profile
//! - **Queue order** (`PrioritySort`): `spec.priority` descending, then
//!   creation time, then namespace/name.
//! - **Filters**, in the default order, the first failure per node giving
//!   its reason: `NodeUnschedulable`, `TaintToleration` (`NoSchedule` and
//!   `NoExecute`, so `karpenter.sh/unregistered` and `karpenter.sh/disrupted`
//!   repel pods that do not tolerate them), `NodeAffinity` (nodeSelector and
//!   required terms), `NodePorts`, `NodeResourcesFit` (requests including
//!   init containers, sidecars and overhead against allocatable minus the
//!   requests of unfinished pods on the node, and the pod count),
//!   `PodTopologySpread` (`DoNotSchedule`: skew over the domains of eligible
//!   nodes, `minDomains`, node inclusion policies), `InterPodAffinity`
//!   (required affinity, anti-affinity, and existing pods' anti-affinity
//!   against the incoming pod).
//! - **Scores** with the default weights, each normalised as its plugin
//!   does: `NodeResourcesFit` LeastAllocated on cpu and memory with the
//!   non-zero defaults for missing requests (1), `BalancedAllocation` (1,
//!   skipped for best-effort pods), `TaintToleration` on `PreferNoSchedule`
//!   (3), `NodeAffinity` preferred terms (2), `InterPodAffinity` preferred
//!   terms of the pod and of existing pods, with existing pods' required
//!   affinity at `hardPodAffinityWeight` 1 (2), `PodTopologySpread`
//!   `ScheduleAnyway` (2).
//! - **Failures** get `PodScheduled=False`, reason `Unschedulable`, and
//!   kube-scheduler's message (`0/3 nodes are available: 1 Insufficient
//!   cpu, 2 node(s) had untolerated taint {k: v}.`); pods with scheduling
//!   gates get reason `SchedulingGated`. Unchanged conditions are not
//!   rewritten.
//! - A node that is not `Ready` counts as tainted
//!   `node.kubernetes.io/not-ready:NoSchedule`, as the node lifecycle
//!   controller would taint it.
//!
//! # Where it differs
//! - Ties between the best nodes go to the first node by name; the real
//!   scheduler picks one of them at random.
//! - Every node is filtered and scored (`percentageOfNodesToScore: 100`);
//!   the real scheduler stops after a share of feasible nodes in large
//!   clusters, starting where its previous cycle stopped.
//! - No preemption, no volume plugins (volume topology, attach limits), no
//!   `ImageLocality`, no system-default topology spreading for pods without
//!   constraints, and no backoff: every call retries every pending pod.
//! - Pods with a `schedulerName` other than `default-scheduler` are left
//!   alone, as the real scheduler leaves them to their scheduler.
//!
//! # Speed
//! Like the real scheduler's informer-fed cache, the scheduler keeps its
//! index between calls and catches up from the cluster's watch log (it
//! relists when the log no longer reaches back): pods are parsed once per
//! spec and labels, a pass with nothing pending costs only the changes
//! since the last call. The index holds free resources and host ports per
//! node, per-node counts of the pods each label selector matches (created
//! on first use, then updated as pods come, go and are bound), bound pods'
//! affinity terms grouped by term, and nodes by topology domain; a changed
//! node is read again in place, and nodes that come or go move all of it
//! to the new node list by name. What depends only on a pod's node
//! constraints and the nodes (taints, node affinity) is cached per
//! distinct constraint set until a node comes, goes, or changes its
//! labels, taints or schedulability. Pods identical in every scheduling
//! input share one failed evaluation until the next binding.
//!
//! The index lives in `state.rs`, the filters and scores over it in
//! `plugins.rs`.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::{Node, Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Serialize;

use crate::clock::{Timestamp, truncate_to_second};
use crate::cluster::{EventType, ObjectKey, Selector};
use crate::model::quantity::{CPU, EPHEMERAL_STORAGE, MEMORY, PODS, parse_quantity};
use crate::model::{Effect, LabelSelector, Requirements, Resources, Taint, Toleration};

/// The hasher of the scheduler's maps, as elsewhere in the crate: its keys
/// are the simulated cluster's node names and object keys.
type Hasher = foldhash::fast::RandomState;
use crate::scheduling::pod::{VolumeIndex, pod_requests_with_defaults, pod_spec};
use crate::scheduling::types::{HostPort, Namespaces, PodAffinityTerm, PodSpec, Unsatisfiable};
use crate::world::MemoryCluster;

mod plugins;
mod state;

use state::*;

/// The scheduler name pods get by default.
const DEFAULT_SCHEDULER: &str = "default-scheduler";
/// Scores of one plugin range over 0..=MAX_NODE_SCORE.
const MAX_NODE_SCORE: i64 = 100;
/// Non-zero defaults for scoring a container without cpu / memory requests
/// (`schedutil.DefaultMilliCPURequest`, `DefaultMemoryRequest`).
const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;
/// Default plugin weights of the default profile.
const WEIGHT_FIT: i64 = 1;
const WEIGHT_BALANCED: i64 = 1;
const WEIGHT_TAINT: i64 = 3;
const WEIGHT_NODE_AFFINITY: i64 = 2;
const WEIGHT_INTER_POD_AFFINITY: i64 = 2;
const WEIGHT_SPREAD: i64 = 2;
/// `InterPodAffinityArgs.hardPodAffinityWeight` default.
const HARD_POD_AFFINITY_WEIGHT: i64 = 1;
/// The taint the node lifecycle controller puts on nodes that are not Ready.
const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// The taint `NodeUnschedulable` lets pods tolerate.
const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
/// No domain: the node lacks the topology label.
const NO_DOMAIN: u32 = u32::MAX;

/// What one [`KubeScheduler::schedule`] did, for the simulation's event
/// timeline. Pods are `namespace/name`, in the order they were handled.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ScheduleReport {
    /// Pods bound, with their node.
    pub bound: Vec<(String, String)>,
    /// Pods that fit no node, with kube-scheduler's message.
    pub unschedulable: Vec<(String, String)>,
    /// Failed writes and pods that cannot be read, as (pod, message).
    pub errors: Vec<(String, String)>,
}

/// The stand-in kube-scheduler. It keeps its index of pods and nodes
/// between calls, fed by the cluster's watch, as the real scheduler's cache
/// is fed by informers.
#[derive(Default)]
pub struct KubeScheduler {
    index: Mutex<Option<Index>>,
}

impl std::fmt::Debug for KubeScheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeScheduler").finish_non_exhaustive()
    }
}

/// One pod as last seen, with its parsed scheduling view.
struct PodEntry {
    pod: Arc<Pod>,
    info: Result<Arc<PodInfo>, String>,
}

impl PodEntry {
    /// Parses `pod`, reusing `previous`'s view while the spec (generation)
    /// and labels are unchanged.
    fn new(pod: Arc<Pod>, previous: Option<&PodEntry>) -> Self {
        let reusable = previous.filter(|p| {
            p.pod.metadata.uid == pod.metadata.uid
                && p.pod.metadata.generation == pod.metadata.generation
                && p.pod.metadata.labels == pod.metadata.labels
        });
        let info = match reusable {
            Some(p) => p.info.clone(),
            None => PodInfo::new(&pod).map(Arc::new),
        };
        PodEntry { pod, info }
    }
}

/// The scheduler's view of the cluster between calls.
struct Index {
    pods_rv: u64,
    nodes_rv: u64,
    pods: HashMap<ObjectKey, PodEntry, Hasher>,
    /// Pods to schedule.
    pending: HashSet<ObjectKey, Hasher>,
    /// Pods bound to a node that does not exist (yet).
    waiting: HashSet<ObjectKey, Hasher>,
    state: State,
}

impl Index {
    /// Lists everything, reusing parsed pods of `previous`.
    fn load(cluster: &MemoryCluster, previous: Option<Index>) -> Self {
        let nodes = cluster.list::<Node>(None, &Selector::everything());
        let pods = cluster.list::<Pod>(None, &Selector::everything());
        let mut old = previous.map(|p| p.pods).unwrap_or_default();
        let mut index = Index {
            pods_rv: pods.resource_version,
            nodes_rv: nodes.resource_version,
            pods: HashMap::with_capacity_and_hasher(pods.items.len(), Hasher::default()),
            pending: HashSet::default(),
            waiting: HashSet::default(),
            state: State::new(&nodes.items),
        };
        for pod in pods.items {
            let key = ObjectKey::of(pod.as_ref());
            let entry = PodEntry::new(pod, old.remove(&key).as_ref());
            index.insert(key, entry);
        }
        index
    }

    /// Catches up with the changes since the last call; relists when the
    /// watch log no longer reaches back.
    fn sync(mut self, cluster: &MemoryCluster) -> Self {
        let node_events = match cluster.watch_from::<Node>(self.nodes_rv) {
            Ok(events) => events,
            Err(_) => return Index::load(cluster, Some(self)),
        };
        let same_nodes = node_events.iter().all(|e| {
            e.event_type == EventType::Modified
                && e.object
                    .metadata
                    .name
                    .as_ref()
                    .is_some_and(|n| self.state.node_index.contains_key(n))
        });
        if same_nodes {
            // Each changed node is read again in place.
            if let Some(last) = node_events.last() {
                self.nodes_rv = last.resource_version;
            }
            self.state
                .update_nodes(node_events.iter().map(|e| &e.object));
        } else {
            let nodes = cluster.list::<Node>(None, &Selector::everything());
            self.nodes_rv = nodes.resource_version;
            let dropped = self.state.replace_nodes(&nodes.items);
            let mut waiting: Vec<ObjectKey> = self.waiting.drain().collect();
            waiting.extend(dropped);
            for key in waiting {
                if let Some(entry) = self.pods.remove(&key) {
                    self.insert(key, entry);
                }
            }
        }
        let pod_events = match cluster.watch_from::<Pod>(self.pods_rv) {
            Ok(events) => events,
            Err(_) => return Index::load(cluster, Some(self)),
        };
        for event in pod_events {
            self.pods_rv = event.resource_version;
            let key = ObjectKey::of(event.object.as_ref());
            let previous = self.remove(&key);
            if event.event_type != EventType::Deleted {
                let entry = PodEntry::new(event.object, previous.as_ref());
                self.insert(key, entry);
            }
        }
        self
    }

    fn remove(&mut self, key: &ObjectKey) -> Option<PodEntry> {
        self.state.remove_bound(key);
        self.pending.remove(key);
        self.waiting.remove(key);
        self.pods.remove(key)
    }

    /// Adds a pod: pending, accounted on its node, or waiting for its node.
    fn insert(&mut self, key: ObjectKey, entry: PodEntry) {
        let pod = &entry.pod;
        if is_pending(pod) {
            self.pending.insert(key.clone());
        } else if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
            && !crate::api::pod::is_finished(pod)
            && let Ok(info) = &entry.info
        {
            match self.state.node_index.get(node) {
                Some(&n) => self.state.add_bound(
                    key.clone(),
                    n,
                    info.clone(),
                    pod.metadata.deletion_timestamp.is_some(),
                ),
                None => {
                    self.waiting.insert(key.clone());
                }
            }
        }
        self.pods.insert(key, entry);
    }
}
/// The scheduling view of one pod.
#[derive(Debug)]
struct PodInfo {
    spec: PodSpec,
    /// cpu, memory and ephemeral-storage requests.
    dense: [i64; 3],
    /// Other requested resources (not `pods`), non-zero only.
    extended: Vec<(String, i64)>,
    /// cpu and memory with the non-zero defaults, for LeastAllocated.
    non_zero: [i64; 2],
}

impl PodInfo {
    fn new(pod: &Pod) -> Result<Self, String> {
        let pod = &crate::api::SlimPod::from(pod);
        let spec = pod_spec(pod, &VolumeIndex::default(), 0).map_err(|e| e.message)?;
        let defaults = Resources::new()
            .with(CPU, DEFAULT_MILLI_CPU_REQUEST)
            .with(MEMORY, DEFAULT_MEMORY_REQUEST);
        let non_zero = pod_requests_with_defaults(pod, &defaults)?;
        let r = &spec.requests;
        let dense = [r.get(CPU), r.get(MEMORY), r.get(EPHEMERAL_STORAGE)];
        let extended =
            r.0.iter()
                .filter(|(k, v)| {
                    **v > 0 && ![CPU, MEMORY, EPHEMERAL_STORAGE, PODS].contains(&k.as_str())
                })
                .map(|(k, v)| (k.clone(), *v))
                .collect();
        Ok(PodInfo {
            dense,
            extended,
            non_zero: [non_zero.get(CPU), non_zero.get(MEMORY)],
            spec,
        })
    }
}

impl KubeScheduler {
    pub fn new() -> Self {
        KubeScheduler::default()
    }

    /// Binds every pending pod it can, in queue order, and marks the others
    /// unschedulable. `now` stamps the conditions it writes.
    pub fn schedule(&self, cluster: &MemoryCluster, now: Timestamp) -> ScheduleReport {
        let mut report = ScheduleReport::default();
        let mut guard = self.index.lock().unwrap_or_else(PoisonError::into_inner);
        let index = match guard.take() {
            Some(index) => index.sync(cluster),
            None => Index::load(cluster, None),
        };
        let index = guard.insert(index);
        if index.pending.is_empty() {
            return report;
        }
        let mut pending: Vec<(i32, Option<Timestamp>, ObjectKey)> = index
            .pending
            .iter()
            .filter_map(|key| {
                let pod = &index.pods.get(key)?.pod;
                let priority = pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
                let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
                Some((priority, created, key.clone()))
            })
            .collect();
        pending.sort_by(|a, b| {
            b.0.cmp(&a.0)
                .then_with(|| a.1.cmp(&b.1))
                .then_with(|| a.2.cmp(&b.2))
        });
        let mut failed_shapes: HashMap<Shape, String> = HashMap::new();
        for (_, _, key) in pending {
            let Some(entry) = index.pods.get(&key) else {
                continue;
            };
            let pod = entry.pod.clone();
            if has_scheduling_gates(&pod) {
                let message = "Scheduling is blocked due to non-empty scheduling gates";
                write_unscheduled(cluster, &pod, "SchedulingGated", message, now, &mut report);
                continue;
            }
            let info = match &entry.info {
                Ok(info) => info.clone(),
                Err(e) => {
                    report.errors.push((key.to_string(), e.clone()));
                    continue;
                }
            };
            let shape = Shape::of(&info.spec);
            let outcome = match failed_shapes.get(&shape) {
                Some(message) => Err(message.clone()),
                None => index.state.place(&info),
            };
            match outcome {
                Ok(n) => {
                    let node = index.state.nodes[n].name.clone();
                    match cluster.bind(&key.namespace, &key.name, &node) {
                        Ok(bound) => {
                            let previous = index.remove(&key);
                            let entry = PodEntry::new(bound, previous.as_ref());
                            index.insert(key.clone(), entry);
                            failed_shapes.clear();
                            report.bound.push((key.to_string(), node));
                        }
                        Err(e) => report.errors.push((key.to_string(), e.to_string())),
                    }
                }
                Err(message) => {
                    failed_shapes.insert(shape, message.clone());
                    write_unscheduled(cluster, &pod, "Unschedulable", &message, now, &mut report);
                    report.unschedulable.push((key.to_string(), message));
                }
            }
        }
        report
    }
}

/// Whether kube-scheduler would try to schedule the pod.
fn is_pending(pod: &Pod) -> bool {
    let Some(spec) = &pod.spec else {
        return false;
    };
    spec.node_name.as_deref().is_none_or(str::is_empty)
        && pod.metadata.deletion_timestamp.is_none()
        && !crate::api::pod::is_finished(pod)
        && spec
            .scheduler_name
            .as_deref()
            .is_none_or(|s| s.is_empty() || s == DEFAULT_SCHEDULER)
}

fn has_scheduling_gates(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty())
}

/// Sets `PodScheduled=False` with this reason and message, unless the pod
/// already has exactly that.
fn write_unscheduled(
    cluster: &MemoryCluster,
    pod: &Pod,
    reason: &str,
    message: &str,
    now: Timestamp,
    report: &mut ScheduleReport,
) {
    let current = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"));
    if current.is_some_and(|c| {
        c.status == "False"
            && c.reason.as_deref() == Some(reason)
            && c.message.as_deref() == Some(message)
    }) {
        return;
    }
    let key = ObjectKey::of(pod);
    let result = cluster.update_status_with::<Pod>(&key, |p| {
        let conditions = p
            .status
            .get_or_insert_default()
            .conditions
            .get_or_insert_default();
        let transition = Time(truncate_to_second(now));
        match conditions.iter_mut().find(|c| c.type_ == "PodScheduled") {
            Some(c) => {
                if c.status != "False" {
                    c.last_transition_time = Some(transition);
                }
                c.status = "False".into();
                c.reason = Some(reason.into());
                c.message = Some(message.into());
            }
            None => conditions.push(PodCondition {
                type_: "PodScheduled".into(),
                status: "False".into(),
                reason: Some(reason.into()),
                message: Some(message.into()),
                last_transition_time: Some(transition),
                ..PodCondition::default()
            }),
        }
    });
    if let Err(e) = result {
        report.errors.push((key.to_string(), e.to_string()));
    }
}

/// Everything about a pod that decides whether it fits somewhere; pods with
/// the same shape fail alike.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Shape {
    namespace: String,
    labels: BTreeMap<String, String>,
    requests: Resources,
    statics: StaticKey,
    host_ports: Vec<HostPort>,
    affinity: Vec<PodAffinityTerm>,
    anti_affinity: Vec<PodAffinityTerm>,
    spread: Vec<crate::scheduling::types::TopologySpread>,
}

impl Shape {
    fn of(spec: &PodSpec) -> Self {
        Shape {
            namespace: spec.namespace.clone(),
            labels: spec.labels.as_ref().clone(),
            requests: spec.requests.clone(),
            statics: StaticKey::of(spec),
            host_ports: spec.host_ports.clone(),
            affinity: spec.affinity.clone(),
            anti_affinity: spec.anti_affinity.clone(),
            spread: spec.spread.clone(),
        }
    }
}

/// The parts of a pod that static (per-call) node checks depend on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct StaticKey {
    node_selector: Requirements,
    required_terms: Vec<Requirements>,
    preferred_terms: Vec<(i32, Requirements)>,
    tolerations: Vec<Toleration>,
}

impl StaticKey {
    fn of(spec: &PodSpec) -> Self {
        StaticKey {
            node_selector: spec.node_selector.clone(),
            required_terms: spec.required_terms.clone(),
            preferred_terms: spec.preferred_terms.clone(),
            tolerations: spec.tolerations.clone(),
        }
    }
}

/// The first static filter a node fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Fits,
    Unschedulable,
    /// An untolerated taint, by global taint id.
    Taint(u32),
    NodeAffinity,
}

/// Per-node results of the static filters and scores for one [`StaticKey`].
#[derive(Debug)]
struct StaticEval {
    verdict: Vec<Verdict>,
    /// Node selector and required node affinity match.
    affinity_match: Vec<bool>,
    /// All NoSchedule / NoExecute taints tolerated.
    taints_tolerated: Vec<bool>,
    /// Untolerated PreferNoSchedule taints.
    taint_score: Vec<i64>,
    /// Sum of matching preferred term weights.
    node_affinity_score: Vec<i64>,
}

/// Why a node was filtered out, counted for the message.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Reason<'a> {
    Unschedulable,
    Taint(u32),
    NodeAffinity,
    Ports,
    TooManyPods,
    /// The resource's name, borrowed from the pod's requests or the
    /// built-in names: a pod that fits nowhere notes one per node.
    Insufficient(&'a str),
    SpreadMissingLabel,
    Spread,
    PodAffinity,
    PodAntiAffinity,
    ExistingAntiAffinity,
}

#[cfg(test)]
mod tests;
