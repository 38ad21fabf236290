//! Disruption in the controller: describing the cluster to the pure
//! decisions of [`crate::disruption`], and carrying out their commands
//! through a queue that lives in the cluster's state, so a restart resumes
//! it.
//!
//! A pass (at most every [`DISRUPTION_POLL`], or at once after a pass that
//! started a command, as the reference requeues; skipped when nothing it
//! depends on changed since a pass that found nothing) builds the
//! candidates, the budgets and one [`Removals`] over the cluster, and asks
//! [`disruption::decide`]. A consolidation is validated again after
//! [`Settings::consolidation_validation`]; drift and expiration are carried
//! out at once.
//!
//! Carrying out a command:
//! 1. each candidate NodeClaim is marked (`dovetail.dev/disruption-reason`,
//!    `dovetail.dev/disruption-decided-at`, `dovetail.dev/replaced-by`, and
//!    the `DisruptionReason` condition), then its node is tainted
//!    `karpenter.sh/disrupted:NoSchedule`;
//! 2. the replacements are created (each annotated
//!    `dovetail.dev/replaces`);
//! 3. once every replacement is initialized, the candidates are deleted and
//!    termination drains them. A replacement that fails or is not
//!    initialized within [`Settings::replacement_timeout`] rolls the
//!    candidates back (taint, marks, and replacements not yet initialized
//!    removed), except for expiration, which goes ahead.
//!
//! Every step reads the marks from the cluster, so a controller restarted
//! at any point continues where the last one stopped; a disrupted taint
//! without marks (a crash before marking, or another autoscaler's) is
//! removed.
//!
//! Before a pass, each reconcile refreshes EC2NodeClass status from
//! `CloudProvider::resolve_node_class` (when the spec changed, or every
//! minute: images, subnets, security groups, instance profile, and every
//! condition Karpenter writes, with `Ready` as their root), deletes expired
//! NodeClaims (`expire_claims`: at once, outside budgets), and moves the
//! disruptions in progress on. A pass runs only when the revision of a kind it
//! reads (`Cluster::revision`), the unavailable offerings or a time threshold
//! (a node becoming consolidatable or expiring, a budget window) changed since
//! a pass that found nothing, or after `Settings::disruption_resync`. It
//! stamps NodeClaims that lack the drift hashes (adopted ones) and writes
//! their `status.lastPodEventTime`; the scheduling input it describes is
//! every node, with the movable pods of the candidates a trial may take
//! ([`disruption::movers`]: those the budgets have room for) as the pods that
//! may move; while only drift trials removals, the first drifted node's
//! alone ([`disruption::first_movers`]), the rest when it cannot be replaced.
//! What a pass reads off each NodeClaim and its Node is kept while both are
//! the same objects (`ClaimView`).
//! `DISRUPTION_POLL` is 10 s and `Settings::consolidation_validation` 15 s by
//! default.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource;

use super::claims::{claim_created, claim_expire_after, duration_or_never, lifetime_left};
use super::taints::{taint_disrupted, untaint_disrupted};
use super::{Conditioned, Controller, clear_condition, conditions, is_true, set_condition};
use crate::api::node::{has_taint, is_ready};
use crate::api::nodepool::ConsolidationPolicy;
use crate::api::{
    ANNOTATION_DO_NOT_DISRUPT, EC2NodeClass, NodeClaim, NodePool, SlimPod, TAINT_DISRUPTED,
};
use crate::clock::{Timestamp, format_rfc3339, parse_rfc3339};
use crate::cloud::CloudProvider;
use crate::cluster::{Cluster, ObjectKey, PodsByNode, Selector};
use crate::convert::{BoundPods, build_input_bound, build_input_with_pools};
use crate::disruption::pods::{
    eviction_cost, is_leaving, is_mirror, is_movable, tolerates_disrupted,
};
use crate::disruption::{self, Candidate, Command, Options, Pass, Reason};
use crate::drift::{self, DriftReason, NodeView};
use crate::model::InstanceType;
use crate::scheduling::pod::VolumeIndex;
use crate::scheduling::removal::Removals;
use crate::scheduling::{NodePoolSpec, SolveError, SolveInput, SolveOptions};

/// A disruption pass runs at most this often, as the reference's, unless
/// the last one started a command: then the budgets pace a rollout.
pub const DISRUPTION_POLL: Duration = Duration::from_secs(10);
/// Node classes are resolved again at least this often.
const NODECLASS_REFRESH: Duration = Duration::from_secs(60);

/// Marks a NodeClaim being disrupted, with the reason.
pub const ANNOTATION_DISRUPTION_REASON: &str = "dovetail.dev/disruption-reason";
/// When the disruption was decided (for the replacement timeout).
pub const ANNOTATION_DISRUPTION_DECIDED: &str = "dovetail.dev/disruption-decided-at";
/// The NodeClaims launched to replace a disrupted one, comma-separated.
pub const ANNOTATION_REPLACED_BY: &str = "dovetail.dev/replaced-by";
/// On a replacement: the NodeClaims it replaces, comma-separated.
pub const ANNOTATION_REPLACES: &str = "dovetail.dev/replaces";
/// The NodeClaim condition the reference sets on disrupted NodeClaims.
pub const CONDITION_DISRUPTION_REASON: &str = "DisruptionReason";

/// How long after a recorded pod event another is not recorded (Karpenter's
/// podevents controller's `dedupeTimeout`: fewer writes in a busy cluster,
/// and shorter than consolidation's 15 s validation).
const POD_EVENT_DEDUPE: k8s_openapi::jiff::SignedDuration =
    k8s_openapi::jiff::SignedDuration::from_secs(10);
/// A taint the removal trials see on capacity that is not initialized yet
/// (never written to a node).
const NOT_INITIALIZED_TAINT: &str = "dovetail.dev/not-initialized";
/// The annotation that exempts pods and nodes from voluntary disruption.
const DO_NOT_DISRUPT: &str = ANNOTATION_DO_NOT_DISRUPT;

/// The disruption loop's state across reconciles. Nothing here matters
/// after a restart: the queue is in the cluster.
#[derive(Debug, Default)]
pub struct DisruptionState {
    last_pass: Option<Timestamp>,
    /// Per NodeClaim and reason, what the last pass found blocking it (its
    /// last `DisruptionBlocked` Event named the same: a new Event only when
    /// the blocker changes).
    blocked: BTreeMap<(String, Reason), disruption::Blocked>,
    /// Per NodeClaim, the last `Unconsolidatable` Event's message and when.
    unconsolidatable: BTreeMap<String, (String, Timestamp)>,
    /// What the last pass that found nothing depended on, and until when
    /// its answer stands (the next time threshold: a node becoming
    /// consolidatable or expiring, a budget window, the resync).
    quiet: Option<(u64, Timestamp)>,
    /// A consolidation awaiting validation, and when.
    pending: Option<(Command, Timestamp)>,
    /// Per candidate node of the last pass, what the pass read of its
    /// pods.
    node_pods: HashMap<Arc<str>, NodePods, foldhash::fast::RandomState>,
    /// Per NodeClaim: the drift check's verdict, the cloud's, and the
    /// resource versions of the NodeClaim, its node, NodePool and
    /// EC2NodeClass they were reached on. A large fleet is checked at every
    /// pass; most of it is unchanged.
    drift: HashMap<String, KeptDrift, foldhash::fast::RandomState>,
    /// The last pass's view of each NodeClaim, by the object's address
    /// (the view holds the object, so no other can take its address).
    claims: HashMap<usize, ClaimView, foldhash::fast::RandomState>,
    /// Per EC2NodeClass: the generation resolved and when.
    resolved: BTreeMap<String, (Option<i64>, Timestamp)>,
    /// USD/h saved by the consolidations carried out.
    savings: f64,
    /// The scheduling input of the last pass that built one and the
    /// removal trials built over it, kept for the next pass while nothing
    /// the input was built from changes: converting every pod of a large
    /// cluster and preparing the solver over it are most of a pass's cost,
    /// and the periodic passes of a quiet cluster would do both again.
    input: Option<KeptInput>,
}

/// A pass's scheduling input and the node each of its pods runs on
/// (`homes[i]` for `input.pods[i]`).
#[derive(Debug)]
struct Prepared {
    input: SolveInput,
    homes: Vec<Arc<str>>,
}

self_cell::self_cell!(
    /// A pass's input with the removal trials built over it: a trial undoes
    /// what it changed, so the same trials serve the next pass while
    /// nothing the input was built from changes.
    struct Trials {
        owner: Prepared,
        #[covariant]
        dependent: Removals,
    }
);

impl Trials {
    /// Builds the trials over `prepared`.
    fn build(prepared: Prepared, opts: &SolveOptions) -> Result<Trials, SolveError> {
        Trials::try_new(prepared, |p| {
            let homes: Vec<&str> = p.homes.iter().map(|h| &**h).collect();
            Removals::new(&p.input, &homes, opts)
        })
    }
}

/// A pass's input: built for it, or the last pass's trials, kept.
enum PassInput {
    Built(Prepared),
    Kept(Trials),
}

impl PassInput {
    fn trials(self, opts: &SolveOptions) -> Result<Trials, SolveError> {
        match self {
            PassInput::Built(p) => Trials::build(p, opts),
            PassInput::Kept(t) => Ok(t),
        }
    }
}

/// The last pass's trials and the key of what their input was built from
/// (its NodePools excepted: they are compared with the next pass's).
struct KeptInput {
    key: InputKey,
    trials: Trials,
}

/// What a pass's scheduling input is built from ([`Controller::input_key`]):
/// a hash of the kinds' revisions and of the pass's own facts, and the
/// NodeClaims converted, compared only when the hash is the same (during
/// a rollout, the pods change at every pass).
#[derive(Debug)]
struct InputKey {
    hash: u64,
    claims: Arc<[Arc<NodeClaim>]>,
}

impl PartialEq for InputKey {
    /// The same hash, and the same NodeClaims (by uid and resource
    /// version): a pass's own writes to its candidates' claims leave the
    /// converted ones alone.
    fn eq(&self, other: &Self) -> bool {
        let same = |a: &Arc<NodeClaim>, b: &Arc<NodeClaim>| {
            Arc::ptr_eq(a, b)
                || (a.metadata.uid == b.metadata.uid
                    && a.metadata.resource_version == b.metadata.resource_version)
        };
        self.hash == other.hash
            && (Arc::ptr_eq(&self.claims, &other.claims)
                || (self.claims.len() == other.claims.len()
                    && self
                        .claims
                        .iter()
                        .zip(other.claims.iter())
                        .all(|(a, b)| same(a, b))))
    }
}

impl std::fmt::Debug for KeptInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let input = self.trials.borrow_owner();
        f.debug_struct("KeptInput")
            .field("key", &self.key)
            .field("nodes", &input.input.nodes.len())
            .field("pods", &input.input.pods.len())
            .finish()
    }
}

/// What a drift verdict was read from: the NodeClaim's, the Node's and the
/// EC2NodeClass's resource versions, the NodePool's uid and generation.
type DriftInputs = [String; 4];

/// How long the cloud's drift verdict on an instance stands while nothing
/// it was read from changes: Karpenter's NodeClaim disruption controller
/// asks `IsDrifted` when the NodeClaim, its NodePool or EC2NodeClass
/// changes, and again 5 minutes after its last look.
const CLOUD_DRIFT_RECHECK: Duration = Duration::from_secs(5 * 60);

/// A NodeClaim's drift as a pass found it, kept for the next while the
/// objects it was read from (`inputs`) are the same.
#[derive(Debug, Clone)]
struct KeptDrift {
    inputs: DriftInputs,
    verdict: drift::DriftVerdict,
    /// The cloud provider's reasons and when it gave them (`None` when it
    /// could not: asked again at the next pass).
    cloud: Option<(Vec<DriftReason>, Timestamp)>,
}

/// A pass's drift work: each NodePool and EC2NodeClass pair's target, read
/// once for all its nodes, and the verdicts kept for the next pass.
#[derive(Default)]
struct DriftPass<'p> {
    targets: HashMap<(&'p str, &'p str), drift::Target<'p>, foldhash::fast::RandomState>,
    kept: HashMap<String, KeptDrift, foldhash::fast::RandomState>,
}

/// What a drift verdict read, by version: the NodeClaim, its Node, the
/// NodePool's spec alone (its uid and generation), and the EC2NodeClass
/// (its status too). `None` when one has no version: the verdict is not
/// kept.
fn drift_inputs(
    claim: &NodeClaim,
    node: &Node,
    pool: &NodePool,
    class: &EC2NodeClass,
) -> Option<DriftInputs> {
    Some([
        claim.metadata.resource_version.clone()?,
        node.metadata.resource_version.clone()?,
        format!(
            "{}/{}",
            pool.metadata.uid.as_deref()?,
            pool.metadata.generation?
        ),
        class.metadata.resource_version.clone()?,
    ])
}

