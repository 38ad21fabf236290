//! Where pods would go if nodes went away: the question consolidation,
//! drift and expiration ask the scheduling core, for many sets of nodes
//! over one cluster.
//!
//! [`Removals`] builds one solve over the cluster, whose pods are those
//! that may have to move (each with the node it runs on), and answers each
//! [`Removals::remove`] with a trial that is undone afterwards, so a pass
//! over every candidate costs one setup plus the placement of each
//! candidate's pods, not a solve of the whole cluster per candidate.
//! [`Removals::floor`] answers the common case of a node whose pods fit
//! nowhere else without a trial.
//!
//! A trial takes the candidate nodes out of the solver's node index, uncounts
//! their bound pods from the topology counters, places their pods (remaining
//! nodes first, then new NodeClaims; `remove_with` bounds how many, and
//! consolidation allows one), reads the result, and restores every structure
//! it changed. The floor is a bound from free resources alone: the pods no
//! other node has room for, and the cheapest capacity that holds them.

use std::collections::HashMap;

use super::solver::Solver;
use super::{ExistingPlacement, NewNodeClaim, SolveError, SolveInput, SolveOptions, Unschedulable};

/// The outcome of taking nodes away.
#[derive(Debug, Clone, PartialEq)]
pub struct Removal {
    /// Pods that go to remaining nodes, per node.
    pub placements: Vec<ExistingPlacement>,
    /// New NodeClaims the other pods need.
    pub nodeclaims: Vec<NewNodeClaim>,
    /// Pods that could go nowhere.
    pub unschedulable: Vec<Unschedulable>,
}

impl Removal {
    /// Whether every pod found a place.
    pub fn is_feasible(&self) -> bool {
        self.unschedulable.is_empty()
    }

    /// The hourly price of the new NodeClaims.
    pub fn price(&self) -> f64 {
        self.nodeclaims.iter().map(|c| c.price).sum()
    }
}

/// A quick bound on taking one node away, without a trial.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Floor {
    /// Every pod fits some other node on its own: only a trial can tell.
    Unknown,
    /// Some pods fit no other node: they need new capacity, and one
    /// NodeClaim holding them costs at least this much per hour (infinite
    /// when no instance type can hold them together).
    NewCapacity(f64),
}

/// One cluster, prepared for removal trials.
pub struct Removals<'a> {
    solver: Solver<'a>,
    node_ids: HashMap<&'a str, usize, foldhash::fast::RandomState>,
    /// Per existing node id, the ids of the solve's pods that run on it.
    pods_on: Vec<Vec<usize>>,
    /// Existing nodes by free cpu, descending: (free cpu, node id).
    by_cpu: Vec<(i64, usize)>,
    /// For each prefix of `by_cpu`, the two nodes with the most free
    /// memory in it: (free memory, node id).
    top_mem: Vec<[(i64, usize); 2]>,
}

impl<'a> Removals<'a> {
    /// Prepares `input`: its nodes are the cluster (candidates included),
    /// its pods those that may have to move, `homes[i]` the node
    /// `input.pods[i]` runs on.
    pub fn new(
        input: &'a SolveInput,
        homes: &[&str],
        opts: &SolveOptions,
    ) -> Result<Self, SolveError> {
        let solver = Solver::new(input, opts)?;
        let node_ids = solver.node_ids();
        // Solver pod ids are positions in trial order.
        let mut pods_on = vec![Vec::new(); solver.existing_count()];
        for (id, &i) in solver.input_index.iter().enumerate() {
            if let Some(&n) = homes.get(i).and_then(|h| node_ids.get(*h)) {
                pods_on[n].push(id);
            }
        }
        let mut by_cpu: Vec<(i64, usize)> = (0..solver.existing_count())
            .map(|n| (solver.node_free(n)[0], n))
            .collect();
        by_cpu.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let none = (i64::MIN, usize::MAX);
        let mut top_mem = Vec::with_capacity(by_cpu.len());
        let mut best = [none, none];
        for &(_, n) in &by_cpu {
            let m = (solver.node_free(n)[1], n);
            if m.0 > best[0].0 {
                best = [m, best[0]];
            } else if m.0 > best[1].0 {
                best[1] = m;
            }
            top_mem.push(best);
        }
        Ok(Removals {
            solver,
            node_ids,
            pods_on,
            by_cpu,
            top_mem,
        })
    }

