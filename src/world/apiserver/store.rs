//! The state behind [`super::MemoryCluster`]: one typed store per kind, the
//! global resource-version counter, and the indexes garbage collection
//! needs. Everything here runs under the cluster's lock.

use std::any::{Any, TypeId};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::SignedDuration;
use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::watch;

use crate::api::NodeClaim;
use crate::clock::{Timestamp, truncate_to_second};
use crate::cluster::{
    ApiError, DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS, DeleteOutcome, DeleteParams, EventType,
    FINALIZER_FOREGROUND, KindScope, Object, ObjectKey, Preconditions, Propagation, Validator,
    WatchEvent,
};

/// Events kept per kind before the oldest are compacted away. Large enough
/// that a controller draining its watches once per simulated step rarely
/// has to relist, small enough to bound memory with 40,000 pods.
pub(super) const DEFAULT_WATCH_LOG_CAPACITY: usize = 4096;

/// Characters of `generateName` suffixes, as in apimachinery: no vowels, no
/// look-alikes, so generated names never spell words.
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
/// Length of a `generateName` suffix.
const NAME_SUFFIX_LEN: usize = 5;

/// The identity of a kind in the store: `apiVersion/Kind`, e.g. `v1/Pod`.
pub(super) type KindId = Arc<str>;

/// State shared by all kinds.
pub(super) struct Shared {
    /// The last resource version issued.
    pub(super) resource_version: u64,
    /// Drives deterministic uids and `generateName` suffixes.
    seq: u64,
    /// Where each stored object is, by uid.
    uids: HashMap<String, (KindId, ObjectKey)>,
    /// Owner uid → the objects naming it in their `ownerReferences`, each
    /// with whether its reference blocks the owner's foreground deletion
    /// (`blockOwnerDeletion`).
    dependents: HashMap<String, BTreeMap<(KindId, ObjectKey), bool>>,
    pub(super) watch_log_capacity: usize,
    /// A pod's grace period when it has none of its own.
    pub(super) default_grace_seconds: i64,
}

impl Shared {
    fn next_resource_version(&mut self) -> u64 {
        self.resource_version += 1;
        self.resource_version
    }

    /// A 64-bit value from the sequence (SplitMix64), so that uids and names
    /// are reproducible from run to run.
    fn next_random(&mut self) -> u64 {
        self.seq = self.seq.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.seq;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A fresh uid in the form of a version-4 UUID.
    fn next_uid(&mut self) -> String {
        loop {
            let (hi, lo) = (self.next_random(), self.next_random());
            let hi = (hi & !0xF000) | 0x4000;
            let lo = (lo & !(0xC << 60)) | (0x8 << 60);
            let uid = format!(
                "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
                hi >> 32,
                (hi >> 16) & 0xFFFF,
                hi & 0xFFFF,
                lo >> 48,
                lo & 0xFFFF_FFFF_FFFF
            );
            if !self.uids.contains_key(&uid) {
                return uid;
            }
        }
    }

    fn name_suffix(&mut self) -> String {
        let mut r = self.next_random();
        let n = NAME_ALPHABET.len() as u64;
        (0..NAME_SUFFIX_LEN)
            .map(|_| {
                let c = NAME_ALPHABET[(r % n) as usize];
                r /= n;
                char::from(c)
            })
            .collect()
    }

    fn index_owners(&mut self, kind: &KindId, key: &ObjectKey, meta: &ObjectMeta) {
        for owner in meta.owner_references.iter().flatten() {
            let blocks = self
                .dependents
                .entry(owner.uid.clone())
                .or_default()
                .entry((kind.clone(), key.clone()))
                .or_default();
            *blocks |= owner.block_owner_deletion == Some(true);
        }
    }

    /// Whether an object that blocks the foreground deletion of the owner
    /// `uid` is still stored.
    fn has_blocking_dependents(&self, uid: &str) -> bool {
        self.dependents
            .get(uid)
            .is_some_and(|deps| deps.values().any(|blocks| *blocks))
    }

    /// The objects naming `uid` as an owner.
    fn dependents_of(&self, uid: &str) -> Vec<(KindId, ObjectKey)> {
        self.dependents
            .get(uid)
            .map(|deps| deps.keys().cloned().collect())
            .unwrap_or_default()
    }

    fn unindex_owners(&mut self, kind: &KindId, key: &ObjectKey, meta: &ObjectMeta) {
        for owner in meta.owner_references.iter().flatten() {
            if let Some(deps) = self.dependents.get_mut(&owner.uid) {
                deps.remove(&(kind.clone(), key.clone()));
                if deps.is_empty() {
                    self.dependents.remove(&owner.uid);
                }
            }
        }
    }
}

/// Facts about a kind.
pub(super) struct KindInfo {
    pub(super) id: KindId,
    /// `plural` or `plural.group`, as in API server messages.
    pub(super) resource: String,
    pub(super) namespaced: bool,
}

/// All objects of one kind, their watch log, and their validators.
pub(super) struct KindStore<K> {
    pub(super) info: KindInfo,
    pub(super) objects: BTreeMap<ObjectKey, Arc<K>>,
    log: VecDeque<WatchEvent<K>>,
    /// Events up to this resource version have been compacted away.
    compacted: u64,
    pub(super) validators: Vec<Arc<dyn Validator<K>>>,
    notify: watch::Sender<u64>,
}

/// The kind-independent face of a [`KindStore`], for cross-kind work.
pub(super) trait ErasedStore: Any + Send + Sync {
    /// Garbage-collects the dependent `key` of the owner `owner_uid`
    /// (removed, or deleted in the foreground): with `keep` (another owner
    /// still holds it) only the reference to `owner_uid` is dropped,
    /// otherwise the dependent is deleted with `propagation`. Returns the
    /// work that leaves.
    fn collect(
        &mut self,
        key: &ObjectKey,
        owner_uid: &str,
        keep: bool,
        propagation: Propagation,
        now: Timestamp,
        shared: &mut Shared,
    ) -> Vec<Gc>;

    /// Drops the dependent `key`'s references to `owner_uid` (orphaning).
    fn drop_owner(&mut self, key: &ObjectKey, owner_uid: &str, shared: &mut Shared);

