//! [`MemoryCluster`]: the in-memory API server.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::sync::watch;

use super::apply;
use super::pdb::{self, ALWAYS_ALLOW, BudgetPods};
use super::seam::{Access, Fault, Seam};
use super::store::Gc;
use super::store::State;
use crate::api::SlimPod;
use crate::clock::{Clock, Timestamp, truncate_to_second};
use crate::cluster::ApplyParams;
use crate::cluster::{
    ApiError, DeleteOutcome, DeleteParams, Listed, Object, ObjectKey, ObjectList, Selector,
    Validator, WatchEvent,
};

/// How often the `*_with` helpers retry on a conflict, as client-go's
/// `retry.DefaultRetry` does.
const CONFLICT_RETRIES: usize = 5;

/// An in-memory API server for typed objects.
///
/// Cheap to clone; clones share the same objects. Kinds are registered on
/// first write (or with [`MemoryCluster::register`]); reading a kind that
/// was never written finds nothing.
///
/// Semantics, as the real API server's:
/// - one global, strictly increasing `resourceVersion`; replacing with a
///   stale one is a [`ApiError::Conflict`];
/// - `uid`, `creationTimestamp` and `generation` are set on create;
///   `generation` moves when anything but metadata and status changes;
/// - every kind behaves as if it had a status subresource: [`replace`]
///   ignores status changes, [`update_status`] ignores everything else;
/// - writes that change nothing are not stored and emit no event;
/// - pods are deleted gracefully, other kinds at once; finalizers hold a
///   deleted object with a `deletionTimestamp` until the last one is
///   removed (see the module's "Deletion");
/// - removing an object garbage-collects its dependents across all kinds,
///   in the background, the foreground or orphaning them as the delete
///   asks;
/// - each kind keeps a bounded watch log ([`watch_from`]).
///
/// [`replace`]: MemoryCluster::replace
/// [`update_status`]: MemoryCluster::update_status
/// [`watch_from`]: MemoryCluster::watch_from
#[derive(Clone)]
pub struct MemoryCluster {
    clock: Arc<dyn Clock>,
    state: Arc<RwLock<State>>,
    /// The access log and faults of the [`crate::cluster::Cluster`] interface.
    pub(super) seam: Seam,
    /// The pods as the controller reads them ([`super::views`]).
    pub(super) views: super::views::SharedViews,
    /// The other kinds' lists as the controller reads them.
    lists: super::views::SharedLists,
}

impl std::fmt::Debug for MemoryCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryCluster")
            .field("resource_version", &self.resource_version())
            .finish_non_exhaustive()
    }
}

