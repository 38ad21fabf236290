//! The NodeClaim lifecycle: launch an instance for a new NodeClaim, register
//! the node that joins for it, mark it initialised when it is ready, and
//! give up on instances whose node never registers.
//!
//! Launches are decided in the pass and sent at most
//! `Settings::launch_concurrency` at a time (`send_launches`; the in-cluster
//! runtime sends them outside the controller's lock). The cloud provider
//! launches the cheapest available offering of the claim's instance types.
//! Offerings out of capacity are marked unavailable for
//! `Settings::unavailable_offering_ttl` (three minutes); when none launched,
//! the claim is deleted and its pods get another. A node class that is not
//! ready deletes the claim. Any other failure turns `Launched` `Unknown` with
//! the reason and is retried after a backoff (2 s, doubling to 60 s) until
//! `LAUNCH_TIMEOUT` (five minutes after the first failure), when the claim is
//! deleted. A node that joins is registered (label `karpenter.sh/registered`,
//! the `karpenter.sh/unregistered` taint removed) and initialised once ready
//! (`karpenter.sh/initialized`); a claim whose node has not registered within
//! `Settings::registration_ttl` (15 minutes by default) is deleted.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Taint as NodeTaint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;

use super::{Conditioned, Controller, conditions, is_true, set_condition, set_condition_status};
use crate::api::common::Taint;
use crate::api::common::{ConditionStatus, find_condition};
use crate::api::{
    EC2NodeClass, FINALIZER_TERMINATION, LABEL_CAPACITY_TYPE, LABEL_INITIALIZED,
    LABEL_INSTANCE_TYPE, LABEL_REGISTERED, LABEL_ZONE, NodeClaim, NodePool, TAINT_UNREGISTERED,
};
use crate::clock::Timestamp;
use crate::cloud::{CloudError, CloudProvider, Instance, InstanceState, Launched};
use crate::cluster::{Cluster, ObjectKey};

/// How long a NodeClaim may keep failing to launch before it is deleted
/// (Karpenter's `LaunchTimeout`); its pods then get another claim.
pub const LAUNCH_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// The wait after a failed launch; it doubles with each failure up to
/// [`LAUNCH_BACKOFF_MAX`].
/// How often a NodeClaim's consistency is checked (Karpenter's
/// consistency controller's `scanPeriod`).
const CONSISTENCY_SCAN: Duration = Duration::from_secs(10 * 60);
/// When a NodeClaim's consistency check falls due, the checks due within
/// this much after it run with it. Each claim's check falls due at its own
/// time (about when its node became ready): a fleet replaced over half an
/// hour would otherwise wake the controller, and step the simulation, every
/// second of the day for one claim at a time. Checked up to a minute early,
/// the claims fall into at most ten groups per period.
const CONSISTENCY_BATCH: Duration = Duration::from_secs(60);

const LAUNCH_BACKOFF_MIN: Duration = Duration::from_secs(2);
const LAUNCH_BACKOFF_MAX: Duration = Duration::from_secs(60);

/// Adds the NodeClaim conditions not written yet as `Unknown`, as
/// Karpenter initializes them (`AwaitingReconciliation`), so
/// `kubectl get nodeclaims` shows `READY Unknown` until the node is ready.
/// Whether any was added.
fn awaiting(conds: &mut Vec<crate::api::common::Condition>, now: crate::clock::Timestamp) -> bool {
    let mut added = false;
    for t in [
        conditions::LAUNCHED,
        conditions::REGISTERED,
        conditions::INITIALIZED,
        conditions::READY,
    ] {
        if !conds.iter().any(|c| c.type_ == t) {
            added |= set_condition_status(
                conds,
                t,
                ConditionStatus::Unknown,
                "AwaitingReconciliation",
                "object is awaiting reconciliation",
                now,
            );
        }
    }
    added
}

/// A launch to send: the NodeClaim, its class, and the offerings known to
/// be out of capacity.
#[derive(Debug, Clone)]
pub struct LaunchJob {
    pub claim: NodeClaim,
    pub class: EC2NodeClass,
    pub skip: std::collections::BTreeSet<crate::cloud::OfferingKey>,
}

/// A launch and what the cloud answered.
pub type LaunchOutcome = (LaunchJob, Result<Launched, CloudError>);

/// Sends `jobs` to the cloud, at most `concurrency` at a time (each is one
/// CreateFleet call, which the AWS provider may batch with others).
pub async fn send_launches<P: CloudProvider>(
    cloud: &P,
    jobs: Vec<LaunchJob>,
    concurrency: usize,
) -> Vec<LaunchOutcome> {
    use futures::StreamExt;
    futures::stream::iter(jobs)
        .map(|job| async move {
            let result = cloud.create(&job.claim, &job.class, &job.skip).await;
            (job, result)
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await
}

fn name_of(claim: &NodeClaim) -> String {
    format!(
        "NodeClaim/{}",
        claim.metadata.name.as_deref().unwrap_or_default()
    )
}

fn name_of_claim(claim: &NodeClaim) -> String {
    claim.metadata.name.clone().unwrap_or_default()
}

fn elapsed(since: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(since)).unwrap_or_default()
}

/// Karpenter's node shape check: an initialized NodeClaim whose Node has
/// less than 90% of the capacity it was launched to have of any resource
/// it requested. Each issue in Karpenter's words.
fn shape_issues(claim: &NodeClaim, node: &Node) -> Vec<String> {
    if claim.metadata.deletion_timestamp.is_some()
        || !is_true(
            claim.status.as_ref().and_then(|s| s.conditions.as_ref()),
            conditions::INITIALIZED,
        )
    {
        return Vec::new();
    }
    // In thousandths, for every resource: only ratios are compared.
    let parse = |q: Option<&Quantity>| {
        q.and_then(|q| crate::model::quantity::parse_scaled(&q.0, 3).ok())
            .unwrap_or(0) as f64
    };
    let expected = claim.status.as_ref().and_then(|s| s.capacity.as_ref());
    let found = node.status.as_ref().and_then(|s| s.capacity.as_ref());
    let requests = claim
        .spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref());
    let mut issues = Vec::new();
    for (resource, requested) in requests.into_iter().flatten() {
        let want = expected.and_then(|e| e.get(resource));
        let got = found.and_then(|f| f.get(resource));
        let (w, g) = (parse(want), parse(got));
        if parse(Some(requested)) == 0.0 || w == 0.0 {
            continue;
        }
        let pct = g / w;
        if pct < 0.90 {
            issues.push(format!(
                "expected {} of resource {resource}, but found {} ({:.1}% of expected)",
                want.map_or("0", |q| q.0.as_str()),
                got.map_or("0", |q| q.0.as_str()),
                pct * 100.0
            ));
        }
    }
    issues
}

