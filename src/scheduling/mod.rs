//! The scheduling core: places pending pods on existing capacity and plans the
//! cheapest new NodeClaims. Pure and deterministic: no I/O, no clock other
//! than the one injected through [`SolveOptions`], no kube client, no AWS.
//!
//! Consolidation and drift call [`solve`] too, to ask where pods would go if
//! a node went away.
//!
//! `solve` takes the pods in order and places each on existing nodes and
//! in-flight NodeClaims, then on NodeClaims planned earlier in the solve, then
//! on new NodeClaims from the NodePools in weight order, keeping every
//! instance type that can still hold a claim's pods. It relaxes a pod's
//! preferences one at a time only when the pod cannot be placed, then improves
//! the packing and computes a lower bound on the price.
//!
//! Files:
//! - `mod.rs`: `solve`, the pod order, the passes, the result and the bound;
//! - `types.rs`: the API (`SolveInput`, `PodSpec`, `NodePoolSpec`,
//!   `SolveResult`, ...);
//! - `pod.rs`: Kubernetes Pod to `PodSpec`, and the resource quantities the
//!   API server would reject;
//! - `topology.rs`: incremental topology counters (per domain, per target);
//! - `lower_bound.rs`: the covering-LP dual bound;
//! - `explain.rs`: after a solve, precise reasons per NodePool for the pods it
//!   could not place;
//! - `removal.rs`: what-if removals for consolidation, drift and expiration;
//! - `bits.rs`: bitsets over instance types;
//! - `solver/`: the solve's state and the work on it.

mod bits;
pub mod explain;
pub mod lower_bound;
pub mod pod;
pub mod removal;
mod solver;
mod topology;
pub mod types;

#[cfg(test)]
pub(crate) mod tests;

pub use solver::SolveError;
pub use types::*;

use crate::model::quantity::{CPU, MEMORY};
use lower_bound::BoundType;
use solver::Solver;

/// At most this many instance types are sent with a NodeClaim to launch.
pub const MAX_INSTANCE_TYPES: usize = 60;

/// The order pods are tried in: cpu desc, memory desc, creation time, then
/// namespace/name so the result does not depend on input order.
pub(crate) fn pod_order(pods: &[std::sync::Arc<PodSpec>]) -> Vec<usize> {
    // The keys side by side, so the sort reads no pod; the position makes
    // the order total, so an unstable sort gives the one order.
    let mut keyed: Vec<_> = pods
        .iter()
        .enumerate()
        .map(|(i, p)| {
            (
                std::cmp::Reverse(p.requests.get(CPU)),
                std::cmp::Reverse(p.requests.get(MEMORY)),
                p.created_ms,
                p.namespace.as_str(),
                p.name.as_str(),
                i,
            )
        })
        .collect();
    keyed.sort_unstable();
    keyed.into_iter().map(|k| k.5).collect()
}

/// Decides which pods fit on existing capacity and which new NodeClaims to
/// launch for the rest.
pub fn solve(input: &SolveInput, opts: &SolveOptions) -> Result<SolveResult, SolveError> {
    // The solver knows pods in the order they are tried and nodes by name
    // (`Solver::pods`, `Solver::existing`), so no tie-break can depend on
    // the caller's order.
    let mut s = Solver::new(input, opts)?;
    let initial_free = s.free_on_nodes();
    let order: Vec<usize> = (0..s.pods.len()).collect();
    let mut failed = s.run(&order);
    s.refill();
    s.improve();
    // Reserved capacity left before claims take it, for the lower bound.
    let reserved = s.reserved_capacity();
    failed.extend(s.settle_reservations());

    let mut headroom = s.headroom();
    let nodeclaims: Vec<NewNodeClaim> = (0..s.claims.len())
        .filter(|&ci| !s.claims[ci].pods.is_empty())
        .map(|ci| s.new_nodeclaim(ci, &mut headroom))
        .collect();

    let mut by_node: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for (pod, n) in s.placed_node.iter().enumerate() {
        if let Some(n) = n {
            by_node
                .entry(s.node_name(*n).to_string())
                .or_default()
                .push(s.pods[pod].key());
        }
    }
    let existing = by_node
        .into_iter()
        .map(|(node, mut pods)| {
            pods.sort();
            ExistingPlacement { node, pods }
        })
        .collect();
    let mut unschedulable: Vec<Unschedulable> = failed
        .into_iter()
        .map(|(pod, reason)| Unschedulable {
            pod: s.pods[pod].key(),
            reason,
        })
        .collect();
    unschedulable.sort_by(|a, b| a.pod.cmp(&b.pod));
    let price = nodeclaims.iter().map(|c| c.price).sum();

    let lower_bound = bound(&s, &initial_free, &reserved);
    Ok(SolveResult {
        nodeclaims,
        existing,
        unschedulable,
        price,
        lower_bound,
    })
}

/// The lower bound [`solve`] reports for `input`, without the rest of its
/// result. The bound reads which pods found a place and the capacity
/// reservations left, not which claims hold the pods; repacking moves pods
/// between claims and never takes a place away, so without reserved
/// offerings (which the claims take only after the repacking) it is skipped.
/// The simulation samples the workload's bound this way.
pub fn lower_bound_only(input: &SolveInput, opts: &SolveOptions) -> Result<f64, SolveError> {
    let mut s = Solver::new(input, opts)?;
    let initial_free = s.free_on_nodes();
    let order: Vec<usize> = (0..s.pods.len()).collect();
    s.run(&order);
    if s.has_reserved_offerings() {
        s.refill();
        s.improve();
    }
    let reserved = s.reserved_capacity();
    s.settle_reservations();
    Ok(bound(&s, &initial_free, &reserved))
}

/// The price no plan for the placed pods can beat: the covering bound over
/// their demand beyond the free existing capacity and the reservations
/// left (`reserved`: capacity, instances), 0 when they need no new
/// NodeClaim.
fn bound(s: &Solver<'_>, initial_free: &[i64], reserved: &(Vec<i64>, usize)) -> f64 {
    let placed: Vec<usize> = (0..s.pods.len())
        .filter(|&p| s.placed_node[p].is_some() || s.placed_claim_of(p).is_some())
        .collect();
    let mut demand: Vec<f64> = vec![0.0; s.dims.len()];
    for &p in &placed {
        for (d, v) in demand.iter_mut().zip(&s.pod_req[p]) {
            *d += *v as f64;
        }
    }
    // Free existing capacity and the instances left in reservations serve
    // demand at no price; the types are priced without reserved offerings.
    for ((d, f), r) in demand.iter_mut().zip(initial_free).zip(&reserved.0) {
        *d = (*d - *f as f64 - *r as f64).max(0.0);
    }
    // Types' allocatable is net of their daemonset overhead.
    let forced = s
        .forced_nodes(&placed)
        .saturating_sub(s.existing_count())
        .saturating_sub(reserved.1);
    let bound_types: Vec<BoundType> = s
        .allowed_types(&placed)
        .into_iter()
        .map(|(pool, t, price)| {
            let ty = &s.pools[pool].types[t];
            BoundType {
                alloc: ty.alloc.iter().map(|v| *v as f64).collect(),
                price,
            }
        })
        .collect();
    let needs_new = demand.iter().any(|d| *d > 0.0) || forced > 0;
    let any_claim = s.claims.iter().any(|c| !c.pods.is_empty());
    if needs_new && any_claim {
        lower_bound::lower_bound(&bound_types, &demand, forced)
    } else {
        0.0
    }
}
