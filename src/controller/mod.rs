//! The controller: dovetail's reconcile loops, one implementation for both
//! `dovetail controller` (kube-rs and AWS) and `dovetail simulate` (the
//! in-memory cluster and the simulated EC2).
//!
//! The controller is level-triggered: each [`Controller::reconcile`] reads
//! the cluster from the cache, decides, writes, and returns when it next
//! needs to run. A driver calls it: the simulation after every step of the
//! virtual clock, the in-cluster runtime on watch events and at that time.
//! Time comes only from the injected [`Clock`].
//!
//! `Controller<C: Cluster, P: CloudProvider>` holds the loops' state, and each
//! file adds one concern's methods:
//! - provisioning: `provisioner`, with `static_capacity`, `buffers` and
//!   `overlays` under their feature gates (`features`);
//! - the NodeClaims: `lifecycle`, `repair` and `capacity_type`; termination
//!   (`termination`, `eviction`, `volumes`); garbage collection (`gc`); and
//!   NodePool status (`pool_status`);
//! - disruption: `disruption` (EC2NodeClass status, expiration, the decisions
//!   and their queue);
//! - interruption: `interruption`, the handler its deliverers call;
//! - metrics: `metrics` and `state_metrics`; the in-cluster driver:
//!   `runtime`, `leader` and `http`.
//!
//! [`pass`] is one pass, the same for every driver: `Controller::reconcile`
//! (provisioning, then the NodeClaims' lifecycle and termination, then
//! disruption) holding the controller, then the launches it decided, sent
//! outside the controller's lock at most `Settings::launch_concurrency` at a
//! time (`send_launches`).

mod buffers;
mod capacity_type;
mod claims;
mod disruption;
pub mod eviction;
pub mod features;
mod gc;
pub mod http;
pub mod interruption;
pub mod leader;
mod lifecycle;
pub mod metrics;
mod overlays;
mod pool_status;
mod provisioner;
mod repair;
pub mod runtime;
pub mod state_metrics;
mod static_capacity;
mod status;
mod taints;
mod termination;
pub mod volumes;
mod writes;

pub use disruption::{
    ANNOTATION_DISRUPTION_DECIDED, ANNOTATION_DISRUPTION_REASON, ANNOTATION_REPLACED_BY,
    ANNOTATION_REPLACES, CONDITION_DISRUPTION_REASON, DISRUPTION_POLL, DisruptionState,
};
pub use lifecycle::{LaunchJob, LaunchOutcome, send_launches};
pub use provisioner::{BATCH_IDLE, BATCH_MAX, Batch};

pub(crate) use status::{
    Conditioned, clear_condition, is_true, set_condition, set_condition_status,
};
#[cfg(test)]
pub(crate) use taints::taint_disrupted;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, Timestamp};
use crate::cloud::{CloudProvider, OfferingKey};
use crate::cluster::Cluster;
use crate::scheduling::Preferences;

/// How many launches are in flight at once by default: with EC2's
/// CreateFleet answering in about a second, a scale-up of N NodeClaims
/// sends all its launches within ceil(N / 20) seconds, well inside EC2's
/// request-rate limits for mutating calls.
pub const LAUNCH_CONCURRENCY: usize = 20;

/// How many API writes one loop has in flight at once by default. A write
/// waits on the API server and etcd, not on this process: one at a time, a
/// loop that registers and initialises a thousand new nodes waits out
/// several thousand round trips in a row, the provisioning of a large
/// scale-up paced by the API server's latency. (The reference creates a
/// batch's NodeClaims all at once and reconciles up to a thousand
/// NodeClaims at a time.)
pub const WRITE_CONCURRENCY: usize = 16;

/// `Nominated` Events per second and their burst, as the reference's
/// `PodNominationRateLimiter` (a token bucket).
const NOMINATION_RATE: f64 = 5.0;
const NOMINATION_BURST: f64 = 10.0;

