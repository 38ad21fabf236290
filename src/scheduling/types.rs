//! The core's input and output types: pure domain values, built by callers
//! (`plan`, `simulate`, consolidation) from Kubernetes objects.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::model::{InstanceType, LabelSelector, Requirements, Resources, Taint, Toleration};

/// A pod as the scheduler sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct PodSpec {
    pub namespace: String,
    pub name: String,
    /// Shared: a pod's conversion is kept and copied pass after pass
    /// ([`crate::convert::PodSpecs`]).
    pub labels: Arc<BTreeMap<String, String>>,
    /// Creation time in milliseconds since the epoch.
    pub created_ms: i64,
    /// Effective requests, including the `pods` slot.
    pub requests: Resources,
    /// nodeSelector, volume topology and other hard requirements (ANDed).
    pub node_selector: Requirements,
    /// Required node affinity terms (ORed); empty means no such constraint.
    pub required_terms: Vec<Requirements>,
    /// Preferred node affinity terms with weights.
    pub preferred_terms: Vec<(i32, Requirements)>,
    pub tolerations: Vec<Toleration>,
    pub host_ports: Vec<HostPort>,
    pub affinity: Vec<PodAffinityTerm>,
    pub preferred_affinity: Vec<(i32, PodAffinityTerm)>,
    pub anti_affinity: Vec<PodAffinityTerm>,
    pub preferred_anti_affinity: Vec<(i32, PodAffinityTerm)>,
    pub spread: Vec<TopologySpread>,
}

impl PodSpec {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// A pod with only requests, for tests and builders.
    pub fn new(namespace: &str, name: &str, requests: Resources) -> Self {
        let mut requests = requests;
        if requests.get(crate::model::quantity::PODS) == 0 {
            requests.set(crate::model::quantity::PODS, 1);
        }
        PodSpec {
            namespace: namespace.to_string(),
            name: name.to_string(),
            labels: Arc::default(),
            created_ms: 0,
            requests,
            node_selector: Requirements::new(),
            required_terms: Vec::new(),
            preferred_terms: Vec::new(),
            tolerations: Vec::new(),
            host_ports: Vec::new(),
            affinity: Vec::new(),
            preferred_affinity: Vec::new(),
            anti_affinity: Vec::new(),
            preferred_anti_affinity: Vec::new(),
            spread: Vec::new(),
        }
    }
}

/// A host port a container binds.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    pub ip: String,
    pub protocol: String,
    pub port: i32,
}

impl HostPort {
    /// Two host ports conflict on the same protocol and port unless both
    /// bind different specific addresses.
    pub fn conflicts(&self, other: &HostPort) -> bool {
        let wildcard = |ip: &str| ip.is_empty() || ip == "0.0.0.0" || ip == "::";
        self.port == other.port
            && self.protocol == other.protocol
            && (wildcard(&self.ip) || wildcard(&other.ip) || self.ip == other.ip)
    }
}

/// Which namespaces a pod affinity term selects.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Namespaces {
    /// These namespaces by name.
    Names(BTreeSet<String>),
    /// Every namespace (an empty namespaceSelector).
    All,
    /// Namespaces whose `kubernetes.io/metadata.name` label matches; only the
    /// name label is known to the core.
    Selector(LabelSelector),
}

impl Namespaces {
    pub fn contains(&self, ns: &str) -> bool {
        match self {
            Namespaces::Names(n) => n.contains(ns),
            Namespaces::All => true,
            Namespaces::Selector(s) => {
                let labels: BTreeMap<String, String> = [(
                    crate::model::labels::NAMESPACE_NAME.to_string(),
                    ns.to_string(),
                )]
                .into_iter()
                .collect();
                s.matches(&labels)
            }
        }
    }
}

/// A pod (anti-)affinity term.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodAffinityTerm {
    pub selector: LabelSelector,
    pub namespaces: Namespaces,
    pub topology_key: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unsatisfiable {
    DoNotSchedule,
    ScheduleAnyway,
}

/// A topology spread constraint; `selector` already includes matchLabelKeys.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopologySpread {
    pub topology_key: String,
    pub max_skew: u32,
    pub min_domains: Option<u32>,
    pub when_unsatisfiable: Unsatisfiable,
    pub selector: LabelSelector,
    /// Honor (default): only domains the pod's node affinity allows count.
    pub honor_node_affinity: bool,
    /// Honor: only domains whose nodes' taints the pod tolerates count
    /// (default Ignore).
    pub honor_node_taints: bool,
}

