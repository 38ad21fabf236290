//! Leader election with a `coordination.k8s.io/v1` Lease, so that several
//! replicas of `dovetail controller` can run and only one writes.
//!
//! The protocol is client-go's, through the [`Cluster`] trait (so the
//! in-memory server runs it in tests exactly as the API server does):
//!
//! - a replica **acquires** the Lease by creating it, or by updating it
//!   (with the resourceVersion it read, so two replicas racing for it
//!   cannot both win: the second write is a 409) when it is released (no
//!   holder) or expired;
//! - the holder **renews** it every [`LeaseConfig::retry_period`] by
//!   writing `renewTime`;
//! - a Lease is **expired** when it has not changed for
//!   `leaseDurationSeconds` as *this* replica observed it, on its own
//!   clock: clocks of different machines are never compared;
//! - a holder that could not renew for [`LeaseConfig::renew_deadline`], or
//!   that finds another holder in the Lease, **loses** leadership and stops
//!   writing at once;
//! - on shutdown the holder **releases** the Lease (no holder, a lease of
//!   one second), so a standby takes over without waiting for it to expire.
//!
//! `LeaseConfig`'s defaults: a renewal every 2 s, a renew deadline of 10 s,
//! a lease duration of 15 s. Each round is bounded by what is left of the
//! renew deadline since the last renewal: a round that passes it steps down
//! whether or not its request returns. Each renewal extends the
//! `cluster::Fence` that the runtime's writes pass (`cluster::Fenced`) to the
//! renewal's start plus the renew deadline.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use tokio::sync::watch;

use crate::clock::{Clock, Timestamp};
use crate::cluster::{ApiError, Cluster, Fence, ObjectKey};

/// How a replica takes part in the election. The defaults are client-go's
/// (and the reference autoscaler's).
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    /// This replica's name in `holderIdentity` (the pod's name).
    pub identity: String,
    /// How long a Lease that stopped changing is respected.
    pub lease_duration: Duration,
    /// How long the holder keeps trying to renew before it steps down.
    pub renew_deadline: Duration,
    /// How often each replica tries to acquire or renew.
    pub retry_period: Duration,
}

