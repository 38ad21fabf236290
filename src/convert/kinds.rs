//! One small function per kind: Karpenter and Kubernetes documents to the
//! core's domain types.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, NodeSelectorRequirement};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::api::common::{NodeSelectorRequirementWithMinValues, TaintEffect};
use crate::api::{EC2NodeClass, NodeClaim, NodePool, SlimPod, SlimPodSpec};
use crate::model::labels::{INSTANCE_TYPE, NODEPOOL, normalize_labels};
use crate::model::quantity::parse_quantity;
use crate::model::{
    Effect, InstanceType, KubeletSettings, Requirement, Requirements, Resources, Taint,
};
use crate::scheduling::PodSpec;
use crate::scheduling::pod::{PodError, VolumeIndex, pod_spec};
use crate::scheduling::{
    BoundPod, BoundPodList, DaemonSetSpec, ExistingNode, NodeKeys, NodePoolSpec,
};
use crate::snapshot::Snapshot;

/// A NodeClaim's quantities in `what`, if it has that field.
fn claim_resources(
    list: Option<&BTreeMap<String, Quantity>>,
    what: &str,
) -> Result<Option<Resources>, String> {
    list.map(|l| Resources::from_k8s(l).map_err(|(k, e)| format!("{what}.{k}: {e}")))
        .transpose()
}

/// A Karpenter requirement as the core's parser reads it (its `minValues`
/// apart).
fn node_selector(r: &NodeSelectorRequirementWithMinValues) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: r.key.clone(),
        operator: r.operator.as_str().to_string(),
        values: r.values.clone(),
    }
}

/// Quantities by resource name, as `what` names the field.
fn quantities<'a>(
    items: impl IntoIterator<Item = (&'a String, &'a str)>,
    what: &str,
) -> Result<Resources, String> {
    let mut r = Resources::new();
    for (k, q) in items {
        r.set(
            k,
            parse_quantity(k, q).map_err(|e| format!("{what}.{k}: {e}"))?,
        );
    }
    Ok(r)
}

/// The kubelet settings of an EC2NodeClass that change allocatable.
pub fn kubelet_settings(nodeclass: &EC2NodeClass) -> Result<KubeletSettings, String> {
    let k = nodeclass.spec.kubelet.as_ref();
    let reserved = |m: Option<&BTreeMap<String, String>>, what: &str| {
        m.map(|m| quantities(m.iter().map(|(k, v)| (k, v.as_str())), what))
            .transpose()
    };
    let mut out = KubeletSettings {
        max_pods: k.and_then(|k| k.max_pods).map(i64::from),
        pods_per_core: k.and_then(|k| k.pods_per_core).map(i64::from),
        kube_reserved: reserved(
            k.and_then(|k| k.kube_reserved.as_ref()),
            "spec.kubelet.kubeReserved",
        )?,
        system_reserved: reserved(
            k.and_then(|k| k.system_reserved.as_ref()),
            "spec.kubelet.systemReserved",
        )?,
        ..KubeletSettings::default()
    };
    // evictionHard is keyed by signal; absolute quantities only (percentages
    // depend on capacity and are left to the catalog's overhead).
    if let Some(map) = k.and_then(|k| k.eviction_hard.as_ref()) {
        let mut r = Resources::new();
        for (signal, q) in map {
            let resource = match signal.as_str() {
                "memory.available" => "memory",
                "nodefs.available" => "ephemeral-storage",
                _ => continue,
            };
            if q.ends_with('%') {
                continue;
            }
            r.set(
                resource,
                parse_quantity(resource, q)
                    .map_err(|e| format!("spec.kubelet.evictionHard.{signal}: {e}"))?,
            );
        }
        out.eviction_hard = Some(r);
    }
    for (i, m) in nodeclass
        .spec
        .block_device_mappings
        .iter()
        .flatten()
        .enumerate()
    {
        if m.root_volume == Some(true)
            && let Some(size) = m.ebs.as_ref().and_then(|e| e.volume_size.as_deref())
        {
            out.root_volume_bytes = Some(
                parse_quantity("ephemeral-storage", size)
                    .map_err(|e| format!("spec.blockDeviceMappings[{i}].ebs.volumeSize: {e}"))?,
            );
        }
    }
    Ok(out)
}

/// Builds the core's NodePool from a NodePool, the kubelet settings of the
/// EC2NodeClasses by name, and the catalog: the catalog's types as the
/// NodePool's EC2NodeClass configures the kubelet.
pub fn nodepool_spec(
    nodepool: &NodePool,
    nodeclasses: &[(String, KubeletSettings)],
    catalog: &[InstanceType],
) -> Result<NodePoolSpec, String> {
    let class = nodepool.spec.template.spec.node_class_ref.name.as_str();
    let kubelet = nodeclasses
        .iter()
        .find(|(n, _)| n == class)
        .map(|(_, k)| k)
        .ok_or_else(|| {
            format!("nodeClassRef names EC2NodeClass {class:?}, which does not exist")
        })?;
    let types = catalog
        .iter()
        .map(|it| it.for_node_class(kubelet))
        .collect();
    nodepool_spec_with_types(nodepool, types)
}

/// The model's taints of a Karpenter template's taints.
fn template_taints(taints: Option<&Vec<crate::api::common::Taint>>) -> Vec<Taint> {
    taints
        .into_iter()
        .flatten()
        .map(|t| {
            let effect = match t.effect {
                TaintEffect::NoSchedule => Effect::NoSchedule,
                TaintEffect::PreferNoSchedule => Effect::PreferNoSchedule,
                TaintEffect::NoExecute => Effect::NoExecute,
            };
            Taint::new(&t.key, t.value.as_deref().unwrap_or_default(), effect)
        })
        .collect()
}

