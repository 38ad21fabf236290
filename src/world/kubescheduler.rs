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
//! affinity terms grouped by term, and nodes by topology domain; node
//! changes move all of it to the new node list by name. What depends only
//! on a pod's node constraints and the nodes (taints, node affinity) is
//! cached per distinct constraint set until the nodes change. Pods
//! identical in every scheduling input share one failed evaluation until
//! the next binding.

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
use crate::scheduling::pod::{VolumeIndex, pod_requests_with_defaults, pod_spec};
use crate::scheduling::types::{HostPort, Namespaces, PodAffinityTerm, PodSpec, Unsatisfiable};
use crate::world::MemoryCluster;

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
    pods: HashMap<ObjectKey, PodEntry>,
    /// Pods to schedule.
    pending: HashSet<ObjectKey>,
    /// Pods bound to a node that does not exist (yet).
    waiting: HashSet<ObjectKey>,
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
            pods: HashMap::with_capacity(pods.items.len()),
            pending: HashSet::new(),
            waiting: HashSet::new(),
            state: State::new(&nodes.items, None),
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
        if !node_events.is_empty() {
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
enum Reason {
    Unschedulable,
    Taint(u32),
    NodeAffinity,
    Ports,
    TooManyPods,
    Insufficient(String),
    SpreadMissingLabel,
    Spread,
    PodAffinity,
    PodAntiAffinity,
    ExistingAntiAffinity,
}

/// One node as the scheduler tracks it during a call.
#[derive(Debug)]
struct NodeState {
    /// The Node it was read from: while a new list holds the same object,
    /// its parsed part is kept.
    source: Arc<Node>,
    name: String,
    labels: BTreeMap<String, String>,
    /// Global taint ids, including the implicit not-ready taint.
    taints: Vec<u32>,
    unschedulable: bool,
    /// Allocatable cpu, memory, ephemeral-storage.
    alloc: [i64; 3],
    alloc_pods: i64,
    alloc_extended: BTreeMap<String, i64>,
    requested: [i64; 3],
    requested_extended: HashMap<String, i64>,
    non_zero: [i64; 2],
    pod_count: i64,
    ports: Vec<HostPort>,
}

/// What a counter counts: pods matching all (namespaces, selector) terms.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct CounterKey {
    terms: Vec<(Namespaces, LabelSelector)>,
    /// Topology spread ignores terminating pods; affinity does not.
    skip_terminating: bool,
}

impl CounterKey {
    fn matches(&self, spec: &PodSpec) -> bool {
        self.terms
            .iter()
            .all(|(ns, sel)| ns.contains(&spec.namespace) && sel.matches(&spec.labels))
    }
}

#[derive(Debug)]
struct Counter {
    key: CounterKey,
    per_node: Vec<u32>,
}

/// The domains of one topology key.
#[derive(Debug)]
struct Topology {
    /// Domain of each node, [`NO_DOMAIN`] without the label.
    node_domain: Vec<u32>,
    domains: usize,
}

/// A pod accounted on a node, for counters built later.
#[derive(Debug)]
struct Bound {
    node: usize,
    info: Arc<PodInfo>,
    terminating: bool,
}

/// Terms of bound pods that act on newcomers, grouped by term.
#[derive(Debug, Default)]
struct TermGroups {
    index: HashMap<(PodAffinityTerm, i64), usize>,
    groups: Vec<(PodAffinityTerm, i64, Vec<u32>)>,
}

impl TermGroups {
    fn add(&mut self, term: &PodAffinityTerm, weight: i64, node: usize, nodes: usize) {
        let i = match self.index.entry((term.clone(), weight)) {
            Entry::Occupied(e) => *e.get(),
            Entry::Vacant(e) => {
                self.groups.push((term.clone(), weight, vec![0; nodes]));
                *e.insert(self.groups.len() - 1)
            }
        };
        self.groups[i].2[node] += 1;
    }

    fn remove(&mut self, term: &PodAffinityTerm, weight: i64, node: usize) {
        if let Some(i) = self.index.get(&(term.clone(), weight))
            && let Some(c) = self.groups[*i].2.get_mut(node)
        {
            *c = c.saturating_sub(1);
        }
    }

    /// Moves per-node counts to new node positions.
    fn remap(&mut self, old_to_new: &[Option<usize>], nodes: usize) {
        for (_, _, per_node) in &mut self.groups {
            *per_node = remap(per_node, old_to_new, nodes);
        }
    }
}

fn remap(per_node: &[u32], old_to_new: &[Option<usize>], nodes: usize) -> Vec<u32> {
    let mut out = vec![0; nodes];
    for (old, count) in per_node.iter().enumerate() {
        if let Some(Some(new)) = old_to_new.get(old) {
            out[*new] = *count;
        }
    }
    out
}

