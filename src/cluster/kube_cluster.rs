//! [`KubeCluster`]: the [`Cluster`] of a real API server, through kube-rs.
//!
//! Reads come from caches, writes go to the API server. Each kind the
//! controller reads is registered with [`KubeCluster::watch`] (or
//! [`KubeCluster::watch_with`], to watch one namespace, select by field, or
//! slim objects before they are stored), which spawns a watcher feeding a
//! reflector store: an initial list, then a watch resumed from the last
//! resource version, relisting after a desync (410 Gone) and backing off
//! exponentially on errors. Reads are then lock-and-copy lookups that never
//! touch the network, so the controller decides from what it has seen (as
//! every Kubernetes controller does) and can read as often as it likes.
//! [`KubeCluster::wait_until_synced`] holds the controller back until every
//! cache has completed its first list, and [`KubeCluster::changes`] wakes a
//! loop on every watch event.
//!
//! **Reads see the writes that succeeded.** A cache lags the API server by
//! the time a watch event takes to arrive, and a controller that reads its
//! own write's old state acts twice: launches a second instance for a
//! NodeClaim whose status it has just written, say. So every write of a
//! watched kind that the server accepted is kept in an overlay over the
//! store (the object the server answered with, or a tombstone for a
//! delete) until the watch delivers that version or a later one, or a
//! relist shows the object gone, or [`OVERLAY_TTL`] passes. Versions are
//! compared as numbers, as etcd-backed API servers issue them; a version
//! that is not a number ends the overlay's entry at the next event for
//! that object.
//!
//! Writes are single requests (POST, PUT, DELETE, and the `status` and
//! `eviction` subresources); their failures become [`ApiError`]s with the
//! same variants [`crate::world::MemoryCluster`] returns, so the controller handles
//! both servers alike.
//!
//! kube's typed `Api::namespaced` needs the kind's scope at compile time,
//! which the [`Object`] bound only gives as a constant, so writes build the
//! same [`kube::core::Request`] that `Api` would and send it through the
//! [`Client`].

use std::any::{Any, TypeId};
use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::Eviction;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams, PostParams, PropagationPolicy};
use kube::core::{Request, Status};
use kube::runtime::reflector::store::WriterDropped;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client};
use tokio::runtime::TryCurrentError;
use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tracing::Instrument;

use super::{ApiError, ApplyParams, Cluster, DeleteOutcome, KindScope, Listed, Object, ObjectKey};

/// The longest a write shadows the cache: by then its watch event has long
/// arrived, or the watch has relisted.
pub const OVERLAY_TTL: Duration = Duration::from_secs(60);

/// A [`Cluster`] backed by a Kubernetes API server.
///
/// Dropping it stops its watches.
pub struct KubeCluster {
    client: Client,
    caches: HashMap<TypeId, Cache>,
    watches: Vec<AbortHandle>,
    /// Unwatched kinds that have been read, so each is warned about once.
    warned: Mutex<HashSet<TypeId>>,
    /// Counts watch events of every kind: [`KubeCluster::changes`].
    changes: Arc<watch::Sender<u64>>,
}

/// A registered kind's cache.
struct Cache {
    kind: String,
    typed: Box<dyn ErasedCache>,
    /// Bumped on every watch event and accepted write: [`Cluster::revision`].
    revision: Arc<AtomicU64>,
}

/// The cache of kind `K`: the reflector's store and the writes it has not
/// caught up with yet.
struct KindCache<K: Object> {
    store: Store<K>,
    overlay: Arc<Overlay<K>>,
    /// The last list and the revision it was made at, while no write
    /// shadowed the store (an overlay entry expires with time, not with an
    /// event).
    listed: Mutex<Option<(u64, Listed<K>)>>,
}

/// A [`KindCache`] of any kind: waits for its initial list, downcasts back.
trait ErasedCache: Any + Send + Sync {
    fn wait_until_ready(&self) -> BoxFuture<'_, Result<(), WriterDropped>>;
}

impl<K: Object> ErasedCache for KindCache<K> {
    fn wait_until_ready(&self) -> BoxFuture<'_, Result<(), WriterDropped>> {
        Box::pin(self.store.wait_until_ready())
    }
}