/// Whether `kept` is what [`drift_inputs`] reads now, compared in place:
/// at each pass nearly every NodeClaim is as the last pass saw it.
fn drift_inputs_hold(
    kept: &DriftInputs,
    claim: &NodeClaim,
    node: &Node,
    pool: &NodePool,
    class: &EC2NodeClass,
) -> bool {
    let [c, n, p, k] = kept;
    let pool_held = match (pool.metadata.uid.as_deref(), pool.metadata.generation) {
        (Some(uid), Some(generation)) => p
            .strip_prefix(uid)
            .and_then(|p| p.strip_prefix('/'))
            .is_some_and(|p| p.parse() == Ok(generation)),
        _ => false,
    };
    pool_held
        && claim.metadata.resource_version.as_deref() == Some(c.as_str())
        && node.metadata.resource_version.as_deref() == Some(n.as_str())
        && class.metadata.resource_version.as_deref() == Some(k.as_str())
}

/// What a pass needs to prepare the pods of all its movers when the first
/// ones' were not enough ([`disruption::first_movers`]).
struct Deferred {
    /// Every mover, by node.
    movers: BTreeSet<String>,
    pools: Vec<Arc<NodePool>>,
    catalog: Vec<InstanceType>,
    pods_by_node: Arc<PodsByNode>,
}

/// `chosen`, candidates of `candidates`, in the order of `candidates` (the
/// order of the input's pods). Found by address: by node name in a set,
/// the compares took 1.1% of a whole-fleet drift's profile.
fn in_order<'c>(candidates: &'c [Candidate], chosen: &[&Candidate]) -> Vec<&'c Candidate> {
    let chosen: HashSet<*const Candidate, foldhash::fast::RandomState> =
        chosen.iter().map(|c| std::ptr::from_ref(*c)).collect();
    candidates
        .iter()
        .filter(|c| chosen.contains(&std::ptr::from_ref(*c)))
        .collect()
}

/// What a pass is built from.
struct Facts {
    /// The movers whose pods the pass's input holds, when not all
    /// ([`Pass::prepared`]), and what the others' need.
    prepared: Option<BTreeSet<String>>,
    deferred: Option<Deferred>,
    candidates: Vec<Candidate>,
    budgets: BTreeMap<String, disruption::Allowed>,
    consolidation: bool,
    specs: Vec<NodePoolSpec>,
    /// What the pass's input (returned beside these facts) was built from
    /// (see [`DisruptionState::input`]); `None` when the pass needs no
    /// removals and built no input.
    input_key: Option<InputKey>,
    /// Whether the input is the last pass's, kept because nothing it was
    /// built from changed.
    input_kept: bool,
    /// Nodes and NodeClaims not yet initialized, by the scheduling input's
    /// names: a plan may not rely on them.
    uninitialized: BTreeSet<String>,
    /// The next time a candidate becomes consolidatable, a pod's
    /// `do-not-disrupt` duration ends, or a budget window opens or closes.
    next_threshold: Option<Timestamp>,
    /// The static NodePools, counted.
    statics: BTreeMap<String, disruption::statics::StaticPool>,
    /// The candidates' NodeClaims whose `Drifted` and `Consolidatable`
    /// conditions are not yet what the pass found, as the pass read them,
    /// with the `Drifted` reason and whether it is `Consolidatable`.
    conditions: Vec<(Arc<NodeClaim>, Option<&'static str>, bool)>,
}

fn since(t: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(t)).unwrap_or_default()
}

fn until(t: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(t.duration_since(now)).unwrap_or_default()
}

fn annotation<'a, K: Resource>(obj: &'a K, key: &str) -> Option<&'a str> {
    obj.meta()
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

fn claim_name(claim: &NodeClaim) -> String {
    claim.metadata.name.clone().unwrap_or_default()
}

/// The price of an offering among the NodePools' instance types.
/// The last pod event's mark: a hash of the node's movable pods, which
/// changes when one comes or goes.
fn pod_mark(on_node: &[&Arc<SlimPod>]) -> u64 {
    let mut keys: Vec<(&str, &str)> = on_node
        .iter()
        .map(|p| {
            (
                p.metadata.namespace.as_deref().unwrap_or("default"),
                p.metadata.name.as_deref().unwrap_or(""),
            )
        })
        .collect();
    keys.sort_unstable();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    keys.hash(&mut h);
    h.finish()
}

/// What a pass reads of one node's pods, kept from pass to pass while the
/// node holds the same pod objects (a pod that changes is a new object):
/// a pass looks at every candidate, and most of a large fleet's pods did
/// not change since the last.
#[derive(Debug)]
struct NodePods {
    /// The node's pods that have not finished, in the pass's order.
    pods: Vec<Arc<SlimPod>>,
    /// How many of them may move ([`is_movable`]).
    movable: usize,
    /// [`pod_mark`] of those that may move.
    mark: u64,
    /// The sum of their eviction costs, in order.
    cost: f64,
    /// Whether any of them has the do-not-disrupt annotation.
    protected: bool,
}

impl NodePods {
    fn of(pods: &[Arc<SlimPod>]) -> NodePods {
        let movable: Vec<&Arc<SlimPod>> = pods.iter().filter(|p| is_movable(p)).collect();
        NodePods {
            pods: pods.to_vec(),
            movable: movable.len(),
            mark: pod_mark(&movable),
            cost: movable.iter().map(|p| eviction_cost(p)).sum(),
            protected: pods.iter().any(|p| {
                p.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(DO_NOT_DISRUPT))
            }),
        }
    }

    /// Whether these are `pods`, the same objects in the same order.
    fn holds(&self, pods: &[Arc<SlimPod>]) -> bool {
        self.pods.len() == pods.len() && self.pods.iter().zip(pods).all(|(a, b)| Arc::ptr_eq(a, b))
    }
}

/// What a pass reads off one NodeClaim and its Node alone, kept from pass
/// to pass while both are the same objects (an object that changes is a
/// new one): at each pass nearly every NodeClaim of a large fleet is as
/// the last pass saw it, and reading its conditions, labels and
/// annotations again, scattered over the heap, was most of the pass's
/// per-claim cost.
#[derive(Debug)]
struct ClaimView {
    claim: Arc<NodeClaim>,
    /// The Node `status.nodeName` names, as the view was read.
    node: Option<Arc<Node>>,
    name: Arc<str>,
    /// `status.nodeName`, whether or not such a Node exists.
    node_name: Option<Arc<str>>,
    nodepool: Option<Arc<str>>,
    /// The NodeClaim has a deletion timestamp.
    claim_deleting: bool,
    /// The NodeClaim or its Node has a deletion timestamp.
    deleting: bool,
    /// Marked by a disruption in flight.
    marked: bool,
    initialized: bool,
    /// When it became `Initialized`.
    initialized_at: Option<Timestamp>,
    /// `status.lastPodEventTime`.
    pod_event: Option<Timestamp>,
    /// The Node exists and is `Ready`.
    node_ready: bool,
    /// The Node carries the disrupted taint.
    tainted: bool,
    /// The Node's instance type, zone and capacity type labels.
    instance_type: Arc<str>,
    zone: Arc<str>,
    capacity_type: Arc<str>,
    /// The Node or the NodeClaim has `do-not-disrupt: "true"`.
    do_not_disrupt: bool,
    /// `expireAfter` and the creation time, for the lifetime left.
    expire_after: Option<Duration>,
    created: Option<Timestamp>,
    /// The last [`conditions_hold`] asked and its answer: a pass asks
    /// what the last asked unless a condition is due to change.
    held: Option<(Option<&'static str>, bool, bool)>,
}

impl ClaimView {
    /// Reads `claim` and its Node (`node_named` finds a Node by name).
    fn read<'n>(
        claim: &Arc<NodeClaim>,
        node_named: impl FnOnce(&str) -> Option<&'n Arc<Node>>,
    ) -> Self {
        let status = claim.status.as_ref();
        let node_name: Option<Arc<str>> =
            status.and_then(|s| s.node_name.as_deref().map(Arc::from));
        let node = node_name.as_deref().and_then(node_named).cloned();
        let initialized = crate::api::common::find_condition(
            status.and_then(|s| s.conditions.as_deref()),
            conditions::INITIALIZED,
        );
        let label = |key: &str| -> Arc<str> {
            node.as_ref()
                .and_then(|n| n.metadata.labels.as_ref()?.get(key))
                .map_or_else(|| Arc::from(""), |v| Arc::from(v.as_str()))
        };
        ClaimView {
            name: claim_name(claim).into(),
            nodepool: claim.nodepool_name().map(Arc::from),
            claim_deleting: claim.metadata.deletion_timestamp.is_some(),
            deleting: claim.metadata.deletion_timestamp.is_some()
                || node
                    .as_ref()
                    .is_some_and(|n| n.metadata.deletion_timestamp.is_some()),
            marked: annotation(claim.as_ref(), ANNOTATION_DISRUPTION_REASON).is_some(),
            initialized: initialized.is_some_and(|c| c.is_true()),
            initialized_at: initialized.map(|c| c.last_transition_time.0),
            pod_event: status
                .and_then(|s| s.last_pod_event_time.as_ref())
                .map(|t| t.0),
            node_ready: node.as_ref().is_some_and(|n| is_ready(n)),
            tainted: node.as_ref().is_some_and(|n| has_taint(n, TAINT_DISRUPTED)),
            instance_type: label(crate::api::LABEL_INSTANCE_TYPE),
            zone: label(crate::api::LABEL_ZONE),
            capacity_type: label(crate::api::LABEL_CAPACITY_TYPE),
            do_not_disrupt: node
                .as_ref()
                .is_some_and(|n| annotation(n.as_ref(), DO_NOT_DISRUPT) == Some("true"))
                || annotation(claim.as_ref(), DO_NOT_DISRUPT) == Some("true"),
            expire_after: claim_expire_after(claim),
            created: claim.metadata.creation_timestamp.as_ref().map(|t| t.0),
            held: None,
            claim: Arc::clone(claim),
            node,
            node_name,
        }
    }

    /// Whether this view still holds for `claim`: the same object, and
    /// its Node the same object too (`current` tells whether a Node is in
    /// the pass's list), or still absent.
    fn holds(
        &self,
        claim: &Arc<NodeClaim>,
        current: impl Fn(&Arc<Node>) -> bool,
        node_named: impl FnOnce(&str) -> bool,
    ) -> bool {
        Arc::ptr_eq(&self.claim, claim)
            && match (&self.node, &self.node_name) {
                (Some(node), _) => current(node),
                (None, Some(name)) => !node_named(name),
                (None, None) => true,
            }
    }

    /// What a pass is asked of the NodeClaim's remaining lifetime
    /// ([`lifetime_remaining`]).
    fn lifetime_remaining(&self, now: Timestamp) -> f64 {
        lifetime_left(self.expire_after, self.created.unwrap_or(now), now)
    }

    /// [`conditions_hold`] for this NodeClaim.
    fn conditions_hold(&mut self, drifted: Option<&'static str>, consolidatable: bool) -> bool {
        match self.held {
            Some((d, c, held)) if d == drifted && c == consolidatable => held,
            _ => {
                let held = conditions_hold(&self.claim, drifted, consolidatable);
                self.held = Some((drifted, consolidatable, held));
                held
            }
        }
    }
}

/// The controller's grouping of the pods, as the scheduling input's
/// conversion reads it.
impl crate::convert::PodsOnNodes for PodsByNode {
    fn running_on(&self, node: &str) -> Vec<&Arc<SlimPod>> {
        PodsByNode::running_on(self, node)
    }
}

/// The offering a node runs on, as its labels name it.
struct Offering<'a> {
    instance_type: &'a str,
    zone: &'a str,
    capacity_type: &'a str,
}

/// A pass's instance types by name: each NodePool's, every NodePool's,
/// and the catalog's, each in the order read, so a lookup finds what a
/// scan of the list in that order would.
#[derive(Default)]
struct TypesByName<'a> {
    pools: HashMap<&'a str, ByName<'a>, foldhash::fast::RandomState>,
    all: ByName<'a>,
    catalog: ByName<'a>,
}

type ByName<'a> = HashMap<&'a str, Vec<&'a InstanceType>, foldhash::fast::RandomState>;