    /// The uid of the object `key`.
    fn uid(&self, key: &ObjectKey) -> Option<String>;

    /// The uids the object `key` names as owners.
    fn owners(&self, key: &ObjectKey) -> Vec<String>;

    /// Whether the object `key` is being deleted in the foreground (it
    /// waits for its dependents: not an owner that holds them).
    fn waiting_for_dependents(&self, key: &ObjectKey) -> bool;

    /// If the object `key` waits for its dependents and none that blocks
    /// it is left, removes its `foregroundDeletion` finalizer, and the
    /// object if that was the last. Returns what was removed.
    fn finish_foreground(&mut self, key: &ObjectKey, shared: &mut Shared) -> Option<Removed>;

    /// The integer `spec.replicas` of the object `key`, if it has one.
    fn replicas(&self, key: &ObjectKey) -> Option<i32>;

    /// Compacts the watch log to its last `keep` events.
    fn compact(&mut self, keep: usize);

    /// Compacts away the watch events up to `resource_version`.
    fn compact_through(&mut self, resource_version: u64);

    /// The namespaces the kind's objects live in (none for a cluster-scoped
    /// kind).
    fn namespaces(&self) -> BTreeSet<String>;
}

/// An object removed from the store, for garbage collection to follow.
#[derive(Debug, Clone)]
pub(super) struct Removed {
    pub(super) uid: String,
    /// The uids its owner references name.
    pub(super) owners: Vec<String>,
}

/// Garbage-collection work a write leaves behind, done by
/// [`State::collect_garbage`] (the garbage collector's part, run inside
/// the write).
#[derive(Debug, Clone)]
pub(super) enum Gc {
    /// The object is gone: its dependents are deleted (background), and an
    /// owner waiting for it in the foreground may now go.
    Removed(Removed),
    /// The owner is being deleted in the foreground: its dependents are
    /// deleted.
    DeleteDependents(String),
    /// The owner is deleted orphaning its dependents: they lose their
    /// references to it.
    Orphan(String),
    /// The owner deleted in the foreground may have no blocking dependent
    /// left.
    Foreground(String),
}

/// What a delete does to the stored object.
pub(super) enum Plan<K> {
    /// Nothing (a deletion already pending, not shortened).
    Keep,
    /// The object is stored with its deletion marks: terminating.
    Mark(K),
    /// The object is removed; this is its last state.
    Remove(K),
}

fn as_pod<K: Object>(obj: &K) -> Option<&Pod> {
    (obj as &dyn Any).downcast_ref::<Pod>()
}

fn as_pod_mut<K: Object>(obj: &mut K) -> Option<&mut Pod> {
    (obj as &mut dyn Any).downcast_mut::<Pod>()
}

fn has_finalizers(meta: &ObjectMeta) -> bool {
    meta.finalizers.as_ref().is_some_and(|f| !f.is_empty())
}

/// Sets the pod fields the API server defaults that deletion reads: a
/// pod's `spec.terminationGracePeriodSeconds`.
fn default_fields<K: Object>(obj: &mut K, grace_seconds: i64) {
    if let Some(spec) = as_pod_mut(obj).and_then(|p| p.spec.as_mut())
        && spec.termination_grace_period_seconds.is_none()
    {
        spec.termination_grace_period_seconds = Some(grace_seconds);
    }
}

/// The grace period the API server gives a pod it starts deleting (the
/// pod strategy's `CheckGracefulDelete`): the delete's, else the pod's own
/// `terminationGracePeriodSeconds`, else `default`; 0 for a pod that is
/// not bound to a node or has finished (nothing has to stop); a negative
/// value counts as 1.
fn pod_grace_seconds(pod: &Pod, requested: Option<i64>, default: i64) -> i64 {
    let spec = pod.spec.as_ref();
    let bound = spec
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    if !bound || crate::api::pod::is_finished(pod) {
        return 0;
    }
    let period = requested
        .or_else(|| spec.and_then(|s| s.termination_grace_period_seconds))
        .unwrap_or(default);
    if period < 0 { 1 } else { period }
}

/// Whether two objects of a kind have the same status, and the same rest
/// of the body (all but `metadata`, `apiVersion` and `kind`), as their
/// JSON has them: what a write compares to tell a status change from a
/// spec change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Same {
    status: bool,
    body: bool,
}

impl Same {
    fn of<K: Object>(a: &K, b: &K) -> Result<Same, ApiError> {
        if let Some(typed) = typed_same::<K>() {
            return Ok(typed(a, b));
        }
        let (a, b) = (Parts::of(a)?, Parts::of(b)?);
        Ok(Same {
            status: a.status == b.status,
            body: a.body == b.body,
        })
    }

    /// From the typed spec and status of a kind that has just those.
    fn fields<S, T>(a: (&S, &T), b: (&S, &T)) -> Same
    where
        S: Serialize + PartialEq,
        T: Serialize + PartialEq,
    {
        Same {
            status: same_json(a.1, b.1),
            body: same_json(a.0, b.0),
        }
    }
}

/// Equal values serialize the same; unequal ones are serialized to tell,
/// as two times within one second are different values and the same JSON.
fn same_json<T: Serialize + PartialEq>(a: &T, b: &T) -> bool {
    a == b
        || matches!(
            (serde_json::to_value(a), serde_json::to_value(b)),
            (Ok(x), Ok(y)) if x == y
        )
}

/// [`Same`] from the typed fields, for the kinds whose objects are
/// written most (Pods, Nodes and NodeClaims: a spec, a status and
/// metadata), without serializing whole objects at each write. Other
/// kinds compare their JSON.
fn typed_same<K: Object>() -> Option<fn(&K, &K) -> Same> {
    fn kind<T: 'static, K: 'static>(f: fn(&T, &T) -> Same) -> Option<fn(&K, &K) -> Same> {
        (&f as &dyn Any).downcast_ref().copied()
    }
    kind::<Pod, K>(|a, b| Same::fields((&a.spec, &a.status), (&b.spec, &b.status)))
        .or_else(|| {
            kind::<Node, K>(|a, b| Same::fields((&a.spec, &a.status), (&b.spec, &b.status)))
        })
        .or_else(|| {
            kind::<NodeClaim, K>(|a, b| Same::fields((&a.spec, &a.status), (&b.spec, &b.status)))
        })
}