/// How a kind is watched: which objects, and what of each object is
/// kept. The default watches every object and keeps it whole.
pub struct WatchOptions<K> {
    fields: Option<String>,
    transform: Option<fn(&mut K)>,
}

impl<K> Default for WatchOptions<K> {
    fn default() -> Self {
        WatchOptions {
            fields: None,
            transform: None,
        }
    }
}

impl<K> WatchOptions<K> {
    /// Only objects matching a field selector (`metadata.name=x`).
    pub fn fields(mut self, selector: impl Into<String>) -> Self {
        self.fields = Some(selector.into());
        self
    }

    /// Changes each object before it is stored (see [`super::slim`]).
    pub fn transform(mut self, f: fn(&mut K)) -> Self {
        self.transform = Some(f);
        self
    }
}

/// Writes of one kind that the cache has not caught up with, by object.
struct Overlay<K> {
    entries: Mutex<HashMap<ObjectKey, Written<K>>>,
}

/// An accepted write: the object the server answered with (`None` for a
/// delete) and its resource version.
struct Written<K> {
    object: Option<Arc<K>>,
    version: Option<u64>,
    at: Instant,
}

impl<K: Object> Overlay<K> {
    fn new() -> Self {
        Overlay {
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, Written<K>>> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if !entries.is_empty() {
            let now = Instant::now();
            entries.retain(|_, w| now.duration_since(w.at) < OVERLAY_TTL);
        }
        entries
    }

    /// Records a write the server accepted: `object` is its answer, or
    /// `None` for a delete.
    fn record(&self, key: ObjectKey, object: Option<Arc<K>>, version: Option<u64>) {
        self.lock().insert(
            key,
            Written {
                object,
                version,
                at: Instant::now(),
            },
        );
    }

    /// What a read of `key` sees if a write shadows the store: `Some(None)`
    /// for a deleted object.
    fn get(&self, key: &ObjectKey) -> Option<Option<Arc<K>>> {
        self.lock().get(key).map(|w| w.object.clone())
    }

    /// `objects` (the store's) with the writes laid over them; whether
    /// any was.
    fn merge(&self, objects: &mut Vec<Arc<K>>) -> bool {
        let entries = self.lock();
        if entries.is_empty() {
            return false;
        }
        objects.retain(|o| !entries.contains_key(&ObjectKey::of(&**o)));
        objects.extend(entries.values().filter_map(|w| w.object.clone()));
        true
    }

    /// The watch delivered `key` at `version`: a write it has caught up
    /// with no longer shadows the store.
    fn observed(&self, key: &ObjectKey, version: Option<u64>) {
        let mut entries = self.lock();
        if let Some(w) = entries.get(key) {
            let caught_up = match (w.version, version) {
                (Some(written), Some(seen)) => seen >= written,
                _ => true,
            };
            if caught_up {
                entries.remove(key);
            }
        }
    }

    /// A relist that started at `started` completed; `listed` tells
    /// whether it held an object. Writes to objects it does not hold are
    /// gone, unless they came after the list began (their events are still
    /// to come).
    fn relisted(&self, listed: impl Fn(&ObjectKey) -> bool, started: Instant) {
        let mut entries = self.lock();
        if entries.is_empty() {
            return;
        }
        entries.retain(|key, w| listed(key) || (w.object.is_some() && w.at > started));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

impl ObjectKey {
    /// The reflector store's key of the object.
    fn object_ref<K: Object>(&self) -> ObjectRef<K> {
        let object = ObjectRef::<K>::new(&self.name);
        match self.namespace.as_str() {
            "" => object,
            ns => object.within(ns),
        }
    }
}

/// The resource version of an object, as a number.
fn version_of(meta: &ObjectMeta) -> Option<u64> {
    meta.resource_version.as_deref()?.parse().ok()
}

impl std::fmt::Debug for KubeCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut kinds: Vec<&str> = self.caches.values().map(|c| c.kind.as_str()).collect();
        kinds.sort_unstable();
        f.debug_struct("KubeCluster")
            .field("watched", &kinds)
            .finish_non_exhaustive()
    }
}

impl KubeCluster {
    /// A cluster that writes through `client` and caches nothing yet.
    /// Namespaced objects without a namespace are written to the client's
    /// default namespace.
    pub fn new(client: Client) -> Self {
        KubeCluster {
            client,
            caches: HashMap::new(),
            watches: Vec::new(),
            warned: Mutex::new(HashSet::new()),
            changes: Arc::new(watch::channel(0).0),
        }
    }