/// The terms of a bound pod that act on newcomers: required anti-affinity
/// (weight 0, in `existing_anti`), and required affinity, preferred
/// affinity and preferred anti-affinity with signed weights.
fn scoring_terms(spec: &PodSpec) -> impl Iterator<Item = (&PodAffinityTerm, i64)> {
    spec.affinity
        .iter()
        .map(|t| (t, HARD_POD_AFFINITY_WEIGHT))
        .chain(
            spec.preferred_affinity
                .iter()
                .map(|(w, t)| (t, i64::from(*w))),
        )
        .chain(
            spec.preferred_anti_affinity
                .iter()
                .map(|(w, t)| (t, -i64::from(*w))),
        )
}

fn term_matches(term: &PodAffinityTerm, spec: &PodSpec) -> bool {
    term.namespaces.contains(&spec.namespace) && term.selector.matches(&spec.labels)
}

/// Indexes of nodes and bound pods, updated as pods come, go and are
/// bound. Nodes are in name order.
struct State {
    nodes: Vec<NodeState>,
    node_index: HashMap<String, usize>,
    taints: Vec<Taint>,
    bound: HashMap<ObjectKey, Bound>,
    counters: Vec<Counter>,
    counter_index: HashMap<CounterKey, usize>,
    /// By topology key; a handful of keys, so searched linearly (faster
    /// than hashing the key on every node visit).
    topologies: Vec<(String, Topology)>,
    statics: HashMap<StaticKey, Arc<StaticEval>>,
    /// Required anti-affinity terms of bound pods (weight 0).
    existing_anti: TermGroups,
    /// Affinity terms of bound pods that score newcomers, with their signed
    /// weights.
    existing_preferred: TermGroups,
}

impl State {
    /// The state of `nodes` with nothing bound; the parsed part of a node
    /// that is the same object as in `previous` moves over from there.
    fn new(nodes: &[Arc<Node>], mut previous: Option<&mut State>) -> Self {
        let mut taint_index: HashMap<Taint, u32> = HashMap::new();
        let mut taints = Vec::new();
        let mut intern = |t: Taint| -> u32 {
            *taint_index.entry(t.clone()).or_insert_with(|| {
                taints.push(t);
                u32::try_from(taints.len() - 1).unwrap_or(u32::MAX)
            })
        };
        let mut states = Vec::with_capacity(nodes.len());
        for node in nodes {
            let kept = previous.as_deref_mut().and_then(|p| {
                let i = *p.node_index.get(node.metadata.name.as_deref()?)?;
                let old = &mut p.nodes[i];
                Arc::ptr_eq(&old.source, node).then_some((old, &p.taints))
            });
            if let Some((old, old_taints)) = kept {
                states.push(NodeState {
                    source: node.clone(),
                    name: old.name.clone(),
                    labels: std::mem::take(&mut old.labels),
                    taints: old
                        .taints
                        .iter()
                        .map(|&t| intern(old_taints[t as usize].clone()))
                        .collect(),
                    unschedulable: old.unschedulable,
                    alloc: old.alloc,
                    alloc_pods: old.alloc_pods,
                    alloc_extended: std::mem::take(&mut old.alloc_extended),
                    requested: [0; 3],
                    requested_extended: HashMap::new(),
                    non_zero: [0; 2],
                    pod_count: 0,
                    ports: Vec::new(),
                });
                continue;
            }
            let spec = node.spec.as_ref();
            let mut node_taints: Vec<Taint> = spec
                .and_then(|s| s.taints.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|t| Taint::from_k8s(t).ok())
                .collect();
            let ready = crate::api::node::is_ready(node);
            if !ready
                && !node_taints
                    .iter()
                    .any(|t| t.key == TAINT_NOT_READY || t.key == TAINT_UNREACHABLE)
            {
                node_taints.push(Taint::new(TAINT_NOT_READY, "", Effect::NoSchedule));
            }
            let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
            let quantity = |name: &str| -> i64 {
                allocatable
                    .and_then(|a| a.get(name))
                    .and_then(|q| parse_quantity(name, &q.0).ok())
                    .unwrap_or(0)
            };
            let alloc_extended = allocatable
                .into_iter()
                .flatten()
                .filter(|(k, _)| ![CPU, MEMORY, EPHEMERAL_STORAGE, PODS].contains(&k.as_str()))
                .filter_map(|(k, q)| Some((k.clone(), parse_quantity(k, &q.0).ok()?)))
                .collect();
            states.push(NodeState {
                source: node.clone(),
                name: node.metadata.name.clone().unwrap_or_default(),
                labels: node.metadata.labels.clone().unwrap_or_default(),
                taints: node_taints.into_iter().map(&mut intern).collect(),
                unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
                alloc: [quantity(CPU), quantity(MEMORY), quantity(EPHEMERAL_STORAGE)],
                alloc_pods: quantity(PODS),
                alloc_extended,
                requested: [0; 3],
                requested_extended: HashMap::new(),
                non_zero: [0; 2],
                pod_count: 0,
                ports: Vec::new(),
            });
        }
        let node_index = states
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        State {
            nodes: states,
            node_index,
            taints,
            bound: HashMap::new(),
            counters: Vec::new(),
            counter_index: HashMap::new(),
            topologies: Vec::new(),
            statics: HashMap::new(),
            existing_anti: TermGroups::default(),
            existing_preferred: TermGroups::default(),
        }
    }

