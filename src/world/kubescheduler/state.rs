//! The scheduler's index of nodes and bound pods: what each node has
//! free, the label-selector counters, the topology domains and the
//! affinity terms of bound pods, kept up to date as pods come, go and are
//! bound, and moved by name to a new node list.

use super::*;

/// One node as the scheduler tracks it during a call.
#[derive(Debug)]
pub(super) struct NodeState {
    /// The Node it was read from: while a new list holds the same object,
    /// its parsed part is kept.
    pub(super) source: Arc<Node>,
    pub(super) name: String,
    pub(super) labels: BTreeMap<String, String>,
    /// Global taint ids, including the implicit not-ready taint.
    pub(super) taints: Vec<u32>,
    pub(super) unschedulable: bool,
    /// Allocatable cpu, memory, ephemeral-storage.
    pub(super) alloc: [i64; 3],
    pub(super) alloc_pods: i64,
    pub(super) alloc_extended: BTreeMap<String, i64>,
    pub(super) requested: [i64; 3],
    pub(super) requested_extended: HashMap<String, i64>,
    pub(super) non_zero: [i64; 2],
    pub(super) pod_count: i64,
    pub(super) ports: Vec<HostPort>,
}

impl NodeState {
    /// `node` as the scheduler reads it, with nothing accounted; `intern`
    /// gives each taint its id.
    fn read(node: &Arc<Node>, intern: &mut impl FnMut(Taint) -> u32) -> Self {
        let spec = node.spec.as_ref();
        let mut node_taints: Vec<Taint> = spec
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|t| Taint::from_k8s(t).ok())
            .collect();
        let ready = crate::api::node::is_ready(node);
        if !ready
            && !node_taints
                .iter()
                .any(|t| t.key == TAINT_NOT_READY || t.key == TAINT_UNREACHABLE)
        {
            node_taints.push(Taint::new(TAINT_NOT_READY, "", Effect::NoSchedule));
        }
        let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
        let quantity = |name: &str| -> i64 {
            allocatable
                .and_then(|a| a.get(name))
                .and_then(|q| parse_quantity(name, &q.0).ok())
                .unwrap_or(0)
        };
        let alloc_extended = allocatable
            .into_iter()
            .flatten()
            .filter(|(k, _)| ![CPU, MEMORY, EPHEMERAL_STORAGE, PODS].contains(&k.as_str()))
            .filter_map(|(k, q)| Some((k.clone(), parse_quantity(k, &q.0).ok()?)))
            .collect();
        NodeState {
            source: node.clone(),
            name: node.metadata.name.clone().unwrap_or_default(),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            taints: node_taints.into_iter().map(intern).collect(),
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            alloc: [quantity(CPU), quantity(MEMORY), quantity(EPHEMERAL_STORAGE)],
            alloc_pods: quantity(PODS),
            alloc_extended,
            requested: [0; 3],
            requested_extended: HashMap::new(),
            non_zero: [0; 2],
            pod_count: 0,
            ports: Vec::new(),
        }
    }

    /// Takes what is accounted on `from` (the same node before): its pods'
    /// requests, count and host ports.
    fn take_accounting(&mut self, from: &mut NodeState) {
        self.requested = from.requested;
        self.requested_extended = std::mem::take(&mut from.requested_extended);
        self.non_zero = from.non_zero;
        self.pod_count = from.pod_count;
        self.ports = std::mem::take(&mut from.ports);
    }
}

/// What a counter counts: pods matching all (namespaces, selector) terms.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct CounterKey {
    pub(super) terms: Vec<(Namespaces, LabelSelector)>,
    /// Topology spread ignores terminating pods; affinity does not.
    pub(super) skip_terminating: bool,
}

impl CounterKey {
    pub(super) fn matches(&self, spec: &PodSpec) -> bool {
        self.terms
            .iter()
            .all(|(ns, sel)| ns.contains(&spec.namespace) && sel.matches(&spec.labels))
    }
}

