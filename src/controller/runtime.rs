//! The in-cluster runtime of `dovetail controller`: the same
//! [`Controller`] the simulation drives, on a real clock, woken by watch
//! events and its own timers, writing only while this replica leads.
//!
//! - [`Runtime::run`] waits for leadership, then runs the controller's
//!   reconciles (provisioning, the NodeClaim lifecycle and termination,
//!   disruption), the config sync and, with a queue, the interruption
//!   poller ([`run_interruption`]) side by side until leadership is lost
//!   or the process shuts down. Each term starts a new
//!   [`Controller`]: everything it needs is read back from the cluster, as
//!   after a restart.
//! - The controller's decisions become Kubernetes Events
//!   ([`EventRecorder`]) on the NodePools, NodeClaims, Nodes and Pods they
//!   concern, written through the [`Cluster`] trait.
//! - [`gather_metrics`] renders `/metrics`: the controller's, the
//!   interruption poller's and the sync engine's registries, and the
//!   families computed from the cache at scrape time
//!   ([`super::state_metrics`]: no per-pod or per-node series is kept
//!   between scrapes).
//!
//! Details:
//! - passes run on watch events (`KubeCluster::changes`), at least
//!   `MIN_PASS_INTERVAL` (0.5 s) apart, and at the time each asks for; the
//!   launches a pass decides are sent outside the controller's lock
//!   (`controller::pass`), so interruption handling never waits for them;
//! - the config sync is `sync::watch::run`; the SQS poller
//!   (`run_interruption`) is an `interruption::Poller` delivering to
//!   `controller::interruption::Handler::shared`, which takes the term's
//!   controller between passes, and resolves the queue's URL with a backoff
//!   (1 s doubling to 60 s); with `--cloud kwok` the events come in process
//!   (`Interruption::Local`);
//! - Events are core/v1 Events on the NodePool, NodeClaim, Node,
//!   EC2NodeClass or Pod, in the pod's namespace or `default`, `Warning` for
//!   failures, each object, reason and message at most once per
//!   `EVENT_DEDUPE` (10 minutes), written by a background task after each
//!   pass (`record_later`, at most `MAX_QUEUED_EVENTS`, 1,000, waiting);
//! - `gather`, behind `gather_metrics`, is also what `simulate --metrics`
//!   uses;
//! - the passes, the sync and the poller stop writing at once when leadership
//!   is lost (their writes pass the term's `cluster::Fence`); standing by,
//!   the runtime writes nothing (a test checks the in-memory cluster's access
//!   log). On SIGTERM the passes stop first, then the Lease is released, so a
//!   standby takes over at its next round (2 s) rather than after the lease
//!   duration (15 s).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event as KubeEvent, EventSource, Node, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use prometheus::Registry;
use prometheus::proto::MetricFamily;
use tokio::sync::watch;

use super::http::Health;
use super::interruption::Handler;
use super::metrics::Metrics;
use super::{Controller, Event, Settings};
use crate::api::{EC2NodeClass, NodeClaim, NodePool, SlimPod};
use crate::clock::{Clock, Timestamp};
use crate::cloud::CloudProvider;
use crate::cluster::{Cluster, Object, ObjectKey};
use crate::interruption::{Metrics as InterruptionMetrics, PollSettings, Poller, Queue};
use crate::sync::SyncEngine;

/// The shortest time between two passes: watch events arrive in bursts,
/// and a pass reads the whole cache.
pub const MIN_PASS_INTERVAL: Duration = Duration::from_millis(500);
/// An Event already written with the same object, reason and message is
/// not written again within this window (the controller reports some
/// conditions, such as an unschedulable pod, on every pass).
pub const EVENT_DEDUPE: Duration = Duration::from_secs(10 * 60);
/// Where Events about cluster-scoped objects go, as kubectl looks for them.
pub const CLUSTER_EVENTS_NAMESPACE: &str = "default";

/// Where interruption events come from.
#[derive(Debug, Clone)]
pub enum Interruption {
    /// The queue of `--interruption-queue`.
    Queue(InterruptionQueue),
    /// The events a cloud sends in process: the KWOK provider's scripted
    /// interruptions ([`crate::world::kwok`]).
    Local(Arc<tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<String>>>),
}

/// The interruption queue of `--interruption-queue`: EC2 and AWS Health
/// events that EventBridge routes to SQS (see `src/interruption`).
#[derive(Debug, Clone)]
pub struct InterruptionQueue {
    /// The queue's name (resolved with GetQueueUrl) or URL.
    pub queue: String,
    pub sqs: aws_sdk_sqs::Client,
    pub poll: PollSettings,
}

/// The first wait after the queue's URL could not be resolved; it doubles
/// up to [`QUEUE_RETRY_MAX`].
const QUEUE_RETRY_MIN: Duration = Duration::from_secs(1);
const QUEUE_RETRY_MAX: Duration = Duration::from_secs(60);

