//! The in-memory cluster's [`SlimPod`] view of its pods.
//!
//! The controller reads pods as [`SlimPod`]s (the in-cluster cache stores
//! nothing else); [`MemoryCluster`] stores whole pods, as an API server
//! does, and answers `Cluster::list::<SlimPod>` with their projections.
//! A projection is made once per pod and resource version and reused
//! until the pod changes, so a pass that lists every pod converts only the
//! pods that changed since the last.
//!
//! Deleting a `SlimPod` through the `Cluster` trait deletes the pod (and
//! answers with its view); every other write of a `SlimPod` is refused: write
//! the Pod.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::Pod;

use super::MemoryCluster;
use crate::api::SlimPod;
use crate::cluster::{Object, ObjectKey, Selector};

/// The projections of the pods at one revision of the kind.
#[derive(Default)]
pub(super) struct PodViews {
    revision: Option<u64>,
    list: Vec<Arc<SlimPod>>,
    by_key: HashMap<ObjectKey, Arc<SlimPod>>,
}

/// Whether `K` is the pod view, which the in-memory cluster projects.
pub(super) fn is_view<K: Object>() -> bool {
    TypeId::of::<K>() == TypeId::of::<SlimPod>()
}

/// `value` as a `T` when `T` is its own type (the caller checked the
/// `TypeId`).
pub(super) fn cast<T: Any, U: Any>(value: U) -> Option<T> {
    let boxed: Box<dyn Any> = Box::new(value);
    boxed.downcast::<T>().ok().map(|b| *b)
}

fn same_version(a: &SlimPod, b: &Pod) -> bool {
    a.metadata.resource_version.is_some()
        && a.metadata.resource_version == b.metadata.resource_version
}

impl MemoryCluster {
    /// Every pod as a [`SlimPod`], ordered by namespace and name.
    pub fn pod_views(&self) -> Vec<Arc<SlimPod>> {
        let revision = self.kind_revision::<Pod>();
        let mut views = self.views.lock().unwrap_or_else(PoisonError::into_inner);
        if views.revision == Some(revision) {
            return views.list.clone();
        }
        let pods = self.list::<Pod>(None, &Selector::everything()).items;
        let mut by_key = HashMap::with_capacity(pods.len());
        let list: Vec<Arc<SlimPod>> = pods
            .iter()
            .map(|p| {
                let key = ObjectKey::of(&**p);
                let view = match views.by_key.remove(&key) {
                    Some(v) if same_version(&v, p) => v,
                    _ => Arc::new(SlimPod::from(&**p)),
                };
                by_key.insert(key, view.clone());
                view
            })
            .collect();
        *views = PodViews {
            revision: Some(revision),
            list: list.clone(),
            by_key,
        };
        list
    }

    /// One pod as a [`SlimPod`].
    pub fn pod_view(&self, key: &ObjectKey) -> Option<Arc<SlimPod>> {
        let pod = self.get_opt::<Pod>(key)?;
        let views = self.views.lock().unwrap_or_else(PoisonError::into_inner);
        match views.by_key.get(key) {
            Some(v) if same_version(v, &pod) => Some(v.clone()),
            _ => Some(Arc::new(SlimPod::from(&*pod))),
        }
    }
}

pub(super) type SharedViews = Arc<Mutex<PodViews>>;