#[derive(Debug)]
pub(super) struct Counter {
    pub(super) key: CounterKey,
    pub(super) per_node: Vec<u32>,
}

/// The domains of one topology key.
#[derive(Debug)]
pub(super) struct Topology {
    /// Domain of each node, [`NO_DOMAIN`] without the label.
    pub(super) node_domain: Vec<u32>,
    pub(super) domains: usize,
}

/// A pod accounted on a node, for counters built later.
#[derive(Debug)]
pub(super) struct Bound {
    pub(super) node: usize,
    pub(super) info: Arc<PodInfo>,
    pub(super) terminating: bool,
}

/// Terms of bound pods that act on newcomers, grouped by term.
#[derive(Debug, Default)]
pub(super) struct TermGroups {
    pub(super) index: HashMap<(PodAffinityTerm, i64), usize>,
    pub(super) groups: Vec<(PodAffinityTerm, i64, Vec<u32>)>,
}

impl TermGroups {
    pub(super) fn add(&mut self, term: &PodAffinityTerm, weight: i64, node: usize, nodes: usize) {
        let i = match self.index.entry((term.clone(), weight)) {
            Entry::Occupied(e) => *e.get(),
            Entry::Vacant(e) => {
                self.groups.push((term.clone(), weight, vec![0; nodes]));
                *e.insert(self.groups.len() - 1)
            }
        };
        self.groups[i].2[node] += 1;
    }

    pub(super) fn remove(&mut self, term: &PodAffinityTerm, weight: i64, node: usize) {
        if let Some(i) = self.index.get(&(term.clone(), weight))
            && let Some(c) = self.groups[*i].2.get_mut(node)
        {
            *c = c.saturating_sub(1);
        }
    }

    /// Moves per-node counts to new node positions.
    pub(super) fn remap(&mut self, old_to_new: &[Option<usize>], nodes: usize) {
        for (_, _, per_node) in &mut self.groups {
            *per_node = remap(per_node, old_to_new, nodes);
        }
    }
}

pub(super) fn remap(per_node: &[u32], old_to_new: &[Option<usize>], nodes: usize) -> Vec<u32> {
    let mut out = vec![0; nodes];
    for (old, count) in per_node.iter().enumerate() {
        if let Some(Some(new)) = old_to_new.get(old) {
            out[*new] = *count;
        }
    }
    out
}

/// The terms of a bound pod that act on newcomers: required anti-affinity
/// (weight 0, in `existing_anti`), and required affinity, preferred
/// affinity and preferred anti-affinity with signed weights.
pub(super) fn scoring_terms(spec: &PodSpec) -> impl Iterator<Item = (&PodAffinityTerm, i64)> {
    spec.affinity
        .iter()
        .map(|t| (t, HARD_POD_AFFINITY_WEIGHT))
        .chain(
            spec.preferred_affinity
                .iter()
                .map(|(w, t)| (t, i64::from(*w))),
        )
        .chain(
            spec.preferred_anti_affinity
                .iter()
                .map(|(w, t)| (t, -i64::from(*w))),
        )
}

pub(super) fn term_matches(term: &PodAffinityTerm, spec: &PodSpec) -> bool {
    term.namespaces.contains(&spec.namespace) && term.selector.matches(&spec.labels)
}

/// Indexes of nodes and bound pods, updated as pods come, go and are
/// bound. Nodes are in name order.
pub(super) struct State {
    pub(super) nodes: Vec<NodeState>,
    pub(super) node_index: HashMap<String, usize, Hasher>,
    pub(super) taints: Vec<Taint>,
    pub(super) bound: HashMap<ObjectKey, Bound, Hasher>,
    pub(super) counters: Vec<Counter>,
    pub(super) counter_index: HashMap<CounterKey, usize, Hasher>,
    /// By topology key; a handful of keys, so searched linearly (faster
    /// than hashing the key on every node visit).
    pub(super) topologies: Vec<(String, Topology)>,
    pub(super) statics: HashMap<StaticKey, Arc<StaticEval>, Hasher>,
    /// Required anti-affinity terms of bound pods (weight 0).
    pub(super) existing_anti: TermGroups,
    /// Affinity terms of bound pods that score newcomers, with their signed
    /// weights.
    pub(super) existing_preferred: TermGroups,
}

