//! How a list of a kind changed from one revision to the next, found from
//! the objects themselves: a cached object that did not change is the same
//! allocation in both lists.

use std::cmp::Ordering;
use std::sync::Arc;

use kube::Resource;

/// How a list changed into a later one: where each object of the first is
/// in the second, and the objects of the second that are new (added, or a
/// new version of an object).
///
/// Both lists are walked together, the same objects (allocations) matched
/// in order and the others told apart by namespace and name, the lists'
/// order. Matches only ever move forward in both lists, so the kept
/// objects keep their relative order whatever the lists' order: lists in
/// another order cost more objects taken as new, never a wrong match.
pub struct ListChange {
    /// The index in the later list of each object of the first, or
    /// [`ListChange::GONE`] for one not in it (deleted, or replaced by a
    /// new version).
    pub moved: Vec<u32>,
    /// The indices in the later list of the objects not in the first, in
    /// order.
    pub added: Vec<u32>,
}

impl ListChange {
    /// In [`ListChange::moved`], an object not in the later list.
    pub const GONE: u32 = u32::MAX;

    pub fn between<K: Resource>(old: &[Arc<K>], new: &[Arc<K>]) -> ListChange {
        let mut moved = vec![Self::GONE; old.len()];
        let mut added: Vec<u32> = Vec::new();
        let (mut i, mut j) = (0, 0);
        while j < new.len() {
            let at = u32::try_from(j).expect("fewer than 2^32 objects");
            let Some(was) = old.get(i) else {
                added.push(at);
                j += 1;
                continue;
            };
            if Arc::ptr_eq(was, &new[j]) {
                moved[i] = at;
                i += 1;
                j += 1;
                continue;
            }
            match list_key(&**was).cmp(&list_key(&*new[j])) {
                Ordering::Less => i += 1,
                Ordering::Equal => {
                    added.push(at);
                    i += 1;
                    j += 1;
                }
                Ordering::Greater => {
                    added.push(at);
                    j += 1;
                }
            }
        }
        ListChange { moved, added }
    }

    /// The objects of `old` not in the later list, in order.
    pub fn gone<'a, K>(&'a self, old: &'a [Arc<K>]) -> impl Iterator<Item = &'a Arc<K>> {
        old.iter()
            .zip(&self.moved)
            .filter(|(_, at)| **at == Self::GONE)
            .map(|(k, _)| k)
    }
}

/// An object's place in a list: its namespace, then its name.
pub(super) fn list_key<K: Resource>(k: &K) -> (&str, &str) {
    let meta = k.meta();
    (
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
    )
}