/// Interruption handling for one leadership term: the SQS poller of
/// [`crate::interruption::Poller`] long-polls the queue and delivers each
/// message to the term's controller (the [`crate::interruption::MessageHandler`] the
/// simulation delivers to as well), which it shares with the passes. Never
/// returns; without a queue it does nothing. When the term ends, long
/// polls in flight and messages not yet deleted are abandoned: SQS
/// delivers them again after their visibility timeout, to the next leader.
pub async fn run_interruption<C: Cluster + 'static, P: CloudProvider + 'static>(
    interruption: Option<&Interruption>,
    controller: &tokio::sync::Mutex<Controller<C, P>>,
    metrics: &InterruptionMetrics,
    clock: Arc<dyn Clock>,
) {
    let i = match interruption {
        None => return std::future::pending().await,
        Some(Interruption::Queue(q)) => q,
        Some(Interruption::Local(events)) => {
            let mut events = events.lock().await;
            while let Some(body) = events.recv().await {
                let now = clock.now();
                crate::interruption::deliver(
                    &body,
                    Some(now),
                    now,
                    &Handler::shared(controller),
                    metrics,
                )
                .await;
            }
            return std::future::pending().await;
        }
    };
    let mut retry = QUEUE_RETRY_MIN;
    let poller = loop {
        match Poller::connect(
            i.sqs.clone(),
            Queue::new(&i.queue),
            Handler::shared(controller),
            metrics.clone(),
            clock.clone(),
            i.poll.clone(),
        )
        .await
        {
            Ok(poller) => break poller,
            Err(e) => {
                metrics.count_sqs_error("get_queue_url", 1);
                metrics.set_queue_healthy(false);
                if e.expired_credentials() {
                    crate::cloud::aws::credentials::expire();
                }
                tracing::warn!(
                    queue = %i.queue,
                    error = %aws_sdk_sqs::error::DisplayErrorContext(&e),
                    retry_in = ?retry,
                    "cannot resolve the interruption queue"
                );
                tokio::time::sleep(retry).await;
                retry = (retry * 2).min(QUEUE_RETRY_MAX);
            }
        }
    };
    tracing::info!(
        queue_url = poller.queue_url(),
        "polling the interruption queue"
    );
    poller.run(std::future::pending()).await;
}

/// The controller's Events as Kubernetes Events.
///
/// [`EventRecorder::record`] writes them and returns when they are
/// written; [`EventRecorder::record_later`] hands them to a background
/// task, so a pass never waits for one POST per pod it reports on. At most
/// [`MAX_QUEUED_EVENTS`] wait to be written; beyond that, new ones are
/// dropped (and logged), as client-go's event broadcaster drops when its
/// queue is full.
#[derive(Debug, Clone)]
pub struct EventRecorder {
    /// `reportingInstance`: this replica.
    instance: String,
    /// When each (object, reason, message) was last written.
    written: Arc<std::sync::Mutex<Written>>,
    /// Events handed to background writers and not written yet.
    queued: Arc<std::sync::atomic::AtomicUsize>,
}

/// When each (object, reason, message) was last written.
type Written = HashMap<(String, String, String), Timestamp>;

/// The most Events waiting for a background writer.
pub const MAX_QUEUED_EVENTS: usize = 1000;

impl EventRecorder {
    pub fn new(instance: &str) -> Self {
        EventRecorder {
            instance: instance.to_string(),
            written: Arc::default(),
            queued: Arc::default(),
        }
    }

