//! The metrics the reference computes from its view of the cluster, read
//! here from the cache at gather time (a scrape of `/metrics`, or a
//! snapshot of `simulate --metrics`), so no per-pod or per-node series is
//! kept between gathers and a deleted object's series is gone at once:
//!
//! - `karpenter_pods_state`: one series per pod, valued 1 (as the
//!   reference's `metrics.pod` controller);
//! - `karpenter_nodes_allocatable`, `karpenter_nodes_total_pod_requests`,
//!   `karpenter_nodes_total_daemon_requests`: per node and resource (its
//!   `metrics.node` controller), labelled with the node's well-known labels;
//! - `karpenter_nodepools_usage` and `karpenter_nodepools_limit`: per
//!   NodePool and resource (its `metrics.nodepool` controller).
//!
//! Label names, values and units are the reference's: cpu in cores, other
//! resources in their base unit, resource names in lower case with `-` as
//! `_` (`ephemeral_storage`). The only per-object labels are the ones the
//! reference has: pod `name` and `node` on `karpenter_pods_state`,
//! `node_name` on the node metrics.
//!
//! The node metrics carry the node's 36 well-known labels
//! (`well_known_node_labels`). `PodStartup` keeps the pods seen pending, for
//! the pod-startup summary; the controller looks at the pods only when they
//! changed.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use prometheus::proto::{Gauge, LabelPair, Metric, MetricFamily, MetricType};

use crate::api::labels::ALLOWED_KARPENTER_AWS_LABELS;
use crate::api::{
    LABEL_ARCH, LABEL_CAPACITY_TYPE, LABEL_EC2NODECLASS, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL,
    LABEL_OS, LABEL_REGION, LABEL_WINDOWS_BUILD, LABEL_ZONE, NodeClaim, NodePool, SlimPod,
    label_or_empty,
};
use crate::cluster::{Cluster, ListChange, Listed};
use crate::model::Resources;
use crate::model::quantity::{CPU, PODS};

/// The node labels the reference's node metrics carry (Karpenter v1.14.1's
/// `WellKnownLabels` with the AWS provider's): each becomes the metric
/// label named by the part after its `/`, in lower case with `-` as `_`.
pub fn well_known_node_labels() -> Vec<&'static str> {
    let mut keys = vec![
        LABEL_NODEPOOL,
        LABEL_ZONE,
        LABEL_REGION,
        LABEL_INSTANCE_TYPE,
        LABEL_ARCH,
        LABEL_OS,
        LABEL_CAPACITY_TYPE,
        LABEL_WINDOWS_BUILD,
        "topology.k8s.aws/zone-id",
    ];
    keys.extend(
        ALLOWED_KARPENTER_AWS_LABELS
            .iter()
            .copied()
            .filter(|k| *k != LABEL_EC2NODECLASS),
    );
    keys
}

/// The metric label for a node label key or resource name: the part after
/// the last `/` of a label key, lower case, `-` as `_`.
pub fn metric_label(key: &str) -> String {
    let name = key.rsplit_once('/').map_or(key, |(_, n)| n);
    name.to_lowercase().replace('-', "_")
}

/// A resource name as the reference writes it in `resource_type`: lower
/// case, `-` as `_` (an extended resource keeps its domain:
/// `nvidia.com/gpu`).
pub fn resource_type(name: &str) -> String {
    name.to_lowercase().replace('-', "_")
}

/// A quantity in the reference's unit: cores for cpu, the base unit else.
fn value(resource: &str, v: i64) -> f64 {
    if resource == CPU {
        v as f64 / 1000.0
    } else {
        v as f64
    }
}

fn pair(name: &str, value: &str) -> LabelPair {
    let mut p = LabelPair::default();
    p.set_name(name.to_string());
    p.set_value(value.to_string());
    p
}

/// A gauge family of `(labels, value)` metrics, labels in name order.
fn gauges(name: &str, help: &str, metrics: Vec<(Vec<LabelPair>, f64)>) -> MetricFamily {
    let mut f = MetricFamily::default();
    f.set_name(name.to_string());
    f.set_help(help.to_string());
    f.set_field_type(MetricType::GAUGE);
    f.set_metric(
        metrics
            .into_iter()
            .map(|(mut labels, v)| {
                labels.sort_by(|a, b| a.name().cmp(b.name()));
                let mut g = Gauge::default();
                g.set_value(v);
                let mut m = Metric::from_gauge(g);
                m.set_label(labels);
                m
            })
            .collect(),
    );
    f
}

fn bool_str(b: bool) -> &'static str {
    if b { "true" } else { "false" }
}

/// Every family this module computes, from the cluster's cache now.
pub fn families<C: Cluster>(cluster: &C) -> Vec<MetricFamily> {
    let nodes = cluster.list::<Node>();
    let claims = cluster.list::<NodeClaim>();
    let pods = cluster.list::<SlimPod>();
    let by_name: HashMap<&str, &Arc<Node>> = nodes
        .iter()
        .filter_map(|n| Some((n.metadata.name.as_deref()?, n)))
        .collect();
    let mut out = vec![pods_state(&pods, &by_name)];
    out.extend(node_resources(&nodes, &claims, &pods));
    out.extend(nodepools(cluster, &claims, &by_name));
    // A family without metrics is not exposed (as a registry gathers).
    out.retain(|f| !f.get_metric().is_empty());
    out
}