    /// The client the cluster talks through.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Starts caching kind `K`, in all namespaces: spawns a watcher task on
    /// the current tokio runtime that keeps a store up to date, retrying
    /// with exponential backoff on errors. Watching a kind again does
    /// nothing. Fails outside a tokio runtime.
    pub fn watch<K: Object + Debug>(&mut self) -> Result<&mut Self, TryCurrentError> {
        self.watch_with::<K>(WatchOptions::default())
    }

    /// [`KubeCluster::watch`] with options: a field selector, a transform
    /// applied to each object before it is stored.
    pub fn watch_with<K: Object + Debug>(
        &mut self,
        options: WatchOptions<K>,
    ) -> Result<&mut Self, TryCurrentError> {
        let api = Api::<K>::all(self.client.clone());
        self.spawn_watch(api, options)
    }

    /// [`KubeCluster::watch_with`] in one namespace only, which needs
    /// permission in that namespace only. Reads find only its objects.
    pub fn watch_in<K>(
        &mut self,
        namespace: &str,
        options: WatchOptions<K>,
    ) -> Result<&mut Self, TryCurrentError>
    where
        K: Object + Debug + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    {
        let api = Api::<K>::namespaced(self.client.clone(), namespace);
        self.spawn_watch(api, options)
    }

    fn spawn_watch<K: Object + Debug>(
        &mut self,
        api: Api<K>,
        options: WatchOptions<K>,
    ) -> Result<&mut Self, TryCurrentError> {
        if self.caches.contains_key(&TypeId::of::<K>()) {
            return Ok(self);
        }
        let runtime = tokio::runtime::Handle::try_current()?;
        let kind = K::kind(&()).into_owned();
        let (store, writer) = reflector::store::<K>();
        let mut config = watcher::Config::default();
        if let Some(fields) = &options.fields {
            config = config.fields(fields);
        }
        let transform = options.transform;
        let events = watcher(api, config)
            .default_backoff()
            .modify(move |obj: &mut K| {
                if let Some(f) = transform {
                    f(obj);
                }
            })
            .reflect(writer);
        let span = tracing::info_span!("watch", kind = %kind);
        let revision = Arc::new(AtomicU64::new(0));
        let overlay = Arc::new(Overlay::<K>::new());
        let (bump, changes, shadow) = (revision.clone(), self.changes.clone(), overlay.clone());
        let listed = store.clone();
        let task = runtime.spawn(
            async move {
                let mut events = pin!(events);
                // When the relist in progress started.
                let mut relist_started = Instant::now();
                while let Some(event) = events.next().await {
                    match event {
                        Ok(event) => {
                            match &event {
                                watcher::Event::Apply(o) | watcher::Event::Delete(o) => {
                                    shadow.observed(&ObjectKey::of(o), version_of(o.meta()));
                                }
                                watcher::Event::Init => relist_started = Instant::now(),
                                watcher::Event::InitApply(o) => {
                                    shadow.observed(&ObjectKey::of(o), version_of(o.meta()));
                                }
                                watcher::Event::InitDone => {
                                    // The reflector has swapped the list in
                                    // by now, so the store tells what it
                                    // held (no set of 400,000 pod keys).
                                    let listed =
                                        |key: &ObjectKey| listed.get(&key.object_ref()).is_some();
                                    shadow.relisted(listed, relist_started);
                                }
                            }
                            bump.fetch_add(1, Ordering::Release);
                            changes.send_modify(|n| *n = n.wrapping_add(1));
                        }
                        Err(error) => tracing::warn!(%error, "watch failed; retrying"),
                    }
                }
            }
            .instrument(span),
        );
        self.watches.push(task.abort_handle());
        self.caches.insert(
            TypeId::of::<K>(),
            Cache {
                kind,
                typed: Box::new(KindCache {
                    store,
                    overlay,
                    listed: Mutex::new(None),
                }),
                revision,
            },
        );
        Ok(self)
    }

