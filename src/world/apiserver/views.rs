//! The in-memory cluster's [`SlimPod`] view of its pods.
//!
//! The controller reads pods as [`SlimPod`]s (the in-cluster cache stores
//! nothing else); [`super::MemoryCluster`] stores whole pods, as an API
//! server does, and answers `Cluster::list::<SlimPod>` with their
//! projections. A projection is made once per pod and resource version and
//! reused until the pod changes; the kept views follow the kind's watch
//! log, so a pass that lists every pod touches only the pods written since
//! the last.
//!
//! Deleting a `SlimPod` through the `Cluster` trait deletes the pod (and
//! answers with its view); every other write of a `SlimPod` is refused: write
//! the Pod.

use std::any::{Any, TypeId};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;

use super::store::KindStore;
use crate::api::SlimPod;
use crate::cluster::{EventType, Listed, Object, ObjectKey, WatchEvent};

/// The projections of the pods at one revision of the kind, ordered by
/// namespace and name.
#[derive(Default)]
pub(super) struct PodViews {
    revision: Option<u64>,
    list: Listed<SlimPod>,
    by_key: BTreeMap<ObjectKey, Arc<SlimPod>>,
}

impl PodViews {
    /// Every pod of `store` as a [`SlimPod`], ordered by namespace and
    /// name. The views follow the kind's watch log: only the pods written
    /// since the last call are projected again (all are compared when the
    /// log was compacted past it).
    pub(super) fn follow(&mut self, store: &KindStore<Pod>) -> Listed<SlimPod> {
        let revision = *store.subscribe().borrow();
        if self.revision == Some(revision) {
            return self.list.clone();
        }
        self.list = match self.revision.map(|r| store.events_after(r)) {
            Some(Ok(events)) => {
                let changed = self.apply(&events);
                Listed::from(merged(&self.list, &changed))
            }
            _ => {
                self.rebuild(store.objects.values());
                Listed::from(self.by_key.values().cloned().collect::<Vec<_>>())
            }
        };
        self.revision = Some(revision);
        self.list.clone()
    }

    /// `pod`'s view: the kept one while the pod is at its version.
    pub(super) fn view_of(&self, key: &ObjectKey, pod: &Pod) -> Arc<SlimPod> {
        match self.by_key.get(key) {
            Some(v) if same_version(v, pod) => v.clone(),
            _ => Arc::new(SlimPod::from(pod)),
        }
    }

    /// Brings the views to the pods as `events` leave them: each pod's
    /// last event. Returns the pods changed, in key order, each with its
    /// new view (`None`: deleted).
    fn apply(&mut self, events: &[WatchEvent<Pod>]) -> Vec<(ObjectKey, Option<Arc<SlimPod>>)> {
        let mut seen: HashSet<ObjectKey> = HashSet::new();
        let mut changed = Vec::new();
        for e in events.iter().rev() {
            let key = ObjectKey::of(&*e.object);
            if !seen.insert(key.clone()) {
                continue;
            }
            let view = match e.event_type {
                EventType::Deleted => {
                    self.by_key.remove(&key);
                    None
                }
                EventType::Added | EventType::Modified => {
                    let view = Arc::new(SlimPod::from(&*e.object));
                    self.by_key.insert(key.clone(), view.clone());
                    Some(view)
                }
            };
            changed.push((key, view));
        }
        changed.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        changed
    }

    /// The views of `pods`, the kept one for each pod still at its version.
    fn rebuild<'a>(&mut self, pods: impl Iterator<Item = &'a Arc<Pod>>) {
        let mut old = std::mem::take(&mut self.by_key);
        for p in pods {
            let key = ObjectKey::of(&**p);
            let view = match old.remove(&key) {
                Some(v) if same_version(&v, p) => v,
                _ => Arc::new(SlimPod::from(&**p)),
            };
            self.by_key.insert(key, view);
        }
    }
}

/// `list` (ordered by key, each key once) with the pods of `changed` (in
/// key order) replaced, added or removed: the list is copied in runs
/// between the changes, not read again from the views by key.
fn merged(
    list: &[Arc<SlimPod>],
    changed: &[(ObjectKey, Option<Arc<SlimPod>>)],
) -> Vec<Arc<SlimPod>> {
    fn key(p: &SlimPod) -> (&str, &str) {
        (
            p.metadata.namespace.as_deref().unwrap_or_default(),
            p.metadata.name.as_deref().unwrap_or_default(),
        )
    }
    let mut out = Vec::with_capacity(list.len() + changed.len());
    let mut at = 0;
    for (k, view) in changed {
        let wanted = (k.namespace.as_str(), k.name.as_str());
        let pos = at + list[at..].partition_point(|p| key(p) < wanted);
        out.extend_from_slice(&list[at..pos]);
        at = pos;
        if list.get(at).is_some_and(|p| key(p) == wanted) {
            at += 1;
        }
        out.extend(view.iter().cloned());
    }
    out.extend_from_slice(&list[at..]);
    out
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

pub(super) type SharedViews = Arc<Mutex<PodViews>>;

/// The list of every other kind, kept at the kind's revision (the
/// resource version of its last change) and shared by the readers until
/// the kind changes.
#[derive(Default)]
pub(super) struct Lists(HashMap<TypeId, (u64, Box<dyn Any + Send>)>);

impl Lists {
    /// The list of `K` at `revision`: the kept one, or `build`'s.
    pub(super) fn at<K: Object>(
        &mut self,
        revision: u64,
        build: impl FnOnce() -> Vec<Arc<K>>,
    ) -> Listed<K> {
        let kept = self.0.get(&TypeId::of::<K>());
        if let Some((r, list)) = kept
            && *r == revision
            && let Some(list) = list.downcast_ref::<Listed<K>>()
        {
            return list.clone();
        }
        let list = Listed::from(build());
        self.0
            .insert(TypeId::of::<K>(), (revision, Box::new(list.clone())));
        list
    }
}

pub(super) type SharedLists = Arc<Mutex<Lists>>;
