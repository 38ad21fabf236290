//! A Node list indexed by name and by provider id: made once per list (a
//! revision of the Nodes) and shared by every loop of a pass, so a pass
//! over a large fleet does not hash every node's name once per loop. A new
//! list is indexed from the last one ([`NodeIndex::follow`]): only the
//! Nodes that changed are indexed again.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use super::Listed;
use super::list_change::ListChange;

type Map<V> = HashMap<Box<str>, V, foldhash::fast::RandomState>;

#[derive(Default, Clone)]
pub struct NodeIndex {
    list: Listed<Node>,
    by_name: Map<Arc<Node>>,
    /// The Nodes with each provider id, in name order (a provider id is
    /// one instance's, but nothing stops two Nodes from naming it).
    by_provider: Map<Vec<Arc<Node>>>,
    /// The addresses of the list's Nodes.
    objects: HashSet<usize, foldhash::fast::RandomState>,
}

impl NodeIndex {
    pub fn new(list: Listed<Node>) -> Self {
        let mut index = NodeIndex::default();
        index.follow(list);
        index
    }

    /// Indexes `list`, a later list of the Nodes indexed, from this index:
    /// a Node that is the same object (allocation) in both lists stays
    /// where it is.
    pub fn follow(&mut self, list: Listed<Node>) {
        if Listed::ptr_eq(&self.list, &list) {
            return;
        }
        let change = ListChange::between(&self.list, &list);
        let old = std::mem::replace(&mut self.list, list.clone());
        for n in change.gone(&old) {
            self.take(n);
        }
        for &at in &change.added {
            self.add(&list[at as usize]);
        }
    }

    fn add(&mut self, n: &Arc<Node>) {
        self.objects.insert(Arc::as_ptr(n) as usize);
        self.by_name.insert(name(n).into(), n.clone());
        if let Some(id) = provider_id(n) {
            let same = self.by_provider.entry(id.into()).or_default();
            let at = same.partition_point(|m| name(m) < name(n));
            same.insert(at, n.clone());
        }
    }

    fn take(&mut self, n: &Arc<Node>) {
        self.objects.remove(&(Arc::as_ptr(n) as usize));
        if self.by_name.get(name(n)).is_some_and(|m| Arc::ptr_eq(m, n)) {
            self.by_name.remove(name(n));
        }
        if let Some(id) = provider_id(n)
            && let Some(same) = self.by_provider.get_mut(id)
        {
            same.retain(|m| !Arc::ptr_eq(m, n));
            if same.is_empty() {
                self.by_provider.remove(id);
            }
        }
    }

    /// The list indexed.
    pub fn list(&self) -> &Listed<Node> {
        &self.list
    }

    /// The Node named `name`.
    pub fn named(&self, name: &str) -> Option<&Arc<Node>> {
        self.by_name.get(name)
    }

    /// The Node whose `spec.providerID` is `id`; of several, the last by
    /// name.
    pub fn with_provider_id(&self, id: &str) -> Option<&Arc<Node>> {
        self.providing(id).last()
    }

    /// Every Node whose `spec.providerID` is `id`, by name.
    pub fn providing(&self, id: &str) -> &[Arc<Node>] {
        self.by_provider.get(id).map_or(&[], Vec::as_slice)
    }

    /// Whether `n` is one of the list's Nodes (the very object).
    pub fn holds(&self, n: &Arc<Node>) -> bool {
        self.objects.contains(&(Arc::as_ptr(n) as usize))
    }
}

fn name(n: &Node) -> &str {
    n.metadata.name.as_deref().unwrap_or_default()
}

fn provider_id(n: &Node) -> Option<&str> {
    n.spec.as_ref()?.provider_id.as_deref()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn node(name: &str, provider: Option<&str>) -> Arc<Node> {
        let spec = provider.map_or(String::new(), |p| format!("\nspec: {{providerID: '{p}'}}"));
        Arc::new(crate::testing::from_yaml(&format!(
            "metadata: {{name: {name}}}{spec}"
        )))
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// An index followed from list to list answers as an index made
        /// afresh for each list: Nodes added, removed, replaced by a new
        /// object (another provider id, none, one another Node names too)
        /// or left as they were.
        #[test]
        fn following_a_list_indexes_it_as_indexing_it_afresh(
            steps in proptest::collection::vec(
                proptest::collection::vec((0u8..12, 0u8..4), 0..8),
                1..6,
            ),
        ) {
            let mut nodes: BTreeMap<String, Arc<Node>> = BTreeMap::new();
            let mut followed = NodeIndex::default();
            for step in steps {
                for (n, provider) in step {
                    let name = format!("n{}", n % 6);
                    match n {
                        0..6 => {
                            let id = (provider < 3).then(|| format!("aws:///z/i-{provider}"));
                            nodes.insert(name.clone(), node(&name, id.as_deref()))
                        }
                        _ => nodes.remove(&name),
                    };
                }
                let list = Listed::from(nodes.values().cloned().collect::<Vec<_>>());
                followed.follow(list.clone());
                let fresh = NodeIndex::new(list.clone());
                proptest::prop_assert!(Listed::ptr_eq(followed.list(), &list));
                for n in list.iter() {
                    proptest::prop_assert!(followed.holds(n));
                    let named = followed.named(name(n));
                    proptest::prop_assert!(named.is_some_and(|m| Arc::ptr_eq(m, n)));
                }
                for i in 0..4 {
                    let id = format!("aws:///z/i-{i}");
                    // The last by name, as a map collected from the list.
                    let collected = list.iter().rfind(|n| provider_id(n) == Some(id.as_str()));
                    let all: Vec<_> = list
                        .iter()
                        .filter(|n| provider_id(n) == Some(id.as_str()))
                        .map(Arc::as_ptr)
                        .collect();
                    let providing: Vec<_> = followed.providing(&id).iter().map(Arc::as_ptr).collect();
                    proptest::prop_assert_eq!(providing, all);
                    let (a, b) = (followed.with_provider_id(&id), fresh.with_provider_id(&id));
                    proptest::prop_assert!(a.map(Arc::as_ptr) == collected.map(Arc::as_ptr));
                    proptest::prop_assert!(b.map(Arc::as_ptr) == collected.map(Arc::as_ptr));
                }
                proptest::prop_assert_eq!(followed.objects.len(), list.len());
                proptest::prop_assert_eq!(followed.by_name.len(), list.len());
                proptest::prop_assert!(followed.named("gone").is_none());
            }
        }
    }
}