/// An object's JSON split into its status and the rest (the "spec"),
/// without `metadata`, `apiVersion` and `kind`, which never count as spec.
struct Parts {
    body: Map<String, Value>,
    status: Option<Value>,
}

impl Parts {
    fn of<K: Object>(obj: &K) -> Result<Parts, ApiError> {
        match serde_json::to_value(obj) {
            Ok(Value::Object(mut body)) => {
                for field in ["metadata", "apiVersion", "kind"] {
                    body.remove(field);
                }
                let status = body.remove("status");
                Ok(Parts { body, status })
            }
            Ok(_) => Err(internal(format!(
                "{} does not serialize to a JSON object",
                K::kind(&())
            ))),
            Err(e) => Err(internal(format!("serializing {}: {e}", K::kind(&())))),
        }
    }

    /// Builds an object from a body, a status and metadata.
    fn assemble<K: Object>(
        body: &Map<String, Value>,
        status: Option<&Value>,
        meta: ObjectMeta,
    ) -> Result<K, ApiError> {
        let mut map = body.clone();
        map.insert("apiVersion".into(), K::api_version(&()).into_owned().into());
        map.insert("kind".into(), K::kind(&()).into_owned().into());
        map.insert("metadata".into(), Value::Object(Map::new()));
        if let Some(status) = status {
            map.insert("status".into(), status.clone());
        }
        let mut obj: K = serde_json::from_value(Value::Object(map))
            .map_err(|e| internal(format!("deserializing {}: {e}", K::kind(&()))))?;
        *obj.meta_mut() = meta;
        Ok(obj)
    }
}

fn internal(message: String) -> ApiError {
    ApiError::Internal { message }
}

fn now_time(now: Timestamp) -> Time {
    Time(truncate_to_second(now))
}

fn rv_string(rv: u64) -> String {
    rv.to_string()
}

impl<K: Object> KindStore<K> {
    fn new(resource_version: u64) -> Self {
        let kind = K::kind(&());
        KindStore {
            info: KindInfo {
                id: Arc::from(format!("{}/{kind}", K::api_version(&()))),
                resource: crate::cluster::resource_name::<K>(),
                namespaced: <K::Scope as KindScope>::NAMESPACED,
            },
            objects: BTreeMap::new(),
            log: VecDeque::new(),
            compacted: 0,
            validators: Vec::new(),
            notify: watch::Sender::new(resource_version),
        }
    }

    /// The stored object at `key`, or `NotFound`.
    pub(super) fn existing(&self, key: &ObjectKey) -> Result<Arc<K>, ApiError> {
        self.objects
            .get(key)
            .cloned()
            .ok_or_else(|| self.not_found(key))
    }

    pub(super) fn not_found(&self, key: &ObjectKey) -> ApiError {
        ApiError::NotFound {
            resource: self.info.resource.clone(),
            key: key.clone(),
        }
    }

    pub(super) fn conflict(&self, key: &ObjectKey, message: String) -> ApiError {
        ApiError::Conflict {
            resource: self.info.resource.clone(),
            key: key.clone(),
            message,
        }
    }

    fn invalid(&self, key: &ObjectKey, messages: Vec<String>) -> ApiError {
        ApiError::Invalid {
            resource: crate::cluster::qualified_kind::<K>(),
            key: key.clone(),
            messages,
        }
    }

    /// Normalises the namespace of an incoming object and returns its key:
    /// namespaced kinds default to `default`, cluster-scoped kinds drop any
    /// namespace.
    fn normalise_key(&self, meta: &mut ObjectMeta) -> ObjectKey {
        if self.info.namespaced {
            if meta.namespace.as_deref().is_none_or(str::is_empty) {
                meta.namespace = Some("default".to_string());
            }
        } else {
            meta.namespace = None;
        }
        ObjectKey::new(
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone().unwrap_or_default(),
        )
    }

    fn validate(&self, key: &ObjectKey, old: Option<&K>, new: &K) -> Result<(), ApiError> {
        let messages: Vec<String> = self
            .validators
            .iter()
            .filter_map(|v| v.validate(old, new).err())
            .flatten()
            .collect();
        if messages.is_empty() {
            Ok(())
        } else {
            Err(self.invalid(key, messages))
        }
    }

    /// Runs admission for `obj` as a create (nothing stored under its key)
    /// or an update, storing nothing: a server-side dry run.
    pub(super) fn dry_run(&self, obj: &K) -> Result<(), ApiError> {
        let mut meta = obj.meta().clone();
        let key = self.normalise_key(&mut meta);
        let old = self.objects.get(&key).map(AsRef::as_ref);
        self.validate(&key, old, obj)
    }

    fn push_event(&mut self, event_type: EventType, object: Arc<K>, rv: u64, capacity: usize) {
        self.compact_log(capacity.max(1) - 1);
        self.log.push_back(WatchEvent {
            event_type,
            object,
            resource_version: rv,
        });
        self.notify.send_replace(rv);
    }

    /// Compacts the watch log to its last `keep` events.
    fn compact_log(&mut self, keep: usize) {
        while self.log.len() > keep {
            match self.log.pop_front() {
                Some(old) => self.compacted = old.resource_version,
                None => break,
            }
        }
    }

    /// The events after `resource_version`, or `Gone` if some of them have
    /// been compacted away.
    pub(super) fn events_after(
        &self,
        resource_version: u64,
    ) -> Result<Vec<WatchEvent<K>>, ApiError> {
        if resource_version < self.compacted {
            return Err(ApiError::Gone {
                requested: resource_version,
                oldest: self.compacted,
            });
        }
        let start = self
            .log
            .partition_point(|e| e.resource_version <= resource_version);
        Ok(self.log.range(start..).cloned().collect())
    }

    pub(super) fn subscribe(&self) -> watch::Receiver<u64> {
        self.notify.subscribe()
    }

