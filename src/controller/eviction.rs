//! The eviction queue: the work half of a drain, apart from its decision.
//!
//! Termination (in the controller's pass) decides which pods of a draining
//! node to evict and [`EvictionQueue::add`]s them; the queue evicts them
//! through the eviction API and retries each refused pod on its own
//! schedule, as Karpenter v1.14.1's eviction queue does
//! (`pkg/controllers/node/termination/terminator/eviction.go`):
//! - a pod is queued once (by namespace, name and UID) until its eviction
//!   is accepted, or the pod is gone or replaced (404, 409, or the cache
//!   says so): the eviction names the UID as a precondition, so a pod
//!   recreated under the same name (a StatefulSet's) is never evicted in
//!   its predecessor's stead;
//! - a newly queued pod is evicted at once; each refusal (a budget's 429,
//!   or any other error) retries it after 100 ms, doubling up to 10 s
//!   (the workqueue's per-item exponential limiter), or later when the
//!   overall limit says so: a token bucket of 100 retries a second with a
//!   burst of 1,000 (the reference's bucket at one CPU), whichever is
//!   later;
//! - at most [`EVICTION_CONCURRENCY`] evictions are in flight at once.
//!
//! The queue runs beside the pass, not in it: `dovetail controller` runs
//! [`EvictionQueue::run`] as its own task, woken by additions and by the
//! next retry, so a drain whose budget refuses evictions every 100 ms
//! does not make every provisioning and disruption pass run at that rate
//! (an accepted eviction changes a pod, and that wakes the pass). The
//! simulation, and tests, call [`EvictionQueue::process`] after the pass
//! on the injected clock, so retries fall on its steps, deterministically.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;

use super::Event;
use super::metrics::Metrics;
use crate::api::SlimPod;
use crate::clock::{Clock, Timestamp};
use crate::cluster::{Cluster, DeleteParams, ObjectKey, Preconditions};

/// The first retry of a refused eviction (the reference's
/// `evictionQueueBaseDelay`).
pub const EVICTION_BASE_DELAY: Duration = Duration::from_millis(100);
/// The longest wait between two evictions of one pod
/// (`evictionQueueMaxDelay`).
pub const EVICTION_MAX_DELAY: Duration = Duration::from_secs(10);
/// Retries a second across every pod: the reference's bucket at one CPU
/// (`GetTypedBucketConfigs(100, 100, 100)`).
pub const EVICTION_QPS: f64 = 100.0;
/// The bucket's size: ten seconds' worth of retries.
pub const EVICTION_BURST: f64 = 1000.0;
/// Evictions in flight at once (the reference's `MaxConcurrentReconciles`
/// at one CPU).
pub const EVICTION_CONCURRENCY: usize = 100;

/// A queued pod: evictions are keyed by UID as well as name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodKey {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl PodKey {
    pub fn of(pod: &SlimPod) -> PodKey {
        PodKey {
            namespace: pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
        }
    }
}

/// One queued pod.
#[derive(Debug, Clone)]
struct Item {
    /// When it is next evicted.
    due: Timestamp,
    /// Refusals so far: the next retry waits `BASE × 2^(failures − 1)`.
    failures: u32,
    /// Whether an eviction of it is in flight.
    in_flight: bool,
    /// The NodeClaim whose drain queued it, for Events.
    nodeclaim: String,
    /// `karpenter_pods_drained_total`'s reason: the NodeClaim's disruption
    /// reason when it was queued.
    reason: String,
}

/// A token bucket on the injected clock (`golang.org/x/time/rate`'s
/// reservations: tokens may go negative, a reservation waits until its
/// token has been refilled).
#[derive(Debug, Clone)]
struct Bucket {
    tokens: f64,
    at: Timestamp,
}

impl Bucket {
    /// Takes a token at `now`; how long until it is there.
    fn reserve(&mut self, now: Timestamp) -> Duration {
        let elapsed = Duration::try_from(now.duration_since(self.at))
            .unwrap_or_default()
            .as_secs_f64();
        if now > self.at {
            self.at = now;
        }
        self.tokens = (self.tokens + elapsed * EVICTION_QPS).min(EVICTION_BURST) - 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / EVICTION_QPS)
        }
    }
}

