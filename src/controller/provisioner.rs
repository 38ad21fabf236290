//! Provisioning: pending pods are batched (a batch closes after a quiet
//! second or at most ten seconds, as in the reference), then one solve of
//! the scheduling core decides which pods fit on existing and in-flight
//! capacity and which NodeClaims to create.
//!
//! The solve's input is built by the same functions `dovetail plan` uses;
//! only the instance types differ: they come from the cloud provider, per
//! NodePool and its EC2NodeClass, with offerings that recently failed with
//! insufficient capacity marked unavailable.
//!
//! A batch opens only for a pod whose last decision no longer holds: a pending
//! pod the last solve has not seen; a pod planned on a NodeClaim that is now
//! initialized or gone while the pod is still pending; a pod planned on a
//! ready node that kube-scheduler has not bound within a grace (10 s, doubling
//! each time a solve places it on a ready node again); a lost NodeClaim the
//! solve counted on; a changed NodePool or EC2NodeClass; or the resync. The
//! NodeClaims a solve creates are stamped with the `drift` hashes of their
//! NodePool and EC2NodeClass.
//!
//! The pods on every deleting node (interrupted, expired, disrupted, repaired
//! or deleted by hand) count as pending, so their capacity launches at once,
//! while they drain; the nodes they are planned on are nominated, and are no
//! disruption candidates while those pods wait for them. Each provisioning
//! reconcile first keeps static NodePools at their replica count
//! (`static_capacity`), and CapacityBuffers' virtual pods join every solve
//! (`buffers`).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Resource;

use super::{Controller, dynamic_only};
use crate::api::{EC2NodeClass, NodeClaim, NodePool, SlimPod};
use crate::clock::Timestamp;
use crate::cloud::{CloudProvider, OfferingKey};
use crate::cluster::{Cluster, ListChange, Listed, ObjectKey};
use crate::convert::{build_input_kept, build_input_with_pools, nodepool_spec_with_types};
use crate::disruption::pods::{NodeNames, is_leaving};
use crate::model::InstanceType;
use crate::scheduling::pod::{VolumeIndex, is_provisionable, is_provisionable_once_pending};
use crate::scheduling::{NodePoolSpec, SolveOptions, solve};
use crate::snapshot::Snapshot;

/// A batch closes when no new pending pod arrived for this long...
pub const BATCH_IDLE: Duration = Duration::from_secs(1);
/// ...or when it has been open this long.
pub const BATCH_MAX: Duration = Duration::from_secs(10);

/// How long a pod the last solve placed on a ready node may stay pending
/// before it is solved for again: kube-scheduler binds within a cycle, so
/// a pod still pending after this found its planned room taken. Doubles
/// for each further solve that places it on a ready node again, up to the
/// resync, so a lasting disagreement with kube-scheduler costs few solves.
const PLACED_GRACE: Duration = Duration::from_secs(10);

/// What the last solve did with a pending pod: the fact its decision
/// relied on. While that fact holds, solving for the pod again would
/// change nothing; once it no longer holds, the pod opens a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Planned {
    /// On a NodeClaim still in flight (created by the solve, or launching):
    /// holds until the claim is initialized, deleted or gone. Then the pod
    /// either runs, or kube-scheduler gave its room to another pod.
    InFlight(String),
    /// On a ready node, until `until`: kube-scheduler should bind it by
    /// then. `grace` is the wait that gave `until`.
    Ready {
        node: String,
        until: Timestamp,
        grace: Duration,
    },
    /// Nowhere, with a reason: holds until the configuration or the claims
    /// change, or the resync.
    Unplaced,
}

/// The pending pods seen so far and when the batch opened and last changed,
/// and what the last solve decided for each pending pod.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    pods: BTreeSet<String>,
    opened: Option<Timestamp>,
    changed: Option<Timestamp>,
    /// The pending pods the last solve placed or gave a reason for.
    planned: BTreeMap<String, Planned>,
    /// The NodeClaims that solve counted on (existing and created).
    solved_claims: BTreeSet<String>,
    /// The resourceVersions of the NodePools and EC2NodeClasses it used.
    solved_config: BTreeMap<String, String>,
    solved_at: Option<Timestamp>,
}

/// Where a solve put a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// A NodeClaim the solve created.
    Claim(String),
    /// An existing node or in-flight NodeClaim, by the solver's name for it.
    Node(String),
}

/// What one solve did.
#[derive(Debug, Default)]
struct Provisioned {
    created: BTreeSet<String>,
    /// Pending pods by where the solve placed them; unplaced pods are absent.
    placed: BTreeMap<String, Target>,
}

fn since(t: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(t)).unwrap_or_default()
}

/// The pod as if it were pending, if it is leaving one of the `deleting`
/// nodes ([`is_leaving`](crate::disruption::pods::is_leaving)): the
/// provisioner counts such a pod as pending while its node drains.
fn pending_if_leaving(p: &SlimPod, deleting: &NodeNames) -> Option<SlimPod> {
    (!deleting.is_empty() && crate::disruption::pods::is_leaving(p, deleting))
        .then(|| as_pending(p))
}

/// A pod as it would be if it were not yet scheduled.
fn as_pending(p: &SlimPod) -> SlimPod {
    let mut p = p.clone();
    if let Some(spec) = p.spec.as_mut() {
        spec.node_name = None;
    }
    let status = p.status.get_or_insert_with(Default::default);
    status.phase = Some("Pending".into());
    status.nominated_node_name = None;
    status.conditions = Some(vec![k8s_openapi::api::core::v1::PodCondition {
        type_: "PodScheduled".into(),
        status: "False".into(),
        reason: Some("Unschedulable".into()),
        ..Default::default()
    }]);
    p
}

