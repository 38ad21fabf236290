//! The solve: places pods on existing capacity, on NodeClaims planned earlier
//! in the solve, or on new NodeClaims, cheapest first, then improves the
//! packing.
//!
//! Pods are grouped into classes of identical constraints, so requirement
//! checks and instance-type filtering are computed once per class and
//! NodePool (as bitsets over instance types). Topology is counted
//! incrementally ([`super::topology`]). Candidate NodeClaims are found through
//! two indexes, by spare cpu and by spare memory, so a pod never scans every
//! NodeClaim.
//!
//! This module holds the solve's state; the work is split by concern:
//! [`setup`] builds it, [`constraints`] says what a pod may use,
//! [`placement`] is the first pass, [`claims`] keeps each claim's open
//! instance-type set and price, [`repack`] improves the packing and
//! [`reasons`] explains failures.
//!
//! The files in more detail: `setup` puts each pool's types in price order and
//! builds the per-resource and per-offering-domain indexes, pod classes,
//! counters and variants; `constraints` says what a pod may use at a
//! relaxation level (`Attempt`) and whether a node or claim admits it;
//! `placement` is the first pass (run, place, choose, commit), sizing runs of
//! identical pods by price per packed pod; `claims` keeps open instance-type
//! sets (incremental narrowing, pricing, limit reservations); `repack` holds
//! the improvement moves (`refill`, `improve`); `reasons` says why a pod
//! cannot get a new NodeClaim; `reservations` lets claims take capacity
//! reservations after the packing, at most the instances left in each;
//! `whatif` runs the trials of `scheduling::removal`. They are one
//! `impl Solver` split by concern and call each other's methods, so they are
//! not layered: `constraints` asks `setup` for variants, `setup` collects
//! reservations, and `reservations` runs `placement` again.
//!
//! # Invariants
//! - A pool's instance types are sorted by their cheapest available offering,
//!   so scanning a claim's type bitset in index order meets the cheapest types
//!   first and stops early.
//! - DaemonSet overhead is per instance type of a pool (Karpenter's daemon
//!   groups: a DaemonSet counts where its pod would schedule, by taints, any
//!   required term, the pool's and the type's requirements); each type's
//!   `alloc` is net of it, so claims start empty and a claim's reported
//!   requests add the smallest overhead among its listed types. A pod's host
//!   ports are part of its variant when a DaemonSet holds ports: they drop the
//!   types whose DaemonSets hold the same port.
//! - Topology terms on keys other than hostname, zone and capacity type narrow
//!   the attempt's variant (`In` the allowed values, or `NotIn` the others
//!   where a node without the label is fine), so instance types and NodePools
//!   are filtered like any requirement.
//! - A claim's types are narrowed as pods join (a per-resource cursor over the
//!   types sorted by allocatable, an AND with per-domain offering bitsets), and
//!   recomputed only when pods leave.
//! - Under NodePool limits a claim reserves the capacity of its cheapest type,
//!   the one its launch takes (with minValues, the largest of the cheapest
//!   types that meet them). When the result is built, each claim lists larger
//!   types only within the pool's headroom (the limit minus every node's and
//!   claim's reservation), each claim taking what its list adds, so whatever
//!   type each claim launches, the limit holds, and a limit binds only when
//!   the capacity the claims launch is really near it. In-flight NodeClaims
//!   count with the largest capacity among the types they list, until they
//!   report their own.
//! - Claims are indexed twice, by spare cpu and by spare memory of their
//!   cheapest type; a pod is matched through the index of its dominant
//!   resource.
//! - Improvement moves never raise the price: a pod moves only into room its
//!   receiver already pays for, and a shrink is applied only when the claim
//!   then fits a cheaper type. A pod pinned by hostname constraints
//!   (anti-affinity, hostname spread, or counted by a neighbour's) moves only
//!   by trading places with a pod of its own class between two claims that
//!   hold the same count on every hostname counter of that class, so no count
//!   changes; no other pod those counters count moves in the same shrink.
//! - Pod ids are positions in `Solver::pods` (the pods in trial order) and
//!   node ids positions in `Solver::existing` (by name), both built once in
//!   `setup`; ties that fall to the lower id therefore never depend on the
//!   caller's input order (a property test shuffles the input).

mod claims;
mod constraints;
mod placement;
mod reasons;
mod repack;
mod reservations;
mod setup;
mod whatif;