/// A pod already bound to a node, counted for topology and affinity.
#[derive(Debug, Clone, PartialEq)]
pub struct BoundPod {
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub requests: Resources,
    pub host_ports: Vec<HostPort>,
    /// Required anti-affinity terms of the bound pod (they repel newcomers).
    pub anti_affinity: Vec<PodAffinityTerm>,
    /// What it takes of a node's cpu, memory and pods, read from `requests`
    /// once ([`BoundPod::new`]) and summed per node ([`BoundPodList`]): a
    /// solver's setup counts every bound pod of the cluster, and a pod's
    /// requests are a map to walk.
    pub(crate) takes: Takes,
}

/// A bound pod's cpu, memory and pods as a node's free room counts them (a
/// pod that requests no `pods` takes one), and whether it requests any
/// other resource.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Takes {
    pub cpu_memory_pods: [i64; 3],
    pub others: bool,
}

impl BoundPod {
    pub fn new(
        namespace: String,
        name: String,
        labels: BTreeMap<String, String>,
        requests: Resources,
        host_ports: Vec<HostPort>,
        anti_affinity: Vec<PodAffinityTerm>,
    ) -> BoundPod {
        use crate::model::quantity::{CPU, MEMORY, PODS};
        let pods = requests.get(PODS);
        let takes = Takes {
            cpu_memory_pods: [
                requests.get(CPU),
                requests.get(MEMORY),
                if pods == 0 { 1 } else { pods },
            ],
            others: requests
                .0
                .keys()
                .any(|k| ![CPU, MEMORY, PODS].contains(&k.as_str())),
        };
        BoundPod {
            namespace,
            name,
            labels,
            requests,
            host_ports,
            anti_affinity,
            takes,
        }
    }
}

/// A node's bound pods, with what they take of it together and whether
/// any repels newcomers, summed once when the list is made: a solver's
/// setup reads every node of the cluster, and a kept conversion hands out
/// the same list pass after pass. Shared: a clone is the same list.
#[derive(Clone)]
pub struct BoundPodList(Arc<BoundPodListInner>);

#[derive(Default)]
struct BoundPodListInner {
    pods: Box<[Arc<BoundPod>]>,
    /// The sum of the pods' [`Takes::cpu_memory_pods`] (saturating).
    cpu_memory_pods: [i64; 3],
    /// Whether any pod requests a resource besides cpu, memory and pods.
    others: bool,
    /// Whether any pod has a required anti-affinity term.
    anti_affinity: bool,
    /// Every pod's host ports, in the pods' order.
    host_ports: Vec<HostPort>,
}

impl BoundPodList {
    /// Whether `a` and `b` are the same list (not merely equal).
    pub fn ptr_eq(a: &BoundPodList, b: &BoundPodList) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }

    /// The pods' cpu, memory and pods summed, and whether any of them
    /// requests another resource (then read the pods for those).
    pub(crate) fn takes(&self) -> Takes {
        Takes {
            cpu_memory_pods: self.0.cpu_memory_pods,
            others: self.0.others,
        }
    }

    /// Whether any pod has a required anti-affinity term.
    pub fn any_anti_affinity(&self) -> bool {
        self.0.anti_affinity
    }

    /// Every pod's host ports, in the pods' order.
    pub fn host_ports(&self) -> &[HostPort] {
        &self.0.host_ports
    }
}

/// No pods: one list shared by every empty node, so a node's conversion
/// that had no pods and has none is handed out again.
impl Default for BoundPodList {
    fn default() -> BoundPodList {
        static EMPTY: std::sync::LazyLock<BoundPodList> =
            std::sync::LazyLock::new(|| BoundPodList(Arc::default()));
        EMPTY.clone()
    }
}

impl From<Vec<Arc<BoundPod>>> for BoundPodList {
    fn from(pods: Vec<Arc<BoundPod>>) -> BoundPodList {
        let mut inner = BoundPodListInner {
            pods: pods.into_boxed_slice(),
            ..BoundPodListInner::default()
        };
        for p in inner.pods.iter() {
            for (sum, x) in inner
                .cpu_memory_pods
                .iter_mut()
                .zip(p.takes.cpu_memory_pods)
            {
                *sum = sum.saturating_add(x);
            }
            inner.others |= p.takes.others;
            inner.anti_affinity |= !p.anti_affinity.is_empty();
            inner.host_ports.extend(p.host_ports.iter().cloned());
        }
        BoundPodList(Arc::new(inner))
    }
}

