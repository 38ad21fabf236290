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
//!   node that does not exist are deleted, as the pod garbage collector
//!   does with orphaned pods;
//! - every DaemonSet gets a running pod on each Node whose `NoSchedule` and
//!   `NoExecute` taints its pods tolerate (with the tolerations the
//!   DaemonSet controller adds) and whose labels match its node selector and
//!   required node affinity;
//! - pods bound to a Ready node start (`Running`, `Ready=True`,
//!   `startTime`); pods of a Job succeed once they have run for the Job's
//!   `simulate.dovetail.dev/duration` annotation (default 10m).
//!
//! Everything is processed in name order, so a sync is deterministic.
//!
//! # Simplifications
//! - Heartbeats are not renewed: a Node's `lastHeartbeatTime` is its
//!   registration time, and Nodes never become NotReady by themselves.
//! - DaemonSet pods are created bound and running; the DaemonSet controller
//!   does not check resources either (the kubelet would reject a pod that
//!   does not fit). Template changes do not roll out, and pods on nodes the
//!   DaemonSet no longer matches are kept.
//! - Containers have no statuses; only the pod's phase and conditions move.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAddress, NodeAffinity, NodeCondition, NodeSelector,
    NodeSelectorRequirement, NodeSelectorTerm, NodeSpec, NodeStatus, Pod, PodCondition, PodStatus,
    Taint as K8sTaint, Toleration as K8sToleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::Serialize;

use crate::api::labels::{
    LABEL_ARCH, LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, LABEL_OS,
    LABEL_REGION, LABEL_ZONE, TAINT_UNREGISTERED,
};
use crate::clock::{Timestamp, truncate_to_second};
use crate::cloud::{Instance, InstanceState};
use crate::cluster::{MemoryCluster, ObjectKey, Selector};
use crate::model::{Effect, InstanceType, Resources, Taint, Toleration};
use crate::scheduling::pod::{VolumeIndex, pod_spec};
use crate::timing::{DurationSyntax, NillableDuration, parse_duration};

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
            && self.daemon_pods.is_empty()
            && self.started.is_empty()
            && self.completed.is_empty()
            && self.errors.is_empty()
    }
}

/// The stand-in kubelet of every simulated node.
#[derive(Debug, Clone)]
pub struct Kubelet {
    launch_delay: Duration,
}

impl Kubelet {
    /// A kubelet that registers a node `launch_delay` after its instance
    /// was launched (the scenario's `cloud.launchDelay`).
    pub fn new(launch_delay: Duration) -> Self {
        Kubelet { launch_delay }
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
        instances: &[Instance],
        catalog: &[InstanceType],
        now: Timestamp,
    ) -> KubeletReport {
        let mut report = KubeletReport::default();
        let mut nodes: BTreeMap<String, Arc<Node>> = cluster
            .list::<Node>(None, &Selector::everything())
            .items
            .into_iter()
            .map(|n| (n.metadata.name.clone().unwrap_or_default(), n))
            .collect();
        self.register_nodes(cluster, instances, catalog, now, &mut nodes, &mut report);
        delete_nodes_without_instance(cluster, instances, &mut nodes, &mut report);
        let pods = cluster.list::<Pod>(None, &Selector::everything()).items;
        let mut jobs = JobDurations::default();
        let mut daemon_pods: HashSet<(&str, &str)> = HashSet::new();
        for pod in &pods {
            let key = ObjectKey::of(pod.as_ref());
            if let Some(uid) = controller_of_kind(pod, "DaemonSet").map(|r| r.uid.as_str())
                && let Some(node) = node_name(pod)
            {
                daemon_pods.insert((uid, node));
            }
            if pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let Some(node_name) = node_name(pod) else {
                continue;
            };
            let Some(node) = nodes.get(node_name) else {
                match cluster.delete::<Pod>(&key) {
                    Ok(_) => report.orphans_deleted.push(key.to_string()),
                    Err(e) => report.errors.push((key.to_string(), e.to_string())),
                }
                continue;
            };
            match phase(pod) {
                None | Some("Pending") if is_node_ready(node) => {
                    match cluster.update_status_with::<Pod>(&key, |p| start_pod(p, now)) {
                        Ok(_) => report.started.push(key.to_string()),
                        Err(e) => report.errors.push((key.to_string(), e.to_string())),
                    }
                }
                Some("Running") => {
                    let Some(job) = controller_of_kind(pod, "Job") else {
                        continue;
                    };
                    let duration = jobs.get(cluster, &key.namespace, &job.name, &mut report);
                    let started = pod
                        .status
                        .as_ref()
                        .and_then(|s| s.start_time.as_ref())
                        .or(pod.metadata.creation_timestamp.as_ref())
                        .map(|t| t.0);
                    let done = started
                        .and_then(|s| s.checked_add(duration).ok())
                        .is_some_and(|end| end <= now);
                    if done {
                        match cluster.update_status_with::<Pod>(&key, |p| complete_pod(p, now)) {
                            Ok(_) => report.completed.push(key.to_string()),
                            Err(e) => report.errors.push((key.to_string(), e.to_string())),
                        }
                    }
                }
                _ => {}
            }
        }
        run_daemon_sets(cluster, &nodes, &daemon_pods, now, &mut report);
        report
    }

    fn register_nodes(
        &self,
        cluster: &MemoryCluster,
        instances: &[Instance],
        catalog: &[InstanceType],
        now: Timestamp,
        nodes: &mut BTreeMap<String, Arc<Node>>,
        report: &mut KubeletReport,
    ) {
        let registered: HashSet<&str> = nodes
            .values()
            .filter_map(|n| n.spec.as_ref()?.provider_id.as_deref())
            .collect();
        let mut due: Vec<&Instance> = instances
            .iter()
            .filter(|i| !registered.contains(i.provider_id.as_str()))
            .filter(|i| self.ready_at(i).is_some_and(|t| t <= now))
            .collect();
        due.sort_by(|a, b| a.id.cmp(&b.id));
        let mut taken: HashSet<String> = nodes.keys().cloned().collect();
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
                taken.contains(&node_name_for(a, instance))
            });
            let node = new_node(instance, instance_type, address, now);
            let name = node.metadata.name.clone().unwrap_or_default();
            match cluster.create(node) {
                Ok(created) => {
                    taken.insert(name.clone());
                    nodes.insert(name.clone(), created);
                    report.registered.push(name);
                }
                Err(e) => report.errors.push((name, e.to_string())),
            }
        }
    }
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
    instances: &[Instance],
    nodes: &mut BTreeMap<String, Arc<Node>>,
    report: &mut KubeletReport,
) {
    let alive: HashSet<&str> = instances
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

fn quantities(resources: &Resources) -> BTreeMap<String, Quantity> {
    resources
        .to_strings()
        .into_iter()
        .map(|(k, v)| (k, Quantity(v)))
        .collect()
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
    let mut labels = instance.labels.clone();
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
            capacity: Some(quantities(&instance_type.capacity)),
            allocatable: Some(quantities(&instance_type.allocatable)),
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

/// Whether a node reports `Ready=True`.
pub fn is_node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

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
}

fn complete_pod(pod: &mut Pod, now: Timestamp) {
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
    let parsed = pod_spec(&template, &VolumeIndex::default(), 0).map_err(|e| e.message)?;
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
    existing: &HashSet<(&str, &str)>,
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
            .filter(|n| !existing.contains(&(uid, *n)))
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