/// Builds the core's NodePool from a NodePool and the instance types it may
/// launch, as its cloud provider reports them for its node class.
pub fn nodepool_spec_with_types(
    nodepool: &NodePool,
    instance_types: Vec<InstanceType>,
) -> Result<NodePoolSpec, String> {
    let name = nodepool
        .metadata
        .name
        .clone()
        .ok_or("metadata.name is missing")?;
    let template = &nodepool.spec.template;
    let labels = template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let mut requirements = Requirements::new();
    for (i, r) in template.spec.requirements.iter().enumerate() {
        let one = Requirements::from_node_selector(&[node_selector(r)])
            .map_err(|e| format!("spec.template.spec.requirements[{i}]: {e}"))?;
        let min_values = r
            .min_values
            .map(|m| {
                usize::try_from(m).map_err(|_| {
                    format!("spec.template.spec.requirements[{i}].minValues: {m} is negative")
                })
            })
            .transpose()?;
        for (k, mut r) in one.0 {
            r.min_values = min_values;
            requirements.add(&k, r);
        }
    }
    for (k, v) in &labels {
        requirements.add(k, Requirement::in_values([v.clone()]));
    }
    let limits = nodepool
        .spec
        .limits
        .as_ref()
        .map(|l| quantities(l.iter().map(|(k, q)| (k, q.0.as_str())), "spec.limits"))
        .transpose()?
        .unwrap_or_default();
    Ok(NodePoolSpec {
        name,
        weight: nodepool.spec.weight.unwrap_or(0),
        requirements,
        labels: normalize_labels(&labels),
        taints: template_taints(template.spec.taints.as_ref()),
        startup_taints: template_taints(template.spec.startup_taints.as_ref()),
        limits,
        instance_types,
    })
}

/// A DaemonSet's pod template.
pub fn daemonset_spec(ds: &DaemonSet, now_ms: i64) -> Result<DaemonSetSpec, String> {
    let template = &ds.spec.template;
    let pod = SlimPod {
        metadata: template.metadata.clone().unwrap_or_default(),
        spec: template.spec.as_ref().map(SlimPodSpec::from),
        status: None,
    };
    pod_spec(&pod, &VolumeIndex::default(), now_ms)
        .map(|p| DaemonSetSpec {
            name: ds.metadata.name.clone().unwrap_or_default(),
            pod: p,
        })
        .map_err(|e| e.message)
}

fn bound_pod(p: &SlimPod) -> Result<BoundPod, ObjectError> {
    // The spec's requests are the pod's own, as `pod_requests` reads
    // them: no defaults for what a container leaves out.
    let spec = pod_spec(p, &VolumeIndex::default(), 0)
        .map_err(|e| (format!("Pod/{}", e.pod), e.message))?;
    Ok(BoundPod::new(
        spec.namespace,
        spec.name,
        Arc::unwrap_or_clone(spec.labels),
        spec.requests,
        spec.host_ports,
        spec.anti_affinity,
    ))
}

/// Per resource, the largest capacity among the catalog's instance types
/// that a NodeClaim's instance-type requirement lists; `None` when it lists
/// none the catalog knows.
fn largest_capacity(reqs: &Requirements, catalog: &[InstanceType]) -> Option<Resources> {
    let allowed = reqs.get(INSTANCE_TYPE)?;
    let mut out: Option<Resources> = None;
    for it in catalog.iter().filter(|it| allowed.has(&it.name)) {
        let acc = out.get_or_insert_with(Resources::new);
        for (k, v) in &it.capacity.0 {
            if *v > acc.get(k) {
                acc.set(k, *v);
            }
        }
    }
    out
}

/// An object that cannot be converted: `Kind/name` (`Kind/namespace/name`
/// for namespaced kinds) and the problem.
pub type ObjectError = (String, String);

/// Existing nodes as the scheduling core sees them, kept from one
/// [`existing_nodes`] to the next: a Node, or the pods bound to it, are
/// converted again only when they changed.
///
/// The objects of a cluster are shared (`Arc`) and never changed in place:
/// a changed object is a new allocation (the watch cache's, or the
/// in-memory cluster's view of a new resource version). A Node's entry is
/// keyed by its address and holds the Node, so the address cannot be
/// reused while the entry lives: a Node at a cached address is the Node
/// converted. A node's bound pods are kept by node name with the pod
/// objects they were converted from, and reused while the node holds the
/// same objects: a pass over a large fleet compares addresses, not pods.
/// Each conversion drops the entries of the objects it no longer saw.
#[derive(Default)]
pub struct KeptExisting {
    pods: HashMap<String, ConvertedPods, foldhash::fast::RandomState>,
    nodes: HashMap<usize, ConvertedNode, foldhash::fast::RandomState>,
    /// In-flight NodeClaims' conversions, by the claim's address, as
    /// `nodes` keeps Nodes'.
    claims: HashMap<usize, ConvertedClaim, foldhash::fast::RandomState>,
    generation: u64,
}

/// An in-flight NodeClaim's conversion, kept only when it read nothing but
/// the claim (not the catalog, which is a pass's own).
struct ConvertedClaim {
    claim: Arc<NodeClaim>,
    converted: Shaped,
    seen: u64,
}

/// A conversion without its pods, and as last handed out, with them.
struct Shaped {
    shape: ExistingNode,
    whole: Option<Arc<ExistingNode>>,
}

impl Shaped {
    fn new(shape: ExistingNode) -> Self {
        Shaped { shape, whole: None }
    }

    /// The conversion holding `pods`: the very node handed out last when
    /// its pods are the same.
    fn with(&mut self, pods: BoundPodList) -> Arc<ExistingNode> {
        if let Some(whole) = self
            .whole
            .as_ref()
            .filter(|w| BoundPodList::ptr_eq(&w.pods, &pods))
        {
            return whole.clone();
        }
        let whole = Arc::new(ExistingNode {
            pods,
            ..self.shape.clone()
        });
        self.whole = Some(whole.clone());
        whole
    }
}

/// The pods bound to one node, and their conversions, in order.
struct ConvertedPods {
    pods: Vec<Arc<SlimPod>>,
    bound: BoundPodList,
    seen: u64,
}

/// A Node's conversion: without its pods, and as last handed out, with
/// them.
struct ConvertedNode {
    node: Arc<Node>,
    /// The NodeClaim read for a node not initialized yet (its startup
    /// taints and promised resources are the conversion's), or `None`.
    claim: Option<Arc<NodeClaim>>,
    converted: Shaped,
    seen: u64,
}

