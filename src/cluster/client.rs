//! The controller's interface to a Kubernetes cluster.
//!
//! Reads come from a watch-fed cache and are synchronous: the controller
//! decides from what it has seen, as every Kubernetes controller does.
//! Writes go to the API server and are asynchronous. Two implementations:
//! [`MemoryCluster`] (the simulation and tests) and the kube-rs client.

use std::future::Future;
use std::sync::Arc;

use super::{ApiError, ApplyParams, DeleteOutcome, MemoryCluster, Object, ObjectKey, Selector};

/// What the controller reads from and writes to.
pub trait Cluster: Send + Sync {
    /// Every object of a kind in the cache, ordered by namespace and name.
    fn list<K: Object>(&self) -> Vec<Arc<K>>;

    /// One object from the cache.
    fn get<K: Object>(&self, key: &ObjectKey) -> Option<Arc<K>>;

    /// A number that changes whenever an object of kind `K` changes in the
    /// cache, for skipping work when nothing changed; cheap to read.
    fn revision<K: Object>(&self) -> u64;

    fn create<K: Object>(&self, obj: K) -> impl Future<Output = Result<Arc<K>, ApiError>> + Send;

    /// Replaces an object (not its status); fails with a conflict when the
    /// object's `resourceVersion` is stale.
    fn replace<K: Object>(&self, obj: K) -> impl Future<Output = Result<Arc<K>, ApiError>> + Send;

    /// Replaces an object's status.
    fn replace_status<K: Object>(
        &self,
        obj: K,
    ) -> impl Future<Output = Result<Arc<K>, ApiError>> + Send;

    fn delete<K: Object>(
        &self,
        key: &ObjectKey,
    ) -> impl Future<Output = Result<DeleteOutcome<K>, ApiError>> + Send;

    /// Server-side apply of `obj` under `params.field_manager`: creates the
    /// object or updates the fields the manager owns, without a
    /// resourceVersion. With `params.dry_run`, the server runs admission and
    /// answers with the object it would store, storing nothing.
    fn apply<K: Object>(
        &self,
        obj: K,
        params: &ApplyParams,
    ) -> impl Future<Output = Result<Arc<K>, ApiError>> + Send;

    /// The eviction subresource: refused (429) when a PodDisruptionBudget
    /// would be violated.
    fn evict(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<(), ApiError>> + Send;
}

impl Cluster for MemoryCluster {
    fn list<K: Object>(&self) -> Vec<Arc<K>> {
        MemoryCluster::list::<K>(self, None, &Selector::everything()).items
    }

    fn get<K: Object>(&self, key: &ObjectKey) -> Option<Arc<K>> {
        self.get_opt(key)
    }

    fn revision<K: Object>(&self) -> u64 {
        self.kind_revision::<K>()
    }

    fn create<K: Object>(&self, obj: K) -> impl Future<Output = Result<Arc<K>, ApiError>> + Send {
        std::future::ready(MemoryCluster::create(self, obj))
    }

    fn replace<K: Object>(&self, obj: K) -> impl Future<Output = Result<Arc<K>, ApiError>> + Send {
        std::future::ready(MemoryCluster::replace(self, obj))
    }

    fn replace_status<K: Object>(
        &self,
        obj: K,
    ) -> impl Future<Output = Result<Arc<K>, ApiError>> + Send {
        std::future::ready(self.update_status(obj))
    }

    fn delete<K: Object>(
        &self,
        key: &ObjectKey,
    ) -> impl Future<Output = Result<DeleteOutcome<K>, ApiError>> + Send {
        std::future::ready(MemoryCluster::delete(self, key))
    }

    fn apply<K: Object>(
        &self,
        obj: K,
        params: &ApplyParams,
    ) -> impl Future<Output = Result<Arc<K>, ApiError>> + Send {
        std::future::ready(MemoryCluster::apply(self, obj, params))
    }

    fn evict(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<(), ApiError>> + Send {
        std::future::ready(MemoryCluster::evict(self, namespace, name).map(|_| ()))
    }
}