    /// Stores a new or changed object under a fresh resource version.
    fn commit(
        &mut self,
        key: ObjectKey,
        mut obj: K,
        old: Option<&K>,
        shared: &mut Shared,
    ) -> Arc<K> {
        let rv = shared.next_resource_version();
        obj.meta_mut().resource_version = Some(rv_string(rv));
        let event_type = match old {
            Some(old) => {
                shared.unindex_owners(&self.info.id, &key, old.meta());
                EventType::Modified
            }
            None => {
                if let Some(uid) = &obj.meta().uid {
                    shared
                        .uids
                        .insert(uid.clone(), (self.info.id.clone(), key.clone()));
                }
                EventType::Added
            }
        };
        shared.index_owners(&self.info.id, &key, obj.meta());
        let obj = Arc::new(obj);
        self.objects.insert(key, obj.clone());
        self.push_event(event_type, obj.clone(), rv, shared.watch_log_capacity);
        obj
    }

    /// Removes an object for good, recording `last` (its final state) in the
    /// Deleted event. Returns the final state and what garbage collection
    /// follows from the removal.
    fn remove(&mut self, key: &ObjectKey, mut last: K, shared: &mut Shared) -> (Arc<K>, Removed) {
        let rv = shared.next_resource_version();
        if let Some(old) = self.objects.remove(key) {
            shared.unindex_owners(&self.info.id, key, old.meta());
        }
        last.meta_mut().resource_version = Some(rv_string(rv));
        let uid = last.meta().uid.clone().unwrap_or_default();
        shared.uids.remove(&uid);
        let owners = last
            .meta()
            .owner_references
            .iter()
            .flatten()
            .map(|r| r.uid.clone())
            .collect();
        let last = Arc::new(last);
        self.push_event(
            EventType::Deleted,
            last.clone(),
            rv,
            shared.watch_log_capacity,
        );
        (last, Removed { uid, owners })
    }

    /// Creates an object. With `restore`, the object's own uid,
    /// timestamps, generation and deletion state are kept (snapshot
    /// loading) and validators are skipped.
    pub(super) fn create(
        &mut self,
        mut obj: K,
        now: Timestamp,
        shared: &mut Shared,
        restore: bool,
    ) -> Result<Arc<K>, ApiError> {
        let meta = obj.meta_mut();
        if !restore
            && meta
                .resource_version
                .as_deref()
                .is_some_and(|rv| !rv.is_empty())
        {
            return Err(ApiError::BadRequest {
                message: "resourceVersion should not be set on objects to be created".into(),
            });
        }
        meta.resource_version = None;
        let mut key = self.normalise_key(meta);
        if key.name.is_empty() {
            let prefix = meta.generate_name.clone().unwrap_or_default();
            if prefix.is_empty() {
                return Err(self.invalid(
                    &key,
                    vec!["metadata.name: Required value: name or generateName is required".into()],
                ));
            }
            loop {
                key.name = format!("{prefix}{}", shared.name_suffix());
                if !self.objects.contains_key(&key) {
                    break;
                }
            }
            meta.name = Some(key.name.clone());
        }
        if self.objects.contains_key(&key) {
            return Err(ApiError::AlreadyExists {
                resource: self.info.resource.clone(),
                key,
            });
        }
        match meta.uid.as_deref().filter(|uid| restore && !uid.is_empty()) {
            Some(uid) if shared.uids.contains_key(uid) => {
                return Err(self.invalid(&key, vec!["metadata.uid: uid is already in use".into()]));
            }
            Some(_) => {}
            None => meta.uid = Some(shared.next_uid()),
        }
        if !(restore && meta.creation_timestamp.is_some()) {
            meta.creation_timestamp = Some(now_time(now));
        }
        if !(restore && meta.generation.is_some()) {
            meta.generation = Some(1);
        }
        if !restore {
            meta.deletion_timestamp = None;
            meta.deletion_grace_period_seconds = None;
        }
        default_fields(&mut obj, shared.default_grace_seconds);
        if !restore {
            self.validate(&key, None, &obj)?;
        }
        Ok(self.commit(key, obj, None, shared))
    }

