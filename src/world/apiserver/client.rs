//! [`MemoryCluster`] behind the [`Cluster`] interface: every write logged
//! and checked for an armed fault first (`seam`), pods read as `SlimPod`
//! views (`views`).

use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::seam::{Access, Write};
use super::{MemoryCluster, views};
use crate::api::SlimPod;
use crate::cluster::{
    ApiError, ApplyParams, Cluster, DeleteOutcome, DeleteParams, Listed, Object, ObjectKey,
};

/// A delete's or an eviction's object, for a fault's condition.
fn key_json(namespace: &str, name: &str) -> serde_json::Value {
    serde_json::json!({"metadata": {"namespace": namespace, "name": name}})
}

impl MemoryCluster {
    /// Logs a write of the [`Cluster`] interface and returns the error of
    /// a fault armed for it, if any.
    fn intercept<K: Object>(
        &self,
        write: Write,
        access: &[Access],
        object: impl FnOnce() -> serde_json::Value,
    ) -> Result<(), ApiError> {
        for a in access {
            self.seam.log(a.clone());
        }
        match self.seam.fault(write, &K::kind(&()), object) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// A written object as JSON, for a fault's condition.
fn json_of<K: Object>(obj: &K) -> impl FnOnce() -> serde_json::Value + '_ {
    move || serde_json::to_value(obj).unwrap_or_default()
}

/// Pods are written whole; [`SlimPod`] is only how they are read.
fn view_write<K: Object>() -> Result<(), ApiError> {
    if views::is_view::<K>() {
        return Err(ApiError::Internal {
            message: "a SlimPod is a read view of a pod: write the Pod".into(),
        });
    }
    Ok(())
}

/// The in-memory cluster stores whole pods and answers reads of the
/// [`SlimPod`] view with their projections (`views`).
impl Cluster for MemoryCluster {
    fn list<K: Object>(&self) -> Listed<K> {
        if views::is_view::<K>() {
            return views::cast(self.pod_views()).unwrap_or_default();
        }
        self.listed::<K>()
    }

    fn get<K: Object>(&self, key: &ObjectKey) -> Option<Arc<K>> {
        if views::is_view::<K>() {
            return views::cast(self.pod_view(key)).flatten();
        }
        self.get_opt(key)
    }

    fn revision<K: Object>(&self) -> u64 {
        if views::is_view::<K>() {
            return self.kind_revision::<Pod>();
        }
        self.kind_revision::<K>()
    }

    fn create<K: Object>(&self, obj: K) -> impl Future<Output = Result<Arc<K>, ApiError>> + Send {
        let access = [Access::of::<K>("create", None)];
        std::future::ready(
            view_write::<K>()
                .and_then(|()| self.intercept::<K>(Write::Create, &access, json_of(&obj)))
                .and_then(|()| MemoryCluster::create(self, obj)),
        )
    }

    fn replace<K: Object>(&self, obj: K) -> impl Future<Output = Result<Arc<K>, ApiError>> + Send {
        let access = [Access::of::<K>("update", None)];
        std::future::ready(
            view_write::<K>()
                .and_then(|()| self.intercept::<K>(Write::Replace, &access, json_of(&obj)))
                .and_then(|()| MemoryCluster::replace(self, obj)),
        )
    }

    fn replace_status<K: Object>(
        &self,
        obj: K,
    ) -> impl Future<Output = Result<Arc<K>, ApiError>> + Send {
        let access = [Access::of::<K>("update", Some("status"))];
        std::future::ready(
            view_write::<K>()
                .and_then(|()| self.intercept::<K>(Write::ReplaceStatus, &access, json_of(&obj)))
                .and_then(|()| self.update_status(obj)),
        )
    }

    fn delete_with<K: Object>(
        &self,
        key: &ObjectKey,
        params: &DeleteParams,
    ) -> impl Future<Output = Result<DeleteOutcome<K>, ApiError>> + Send {
        let access = [Access::of::<K>("delete", None)];
        std::future::ready(
            self.intercept::<K>(Write::Delete, &access, || {
                key_json(&key.namespace, &key.name)
            })
            .and_then(|()| {
                if views::is_view::<K>() {
                    // A pod deleted through its view: the outcome as the view.
                    let outcome = MemoryCluster::delete_with::<Pod>(self, key, params)?;
                    let view = |p: &Arc<Pod>| Arc::new(SlimPod::from(&**p));
                    let outcome = match &outcome {
                        DeleteOutcome::Deleted(p) => DeleteOutcome::Deleted(view(p)),
                        DeleteOutcome::Terminating(p) => DeleteOutcome::Terminating(view(p)),
                    };
                    return views::cast(outcome).ok_or_else(|| ApiError::Internal {
                        message: "the pod view's type".into(),
                    });
                }
                MemoryCluster::delete_with(self, key, params)
            }),
        )
    }

    fn apply<K: Object>(
        &self,
        obj: K,
        params: &ApplyParams,
    ) -> impl Future<Output = Result<Arc<K>, ApiError>> + Send {
        // An apply that creates the object is authorised as a create too.
        let mut access = vec![Access::of::<K>("patch", None)];
        if self.get_opt::<K>(&ObjectKey::of(&obj)).is_none() {
            access.push(Access::of::<K>("create", None));
        }
        std::future::ready(
            view_write::<K>()
                .and_then(|()| self.intercept::<K>(Write::Apply, &access, json_of(&obj)))
                .and_then(|()| MemoryCluster::apply(self, obj, params)),
        )
    }

    fn evict_with(
        &self,
        namespace: &str,
        name: &str,
        params: &DeleteParams,
    ) -> impl Future<Output = Result<(), ApiError>> + Send {
        let access = [Access::of::<Pod>("create", Some("eviction"))];
        std::future::ready(
            self.intercept::<Pod>(Write::Evict, &access, || key_json(namespace, name))
                .and_then(|()| {
                    MemoryCluster::evict_with(self, namespace, name, params).map(|_| ())
                }),
        )
    }
}