impl<const N: usize> From<[Arc<BoundPod>; N]> for BoundPodList {
    fn from(pods: [Arc<BoundPod>; N]) -> BoundPodList {
        Vec::from(pods).into()
    }
}

impl FromIterator<Arc<BoundPod>> for BoundPodList {
    fn from_iter<I: IntoIterator<Item = Arc<BoundPod>>>(iter: I) -> BoundPodList {
        iter.into_iter().collect::<Vec<_>>().into()
    }
}

impl std::ops::Deref for BoundPodList {
    type Target = [Arc<BoundPod>];

    fn deref(&self) -> &[Arc<BoundPod>] {
        &self.0.pods
    }
}

impl PartialEq for BoundPodList {
    fn eq(&self, other: &BoundPodList) -> bool {
        self.0.pods == other.0.pods
    }
}

impl std::fmt::Debug for BoundPodList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.pods.iter()).finish()
    }
}

/// An existing node or an in-flight NodeClaim.
#[derive(Debug, Clone, PartialEq)]
pub struct ExistingNode {
    pub name: String,
    /// The NodePool it belongs to, if any (for limits).
    pub nodepool: Option<String>,
    /// Node labels; for in-flight NodeClaims, labels implied by its
    /// requirements. Shared with the conversion that keeps them.
    pub labels: Arc<BTreeMap<String, String>>,
    pub taints: Vec<Taint>,
    /// False while a node is still initialising: its ephemeral and startup
    /// taints are then ignored.
    pub initialized: bool,
    pub allocatable: Resources,
    /// Capacity, counted against NodePool limits.
    pub capacity: Resources,
    /// Shared with the conversion that keeps them ([`crate::convert::KeptExisting`]).
    pub pods: BoundPodList,
    /// Price per hour, when known (for consolidation callers).
    pub price: Option<f64>,
    /// What every solve reads of the node's labels and allocatable, read
    /// once ([`ExistingNode::keys`]); `NodeKeys::default()` to make one.
    pub keys: NodeKeys,
}

impl ExistingNode {
    /// The node's zone, capacity type and allocatable cpu, memory and
    /// pods, read from `labels` and `allocatable` at the first call. An
    /// unchanged node is handed from solve to solve as the same object;
    /// finding these in its maps at every solver's setup, scattered over
    /// the heap, took most of that setup's time in a 2,000-node rollout.
    pub fn keys(&self) -> &Keys {
        self.keys.0.get_or_init(|| Keys {
            zone: self.labels.get(crate::model::labels::ZONE).cloned(),
            capacity_type: self
                .labels
                .get(crate::model::labels::CAPACITY_TYPE)
                .cloned(),
            cpu_memory_pods: [
                crate::model::quantity::CPU,
                crate::model::quantity::MEMORY,
                crate::model::quantity::PODS,
            ]
            .map(|r| self.allocatable.get(r)),
        })
    }
}

/// [`ExistingNode::keys`] once read. A cache of the node's other fields:
/// it takes no part in comparing nodes, and a node whose labels or
/// allocatable change is made anew (every node is, from its Node).
#[derive(Debug, Clone, Default)]
pub struct NodeKeys(std::sync::OnceLock<Keys>);

impl PartialEq for NodeKeys {
    fn eq(&self, _: &NodeKeys) -> bool {
        true
    }
}

/// What [`ExistingNode::keys`] reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Keys {
    pub zone: Option<String>,
    pub capacity_type: Option<String>,
    /// Allocatable cpu (millicores), memory (bytes) and pods.
    pub cpu_memory_pods: [i64; 3],
}

/// A NodePool in domain terms.
#[derive(Debug, Clone, PartialEq)]
pub struct NodePoolSpec {
    pub name: String,
    pub weight: i32,
    /// Template requirements (including its labels as `In` requirements).
    pub requirements: Requirements,
    /// Template labels.
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    /// Limits on the sum of capacity (`cpu`, `memory`, ..., and `nodes`).
    pub limits: Resources,
    /// The instance types this NodePool may launch, as its EC2NodeClass sees
    /// them.
    pub instance_types: Vec<InstanceType>,
}

/// A DaemonSet's pod template: its pod lands on every new node it tolerates
/// and matches.
#[derive(Debug, Clone, PartialEq)]
pub struct DaemonSetSpec {
    pub name: String,
    pub pod: PodSpec,
}

/// Whether soft constraints are treated as hard first and then relaxed, or
/// dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Preferences {
    #[default]
    Respect,
    Ignore,
}