impl<'a> TypesByName<'a> {
    fn new(specs: &'a [NodePoolSpec], catalog: &'a [InstanceType]) -> Self {
        let mut index = TypesByName::default();
        for spec in specs {
            for t in &spec.instance_types {
                index
                    .pools
                    .entry(spec.name.as_str())
                    .or_default()
                    .entry(t.name.as_str())
                    .or_default()
                    .push(t);
                index.all.entry(t.name.as_str()).or_default().push(t);
            }
        }
        for t in catalog {
            index.catalog.entry(t.name.as_str()).or_default().push(t);
        }
        index
    }

    fn get<'m>(map: &'m ByName<'a>, name: &str) -> &'m [&'a InstanceType] {
        map.get(name).map_or(&[], Vec::as_slice)
    }

    fn pool(&self, pool: &str, name: &str) -> &[&'a InstanceType] {
        self.pools
            .get(pool)
            .map_or(&[], |types| TypesByName::get(types, name))
    }
}

impl Offering<'_> {
    /// Instance-type drift: the type is gone from the catalog, or its
    /// NodePool (`pool`) no longer offers it in this zone and capacity
    /// type.
    fn drift(&self, pool: &str, types: &TypesByName) -> Option<DriftReason> {
        let (name, zone, ct) = (self.instance_type, self.zone, self.capacity_type);
        if name.is_empty() {
            return None;
        }
        match types.pool(pool, name).first() {
            None if TypesByName::get(&types.catalog, name).is_empty() => {
                Some(DriftReason::InstanceType {
                    instance_type: name.to_string(),
                    why: "no longer exists".into(),
                })
            }
            Some(t)
                if !t
                    .offerings
                    .iter()
                    .any(|o| o.zone == zone && o.capacity_type == ct) =>
            {
                Some(DriftReason::InstanceType {
                    instance_type: name.to_string(),
                    why: format!("has no {ct} offering in {zone}"),
                })
            }
            _ => None,
        }
    }

    /// Its price: its own NodePool's first (overlays price types per
    /// NodePool), then any NodePool's, then the catalog's; 0 if none has it.
    fn price(&self, pool: &str, types: &TypesByName) -> f64 {
        let (name, zone, ct) = (self.instance_type, self.zone, self.capacity_type);
        offering_price(types.pool(pool, name), zone, ct)
            .or_else(|| offering_price(TypesByName::get(&types.all, name), zone, ct))
            .or_else(|| offering_price(TypesByName::get(&types.catalog, name), zone, ct))
            .unwrap_or(0.0)
    }
}

/// The price of the first offering in `zone` and capacity type `ct` among
/// `types` (of one name).
fn offering_price(types: &[&InstanceType], zone: &str, ct: &str) -> Option<f64> {
    types
        .iter()
        .flat_map(|t| t.offerings.iter())
        .find(|o| o.zone == zone && o.capacity_type == ct)
        .map(|o| o.price)
}

/// A NodeClaim with `status.lastPodEventTime` at `now`, to write.
fn with_pod_event_time(claim: &NodeClaim, now: Timestamp) -> NodeClaim {
    let mut updated = claim.clone();
    updated
        .status
        .get_or_insert_with(Default::default)
        .last_pod_event_time = Some(Time(crate::clock::truncate_to_second(now)));
    updated
}

/// Whether a NodeClaim's `Drifted` and `Consolidatable` conditions are
/// already those [`Controller::write_claim_conditions`] would write.
fn conditions_hold(claim: &NodeClaim, drifted: Option<&str>, consolidatable: bool) -> bool {
    let conds = claim.status.as_ref().and_then(|s| s.conditions.as_deref());
    let find = |type_| crate::api::common::find_condition(conds, type_);
    let drift_holds = match (drifted, find(conditions::DRIFTED)) {
        (None, None) => true,
        (Some(reason), Some(c)) => {
            c.is_true()
                && c.reason.as_deref() == Some(reason)
                && c.message.as_deref().unwrap_or("") == reason
        }
        _ => false,
    };
    let consolidatable_holds = match (consolidatable, find(conditions::CONSOLIDATABLE)) {
        (false, None) => true,
        (true, Some(c)) => {
            c.is_true()
                && c.reason.as_deref() == Some(conditions::CONSOLIDATABLE)
                && c.message.as_deref().unwrap_or("").is_empty()
        }
        _ => false,
    };
    drift_holds && consolidatable_holds
}

/// The allowances of PodDisruptionBudgets, as their status reports them
/// (the disruption controller's count; none before it has observed them).
struct Budgets {
    pdbs: Vec<Pdb>,
}

/// What a disruption pass read of the cluster that its scheduling input is
/// built from.
struct Read<'a> {
    catalog: &'a [InstanceType],
    /// The pods, and by node.
    pods_by_node: &'a PodsByNode,
    /// The nodes and NodeClaims whose capacity is not initialized yet.
    uninitialized: &'a BTreeSet<String>,
    now: Timestamp,
}

struct Pdb {
    namespace: String,
    selector: Selector,
    name: String,
    allowed: i32,
    /// `unhealthyPodEvictionPolicy: AlwaysAllow`: a pod that is not Ready
    /// may always be evicted.
    always_allow_unhealthy: bool,
}

/// The capacity reservations node classes report `expiring` (capacity
/// blocks near their end): NodeClaims launched into them are deleted.
fn expiring_reservations(classes: &[Arc<EC2NodeClass>]) -> BTreeSet<String> {
    classes
        .iter()
        .filter_map(|c| c.status.as_ref()?.capacity_reservations.as_ref())
        .flatten()
        .filter(|r| r.state == Some(crate::api::ec2nodeclass::ReservationState::Expiring))
        .map(|r| r.id.clone())
        .collect()
}

fn pod_ready_false(pod: &SlimPod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "False")
}

impl Budgets {
    /// Whether no budget covers any pod (none, or none whose selector
    /// parses).
    fn is_empty(&self) -> bool {
        self.pdbs.is_empty()
    }

    fn new(pdbs: &[Arc<PodDisruptionBudget>]) -> Self {
        Budgets {
            pdbs: pdbs
                .iter()
                .filter_map(|b| {
                    let spec = b.spec.as_ref()?;
                    let selector = Selector::from_optional(spec.selector.as_ref()).ok()?;
                    let allowed = b
                        .status
                        .as_ref()
                        .and_then(|s| s.disruptions_allowed)
                        .unwrap_or(0);
                    Some(Pdb {
                        namespace: b.metadata.namespace.clone().unwrap_or_default(),
                        selector,
                        name: format!(
                            "{}/{}",
                            b.metadata.namespace.as_deref().unwrap_or_default(),
                            b.metadata.name.as_deref().unwrap_or_default()
                        ),
                        allowed,
                        always_allow_unhealthy: spec.unhealthy_pod_eviction_policy.as_deref()
                            == Some("AlwaysAllow"),
                    })
                })
                .collect(),
        }
    }

    /// Why the pods cannot be evicted now, if they cannot: as the
    /// reference's `CanEvictPods`, a pod under more than one budget, or
    /// under a budget that allows no disruption now. A budget that allows
    /// some is no block, however many of its pods the node holds: the
    /// drain evicts them as the budget lets it, and the allowance is read
    /// again as replacement pods become ready. Pods the drain would not
    /// evict (terminating, mirror pods, pods that tolerate the disrupted
    /// taint) do not count.
    fn blocks(&self, pods: &[&Arc<SlimPod>]) -> Option<String> {
        for p in pods {
            if p.metadata.deletion_timestamp.is_some() || is_mirror(p) || tolerates_disrupted(p) {
                continue;
            }
            let ns = p.metadata.namespace.as_deref().unwrap_or("default");
            let matching: Vec<&Pdb> = self
                .pdbs
                .iter()
                .filter(|b| b.namespace == ns && b.selector.matches_opt(p.metadata.labels.as_ref()))
                .collect();
            if matching.len() > 1 {
                return Some(format!(
                    "pod {} has more than one PodDisruptionBudget",
                    p.key()
                ));
            }
            if let Some(b) = matching.first()
                && b.allowed <= 0
                && !(b.always_allow_unhealthy && pod_ready_false(p))
            {
                return Some(format!(
                    "PodDisruptionBudget {} allows no disruption now",
                    b.name
                ));
            }
        }
        None
    }
}

impl<C: Cluster, P: CloudProvider> Controller<C, P> {
    /// The disruption loop: node-class status, the disruption queue, the
    /// validation of a pending consolidation, and a new pass when one is
    /// due. Returns when it next needs to run.
    pub async fn reconcile_disruption(&mut self) -> Duration {
        let _timer = self
            .metrics
            .reconcile(super::metrics::controllers::DISRUPTION);
        let now = self.clock.now();
        let mut next = self.settings.resync;
        next = next.min(self.refresh_nodeclasses().await);
        next = next.min(self.expire_claims().await);
        next = next.min(self.progress_disruptions().await);
        if let Some((_, at)) = &self.disruption.pending {
            let at = *at;
            if now >= at {
                self.validate_pending().await;
            } else {
                return next.min(until(at, now));
            }
        }
        if let Some(last) = self.disruption.last_pass
            && since(last, now) < DISRUPTION_POLL
        {
            return next.min(DISRUPTION_POLL - since(last, now));
        }
        let fingerprint = self.fingerprint();
        if let Some((quiet, until_t)) = self.disruption.quiet
            && quiet == fingerprint
            && now < until_t
        {
            return next.min(until(until_t, now));
        }
        self.disruption.last_pass = Some(now);
        let Some((mut facts, input)) = self.disruption_facts(now, &BTreeSet::new()).await else {
            return next.min(DISRUPTION_POLL);
        };
        self.metrics.eligible(&facts.candidates);
        let deferred = facts.deferred.take();
        let mut input_key = facts.input_key.take();
        let (opts, mut pass) = self.pass_of(&facts, now);
        let blocked = disruption::blocked(&pass);
        let Some(mut trials) = self.trials_or_event(input, &opts) else {
            return next;
        };
        let mut outcome =
            trials.with_dependent_mut(|_, removals| disruption::decide(&pass, removals));
        if outcome.unprepared
            && let Some(deferred) = deferred
        {
            // The first drifted node could not be replaced: the pass again,
            // over every mover's pods.
            let movers: Vec<&Candidate> = facts
                .candidates
                .iter()
                .filter(|c| deferred.movers.contains(&*c.node))
                .collect();
            input_key = Some(self.input_key(&movers, &facts.uninitialized));
            let read = Read {
                catalog: &deferred.catalog,
                pods_by_node: &deferred.pods_by_node,
                uninitialized: &facts.uninitialized,
                now,
            };
            let dynamic = super::dynamic_only(&facts.specs, &deferred.pools);
            let Some((input, _)) = self.pass_input(input_key.as_ref(), dynamic, &movers, &read)
            else {
                return next.min(DISRUPTION_POLL);
            };
            let Some(rebuilt) = self.trials_or_event(input, &opts) else {
                return next;
            };
            trials = rebuilt;
            pass.prepared = None;
            outcome = trials.with_dependent_mut(|_, removals| disruption::decide(&pass, removals));
        }
        drop(pass);
        self.report_blocked(blocked);
        let node_of: BTreeMap<&str, &str> = facts
            .candidates
            .iter()
            .map(|c| (&*c.nodeclaim, &*c.node))
            .collect();
        let unconsolidatable: Vec<(String, String, String)> =
            std::mem::take(&mut outcome.unconsolidatable)
                .into_iter()
                .map(|(claim, why)| {
                    let node = node_of.get(claim.as_str()).copied().unwrap_or_default();
                    (claim, node.to_string(), why)
                })
                .collect();
        self.report_unconsolidatable(unconsolidatable, now);
        tracing::debug!(
            candidates = facts.candidates.len(),
            consolidation = facts.consolidation,
            input_kept = facts.input_kept,
            trials = outcome.trials,
            evaluated = outcome.evaluated,
            decision = outcome.command.as_ref().map(Command::describe),
            "disruption pass"
        );
        if outcome.trials > 0 {
            self.metrics
                .trials
                .with_label_values(&["all"])
                .inc_by(outcome.trials as f64);
        }
        let next_threshold = facts.next_threshold;
        let wanted = std::mem::take(&mut facts.conditions);
        self.keep_input(input_key, trials);
        // Before the decision is carried out, as Karpenter's drift
        // controller marks a NodeClaim Drifted before its disruption
        // controller acts on it; the command reads the claims again.
        self.write_claim_conditions(wanted, now).await;
        match outcome.command {
            None => {
                // The fingerprint after this pass's own writes (pod event
                // times, stamps): the next pass skips unless something else
                // changes or a threshold passes.
                let mut horizon = now
                    .checked_add(self.settings.disruption_resync)
                    .unwrap_or(now);
                if let Some(t) = next_threshold {
                    horizon = horizon.min(t);
                }
                self.disruption.quiet = Some((self.fingerprint(), horizon));
                next.min(until(horizon, now).max(DISRUPTION_POLL))
            }
            Some(cmd) if cmd.method.is_consolidation() => {
                let at = now
                    .checked_add(self.settings.consolidation_validation)
                    .unwrap_or(now);
                self.disruption.pending = Some((cmd, at));
                next.min(self.settings.consolidation_validation)
            }
            Some(cmd) => {
                // As the reference's disruption controller requeues at once
                // after it started a command: the budgets, not the poll,
                // pace a rollout. A command that could not be recorded
                // waits for the poll, so a failing API is not retried in a
                // loop.
                if self.execute(cmd).await {
                    self.disruption.last_pass = None;
                }
                Duration::ZERO
            }
        }
    }