use claims::{cheapest_holding, cheapest_type, filter_types, offered_domains};
use reasons::short_key;

use std::collections::{BTreeSet, HashMap};

use super::bits::Bits;
use super::topology::{Counter, Domains, TopoKey};
use super::types::{
    ExistingNode, HostPort, Namespaces, NodePoolSpec, PodAffinityTerm, PodSpec, Preferences,
    SolveInput, SolveOptions, TopologySpread, Unsatisfiable,
};
use crate::model::labels::{CAPACITY_TYPE, HOSTNAME, NODEPOOL, ZONE, is_well_known};
use crate::model::quantity::{CPU, MEMORY, PODS};
use crate::model::requirements::allow_well_known;
use crate::model::resources::describe;
use crate::model::taints::{Effect, first_untolerated};
use crate::model::{InstanceType, LabelSelector, Requirement, Requirements, Taint, Toleration};

/// Claims whose spare cpu could hold the pod that are examined for a
/// zero-cost placement: bounds the work per pod when constraints reject many.
const SCAN_LIMIT: usize = 256;
/// Claims tried as the destination of a pod moved off a claim to shrink it.
const SHRINK_SCAN: usize = 64;
/// Claims with room at no cost compared when re-inserting a pod.
const BEST_FIT_CANDIDATES: usize = 48;
/// Claims with the most spare cpu that are priced for growing.
const GROW_CANDIDATES: usize = 8;
/// Prices closer than this are equal.
pub(crate) const EPS: f64 = 1e-9;
/// Zone × capacity-type combinations are a u128 mask.
const MAX_COMBOS: usize = 128;

/// Why the solve could not run at all (never for a pod that does not fit).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SolveError {
    #[error(
        "{zones} zones × {capacity_types} capacity types is more than {MAX_COMBOS} offering domains"
    )]
    TooManyOfferingDomains { zones: usize, capacity_types: usize },
}

/// One instance type of one NodePool, projected on the solve's resources.
pub(crate) struct TypeInfo {
    pub name: String,
    /// Allocatable less the overhead of the DaemonSets that would run on a
    /// node of this type in this pool (its daemon group's).
    pub alloc: Vec<i64>,
    /// Index of its daemon group in the pool's `daemon_groups`.
    pub daemon_group: usize,
    /// Capacity on the NodePool's limit resources.
    pub cap_lim: Vec<i64>,
    pub offer_mask: u128,
    /// (combo, price) of available offerings, cheapest first.
    pub offers: Vec<(u8, f64)>,
    pub source: usize,
}

impl TypeInfo {
    /// The type's price in the cheapest of `combos` it is offered in
    /// (`offer_mask`: while the pods of claims that found no reservation
    /// are placed again, it lacks the used-up ones, see [`reservations`]).
    pub fn price(&self, combos: u128) -> Option<f64> {
        let combos = combos & self.offer_mask;
        self.offers
            .iter()
            .find(|(c, _)| combos & (1u128 << c) != 0)
            .map(|(_, p)| *p)
    }
}

pub(crate) struct Pool {
    pub spec: usize,
    pub name: String,
    pub reqs: Requirements,
    pub taints: Vec<Taint>,
    pub types: Vec<TypeInfo>,
    /// The sets of DaemonSet pods a new node of this pool runs, by instance
    /// type (Karpenter's daemon overhead groups): each type's `alloc`
    /// already has its group's overhead taken off.
    pub daemon_groups: Vec<DaemonGroup>,
    /// Per resource, the smallest daemon overhead over the pool's types
    /// (for reasons).
    pub daemon_min: Vec<i64>,
    /// Zero per resource: what a claim holds before its first pod.
    pub zero: Vec<i64>,
    pub lim_names: Vec<String>,
    pub lim: Vec<i64>,
    pub lim_used: Vec<i64>,
    pub node_limit: Option<i64>,
    pub nodes_used: i64,
    /// The part of `lim_used` and `nodes_used` that existing nodes and
    /// in-flight NodeClaims account for (the rest is planned claims').
    pub lim_existing: Vec<i64>,
    pub nodes_existing: i64,
    /// (key, minValues, value id per type)
    pub min_values: Vec<(String, usize, Vec<u32>)>,
    /// Per limit resource, type indexes by descending capacity.
    cap_desc: Vec<Vec<u32>>,
    /// Per resource dimension, type indexes by ascending allocatable.
    by_dim: Vec<Vec<u32>>,
    /// Offering domains of all types.
    all_offered: u128,
    /// Per offering domain (zone × capacity type), the types available in it.
    offer_bits: Vec<Bits>,
}