/// Marks offerings that recently failed with insufficient capacity.
fn without_unavailable(
    mut types: Vec<InstanceType>,
    unavailable: &super::UnavailableOfferings,
    now: Timestamp,
) -> Vec<InstanceType> {
    for it in &mut types {
        for o in &mut it.offerings {
            let key = OfferingKey {
                instance_type: it.name.clone(),
                zone: o.zone.clone(),
                capacity_type: o.capacity_type.clone(),
            };
            if unavailable.contains(&key, now) {
                o.available = false;
            }
        }
    }
    types
}

/// The NodeClaims a scheduling input converts
/// ([`Controller::converted_claims`]) and the lists they were read from.
#[derive(Clone)]
pub(super) struct ConvertedClaims {
    pub nodes: Listed<Node>,
    claims: Listed<NodeClaim>,
    pub converted: Arc<[Arc<NodeClaim>]>,
}

/// What [`Controller::converted_claims`] keeps from one call to the next:
/// its last answer, and the names of the registered Nodes of a node list.
#[derive(Default)]
pub(super) struct KeptClaims {
    last: Option<ConvertedClaims>,
    /// The list `registered` was read from.
    nodes: Listed<Node>,
    registered: HashSet<Box<str>, foldhash::fast::RandomState>,
}

impl KeptClaims {
    /// Brings the registered names to `nodes`, a later node list: only the
    /// Nodes that changed are read again (a node's labels are a lookup
    /// among dozens, for each of thousands of nodes).
    fn follow_nodes(&mut self, nodes: &Listed<Node>) {
        if Listed::ptr_eq(&self.nodes, nodes) {
            return;
        }
        let change = ListChange::between(&self.nodes, nodes);
        for n in change.gone(&self.nodes).filter(|n| is_registered(n)) {
            self.registered
                .remove(n.metadata.name.as_deref().unwrap_or_default());
        }
        for &at in &change.added {
            let n = &nodes[at as usize];
            if is_registered(n)
                && let Some(name) = n.metadata.name.as_deref()
            {
                self.registered.insert(name.into());
            }
        }
        self.nodes = nodes.clone();
    }
}

/// Whether a Node is its own account of itself: initialized, or not
/// Karpenter's.
fn is_registered(n: &Node) -> bool {
    // Initialized first: it answers for nearly every node.
    let labels = n.metadata.labels.as_ref();
    labels
        .and_then(|l| l.get(crate::api::LABEL_INITIALIZED))
        .map(String::as_str)
        == Some("true")
        || labels.is_none_or(|l| !l.contains_key(crate::api::LABEL_NODEPOOL))
}

impl<C: Cluster, P: CloudProvider> Controller<C, P> {
    /// Batches pending pods and provisions for a closed batch. Returns when
    /// it next needs to run.
    /// Static NodePools are kept at their replica count first.
    pub async fn reconcile_provisioning(&mut self) -> Duration {
        let _timer = self
            .metrics
            .reconcile(super::metrics::controllers::PROVISIONER);
        let statics = self.reconcile_static().await;
        self.reconcile_buffers().await;
        self.provision_pending().await.min(statics)
    }

    async fn provision_pending(&mut self) -> Duration {
        let now = self.clock.now();
        let mut pending = self.provisionable_pods();
        // CapacityBuffers' virtual pods are pending in every solve.
        pending.extend(self.buffers.owners.keys().cloned());
        if pending.is_empty() {
            self.batch = Batch::default();
            self.unschedulable.clear();
            return self.settings.resync;
        }
        // A pod the last solve decided for opens no batch while the fact
        // that decision relied on holds: the capacity it was planned on is
        // still in flight, or kube-scheduler has not yet had time to bind
        // it to the ready node it was planned on. A batch opens for pods
        // that solve has not seen or whose fact no longer holds, when
        // capacity it counted on went away, or after a resync period.
        if self.batch.opened.is_none()
            && let Some(solved_at) = self.batch.solved_at
        {
            let due = self.settings.resync.saturating_sub(since(solved_at, now));
            if !due.is_zero()
                && !self.claims_lost()
                && self.config_versions() == self.batch.solved_config
            {
                match self.next_unseen(&pending, now) {
                    None => return due,
                    Some(wait) if !wait.is_zero() => return wait.min(due),
                    Some(_) => {}
                }
            }
        }
        if pending != self.batch.pods {
            self.batch.pods = pending;
            self.batch.changed = Some(now);
            self.batch.opened.get_or_insert(now);
        }
        let idle = since(self.batch.changed.unwrap_or(now), now);
        let open = since(self.batch.opened.unwrap_or(now), now);
        let (batch_idle, batch_max) = (self.settings.batch_idle, self.settings.batch_max);
        if idle < batch_idle && open < batch_max {
            return (batch_idle - idle).min(batch_max - open);
        }
        let solved_pods = std::mem::take(&mut self.batch.pods);
        let solved_config = self.config_versions();
        let previous = std::mem::take(&mut self.batch.planned);
        let pods = self.with_deleting_as_pending(self.cluster.list::<SlimPod>().to_vec());
        let outcome = self.provision(&pods).await;
        let mut solved_claims = outcome.created.clone();
        solved_claims.extend(
            self.cluster
                .list::<NodeClaim>()
                .iter()
                .filter(|c| c.metadata.deletion_timestamp.is_none())
                .filter_map(|c| c.metadata.name.clone()),
        );
        let planned = self.planned(solved_pods, &outcome, &previous, now);
        self.nominate(&planned, &previous, now);
        self.batch = Batch {
            planned,
            solved_claims,
            solved_config,
            solved_at: Some(now),
            ..Batch::default()
        };
        let mut next = self.settings.resync;
        for p in self.batch.planned.values() {
            if let Planned::Ready { until, .. } = p {
                next = next.min(since(now, *until));
            }
        }
        next
    }