/// `karpenter_pods_state`.
fn pods_state(pods: &[Arc<SlimPod>], nodes: &HashMap<&str, &Arc<Node>>) -> MetricFamily {
    let metrics = pods
        .iter()
        .map(|pod| {
            let node_name = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .unwrap_or_default();
            let node = nodes.get(node_name);
            let label = |k: &str| node.map_or("", |n| label_or_empty(&n.metadata, k));
            let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
            // The reference's self link of the first owner.
            let owner = pod
                .metadata
                .owner_references
                .iter()
                .flatten()
                .next()
                .map(|o| {
                    format!(
                        "/apis/{}/namespaces/{namespace}/{}s/{}",
                        o.api_version,
                        o.kind.to_lowercase(),
                        o.name
                    )
                })
                .unwrap_or_default();
            let phase = pod
                .status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .unwrap_or_default();
            let labels = vec![
                pair("name", pod.metadata.name.as_deref().unwrap_or_default()),
                pair("namespace", namespace),
                pair("owner", &owner),
                pair("node", node_name),
                pair("scheduled", bool_str(!node_name.is_empty())),
                pair("nodepool", label(LABEL_NODEPOOL)),
                pair("zone", label(LABEL_ZONE)),
                pair("arch", label(LABEL_ARCH)),
                pair("capacity_type", label(LABEL_CAPACITY_TYPE)),
                pair("instance_type", label(LABEL_INSTANCE_TYPE)),
                pair("phase", phase),
                pair("ready", bool_str(pod.is_ready())),
                pair("managed", bool_str(!label(LABEL_NODEPOOL).is_empty())),
            ];
            (labels, 1.0)
        })
        .collect();
    gauges(
        "karpenter_pods_state",
        "Pod state is the current state of pods. This metric can be used several ways as it is labeled by the pod name, namespace, owner, node, nodepool name, zone, architecture, capacity type, instance type, pod phase, and pod readiness.",
        metrics,
    )
}

/// `karpenter_nodes_allocatable`, `karpenter_nodes_total_pod_requests`
/// (every pod bound to the node and not finished, DaemonSet pods included,
/// with `pods` their count) and `karpenter_nodes_total_daemon_requests`.
fn node_resources(
    nodes: &[Arc<Node>],
    claims: &[Arc<NodeClaim>],
    pods: &[Arc<SlimPod>],
) -> Vec<MetricFamily> {
    let mut requests: HashMap<&str, (Resources, Resources)> = HashMap::new();
    for pod in pods.iter().filter(|p| !p.is_finished()) {
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
            continue;
        };
        let Ok(r) = crate::scheduling::pod::pod_requests(pod) else {
            continue;
        };
        let entry = requests.entry(node).or_default();
        entry.0.add(&r);
        if pod.is_daemon() {
            entry.1.add(&r);
        }
    }
    let managed: std::collections::HashSet<&str> = claims
        .iter()
        .filter_map(|c| c.status.as_ref()?.provider_id.as_deref())
        .collect();
    let keys = well_known_node_labels();
    let (mut allocatable, mut pod_requests, mut daemon_requests) = (vec![], vec![], vec![]);
    for node in nodes {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let mut labels: Vec<LabelPair> = keys
            .iter()
            .map(|k| pair(&metric_label(k), label_or_empty(&node.metadata, k)))
            .collect();
        labels.push(pair("node_name", name));
        labels.push(pair(
            "phase",
            node.status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .unwrap_or_default(),
        ));
        let is_managed = node
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .is_some_and(|p| managed.contains(p));
        labels.push(pair("managed", bool_str(is_managed)));
        let with_resource = |resource: &str| {
            let mut l = labels.clone();
            l.push(pair("resource_type", &resource_type(resource)));
            l
        };
        if let Some(a) = node.status.as_ref().and_then(|s| s.allocatable.as_ref())
            && let Ok(r) = Resources::from_k8s(a)
        {
            for (k, v) in &r.0 {
                allocatable.push((with_resource(k), value(k, *v)));
            }
        }
        if let Some((all, daemon)) = requests.get(name) {
            for (k, v) in &all.0 {
                pod_requests.push((with_resource(k), value(k, *v)));
            }
            if daemon.get(PODS) > 0 {
                for (k, v) in &daemon.0 {
                    daemon_requests.push((with_resource(k), value(k, *v)));
                }
            }
        }
    }
    vec![
        gauges(
            "karpenter_nodes_allocatable",
            "Node allocatable are the resources allocatable by nodes.",
            allocatable,
        ),
        gauges(
            "karpenter_nodes_total_pod_requests",
            "Node total pod requests are the resources requested by pods bound to nodes, including the DaemonSet pods.",
            pod_requests,
        ),
        gauges(
            "karpenter_nodes_total_daemon_requests",
            "Node total daemon requests are the resource requested by DaemonSet pods bound to nodes.",
            daemon_requests,
        ),
    ]
}

