//! The state behind [`super::MemoryCluster`]: one typed store per kind, the
//! global resource-version counter, and the indexes garbage collection
//! needs. Everything here runs under the cluster's lock.

use std::any::{Any, TypeId};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde_json::{Map, Value};
use tokio::sync::watch;

use super::{
    ApiError, DeleteOutcome, EventType, KindScope, Object, ObjectKey, Preconditions, Validator,
    WatchEvent,
};
use crate::clock::{Timestamp, truncate_to_second};

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
    /// Owner uid → the objects naming it in their `ownerReferences`.
    dependents: HashMap<String, BTreeSet<(KindId, ObjectKey)>>,
    pub(super) watch_log_capacity: usize,
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
            self.dependents
                .entry(owner.uid.clone())
                .or_default()
                .insert((kind.clone(), key.clone()));
        }
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
    /// Garbage-collects the dependent `key` of the removed owner `owner_uid`.
    /// Returns the dependent's uid if it was removed too.
    fn collect(
        &mut self,
        key: &ObjectKey,
        owner_uid: &str,
        now: Timestamp,
        shared: &mut Shared,
    ) -> Option<String>;

    /// The integer `spec.replicas` of the object `key`, if it has one.
    fn replicas(&self, key: &ObjectKey) -> Option<i32>;
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
                resource: super::resource_name::<K>(),
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
            resource: self.info.resource.clone(),
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
        while self.log.len() >= capacity.max(1) {
            match self.log.pop_front() {
                Some(old) => self.compacted = old.resource_version,
                None => break,
            }
        }
        self.log.push_back(WatchEvent {
            event_type,
            object,
            resource_version: rv,
        });
        self.notify.send_replace(rv);
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
    /// Deleted event. Returns the final state and the object's uid.
    fn remove(&mut self, key: &ObjectKey, mut last: K, shared: &mut Shared) -> (Arc<K>, String) {
        let rv = shared.next_resource_version();
        if let Some(old) = self.objects.remove(key) {
            shared.unindex_owners(&self.info.id, key, old.meta());
        }
        last.meta_mut().resource_version = Some(rv_string(rv));
        let uid = last.meta().uid.clone().unwrap_or_default();
        shared.uids.remove(&uid);
        let last = Arc::new(last);
        self.push_event(
            EventType::Deleted,
            last.clone(),
            rv,
            shared.watch_log_capacity,
        );
        (last, uid)
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
    /// the last finalizer of a terminating object, the uid of the removed
    /// object.
    pub(super) fn replace(
        &mut self,
        mut obj: K,
        shared: &mut Shared,
    ) -> Result<(Arc<K>, Option<String>), ApiError> {
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
        let old_parts = Parts::of(old.as_ref())?;
        let new_parts = Parts::of(&obj)?;
        if new_parts.status != old_parts.status {
            let meta = obj.meta().clone();
            obj = Parts::assemble(&new_parts.body, old_parts.status.as_ref(), meta)?;
        }
        let spec_changed = new_parts.body != old_parts.body;
        if !spec_changed && obj.meta() == old_meta {
            return Ok((old, None));
        }
        if spec_changed {
            obj.meta_mut().generation = Some(old_meta.generation.unwrap_or(0).saturating_add(1));
        }
        self.validate(&key, Some(old.as_ref()), &obj)?;
        if obj.meta().deletion_timestamp.is_some()
            && obj.meta().finalizers.as_ref().is_none_or(Vec::is_empty)
        {
            let (last, uid) = self.remove(&key, obj, shared);
            return Ok((last, Some(uid)));
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
        let old_parts = Parts::of(old.as_ref())?;
        let new_parts = Parts::of(&obj)?;
        if new_parts.status == old_parts.status {
            return Ok(old);
        }
        if new_parts.body == old_parts.body {
            *obj.meta_mut() = old.meta().clone();
        } else {
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

    /// Deletes an object: marks it terminating if it has finalizers,
    /// otherwise removes it. Returns the outcome and, if removed, its uid.
    pub(super) fn delete(
        &mut self,
        key: &ObjectKey,
        preconditions: &Preconditions,
        now: Timestamp,
        shared: &mut Shared,
    ) -> Result<(DeleteOutcome<K>, Option<String>), ApiError> {
        let old = self.existing(key)?;
        let meta = old.meta();
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
        )?;
        Ok(self.delete_unchecked(key, old, now, shared))
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
        match wanted {
            Some(wanted) if Some(wanted) != stored => Err(self.conflict(
                key,
                format!(
                    "the {field} in the precondition ({wanted}) does not match the {field} in record ({}). The object might have been {what_happened}",
                    stored.unwrap_or_default()
                ),
            )),
            _ => Ok(()),
        }
    }

    fn delete_unchecked(
        &mut self,
        key: &ObjectKey,
        old: Arc<K>,
        now: Timestamp,
        shared: &mut Shared,
    ) -> (DeleteOutcome<K>, Option<String>) {
        let meta = old.meta();
        if meta.deletion_timestamp.is_some() {
            return (DeleteOutcome::Terminating(old), None);
        }
        let mut obj = K::clone(&old);
        if meta.finalizers.as_ref().is_some_and(|f| !f.is_empty()) {
            let meta = obj.meta_mut();
            meta.deletion_timestamp = Some(now_time(now));
            meta.deletion_grace_period_seconds = Some(0);
            let obj = self.commit(key.clone(), obj, Some(old.as_ref()), shared);
            return (DeleteOutcome::Terminating(obj), None);
        }
        let (last, uid) = self.remove(key, obj, shared);
        (DeleteOutcome::Deleted(last), Some(uid))
    }
}

impl<K: Object> ErasedStore for KindStore<K> {
    fn collect(
        &mut self,
        key: &ObjectKey,
        owner_uid: &str,
        now: Timestamp,
        shared: &mut Shared,
    ) -> Option<String> {
        let obj = self.objects.get(key).cloned()?;
        let refs = obj.meta().owner_references.as_deref().unwrap_or_default();
        let other_owner_alive = refs
            .iter()
            .any(|r| r.uid != owner_uid && shared.uids.contains_key(&r.uid));
        if other_owner_alive {
            let mut updated = K::clone(&obj);
            if let Some(refs) = updated.meta_mut().owner_references.as_mut() {
                refs.retain(|r| r.uid != owner_uid);
            }
            self.modify(key, updated, shared);
            return None;
        }
        self.delete_unchecked(key, obj, now, shared).1
    }

    fn replicas(&self, key: &ObjectKey) -> Option<i32> {
        let value = serde_json::to_value(self.objects.get(key)?.as_ref()).ok()?;
        let replicas = value.pointer("/spec/replicas")?.as_i64()?;
        i32::try_from(replicas).ok()
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

    /// The integer `spec.replicas` of the stored object with this uid: the
    /// scale of a workload controller.
    pub(super) fn replicas_of(&self, uid: &str) -> Option<i32> {
        let (kind, key) = self.shared.uids.get(uid)?;
        self.kinds.get(kind)?.replicas(key)
    }

    /// Garbage-collects the dependents of removed objects, transitively, in
    /// a deterministic order.
    pub(super) fn collect_garbage(&mut self, removed: Option<String>, now: Timestamp) {
        let mut work: VecDeque<String> = removed.into_iter().collect();
        while let Some(owner_uid) = work.pop_front() {
            let Some(dependents) = self.shared.dependents.remove(&owner_uid) else {
                continue;
            };
            for (kind, key) in dependents {
                if let Some(store) = self.kinds.get_mut(&kind)
                    && let Some(uid) = store.collect(&key, &owner_uid, now, &mut self.shared)
                {
                    work.push_back(uid);
                }
            }
        }
    }
}