impl Pool {
    /// Types with an available offering in one of `combos`.
    fn offered_types(&self, combos: u128, out: &mut Bits) {
        out.clear_all();
        for (c, b) in self.offer_bits.iter().enumerate() {
            if combos & (1u128 << c) != 0 {
                out.or_with(b);
            }
        }
    }

    /// minValues make a claim's types depend on the whole set, so they are
    /// filtered in full.
    fn needs_full_filter(&self) -> bool {
        !self.min_values.is_empty()
    }

    /// Does type `t` fit the pool's remaining limits, given the capacity
    /// `reserve` the claim in question already holds?
    fn lim_ok(&self, t: usize, reserve: &[i64]) -> bool {
        self.types[t].cap_lim.iter().enumerate().all(|(i, cap)| {
            *cap <= self.lim[i]
                .saturating_sub(self.lim_used[i])
                .saturating_add(reserve.get(i).copied().unwrap_or(0))
        })
    }
}

/// DaemonSet pods that run on the nodes of some instance types of a pool.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DaemonGroup {
    /// Their summed requests.
    pub overhead: Vec<i64>,
    /// The host ports they hold.
    pub ports: Vec<HostPort>,
}

struct NodeInfo<'a> {
    name: &'a str,
    labels: &'a std::collections::BTreeMap<String, String>,
    taints: Vec<Taint>,
    free: Vec<i64>,
    ports: Vec<HostPort>,
    values: Vec<Option<u32>>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum TermKind {
    Spread {
        skew: u32,
        min_domains: u32,
        honor_affinity: bool,
        honor_taints: bool,
        anyway: bool,
    },
    Affinity,
    Anti,
}

#[derive(Clone, Debug)]
struct Term {
    kind: TermKind,
    counter: usize,
    key: TopoKey,
    self_match: bool,
    /// Rank among the class's preferred terms of the same kind, heaviest
    /// first; None for required terms.
    rank: Option<usize>,
}

struct Class {
    rep: usize,
    terms: Vec<Term>,
    counted_by: Vec<usize>,
    blocked_by: Vec<usize>,
    owns: Vec<usize>,
    n_pref_aff: usize,
    n_pref_anti: usize,
    n_terms: usize,
    pref_terms: Vec<usize>,
    has_anyway: bool,
    /// Per pool: tolerated strictly, tolerated with PreferNoSchedule relaxed.
    pool_taints: Vec<(bool, bool)>,
}

/// One relaxation level of a pod's preferences.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
struct Relax {
    term: usize,
    aff_dropped: usize,
    anti_dropped: usize,
    node_pref_dropped: usize,
    anyway_dropped: bool,
    tolerate_soft: bool,
}

struct PoolVariant {
    err: Option<String>,
    types: Bits,
    combos: u128,
}

struct Variant {
    reqs: Requirements,
    per_pool: Vec<PoolVariant>,
}

#[derive(Clone)]
pub(crate) struct Claim {
    pub pool: usize,
    pub reqs: Requirements,
    variants: Vec<usize>,
    pub types: Bits,
    pub combos: u128,
    pub used: Vec<i64>,
    pub pods: Vec<usize>,
    /// Beside `pods`, what the trade search reads of each (see `repack`),
    /// so a scan of a claim's pods stays within the claim.
    members: Vec<Member>,
    ports: Vec<HostPort>,
    reserve: Vec<i64>,
    pub price: f64,
    /// The cheapest remaining type (its index in the pool), if any.
    cheapest: Option<usize>,
    /// Offering domains of the remaining types within `combos`.
    pub offered: u128,
    slack_key: i64,
    /// Spare memory of the cheapest type (key in `mem_index`).
    mem_key: i64,
    /// Hostname counters that pods on this claim constrain or own: pods
    /// counted by them may not be moved onto or off the claim.
    watch: Vec<usize>,
    /// The capacity reservation the claim launches into
    /// ([`reservations`]).
    pub reservation: Option<String>,
    /// Per resource dimension, how far into the pool's `by_dim` order the
    /// types too small for `used` have been removed from `types`.
    cursor: Vec<u32>,
    /// Per limit resource, the position in the pool's `cap_desc` order of
    /// the largest remaining type (types before it were removed).
    cap_cursor: Vec<u32>,
}