    /// A receiver that changes on every watch event of every watched kind,
    /// for a loop to wait on.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Resolves once every watched kind has completed its initial list.
    /// Fails only if a watch task died (panicked) before that.
    pub async fn wait_until_synced(&self) -> Result<(), WriterDropped> {
        for cache in self.caches.values() {
            if let Err(e) = cache.typed.wait_until_ready().await {
                tracing::error!(kind = %cache.kind, "watch stopped before its initial list");
                return Err(e);
            }
        }
        Ok(())
    }

    /// Whether every watched kind has completed its initial list.
    pub fn is_synced(&self) -> bool {
        use futures::FutureExt;
        self.caches
            .values()
            .all(|c| matches!(c.typed.wait_until_ready().now_or_never(), Some(Ok(()))))
    }

    /// The cache of `K`, if `K` is watched.
    fn cache<K: Object>(&self) -> Option<&KindCache<K>> {
        self.caches
            .get(&TypeId::of::<K>())
            .and_then(|cache| (&*cache.typed as &dyn Any).downcast_ref::<KindCache<K>>())
    }

    /// Lays an accepted write over the cache of `K` (if watched).
    fn record<K: Object>(&self, key: ObjectKey, object: Option<Arc<K>>, version: Option<u64>) {
        if let (Some(cache), Some(c)) = (self.cache::<K>(), self.caches.get(&TypeId::of::<K>())) {
            cache.overlay.record(key, object, version);
            c.revision.fetch_add(1, Ordering::Release);
        }
    }

    /// Records an object the server answered a write with.
    fn record_object<K: Object>(&self, obj: &Arc<K>) {
        self.record(
            ObjectKey::of(&**obj),
            Some(obj.clone()),
            version_of(obj.meta()),
        );
    }

    /// The cache of `K`; warns (once per kind) when `K` is not watched.
    fn watched<K: Object>(&self) -> Option<&KindCache<K>> {
        let cache = self.cache::<K>();
        if cache.is_none() {
            let mut warned = self.warned.lock().unwrap_or_else(PoisonError::into_inner);
            if warned.insert(TypeId::of::<K>()) {
                tracing::warn!(
                    kind = %K::kind(&()),
                    "read of a kind that is not watched finds nothing; call KubeCluster::watch"
                );
            }
        }
        cache
    }

    /// Where an object is written: its namespace (the client's default if
    /// unset; none for cluster-scoped kinds) and name.
    fn key_of<K: Object>(&self, meta: &ObjectMeta) -> ObjectKey {
        let namespace = if <K::Scope as KindScope>::NAMESPACED {
            meta.namespace
                .as_deref()
                .filter(|ns| !ns.is_empty())
                .unwrap_or(self.client.default_namespace())
        } else {
            ""
        };
        ObjectKey::new(namespace, meta.name.clone().unwrap_or_default())
    }

    /// Sends `write` of `obj` and decodes the object the server answers
    /// with.
    async fn write<K: Object>(&self, write: Write, obj: &K) -> Result<Arc<K>, ApiError> {
        let key = self.key_of::<K>(obj.meta());
        let result = async {
            let body = serde_json::to_vec(obj).map_err(kube::Error::SerdeError)?;
            let collection = collection::<K>(&key);
            let pp = PostParams::default();
            let mut request = match write {
                Write::Create => collection.create(&pp, body),
                Write::Replace => collection.replace(&key.name, &pp, body),
                Write::ReplaceStatus => {
                    collection.replace_subresource("status", &key.name, &pp, body)
                }
            }
            .map_err(kube::Error::BuildRequest)?;
            // Name the operation for kube's tracing, as `Api` does.
            request.extensions_mut().insert(write.operation());
            self.client.request::<K>(request).await
        };
        let stored = result
            .await
            .map(Arc::new)
            .map_err(|e| api_error(e, &super::resource_name::<K>(), &key))?;
        self.record_object(&stored);
        Ok(stored)
    }
}

/// The writes that send a whole object.
#[derive(Debug, Clone, Copy)]
enum Write {
    Create,
    Replace,
    ReplaceStatus,
}

impl Write {
    fn operation(self) -> &'static str {
        match self {
            Write::Create => "create",
            Write::Replace => "replace",
            Write::ReplaceStatus => "replace_status",
        }
    }
}