impl KeptExisting {
    /// `pods`, bound to node `node`, as bound pods: the kept conversions
    /// when they are the objects the node held at the last conversion;
    /// else each pod the node held then is reused and the others converted.
    fn pods(&mut self, node: &str, pods: &[&Arc<SlimPod>]) -> Result<BoundPodList, ObjectError> {
        let generation = self.generation;
        if let Some(c) = self.pods.get_mut(node)
            && c.pods.len() == pods.len()
            && c.pods.iter().zip(pods).all(|(a, b)| Arc::ptr_eq(a, b))
        {
            c.seen = generation;
            return Ok(c.bound.clone());
        }
        // The last conversion's pods are alive while `last` is: an address
        // among them is that pod.
        let last = self.pods.remove(node);
        let reusable: HashMap<*const SlimPod, &Arc<BoundPod>, foldhash::fast::RandomState> = last
            .iter()
            .flat_map(|c| c.pods.iter().map(Arc::as_ptr).zip(c.bound.iter()))
            .collect();
        let bound = pods
            .iter()
            .map(|p| match reusable.get(&Arc::as_ptr(p)) {
                Some(b) => Ok(Arc::clone(b)),
                None => bound_pod(p).map(Arc::new),
            })
            .collect::<Result<BoundPodList, _>>()?;
        self.pods.insert(
            node.to_string(),
            ConvertedPods {
                pods: pods.iter().map(|p| Arc::clone(p)).collect(),
                bound: bound.clone(),
                seen: generation,
            },
        );
        Ok(bound)
    }

    /// `n` as an existing node holding `pods`, `claim` its NodeClaim: the
    /// kept conversion when `n` is the Node it was made from and, for a
    /// node not initialized yet, `claim` the NodeClaim it read; the very
    /// node handed out last when its pods are the same too.
    /// `claim_of` finds the NodeClaim, asked only for a node not
    /// initialized.
    fn node<'c>(
        &mut self,
        n: &Arc<Node>,
        claim_of: impl FnOnce() -> Option<&'c Arc<NodeClaim>>,
        pods: BoundPodList,
    ) -> Result<Arc<ExistingNode>, ObjectError> {
        let generation = self.generation;
        let key = Arc::as_ptr(n) as usize;
        let mut claim_of = Some(claim_of);
        let mut claim = || claim_of.take().and_then(|f| f());
        let mut asked = None;
        if let Some(c) = self.nodes.get_mut(&key) {
            debug_assert!(Arc::ptr_eq(&c.node, n));
            let same_claim = c.converted.shape.initialized || {
                let found = *asked.insert(claim());
                match (&c.claim, found) {
                    (None, None) => true,
                    (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                    _ => false,
                }
            };
            if same_claim {
                c.seen = generation;
                return Ok(c.converted.with(pods));
            }
        }
        let claim = match asked {
            Some(found) => found,
            None if node_initialized(n) => None,
            None => claim(),
        };
        let shape = node_shape(n, claim.map(Arc::as_ref))?;
        let read_claim = if shape.initialized {
            None
        } else {
            claim.cloned()
        };
        let mut converted = Shaped::new(shape);
        let whole = converted.with(pods);
        self.nodes.insert(
            key,
            ConvertedNode {
                node: n.clone(),
                claim: read_claim,
                converted,
                seen: generation,
            },
        );
        Ok(whole)
    }

    /// In-flight NodeClaim `c` as an existing node holding the pods
    /// `pods` gives: the kept conversion when `c` is the claim it was made
    /// from. A conversion that read the catalog is not kept.
    fn claim(
        &mut self,
        c: &Arc<NodeClaim>,
        catalog: &[InstanceType],
        pods: impl FnOnce(&mut Self) -> Result<BoundPodList, ObjectError>,
    ) -> Result<Arc<ExistingNode>, ObjectError> {
        let generation = self.generation;
        let key = Arc::as_ptr(c) as usize;
        if let Some(kept) = self.claims.get_mut(&key) {
            debug_assert!(Arc::ptr_eq(&kept.claim, c));
            kept.seen = generation;
        } else {
            let (shape, read_catalog) = in_flight(c, catalog)?;
            if read_catalog {
                let pods = pods(self)?;
                return Ok(Arc::new(ExistingNode { pods, ..shape }));
            }
            self.claims.insert(
                key,
                ConvertedClaim {
                    claim: c.clone(),
                    converted: Shaped::new(shape),
                    seen: generation,
                },
            );
        }
        let pods = pods(self)?;
        let kept = self.claims.get_mut(&key).expect("kept above");
        Ok(kept.converted.with(pods))
    }

    /// Ends a conversion: the objects it did not see are forgotten.
    fn sweep(&mut self) {
        let generation = self.generation;
        self.pods.retain(|_, c| c.seen == generation);
        self.nodes.retain(|_, c| c.seen == generation);
        self.claims.retain(|_, c| c.seen == generation);
        self.generation += 1;
    }

    /// How many bound pods' conversions are kept.
    pub fn pods_len(&self) -> usize {
        self.pods.values().map(|c| c.bound.len()).sum()
    }

    /// Whether no conversion is kept.
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty() && self.nodes.is_empty() && self.claims.is_empty()
    }
}

/// Pods as the scheduling core sees them when they need a place (the
/// workload's lower bound, the pods of disruption candidates), kept from
/// one pass to the next as [`KeptExisting`] keeps bound pods: keyed by the
/// pod's address, holding the pod, so a cached address is the pod
/// converted. A pod whose conversion reads more than the pod itself (its
/// volumes' claims, or the clock for a pod without a creation time) is
/// converted at every call.
///
/// The users convert different subsets of the pods, so no call can tell
/// which pods are gone; entries are dropped instead once the cache holds
/// the last reference to their pod (the cluster replaced or deleted it),
/// in a sweep each time the cache has doubled since the last.
#[derive(Default)]
pub struct PodSpecs {
    entries: HashMap<usize, (Arc<SlimPod>, Arc<PodSpec>), foldhash::fast::RandomState>,
    sweep_at: usize,
}