fn node_taint(t: &Taint) -> NodeTaint {
    NodeTaint {
        key: t.key.clone(),
        value: t.value.clone(),
        effect: t.effect.as_str().to_string(),
        time_added: None,
    }
}

/// What a lifecycle pass writes for a NodeClaim whose Node joined or became
/// ready: the Node, then (once the Node is written) the claim's status.
struct Adoption {
    step: Step,
    /// The claim and Node as the pass read them, for what is recorded.
    claim: Arc<NodeClaim>,
    node: Arc<Node>,
    node_update: Node,
    claim_update: NodeClaim,
}

#[derive(Clone, Copy)]
enum Step {
    Register,
    Initialize,
}

/// Which of a claim's two writes the API server refused: the object (an
/// [`Adoption`]'s Node, a [`LaunchRecord`]'s labels) or then the status.
enum Refused {
    Object(crate::cluster::ApiError),
    /// The claim's status, and the claim as Events name it.
    Status(String, crate::cluster::ApiError),
}

/// The status write that follows a claim's first write.
async fn write_status<C: Cluster>(
    cluster: &C,
    claim: NodeClaim,
) -> Result<Arc<NodeClaim>, Refused> {
    let object = super::status::event_object(&claim);
    cluster
        .replace_status(claim)
        .await
        .map_err(|e| Refused::Status(object, e))
}

impl Adoption {
    /// Adopts the node that joined for a NodeClaim: the NodeClaim's labels
    /// and taints go onto the node, the unregistered taint comes off, and
    /// the node gets the termination finalizer and the NodeClaim as owner;
    /// the claim is then `Registered` with the node's name.
    fn register(claim: &Arc<NodeClaim>, node: &Arc<Node>, now: Timestamp) -> Adoption {
        let mut n = (**node).clone();
        let labels = n.metadata.labels.get_or_insert_with(BTreeMap::new);
        for (k, v) in claim.metadata.labels.iter().flatten() {
            labels.entry(k.clone()).or_insert_with(|| v.clone());
        }
        labels.insert(LABEL_REGISTERED.to_string(), "true".to_string());
        let spec = n.spec.get_or_insert_with(Default::default);
        let taints = spec.taints.get_or_insert_with(Vec::new);
        taints.retain(|t| t.key != TAINT_UNREGISTERED);
        let wanted = claim
            .spec
            .taints
            .iter()
            .flatten()
            .chain(claim.spec.startup_taints.iter().flatten());
        for t in wanted {
            let t = node_taint(t);
            if !taints
                .iter()
                .any(|x| x.key == t.key && x.effect == t.effect)
            {
                taints.push(t);
            }
        }
        let finalizers = n.metadata.finalizers.get_or_insert_with(Vec::new);
        if !finalizers.iter().any(|f| f == FINALIZER_TERMINATION) {
            finalizers.push(FINALIZER_TERMINATION.to_string());
        }
        if let Some(uid) = claim.metadata.uid.clone() {
            let owners = n.metadata.owner_references.get_or_insert_with(Vec::new);
            if !owners.iter().any(|o| o.uid == uid) {
                owners.push(OwnerReference {
                    api_version: NodeClaim::api_version(&()).into_owned(),
                    kind: NodeClaim::kind(&()).into_owned(),
                    name: claim.metadata.name.clone().unwrap_or_default(),
                    uid,
                    block_owner_deletion: Some(true),
                    controller: None,
                });
            }
        }
        let mut updated = (**claim).clone();
        let status = updated.status.get_or_insert_with(Default::default);
        status.node_name.clone_from(&n.metadata.name);
        let conds = updated.conditions_mut();
        set_condition(conds, conditions::REGISTERED, true, "Registered", "", now);
        Adoption {
            step: Step::Register,
            claim: Arc::clone(claim),
            node: Arc::clone(node),
            node_update: n,
            claim_update: updated,
        }
    }

    /// Initialises a registered NodeClaim once its node is Ready, its
    /// startup taints and the taints of a node still starting
    /// ([`is_known_ephemeral`](crate::model::taints::is_known_ephemeral):
    /// the node lifecycle controller lifts `not-ready` only after it sees
    /// the node Ready) are gone, and its requested resources are
    /// registered: the node is labelled initialised, then the claim
    /// `Initialized` and `Ready`. `None` until then: an initialised node is
    /// planned on with the taints it has.
    fn initialize(claim: &Arc<NodeClaim>, node: &Arc<Node>, now: Timestamp) -> Option<Adoption> {
        let node_ready = crate::api::node::is_ready(node);
        let node_taints = node.spec.as_ref().and_then(|s| s.taints.as_deref());
        let node_taints = node_taints.unwrap_or_default();
        let startup_pending = claim.spec.startup_taints.iter().flatten().any(|t| {
            node_taints
                .iter()
                .any(|n| n.key == t.key && n.effect == t.effect.as_str())
        }) || node_taints
            .iter()
            .any(|n| crate::model::taints::is_known_ephemeral(&n.key, &n.effect));
        let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
        let missing = claim
            .spec
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .into_iter()
            .flatten()
            .any(|(k, _)| !allocatable.is_some_and(|a| a.contains_key(k)));
        if !node_ready || startup_pending || missing {
            return None;
        }
        let mut n = (**node).clone();
        n.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(LABEL_INITIALIZED.to_string(), "true".to_string());
        let mut updated = (**claim).clone();
        let conds = updated.conditions_mut();
        set_condition(conds, conditions::INITIALIZED, true, "Initialized", "", now);
        set_condition(conds, conditions::READY, true, "Ready", "", now);
        Some(Adoption {
            step: Step::Initialize,
            claim: Arc::clone(claim),
            node: Arc::clone(node),
            node_update: n,
            claim_update: updated,
        })
    }
}

/// What is written for an instance launched for a NodeClaim: the claim's
/// labels, then, on the version stored, its status.
pub(super) struct LaunchRecord {
    /// The claim as the pass read it.
    claim: NodeClaim,
    instance: Instance,
    labelled: NodeClaim,
    status: LaunchedStatus,
}

