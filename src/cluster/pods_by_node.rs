//! A pod list grouped by the node each pod is bound to: made once per list
//! (a revision of the pods) and shared by every reader of that list, so a
//! pass over a large cluster hashes each pod's node name once, not once
//! per reader.

use std::collections::HashMap;
use std::sync::Arc;

use super::Listed;
use crate::api::SlimPod;

/// The pods of one list by node: those bound to each node (finished ones
/// too) and those bound to none, each in the list's order.
#[derive(Default)]
pub struct PodsByNode {
    list: Listed<SlimPod>,
    /// Indices into `list` of the pods bound to each node.
    bound: HashMap<Box<str>, Vec<u32>, foldhash::fast::RandomState>,
    /// Indices into `list` of the pods with no node (or an empty name).
    unbound: Vec<u32>,
}

impl PodsByNode {
    pub fn new(list: Listed<SlimPod>) -> Self {
        let mut bound: HashMap<Box<str>, Vec<u32>, foldhash::fast::RandomState> =
            HashMap::default();
        let mut unbound = Vec::new();
        for (i, p) in list.iter().enumerate() {
            let i = u32::try_from(i).expect("fewer than 2^32 pods");
            match p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                Some(node) if !node.is_empty() => match bound.get_mut(node) {
                    Some(on) => on.push(i),
                    None => {
                        bound.insert(node.into(), vec![i]);
                    }
                },
                _ => unbound.push(i),
            }
        }
        PodsByNode {
            list,
            bound,
            unbound,
        }
    }

    /// The list grouped.
    pub fn list(&self) -> &Listed<SlimPod> {
        &self.list
    }

    /// The pods bound to `node`, finished ones too.
    pub fn on(&self, node: &str) -> impl Iterator<Item = &Arc<SlimPod>> {
        let at = self.bound.get(node).map_or(&[][..], Vec::as_slice);
        at.iter().map(|&i| &self.list[i as usize])
    }

    /// The pods bound to `node` that have not finished.
    pub fn running_on(&self, node: &str) -> Vec<&Arc<SlimPod>> {
        self.on(node).filter(|p| !p.is_finished()).collect()
    }

    /// The pods bound to no node.
    pub fn unbound(&self) -> impl Iterator<Item = &Arc<SlimPod>> {
        self.unbound.iter().map(|&i| &self.list[i as usize])
    }
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

    /// Each pod is in exactly one group, in the list's order; an empty
    /// node name is no node.
    #[test]
    fn every_pod_is_grouped_once_by_its_node_in_list_order() {
        let list: Listed<SlimPod> = vec![
            pod("a", Some("n1"), "Running"),
            pod("b", Some("n2"), "Running"),
            pod("c", None, "Pending"),
            pod("d", Some("n1"), "Succeeded"),
            pod("e", Some(""), "Pending"),
            pod("f", Some("n1"), "Running"),
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
}