impl PodSpecs {
    /// `p` as a pod that needs a place, with `volumes` giving its volumes'
    /// zones and `now_ms` its creation time if it has none.
    pub fn get(
        &mut self,
        p: &Arc<SlimPod>,
        volumes: &VolumeIndex,
        now_ms: i64,
    ) -> Result<Arc<PodSpec>, PodError> {
        let reads_more = p.metadata.creation_timestamp.is_none()
            || p.spec
                .as_ref()
                .and_then(|s| s.volumes.as_ref())
                .is_some_and(|v| !v.is_empty());
        if reads_more {
            return pod_spec(p, volumes, now_ms).map(Arc::new);
        }
        let key = Arc::as_ptr(p) as usize;
        if let Some((pod, spec)) = self.entries.get(&key) {
            debug_assert!(Arc::ptr_eq(pod, p));
            return Ok(spec.clone());
        }
        let spec = Arc::new(pod_spec(p, volumes, now_ms)?);
        if self.entries.len() >= self.sweep_at {
            self.entries
                .retain(|_, (pod, _)| Arc::strong_count(pod) > 1);
            self.sweep_at = (2 * self.entries.len()).max(1024);
        }
        self.entries.insert(key, (p.clone(), spec.clone()));
        Ok(spec)
    }

    /// How many pods' conversions are kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no conversion is kept.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// A pod list grouped by node, as a conversion reads it: the controller
/// keeps one (`cluster::PodsByNode`) from pass to pass.
pub trait PodsOnNodes {
    /// The pods bound to `node` that have not finished, in the list's
    /// order (a cluster lists them by namespace and name).
    fn running_on(&self, node: &str) -> Vec<&Arc<SlimPod>>;
}

/// The pods a conversion reads as bound to each node: a pod list grouped by
/// node, and pods bound besides it (CapacityBuffers' virtual pods), which
/// follow the list's pods on their node.
pub struct BoundPods<'a> {
    groups: &'a dyn PodsOnNodes,
    extra: Grouped<'a>,
}

impl<'a> BoundPods<'a> {
    pub fn new(groups: &'a dyn PodsOnNodes, extra: &'a [Arc<SlimPod>]) -> Self {
        BoundPods {
            groups,
            extra: Grouped::new(extra),
        }
    }

    /// The pods bound to `node` that have not finished, in order.
    fn running_on(&self, node: &str) -> Vec<&Arc<SlimPod>> {
        let mut on = self.groups.running_on(node);
        on.extend(self.extra.running_on(node));
        on
    }
}

/// The unfinished pods of a slice by the node they are bound to.
struct Grouped<'a>(HashMap<&'a str, Vec<&'a Arc<SlimPod>>, foldhash::fast::RandomState>);

impl<'a> Grouped<'a> {
    fn new(pods: &'a [Arc<SlimPod>]) -> Self {
        let mut by_node: HashMap<&str, Vec<&Arc<SlimPod>>, foldhash::fast::RandomState> =
            HashMap::default();
        for p in pods {
            if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_deref())
                && !node.is_empty()
                && !p.is_finished()
            {
                by_node.entry(node).or_default().push(p);
            }
        }
        Grouped(by_node)
    }
}

impl PodsOnNodes for Grouped<'_> {
    fn running_on(&self, node: &str) -> Vec<&Arc<SlimPod>> {
        self.0.get(node).cloned().unwrap_or_default()
    }
}

/// Existing nodes and in-flight NodeClaims of a snapshot, with their pods,
/// converting only the bound pods `kept` does not hold already.
pub fn existing_nodes(
    s: &Snapshot,
    catalog: &[InstanceType],
    kept: &mut KeptExisting,
) -> Result<Vec<Arc<ExistingNode>>, ObjectError> {
    let bound = BoundPods {
        groups: &Grouped::new(&s.pods),
        extra: Grouped(HashMap::default()),
    };
    existing_nodes_bound(s, &bound, catalog, kept)
}

/// [`existing_nodes`] with the pods of `bound`; the snapshot's own pods are
/// not read.
pub fn existing_nodes_bound<'s>(
    s: &'s Snapshot,
    bound: &BoundPods,
    catalog: &[InstanceType],
    kept: &mut KeptExisting,
) -> Result<Vec<Arc<ExistingNode>>, ObjectError> {
    // Each node's pods go to the first Node or in-flight NodeClaim that
    // names it; after the Nodes, `given` holds their names.
    let mut given: std::collections::HashSet<&str, foldhash::fast::RandomState> =
        Default::default();
    let bound_to = |given: &mut std::collections::HashSet<&'s str, _>,
                    kept: &mut KeptExisting,
                    node: &'s str| {
        if node.is_empty() || !given.insert(node) {
            return Ok(BoundPodList::default());
        }
        match bound.running_on(node) {
            pods if pods.is_empty() => Ok(BoundPodList::default()),
            pods => kept.pods(node, &pods),
        }
    };
    // A registered node's NodeClaim, by provider id: until the node is
    // initialized, its startup taints are not the node's to keep, and its
    // allocatable fills what the kubelet has not registered yet (GPUs).
    // Read only when a node is not initialized: most of a fleet is.
    let claims_by_provider: std::cell::OnceCell<
        HashMap<&str, &Arc<NodeClaim>, foldhash::fast::RandomState>,
    > = std::cell::OnceCell::new();
    let mut out = Vec::with_capacity(s.nodes.len());
    for n in &s.nodes {
        let claim = || {
            let provider_id = n.spec.as_ref()?.provider_id.as_deref()?;
            claims_by_provider
                .get_or_init(|| {
                    s.nodeclaims
                        .iter()
                        .filter_map(|c| Some((c.status.as_ref()?.provider_id.as_deref()?, c)))
                        .collect()
                })
                .get(provider_id)
                .copied()
        };
        let pods = bound_to(
            &mut given,
            kept,
            n.metadata.name.as_deref().unwrap_or_default(),
        )?;
        out.push(kept.node(n, claim, pods)?);
    }
    // In-flight NodeClaims: launched or launching, no Node yet.
    let node_names = given.clone();
    for c in &s.nodeclaims {
        let status = c.status.as_ref();
        let node_name = status.and_then(|s| s.node_name.as_deref()).unwrap_or("");
        if !node_name.is_empty() && node_names.contains(node_name) {
            continue;
        }
        if c.metadata.deletion_timestamp.is_some() {
            continue;
        }
        out.push(kept.claim(c, catalog, |kept| bound_to(&mut given, kept, node_name))?);
    }
    kept.sweep();
    Ok(out)
}

