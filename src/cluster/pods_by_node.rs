//! A pod list grouped by the node each pod is bound to: made once per list
//! (a revision of the pods) and shared by every reader of that list, so a
//! pass over a large cluster hashes each pod's node name once, not once
//! per reader. A new list is grouped from the last one
//! ([`PodsByNode::follow`]): only the pods that changed are grouped again.

use std::collections::HashMap;
use std::sync::Arc;

use super::Listed;
use super::list_change::{ListChange, list_key};
use crate::api::SlimPod;

/// The pods of one list by node: those bound to each node (finished ones
/// too) and those bound to none, each in namespace and name order (the
/// order [`super::Cluster::list`] gives).
///
/// The groups hold the pods themselves, not their places in the list: a
/// pod added or removed moves the place of every pod after it, and a
/// follow would then touch every group.
#[derive(Default, Clone)]
pub struct PodsByNode {
    list: Listed<SlimPod>,
    /// The pods bound to each node.
    bound: HashMap<Box<str>, Group, foldhash::fast::RandomState>,
    /// The pods with no node (or an empty name).
    unbound: Vec<Arc<SlimPod>>,
}

/// The pods bound to one node, in namespace and name order.
#[derive(Default, Clone, Debug)]
struct Group {
    all: Vec<Arc<SlimPod>>,
    /// Those of `all` that have not finished: a pod object does not
    /// change, so a kept pod keeps its place here too, and readers of the
    /// running pods need not read every pod's phase again.
    running: Vec<Arc<SlimPod>>,
}

/// The same pod objects in the same order.
impl PartialEq for Group {
    fn eq(&self, other: &Self) -> bool {
        same_objects(&self.all, &other.all) && same_objects(&self.running, &other.running)
    }
}

fn same_objects(a: &[Arc<SlimPod>], b: &[Arc<SlimPod>]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| Arc::ptr_eq(x, y))
}

/// Puts `pod` in its place among `pods`.
fn insert(pods: &mut Vec<Arc<SlimPod>>, pod: &Arc<SlimPod>) {
    let key = list_key(&**pod);
    let at = pods.partition_point(|p| list_key(&**p) < key);
    pods.insert(at, pod.clone());
}

/// Takes the very object `pod` out of `pods`; whether it was there.
fn remove(pods: &mut Vec<Arc<SlimPod>>, pod: &Arc<SlimPod>) -> bool {
    match pods.iter().position(|p| Arc::ptr_eq(p, pod)) {
        Some(at) => {
            pods.remove(at);
            true
        }
        None => false,
    }
}

impl Group {
    fn add(&mut self, pod: &Arc<SlimPod>) {
        insert(&mut self.all, pod);
        if !pod.is_finished() {
            insert(&mut self.running, pod);
        }
    }

    fn take(&mut self, pod: &Arc<SlimPod>) {
        if remove(&mut self.all, pod) && !pod.is_finished() {
            remove(&mut self.running, pod);
        }
    }
}

impl PodsByNode {
    pub fn new(list: Listed<SlimPod>) -> Self {
        let mut grouped = PodsByNode::default();
        for p in list.iter() {
            grouped.add(p);
        }
        grouped.list = list;
        grouped
    }

    fn add(&mut self, pod: &Arc<SlimPod>) {
        match node_of(pod) {
            Some(node) => {
                if !self.bound.contains_key(node) {
                    self.bound.insert(node.into(), Group::default());
                }
                self.bound.get_mut(node).expect("inserted").add(pod);
            }
            None => insert(&mut self.unbound, pod),
        }
    }

    fn take(&mut self, pod: &Arc<SlimPod>) {
        match node_of(pod) {
            Some(node) => {
                if let Some(group) = self.bound.get_mut(node) {
                    group.take(pod);
                    if group.all.is_empty() {
                        self.bound.remove(node);
                    }
                }
            }
            None => {
                remove(&mut self.unbound, pod);
            }
        }
    }

    /// Groups `list`, a later list of the pods grouped, from this grouping:
    /// a pod that is the same object (allocation) in both lists stays where
    /// it is, so only the pods removed, added or changed since
    /// ([`ListChange`]) are grouped again.
    pub fn follow(&mut self, list: Listed<SlimPod>) {
        if Listed::ptr_eq(&self.list, &list) {
            return;
        }
        let change = ListChange::between(&self.list, &list);
        let old = std::mem::replace(&mut self.list, list.clone());
        for pod in change.gone(&old) {
            self.take(pod);
        }
        for &at in &change.added {
            self.add(&list[at as usize]);
        }
    }

    /// The list grouped.
    pub fn list(&self) -> &Listed<SlimPod> {
        &self.list
    }

    /// The pods bound to `node`, finished ones too.
    pub fn on(&self, node: &str) -> impl Iterator<Item = &Arc<SlimPod>> {
        self.group(node, |g| &g.all).iter()
    }