impl Drop for KubeCluster {
    fn drop(&mut self) {
        for watch in &self.watches {
            watch.abort();
        }
    }
}

impl Cluster for KubeCluster {
    fn list<K: Object>(&self) -> Listed<K> {
        let Some(cache) = self.watched::<K>() else {
            return Listed::default();
        };
        // Read before the store: the watch task bumps it (Release) after
        // the reflector stored the event, so a list made after this read
        // (Acquire) holds every change the revision counts.
        let revision = self.revision::<K>();
        let mut listed = cache.listed.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((at, list)) = &*listed
            && *at == revision
        {
            return list.clone();
        }
        let mut objects = cache.store.state();
        let shadowed = cache.overlay.merge(&mut objects);
        objects.sort_unstable_by(|a, b| {
            let (a, b) = (a.meta(), b.meta());
            (a.namespace.as_deref(), a.name.as_deref())
                .cmp(&(b.namespace.as_deref(), b.name.as_deref()))
        });
        let list = Listed::from(objects);
        *listed = (!shadowed).then(|| (revision, list.clone()));
        list
    }

    fn revision<K: Object>(&self) -> u64 {
        self.caches
            .get(&TypeId::of::<K>())
            .map_or(0, |c| c.revision.load(Ordering::Acquire))
    }

    fn get<K: Object>(&self, key: &ObjectKey) -> Option<Arc<K>> {
        let cache = self.watched::<K>()?;
        match cache.overlay.get(key) {
            Some(written) => written,
            None => cache.store.get(&key.object_ref()),
        }
    }

    async fn create<K: Object>(&self, obj: K) -> Result<Arc<K>, ApiError> {
        self.write(Write::Create, &obj).await
    }

    async fn replace<K: Object>(&self, obj: K) -> Result<Arc<K>, ApiError> {
        self.write(Write::Replace, &obj).await
    }

    async fn replace_status<K: Object>(&self, obj: K) -> Result<Arc<K>, ApiError> {
        self.write(Write::ReplaceStatus, &obj).await
    }

    async fn delete_with<K: Object>(
        &self,
        key: &ObjectKey,
        params: &super::DeleteParams,
    ) -> Result<DeleteOutcome<K>, ApiError> {
        let key = self.key_of::<K>(&ObjectMeta {
            name: Some(key.name.clone()),
            namespace: Some(key.namespace.clone()),
            ..ObjectMeta::default()
        });
        let response = async {
            let mut request = collection::<K>(&key)
                .delete(&key.name, &delete_params(params))
                .map_err(kube::Error::BuildRequest)?;
            request.extensions_mut().insert("delete");
            self.client.request_status::<K>(request).await
        };
        let resource = super::resource_name::<K>();
        let response = response.await.map_err(|e| api_error(e, &resource, &key))?;
        // The object when it still exists or the kind returns deleted
        // objects, else a success `Status`.
        if params.dry_run {
            // Nothing changed: the answer is what would have happened.
            return response.either(
                |obj| {
                    let obj = Arc::new(obj);
                    Ok(if obj.meta().deletion_timestamp.is_some() {
                        DeleteOutcome::Terminating(obj)
                    } else {
                        DeleteOutcome::Deleted(obj)
                    })
                },
                |status| {
                    self.last_state::<K>(&key, &status)
                        .map(DeleteOutcome::Deleted)
                        .ok_or_else(|| ApiError::Internal {
                            message: format!(
                                "{resource} {:?}: the dry run returned no object and none is cached",
                                key.name
                            ),
                        })
                },
            );
        }
        response.either(
            |obj| {
                let obj = Arc::new(obj);
                Ok(if obj.meta().deletion_timestamp.is_some() {
                    self.record_object(&obj);
                    DeleteOutcome::Terminating(obj)
                } else {
                    self.record::<K>(key.clone(), None, version_of(obj.meta()));
                    DeleteOutcome::Deleted(obj)
                })
            },
            |status| {
                let last = self.last_state::<K>(&key, &status);
                self.record::<K>(key.clone(), None, None);
                last.map(DeleteOutcome::Deleted)
                    .ok_or_else(|| ApiError::Internal {
                        message: format!(
                            "{resource} {:?} was deleted, but the server returned no object and none is cached",
                            key.name
                        ),
                    })
            },
        )
    }