/// An in-flight NodeClaim as an existing node without its pods, and
/// whether the conversion read the catalog: before launch the claim's
/// status has no allocatable or capacity, and the catalog's types stand in.
fn in_flight(c: &NodeClaim, catalog: &[InstanceType]) -> Result<(ExistingNode, bool), ObjectError> {
    let status = c.status.as_ref();
    let name = c.metadata.name.clone().unwrap_or_default();
    let located = |e: String| (format!("NodeClaim/{name}"), e);
    let reqs_doc: Vec<NodeSelectorRequirement> =
        c.spec.requirements.iter().map(node_selector).collect();
    let reqs = Requirements::from_node_selector(&reqs_doc)
        .map_err(|e| located(format!("spec.requirements: {e}")))?;
    let mut labels = reqs.labels();
    if let Some(meta_labels) = &c.metadata.labels {
        labels.extend(normalize_labels(meta_labels));
    }
    let status_allocatable = claim_resources(
        status.and_then(|s| s.allocatable.as_ref()),
        "status.allocatable",
    )
    .map_err(located)?;
    let status_capacity =
        claim_resources(status.and_then(|s| s.capacity.as_ref()), "status.capacity")
            .map_err(located)?;
    let read_catalog = status_allocatable.is_none() || status_capacity.is_none();
    let it = || {
        labels
            .get(INSTANCE_TYPE)
            .and_then(|t| catalog.iter().find(|i| &i.name == t))
    };
    // Before launch the instance type is not chosen yet; the claim's
    // requests (its pods and daemonset overhead) are what it will hold.
    let requested = claim_resources(
        c.spec.resources.as_ref().and_then(|r| r.requests.as_ref()),
        "spec.resources.requests",
    )
    .map_err(located)?;
    let allocatable = status_allocatable
        .or_else(|| it().map(|i| i.allocatable.clone()))
        .or(requested)
        .unwrap_or_default();
    // Until it launches, a claim counts against its NodePool's limits
    // with the largest capacity among the types it may launch.
    let capacity = status_capacity
        .or_else(|| it().map(|i| i.capacity.clone()))
        .or_else(|| largest_capacity(&reqs, catalog))
        .unwrap_or_else(|| allocatable.clone());
    let mut claim_taints = template_taints(c.spec.taints.as_ref());
    let startup = template_taints(c.spec.startup_taints.as_ref());
    claim_taints.retain(|t| !startup.contains(t));
    let node = ExistingNode {
        nodepool: labels.get(NODEPOOL).cloned(),
        pods: BoundPodList::default(),
        name,
        labels: Arc::new(labels),
        taints: claim_taints,
        initialized: false,
        allocatable,
        capacity,
        price: None,
        keys: NodeKeys::default(),
    };
    Ok((node, read_catalog))
}

/// Whether a node with these (normalized) labels is initialized: not
/// Karpenter's, or labelled initialized.
fn labels_initialized(labels: &BTreeMap<String, String>) -> bool {
    !labels.contains_key(NODEPOOL)
        || labels
            .get("karpenter.sh/initialized")
            .is_some_and(|v| v == "true")
}

/// [`node_shape`]'s `initialized`, read off the Node.
fn node_initialized(n: &Node) -> bool {
    labels_initialized(&normalize_labels(
        &n.metadata.labels.clone().unwrap_or_default(),
    ))
}