/// What a launch sets in a NodeClaim's status.
struct LaunchedStatus {
    provider_id: String,
    image_id: Option<String>,
    /// Capacity and allocatable of the instance type, when it is known.
    listed: Option<(Quantities, Quantities)>,
}

type Quantities = BTreeMap<String, Quantity>;

impl LaunchedStatus {
    fn apply(self, claim: &mut NodeClaim, now: Timestamp) {
        let status = claim.status.get_or_insert_with(Default::default);
        status.provider_id = Some(self.provider_id);
        status.image_id = self.image_id;
        if let Some((capacity, allocatable)) = self.listed {
            status.capacity = Some(capacity);
            status.allocatable = Some(allocatable);
        }
        let conds = claim.conditions_mut();
        set_condition(conds, conditions::LAUNCHED, true, "Launched", "", now);
        awaiting(conds, now);
    }
}

/// A registered, initialized NodeClaim as the last lifecycle pass left it,
/// its consistency check not due: its Node, and when it was last checked.
/// While the claim is the same object and its Node is in the node list,
/// nothing a pass reads of it has changed but the time, so a pass reads
/// nothing of it until the check comes due.
pub(super) struct Settled {
    /// Held, so its address names this version alone.
    _claim: Arc<NodeClaim>,
    node: Arc<Node>,
    scanned: Timestamp,
}

/// The settled NodeClaims, by address.
pub(super) type SettledClaims = HashMap<usize, Settled, foldhash::fast::RandomState>;

impl<C: Cluster, P: CloudProvider> Controller<C, P> {
    /// Launch, registration, initialisation and liveness of every NodeClaim
    /// that is not being deleted. Returns when it next needs to run.
    pub(super) async fn reconcile_lifecycle(&mut self) -> Duration {
        let now = self.clock.now();
        let nodes = self.node_index();
        let mut kept_settled = std::mem::take(&mut self.settled);
        let mut settled = SettledClaims::default();
        let mut next = self.settings.resync;
        let mut jobs = Vec::new();
        let mut adoptions = Vec::new();
        let early = if self
            .consistency_scanned
            .values()
            .any(|&t| elapsed(t, now) >= CONSISTENCY_SCAN)
        {
            CONSISTENCY_BATCH
        } else {
            Duration::ZERO
        };
        for claim in self.cluster.list::<NodeClaim>() {
            let at = Arc::as_ptr(&claim) as usize;
            if let Some(s) = kept_settled.remove(&at)
                && nodes.holds(&s.node)
                && elapsed(s.scanned, now) + early < CONSISTENCY_SCAN
            {
                // What `check_consistency` answers for it, not due.
                debug_assert_eq!(
                    claim
                        .metadata
                        .uid
                        .as_deref()
                        .and_then(|u| self.consistency_scanned.get(u)),
                    Some(&s.scanned)
                );
                next = next.min(CONSISTENCY_SCAN - elapsed(s.scanned, now));
                settled.insert(at, s);
                continue;
            }
            if claim.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let status = claim.status.as_ref();
            let provider_id = status.and_then(|s| s.provider_id.as_deref());
            let conds = status.and_then(|s| s.conditions.as_ref());
            let Some(provider_id) = provider_id else {
                // A launch that has kept failing is given up on, so its pods
                // get another claim (Karpenter's launch timeout).
                let failing = crate::api::common::find_condition(
                    conds.map(Vec::as_slice),
                    conditions::LAUNCHED,
                )
                .filter(|c| c.status != ConditionStatus::True)
                .map(|c| c.last_transition_time.0);
                if let Some(since) = failing
                    && elapsed(since, now) >= LAUNCH_TIMEOUT
                {
                    let why = find_condition(conds.map(Vec::as_slice), conditions::LAUNCHED)
                        .and_then(|c| c.message.clone())
                        .unwrap_or_default();
                    let deleted = self
                        .delete_claim(
                            &claim,
                            "LaunchTimeout",
                            format!("not launched within {}s: {why}", LAUNCH_TIMEOUT.as_secs()),
                        )
                        .await;
                    if deleted {
                        self.launch_failures.remove(&name_of_claim(&claim));
                        self.metrics.disrupted(&claim, "launch_timeout");
                        if let Some(pool) = claim.nodepool_name() {
                            self.registration_failed(pool, "LaunchTimeout", &why);
                        }
                    }
                    continue;
                }
                if let Some(&(_, retry_at)) = self.launch_failures.get(&name_of_claim(&claim))
                    && retry_at > now
                {
                    next = next.min(elapsed(now, retry_at));
                    continue;
                }
                if let Some(since) = failing {
                    next = next.min(LAUNCH_TIMEOUT.saturating_sub(elapsed(since, now)));
                }
                match self.prepare_launch(&claim).await {
                    Some(job) => jobs.push(job),
                    // Not sent (the instances could not be listed): due
                    // again after its backoff.
                    None => {
                        if let Some(&(_, retry_at)) =
                            self.launch_failures.get(&name_of_claim(&claim))
                            && retry_at > now
                        {
                            next = next.min(elapsed(now, retry_at));
                        }
                    }
                }
                continue;
            };
            match nodes.with_provider_id(provider_id) {
                None => {
                    let launched = crate::api::common::find_condition(
                        conds.map(Vec::as_slice),
                        conditions::LAUNCHED,
                    )
                    .map(|c| c.last_transition_time.0)
                    .unwrap_or(now);
                    let waited = elapsed(launched, now);
                    if waited >= self.settings.registration_ttl {
                        let deleted = self
                            .delete_claim(
                                &claim,
                                "RegistrationTimeout",
                                format!(
                                    "no node registered within {}s of launch",
                                    waited.as_secs()
                                ),
                            )
                            .await;
                        if deleted {
                            self.metrics.disrupted(&claim, "registration_timeout");
                            if let Some(pool) = claim.nodepool_name() {
                                self.registration_failed(
                                    pool,
                                    "RegistrationFailed",
                                    "Failed to register node",
                                );
                            }
                        }
                    } else {
                        next = next.min(self.settings.registration_ttl - waited);
                    }
                }
                Some(node) if !is_true(conds, conditions::REGISTERED) => {
                    adoptions.push(Adoption::register(&claim, node, now));
                    next = Duration::ZERO;
                }
                Some(node) if !is_true(conds, conditions::INITIALIZED) => {
                    match Adoption::initialize(&claim, node, now) {
                        Some(adoption) => adoptions.push(adoption),
                        None => {
                            let due = self.check_consistency(&claim, node, now, early).await;
                            next = next.min(due);
                        }
                    }
                }
                Some(node) => {
                    next = next.min(self.check_consistency(&claim, node, now, early).await);
                    let scanned = claim
                        .metadata
                        .uid
                        .as_deref()
                        .and_then(|u| self.consistency_scanned.get(u));
                    if let Some(&scanned) = scanned {
                        let settle = Settled {
                            _claim: Arc::clone(&claim),
                            node: Arc::clone(node),
                            scanned,
                        };
                        settled.insert(at, settle);
                    }
                }
            }
        }
        self.settled = settled;
        self.adopt(adoptions).await;
        // A claim being deleted is checked no more: its last scan would
        // make every pass's checks early. (Against the list it was pruned
        // to, nothing is left to prune: the scans since were of claims
        // it holds, not being deleted.)
        let claims = self.cluster.list::<NodeClaim>();
        if !crate::cluster::Listed::ptr_eq(&claims, &self.consistency_pruned) {
            let uids: std::collections::HashSet<&str, foldhash::fast::RandomState> = claims
                .iter()
                .filter(|c| c.metadata.deletion_timestamp.is_none())
                .filter_map(|c| c.metadata.uid.as_deref())
                .collect();
            self.consistency_scanned
                .retain(|uid, _| uids.contains(uid.as_str()));
            self.consistency_pruned = claims;
        }
        next.min(self.launch_all(jobs).await)
    }