impl LeaseConfig {
    pub fn new(namespace: &str, name: &str, identity: &str) -> Self {
        LeaseConfig {
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity: identity.to_string(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    fn key(&self) -> ObjectKey {
        ObjectKey::new(self.namespace.clone(), self.name.clone())
    }
}

/// One replica's side of the election.
pub struct Elector<C: Cluster> {
    cluster: Arc<C>,
    clock: Arc<dyn Clock>,
    config: LeaseConfig,
    /// The Lease as last read, and when (on this replica's clock) its
    /// holder or renew time last changed.
    observed: Option<(LeaseSpec, Timestamp)>,
    /// When this replica last renewed successfully, while it leads.
    renewed: Option<Timestamp>,
    /// When the last round reached the API server (read or wrote).
    healthy_at: Option<Timestamp>,
    leading: watch::Sender<bool>,
    /// The probes' view, updated after every round.
    health: Option<Arc<super::http::Health>>,
    /// Until when this replica's writes may go ([`Fence`]).
    fence: Option<Arc<Fence>>,
}

impl<C: Cluster> Elector<C> {
    pub fn new(cluster: Arc<C>, clock: Arc<dyn Clock>, config: LeaseConfig) -> Self {
        Elector {
            cluster,
            clock,
            config,
            observed: None,
            renewed: None,
            healthy_at: None,
            leading: watch::Sender::new(false),
            health: None,
            fence: None,
        }
    }

    /// Reports whether this replica stands by healthily to `health` (for
    /// `/readyz`) after every round.
    /// Extends `fence` by each renewal (to its start plus the renew
    /// deadline) and closes it when leadership is lost.
    pub fn with_fence(mut self, fence: Arc<Fence>) -> Self {
        self.fence = Some(fence);
        self
    }

    pub fn with_health(mut self, health: Arc<super::http::Health>) -> Self {
        self.health = Some(health);
        self
    }

    /// Whether this replica leads, as it changes.
    pub fn leading(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }

    pub fn is_leader(&self) -> bool {
        *self.leading.borrow()
    }

    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// Whether the election works: the last round that reached the server
    /// is at most a lease duration old. A standby that is healthy is ready.
    pub fn is_healthy(&self) -> bool {
        let now = self.clock.now();
        self.healthy_at
            .is_some_and(|t| elapsed(t, now) <= self.config.lease_duration)
    }

    fn set_leading(&self, leading: bool) {
        if !leading && let Some(f) = &self.fence {
            f.close();
        }
        self.leading.send_if_modified(|l| {
            let changed = *l != leading;
            *l = leading;
            changed
        });
    }

    /// One round: acquires the Lease, or renews it while leading. Returns
    /// whether this replica leads afterwards. An error is a round that did
    /// not reach a decision (the server failed); while leading, such
    /// rounds are tolerated until the renew deadline.
    ///
    /// A round is bounded as client-go bounds it: while leading, by what is
    /// left of the renew deadline since the last renewal (a round that
    /// passes it steps down at once, whether or not the request ever
    /// returns); while standing by, by the renew deadline.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, ApiError> {
        let started = self.clock.now();
        let bound = match self.renewed.filter(|_| self.is_leader()) {
            Some(t) => self
                .config
                .renew_deadline
                .saturating_sub(elapsed(t, started)),
            None => self.config.renew_deadline,
        };
        let timed_out = || ApiError::Internal {
            message: format!(
                "the election round did not finish within {:.1}s",
                bound.as_secs_f64()
            ),
        };
        // While leading, a round that runs out of time ran out of the
        // renew deadline.
        let (result, deadline_passed) = if bound.is_zero() {
            (Err(timed_out()), true)
        } else {
            match tokio::time::timeout(bound, self.round()).await {
                Ok(r) => (r, false),
                Err(_) => (Err(timed_out()), true),
            }
        };
        let now = self.clock.now();
        match &result {
            Ok(true) => {
                // The renewal vouches from when it was sent, not answered.
                self.renewed = Some(started);
                if let Some(f) = &self.fence {
                    f.extend(
                        started
                            .checked_add(self.config.renew_deadline)
                            .unwrap_or(started),
                    );
                }
                self.healthy_at = Some(now);
                self.set_leading(true);
            }
            Ok(false) => {
                self.healthy_at = Some(now);
                self.renewed = None;
                if self.is_leader() {
                    tracing::warn!(lease = %self.config.name, "leadership lost: the lease has another holder");
                }
                self.set_leading(false);
            }
            Err(error) => {
                let late = deadline_passed
                    || self
                        .renewed
                        .is_none_or(|t| elapsed(t, now) >= self.config.renew_deadline);
                if self.is_leader() && late {
                    tracing::warn!(lease = %self.config.name, %error, "leadership lost: the lease could not be renewed within the renew deadline");
                    self.renewed = None;
                    self.set_leading(false);
                }
            }
        }
        if let Some(h) = &self.health {
            h.standby_healthy
                .store(self.is_healthy(), std::sync::atomic::Ordering::Relaxed);
        }
        result.map(|_| self.is_leader())
    }

    async fn round(&mut self) -> Result<bool, ApiError> {
        let now = self.clock.now();
        let key = self.config.key();
        let Some(current) = self.cluster.get::<Lease>(&key) else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(now, now, 0)),
            };
            return match self.cluster.create(lease).await {
                Ok(created) => {
                    self.observe(&created, now);
                    tracing::info!(lease = %self.config.name, identity = %self.config.identity, "acquired the lease (created it)");
                    Ok(true)
                }
                // Another replica created it first.
                Err(e) if e.code() == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        self.observe(&current, now);
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty());
        let mine = holder == Some(self.config.identity.as_str());
        if !mine && holder.is_some() && !self.expired(now) {
            return Ok(false);
        }
        let (acquired, transitions) = if mine {
            (
                spec.acquire_time.map_or(now, |t| t.0),
                spec.lease_transitions.unwrap_or(0),
            )
        } else {
            (now, spec.lease_transitions.unwrap_or(0) + 1)
        };
        let mut lease = (*current).clone();
        lease.spec = Some(self.spec(acquired, now, transitions));
        match self.cluster.replace(lease).await {
            Ok(written) => {
                self.observe(&written, now);
                if !mine {
                    tracing::info!(lease = %self.config.name, identity = %self.config.identity, previous = holder.unwrap_or(""), "acquired the lease");
                }
                Ok(true)
            }
            // Changed since it was read: someone else renewed or took it.
            Err(e) if e.code() == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn spec(&self, acquired: Timestamp, renewed: Timestamp, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.config.lease_duration.as_secs()).unwrap_or(i32::MAX),
            ),
            acquire_time: Some(MicroTime(acquired)),
            renew_time: Some(MicroTime(renewed)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// Records the Lease as read at `now`, restarting its expiry when its
    /// holder or renew time changed.
    fn observe(&mut self, lease: &Lease, now: Timestamp) {
        let spec = lease.spec.clone().unwrap_or_default();
        let same = self.observed.as_ref().is_some_and(|(s, _)| {
            s.holder_identity == spec.holder_identity && s.renew_time == spec.renew_time
        });
        if !same {
            self.observed = Some((spec, now));
        }
    }

    fn expired(&self, now: Timestamp) -> bool {
        let Some((spec, seen)) = &self.observed else {
            return true;
        };
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.config.lease_duration, Duration::from_secs);
        elapsed(*seen, now) >= duration
    }

    /// Gives the Lease up if this replica holds it: no holder, so a standby
    /// acquires it at its next round.
    pub async fn release(&mut self) -> Result<(), ApiError> {
        let was_leader = self.is_leader();
        self.set_leading(false);
        self.renewed = None;
        if !was_leader {
            return Ok(());
        }
        let Some(current) = self.cluster.get::<Lease>(&self.config.key()) else {
            return Ok(());
        };
        let spec = current.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        let now = self.clock.now();
        let mut lease = (*current).clone();
        lease.spec = Some(LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            renew_time: Some(MicroTime(now)),
            ..spec
        });
        self.cluster.replace(lease).await?;
        tracing::info!(lease = %self.config.name, "released the lease");
        Ok(())
    }

