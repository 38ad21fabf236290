//! Kubernetes behind the `Cluster` trait, and an in-memory API server.
//!
//! The trait (`cluster::client`) has cached, synchronous reads,
//! `Cluster::revision` to tell whether a kind changed, and asynchronous
//! writes, among them server-side apply with dry run
//! (`Cluster::apply`), deletes with `DeleteParams` (preconditions, a pod's
//! grace period, propagation, dry run) and evictions. Implementations:
//! `KubeCluster` (kube-rs: reflector caches, pods watched as `SlimPod`s,
//! nodes slimmed by `cluster::slim`), `MemoryCluster` below, and `Fenced`,
//! which wraps either and lets writes through only while its `Fence` (the
//! leader election's, when there is one) holds. `cluster::kube_client`
//! builds the one kube client every command uses; `cluster::admission`
//! gives `MemoryCluster` the checks of `validate` and the transition rules
//! for dovetail's kinds.
//!
//! # The in-memory API server
//!
//! An in-memory, API-server-like object store.
//!
//! [`MemoryCluster`] keeps typed Kubernetes objects and enforces the
//! semantics a controller relies on: resource versions and optimistic
//! concurrency, finalizers and graceful deletion, owner-reference garbage
//! collection, watch events, the eviction subresource with
//! PodDisruptionBudgets, and admission validation. `dovetail simulate` runs
//! the controller against it; unit tests use it without an async runtime.
//!
//! The store is synchronous (`&self` behind a lock), in the style of a
//! Linkerd index: logic and tests call it directly, and an async watcher
//! waits on [`MemoryCluster::subscribe`] and then reads
//! [`MemoryCluster::watch_from`].
//!
//! # Deletion
//! Deletes follow the API server's documented semantics, with
//! [`DeleteParams`] as `DeleteOptions`:
//! - Pods are deleted gracefully
//!   (<https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination>):
//!   a pod bound to a node and not finished gets `deletionTimestamp` = now
//!   plus its grace period and `deletionGracePeriodSeconds`, and stays (a
//!   MODIFIED event) until its kubelet deletes it with a grace period of 0
//!   once its containers stopped (the simulation's kubelet does). An
//!   unbound or finished pod, or a grace period of 0, removes it at once
//!   (finalizers still hold it). A second delete may only shorten the
//!   grace period; 0 on a terminating pod force-deletes it. A negative
//!   grace period counts as 1 s, as the API server's delete path does.
//!   Other kinds have no grace period.
//! - Propagation
//!   (<https://kubernetes.io/docs/concepts/architecture/garbage-collection/>):
//!   background removes the dependents once the owner is gone; orphan
//!   drops the owner's references from its dependents (what the garbage
//!   collector does for the `orphan` finalizer); foreground marks the
//!   owner terminating with the `foregroundDeletion` finalizer, deletes its
//!   dependents, and removes the owner once no dependent that blocks it
//!   (`blockOwnerDeletion`) is left.
//! - A dry run checks everything (preconditions, budgets for an eviction)
//!   and answers with what would happen, storing nothing.
//!
//! # Differences from a real API server
//! Deliberate, to keep the store small, fast and reproducible:
//! - Garbage collection runs inside the writes that cause it (the delete,
//!   the update that removes a last finalizer), not in a controller that
//!   catches up later; it follows owners only when an owner is removed or
//!   deleted with a propagation: an object created with references to
//!   owners that never existed is kept. The `orphan` and
//!   `foregroundDeletion` finalizers are handled within the delete rather
//!   than observed by a collector (an orphaning delete leaves no `orphan`
//!   finalizer behind).
//! - Pods get `spec.terminationGracePeriodSeconds` defaulted on create (30
//!   seconds, or [`MemoryCluster::with_default_termination_grace_period`]),
//!   the only pod default the store applies.
//! - Every kind behaves as if it had a status subresource, but create keeps
//!   the status it is given (the real server resets a pod's status), so
//!   tests and simulations can create running pods in one step.
//! - Names are only required to be non-empty, and field immutability (such
//!   as a pod's spec) is left to validators.
//! - uids and `generateName` suffixes come from a fixed sequence, so runs
//!   are reproducible.
//! - Evictions compute the PodDisruptionBudget's status from the current
//!   pods instead of reading the status a disruption controller wrote
//!   (terminating pods are not healthy, as the disruption controller
//!   counts them). The expected pods are the `spec.replicas` of the pods'
//!   controllers when those objects are stored (of any kind), otherwise one
//!   per non-terminal pod; the real controller ignores pods without a
//!   controller.
//! - Watches have no bookmarks and no selectors; watching from a future
//!   resource version returns no events rather than an error. Lists have no
//!   pagination. The served API (`crate::serve`) adds all three over HTTP,
//!   on top of this store.