/// Timers of the controller. The defaults are the reference autoscaler's.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// A NodeClaim whose node has not registered by then is deleted.
    pub registration_ttl: Duration,
    /// How long an offering that failed with insufficient capacity is skipped.
    pub unavailable_offering_ttl: Duration,
    /// How soon a loop with nothing to wait for runs again.
    pub resync: Duration,
    /// How long a consolidation waits before it is validated again and
    /// carried out.
    pub consolidation_validation: Duration,
    /// How long replacements have to be initialized before a disruption is
    /// rolled back.
    pub replacement_timeout: Duration,
    /// How often a disruption pass runs when nothing it depends on changed
    /// (prices and offerings move on their own).
    pub disruption_resync: Duration,
    /// Whether a spot node may be replaced by spot capacity (at least 15
    /// cheaper types, as the reference requires). Off by default, as the
    /// reference's `SpotToSpotConsolidation` feature gate.
    pub spot_to_spot_consolidation: bool,
    /// Whether NodePools with `spec.replicas` keep that many NodeClaims
    /// (the reference's `StaticCapacity` feature gate, off by default: such
    /// a NodePool is then reported inactive and launches nothing).
    pub static_capacity: bool,
    /// Whether nodes unhealthy past their toleration are replaced (the
    /// reference's `NodeRepair` feature gate, off by default).
    pub node_repair: bool,
    /// Whether NodeOverlays change the instance types the NodePools see
    /// (the reference's `NodeOverlay` feature gate, off by default).
    pub node_overlay: bool,
    /// Whether CapacityBuffers keep spare capacity (the reference's
    /// `CapacityBuffer` feature gate, off by default).
    pub capacity_buffer: bool,
    /// Whether a rebalance recommendation deletes its NodeClaim like a spot
    /// interruption (off: it is only recorded).
    pub rebalance_as_interruption: bool,
    /// A provisioning batch closes when no new pending pod arrived for
    /// this long...
    pub batch_idle: Duration,
    /// ...or when it has been open this long.
    pub batch_max: Duration,
    /// How many launches (CreateFleet calls) are in flight at once.
    pub launch_concurrency: usize,
    /// How many API writes a loop has in flight at once (NodeClaim creates,
    /// registrations, initialisations, status conditions).
    pub write_concurrency: usize,
    /// How provisioning and consolidation treat preferred affinities,
    /// `ScheduleAnyway` spreads and `PreferNoSchedule` (the reference's
    /// `PREFERENCE_POLICY`): respected and relaxed one at a time only when
    /// a pod fits nowhere otherwise, or ignored.
    pub preferences: Preferences,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            registration_ttl: Duration::from_secs(15 * 60),
            unavailable_offering_ttl: Duration::from_secs(3 * 60),
            resync: Duration::from_secs(60),
            consolidation_validation: Duration::from_secs(15),
            replacement_timeout: Duration::from_secs(10 * 60),
            disruption_resync: Duration::from_secs(5 * 60),
            spot_to_spot_consolidation: false,
            static_capacity: false,
            node_repair: false,
            node_overlay: false,
            capacity_buffer: false,
            rebalance_as_interruption: false,
            batch_idle: BATCH_IDLE,
            batch_max: BATCH_MAX,
            launch_concurrency: LAUNCH_CONCURRENCY,
            write_concurrency: WRITE_CONCURRENCY,
            preferences: Preferences::Respect,
        }
    }
}

/// Something the controller did or saw, for Kubernetes Events, logs and the
/// simulation's timeline.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Event {
    #[serde(serialize_with = "crate::controller::rfc3339")]
    pub t: Timestamp,
    /// What it records: the kind of the object, or `Disruption` for a
    /// disruption decision.
    pub kind: String,
    /// `Kind/name` of the object it is about.
    pub object: String,
    pub reason: String,
    pub message: String,
    /// Objects it relates to (a disruption's replacements).
    pub related: Vec<String>,
}

impl Event {
    /// An event about `object` (`Kind/name`), relating to nothing else.
    pub fn about(
        t: Timestamp,
        object: impl Into<String>,
        reason: &str,
        message: impl Into<String>,
    ) -> Event {
        let object = object.into();
        Event {
            t,
            kind: object.split('/').next().unwrap_or_default().to_string(),
            object,
            reason: reason.to_string(),
            message: message.into(),
            related: Vec::new(),
        }
    }
}

fn rfc3339<S: serde::Serializer>(t: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&crate::clock::format_rfc3339(*t))
}