    fn check_identity(
        &self,
        key: &ObjectKey,
        new: &ObjectMeta,
        old: &ObjectMeta,
    ) -> Result<(), ApiError> {
        if let Some(rv) = new.resource_version.as_deref().filter(|rv| !rv.is_empty())
            && Some(rv) != old.resource_version.as_deref()
        {
            return Err(self.conflict(
                key,
                "the object has been modified; please apply your changes to the latest version and try again".into(),
            ));
        }
        if let Some(uid) = new.uid.as_deref().filter(|uid| !uid.is_empty())
            && Some(uid) != old.uid.as_deref()
        {
            return Err(self.conflict(
                key,
                format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    old.uid.as_deref().unwrap_or_default()
                ),
            ));
        }
        Ok(())
    }

    /// Replaces an object (PUT). Status changes are ignored, as with a
    /// status subresource; `generation` moves when anything but metadata and
    /// status changes. Returns the stored object and, if the update removed
    /// the last finalizer of a terminating object whose grace period is
    /// over (0, as for every kind but a pod still terminating), what was
    /// removed.
    pub(super) fn replace(
        &mut self,
        mut obj: K,
        shared: &mut Shared,
    ) -> Result<(Arc<K>, Option<Removed>), ApiError> {
        default_fields(&mut obj, shared.default_grace_seconds);
        let key = self.normalise_key(obj.meta_mut());
        let old = self.existing(&key)?;
        let old_meta = old.meta();
        self.check_identity(&key, obj.meta(), old_meta)?;
        {
            let meta = obj.meta_mut();
            meta.uid.clone_from(&old_meta.uid);
            meta.resource_version.clone_from(&old_meta.resource_version);
            meta.creation_timestamp
                .clone_from(&old_meta.creation_timestamp);
            meta.deletion_timestamp
                .clone_from(&old_meta.deletion_timestamp);
            meta.deletion_grace_period_seconds = old_meta.deletion_grace_period_seconds;
            meta.generation = old_meta.generation;
        }
        if old_meta.deletion_timestamp.is_some() {
            let old_finalizers = old_meta.finalizers.as_deref().unwrap_or_default();
            let added: Vec<&str> = obj
                .meta()
                .finalizers
                .iter()
                .flatten()
                .filter(|f| !old_finalizers.contains(f))
                .map(String::as_str)
                .collect();
            if !added.is_empty() {
                return Err(self.invalid(
                    &key,
                    vec![format!(
                        "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                    )],
                ));
            }
        }
        let same = Same::of(old.as_ref(), &obj)?;
        if !same.status {
            let (old_parts, new_parts) = (Parts::of(old.as_ref())?, Parts::of(&obj)?);
            let meta = obj.meta().clone();
            obj = Parts::assemble(&new_parts.body, old_parts.status.as_ref(), meta)?;
        }
        let spec_changed = !same.body;
        if !spec_changed && obj.meta() == old_meta {
            return Ok((old, None));
        }
        if spec_changed {
            obj.meta_mut().generation = Some(old_meta.generation.unwrap_or(0).saturating_add(1));
        }
        self.validate(&key, Some(old.as_ref()), &obj)?;
        let meta = obj.meta();
        if meta.deletion_timestamp.is_some()
            && !has_finalizers(meta)
            && meta.deletion_grace_period_seconds.unwrap_or(0) == 0
        {
            let (last, removed) = self.remove(&key, obj, shared);
            return Ok((last, Some(removed)));
        }
        Ok((self.commit(key, obj, Some(old.as_ref()), shared), None))
    }

    /// Replaces the status of an object (PUT on `/status`). Everything but
    /// the status is taken from the stored object.
    pub(super) fn update_status(
        &mut self,
        mut obj: K,
        shared: &mut Shared,
    ) -> Result<Arc<K>, ApiError> {
        let key = self.normalise_key(obj.meta_mut());
        let old = self.existing(&key)?;
        self.check_identity(&key, obj.meta(), old.meta())?;
        let same = Same::of(old.as_ref(), &obj)?;
        if same.status {
            return Ok(old);
        }
        if same.body {
            *obj.meta_mut() = old.meta().clone();
        } else {
            let (old_parts, new_parts) = (Parts::of(old.as_ref())?, Parts::of(&obj)?);
            obj = Parts::assemble(
                &old_parts.body,
                new_parts.status.as_ref(),
                old.meta().clone(),
            )?;
        }
        self.validate(&key, Some(old.as_ref()), &obj)?;
        Ok(self.commit(key, obj, Some(old.as_ref()), shared))
    }

    /// Stores a server-side change to an existing object (finalizer marks,
    /// garbage collection, eviction conditions), bypassing validation.
    pub(super) fn modify(&mut self, key: &ObjectKey, obj: K, shared: &mut Shared) -> Arc<K> {
        let old = self.objects.get(key).cloned();
        self.commit(key.clone(), obj, old.as_deref(), shared)
    }

    /// Fails with a conflict unless the preconditions of a delete hold.
    pub(super) fn check_preconditions(
        &self,
        key: &ObjectKey,
        preconditions: &Preconditions,
        meta: &ObjectMeta,
    ) -> Result<(), ApiError> {
        self.check_precondition(
            key,
            "UID",
            preconditions.uid.as_deref(),
            meta.uid.as_deref(),
            "deleted and then recreated",
        )?;
        self.check_precondition(
            key,
            "ResourceVersion",
            preconditions.resource_version.as_deref(),
            meta.resource_version.as_deref(),
            "modified",
        )
    }

    /// Fails with a conflict if a `field` precondition is set and differs
    /// from the stored value.
    fn check_precondition(
        &self,
        key: &ObjectKey,
        field: &str,
        wanted: Option<&str>,
        stored: Option<&str>,
        what_happened: &str,
    ) -> Result<(), ApiError> {
        // The API server names the kind here, not the resource:
        // `Operation cannot be fulfilled on ConfigMap "a": the UID in ...`.
        match wanted {
            Some(wanted) if Some(wanted) != stored => Err(ApiError::Conflict {
                resource: crate::cluster::qualified_kind::<K>(),
                key: key.clone(),
                message: format!(
                    "the {field} in the precondition ({wanted}) does not match the {field} in record ({}). The object might have been {what_happened}",
                    stored.unwrap_or_default()
                ),
            }),
            _ => Ok(()),
        }
    }

    /// What deleting `old` with `params` at `now` does, as the API
    /// server's delete path decides it (`rest.BeforeDelete` and the
    /// registry's graceful deletion):
    /// - a pod is deleted gracefully: `deletionTimestamp` is now plus its
    ///   grace period ([`pod_grace_seconds`]) and `deletionGracePeriodSeconds`
    ///   that period; it stays while the period is above 0 or finalizers
    ///   hold it;
    /// - a pod already terminating: a shorter grace period moves its
    ///   deletion earlier (never before now; a period that would end in the
    ///   past becomes 1 s, or stays 0 for a force delete), 0 removes it
    ///   unless finalizers hold it; a longer or no grace period changes
    ///   nothing;
    /// - any other kind: finalizers hold it with `deletionTimestamp` now
    ///   and a grace period of 0, otherwise it is removed; deleting it again
    ///   changes nothing;
    /// - a foreground deletion adds the `foregroundDeletion` finalizer.
    pub(super) fn plan_delete(
        &self,
        old: &K,
        params: &DeleteParams,
        now: Timestamp,
        default_grace: i64,
    ) -> Plan<K> {
        let requested = params
            .grace_period_seconds
            .map(|g| if g < 0 { 1 } else { g });
        let now = truncate_to_second(now);
        let meta = old.meta();
        if let Some(stamp) = &meta.deletion_timestamp {
            let pending = meta.deletion_grace_period_seconds.unwrap_or(0);
            if as_pod(old).is_none() || pending <= 0 {
                return if has_finalizers(meta) {
                    Plan::Keep
                } else {
                    Plan::Remove(K::clone(old))
                };
            }
            let Some(mut period) = requested.filter(|g| *g < pending) else {
                return Plan::Keep;
            };
            let mut at = stamp
                .0
                .checked_add(SignedDuration::from_secs(period - pending))
                .unwrap_or(now);
            if at < now {
                at = now;
                if period != 0 {
                    period = 1;
                }
            }
            let mut obj = K::clone(old);
            let m = obj.meta_mut();
            m.deletion_timestamp = Some(Time(at));
            m.deletion_grace_period_seconds = Some(period);
            return if period == 0 && !has_finalizers(obj.meta()) {
                Plan::Remove(obj)
            } else {
                Plan::Mark(obj)
            };
        }
        let mut obj = K::clone(old);
        let m = obj.meta_mut();
        if params.propagation == Propagation::Foreground {
            let finalizers = m.finalizers.get_or_insert_default();
            if !finalizers.iter().any(|f| f == FINALIZER_FOREGROUND) {
                finalizers.push(FINALIZER_FOREGROUND.to_string());
            }
        }
        let grace = match as_pod(old) {
            Some(pod) => pod_grace_seconds(pod, requested, default_grace),
            None if has_finalizers(m) => 0,
            None => return Plan::Remove(obj),
        };
        m.deletion_timestamp = Some(Time(
            now.checked_add(SignedDuration::from_secs(grace))
                .unwrap_or(now),
        ));
        m.deletion_grace_period_seconds = Some(grace);
        if as_pod(old).is_some()
            && let Some(generation) = m.generation
        {
            // A graceful deletion moves the pod's generation.
            m.generation = Some(generation.saturating_add(1));
        }
        if grace > 0 || has_finalizers(m) {
            Plan::Mark(obj)
        } else {
            Plan::Remove(obj)
        }
    }

    /// Carries out a [`Plan`] for the stored object `old`.
    pub(super) fn apply_plan(
        &mut self,
        key: &ObjectKey,
        old: Arc<K>,
        plan: Plan<K>,
        shared: &mut Shared,
    ) -> (DeleteOutcome<K>, Option<Removed>) {
        match plan {
            Plan::Keep => (DeleteOutcome::Terminating(old), None),
            Plan::Mark(obj) => {
                let obj = self.commit(key.clone(), obj, Some(old.as_ref()), shared);
                (DeleteOutcome::Terminating(obj), None)
            }
            Plan::Remove(obj) => {
                let (last, removed) = self.remove(key, obj, shared);
                (DeleteOutcome::Deleted(last), Some(removed))
            }
        }
    }

    /// Deletes the stored object `key` with `params` (no preconditions, no
    /// dry run): the collector's delete. Returns the work left.
    fn delete_for_collection(
        &mut self,
        key: &ObjectKey,
        propagation: Propagation,
        now: Timestamp,
        shared: &mut Shared,
    ) -> Vec<Gc> {
        let Some(old) = self.objects.get(key).cloned() else {
            return Vec::new();
        };
        let starting = old.meta().deletion_timestamp.is_none();
        let uid = old.meta().uid.clone().unwrap_or_default();
        let params = DeleteParams {
            propagation: propagation.clone(),
            ..DeleteParams::default()
        };
        let plan = self.plan_delete(&old, &params, now, shared.default_grace_seconds);
        let keep = matches!(plan, Plan::Keep);
        let (_, removed) = self.apply_plan(key, old, plan, shared);
        let mut work: Vec<Gc> = removed.map(Gc::Removed).into_iter().collect();
        if starting && !keep && propagation == Propagation::Foreground {
            work.push(Gc::DeleteDependents(uid));
        }
        work
    }
}

/// What a delete answers in a dry run: the object as the plan would leave
/// it, nothing stored.
pub(super) fn dry_outcome<K>(old: Arc<K>, plan: Plan<K>) -> DeleteOutcome<K> {
    match plan {
        Plan::Keep => DeleteOutcome::Terminating(old),
        Plan::Mark(obj) => DeleteOutcome::Terminating(Arc::new(obj)),
        Plan::Remove(obj) => DeleteOutcome::Deleted(Arc::new(obj)),
    }
}

impl<K: Object> ErasedStore for KindStore<K> {
    fn collect(
        &mut self,
        key: &ObjectKey,
        owner_uid: &str,
        keep: bool,
        propagation: Propagation,
        now: Timestamp,
        shared: &mut Shared,
    ) -> Vec<Gc> {
        if keep {
            self.drop_owner(key, owner_uid, shared);
            return Vec::new();
        }
        self.delete_for_collection(key, propagation, now, shared)
    }

    fn drop_owner(&mut self, key: &ObjectKey, owner_uid: &str, shared: &mut Shared) {
        let Some(obj) = self.objects.get(key).cloned() else {
            return;
        };
        let refs = obj.meta().owner_references.as_deref().unwrap_or_default();
        if !refs.iter().any(|r| r.uid == owner_uid) {
            return;
        }
        let mut updated = K::clone(&obj);
        if let Some(refs) = updated.meta_mut().owner_references.as_mut() {
            refs.retain(|r| r.uid != owner_uid);
        }
        if updated
            .meta()
            .owner_references
            .as_ref()
            .is_some_and(Vec::is_empty)
        {
            updated.meta_mut().owner_references = None;
        }
        self.modify(key, updated, shared);
    }

    fn uid(&self, key: &ObjectKey) -> Option<String> {
        self.objects.get(key)?.meta().uid.clone()
    }

    fn owners(&self, key: &ObjectKey) -> Vec<String> {
        self.objects
            .get(key)
            .map(|o| {
                o.meta()
                    .owner_references
                    .iter()
                    .flatten()
                    .map(|r| r.uid.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn waiting_for_dependents(&self, key: &ObjectKey) -> bool {
        self.objects.get(key).is_some_and(|o| {
            let meta = o.meta();
            meta.deletion_timestamp.is_some()
                && meta
                    .finalizers
                    .iter()
                    .flatten()
                    .any(|f| f == FINALIZER_FOREGROUND)
        })
    }

    fn finish_foreground(&mut self, key: &ObjectKey, shared: &mut Shared) -> Option<Removed> {
        if !self.waiting_for_dependents(key) {
            return None;
        }
        let obj = self.objects.get(key).cloned()?;
        let uid = obj.meta().uid.clone().unwrap_or_default();
        if shared.has_blocking_dependents(&uid) {
            return None;
        }
        let mut updated = K::clone(&obj);
        let meta = updated.meta_mut();
        if let Some(f) = meta.finalizers.as_mut() {
            f.retain(|f| f != FINALIZER_FOREGROUND);
        }
        if meta.finalizers.as_ref().is_some_and(Vec::is_empty) {
            meta.finalizers = None;
        }
        if !has_finalizers(meta) && meta.deletion_grace_period_seconds.unwrap_or(0) == 0 {
            return Some(self.remove(key, updated, shared).1);
        }
        self.modify(key, updated, shared);
        None
    }

    fn compact(&mut self, keep: usize) {
        self.compact_log(keep);
    }

    fn compact_through(&mut self, resource_version: u64) {
        while self
            .log
            .front()
            .is_some_and(|e| e.resource_version <= resource_version)
        {
            if let Some(old) = self.log.pop_front() {
                self.compacted = old.resource_version;
            }
        }
    }

    fn replicas(&self, key: &ObjectKey) -> Option<i32> {
        let value = serde_json::to_value(self.objects.get(key)?.as_ref()).ok()?;
        let replicas = value.pointer("/spec/replicas")?.as_i64()?;
        i32::try_from(replicas).ok()
    }

    fn namespaces(&self) -> BTreeSet<String> {
        if !self.info.namespaced {
            return BTreeSet::new();
        }
        self.objects.keys().map(|k| k.namespace.clone()).collect()
    }
}

/// All kinds, and the shared counters and indexes.
pub(super) struct State {
    pub(super) shared: Shared,
    kinds: BTreeMap<KindId, Box<dyn ErasedStore>>,
    by_type: HashMap<TypeId, KindId>,
}

impl State {
    pub(super) fn new() -> Self {
        State {
            shared: Shared {
                resource_version: 0,
                seq: 0,
                uids: HashMap::new(),
                dependents: HashMap::new(),
                watch_log_capacity: DEFAULT_WATCH_LOG_CAPACITY,
                default_grace_seconds: DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS,
            },
            kinds: BTreeMap::new(),
            by_type: HashMap::new(),
        }
    }

    /// The store of `K`, if the kind has been used.
    pub(super) fn store<K: Object>(&self) -> Option<&KindStore<K>> {
        let id = self.by_type.get(&TypeId::of::<K>())?;
        let store: &dyn Any = self.kinds.get(id)?.as_ref();
        store.downcast_ref()
    }

    /// The store of `K`, registering the kind on first use, together with
    /// the shared state.
    pub(super) fn store_mut<K: Object>(
        &mut self,
    ) -> Result<(&mut KindStore<K>, &mut Shared), ApiError> {
        let id = match self.by_type.get(&TypeId::of::<K>()) {
            Some(id) => id.clone(),
            None => {
                let store = KindStore::<K>::new(self.shared.resource_version);
                let id = store.info.id.clone();
                if self.kinds.contains_key(&id) {
                    return Err(internal(format!(
                        "kind {id} is already registered with another Rust type"
                    )));
                }
                self.kinds.insert(id.clone(), Box::new(store));
                self.by_type.insert(TypeId::of::<K>(), id.clone());
                id
            }
        };
        let store: Option<&mut dyn Any> =
            self.kinds.get_mut(&id).map(|s| s.as_mut() as &mut dyn Any);
        match store.and_then(|s| s.downcast_mut::<KindStore<K>>()) {
            Some(store) => Ok((store, &mut self.shared)),
            None => Err(internal(format!("kind {id} has an inconsistent store"))),
        }
    }

    /// The namespaces the stored objects of every kind live in.
    pub(super) fn namespaces(&self) -> BTreeSet<String> {
        self.kinds.values().flat_map(|s| s.namespaces()).collect()
    }

    /// Keeps at most `capacity` (at least 1) watch events per kind from now
    /// on, compacting each kind's log to it at once.
    pub(super) fn set_watch_log_capacity(&mut self, capacity: usize) {
        let capacity = capacity.max(1);
        self.shared.watch_log_capacity = capacity;
        for store in self.kinds.values_mut() {
            store.compact(capacity);
        }
    }

    /// Compacts every kind's watch log through `resource_version`.
    pub(super) fn compact_watch_logs_through(&mut self, resource_version: u64) {
        for store in self.kinds.values_mut() {
            store.compact_through(resource_version);
        }
    }

    /// The integer `spec.replicas` of the stored object with this uid: the
    /// scale of a workload controller.
    pub(super) fn replicas_of(&self, uid: &str) -> Option<i32> {
        let (kind, key) = self.shared.uids.get(uid)?;
        self.kinds.get(kind)?.replicas(key)
    }

    /// Deletes the object `key` of kind `K` as a DELETE with `params` does
    /// (see [`KindStore::plan_delete`]), after its preconditions, and does
    /// the garbage collection that follows. A foreground delete answers
    /// with the object marked, as the API server does, even when the
    /// collection removes it at once (it had no blocking dependent).
    pub(super) fn delete<K: Object>(
        &mut self,
        key: &ObjectKey,
        params: &DeleteParams,
        now: Timestamp,
    ) -> Result<DeleteOutcome<K>, ApiError> {
        let (store, shared) = self.store_mut::<K>()?;
        let old = store.existing(key)?;
        store.check_preconditions(key, &params.preconditions, old.meta())?;
        let plan = store.plan_delete(&old, params, now, shared.default_grace_seconds);
        if params.dry_run {
            return Ok(dry_outcome(old, plan));
        }
        let starting = old.meta().deletion_timestamp.is_none() && !matches!(plan, Plan::Keep);
        let uid = old.meta().uid.clone().unwrap_or_default();
        if starting && params.propagation == Propagation::Orphan {
            // The garbage collector's part of the `orphan` finalizer, done
            // before the object can go (its removal would collect them).
            self.collect_garbage(vec![Gc::Orphan(uid.clone())], now);
        }
        let (store, shared) = self.store_mut::<K>()?;
        let (outcome, removed) = store.apply_plan(key, old, plan, shared);
        let mut work: Vec<Gc> = removed.map(Gc::Removed).into_iter().collect();
        if starting && params.propagation == Propagation::Foreground {
            work.push(Gc::DeleteDependents(uid));
        }
        self.collect_garbage(work, now);
        Ok(outcome)
    }

    /// Whether the owner `uid` still holds its dependents: stored, and not
    /// itself waiting for them (a foreground deletion).
    fn is_solid(&self, uid: &str) -> bool {
        let Some((kind, key)) = self.shared.uids.get(uid) else {
            return false;
        };
        self.kinds
            .get(kind)
            .is_some_and(|store| !store.waiting_for_dependents(key))
    }

    /// Whether the object `key` of `kind` has an owner other than
    /// `owner_uid` that still holds it.
    fn held_by_another(&self, kind: &KindId, key: &ObjectKey, owner_uid: &str) -> bool {
        let owners = self
            .kinds
            .get(kind)
            .map(|s| s.owners(key))
            .unwrap_or_default();
        owners.iter().any(|o| o != owner_uid && self.is_solid(o))
    }

    /// Does the garbage collector's work that writes left, transitively and
    /// in a deterministic order: dependents of removed objects are deleted
    /// (background) or, when another owner holds them, lose the reference;
    /// owners deleted in the foreground have their dependents deleted (in
    /// the foreground themselves when they have dependents of their own, as
    /// the collector does) and go once no blocking dependent is left;
    /// orphaned dependents lose their references.
    pub(super) fn collect_garbage(&mut self, work: Vec<Gc>, now: Timestamp) {
        let mut queue: VecDeque<Gc> = work.into();
        while let Some(item) = queue.pop_front() {
            match item {
                Gc::Removed(removed) => {
                    let dependents = self
                        .shared
                        .dependents
                        .remove(&removed.uid)
                        .unwrap_or_default();
                    for (kind, key) in dependents.into_keys() {
                        let keep = self.held_by_another(&kind, &key, &removed.uid);
                        if let Some(store) = self.kinds.get_mut(&kind) {
                            queue.extend(store.collect(
                                &key,
                                &removed.uid,
                                keep,
                                Propagation::Background,
                                now,
                                &mut self.shared,
                            ));
                        }
                    }
                    queue.extend(removed.owners.into_iter().map(Gc::Foreground));
                }
                Gc::DeleteDependents(owner_uid) => {
                    for (kind, key) in self.shared.dependents_of(&owner_uid) {
                        let keep = self.held_by_another(&kind, &key, &owner_uid);
                        let has_dependents = self
                            .kinds
                            .get(&kind)
                            .and_then(|s| s.uid(&key))
                            .is_some_and(|uid| !self.shared.dependents_of(&uid).is_empty());
                        let propagation = if has_dependents {
                            Propagation::Foreground
                        } else {
                            Propagation::Background
                        };
                        if let Some(store) = self.kinds.get_mut(&kind) {
                            queue.extend(store.collect(
                                &key,
                                &owner_uid,
                                keep,
                                propagation,
                                now,
                                &mut self.shared,
                            ));
                        }
                    }
                    queue.push_back(Gc::Foreground(owner_uid));
                }
                Gc::Orphan(owner_uid) => {
                    for (kind, key) in self.shared.dependents_of(&owner_uid) {
                        if let Some(store) = self.kinds.get_mut(&kind) {
                            store.drop_owner(&key, &owner_uid, &mut self.shared);
                        }
                    }
                }
                Gc::Foreground(owner_uid) => {
                    let Some((kind, key)) = self.shared.uids.get(&owner_uid).cloned() else {
                        continue;
                    };
                    if let Some(store) = self.kinds.get_mut(&kind)
                        && let Some(removed) = store.finish_foreground(&key, &mut self.shared)
                    {
                        queue.push_back(Gc::Removed(removed));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    use super::*;

    /// The typed comparison answers as the objects' JSON does, for every
    /// pair of `variants`.
    fn typed_agrees_with_json<K: Object + std::fmt::Debug>(variants: &[K]) {
        let typed = typed_same::<K>().expect("compared typed");
        for a in variants {
            for b in variants {
                let (pa, pb) = (Parts::of(a).expect("a"), Parts::of(b).expect("b"));
                let json = Same {
                    status: pa.status == pb.status,
                    body: pa.body == pb.body,
                };
                assert_eq!(typed(a, b), json, "{a:?}\n{b:?}");
            }
        }
    }

    /// `base` with each JSON change applied, itself first.
    fn variants<K: Object>(base: Value, changes: &[fn(&mut Value)]) -> Vec<K> {
        std::iter::once(base.clone())
            .chain(changes.iter().map(|change| {
                let mut v = base.clone();
                change(&mut v);
                v
            }))
            .map(|v| serde_json::from_value(v).expect("valid object"))
            .collect()
    }

    const TIME: &str = "2026-01-05T00:00:00Z";

    #[test]
    fn pods_nodes_and_nodeclaims_compare_typed_as_their_json_does() {
        let pod = json!({
            "metadata": {"name": "p", "namespace": "default", "labels": {"app": "a"}},
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": TIME}
            ]},
        });
        typed_agrees_with_json::<Pod>(&variants(
            pod,
            &[
                |p| p["status"]["phase"] = json!("Running"),
                |p| p["spec"]["nodeName"] = json!("n"),
                |p| p["metadata"]["labels"]["app"] = json!("b"),
                |p| {
                    p["status"]["conditions"][0]["lastTransitionTime"] =
                        json!("2026-01-05T00:00:00.250Z");
                },
                |p| p["status"] = json!({}),
                |p| {
                    p.as_object_mut().expect("object").remove("status");
                },
                |p| {
                    p.as_object_mut().expect("object").remove("spec");
                },
            ],
        ));
        let node = json!({
            "metadata": {"name": "n"},
            "spec": {"providerID": "aws:///us-east-1a/i-1"},
            "status": {"allocatable": {"cpu": "2"}},
        });
        typed_agrees_with_json::<Node>(&variants(
            node,
            &[
                |n| n["status"]["allocatable"]["cpu"] = json!("4"),
                |n| n["spec"]["unschedulable"] = json!(true),
                |n| n["spec"]["taints"] = json!([]),
            ],
        ));
        let claim = json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": "c"},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [],
            },
            "status": {"conditions": [{
                "type": "Launched", "status": "True", "reason": "Launched", "message": "",
                "lastTransitionTime": TIME,
            }]},
        });
        typed_agrees_with_json::<NodeClaim>(&variants(
            claim,
            &[
                |c| c["status"]["providerID"] = json!("aws:///us-east-1a/i-1"),
                |c| c["spec"]["expireAfter"] = json!("1h"),
                |c| {
                    c["status"]["conditions"][0]["lastTransitionTime"] =
                        json!("2026-01-05T00:00:00.5Z");
                },
            ],
        ));
        assert!(typed_same::<ConfigMap>().is_none());
    }
}