/// The resources a NodePool's status reports in the reference
/// (`status.resources`): the capacity of its nodes and NodeClaims not being
/// deleted or disrupted (a node's own once registered, else the claim's),
/// `nodes` their count. `parsed` holds each NodeClaim's part as read at the
/// last call, and their sums: only the claims that changed, or whose Node
/// did, are read again, and the sums change by their parts alone.
pub(super) fn nodepool_usage<'n>(
    claims: &[Arc<NodeClaim>],
    node_named: impl Fn(&str) -> Option<&'n Arc<Node>>,
    parsed: &mut ParsedCapacity,
) -> BTreeMap<String, Resources> {
    parsed.generation += 1;
    let generation = parsed.generation;
    let ParsedCapacity { parts, pools, .. } = parsed;
    for claim in claims {
        let node = claim
            .status
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .and_then(&node_named);
        let address = Arc::as_ptr(claim) as usize;
        if let Some(part) = parts.get_mut(&address)
            && part.node.as_ref().map(Arc::as_ptr) == node.map(Arc::as_ptr)
        {
            part.seen = generation;
            continue;
        }
        let part = Part::read(claim, node, generation);
        part.count(pools, 1);
        if let Some(old) = parts.insert(address, part) {
            old.count(pools, -1);
        }
    }
    parts.retain(|_, part| {
        let kept = part.seen == generation;
        if !kept {
            part.count(pools, -1);
        }
        kept
    });
    pools
        .iter()
        .map(|(pool, sum)| {
            let resources = sum
                .resources
                .iter()
                .map(|(k, (v, _))| {
                    let v = (*v).clamp(i64::MIN.into(), i64::MAX.into());
                    (k.clone(), i64::try_from(v).expect("clamped"))
                })
                .collect();
            (pool.clone(), Resources(resources))
        })
        .collect()
}

/// Each NodeClaim's part in its NodePool's usage, by the claim's address,
/// and the parts summed by NodePool. An entry holds its claim, so the
/// address names that version alone.
#[derive(Default)]
pub(super) struct ParsedCapacity {
    parts: HashMap<usize, Part, foldhash::fast::RandomState>,
    pools: BTreeMap<String, PoolSum>,
    /// The calls so far: a part not seen at the last one is gone.
    generation: u64,
}

impl ParsedCapacity {
    /// The latest registration among each NodePool's NodeClaims, as of the
    /// last call: the last transition of a Registered condition that is
    /// True.
    pub(super) fn last_registered(&self) -> BTreeMap<String, crate::clock::Timestamp> {
        let mut last: BTreeMap<&str, crate::clock::Timestamp> = BTreeMap::new();
        for part in self.parts.values() {
            if let (Some(pool), Some(t)) = (&part.pool, part.registered) {
                let at = last.entry(pool.as_str()).or_insert(t);
                *at = (*at).max(t);
            }
        }
        last.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }
}

/// A NodeClaim's part in its NodePool's usage.
struct Part {
    /// Held, so its address names this version alone.
    _claim: Arc<NodeClaim>,
    /// The Node its status named when read.
    node: Option<Arc<Node>>,
    /// Its NodePool, and what it adds there: its capacity and one node,
    /// or nothing.
    pool: Option<String>,
    counted: Option<Resources>,
    /// When it last turned Registered, while it is.
    registered: Option<crate::clock::Timestamp>,
    seen: u64,
}

/// The parts of one NodePool summed: the claims that name it, and each
/// resource's total with the number of parts that have it (a resource is
/// listed while one does, as a sum from nothing lists it).
#[derive(Default)]
struct PoolSum {
    claims: usize,
    resources: BTreeMap<String, (i128, usize)>,
}

impl Part {
    fn read(claim: &Arc<NodeClaim>, node: Option<&Arc<Node>>, seen: u64) -> Part {
        let pool = claim.nodepool_name().map(str::to_string);
        let counted = pool.as_ref().and_then(|_| counted_capacity(claim, node));
        let registered = crate::api::common::find_condition(
            claim.status.as_ref().and_then(|s| s.conditions.as_deref()),
            super::conditions::REGISTERED,
        )
        .filter(|c| c.is_true())
        .map(|c| c.last_transition_time.0);
        Part {
            _claim: Arc::clone(claim),
            node: node.cloned(),
            pool,
            counted,
            registered,
            seen,
        }
    }

    /// Adds this part to `pools` (`sign` 1), or takes it out (-1).
    fn count(&self, pools: &mut BTreeMap<String, PoolSum>, sign: i8) {
        let Some(pool) = &self.pool else {
            return;
        };
        if !pools.contains_key(pool) {
            pools.insert(pool.clone(), PoolSum::default());
        }
        let sum = pools.get_mut(pool).expect("inserted above");
        let step = |n: &mut usize| match sign {
            1 => *n += 1,
            _ => *n -= 1,
        };
        step(&mut sum.claims);
        for (k, v) in self.counted.iter().flat_map(|r| &r.0) {
            if !sum.resources.contains_key(k) {
                sum.resources.insert(k.clone(), (0, 0));
            }
            let entry = sum.resources.get_mut(k).expect("inserted above");
            entry.0 += i128::from(sign) * i128::from(*v);
            step(&mut entry.1);
            if entry.1 == 0 {
                sum.resources.remove(k);
            }
        }
        if sum.claims == 0 {
            pools.remove(pool);
        }
    }
}