    async fn apply<K: Object>(&self, obj: K, params: &ApplyParams) -> Result<Arc<K>, ApiError> {
        let key = self.key_of::<K>(obj.meta());
        let pp = PatchParams {
            dry_run: params.dry_run,
            force: params.force,
            field_manager: Some(params.field_manager.clone()),
            field_validation: None,
        };
        let result = async {
            let mut request = collection::<K>(&key)
                .patch(&key.name, &pp, &Patch::Apply(&obj))
                .map_err(kube::Error::BuildRequest)?;
            request.extensions_mut().insert("apply");
            self.client.request::<K>(request).await
        };
        let applied = result
            .await
            .map(Arc::new)
            .map_err(|e| api_error(e, &super::resource_name::<K>(), &key))?;
        if !params.dry_run {
            self.record_object(&applied);
        }
        Ok(applied)
    }

    async fn evict_with(
        &self,
        namespace: &str,
        name: &str,
        params: &super::DeleteParams,
    ) -> Result<(), ApiError> {
        let eviction = Eviction {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(namespace.into()),
                ..ObjectMeta::default()
            },
            delete_options: (*params != super::DeleteParams::default())
                .then(|| eviction_options(params)),
        };
        Api::<Pod>::namespaced(self.client.clone(), namespace)
            .create_subresource::<Eviction, Status>(
                "eviction",
                name,
                &PostParams::default(),
                &eviction,
            )
            .await
            .map(|_| ())
            .map_err(|e| api_error(e, "pods", &ObjectKey::new(namespace, name)))
    }
}

impl KubeCluster {
    /// The last state of an object whose delete answered with a `Status`
    /// rather than the object (as built-in kinds without
    /// `ReturnDeletedObject` do): the cached object, else one with only the
    /// metadata the status names, if the kind can be built from that.
    fn last_state<K: Object>(&self, key: &ObjectKey, status: &Status) -> Option<Arc<K>> {
        if self.caches.contains_key(&TypeId::of::<K>())
            && let Some(cached) = self.get::<K>(key)
        {
            return Some(cached);
        }
        let uid = status.details.as_ref().map(|d| d.uid.as_str());
        let minimal = serde_json::json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "metadata": {
                "name": key.name,
                "namespace": (!key.namespace.is_empty()).then_some(&key.namespace),
                "uid": uid.filter(|u| !u.is_empty()),
            },
        });
        serde_json::from_value(minimal).ok().map(Arc::new)
    }
}

/// kube's `DeleteParams` for dovetail's. A negative grace period is sent as
/// 1 s, what the API server makes of it.
fn delete_params(params: &super::DeleteParams) -> kube::api::DeleteParams {
    let preconditions = &params.preconditions;
    kube::api::DeleteParams {
        dry_run: params.dry_run,
        grace_period_seconds: params.grace_period_seconds.map(|g| {
            if g < 0 {
                1
            } else {
                u32::try_from(g).unwrap_or(u32::MAX)
            }
        }),
        propagation_policy: Some(match params.propagation {
            super::Propagation::Background => PropagationPolicy::Background,
            super::Propagation::Foreground => PropagationPolicy::Foreground,
            super::Propagation::Orphan => PropagationPolicy::Orphan,
        }),
        preconditions: (preconditions.uid.is_some() || preconditions.resource_version.is_some())
            .then(|| kube::api::Preconditions {
                uid: preconditions.uid.clone(),
                resource_version: preconditions.resource_version.clone(),
            }),
    }
}