    /// What a NodeClaim without an instance needs: a launch to send, or
    /// nothing (its class is missing, or an instance already launched for
    /// it was recorded instead).
    async fn prepare_launch(&mut self, claim: &NodeClaim) -> Option<LaunchJob> {
        let now = self.clock.now();
        let class_name = claim.spec.node_class_ref.name.clone();
        let Some(class) = self
            .cluster
            .get::<EC2NodeClass>(&ObjectKey::cluster(&class_name))
        else {
            self.launch_failed(
                claim,
                "NodeClassNotFound",
                &format!("EC2NodeClass {class_name:?} not found"),
            )
            .await;
            return None;
        };
        let unrecorded = match self.unrecorded_launch(claim).await {
            Ok(found) => found,
            Err(e) => {
                // Launching now could launch it twice: tried again after
                // the backoff.
                let reason = match &e {
                    CloudError::Throttled { .. } => "Throttled",
                    _ => "LaunchFailed",
                };
                self.launch_failed(
                    claim,
                    reason,
                    &format!(
                        "cannot tell whether an instance was already launched for it (listing instances: {e}); launching later"
                    ),
                )
                .await;
                return None;
            }
        };
        if let Some(instance) = unrecorded {
            self.event(
                name_of(claim),
                "LaunchRecovered",
                format!(
                    "instance {} was launched for this NodeClaim before its status was written; recording it instead of launching again",
                    instance.id
                ),
            );
            let record = self.launch_record(claim, &class, instance).await;
            self.record_launches(vec![record]).await;
            return None;
        }
        Some(LaunchJob {
            claim: claim.clone(),
            class: (*class).clone(),
            skip: self.unavailable.active(now),
        })
    }

    /// Sends `jobs` now, or leaves them for the runtime to send outside
    /// the controller's lock ([`Controller::take_launches`]); returns when
    /// a failed one is due again.
    async fn launch_all(&mut self, jobs: Vec<LaunchJob>) -> Duration {
        if jobs.is_empty() {
            return Duration::MAX;
        }
        if self.defer_launches {
            self.deferred_launches.extend(jobs);
            return Duration::MAX;
        }
        let outcomes =
            send_launches(self.cloud.as_ref(), jobs, self.settings.launch_concurrency).await;
        self.finish_launches(outcomes).await
    }

    /// The launches a pass left to send (with `defer_launches`).
    pub fn take_launches(&mut self) -> Vec<LaunchJob> {
        std::mem::take(&mut self.deferred_launches)
    }

    /// Records what the cloud answered to launches; returns when a failed
    /// one is due again.
    pub async fn finish_launches(&mut self, mut outcomes: Vec<LaunchOutcome>) -> Duration {
        // In the order of the claims, whatever order the answers came in.
        outcomes.sort_by(|a, b| a.0.claim.metadata.name.cmp(&b.0.claim.metadata.name));
        let mut records = Vec::new();
        let mut claims = Vec::with_capacity(outcomes.len());
        for (job, result) in outcomes {
            records.extend(self.finish_launch(&job, result).await);
            claims.push(name_of_claim(&job.claim));
        }
        self.record_launches(records).await;
        let now = self.clock.now();
        claims
            .iter()
            .filter_map(|c| self.launch_failures.get(c))
            .map(|&(_, retry_at)| elapsed(now, retry_at))
            .min()
            .unwrap_or(Duration::MAX)
    }