pub mod admission;
mod apply;
mod client;
mod error;
mod fenced;
pub mod kube_client;
mod kube_cluster;
mod memory;
mod pdb;
pub mod seam;
mod selector;
pub mod slim;
mod store;
#[cfg(test)]
mod tests;
mod views;

use std::fmt;
use std::sync::Arc;

use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use apply::ApplyParams;
pub use client::Cluster;
pub use error::ApiError;
pub use fenced::{Fence, Fenced};
pub use kube_cluster::{KubeCluster, OVERLAY_TTL, WatchOptions};
pub use memory::MemoryCluster;
pub use pdb::{BudgetPods, BudgetStatus, budget_status, healthy_pods_needed, is_pod_healthy};
pub use seam::{Access, Fault, Write};
pub use selector::{Selector, SelectorError};

/// Whether a kind lives in namespaces, read from its `Resource::Scope`.
pub trait KindScope {
    const NAMESPACED: bool;
}

impl KindScope for NamespaceResourceScope {
    const NAMESPACED: bool = true;
}

impl KindScope for ClusterResourceScope {
    const NAMESPACED: bool = false;
}

/// A kind the store can hold: any statically typed Kubernetes resource,
/// including `#[derive(CustomResource)]` types.
pub trait Object:
    Resource<DynamicType = (), Scope: KindScope>
    + Clone
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> Object for K where
    K: Resource<DynamicType = (), Scope: KindScope>
        + Clone
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// `plural` or `plural.group`: a kind's resource as the API server names it
/// in messages and RBAC rules name it with its group.
pub fn resource_name<K: Object>() -> String {
    let (plural, group) = (K::plural(&()), K::group(&()));
    if group.is_empty() {
        plural.into_owned()
    } else {
        format!("{plural}.{group}")
    }
}

/// `Kind` or `Kind.group`, as the API server names a kind in the message
/// and details of a validation failure (`NodePool.karpenter.sh "a" is
/// invalid: ...`).
pub fn qualified_kind<K: Object>() -> String {
    let (kind, group) = (K::kind(&()), K::group(&()));
    if group.is_empty() {
        kind.into_owned()
    } else {
        format!("{kind}.{group}")
    }
}

/// Where an object lives: its namespace (empty for cluster-scoped kinds) and
/// name. Orders by namespace, then name.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    /// A namespaced object's key.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        ObjectKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// A cluster-scoped object's key.
    pub fn cluster(name: impl Into<String>) -> Self {
        ObjectKey::new("", name)
    }

    /// The key of an object, as found in its metadata.
    pub fn of<K: Resource>(obj: &K) -> Self {
        let meta = obj.meta();
        ObjectKey::new(
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone().unwrap_or_default(),
        )
    }
}