    /// An `Unconsolidatable` Event on the Node and the NodeClaim that
    /// single-node consolidation could not take, saying why, as the
    /// reference's: again only when the reason changes or after 15 minutes
    /// (its dedupe timeout).
    fn report_unconsolidatable(&mut self, found: Vec<(String, String, String)>, now: Timestamp) {
        const AGAIN: i64 = 15 * 60;
        let seen = &mut self.disruption.unconsolidatable;
        seen.retain(|_, (_, at)| now.duration_since(*at).as_secs() < AGAIN);
        let mut due = Vec::new();
        for (claim, node, why) in found {
            if seen.get(&claim).is_some_and(|(w, _)| *w == why) {
                continue;
            }
            seen.insert(claim.clone(), (why.clone(), now));
            due.push((claim, node, why));
        }
        for (claim, node, why) in due {
            if !node.is_empty() {
                self.event(format!("Node/{node}"), "Unconsolidatable", why.clone());
            }
            self.event(format!("NodeClaim/{claim}"), "Unconsolidatable", why);
        }
    }

    /// A `DisruptionBlocked` Event for each node a method wants but may not
    /// take, when what blocks it changed since the last one.
    fn report_blocked(&mut self, blocked: Vec<disruption::Blocked>) {
        let mut now_blocked = BTreeMap::new();
        for b in blocked {
            let key = (b.nodeclaim.clone(), b.reason);
            if self.disruption.blocked.get(&key).map(|p| &p.blocker) != Some(&b.blocker) {
                self.event(
                    format!("NodeClaim/{}", b.nodeclaim),
                    "DisruptionBlocked",
                    format!(
                        "{}: node {} of NodePool {} cannot be disrupted: {}",
                        b.reason, b.node, b.nodepool, b.blocker
                    ),
                );
            }
            now_blocked.insert(key, b);
        }
        self.disruption.blocked = now_blocked;
    }

    /// The nodes the last disruption pass found wanted but blocked, by
    /// NodeClaim and reason.
    pub fn blocked(&self) -> impl Iterator<Item = &disruption::Blocked> {
        self.disruption.blocked.values()
    }

    /// Keeps a pass's scheduling input for the next pass.
    fn keep_input(&mut self, key: Option<InputKey>, trials: Trials) {
        if let Some(key) = key {
            self.disruption.input = Some(KeptInput { key, trials });
        }
    }

    /// What a pass's scheduling input is built from: every kind it converts
    /// (pods, nodes, in-flight NodeClaims, DaemonSets, volumes), the
    /// candidates whose pods may move, and the capacity not yet
    /// initialized.
    fn input_key(&self, candidates: &[&Candidate], uninitialized: &BTreeSet<String>) -> InputKey {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.cluster.revision::<SlimPod>().hash(&mut h);
        self.cluster.revision::<Node>().hash(&mut h);
        self.cluster.revision::<DaemonSet>().hash(&mut h);
        self.cluster.revision::<PersistentVolume>().hash(&mut h);
        self.cluster
            .revision::<PersistentVolumeClaim>()
            .hash(&mut h);
        self.cluster.revision::<StorageClass>().hash(&mut h);
        for c in candidates {
            c.node.hash(&mut h);
        }
        uninitialized.hash(&mut h);
        self.buffers.on_nodes.hash(&mut h);
        InputKey {
            hash: h.finish(),
            // Of the NodeClaims, only those the input converts: a pass's
            // own writes to its candidates (conditions, pod event times,
            // stamps) leave the next pass's input as it was.
            claims: self.converted_claims().converted,
        }
    }

    fn disruption_options(&self) -> Options {
        Options {
            spot_to_spot: self.settings.spot_to_spot_consolidation,
        }
    }

