//! What-if removals, for consolidation and drift: take some existing nodes
//! out, place the pods they held, read where they went, and put every bit
//! of state back, so one solver built over a cluster answers for many
//! candidate sets.
//!
//! The pods that may move are pods of the solve, never placed by a full
//! pass; as bound pods of their nodes they are counted in the topology
//! counters. A trial takes their nodes out of the node index, uncounts the
//! nodes' bound pods, runs the first pass on the pods (and the repacking
//! moves when it opened more than one claim), then undoes every placement
//! on existing nodes and restores the saved claims and counters.

use super::*;
use crate::scheduling::NewNodeClaim;

/// What a trial did with the pods.
pub(crate) struct Trial {
    /// Pods that could go nowhere, with the reason.
    pub failed: Vec<(usize, String)>,
    /// (pod, existing node) for pods placed on existing nodes.
    pub on_nodes: Vec<(usize, usize)>,
    /// The new claims the pods needed.
    pub claims: Vec<NewNodeClaim>,
}

impl<'a> Solver<'a> {
    /// Takes existing nodes `out` away and places `pods` (ids of pods not
    /// placed yet) on the remaining nodes and at most `max_claims` new
    /// claims (any number when `None`), then restores the solver exactly
    /// as it was.
    pub(crate) fn trial(
        &mut self,
        out: &[usize],
        pods: &[usize],
        max_claims: Option<usize>,
    ) -> Trial {
        let base_claims = self.claims.len();
        self.claim_cap = max_claims.map(|m| base_claims + m);
        let saved = self.save();
        for &n in out {
            self.node_index.remove(&(self.nodes[n].free[0], n));
            self.uncount_bound_pods(n);
        }
        let mut order = pods.to_vec();
        order.sort_unstable();
        order.dedup();
        let mut failed = self.run(&order);
        if self.claims.len() > base_claims + 1 {
            self.refill();
            self.improve();
        }
        // No second placement here: a trial whose claims find no
        // reservation left fails (the solver's offerings are left as
        // they are for the next trial).
        failed.extend(self.assign_reservations(base_claims, false));
        let on_nodes: Vec<(usize, usize)> = order
            .iter()
            .filter_map(|&p| self.placed_node[p].map(|n| (p, n)))
            .collect();
        let mut headroom = self.headroom();
        let claims = (base_claims..self.claims.len())
            .filter(|&ci| !self.claims[ci].pods.is_empty())
            .map(|ci| self.new_nodeclaim(ci, &mut headroom))
            .collect();

        // Undo: placements on existing nodes, then the nodes taken out,
        // then claims, counters and limits as saved.
        for &(p, n) in &on_nodes {
            let node = &mut self.nodes[n];
            self.node_index.remove(&(node.free[0], n));
            for (f, r) in node.free.iter_mut().zip(&self.pod_req[p]) {
                *f += r;
            }
            for port in &self.pods[p].host_ports {
                if let Some(i) = node.ports.iter().rposition(|x| x == port) {
                    node.ports.remove(i);
                }
            }
            self.node_index.insert((node.free[0], n));
        }
        for &p in &order {
            self.placed_node[p] = None;
            self.pod_relax[p] = None;
        }
        for &n in out {
            self.node_index.insert((self.nodes[n].free[0], n));
        }
        self.restore(saved);
        self.claims.truncate(base_claims);
        self.claim_cap = None;
        Trial {
            failed,
            on_nodes,
            claims,
        }
    }

    /// Removes the bound pods of existing node `t` from every counter that
    /// counts them (the inverse of `record_bound_pods` for one node).
    fn uncount_bound_pods(&mut self, t: usize) {
        let n = self.existing[t];
        for bp in n.pods.iter() {
            for ci in 0..self.counters.len() {
                let c = &self.counters[ci];
                let hit = if c.owner {
                    bp.anti_affinity.iter().any(|a| {
                        self.topo_key(&a.topology_key) == c.key
                            && a.namespaces == c.namespaces
                            && a.selector == c.selector
                    })
                } else {
                    c.selects(&bp.namespace, &bp.labels)
                };
                if hit {
                    let v = match c.key {
                        TopoKey::Key(k) => self.nodes[t].values[k],
                        TopoKey::Hostname => None,
                    };
                    self.counters[ci].remove(t, v);
                }
            }
        }
    }

    /// The existing node ids by name.
    pub(crate) fn node_ids(&self) -> HashMap<&'a str, usize, foldhash::fast::RandomState> {
        self.existing
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), i))
            .collect()
    }

    /// Free resources of an existing node: cpu, memory, pods, then the
    /// solve's other resources.
    pub(crate) fn node_free(&self, n: usize) -> &[i64] {
        &self.nodes[n].free
    }

    /// The cheapest price, over every pool, of a type that holds `req`
    /// (solve dimensions) plus the type's daemonset overhead, ignoring
    /// every constraint: a lower bound on any one claim holding `req`.
    pub(crate) fn cheapest_holding_any(&self, req: &[i64]) -> Option<f64> {
        let mut best: Option<f64> = None;
        for p in &self.pools {
            for t in &p.types {
                let Some((_, price)) = t.offers.first() else {
                    continue;
                };
                if best.is_some_and(|b| *price >= b) {
                    break;
                }
                if fits_sum(&p.zero, req, &t.alloc) {
                    best = Some(*price);
                    break;
                }
            }
        }
        best
    }
}