impl fmt::Display for ObjectKey {
    /// `namespace/name`, or `name` for cluster-scoped objects.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

/// One change, as a watch reports it. For `Deleted`, `object` is the last
/// state with the deletion's resource version.
#[derive(Debug, Clone)]
pub struct WatchEvent<K> {
    pub event_type: EventType,
    pub object: Arc<K>,
    pub resource_version: u64,
}

/// The objects of a list, and the resource version to watch from so that no
/// change after the list is missed.
#[derive(Debug, Clone)]
pub struct ObjectList<K> {
    pub items: Vec<Arc<K>>,
    pub resource_version: u64,
}

/// The result of a delete.
#[derive(Debug, Clone)]
pub enum DeleteOutcome<K> {
    /// The object is gone; this was its last state.
    Deleted(Arc<K>),
    /// The object has finalizers: it now carries a `deletionTimestamp` and
    /// stays until the last finalizer is removed.
    Terminating(Arc<K>),
}

impl<K> DeleteOutcome<K> {
    /// The object's state after the delete.
    pub fn object(&self) -> &Arc<K> {
        match self {
            DeleteOutcome::Deleted(o) | DeleteOutcome::Terminating(o) => o,
        }
    }

    pub fn is_deleted(&self) -> bool {
        matches!(self, DeleteOutcome::Deleted(_))
    }
}

/// Preconditions of a delete: if set, they must match the stored object or
/// the delete fails with a conflict.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preconditions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

/// What happens to an object's dependents when it is deleted
/// (`propagationPolicy`), as the garbage collector documents it
/// (<https://kubernetes.io/docs/concepts/architecture/garbage-collection/#cascading-deletion>).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Propagation {
    /// The object goes (or starts terminating) now; its dependents are
    /// deleted once it is gone.
    #[default]
    Background,
    /// The object is marked with the `foregroundDeletion` finalizer and
    /// stays until its dependents that block it (`blockOwnerDeletion`) are
    /// gone; its dependents are deleted at once.
    Foreground,
    /// The dependents lose their reference to the object and stay.
    Orphan,
}

impl Propagation {
    /// The `propagationPolicy` value.
    pub fn as_str(&self) -> &'static str {
        match self {
            Propagation::Background => "Background",
            Propagation::Foreground => "Foreground",
            Propagation::Orphan => "Orphan",
        }
    }
}

/// The options of a delete or an eviction (`DeleteOptions`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteParams {
    pub preconditions: Preconditions,
    /// For pods: the grace period, overriding the pod's
    /// `terminationGracePeriodSeconds`; 0 deletes at once. Negative values
    /// count as 1, as on the API server's delete path. Ignored for kinds
    /// without graceful deletion.
    pub grace_period_seconds: Option<i64>,
    pub propagation: Propagation,
    /// Check and answer as the delete would, storing nothing.
    pub dry_run: bool,
}

impl DeleteParams {
    /// A delete with this grace period and otherwise the defaults.
    pub fn with_grace_period(seconds: i64) -> Self {
        DeleteParams {
            grace_period_seconds: Some(seconds),
            ..DeleteParams::default()
        }
    }
}

/// The finalizer that holds an owner deleted in the foreground until its
/// blocking dependents are gone.
pub const FINALIZER_FOREGROUND: &str = "foregroundDeletion";
/// How long a pod's grace period is when neither the delete nor the pod
/// says: the default of `spec.terminationGracePeriodSeconds`.
pub const DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS: i64 = 30;

/// An admission check for one kind, run on create and every update
/// (including status updates) before anything is stored. `old` is the
/// stored object for updates. Rejections become [`ApiError::Invalid`] with
/// the returned messages.
///
/// Validators run while the store is locked and must not call back into it.
pub trait Validator<K>: Send + Sync {
    fn validate(&self, old: Option<&K>, new: &K) -> Result<(), Vec<String>>;
}

impl<K, F> Validator<K> for F
where
    F: Fn(Option<&K>, &K) -> Result<(), Vec<String>> + Send + Sync,
{
    fn validate(&self, old: Option<&K>, new: &K) -> Result<(), Vec<String>> {
        self(old, new)
    }
}