    fn written(&self) -> std::sync::MutexGuard<'_, Written> {
        self.written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Writes the events about objects (skipping repeats within
    /// [`EVENT_DEDUPE`]); an Event that cannot be written is logged and
    /// dropped. Returns how many were written.
    pub async fn record<C: Cluster>(&self, cluster: &C, events: &[Event], now: Timestamp) -> usize {
        self.written().retain(|_, t| since(*t, now) < EVENT_DEDUPE);
        let mut fresh = std::collections::HashSet::new();
        let writes = events
            .iter()
            .filter(|e| {
                let key = (e.object.clone(), e.reason.clone(), e.message.clone());
                !self.written().contains_key(&key) && fresh.insert(key)
            })
            .filter_map(|e| Some((e, kube_event(cluster, e, &self.instance, now)?)))
            .map(|(e, event)| async move { (e, cluster.create(event).await) })
            .collect::<Vec<_>>();
        let mut n = 0;
        for (e, written) in super::writes::concurrently(writes, super::WRITE_CONCURRENCY).await {
            match written {
                Ok(_) => {
                    let key = (e.object.clone(), e.reason.clone(), e.message.clone());
                    self.written().insert(key, now);
                    n += 1;
                }
                Err(error) => {
                    tracing::warn!(object = %e.object, reason = %e.reason, %error, "cannot write the Event");
                }
            }
        }
        n
    }

    /// Waits until the Events handed to [`EventRecorder::record_later`]
    /// are written (or dropped after their retries).
    pub async fn settled(&self) {
        while self.queued.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Hands `events` to a background task that writes them as
    /// [`EventRecorder::record`] does, within [`MAX_QUEUED_EVENTS`].
    /// Returns how many were dropped because the queue was full.
    pub fn record_later<C: Cluster + 'static>(
        &self,
        cluster: Arc<C>,
        mut events: Vec<Event>,
        now: Timestamp,
    ) -> usize {
        use std::sync::atomic::Ordering::SeqCst;
        if events.is_empty() {
            return 0;
        }
        let room = MAX_QUEUED_EVENTS.saturating_sub(self.queued.load(SeqCst));
        let dropped = events.len().saturating_sub(room);
        if dropped > 0 {
            events.truncate(room);
            tracing::warn!(dropped, "the Event queue is full; Events dropped");
        }
        if events.is_empty() {
            return dropped;
        }
        self.queued.fetch_add(events.len(), SeqCst);
        let recorder = self.clone();
        tokio::spawn(async move {
            recorder.record(cluster.as_ref(), &events, now).await;
            recorder.queued.fetch_sub(events.len(), SeqCst);
        });
        dropped
    }
}

fn since(from: Timestamp, to: Timestamp) -> Duration {
    if to > from {
        Duration::try_from(to.duration_since(from)).unwrap_or_default()
    } else {
        Duration::ZERO
    }
}

/// Whether a reason reports a failure (a `Warning` Event).
pub fn is_warning(reason: &str) -> bool {
    reason.contains("Failed")
        || reason.contains("Invalid")
        || reason.contains("NotRecorded")
        || reason.contains("NotWritten")
        || matches!(
            reason,
            "InsufficientCapacity"
                | "NotReady"
                | "DisruptionRolledBack"
                | "DisruptionCancelled"
                | "TerminationGracePeriodExpiring"
        )
}

/// The object an Event is about: `(apiVersion, kind, namespace, name, uid)`.
fn involved<C: Cluster>(cluster: &C, object: &str) -> Option<ObjectReference> {
    fn reference<K: Object>(cluster: &impl Cluster, key: ObjectKey) -> ObjectReference {
        let uid = cluster.get::<K>(&key).and_then(|o| o.meta().uid.clone());
        ObjectReference {
            api_version: Some(K::api_version(&()).into_owned()),
            kind: Some(K::kind(&()).into_owned()),
            namespace: (!key.namespace.is_empty()).then(|| key.namespace.clone()),
            name: Some(key.name.clone()),
            uid,
            ..ObjectReference::default()
        }
    }
    let (kind, rest) = object.split_once('/')?;
    if rest.is_empty() {
        return None;
    }
    let cluster_key = || ObjectKey::cluster(rest);
    Some(match kind {
        "NodeClaim" => reference::<NodeClaim>(cluster, cluster_key()),
        "NodePool" => reference::<NodePool>(cluster, cluster_key()),
        "EC2NodeClass" => reference::<EC2NodeClass>(cluster, cluster_key()),
        "Node" => reference::<Node>(cluster, cluster_key()),
        "Pod" => {
            let (ns, name) = rest.split_once('/')?;
            reference::<SlimPod>(cluster, ObjectKey::new(ns, name))
        }
        _ => return None,
    })
}

/// The Kubernetes Event of a controller Event, or `None` when it is not
/// about one object (a provisioning pass that failed as a whole: logged).
pub fn kube_event<C: Cluster>(
    cluster: &C,
    e: &Event,
    instance: &str,
    now: Timestamp,
) -> Option<KubeEvent> {
    const MAX_MESSAGE_BYTES: usize = 1024;
    let involved = involved(cluster, &e.object)?;
    let namespace = involved
        .namespace
        .clone()
        .unwrap_or_else(|| CLUSTER_EVENTS_NAMESPACE.to_string());
    let mut message = e.message.clone();
    if message.len() > MAX_MESSAGE_BYTES {
        let mut cut = MAX_MESSAGE_BYTES;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
    }
    let action = if e.kind == "Disruption" {
        "Disrupt"
    } else {
        "Reconcile"
    };
    let time = crate::clock::truncate_to_second(now);
    Some(KubeEvent {
        metadata: ObjectMeta {
            generate_name: Some(format!(
                "{}.",
                involved.name.as_deref().unwrap_or("dovetail")
            )),
            namespace: Some(namespace),
            ..ObjectMeta::default()
        },
        involved_object: involved,
        reason: Some(e.reason.clone()),
        message: Some(message),
        type_: Some(
            if is_warning(&e.reason) {
                "Warning"
            } else {
                "Normal"
            }
            .into(),
        ),
        source: Some(EventSource {
            component: Some("dovetail".into()),
            host: None,
        }),
        reporting_component: Some("dovetail.dev/controller".into()),
        reporting_instance: Some(instance.to_string()),
        action: Some(action.into()),
        count: Some(1),
        first_timestamp: Some(Time(time)),
        last_timestamp: Some(Time(time)),
        event_time: Some(MicroTime(time)),
        ..KubeEvent::default()
    })
}

/// Every family `/metrics` serves: the registries', and those computed
/// from the cache now ([`super::state_metrics`]), in order.
pub fn gather<C: Cluster>(cluster: &C, registries: &[&Registry]) -> Vec<MetricFamily> {
    let mut families = Vec::new();
    for r in registries {
        families.extend(r.gather());
    }
    families.extend(super::state_metrics::families(cluster));
    crate::metrics::exposition::sort(&mut families);
    families
}

/// The `/metrics` text: [`gather`] in the Prometheus text format.
pub fn gather_metrics<C: Cluster>(cluster: &C, registries: &[&Registry]) -> String {
    crate::metrics::exposition::text(&gather(cluster, registries))
}

/// Everything one replica runs.
pub struct Runtime<C: Cluster + 'static, P: CloudProvider + 'static> {
    pub cluster: Arc<C>,
    pub cloud: Arc<P>,
    pub clock: Arc<dyn Clock>,
    pub settings: Settings,
    /// Shared by every term's controller (served on `/metrics`).
    pub metrics: Metrics,
    /// The interruption poller's and handler's metrics, shared by every
    /// term (served on `/metrics`).
    pub interruption_metrics: InterruptionMetrics,
    pub health: Arc<Health>,
    pub events: EventRecorder,
    /// The config sync and its fallback poll, if a repository is configured.
    pub sync: Option<(SyncEngine<C>, Duration)>,
    pub interruption: Option<Interruption>,
}

impl<C: Cluster + 'static, P: CloudProvider + 'static> Runtime<C, P> {
    /// A new controller for a leadership term, with the shared metrics.
    pub fn controller(&self) -> Controller<C, P> {
        let mut c = Controller::new(
            self.cluster.clone(),
            self.cloud.clone(),
            self.clock.clone(),
            self.settings.clone(),
        );
        c.metrics = self.metrics.clone();
        c.interruption_metrics = self.interruption_metrics.clone();
        c
    }

    /// One [`super::pass`], whose Events go out in the background: the
    /// pass does not wait for them.
    pub async fn pass(&mut self, controller: &tokio::sync::Mutex<Controller<C, P>>) -> Duration {
        let pass = super::pass(controller).await;
        self.events
            .record_later(self.cluster.clone(), pass.events, self.clock.now());
        pass.wait
    }