impl State {
    /// The state of `nodes` with nothing bound.
    pub(super) fn new(nodes: &[Arc<Node>]) -> Self {
        State::build(nodes, None).0
    }

    /// [`State::new`], the parsed part of a node that is the same object
    /// as in `previous` moved over from there, and where each node of
    /// `previous` is in it by name (`None`: gone). The index by name is
    /// `previous`'s, changed where the names did: nearly every node of a
    /// large cluster keeps its name from one list to the next.
    fn build(nodes: &[Arc<Node>], mut previous: Option<&mut State>) -> (Self, Vec<Option<usize>>) {
        let mut old_to_new = vec![None; previous.as_ref().map_or(0, |p| p.nodes.len())];
        // The nodes whose names `previous` does not have.
        let mut named: Vec<usize> = Vec::new();
        let mut taint_index: HashMap<Taint, u32, Hasher> = HashMap::default();
        let mut taints = Vec::new();
        let mut intern = |t: Taint| -> u32 {
            *taint_index.entry(t.clone()).or_insert_with(|| {
                taints.push(t);
                u32::try_from(taints.len() - 1).unwrap_or(u32::MAX)
            })
        };
        // `previous`'s taint ids as interned here.
        let mut interned: Vec<Option<u32>> =
            vec![None; previous.as_ref().map_or(0, |p| p.taints.len())];
        let mut states = Vec::with_capacity(nodes.len());
        for node in nodes {
            let at = states.len();
            let name = node.metadata.name.as_deref().unwrap_or_default();
            let was = previous
                .as_deref()
                .and_then(|p| p.node_index.get(name).copied());
            match was {
                Some(i) => old_to_new[i] = Some(at),
                None => named.push(at),
            }
            let kept = previous.as_deref_mut().zip(was).and_then(|(p, i)| {
                let old = &mut p.nodes[i];
                Arc::ptr_eq(&old.source, node).then_some((old, &p.taints))
            });
            if let Some((old, old_taints)) = kept {
                states.push(NodeState {
                    source: node.clone(),
                    name: std::mem::take(&mut old.name),
                    labels: std::mem::take(&mut old.labels),
                    taints: old
                        .taints
                        .iter()
                        .map(|&t| {
                            *interned[t as usize]
                                .get_or_insert_with(|| intern(old_taints[t as usize].clone()))
                        })
                        .collect(),
                    unschedulable: old.unschedulable,
                    alloc: old.alloc,
                    alloc_pods: old.alloc_pods,
                    alloc_extended: std::mem::take(&mut old.alloc_extended),
                    requested: [0; 3],
                    requested_extended: HashMap::new(),
                    non_zero: [0; 2],
                    pod_count: 0,
                    ports: Vec::new(),
                });
                continue;
            }
            states.push(NodeState::read(node, &mut intern));
        }
        let mut node_index =
            previous.map_or_else(HashMap::default, |p| std::mem::take(&mut p.node_index));
        node_index.retain(|_, i| match old_to_new[*i] {
            Some(at) => {
                *i = at;
                true
            }
            None => false,
        });
        for at in named {
            node_index.insert(states[at].name.clone(), at);
        }
        let state = State {
            nodes: states,
            node_index,
            taints,
            bound: HashMap::default(),
            counters: Vec::new(),
            counter_index: HashMap::default(),
            topologies: Vec::new(),
            statics: HashMap::default(),
            existing_anti: TermGroups::default(),
            existing_preferred: TermGroups::default(),
        };
        (state, old_to_new)
    }