    /// Whether the cluster has a node of this name.
    pub fn contains(&self, node: &str) -> bool {
        self.node_ids.contains_key(node)
    }

    /// Where the pods of `nodes` would go if those nodes went away: remaining
    /// nodes first, then new NodeClaims. Unknown names are ignored.
    pub fn remove(&mut self, nodes: &[&str]) -> Removal {
        self.remove_with(nodes, None)
    }

    /// [`Removals::remove`] with at most `max_claims` new NodeClaims: pods
    /// that find no room on the remaining nodes or on those claims are
    /// unschedulable. Consolidation allows one replacement.
    pub fn remove_with(&mut self, nodes: &[&str], max_claims: Option<usize>) -> Removal {
        let ids: Vec<usize> = nodes
            .iter()
            .filter_map(|n| self.node_ids.get(*n).copied())
            .collect();
        let pods: Vec<usize> = ids
            .iter()
            .flat_map(|&n| self.pods_on[n].iter().copied())
            .collect();
        let trial = self.solver.trial(&ids, &pods, max_claims);
        let mut by_node: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for (p, n) in trial.on_nodes {
            by_node
                .entry(self.solver.node_name(n).to_string())
                .or_default()
                .push(self.solver.pods[p].key());
        }
        let placements = by_node
            .into_iter()
            .map(|(node, mut pods)| {
                pods.sort();
                ExistingPlacement { node, pods }
            })
            .collect();
        let mut unschedulable: Vec<Unschedulable> = trial
            .failed
            .into_iter()
            .map(|(p, reason)| Unschedulable {
                pod: self.solver.pods[p].key(),
                reason,
            })
            .collect();
        unschedulable.sort_by(|a, b| a.pod.cmp(&b.pod));
        Removal {
            placements,
            nodeclaims: trial.claims,
            unschedulable,
        }
    }

    /// A bound on taking `node` alone away, from free resources only: the
    /// pods whose cpu and memory no other node has free need new capacity
    /// costing at least [`Floor::NewCapacity`]. Sound whatever the pods'
    /// constraints, which can only make placing them harder.
    pub fn floor(&self, node: &str) -> Floor {
        let Some(&c) = self.node_ids.get(node) else {
            return Floor::Unknown;
        };
        let dims = self.solver.dims.len();
        let mut homeless = vec![0i64; dims];
        let mut any = false;
        for &p in &self.pods_on[c] {
            let req = &self.solver.pod_req[p];
            if !self.fits_another(c, req[0], req[1]) {
                any = true;
                for (h, r) in homeless.iter_mut().zip(req) {
                    *h = h.saturating_add(*r);
                }
            }
        }
        if !any {
            return Floor::Unknown;
        }
        Floor::NewCapacity(
            self.solver
                .cheapest_holding_any(&homeless)
                .unwrap_or(f64::INFINITY),
        )
    }