/// Everything the core decides from.
#[derive(Debug, Clone, Default)]
pub struct SolveInput {
    /// Shared: a node's conversion is kept and handed out pass after pass
    /// while the node and its pods are the same objects
    /// ([`crate::convert::KeptExisting`]).
    pub nodes: Vec<Arc<ExistingNode>>,
    /// Shared: a pending pod's conversion is kept and handed out pass after
    /// pass ([`crate::convert::PodSpecs`]).
    pub pods: Vec<Arc<PodSpec>>,
    pub nodepools: Vec<NodePoolSpec>,
    pub daemonsets: Vec<DaemonSetSpec>,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct SolveOptions {
    pub preferences: Preferences,
    /// The injected clock (ms since epoch): pods without a creation time are
    /// treated as created now.
    pub now_ms: i64,
}

/// A NodeClaim to launch.
#[derive(Debug, Clone, PartialEq)]
pub struct NewNodeClaim {
    pub nodepool: String,
    /// Requirements of the claim, including the instance type list.
    pub requirements: Requirements,
    /// Allowed instance types, cheapest first, at most [`super::MAX_INSTANCE_TYPES`].
    pub instance_types: Vec<String>,
    pub zones: Vec<String>,
    pub capacity_types: Vec<String>,
    /// Pod keys, `namespace/name`.
    pub pods: Vec<String>,
    /// Summed requests including daemonset overhead.
    pub requests: Resources,
    /// Cheapest compatible available offering.
    pub price: f64,
}

/// Pods placed on one existing node or in-flight NodeClaim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExistingPlacement {
    pub node: String,
    pub pods: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unschedulable {
    pub pod: String,
    pub reason: String,
}

/// The decision.
#[derive(Debug, Clone, PartialEq)]
pub struct SolveResult {
    pub nodeclaims: Vec<NewNodeClaim>,
    pub existing: Vec<ExistingPlacement>,
    pub unschedulable: Vec<Unschedulable>,
    pub price: f64,
    pub lower_bound: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, requests: Resources, port: Option<i32>, anti: bool) -> Arc<BoundPod> {
        let host_ports = port
            .map(|port| HostPort {
                ip: String::new(),
                protocol: "TCP".into(),
                port,
            })
            .into_iter()
            .collect();
        let anti_affinity = match anti {
            true => vec![PodAffinityTerm {
                selector: LabelSelector::default(),
                namespaces: Namespaces::All,
                topology_key: "kubernetes.io/hostname".into(),
            }],
            false => Vec::new(),
        };
        Arc::new(BoundPod::new(
            "default".into(),
            name.into(),
            BTreeMap::new(),
            requests,
            host_ports,
            anti_affinity,
        ))
    }

    #[test]
    fn a_bound_pod_lists_sum_is_what_its_pods_take_one_by_one() {
        let pods = vec![
            pod("a", Resources::new().with("cpu", 500), Some(80), false),
            pod("b", Resources::new().with("memory", 1 << 30), None, false),
            pod(
                "c",
                Resources::new().with("cpu", 250).with("pods", 2),
                Some(443),
                false,
            ),
        ];
        let list = BoundPodList::from(pods.clone());
        assert_eq!(list.takes().cpu_memory_pods, [750, 1 << 30, 4]);
        assert!(!list.takes().others);
        assert!(!list.any_anti_affinity());
        let ports: Vec<i32> = list.host_ports().iter().map(|p| p.port).collect();
        assert_eq!(ports, [80, 443]);
        assert_eq!(&*list, &pods[..]);

        let more: BoundPodList = pods
            .into_iter()
            .chain([pod(
                "gpu",
                Resources::new().with("nvidia.com/gpu", 1),
                None,
                true,
            )])
            .collect();
        assert!(more.takes().others);
        assert!(more.any_anti_affinity());
        assert_eq!(more.takes().cpu_memory_pods, [750, 1 << 30, 5]);
    }

    #[test]
    fn lists_are_the_same_only_when_shared_and_every_empty_list_is_one() {
        let a = BoundPodList::from(vec![pod("a", Resources::new(), None, false)]);
        let b = BoundPodList::from(vec![pod("a", Resources::new(), None, false)]);
        assert_eq!(a, b);
        assert!(!BoundPodList::ptr_eq(&a, &b));
        assert!(BoundPodList::ptr_eq(&a, &a.clone()));
        assert!(BoundPodList::ptr_eq(
            &BoundPodList::default(),
            &BoundPodList::default()
        ));
    }
}