    /// Accounts a pod bound to node `n`.
    pub(super) fn add_bound(
        &mut self,
        key: ObjectKey,
        n: usize,
        info: Arc<PodInfo>,
        terminating: bool,
    ) {
        self.account(n, &info, terminating, 1);
        self.bound.insert(
            key,
            Bound {
                node: n,
                info,
                terminating,
            },
        );
    }

    /// Forgets a pod accounted by [`State::add_bound`], if it was.
    pub(super) fn remove_bound(&mut self, key: &ObjectKey) {
        if let Some(b) = self.bound.remove(key) {
            self.account(b.node, &b.info, b.terminating, -1);
        }
    }

    /// Adds (`sign` 1) or removes (-1) a pod's share of node `n`.
    pub(super) fn account(&mut self, n: usize, info: &PodInfo, terminating: bool, sign: i64) {
        let count = self.nodes.len();
        let node = &mut self.nodes[n];
        for (i, v) in info.dense.iter().enumerate() {
            node.requested[i] = node.requested[i].saturating_add(sign * v);
        }
        for (k, v) in &info.extended {
            let e = node.requested_extended.entry(k.clone()).or_insert(0);
            *e = e.saturating_add(sign * v);
        }
        for (i, v) in info.non_zero.iter().enumerate() {
            node.non_zero[i] = node.non_zero[i].saturating_add(sign * v);
        }
        node.pod_count += sign;
        let spec = &info.spec;
        if sign > 0 {
            node.ports.extend(spec.host_ports.iter().cloned());
        } else {
            for p in &spec.host_ports {
                if let Some(i) = node.ports.iter().position(|q| q == p) {
                    node.ports.swap_remove(i);
                }
            }
        }
        for counter in &mut self.counters {
            if !(terminating && counter.key.skip_terminating) && counter.key.matches(spec) {
                let c = &mut counter.per_node[n];
                *c = if sign > 0 {
                    *c + 1
                } else {
                    c.saturating_sub(1)
                };
            }
        }
        for t in &spec.anti_affinity {
            if sign > 0 {
                self.existing_anti.add(t, 0, n, count);
            } else {
                self.existing_anti.remove(t, 0, n);
            }
        }
        for (t, w) in scoring_terms(spec) {
            if sign > 0 {
                self.existing_preferred.add(t, w, n, count);
            } else {
                self.existing_preferred.remove(t, w, n);
            }
        }
    }