    /// Accounts a pod bound to node `n`.
    fn add_bound(&mut self, key: ObjectKey, n: usize, info: Arc<PodInfo>, terminating: bool) {
        self.account(n, &info, terminating, 1);
        self.bound.insert(
            key,
            Bound {
                node: n,
                info,
                terminating,
            },
        );
    }

    /// Forgets a pod accounted by [`State::add_bound`], if it was.
    fn remove_bound(&mut self, key: &ObjectKey) {
        if let Some(b) = self.bound.remove(key) {
            self.account(b.node, &b.info, b.terminating, -1);
        }
    }

    /// Adds (`sign` 1) or removes (-1) a pod's share of node `n`.
    fn account(&mut self, n: usize, info: &PodInfo, terminating: bool, sign: i64) {
        let count = self.nodes.len();
        let node = &mut self.nodes[n];
        for (i, v) in info.dense.iter().enumerate() {
            node.requested[i] = node.requested[i].saturating_add(sign * v);
        }
        for (k, v) in &info.extended {
            let e = node.requested_extended.entry(k.clone()).or_insert(0);
            *e = e.saturating_add(sign * v);
        }
        for (i, v) in info.non_zero.iter().enumerate() {
            node.non_zero[i] = node.non_zero[i].saturating_add(sign * v);
        }
        node.pod_count += sign;
        let spec = &info.spec;
        if sign > 0 {
            node.ports.extend(spec.host_ports.iter().cloned());
        } else {
            for p in &spec.host_ports {
                if let Some(i) = node.ports.iter().position(|q| q == p) {
                    node.ports.swap_remove(i);
                }
            }
        }
        for counter in &mut self.counters {
            if !(terminating && counter.key.skip_terminating) && counter.key.matches(spec) {
                let c = &mut counter.per_node[n];
                *c = if sign > 0 {
                    *c + 1
                } else {
                    c.saturating_sub(1)
                };
            }
        }
        for t in &spec.anti_affinity {
            if sign > 0 {
                self.existing_anti.add(t, 0, n, count);
            } else {
                self.existing_anti.remove(t, 0, n);
            }
        }
        for (t, w) in scoring_terms(spec) {
            if sign > 0 {
                self.existing_preferred.add(t, w, n, count);
            } else {
                self.existing_preferred.remove(t, w, n);
            }
        }
    }

    /// Takes a new list of nodes: accounting, counters and term groups move
    /// with their nodes by name; pods of nodes that are gone are forgotten
    /// (returned, for the caller to re-add if their node comes back). Cached topology
    /// domains and static verdicts are dropped.
    fn replace_nodes(&mut self, nodes: &[Arc<Node>]) -> Vec<ObjectKey> {
        let mut fresh = State::new(nodes, Some(self));
        let old_to_new: Vec<Option<usize>> = self
            .nodes
            .iter()
            .map(|n| fresh.node_index.get(&n.name).copied())
            .collect();
        for (old, new) in old_to_new.iter().enumerate() {
            let Some(new) = new else { continue };
            let from = &mut self.nodes[old];
            let to = &mut fresh.nodes[*new];
            to.requested = from.requested;
            to.requested_extended = std::mem::take(&mut from.requested_extended);
            to.non_zero = from.non_zero;
            to.pod_count = from.pod_count;
            to.ports = std::mem::take(&mut from.ports);
        }
        let count = fresh.nodes.len();
        for mut counter in std::mem::take(&mut self.counters) {
            counter.per_node = remap(&counter.per_node, &old_to_new, count);
            fresh.counters.push(counter);
        }
        fresh.counter_index = std::mem::take(&mut self.counter_index);
        fresh.existing_anti = std::mem::take(&mut self.existing_anti);
        fresh.existing_anti.remap(&old_to_new, count);
        fresh.existing_preferred = std::mem::take(&mut self.existing_preferred);
        fresh.existing_preferred.remap(&old_to_new, count);
        // Remapped in place: the bound pods are most of the index.
        let mut dropped = Vec::new();
        self.bound.retain(|key, b| match old_to_new.get(b.node) {
            Some(Some(new)) => {
                b.node = *new;
                true
            }
            _ => {
                dropped.push(key.clone());
                false
            }
        });
        fresh.bound = std::mem::take(&mut self.bound);
        *self = fresh;
        dropped
    }