    /// Runs until `shutdown` resolves: while `leading` is true, the
    /// controller's passes (woken by `changes` and by the time the
    /// controller asks for) and the config sync; nothing while it is
    /// false.
    pub async fn run(
        &mut self,
        mut changes: watch::Receiver<u64>,
        mut leading: watch::Receiver<bool>,
        shutdown: impl Future<Output = ()>,
    ) {
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            // Stand by until this replica leads.
            while !*leading.borrow_and_update() {
                self.health.leading.store(false, Ordering::Relaxed);
                tokio::select! {
                    () = &mut shutdown => return,
                    changed = leading.changed() => if changed.is_err() { return },
                }
            }
            self.health.progressed();
            self.health.leading.store(true, Ordering::Relaxed);
            tracing::info!("leading: the controller runs");
            let mut term = self.controller();
            // The eviction queue runs beside the passes: a drain whose
            // budget refuses evictions every 100 ms does not make every
            // pass run at that rate.
            term.evictions_elsewhere = true;
            let evictions = term.evictions.clone().run(
                self.cluster.clone(),
                self.clock.clone(),
                self.metrics.clone(),
                {
                    let (recorder, cluster, clock) = (
                        self.events.clone(),
                        self.cluster.clone(),
                        self.clock.clone(),
                    );
                    move |events: Vec<Event>| {
                        for e in &events {
                            tracing::info!(object = %e.object, reason = %e.reason, "{}", e.message);
                        }
                        recorder.record_later(cluster.clone(), events, clock.now());
                    }
                },
            );
            let controller = tokio::sync::Mutex::new(term);
            let lost = async {
                while *leading.borrow_and_update() {
                    if leading.changed().await.is_err() {
                        // Nobody can take leadership away any more.
                        std::future::pending::<()>().await;
                    }
                }
            };
            let mut sync = self.sync.take();
            let interruption = self.interruption.clone();
            let (interruption_metrics, clock) =
                (self.interruption_metrics.clone(), self.clock.clone());
            let stop = tokio::select! {
                () = &mut shutdown => true,
                () = lost => false,
                () = run_interruption(interruption.as_ref(), &controller, &interruption_metrics, clock) => false,
                () = run_sync(sync.as_mut()) => false,
                () = evictions => false,
                () = self.passes(&controller, &mut changes) => false,
            };
            self.sync = sync;
            self.health.leading.store(false, Ordering::Relaxed);
            if stop {
                return;
            }
            tracing::warn!("leadership lost: the controller stopped writing");
        }
    }

    /// The controller's passes, forever. A pass holds the controller, so an
    /// interruption message waits for the pass in progress.
    async fn passes(
        &mut self,
        controller: &tokio::sync::Mutex<Controller<C, P>>,
        changes: &mut watch::Receiver<u64>,
    ) {
        loop {
            let started = tokio::time::Instant::now();
            changes.borrow_and_update();
            self.health.pass_started();
            let wait = self.pass(controller).await.max(Duration::from_millis(10));
            self.health.progressed();
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                changed = changes.changed() => {
                    if changed.is_err() {
                        // No more watch events: the timers alone drive it.
                        tokio::time::sleep(wait).await;
                    } else {
                        tokio::time::sleep_until(started + MIN_PASS_INTERVAL).await;
                    }
                }
            }
        }
    }
}

