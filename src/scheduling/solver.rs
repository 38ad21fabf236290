//! The solve: places pods on existing capacity, on NodeClaims planned earlier
//! in the solve, or on new NodeClaims, cheapest first.
//!
//! Pods are grouped into classes of identical constraints, so requirement
//! checks and instance-type filtering are computed once per class and
//! NodePool (as bitsets over instance types). Topology is counted
//! incrementally ([`super::topology`]). Candidate NodeClaims are found through
//! an index ordered by spare cpu, so a pod never scans every NodeClaim.

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
    pub alloc: Vec<i64>,
    /// Capacity on the NodePool's limit resources.
    pub cap_lim: Vec<i64>,
    pub offer_mask: u128,
    /// (combo, price) of available offerings, cheapest first.
    pub offers: Vec<(u8, f64)>,
    pub source: usize,
}

impl TypeInfo {
    pub fn price(&self, combos: u128) -> Option<f64> {
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
    pub daemon: Vec<i64>,
    pub lim_names: Vec<String>,
    pub lim: Vec<i64>,
    pub lim_used: Vec<i64>,
    pub node_limit: Option<i64>,
    pub nodes_used: i64,
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

struct NodeInfo {
    name: String,
    labels: std::collections::BTreeMap<String, String>,
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
    /// Per resource dimension, how far into the pool's `by_dim` order the
    /// types too small for `used` have been removed from `types`.
    cursor: Vec<u32>,
    /// Per limit resource, the position in the pool's `cap_desc` order of
    /// the largest remaining type (types before it were removed).
    cap_cursor: Vec<u32>,
}

enum HostCheck {
    Max(usize, u32),
    Positive(usize),
    Zero(usize),
}

struct Attempt {
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
    pub dims: Vec<String>,
    pub zones: Vec<String>,
    pub cts: Vec<String>,
    pub pools: Vec<Pool>,
    nodes: Vec<NodeInfo>,
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
    variant_by_reqs: HashMap<Requirements, usize>,
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

type ClassKey<'a> = (
    &'a str,
    &'a std::collections::BTreeMap<String, String>,
    &'a Requirements,
    &'a [Requirements],
    &'a [(i32, Requirements)],
    &'a [Toleration],
    &'a [HostPort],
    &'a [PodAffinityTerm],
    &'a [(i32, PodAffinityTerm)],
    &'a [PodAffinityTerm],
    &'a [(i32, PodAffinityTerm)],
    &'a [TopologySpread],
);

fn class_key(p: &PodSpec) -> ClassKey<'_> {
    (
        &p.namespace,
        &p.labels,
        &p.node_selector,
        &p.required_terms,
        &p.preferred_terms,
        &p.tolerations,
        &p.host_ports,
        &p.affinity,
        &p.preferred_affinity,
        &p.anti_affinity,
        &p.preferred_anti_affinity,
        &p.spread,
    )
}

/// Does type `t` allow the merged requirements? Keys the type defines must
/// intersect. Well-known instance labels come from the type, so a type
/// without one has it absent; other keys are set from the NodePool's labels.
fn type_compatible(t: &InstanceType, merged: &Requirements) -> bool {
    merged.0.iter().all(|(k, r)| match t.requirements.get(k) {
        Some(tr) => !tr.intersection(r).is_empty() || (tr.allows_absent() && r.allows_absent()),
        None => !is_well_known(k) || k == NODEPOOL || r.allows_absent(),
    })
}

impl<'a> Solver<'a> {
    pub fn new(input: &'a SolveInput, opts: &SolveOptions) -> Result<Self, SolveError> {
        // Resource dimensions: cpu, memory, pods, then every other requested resource.
        let mut extra: BTreeSet<&str> = BTreeSet::new();
        for p in input
            .pods
            .iter()
            .chain(input.daemonsets.iter().map(|d| &d.pod))
        {
            extra.extend(p.requests.0.keys().map(String::as_str));
        }
        let mut dims: Vec<String> = vec![CPU.into(), MEMORY.into(), PODS.into()];
        dims.extend(
            extra
                .into_iter()
                .filter(|k| ![CPU, MEMORY, PODS].contains(k))
                .map(String::from),
        );
        let project =
            |r: &crate::model::Resources| -> Vec<i64> { dims.iter().map(|d| r.get(d)).collect() };

        // Offering domains.
        let mut zones: BTreeSet<String> = BTreeSet::new();
        let mut cts: BTreeSet<String> = BTreeSet::new();
        for np in &input.nodepools {
            for it in &np.instance_types {
                for o in &it.offerings {
                    zones.insert(o.zone.clone());
                    cts.insert(o.capacity_type.clone());
                }
            }
        }
        for n in &input.nodes {
            if let Some(z) = n.labels.get(ZONE) {
                zones.insert(z.clone());
            }
            if let Some(c) = n.labels.get(CAPACITY_TYPE) {
                cts.insert(c.clone());
            }
        }
        let zones: Vec<String> = zones.into_iter().collect();
        let cts: Vec<String> = cts.into_iter().collect();
        if zones.len() * cts.len().max(1) > MAX_COMBOS {
            return Err(SolveError::TooManyOfferingDomains {
                zones: zones.len(),
                capacity_types: cts.len(),
            });
        }
        let ncts = cts.len().max(1);
        let combo = |z: &str, c: &str| -> Option<u8> {
            let zi = zones.binary_search_by(|x| x.as_str().cmp(z)).ok()?;
            let ci = cts.binary_search_by(|x| x.as_str().cmp(c)).ok()?;
            Some((zi * ncts + ci) as u8)
        };

        // Pools in weight order, ties by name; types by name.
        let mut order: Vec<usize> = (0..input.nodepools.len()).collect();
        order.sort_by(|&a, &b| {
            let (pa, pb) = (&input.nodepools[a], &input.nodepools[b]);
            pb.weight
                .cmp(&pa.weight)
                .then_with(|| pa.name.cmp(&pb.name))
        });
        let mut pools = Vec::new();
        for &pi in &order {
            let np: &NodePoolSpec = &input.nodepools[pi];
            let mut reqs = np.requirements.clone();
            for (k, v) in &np.labels {
                reqs.add(k, Requirement::in_values([v.clone()]));
            }
            reqs.add(NODEPOOL, Requirement::in_values([np.name.clone()]));
            let taints: Vec<Taint> = np
                .taints
                .iter()
                .filter(|t| !t.is_ephemeral())
                .cloned()
                .collect();
            let lim_names: Vec<String> = np
                .limits
                .0
                .keys()
                .filter(|k| *k != "nodes")
                .cloned()
                .collect();
            let lim: Vec<i64> = lim_names.iter().map(|k| np.limits.get(k)).collect();
            let node_limit = np.limits.0.get("nodes").copied();
            // Types in order of their cheapest available offering (then by
            // name), so a scan of a type bitset in index order meets the
            // cheapest types first and can stop early.
            let cheapest_of: Vec<f64> = np
                .instance_types
                .iter()
                .map(|it| {
                    it.offerings
                        .iter()
                        .filter(|o| o.available && combo(&o.zone, &o.capacity_type).is_some())
                        .map(|o| o.price)
                        .fold(f64::INFINITY, f64::min)
                })
                .collect();
            let mut tidx: Vec<usize> = (0..np.instance_types.len()).collect();
            tidx.sort_by(|&a, &b| {
                cheapest_of[a]
                    .total_cmp(&cheapest_of[b])
                    .then_with(|| np.instance_types[a].name.cmp(&np.instance_types[b].name))
            });
            let types: Vec<TypeInfo> = tidx
                .iter()
                .map(|&ti| {
                    let it = &np.instance_types[ti];
                    let mut offers: Vec<(u8, f64)> = it
                        .offerings
                        .iter()
                        .filter(|o| o.available)
                        .filter_map(|o| combo(&o.zone, &o.capacity_type).map(|c| (c, o.price)))
                        .collect();
                    offers.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
                    let offer_mask = offers.iter().fold(0u128, |m, (c, _)| m | (1u128 << c));
                    TypeInfo {
                        name: it.name.clone(),
                        alloc: project(&it.allocatable),
                        cap_lim: lim_names.iter().map(|k| it.capacity.get(k)).collect(),
                        offer_mask,
                        offers,
                        source: ti,
                    }
                })
                .collect();
            let min_values = reqs
                .0
                .iter()
                .filter_map(|(k, r)| r.min_values.map(|m| (k.clone(), m)))
                .map(|(k, m)| {
                    let mut vals: Vec<String> = Vec::new();
                    let ids = tidx
                        .iter()
                        .map(|&ti| {
                            let v = np.instance_types[ti]
                                .requirements
                                .single_value(&k)
                                .unwrap_or("")
                                .to_string();
                            match vals.iter().position(|x| *x == v) {
                                Some(i) => i as u32,
                                None => {
                                    vals.push(v);
                                    (vals.len() - 1) as u32
                                }
                            }
                        })
                        .collect();
                    (k, m, ids)
                })
                .collect();
            // DaemonSet pods that will land on every new node of this pool.
            let mut daemon = vec![0i64; dims.len()];
            for ds in &input.daemonsets {
                let mut dreqs = ds.pod.node_selector.clone();
                if let Some(t) = ds.pod.required_terms.first() {
                    dreqs.intersect_with(t);
                }
                if first_untolerated(&taints, &ds.pod.tolerations, true).is_none()
                    && reqs.compatible(&dreqs, allow_well_known).is_ok()
                {
                    add_into(&mut daemon, &project(&ds.pod.requests));
                }
            }
            let cap_desc: Vec<Vec<u32>> = (0..lim_names.len())
                .map(|i| {
                    let mut o: Vec<u32> = (0..types.len() as u32).collect();
                    o.sort_by_key(|&t| (std::cmp::Reverse(types[t as usize].cap_lim[i]), t));
                    o
                })
                .collect();
            let by_dim: Vec<Vec<u32>> = (0..dims.len())
                .map(|d| {
                    let mut o: Vec<u32> = (0..types.len() as u32).collect();
                    o.sort_by_key(|&t| (types[t as usize].alloc[d], t));
                    o
                })
                .collect();
            let offer_bits: Vec<Bits> = (0..zones.len() * ncts)
                .map(|c| {
                    let mut b = Bits::new(types.len());
                    for (t, ty) in types.iter().enumerate() {
                        if ty.offer_mask & (1u128 << c) != 0 {
                            b.set(t);
                        }
                    }
                    b
                })
                .collect();
            pools.push(Pool {
                all_offered: types.iter().fold(0u128, |m, t| m | t.offer_mask),
                by_dim,
                offer_bits,
                cap_desc,
                spec: pi,
                name: np.name.clone(),
                reqs,
                taints,
                types,
                daemon,
                lim_used: vec![0; lim.len()],
                lim_names,
                lim,
                node_limit,
                nodes_used: 0,
                min_values,
            });
        }

        // Topology keys used by any term.
        let mut key_names: BTreeSet<String> = BTreeSet::new();
        let all_terms = |p: &'a PodSpec| {
            p.affinity
                .iter()
                .chain(p.anti_affinity.iter())
                .chain(p.preferred_affinity.iter().map(|x| &x.1))
                .chain(p.preferred_anti_affinity.iter().map(|x| &x.1))
                .map(|t| t.topology_key.as_str())
                .chain(p.spread.iter().map(|s| s.topology_key.as_str()))
        };
        for p in &input.pods {
            key_names.extend(all_terms(p).filter(|k| *k != HOSTNAME).map(String::from));
        }
        for n in &input.nodes {
            for bp in &n.pods {
                key_names.extend(
                    bp.anti_affinity
                        .iter()
                        .map(|t| t.topology_key.clone())
                        .filter(|k| k != HOSTNAME),
                );
            }
        }
        let mut keys = Vec::new();
        for k in &key_names {
            let values: Vec<String> = if k == ZONE {
                zones.clone()
            } else if k == CAPACITY_TYPE {
                cts.clone()
            } else {
                let mut v: Vec<String> = Vec::new();
                for pool in &pools {
                    if let Some(r) = pool.reqs.get(k)
                        && !r.complement
                    {
                        v.extend(r.values.iter().cloned());
                    }
                }
                for np in &input.nodepools {
                    for it in &np.instance_types {
                        if let Some(r) = it.requirements.get(k)
                            && !r.complement
                        {
                            v.extend(r.values.iter().cloned());
                        }
                    }
                }
                v.extend(input.nodes.iter().filter_map(|n| n.labels.get(k).cloned()));
                v
            };
            keys.push(Domains::new(k, values));
        }
        let zone_key = keys.iter().position(|d| d.key == ZONE);
        let ct_key = keys.iter().position(|d| d.key == CAPACITY_TYPE);

