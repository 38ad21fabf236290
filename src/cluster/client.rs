//! The controller's interface to a Kubernetes cluster.
//!
//! Reads come from a watch-fed cache and are synchronous: the controller
//! decides from what it has seen, as every Kubernetes controller does.
//! Writes go to the API server and are asynchronous. Two implementations:
//! `world::MemoryCluster` (the simulation and tests) and the kube-rs client.

use std::future::Future;
use std::sync::Arc;

use super::{ApiError, ApplyParams, DeleteOutcome, DeleteParams, Object, ObjectKey};

/// A kind's objects as the cache holds them at one revision, shared by
/// every reader until the kind changes: a slice to read, and owned
/// iteration that clones each object's `Arc`.
#[derive(Debug)]
pub struct Listed<K>(Arc<[Arc<K>]>);

impl<K> Listed<K> {
    /// Whether `a` and `b` are the same list (not merely equal).
    pub fn ptr_eq(a: &Listed<K>, b: &Listed<K>) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }
}

impl<K> Clone for Listed<K> {
    fn clone(&self) -> Self {
        Listed(self.0.clone())
    }
}

impl<K> Default for Listed<K> {
    fn default() -> Self {
        Listed(Arc::new([]))
    }
}

impl<K> From<Vec<Arc<K>>> for Listed<K> {
    fn from(objects: Vec<Arc<K>>) -> Self {
        Listed(objects.into())
    }
}

impl<K> std::ops::Deref for Listed<K> {
    type Target = [Arc<K>];

    fn deref(&self) -> &[Arc<K>] {
        &self.0
    }
}

impl<'a, K> IntoIterator for &'a Listed<K> {
    type Item = &'a Arc<K>;
    type IntoIter = std::slice::Iter<'a, Arc<K>>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<K> IntoIterator for Listed<K> {
    type Item = Arc<K>;
    type IntoIter = ListedIter<K>;

    fn into_iter(self) -> ListedIter<K> {
        ListedIter { list: self, at: 0 }
    }
}

/// The objects of a [`Listed`], each `Arc` cloned.
#[derive(Debug)]
pub struct ListedIter<K> {
    list: Listed<K>,
    at: usize,
}

impl<K> Iterator for ListedIter<K> {
    type Item = Arc<K>;

    fn next(&mut self) -> Option<Arc<K>> {
        let next = self.list.get(self.at)?.clone();
        self.at += 1;
        Some(next)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.list.len() - self.at;
        (left, Some(left))
    }
}

impl<K> ExactSizeIterator for ListedIter<K> {}

/// What the controller reads from and writes to.
pub trait Cluster: Send + Sync {
    /// Every object of a kind in the cache, ordered by namespace and name:
    /// one list per [`Cluster::revision`] of the kind, shared by every
    /// reader until the kind changes (a pass lists pods many times).
    fn list<K: Object>(&self) -> Listed<K>;

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

    /// Deletes an object with the default options (background
    /// propagation; a pod's own grace period).
    fn delete<K: Object>(
        &self,
        key: &ObjectKey,
    ) -> impl Future<Output = Result<DeleteOutcome<K>, ApiError>> + Send {
        async move {
            let params = DeleteParams::default();
            self.delete_with(key, &params).await
        }
    }

    /// Deletes an object with `params` (`DeleteOptions`): preconditions, a
    /// grace period for pods, the propagation to dependents, a dry run.
    /// A pod bound to a node is deleted gracefully: it answers
    /// [`DeleteOutcome::Terminating`] and stays until its kubelet stopped
    /// it.
    fn delete_with<K: Object>(
        &self,
        key: &ObjectKey,
        params: &DeleteParams,
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

    /// The eviction subresource with the default options:
    /// [`Cluster::evict_with`].
    fn evict(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<(), ApiError>> + Send {
        async move {
            self.evict_with(namespace, name, &DeleteParams::default())
                .await
        }
    }

    /// The eviction subresource, `params` being the Eviction's
    /// `deleteOptions` (a UID precondition: a 409 when the pod of that
    /// name is another pod now): refused (429) when a PodDisruptionBudget
    /// would be violated. An evicted pod is deleted gracefully, as
    /// [`Cluster::delete`] deletes it.
    fn evict_with(
        &self,
        namespace: &str,
        name: &str,
        params: &DeleteParams,
    ) -> impl Future<Output = Result<(), ApiError>> + Send;
}