/// What a NodeClaim adds to its NodePool's usage: its Node's capacity once
/// registered, else its own, and one node; nothing while it or its Node is
/// being deleted, it is being disrupted, or the capacity is absent, invalid
/// or empty.
fn counted_capacity(claim: &NodeClaim, node: Option<&Arc<Node>>) -> Option<Resources> {
    let disrupted = claim
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(super::ANNOTATION_DISRUPTION_REASON));
    if claim.metadata.deletion_timestamp.is_some() || disrupted {
        return None;
    }
    if node.is_some_and(|n| n.metadata.deletion_timestamp.is_some()) {
        return None;
    }
    let capacity = match node.and_then(|n| n.status.as_ref()?.capacity.as_ref()) {
        Some(c) => c,
        None => claim.status.as_ref()?.capacity.as_ref()?,
    };
    let mut r = Resources::from_k8s(capacity).ok()?;
    if r.0.is_empty() {
        return None;
    }
    r.add_one("nodes");
    Some(r)
}

/// `karpenter_nodepools_usage` and `karpenter_nodepools_limit`.
fn nodepools<C: Cluster>(
    cluster: &C,
    claims: &[Arc<NodeClaim>],
    nodes: &HashMap<&str, &Arc<Node>>,
) -> Vec<MetricFamily> {
    let pools = cluster.list::<NodePool>();
    let mut usage = nodepool_usage(
        claims,
        |n| nodes.get(n).copied(),
        &mut ParsedCapacity::default(),
    );
    let (mut used, mut limits) = (vec![], vec![]);
    for pool in &pools {
        let name = pool.metadata.name.as_deref().unwrap_or_default();
        let labels = |resource: &str| {
            vec![
                pair("nodepool", name),
                pair("resource_type", &resource_type(resource)),
            ]
        };
        // The reference's status starts from these, at zero.
        let mut u = usage.remove(name).unwrap_or_default();
        for base in [CPU, "memory", PODS, "ephemeral-storage", "nodes"] {
            u.0.entry(base.to_string()).or_insert(0);
        }
        for (k, v) in &u.0 {
            used.push((labels(k), value(k, *v)));
        }
        if let Some(Ok(l)) = pool.spec.limits.as_ref().map(Resources::from_k8s) {
            for (k, v) in &l.0 {
                limits.push((labels(k), value(k, *v)));
            }
        }
    }
    vec![
        gauges(
            "karpenter_nodepools_usage",
            "The amount of resources that have been provisioned for a nodepool. Labeled by nodepool name and resource type.",
            used,
        ),
        gauges(
            "karpenter_nodepools_limit",
            "Limits specified on the nodepool that restrict the quantity of resources provisioned. Labeled by nodepool name and resource type.",
            limits,
        ),
    ]
}

/// The pods seen pending, by uid, for `karpenter_pods_startup_duration_seconds`:
/// as the reference's `metrics.pod` controller, a pod seen with phase
/// `Pending` is observed once it is `Ready`, for the time from its creation
/// to its `Ready` condition's last transition. Only pods not yet started
/// are held; a pod that finishes or disappears first is dropped.
#[derive(Debug, Default)]
pub struct PodStartup {
    /// By uid.
    pending: std::collections::HashSet<String, foldhash::fast::RandomState>,
    /// The pods looked at last: a pod that is the same object in the next
    /// list has not changed, so only the others are looked at again.
    last: Listed<SlimPod>,
}

impl PodStartup {
    /// Looks at the pods that changed since the last list (the caller calls
    /// when pods changed).
    pub fn observe(&mut self, pods: &Listed<SlimPod>, metrics: &super::metrics::Metrics) {
        let change = ListChange::between(&self.last, pods);
        // The pods waited for that are gone or changed: a new version is
        // looked at below as any changed pod.
        let mut before: std::collections::HashSet<&str, foldhash::fast::RandomState> =
            Default::default();
        for pod in change.gone(&self.last) {
            if let Some(uid) = pod.metadata.uid.as_deref()
                && self.pending.remove(uid)
            {
                before.insert(uid);
            }
        }
        for &at in &change.added {
            let pod = &pods[at as usize];
            let Some(uid) = pod.metadata.uid.as_deref() else {
                continue;
            };
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            if matches!(phase, None | Some("Pending")) {
                self.pending.insert(uid.to_string());
                continue;
            }
            if !before.contains(uid) || pod.is_finished() {
                continue;
            }
            let ready = crate::api::pod::ready_condition(
                pod.status.as_ref().and_then(|s| s.conditions.as_deref()),
            );
            match (ready, pod.metadata.creation_timestamp.as_ref()) {
                (Some(c), Some(created)) => {
                    let at = c.last_transition_time.as_ref().map_or(created.0, |t| t.0);
                    let secs = at.duration_since(created.0).as_secs_f64().max(0.0);
                    metrics.pod_startup_duration.observe(&[], secs);
                }
                // Running but not ready yet: still waited for.
                (None, _) => {
                    self.pending.insert(uid.to_string());
                }
                (Some(_), None) => {}
            }
        }
        drop(before);
        self.last = pods.clone();
    }

    /// How many pods are waited for.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{ManualClock, Timestamp};
    use crate::testing::from_yaml as yaml;
    use crate::world::MemoryCluster;
    use k8s_openapi::api::core::v1::Pod;