/// A pod on a claim as the trade search sees it: its class and its cpu and
/// memory requests.
#[derive(Clone, Copy, Debug)]
struct Member {
    class: u32,
    cpu: i64,
    mem: i64,
}

enum HostCheck {
    Max(usize, u32),
    Positive(usize),
    Zero(usize),
}

struct Attempt {
    /// The pod's requirements at this level, narrowed to the values its
    /// topology terms allow.
    variant: usize,
    tolerate_soft: bool,
    /// Allowed values per constrained non-hostname key, and whether a target
    /// without the label is acceptable.
    keyed: Vec<(usize, Bits, bool)>,
    host: Vec<HostCheck>,
    /// Keys to pin on a multi-valued claim, with the counters whose counts
    /// pick the value.
    pins: Vec<(usize, Vec<usize>)>,
    zone_mask: u128,
    /// The topology terms on keys other than hostname (kind and key), in
    /// order, for reasons.
    narrowing: Vec<(TermKind, usize)>,
    /// The variant before those terms narrowed it (`variant` is this one
    /// with the allowed values of their keys other than zone and capacity
    /// type).
    base_variant: usize,
}

#[derive(Clone, Copy, Debug)]
enum Choice {
    Node(usize),
    Claim(usize),
    /// A new claim in a NodePool, sized for this many identical pods.
    New(usize, usize),
}

/// The state of one solve.
pub(crate) struct Solver<'a> {
    pub input: &'a SolveInput,
    /// The pods in the order they are tried (`super::pod_order`): pod ids
    /// are positions here, so ties that fall to the lower id do not depend
    /// on the input's order.
    pub pods: Vec<&'a PodSpec>,
    /// Per pod id, its position in the input's pods.
    pub input_index: Vec<usize>,
    /// The existing nodes by name; node ids are positions here.
    pub existing: Vec<&'a ExistingNode>,
    pub dims: Vec<String>,
    pub zones: Vec<String>,
    pub cts: Vec<String>,
    pub pools: Vec<Pool>,
    nodes: Vec<NodeInfo<'a>>,
    node_index: BTreeSet<(i64, usize)>,
    pub claims: Vec<Claim>,
    claim_index: BTreeSet<(i64, usize)>,
    /// The same claims by spare memory of their cheapest type.
    mem_index: BTreeSet<(i64, usize)>,
    keys: Vec<Domains>,
    counters: Vec<Counter>,
    classes: Vec<Class>,
    pub pod_class: Vec<usize>,
    pub pod_req: Vec<Vec<i64>>,
    variants: Vec<Variant>,
    variant_index: HashMap<(usize, usize, usize), usize>,
    /// Variants by their requirements: classes that differ only in labels
    /// share one.
    variant_by_reqs: HashMap<(Requirements, Vec<HostPort>), usize>,
    /// Does any pool's DaemonSet hold a host port (then a pod's host ports
    /// narrow its instance types, and are part of its variant)?
    daemon_ports: bool,
    preferences: Preferences,
    any_soft_taint: bool,
    pub placed_node: Vec<Option<usize>>,
    pub placed_claim: Vec<Option<usize>>,
    scratch: Bits,
    scratch2: Bits,
    /// Component-wise smallest pod request.
    min_req: Vec<i64>,
    cands: Vec<usize>,
    /// The variant and soft-taint tolerance each pod was placed with.
    pod_relax: Vec<Option<(usize, bool)>>,
    zone_key: Option<usize>,
    ct_key: Option<usize>,
    /// Identical pods from the one being placed on (see [`Self::run`]).
    run_left: usize,
    /// Mean allocatable per resource over all types of all pools.
    mean_alloc: Vec<f64>,
    /// A new claim sized for several identical pods: (claim, pods, attempt).
    bulk: Option<(usize, usize, Attempt)>,
    /// Per class, whether its pods may move on their own after the first
    /// pass (see `repack`); filled when the first pass is done.
    class_free: Vec<bool>,
    /// Claims changed in the current round of `repack::improve`.
    touched: Vec<bool>,
    /// At most this many claims may exist (removal trials that allow only
    /// one replacement); `None` in a solve.
    claim_cap: Option<usize>,
    /// Set when `choose` failed only because of `claim_cap`: a new claim
    /// would have held the pod, so its preferences are not relaxed.
    capped: bool,
    /// Whether `choose` should find out `capped`: the pod has a more
    /// relaxed level to try.
    check_capped: bool,
    /// The instances left in each capacity reservation, and a node's
    /// allocatable ([`reservations`]); empty without reserved capacity.
    reservations: HashMap<String, (u32, Vec<i64>)>,
}