    /// Runs rounds every retry period until `shutdown` resolves, then
    /// releases the Lease if it holds it.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) {
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            if let Err(error) = self.try_acquire_or_renew().await {
                tracing::warn!(lease = %self.config.name, %error, "leader election round failed");
            }
            tokio::select! {
                () = &mut shutdown => break,
                () = tokio::time::sleep(self.config.retry_period) => {}
            }
        }
        if let Err(error) = self.release().await {
            tracing::warn!(lease = %self.config.name, %error, "could not release the lease; a standby takes over when it expires");
        }
    }
}

fn elapsed(from: Timestamp, to: Timestamp) -> Duration {
    if to > from {
        Duration::try_from(to.duration_since(from)).unwrap_or_default()
    } else {
        Duration::ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::world::MemoryCluster;

    struct Replicas {
        clock: Arc<ManualClock>,
        cluster: Arc<MemoryCluster>,
    }

    impl Replicas {
        fn new() -> Self {
            let clock = Arc::new(ManualClock::new(Timestamp::UNIX_EPOCH));
            let dyn_clock: Arc<dyn Clock> = clock.clone();
            Replicas {
                cluster: Arc::new(MemoryCluster::new(dyn_clock)),
                clock,
            }
        }

        fn elector(&self, identity: &str) -> Elector<MemoryCluster> {
            Elector::new(
                self.cluster.clone(),
                self.clock.clone(),
                LeaseConfig::new("dovetail", "dovetail-leader", identity),
            )
        }

        fn lease(&self) -> LeaseSpec {
            self.cluster
                .get_opt::<Lease>(&ObjectKey::new("dovetail", "dovetail-leader"))
                .and_then(|l| l.spec.clone())
                .unwrap()
        }

        fn advance(&self, secs: u64) {
            self.clock.advance(Duration::from_secs(secs)).unwrap();
        }
    }

    #[tokio::test]
    async fn the_first_replica_acquires_by_creating_the_lease_and_the_second_stands_by() {
        let r = Replicas::new();
        let (mut a, mut b) = (r.elector("a"), r.elector("b"));
        let leading_a = a.leading();
        assert!(a.try_acquire_or_renew().await.unwrap());
        assert!(*leading_a.borrow());
        let lease = r.lease();
        assert_eq!(lease.holder_identity.as_deref(), Some("a"));
        assert_eq!(lease.lease_duration_seconds, Some(15));
        assert_eq!(lease.lease_transitions, Some(0));
        assert!(!b.try_acquire_or_renew().await.unwrap());
        assert!(!b.is_leader());
        assert!(b.is_healthy(), "a standby that reads the lease is healthy");
    }

    #[tokio::test]
    async fn the_leader_renews_and_a_standby_never_takes_a_renewed_lease() {
        let r = Replicas::new();
        let (mut a, mut b) = (r.elector("a"), r.elector("b"));
        a.try_acquire_or_renew().await.unwrap();
        b.try_acquire_or_renew().await.unwrap();
        for _ in 0..20 {
            r.advance(2);
            assert!(a.try_acquire_or_renew().await.unwrap());
            assert!(!b.try_acquire_or_renew().await.unwrap());
        }
        let lease = r.lease();
        assert_eq!(lease.holder_identity.as_deref(), Some("a"));
        assert_eq!(lease.renew_time.unwrap().0, r.clock.now());
        assert_eq!(lease.acquire_time.unwrap().0, Timestamp::UNIX_EPOCH);
    }

    #[tokio::test]
    async fn a_lease_that_stops_being_renewed_is_taken_over_and_the_old_leader_steps_down() {
        let r = Replicas::new();
        let (mut a, mut b) = (r.elector("a"), r.elector("b"));
        a.try_acquire_or_renew().await.unwrap();
        b.try_acquire_or_renew().await.unwrap();
        // a stalls: b waits a full lease duration from when it saw the
        // last change, not from the renew time written in the lease.
        r.advance(14);
        assert!(!b.try_acquire_or_renew().await.unwrap());
        r.advance(1);
        assert!(b.try_acquire_or_renew().await.unwrap());
        let lease = r.lease();
        assert_eq!(lease.holder_identity.as_deref(), Some("b"));
        assert_eq!(lease.lease_transitions, Some(1));
        // a comes back past its renew deadline: it stops leading before it
        // sends anything, then finds b holding a fresh lease.
        let leading_a = a.leading();
        assert!(*leading_a.borrow());
        let late = a.try_acquire_or_renew().await.unwrap_err();
        assert!(late.to_string().contains("did not finish"), "{late}");
        assert!(!*leading_a.borrow());
        assert!(!a.try_acquire_or_renew().await.unwrap());
        assert!(!*leading_a.borrow());
    }

    #[tokio::test]
    async fn a_leader_that_cannot_renew_steps_down_at_the_renew_deadline() {
        let r = Replicas::new();
        let mut a = r.elector("a");
        a.try_acquire_or_renew().await.unwrap();
        let down = ApiError::Internal {
            message: "etcd unavailable".into(),
        };
        r.cluster.inject(
            crate::world::Fault::new(crate::world::Write::Replace, "Lease", down.clone()).times(10),
        );
        r.advance(2);
        assert_eq!(a.try_acquire_or_renew().await, Err(down.clone()));
        assert!(a.is_leader(), "one failed renewal is tolerated");
        r.advance(7);
        assert_eq!(a.try_acquire_or_renew().await, Err(down));
        assert!(
            a.is_leader(),
            "9s without a renewal: still within the deadline"
        );
        r.advance(1);
        assert!(a.try_acquire_or_renew().await.is_err());
        assert!(!a.is_leader(), "10s without a renewal: stepped down");
    }

    #[tokio::test]
    async fn the_fence_opens_with_each_renewal_for_the_renew_deadline_and_closes_on_step_down() {
        let r = Replicas::new();
        let fence = Arc::new(Fence::new(r.clock.clone()));
        let mut a = r.elector("a").with_fence(fence.clone());
        assert!(fence.check().is_err(), "closed until the first renewal");
        a.try_acquire_or_renew().await.unwrap();
        fence.check().unwrap();
        // Stopped for 10 s (SIGSTOP): the fence has passed before the
        // election task runs again, so nothing is written on the old term.
        r.advance(10);
        assert!(fence.check().is_err());
        assert!(a.try_acquire_or_renew().await.is_err());
        assert!(!a.is_leader());
        assert!(fence.check().is_err());
        // A new term opens it again.
        assert!(a.try_acquire_or_renew().await.unwrap());
        fence.check().unwrap();
        a.release().await.unwrap();
        assert!(fence.check().is_err());
    }

    #[tokio::test]
    async fn a_released_lease_is_acquired_by_a_standby_at_once() {
        let r = Replicas::new();
        let (mut a, mut b) = (r.elector("a"), r.elector("b"));
        a.try_acquire_or_renew().await.unwrap();
        b.try_acquire_or_renew().await.unwrap();
        a.release().await.unwrap();
        assert!(!a.is_leader());
        assert_eq!(r.lease().holder_identity, None);
        // No waiting for the lease to expire.
        assert!(b.try_acquire_or_renew().await.unwrap());
        assert_eq!(r.lease().holder_identity.as_deref(), Some("b"));
        // Releasing when not leading writes nothing.
        let before = r.cluster.resource_version();
        a.release().await.unwrap();
        assert_eq!(r.cluster.resource_version(), before);
    }

    #[tokio::test]
    async fn two_replicas_racing_for_an_expired_lease_cannot_both_win() {
        let r = Replicas::new();
        let (mut a, mut b, mut c) = (r.elector("a"), r.elector("b"), r.elector("c"));
        a.try_acquire_or_renew().await.unwrap();
        b.try_acquire_or_renew().await.unwrap();
        c.try_acquire_or_renew().await.unwrap();
        r.advance(15);
        // Both read the expired lease; b writes first, c's write carries
        // the old resourceVersion and conflicts.
        let stale = (*r
            .cluster
            .get_opt::<Lease>(&ObjectKey::new("dovetail", "dovetail-leader"))
            .unwrap())
        .clone();
        assert!(b.try_acquire_or_renew().await.unwrap());
        let mut racing = stale;
        racing.spec.as_mut().unwrap().holder_identity = Some("c".into());
        let err = Cluster::replace(r.cluster.as_ref(), racing)
            .await
            .unwrap_err();
        assert!(err.is_conflict(), "{err}");
        assert!(!c.try_acquire_or_renew().await.unwrap());
        assert_eq!(r.lease().holder_identity.as_deref(), Some("b"));
    }
}
