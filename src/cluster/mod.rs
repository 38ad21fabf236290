//! Kubernetes behind the `Cluster` trait.
//!
//! The trait (`cluster::client`) has cached, synchronous reads,
//! `Cluster::revision` to tell whether a kind changed, and asynchronous
//! writes, among them server-side apply with dry run
//! (`Cluster::apply`), deletes with `DeleteParams` (preconditions, a pod's
//! grace period, propagation, dry run) and evictions. Implementations:
//! `KubeCluster` (kube-rs: reflector caches, pods watched as `SlimPod`s,
//! nodes slimmed by `cluster::slim`), the simulated world's in-memory API
//! server (`world::MemoryCluster`), and `Fenced`, which wraps either and
//! lets writes through only while its `Fence` (the leader election's, when
//! there is one) holds. `cluster::kube_client` builds the one kube client
//! every command uses.

mod apply;
mod client;
mod error;
mod fenced;
pub mod kube_client;
mod kube_cluster;
mod list_change;
mod node_index;
mod pods_by_node;
mod selector;
pub mod slim;

use std::fmt;
use std::sync::Arc;

use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use apply::ApplyParams;
pub use client::{Cluster, Listed, ListedIter};
pub use error::ApiError;
pub use fenced::{Fence, Fenced};
pub use kube_cluster::{KubeCluster, OVERLAY_TTL, WatchOptions};
pub use list_change::ListChange;
pub use node_index::NodeIndex;
pub use pods_by_node::PodsByNode;
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