/// A disruption decision carried out, for the simulation's report.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Decision {
    #[serde(serialize_with = "crate::controller::rfc3339")]
    pub t: Timestamp,
    /// `Empty`, `Underutilized`, `Drifted`, `Expired`, `Interrupted`.
    pub reason: String,
    /// `delete` or `replace`.
    pub decision: String,
    /// `empty`, `single`, `multi`, or empty for drift and expiration.
    pub consolidation_type: String,
    /// The NodeClaims disrupted.
    pub nodeclaims: Vec<String>,
    /// The NodeClaims launched to replace them.
    pub replacements: Vec<String>,
    /// The replacements' instance types, cheapest first, per replacement.
    pub replacement_types: Vec<Vec<String>>,
    /// USD/h: the disrupted nodes' price minus the replacements'.
    pub savings_per_hour: f64,
}

/// Offerings that recently failed with insufficient capacity, and until when
/// they are skipped.
#[derive(Debug, Clone, Default)]
pub struct UnavailableOfferings(BTreeMap<OfferingKey, Timestamp>);

impl UnavailableOfferings {
    pub fn mark(&mut self, key: OfferingKey, until: Timestamp) {
        self.0.insert(key, until);
    }

    pub fn contains(&self, key: &OfferingKey, now: Timestamp) -> bool {
        self.0.get(key).is_some_and(|until| *until > now)
    }

    /// Forgets entries that have expired.
    pub fn expire(&mut self, now: Timestamp) {
        self.0.retain(|_, until| *until > now);
    }

    /// The offerings skipped at `now`.
    pub fn active(&self, now: Timestamp) -> std::collections::BTreeSet<OfferingKey> {
        self.0
            .iter()
            .filter(|(_, until)| **until > now)
            .map(|(k, _)| k.clone())
            .collect()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&OfferingKey, &Timestamp)> {
        self.0.iter()
    }
}