    /// The pods bound to `node` that have not finished.
    pub fn running_on(&self, node: &str) -> Vec<&Arc<SlimPod>> {
        self.running(node).iter().collect()
    }

    /// [`PodsByNode::running_on`], as the group holds them.
    pub fn running(&self, node: &str) -> &[Arc<SlimPod>] {
        self.group(node, |g| &g.running)
    }

    fn group(&self, node: &str, which: impl Fn(&Group) -> &Vec<Arc<SlimPod>>) -> &[Arc<SlimPod>] {
        self.bound
            .get(node)
            .map_or(&[][..], |g| which(g).as_slice())
    }

    /// The pods bound to no node.
    pub fn unbound(&self) -> impl Iterator<Item = &Arc<SlimPod>> {
        self.unbound.iter()
    }
}

/// The node `p` is bound to; an empty name is none.
fn node_of(p: &SlimPod) -> Option<&str> {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, node: Option<&str>, phase: &str) -> Arc<SlimPod> {
        let node = node.map_or(String::new(), |n| format!("nodeName: '{n}', "));
        Arc::new(crate::testing::from_yaml(&format!(
            "metadata: {{name: {name}, namespace: d}}\nspec: {{{node}containers: []}}\nstatus: {{phase: {phase}}}\n"
        )))
    }

    /// Each pod is in exactly one group, in namespace and name order; an
    /// empty node name is no node.
    #[test]
    fn every_pod_is_grouped_once_by_its_node_in_name_order() {
        let list: Listed<SlimPod> = vec![
            pod("f", Some("n1"), "Running"),
            pod("b", Some("n2"), "Running"),
            pod("e", Some(""), "Pending"),
            pod("d", Some("n1"), "Succeeded"),
            pod("c", None, "Pending"),
            pod("a", Some("n1"), "Running"),
        ]
        .into();
        let groups = PodsByNode::new(list.clone());
        let names = |pods: Vec<&Arc<SlimPod>>| -> Vec<String> {
            pods.iter()
                .map(|p| p.metadata.name.clone().unwrap())
                .collect()
        };
        assert_eq!(names(groups.on("n1").collect()), ["a", "d", "f"]);
        assert_eq!(names(groups.running_on("n1")), ["a", "f"]);
        assert_eq!(names(groups.on("n2").collect()), ["b"]);
        assert!(groups.on("n3").next().is_none());
        assert_eq!(names(groups.unbound().collect()), ["c", "e"]);
        assert!(Listed::ptr_eq(groups.list(), &list));
    }

    fn pod_in(namespace: &str, name: &str, node: Option<&str>, phase: &str) -> Arc<SlimPod> {
        let node = node.map_or(String::new(), |n| format!("nodeName: '{n}', "));
        Arc::new(crate::testing::from_yaml(&format!(
            "metadata: {{name: {name}, namespace: {namespace}}}\nspec: {{{node}containers: []}}\nstatus: {{phase: {phase}}}\n"
        )))
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// A grouping followed from list to list is the grouping made
        /// afresh for each list: pods added, removed, replaced by a new
        /// object (moved to another node, unbound, finished) or left as
        /// they were, in lists ordered by namespace and name or not.
        #[test]
        fn following_a_list_groups_it_as_grouping_it_afresh(
            sorted: bool,
            steps in proptest::collection::vec(
                proptest::collection::vec((0u8..3, 0u8..24, 0u8..6), 0..12),
                1..6,
            ),
        ) {
            let mut pods: std::collections::BTreeMap<(String, String), Arc<SlimPod>> =
                Default::default();
            let mut followed = PodsByNode::default();
            for step in steps {
                for (op, n, node) in step {
                    let namespace = ["a", "b"][usize::from(n % 2)].to_string();
                    let name = format!("p{n}");
                    let (bound, phase) = match node {
                        0..=2 => (Some(format!("n{node}")), "Running"),
                        3 => (Some("n0".to_string()), "Succeeded"),
                        4 => (Some(String::new()), "Pending"),
                        _ => (None, "Pending"),
                    };
                    let key = (namespace.clone(), name.clone());
                    match op {
                        0 => {
                            pods.remove(&key);
                        }
                        _ => {
                            pods.insert(key, pod_in(&namespace, &name, bound.as_deref(), phase));
                        }
                    }
                }
                let mut list: Vec<Arc<SlimPod>> = pods.values().cloned().collect();
                if !sorted {
                    // Another order, the same from list to list.
                    list.sort_by_key(|p| {
                        let name = p.metadata.name.clone().unwrap_or_default();
                        (name.len() * 7919 + name.bytes().map(usize::from).sum::<usize>()) % 13
                    });
                }
                let list = Listed::from(list);
                followed.follow(list.clone());
                let fresh = PodsByNode::new(list.clone());
                proptest::prop_assert!(Listed::ptr_eq(followed.list(), &list));
                proptest::prop_assert_eq!(&followed.bound, &fresh.bound);
                proptest::prop_assert!(same_objects(&followed.unbound, &fresh.unbound));
            }
        }
    }
}