    /// What a launch's answer leaves: a record to write when an instance
    /// launched for a claim that is still there.
    async fn finish_launch(
        &mut self,
        job: &LaunchJob,
        result: Result<Launched, CloudError>,
    ) -> Option<LaunchRecord> {
        let (claim, class) = (&job.claim, &job.class);
        // Deleted while its launch was in flight (the interruption handler
        // or a user does not wait for a pass): the instance goes too.
        let current = self
            .cluster
            .get::<NodeClaim>(&ObjectKey::cluster(name_of_claim(claim)));
        if let Ok(Launched { instance, .. }) = &result
            && current.is_none_or(|c| c.metadata.deletion_timestamp.is_some())
        {
            if let Err(e) = self.cloud.delete(&instance.provider_id).await {
                self.event(
                    name_of(claim),
                    "LaunchNotRecorded",
                    format!(
                        "the NodeClaim was deleted while {} launched, and terminating it failed: {e}",
                        instance.id
                    ),
                );
            }
            return None;
        }
        match result {
            Ok(Launched { instance, refused }) => {
                if !refused.is_empty() {
                    let tried = self.mark_unavailable(refused);
                    self.event(
                        name_of(claim),
                        "InsufficientCapacity",
                        format!(
                            "no capacity for {}; launched from the next cheapest offering of the claim",
                            tried.join(", ")
                        ),
                    );
                }
                return Some(self.launch_record(claim, class, instance).await);
            }
            Err(CloudError::InsufficientCapacity { offerings }) => {
                let tried = self.mark_unavailable(offerings);
                let deleted = self
                    .delete_claim(
                        claim,
                        "InsufficientCapacity",
                        format!(
                            "no capacity for {}; retrying with other offerings",
                            tried.join(", ")
                        ),
                    )
                    .await;
                if deleted {
                    self.metrics.disrupted(claim, "insufficient_capacity");
                }
            }
            Err(CloudError::NodeClassNotReady { name, reason }) => {
                // As Karpenter: a class that is not ready deletes the claim;
                // the provisioner skips the pool until the class is ready.
                let deleted = self
                    .delete_claim(
                        claim,
                        "NodeClassNotReady",
                        format!("EC2NodeClass {name:?} is not ready: {reason}"),
                    )
                    .await;
                if deleted {
                    self.launch_failures.remove(&name_of_claim(claim));
                    self.metrics.disrupted(claim, "nodeclass_not_ready");
                }
            }
            Err(e) => {
                self.event(name_of(claim), "LaunchFailed", e.to_string());
                let reason = match &e {
                    CloudError::AccessDenied { .. } => "AccessDenied",
                    CloudError::InvalidRequest(_) => "InvalidRequest",
                    CloudError::Throttled { .. } => "Throttled",
                    _ => "LaunchFailed",
                };
                self.launch_failed(claim, reason, &e.to_string()).await;
            }
        }
        None
    }

    /// A launch that failed and will be tried again after a backoff,
    /// until [`LAUNCH_TIMEOUT`]: `Launched` turns `Unknown` with the reason
    /// (its transition time, the first failure, starts the timeout).
    async fn launch_failed(&mut self, claim: &NodeClaim, reason: &str, message: &str) {
        let now = self.clock.now();
        let entry = self
            .launch_failures
            .entry(name_of_claim(claim))
            .or_insert((0, now));
        entry.0 += 1;
        let backoff = LAUNCH_BACKOFF_MIN
            .saturating_mul(1 << (entry.0 - 1).min(16))
            .min(LAUNCH_BACKOFF_MAX);
        entry.1 = now.checked_add(backoff).unwrap_or(now);
        let mut updated = claim.clone();
        let conds = updated.conditions_mut();
        let changed = set_condition_status(
            conds,
            conditions::LAUNCHED,
            ConditionStatus::Unknown,
            reason,
            message,
            now,
        );
        if awaiting(conds, now) || changed {
            let _ = self.record_status(updated).await;
        }
    }

    /// An instance launched for `claim` that its status does not record yet:
    /// left by a status write that failed, or by a controller that stopped
    /// between the launch and the write. The provider's instances are
    /// listed once per controller start (and whenever the list failed);
    /// afterwards failed writes are remembered as they happen. An error
    /// when the list fails: whether the claim has an instance is unknown.
    async fn unrecorded_launch(
        &mut self,
        claim: &NodeClaim,
    ) -> Result<Option<Instance>, CloudError> {
        if self.unrecorded.is_none() {
            let instances = self.cloud.list().await.inspect_err(|e| {
                tracing::warn!(error = %e, "listing instances before a launch");
            })?;
            let claims = self.cluster.list::<NodeClaim>();
            let instances = instances.into_iter().map(Arc::unwrap_or_clone).collect();
            self.unrecorded = Some(unrecorded_instances(instances, &claims));
        }
        Ok(self
            .unrecorded
            .as_mut()
            .and_then(|u| u.remove(&name_of_claim(claim))))
    }

    /// Marks offerings that had no capacity unavailable for the offering TTL;
    /// returns them as `type/zone/capacity-type` for messages.
    fn mark_unavailable(&mut self, offerings: Vec<crate::cloud::OfferingKey>) -> Vec<String> {
        let now = self.clock.now();
        let until = now
            .checked_add(self.settings.unavailable_offering_ttl)
            .unwrap_or(now);
        let tried = offerings
            .iter()
            .map(|o| format!("{}/{}/{}", o.instance_type, o.zone, o.capacity_type))
            .collect();
        for o in offerings {
            self.unavailable.mark(o, until);
        }
        tried
    }

    /// What is written onto a NodeClaim for the instance launched for it:
    /// its labels, then its status (provider id, capacity, allocatable,
    /// Launched).
    async fn launch_record(
        &mut self,
        claim: &NodeClaim,
        class: &EC2NodeClass,
        instance: Instance,
    ) -> LaunchRecord {
        let mut labelled = claim.clone();
        let labels = labelled.metadata.labels.get_or_insert_with(BTreeMap::new);
        for (k, v) in instance.labels.iter() {
            labels.insert(k.clone(), v.clone());
        }
        labels.insert(LABEL_INSTANCE_TYPE.into(), instance.instance_type.clone());
        labels.insert(LABEL_ZONE.into(), instance.zone.clone());
        labels.insert(LABEL_CAPACITY_TYPE.into(), instance.capacity_type.clone());
        let pool = claim
            .nodepool_name()
            .and_then(|p| self.cluster.get::<NodePool>(&ObjectKey::cluster(p)));
        let mut listed = None;
        if let Some(pool) = pool
            && let Ok(types) = self.cloud.instance_types(&pool, class).await
            && let Some(it) = types.iter().find(|t| t.name == instance.instance_type)
        {
            // EFA is listed only when the instance has EFA interfaces
            // (Karpenter's rule): a plain interface gives pods none.
            let list = |r: &crate::model::Resources| {
                let mut r = r.clone();
                if !instance.efa_attached {
                    r.remove(crate::cloud::aws::launch::EFA);
                }
                r.to_quantities()
            };
            listed = Some((list(&it.capacity), list(&it.allocatable)));
        }
        LaunchRecord {
            claim: claim.clone(),
            status: LaunchedStatus {
                provider_id: instance.provider_id.clone(),
                image_id: instance.image_id.clone(),
                listed,
            },
            labelled,
            instance,
        }
    }