    /// Whether some node other than `c` has `cpu` and `memory` free.
    fn fits_another(&self, c: usize, cpu: i64, memory: i64) -> bool {
        // Nodes with at least `cpu` free are a prefix of `by_cpu`.
        let k = self.by_cpu.partition_point(|(free, _)| *free >= cpu);
        if k == 0 {
            return false;
        }
        let [first, second] = self.top_mem[k - 1];
        let best = if first.1 == c { second } else { first };
        best.1 != usize::MAX && best.0 >= memory
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Resources;
    use crate::scheduling::tests::shared;
    use crate::scheduling::types::{BoundPod, ExistingNode, NodeKeys, NodePoolSpec, PodSpec};
    use crate::scheduling::{Preferences, solve};
    use std::collections::BTreeMap;
    use std::sync::Arc;

    fn catalog() -> Vec<crate::model::InstanceType> {
        crate::scheduling::tests::catalog()
    }

    fn node(name: &str, cpu_m: i64, pods: &[(&str, i64)]) -> Arc<ExistingNode> {
        let labels: BTreeMap<String, String> = [
            ("kubernetes.io/hostname", name),
            ("topology.kubernetes.io/zone", "z1"),
            ("karpenter.sh/nodepool", "general"),
            ("karpenter.sh/capacity-type", "on-demand"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        Arc::new(ExistingNode {
            name: name.into(),
            nodepool: Some("general".into()),
            labels: Arc::new(labels),
            taints: Vec::new(),
            initialized: true,
            allocatable: Resources::new()
                .with("cpu", cpu_m)
                .with("memory", 8 << 30)
                .with("pods", 20),
            capacity: Resources::new()
                .with("cpu", cpu_m)
                .with("memory", 8 << 30)
                .with("pods", 20),
            pods: pods
                .iter()
                .map(|(p, cpu)| {
                    Arc::new(BoundPod::new(
                        "default".into(),
                        p.to_string(),
                        BTreeMap::new(),
                        Resources::new()
                            .with("cpu", *cpu)
                            .with("memory", 1 << 30)
                            .with("pods", 1),
                        Vec::new(),
                        Vec::new(),
                    ))
                })
                .collect(),
            price: Some(0.2),
            keys: NodeKeys::default(),
        })
    }

    fn pod(name: &str, cpu: i64) -> PodSpec {
        PodSpec::new(
            "default",
            name,
            Resources::new().with("cpu", cpu).with("memory", 1 << 30),
        )
    }

    fn pool() -> NodePoolSpec {
        NodePoolSpec {
            name: "general".into(),
            weight: 0,
            requirements: crate::model::Requirements::new(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            startup_taints: Vec::new(),
            limits: Resources::new(),
            instance_types: catalog(),
        }
    }

    /// Three 4-cpu nodes: a holds 3 cpu, b 1 cpu, c 2 cpu.
    fn cluster() -> (SolveInput, Vec<&'static str>) {
        let input = SolveInput {
            nodes: vec![
                node("a", 4000, &[("a1", 1500), ("a2", 1500)]),
                node("b", 4000, &[("b1", 1000)]),
                node("c", 4000, &[("c1", 1000), ("c2", 1000)]),
            ],
            pods: shared(vec![
                pod("a1", 1500),
                pod("a2", 1500),
                pod("b1", 1000),
                pod("c1", 1000),
                pod("c2", 1000),
            ]),
            nodepools: vec![pool()],
            daemonsets: Vec::new(),
        };
        (input, vec!["a", "a", "b", "c", "c"])
    }

    fn opts() -> SolveOptions {
        SolveOptions {
            preferences: Preferences::Respect,
            now_ms: 0,
        }
    }

    #[test]
    fn removing_a_node_places_its_pods_on_the_others_and_leaves_no_trace() {
        let (input, homes) = cluster();
        let mut r = Removals::new(&input, &homes, &opts()).unwrap();
        let b = r.remove(&["b"]);
        assert!(b.is_feasible());
        assert!(b.nodeclaims.is_empty());
        assert_eq!(b.placements.len(), 1);
        assert_eq!(b.placements[0].pods, ["default/b1"]);
        // Taking a and b together: a's 3 cpu and b's 1 cpu do not fit the
        // 2 cpu c has left, so a new claim is needed.
        let ab = r.remove(&["a", "b"]);
        assert!(ab.is_feasible());
        assert_eq!(ab.nodeclaims.len(), 1);
        // The first trial left nothing behind: the same answer again, and
        // the same as a fresh preparation.
        assert_eq!(r.remove(&["b"]), b);
        let mut fresh = Removals::new(&input, &homes, &opts()).unwrap();
        assert_eq!(fresh.remove(&["a", "b"]), ab);
        assert_eq!(r.remove(&["a", "b"]), ab);
    }

    #[test]
    fn trials_agree_with_a_solve_of_the_reduced_cluster() {
        let (input, homes) = cluster();
        let mut r = Removals::new(&input, &homes, &opts()).unwrap();
        for out in [
            vec!["a"],
            vec!["b"],
            vec!["c"],
            vec!["a", "c"],
            vec!["a", "b", "c"],
        ] {
            let trial = r.remove(&out);
            let reduced = SolveInput {
                nodes: input
                    .nodes
                    .iter()
                    .filter(|n| !out.contains(&n.name.as_str()))
                    .cloned()
                    .collect(),
                pods: input
                    .pods
                    .iter()
                    .zip(&homes)
                    .filter(|(_, h)| out.contains(h))
                    .map(|(p, _)| p.clone())
                    .collect(),
                nodepools: input.nodepools.clone(),
                daemonsets: Vec::new(),
            };
            let full = solve(&reduced, &opts()).unwrap();
            assert_eq!(trial.unschedulable, full.unschedulable, "{out:?}");
            assert_eq!(trial.nodeclaims.len(), full.nodeclaims.len(), "{out:?}");
            assert!((trial.price() - full.price).abs() < 1e-9, "{out:?}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        /// However many trials came before, a trial answers as it does on
        /// a fresh preparation: the controller keeps one preparation from
        /// pass to pass while the cluster is the same.
        #[test]
        fn trials_leave_nothing_for_the_next(
            loads in proptest::collection::vec(
                proptest::collection::vec(200i64..1000, 0..4), 2..6),
            sets in proptest::collection::vec(
                proptest::collection::vec(0usize..6, 1..4), 1..8),
            claims in proptest::option::of(0usize..2),
        ) {
            let names: Vec<String> = (0..loads.len()).map(|i| format!("n{i}")).collect();
            let mut input = SolveInput {
                nodepools: vec![pool()],
                ..SolveInput::default()
            };
            let mut homes = Vec::new();
            for (name, load) in names.iter().zip(&loads) {
                let pods: Vec<(String, i64)> = load
                    .iter()
                    .enumerate()
                    .map(|(j, cpu)| (format!("{name}-{j}"), *cpu))
                    .collect();
                let bound: Vec<(&str, i64)> =
                    pods.iter().map(|(p, c)| (p.as_str(), *c)).collect();
                input.nodes.push(node(name, 4000, &bound));
                for (p, cpu) in &pods {
                    input.pods.push(std::sync::Arc::new(pod(p, *cpu)));
                    homes.push(name.as_str());
                }
            }
            let mut kept = Removals::new(&input, &homes, &opts()).unwrap();
            for set in &sets {
                let out: Vec<&str> = set
                    .iter()
                    .filter_map(|&i| names.get(i).map(String::as_str))
                    .collect();
                let mut fresh = Removals::new(&input, &homes, &opts()).unwrap();
                proptest::prop_assert_eq!(
                    kept.remove_with(&out, claims),
                    fresh.remove_with(&out, claims),
                    "{:?}",
                    out
                );
            }
        }
    }

    #[test]
    fn the_floor_is_known_when_pods_fit_no_other_node() {
        let (mut input, _) = cluster();
        // d is full; its 3.5-cpu pod fits no other node (2.5 cpu free at most).
        input.nodes.push(node("d", 4000, &[("d1", 3500)]));
        input.pods.push(std::sync::Arc::new(pod("d1", 3500)));
        let homes = vec!["a", "a", "b", "c", "c", "d"];
        let r = Removals::new(&input, &homes, &opts()).unwrap();
        assert_eq!(r.floor("b"), Floor::Unknown);
        match r.floor("d") {
            Floor::NewCapacity(p) => assert!(p > 0.0 && p.is_finite(), "{p}"),
            other => panic!("{other:?}"),
        }
    }
}