impl MemoryCluster {
    /// An empty cluster that stamps objects with times from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        MemoryCluster {
            clock,
            state: Arc::new(RwLock::new(State::new())),
            seam: Seam::default(),
            views: Default::default(),
            lists: Default::default(),
        }
    }

    /// Arms a fault: a matching write through the [`crate::cluster::Cluster`]
    /// interface fails with the fault's error and changes nothing. See
    /// [`super::seam`].
    pub fn inject(&self, fault: Fault) {
        self.seam.arm(fault);
    }

    /// Every kind of write made through the [`crate::cluster::Cluster`] interface,
    /// with how often, as RBAC names it.
    pub fn accesses(&self) -> BTreeMap<Access, u64> {
        self.seam.accesses()
    }

    /// Keeps at most `capacity` (at least 1) watch events per kind; older
    /// ones are compacted and watching from before them is
    /// [`ApiError::Gone`].
    pub fn with_watch_log_capacity(self, capacity: usize) -> Self {
        self.set_watch_log_capacity(capacity);
        self
    }

    /// Compacts away every kind's watch events up to `resource_version`,
    /// as an API server compacts its history once its watchers are past
    /// it: a watch from before them is [`ApiError::Gone`] from now on.
    pub fn compact_watch_logs_through(&self, resource_version: u64) {
        self.write().compact_watch_logs_through(resource_version);
    }

    /// [`MemoryCluster::with_watch_log_capacity`] on a cluster in use: each
    /// kind's log is compacted to `capacity` events at once, so a watch
    /// from before them is [`ApiError::Gone`] from now on.
    pub fn set_watch_log_capacity(&self, capacity: usize) {
        self.write().set_watch_log_capacity(capacity);
    }

    /// Pods created without `spec.terminationGracePeriodSeconds` get
    /// `grace` (whole seconds) instead of Kubernetes' default of 30 s, as
    /// the API server's defaulting would give them.
    pub fn with_default_termination_grace_period(self, grace: std::time::Duration) -> Self {
        self.write().shared.default_grace_seconds =
            i64::try_from(grace.as_secs()).unwrap_or(i64::MAX);
        self
    }

    /// The grace period, in seconds, of pods that have none of their own.
    pub fn default_termination_grace_period_seconds(&self) -> i64 {
        self.read().shared.default_grace_seconds
    }

    /// The clock objects are stamped with.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    pub(super) fn read(&self) -> RwLockReadGuard<'_, State> {
        // Nothing mutates the state before all fallible steps are done, so
        // a panic in another thread (a validator) leaves it consistent.
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// The last resource version issued.
    pub fn resource_version(&self) -> u64 {
        self.read().shared.resource_version
    }

    /// Registers a kind ahead of use. Fails if another Rust type already
    /// claimed the same `apiVersion` and `kind`.
    pub fn register<K: Object>(&self) -> Result<(), ApiError> {
        self.write().store_mut::<K>().map(|_| ())
    }

    /// Adds an admission check for `K`; checks run in the order added and
    /// all their messages are reported together.
    pub fn add_validator<K: Object>(
        &self,
        validator: impl Validator<K> + 'static,
    ) -> Result<(), ApiError> {
        let mut state = self.write();
        let (store, _) = state.store_mut::<K>()?;
        store.validators.push(Arc::new(validator));
        Ok(())
    }

    /// Creates an object (POST). Namespaced objects without a namespace go to
    /// `default`; `generateName` is honoured.
    pub fn create<K: Object>(&self, obj: K) -> Result<Arc<K>, ApiError> {
        let now = self.now();
        let mut state = self.write();
        let (store, shared) = state.store_mut::<K>()?;
        store.create(obj, now, shared, false)
    }

    /// Loads an object as it was in a snapshot: its `uid`,
    /// `creationTimestamp`, `generation`, `deletionTimestamp` and status are
    /// kept (missing ones are filled in as on create), any
    /// `resourceVersion` is replaced, and validators are not run.
    pub fn restore<K: Object>(&self, obj: K) -> Result<Arc<K>, ApiError> {
        let now = self.now();
        let mut state = self.write();
        let (store, shared) = state.store_mut::<K>()?;
        store.create(obj, now, shared, true)
    }

    /// Reads one object.
    pub fn get<K: Object>(&self, key: &ObjectKey) -> Result<Arc<K>, ApiError> {
        let state = self.read();
        match state.store::<K>() {
            Some(store) => store.existing(key),
            None => Err(ApiError::NotFound {
                resource: K::plural(&()).into_owned(),
                key: key.clone(),
            }),
        }
    }

    /// Reads one object, `None` if it does not exist.
    pub fn get_opt<K: Object>(&self, key: &ObjectKey) -> Option<Arc<K>> {
        self.read().store::<K>()?.objects.get(key).cloned()
    }

    /// Every pod as a [`SlimPod`], ordered by namespace and name: the
    /// projections `apiserver::views` keeps, brought up to the watch log.
    pub fn pod_views(&self) -> Listed<SlimPod> {
        let state = self.read();
        let Some(store) = state.store::<Pod>() else {
            return Listed::default();
        };
        self.views
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .follow(store)
    }

    /// Every object of kind `K` (not the pod view), ordered by namespace
    /// and name: one list per revision of the kind, shared.
    pub(super) fn listed<K: Object>(&self) -> Listed<K> {
        let state = self.read();
        let Some(store) = state.store::<K>() else {
            return Listed::default();
        };
        let revision = *store.subscribe().borrow();
        self.lists
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .at(revision, || store.objects.values().cloned().collect())
    }

    /// One pod as a [`SlimPod`].
    pub fn pod_view(&self, key: &ObjectKey) -> Option<Arc<SlimPod>> {
        let pod = self.get_opt::<Pod>(key)?;
        let views = self.views.lock().unwrap_or_else(PoisonError::into_inner);
        Some(views.view_of(key, &pod))
    }

    /// Lists the objects of a kind whose labels match `selector`, in one
    /// namespace or (`None`) all, ordered by namespace and name. The
    /// namespace is ignored for cluster-scoped kinds.
    pub fn list<K: Object>(&self, namespace: Option<&str>, selector: &Selector) -> ObjectList<K> {
        let state = self.read();
        let resource_version = state.shared.resource_version;
        let Some(store) = state.store::<K>() else {
            return ObjectList {
                items: Vec::new(),
                resource_version,
            };
        };
        let selected = |obj: &&Arc<K>| selector.matches_opt(obj.meta().labels.as_ref());
        let items = match namespace.filter(|_| store.info.namespaced) {
            Some(ns) => store
                .objects
                .range(ObjectKey::new(ns, "")..)
                .take_while(|(k, _)| k.namespace == ns)
                .map(|(_, o)| o)
                .filter(selected)
                .cloned()
                .collect(),
            None => store.objects.values().filter(selected).cloned().collect(),
        };
        ObjectList {
            items,
            resource_version,
        }
    }

    /// Replaces an object (PUT). A non-empty `metadata.resourceVersion` must
    /// match the stored one; an empty one replaces unconditionally. Status
    /// changes are ignored (use [`MemoryCluster::update_status`]).
    /// Removing the last finalizer of a terminating object removes it; the
    /// returned object is then its final state.
    pub fn replace<K: Object>(&self, obj: K) -> Result<Arc<K>, ApiError> {
        let now = self.now();
        let mut state = self.write();
        let (store, shared) = state.store_mut::<K>()?;
        let (obj, removed) = store.replace(obj, shared)?;
        state.collect_garbage(removed.map(Gc::Removed).into_iter().collect(), now);
        Ok(obj)
    }

    /// Replaces the status of an object (PUT on `/status`); all other
    /// changes are ignored. Resource-version rules as for
    /// [`MemoryCluster::replace`].
    pub fn update_status<K: Object>(&self, obj: K) -> Result<Arc<K>, ApiError> {
        let mut state = self.write();
        let (store, shared) = state.store_mut::<K>()?;
        store.update_status(obj, shared)
    }

    /// Reads the object, applies `f` to a copy and replaces it, retrying on
    /// conflicts: the client-side equivalent of a patch. `f` may run more
    /// than once; changes it makes to the name or namespace are ignored.
    pub fn update_with<K: Object>(
        &self,
        key: &ObjectKey,
        f: impl FnMut(&mut K),
    ) -> Result<Arc<K>, ApiError> {
        self.retry_on_conflict(key, f, |obj| self.replace(obj))
    }

    /// [`MemoryCluster::update_with`] for the status.
    pub fn update_status_with<K: Object>(
        &self,
        key: &ObjectKey,
        f: impl FnMut(&mut K),
    ) -> Result<Arc<K>, ApiError> {
        self.retry_on_conflict(key, f, |obj| self.update_status(obj))
    }

    fn retry_on_conflict<K: Object>(
        &self,
        key: &ObjectKey,
        mut f: impl FnMut(&mut K),
        mut write: impl FnMut(K) -> Result<Arc<K>, ApiError>,
    ) -> Result<Arc<K>, ApiError> {
        let mut attempt = 0;
        loop {
            let current = self.get::<K>(key)?;
            let mut obj = K::clone(&current);
            f(&mut obj);
            let meta = obj.meta_mut();
            meta.name.clone_from(&current.meta().name);
            meta.namespace.clone_from(&current.meta().namespace);
            match write(obj) {
                Err(e) if e.is_conflict() && attempt + 1 < CONFLICT_RETRIES => attempt += 1,
                result => return result,
            }
        }
    }

    /// Deletes an object (DELETE) with the default options: background
    /// propagation, a pod's own grace period.
    pub fn delete<K: Object>(&self, key: &ObjectKey) -> Result<DeleteOutcome<K>, ApiError> {
        self.delete_with(key, &DeleteParams::default())
    }

    /// Deletes an object (DELETE) with `params`, as the module's "Deletion"
    /// describes: preconditions (a conflict if they do not hold), pods'
    /// graceful deletion
    /// (<https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination>),
    /// propagation to dependents
    /// (<https://kubernetes.io/docs/concepts/architecture/garbage-collection/>),
    /// and dry runs, which store nothing and emit no event.
    ///
    /// [`DeleteOutcome::Deleted`] means the object is gone (or would be);
    /// [`DeleteOutcome::Terminating`] that it stays, marked with its
    /// `deletionTimestamp`, until its grace period ends and its kubelet
    /// deletes it, or its finalizers are removed.
    pub fn delete_with<K: Object>(
        &self,
        key: &ObjectKey,
        params: &DeleteParams,
    ) -> Result<DeleteOutcome<K>, ApiError> {
        let now = self.now();
        self.write().delete(key, params, now)
    }

    /// The events of kind `K` after `resource_version`, oldest first. Use
    /// the `resource_version` of a list, then of the last event seen.
    /// [`ApiError::Gone`] means events were compacted away: relist.
    pub fn watch_from<K: Object>(
        &self,
        resource_version: u64,
    ) -> Result<Vec<WatchEvent<K>>, ApiError> {
        match self.read().store::<K>() {
            Some(store) => store.events_after(resource_version),
            None => Ok(Vec::new()),
        }
    }

    /// The resource version of the last change to an object of kind `K`
    /// (0 if none was ever stored).
    pub fn kind_revision<K: Object>(&self) -> u64 {
        self.read()
            .store::<K>()
            .map_or(0, |store| *store.subscribe().borrow())
    }

    /// The status the disruption controller would write for a budget now:
    /// computed from the current pods as the eviction subresource does.
    pub fn disruption_budget_status(
        &self,
        budget: &PodDisruptionBudget,
    ) -> Result<pdb::BudgetStatus, String> {
        let spec = budget.spec.as_ref().ok_or("no spec")?;
        let selector =
            Selector::from_optional(spec.selector.as_ref()).map_err(|e| e.to_string())?;
        let namespace = budget.metadata.namespace.as_deref().unwrap_or_default();
        let state = self.read();
        pdb::budget_status(spec, budget_pods(&state, namespace, &selector))
    }

    /// A receiver that changes to the latest event's resource version
    /// whenever an object of kind `K` changes; an async watcher awaits
    /// `changed()` and then calls [`MemoryCluster::watch_from`].
    pub fn subscribe<K: Object>(&self) -> Result<watch::Receiver<u64>, ApiError> {
        if let Some(store) = self.read().store::<K>() {
            return Ok(store.subscribe());
        }
        let mut state = self.write();
        let (store, _) = state.store_mut::<K>()?;
        Ok(store.subscribe())
    }

    /// Runs the admission checks of creating or updating `obj` without
    /// storing anything (`dryRun=All`). A kind never written has no checks.
    pub fn dry_run<K: Object>(&self, obj: &K) -> Result<(), ApiError> {
        match self.read().store::<K>() {
            Some(store) => store.dry_run(obj),
            None => Ok(()),
        }
    }

    /// Server-side apply, as `apiserver::apply` describes the in-memory
    /// merge: creates the object or merges `obj` into it, retrying on
    /// conflicts; a dry run only runs admission.
    pub fn apply<K: Object>(&self, obj: K, params: &ApplyParams) -> Result<Arc<K>, ApiError> {
        let key = ObjectKey::of(&obj);
        let mut attempt = 0;
        loop {
            let existing = self.get_opt::<K>(&key);
            let merged = apply::merge(
                existing.as_deref(),
                &obj,
                &params.field_manager,
                params.force,
                self.now(),
            )?;
            if params.dry_run {
                self.dry_run(&merged)?;
                return Ok(Arc::new(merged));
            }
            let result = match existing {
                Some(_) => self.replace(merged),
                None => self.create(merged),
            };
            match result {
                Err(e)
                    if (e.is_conflict() || matches!(e, ApiError::AlreadyExists { .. }))
                        && attempt + 1 < CONFLICT_RETRIES =>
                {
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    /// Binds a pod to a node (POST on `pods/binding`), as a scheduler does:
    /// sets `spec.nodeName` and the `PodScheduled` condition without moving
    /// `generation`. A pod that is already bound or is terminating cannot
    /// be bound ([`ApiError::Conflict`]).
    pub fn bind(&self, namespace: &str, name: &str, node_name: &str) -> Result<Arc<Pod>, ApiError> {
        let now = self.now();
        let key = ObjectKey::new(namespace, name);
        let mut state = self.write();
        let (pods, shared) = state.store_mut::<Pod>()?;
        let pod = pods.existing(&key)?;
        if pod.metadata.deletion_timestamp.is_some() {
            return Err(pods.conflict(
                &key,
                format!("pod {name} is being deleted, cannot be assigned to a host"),
            ));
        }
        if let Some(bound) = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .filter(|n| !n.is_empty())
        {
            return Err(pods.conflict(
                &key,
                format!("pod {name} is already assigned to node {bound:?}"),
            ));
        }
        let mut bound = Pod::clone(&pod);
        bound.spec.get_or_insert_default().node_name = Some(node_name.into());
        set_true_condition(&mut bound, "PodScheduled", None, None, now);
        Ok(pods.modify(&key, bound, shared))
    }

    /// Evicts a pod (POST on `pods/eviction`) with the default options:
    /// [`MemoryCluster::evict_with`].
    pub fn evict(&self, namespace: &str, name: &str) -> Result<DeleteOutcome<Pod>, ApiError> {
        self.evict_with(namespace, name, &DeleteParams::default())
    }

    /// Evicts a pod (POST on `pods/eviction`, `params` being the
    /// Eviction's `deleteOptions`), honouring PodDisruptionBudgets as the
    /// API server does:
    /// - the preconditions must hold (a conflict otherwise);
    /// - pods that are `Pending`, `Succeeded`, `Failed` or already
    ///   terminating are deleted without consulting budgets;
    /// - a pod covered by more than one budget cannot be evicted
    ///   ([`ApiError::Internal`], 500);
    /// - otherwise the budget must allow a disruption, else
    ///   [`ApiError::TooManyRequests`] (429) naming the budget. An unready
    ///   pod may go when the budget is met (or its
    ///   `unhealthyPodEvictionPolicy` is `AlwaysAllow`).
    ///
    /// On success the pod gets a `DisruptionTarget` condition and is
    /// deleted as [`MemoryCluster::delete_with`] deletes it: gracefully,
    /// with its own grace period unless `params` sets one, so it stays
    /// terminating (and no longer counts as healthy for budgets) until its
    /// kubelet deletes it. A dry run checks all of this and stores nothing.
    pub fn evict_with(
        &self,
        namespace: &str,
        name: &str,
        params: &DeleteParams,
    ) -> Result<DeleteOutcome<Pod>, ApiError> {
        let now = self.now();
        let key = ObjectKey::new(namespace, name);
        let mut state = self.write();
        let pod = match state.store::<Pod>() {
            Some(pods) => {
                let pod = pods.existing(&key)?;
                pods.check_preconditions(&key, &params.preconditions, &pod.metadata)?;
                pod
            }
            None => {
                return Err(ApiError::NotFound {
                    resource: "pods".into(),
                    key,
                });
            }
        };
        if !pdb::can_ignore_pdb(&pod) {
            check_disruption_budget(&state, &pod)?;
        }
        if params.dry_run {
            return state.delete(&key, params, now);
        }
        let (pods, shared) = state.store_mut::<Pod>()?;
        let mut marked = Pod::clone(&pod);
        if set_true_condition(
            &mut marked,
            "DisruptionTarget",
            Some("EvictionByEvictionAPI"),
            Some("Eviction API: evicting"),
            now,
        ) {
            pods.modify(&key, marked, shared);
        }
        // The preconditions held for the pod the budget was checked for;
        // the condition just changed its resourceVersion.
        let params = DeleteParams {
            preconditions: Default::default(),
            ..params.clone()
        };
        state.delete(&key, &params, now)
    }
}

/// Refuses the eviction of `pod` if its PodDisruptionBudget does not allow
/// a disruption. The budget's status is computed from the current pods
/// rather than read from the object.
fn check_disruption_budget(state: &State, pod: &Pod) -> Result<(), ApiError> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let Some(budgets) = state.store::<PodDisruptionBudget>() else {
        return Ok(());
    };
    let labels = pod.metadata.labels.as_ref();
    let mut matching = budgets
        .objects
        .range(ObjectKey::new(namespace, "")..)
        .take_while(|(k, _)| k.namespace == namespace)
        .filter_map(|(_, b)| {
            let spec = b.spec.as_ref()?;
            // A budget with an invalid selector matches no pod.
            let selector = Selector::from_optional(spec.selector.as_ref()).ok()?;
            selector.matches_opt(labels).then_some((b, spec, selector))
        });
    let Some((budget, spec, selector)) = matching.next() else {
        return Ok(());
    };
    if matching.next().is_some() {
        return Err(ApiError::Internal {
            message: "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.".into(),
        });
    }
    let budget_name = budget.metadata.name.as_deref().unwrap_or_default();
    let refuse = |detail: String| ApiError::TooManyRequests {
        message: "Cannot evict pod as it would violate the pod's disruption budget.".into(),
        cause: Some(format!("The disruption budget {budget_name} {detail}")),
    };
    let counts = budget_pods(state, namespace, &selector);
    let status =
        pdb::budget_status(spec, counts).map_err(|e| refuse(format!("cannot be computed: {e}")))?;
    if !crate::api::pod::is_ready(pod) {
        if spec.unhealthy_pod_eviction_policy.as_deref() == Some(ALWAYS_ALLOW) {
            return Ok(());
        }
        if status.current_healthy >= status.desired_healthy && status.desired_healthy > 0 {
            return Ok(());
        }
    }
    if status.disruptions_allowed <= 0 {
        return Err(refuse(format!(
            "needs {} healthy pods and has {} currently",
            status.desired_healthy, status.current_healthy
        )));
    }
    Ok(())
}

/// The pods a budget's selector matches in `namespace`, counted as the
/// disruption controller counts them.
fn budget_pods(state: &State, namespace: &str, selector: &Selector) -> BudgetPods {
    let mut counts = BudgetPods::default();
    let mut controllers = BTreeMap::new();
    if let Some(pods) = state.store::<Pod>() {
        for (_, p) in pods
            .objects
            .range(ObjectKey::new(namespace, "")..)
            .take_while(|(k, _)| k.namespace == namespace)
            .filter(|(_, p)| selector.matches_opt(p.metadata.labels.as_ref()))
        {
            counts.matched = counts.matched.saturating_add(1);
            if pdb::is_pod_healthy(p) {
                counts.healthy = counts.healthy.saturating_add(1);
            }
            if pdb::is_terminal(p) {
                continue;
            }
            match controller_uid(p).and_then(|uid| Some((uid, state.replicas_of(uid)?))) {
                Some((uid, replicas)) => {
                    controllers.insert(uid, replicas);
                }
                None => counts.scale = counts.scale.saturating_add(1),
            }
        }
    }
    counts.scale = controllers
        .values()
        .fold(counts.scale, |sum, replicas| sum.saturating_add(*replicas));
    counts
}

/// The uid of the pod's controller, from its owner references.
fn controller_uid(pod: &Pod) -> Option<&str> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.as_str())
}

/// Sets the pod condition `type_` to `True`, stamping the transition time
/// if it changes. Returns whether the pod changed.
fn set_true_condition(
    pod: &mut Pod,
    type_: &str,
    reason: Option<&str>,
    message: Option<&str>,
    now: Timestamp,
) -> bool {
    let conditions = pod
        .status
        .get_or_insert_default()
        .conditions
        .get_or_insert_default();
    let condition = PodCondition {
        type_: type_.into(),
        status: "True".into(),
        reason: reason.map(Into::into),
        message: message.map(Into::into),
        last_transition_time: Some(Time(truncate_to_second(now))),
        ..Default::default()
    };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) if existing.status == condition.status => return false,
        Some(existing) => *existing = condition,
        None => conditions.push(condition),
    }
    true
}