    /// Writes launch records, at most `Settings::write_concurrency` at a
    /// time, and records their answers in the order given. A record not
    /// written is remembered: its instance exists, so the next pass records
    /// it, or the garbage collector terminates it if the claim is gone.
    async fn record_launches(&mut self, records: Vec<LaunchRecord>) {
        if records.is_empty() {
            return;
        }
        let now = self.clock.now();
        let cluster = Arc::clone(&self.cluster);
        let (done, writes): (Vec<_>, Vec<_>) = records
            .into_iter()
            .map(|r| ((r.claim, r.instance), (r.labelled, r.status)))
            .unzip();
        let writes = writes.into_iter().map(|(labelled, status)| {
            let cluster = &cluster;
            async move {
                let stored = cluster.replace(labelled).await.map_err(Refused::Object)?;
                let mut updated = (*stored).clone();
                status.apply(&mut updated, now);
                write_status(cluster.as_ref(), updated).await
            }
        });
        let answers = super::writes::concurrently(writes, self.settings.write_concurrency).await;
        for ((claim, instance), answer) in done.into_iter().zip(answers) {
            match answer {
                Err(Refused::Object(e)) => {
                    self.event(name_of(&claim), "LaunchNotRecorded", e.to_string());
                    self.remember_unrecorded(&claim, instance);
                }
                Err(Refused::Status(object, e)) => {
                    self.status_refused(object, &e);
                    self.remember_unrecorded(&claim, instance);
                }
                Ok(_) => {
                    self.launch_failures.remove(&name_of_claim(&claim));
                    self.event(
                        name_of(&claim),
                        "Launched",
                        format!(
                            "launched {} ({}) in {} as {} at ${:.4}/h",
                            instance.instance_type,
                            instance.capacity_type,
                            instance.zone,
                            instance.id,
                            instance.price
                        ),
                    );
                }
            }
        }
    }

    fn remember_unrecorded(&mut self, claim: &NodeClaim, instance: Instance) {
        if let Some(unrecorded) = self.unrecorded.as_mut() {
            unrecorded.insert(name_of_claim(claim), instance);
        }
    }

    /// Sends the registrations and initialisations a lifecycle pass
    /// decided ([`Adoption`]), at most `Settings::write_concurrency` at a
    /// time, and records their answers in the order of the claims.
    async fn adopt(&mut self, adoptions: Vec<Adoption>) {
        if adoptions.is_empty() {
            return;
        }
        let cluster = Arc::clone(&self.cluster);
        let (done, writes): (Vec<_>, Vec<_>) = adoptions
            .into_iter()
            .map(|a| ((a.step, a.claim, a.node), (a.node_update, a.claim_update)))
            .unzip();
        let writes = writes.into_iter().map(|(node, claim)| {
            let cluster = &cluster;
            async move {
                cluster.replace(node).await.map_err(Refused::Object)?;
                write_status(cluster.as_ref(), claim).await
            }
        });
        let answers = super::writes::concurrently(writes, self.settings.write_concurrency).await;
        for ((step, claim, node), answer) in done.into_iter().zip(answers) {
            match (step, answer) {
                // The Node changed since the pass read it (its kubelet's
                // status, another controller's labels): the next pass
                // reads the new version and writes again, as the
                // reference requeues on a conflict.
                (_, Err(Refused::Object(e))) if e.is_conflict() => {
                    tracing::debug!(object = %name_of(&claim), error = %e, "node written again next pass")
                }
                (Step::Register, Err(Refused::Object(e))) => {
                    self.event(name_of(&claim), "RegistrationFailed", e.to_string())
                }
                (Step::Initialize, Err(Refused::Object(e))) => {
                    self.event(name_of(&claim), "InitializationFailed", e.to_string())
                }
                (_, Err(Refused::Status(object, e))) => self.status_refused(object, &e),
                (Step::Register, Ok(_)) => {
                    // The claim's label, else the node's.
                    let label = |k: &str| match crate::api::label_or_empty(&claim.metadata, k) {
                        "" => crate::api::label_or_empty(&node.metadata, k),
                        v => v,
                    };
                    self.metrics
                        .nodes_created
                        .with_label_values(&[label(crate::api::LABEL_NODEPOOL), label(LABEL_ZONE)])
                        .inc();
                    let node_name = node.metadata.name.as_deref().unwrap_or_default();
                    let message = format!("node {node_name} registered");
                    self.event(name_of(&claim), "Registered", message);
                }
                (Step::Initialize, Ok(_)) => {
                    self.event(name_of(&claim), "Initialized", "node is ready".into())
                }
            }
        }
    }

    /// Marks a registered NodeClaim initialised once its node is Ready, its
    /// startup taints are gone and its requested resources are registered.
    /// Karpenter's consistency controller: at most every
    /// [`CONSISTENCY_SCAN`], a registered NodeClaim's Node is checked
    /// against what was launched ([`shape_issues`]); each issue is a
    /// `FailedConsistencyCheck` Event, and `ConsistentStateFound` says
    /// whether any was found. A check due within `early` runs now (see
    /// [`CONSISTENCY_BATCH`]). Returns when the check is next due.
    async fn check_consistency(
        &mut self,
        claim: &NodeClaim,
        node: &Node,
        now: Timestamp,
        early: Duration,
    ) -> Duration {
        let Some(uid) = claim.metadata.uid.as_deref() else {
            return Duration::MAX;
        };
        // Scanned again once the period has passed, as the reference's
        // `lastScanned` entries expire: a claim scanned long ago is not
        // due "now" forever.
        if let Some(&scanned) = self.consistency_scanned.get(uid)
            && elapsed(scanned, now) + early < CONSISTENCY_SCAN
        {
            return CONSISTENCY_SCAN - elapsed(scanned, now);
        }
        self.consistency_scanned.insert(uid.to_string(), now);
        let issues = shape_issues(claim, node);
        for issue in &issues {
            self.event(name_of(claim), "FailedConsistencyCheck", issue.clone());
        }
        let consistent = is_true(
            claim.status.as_ref().and_then(|s| s.conditions.as_ref()),
            conditions::CONSISTENT_STATE_FOUND,
        );
        if issues.is_empty() && consistent {
            // Most scans: nothing to write, so nothing to copy.
            return CONSISTENCY_SCAN;
        }
        let mut updated = claim.clone();
        let conds = updated.conditions_mut();
        let changed = if !issues.is_empty() {
            set_condition(
                conds,
                conditions::CONSISTENT_STATE_FOUND,
                false,
                "ConsistencyCheckFailed",
                "Consistency Check Failed",
                now,
            )
        } else {
            !consistent
                && set_condition(
                    conds,
                    conditions::CONSISTENT_STATE_FOUND,
                    true,
                    conditions::CONSISTENT_STATE_FOUND,
                    "",
                    now,
                )
        };
        if changed {
            // Checked again at the next scan if refused.
            let _ = self.record_status(updated).await;
        }
        CONSISTENCY_SCAN
    }