        // Existing nodes, by name.
        let mut norder: Vec<usize> = (0..input.nodes.len()).collect();
        norder.sort_by(|&a, &b| input.nodes[a].name.cmp(&input.nodes[b].name));
        let mut nodes = Vec::new();
        for &ni in &norder {
            let n: &ExistingNode = &input.nodes[ni];
            let mut free = project(&n.allocatable);
            let mut ports = Vec::new();
            for bp in &n.pods {
                let r = project(&bp.requests);
                for (f, x) in free.iter_mut().zip(&r) {
                    *f = f.saturating_sub(*x);
                }
                if bp.requests.get(PODS) == 0 {
                    free[2] -= 1;
                }
                ports.extend(bp.host_ports.iter().cloned());
            }
            let taints = n
                .taints
                .iter()
                .filter(|t| n.initialized || !t.is_ephemeral())
                .cloned()
                .collect();
            let values = keys
                .iter()
                .map(|d| n.labels.get(&d.key).and_then(|v| d.id(v)))
                .collect();
            nodes.push(NodeInfo {
                name: n.name.clone(),
                labels: n.labels.clone(),
                taints,
                free,
                ports,
                values,
            });
        }
        // Existing capacity counts against limits.
        for &ni in &norder {
            let n = &input.nodes[ni];
            if let Some(pool) = n
                .nodepool
                .as_ref()
                .and_then(|name| pools.iter_mut().find(|p| &p.name == name))
            {
                for (u, k) in pool.lim_used.iter_mut().zip(&pool.lim_names) {
                    *u += n.capacity.get(k);
                }
                pool.nodes_used += 1;
            }
        }
        let node_index = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.free[0], i))
            .collect();

        let pod_req: Vec<Vec<i64>> = input.pods.iter().map(|p| project(&p.requests)).collect();
        let any_soft_taint = pools
            .iter()
            .flat_map(|p| p.taints.iter())
            .chain(nodes.iter().flat_map(|n| n.taints.iter()))
            .any(|t| t.effect == Effect::PreferNoSchedule);
        let nt = pools.iter().map(|p| p.types.len()).max().unwrap_or(0);
        let mut s = Solver {
            input,
            dims,
            zones,
            cts,
            pools,
            nodes,
            node_index,
            claims: Vec::new(),
            claim_index: BTreeSet::new(),
            mem_index: BTreeSet::new(),
            keys,
            counters: Vec::new(),
            classes: Vec::new(),
            pod_class: vec![0; input.pods.len()],
            pod_req,
            variants: Vec::new(),
            variant_index: HashMap::new(),
            variant_by_reqs: HashMap::new(),
            preferences: opts.preferences,
            any_soft_taint,
            placed_node: vec![None; input.pods.len()],
            placed_claim: vec![None; input.pods.len()],
            scratch: Bits::new(nt),
            scratch2: Bits::new(nt),
            min_req: Vec::new(),
            cands: Vec::new(),
            pod_relax: vec![None; input.pods.len()],
            zone_key,
            ct_key,
            run_left: 1,
            bulk: None,
            mean_alloc: Vec::new(),
        };
        let n_types: usize = s.pools.iter().map(|p| p.types.len()).sum();
        s.mean_alloc = (0..s.dims.len())
            .map(|d| {
                let sum: f64 = s
                    .pools
                    .iter()
                    .flat_map(|p| p.types.iter())
                    .map(|t| t.alloc[d] as f64)
                    .sum();
                sum / n_types.max(1) as f64
            })
            .collect();
        s.min_req = (0..s.dims.len())
            .map(|d| s.pod_req.iter().map(|r| r[d]).min().unwrap_or(0))
            .collect();
        s.build_classes();
        s.record_bound_pods();
        Ok(s)
    }

    fn topo_key(&self, k: &str) -> TopoKey {
        if k == HOSTNAME {
            TopoKey::Hostname
        } else {
            // Every non-hostname key of a term was interned in `new`.
            TopoKey::Key(self.keys.iter().position(|d| d.key == k).unwrap_or(0))
        }
    }

    fn counter(
        &mut self,
        key: TopoKey,
        ns: &Namespaces,
        sel: &LabelSelector,
        owner: bool,
    ) -> usize {
        if let Some(i) = self.counters.iter().position(|c| {
            c.key == key && c.owner == owner && &c.namespaces == ns && &c.selector == sel
        }) {
            return i;
        }
        self.counters
            .push(Counter::new(key, ns.clone(), sel.clone(), owner));
        self.counters.len() - 1
    }

    fn build_classes(&mut self) {
        let input = self.input;
        let mut index: HashMap<ClassKey<'a>, usize> = HashMap::new();
        for (pi, p) in input.pods.iter().enumerate() {
            if let Some(&c) = index.get(&class_key(p)) {
                self.pod_class[pi] = c;
                continue;
            }
            let ci = self.classes.len();
            index.insert(class_key(p), ci);
            self.pod_class[pi] = ci;
            let mut terms = Vec::new();
            let own = |t: &PodAffinityTerm| {
                t.namespaces.contains(&p.namespace) && t.selector.matches(&p.labels)
            };
            for t in &p.affinity {
                let key = self.topo_key(&t.topology_key);
                let counter = self.counter(key, &t.namespaces, &t.selector, false);
                terms.push(Term {
                    kind: TermKind::Affinity,
                    counter,
                    key,
                    self_match: own(t),
                    rank: None,
                });
            }
            let mut pref: Vec<(i32, usize)> = p
                .preferred_affinity
                .iter()
                .enumerate()
                .map(|(i, (w, _))| (*w, i))
                .collect();
            pref.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            for (rank, (_, i)) in pref.iter().enumerate() {
                let t = &p.preferred_affinity[*i].1;
                let key = self.topo_key(&t.topology_key);
                let counter = self.counter(key, &t.namespaces, &t.selector, false);
                terms.push(Term {
                    kind: TermKind::Affinity,
                    counter,
                    key,
                    self_match: own(t),
                    rank: Some(rank),
                });
            }
            let mut owns = Vec::new();
            for t in &p.anti_affinity {
                let key = self.topo_key(&t.topology_key);
                let counter = self.counter(key, &t.namespaces, &t.selector, false);
                terms.push(Term {
                    kind: TermKind::Anti,
                    counter,
                    key,
                    self_match: own(t),
                    rank: None,
                });
                owns.push(self.counter(key, &t.namespaces, &t.selector, true));
            }
            let mut pref: Vec<(i32, usize)> = p
                .preferred_anti_affinity
                .iter()
                .enumerate()
                .map(|(i, (w, _))| (*w, i))
                .collect();
            pref.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            for (rank, (_, i)) in pref.iter().enumerate() {
                let t = &p.preferred_anti_affinity[*i].1;
                let key = self.topo_key(&t.topology_key);
                let counter = self.counter(key, &t.namespaces, &t.selector, false);
                terms.push(Term {
                    kind: TermKind::Anti,
                    counter,
                    key,
                    self_match: own(t),
                    rank: Some(rank),
                });
            }
            for s in &p.spread {
                let key = self.topo_key(&s.topology_key);
                let ns = Namespaces::Names([p.namespace.clone()].into_iter().collect());
                let counter = self.counter(key, &ns, &s.selector, false);
                terms.push(Term {
                    kind: TermKind::Spread {
                        skew: s.max_skew,
                        min_domains: s.min_domains.unwrap_or(1),
                        honor_affinity: s.honor_node_affinity,
                        honor_taints: s.honor_node_taints,
                        anyway: s.when_unsatisfiable == Unsatisfiable::ScheduleAnyway,
                    },
                    counter,
                    key,
                    self_match: s.selector.matches(&p.labels),
                    rank: None,
                });
            }
            let mut pref_terms: Vec<usize> = (0..p.preferred_terms.len()).collect();
            pref_terms.sort_by(|&a, &b| {
                p.preferred_terms[b]
                    .0
                    .cmp(&p.preferred_terms[a].0)
                    .then(a.cmp(&b))
            });
            let pool_taints = self
                .pools
                .iter()
                .map(|pool| {
                    (
                        first_untolerated(&pool.taints, &p.tolerations, false).is_none(),
                        first_untolerated(&pool.taints, &p.tolerations, true).is_none(),
                    )
                })
                .collect();
            self.classes.push(Class {
                rep: pi,
                has_anyway: p
                    .spread
                    .iter()
                    .any(|s| s.when_unsatisfiable == Unsatisfiable::ScheduleAnyway),
                n_pref_aff: p.preferred_affinity.len(),
                n_pref_anti: p.preferred_anti_affinity.len(),
                n_terms: p.required_terms.len(),
                pref_terms,
                terms,
                counted_by: Vec::new(),
                blocked_by: Vec::new(),
                owns,
                pool_taints,
            });
        }
        // Bound pods' anti-affinity terms repel newcomers too.
        for n in &input.nodes {
            for bp in &n.pods {
                for t in &bp.anti_affinity {
                    let key = self.topo_key(&t.topology_key);
                    self.counter(key, &t.namespaces, &t.selector, true);
                }
            }
        }
        for c in &mut self.classes {
            let p = &input.pods[c.rep];
            for (i, k) in self.counters.iter().enumerate() {
                if k.selects(&p.namespace, &p.labels) {
                    if k.owner {
                        c.blocked_by.push(i);
                    } else {
                        c.counted_by.push(i);
                    }
                }
            }
        }
    }

    fn record_bound_pods(&mut self) {
        let input = self.input;
        let mut norder: Vec<usize> = (0..input.nodes.len()).collect();
        norder.sort_by(|&a, &b| input.nodes[a].name.cmp(&input.nodes[b].name));
        for (t, &ni) in norder.iter().enumerate() {
            for bp in &input.nodes[ni].pods {
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
                        self.counters[ci].record(t, v);
                    }
                }
            }
        }
    }

    fn n_targets(&self) -> usize {
        self.nodes.len() + self.claims.len()
    }

    /// The variant of a class's node requirements at a relaxation level.
    fn variant(&mut self, class: usize, r: &Relax) -> usize {
        let key = (class, r.term, r.node_pref_dropped);
        if let Some(&v) = self.variant_index.get(&key) {
            return v;
        }
        let p = &self.input.pods[self.classes[class].rep];
        let mut reqs = p.node_selector.clone();
        if let Some(t) = p.required_terms.get(r.term) {
            reqs.intersect_with(t);
        }
        if let Some(&pi) = self.classes[class].pref_terms.get(r.node_pref_dropped) {
            reqs.intersect_with(&p.preferred_terms[pi].1);
        }
        if let Some(&v) = self.variant_by_reqs.get(&reqs) {
            self.variant_index.insert(key, v);
            return v;
        }
        let ncts = self.cts.len().max(1);
        let per_pool = self
            .pools
            .iter()
            .map(|pool| {
                let np = &self.input.nodepools[pool.spec];
                let mut types = Bits::new(self.scratch_len());
                if let Err(c) = pool.reqs.compatible(&reqs, allow_well_known) {
                    return PoolVariant {
                        err: Some(format!(
                            "incompatible with NodePool {} requirements: {c}",
                            pool.name
                        )),
                        types,
                        combos: 0,
                    };
                }
                let mut merged = pool.reqs.clone();
                merged.intersect_with(&reqs);
                let mut combos = 0u128;
                for (zi, z) in self.zones.iter().enumerate() {
                    if merged.get(ZONE).is_some_and(|r| !r.has(z)) {
                        continue;
                    }
                    for (ci, c) in self.cts.iter().enumerate() {
                        if merged.get(CAPACITY_TYPE).is_some_and(|r| !r.has(c)) {
                            continue;
                        }
                        combos |= 1u128 << (zi * ncts + ci);
                    }
                }
                for (i, t) in pool.types.iter().enumerate() {
                    if t.offer_mask & combos != 0
                        && type_compatible(&np.instance_types[t.source], &merged)
                    {
                        types.set(i);
                    }
                }
                PoolVariant {
                    err: None,
                    types,
                    combos,
                }
            })
            .collect();
        self.variant_by_reqs
            .insert(reqs.clone(), self.variants.len());
        self.variants.push(Variant { reqs, per_pool });
        let v = self.variants.len() - 1;
        self.variant_index.insert(key, v);
        v
    }

    fn scratch_len(&self) -> usize {
        self.pools.iter().map(|p| p.types.len()).max().unwrap_or(0)
    }

    /// The relaxation levels of a class, strictest first.
    fn levels(&self, class: usize) -> Vec<Relax> {
        let c = &self.classes[class];
        let mut out = Vec::new();
        let mut r = Relax::default();
        if self.preferences == Preferences::Ignore {
            r.aff_dropped = c.n_pref_aff;
            r.anti_dropped = c.n_pref_anti;
            r.node_pref_dropped = c.pref_terms.len();
            r.anyway_dropped = true;
            r.tolerate_soft = true;
        }
        out.push(r);
        for t in 1..c.n_terms {
            r.term = t;
            out.push(r);
        }
        if self.preferences == Preferences::Ignore {
            return out;
        }
        for _ in 0..c.n_pref_aff {
            r.aff_dropped += 1;
            out.push(r);
        }
        for _ in 0..c.n_pref_anti {
            r.anti_dropped += 1;
            out.push(r);
        }
        for _ in 0..c.pref_terms.len() {
            r.node_pref_dropped += 1;
            out.push(r);
        }
        if c.has_anyway {
            r.anyway_dropped = true;
            out.push(r);
        }
        if self.any_soft_taint {
            r.tolerate_soft = true;
            out.push(r);
        }
        out
    }

    fn term_active(t: &Term, r: &Relax) -> bool {
        match (t.kind, t.rank) {
            (TermKind::Spread { anyway, .. }, _) => !(anyway && r.anyway_dropped),
            (_, None) => true,
            (TermKind::Affinity, Some(rank)) => rank >= r.aff_dropped,
            (TermKind::Anti, Some(rank)) => rank >= r.anti_dropped,
        }
    }

    /// Domains of `key` the pod could land in (for spread minimums).
    fn eligible_values(
        &self,
        key: usize,
        variant: usize,
        honor_affinity: bool,
        honor_taints: bool,
        class: usize,
    ) -> Bits {
        let d = &self.keys[key];
        let mut out = Bits::new(d.len());
        let v = &self.variants[variant];
        let ncts = self.cts.len().max(1);
        for (pi, pool) in self.pools.iter().enumerate() {
            let pv = &v.per_pool[pi];
            if honor_taints && !self.classes[class].pool_taints[pi].1 {
                continue;
            }
            if honor_affinity && pv.err.is_some() {
                continue;
            }
            // Values reachable through the pool's instance types.
            let mut combos = 0u128;
            if honor_affinity {
                for ti in pv.types.iter() {
                    combos |= pool.types[ti].offer_mask & pv.combos;
                }
            } else {
                for t in &pool.types {
                    combos |= t.offer_mask;
                }
            }
            if Some(key) == self.zone_key {
                for zi in 0..self.zones.len() {
                    if (combos >> (zi * ncts)) & ((1u128 << ncts) - 1) != 0 {
                        out.set(zi);
                    }
                }
            } else if Some(key) == self.ct_key {
                for ci in 0..self.cts.len() {
                    if (0..self.zones.len()).any(|zi| combos & (1u128 << (zi * ncts + ci)) != 0) {
                        out.set(ci);
                    }
                }
            } else {
                let reqs = if honor_affinity { Some(&v.reqs) } else { None };
                for (vi, val) in d.values.iter().enumerate() {
                    let pool_ok = pool.reqs.get(&d.key).is_some_and(|r| r.has(val));
                    let pod_ok = reqs.and_then(|r| r.get(&d.key)).is_none_or(|r| r.has(val));
                    if pool_ok && pod_ok {
                        out.set(vi);
                    }
                }
            }
        }
        for n in &self.nodes {
            if honor_taints
                && first_untolerated(
                    &n.taints,
                    &self.input.pods[self.classes[class].rep].tolerations,
                    true,
                )
                .is_some()
            {
                continue;
            }
            if let Some(val) = n.values[key] {
                if honor_affinity
                    && v.reqs
                        .get(&d.key)
                        .is_some_and(|r| !r.has(&d.values[val as usize]))
                {
                    continue;
                }
                out.set(val as usize);
            }
        }
        out
    }

    /// Builds the constraints of one attempt, or why the pod's topology
    /// cannot be met at this level.
    fn attempt(&mut self, class: usize, r: &Relax) -> Result<Attempt, String> {
        let variant = self.variant(class, r);
        let c = &self.classes[class];
        let mut keyed: Vec<(usize, Bits, bool)> = Vec::new();
        let mut host = Vec::new();
        let mut pins: Vec<(usize, Vec<usize>)> = Vec::new();
        let terms: Vec<Term> = c
            .terms
            .iter()
            .filter(|t| Self::term_active(t, r))
            .cloned()
            .collect();
        let counted_by = c.counted_by.clone();
        let blocked_by = c.blocked_by.clone();
        let owns = c.owns.clone();
        for t in &terms {
            let counter = &self.counters[t.counter];
            match t.key {
                TopoKey::Hostname => match t.kind {
                    TermKind::Spread { skew, .. } => host.push(HostCheck::Max(
                        t.counter,
                        skew.saturating_sub(u32::from(t.self_match)),
                    )),
                    TermKind::Affinity => {
                        if !(counter.total == 0 && t.self_match) {
                            if counter.total == 0 {
                                return Err("pod affinity on kubernetes.io/hostname: no pod matches the selector".into());
                            }
                            host.push(HostCheck::Positive(t.counter));
                        }
                    }
                    TermKind::Anti => host.push(HostCheck::Zero(t.counter)),
                },
                TopoKey::Key(k) => {
                    let d = &self.keys[k];
                    let mut allowed = Bits::new(d.len());
                    let absent_ok;
                    match t.kind {
                        TermKind::Spread {
                            skew,
                            min_domains,
                            honor_affinity,
                            honor_taints,
                            ..
                        } => {
                            let eligible = self.eligible_values(
                                k,
                                variant,
                                honor_affinity,
                                honor_taints,
                                class,
                            );
                            let n_eligible = eligible.count();
                            let min = if (n_eligible as u32) < min_domains {
                                0
                            } else {
                                eligible
                                    .iter()
                                    .map(|v| counter.at_value(v as u32))
                                    .min()
                                    .unwrap_or(0)
                            };
                            for v in eligible.iter() {
                                if counter.at_value(v as u32) + u32::from(t.self_match)
                                    <= min + skew
                                {
                                    allowed.set(v);
                                }
                            }
                            if allowed.is_empty() {
                                return Err(format!(
                                    "topology spread on {}: maxSkew {skew} not satisfiable",
                                    short_key(&d.key)
                                ));
                            }
                            absent_ok = false;
                        }
                        TermKind::Affinity => {
                            if counter.total == 0 && t.self_match {
                                allowed = Bits::full(d.len());
                            } else {
                                for v in 0..d.len() {
                                    if counter.at_value(v as u32) > 0 {
                                        allowed.set(v);
                                    }
                                }
                            }
                            if allowed.is_empty() {
                                return Err(format!(
                                    "pod affinity on {}: no pod matches the selector",
                                    short_key(&d.key)
                                ));
                            }
                            absent_ok = false;
                        }
                        TermKind::Anti => {
                            for v in 0..d.len() {
                                if counter.at_value(v as u32) == 0 {
                                    allowed.set(v);
                                }
                            }
                            absent_ok = true;
                        }
                    }
                    merge_keyed(&mut keyed, k, allowed, absent_ok);
                    add_pin(
                        &mut pins,
                        k,
                        if matches!(t.kind, TermKind::Spread { .. }) {
                            Some(t.counter)
                        } else {
                            None
                        },
                    );
                }
            }
        }
        for &b in &blocked_by {
            let counter = &self.counters[b];
            if counter.total == 0 {
                continue;
            }
            match counter.key {
                TopoKey::Hostname => host.push(HostCheck::Zero(b)),
                TopoKey::Key(k) => {
                    let d = &self.keys[k];
                    let mut allowed = Bits::new(d.len());
                    for v in 0..d.len() {
                        if counter.at_value(v as u32) == 0 {
                            allowed.set(v);
                        }
                    }
                    merge_keyed(&mut keyed, k, allowed, true);
                    add_pin(&mut pins, k, None);
                }
            }
        }
        // A pod only counted on a key (selected by someone else's spread or
        // affinity) does not narrow the claim: as in the reference, it is
        // counted only where the claim's domain is already single.
        for &ci in &owns {
            if let TopoKey::Key(k) = self.counters[ci].key {
                add_pin(&mut pins, k, Some(ci));
            }
        }
        for &ci in &counted_by {
            if let TopoKey::Key(k) = self.counters[ci].key
                && let Some(p) = pins.iter_mut().find(|p| p.0 == k)
                && !p.1.contains(&ci)
            {
                p.1.push(ci);
            }
        }
        for (k, allowed, _) in &keyed {
            if allowed.is_empty() {
                let key = &self.keys[*k].key;
                return Err(format!(
                    "pod anti-affinity on {}: every domain has a matching pod",
                    short_key(key)
                ));
            }
        }
        let ncts = self.cts.len().max(1);
        let mut zone_mask = u128::MAX;
        for (k, allowed, _) in &keyed {
            if Some(*k) == self.zone_key {
                let mut m = 0u128;
                for zi in allowed.iter() {
                    m |= ((1u128 << ncts) - 1) << (zi * ncts);
                }
                zone_mask &= m;
            } else if Some(*k) == self.ct_key {
                let mut m = 0u128;
                for ci in allowed.iter() {
                    for zi in 0..self.zones.len() {
                        m |= 1u128 << (zi * ncts + ci);
                    }
                }
                zone_mask &= m;
            }
        }
        Ok(Attempt {
            variant,
            tolerate_soft: r.tolerate_soft,
            keyed,
            host,
            pins,
            zone_mask,
        })
    }

    fn host_ok(&self, a: &Attempt, target: Option<usize>) -> bool {
        a.host.iter().all(|h| {
            let count = |c: usize| target.map_or(0, |t| self.counters[c].at_target(t));
            match *h {
                HostCheck::Max(c, m) => count(c) <= m,
                HostCheck::Positive(c) => count(c) > 0,
                HostCheck::Zero(c) => count(c) == 0,
            }
        })
    }

    /// Is there no existing target the host checks could accept?
    fn host_excludes_all(&self, a: &Attempt) -> bool {
        let n = self.n_targets() as u32;
        a.host
            .iter()
            .any(|h| matches!(*h, HostCheck::Zero(c) if self.counters[c].nonzero_targets >= n))
    }

    fn ports_ok(ports: &[HostPort], want: &[HostPort]) -> bool {
        want.iter().all(|w| ports.iter().all(|p| !p.conflicts(w)))
    }

    fn check_node(&self, pod: usize, a: &Attempt, n: usize) -> bool {
        let node = &self.nodes[n];
        let p = &self.input.pods[pod];
        if !node
            .free
            .iter()
            .zip(&self.pod_req[pod])
            .all(|(f, r)| r <= f)
        {
            return false;
        }
        if first_untolerated(&node.taints, &p.tolerations, a.tolerate_soft).is_some() {
            return false;
        }
        if !self.host_ok(a, Some(n)) || !Self::ports_ok(&node.ports, &p.host_ports) {
            return false;
        }
        for (k, allowed, absent_ok) in &a.keyed {
            match node.values[*k] {
                Some(v) => {
                    if !allowed.get(v as usize) {
                        return false;
                    }
                }
                None => {
                    if !absent_ok {
                        return false;
                    }
                }
            }
        }
        self.variants[a.variant]
            .reqs
            .matches_labels(&node.labels)
            .is_ok()
    }

    /// Allowed offering domains of a claim after the attempt's zone and
    /// capacity-type constraints.
    fn claim_combos(&self, claim: &Claim, a: &Attempt) -> u128 {
        claim.combos & self.variants[a.variant].per_pool[claim.pool].combos & a.zone_mask
    }

    fn custom_keys_ok(&self, reqs: &Requirements, a: &Attempt) -> bool {
        a.keyed.iter().all(|(k, allowed, _)| {
            if Some(*k) == self.zone_key || Some(*k) == self.ct_key {
                return true;
            }
            let d = &self.keys[*k];
            match reqs.get(&d.key) {
                Some(r) => allowed.iter().any(|v| r.has(&d.values[v])),
                None => false,
            }
        })
    }

    /// The offering domains a claim would keep with the pod, if the pod's
    /// taints, hostname topology, ports, zones and requirements allow it.
    fn admits(&self, pod: usize, a: &Attempt, ci: usize) -> Option<u128> {
        let claim = &self.claims[ci];
        let pool = claim.pool;
        let (strict, soft) = self.classes[self.pod_class[pod]].pool_taints[pool];
        if !(strict || (a.tolerate_soft && soft)) {
            return None;
        }
        if self.variants[a.variant].per_pool[pool].err.is_some() {
            return None;
        }
        if !self.host_ok(a, Some(self.nodes.len() + ci))
            || !Self::ports_ok(&claim.ports, &self.input.pods[pod].host_ports)
        {
            return None;
        }
        let combos = self.claim_combos(claim, a);
        if combos == 0 || !self.custom_keys_ok(&claim.reqs, a) {
            return None;
        }
        if !claim.variants.contains(&a.variant)
            && claim
                .reqs
                .compatible(&self.variants[a.variant].reqs, allow_well_known)
                .is_err()
        {
            return None;
        }
        Some(combos)
    }

    /// Does the pod fit the claim's cheapest type at the same price? A
    /// quick test that needs no scan of the claim's types.
    fn zero_cost(&self, pod: usize, variant: usize, ci: usize, combos: u128) -> bool {
        let claim = &self.claims[ci];
        let p = &self.pools[claim.pool];
        let Some(t) = claim.cheapest else {
            return false;
        };
        p.min_values.is_empty()
            && self.variants[variant].per_pool[claim.pool].types.get(t)
            && fits_sum(&claim.used, &self.pod_req[pod], &p.types[t].alloc)
            && p.types[t]
                .price(combos)
                .is_some_and(|pr| pr <= claim.price + EPS)
    }

    /// The price of the claim with the pod added: the cheapest of its types
    /// that holds it, found in price order without a full scan.
    fn cheapest_fit(&mut self, pod: usize, variant: usize, ci: usize, combos: u128) -> Option<f64> {
        if !self.pools[self.claims[ci].pool].min_values.is_empty() {
            return self.claim_price(pod, variant, ci, combos);
        }
        self.cheapest_fit_type(pod, variant, ci, combos)
            .map(|x| x.0)
    }

    /// [`Self::cheapest_fit`] with the type (without minValues, which need
    /// the whole set: the cheapest type is then only a candidate).
    fn cheapest_fit_type(
        &self,
        pod: usize,
        variant: usize,
        ci: usize,
        combos: u128,
    ) -> Option<(f64, usize)> {
        let claim = &self.claims[ci];
        let p = &self.pools[claim.pool];
        let pv = &self.variants[variant].per_pool[claim.pool];
        let req = &self.pod_req[pod];
        let mut best: Option<(f64, usize)> = None;
        // Types are in order of their cheapest offering.
        for t in claim.types.iter() {
            let ty = &p.types[t];
            let Some(first) = ty.offers.first() else {
                break;
            };
            if best.is_some_and(|b| first.1 >= b.0) {
                break;
            }
            if !pv.types.get(t) || !fits_sum(&claim.used, req, &ty.alloc) {
                continue;
            }
            if let Some(pr) = ty.price(combos).filter(|_| p.lim_ok(t, &claim.reserve))
                && best.is_none_or(|b| pr < b.0)
            {
                best = Some((pr, t));
            }
        }
        best
    }

    /// Prices the claim with the pod added, leaving the remaining types in
    /// `self.scratch`.
    fn claim_price(&mut self, pod: usize, variant: usize, ci: usize, combos: u128) -> Option<f64> {
        let mut out = std::mem::take(&mut self.scratch);
        let mut base = std::mem::take(&mut self.scratch2);
        let claim = &self.claims[ci];
        base.assign_and(
            &claim.types,
            &self.variants[variant].per_pool[claim.pool].types,
        );
        let price = filter_types(
            &self.pools[claim.pool],
            &mut out,
            &base,
            &claim.used,
            &self.pod_req[pod],
            combos,
            &claim.reserve,
        );
        self.scratch = out;
        self.scratch2 = base;
        price
    }

    /// Prices a new claim in `pool` per pod it will hold, and how many
    /// identical pods it is sized for; Err explains why not.
    fn check_new(&mut self, pod: usize, a: &Attempt, pool: usize) -> Result<(f64, usize), String> {
        let p = &self.pools[pool];
        let (strict, soft) = self.classes[self.pod_class[pod]].pool_taints[pool];
        if !(strict || (a.tolerate_soft && soft)) {
            let t = first_untolerated(
                &p.taints,
                &self.input.pods[pod].tolerations,
                a.tolerate_soft,
            );
            return Err(format!(
                "NodePool {} has taint {} that the pod does not tolerate",
                p.name,
                t.map(ToString::to_string).unwrap_or_default()
            ));
        }
        let pv = &self.variants[a.variant].per_pool[pool];
        if let Some(e) = &pv.err {
            return Err(e.clone());
        }
        if !self.host_ok(a, None) {
            return Err(
                "pod affinity on kubernetes.io/hostname: a new node would hold no matching pod"
                    .into(),
            );
        }
        if p.node_limit.is_some_and(|l| p.nodes_used + 1 > l) {
            return Err(format!(
                "NodePool {} would exceed limit nodes={}",
                p.name,
                p.node_limit.unwrap_or(0)
            ));
        }
        let mut merged = p.reqs.clone();
        merged.intersect_with(&self.variants[a.variant].reqs);
        if !self.custom_keys_ok(&merged, a) {
            return Err(format!("NodePool {}: no allowed topology domain", p.name));
        }
        let combos = pv.combos & a.zone_mask;
        if pv.types.is_empty() {
            return Err(format!(
                "no instance type in NodePool {} matches the pod's requirements",
                p.name
            ));
        }
        if combos == 0 {
            return Err(format!(
                "NodePool {}: no offering in an allowed zone and capacity type",
                p.name
            ));
        }
        let price = if p.needs_full_filter() {
            let zero = vec![0; p.lim.len()];
            let mut out = std::mem::take(&mut self.scratch);
            let price = filter_types(
                p,
                &mut out,
                &pv.types,
                &p.daemon,
                &self.pod_req[pod],
                combos,
                &zero,
            );
            self.scratch = out;
            price
        } else {
            cheapest_holding(p, &pv.types, &p.daemon, &self.pod_req[pod], combos)
        };
        let Some(price) = price else {
            return Err(self.explain_new(pod, a, pool, combos));
        };
        if self.run_left > 1 && self.bulk_eligible(pod) && !p.needs_full_filter() {
            let pv = &self.variants[a.variant].per_pool[pool];
            if let Some((per_pod, n)) =
                cheapest_per_pod(p, &pv.types, &self.pod_req[pod], combos, self.run_left)
                && n > 1
                && per_pod < price - EPS
            {
                return Ok((per_pod, n));
            }
        }
        Ok((price, 1))
    }

    /// May identical pods of this class go onto one new claim together,
    /// without any topology or port check between them?
    fn bulk_eligible(&self, pod: usize) -> bool {
        let c = &self.classes[self.pod_class[pod]];
        c.terms.is_empty()
            && c.owns.is_empty()
            && c.blocked_by.is_empty()
            && self.input.pods[pod].host_ports.is_empty()
    }

    fn explain_new(&self, pod: usize, a: &Attempt, pool: usize, combos: u128) -> String {
        let p = &self.pools[pool];
        let pv = &self.variants[a.variant].per_pool[pool];
        let req = &self.pod_req[pod];
        let types: Vec<&TypeInfo> = pv.types.iter().map(|i| &p.types[i]).collect();
        for (d, name) in self.dims.iter().enumerate() {
            let need = req[d].saturating_add(p.daemon[d]);
            if need > 0 && types.iter().all(|t| t.alloc[d] < need) {
                return format!(
                    "no instance type in NodePool {} has {}",
                    p.name,
                    describe_need(name, req[d], p.daemon[d])
                );
            }
        }
        let fitting: Vec<&&TypeInfo> = types
            .iter()
            .filter(|t| fits_sum(&p.daemon, req, &t.alloc))
            .collect();
        if fitting.is_empty() {
            let wants: Vec<String> = self
                .dims
                .iter()
                .enumerate()
                .filter(|(d, _)| req[*d] > 0)
                .map(|(d, n)| describe(n, req[d]))
                .collect();
            return format!(
                "no instance type in NodePool {} fits {} together",
                p.name,
                wants.join(",")
            );
        }
        if fitting.iter().all(|t| t.price(combos).is_none()) {
            return format!(
                "no available offering in NodePool {} for the allowed zones and capacity types",
                p.name
            );
        }
        for (i, name) in p.lim_names.iter().enumerate() {
            if fitting
                .iter()
                .all(|t| t.cap_lim[i] > p.lim[i].saturating_sub(p.lim_used[i]))
            {
                return format!(
                    "NodePool {} would exceed limit {}",
                    p.name,
                    describe(name, p.lim[i])
                );
            }
        }
        if let Some((key, min, _)) = p.min_values.first() {
            return format!(
                "NodePool {}: minValues {min} of {key} not satisfiable",
                p.name
            );
        }
        format!("no instance type in NodePool {} can hold the pod", p.name)
    }

    /// Places every pod; returns the reasons of those left over.
    pub fn run(&mut self, order: &[usize]) -> Vec<(usize, String)> {
        let mut pending: Vec<usize> = order.to_vec();
        let mut reasons: Vec<(usize, String)> = Vec::new();
        loop {
            let mut failed = Vec::new();
            reasons.clear();
            let before = pending.len();
            // Pods identical to the previous one (class and requests) that
            // follow it, counting itself: a new claim is sized for them.
            let mut run = vec![1usize; pending.len()];
            for i in (0..pending.len().saturating_sub(1)).rev() {
                let (p, q) = (pending[i], pending[i + 1]);
                if self.pod_class[p] == self.pod_class[q] && self.pod_req[p] == self.pod_req[q] {
                    run[i] = run[i + 1] + 1;
                }
            }
            for (i, &pod) in pending.iter().enumerate() {
                if self.placed_node[pod].is_some() || self.placed_claim[pod].is_some() {
                    continue;
                }
                self.run_left = run[i];
                match self.place(pod) {
                    Ok(()) => {
                        if let Some((ci, n, a)) = self.bulk.take() {
                            for &q in pending[i + 1..].iter().take(n.saturating_sub(1)) {
                                self.commit(q, &a, Choice::Claim(ci));
                            }
                        }
                    }
                    Err(reason) => {
                        failed.push(pod);
                        reasons.push((pod, reason));
                    }
                }
            }
            self.run_left = 1;
            if failed.is_empty() || failed.len() == before {
                break;
            }
            pending = failed;
        }
        reasons
    }

    fn place(&mut self, pod: usize) -> Result<(), String> {
        let class = self.pod_class[pod];
        let mut last = String::from("no NodePool can launch capacity");
        for r in self.levels(class) {
            let a = match self.attempt(class, &r) {
                Ok(a) => a,
                Err(e) => {
                    last = e;
                    continue;
                }
            };
            match self.choose(pod, &a) {
                Ok(choice) => {
                    self.commit(pod, &a, choice);
                    if let Choice::New(_, n) = choice
                        && n > 1
                    {
                        let ci = self.claims.len() - 1;
                        self.bulk = Some((ci, n, a));
                    }
                    return Ok(());
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn choose(&mut self, pod: usize, a: &Attempt) -> Result<Choice, String> {
        let req_cpu = self.pod_req[pod][0];
        let skip_existing = self.host_excludes_all(a);
        if !skip_existing {
            // 1. Existing nodes and in-flight claims, best fit on cpu.
            let cands: Vec<usize> = self
                .node_index
                .range((req_cpu, 0)..)
                .map(|&(_, n)| n)
                .collect();
            for n in cands {
                if self.check_node(pod, a, n) {
                    return Ok(Choice::Node(n));
                }
            }
        }
        // 2. Claims planned earlier: zero-cost best fit, else the cheapest growth.
        let mut best: Option<(f64, usize)> = None;
        if !skip_existing {
            let mut cands = std::mem::take(&mut self.cands);
            cands.clear();
            cands.extend(
                self.claim_index
                    .range((req_cpu, 0)..)
                    .take(SCAN_LIMIT)
                    .map(|&(_, c)| c),
            );
            let hit = cands.iter().copied().find(|&ci| {
                self.admits(pod, a, ci)
                    .is_some_and(|combos| self.zero_cost(pod, a.variant, ci, combos))
            });
            if let Some(ci) = hit {
                self.cands = cands;
                return Ok(Choice::Claim(ci));
            }
            cands.clear();
            cands.extend(
                self.claim_index
                    .iter()
                    .rev()
                    .take(SCAN_LIMIT)
                    .map(|&(_, c)| c),
            );
            let mut priced = 0;
            for &ci in &cands {
                let Some(combos) = self.admits(pod, a, ci) else {
                    continue;
                };
                if let Some(price) = self.cheapest_fit(pod, a.variant, ci, combos) {
                    let delta = price - self.claims[ci].price;
                    if best.is_none_or(|(b, _)| delta < b - EPS) {
                        best = Some((delta, ci));
                    }
                    priced += 1;
                    if priced >= GROW_CANDIDATES {
                        break;
                    }
                }
            }
            self.cands = cands;
        }
        // 3. A new claim from the first NodePool, in weight order, that can hold it.
        let mut errors = Vec::new();
        for pool in 0..self.pools.len() {
            match self.check_new(pod, a, pool) {
                Ok((per_pod, n)) => {
                    return Ok(match best {
                        Some((delta, ci)) if delta <= per_pod + EPS => Choice::Claim(ci),
                        _ => Choice::New(pool, n),
                    });
                }
                Err(e) => errors.push(e),
            }
        }
        if let Some((_, ci)) = best {
            return Ok(Choice::Claim(ci));
        }
        if errors.is_empty() {
            errors.push("no NodePool can launch capacity".into());
        }
        errors.dedup();
        Err(errors.join("; "))
    }

    fn commit(&mut self, pod: usize, a: &Attempt, choice: Choice) {
        let class = self.pod_class[pod];
        let req = self.pod_req[pod].clone();
        let target = match choice {
            Choice::Node(n) => {
                let node = &mut self.nodes[n];
                self.node_index.remove(&(node.free[0], n));
                for (f, r) in node.free.iter_mut().zip(&req) {
                    *f -= r;
                }
                node.ports
                    .extend(self.input.pods[pod].host_ports.iter().cloned());
                self.node_index.insert((node.free[0], n));
                self.placed_node[pod] = Some(n);
                n
            }
            Choice::Claim(ci) => {
                self.join_claim(pod, a, ci);
                self.nodes.len() + ci
            }
            Choice::New(pool, _) => {
                let p = &self.pools[pool];
                let claim = Claim {
                    pool,
                    reqs: p.reqs.clone(),
                    variants: Vec::new(),
                    types: Bits::full(p.types.len()),
                    combos: u128::MAX,
                    used: p.daemon.clone(),
                    pods: Vec::new(),
                    ports: Vec::new(),
                    reserve: vec![0; p.lim.len()],
                    price: 0.0,
                    cheapest: None,
                    offered: 0,
                    slack_key: 0,
                    mem_key: 0,
                    watch: Vec::new(),
                    cursor: vec![0; p.by_dim.len()],
                    cap_cursor: vec![0; p.cap_desc.len()],
                };
                self.pools[pool].nodes_used += 1;
                self.claims.push(claim);
                let ci = self.claims.len() - 1;
                self.claim_index.insert((0, ci));
                self.mem_index.insert((0, ci));
                self.join_claim(pod, a, ci);
                self.nodes.len() + ci
            }
        };
        // Hostname counters the pod constrains or owns pin its neighbours.
        if target >= self.nodes.len() {
            let ci = target - self.nodes.len();
            let c = &self.classes[class];
            let watched: Vec<usize> = c
                .terms
                .iter()
                .filter(|t| t.key == TopoKey::Hostname)
                .map(|t| t.counter)
                .chain(
                    c.owns
                        .iter()
                        .copied()
                        .filter(|&o| self.counters[o].key == TopoKey::Hostname),
                )
                .collect();
            for w in watched {
                if !self.claims[ci].watch.contains(&w) {
                    self.claims[ci].watch.push(w);
                }
            }
        }
        // Topology counts.
        let counted: Vec<usize> = self.classes[class].counted_by.clone();
        let owns: Vec<usize> = self.classes[class].owns.clone();
        for c in counted.into_iter().chain(owns) {
            let v = match self.counters[c].key {
                TopoKey::Hostname => None,
                TopoKey::Key(k) => self.target_value(target, k),
            };
            self.counters[c].record(target, v);
        }
    }

    /// The single value of `key` at a target, if it has one.
    fn target_value(&self, target: usize, key: usize) -> Option<u32> {
        if target < self.nodes.len() {
            return self.nodes[target].values[key];
        }
        let claim = &self.claims[target - self.nodes.len()];
        let ncts = self.cts.len().max(1);
        let mut found = None;
        if Some(key) == self.zone_key {
            for zi in 0..self.zones.len() {
                if (claim.offered >> (zi * ncts)) & ((1u128 << ncts) - 1) != 0 {
                    if found.is_some() {
                        return None;
                    }
                    found = Some(zi as u32);
                }
            }
            return found;
        }
        let vals = self.claim_values(claim, key);
        if vals.count() == 1 {
            vals.iter().next().map(|v| v as u32)
        } else {
            None
        }
    }

    fn claim_values(&self, claim: &Claim, key: usize) -> Bits {
        let d = &self.keys[key];
        let mut out = Bits::new(d.len());
        let ncts = self.cts.len().max(1);
        let offered = claim.offered;
        if Some(key) == self.zone_key {
            for zi in 0..self.zones.len() {
                if (offered >> (zi * ncts)) & ((1u128 << ncts) - 1) != 0 {
                    out.set(zi);
                }
            }
        } else if Some(key) == self.ct_key {
            for ci in 0..self.cts.len() {
                if (0..self.zones.len()).any(|zi| offered & (1u128 << (zi * ncts + ci)) != 0) {
                    out.set(ci);
                }
            }
        } else if let Some(r) = claim.reqs.get(&d.key) {
            for (i, v) in d.values.iter().enumerate() {
                if r.has(v) {
                    out.set(i);
                }
            }
        }
        out
    }

    fn join_claim(&mut self, pod: usize, a: &Attempt, ci: usize) {
        let combos = self.claim_combos(&self.claims[ci], a);
        // The pod was checked to fit.
        self.narrow(pod, a.variant, ci, combos);
        self.pod_relax[pod] = Some((a.variant, a.tolerate_soft));
        self.claims[ci]
            .ports
            .extend(self.input.pods[pod].host_ports.iter().cloned());
        // Restrict custom topology keys to the allowed values.
        for (k, allowed, _) in &a.keyed {
            if Some(*k) == self.zone_key || Some(*k) == self.ct_key {
                continue;
            }
            let d = &self.keys[*k];
            let vals: Vec<String> = allowed.iter().map(|v| d.values[v].clone()).collect();
            self.claims[ci]
                .reqs
                .add(&d.key, Requirement::in_values(vals));
        }
        // Pin multi-valued keys the pod is constrained or counted on.
        for (k, counters) in &a.pins {
            let vals = self.claim_values(&self.claims[ci], *k);
            let allowed = a.keyed.iter().find(|(kk, _, _)| kk == k).map(|x| &x.1);
            let cands: Vec<usize> = vals
                .iter()
                .filter(|v| allowed.is_none_or(|al| al.get(*v)))
                .collect();
            if cands.len() <= 1 && vals.count() <= 1 {
                continue;
            }
            let best = cands
                .iter()
                .map(|&v| {
                    let count: u64 = counters
                        .iter()
                        .map(|&c| u64::from(self.counters[c].at_value(v as u32)))
                        .sum();
                    let price = self.pin_price(ci, *k, v).unwrap_or(f64::INFINITY);
                    (count, price, v)
                })
                .min_by(|x, y| x.0.cmp(&y.0).then(x.1.total_cmp(&y.1)).then(x.2.cmp(&y.2)));
            if let Some((_, _, v)) = best {
                self.pin(ci, *k, v);
            }
        }
        self.refresh_claim(ci);
    }

    /// Adds a pod to a claim's requests and narrows the claim's types to
    /// those that still hold it under `combos`. The pod was checked to fit.
    fn narrow(&mut self, pod: usize, variant: usize, ci: usize, combos: u128) {
        let mut offered = std::mem::take(&mut self.scratch2);
        let claim = &mut self.claims[ci];
        let pool = &self.pools[claim.pool];
        if !claim.variants.contains(&variant) {
            claim.reqs.intersect_with(&self.variants[variant].reqs);
            claim.variants.push(variant);
            claim
                .types
                .and_with(&self.variants[variant].per_pool[claim.pool].types);
        }
        if claim.combos != combos {
            pool.offered_types(combos, &mut offered);
            claim.types.and_with(&offered);
            claim.combos = combos;
        }
        add_into(&mut claim.used, &self.pod_req[pod]);
        claim.pods.push(pod);
        self.placed_claim[pod] = Some(ci);
        self.scratch2 = offered;
        self.prune(ci);
        let claim = &mut self.claims[ci];
        claim.offered = offered_domains(&self.pools[claim.pool], &claim.types, claim.combos);
    }

    /// Removes from a claim's types those too small for its requests (and,
    /// under limits or minValues, those the pool's limits or minValues
    /// exclude). False if no type would remain; the types are then left
    /// unusable and the caller restores them.
    fn prune(&mut self, ci: usize) -> bool {
        let claim = &mut self.claims[ci];
        let pool = &self.pools[claim.pool];
        for (d, order) in pool.by_dim.iter().enumerate() {
            let need = claim.used[d];
            let cur = &mut claim.cursor[d];
            while let Some(&t) = order.get(*cur as usize) {
                if pool.types[t as usize].alloc[d] >= need {
                    break;
                }
                claim.types.clear(t as usize);
                *cur += 1;
            }
        }
        // Under limits: the largest types first, while they exceed what the
        // pool has left (plus what this claim already holds).
        for (i, order) in pool.cap_desc.iter().enumerate() {
            let room = pool.lim[i]
                .saturating_sub(pool.lim_used[i])
                .saturating_add(claim.reserve[i]);
            let cur = &mut claim.cap_cursor[i];
            while let Some(&t) = order.get(*cur as usize) {
                let t = t as usize;
                if claim.types.get(t) && pool.types[t].cap_lim[i] <= room {
                    break;
                }
                claim.types.clear(t);
                *cur += 1;
            }
        }
        if !pool.needs_full_filter() {
            return !claim.types.is_empty();
        }
        let mut out = std::mem::take(&mut self.scratch);
        let claim = &self.claims[ci];
        let zero = vec![0i64; self.dims.len()];
        let ok = filter_types(
            &self.pools[claim.pool],
            &mut out,
            &claim.types,
            &claim.used,
            &zero,
            claim.combos,
            &claim.reserve,
        )
        .is_some();
        if ok {
            let claim = &mut self.claims[ci];
            claim.types.and_with(&out);
        }
        self.scratch = out;
        ok
    }

    fn value_mask(&self, key: usize, v: usize) -> u128 {
        let ncts = self.cts.len().max(1);
        if Some(key) == self.zone_key {
            ((1u128 << ncts) - 1) << (v * ncts)
        } else if Some(key) == self.ct_key {
            (0..self.zones.len()).fold(0u128, |m, zi| m | 1u128 << (zi * ncts + v))
        } else {
            u128::MAX
        }
    }

    fn pin_price(&self, ci: usize, key: usize, v: usize) -> Option<f64> {
        let claim = &self.claims[ci];
        let combos = claim.combos & self.value_mask(key, v);
        claim
            .types
            .iter()
            .filter_map(|t| self.pools[claim.pool].types[t].price(combos))
            .min_by(f64::total_cmp)
    }

    fn pin(&mut self, ci: usize, key: usize, v: usize) {
        let mask = self.value_mask(key, v);
        let value = self.keys[key].values[v].clone();
        let kname = self.keys[key].key.clone();
        let mut offered = std::mem::take(&mut self.scratch2);
        let claim = &mut self.claims[ci];
        let pool = &self.pools[claim.pool];
        claim.combos &= mask;
        claim.reqs.add(&kname, Requirement::in_values([value]));
        pool.offered_types(claim.combos, &mut offered);
        claim.types.and_with(&offered);
        claim.offered = offered_domains(pool, &claim.types, claim.combos);
        self.scratch2 = offered;
    }

    /// Recomputes a claim's price, cheapest type, index entry and limit
    /// reservation. Under limits a claim reserves, per limited resource, the
    /// capacity of its largest remaining type (any of them may be launched).
    fn refresh_claim(&mut self, ci: usize) {
        let claim = &mut self.claims[ci];
        let p = &self.pools[claim.pool];
        let mut reserve = vec![0i64; p.lim.len()];
        for (i, order) in p.cap_desc.iter().enumerate() {
            let cur = &mut claim.cap_cursor[i];
            while let Some(&t) = order.get(*cur as usize) {
                if claim.types.get(t as usize) {
                    reserve[i] = p.types[t as usize].cap_lim[i];
                    break;
                }
                *cur += 1;
            }
        }
        let claim = &self.claims[ci];
        let mut best: Option<(f64, usize)> = None;
        for t in claim.types.iter() {
            let ty = &p.types[t];
            // Types are in order of their cheapest offering.
            if best.is_some_and(|(bp, _)| ty.offers.first().is_none_or(|o| o.1 > bp + EPS)) {
                break;
            }
            if let Some(pr) = ty.price(claim.combos) {
                let better = match best {
                    None => true,
                    Some((bp, bt)) => {
                        pr < bp - EPS || (pr <= bp + EPS && ty.alloc[0] > p.types[bt].alloc[0])
                    }
                };
                if better {
                    best = Some((pr, t));
                }
            }
        }
        let slack = best.map_or(0, |(_, t)| p.types[t].alloc[0]) - claim.used[0];
        let old_key = claim.slack_key;
        let old_reserve = claim.reserve.clone();
        let offered = offered_domains(p, &claim.types, claim.combos);
        let pool = claim.pool;
        // A claim no type could grow by even the smallest pod leaves the index.
        let full = !claim
            .types
            .iter()
            .any(|t| fits_sum(&claim.used, &self.min_req, &p.types[t].alloc));
        let mem_slack = best.map_or(0, |(_, t)| p.types[t].alloc[1]) - claim.used[1];
        let old_mem = claim.mem_key;
        self.claim_index.remove(&(old_key, ci));
        self.mem_index.remove(&(old_mem, ci));
        if !full {
            self.claim_index.insert((slack, ci));
            self.mem_index.insert((mem_slack, ci));
        }
        let p = &mut self.pools[pool];
        for i in 0..p.lim_used.len() {
            p.lim_used[i] += reserve[i] - old_reserve[i];
        }
        let claim = &mut self.claims[ci];
        claim.price = best.map_or(0.0, |b| b.0);
        claim.cheapest = best.map(|b| b.1);
        claim.offered = offered;
        claim.slack_key = slack;
        claim.mem_key = mem_slack;
        claim.reserve = reserve;
    }

    /// The types a claim may launch: every remaining type (under limits the
    /// claim reserves the largest of them).
    pub fn launch_types(&self, ci: usize) -> impl Iterator<Item = usize> + '_ {
        self.claims[ci].types.iter()
    }

    pub fn node_name(&self, n: usize) -> &str {
        &self.nodes[n].name
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

fn short_key(key: &str) -> &str {
    match key {
        ZONE => "zone",
        HOSTNAME => "hostname",
        CAPACITY_TYPE => "capacity type",
        other => other,
    }
}

fn describe_need(name: &str, req: i64, daemon: i64) -> String {
    if daemon > 0 {
        format!(
            "{} (plus {} of daemonsets)",
            describe(name, req),
            describe(name, daemon)
        )
    } else {
        describe(name, req)
    }
}

fn merge_keyed(keyed: &mut Vec<(usize, Bits, bool)>, k: usize, allowed: Bits, absent_ok: bool) {
    if let Some(e) = keyed.iter_mut().find(|e| e.0 == k) {
        let prev = e.1.clone();
        e.1.assign_and(&prev, &allowed);
        e.2 &= absent_ok;
    } else {
        keyed.push((k, allowed, absent_ok));
    }
}

fn add_pin(pins: &mut Vec<(usize, Vec<usize>)>, k: usize, counter: Option<usize>) {
    let i = match pins.iter().position(|p| p.0 == k) {
        Some(i) => i,
        None => {
            pins.push((k, Vec::new()));
            pins.len() - 1
        }
    };
    if let Some(c) = counter
        && !pins[i].1.contains(&c)
    {
        pins[i].1.push(c);
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

/// The type that holds up to `run` copies of a pod at the lowest price per
/// pod it holds: (price per pod, pods it holds).
fn cheapest_per_pod(
    p: &Pool,
    types: &Bits,
    req: &[i64],
    combos: u128,
    run: usize,
) -> Option<(f64, usize)> {
    let limited = !p.lim.is_empty();
    let zero = [0i64; 0];
    let mut best: Option<(f64, usize, f64)> = None;
    for t in types.iter() {
        let ty = &p.types[t];
        if ty.offers.is_empty() {
            break;
        }
        let mut n = run;
        for ((a, d), r) in ty.alloc.iter().zip(&p.daemon).zip(req) {
            if *r > 0 {
                n = n.min(usize::try_from((a - d).max(0) / r).unwrap_or(0));
            } else if a < d {
                n = 0;
            }
        }
        if n == 0 || (limited && !p.lim_ok(t, &zero)) {
            continue;
        }
        let Some(price) = ty.price(combos) else {
            continue;
        };
        let per_pod = price / n as f64;
        if best.is_none_or(|(b, _, bp)| per_pod < b - EPS || (per_pod <= b + EPS && price < bp)) {
            best = Some((per_pod, n, price));
        }
    }
    best.map(|(per_pod, n, _)| (per_pod, n))
}

/// The offering domains within `combos` of a set of types.
fn offered_domains(p: &Pool, types: &Bits, combos: u128) -> u128 {
    let reachable = combos & p.all_offered;
    let mut offered = 0u128;
    for t in types.iter() {
        offered |= p.types[t].offer_mask & combos;
        if offered == reachable {
            break;
        }
    }
    offered
}

/// The cheapest price among `types` that hold `used + req` with an available
/// offering in `combos` (pools without limits or minValues). Types are in
/// order of their cheapest offering, so the scan stops early.
fn cheapest_holding(
    p: &Pool,
    types: &Bits,
    used: &[i64],
    req: &[i64],
    combos: u128,
) -> Option<f64> {
    let limited = !p.lim.is_empty();
    let zero = [0i64; 0];
    let mut best: Option<f64> = None;
    for t in types.iter() {
        let ty = &p.types[t];
        let Some(first) = ty.offers.first() else {
            break;
        };
        if best.is_some_and(|b| first.1 >= b) {
            break;
        }
        if fits_sum(used, req, &ty.alloc)
            && (!limited || p.lim_ok(t, &zero))
            && let Some(pr) = ty.price(combos)
        {
            best = Some(best.map_or(pr, |b: f64| b.min(pr)));
        }
    }
    best
}

/// Filters `base` into `out`: the types that hold `used + req`, have an
/// available offering in `combos`, fit the pool's remaining limits (plus the
/// claim's own `reserve`) and keep minValues. Returns the cheapest price.
fn filter_types(
    p: &Pool,
    out: &mut Bits,
    base: &Bits,
    used: &[i64],
    req: &[i64],
    combos: u128,
    reserve: &[i64],
) -> Option<f64> {
    let mut best: Option<f64> = None;
    out.copy_from(base);
    for ti in base.iter() {
        let t = &p.types[ti];
        let lim_ok = t.cap_lim.iter().enumerate().all(|(i, cap)| {
            *cap <= p.lim[i]
                .saturating_sub(p.lim_used[i])
                .saturating_add(reserve.get(i).copied().unwrap_or(0))
        });
        let price = if lim_ok && fits_sum(used, req, &t.alloc) {
            t.price(combos)
        } else {
            None
        };
        match price {
            Some(pr) => best = Some(best.map_or(pr, |b: f64| b.min(pr))),
            None => out.clear(ti),
        }
    }
    if best.is_some() && p.min_values_ok(out) {
        best
    } else {
        None
    }
}

impl Pool {
    /// Do the types keep at least minValues distinct values per key?
    fn min_values_ok(&self, types: &Bits) -> bool {
        self.min_values.iter().all(|(_, min, ids)| {
            let mut seen: Vec<u32> = Vec::new();
            for t in types.iter() {
                if !seen.contains(&ids[t]) {
                    seen.push(ids[t]);
                    if seen.len() >= *min {
                        return true;
                    }
                }
            }
            seen.len() >= *min
        })
    }
}

/// At most this many rounds of repacking.
const REPACK_ROUNDS: usize = 3;

/// A pod's planned move to another claim.
struct Move {
    pod: usize,
    to: usize,
    mask: u128,
}

impl Solver<'_> {
    /// Repacks planned NodeClaims: for each claim, most expensive first, moves
    /// pods that are free to move into spare room other claims already pay
    /// for, when that lets the claim drop to a cheaper type or go away.
    /// Never raises the total price: every move is free for its receiver.
    pub fn improve(&mut self) {
        for _ in 0..REPACK_ROUNDS {
            let mut order: Vec<usize> = (0..self.claims.len())
                .filter(|&c| !self.claims[c].pods.is_empty())
                .collect();
            order.sort_by(|&a, &b| {
                self.claims[b]
                    .price
                    .total_cmp(&self.claims[a].price)
                    .then(a.cmp(&b))
            });
            let mut gained = false;
            for ci in order {
                gained |= self.shrink(ci);
            }
            if !gained {
                break;
            }
        }
    }

    /// May this pod move between claims without changing any topology
    /// count a constraint depends on?
    fn movable(&self, pod: usize) -> bool {
        let c = &self.classes[self.pod_class[pod]];
        self.pod_relax[pod].is_some()
            && self.input.pods[pod].host_ports.is_empty()
            && c.owns.is_empty()
            && c.terms.iter().all(|t| t.key != TopoKey::Hostname)
    }

    /// The values of the non-hostname topology keys a movable pod is
    /// constrained or counted on at its claim; None if the pod may not leave
    /// it (a value is not settled, or neighbours watch its hostname count).
    fn keys_of(&self, pod: usize, from: usize) -> Option<Vec<(usize, u32)>> {
        let c = &self.classes[self.pod_class[pod]];
        let src = &self.claims[from];
        let mut out = Vec::new();
        // Keys the pod is constrained on: the claim was narrowed to one value.
        let constrained = c
            .blocked_by
            .iter()
            .chain(&c.owns)
            .map(|&k| self.counters[k].key)
            .chain(c.terms.iter().map(|t| t.key));
        for key in constrained {
            if let TopoKey::Key(k) = key
                && !out.iter().any(|(kk, _)| *kk == k)
            {
                out.push((k, self.target_value(self.nodes.len() + from, k)?));
            }
        }
        // Keys it is only counted on: it was counted where the value is
        // single, and stays in that domain; elsewhere it was not counted.
        for &ctr in &c.counted_by {
            if let TopoKey::Key(k) = self.counters[ctr].key
                && !out.iter().any(|(kk, _)| *kk == k)
                && let Some(v) = self.target_value(self.nodes.len() + from, k)
            {
                out.push((k, v));
            }
        }
        let watched = c
            .counted_by
            .iter()
            .chain(&c.blocked_by)
            .any(|&k| self.counters[k].key == TopoKey::Hostname && src.watch.contains(&k));
        (!watched).then_some(out)
    }

    /// May claim `to` take the movable pod whose topology values are `keys`,
    /// resources aside? Returns the offering domains the claim keeps: a
    /// claim not yet settled on a zone or capacity type the pod needs is
    /// narrowed to it.
    fn can_host(&self, pod: usize, to: usize, keys: &[(usize, u32)]) -> Option<u128> {
        self.host_mask(pod, to, keys)
    }

    fn host_mask(&self, pod: usize, to: usize, keys: &[(usize, u32)]) -> Option<u128> {
        let (variant, soft) = self.pod_relax[pod]?;
        let c = &self.classes[self.pod_class[pod]];
        let dst = &self.claims[to];
        if dst.pods.is_empty() || dst.cheapest.is_none() {
            return None;
        }
        let (strict, tolerated) = c.pool_taints[dst.pool];
        if !(strict || (soft && tolerated)) {
            return None;
        }
        let pv = &self.variants[variant].per_pool[dst.pool];
        if pv.err.is_some() || dst.combos & pv.combos == 0 {
            return None;
        }
        if c.counted_by
            .iter()
            .chain(&c.blocked_by)
            .any(|&k| self.counters[k].key == TopoKey::Hostname && dst.watch.contains(&k))
        {
            return None;
        }
        let mut mask = dst.combos & pv.combos;
        for &(k, v) in keys {
            if Some(k) == self.zone_key || Some(k) == self.ct_key {
                // Keep (or narrow the claim to) the pod's domain.
                let vm = self.value_mask(k, v as usize);
                if dst.offered & vm == 0 {
                    return None;
                }
                mask &= vm;
            } else if self.target_value(self.nodes.len() + to, k) != Some(v) {
                return None;
            }
        }
        if mask & dst.offered == 0 {
            return None;
        }
        let compatible = dst.variants.contains(&variant)
            || dst
                .reqs
                .compatible(&self.variants[variant].reqs, allow_well_known)
                .is_ok();
        compatible.then_some(mask)
    }

    /// The larger of the shares of cpu and memory of claim `to`'s cheapest
    /// type left free once the pod is added.
    fn leftover(&self, pod: usize, to: usize) -> f64 {
        match self.claims[to].cheapest {
            Some(t) => self.leftover_on(pod, to, t),
            None => f64::INFINITY,
        }
    }

    /// [`Self::leftover`] on type `t` of claim `to`'s pool.
    fn leftover_on(&self, pod: usize, to: usize, t: usize) -> f64 {
        let dst = &self.claims[to];
        let alloc = &self.pools[dst.pool].types[t].alloc;
        (0..2)
            .filter(|&d| alloc[d] > 0)
            .map(|d| (alloc[d] - dst.used[d] - self.pod_req[pod][d]) as f64 / alloc[d] as f64)
            .fold(0.0, f64::max)
    }

    /// Is the pod's memory a larger share of the pool types' memory than its
    /// cpu is of their cpu?
    fn mem_heavy(&self, pod: usize) -> bool {
        let r = &self.pod_req[pod];
        let (c, m) = (self.mean_alloc[0], self.mean_alloc[1]);
        c > 0.0 && m > 0.0 && r[1] as f64 / m > r[0] as f64 / c
    }

    /// Do the pod's requests fit the spare room of claim `to`'s cheapest type?
    fn fits_cheapest(&self, pod: usize, to: usize) -> bool {
        let dst = &self.claims[to];
        dst.cheapest.is_some_and(|t| {
            fits_sum(
                &dst.used,
                &self.pod_req[pod],
                &self.pools[dst.pool].types[t].alloc,
            )
        })
    }

    /// Does the pod fit claim `to`'s cheapest type at the same price, on top
    /// of `extra` load already planned onto it?
    fn fits_free(&self, pod: usize, to: usize, extra: &[i64], mask: u128) -> bool {
        let Some((variant, _)) = self.pod_relax[pod] else {
            return false;
        };
        let dst = &self.claims[to];
        let p = &self.pools[dst.pool];
        let Some(t) = dst.cheapest else {
            return false;
        };
        let req = &self.pod_req[pod];
        let combos = mask;
        p.min_values.is_empty()
            && self.variants[variant].per_pool[dst.pool].types.get(t)
            && (0..req.len()).all(|d| dst.used[d] + extra[d] + req[d] <= p.types[t].alloc[d])
            && p.types[t]
                .price(combos)
                .is_some_and(|pr| pr <= dst.price + EPS)
    }

    /// Types a claim's pods and offering domains allow, before resources.
    fn base_types(&self, ci: usize) -> Bits {
        let claim = &self.claims[ci];
        let pool = &self.pools[claim.pool];
        let mut base = Bits::new(pool.types.len());
        pool.offered_types(claim.combos, &mut base);
        for &v in &claim.variants {
            base.and_with(&self.variants[v].per_pool[claim.pool].types);
        }
        base
    }

    /// Tries to make one claim cheaper (or empty) by moving pods out.
    fn shrink(&mut self, ci: usize) -> bool {
        if !self.claims[ci].pods.iter().any(|&q| self.movable(q)) {
            return false;
        }
        let before = self.claims[ci].price;
        let base = self.base_types(ci);
        let pool = self.claims[ci].pool;
        let p = &self.pools[pool];
        let combos = self.claims[ci].combos;
        // The next cheaper type, or no type at all (empty the claim).
        let target = base
            .iter()
            .filter_map(|t| p.types[t].price(combos).map(|pr| (pr, t)))
            .filter(|(pr, _)| *pr < before - EPS)
            .max_by(|a, b| {
                a.0.total_cmp(&b.0)
                    .then(p.types[a.1].alloc[0].cmp(&p.types[b.1].alloc[0]))
            });
        let all_movable = self.claims[ci].pods.iter().all(|&q| self.movable(q));
        let dims = self.dims.len();
        let used = &self.claims[ci].used;
        let excess: Vec<i64> = match target {
            Some((_, t)) if !all_movable || self.claims[ci].pods.len() > 1 => {
                (0..dims).map(|d| used[d] - p.types[t].alloc[d]).collect()
            }
            _ if all_movable => (0..dims).map(|d| used[d] - p.daemon[d]).collect(),
            _ => return false,
        };
        if excess.iter().all(|e| *e <= 0) {
            return false;
        }
        let mut cands: Vec<usize> = self.claims[ci]
            .pods
            .iter()
            .copied()
            .filter(|&q| self.movable(q))
            .collect();
        let covers =
            |q: usize, rem: &[i64]| (0..dims).all(|d| rem[d] <= 0 || self.pod_req[q][d] >= rem[d]);
        // A single pod that covers the excess, smallest first; else the
        // largest pods first.
        let size = |q: usize| (self.pod_req[q][0], self.pod_req[q][1], q);
        cands.sort_by_key(|&q| {
            (
                !covers(q, &excess),
                if covers(q, &excess) {
                    size(q)
                } else {
                    (-size(q).0, -size(q).1, q)
                },
            )
        });
        let mut remaining = excess.clone();
        let mut moves: Vec<Move> = Vec::new();
        let zero = vec![0i64; dims];
        let mut extra: HashMap<usize, (Vec<i64>, usize)> = HashMap::new();
        for q in cands {
            if remaining.iter().all(|e| *e <= 0) {
                break;
            }
            if !(0..dims).any(|d| remaining[d] > 0 && self.pod_req[q][d] > 0) {
                continue;
            }
            let variant = self.pod_relax[q].map_or(usize::MAX, |r| r.0);
            let Some(keys) = self.keys_of(q, ci) else {
                continue;
            };
            let (index, need) = if self.mem_heavy(q) {
                (&self.mem_index, self.pod_req[q][1])
            } else {
                (&self.claim_index, self.pod_req[q][0])
            };
            let dest = index
                .range((need, 0)..)
                .take(SHRINK_SCAN)
                .map(|&(_, c)| c)
                .find(|&to| {
                    let (load, v) = extra.get(&to).map_or((&zero, variant), |(l, v)| (l, *v));
                    to != ci
                        && v == variant
                        && self
                            .can_host(q, to, &keys)
                            .is_some_and(|m| self.fits_free(q, to, load, m))
                });
            if let Some(to) = dest
                && let Some(mask) = self.can_host(q, to, &keys)
            {
                let e = extra.entry(to).or_insert_with(|| (vec![0; dims], variant));
                add_into(&mut e.0, &self.pod_req[q]);
                for (r, x) in remaining.iter_mut().zip(&self.pod_req[q]) {
                    *r -= x;
                }
                moves.push(Move { pod: q, to, mask });
            }
        }
        if remaining.iter().any(|e| *e > 0) {
            return false;
        }
        for m in &moves {
            self.move_pod(m.pod, ci, m.to, m.mask);
        }
        self.recompute_types(ci);
        self.claims[ci].price < before - EPS || self.claims[ci].pods.is_empty()
    }

    /// Moves a pod between claims (checked by [`Self::can_host`]).
    fn move_pod(&mut self, pod: usize, from: usize, to: usize, mask: u128) {
        self.take_out(pod, from);
        if !self.put(pod, to, mask) {
            // Checked before; should it fail, the pod goes back.
            let back = self.claims[from].combos;
            self.put(pod, from, back);
        }
    }

    /// Removes a movable pod from a claim (types are recomputed by the caller).
    fn take_out(&mut self, pod: usize, from: usize) {
        let req = self.pod_req[pod].clone();
        let src = &mut self.claims[from];
        src.pods.retain(|&q| q != pod);
        for (u, r) in src.used.iter_mut().zip(&req) {
            *u -= r;
        }
        self.placed_claim[pod] = None;
        let counted = self.classes[self.pod_class[pod]].counted_by.clone();
        for c in counted {
            if self.counters[c].key == TopoKey::Hostname {
                self.counters[c].unrecord(self.nodes.len() + from);
            }
        }
    }

    /// Adds a movable pod to a claim (checked by [`Self::can_host`]).
    fn put(&mut self, pod: usize, to: usize, mask: u128) -> bool {
        let Some((variant, _)) = self.pod_relax[pod] else {
            return false;
        };
        let combos = mask;
        if self.cheapest_fit(pod, variant, to, combos).is_none() {
            return false;
        }
        self.narrow(pod, variant, to, combos);
        let counted = self.classes[self.pod_class[pod]].counted_by.clone();
        for c in counted {
            if self.counters[c].key == TopoKey::Hostname {
                self.counters[c].record(self.nodes.len() + to, None);
            }
        }
        self.refresh_claim(to);
        true
    }

    /// Recomputes the types a claim can use after pods left it; an empty
    /// claim is dropped.
    fn recompute_types(&mut self, ci: usize) {
        if self.claims[ci].pods.is_empty() {
            let key = self.claims[ci].slack_key;
            self.claim_index.remove(&(key, ci));
            let key = self.claims[ci].mem_key;
            self.mem_index.remove(&(key, ci));
            let pool = self.claims[ci].pool;
            let reserve = std::mem::take(&mut self.claims[ci].reserve);
            let p = &mut self.pools[pool];
            for (u, r) in p.lim_used.iter_mut().zip(&reserve) {
                *u -= r;
            }
            p.nodes_used -= 1;
            self.claims[ci].reserve = vec![0; reserve.len()];
            self.claims[ci].types = Bits::new(0);
            self.claims[ci].price = 0.0;
            self.claims[ci].cheapest = None;
            return;
        }
        let base = self.base_types(ci);
        let claim = &mut self.claims[ci];
        let saved = std::mem::replace(&mut claim.types, base);
        claim.cursor.iter_mut().for_each(|c| *c = 0);
        claim.cap_cursor.iter_mut().for_each(|c| *c = 0);
        if !self.prune(ci) {
            // Pods only left the claim, so its former types still hold them.
            self.claims[ci].types = saved;
        }
        self.refresh_claim(ci);
    }
}

/// The mutable state of a solve, saved to undo a repacking attempt.
struct Saved {
    claims: Vec<Claim>,
    index: BTreeSet<(i64, usize)>,
    mem_index: BTreeSet<(i64, usize)>,
    counters: Vec<Counter>,
    lim_used: Vec<Vec<i64>>,
    nodes_used: Vec<i64>,
    placed_claim: Vec<Option<usize>>,
}

impl Solver<'_> {
    fn save(&self) -> Saved {
        Saved {
            claims: self.claims.clone(),
            index: self.claim_index.clone(),
            mem_index: self.mem_index.clone(),
            counters: self.counters.clone(),
            lim_used: self.pools.iter().map(|p| p.lim_used.clone()).collect(),
            nodes_used: self.pools.iter().map(|p| p.nodes_used).collect(),
            placed_claim: self.placed_claim.clone(),
        }
    }

    fn restore(&mut self, s: Saved) {
        self.claims = s.claims;
        self.claim_index = s.index;
        self.mem_index = s.mem_index;
        self.counters = s.counters;
        for ((p, l), n) in self.pools.iter_mut().zip(s.lim_used).zip(s.nodes_used) {
            p.lim_used = l;
            p.nodes_used = n;
        }
        self.placed_claim = s.placed_claim;
    }

    pub fn total_price(&self) -> f64 {
        self.claims
            .iter()
            .filter(|c| !c.pods.is_empty())
            .map(|c| c.price)
            .sum()
    }

    /// Takes every movable pod off the planned claims and puts them back,
    /// largest share of a node first, now that every claim the first pass
    /// had to open is known: spare room on claims opened late (often for
    /// anti-affine pods) is then filled by large pods too. Kept only if it
    /// lowers the price.
    pub fn refill(&mut self) {
        let before = self.total_price();
        let saved = self.save();
        let mut stripped: Vec<(usize, Vec<(usize, u32)>)> = Vec::new();
        for ci in 0..self.claims.len() {
            let pods = self.claims[ci].pods.clone();
            let mut touched = false;
            for q in pods {
                if !self.movable(q) {
                    continue;
                }
                let Some(keys) = self.keys_of(q, ci) else {
                    continue;
                };
                self.take_out(q, ci);
                stripped.push((q, keys));
                touched = true;
            }
            if touched {
                self.recompute_types(ci);
            }
        }
        // Largest share of an average instance type first.
        let dims = self.dims.len();
        let mut norm = vec![0f64; dims];
        for p in &self.pools {
            for t in &p.types {
                for (n, a) in norm.iter_mut().zip(&t.alloc) {
                    *n += *a as f64;
                }
            }
        }
        let share = |q: usize| -> f64 {
            (0..dims)
                .filter(|&d| norm[d] > 0.0)
                .map(|d| self.pod_req[q][d] as f64 / norm[d])
                .fold(0.0, f64::max)
        };
        stripped.sort_by(|a, b| share(b.0).total_cmp(&share(a.0)).then(a.0.cmp(&b.0)));
        for (q, keys) in &stripped {
            if !self.reinsert(*q, keys) {
                self.restore(saved);
                return;
            }
        }
        if self.total_price() > before - EPS {
            self.restore(saved);
        }
    }

    /// Puts a stripped pod back: zero-cost best fit, else the cheapest growth.
    fn reinsert(&mut self, pod: usize, keys: &[(usize, u32)]) -> bool {
        let zero = vec![0i64; self.dims.len()];
        let req_cpu = self.pod_req[pod][0];
        // Among claims with room at no cost, the one left most evenly full
        // (the smallest largest share of cpu or memory left over), so that
        // memory-heavy pods go where memory is spare and cpu-heavy ones
        // where cpu is.
        let mut hit: Option<(f64, usize, u128)> = None;
        let mut hits = 0;
        let mem_heavy = self.mem_heavy(pod);
        let (index, need) = if mem_heavy {
            (&self.mem_index, self.pod_req[pod][1])
        } else {
            (&self.claim_index, req_cpu)
        };
        for &(_, to) in index.range((need, 0)..).take(SCAN_LIMIT) {
            if !self.fits_cheapest(pod, to) {
                continue;
            }
            let Some(m) = self
                .can_host(pod, to, keys)
                .filter(|&m| self.fits_free(pod, to, &zero, m))
            else {
                continue;
            };
            let score = self.leftover(pod, to);
            if hit.is_none_or(|(b, _, _)| score < b - EPS) {
                hit = Some((score, to, m));
            }
            hits += 1;
            if hits >= BEST_FIT_CANDIDATES {
                break;
            }
        }
        if let Some((_, to, mask)) = hit {
            return self.put(pod, to, mask);
        }
        // Growth: claims with the most room in the pod's dominant resource;
        // equal costs go to the claim left most evenly full.
        let index = if mem_heavy {
            &self.mem_index
        } else {
            &self.claim_index
        };
        let cands: Vec<usize> = index
            .iter()
            .rev()
            .take(SCAN_LIMIT)
            .map(|&(_, c)| c)
            .collect();
        let Some((variant, _)) = self.pod_relax[pod] else {
            return false;
        };
        let mut best: Option<(f64, usize, u128)> = None;
        let mut best_left = f64::INFINITY;
        let mut priced = 0;
        for to in cands {
            let Some(combos) = self.can_host(pod, to, keys) else {
                continue;
            };
            if let Some((price, t)) = self.cheapest_fit_type(pod, variant, to, combos) {
                let delta = price - self.claims[to].price;
                let left = self.leftover_on(pod, to, t);
                if best.is_none_or(|(b, _, _)| {
                    delta < b - EPS || (delta <= b + EPS && left < best_left - EPS)
                }) {
                    best = Some((delta, to, combos));
                    best_left = left;
                }
                priced += 1;
                if priced >= GROW_CANDIDATES {
                    break;
                }
            }
        }
        if best.is_none() {
            // Rare: no nearby claim can take it; look at every claim.
            let all: Vec<usize> = self.claim_index.iter().map(|&(_, c)| c).collect();
            for to in all {
                let Some(combos) = self.can_host(pod, to, keys) else {
                    continue;
                };
                if let Some(price) = self.cheapest_fit(pod, variant, to, combos) {
                    let delta = price - self.claims[to].price;
                    if best.is_none_or(|(b, _, _)| delta < b - EPS) {
                        best = Some((delta, to, combos));
                    }
                }
            }
        }
        match best {
            Some((_, to, mask)) => self.put(pod, to, mask),
            None => false,
        }
    }
}

impl Solver<'_> {
    /// (pool, type) pairs some placed pod could use: the union of the type
    /// sets of the requirement variants pods were placed with.
    pub fn allowed_types(&self, placed: &[usize]) -> Vec<(usize, usize)> {
        let mut variants: Vec<usize> = placed
            .iter()
            .filter_map(|&p| self.pod_relax[p].map(|r| r.0))
            .collect();
        variants.sort_unstable();
        variants.dedup();
        let mut out = Vec::new();
        for (pi, pool) in self.pools.iter().enumerate() {
            let mut union = Bits::new(pool.types.len());
            for &v in &variants {
                for t in self.variants[v].per_pool[pi].types.iter() {
                    union.set(t);
                }
            }
            out.extend(union.iter().map(|t| (pi, t)));
        }
        out
    }
}