/// An Eviction's `deleteOptions` for dovetail's delete parameters.
fn eviction_options(
    params: &super::DeleteParams,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions {
    let p = delete_params(params);
    k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions {
        dry_run: p.dry_run.then(|| vec!["All".to_string()]),
        grace_period_seconds: p.grace_period_seconds.map(i64::from),
        preconditions: p.preconditions.map(|c| {
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Preconditions {
                uid: c.uid,
                resource_version: c.resource_version,
            }
        }),
        propagation_policy: (params.propagation != super::Propagation::Background)
            .then(|| params.propagation.as_str().to_string()),
        ..Default::default()
    }
}

/// The request builder of the collection `key` belongs to.
fn collection<K: Object>(key: &ObjectKey) -> Request {
    let namespace = (!key.namespace.is_empty()).then_some(key.namespace.as_str());
    Request::new(K::url_path(&(), namespace))
}

/// The resource (`kind.group` as the API server's messages say it) and the
/// name a 404's details name.
fn missing(status: &Status) -> Option<(String, String)> {
    let d = status.details.as_ref()?;
    if d.kind.is_empty() || d.name.is_empty() {
        return None;
    }
    let resource = if d.group.is_empty() {
        d.kind.clone()
    } else {
        format!("{}.{}", d.kind, d.group)
    };
    Some((resource, d.name.clone()))
}

/// The [`ApiError`] for a failed request on the object at `key`, from the
/// `Status` the server answered with (its code, reason, message and
/// causes). Failures without a `Status` (transport, decoding) are
/// [`ApiError::Internal`].
fn api_error(error: kube::Error, resource: &str, key: &ObjectKey) -> ApiError {
    let kube::Error::Api(status) = error else {
        return ApiError::Internal {
            message: error.to_string(),
        };
    };
    let mut key = key.clone();
    if key.name.is_empty() {
        // A create with `generateName`: the server names the object.
        if let Some(name) = status.details.as_ref().map(|d| &d.name) {
            key.name.clone_from(name);
        }
    }
    let resource = resource.to_owned();
    match status.code {
        404 => match missing(&status) {
            // The server names what is missing, which is not always the
            // object asked for: a create in a namespace that does not
            // exist is `namespaces "x" not found`.
            Some((missing, name)) if missing != resource || name != key.name => {
                ApiError::NotFound {
                    resource: missing,
                    key: ObjectKey::cluster(name),
                }
            }
            _ => ApiError::NotFound { resource, key },
        },
        409 if status.reason == "AlreadyExists" => ApiError::AlreadyExists { resource, key },
        409 => {
            // Drop the prefix that `ApiError::Conflict` displays itself.
            let prefix = format!(
                "Operation cannot be fulfilled on {resource} {:?}: ",
                key.name
            );
            let message = status
                .message
                .strip_prefix(&prefix)
                .unwrap_or(&status.message)
                .to_owned();
            ApiError::Conflict {
                resource,
                key,
                message,
            }
        }
        422 => {
            let causes = status.details.as_ref().map_or(&[][..], |d| &d.causes[..]);
            let messages = if causes.is_empty() {
                vec![status.message.clone()]
            } else {
                causes
                    .iter()
                    .map(|c| match c.field.as_str() {
                        "" => c.message.clone(),
                        field => format!("{field}: {}", c.message),
                    })
                    .collect()
            };
            ApiError::Invalid {
                resource,
                key,
                messages,
            }
        }
        400 => ApiError::BadRequest {
            message: status.message,
        },
        410 => {
            let (requested, oldest) = too_old_versions(&status.message).unwrap_or_default();
            ApiError::Gone { requested, oldest }
        }
        429 => ApiError::TooManyRequests {
            cause: status
                .details
                .as_ref()
                .and_then(|d| d.causes.iter().find(|c| c.reason == "DisruptionBudget"))
                .map(|c| c.message.clone()),
            message: status.message,
        },
        500 => ApiError::Internal {
            message: status.message,
        },
        code => ApiError::Internal {
            message: format!("{code} {}: {}", status.reason, status.message),
        },
    }
}

/// The versions in the API server's `too old resource version: 5 (10)`.
fn too_old_versions(message: &str) -> Option<(u64, u64)> {
    let (_, versions) = message.rsplit_once("too old resource version: ")?;
    let (requested, oldest) = versions.split_once(" (")?;
    let oldest = oldest.strip_suffix(')')?;
    Some((requested.trim().parse().ok()?, oldest.trim().parse().ok()?))
}

#[cfg(test)]
#[path = "kube_cluster_tests.rs"]
mod tests;