    fn counter(&mut self, key: CounterKey) -> usize {
        if let Some(i) = self.counter_index.get(&key) {
            return *i;
        }
        let mut per_node = vec![0u32; self.nodes.len()];
        for b in self.bound.values() {
            if !(b.terminating && key.skip_terminating) && key.matches(&b.info.spec) {
                per_node[b.node] += 1;
            }
        }
        self.counters.push(Counter {
            key: key.clone(),
            per_node,
        });
        let i = self.counters.len() - 1;
        self.counter_index.insert(key, i);
        i
    }

    fn topo(&self, key: &str) -> Option<&Topology> {
        self.topologies
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, t)| t)
    }

    fn topology(&mut self, key: &str) {
        if self.topo(key).is_some() {
            return;
        }
        let mut values: HashMap<&str, u32> = HashMap::new();
        let node_domain = self
            .nodes
            .iter()
            .map(|n| match n.labels.get(key) {
                Some(v) => {
                    let next = u32::try_from(values.len()).unwrap_or(NO_DOMAIN);
                    *values.entry(v.as_str()).or_insert(next)
                }
                None => NO_DOMAIN,
            })
            .collect();
        let domains = values.len();
        self.topologies.push((
            key.to_string(),
            Topology {
                node_domain,
                domains,
            },
        ));
    }

    fn statics(&mut self, spec: &PodSpec) -> Arc<StaticEval> {
        let key = StaticKey::of(spec);
        if let Some(s) = self.statics.get(&key) {
            return s.clone();
        }
        let tolerates = |t: &Taint| key.tolerations.iter().any(|tol| tol.tolerates(t));
        let unschedulable_taint = Taint::new(TAINT_UNSCHEDULABLE, "", Effect::NoSchedule);
        let prefer_tolerations: Vec<&Toleration> = key
            .tolerations
            .iter()
            .filter(|t| t.effect.is_none_or(|e| e == Effect::PreferNoSchedule))
            .collect();
        let n = self.nodes.len();
        let mut eval = StaticEval {
            verdict: Vec::with_capacity(n),
            affinity_match: Vec::with_capacity(n),
            taints_tolerated: Vec::with_capacity(n),
            taint_score: Vec::with_capacity(n),
            node_affinity_score: Vec::with_capacity(n),
        };
        for node in &self.nodes {
            let untolerated = node.taints.iter().copied().find(|id| {
                let t = &self.taints[*id as usize];
                t.effect != Effect::PreferNoSchedule && !tolerates(t)
            });
            let affinity = key.node_selector.matches_labels(&node.labels).is_ok()
                && (key.required_terms.is_empty()
                    || key
                        .required_terms
                        .iter()
                        .any(|t| t.matches_labels(&node.labels).is_ok()));
            let verdict = if node.unschedulable && !tolerates(&unschedulable_taint) {
                Verdict::Unschedulable
            } else if let Some(id) = untolerated {
                Verdict::Taint(id)
            } else if !affinity {
                Verdict::NodeAffinity
            } else {
                Verdict::Fits
            };
            eval.verdict.push(verdict);
            eval.affinity_match.push(affinity);
            eval.taints_tolerated.push(untolerated.is_none());
            let prefer = node
                .taints
                .iter()
                .map(|id| &self.taints[*id as usize])
                .filter(|t| t.effect == Effect::PreferNoSchedule)
                .filter(|t| !prefer_tolerations.iter().any(|tol| tol.tolerates(t)))
                .count();
            eval.taint_score
                .push(i64::try_from(prefer).unwrap_or(i64::MAX));
            eval.node_affinity_score.push(
                key.preferred_terms
                    .iter()
                    .filter(|(_, t)| t.matches_labels(&node.labels).is_ok())
                    .map(|(w, _)| i64::from(*w))
                    .sum(),
            );
        }
        let eval = Arc::new(eval);
        self.statics.insert(key, eval.clone());
        eval
    }

    /// Counts per domain of `topology_key` of the pods `counter` matches,
    /// over the nodes `include` accepts.
    fn domain_counts(
        &self,
        counter: usize,
        topology_key: &str,
        include: impl Fn(usize) -> bool,
    ) -> (Vec<i64>, Vec<bool>) {
        let Some(topo) = self.topo(topology_key) else {
            return (Vec::new(), Vec::new());
        };
        let mut counts = vec![0i64; topo.domains];
        let mut present = vec![false; topo.domains];
        let per_node = &self.counters[counter].per_node;
        for (n, d) in topo.node_domain.iter().enumerate() {
            if *d == NO_DOMAIN || !include(n) {
                continue;
            }
            present[*d as usize] = true;
            counts[*d as usize] += i64::from(per_node[n]);
        }
        (counts, present)
    }

    fn domain(&self, topology_key: &str, n: usize) -> u32 {
        self.topo(topology_key)
            .map_or(NO_DOMAIN, |t| t.node_domain[n])
    }

    /// Filters and scores every node for the pod: the best node, or
    /// kube-scheduler's message.
    fn place(&mut self, info: &PodInfo) -> Result<usize, String> {
        if self.nodes.is_empty() {
            return Err("no nodes available to schedule pods".to_string());
        }
        let spec = &info.spec;
        let statics = self.statics(spec);
        let own_namespace = || Namespaces::Names([spec.namespace.clone()].into_iter().collect());

        // PreFilter: topology spread (DoNotSchedule).
        let hard: Vec<_> = spec
            .spread
            .iter()
            .filter(|c| c.when_unsatisfiable == Unsatisfiable::DoNotSchedule)
            .collect();
        for c in &spec.spread {
            self.topology(&c.topology_key);
        }
        let has_keys = |state: &State, n: usize, keys: &[&str]| {
            keys.iter().all(|k| state.domain(k, n) != NO_DOMAIN)
        };
        let hard_keys: Vec<&str> = hard.iter().map(|c| c.topology_key.as_str()).collect();
        struct HardSpread {
            key: String,
            max_skew: i64,
            self_match: i64,
            counts: Vec<i64>,
            min: i64,
        }
        let mut hard_spread = Vec::with_capacity(hard.len());
        for c in &hard {
            let counter = (!c.selector.is_empty()).then(|| {
                self.counter(CounterKey {
                    terms: vec![(own_namespace(), c.selector.clone())],
                    skip_terminating: true,
                })
            });
            let eligible = |n: usize| {
                (!c.honor_node_affinity || statics.affinity_match[n])
                    && (!c.honor_node_taints || statics.taints_tolerated[n])
                    && has_keys(self, n, &hard_keys)
            };
            let (counts, present) = match counter {
                Some(i) => self.domain_counts(i, &c.topology_key, eligible),
                None => {
                    let topo_domains = self.topo(&c.topology_key).map_or(0, |t| t.domains);
                    let mut present = vec![false; topo_domains];
                    for n in 0..self.nodes.len() {
                        let d = self.domain(&c.topology_key, n);
                        if d != NO_DOMAIN && eligible(n) {
                            present[d as usize] = true;
                        }
                    }
                    (vec![0; topo_domains], present)
                }
            };
            let domains = present.iter().filter(|p| **p).count();
            let mut min = counts
                .iter()
                .zip(&present)
                .filter(|(_, p)| **p)
                .map(|(c, _)| *c)
                .min()
                .unwrap_or(0);
            if c.min_domains
                .is_some_and(|m| domains < usize::try_from(m).unwrap_or(usize::MAX))
            {
                min = 0;
            }
            hard_spread.push(HardSpread {
                key: c.topology_key.clone(),
                max_skew: i64::from(c.max_skew),
                self_match: i64::from(!c.selector.is_empty() && c.selector.matches(&spec.labels)),
                counts,
                min,
            });
        }

        // PreFilter: inter-pod affinity.
        for t in spec
            .affinity
            .iter()
            .chain(&spec.anti_affinity)
            .chain(spec.preferred_affinity.iter().map(|(_, t)| t))
            .chain(spec.preferred_anti_affinity.iter().map(|(_, t)| t))
        {
            self.topology(&t.topology_key);
        }
        let existing_keys: Vec<String> = self
            .existing_anti
            .groups
            .iter()
            .chain(&self.existing_preferred.groups)
            .map(|(t, _, _)| t.topology_key.clone())
            .collect();
        for k in &existing_keys {
            self.topology(k);
        }
        let mut affinity_counts: Vec<(String, Vec<i64>)> = Vec::new();
        let mut affinity_any = false;
        if !spec.affinity.is_empty() {
            let all = self.counter(CounterKey {
                terms: spec
                    .affinity
                    .iter()
                    .map(|t| (t.namespaces.clone(), t.selector.clone()))
                    .collect(),
                skip_terminating: false,
            });
            for t in &spec.affinity {
                let (counts, _) = self.domain_counts(all, &t.topology_key, |_| true);
                affinity_any |= counts.iter().any(|c| *c > 0);
                affinity_counts.push((t.topology_key.clone(), counts));
            }
        }
        let affinity_self = spec.affinity.iter().all(|t| term_matches(t, spec));
        let mut anti_blocked: Vec<(String, Vec<bool>)> = Vec::new();
        for t in &spec.anti_affinity {
            let i = self.counter(CounterKey {
                terms: vec![(t.namespaces.clone(), t.selector.clone())],
                skip_terminating: false,
            });
            let (counts, _) = self.domain_counts(i, &t.topology_key, |_| true);
            anti_blocked.push((
                t.topology_key.clone(),
                counts.iter().map(|c| *c > 0).collect(),
            ));
        }
        let mut existing_blocked: Vec<(String, Vec<bool>)> = Vec::new();
        for (t, _, per_node) in &self.existing_anti.groups {
            if !term_matches(t, spec) {
                continue;
            }
            let Some(topo) = self.topo(&t.topology_key) else {
                continue;
            };
            let mut blocked = vec![false; topo.domains];
            for (n, c) in per_node.iter().enumerate() {
                let d = topo.node_domain[n];
                if *c > 0 && d != NO_DOMAIN {
                    blocked[d as usize] = true;
                }
            }
            existing_blocked.push((t.topology_key.clone(), blocked));
        }

        // Filter.
        let mut feasible = Vec::new();
        let mut reasons: BTreeMap<Reason, u32> = BTreeMap::new();
        let mut note = |r: Reason| *reasons.entry(r).or_insert(0) += 1;
        for (n, node) in self.nodes.iter().enumerate() {
            match statics.verdict[n] {
                Verdict::Fits => {}
                Verdict::Unschedulable => {
                    note(Reason::Unschedulable);
                    continue;
                }
                Verdict::Taint(id) => {
                    note(Reason::Taint(id));
                    continue;
                }
                Verdict::NodeAffinity => {
                    note(Reason::NodeAffinity);
                    continue;
                }
            }
            if spec
                .host_ports
                .iter()
                .any(|p| node.ports.iter().any(|q| p.conflicts(q)))
            {
                note(Reason::Ports);
                continue;
            }
            let mut insufficient = false;
            if node.pod_count + 1 > node.alloc_pods {
                note(Reason::TooManyPods);
                insufficient = true;
            }
            for (i, name) in [CPU, MEMORY, EPHEMERAL_STORAGE].iter().enumerate() {
                let want = info.dense[i];
                if want > 0 && want > node.alloc[i] - node.requested[i] {
                    note(Reason::Insufficient((*name).to_string()));
                    insufficient = true;
                }
            }
            for (name, want) in &info.extended {
                let free = node.alloc_extended.get(name).copied().unwrap_or(0)
                    - node.requested_extended.get(name).copied().unwrap_or(0);
                if *want > free {
                    note(Reason::Insufficient(name.clone()));
                    insufficient = true;
                }
            }
            if insufficient {
                continue;
            }
            if !hard_spread.is_empty() {
                if !has_keys(self, n, &hard_keys) {
                    note(Reason::SpreadMissingLabel);
                    continue;
                }
                let skewed = hard_spread.iter().any(|c| {
                    let d = self.domain(&c.key, n) as usize;
                    let count = c.counts.get(d).copied().unwrap_or(0);
                    count + c.self_match - c.min > c.max_skew
                });
                if skewed {
                    note(Reason::Spread);
                    continue;
                }
            }
            if !spec.affinity.is_empty() {
                let mut keys_present = true;
                let mut pods_exist = true;
                for (key, counts) in &affinity_counts {
                    let d = self.domain(key, n);
                    if d == NO_DOMAIN {
                        keys_present = false;
                    } else if counts.get(d as usize).copied().unwrap_or(0) <= 0 {
                        pods_exist = false;
                    }
                }
                let ok = keys_present && (pods_exist || (!affinity_any && affinity_self));
                if !ok {
                    note(Reason::PodAffinity);
                    continue;
                }
            }
            let blocked = |sets: &[(String, Vec<bool>)]| {
                sets.iter().any(|(key, blocked)| {
                    let d = self.domain(key, n);
                    d != NO_DOMAIN && blocked.get(d as usize).copied().unwrap_or(false)
                })
            };
            if blocked(&anti_blocked) {
                note(Reason::PodAntiAffinity);
                continue;
            }
            if blocked(&existing_blocked) {
                note(Reason::ExistingAntiAffinity);
                continue;
            }
            feasible.push(n);
        }
        if feasible.is_empty() {
            return Err(self.message(&reasons));
        }
        if feasible.len() == 1 {
            return Ok(feasible[0]);
        }
        let scores = self.score(info, &statics, &feasible);
        let best = feasible
            .iter()
            .zip(&scores)
            .max_by(|(a, sa), (b, sb)| sa.cmp(sb).then_with(|| b.cmp(a)))
            .map(|(n, _)| *n)
            .unwrap_or(feasible[0]);
        Ok(best)
    }

    /// kube-scheduler's `FitError` message.
    fn message(&self, reasons: &BTreeMap<Reason, u32>) -> String {
        let mut parts: Vec<String> = reasons
            .iter()
            .map(|(reason, count)| {
                let text = match reason {
                    Reason::Unschedulable => "node(s) were unschedulable".to_string(),
                    Reason::Taint(id) => {
                        let t = &self.taints[*id as usize];
                        format!("node(s) had untolerated taint {{{}: {}}}", t.key, t.value)
                    }
                    Reason::NodeAffinity => "node(s) didn't match Pod's node affinity/selector".to_string(),
                    Reason::Ports => "node(s) didn't have free ports for the requested pod ports".to_string(),
                    Reason::TooManyPods => "Too many pods".to_string(),
                    Reason::Insufficient(r) => format!("Insufficient {r}"),
                    Reason::SpreadMissingLabel => {
                        "node(s) didn't match pod topology spread constraints (missing required label)".to_string()
                    }
                    Reason::Spread => "node(s) didn't match pod topology spread constraints".to_string(),
                    Reason::PodAffinity => "node(s) didn't match pod affinity rules".to_string(),
                    Reason::PodAntiAffinity => "node(s) didn't match pod anti-affinity rules".to_string(),
                    Reason::ExistingAntiAffinity => {
                        "node(s) didn't satisfy existing pods anti-affinity rules".to_string()
                    }
                };
                format!("{count} {text}")
            })
            .collect();
        // Go's sort.Strings: byte order, so "10 x" sorts before "2 y".
        parts.sort();
        format!(
            "0/{} nodes are available: {}.",
            self.nodes.len(),
            parts.join(", ")
        )
    }

    /// Weighted, normalised scores of the feasible nodes.
    fn score(&mut self, info: &PodInfo, statics: &StaticEval, feasible: &[usize]) -> Vec<i64> {
        let spec = &info.spec;
        let mut total = vec![0i64; feasible.len()];
        let best_effort = info.dense[0] == 0 && info.dense[1] == 0;
        for (i, n) in feasible.iter().enumerate() {
            let node = &self.nodes[*n];
            // NodeResourcesFit, LeastAllocated on cpu and memory.
            let mut sum = 0;
            let mut weights = 0;
            for r in 0..2 {
                let alloc = node.alloc[r];
                if alloc == 0 {
                    continue;
                }
                let requested = node.non_zero[r] + info.non_zero[r];
                sum += if requested > alloc {
                    0
                } else {
                    (alloc - requested) * MAX_NODE_SCORE / alloc
                };
                weights += 1;
            }
            if weights > 0 {
                total[i] += WEIGHT_FIT * (sum / weights);
            }
            // NodeResourcesBalancedAllocation on cpu and memory.
            if !best_effort {
                let fractions: Vec<f64> = (0..2)
                    .filter(|r| node.alloc[*r] != 0)
                    .map(|r| {
                        let requested = node.requested[r] + info.dense[r];
                        (requested as f64 / node.alloc[r] as f64).min(1.0)
                    })
                    .collect();
                let std = if fractions.len() == 2 {
                    ((fractions[0] - fractions[1]) / 2.0).abs()
                } else {
                    0.0
                };
                total[i] += WEIGHT_BALANCED * ((1.0 - std) * MAX_NODE_SCORE as f64) as i64;
            }
        }
        // TaintToleration (reversed) and NodeAffinity.
        let taint: Vec<i64> = feasible.iter().map(|n| statics.taint_score[*n]).collect();
        for (t, s) in total.iter_mut().zip(default_normalize(&taint, true)) {
            *t += WEIGHT_TAINT * s;
        }
        let affinity: Vec<i64> = feasible
            .iter()
            .map(|n| statics.node_affinity_score[*n])
            .collect();
        for (t, s) in total.iter_mut().zip(default_normalize(&affinity, false)) {
            *t += WEIGHT_NODE_AFFINITY * s;
        }
        for (t, s) in total.iter_mut().zip(self.inter_pod_scores(spec, feasible)) {
            *t += WEIGHT_INTER_POD_AFFINITY * s;
        }
        for (t, s) in total
            .iter_mut()
            .zip(self.spread_scores(spec, statics, feasible))
        {
            *t += WEIGHT_SPREAD * s;
        }
        total
    }

    /// InterPodAffinity: preferred terms of the pod, and terms of bound pods
    /// that match it, summed per topology domain; min-max normalised.
    fn inter_pod_scores(&mut self, spec: &PodSpec, feasible: &[usize]) -> Vec<i64> {
        // (topology key, per-domain score)
        let mut contributions: Vec<(String, Vec<i64>)> = Vec::new();
        let own: Vec<(i64, PodAffinityTerm)> = spec
            .preferred_affinity
            .iter()
            .map(|(w, t)| (i64::from(*w), t.clone()))
            .chain(
                spec.preferred_anti_affinity
                    .iter()
                    .map(|(w, t)| (-i64::from(*w), t.clone())),
            )
            .collect();
        for (w, t) in own {
            let i = self.counter(CounterKey {
                terms: vec![(t.namespaces.clone(), t.selector.clone())],
                skip_terminating: false,
            });
            let (counts, _) = self.domain_counts(i, &t.topology_key, |_| true);
            contributions.push((t.topology_key, counts.iter().map(|c| c * w).collect()));
        }
        for (t, w, per_node) in &self.existing_preferred.groups {
            if !term_matches(t, spec) {
                continue;
            }
            let Some(topo) = self.topo(&t.topology_key) else {
                continue;
            };
            let mut counts = vec![0i64; topo.domains];
            for (n, c) in per_node.iter().enumerate() {
                let d = topo.node_domain[n];
                if d != NO_DOMAIN {
                    counts[d as usize] += i64::from(*c) * w;
                }
            }
            contributions.push((t.topology_key.clone(), counts));
        }
        if contributions.is_empty() {
            return vec![0; feasible.len()];
        }
        let raw: Vec<i64> = feasible
            .iter()
            .map(|n| {
                contributions
                    .iter()
                    .map(|(key, counts)| {
                        let d = self.domain(key, *n);
                        if d == NO_DOMAIN {
                            0
                        } else {
                            counts.get(d as usize).copied().unwrap_or(0)
                        }
                    })
                    .sum()
            })
            .collect();
        let min = raw.iter().copied().min().unwrap_or(0);
        let max = raw.iter().copied().max().unwrap_or(0);
        raw.iter()
            .map(|s| {
                if max > min {
                    (MAX_NODE_SCORE as f64 * ((s - min) as f64 / (max - min) as f64)) as i64
                } else {
                    0
                }
            })
            .collect()
    }

    /// PodTopologySpread for `ScheduleAnyway` constraints.
    fn spread_scores(
        &mut self,
        spec: &PodSpec,
        statics: &StaticEval,
        feasible: &[usize],
    ) -> Vec<i64> {
        let soft: Vec<_> = spec
            .spread
            .iter()
            .filter(|c| c.when_unsatisfiable == Unsatisfiable::ScheduleAnyway)
            .collect();
        if soft.is_empty() {
            return vec![0; feasible.len()];
        }
        let keys: Vec<&str> = soft.iter().map(|c| c.topology_key.as_str()).collect();
        let has_all =
            |state: &State, n: usize| keys.iter().all(|k| state.domain(k, n) != NO_DOMAIN);
        let ignored: Vec<bool> = feasible.iter().map(|n| !has_all(self, *n)).collect();
        let scored = ignored.iter().filter(|i| !**i).count();
        let mut raw_f = vec![0f64; feasible.len()];
        for c in &soft {
            let counter = (!c.selector.is_empty()).then(|| {
                self.counter(CounterKey {
                    terms: vec![(
                        Namespaces::Names([spec.namespace.clone()].into_iter().collect()),
                        c.selector.clone(),
                    )],
                    skip_terminating: true,
                })
            });
            let hostname = c.topology_key == crate::model::labels::HOSTNAME;
            let per_node = |n: usize| -> i64 {
                counter.map_or(0, |i| i64::from(self.counters[i].per_node[n]))
            };
            let (counts, size) = if hostname {
                (Vec::new(), scored)
            } else {
                let domains = self.topo(&c.topology_key).map_or(0, |t| t.domains);
                let mut candidate = vec![false; domains];
                for (i, n) in feasible.iter().enumerate() {
                    let d = self.domain(&c.topology_key, *n);
                    if !ignored[i] && d != NO_DOMAIN {
                        candidate[d as usize] = true;
                    }
                }
                let mut counts = vec![0i64; domains];
                for n in 0..self.nodes.len() {
                    let d = self.domain(&c.topology_key, n);
                    if d == NO_DOMAIN
                        || !candidate[d as usize]
                        || !has_all(self, n)
                        || (c.honor_node_affinity && !statics.affinity_match[n])
                        || (c.honor_node_taints && !statics.taints_tolerated[n])
                    {
                        continue;
                    }
                    counts[d as usize] += per_node(n);
                }
                let size = candidate.iter().filter(|c| **c).count();
                (counts, size)
            };
            let weight = ((size + 2) as f64).ln();
            for (i, n) in feasible.iter().enumerate() {
                if ignored[i] {
                    continue;
                }
                let count = if hostname {
                    per_node(*n)
                } else {
                    let d = self.domain(&c.topology_key, *n);
                    counts.get(d as usize).copied().unwrap_or(0)
                };
                raw_f[i] += count as f64 * weight + f64::from(c.max_skew) - 1.0;
            }
        }
        let raw: Vec<i64> = raw_f.iter().map(|s| s.round() as i64).collect();
        let (mut min, mut max) = (i64::MAX, 0i64);
        for (i, s) in raw.iter().enumerate() {
            if !ignored[i] {
                min = min.min(*s);
                max = max.max(*s);
            }
        }
        raw.iter()
            .enumerate()
            .map(|(i, s)| {
                if ignored[i] {
                    0
                } else if max == 0 {
                    MAX_NODE_SCORE
                } else {
                    MAX_NODE_SCORE * (max + min - s) / max
                }
            })
            .collect()
    }
}

/// `helper.DefaultNormalizeScore`: scale to 0..=100 by the maximum,
/// optionally reversed.
fn default_normalize(scores: &[i64], reverse: bool) -> Vec<i64> {
    let max = scores.iter().copied().max().unwrap_or(0).max(0);
    scores
        .iter()
        .map(|s| {
            if max == 0 {
                if reverse { MAX_NODE_SCORE } else { 0 }
            } else {
                let v = MAX_NODE_SCORE * s / max;
                if reverse { MAX_NODE_SCORE - v } else { v }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