    /// A hash of what a pass depends on in the cluster: every kind it reads,
    /// and the offerings known to be out of capacity.
    fn fingerprint(&self) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.cluster.revision::<SlimPod>().hash(&mut h);
        self.cluster.revision::<Node>().hash(&mut h);
        self.cluster.revision::<NodeClaim>().hash(&mut h);
        self.cluster.revision::<NodePool>().hash(&mut h);
        self.cluster.revision::<EC2NodeClass>().hash(&mut h);
        self.cluster.revision::<PodDisruptionBudget>().hash(&mut h);
        self.cluster
            .revision::<crate::api::NodeOverlay>()
            .hash(&mut h);
        self.buffers.on_nodes.hash(&mut h);
        // Consolidation waits for pending pods the provisioner has not yet
        // found unschedulable: once it has, the next pass may consolidate
        // though nothing in the cluster changed (a new leader's first
        // disruption pass can come before its first solve).
        for k in self.unschedulable.keys() {
            k.hash(&mut h);
        }
        for (k, _) in self.unavailable.iter() {
            k.hash(&mut h);
        }
        h.finish()
    }

    /// Expiration, as the reference's v1 has it: a NodeClaim older than its
    /// `expireAfter` is deleted at once, outside budgets and whatever its
    /// pods ask. Termination drains it, bounded by its
    /// `terminationGracePeriod`, and its pods count as pending from that
    /// moment, so their new capacity launches while they drain. Returns
    /// when the next NodeClaim expires.
    async fn expire_claims(&mut self) -> Duration {
        let now = self.clock.now();
        let mut next = self.settings.resync;
        let expiring = expiring_reservations(&self.cluster.list::<EC2NodeClass>());
        for claim in self.cluster.list::<NodeClaim>() {
            if claim.metadata.deletion_timestamp.is_some() {
                continue;
            }
            // A node in a capacity block that is about to end goes now, as
            // Karpenter's capacityreservation.expiration deletes it: 40
            // minutes before the end, ahead of EC2's reclaim. (Most
            // passes have no such block, and skip reading every claim's
            // labels.)
            if !expiring.is_empty()
                && let Some(id) = claim
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(crate::api::LABEL_CAPACITY_RESERVATION_ID))
                    .filter(|id| expiring.contains(*id))
            {
                let message = format!(
                    "capacity block {id} ends within 40 minutes; deleting its node before EC2 reclaims it"
                );
                self.delete_claim(&claim, "CapacityReservationExpiring", message)
                    .await;
                continue;
            }
            let Some(at) =
                disruption::expires_at(claim_expire_after(&claim), claim_created(&claim, now))
            else {
                continue;
            };
            if at > now {
                next = next.min(until(at, now));
                continue;
            }
            let name = claim_name(&claim);
            let Some(marked) = self.mark(&claim, Reason::Expired, &[], now).await else {
                continue;
            };
            let node_name = claim.status.as_ref().and_then(|s| s.node_name.clone());
            if let Some(node) = node_name
                .as_deref()
                .and_then(|n| self.cluster.get::<Node>(&ObjectKey::cluster(n)))
            {
                taint_disrupted(&*self.cluster, &node).await;
            }
            let shown = node_name.unwrap_or_else(|| name.clone());
            self.disruption_event(
                &name,
                Reason::Expired,
                format!(
                    "delete 1 node(s) ({shown}): Expired, {} after its creation; its pods get new capacity as they drain",
                    claim.spec.expire_after.as_deref().unwrap_or("720h")
                ),
                Vec::new(),
            );
            self.decisions.push(super::Decision {
                t: now,
                reason: Reason::Expired.as_str().into(),
                decision: "delete".into(),
                consolidation_type: String::new(),
                nodeclaims: vec![name],
                replacements: Vec::new(),
                replacement_types: Vec::new(),
                savings_per_hour: 0.0,
            });
            self.disruption.quiet = None;
            self.finish(&marked).await;
        }
        next
    }

    /// The scheduling options and the decision input of a pass over `facts`.
    /// The removal trials over `input`; `None` when the solver cannot be
    /// prepared over it, with a `DisruptionFailed` Event.
    fn trials_or_event(&mut self, input: PassInput, opts: &SolveOptions) -> Option<Trials> {
        match input.trials(opts) {
            Ok(t) => Some(t),
            Err(e) => {
                self.event("Disruption".into(), "DisruptionFailed", e.to_string());
                None
            }
        }
    }

    fn pass_of<'f>(&self, facts: &'f Facts, now: Timestamp) -> (SolveOptions, Pass<'f>) {
        let opts = SolveOptions {
            preferences: self.settings.preferences,
            now_ms: now.as_millisecond(),
        };
        let pass = Pass {
            candidates: &facts.candidates,
            budgets: facts.budgets.clone(),
            consolidation: facts.consolidation,
            pools: &facts.specs,
            options: self.disruption_options(),
            uninitialized: facts.uninitialized.clone(),
            statics: facts.statics.clone(),
            prepared: facts.prepared.clone(),
        };
        (opts, pass)
    }

    /// Validates the consolidation decided a delay ago on the cluster as it
    /// is now, and carries it out if it still holds.
    async fn validate_pending(&mut self) {
        let Some((cmd, _)) = self.disruption.pending.take() else {
            return;
        };
        let now = self.clock.now();
        let pending: BTreeSet<&str> = cmd.candidates.iter().map(|c| &*c.node).collect();
        let Some((mut facts, input)) = self.disruption_facts(now, &pending).await else {
            return;
        };
        let input_key = facts.input_key.take();
        let (opts, pass) = self.pass_of(&facts, now);
        let mut revalidated = None;
        if let Ok(mut trials) = input.trials(&opts) {
            revalidated = trials
                .with_dependent_mut(|_, removals| disruption::revalidate(&pass, &cmd, removals));
            self.keep_input(input_key, trials);
        }
        drop(pass);
        match revalidated {
            Some(fresh) => {
                self.execute(fresh).await;
            }
            None => {
                let names: Vec<&str> = cmd.candidates.iter().map(|c| &*c.node).collect();
                self.event(
                    "Disruption".into(),
                    "DisruptionCancelled",
                    format!(
                        "{} of {} no longer holds after the validation delay",
                        cmd.reason,
                        names.join(", ")
                    ),
                );
            }
        }
    }

    /// Why a node drifted: its NodePool's and EC2NodeClass's hashes and
    /// requirements (the verdict kept in `pass.kept` while nothing it read
    /// changed; `pass.targets` holds each pair's hashes), then the
    /// cloud's view (image, subnet, security groups; kept with the verdict
    /// for [`CLOUD_DRIFT_RECHECK`]). Stamps a NodeClaim whose verdict asks
    /// for it; an error gets an Event.
    async fn drift_reasons<'p>(
        &mut self,
        claim: &NodeClaim,
        node: &Node,
        pool: &'p NodePool,
        class: &'p EC2NodeClass,
        pass: &mut DriftPass<'p>,
        now: Timestamp,
    ) -> Vec<DriftReason> {
        let kept = self
            .disruption
            .drift
            .remove_entry(claim.metadata.name.as_deref().unwrap_or_default());
        let (claim_key, inputs, verdict, cloud) = match kept {
            Some((claim_key, kept))
                if drift_inputs_hold(&kept.inputs, claim, node, pool, class) =>
            {
                let cloud = kept
                    .cloud
                    .filter(|(_, at)| since(*at, now) < CLOUD_DRIFT_RECHECK);
                (claim_key, Some(kept.inputs), Ok(kept.verdict), cloud)
            }
            _ => {
                let inputs = drift_inputs(claim, node, pool, class);
                let mut view = NodeView::from_nodeclaim(claim);
                if let Some(labels) = &node.metadata.labels {
                    view.labels
                        .extend(crate::model::labels::normalize_labels(labels));
                }
                let verdict = pass
                    .targets
                    .entry((
                        pool.metadata.name.as_deref().unwrap_or_default(),
                        class.metadata.name.as_deref().unwrap_or_default(),
                    ))
                    .or_insert_with(|| drift::Target::new(pool, class))
                    .check(&view);
                (claim_name(claim), inputs, verdict, None)
            }
        };
        let cloud = match cloud {
            Some(kept) => Some(kept),
            None => match self.cloud.is_drifted(claim, class).await {
                Ok(reasons) => Some((reasons, now)),
                Err(crate::cloud::CloudError::NotFound(_)) => None,
                Err(e) => {
                    self.event(
                        format!("NodeClaim/{}", claim_name(claim)),
                        "DriftCheckFailed",
                        e.to_string(),
                    );
                    None
                }
            },
        };
        let mut drift_reasons: Vec<DriftReason> = Vec::new();
        match &verdict {
            Ok(verdict) => {
                if verdict.needs_stamping() {
                    self.stamp(claim, verdict.stamp.clone()).await;
                }
                drift_reasons.extend(verdict.reasons.iter().cloned());
            }
            Err(e) => self.event(
                format!(
                    "NodePool/{}",
                    pool.metadata.name.as_deref().unwrap_or_default()
                ),
                "InvalidNodePool",
                e.to_string(),
            ),
        }
        for r in cloud.iter().flat_map(|(reasons, _)| reasons) {
            if !drift_reasons.iter().any(|d| d.code() == r.code()) {
                drift_reasons.push(r.clone());
            }
        }
        // A verdict that asks for a stamp is not kept: the stamp changes
        // the NodeClaim. Errors are checked again (and reported) at every
        // pass.
        if let (Some(inputs), Ok(verdict)) = (inputs, verdict)
            && !verdict.needs_stamping()
        {
            let kept = KeptDrift {
                inputs,
                verdict,
                cloud,
            };
            pass.kept.insert(claim_key, kept);
        }
        drift_reasons
    }

    /// What keeps a node's pods from being disrupted (for consolidation
    /// always, for drift without a grace period): a pod's do-not-disrupt
    /// (every running pod counts, DaemonSet and mirror pods too, as in the
    /// reference), else a PodDisruptionBudget over its running pods but
    /// mirror pods (the reference's `CanEvictPods`). `threshold` learns when
    /// a pod's protection ends; an invalid one gets an Event.
    fn pods_blocking(
        &mut self,
        pods: &[Arc<SlimPod>],
        pdbs: &Budgets,
        now: Timestamp,
        threshold: &mut impl FnMut(Timestamp),
    ) -> Option<String> {
        let running = || {
            pods.iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
        };
        let mut protected: Option<String> = None;
        for p in running() {
            let protection = disruption::pods::do_not_disrupt(p);
            if let disruption::pods::Protection::Invalid(why) = &protection {
                self.event(
                    format!("Pod/{}", p.key()),
                    "InvalidDoNotDisrupt",
                    why.clone(),
                );
            }
            if protection.active(now) {
                if let Some(t) = protection.ends() {
                    threshold(t);
                }
                if protected.is_none() {
                    protected = Some(match protection.ends() {
                        Some(t) => format!(
                            "pod {} has {DO_NOT_DISRUPT} until {}",
                            p.key(),
                            format_rfc3339(t)
                        ),
                        None => format!("pod {} has {DO_NOT_DISRUPT}", p.key()),
                    });
                }
            }
        }
        protected.or_else(|| {
            let counted: Vec<&Arc<SlimPod>> = running().filter(|p| !is_mirror(p)).collect();
            pdbs.blocks(&counted)
        })
    }

    /// Each NodePool's disruption budgets now, from its initialized nodes
    /// and those of them being disrupted (`per_pool`), and the gauge of
    /// what they allow; `threshold` learns when a budget's schedule next
    /// changes.
    fn pool_budgets(
        &self,
        per_pool: &BTreeMap<String, (usize, usize)>,
        pools_by_name: &BTreeMap<String, Arc<NodePool>>,
        now: Timestamp,
        threshold: &mut impl FnMut(Timestamp),
    ) -> BTreeMap<String, disruption::budgets::Allowed> {
        let mut budgets = BTreeMap::new();
        for (name, (total, disrupting)) in per_pool {
            let Some(pool) = pools_by_name.get(name) else {
                continue;
            };
            let allowed = disruption::budgets::allowed_now(pool, *total, *disrupting, now);
            for reason in Reason::VOLUNTARY {
                let n = allowed.remaining(reason).min(*total);
                self.metrics
                    .allowed_disruptions
                    .with_label_values(&[name.as_str(), reason.as_str()])
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
            }
            if let Some(t) = disruption::budgets::next_change(pool, now) {
                threshold(t);
            }
            budgets.insert(name.clone(), allowed);
        }
        budgets
    }

    /// The candidates and budgets of a pass, and its scheduling input;
    /// writes drift stamps as it goes, and the pod event times it found
    /// (together) once it has been through the claims. The nodes of a
    /// consolidation being revalidated (`revalidating`) have their pods in
    /// the input. `None` when the NodePools' instance types cannot be read.
    async fn disruption_facts(
        &mut self,
        now: Timestamp,
        revalidating: &BTreeSet<&str>,
    ) -> Option<(Facts, PassInput)> {
        let (pools, specs, catalog) = self.nodepool_specs().await;
        let pools_by_name: BTreeMap<String, Arc<NodePool>> = pools
            .iter()
            .filter_map(|p| {
                let mut p = (**p).clone();
                p.apply_defaults();
                Some((p.metadata.name.clone()?, Arc::new(p)))
            })
            .collect();
        let classes: BTreeMap<String, Arc<EC2NodeClass>> = self
            .cluster
            .list::<EC2NodeClass>()
            .into_iter()
            .filter_map(|c| Some((c.metadata.name.clone()?, c)))
            .collect();
        let pods_by_node = self.pods_by_node();
        let deleting = self.deleting_nodes();
        let mut pending: BTreeSet<String> = pods_by_node
            .unbound()
            .filter(|p| crate::scheduling::pod::is_provisionable(p))
            .map(|p| p.key())
            .collect();
        // The pods leaving with their node ([`is_leaving`]), found node by
        // node.
        let mut leaving: BTreeSet<String> = BTreeSet::new();
        for node in &deleting {
            for p in pods_by_node.on(node) {
                if !p.is_finished() && is_leaving(p, &deleting) {
                    leaving.insert(p.key());
                }
            }
        }
        // Consolidation waits while pods wait for capacity (those the last
        // solve found no place for excepted).
        let consolidation = pending.iter().all(|p| self.unschedulable.contains_key(p));
        // Nodes the provisioner planned pending pods on, and the pods of
        // deleting nodes on their way there: not Empty, not candidates.
        pending.extend(leaving);
        let nominated = self.nominated_nodes(&pending);
        let pdbs = Budgets::new(&self.cluster.list::<PodDisruptionBudget>());
        let claims = self.cluster.list::<NodeClaim>();
        let types = TypesByName::new(&specs, &catalog);

        let mut candidates = Vec::new();
        let mut conditions = Vec::new();
        let mut per_pool: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        let mut next_threshold: Option<Timestamp> = None;
        let mut threshold = |t: Timestamp| {
            if t > now && next_threshold.is_none_or(|n| t < n) {
                next_threshold = Some(t);
            }
        };
        let mut kept_pods = std::mem::take(&mut self.disruption.node_pods);
        let mut node_pods: HashMap<Arc<str>, NodePods, foldhash::fast::RandomState> =
            HashMap::default();
        let mut drift_pass = DriftPass::default();
        let mut pod_events = Vec::new();
        let mut uninitialized: BTreeSet<String> = BTreeSet::new();
        // The views of the last pass that still hold: the same NodeClaim
        // object, its Node the same object in this list.
        let node_index = self.node_index();
        let node_named = |name: &str| node_index.named(name);
        let mut kept_views = std::mem::take(&mut self.disruption.claims);
        let mut views: HashMap<usize, ClaimView, foldhash::fast::RandomState> =
            HashMap::with_capacity_and_hasher(claims.len(), Default::default());
        for claim in &claims {
            let at = Arc::as_ptr(claim) as usize;
            let view = match kept_views.remove(&at) {
                Some(v)
                    if v.holds(
                        claim,
                        |n| node_index.holds(n),
                        |name| node_named(name).is_some(),
                    ) =>
                {
                    v
                }
                _ => ClaimView::read(claim, node_named),
            };
            let view = views.entry(at).or_insert(view);
            if !view.claim_deleting && (!view.initialized || !view.node_ready) {
                uninitialized.insert(view.name.to_string());
                if let Some(n) = &view.node_name {
                    uninitialized.insert(n.to_string());
                }
            }
            let Some(pool_name) = view.nodepool.clone() else {
                continue;
            };
            let not_ready = view.node.is_some() && !view.node_ready;
            // Budgets count the pool's initialized nodes, and among them
            // those not Ready or being disrupted, as the reference does: a
            // replacement still launching neither raises a percentage
            // budget nor uses it up.
            let entry = match per_pool.get_mut(&*pool_name) {
                Some(e) => e,
                None => per_pool.entry(pool_name.to_string()).or_default(),
            };
            if view.node.is_some() && view.initialized {
                entry.0 += 1;
                if view.deleting || view.marked || not_ready {
                    entry.1 += 1;
                }
            }
            if view.deleting || view.marked || !view.initialized {
                continue;
            }
            let (Some(node), Some(pool)) = (view.node.clone(), pools_by_name.get(&*pool_name))
            else {
                continue;
            };
            if view.tainted {
                continue;
            }
            // The view found its Node by this name.
            let node_name = view.node_name.clone().unwrap_or_else(|| Arc::from(""));
            let all_pods = pods_by_node.running(&node_name);
            let last = kept_pods.remove(&*node_name);
            let last_mark = last.as_ref().map(|k| k.mark);
            let on_node = match last {
                Some(k) if k.holds(all_pods) => k,
                _ => NodePods::of(all_pods),
            };
            let mark = on_node.mark;
            let mut last_event = view.pod_event.or(view.initialized_at).unwrap_or(now);
            // Karpenter's podevents controller writes at most every
            // 10 s; a change within that is not recorded.
            // A node first seen with pods and no event recorded: their
            // binding was one (Karpenter records it as it happens).
            let stored = view.pod_event;
            let recent = stored.is_some_and(|t| now.duration_since(t) < POD_EVENT_DEDUPE);
            let changed = match last_mark {
                Some(m) => m != mark,
                None => stored.is_none() && on_node.movable > 0,
            };
            if !recent && changed {
                last_event = now;
                pod_events.push(with_pod_event_time(claim, now));
            }

            // Drift: the hashes and requirements, the cloud's view (image,
            // subnet, security groups), and the instance type.
            let mut drift_reasons = match classes.get(&claim.spec.node_class_ref.name) {
                Some(class) => {
                    self.drift_reasons(claim, &node, pool, class, &mut drift_pass, now)
                        .await
                }
                None => Vec::new(),
            };
            let offering = Offering {
                instance_type: &view.instance_type,
                zone: &view.zone,
                capacity_type: &view.capacity_type,
            };
            drift_reasons.extend(offering.drift(&pool_name, &types));
            let price = offering.price(&pool_name, &types);

            // consolidateAfter.
            let disruption = pool.spec.disruption.as_ref();
            let consolidate_after = duration_or_never(
                disruption.map(|d| d.consolidate_after.as_str()),
                Some(Duration::ZERO),
            );
            let consolidatable_at = consolidate_after.and_then(|d| last_event.checked_add(d).ok());
            let consolidatable = consolidatable_at.is_some_and(|t| t <= now);
            if let Some(t) = consolidatable_at {
                threshold(t);
            }
            let underutilized = disruption.and_then(|d| d.consolidation_policy)
                != Some(ConsolidationPolicy::WhenEmpty);

            // What blocks voluntary disruption: the node itself, or its
            // pods.
            let blocked = if view.do_not_disrupt {
                Some(format!("node {node_name} has {DO_NOT_DISRUPT}: \"true\""))
            } else if nominated.contains(&*node_name) {
                Some("pending pods are planned on it".into())
            } else {
                None
            };
            // Only a pod with the annotation, or under a budget, can block.
            let pods_blocked = if on_node.protected || !pdbs.is_empty() {
                self.pods_blocking(all_pods, &pdbs, now, &mut threshold)
            } else {
                None
            };

            let lifetime = view.lifetime_remaining(now);
            let cost: f64 = on_node.cost * lifetime;
            let buffer_pods = self.buffers.on_nodes.get(&*node_name).map_or(0, Vec::len);
            let drift_reason = drift_reasons
                .iter()
                .filter(|r| r.is_certain())
                .map(DriftReason::condition_reason)
                .min()
                .map(|(_, reason)| reason);
            let movable = on_node.movable;
            node_pods.insert(node_name.clone(), on_node);
            if !view.conditions_hold(drift_reason, consolidatable) {
                conditions.push((claim.clone(), drift_reason, consolidatable));
            }
            candidates.push(Candidate {
                node: node_name,
                nodeclaim: view.name.clone(),
                nodepool: pool_name,
                instance_type: view.instance_type.clone(),
                zone: view.zone.clone(),
                capacity_type: view.capacity_type.clone(),
                price,
                pods: movable,
                buffer_pods,
                disruption_cost: cost,
                drift: drift_reasons,
                consolidatable,
                underutilized,
                blocked,
                pods_blocked,
                termination_grace_period: claim.spec.termination_grace_period.is_some(),
                static_pool: pool.spec.replicas.is_some(),
            });
        }
        self.disruption.claims = views;
        self.disruption.node_pods = node_pods;
        self.disruption.drift = drift_pass.kept;
        self.record_statuses(pod_events).await;

        let budgets = self.pool_budgets(&per_pool, &pools_by_name, now, &mut threshold);

        // The scheduling input's NodePools: replacements never come from a
        // static pool (static drift builds its own from the template).
        let dynamic = super::dynamic_only(&specs, &pools);
        let statics = self.static_pools();
        // The candidates a trial may take, and those whose pods the input
        // holds first.
        let all = disruption::movers(&candidates, &budgets, consolidation, revalidating);
        let first = disruption::first_movers(&all, consolidation, revalidating);
        let prepared: Option<BTreeSet<String>> =
            (first.len() < all.len()).then(|| first.iter().map(|c| c.node.to_string()).collect());
        let rest = prepared
            .is_some()
            .then(|| all.iter().map(|c| c.node.to_string()).collect());
        let movers = in_order(&candidates, first);
        let input_key = (!movers.is_empty()).then(|| self.input_key(&movers, &uninitialized));
        let read = Read {
            catalog: &catalog,
            pods_by_node: &pods_by_node,
            uninitialized: &uninitialized,
            now,
        };
        let (input, input_kept) = self.pass_input(input_key.as_ref(), dynamic, &movers, &read)?;
        drop(types);
        let deferred = rest.map(|movers| Deferred {
            movers,
            pools,
            catalog,
            pods_by_node,
        });
        let facts = Facts {
            prepared,
            deferred,
            candidates,
            budgets,
            consolidation,
            specs,
            input_key,
            input_kept,
            uninitialized,
            next_threshold,
            statics,
            conditions,
        };
        Some((facts, input))
    }

    /// The scheduling input of a pass: the last pass's, kept while its key
    /// (`input_key`, `None` when no removal needs simulating) and its
    /// NodePools are the same; else the cluster, and the pods of the
    /// `candidates` a trial may take as the pods that may move. Whether it
    /// was kept; `None` (with an Event) when it cannot be built.
    fn pass_input(
        &mut self,
        input_key: Option<&InputKey>,
        dynamic: Vec<NodePoolSpec>,
        candidates: &[&Candidate],
        read: &Read,
    ) -> Option<(PassInput, bool)> {
        let Read {
            catalog,
            pods_by_node,
            uninitialized,
            now,
        } = *read;
        if let Some(kept) = self.disruption.input.take()
            && input_key == Some(&kept.key)
        {
            // The trials price replacements from the input's NodePools:
            // kept only while those are the same too.
            let input = if kept.trials.borrow_owner().input.nodepools == dynamic {
                PassInput::Kept(kept.trials)
            } else {
                let mut prepared = kept.trials.into_owner();
                prepared.input.nodepools = dynamic;
                PassInput::Built(prepared)
            };
            return Some((input, true));
        }
        // A pass that cannot simulate a removal does without the cluster:
        // converting every pod of a large cluster is most of a pass's cost.
        let needs_removals = input_key.is_some();
        let now_ms = now.as_millisecond();
        // CapacityBuffers' virtual pods on the nodes the last solve put
        // them: their room is taken, as the pending pods' room is in the
        // reference's simulation.
        let virtual_on: Vec<Arc<SlimPod>> = match needs_removals {
            true => self.virtual_pods_bound(),
            false => Vec::new(),
        };
        let snapshot = needs_removals.then(|| self.snapshot(Vec::new()));
        let built = match &snapshot {
            Some(s) => {
                let bound = BoundPods::new(pods_by_node, &virtual_on);
                build_input_bound(dynamic, catalog, s, &bound, now_ms, &mut self.kept_existing)
            }
            None => build_input_with_pools(dynamic, catalog, &[], "", None, now_ms),
        };
        let mut input = match built {
            Ok(i) => i,
            Err(e) => {
                self.event("Disruption".into(), "InputInvalid", e.to_string());
                return None;
            }
        };
        // Capacity not yet initialized is no place for a plan's pods (they
        // would wait for it): the trials see it tainted, so pods go to
        // initialized nodes or the plan's own replacement, and a plan that
        // still lands on it is rejected by the decision. It stays in the
        // input, so NodePool limits still count it. The replacements of
        // disruptions in flight are among it: their capacity is taken by
        // the pods they were launched for, which the trials do not place.
        let uninitialized: HashSet<&str, foldhash::fast::RandomState> =
            uninitialized.iter().map(String::as_str).collect();
        for n in input
            .nodes
            .iter_mut()
            .filter(|n| uninitialized.contains(n.name.as_str()))
        {
            Arc::make_mut(n).taints.push(crate::model::Taint {
                key: NOT_INITIALIZED_TAINT.into(),
                value: String::new(),
                effect: crate::model::Effect::NoSchedule,
            });
        }
        let mut homes = Vec::new();
        if let Some(snapshot) = &snapshot {
            let volumes = VolumeIndex::new(
                &snapshot.persistent_volume_claims,
                &snapshot.persistent_volumes,
                &snapshot.storage_classes,
            );
            let moving: usize = candidates.iter().map(|c| c.pods + c.buffer_pods).sum();
            input.pods.reserve(moving);
            homes.reserve(moving);
            for c in candidates {
                let own_virtual = virtual_on.iter().filter(|p| {
                    p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&*c.node)
                });
                for p in pods_by_node
                    .on(&c.node)
                    .filter(|p| !p.is_finished() && is_movable(p))
                    .chain(own_virtual)
                {
                    match self.pod_specs.get(p, &volumes, now_ms) {
                        Ok(spec) => {
                            input.pods.push(spec);
                            homes.push(c.node.clone());
                        }
                        Err(e) => {
                            self.event(format!("Pod/{}", p.key()), "InputInvalid", e.to_string())
                        }
                    }
                }
            }
        }
        Some((PassInput::Built(Prepared { input, homes }), false))
    }

    /// Writes the `Drifted` and `Consolidatable` conditions of the pass's
    /// candidates as the reference's NodeClaim disruption controller does:
    /// `Drifted` true with the drift's reason as reason and message, or no
    /// such condition; `Consolidatable` true once `consolidateAfter` has
    /// passed since the last pod event, or no such condition. Only changed
    /// NodeClaims are written, each read again first (this pass may have
    /// written it). A claim the pass read with the conditions wanted is
    /// not read again: the pass's own writes leave the conditions alone.
    async fn write_claim_conditions(
        &mut self,
        wanted: Vec<(Arc<NodeClaim>, Option<&'static str>, bool)>,
        now: Timestamp,
    ) {
        let mut updates = Vec::new();
        for (read, drifted, consolidatable) in wanted {
            if conditions_hold(&read, drifted, consolidatable) {
                continue;
            }
            let key = ObjectKey::cluster(read.metadata.name.as_deref().unwrap_or_default());
            let Some(claim) = self.cluster.get::<NodeClaim>(&key) else {
                continue;
            };
            if claim.metadata.deletion_timestamp.is_some() {
                continue;
            }
            // The conditions alone are changed first: most passes change
            // none of a large fleet's claims.
            let mut conds = claim
                .status
                .as_ref()
                .and_then(|s| s.conditions.clone())
                .unwrap_or_default();
            let mut changed = match drifted {
                Some(reason) => {
                    set_condition(&mut conds, conditions::DRIFTED, true, reason, reason, now)
                }
                None => clear_condition(&mut conds, conditions::DRIFTED),
            };
            changed |= if consolidatable {
                set_condition(
                    &mut conds,
                    conditions::CONSOLIDATABLE,
                    true,
                    conditions::CONSOLIDATABLE,
                    "",
                    now,
                )
            } else {
                clear_condition(&mut conds, conditions::CONSOLIDATABLE)
            };
            if changed {
                let mut updated = (*claim).clone();
                *updated.conditions_mut() = conds;
                updates.push(updated);
            }
        }
        self.record_statuses(updates).await;
    }

    /// Stamps a NodeClaim with the drift hashes it lacks (an adopted one, or
    /// one stamped under another hash version).
    async fn stamp(&mut self, claim: &NodeClaim, stamp: BTreeMap<String, String>) {
        let mut updated = claim.clone();
        updated
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .extend(stamp);
        match self.cluster.replace(updated).await {
            Ok(_) => self.event(
                format!("NodeClaim/{}", claim_name(claim)),
                "Stamped",
                "drift hashes of its NodePool and EC2NodeClass recorded".into(),
            ),
            Err(e) => tracing::debug!(nodeclaim = %claim_name(claim), error = %e, "not stamped"),
        }
    }

    /// Resolves every EC2NodeClass whose spec changed or whose resolution
    /// is older than [`NODECLASS_REFRESH`], and writes its status
    /// (images, subnets, security groups, instance profile, and every
    /// condition: `AMIsReady`, `SubnetsReady`, `SecurityGroupsReady`,
    /// `InstanceProfileReady`, `ValidationSucceeded`,
    /// `PlacementGroupReady` and their root `Ready`).
    pub(super) async fn refresh_nodeclasses(&mut self) -> Duration {
        let now = self.clock.now();
        let mut next = NODECLASS_REFRESH;
        for class in self.cluster.list::<EC2NodeClass>() {
            let name = class.metadata.name.clone().unwrap_or_default();
            let generation = class.metadata.generation;
            if let Some((g, at)) = self.disruption.resolved.get(&name)
                && *g == generation
                && since(*at, now) < NODECLASS_REFRESH
            {
                next = next.min(NODECLASS_REFRESH - since(*at, now));
                continue;
            }
            let resolution = match self.cloud.resolve_node_class(&class).await {
                Ok(r) => r,
                Err(e) => {
                    self.event(
                        format!("EC2NodeClass/{name}"),
                        "ResolutionFailed",
                        e.to_string(),
                    );
                    continue;
                }
            };
            let mut updated = (*class).clone();
            resolution.apply_to(updated.status.get_or_insert_with(Default::default));
            let conds = updated.conditions_mut();
            for c in resolution.conditions() {
                set_condition(conds, c.type_, c.status, &c.reason, &c.message, now);
            }
            if updated.status != class.status {
                if self.record_status(updated).await.is_err() {
                    // Resolved and written again at the next pass.
                    continue;
                }
                if !resolution.is_ready() {
                    let message = resolution.summary();
                    self.event(format!("EC2NodeClass/{name}"), "NotReady", message);
                }
            }
            self.disruption
                .resolved
                .insert(name.clone(), (generation, now));
        }
        next
    }

    /// Carries out a command: marks and taints the candidates, launches the
    /// replacements, and deletes the candidates at once when there are
    /// none. Whether it was started: `false` when no candidate could be
    /// marked (another writer, a failing API, all gone).
    async fn execute(&mut self, cmd: Command) -> bool {
        let now = self.clock.now();
        let names: Vec<String> = cmd
            .replacements
            .iter()
            .map(|r| self.next_claim_name(&r.nodepool))
            .collect();
        let mut marked: Vec<Arc<NodeClaim>> = Vec::new();
        for c in &cmd.candidates {
            let Some(claim) = self
                .cluster
                .get::<NodeClaim>(&ObjectKey::cluster(&*c.nodeclaim))
            else {
                continue;
            };
            match self.mark(&claim, cmd.reason, &names, now).await {
                Some(m) => marked.push(m),
                None => {
                    // Another writer got there first: undo, decide again.
                    for m in &marked {
                        self.rollback(m, "the disruption could not be recorded")
                            .await;
                    }
                    return false;
                }
            }
        }
        for c in &cmd.candidates {
            if let Some(node) = self.cluster.get::<Node>(&ObjectKey::cluster(&*c.node)) {
                taint_disrupted(&*self.cluster, &node).await;
            }
        }
        let message = cmd.describe();
        for c in &cmd.candidates {
            self.disruption_event(&c.nodeclaim, cmd.reason, message.clone(), names.clone());
        }
        self.decisions.push(super::Decision {
            t: now,
            reason: cmd.reason.as_str().into(),
            decision: cmd.decision().into(),
            consolidation_type: cmd.method.consolidation_type().into(),
            nodeclaims: cmd
                .candidates
                .iter()
                .map(|c| c.nodeclaim.to_string())
                .collect(),
            replacements: names.clone(),
            replacement_types: cmd
                .replacements
                .iter()
                .map(|r| r.instance_types.clone())
                .collect(),
            savings_per_hour: cmd.savings,
        });
        let candidate_names: Vec<String> = cmd
            .candidates
            .iter()
            .map(|c| c.nodeclaim.to_string())
            .collect();
        for (replacement, name) in cmd.replacements.iter().zip(&names) {
            let Some(pool) = self
                .cluster
                .get::<NodePool>(&ObjectKey::cluster(replacement.nodepool.as_str()))
            else {
                continue;
            };
            let class = self.cluster.get::<EC2NodeClass>(&ObjectKey::cluster(
                pool.spec.template.spec.node_class_ref.name.clone(),
            ));
            let mut object = self.nodeclaim_for(name.clone(), &pool, class.as_deref(), replacement);
            object
                .metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(ANNOTATION_REPLACES.into(), candidate_names.join(","));
            let created = self.cluster.create(object).await;
            if created.is_ok() {
                self.metrics
                    .nodeclaims_created
                    .with_label_values(&[
                        cmd.reason.as_str().to_lowercase().as_str(),
                        replacement.nodepool.as_str(),
                        "false",
                    ])
                    .inc();
            }
            match created {
                Ok(_) => {
                    self.event(
                        format!("NodeClaim/{name}"),
                        "Provisioned",
                        format!(
                            "to replace {} ({}): {} at ${:.4}/h",
                            candidate_names.join(", "),
                            cmd.reason,
                            match replacement.instance_types.first() {
                                Some(first) => format!(
                                    "{} type(s) from {first}",
                                    replacement.instance_types.len()
                                ),
                                None => format!("NodePool {}'s template", replacement.nodepool),
                            },
                            replacement.price
                        ),
                    )
                }
                Err(e) => self.event(format!("NodeClaim/{name}"), "CreateFailed", e.to_string()),
            }
        }
        self.metrics.decided(
            cmd.decision(),
            cmd.reason.as_str(),
            cmd.method.consolidation_type(),
            cmd.candidates.iter().map(|c| &*c.nodepool),
        );
        if cmd.method.is_consolidation() {
            self.disruption.savings += cmd.savings;
            self.metrics.savings.set(self.disruption.savings);
        }
        self.disruption.quiet = None;
        if cmd.replacements.is_empty() {
            for m in &marked {
                self.finish(m).await;
            }
        }
        !marked.is_empty()
    }

    /// Marks a candidate NodeClaim as being disrupted; the stored claim, or
    /// `None` when it changed or went away meanwhile.
    pub(super) async fn mark(
        &mut self,
        claim: &NodeClaim,
        reason: Reason,
        replacements: &[String],
        now: Timestamp,
    ) -> Option<Arc<NodeClaim>> {
        let mut updated = claim.clone();
        let a = updated
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new);
        a.insert(ANNOTATION_DISRUPTION_REASON.into(), reason.as_str().into());
        a.insert(ANNOTATION_DISRUPTION_DECIDED.into(), format_rfc3339(now));
        a.insert(ANNOTATION_REPLACED_BY.into(), replacements.join(","));
        let stored = self.cluster.replace(updated).await.ok()?;
        let mut with_condition = (*stored).clone();
        let (conds, why) = (with_condition.conditions_mut(), reason.as_str());
        set_condition(conds, CONDITION_DISRUPTION_REASON, true, why, why, now);
        // The annotations mark the disruption; the condition only tells it.
        Some(self.record_status(with_condition).await.unwrap_or(stored))
    }

    /// Disruptions in progress, from the cluster's state: deletes the
    /// candidates whose replacements are all initialized, rolls back those
    /// whose replacements failed or timed out, and untaints nodes tainted
    /// without a disruption behind them.
    pub(super) async fn progress_disruptions(&mut self) -> Duration {
        let now = self.clock.now();
        let mut next = self.settings.resync;
        let claims = self.cluster.list::<NodeClaim>();
        let by_name: HashMap<&str, &Arc<NodeClaim>, foldhash::fast::RandomState> = claims
            .iter()
            .filter_map(|c| Some((c.metadata.name.as_deref()?, c)))
            .collect();
        let mut in_progress: BTreeSet<String> = BTreeSet::new();
        for claim in &claims {
            let Some(reason) = annotation(claim.as_ref(), ANNOTATION_DISRUPTION_REASON) else {
                continue;
            };
            if let Some(n) = claim.status.as_ref().and_then(|s| s.node_name.clone()) {
                in_progress.insert(n);
            }
            if claim.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let reason = Reason::parse(reason).unwrap_or(Reason::Drifted);
            let replacements: Vec<&str> = annotation(claim.as_ref(), ANNOTATION_REPLACED_BY)
                .unwrap_or_default()
                .split(',')
                .filter(|s| !s.is_empty())
                .collect();
            let mut ready = 0;
            let mut failed: Option<String> = None;
            for r in &replacements {
                match by_name.get(r) {
                    None => failed = Some(format!("replacement {r} is gone")),
                    Some(c) if c.metadata.deletion_timestamp.is_some() => {
                        failed = Some(format!("replacement {r} is being deleted"))
                    }
                    Some(c) => {
                        let conds = c.status.as_ref().and_then(|s| s.conditions.as_ref());
                        let initialized = is_true(conds, conditions::INITIALIZED);
                        // As Karpenter's disruption queue says while it
                        // waits (each Event at most every 2 minutes).
                        self.event_deduped(
                            format!("NodeClaim/{r}"),
                            "DisruptionLaunching",
                            format!("Launching NodeClaim: {}", reason.as_str()),
                        );
                        if initialized {
                            ready += 1;
                        } else {
                            self.event_deduped(
                                format!("NodeClaim/{r}"),
                                "DisruptionWaitingReadiness",
                                "Waiting on readiness to continue disruption".into(),
                            );
                        }
                    }
                }
            }
            let decided = annotation(claim.as_ref(), ANNOTATION_DISRUPTION_DECIDED)
                .and_then(|t| parse_rfc3339(t).ok())
                .unwrap_or(now);
            let timed_out = since(decided, now) >= self.settings.replacement_timeout;
            if ready == replacements.len() {
                self.finish(claim).await;
            } else if reason == Reason::Expired && (failed.is_some() || timed_out) {
                // Expiration is a deadline: it goes ahead without them.
                self.finish(claim).await;
            } else if let Some(why) = failed {
                self.rollback(claim, &why).await;
            } else if timed_out {
                self.rollback(claim, "its replacements were not initialized in time")
                    .await;
            } else {
                next = next.min(self.settings.replacement_timeout - since(decided, now));
            }
        }
        // A disrupted taint with no disruption behind it.
        for node in self.cluster.list::<Node>() {
            let name = node.metadata.name.clone().unwrap_or_default();
            if node.metadata.deletion_timestamp.is_none()
                && has_taint(&node, TAINT_DISRUPTED)
                && !in_progress.contains(&name)
                && !claims.iter().any(|c| {
                    c.metadata.deletion_timestamp.is_some()
                        && c.status.as_ref().and_then(|s| s.node_name.as_deref())
                            == Some(name.as_str())
                })
            {
                untaint_disrupted(&*self.cluster, &node).await;
            }
        }
        next
    }

    /// Deletes a disrupted NodeClaim: termination drains its node.
    pub(super) async fn finish(&mut self, claim: &NodeClaim) {
        let reason = annotation(claim, ANNOTATION_DISRUPTION_REASON)
            .unwrap_or("Drifted")
            .to_string();
        self.finish_as(claim, &reason).await;
    }

    /// [`Self::finish`], counted in `karpenter_nodeclaims_disrupted_total`
    /// under `metric_reason` (an interruption's message kind).
    pub(super) async fn finish_as(&mut self, claim: &NodeClaim, metric_reason: &str) {
        let reason = annotation(claim, ANNOTATION_DISRUPTION_REASON)
            .unwrap_or("Drifted")
            .to_string();
        self.metrics.disrupted(claim, metric_reason);
        if self
            .delete_claim(
                claim,
                "DisruptionTerminating",
                format!("Disrupting NodeClaim: {reason}"),
            )
            .await
            && let Some(node) = claim.status.as_ref().and_then(|s| s.node_name.as_deref())
        {
            self.event(
                format!("Node/{node}"),
                "DisruptionTerminating",
                format!("Disrupting Node: {reason}"),
            );
        }
    }

    /// Undoes a disruption that cannot go ahead: the marks, the taint, and
    /// the replacements not yet initialized.
    async fn rollback(&mut self, claim: &NodeClaim, why: &str) {
        let name = claim_name(claim);
        let replacements: Vec<String> = annotation(claim, ANNOTATION_REPLACED_BY)
            .unwrap_or_default()
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        if let Some(current) = self
            .cluster
            .get::<NodeClaim>(&ObjectKey::cluster(name.as_str()))
        {
            let mut updated = (*current).clone();
            if let Some(a) = updated.metadata.annotations.as_mut() {
                a.remove(ANNOTATION_DISRUPTION_REASON);
                a.remove(ANNOTATION_DISRUPTION_DECIDED);
                a.remove(ANNOTATION_REPLACED_BY);
            }
            if let Ok(stored) = self.cluster.replace(updated).await {
                let mut s = (*stored).clone();
                if let Some(conds) = s.status.as_mut().and_then(|s| s.conditions.as_mut()) {
                    conds.retain(|c| c.type_ != CONDITION_DISRUPTION_REASON);
                }
                let _ = self.record_status(s).await;
            }
            if let Some(node) = current
                .status
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .and_then(|n| self.cluster.get::<Node>(&ObjectKey::cluster(n)))
            {
                untaint_disrupted(&*self.cluster, &node).await;
            }
        }
        for r in replacements {
            if let Some(rc) = self
                .cluster
                .get::<NodeClaim>(&ObjectKey::cluster(r.as_str()))
            {
                let conds = rc.status.as_ref().and_then(|s| s.conditions.as_ref());
                if !is_true(conds, conditions::INITIALIZED) {
                    self.delete_claim(
                        &rc,
                        "ReplacementAbandoned",
                        format!("{name} is no longer disrupted"),
                    )
                    .await;
                }
            }
        }
        self.event(
            format!("NodeClaim/{name}"),
            "DisruptionRolledBack",
            why.to_string(),
        );
    }

    /// Records a disruption decision for a NodeClaim: an Event, and the
    /// simulation's `Disruption` timeline entry.
    pub(super) fn disruption_event(
        &mut self,
        nodeclaim: &str,
        reason: Reason,
        message: String,
        related: Vec<String>,
    ) {
        let t = self.clock.now();
        tracing::info!(nodeclaim, reason = reason.as_str(), "{message}");
        self.events.push(super::Event {
            t,
            kind: "Disruption".into(),
            object: format!("NodeClaim/{nodeclaim}"),
            reason: reason.as_str().into(),
            message,
            related,
        });
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use k8s_openapi::api::apps::v1::DaemonSet;
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    use k8s_openapi::api::storage::v1::StorageClass;
    use kube::api::ObjectMeta;

    use super::*;
    use crate::clock::{Clock, ManualClock};
    use crate::controller::Settings;
    use crate::world::MemoryCluster;
    use crate::world::ec2::{SimConfig, SimEc2};

    fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: namespace.map(str::to_string),
            ..ObjectMeta::default()
        }
    }

    /// A claim whose conditions are those a pass wants is left unread:
    /// `conditions_hold` agrees with what setting or clearing them would
    /// change, for every state the conditions can be in.
    #[test]
    fn conditions_hold_exactly_when_writing_them_changes_nothing() {
        let now = Timestamp::from_second(1_000).unwrap();
        let reasons = [None, Some("Drifted"), Some("AMIDrift")];
        let wanted = |conds: &mut Vec<crate::api::common::Condition>,
                      drifted: Option<&str>,
                      consolidatable: bool| {
            let mut changed = match drifted {
                Some(r) => set_condition(conds, conditions::DRIFTED, true, r, r, now),
                None => clear_condition(conds, conditions::DRIFTED),
            };
            changed |= if consolidatable {
                let c = conditions::CONSOLIDATABLE;
                set_condition(conds, c, true, c, "", now)
            } else {
                clear_condition(conds, conditions::CONSOLIDATABLE)
            };
            changed
        };
        // Every start: each condition absent, as wanted, True with another
        // reason or message, or False.
        let mut starts: Vec<Vec<crate::api::common::Condition>> = Vec::new();
        for drift in 0..5 {
            for consolidatable in 0..4 {
                let mut conds = Vec::new();
                match drift {
                    0 => {}
                    1 => {
                        set_condition(
                            &mut conds,
                            conditions::DRIFTED,
                            true,
                            "Drifted",
                            "Drifted",
                            now,
                        );
                    }
                    2 => {
                        set_condition(
                            &mut conds,
                            conditions::DRIFTED,
                            true,
                            "AMIDrift",
                            "AMIDrift",
                            now,
                        );
                    }
                    3 => {
                        set_condition(&mut conds, conditions::DRIFTED, true, "Drifted", "", now);
                    }
                    _ => {
                        set_condition(
                            &mut conds,
                            conditions::DRIFTED,
                            false,
                            "Drifted",
                            "Drifted",
                            now,
                        );
                    }
                }
                let c = conditions::CONSOLIDATABLE;
                match consolidatable {
                    0 => {}
                    1 => drop(set_condition(&mut conds, c, true, c, "", now)),
                    2 => drop(set_condition(&mut conds, c, false, c, "", now)),
                    _ => drop(set_condition(&mut conds, c, true, c, "not yet", now)),
                }
                starts.push(conds);
            }
        }
        for start in &starts {
            let mut claim = NodeClaim::test("c");
            claim.status.get_or_insert_with(Default::default).conditions = Some(start.clone());
            for drifted in reasons {
                for consolidatable in [false, true] {
                    let changes = wanted(&mut start.clone(), drifted, consolidatable);
                    assert_eq!(
                        conditions_hold(&claim, drifted, consolidatable),
                        !changes,
                        "{start:?} wanting {drifted:?}, {consolidatable}"
                    );
                }
            }
        }
        let mut bare = NodeClaim::test("c");
        assert!(conditions_hold(&bare, None, false));
        assert!(!conditions_hold(&bare, None, true));
        bare.status = Some(Default::default());
        assert!(!conditions_hold(&bare, Some("Drifted"), false));
    }

    /// The lookups by name find what a scan of the lists finds: the pool's
    /// own type first, then any pool's, then the catalog's.
    #[test]
    fn offerings_are_looked_up_by_name_as_the_lists_are_scanned() {
        let it = |name: &str, zone: &str, price: f64| InstanceType {
            name: name.into(),
            requirements: Default::default(),
            capacity: Default::default(),
            overhead: Default::default(),
            allocatable: Default::default(),
            offerings: vec![crate::model::Offering {
                zone: zone.into(),
                capacity_type: "on-demand".into(),
                price,
                available: true,
                reservations: Vec::new(),
            }],
        };
        let pool = |name: &str, types: Vec<InstanceType>| NodePoolSpec {
            name: name.into(),
            weight: 0,
            requirements: Default::default(),
            labels: Default::default(),
            taints: Vec::new(),
            startup_taints: Vec::new(),
            limits: Default::default(),
            instance_types: types,
        };
        let specs = vec![
            pool("a", vec![it("m5.large", "z1", 0.5)]),
            pool(
                "b",
                vec![it("m5.large", "z2", 0.7), it("c5.large", "z1", 0.3)],
            ),
        ];
        let catalog = vec![
            it("m5.large", "z3", 0.9),
            it("r5.large", "z1", 0.2),
            it("c5.large", "z1", 0.4),
        ];
        let types = TypesByName::new(&specs, &catalog);
        let offering = |t, z| Offering {
            instance_type: t,
            zone: z,
            capacity_type: "on-demand",
        };
        assert_eq!(offering("m5.large", "z1").price("a", &types), 0.5);
        assert_eq!(
            offering("m5.large", "z2").price("a", &types),
            0.7,
            "pool b's"
        );
        assert_eq!(
            offering("m5.large", "z3").price("a", &types),
            0.9,
            "the catalog's"
        );
        assert_eq!(offering("c5.large", "z1").price("a", &types), 0.3);
        assert_eq!(offering("m5.large", "z4").price("a", &types), 0.0);
        assert_eq!(offering("m5.large", "z1").drift("a", &types), None);
        assert!(matches!(
            offering("m5.large", "z2").drift("a", &types),
            Some(DriftReason::InstanceType { why, .. }) if why == "has no on-demand offering in z2"
        ));
        assert_eq!(
            offering("r5.large", "z1").drift("a", &types),
            None,
            "in the catalog"
        );
        assert!(matches!(
            offering("x9.large", "z1").drift("a", &types),
            Some(DriftReason::InstanceType { why, .. }) if why == "no longer exists"
        ));
        assert_eq!(offering("", "z1").drift("a", &types), None);
    }

    /// What a pass reads of a node's pods: those that may move (not a
    /// DaemonSet's), their mark and eviction cost, whether any is
    /// protected; kept only while the node holds the same objects.
    #[test]
    fn a_nodes_pods_are_read_again_only_when_they_are_other_objects() {
        let pod = |name: &str, extra: &str| -> Arc<SlimPod> {
            Arc::new(crate::testing::from_yaml(&format!(
                "metadata: {{name: {name}, namespace: default{extra}}}\nspec: {{nodeName: n1, containers: [{{name: c}}]}}\n"
            )))
        };
        let web = pod("web", "");
        let agent = pod(
            "agent",
            ", ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: a, uid: u, controller: true}]",
        );
        let pinned = pod(
            "pinned",
            ", annotations: {karpenter.sh/do-not-disrupt: \"true\", controller.kubernetes.io/pod-deletion-cost: \"134217728\"}",
        );
        let read = NodePods::of(&[web.clone(), agent.clone(), pinned.clone()]);
        assert_eq!(read.movable, 2, "the DaemonSet's pod stays");
        assert!(read.protected);
        assert_eq!(read.cost, 1.0 + 2.0, "one, and one plus 2^27/2^27");
        assert_eq!(read.mark, pod_mark(&[&web, &pinned]));
        assert!(!NodePods::of(&[web.clone(), agent.clone()]).protected);

        assert!(read.holds(&[web.clone(), agent.clone(), pinned.clone()]));
        assert!(!read.holds(&[web.clone(), agent.clone()]), "one gone");
        assert!(
            !read.holds(&[agent.clone(), web.clone(), pinned.clone()]),
            "another order"
        );
        let web_again = pod("web", "");
        assert!(
            !read.holds(&[web_again, agent, pinned]),
            "a changed pod is another object, though equal"
        );
    }

    /// The scheduling input a pass keeps is rebuilt when any kind it was
    /// converted from changes, when the candidates change, and when
    /// capacity becomes or stops being uninitialized; nothing else.
    #[test]
    fn the_kept_input_is_rebuilt_when_anything_it_was_built_from_changes() {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(Timestamp::UNIX_EPOCH));
        let cluster = Arc::new(MemoryCluster::new(clock.clone()));
        let catalog = SimEc2::builtin_catalog().expect("built-in catalog");
        let cloud = Arc::new(SimEc2::new(SimConfig::new(catalog), clock.clone()));
        let controller = Controller::new(cluster.clone(), cloud, clock, Settings::default());
        let none = BTreeSet::new();
        let mut keys = vec![controller.input_key(&[], &none)];
        assert_eq!(keys[0], controller.input_key(&[], &none), "stable");
        let mut changed = |what: &str, key: InputKey| {
            assert!(!keys.contains(&key), "{what} did not change the key");
            keys.push(key);
        };
        cluster
            .create(PersistentVolume {
                metadata: meta("pv", None),
                ..Default::default()
            })
            .expect("created");
        changed("a PersistentVolume", controller.input_key(&[], &none));
        cluster
            .create(PersistentVolumeClaim {
                metadata: meta("data", Some("default")),
                ..Default::default()
            })
            .expect("created");
        changed("a PersistentVolumeClaim", controller.input_key(&[], &none));
        cluster
            .create(StorageClass {
                metadata: meta("gp3", None),
                provisioner: "ebs.csi.aws.com".into(),
                ..Default::default()
            })
            .expect("created");
        changed("a StorageClass", controller.input_key(&[], &none));
        cluster
            .create(DaemonSet {
                metadata: meta("agent", Some("kube-system")),
                ..Default::default()
            })
            .expect("created");
        changed("a DaemonSet", controller.input_key(&[], &none));
        let uninitialized = BTreeSet::from(["node-a".to_string()]);
        changed(
            "uninitialized capacity",
            controller.input_key(&[], &uninitialized),
        );
        let candidate = Candidate::test("node-a", "m5.large", 0.096);
        changed("the candidates", controller.input_key(&[&candidate], &none));

        // A NodeClaim in flight is converted: any change to it counts.
        let claim: NodeClaim = crate::testing::from_json(serde_json::json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": "default-a", "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": []
            }
        }));
        let claim = cluster.create(claim).expect("created");
        changed("a NodeClaim in flight", controller.input_key(&[], &none));
        let mut registered = (*claim).clone();
        registered.status.get_or_insert_default().node_name = Some("node-a".into());
        let registered = cluster.update_status(registered).expect("updated");
        changed("its node's name", controller.input_key(&[], &none));
        // Its node, initialized: the claim is its node from now on.
        cluster
            .create(Node {
                metadata: ObjectMeta {
                    name: Some("node-a".into()),
                    labels: Some(
                        [
                            ("karpenter.sh/nodepool".to_string(), "default".to_string()),
                            ("karpenter.sh/initialized".to_string(), "true".to_string()),
                        ]
                        .into(),
                    ),
                    ..Default::default()
                },
                ..Default::default()
            })
            .expect("created");
        changed("its Node", controller.input_key(&[], &none));
        // What a pass writes to its candidates' claims leaves the key.
        let key = controller.input_key(&[], &none);
        let mut written = (*registered).clone();
        let conds = written.conditions_mut();
        set_condition(
            conds,
            "Consolidatable",
            true,
            "Consolidatable",
            "",
            Timestamp::UNIX_EPOCH,
        );
        cluster.update_status(written).expect("updated");
        assert_eq!(
            key,
            controller.input_key(&[], &none),
            "a condition on a registered node's claim"
        );
    }

    /// `meta` at some resource version (none for `None`).
    fn versioned(meta: &mut ObjectMeta, version: Option<u8>) {
        meta.resource_version = version.map(|v| v.to_string());
    }

    proptest::proptest! {
        /// A kept drift verdict's inputs, compared in place, hold exactly
        /// when reading them again would give the same: every version,
        /// the NodePool's uid and generation, none missing.
        #[test]
        fn drift_inputs_hold_exactly_when_read_again_they_are_the_same(
            then in proptest::collection::vec(0u8..3, 6),
            changes in proptest::collection::vec(
                (proptest::bool::weighted(0.2), proptest::option::weighted(0.8, 0u8..3)),
                6,
            ),
        ) {
            // Now: as then, but where a change is drawn (often none): to
            // another value, the same, or none.
            let then: Vec<Option<u8>> = then.into_iter().map(Some).collect();
            let now: Vec<Option<u8>> = then
                .iter()
                .zip(&changes)
                .map(|(&was, &(change, to))| if change { to } else { was })
                .collect();
            let objects = |v: &[Option<u8>]| {
                let mut claim = NodeClaim::test("x");
                versioned(&mut claim.metadata, v[0]);
                let mut node = Node::default();
                versioned(&mut node.metadata, v[1]);
                let mut class = EC2NodeClass::test("x");
                versioned(&mut class.metadata, v[2]);
                let mut pool = NodePool::test("x");
                versioned(&mut pool.metadata, v[3]);
                pool.metadata.uid = v[4].map(|u| ["9f0c-a1", "9f0c-a", "b/1"][usize::from(u)].into());
                pool.metadata.generation = v[5].map(|g| [1, 10, -1][usize::from(g)]);
                (claim, node, pool, class)
            };
            let (c, n, p, k) = objects(&then);
            let kept = drift_inputs(&c, &n, &p, &k).expect("every version read");
            let (c, n, p, k) = objects(&now);
            proptest::prop_assert_eq!(
                drift_inputs_hold(&kept, &c, &n, &p, &k),
                drift_inputs(&c, &n, &p, &k).as_ref() == Some(&kept)
            );
        }
    }
}
