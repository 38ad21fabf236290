//! Fencing: a replica writes only while its leadership is certain.
//!
//! A leader that stops (SIGSTOP, a long GC-like pause, a node that froze)
//! and resumes after a standby took the Lease must not write a single
//! object on the strength of a term that ended while it was not looking.
//! The [`Fence`] holds the time until which the last successful renewal
//! vouches for this replica: the renewal's start plus the renew deadline,
//! which is shorter than the lease duration a standby waits. [`Fenced`]
//! checks it before every write and refuses the write once it has passed,
//! whatever the election task has or has not noticed yet.
//!
//! Reads are never fenced: a standby keeps its caches warm.

use std::sync::{Arc, Mutex, PoisonError};

use super::{ApiError, ApplyParams, Cluster, DeleteOutcome, DeleteParams, Object, ObjectKey};
use crate::clock::{Clock, Timestamp};

/// Until when this replica may write.
pub struct Fence {
    clock: Arc<dyn Clock>,
    until: Mutex<Option<Timestamp>>,
}

impl std::fmt::Debug for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fence")
            .field("until", &self.until())
            .finish()
    }
}

impl Fence {
    /// A closed fence: nothing is written until [`Fence::extend`].
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Fence {
            clock,
            until: Mutex::new(None),
        }
    }

    pub fn until(&self) -> Option<Timestamp> {
        *self.until.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes are allowed until `until`.
    pub fn extend(&self, until: Timestamp) {
        *self.until.lock().unwrap_or_else(PoisonError::into_inner) = Some(until);
    }

    /// Writes are refused from now on.
    pub fn close(&self) {
        *self.until.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// `Ok` while writes are allowed.
    pub fn check(&self) -> Result<(), ApiError> {
        let now = self.clock.now();
        match self.until() {
            Some(until) if now < until => Ok(()),
            Some(until) => Err(ApiError::Internal {
                message: format!(
                    "fenced: this replica's leadership could not be confirmed after {}; the write was not sent",
                    crate::clock::format_rfc3339(until)
                ),
            }),
            None => Err(ApiError::Internal {
                message: "fenced: this replica does not lead; the write was not sent".into(),
            }),
        }
    }
}

/// A [`Cluster`] whose writes pass a [`Fence`] first.
pub struct Fenced<C> {
    inner: Arc<C>,
    fence: Option<Arc<Fence>>,
}

impl<C> Fenced<C> {
    /// `fence` `None`: writes always go (no leader election).
    pub fn new(inner: Arc<C>, fence: Option<Arc<Fence>>) -> Self {
        Fenced { inner, fence }
    }

    pub fn inner(&self) -> &Arc<C> {
        &self.inner
    }

    fn check(&self) -> Result<(), ApiError> {
        self.fence.as_ref().map_or(Ok(()), |f| f.check())
    }
}

impl<C: Cluster> Cluster for Fenced<C> {
    fn list<K: Object>(&self) -> super::client::Listed<K> {
        self.inner.list()
    }

    fn get<K: Object>(&self, key: &ObjectKey) -> Option<Arc<K>> {
        self.inner.get(key)
    }

    fn revision<K: Object>(&self) -> u64 {
        self.inner.revision::<K>()
    }

    async fn create<K: Object>(&self, obj: K) -> Result<Arc<K>, ApiError> {
        self.check()?;
        self.inner.create(obj).await
    }

    async fn replace<K: Object>(&self, obj: K) -> Result<Arc<K>, ApiError> {
        self.check()?;
        self.inner.replace(obj).await
    }

    async fn replace_status<K: Object>(&self, obj: K) -> Result<Arc<K>, ApiError> {
        self.check()?;
        self.inner.replace_status(obj).await
    }

    async fn delete_with<K: Object>(
        &self,
        key: &ObjectKey,
        params: &DeleteParams,
    ) -> Result<DeleteOutcome<K>, ApiError> {
        self.check()?;
        self.inner.delete_with(key, params).await
    }

    async fn apply<K: Object>(&self, obj: K, params: &ApplyParams) -> Result<Arc<K>, ApiError> {
        self.check()?;
        self.inner.apply(obj, params).await
    }

    async fn evict_with(
        &self,
        namespace: &str,
        name: &str,
        params: &DeleteParams,
    ) -> Result<(), ApiError> {
        self.check()?;
        self.inner.evict_with(namespace, name, params).await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;
    use crate::clock::ManualClock;
    use crate::world::MemoryCluster;

    fn config_map(name: &str) -> ConfigMap {
        ConfigMap {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn writes_go_until_the_fence_passes_and_reads_always() {
        let clock = Arc::new(ManualClock::new(Timestamp::UNIX_EPOCH));
        let memory = Arc::new(MemoryCluster::new(clock.clone()));
        let fence = Arc::new(Fence::new(clock.clone()));
        let fenced = Fenced::new(memory.clone(), Some(fence.clone()));
        let refused = fenced.create(config_map("a")).await.unwrap_err();
        assert!(refused.to_string().contains("does not lead"), "{refused}");

        fence.extend(clock.now().checked_add(Duration::from_secs(10)).unwrap());
        fenced.create(config_map("b")).await.unwrap();
        clock.advance(Duration::from_secs(10)).unwrap();
        let refused = fenced.create(config_map("c")).await.unwrap_err();
        assert!(
            refused.to_string().contains("could not be confirmed"),
            "{refused}"
        );
        let names: Vec<_> = Cluster::list::<ConfigMap>(&fenced)
            .iter()
            .map(|c| c.metadata.name.clone().unwrap_or_default())
            .collect();
        assert_eq!(names, ["b"]);

        let open = Fenced::new(memory, None);
        open.create(config_map("d")).await.unwrap();
    }
}