    /// Deletes a NodeClaim (termination then releases its instance and
    /// node); whether this call deleted it.
    pub(super) async fn delete_claim(
        &mut self,
        claim: &NodeClaim,
        reason: &str,
        message: String,
    ) -> bool {
        let key = ObjectKey::cluster(claim.metadata.name.clone().unwrap_or_default());
        match self.cluster.delete::<NodeClaim>(&key).await {
            Ok(_) => {
                self.event(name_of(claim), reason, message);
                true
            }
            Err(e) if e.is_not_found() => false,
            Err(e) => {
                self.event(name_of(claim), "DeleteFailed", e.to_string());
                false
            }
        }
    }
}

/// The live instances launched for NodeClaims that have not recorded
/// them, by claim: those tagged with their claim, and those of a batched
/// CreateFleet whose per-instance tags were never written, shared out in
/// order among the batch's claims that recorded none (all claims of a batch
/// asked for the same launch, so any of its instances serves any of them).
fn unrecorded_instances(
    instances: Vec<Instance>,
    claims: &[std::sync::Arc<NodeClaim>],
) -> std::collections::HashMap<String, Instance> {
    let recorded: std::collections::HashSet<&str> = claims
        .iter()
        .filter_map(|c| c.status.as_ref()?.provider_id.as_deref())
        .collect();
    let waiting: std::collections::HashSet<&str> = claims
        .iter()
        .filter(|c| c.status.as_ref().is_none_or(|s| s.provider_id.is_none()))
        .filter_map(|c| c.metadata.name.as_deref())
        .collect();
    let live = instances.into_iter().filter(|i| {
        !recorded.contains(i.provider_id.as_str())
            && !matches!(
                i.state,
                InstanceState::ShuttingDown | InstanceState::Terminated
            )
    });
    let (tagged, mut batched): (Vec<Instance>, Vec<Instance>) =
        live.partition(|i| !i.nodeclaim.is_empty());
    let mut out: std::collections::HashMap<String, Instance> = tagged
        .into_iter()
        .map(|i| (i.nodeclaim.clone(), i))
        .collect();
    batched.retain(|i| !i.launch_batch.is_empty());
    batched.sort_by(|a, b| (&a.launch_batch, &a.id).cmp(&(&b.launch_batch, &b.id)));
    for instance in batched {
        let claim = instance
            .launch_batch
            .iter()
            .find(|c| waiting.contains(c.as_str()) && !out.contains_key(c.as_str()))
            .cloned();
        if let Some(claim) = claim {
            out.insert(claim, instance);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::World;

    fn claim_and_node(
        expected_memory: &str,
        node_memory: &str,
        initialized: bool,
    ) -> (NodeClaim, Node) {
        let claim: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c1"},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [],
                "resources": {"requests": {"cpu": "1", "memory": "64Gi"}},
            },
            "status": {
                "capacity": {"cpu": "16", "memory": expected_memory},
                "conditions": [{
                    "type": "Initialized", "status": if initialized { "True" } else { "Unknown" },
                    "reason": "Initialized", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z",
                }],
            },
        }))
        .unwrap();
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1"},
            "status": {"capacity": {"cpu": "16", "memory": node_memory}},
        }))
        .unwrap();
        (claim, node)
    }

    /// NodeClaim `name`, launched for 128Gi and initialized, registered
    /// at the epoch on Node `node-{name}`, which has `node_memory`.
    fn registered_claim_and_node(name: &str, node_memory: &str) -> (NodeClaim, Node) {
        let (mut claim, mut node) = claim_and_node("128Gi", node_memory, true);
        let provider = format!("aws:///us-east-1a/i-{name}");
        claim.metadata.name = Some(name.into());
        claim.metadata.uid = Some(format!("uid-{name}"));
        let status = claim.status.get_or_insert_with(Default::default);
        status.provider_id = Some(provider.clone());
        status.node_name = Some(format!("node-{name}"));
        set_condition(
            claim.conditions_mut(),
            conditions::REGISTERED,
            true,
            "Registered",
            "",
            Timestamp::UNIX_EPOCH,
        );
        node.metadata.name = Some(format!("node-{name}"));
        node.spec.get_or_insert_with(Default::default).provider_id = Some(provider);
        (claim, node)
    }

    /// consistency/suite_test.go: "should detect issues that launch with
    /// much fewer resources than expected".
    #[test]
    fn a_node_with_much_less_than_launched_for_is_an_issue_in_karpenters_words() {
        let (claim, node) = claim_and_node("128Gi", "64Gi", true);
        assert_eq!(
            shape_issues(&claim, &node),
            ["expected 128Gi of resource memory, but found 64Gi (50.0% of expected)"]
        );
        // Within 10%, and before initialization, nothing is wrong.
        let (claim, node) = claim_and_node("128Gi", "120Gi", true);
        assert!(shape_issues(&claim, &node).is_empty());
        let (claim, node) = claim_and_node("128Gi", "64Gi", false);
        assert!(shape_issues(&claim, &node).is_empty());
    }

    /// The consistency check runs again once its period has passed, as the
    /// reference's `lastScanned` entries expire; a claim scanned more than
    /// a period ago was due "now" at every pass, so the simulation stepped
    /// every simulated second and `dovetail controller` ran a pass every
    /// 10 ms (its shortest wait).
    #[test]
    fn the_consistency_check_is_due_again_after_its_period_and_then_runs() {
        use crate::clock::Clock;
        let crate::testing::Env {
            clock,
            mut controller,
            rt,
            ..
        } = World::new().env(super::super::Settings::default());
        let (mut claim, node) = claim_and_node("128Gi", "64Gi", true);
        claim.metadata.uid = Some("uid-1".into());
        let check = |controller: &mut Controller<_, _>| {
            let now = clock.now();
            let next =
                rt.block_on(controller.check_consistency(&claim, &node, now, Duration::ZERO));
            let events = controller
                .drain_events()
                .into_iter()
                .filter(|e| e.reason == "FailedConsistencyCheck")
                .count();
            (next, events)
        };
        assert_eq!(check(&mut controller), (CONSISTENCY_SCAN, 1));
        clock.advance(Duration::from_secs(4 * 60)).unwrap();
        assert_eq!(check(&mut controller), (Duration::from_secs(6 * 60), 0));
        clock.advance(Duration::from_secs(6 * 60)).unwrap();
        assert_eq!(
            check(&mut controller),
            (CONSISTENCY_SCAN, 1),
            "scanned again"
        );
        clock.advance(Duration::from_secs(25 * 60)).unwrap();
        assert_eq!(
            check(&mut controller),
            (CONSISTENCY_SCAN, 1),
            "never due at once"
        );
    }

    /// Checks falling due within a minute of one another run in one pass,
    /// so a fleet launched over half an hour does not wake the controller
    /// every second for one check at a time; one due later waits for its
    /// own time.
    #[test]
    fn consistency_checks_due_within_a_minute_run_together() {
        let world = World::new();
        let rt = crate::testing::runtime();
        // Not woken by the resync: the checks' own times are seen.
        let mut controller = world.controller(super::super::Settings {
            resync: Duration::from_secs(3600),
            ..Default::default()
        });
        let add = |name: &str| {
            let (claim, node) = registered_claim_and_node(name, "64Gi");
            world.cluster.restore(claim).unwrap();
            world.cluster.restore(node).unwrap();
        };
        let mut pass = || {
            let next = rt.block_on(controller.reconcile_lifecycle());
            let mut checked: Vec<String> = controller
                .drain_events()
                .into_iter()
                .filter(|e| e.reason == "FailedConsistencyCheck")
                .map(|e| e.object)
                .collect();
            checked.sort();
            (next, checked)
        };
        let secs = Duration::from_secs;
        add("a");
        assert_eq!(pass(), (CONSISTENCY_SCAN, vec!["NodeClaim/a".to_string()]));
        world.clock.advance(secs(30)).unwrap();
        // A first check runs at once.
        add("b");
        assert_eq!(pass(), (secs(570), vec!["NodeClaim/b".to_string()]));
        world.clock.advance(secs(60)).unwrap();
        add("c");
        assert_eq!(pass(), (secs(510), vec!["NodeClaim/c".to_string()]));
        world.clock.advance(secs(510)).unwrap();
        // b's is due 30 s after a's: checked with it; c's, 90 s after, not.
        assert_eq!(
            pass(),
            (
                secs(90),
                vec!["NodeClaim/a".to_string(), "NodeClaim/b".to_string()]
            )
        );
        world.clock.advance(secs(90)).unwrap();
        assert_eq!(pass(), (secs(510), vec!["NodeClaim/c".to_string()]));
    }

    /// A claim left settled (registered, initialized, its check not due)
    /// is not read while it and its Node stay the same objects, and is
    /// read again as soon as its Node goes: the node's absence is seen at
    /// once, as for a claim never settled.
    #[test]
    fn a_settled_claim_is_read_again_once_its_node_goes() {
        let world = World::new();
        let rt = crate::testing::runtime();
        let mut controller = world.controller(super::super::Settings {
            resync: Duration::from_secs(3600),
            ..Default::default()
        });
        let (mut claim, node) = registered_claim_and_node("a", "128Gi");
        set_condition(
            claim.conditions_mut(),
            conditions::CONSISTENT_STATE_FOUND,
            true,
            "",
            "",
            Timestamp::UNIX_EPOCH,
        );
        world.cluster.restore(claim).unwrap();
        world.cluster.restore(node).unwrap();
        let secs = Duration::from_secs;
        assert_eq!(
            rt.block_on(controller.reconcile_lifecycle()),
            CONSISTENCY_SCAN
        );
        assert_eq!(controller.settled.len(), 1, "checked, consistent: settled");
        world.clock.advance(secs(60)).unwrap();
        assert_eq!(rt.block_on(controller.reconcile_lifecycle()), secs(540));
        assert_eq!(controller.settled.len(), 1);
        // The node goes: the claim waits for a node to register again.
        world
            .cluster
            .delete::<Node>(&ObjectKey::cluster("node-a"))
            .unwrap();
        assert_eq!(
            rt.block_on(controller.reconcile_lifecycle()),
            controller.settings.registration_ttl
        );
        assert!(controller.settled.is_empty());
    }

    #[test]
    fn a_batch_launch_whose_tags_were_never_written_is_shared_among_its_claims() {
        let instance = |id: &str, claim: &str, batch: &[&str]| Instance {
            id: id.into(),
            provider_id: format!("aws:///us-east-1a/{id}"),
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
            capacity_type: "on-demand".into(),
            price: 0.096,
            launched_at: Timestamp::UNIX_EPOCH,
            state: InstanceState::Pending,
            nodeclaim: claim.into(),
            launch_batch: batch.iter().map(|c| c.to_string()).collect(),
            nodepool: "default".into(),
            labels: Default::default(),
            image_id: None,
            subnet_id: None,
            security_group_ids: Vec::new(),
            efa_attached: false,
        };
        let claim = |name: &str, provider: Option<&str>| {
            let mut c = NodeClaim::test(name);
            if let Some(p) = provider {
                c.status.get_or_insert_with(Default::default).provider_id = Some(p.into());
            }
            Arc::new(c)
        };
        // One fleet for a, b, c and d: i-1 was tagged for a before the
        // launching replica died, d recorded i-4 (tagged too late), and
        // i-2 and i-3 carry only the batch.
        let batch = ["a", "b", "c", "d"];
        let instances = vec![
            instance("i-3", "", &batch),
            instance("i-1", "a", &[]),
            instance("i-2", "", &batch),
            instance("i-4", "", &batch),
            instance("i-9", "", &[]),
        ];
        let claims = [
            claim("a", None),
            claim("b", None),
            claim("c", None),
            claim("d", Some("aws:///us-east-1a/i-4")),
        ];
        let found = unrecorded_instances(instances, &claims);
        let ids: BTreeMap<&str, &str> = found
            .iter()
            .map(|(c, i)| (c.as_str(), i.id.as_str()))
            .collect();
        assert_eq!(
            ids,
            BTreeMap::from([("a", "i-1"), ("b", "i-2"), ("c", "i-3")])
        );
    }
}