/// The wait before the retry that follows the `failures`-th refusal.
pub fn retry_delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(30);
    EVICTION_BASE_DELAY
        .saturating_mul(1 << doublings)
        .min(EVICTION_MAX_DELAY)
}

#[derive(Debug, Default)]
struct State {
    items: BTreeMap<PodKey, Item>,
    bucket: Option<Bucket>,
}

/// How one eviction ended.
enum Outcome {
    /// Accepted: the pod is terminating.
    Evicted,
    /// The pod is gone, or is another pod now: nothing to do.
    Gone,
    /// Refused (a budget's 429, or another error): retried later.
    Refused(String),
}

/// The pods waiting to be evicted; shared by the controller (which adds
/// to it) and whoever runs it.
#[derive(Debug, Default)]
pub struct EvictionQueue {
    state: Mutex<State>,
    /// Wakes [`EvictionQueue::run`] when pods are added.
    added: tokio::sync::Notify,
}

impl EvictionQueue {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues a pod to be evicted now, unless it is queued already (its
    /// retry schedule then stands). Returns whether it was added.
    pub fn add(&self, pod: &SlimPod, nodeclaim: &str, reason: &str, now: Timestamp) -> bool {
        let key = PodKey::of(pod);
        let mut state = self.state();
        if state.items.contains_key(&key) {
            return false;
        }
        state.items.insert(
            key,
            Item {
                due: now,
                failures: 0,
                in_flight: false,
                nodeclaim: nodeclaim.to_string(),
                reason: reason.to_string(),
            },
        );
        drop(state);
        self.added.notify_one();
        true
    }

    /// Whether the pod is queued.
    pub fn contains(&self, pod: &SlimPod) -> bool {
        self.state().items.contains_key(&PodKey::of(pod))
    }

    /// How many pods are queued.
    pub fn len(&self) -> usize {
        self.state().items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// When the next queued pod is due, if any is waiting.
    pub fn next_due(&self) -> Option<Timestamp> {
        self.state()
            .items
            .values()
            .filter(|i| !i.in_flight)
            .map(|i| i.due)
            .min()
    }

    /// The pods due at `now`, in the order of their due time (then key),
    /// marked in flight.
    fn take_due(&self, now: Timestamp, limit: usize) -> Vec<(PodKey, Item)> {
        let mut state = self.state();
        let mut due: Vec<(PodKey, Item)> = state
            .items
            .iter()
            .filter(|(_, i)| !i.in_flight && i.due <= now)
            .map(|(k, i)| (k.clone(), i.clone()))
            .collect();
        due.sort_by(|a, b| a.1.due.cmp(&b.1.due).then_with(|| a.0.cmp(&b.0)));
        due.truncate(limit);
        for (k, _) in &due {
            if let Some(i) = state.items.get_mut(k) {
                i.in_flight = true;
            }
        }
        due
    }

    /// Records how an eviction ended: the pod leaves the queue, or waits
    /// for its next retry. Returns the number of refusals so far.
    fn finish(&self, key: &PodKey, outcome: &Outcome, now: Timestamp) -> u32 {
        let mut state = self.state();
        if !matches!(outcome, Outcome::Refused(_)) {
            state.items.remove(key);
            return 0;
        }
        let bucket = state
            .bucket
            .get_or_insert(Bucket {
                tokens: EVICTION_BURST,
                at: now,
            })
            .reserve(now);
        let Some(item) = state.items.get_mut(key) else {
            return 0;
        };
        item.failures += 1;
        item.in_flight = false;
        let wait = retry_delay(item.failures).max(bucket);
        item.due = now.checked_add(wait).unwrap_or(now);
        item.failures
    }

    /// Evicts the pods due now (at most `concurrency` at a time), and
    /// returns the Events to record: `Evicted` for each pod evicted, and
    /// `EvictionBlocked` on the NodeClaim for a pod's first refusal (its
    /// retries every 10 s would say the same).
    pub async fn process<C: Cluster>(
        &self,
        cluster: &C,
        clock: &dyn Clock,
        metrics: &Metrics,
        concurrency: usize,
    ) -> Vec<Event> {
        let mut events = Vec::new();
        loop {
            let due = self.take_due(clock.now(), concurrency.max(1) * 4);
            if due.is_empty() {
                return events;
            }
            let outcomes: Vec<(PodKey, Item, Outcome)> = futures::stream::iter(due)
                .map(|(key, item)| async move {
                    let outcome = evict(cluster, &key).await;
                    (key, item, outcome)
                })
                .buffered(concurrency.max(1))
                .collect()
                .await;
            let now = clock.now();
            for (key, item, outcome) in outcomes {
                let failures = self.finish(&key, &outcome, now);
                let pod = format!("{}/{}", key.namespace, key.name);
                let object = format!("NodeClaim/{}", item.nodeclaim);
                match outcome {
                    Outcome::Evicted => {
                        metrics
                            .pods_drained
                            .with_label_values(&[item.reason.as_str()])
                            .inc();
                        events.push(Event::about(
                            now,
                            format!("Pod/{pod}"),
                            "Evicted",
                            format!("evicted to drain {object}"),
                        ));
                    }
                    Outcome::Gone => {}
                    Outcome::Refused(e) => {
                        tracing::debug!(pod, failures, error = %e, "eviction refused");
                        if failures == 1 {
                            events.push(Event::about(
                                now,
                                object,
                                "EvictionBlocked",
                                format!("pod {pod}: {e}"),
                            ));
                        }
                    }
                }
            }
        }
    }

    /// Runs the queue until dropped: evicts pods as they come due, sleeping
    /// until the next is due or a pod is added, and hands the Events to
    /// `record` (the runtime writes them in the background).
    pub async fn run<C: Cluster>(
        self: Arc<Self>,
        cluster: Arc<C>,
        clock: Arc<dyn Clock>,
        metrics: Metrics,
        mut record: impl FnMut(Vec<Event>),
    ) {
        loop {
            // Registered before looking, so an addition in between wakes
            // the wait below.
            let added = self.added.notified();
            let events = self
                .process(
                    cluster.as_ref(),
                    clock.as_ref(),
                    &metrics,
                    EVICTION_CONCURRENCY,
                )
                .await;
            if !events.is_empty() {
                record(events);
            }
            let wait = self
                .next_due()
                .map(|t| Duration::try_from(t.duration_since(clock.now())).unwrap_or_default());
            match wait {
                Some(d) => {
                    tokio::select! {
                        () = clock.sleep(d) => {}
                        () = added => {}
                    }
                }
                None => added.await,
            }
        }
    }
}

/// One eviction: the cached pod must still be that pod and not be
/// terminating already; the API server checks the UID again.
async fn evict<C: Cluster>(cluster: &C, key: &PodKey) -> Outcome {
    let object = ObjectKey::new(&key.namespace, &key.name);
    match cluster.get::<SlimPod>(&object) {
        Some(p)
            if p.metadata.uid.as_deref().unwrap_or_default() == key.uid
                && p.metadata.deletion_timestamp.is_none() => {}
        _ => return Outcome::Gone,
    }
    let params = DeleteParams {
        preconditions: Preconditions {
            uid: (!key.uid.is_empty()).then(|| key.uid.clone()),
            resource_version: None,
        },
        ..DeleteParams::default()
    };
    match cluster.evict_with(&key.namespace, &key.name, &params).await {
        Ok(()) => Outcome::Evicted,
        Err(e) if e.is_not_found() || e.code() == 409 => Outcome::Gone,
        Err(e) => Outcome::Refused(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;

    use super::*;
    use crate::clock::ManualClock;
    use crate::testing::{from_yaml, pod};
    use crate::world::MemoryCluster;

    /// A running pod of the app `web` on `n1`.
    fn web(name: &str) -> Pod {
        let web = pod("default", name).label("app", "web");
        web.on("n1").running().build()
    }

    struct Env {
        clock: Arc<ManualClock>,
        cluster: MemoryCluster,
        metrics: Metrics,
        queue: EvictionQueue,
        rt: tokio::runtime::Runtime,
    }

    fn env() -> Env {
        let clock = Arc::new(ManualClock::new(Timestamp::UNIX_EPOCH));
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        Env {
            cluster: MemoryCluster::new(dyn_clock.clone()),
            metrics: Metrics::with_clock(dyn_clock),
            clock,
            queue: EvictionQueue::default(),
            rt: tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap(),
        }
    }

    impl Env {
        fn process(&self) -> Vec<Event> {
            self.rt.block_on(self.queue.process(
                &self.cluster,
                self.clock.as_ref(),
                &self.metrics,
                EVICTION_CONCURRENCY,
            ))
        }

        fn slim(&self, name: &str) -> Arc<SlimPod> {
            Cluster::get::<SlimPod>(&self.cluster, &ObjectKey::new("default", name)).unwrap()
        }

        fn add(&self, name: &str) -> bool {
            let pod = self.slim(name);
            self.queue.add(&pod, "c1", "Interrupted", self.clock.now())
        }

        /// Seconds since the epoch of the next due pod.
        fn next_due(&self) -> Option<f64> {
            let t = self.queue.next_due()?;
            Some(
                Duration::try_from(t.duration_since(Timestamp::UNIX_EPOCH))
                    .unwrap()
                    .as_secs_f64(),
            )
        }

        fn terminating(&self, name: &str) -> bool {
            self.cluster
                .get_opt::<Pod>(&ObjectKey::new("default", name))
                .is_some_and(|p| p.metadata.deletion_timestamp.is_some())
        }
    }

    fn reasons(events: &[Event]) -> Vec<(&str, &str)> {
        events
            .iter()
            .map(|e| (e.object.as_str(), e.reason.as_str()))
            .collect()
    }

    /// eviction.go: `NewTypedItemExponentialFailureRateLimiter(100ms,
    /// 10s)`: each refusal of a pod doubles its wait, from 100 ms to 10 s
    /// (not the node-wide 5, 10, 20, 40, 60 s of the drain before).
    #[test]
    fn a_refused_pod_is_retried_from_100_ms_doubling_to_10_s() {
        let waits: Vec<u64> = (1..=10)
            .map(|n| retry_delay(n).as_millis() as u64)
            .collect();
        assert_eq!(
            waits,
            [100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000, 10_000]
        );
        assert_eq!(retry_delay(u32::MAX), EVICTION_MAX_DELAY);
    }

    /// A pod a budget protects is evicted at once, then retried on the
    /// injected clock at 0.1, 0.3, 0.7, 1.5, 3.1, 6.3, 12.7, 22.7 and
    /// 32.7 s; it says it is blocked once; when the budget allows, the next
    /// retry evicts it and it leaves the queue.
    #[test]
    fn a_budget_refusal_is_retried_on_the_pods_own_schedule_until_it_is_evicted() {
        let e = env();
        e.cluster.create(web("a")).unwrap();
        e.cluster
            .create::<PodDisruptionBudget>(from_yaml(
                "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: web, namespace: default}\nspec: {minAvailable: 1, selector: {matchLabels: {app: web}}}\n",
            ))
            .unwrap();
        assert!(e.add("a"));
        assert!(!e.add("a"), "queued once");
        assert_eq!(e.next_due(), Some(0.0), "evicted at once");
        let mut tries = Vec::new();
        let mut events = Vec::new();
        for _ in 0..10 {
            let due = e.next_due().unwrap();
            e.clock
                .set(
                    Timestamp::UNIX_EPOCH
                        .checked_add(Duration::from_secs_f64(due))
                        .unwrap(),
                )
                .unwrap();
            tries.push((due * 10.0).round() / 10.0);
            events.extend(e.process());
        }
        assert_eq!(tries, [0.0, 0.1, 0.3, 0.7, 1.5, 3.1, 6.3, 12.7, 22.7, 32.7]);
        assert_eq!(
            reasons(&events),
            [("NodeClaim/c1", "EvictionBlocked")],
            "blocked once, not per retry"
        );
        assert!(events[0].message.contains("default/a"), "{events:?}");
        // Between retries nothing is evicted.
        e.clock.advance(Duration::from_secs(5)).unwrap();
        assert!(e.process().is_empty());
        assert!(!e.terminating("a"));
        // The budget goes: the next retry evicts it.
        e.cluster
            .delete::<PodDisruptionBudget>(&ObjectKey::new("default", "web"))
            .unwrap();
        e.clock
            .set(
                Timestamp::UNIX_EPOCH
                    .checked_add(Duration::from_secs_f64(42.7))
                    .unwrap(),
            )
            .unwrap();
        let events = e.process();
        assert_eq!(reasons(&events), [("Pod/default/a", "Evicted")]);
        assert!(e.terminating("a"));
        assert!(e.queue.is_empty());
        assert_eq!(
            e.metrics
                .pods_drained
                .with_label_values(&["Interrupted"])
                .get(),
            1
        );
    }

    /// Pods are retried each on its own schedule: a pod queued later is
    /// tried at once, whatever the others' waits.
    #[test]
    fn each_pod_has_its_own_schedule() {
        let e = env();
        e.cluster.create(web("a")).unwrap();
        e.cluster.create(web("b")).unwrap();
        e.cluster
            .create::<PodDisruptionBudget>(from_yaml(
                "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: web, namespace: default}\nspec: {minAvailable: 2, selector: {matchLabels: {app: web}}}\n",
            ))
            .unwrap();
        e.add("a");
        for _ in 0..5 {
            e.clock.set(e.queue.next_due().unwrap()).unwrap();
            e.process();
        }
        assert_eq!(e.next_due(), Some(3.1));
        e.add("b");
        assert_eq!(e.next_due(), Some(1.5), "b is due now");
        e.process();
        // b's first retry is 100 ms after its first refusal.
        assert_eq!(e.next_due(), Some(1.6));
    }

    /// eviction.go: the UID is a precondition, and a 404 or 409 ends the
    /// pod's turn in the queue: "should not evict a pod that was replaced
    /// by one of the same name" (a StatefulSet's).
    #[test]
    fn a_pod_replaced_under_the_same_name_or_gone_is_not_evicted() {
        let e = env();
        e.cluster.create(web("a")).unwrap();
        e.cluster.create(web("b")).unwrap();
        e.add("a");
        e.add("b");
        let old_uid = e.slim("a").metadata.uid.clone();
        e.cluster
            .delete_with::<Pod>(
                &ObjectKey::new("default", "a"),
                &DeleteParams::with_grace_period(0),
            )
            .unwrap();
        e.cluster.create(web("a")).unwrap();
        assert_ne!(e.slim("a").metadata.uid, old_uid);
        e.cluster
            .delete_with::<Pod>(
                &ObjectKey::new("default", "b"),
                &DeleteParams::with_grace_period(0),
            )
            .unwrap();
        let events = e.process();
        assert!(events.is_empty(), "{events:?}");
        assert!(!e.terminating("a"), "the new pod a is not evicted");
        assert!(e.queue.is_empty());
        // Even when the cache has not seen the new pod yet, the API server
        // checks the UID: a 409.
        let stale = PodKey {
            namespace: "default".into(),
            name: "a".into(),
            uid: old_uid.unwrap(),
        };
        let params = DeleteParams {
            preconditions: Preconditions {
                uid: Some(stale.uid.clone()),
                resource_version: None,
            },
            ..DeleteParams::default()
        };
        let err = e.cluster.evict_with("default", "a", &params).unwrap_err();
        assert_eq!(err.code(), 409, "{err}");
    }

    /// The overall limit: a bucket of 1,000 retries refilled at 100 a
    /// second, beside each pod's own wait (`NewTypedMaxOfRateLimiter`).
    #[test]
    fn retries_beyond_the_burst_wait_for_the_bucket() {
        let mut bucket = Bucket {
            tokens: EVICTION_BURST,
            at: Timestamp::UNIX_EPOCH,
        };
        for _ in 0..1000 {
            assert_eq!(bucket.reserve(Timestamp::UNIX_EPOCH), Duration::ZERO);
        }
        let wait = bucket.reserve(Timestamp::UNIX_EPOCH);
        assert_eq!(wait.as_millis(), 10);
        let wait = bucket.reserve(Timestamp::UNIX_EPOCH);
        assert_eq!(wait.as_millis(), 20);
        // A second later, 100 more are there (less the two borrowed).
        let later = Timestamp::UNIX_EPOCH
            .checked_add(Duration::from_secs(1))
            .unwrap();
        for _ in 0..98 {
            assert_eq!(bucket.reserve(later), Duration::ZERO);
        }
        assert!(bucket.reserve(later) > Duration::ZERO);
    }
}