    /// The nodes being deleted: those of NodeClaims being deleted (for any
    /// reason: expiration, a disruption carried out, an interruption, a
    /// manual delete, a registration timeout) and Nodes being deleted.
    pub(super) fn deleting_nodes(&self) -> NodeNames {
        let mut nodes: NodeNames = self
            .cluster
            .list::<NodeClaim>()
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_some())
            .filter_map(|c| c.status.as_ref()?.node_name.clone())
            .collect();
        nodes.extend(
            self.cluster
                .list::<Node>()
                .iter()
                .filter(|n| n.metadata.deletion_timestamp.is_some())
                .filter_map(|n| n.metadata.name.clone()),
        );
        nodes
    }

    /// The pods, with those still on a node being deleted (and that would
    /// have to move) as if they were pending, as the reference's
    /// provisioner counts them: the capacity they need is launched at
    /// once, while they drain, and the nodes they are planned on are
    /// nominated (not Empty) until they arrive.
    fn with_deleting_as_pending(&self, pods: Vec<Arc<SlimPod>>) -> Vec<Arc<SlimPod>> {
        let nodes = self.deleting_nodes();
        if nodes.is_empty() {
            return pods;
        }
        pods.into_iter()
            .map(|p| pending_if_leaving(&p, &nodes).map_or(p, Arc::new))
            .collect()
    }

    /// The provisionable pods by key (with those of deleting nodes),
    /// read again only when a pod or a NodeClaim changed: this runs at
    /// every reconcile, over every pod of the cluster.
    fn provisionable_pods(&mut self) -> BTreeSet<String> {
        let revision = (
            self.cluster.revision::<SlimPod>(),
            self.cluster.revision::<NodeClaim>(),
            self.cluster.revision::<Node>(),
        );
        if let Some((r, pending)) = &self.provisionable
            && *r == revision
        {
            return pending.clone();
        }
        // As `with_deleting_as_pending` reads them: the pending pods, and
        // those leaving with a deleting node as they would be pending.
        let deleting = self.deleting_nodes();
        let pods = self.pods_by_node();
        let mut pending: BTreeSet<String> = pods
            .unbound()
            .filter(|p| is_provisionable(p))
            .map(|p| p.key())
            .collect();
        for node in &deleting {
            pending.extend(
                pods.on(node)
                    .filter(|p| is_leaving(p, &deleting) && is_provisionable_once_pending(p))
                    .map(|p| p.key()),
            );
        }
        self.provisionable = Some((revision, pending.clone()));
        pending
    }

    /// Whether some pending pod is unseen by the last solve, or its fact no
    /// longer holds: `Some(ZERO)` if one is now, `Some(wait)` if the first
    /// one will be after `wait`, `None` if none will be before the resync.
    fn next_unseen(&self, pending: &BTreeSet<String>, now: Timestamp) -> Option<Duration> {
        // Claims the plan counted on that are still in flight, looked up
        // once each.
        let mut in_flight: BTreeMap<&str, bool> = BTreeMap::new();
        let mut wait: Option<Duration> = None;
        for pod in pending {
            match self.batch.planned.get(pod) {
                None => return Some(Duration::ZERO),
                Some(Planned::InFlight(claim)) => {
                    let holds = *in_flight
                        .entry(claim.as_str())
                        .or_insert_with(|| self.claim_in_flight(claim));
                    if !holds {
                        return Some(Duration::ZERO);
                    }
                }
                Some(Planned::Ready { until, .. }) => {
                    if *until <= now {
                        return Some(Duration::ZERO);
                    }
                    let w = since(now, *until);
                    wait = Some(wait.map_or(w, |x: Duration| x.min(w)));
                }
                Some(Planned::Unplaced) => {}
            }
        }
        wait
    }

    /// Whether a NodeClaim exists, is not being deleted, and is not yet
    /// initialized.
    fn claim_in_flight(&self, name: &str) -> bool {
        self.cluster
            .get::<NodeClaim>(&ObjectKey::cluster(name))
            .is_some_and(|c| {
                c.metadata.deletion_timestamp.is_none()
                    && !super::is_true(
                        c.status.as_ref().and_then(|s| s.conditions.as_ref()),
                        super::conditions::INITIALIZED,
                    )
            })
    }

    /// A `Nominated` Event on each pod the solve newly counts on an
    /// in-flight NodeClaim for ("Pod should schedule on: nodeclaim/X, node/Y",
    /// as the reference's), at most as many as its token bucket allows.
    fn nominate(
        &mut self,
        planned: &BTreeMap<String, Planned>,
        previous: &BTreeMap<String, Planned>,
        now: Timestamp,
    ) {
        let (tokens, filled) = &mut self.nominations;
        if let Some(at) = *filled {
            let secs = now.duration_since(at).as_secs_f64().max(0.0);
            *tokens = (*tokens + secs * super::NOMINATION_RATE).min(super::NOMINATION_BURST);
        }
        *filled = Some(now);
        let mut due = Vec::new();
        for (pod, plan) in planned {
            let Planned::InFlight(claim) = plan else {
                continue;
            };
            if previous.get(pod) == Some(plan) || self.is_virtual(pod) {
                continue;
            }
            if self.nominations.0 < 1.0 {
                break;
            }
            self.nominations.0 -= 1.0;
            due.push((pod.clone(), claim.clone()));
        }
        for (pod, claim) in due {
            let node = self
                .cluster
                .get::<NodeClaim>(&ObjectKey::cluster(&claim))
                .and_then(|c| c.status.as_ref()?.node_name.clone());
            let on = match node {
                Some(n) => format!("nodeclaim/{claim}, node/{n}"),
                None => format!("nodeclaim/{claim}"),
            };
            self.event(
                format!("Pod/{pod}"),
                "Nominated",
                format!("Pod should schedule on: {on}"),
            );
        }
    }

    /// What the solve decided for each pod of the batch, as the facts to
    /// watch: the claim it counts on while that is in flight, a grace for
    /// kube-scheduler on a ready node (doubling when the previous solve had
    /// placed it on a ready node too), or nothing to wait for.
    fn planned(
        &self,
        pods: BTreeSet<String>,
        outcome: &Provisioned,
        previous: &BTreeMap<String, Planned>,
        now: Timestamp,
    ) -> BTreeMap<String, Planned> {
        // Nodes and in-flight claims by the name the solver gives them (a
        // Node's name once registered, else the NodeClaim's), with the
        // NodeClaim behind each when it is not yet initialized.
        let mut launching: BTreeMap<String, String> = BTreeMap::new();
        for c in self.cluster.list::<NodeClaim>().iter() {
            let Some(name) = c.metadata.name.clone() else {
                continue;
            };
            let conds = c.status.as_ref().and_then(|s| s.conditions.as_ref());
            if super::is_true(conds, super::conditions::INITIALIZED) {
                continue;
            }
            if let Some(node) = c.status.as_ref().and_then(|s| s.node_name.clone()) {
                launching.insert(node, name.clone());
            }
            launching.insert(name.clone(), name);
        }
        pods.into_iter()
            .map(|pod| {
                let fact = match outcome.placed.get(&pod) {
                    Some(Target::Claim(claim)) => Planned::InFlight(claim.clone()),
                    Some(Target::Node(node)) => match launching.get(node) {
                        Some(claim) => Planned::InFlight(claim.clone()),
                        None => {
                            let grace = match previous.get(&pod) {
                                _ if self.is_virtual(&pod) => super::buffers::BUFFER_RESYNC,
                                Some(Planned::Ready { grace, .. }) => {
                                    grace.saturating_mul(2).min(self.settings.resync)
                                }
                                _ => PLACED_GRACE,
                            };
                            Planned::Ready {
                                node: node.clone(),
                                until: now.checked_add(grace).unwrap_or(now),
                                grace,
                            }
                        }
                    },
                    None => Planned::Unplaced,
                };
                (pod, fact)
            })
            .collect()
    }

    /// The generation of every NodePool and the resourceVersion of every
    /// EC2NodeClass: a change to the configuration (a raised limit, a new
    /// pool, a class that resolved other subnets) calls for a new solve.
    fn config_versions(&self) -> BTreeMap<String, String> {
        fn versions<K: Resource>(items: &[Arc<K>], kind: &str) -> Vec<(String, String)> {
            items
                .iter()
                .map(|o| {
                    let m = o.meta();
                    (
                        format!("{kind}/{}", m.name.as_deref().unwrap_or_default()),
                        m.resource_version.clone().unwrap_or_default(),
                    )
                })
                .collect()
        }
        // A NodePool's own status (nodes, resources, conditions) changes
        // with every launch: only its spec, whose changes bump the
        // generation, calls for a new solve.
        let mut out: Vec<(String, String)> = self
            .cluster
            .list::<NodePool>()
            .iter()
            .map(|p| {
                (
                    format!(
                        "NodePool/{}",
                        p.metadata.name.as_deref().unwrap_or_default()
                    ),
                    format!("g{}", p.metadata.generation.unwrap_or_default()),
                )
            })
            .collect();
        out.extend(versions(
            &self.cluster.list::<EC2NodeClass>(),
            "EC2NodeClass",
        ));
        out.into_iter().collect()
    }

    /// Whether a NodeClaim the last solve counted on is gone or going.
    fn claims_lost(&self) -> bool {
        self.batch.solved_claims.iter().any(|name| {
            self.cluster
                .get::<NodeClaim>(&ObjectKey::cluster(name.clone()))
                .is_none_or(|c| c.metadata.deletion_timestamp.is_some())
        })
    }

    /// The NodePools as the scheduling core sees them, with their instance
    /// types from the cloud, and every instance type seen (for sizing
    /// in-flight claims).
    pub(super) async fn nodepool_specs(
        &mut self,
    ) -> (Vec<Arc<NodePool>>, Vec<NodePoolSpec>, Vec<InstanceType>) {
        let now = self.clock.now();
        let classes: BTreeMap<String, Arc<EC2NodeClass>> = self
            .cluster
            .list::<EC2NodeClass>()
            .into_iter()
            .filter_map(|c| Some((c.metadata.name.clone()?, c)))
            .collect();
        let pools: Vec<Arc<NodePool>> = self
            .cluster
            .list::<NodePool>()
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        let mut specs = Vec::new();
        let mut catalog: BTreeMap<String, InstanceType> = BTreeMap::new();
        for pool in &pools {
            if pool.spec.replicas.is_some() && !self.settings.static_capacity {
                self.static_inactive(pool).await;
                continue;
            }
            let class_name = &pool.spec.template.spec.node_class_ref.name;
            let Some(class) = classes.get(class_name) else {
                let message =
                    format!("EC2NodeClass {class_name:?} not found; the NodePool is skipped");
                self.pool_unusable(pool, "NodeClassNotFound", message).await;
                continue;
            };
            // Karpenter skips a NodePool whose node class is not ready
            // (its NodeClassReady): nothing could launch from it.
            if let Some(c) = crate::api::common::find_condition(
                class.status.as_ref().and_then(|s| s.conditions.as_deref()),
                super::conditions::READY,
            ) && c.status == crate::api::common::ConditionStatus::False
            {
                let message = format!(
                    "EC2NodeClass {class_name:?} is not ready ({}); the NodePool is skipped",
                    c.message.as_deref().unwrap_or("no message")
                );
                self.pool_unusable(pool, "NodeClassNotReady", message).await;
                continue;
            }
            let types = match self.cloud.instance_types(pool, class).await {
                Ok(t) => without_unavailable(t, &self.unavailable, now),
                Err(e) => {
                    let message = format!("{e}; the NodePool is skipped");
                    self.pool_unusable(pool, "InstanceTypesUnavailable", message)
                        .await;
                    continue;
                }
            };
            for t in &types {
                catalog.entry(t.name.clone()).or_insert_with(|| t.clone());
            }
            match nodepool_spec_with_types(pool, types) {
                Ok(s) => {
                    specs.push(s);
                    self.pool_usable(pool).await;
                }
                Err(e) => {
                    let message = format!("{e}; the NodePool is skipped");
                    self.pool_unusable(pool, "InvalidNodePool", message).await;
                }
            }
        }
        self.apply_overlays(&mut specs).await;
        (pools, specs, catalog.into_values().collect())
    }

    /// The NodeClaims a scheduling input reads, with the Nodes they were
    /// read beside: those without a node that is its own account of itself
    /// (initialized, or not Karpenter's). An initialized one is its node
    /// (as the conversion reads them), and a NodeClaim as JSON is not cheap
    /// in a large cluster. An initializing node's claim says which of its
    /// taints are startup taints and what it will have allocatable. Kept
    /// while the two lists are the same.
    pub(super) fn converted_claims(&self) -> ConvertedClaims {
        let nodes = self.cluster.list::<Node>();
        let claims = self.cluster.list::<NodeClaim>();
        let mut kept = self
            .converted_claims
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(k) = kept.last.as_ref()
            && Listed::ptr_eq(&k.nodes, &nodes)
            && Listed::ptr_eq(&k.claims, &claims)
        {
            return k.clone();
        }
        kept.follow_nodes(&nodes);
        let registered = &kept.registered;
        let converted: Arc<[Arc<NodeClaim>]> = claims
            .iter()
            .filter(|c| {
                c.status
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .is_none_or(|n| !registered.contains(n))
            })
            .cloned()
            .collect();
        let found = ConvertedClaims {
            nodes,
            claims,
            converted,
        };
        kept.last = Some(found.clone());
        found
    }

    /// The cluster as the scheduling core's input builder reads it.
    pub(super) fn snapshot(&self, pods: Vec<Arc<SlimPod>>) -> Snapshot {
        let claims = self.converted_claims();
        Snapshot {
            pods,
            nodes: claims.nodes.to_vec(),
            nodeclaims: claims.converted.to_vec(),
            nodepools: Vec::new(),
            ec2nodeclasses: Vec::new(),
            daemonsets: self.cluster.list::<DaemonSet>().to_vec(),
            pdbs: self.cluster.list::<PodDisruptionBudget>().to_vec(),
            persistent_volumes: self.cluster.list::<PersistentVolume>().to_vec(),
            persistent_volume_claims: self.cluster.list::<PersistentVolumeClaim>().to_vec(),
            storage_classes: self.cluster.list::<StorageClass>().to_vec(),
        }
    }

    /// The lower bound on the hourly price of capacity for every running or
    /// pending pod, as if the cluster were empty.
    pub async fn workload_lower_bound(&mut self) -> Option<f64> {
        let now = self.clock.now();
        let (pools, specs, catalog) = self.nodepool_specs().await;
        let specs = dynamic_only(&specs, &pools);
        // The cluster without its nodes, claims and pods; every pod is
        // converted as the pod that needs capacity.
        let snapshot = Snapshot {
            daemonsets: self.cluster.list::<DaemonSet>().to_vec(),
            pdbs: self.cluster.list::<PodDisruptionBudget>().to_vec(),
            persistent_volumes: self.cluster.list::<PersistentVolume>().to_vec(),
            persistent_volume_claims: self.cluster.list::<PersistentVolumeClaim>().to_vec(),
            storage_classes: self.cluster.list::<StorageClass>().to_vec(),
            ..Snapshot::default()
        };
        let now_ms = now.as_millisecond();
        let mut input =
            build_input_with_pools(specs, &catalog, &[], "", Some(&snapshot), now_ms).ok()?;
        let volumes = VolumeIndex::new(
            &snapshot.persistent_volume_claims,
            &snapshot.persistent_volumes,
            &snapshot.storage_classes,
        );
        // CapacityBuffers' virtual pods need their capacity too.
        let pods = self.cluster.list::<SlimPod>();
        input.pods = Vec::with_capacity(pods.len() + self.buffers.pods.len());
        input.pods.extend(
            pods.iter()
                .chain(self.buffers.pods.iter())
                .filter(|p| !p.is_finished() && p.metadata.deletion_timestamp.is_none())
                .filter(|p| !p.is_daemon())
                .filter_map(|p| self.pod_specs.get(p, &volumes, now_ms).ok()),
        );
        crate::scheduling::lower_bound_only(
            &input,
            &SolveOptions {
                preferences: self.settings.preferences,
                now_ms,
            },
        )
        .ok()
    }

    /// One solve for the pending pods: the NodeClaims it created, and where
    /// it placed each pod.
    /// Logs, once an hour per pod, the pending pods whose preferences can
    /// keep their nodes from being consolidated while they are respected: a
    /// preferred pod anti-affinity, a `ScheduleAnyway` spread (as the
    /// reference warns).
    fn warn_preferences(&mut self, pods: &[Arc<SlimPod>], now: Timestamp) {
        const AGAIN: Duration = Duration::from_secs(3600);
        if self.settings.preferences == crate::scheduling::Preferences::Ignore {
            return;
        }
        self.preference_warned
            .retain(|_, at| now.duration_since(*at).as_secs() < AGAIN.as_secs() as i64);
        let mut found: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
        for p in pods {
            let Some(spec) = p.spec.as_ref() else {
                continue;
            };
            let anti = spec
                .affinity
                .as_ref()
                .and_then(|a| a.pod_anti_affinity.as_ref())
                .and_then(|a| {
                    a.preferred_during_scheduling_ignored_during_execution
                        .as_ref()
                })
                .is_some_and(|t| !t.is_empty());
            let spread = spec
                .topology_spread_constraints
                .iter()
                .flatten()
                .any(|c| c.when_unsatisfiable == "ScheduleAnyway");
            if !anti && !spread {
                continue;
            }
            let key = format!(
                "{}/{}",
                p.metadata.namespace.as_deref().unwrap_or("default"),
                p.metadata.name.as_deref().unwrap_or_default()
            );
            for (kind, has) in [("anti-affinity", anti), ("topology-spread", spread)] {
                if has
                    && self
                        .preference_warned
                        .insert((key.clone(), kind), now)
                        .is_none()
                {
                    found.entry(kind).or_default().push(key.clone());
                }
            }
        }
        for (kind, pods) in found {
            let shown: Vec<&String> = pods.iter().take(10).collect();
            let what = if kind == "anti-affinity" {
                "a preferred pod anti-affinity"
            } else {
                "a ScheduleAnyway topology spread"
            };
            tracing::info!(
                pods = ?shown,
                count = pods.len(),
                "pod(s) have {what}, which can prevent consolidation (--preference-policy Ignore drops preferences)"
            );
        }
    }

    async fn provision(&mut self, pods: &[Arc<SlimPod>]) -> Provisioned {
        let now = self.clock.now();
        self.warn_preferences(pods, now);
        let mut out = Provisioned::default();
        let (pools, specs, catalog) = self.nodepool_specs().await;
        let specs = dynamic_only(&specs, &pools);
        let mut pods = pods.to_vec();
        pods.extend(self.buffers.pods.iter().cloned());
        let snapshot = self.snapshot(pods);
        let now_ms = now.as_millisecond();
        let input =
            match build_input_kept(specs, &catalog, &snapshot, now_ms, &mut self.kept_existing) {
                Ok(i) => i,
                Err(e) => {
                    self.event("Provisioner".into(), "InputInvalid", e.to_string());
                    return out;
                }
            };
        let timer = self.metrics.scheduling_duration.start_timer();
        let solved = solve(
            &input,
            &SolveOptions {
                preferences: self.settings.preferences,
                now_ms,
            },
        );
        timer.observe_duration();
        let result = match solved {
            Ok(r) => r,
            Err(e) => {
                self.event("Provisioner".into(), "SolveFailed", e.to_string());
                return out;
            }
        };
        // Virtual pods are no pods of the cluster: no Events, and never
        // among the pods consolidation waits for; their buffers' status
        // says where they went.
        self.unschedulable = result
            .unschedulable
            .iter()
            .filter(|u| !self.is_virtual(&u.pod))
            .map(|u| (u.pod.clone(), u.reason.clone()))
            .collect();
        for (pod, reason) in self.unschedulable.clone() {
            self.event(format!("Pod/{pod}"), "FailedProvisioning", reason);
        }
        self.record_buffer_solve(&result).await;
        for placement in &result.existing {
            for pod in &placement.pods {
                out.placed
                    .insert(pod.clone(), Target::Node(placement.node.clone()));
            }
        }
        let pools_by_name: BTreeMap<String, &Arc<NodePool>> = pools
            .iter()
            .filter_map(|p| Some((p.metadata.name.clone()?, p)))
            .collect();
        // Named and built in the order of the solve, then created at most
        // `write_concurrency` at a time (the reference creates a batch's
        // NodeClaims all at once), the answers read in that order.
        let mut planned = Vec::with_capacity(result.nodeclaims.len());
        for claim in &result.nodeclaims {
            let Some(pool) = pools_by_name.get(&claim.nodepool) else {
                continue;
            };
            let class = self.cluster.get::<EC2NodeClass>(&ObjectKey::cluster(
                pool.spec.template.spec.node_class_ref.name.clone(),
            ));
            let name = self.next_claim_name(&claim.nodepool);
            let object = self.nodeclaim_for(name, pool, class.as_deref(), claim);
            planned.push((claim, object));
        }
        let cluster = Arc::clone(&self.cluster);
        let (claims, objects): (Vec<_>, Vec<_>) = planned.into_iter().unzip();
        let creates = objects.into_iter().map(|object| {
            let cluster = &cluster;
            async move {
                let name = object.metadata.name.clone().unwrap_or_default();
                (name, cluster.create(object).await)
            }
        });
        let answers = super::writes::concurrently(creates, self.settings.write_concurrency).await;
        for (claim, (name, created)) in claims.into_iter().zip(answers) {
            match created {
                Ok(_) => {
                    // dovetail never relaxes minValues.
                    self.metrics
                        .nodeclaims_created
                        .with_label_values(&["provisioned", claim.nodepool.as_str(), "false"])
                        .inc();
                    out.created.insert(name.clone());
                    for pod in &claim.pods {
                        out.placed.insert(pod.clone(), Target::Claim(name.clone()));
                    }
                    self.event(
                        format!("NodeClaim/{name}"),
                        "Provisioned",
                        format!(
                            "for {} pod(s) in NodePool {}: {} type(s) from {} at ${:.4}/h",
                            claim.pods.len(),
                            claim.nodepool,
                            claim.instance_types.len(),
                            claim
                                .instance_types
                                .first()
                                .map(String::as_str)
                                .unwrap_or("-"),
                            claim.price
                        ),
                    )
                }
                Err(e) => {
                    // Planned on a claim that does not exist: the next pass
                    // finds it lost and solves again once the batch window
                    // closes, instead of waiting for the resync.
                    for pod in &claim.pods {
                        out.placed.insert(pod.clone(), Target::Claim(name.clone()));
                    }
                    self.event(format!("NodeClaim/{name}"), "CreateFailed", e.to_string())
                }
            }
        }
        out
    }

    /// The pods the last solve could not place, with reasons.
    pub fn unschedulable(&self) -> &BTreeMap<String, String> {
        &self.unschedulable
    }

    /// Nodes the last solve planned the still `pending` pods on:
    /// consolidation leaves them alone while those pods wait for them.
    pub(super) fn nominated_nodes(&self, pending: &BTreeSet<String>) -> BTreeSet<String> {
        self.batch
            .planned
            .iter()
            .filter(|(pod, _)| pending.contains(*pod))
            .filter_map(|(_, p)| match p {
                Planned::Ready { node, .. } => Some(node.clone()),
                Planned::InFlight(claim) => Some(claim.clone()),
                Planned::Unplaced => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;

    use super::*;
    use crate::clock::Clock;
    use crate::controller::Settings;
    use crate::testing::{Env, World, example_class, example_pool, from_yaml, pending_pod};

    /// A pod leaving with its node is provisionable exactly when it would
    /// be as the pending pod the provisioner plans for.
    #[test]
    fn a_leaving_pod_is_provisionable_as_its_pending_self_is() {
        let pods = [
            "metadata: {name: web, namespace: d}\nspec: {nodeName: n1, containers: []}\nstatus: {phase: Running}",
            "metadata: {name: done, namespace: d}\nspec: {nodeName: n1, containers: []}\nstatus: {phase: Succeeded}",
            "metadata: {name: going, namespace: d, deletionTimestamp: '2026-01-01T00:00:00Z'}\nspec: {nodeName: n1, containers: []}\nstatus: {phase: Running}",
            "metadata: {name: agent, namespace: d, ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: a, uid: u, controller: true}]}\nspec: {nodeName: n1, containers: []}",
            "metadata: {name: mirror, namespace: d, ownerReferences: [{apiVersion: v1, kind: Node, name: n1, uid: u, controller: true}]}\nspec: {nodeName: n1, containers: []}",
            "metadata: {name: nominated, namespace: d}\nspec: {nodeName: n1, containers: []}\nstatus: {nominatedNodeName: n2}",
        ];
        let mut provisionable = 0;
        for yaml in pods {
            let p: SlimPod = from_yaml(yaml);
            let once = is_provisionable_once_pending(&p);
            assert_eq!(is_provisionable(&as_pending(&p)), once, "{yaml}");
            provisionable += usize::from(once);
        }
        assert_eq!(provisionable, 3, "web, done and nominated");
    }

    #[test]
    fn new_nodeclaims_carry_the_drift_hashes_and_a_second_pass_does_not_solve_again() {
        let w = World::new();
        let cluster = w.cluster.clone();
        let (class, pool) = (example_class(), example_pool());
        let class = cluster.create(class).unwrap();
        let pool = cluster.create(pool).unwrap();
        cluster.create(pending_pod("a")).unwrap();
        let Env {
            clock,
            mut controller,
            rt,
            ..
        } = w.env(Settings::default());
        rt.block_on(controller.reconcile_provisioning());
        clock.advance(BATCH_IDLE).unwrap();
        rt.block_on(controller.reconcile_provisioning());
        let claims = Cluster::list::<NodeClaim>(cluster.as_ref());
        assert_eq!(claims.len(), 1);
        let annotations = claims[0].metadata.annotations.clone().unwrap_or_default();
        for (k, v) in crate::drift::stamp_annotations(&pool, &class) {
            assert_eq!(annotations.get(&k), Some(&v), "{k}");
        }
        // The pod is still pending (its node is not ready), but the last solve
        // already placed it: no second claim.
        clock.advance(BATCH_MAX).unwrap();
        rt.block_on(controller.reconcile_provisioning());
        clock.advance(BATCH_MAX).unwrap();
        rt.block_on(controller.reconcile_provisioning());
        assert_eq!(Cluster::list::<NodeClaim>(cluster.as_ref()).len(), 1);
    }

    /// Regression: a pod the last solve placed on a new NodeClaim stayed
    /// "seen" until the resync, even after that claim was ready and
    /// kube-scheduler had given its room to another pod.
    #[test]
    fn a_pod_still_pending_once_its_planned_claim_is_ready_is_solved_again_at_once() {
        let w = World::new();
        let cluster = w.cluster.clone();
        let (class, pool) = (example_class(), example_pool());
        cluster.create(class).unwrap();
        cluster.create(pool).unwrap();
        cluster.create(pending_pod("a")).unwrap();
        let Env {
            clock,
            mut controller,
            rt,
            ..
        } = w.env(Settings::default());
        let mut pass = |by: Duration| {
            clock.advance(by).unwrap();
            rt.block_on(controller.reconcile_provisioning())
        };
        pass(Duration::ZERO);
        pass(BATCH_IDLE);
        let claims = Cluster::list::<NodeClaim>(cluster.as_ref());
        assert_eq!(claims.len(), 1);
        // While the claim is in flight, the pending pod is not solved again.
        pass(BATCH_MAX);
        pass(BATCH_MAX);
        assert_eq!(Cluster::list::<NodeClaim>(cluster.as_ref()).len(), 1);
        // The claim's node is ready, but kube-scheduler bound another pod
        // there: the pod is still pending. The next pass opens a batch, well
        // before the resync, and plans a new claim for it.
        let node: Node = from_yaml(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n  labels:\n    \
             karpenter.sh/nodepool: general\n    karpenter.sh/initialized: 'true'\n\
             spec: {providerID: 'aws:///us-east-1a/i-1'}\n\
             status:\n  allocatable: {cpu: 1930m, memory: 7Gi, pods: '29'}\n  \
             capacity: {cpu: '2', memory: 8Gi, pods: '29'}\n",
        );
        cluster.create(node).unwrap();
        let mut intruder = pending_pod("intruder");
        intruder.spec.as_mut().unwrap().node_name = Some("n1".into());
        intruder.status = None;
        cluster.create(intruder).unwrap();
        let mut ready = (*claims[0]).clone();
        let status = ready.status.get_or_insert_with(Default::default);
        status.node_name = Some("n1".into());
        status.provider_id = Some("aws:///us-east-1a/i-1".into());
        let now = clock.now();
        let conds = status.conditions.get_or_insert_with(Vec::new);
        crate::controller::set_condition(conds, "Initialized", true, "Initialized", "", now);
        cluster.update_status(ready).unwrap();
        let wait = pass(Duration::from_secs(1));
        assert!(wait <= BATCH_IDLE, "{wait:?}");
        pass(BATCH_IDLE);
        assert_eq!(Cluster::list::<NodeClaim>(cluster.as_ref()).len(), 2);
        assert!(clock.now().duration_since(Timestamp::UNIX_EPOCH).as_secs() < 60);
    }

    /// Item 6 of the controller-safety issue: a registered node that is not
    /// initialized still carries its pool's startup taint (Cilium's), but
    /// the next solve counts on it as Karpenter's state node does, instead
    /// of launching a duplicate for a pod that fits on it.
    #[test]
    fn a_pod_that_fits_an_initializing_node_gets_no_new_claim() {
        let w = World::new();
        let cluster = w.cluster.clone();
        let (class, pool) = (example_class(), example_pool());
        let mut pool = serde_json::to_value(&pool).unwrap();
        pool["spec"]["template"]["spec"]["startupTaints"] = serde_json::json!([
            {"key": "node.cilium.io/agent-not-ready", "value": "true", "effect": "NoExecute"}
        ]);
        let pool: NodePool = serde_json::from_value(pool).unwrap();
        cluster.create(class).unwrap();
        cluster.create(pool).unwrap();
        cluster.create(pending_pod("a")).unwrap();
        let Env {
            clock,
            mut controller,
            rt,
            ..
        } = w.env(Settings::default());
        let mut pass = |by: Duration| {
            clock.advance(by).unwrap();
            rt.block_on(controller.reconcile_provisioning())
        };
        pass(Duration::ZERO);
        pass(BATCH_IDLE);
        let claims = Cluster::list::<NodeClaim>(cluster.as_ref());
        assert_eq!(claims.len(), 1);
        let claim_type = claims[0]
            .spec
            .requirements
            .iter()
            .find(|r| r.key == crate::api::LABEL_INSTANCE_TYPE)
            .and_then(|r| r.values.as_ref()?.first().cloned())
            .unwrap();
        // Its node registers with the startup taint, room for a second pod,
        // and is not initialized yet.
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "labels": {
                "karpenter.sh/nodepool": "general",
                "karpenter.sh/registered": "true",
                "node.kubernetes.io/instance-type": claim_type,
            }},
            "spec": {"providerID": "aws:///us-east-1a/i-1", "taints": [
                {"key": "node.cilium.io/agent-not-ready", "value": "true", "effect": "NoExecute"}
            ]},
            "status": {
                "allocatable": {"cpu": "15", "memory": "60Gi", "pods": "58"},
                "capacity": {"cpu": "16", "memory": "64Gi", "pods": "58"},
            },
        }))
        .unwrap();
        cluster.create(node).unwrap();
        let mut registered = (*claims[0]).clone();
        let status = registered.status.get_or_insert_with(Default::default);
        status.node_name = Some("n1".into());
        status.provider_id = Some("aws:///us-east-1a/i-1".into());
        let now = clock.now();
        let conds = status.conditions.get_or_insert_with(Vec::new);
        crate::controller::set_condition(conds, "Registered", true, "Registered", "", now);
        cluster.update_status(registered).unwrap();
        let mut bound = pending_pod("a");
        bound.spec.as_mut().unwrap().node_name = Some("n1".into());
        cluster
            .delete::<Pod>(&ObjectKey::new("default", "a"))
            .unwrap();
        cluster.create(bound).unwrap();
        cluster.create(pending_pod("b")).unwrap();
        pass(Duration::from_secs(1));
        pass(BATCH_IDLE);
        pass(BATCH_MAX);
        assert_eq!(
            Cluster::list::<NodeClaim>(cluster.as_ref()).len(),
            1,
            "a duplicate was launched for a pod that fits the initializing node"
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// The registered names followed from node list to node list are
        /// those read afresh from each list: Nodes added, removed,
        /// replaced by a new object (initialized, not Karpenter's, or
        /// still initializing) or left as they were.
        #[test]
        fn registered_names_followed_are_those_read_afresh(
            steps in proptest::collection::vec(
                proptest::collection::vec((0u8..12, 0u8..4), 0..8),
                1..6,
            ),
        ) {
            let node = |name: &str, kind: u8| -> Arc<Node> {
                let labels = match kind {
                    0 => "{karpenter.sh/nodepool: p, karpenter.sh/initialized: 'true'}",
                    1 => "{karpenter.sh/nodepool: p}",
                    2 => "{team: a}",
                    _ => "{karpenter.sh/nodepool: p, karpenter.sh/initialized: 'false'}",
                };
                Arc::new(from_yaml(&format!("metadata: {{name: {name}, labels: {labels}}}")))
            };
            let mut nodes: BTreeMap<String, Arc<Node>> = BTreeMap::new();
            let mut kept = KeptClaims::default();
            for step in steps {
                for (n, kind) in step {
                    let name = format!("n{}", n % 6);
                    match n {
                        0..6 => nodes.insert(name.clone(), node(&name, kind)),
                        _ => nodes.remove(&name),
                    };
                }
                let list = Listed::from(nodes.values().cloned().collect::<Vec<_>>());
                kept.follow_nodes(&list);
                let fresh: BTreeSet<&str> = list
                    .iter()
                    .filter(|n| is_registered(n))
                    .filter_map(|n| n.metadata.name.as_deref())
                    .collect();
                let followed: BTreeSet<&str> = kept.registered.iter().map(|n| &**n).collect();
                proptest::prop_assert_eq!(followed, fresh);
            }
        }
    }
}