fn add_into(a: &mut [i64], b: &[i64]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x = x.saturating_add(*y);
    }
}

fn fits_sum(used: &[i64], req: &[i64], alloc: &[i64]) -> bool {
    used.iter()
        .zip(req)
        .zip(alloc)
        .all(|((u, r), a)| u.saturating_add(*r) <= *a)
}

impl<'a> Solver<'a> {
    fn n_targets(&self) -> usize {
        self.nodes.len() + self.claims.len()
    }

    pub fn node_name(&self, n: usize) -> &str {
        self.nodes[n].name
    }

    pub fn free_on_nodes(&self) -> Vec<i64> {
        let mut out = vec![0i64; self.dims.len()];
        for n in &self.nodes {
            for (o, f) in out.iter_mut().zip(&n.free) {
                *o += (*f).max(0);
            }
        }
        out
    }

    /// Pods that must each have a node of their own: the largest group of
    /// pods with a required hostname anti-affinity that selects each other.
    pub fn forced_nodes(&self, placed: &[usize]) -> usize {
        let mut per_counter: HashMap<usize, usize> = HashMap::new();
        for &pod in placed {
            let c = &self.classes[self.pod_class[pod]];
            for t in &c.terms {
                if t.kind == TermKind::Anti
                    && t.rank.is_none()
                    && t.key == TopoKey::Hostname
                    && t.self_match
                {
                    *per_counter.entry(t.counter).or_default() += 1;
                }
            }
        }
        per_counter.values().copied().max().unwrap_or(0)
    }
}

impl Solver<'_> {
    pub fn placed_claim_of(&self, pod: usize) -> Option<usize> {
        self.placed_claim[pod]
    }

    pub fn existing_count(&self) -> usize {
        self.nodes.len()
    }
}

impl Solver<'_> {
    /// Is the pod's memory a larger share of the pool types' memory than its
    /// cpu is of their cpu?
    fn mem_heavy(&self, pod: usize) -> bool {
        let r = &self.pod_req[pod];
        let (c, m) = (self.mean_alloc[0], self.mean_alloc[1]);
        c > 0.0 && m > 0.0 && r[1] as f64 / m > r[0] as f64 / c
    }
}

impl Solver<'_> {
    pub fn total_price(&self) -> f64 {
        self.claims
            .iter()
            .filter(|c| !c.pods.is_empty())
            .map(|c| c.price)
            .sum()
    }
}

impl Solver<'_> {
    /// (pool, type) pairs some placed pod could use: the union of the type
    /// sets of the requirement variants pods were placed with, priced
    /// without reserved offerings (the lower bound counts reservations
    /// apart).
    pub fn allowed_types(&self, placed: &[usize]) -> Vec<(usize, usize, f64)> {
        // (class, variant) pairs placed pods used: the class says which
        // pools' taints the pods tolerate, the variant which types and
        // offering domains their requirements allow.
        let mut used: Vec<(usize, usize)> = placed
            .iter()
            .filter_map(|&p| self.pod_relax[p].map(|r| (self.pod_class[p], r.0)))
            .collect();
        used.sort_unstable();
        used.dedup();
        let mut out = Vec::new();
        let unreserved = !self.reserved_mask();
        for (pi, pool) in self.pools.iter().enumerate() {
            let mut union = Bits::new(pool.types.len());
            let mut combos = 0u128;
            for &(class, v) in &used {
                let (strict, soft) = self.classes[class].pool_taints[pi];
                if !(strict || soft) {
                    continue;
                }
                let pv = &self.variants[v].per_pool[pi];
                combos |= pv.combos;
                for t in pv.types.iter() {
                    union.set(t);
                }
            }
            // Each type at its cheapest offering in the domains allowed.
            let combos = combos & unreserved;
            out.extend(
                union
                    .iter()
                    .filter_map(|t| pool.types[t].price(combos).map(|price| (pi, t, price))),
            );
        }
        out
    }
}