/// A Node as an existing node without its pods; `claim` is its NodeClaim,
/// read while the node is not initialized.
fn node_shape(n: &Node, claim: Option<&NodeClaim>) -> Result<ExistingNode, ObjectError> {
    let name = n.metadata.name.clone().unwrap_or_default();
    let labels = normalize_labels(&n.metadata.labels.clone().unwrap_or_default());
    let status = n.status.as_ref();
    let allocatable = status
        .and_then(|s| s.allocatable.as_ref())
        .map(Resources::from_k8s)
        .transpose()
        .map_err(|(k, e)| (format!("Node/{name}"), format!("allocatable {k}: {e}")))?
        .unwrap_or_default();
    let capacity = status
        .and_then(|s| s.capacity.as_ref())
        .map(Resources::from_k8s)
        .transpose()
        .map_err(|(k, e)| (format!("Node/{name}"), format!("capacity {k}: {e}")))?
        .unwrap_or_else(|| allocatable.clone());
    let mut node_taints: Vec<Taint> = n
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .map(Taint::from_k8s)
        .collect::<Result<_, _>>()
        .map_err(|e| (format!("Node/{name}"), e))?;
    if n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
        node_taints.push(Taint::new(
            "node.kubernetes.io/unschedulable",
            "",
            crate::model::Effect::NoSchedule,
        ));
    }
    let initialized = labels_initialized(&labels);
    let mut allocatable = allocatable;
    if !initialized && let Some(c) = claim {
        // As Karpenter's state node: the claim's startup taints are
        // ignored, and each resource the node reports as zero is the
        // claim's.
        let claim_name = c.metadata.name.as_deref().unwrap_or_default();
        let startup = template_taints(c.spec.startup_taints.as_ref());
        node_taints.retain(|t| {
            !startup
                .iter()
                .any(|s| s.key == t.key && s.effect == t.effect)
        });
        let promised = claim_resources(
            c.status.as_ref().and_then(|s| s.allocatable.as_ref()),
            "status.allocatable",
        )
        .map_err(|e| (format!("NodeClaim/{claim_name}"), e))?
        .unwrap_or_default();
        for (k, v) in &promised.0 {
            if allocatable.get(k) == 0 {
                allocatable.set(k, *v);
            }
        }
    }
    Ok(ExistingNode {
        nodepool: labels.get(NODEPOOL).cloned(),
        pods: BoundPodList::default(),
        name,
        labels: Arc::new(labels),
        taints: node_taints,
        initialized,
        allocatable,
        capacity,
        price: None,
        keys: NodeKeys::default(),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::Node;

    use super::*;

    /// A node that registered but is not initialized yet: Cilium's startup
    /// taint is on it and the kubelet has not registered its GPUs.
    fn initializing(initialized: bool) -> ExistingNode {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "labels": {
                "karpenter.sh/nodepool": "gpu",
                "karpenter.sh/initialized": if initialized { "true" } else { "false" },
            }},
            "spec": {"providerID": "aws:///us-east-1a/i-1", "taints": [
                {"key": "node.cilium.io/agent-not-ready", "value": "true", "effect": "NoExecute"},
                {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
            ]},
            "status": {"allocatable": {"cpu": "8", "memory": "30Gi", "pods": "58", "nvidia.com/gpu": "0"}},
        }))
        .expect("node");
        let claim: NodeClaim = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "gpu-abc", "labels": {"karpenter.sh/nodepool": "gpu"}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [],
                "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}],
                "startupTaints": [{"key": "node.cilium.io/agent-not-ready", "value": "true", "effect": "NoExecute"}],
            },
            "status": {"providerID": "aws:///us-east-1a/i-1", "nodeName": "n1",
                "allocatable": {"cpu": "8", "memory": "30Gi", "pods": "58", "nvidia.com/gpu": "1"}},
        }))
        .expect("claim");
        let s = Snapshot {
            nodes: vec![Arc::new(node)],
            nodeclaims: vec![Arc::new(claim)],
            ..Snapshot::default()
        };
        let mut nodes = existing_nodes(&s, &[], &mut KeptExisting::default()).expect("converts");
        assert_eq!(nodes.len(), 1, "the claim is the node's, not in flight");
        Arc::unwrap_or_clone(nodes.remove(0))
    }

    #[test]
    fn an_initializing_node_ignores_its_startup_taints_and_promises_the_claims_resources() {
        let n = initializing(false);
        let keys: Vec<&str> = n.taints.iter().map(|t| t.key.as_str()).collect();
        assert_eq!(keys, ["dedicated"]);
        assert_eq!(n.allocatable.get("nvidia.com/gpu"), 1);
        assert_eq!(n.allocatable.get("cpu"), 8000);
    }

    /// A bound pod is converted once: the next conversion reuses it while the
    /// pod is the same object, converts a changed pod (a new object) again,
    /// and forgets the pods that are gone.
    #[test]
    fn bound_pods_are_converted_again_only_when_they_change() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1"},
            "status": {"allocatable": {"cpu": "8", "memory": "30Gi", "pods": "58"}},
        }))
        .expect("node");
        let pod = |name: &str, cpu: &str| -> Arc<SlimPod> {
            Arc::new(crate::testing::from_yaml(&format!(
                "metadata: {{name: {name}, namespace: default}}
spec:
  nodeName: n1
  containers: [{{name: c, resources: {{requests: {{cpu: \"{cpu}\"}}}}}}]"
            )))
        };
        let (a, b) = (pod("a", "1"), pod("b", "1"));
        let mut s = Snapshot {
            nodes: vec![Arc::new(node)],
            pods: vec![a.clone(), b.clone()],
            ..Snapshot::default()
        };
        let mut kept = KeptExisting::default();
        let first = existing_nodes(&s, &[], &mut kept).expect("converts");
        assert_eq!(kept.pods_len(), 2);
        let again = existing_nodes(&s, &[], &mut kept).expect("converts");
        assert!(
            first[0]
                .pods
                .iter()
                .zip(again[0].pods.iter())
                .all(|(x, y)| Arc::ptr_eq(x, y)),
            "the node holds the same pods: all reused"
        );
        // Counted as the solver counts them: one pod, no pods requested.
        assert_eq!(first[0].pods[0].takes.cpu_memory_pods, [1000, 0, 1]);
        assert!(!first[0].pods[0].takes.others);

        // b changes (a new object), a does not.
        s.pods[1] = pod("b", "2");
        let second = existing_nodes(&s, &[], &mut kept).expect("converts");
        let (before, after) = (&first[0].pods, &second[0].pods);
        assert!(Arc::ptr_eq(&before[0], &after[0]), "a is reused");
        assert!(!Arc::ptr_eq(&before[1], &after[1]));
        assert_eq!(after[1].requests.get("cpu"), 2000, "b is converted again");

        // a goes: its conversion is forgotten.
        s.pods.remove(0);
        let third = existing_nodes(&s, &[], &mut kept).expect("converts");
        assert_eq!(third[0].pods.len(), 1);
        assert_eq!(kept.pods_len(), 1);
        assert!(Arc::ptr_eq(&after[1], &third[0].pods[0]));

        // A pod bound to a node that is not there is nobody's: not
        // converted, not kept.
        s.pods.push(Arc::new(crate::testing::from_yaml(
            "metadata: {name: stray, namespace: default}\nspec: {nodeName: gone, containers: [{name: c}]}",
        )));
        let fourth = existing_nodes(&s, &[], &mut kept).expect("converts");
        assert_eq!(fourth.len(), 1);
        assert_eq!(kept.pods_len(), 1);
    }

    /// Nodes converted with their pods read from a grouping of the pod
    /// list and pods bound besides it are the nodes converted from a
    /// snapshot holding all those pods: the same pods on the same nodes in
    /// the same order, finished pods and pods of no node left out, a
    /// NodeClaim in flight holding the pods bound to its node's name.
    #[test]
    fn pods_read_from_a_grouping_are_the_snapshots_own() {
        let node = |name: &str| -> Arc<Node> {
            Arc::new(crate::testing::from_yaml(&format!(
                "metadata: {{name: {name}}}\nstatus: {{allocatable: {{cpu: '8', memory: 30Gi, pods: '58'}}}}"
            )))
        };
        let claim: Arc<NodeClaim> = Arc::new(crate::testing::from_yaml(
            "metadata: {name: c3}\nspec: {nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}, requirements: []}\nstatus: {nodeName: n3}",
        ));
        let pod = |name: &str, node: &str, phase: &str| -> Arc<SlimPod> {
            let node = match node {
                "" => String::new(),
                n => format!("nodeName: {n}, "),
            };
            Arc::new(crate::testing::from_yaml(&format!(
                "metadata: {{name: {name}, namespace: default}}\nspec: {{{node}containers: [{{name: c}}]}}\nstatus: {{phase: {phase}}}"
            )))
        };
        let listed: Vec<Arc<SlimPod>> = vec![
            pod("a", "n2", "Running"),
            pod("b", "n1", "Running"),
            pod("c", "n1", "Succeeded"),
            pod("d", "", "Pending"),
            pod("e", "n3", "Running"),
            pod("f", "n1", "Running"),
            pod("g", "gone", "Running"),
        ];
        let besides = vec![pod("v1", "n1", "Running"), pod("v2", "n3", "Running")];
        let mut all = Snapshot {
            nodes: vec![node("n1"), node("n2")],
            nodeclaims: vec![claim],
            pods: listed.iter().chain(&besides).cloned().collect(),
            ..Snapshot::default()
        };
        let whole = existing_nodes(&all, &[], &mut KeptExisting::default()).expect("converts");
        all.pods.clear();
        let groups = crate::cluster::PodsByNode::new(crate::cluster::Listed::from(listed));
        let bound = BoundPods::new(&groups, &besides);
        let grouped = existing_nodes_bound(&all, &bound, &[], &mut KeptExisting::default())
            .expect("converts");
        let pods_of = |nodes: &[Arc<ExistingNode>]| -> Vec<(String, Vec<String>)> {
            nodes
                .iter()
                .map(|n| {
                    (
                        n.name.clone(),
                        n.pods.iter().map(|p| p.name.clone()).collect(),
                    )
                })
                .collect()
        };
        let want: Vec<(String, Vec<String>)> = [
            ("n1", &["b", "f", "v1"][..]),
            ("n2", &["a"]),
            ("c3", &["e", "v2"]),
        ]
        .iter()
        .map(|(n, pods)| (n.to_string(), pods.iter().map(|p| p.to_string()).collect()))
        .collect();
        assert_eq!(pods_of(&whole), want);
        assert_eq!(pods_of(&grouped), want);
    }

    /// A Node is converted once while it is the same object. A node not
    /// initialized yet reads its NodeClaim, so it is converted again when
    /// the claim changes; an initialized one does not read it. A Node that
    /// is gone is forgotten.
    #[test]
    fn nodes_are_converted_again_only_when_they_or_the_claim_they_read_change() {
        let node = |initialized: &str| -> Arc<Node> {
            Arc::new(crate::testing::from_yaml(&format!(
                "metadata:
  name: n1
  labels: {{karpenter.sh/nodepool: gpu, karpenter.sh/initialized: \"{initialized}\"}}
spec: {{providerID: \"aws:///us-east-1a/i-1\"}}
status: {{allocatable: {{cpu: \"8\", nvidia.com/gpu: \"0\"}}}}"
            )))
        };
        let claim = |gpus: u32| -> Arc<NodeClaim> {
            Arc::new(crate::testing::from_yaml(&format!(
                "metadata: {{name: gpu-abc}}
spec:
  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
  requirements: []
status: {{providerID: \"aws:///us-east-1a/i-1\", nodeName: n1, allocatable: {{nvidia.com/gpu: \"{gpus}\"}}}}"
            )))
        };
        let mut s = Snapshot {
            nodes: vec![node("false")],
            nodeclaims: vec![claim(1)],
            ..Snapshot::default()
        };
        let mut kept = KeptExisting::default();
        let convert = |s: &Snapshot, kept: &mut KeptExisting| {
            let mut nodes = existing_nodes(s, &[], kept).expect("converts");
            assert_eq!(nodes.len(), 1);
            nodes.remove(0)
        };
        let first = convert(&s, &mut kept);
        assert_eq!(first.allocatable.get("nvidia.com/gpu"), 1, "the claim's");
        let again = convert(&s, &mut kept);
        assert!(Arc::ptr_eq(&first.labels, &again.labels), "kept");

        // The claim changes: the initializing node is converted again.
        s.nodeclaims[0] = claim(2);
        let second = convert(&s, &mut kept);
        assert!(!Arc::ptr_eq(&first.labels, &second.labels));
        assert_eq!(second.allocatable.get("nvidia.com/gpu"), 2);

        // The node initializes (a new object), then the claim changes: an
        // initialized node is kept whatever its claim.
        s.nodes[0] = node("true");
        let third = convert(&s, &mut kept);
        assert!(third.initialized);
        assert_eq!(third.allocatable.get("nvidia.com/gpu"), 0, "the node's");
        s.nodeclaims[0] = claim(3);
        let fourth = convert(&s, &mut kept);
        assert!(Arc::ptr_eq(&third.labels, &fourth.labels), "kept");

        // The node goes: its conversion is forgotten.
        s.nodes.clear();
        s.nodeclaims.clear();
        assert!(
            existing_nodes(&s, &[], &mut kept)
                .expect("converts")
                .is_empty()
        );
        assert!(kept.is_empty());
    }

    /// An in-flight NodeClaim's conversion is kept while the claim is the
    /// same object and its status gave allocatable and capacity. One that
    /// read the catalog (the claim not launched yet) reads it again at
    /// every call; a claim gone is forgotten.
    #[test]
    fn in_flight_claims_are_kept_once_launched() {
        let claim = |status: &str| -> Arc<NodeClaim> {
            Arc::new(crate::testing::from_yaml(&format!(
                "metadata: {{name: c1, labels: {{karpenter.sh/nodepool: p}}}}
spec:
  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
  requirements: [{{key: node.kubernetes.io/instance-type, operator: In, values: [small]}}]
{status}"
            )))
        };
        let convert = |s: &Snapshot, catalog: &[InstanceType], kept: &mut KeptExisting| {
            let mut nodes = existing_nodes(s, catalog, kept).expect("converts");
            assert_eq!(nodes.len(), 1);
            nodes.remove(0)
        };
        let mut catalog = crate::scheduling::tests::catalog();
        let mut s = Snapshot {
            nodeclaims: vec![claim("")],
            ..Snapshot::default()
        };
        let mut kept = KeptExisting::default();
        let first = convert(&s, &catalog, &mut kept);
        assert_eq!(first.allocatable.get("cpu"), 1900, "the catalog's");
        assert_eq!(first.nodepool.as_deref(), Some("p"));
        catalog[0].allocatable.set("cpu", 1500);
        let again = convert(&s, &catalog, &mut kept);
        assert_eq!(again.allocatable.get("cpu"), 1500, "read again");
        assert!(kept.is_empty(), "a conversion that read the catalog");

        // Launched: the status has its allocatable and capacity.
        s.nodeclaims[0] = claim(
            "status: {allocatable: {cpu: 1800m, memory: 3Gi, pods: '58'}, capacity: {cpu: '2', memory: 4Gi, pods: '58'}}",
        );
        let launched = convert(&s, &catalog, &mut kept);
        assert_eq!(launched.allocatable.get("cpu"), 1800, "the claim's");
        assert_eq!(launched.capacity.get("cpu"), 2000);
        catalog[0].allocatable.set("cpu", 1000);
        let same = convert(&s, &catalog, &mut kept);
        assert!(Arc::ptr_eq(&launched, &same), "kept");

        // A new version of the claim is converted again.
        s.nodeclaims[0] = claim(
            "status: {allocatable: {cpu: 1700m, memory: 3Gi, pods: '58'}, capacity: {cpu: '2', memory: 4Gi, pods: '58'}}",
        );
        assert_eq!(
            convert(&s, &catalog, &mut kept).allocatable.get("cpu"),
            1700
        );

        // The claim goes: its conversion is forgotten.
        s.nodeclaims.clear();
        assert!(
            existing_nodes(&s, &catalog, &mut kept)
                .expect("converts")
                .is_empty()
        );
        assert!(kept.is_empty());
    }

    /// A pod that needs a place is converted once while it is the same
    /// object; a pod with volumes is converted at every call (its claims
    /// may have changed); the conversion of a pod the cluster no longer
    /// holds is dropped at the next sweep.
    #[test]
    fn pod_specs_are_kept_while_the_pod_is_the_same_object() {
        let pod = |name: &str, extra: &str| -> Arc<SlimPod> {
            Arc::new(crate::testing::from_yaml(&format!(
                "metadata: {{name: {name}, namespace: default, creationTimestamp: \"2026-01-01T00:00:00Z\", labels: {{app: a}}}}
spec:
  containers: [{{name: c, resources: {{requests: {{cpu: \"1\"}}}}}}]{extra}"
            )))
        };
        let volumes = VolumeIndex::default();
        let mut kept = PodSpecs::default();
        let a = pod("a", "");
        let first = kept.get(&a, &volumes, 0).expect("converts");
        let again = kept.get(&a, &volumes, 0).expect("converts");
        assert_eq!(first, again);
        assert!(Arc::ptr_eq(&first.labels, &again.labels), "a is kept");
        assert_eq!(kept.len(), 1);

        let with_claim = pod(
            "b",
            "\n  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]",
        );
        let b1 = kept.get(&with_claim, &volumes, 0).expect("converts");
        let b2 = kept.get(&with_claim, &volumes, 0).expect("converts");
        assert!(!Arc::ptr_eq(&b1.labels, &b2.labels), "b is converted again");
        assert_eq!(kept.len(), 1, "b is not kept");

        // Enough pods to sweep, none of them held elsewhere: the sweep
        // keeps only `a`, which the test still holds.
        for i in 0..1100 {
            kept.get(&pod(&format!("p{i}"), ""), &volumes, 0)
                .expect("converts");
        }
        assert!(kept.len() < 1100, "swept: {}", kept.len());
        let a_again = kept.get(&a, &volumes, 0).expect("converts");
        assert!(Arc::ptr_eq(&first.labels, &a_again.labels), "a survives");
    }

    /// The typed conversions read every field that shapes a NodePool's
    /// capacity: requirements with minValues, template labels, taints and
    /// startup taints, limits, weight; and the kubelet settings and root
    /// volume of its EC2NodeClass.
    #[test]
    fn a_nodepool_and_its_nodeclass_convert_from_their_api_types() {
        let pool: NodePool = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "general"},
            "spec": {
                "weight": 10,
                "limits": {"cpu": "100", "memory": "400Gi"},
                "template": {
                    "metadata": {"labels": {"team": "a"}},
                    "spec": {
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                        "requirements": [
                            {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5", "c5"], "minValues": 2},
                            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
                        ],
                        "taints": [{"key": "dedicated", "value": "a", "effect": "NoSchedule"}],
                        "startupTaints": [{"key": "boot", "effect": "NoExecute"}],
                    },
                },
            },
        }))
        .expect("NodePool");
        let spec = nodepool_spec_with_types(&pool, Vec::new()).expect("converts");
        assert_eq!(spec.name, "general");
        assert_eq!(spec.weight, 10);
        assert_eq!(spec.limits.get("cpu"), 100_000);
        let family = spec
            .requirements
            .get("karpenter.k8s.aws/instance-family")
            .expect("family");
        assert!(family.has("m5") && family.has("c5") && !family.has("r5"));
        assert_eq!(family.min_values, Some(2));
        assert!(spec.requirements.get("team").is_some_and(|r| r.has("a")));
        assert_eq!(spec.labels.get("team").map(String::as_str), Some("a"));
        assert_eq!(
            spec.taints,
            [Taint::new("dedicated", "a", Effect::NoSchedule)]
        );
        assert_eq!(
            spec.startup_taints,
            [Taint::new("boot", "", Effect::NoExecute)]
        );

        let class: EC2NodeClass = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "default"},
            "spec": {
                "role": "r",
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"a": "b"}}],
                "securityGroupSelectorTerms": [{"tags": {"a": "b"}}],
                "kubelet": {"maxPods": 20, "kubeReserved": {"cpu": "200m"},
                            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "10%"}},
                "blockDeviceMappings": [{"deviceName": "/dev/xvda", "rootVolume": true, "ebs": {"volumeSize": "50Gi"}}],
            },
        }))
        .expect("EC2NodeClass");
        let k = kubelet_settings(&class).expect("converts");
        assert_eq!(k.max_pods, Some(20));
        assert_eq!(k.kube_reserved.as_ref().map(|r| r.get("cpu")), Some(200));
        let hard = k.eviction_hard.expect("evictionHard");
        assert_eq!(hard.get("memory"), 100 << 20);
        assert_eq!(hard.get("ephemeral-storage"), 0, "a percentage is left out");
        assert_eq!(k.root_volume_bytes, Some(50 << 30));
    }

    #[test]
    fn an_initialized_node_is_what_its_kubelet_reports() {
        let n = initializing(true);
        assert_eq!(n.taints.len(), 2);
        assert_eq!(n.allocatable.get("nvidia.com/gpu"), 0);
    }
}