/// The controller's state across reconciles.
pub struct Controller<C: Cluster, P: CloudProvider> {
    pub cluster: Arc<C>,
    pub cloud: Arc<P>,
    pub clock: Arc<dyn Clock>,
    pub settings: Settings,
    pub unavailable: UnavailableOfferings,
    pub(crate) events: Vec<Event>,
    decisions: Vec<Decision>,
    batch: Batch,
    disruption: DisruptionState,
    /// The Nodes and bound pods as the scheduling core saw them at the
    /// last input built (disruption's and the provisioner's): the next
    /// converts only those that changed.
    kept_existing: crate::convert::KeptExisting,
    /// The pods that need a place as the scheduling core saw them
    /// (the workload's lower bound, the pods of disruption candidates).
    pod_specs: crate::convert::PodSpecs,
    /// When garbage collection of orphaned instances is next due.
    gc_due: Option<Timestamp>,
    /// Drains in progress, by NodeClaim (for `karpenter_nodes_drained_total`).
    drains: std::collections::HashSet<String>,
    /// Nodes waiting for their volumes to detach, with the message of the
    /// last `AwaitingVolumeDetachment` Event (one per change).
    volume_waits: std::collections::HashMap<String, String>,
    /// The pods being evicted, each retried on its own schedule.
    pub evictions: Arc<eviction::EvictionQueue>,
    /// Whether something else runs [`Controller::evictions`]
    /// ([`eviction::EvictionQueue::run`], as `dovetail controller` does);
    /// otherwise termination evicts the pods due at the end of each pass.
    pub evictions_elsewhere: bool,
    /// The controller's metrics registry (served on `/metrics`).
    pub metrics: metrics::Metrics,
    /// The interruption metrics: messages received, in the queue, handled.
    pub interruption_metrics: crate::interruption::Metrics,
    /// Instance id → NodeClaim, for interruption messages.
    provider_index: interruption::ProviderIndex,
    /// Pods the last solve could not place, with the reason.
    unschedulable: BTreeMap<String, String>,
    /// Pending pods whose preferences were last logged as able to keep
    /// consolidation away, and when (once an hour per pod and kind).
    preference_warned: BTreeMap<(String, &'static str), Timestamp>,
    /// The token bucket of `Nominated` Events: tokens left and when it was
    /// last filled.
    nominations: (f64, Option<Timestamp>),
    /// Names new NodeClaims deterministically.
    sequence: u64,
    /// Instances launched for NodeClaims whose status does not name them
    /// yet, by NodeClaim; read from the provider at the first launch.
    unrecorded: Option<std::collections::HashMap<String, crate::cloud::Instance>>,
    /// The provisionable pods, with the pod and NodeClaim revisions they
    /// were read at.
    provisionable: Option<((u64, u64, u64), std::collections::BTreeSet<String>)>,
    /// Pods seen pending, for the startup-duration summary, and the pod
    /// revision last looked at.
    pod_startup: (u64, state_metrics::PodStartup),
    /// The pods by node, for the pod list they were grouped from.
    pods_by_node: Arc<crate::cluster::PodsByNode>,
    /// The Nodes by name and provider id, for the Node list they were
    /// indexed from.
    node_index: Arc<crate::cluster::NodeIndex>,
    /// The NodeClaims a scheduling input converts, for the Node and
    /// NodeClaim lists they were read from (a pass reads them twice, and
    /// the provisioner again while neither list changed).
    converted_claims: std::sync::Mutex<provisioner::KeptClaims>,
    /// Static NodePools short of their replicas at `limits.nodes`, reported
    /// once until they are not.
    static_limited: std::collections::BTreeSet<String>,
    /// Nodes whose repair was held back, and when that was last said.
    repair_blocked: std::collections::HashMap<String, Timestamp>,
    /// NodeClaims whose launch failed, by name: how many times, and when
    /// the next launch may be tried.
    launch_failures:
        std::collections::HashMap<String, (u32, Timestamp), foldhash::fast::RandomState>,
    /// When each NodeClaim's consistency was last checked, by UID.
    consistency_scanned: std::collections::HashMap<String, Timestamp, foldhash::fast::RandomState>,
    /// The NodeClaims the last lifecycle pass left settled.
    settled: lifecycle::SettledClaims,
    /// The NodeClaim list `consistency_scanned` was last pruned to.
    consistency_pruned: crate::cluster::Listed<crate::api::NodeClaim>,
    /// When each (object, reason) last had an Event through
    /// [`Controller::event_deduped`].
    recent_events: std::collections::HashMap<(String, &'static str), Timestamp>,
    /// Whether launches are left for the runtime to send outside the
    /// controller's lock ([`Controller::take_launches`]) rather than sent
    /// within the pass.
    pub defer_launches: bool,
    /// NodePools whose NodeClaims were given up on before registering
    /// since the last status write: the reason and message.
    registration_failures: BTreeMap<String, (String, String)>,
    deferred_launches: Vec<lifecycle::LaunchJob>,
    /// The NodeOverlays as last read, and what applying them did.
    overlays: overlays::OverlayCache,
    /// The CapacityBuffers' virtual pods, and where the last solve put them.
    buffers: buffers::BufferState,
    /// The revisions of what the NodePool status reads, at its last pass
    /// that wrote everything it meant to (`pool_status`).
    pool_status_read: Option<[u64; 4]>,
    /// The capacity of the Nodes and NodeClaims the NodePool status last
    /// summed, as parsed.
    pool_capacity: state_metrics::ParsedCapacity,
}

impl<C: Cluster, P: CloudProvider> Controller<C, P> {
    pub fn new(cluster: Arc<C>, cloud: Arc<P>, clock: Arc<dyn Clock>, settings: Settings) -> Self {
        Controller {
            cluster,
            cloud,
            metrics: metrics::Metrics::with_clock(clock.clone()),
            clock,
            settings,
            unavailable: UnavailableOfferings::default(),
            events: Vec::new(),
            decisions: Vec::new(),
            batch: Batch::default(),
            disruption: DisruptionState::default(),
            kept_existing: Default::default(),
            pod_specs: Default::default(),
            drains: std::collections::HashSet::new(),
            volume_waits: std::collections::HashMap::new(),
            evictions: Arc::default(),
            evictions_elsewhere: false,
            gc_due: None,
            interruption_metrics: crate::interruption::Metrics::new(),
            provider_index: interruption::ProviderIndex::default(),
            unschedulable: BTreeMap::new(),
            preference_warned: BTreeMap::new(),
            nominations: (NOMINATION_BURST, None),
            sequence: 0,
            unrecorded: None,
            launch_failures: Default::default(),
            consistency_scanned: Default::default(),
            settled: Default::default(),
            consistency_pruned: Default::default(),
            recent_events: std::collections::HashMap::new(),
            defer_launches: false,
            registration_failures: BTreeMap::new(),
            deferred_launches: Vec::new(),
            provisionable: None,
            pod_startup: (u64::MAX, state_metrics::PodStartup::default()),
            pods_by_node: Default::default(),
            node_index: Default::default(),
            converted_claims: Default::default(),
            static_limited: std::collections::BTreeSet::new(),
            repair_blocked: std::collections::HashMap::new(),
            overlays: overlays::OverlayCache::default(),
            buffers: buffers::BufferState::default(),
            pool_status_read: None,
            pool_capacity: Default::default(),
        }
    }

    /// Records an event.
    pub(crate) fn event(&mut self, object: String, reason: &str, message: String) {
        tracing::info!(object = %object, reason, "{message}");
        let t = self.clock.now();
        self.events.push(Event::about(t, object, reason, message));
    }

    /// Records an event unless the object had one of the same reason
    /// within Karpenter's event recorder's dedupe timeout (2 minutes): for
    /// what a controller says at every reconcile while it waits.
    pub(crate) fn event_deduped(&mut self, object: String, reason: &'static str, message: String) {
        const DEDUPE: Duration = Duration::from_secs(120);
        let now = self.clock.now();
        let fresh = |t: &Timestamp| {
            now.duration_since(*t)
                < k8s_openapi::jiff::SignedDuration::from_secs(DEDUPE.as_secs() as i64)
        };
        let key = (object, reason);
        if self.recent_events.get(&key).is_some_and(fresh) {
            return;
        }
        if self.recent_events.len() >= 4096 {
            self.recent_events.retain(|_, t| fresh(t));
        }
        self.recent_events.insert(key.clone(), now);
        self.event(key.0, reason, message);
    }

    /// Takes the events recorded since the last call.
    pub fn drain_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// Takes the disruption decisions carried out since the last call.
    pub fn drain_decisions(&mut self) -> Vec<Decision> {
        std::mem::take(&mut self.decisions)
    }

    /// One pass's reconciles, in order: provisioning (the solve and the
    /// NodeClaims it creates), the NodeClaims' lifecycle and termination,
    /// then disruption: the heart of [`pass`], which every driver runs. The
    /// launches it decides are sent within it, or with
    /// [`Controller::defer_launches`] left for [`Controller::take_launches`].
    /// Returns when it next needs to run.
    pub async fn reconcile(&mut self) -> Duration {
        let a = self.reconcile_provisioning().await;
        let b = self.reconcile_nodeclaims().await;
        let c = self.reconcile_disruption().await;
        tracing::trace!(provisioning = ?a, nodeclaims = ?b, disruption = ?c, "pass wakes");
        a.min(b).min(c)
    }

    /// One pass of every loop that does not need the scheduler: the NodeClaim
    /// lifecycle (launch, register, initialise, liveness) and termination.
    /// Returns when it next needs to run.
    pub async fn reconcile_nodeclaims(&mut self) -> Duration {
        use metrics::controllers::{GARBAGE_COLLECTION, LIFECYCLE, TERMINATION};
        let now = self.clock.now();
        self.unavailable.expire(now);
        self.observe_pods();
        let repair = self.reconcile_repair().await;
        let a = {
            let _timer = self.metrics.reconcile(LIFECYCLE);
            self.reconcile_lifecycle().await
        };
        let b = {
            let _timer = self.metrics.reconcile(TERMINATION);
            self.reconcile_termination().await
        };
        self.reconcile_pool_status().await;
        // Orphaned instances are looked for only when due: a list of every
        // instance is not a per-pass cost.
        let c = match self.gc_due {
            Some(due) if due > now => {
                Duration::try_from(due.duration_since(now)).unwrap_or_default()
            }
            _ => {
                let _timer = self.metrics.reconcile(GARBAGE_COLLECTION);
                let wait = self.reconcile_garbage().await;
                self.gc_due = Some(now.checked_add(wait).unwrap_or(now));
                wait
            }
        };
        tracing::trace!(lifecycle = ?a, termination = ?b, garbage = ?c, repair = ?repair, "nodeclaim wakes");
        a.min(b).min(c).min(repair).min(self.settings.resync)
    }

    /// The cluster's pods grouped by node: when the list is a new one (the
    /// pods changed), the pods that changed are grouped again.
    fn pods_by_node(&mut self) -> Arc<crate::cluster::PodsByNode> {
        let pods = self.cluster.list::<crate::api::SlimPod>();
        if !crate::cluster::Listed::ptr_eq(self.pods_by_node.list(), &pods) {
            Arc::make_mut(&mut self.pods_by_node).follow(pods);
        }
        Arc::clone(&self.pods_by_node)
    }

    /// The cluster's Nodes by name and provider id: when the list is a new
    /// one, the Nodes that changed are indexed again. (Held only while a
    /// loop runs: an index still shared when the list changes is copied.)
    fn node_index(&mut self) -> Arc<crate::cluster::NodeIndex> {
        let nodes = self.cluster.list::<k8s_openapi::api::core::v1::Node>();
        if !crate::cluster::Listed::ptr_eq(self.node_index.list(), &nodes) {
            Arc::make_mut(&mut self.node_index).follow(nodes);
        }
        Arc::clone(&self.node_index)
    }

    /// Pods that started since the last look, into the startup-duration
    /// summary; the pods are read again only when one changed.
    fn observe_pods(&mut self) {
        let revision = self.cluster.revision::<crate::api::SlimPod>();
        if self.pod_startup.0 == revision {
            return;
        }
        let pods = self.cluster.list::<crate::api::SlimPod>();
        self.pod_startup.1.observe(&pods, &self.metrics);
        self.pod_startup.0 = revision;
    }
}

/// What one [`pass`] did: when the controller next needs to run, and what
/// it recorded (the Events to write, the disruptions carried out).
pub struct PassOutcome {
    pub wait: Duration,
    pub events: Vec<Event>,
    pub decisions: Vec<Decision>,
}

/// One pass as every driver runs it (`dovetail controller`'s
/// [`runtime::Runtime::pass`], `simulate`'s tick, the tests through them):
/// the reconciles hold the controller; the launches they decided are sent
/// without it, at most [`Settings::launch_concurrency`] at once; their
/// answers are recorded holding it again. So interruption handling, which
/// needs the controller, never waits for CreateFleet calls.
pub async fn pass<C: Cluster, P: CloudProvider>(
    controller: &tokio::sync::Mutex<Controller<C, P>>,
) -> PassOutcome {
    let (wait, jobs, cloud, concurrency) = {
        let mut c = controller.lock().await;
        c.defer_launches = true;
        let wait = c.reconcile().await;
        let jobs = c.take_launches();
        (wait, jobs, c.cloud.clone(), c.settings.launch_concurrency)
    };
    let mut more = Duration::MAX;
    if !jobs.is_empty() {
        let outcomes = send_launches(cloud.as_ref(), jobs, concurrency).await;
        more = controller.lock().await.finish_launches(outcomes).await;
    }
    let mut c = controller.lock().await;
    PassOutcome {
        wait: wait.min(more),
        events: c.drain_events(),
        decisions: c.drain_decisions(),
    }
}

/// The NodePools pending pods may get new NodeClaims from: not the static
/// ones (`spec.replicas`), which keep their replica count on their own
/// (the reference's provisioner leaves them out whatever its gates).
pub(crate) fn dynamic_only(
    specs: &[crate::scheduling::NodePoolSpec],
    pools: &[Arc<crate::api::NodePool>],
) -> Vec<crate::scheduling::NodePoolSpec> {
    let statics: std::collections::BTreeSet<&str> = pools
        .iter()
        .filter(|p| p.spec.replicas.is_some())
        .filter_map(|p| p.metadata.name.as_deref())
        .collect();
    specs
        .iter()
        .filter(|s| !statics.contains(s.name.as_str()))
        .cloned()
        .collect()
}

/// The condition types of a NodeClaim's lifecycle.
pub mod conditions {
    pub const LAUNCHED: &str = "Launched";
    pub const REGISTERED: &str = "Registered";
    pub const INITIALIZED: &str = "Initialized";
    pub const READY: &str = "Ready";
    pub const DRIFTED: &str = "Drifted";
    pub const CONSOLIDATABLE: &str = "Consolidatable";
    pub const DRAINED: &str = "Drained";
    pub const INSTANCE_TERMINATING: &str = "InstanceTerminating";
    pub const CONSISTENT_STATE_FOUND: &str = "ConsistentStateFound";
}