    /// Takes changed versions of nodes it has, each in place: what is
    /// accounted on them stays. The cached topology domains and static
    /// verdicts are dropped only when a node's labels, taints or
    /// schedulability changed. A node it does not have is not taken: nodes
    /// that come or go are [`State::replace_nodes`]'.
    pub(super) fn update_nodes<'a>(&mut self, nodes: impl IntoIterator<Item = &'a Arc<Node>>) {
        let taints = &mut self.taints;
        let mut intern = |t: Taint| -> u32 {
            let at = taints.iter().position(|k| *k == t).unwrap_or_else(|| {
                taints.push(t);
                taints.len() - 1
            });
            u32::try_from(at).unwrap_or(u32::MAX)
        };
        let (mut labels_changed, mut statics_changed) = (false, false);
        for node in nodes {
            let name = node.metadata.name.as_deref().unwrap_or_default();
            let Some(&n) = self.node_index.get(name) else {
                continue;
            };
            let old = &mut self.nodes[n];
            if Arc::ptr_eq(&old.source, node) {
                continue;
            }
            let mut new = NodeState::read(node, &mut intern);
            labels_changed |= new.labels != old.labels;
            statics_changed |= new.taints != old.taints || new.unschedulable != old.unschedulable;
            new.take_accounting(old);
            *old = new;
        }
        if labels_changed {
            self.topologies.clear();
        }
        if labels_changed || statics_changed {
            self.statics.clear();
        }
    }

    /// Takes a new list of nodes: accounting, counters and term groups move
    /// with their nodes by name; pods of nodes that are gone are forgotten
    /// (returned, for the caller to re-add if their node comes back). Cached topology
    /// domains and static verdicts are dropped.
    pub(super) fn replace_nodes(&mut self, nodes: &[Arc<Node>]) -> Vec<ObjectKey> {
        let (mut fresh, old_to_new) = State::build(nodes, Some(self));
        for (old, new) in old_to_new.iter().enumerate() {
            let Some(new) = new else { continue };
            let from = &mut self.nodes[old];
            let to = &mut fresh.nodes[*new];
            to.take_accounting(from);
        }
        let count = fresh.nodes.len();
        for mut counter in std::mem::take(&mut self.counters) {
            counter.per_node = remap(&counter.per_node, &old_to_new, count);
            fresh.counters.push(counter);
        }
        fresh.counter_index = std::mem::take(&mut self.counter_index);
        fresh.existing_anti = std::mem::take(&mut self.existing_anti);
        fresh.existing_anti.remap(&old_to_new, count);
        fresh.existing_preferred = std::mem::take(&mut self.existing_preferred);
        fresh.existing_preferred.remap(&old_to_new, count);
        // Remapped in place: the bound pods are most of the index.
        let mut dropped = Vec::new();
        self.bound.retain(|key, b| match old_to_new.get(b.node) {
            Some(Some(new)) => {
                b.node = *new;
                true
            }
            _ => {
                dropped.push(key.clone());
                false
            }
        });
        fresh.bound = std::mem::take(&mut self.bound);
        *self = fresh;
        dropped
    }

    pub(super) fn counter(&mut self, key: CounterKey) -> usize {
        if let Some(i) = self.counter_index.get(&key) {
            return *i;
        }
        let mut per_node = vec![0u32; self.nodes.len()];
        for b in self.bound.values() {
            if !(b.terminating && key.skip_terminating) && key.matches(&b.info.spec) {
                per_node[b.node] += 1;
            }
        }
        self.counters.push(Counter {
            key: key.clone(),
            per_node,
        });
        let i = self.counters.len() - 1;
        self.counter_index.insert(key, i);
        i
    }

    pub(super) fn topo(&self, key: &str) -> Option<&Topology> {
        self.topologies
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, t)| t)
    }

    pub(super) fn topology(&mut self, key: &str) {
        if self.topo(key).is_some() {
            return;
        }
        let mut values: HashMap<&str, u32> = HashMap::new();
        let node_domain = self
            .nodes
            .iter()
            .map(|n| match n.labels.get(key) {
                Some(v) => {
                    let next = u32::try_from(values.len()).unwrap_or(NO_DOMAIN);
                    *values.entry(v.as_str()).or_insert(next)
                }
                None => NO_DOMAIN,
            })
            .collect();
        let domains = values.len();
        self.topologies.push((
            key.to_string(),
            Topology {
                node_domain,
                domains,
            },
        ));
    }

    /// Counts per domain of `topology_key` of the pods `counter` matches,
    /// over the nodes `include` accepts.
    pub(super) fn domain_counts(
        &self,
        counter: usize,
        topology_key: &str,
        include: impl Fn(usize) -> bool,
    ) -> (Vec<i64>, Vec<bool>) {
        let Some(topo) = self.topo(topology_key) else {
            return (Vec::new(), Vec::new());
        };
        let mut counts = vec![0i64; topo.domains];
        let mut present = vec![false; topo.domains];
        let per_node = &self.counters[counter].per_node;
        for (n, d) in topo.node_domain.iter().enumerate() {
            if *d == NO_DOMAIN || !include(n) {
                continue;
            }
            present[*d as usize] = true;
            counts[*d as usize] += i64::from(per_node[n]);
        }
        (counts, present)
    }

    pub(super) fn domain(&self, topology_key: &str, n: usize) -> u32 {
        self.topo(topology_key)
            .map_or(NO_DOMAIN, |t| t.node_domain[n])
    }
}