/// The config sync loop of one term, or nothing without a repository.
async fn run_sync<C: Cluster>(sync: Option<&mut (SyncEngine<C>, Duration)>) {
    let Some((engine, poll)) = sync else {
        return std::future::pending().await;
    };
    let path = engine.settings().path.clone();
    let watcher = match crate::sync::watch::RepoWatcher::new(&path) {
        Ok(w) => Some(w),
        Err(error) => {
            tracing::warn!(%error, "cannot watch the configuration repository; polling only");
            None
        }
    };
    crate::sync::watch::run(
        engine,
        watcher,
        *poll,
        |o| tracing::info!(outcome = ?o, "config sync pass"),
        std::future::pending(),
    )
    .await;
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;

    use super::*;
    use crate::clock::ManualClock;
    use crate::testing::{World, from_yaml, pending_pod};
    use crate::world::MemoryCluster;
    use crate::world::ec2::SimEc2;

    fn runtime() -> (Runtime<MemoryCluster, SimEc2>, Arc<ManualClock>) {
        let w = World::new();
        w.create_examples();
        let clock = w.clock.clone();
        let rt = Runtime {
            clock: w.dyn_clock(),
            cluster: w.cluster,
            cloud: w.cloud,
            settings: Settings::default(),
            metrics: Metrics::new(),
            interruption_metrics: InterruptionMetrics::new(),
            health: Arc::new(Health::default()),
            events: EventRecorder::new("replica-a"),
            sync: None,
            interruption: None,
        };
        (rt, clock)
    }

    fn events(c: &MemoryCluster) -> Vec<(String, String, String, String)> {
        c.list::<KubeEvent>(None, &crate::cluster::Selector::everything())
            .items
            .iter()
            .map(|e| {
                (
                    e.metadata.namespace.clone().unwrap_or_default(),
                    format!(
                        "{}/{}",
                        e.involved_object.kind.clone().unwrap_or_default(),
                        e.involved_object.name.clone().unwrap_or_default()
                    ),
                    e.reason.clone().unwrap_or_default(),
                    e.type_.clone().unwrap_or_default(),
                )
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn only_the_leader_writes_and_a_new_term_resumes_from_the_cluster() {
        let (mut rt, clock) = runtime();
        let cluster = rt.cluster.clone();
        let health = rt.health.clone();
        cluster.create(pending_pod("a")).unwrap();
        let (changes_tx, changes) = watch::channel(0u64);
        let (leading_tx, leading) = watch::channel(false);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let run = rt.run(changes, leading, async {
            let _ = stop_rx.await;
        });
        let drive = async {
            // Standing by: however long, and whatever changes, nothing is written.
            for _ in 0..5 {
                clock.advance(Duration::from_secs(30)).unwrap();
                changes_tx.send_modify(|v| *v += 1);
                tokio::time::sleep(Duration::from_secs(30)).await;
            }
            assert!(cluster.accesses().is_empty(), "{:?}", cluster.accesses());
            assert!(!health.leading.load(Ordering::Relaxed));

            leading_tx.send(true).unwrap();
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert!(health.leading.load(Ordering::Relaxed));
            // The batch closes on the controller's clock.
            clock.advance(Duration::from_secs(11)).unwrap();
            tokio::time::sleep(Duration::from_secs(61)).await;
            let claims = Cluster::list::<NodeClaim>(cluster.as_ref());
            assert_eq!(claims.len(), 1);
            let written = events(&cluster);
            let claim = format!("NodeClaim/{}", claims[0].metadata.name.clone().unwrap());
            assert!(
                written.contains(&(
                    "default".into(),
                    claim.clone(),
                    "Provisioned".into(),
                    "Normal".into()
                )),
                "{written:?}"
            );
            assert!(
                written.contains(&("default".into(), claim, "Launched".into(), "Normal".into())),
                "{written:?}"
            );

            // Leadership lost: writes stop at once.
            leading_tx.send(false).unwrap();
            tokio::time::sleep(Duration::from_secs(1)).await;
            let before = cluster.accesses();
            for _ in 0..5 {
                clock.advance(Duration::from_secs(60)).unwrap();
                changes_tx.send_modify(|v| *v += 1);
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
            assert_eq!(cluster.accesses(), before);

            // A new term starts a new controller, which reads the claim back
            // from the cluster and launches no second one.
            leading_tx.send(true).unwrap();
            clock.advance(Duration::from_secs(11)).unwrap();
            tokio::time::sleep(Duration::from_secs(61)).await;
            assert_eq!(Cluster::list::<NodeClaim>(cluster.as_ref()).len(), 1);
            stop_tx.send(()).unwrap();
        };
        tokio::join!(run, drive);
        assert!(!health.leading.load(Ordering::Relaxed));
    }

    #[tokio::test]
    async fn decisions_become_events_on_their_objects_once_per_window() {
        let (rt, _clock) = runtime();
        let cluster = rt.cluster.clone();
        cluster.create(pending_pod("a")).unwrap();
        let t = Timestamp::UNIX_EPOCH;
        let event = |object: &str, kind: &str, reason: &str, message: &str| Event {
            t,
            kind: kind.into(),
            object: object.into(),
            reason: reason.into(),
            message: message.into(),
            related: Vec::new(),
        };
        let batch = [
            event(
                "NodeClaim/general-1",
                "NodeClaim",
                "Launched",
                "launched m5.large",
            ),
            event(
                "NodeClaim/general-2",
                "NodeClaim",
                "LaunchFailed",
                "insufficient capacity in every offering",
            ),
            event(
                "NodeClaim/general-3",
                "Disruption",
                "Underutilized",
                "replace: saves $0.05/h",
            ),
            event(
                "Pod/default/a",
                "Pod",
                "FailedProvisioning",
                "no NodePool tolerates its taints",
            ),
            event(
                "Provisioner",
                "Provisioner",
                "SolveFailed",
                "a pass-wide failure",
            ),
        ];
        let n = rt.events.record(cluster.as_ref(), &batch, t).await;
        assert_eq!(n, 4);
        let mut written = events(&cluster);
        written.sort();
        let row = |ns: &str, o: &str, r: &str, ty: &str| {
            (ns.to_string(), o.to_string(), r.to_string(), ty.to_string())
        };
        assert_eq!(
            written,
            [
                row("default", "NodeClaim/general-1", "Launched", "Normal"),
                row("default", "NodeClaim/general-2", "LaunchFailed", "Warning"),
                row("default", "NodeClaim/general-3", "Underutilized", "Normal"),
                row("default", "Pod/a", "FailedProvisioning", "Warning"),
            ]
        );
        let pod_event = cluster
            .list::<KubeEvent>(Some("default"), &crate::cluster::Selector::everything())
            .items
            .into_iter()
            .find(|e| e.involved_object.kind.as_deref() == Some("Pod"))
            .unwrap();
        let pod = cluster
            .get_opt::<Pod>(&ObjectKey::new("default", "a"))
            .unwrap();
        assert_eq!(pod_event.involved_object.uid, pod.metadata.uid);
        assert_eq!(
            pod_event.message.as_deref(),
            Some("no NodePool tolerates its taints")
        );
        // The same decision again within the window: not repeated; after
        // it: written again.
        assert_eq!(rt.events.record(cluster.as_ref(), &batch, t).await, 0);
        let later = t.checked_add(EVENT_DEDUPE).unwrap();
        assert_eq!(rt.events.record(cluster.as_ref(), &batch, later).await, 4);
    }

    #[tokio::test]
    async fn events_written_later_are_bounded_and_deduplicated() {
        let (rt, clock) = runtime();
        let cluster = rt.cluster.clone();
        let event = |i: usize| Event {
            t: clock.now(),
            kind: "NodePool".into(),
            object: "NodePool/general".into(),
            reason: "Probe".into(),
            message: format!("event {i}"),
            related: Vec::new(),
        };
        let recorder = EventRecorder::new("replica-a");
        let flood: Vec<Event> = (0..MAX_QUEUED_EVENTS + 500).map(event).collect();
        let dropped = recorder.record_later(cluster.clone(), flood, clock.now());
        assert_eq!(dropped, 500);
        // Written in the background, then the queue has room again.
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        let written = events(&cluster).len();
        assert_eq!(written, MAX_QUEUED_EVENTS);
        assert_eq!(
            recorder.record_later(cluster.clone(), vec![event(0), event(1)], clock.now()),
            0
        );
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(events(&cluster).len(), written, "repeats are not written");
    }

    #[tokio::test]
    async fn metrics_carry_the_reference_names_and_the_pods_state() {
        let (mut rt, clock) = runtime();
        let cluster = rt.cluster.clone();
        cluster.create(pending_pod("a")).unwrap();
        let controller = tokio::sync::Mutex::new(rt.controller());
        pass(&mut rt, &controller).await;
        clock.advance(Duration::from_secs(11)).unwrap();
        pass(&mut rt, &controller).await;
        let text = gather_metrics(cluster.as_ref(), &[rt.metrics.registry()]);
        for name in [
            "karpenter_nodeclaims_created_total{min_values_relaxed=\"false\",nodepool=\"general\",reason=\"provisioned\"} 1",
            "karpenter_scheduler_scheduling_duration_seconds_count 1",
            "karpenter_pods_state{arch=\"\",capacity_type=\"\",instance_type=\"\",managed=\"false\",name=\"a\",namespace=\"default\",node=\"\",nodepool=\"\",owner=\"\",phase=\"Pending\",ready=\"false\",scheduled=\"false\",zone=\"\"} 1",
            "controller_runtime_reconcile_total{controller=\"provisioner\",result=\"requeue_after\"} 2",
            "karpenter_nodepools_limit{nodepool=\"general\",resource_type=\"cpu\"}",
        ] {
            assert!(text.contains(name), "{name} missing from\n{text}");
        }
    }

    /// One pass as the controller runs it, and the Events it recorded
    /// written.
    async fn pass(
        rt: &mut Runtime<MemoryCluster, SimEc2>,
        controller: &tokio::sync::Mutex<Controller<MemoryCluster, SimEc2>>,
    ) {
        rt.pass(controller).await;
        rt.events.settled().await;
    }

    /// Passes of the controller, `step` apart on its clock.
    async fn passes_for(
        rt: &mut Runtime<MemoryCluster, SimEc2>,
        controller: &tokio::sync::Mutex<Controller<MemoryCluster, SimEc2>>,
        clock: &ManualClock,
        n: usize,
        step: Duration,
    ) {
        for _ in 0..n {
            pass(rt, controller).await;
            clock.advance(step).unwrap();
            stop_terminated_pods(&rt.cluster, clock.now());
        }
    }

    /// The kubelets' part of a pod's deletion: a pod whose grace period is
    /// over has stopped, and its kubelet deletes it for good.
    fn stop_terminated_pods(cluster: &MemoryCluster, now: crate::clock::Timestamp) {
        for pod in cluster
            .list::<Pod>(None, &crate::cluster::Selector::everything())
            .items
        {
            if pod
                .metadata
                .deletion_timestamp
                .as_ref()
                .is_some_and(|t| t.0 <= now)
            {
                let _ = cluster.delete_with::<Pod>(
                    &ObjectKey::of(pod.as_ref()),
                    &crate::cluster::DeleteParams::with_grace_period(0),
                );
            }
        }
    }

    fn reasons(c: &MemoryCluster) -> Vec<(String, String, String)> {
        events(c)
            .into_iter()
            .map(|(_, o, r, t)| (o, r, t))
            .collect()
    }

    #[tokio::test]
    async fn a_nodeclaim_create_that_fails_with_500_is_a_warning_and_is_retried() {
        let (mut rt, clock) = runtime();
        let cluster = rt.cluster.clone();
        cluster.create(pending_pod("a")).unwrap();
        cluster.inject(crate::world::Fault::new(
            crate::world::Write::Create,
            "NodeClaim",
            crate::cluster::ApiError::Internal {
                message: "etcdserver: request timed out".into(),
            },
        ));
        let controller = tokio::sync::Mutex::new(rt.controller());
        // The batch closes at 1s: the create fails.
        passes_for(&mut rt, &controller, &clock, 2, Duration::from_secs(1)).await;
        assert!(Cluster::list::<NodeClaim>(cluster.as_ref()).is_empty());
        // Retried after the next batch window, not at the resync.
        passes_for(&mut rt, &controller, &clock, 2, Duration::from_secs(1)).await;
        let warned = reasons(&cluster)
            .into_iter()
            .any(|(o, r, t)| o.starts_with("NodeClaim/") && r == "CreateFailed" && t == "Warning");
        assert!(warned, "{:?}", reasons(&cluster));
        assert_eq!(Cluster::list::<NodeClaim>(cluster.as_ref()).len(), 1);
    }

    /// As the reference's node class controller: a conflict requeues
    /// without an error, and the next pass writes the status.
    #[tokio::test]
    async fn a_conflicting_status_write_is_quiet_and_is_written_on_the_next_pass() {
        let (mut rt, clock) = runtime();
        let cluster = rt.cluster.clone();
        cluster.inject(crate::world::Fault::new(
            crate::world::Write::ReplaceStatus,
            "EC2NodeClass",
            crate::cluster::ApiError::Conflict {
                resource: "ec2nodeclasses.karpenter.k8s.aws".into(),
                key: ObjectKey::cluster("default"),
                message: "the object has been modified".into(),
            },
        ));
        let controller = tokio::sync::Mutex::new(rt.controller());
        pass(&mut rt, &controller).await;
        let class = |c: &MemoryCluster| {
            c.get_opt::<EC2NodeClass>(&ObjectKey::cluster("default"))
                .and_then(|n| n.status.clone())
        };
        assert!(class(&cluster).is_none());
        assert!(
            !reasons(&cluster)
                .iter()
                .any(|(o, _, t)| o == "EC2NodeClass/default" && t == "Warning"),
            "{:?}",
            reasons(&cluster)
        );
        passes_for(&mut rt, &controller, &clock, 2, Duration::from_secs(11)).await;
        assert!(class(&cluster).is_some());
    }

    /// As the reference's registration: a Node changed since the pass read
    /// it (its kubelet's heartbeat) is registered on the next pass, with no
    /// Warning in between.
    #[tokio::test]
    async fn a_node_that_changed_under_its_registration_is_registered_on_the_next_pass() {
        let (mut rt, clock) = runtime();
        let cluster = rt.cluster.clone();
        cluster.create(pending_pod("a")).unwrap();
        let controller = tokio::sync::Mutex::new(rt.controller());
        passes_for(&mut rt, &controller, &clock, 3, Duration::from_secs(11)).await;
        let claim = Cluster::list::<NodeClaim>(cluster.as_ref())[0].clone();
        let name = claim.metadata.name.clone().unwrap();
        cluster.create(node_for(&claim)).unwrap();
        cluster.inject(crate::world::Fault::new(
            crate::world::Write::Replace,
            "Node",
            crate::cluster::ApiError::Conflict {
                resource: "nodes".into(),
                key: ObjectKey::cluster("n1"),
                message: "the object has been modified".into(),
            },
        ));
        let registered =
            |c: &MemoryCluster| claim_is(c, &name, crate::controller::conditions::REGISTERED);
        pass(&mut rt, &controller).await;
        assert!(!registered(&cluster));
        passes_for(&mut rt, &controller, &clock, 2, Duration::from_secs(1)).await;
        assert!(registered(&cluster));
        let warnings: Vec<_> = reasons(&cluster)
            .into_iter()
            .filter(|(_, _, t)| t == "Warning")
            .collect();
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    /// A Node Ready but still tainted `not-ready` (the node lifecycle
    /// controller lifts the taint only after it sees the node Ready) is
    /// registered, but initialised only once the taint is gone, as the
    /// reference waits for its known ephemeral taints: an initialised node
    /// is planned on with the taints it has, and a pending pod planned on
    /// it would get a claim of its own.
    #[tokio::test]
    async fn a_node_still_tainted_not_ready_is_initialized_once_the_taint_is_lifted() {
        let (mut rt, clock) = runtime();
        let cluster = rt.cluster.clone();
        cluster.create(pending_pod("a")).unwrap();
        let controller = tokio::sync::Mutex::new(rt.controller());
        passes_for(&mut rt, &controller, &clock, 3, Duration::from_secs(11)).await;
        let claim = Cluster::list::<NodeClaim>(cluster.as_ref())[0].clone();
        let name = claim.metadata.name.clone().unwrap();
        let not_ready = k8s_openapi::api::core::v1::Taint {
            key: "node.kubernetes.io/not-ready".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        let mut node = node_for(&claim);
        node.spec.as_mut().unwrap().taints = Some(vec![not_ready]);
        cluster.create(node).unwrap();
        passes_for(&mut rt, &controller, &clock, 3, Duration::from_secs(1)).await;
        assert!(claim_is(
            &cluster,
            &name,
            crate::controller::conditions::REGISTERED
        ));
        assert!(!claim_is(
            &cluster,
            &name,
            crate::controller::conditions::INITIALIZED
        ));
        let mut node = (*cluster.get_opt::<Node>(&ObjectKey::cluster("n1")).unwrap()).clone();
        node.spec.as_mut().unwrap().taints = None;
        cluster.replace(node).unwrap();
        passes_for(&mut rt, &controller, &clock, 2, Duration::from_secs(1)).await;
        assert!(claim_is(
            &cluster,
            &name,
            crate::controller::conditions::INITIALIZED
        ));
    }

    /// Whether the NodeClaim `name` has the condition `kind` True.
    fn claim_is(c: &MemoryCluster, name: &str, kind: &str) -> bool {
        let claim = c.get_opt::<NodeClaim>(&ObjectKey::cluster(name)).unwrap();
        crate::controller::is_true(
            claim.status.as_ref().and_then(|s| s.conditions.as_ref()),
            kind,
        )
    }

    /// The node the kubelet registers for a launched NodeClaim.
    fn node_for(claim: &NodeClaim) -> Node {
        let status = claim.status.clone().unwrap();
        let mut labels = claim.metadata.labels.clone().unwrap_or_default();
        labels.insert("kubernetes.io/hostname".into(), "n1".into());
        let allocatable: std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        > = [("cpu", "8"), ("memory", "32Gi"), ("pods", "110")]
            .into_iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity(v.into()),
                )
            })
            .collect();
        Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                labels: Some(labels),
                ..ObjectMeta::default()
            },
            spec: Some(k8s_openapi::api::core::v1::NodeSpec {
                provider_id: status.provider_id.clone(),
                ..Default::default()
            }),
            status: Some(k8s_openapi::api::core::v1::NodeStatus {
                allocatable: Some(allocatable.clone()),
                capacity: Some(allocatable),
                conditions: Some(vec![k8s_openapi::api::core::v1::NodeCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    /// Pod `default/a` (labelled `app: web`) provisioned, bound and running
    /// on node `n1` of a launched NodeClaim; returns the claim's name.
    /// Whether the instance of this provider id still runs.
    async fn runs(rt: &Runtime<MemoryCluster, SimEc2>, provider_id: &str) -> bool {
        rt.cloud
            .list()
            .await
            .unwrap()
            .iter()
            .any(|i| i.provider_id == provider_id)
    }

    fn provider_id(cluster: &MemoryCluster, claim: &str) -> String {
        cluster
            .get_opt::<NodeClaim>(&ObjectKey::cluster(claim))
            .and_then(|c| c.status.as_ref()?.provider_id.clone())
            .expect("the NodeClaim has an instance")
    }

    async fn a_running_pod_on_its_own_node(
        rt: &mut Runtime<MemoryCluster, SimEc2>,
        controller: &tokio::sync::Mutex<Controller<MemoryCluster, SimEc2>>,
        clock: &ManualClock,
    ) -> String {
        let cluster = rt.cluster.clone();
        let mut pod = pending_pod("a");
        pod.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
        cluster.create(pod).unwrap();
        passes_for(rt, controller, clock, 3, Duration::from_secs(11)).await;
        let claim = Cluster::list::<NodeClaim>(cluster.as_ref())[0].clone();
        assert!(
            claim
                .status
                .as_ref()
                .and_then(|s| s.provider_id.as_ref())
                .is_some()
        );
        cluster.create(node_for(&claim)).unwrap();
        cluster.bind("default", "a", "n1").unwrap();
        let mut bound = (*cluster
            .get_opt::<Pod>(&ObjectKey::new("default", "a"))
            .unwrap())
        .clone();
        bound.status.get_or_insert_default().phase = Some("Running".into());
        bound.status.get_or_insert_default().conditions =
            Some(vec![k8s_openapi::api::core::v1::PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]);
        cluster.update_status(bound).unwrap();
        passes_for(rt, controller, clock, 2, Duration::from_secs(1)).await;
        claim.metadata.name.clone().unwrap()
    }

    #[tokio::test]
    async fn an_eviction_answered_with_404_is_done_not_blocked() {
        let (mut rt, clock) = runtime();
        let cluster = rt.cluster.clone();
        let controller = tokio::sync::Mutex::new(rt.controller());
        let name = a_running_pod_on_its_own_node(&mut rt, &controller, &clock).await;
        let instance = provider_id(&cluster, &name);
        // The pod is gone by the time the drain evicts it (once).
        cluster.inject(crate::world::Fault::new(
            crate::world::Write::Evict,
            "Pod",
            crate::cluster::ApiError::NotFound {
                resource: "pods".into(),
                key: ObjectKey::new("default", "a"),
            },
        ));
        Cluster::delete::<NodeClaim>(cluster.as_ref(), &ObjectKey::cluster(name.as_str()))
            .await
            .unwrap();
        passes_for(&mut rt, &controller, &clock, 20, Duration::from_secs(20)).await;
        let written = reasons(&cluster);
        assert!(
            !written.iter().any(
                |(_, r, t)| r == "EvictionBlocked" || (t == "Warning" && r != "FailedDraining")
            ),
            "a 404 is not a refusal: {written:?}"
        );
        assert!(
            cluster
                .get_opt::<Pod>(&ObjectKey::new("default", "a"))
                .is_none(),
            "the drain went on and evicted the pod"
        );
        // Its instance is terminated (the pod, pending from the NodeClaim's
        // deletion on, had new capacity launched for it).
        assert!(!runs(&rt, &instance).await);
    }

    #[tokio::test]
    async fn an_eviction_a_budget_refuses_with_429_blocks_the_drain_without_a_warning() {
        use k8s_openapi::api::policy::v1::PodDisruptionBudget;
        let (mut rt, clock) = runtime();
        let cluster = rt.cluster.clone();
        let controller = tokio::sync::Mutex::new(rt.controller());
        let name = a_running_pod_on_its_own_node(&mut rt, &controller, &clock).await;
        let instance = provider_id(&cluster, &name);
        let pdb: PodDisruptionBudget = from_yaml(
            "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: web, namespace: default}\n\
             spec: {minAvailable: 1, selector: {matchLabels: {app: web}}}\n",
        );
        cluster.create(pdb).unwrap();
        Cluster::delete::<NodeClaim>(cluster.as_ref(), &ObjectKey::cluster(name.as_str()))
            .await
            .unwrap();
        passes_for(&mut rt, &controller, &clock, 3, Duration::from_secs(20)).await;
        assert!(
            cluster
                .get_opt::<Pod>(&ObjectKey::new("default", "a"))
                .is_some()
        );
        assert!(
            cluster
                .get_opt::<NodeClaim>(&ObjectKey::cluster(name.as_str()))
                .is_some()
        );
        let object = format!("NodeClaim/{name}");
        let written = reasons(&cluster);
        assert!(
            written.contains(&(object.clone(), "EvictionBlocked".into(), "Normal".into())),
            "{written:?}"
        );
        // The refusal is no Warning; the drain that waits is (Karpenter's
        // FailedDraining on the Node).
        assert!(
            !written
                .iter()
                .any(|(_, r, t)| t == "Warning" && r != "FailedDraining"),
            "{written:?}"
        );
        assert!(runs(&rt, &instance).await, "the instance runs on");
        // The budget goes: the drain finishes and the instance is terminated.
        cluster
            .delete::<PodDisruptionBudget>(&ObjectKey::new("default", "web"))
            .unwrap();
        passes_for(&mut rt, &controller, &clock, 20, Duration::from_secs(20)).await;
        assert!(
            cluster
                .get_opt::<Pod>(&ObjectKey::new("default", "a"))
                .is_none()
        );
        assert!(!runs(&rt, &instance).await);
    }
}