    fn cluster() -> MemoryCluster {
        let c = MemoryCluster::new(Arc::new(ManualClock::new(Timestamp::UNIX_EPOCH)));
        c.create::<NodePool>(yaml(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: general}\n\
             spec: {template: {spec: {nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}, requirements: []}}, limits: {cpu: '100', memory: 400Gi}}\n",
        ))
        .unwrap();
        c.create::<NodeClaim>(yaml(
            "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {name: general-1, labels: {karpenter.sh/nodepool: general}}\n\
             spec: {nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}, requirements: []}\n\
             status: {providerID: 'aws:///us-east-1a/i-1', nodeName: n1, capacity: {cpu: '4', memory: 16Gi, pods: '58'}}\n",
        ))
        .unwrap();
        // In flight: counted with the capacity its status reports.
        c.create::<NodeClaim>(yaml(
            "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {name: general-2, labels: {karpenter.sh/nodepool: general}}\n\
             spec: {nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}, requirements: []}\n\
             status: {providerID: 'aws:///us-east-1b/i-2', capacity: {cpu: '2', memory: 8Gi, pods: '29'}}\n",
        ))
        .unwrap();
        c.create::<Node>(yaml(
            "apiVersion: v1\nkind: Node\nmetadata: {name: n1, labels: {karpenter.sh/nodepool: general, topology.kubernetes.io/zone: us-east-1a, kubernetes.io/arch: amd64, karpenter.sh/capacity-type: spot, node.kubernetes.io/instance-type: m7i.xlarge, karpenter.k8s.aws/instance-family: m7i}}\n\
             spec: {providerID: 'aws:///us-east-1a/i-1'}\n\
             status: {capacity: {cpu: '4', memory: 16Gi, pods: '58'}, allocatable: {cpu: 3920m, memory: 15Gi, pods: '58', ephemeral-storage: 18Gi}}\n",
        ))
        .unwrap();
        // Not dovetail's: a managed node group's.
        c.create::<Node>(yaml(
            "apiVersion: v1\nkind: Node\nmetadata: {name: system-1, labels: {kubernetes.io/arch: arm64}}\n\
             spec: {providerID: 'aws:///us-east-1a/i-9'}\n\
             status: {allocatable: {cpu: '2', memory: 4Gi, pods: '17'}}\n",
        ))
        .unwrap();
        let pod = |name: &str, owner: &str, cpu: &str, phase: &str| -> Pod {
            yaml(&format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: shop, uid: u-{name}, ownerReferences: [{owner}]}}\n\
                 spec: {{nodeName: n1, containers: [{{name: c, image: i, resources: {{requests: {{cpu: '{cpu}', memory: 1Gi}}}}}}]}}\n\
                 status: {{phase: {phase}, conditions: [{{type: Ready, status: 'True'}}]}}\n"
            ))
        };
        let rs = "{apiVersion: apps/v1, kind: ReplicaSet, name: web-1, uid: r, controller: true}";
        let ds = "{apiVersion: apps/v1, kind: DaemonSet, name: agent, uid: d, controller: true}";
        c.create(pod("web-a", rs, "1", "Running")).unwrap();
        c.create(pod("web-b", rs, "500m", "Running")).unwrap();
        c.create(pod("agent-a", ds, "100m", "Running")).unwrap();
        // Finished: requests nothing any more.
        c.create(pod("job-a", rs, "2", "Succeeded")).unwrap();
        c
    }

    /// `(labels, value)` of a family's metrics, labels as `k=v` pairs.
    fn samples(families: &[MetricFamily], name: &str) -> Vec<(BTreeMap<String, String>, f64)> {
        let f = families.iter().find(|f| f.name() == name).unwrap();
        f.get_metric()
            .iter()
            .map(|m| {
                (
                    m.get_label()
                        .iter()
                        .map(|l| (l.name().to_string(), l.value().to_string()))
                        .collect(),
                    m.get_gauge().get_value(),
                )
            })
            .collect()
    }

    fn value(s: &[(BTreeMap<String, String>, f64)], want: &[(&str, &str)]) -> Option<f64> {
        s.iter()
            .find(|(l, _)| {
                want.iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|(_, v)| *v)
    }

    #[test]
    fn node_metrics_have_the_reference_labels_units_and_values() {
        let f = families(&cluster());
        let alloc = samples(&f, "karpenter_nodes_allocatable");
        // Every node, every allocatable resource, with the well-known labels.
        assert_eq!(alloc.len(), 4 + 3);
        fn n1(r: &str) -> [(&str, &str); 2] {
            [("node_name", "n1"), ("resource_type", r)]
        }
        assert_eq!(value(&alloc, &n1("cpu")), Some(3.92));
        assert_eq!(
            value(&alloc, &n1("memory")),
            Some(15.0 * 1024.0 * 1024.0 * 1024.0)
        );
        assert_eq!(
            value(&alloc, &n1("ephemeral_storage")),
            Some(18.0 * 1024.0f64.powi(3))
        );
        let (labels, _) = &alloc[alloc
            .iter()
            .position(|(l, _)| l["node_name"] == "n1")
            .unwrap()];
        for (k, v) in [
            ("nodepool", "general"),
            ("zone", "us-east-1a"),
            ("arch", "amd64"),
            ("capacity_type", "spot"),
            ("instance_type", "m7i.xlarge"),
            ("instance_family", "m7i"),
            ("instance_cpu", ""),
            ("zone_id", ""),
            ("managed", "true"),
            ("phase", ""),
        ] {
            assert_eq!(
                labels.get(k).map(String::as_str),
                Some(v),
                "{k}: {labels:?}"
            );
        }
        assert_eq!(labels.len(), well_known_node_labels().len() + 4);
        assert_eq!(
            value(
                &alloc,
                &[("node_name", "system-1"), ("resource_type", "cpu")]
            ),
            Some(2.0)
        );
        assert!(
            alloc
                .iter()
                .any(|(l, _)| l["node_name"] == "system-1" && l["managed"] == "false")
        );

        let pods = samples(&f, "karpenter_nodes_total_pod_requests");
        assert_eq!(value(&pods, &n1("cpu")), Some(1.6));
        assert_eq!(value(&pods, &n1("pods")), Some(3.0));
        let daemon = samples(&f, "karpenter_nodes_total_daemon_requests");
        assert_eq!(value(&daemon, &n1("cpu")), Some(0.1));
        assert_eq!(value(&daemon, &n1("pods")), Some(1.0));
        // No pods on system-1: no request series, as the reference.
        assert!(!pods.iter().any(|(l, _)| l["node_name"] == "system-1"));
    }

    #[test]
    fn nodepool_usage_counts_nodes_and_claims_and_limits_are_the_spec() {
        let c = cluster();
        let f = families(&c);
        let usage = samples(&f, "karpenter_nodepools_usage");
        let u = |r: &str| value(&usage, &[("nodepool", "general"), ("resource_type", r)]);
        assert_eq!(u("cpu"), Some(6.0));
        assert_eq!(u("nodes"), Some(2.0));
        assert_eq!(u("pods"), Some(87.0));
        assert_eq!(u("ephemeral_storage"), Some(0.0));
        let limits = samples(&f, "karpenter_nodepools_limit");
        assert_eq!(limits.len(), 2);
        assert_eq!(
            value(
                &limits,
                &[("nodepool", "general"), ("resource_type", "memory")]
            ),
            Some(400.0 * 1024.0f64.powi(3))
        );
    }

    /// The capacity parsed at one call is reused at the next for the
    /// objects that did not change, and parsed again for those that did.
    #[test]
    fn nodepool_usage_parses_again_only_what_changed() {
        let c = cluster();
        let usage = |c: &MemoryCluster, parsed: &mut ParsedCapacity| {
            let nodes = Cluster::list::<Node>(c);
            let by_name: HashMap<&str, &Arc<Node>> = nodes
                .iter()
                .filter_map(|n| Some((n.metadata.name.as_deref()?, n)))
                .collect();
            nodepool_usage(
                &Cluster::list::<NodeClaim>(c),
                |n| by_name.get(n).copied(),
                parsed,
            )
        };
        let mut parsed = ParsedCapacity::default();
        let first = usage(&c, &mut parsed);
        assert_eq!(first["general"].get("cpu"), 6000);
        assert_eq!(first["general"].get("nodes"), 2);
        assert_eq!(parsed.parts.len(), 2, "general-1's and general-2's");
        let kept = |parsed: &ParsedCapacity| {
            let mut v: Vec<usize> = parsed
                .parts
                .values()
                .map(|p| {
                    p.counted
                        .as_ref()
                        .map_or(0, |r| r as *const Resources as usize)
                })
                .collect();
            v.sort_unstable();
            v
        };
        let before = kept(&parsed);
        assert_eq!(usage(&c, &mut parsed), first);
        assert_eq!(kept(&parsed), before, "nothing read again");
        // n1 grows: its new version is parsed, the old one dropped.
        let mut n1 = (*c
            .get_opt::<Node>(&crate::cluster::ObjectKey::cluster("n1"))
            .unwrap())
        .clone();
        n1.status
            .as_mut()
            .unwrap()
            .capacity
            .as_mut()
            .unwrap()
            .insert(
                "cpu".into(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("8".into()),
            );
        c.update_status(n1).unwrap();
        let second = usage(&c, &mut parsed);
        assert_eq!(second["general"].get("cpu"), 10000);
        assert_eq!(second, usage(&c, &mut ParsedCapacity::default()));
        assert_eq!(parsed.parts.len(), 2);
    }

    #[test]
    fn pods_state_has_the_reference_labels() {
        let f = families(&cluster());
        let state = samples(&f, "karpenter_pods_state");
        assert_eq!(state.len(), 4);
        let (labels, v) = state.iter().find(|(l, _)| l["name"] == "web-a").unwrap();
        assert_eq!(*v, 1.0);
        let want: BTreeMap<String, String> = [
            ("name", "web-a"),
            ("namespace", "shop"),
            ("owner", "/apis/apps/v1/namespaces/shop/replicasets/web-1"),
            ("node", "n1"),
            ("scheduled", "true"),
            ("nodepool", "general"),
            ("zone", "us-east-1a"),
            ("arch", "amd64"),
            ("capacity_type", "spot"),
            ("instance_type", "m7i.xlarge"),
            ("phase", "Running"),
            ("ready", "true"),
            ("managed", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(labels, &want);
    }

    #[test]
    fn a_pod_seen_pending_is_observed_once_ready() {
        let metrics = super::super::metrics::Metrics::new();
        let mut startup = PodStartup::default();
        let pod = |phase: &str, ready: bool| -> Arc<SlimPod> {
            let p: Pod = yaml(&format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: a, namespace: d, uid: u1, creationTimestamp: '2026-01-05T00:00:00Z'}}\n\
                 spec: {{containers: []}}\n\
                 status: {{phase: {phase}, conditions: [{{type: Ready, status: '{}', lastTransitionTime: '2026-01-05T00:01:10Z'}}]}}\n",
                if ready { "True" } else { "False" }
            ));
            Arc::new(SlimPod::from(&p))
        };
        // Never seen pending: not observed.
        startup.observe(&Listed::from(vec![pod("Running", true)]), &metrics);
        assert_eq!(metrics.pod_startup_duration.sample_count(&[]), 0);
        startup.observe(&Listed::from(vec![pod("Pending", false)]), &metrics);
        assert_eq!(startup.len(), 1);
        startup.observe(&Listed::from(vec![pod("Running", false)]), &metrics);
        assert_eq!(startup.len(), 1, "running but not ready: still waited for");
        startup.observe(&Listed::from(vec![pod("Running", true)]), &metrics);
        assert!(startup.is_empty());
        assert_eq!(metrics.pod_startup_duration.sample_count(&[]), 1);
        let text = crate::metrics::exposition::text(&metrics.registry().gather());
        assert!(
            text.contains("karpenter_pods_startup_duration_seconds_sum 70"),
            "{text}"
        );
        // A pod that disappears while pending is forgotten.
        startup.observe(&Listed::from(vec![pod("Pending", false)]), &metrics);
        startup.observe(&Listed::default(), &metrics);
        assert!(startup.is_empty());
    }

    /// Looking only at the pods that changed waits for and observes the
    /// pods that looking at every pod of every list does: pods created,
    /// deleted, going from pending to running to ready or finished, or
    /// left as they were (the same object in the next list).
    #[test]
    fn looking_at_changed_pods_observes_as_looking_at_all() {
        use proptest::prelude::*;
        // Every pod of `pods` looked at, against the pods waited for.
        fn look_at_all(
            waited: &mut std::collections::HashSet<String>,
            pods: &[Arc<SlimPod>],
        ) -> u64 {
            let before = std::mem::take(waited);
            let mut observed = 0;
            for p in pods {
                let uid = p.metadata.uid.clone().unwrap();
                let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
                if phase == Some("Pending") {
                    waited.insert(uid);
                } else if before.contains(&uid) && !p.is_finished() {
                    let ready = crate::api::pod::ready_condition(
                        p.status.as_ref().and_then(|s| s.conditions.as_deref()),
                    );
                    match ready {
                        Some(_) => observed += 1,
                        None => {
                            waited.insert(uid);
                        }
                    }
                }
            }
            observed
        }
        let pod = |n: u8, state: u8| -> Arc<SlimPod> {
            let (phase, ready) = [
                ("Pending", ""),
                ("Running", ""),
                ("Running", "True"),
                ("Succeeded", ""),
            ][usize::from(state)];
            let conditions = match ready {
                "" => String::new(),
                r => format!(
                    ", conditions: [{{type: Ready, status: '{r}', lastTransitionTime: '2026-01-05T00:01:10Z'}}]"
                ),
            };
            let p: Pod = yaml(&format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: p{n:02}, namespace: d, uid: u{n}, creationTimestamp: '2026-01-05T00:00:00Z'}}\n\
                 spec: {{containers: []}}\nstatus: {{phase: {phase}{conditions}}}\n"
            ));
            Arc::new(SlimPod::from(&p))
        };
        let steps =
            proptest::collection::vec(proptest::collection::vec((0u8..12, 0u8..5), 0..8), 1..8);
        proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(64))
            .run(&steps, |steps| {
                let metrics = super::super::metrics::Metrics::new();
                let mut startup = PodStartup::default();
                let mut waited = std::collections::HashSet::new();
                let mut observed = 0;
                let mut pods: BTreeMap<u8, Arc<SlimPod>> = BTreeMap::new();
                for step in steps {
                    for (n, state) in step {
                        match state {
                            4 => pods.remove(&n),
                            s => pods.insert(n, pod(n, s)),
                        };
                    }
                    let list: Vec<Arc<SlimPod>> = pods.values().cloned().collect();
                    observed += look_at_all(&mut waited, &list);
                    startup.observe(&Listed::from(list), &metrics);
                    let mut held: Vec<&String> = startup.pending.iter().collect();
                    let mut want: Vec<&String> = waited.iter().collect();
                    held.sort();
                    want.sort();
                    prop_assert_eq!(held, want);
                    prop_assert_eq!(metrics.pod_startup_duration.sample_count(&[]), observed);
                }
                Ok(())
            })
            .unwrap();
    }

    /// The usage kept from call to call is the usage summed anew: claims
    /// and Nodes created, changed (pool, deletion, disruption, capacity)
    /// or deleted between calls, or left as they were.
    #[test]
    fn kept_nodepool_usage_is_the_usage_summed_anew() {
        use proptest::prelude::*;
        let claim = |n: u8, v: u8| -> Arc<NodeClaim> {
            let pool = ["", "a", "b"][usize::from(v % 3)];
            let labels = match pool {
                "" => String::new(),
                p => format!(", labels: {{karpenter.sh/nodepool: {p}}}"),
            };
            let deleting = match v / 3 % 4 {
                1 => ", deletionTimestamp: '2026-01-05T00:00:00Z', finalizers: [f]",
                2 => ", annotations: {dovetail.dev/disruption-reason: Drifted}",
                _ => "",
            };
            let capacity = match v / 12 % 2 {
                0 => format!(", capacity: {{cpu: '{}', memory: 1Gi}}", n + 1),
                _ => String::new(),
            };
            let registered = match v % 4 {
                0 => String::new(),
                r => format!(
                    ", conditions: [{{type: Registered, status: '{}', lastTransitionTime: '2026-01-05T00:0{n}:{v:02}Z'}}]",
                    if r == 3 { "False" } else { "True" }
                ),
            };
            Arc::new(yaml(&format!(
                "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {{name: c{n}{labels}{deleting}}}\n\
                 spec: {{nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}, requirements: []}}\n\
                 status: {{nodeName: n{n}{capacity}{registered}}}\n"
            )))
        };
        let node = |n: u8, v: u8| -> Arc<Node> {
            let deleting = match v % 2 {
                1 => ", deletionTimestamp: '2026-01-05T00:00:00Z', finalizers: [f]",
                _ => "",
            };
            let status = match v / 2 % 3 {
                0 => format!(
                    "status: {{capacity: {{cpu: '{}', pods: '110'}}}}",
                    10 * (v + 1)
                ),
                1 => "status: {capacity: {}}".to_string(),
                _ => "status: {}".to_string(),
            };
            Arc::new(yaml(&format!(
                "apiVersion: v1\nkind: Node\nmetadata: {{name: n{n}{deleting}}}\n{status}\n"
            )))
        };
        // The usage as a sum from nothing.
        let anew = |claims: &[Arc<NodeClaim>], nodes: &BTreeMap<u8, Arc<Node>>| {
            let mut usage: BTreeMap<String, Resources> = BTreeMap::new();
            for c in claims {
                let Some(pool) = c.nodepool_name() else {
                    continue;
                };
                let sum = usage.entry(pool.to_string()).or_default();
                let gone =
                    c.metadata.deletion_timestamp.is_some() || c.metadata.annotations.is_some();
                let name = c.status.as_ref().unwrap().node_name.clone().unwrap();
                let node = nodes
                    .values()
                    .find(|n| n.metadata.name.as_deref() == Some(name.as_str()));
                if gone || node.is_some_and(|n| n.metadata.deletion_timestamp.is_some()) {
                    continue;
                }
                let capacity = match node.and_then(|n| n.status.as_ref()?.capacity.as_ref()) {
                    Some(c) => Some(c),
                    None => c.status.as_ref().unwrap().capacity.as_ref(),
                };
                let Some(r) = capacity.map(|c| Resources::from_k8s(c).unwrap()) else {
                    continue;
                };
                if !r.0.is_empty() {
                    sum.add(&r);
                    sum.add_one("nodes");
                }
            }
            usage
        };
        // Steps of (object, version): claims 0..5, nodes 6..11; version
        // 24 deletes.
        let steps =
            proptest::collection::vec(proptest::collection::vec((0u8..12, 0u8..25), 0..6), 1..8);
        proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(128))
            .run(&steps, |steps| {
                let mut parsed = ParsedCapacity::default();
                let mut claims: BTreeMap<u8, Arc<NodeClaim>> = BTreeMap::new();
                let mut nodes: BTreeMap<u8, Arc<Node>> = BTreeMap::new();
                for step in steps {
                    for (at, v) in step {
                        match (at, v) {
                            (0..6, 24) => drop(claims.remove(&at)),
                            (0..6, v) => drop(claims.insert(at, claim(at, v))),
                            (_, 24) => drop(nodes.remove(&(at - 6))),
                            (_, v) => drop(nodes.insert(at - 6, node(at - 6, v))),
                        }
                    }
                    let list: Vec<Arc<NodeClaim>> = claims.values().cloned().collect();
                    let by_name: HashMap<&str, &Arc<Node>> = nodes
                        .values()
                        .filter_map(|n| Some((n.metadata.name.as_deref()?, n)))
                        .collect();
                    prop_assert_eq!(
                        nodepool_usage(&list, |n| by_name.get(n).copied(), &mut parsed),
                        anew(&list, &nodes)
                    );
                    prop_assert_eq!(parsed.parts.len(), list.len());
                    let mut registered: BTreeMap<String, crate::clock::Timestamp> = BTreeMap::new();
                    for c in &list {
                        let at = crate::api::common::find_condition(
                            c.status.as_ref().unwrap().conditions.as_deref(),
                            "Registered",
                        )
                        .filter(|c| c.is_true())
                        .map(|c| c.last_transition_time.0);
                        if let (Some(pool), Some(at)) = (c.nodepool_name(), at) {
                            let t = registered.entry(pool.to_string()).or_insert(at);
                            *t = (*t).max(at);
                        }
                    }
                    prop_assert_eq!(parsed.last_registered(), registered);
                }
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn label_names_follow_the_reference() {
        assert_eq!(
            metric_label("karpenter.k8s.aws/instance-cpu-manufacturer"),
            "instance_cpu_manufacturer"
        );
        assert_eq!(metric_label("topology.k8s.aws/zone-id"), "zone_id");
        assert_eq!(resource_type("ephemeral-storage"), "ephemeral_storage");
        assert_eq!(resource_type("nvidia.com/gpu"), "nvidia.com/gpu");
        let names: std::collections::BTreeSet<String> = well_known_node_labels()
            .iter()
            .map(|k| metric_label(k))
            .collect();
        assert_eq!(
            names.len(),
            well_known_node_labels().len(),
            "no two keys share a name"
        );
        // Karpenter's 8 and the AWS provider's 28 (one of them, windows-build,
        // is among Karpenter's).
        assert_eq!(names.len(), 36);
    }
}
