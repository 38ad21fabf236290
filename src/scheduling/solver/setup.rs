//! Building a solve: resource dimensions, offering domains, NodePools
//! with their types (in price order, with per-resource and per-domain
//! indexes), existing nodes, pod classes (pods with identical
//! constraints share requirement checks and type sets), topology counters
//! and requirement variants.

use super::*;
use crate::model::labels::RESERVATION_KEYS;

pub(super) type ClassKey<'a> = (
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

pub(super) fn class_key(p: &PodSpec) -> ClassKey<'_> {
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
/// Weighted preferences, heaviest first; equal weights keep their order.
fn by_weight<T>(prefs: &[(i32, T)]) -> impl Iterator<Item = &T> {
    let mut order: Vec<&(i32, T)> = prefs.iter().collect();
    order.sort_by_key(|(w, _)| std::cmp::Reverse(*w));
    order.into_iter().map(|(_, t)| t)
}

pub(super) fn type_compatible(t: &InstanceType, merged: &Requirements) -> bool {
    merged.0.iter().all(|(k, r)| match t.requirements.get(k) {
        Some(tr) => !tr.intersection(r).is_empty() || (tr.allows_absent() && r.allows_absent()),
        None => !is_well_known(k) || k == NODEPOOL || r.allows_absent(),
    })
}

/// Does a DaemonSet pod's term intersect an instance type's requirements
/// (keys the type does not define are the NodePool's to check)?
fn daemon_type_ok(t: &InstanceType, term: &Requirements) -> bool {
    term.0.iter().all(|(k, r)| match t.requirements.get(k) {
        Some(tr) => !tr.intersection(r).is_empty() || (tr.allows_absent() && r.allows_absent()),
        None => true,
    })
}

/// The daemon groups of one NodePool and the group of each of its types
/// (in the solver's type order, `tidx`). A DaemonSet counts on a type when
/// its pod tolerates the pool's taints (PreferNoSchedule included) and one
/// of its required node-affinity terms, with its nodeSelector, is
/// compatible with the pool's requirements and intersects the type's.
fn daemon_groups(
    daemonsets: &[crate::scheduling::DaemonSetSpec],
    pool_reqs: &Requirements,
    taints: &[Taint],
    instance_types: &[InstanceType],
    tidx: &[usize],
    project: &dyn Fn(&crate::model::Resources) -> Vec<i64>,
) -> (Vec<DaemonGroup>, Vec<usize>) {
    // Per DaemonSet, its terms compatible with the pool.
    let terms: Vec<Vec<Requirements>> = daemonsets
        .iter()
        .map(|ds| {
            if first_untolerated(taints, &ds.pod.tolerations, true).is_some() {
                return Vec::new();
            }
            let base = &ds.pod.node_selector;
            let all: Vec<Requirements> = if ds.pod.required_terms.is_empty() {
                vec![base.clone()]
            } else {
                ds.pod
                    .required_terms
                    .iter()
                    .map(|t| {
                        let mut r = base.clone();
                        r.intersect_with(t);
                        r
                    })
                    .collect()
            };
            all.into_iter()
                .filter(|r| pool_reqs.compatible(r, allow_well_known).is_ok())
                .collect()
        })
        .collect();
    let mut groups: Vec<DaemonGroup> = Vec::new();
    let mut members: HashMap<Vec<usize>, usize> = HashMap::new();
    let group_of = tidx
        .iter()
        .map(|&ti| {
            let it = &instance_types[ti];
            let on: Vec<usize> = terms
                .iter()
                .enumerate()
                .filter(|(_, ts)| ts.iter().any(|r| daemon_type_ok(it, r)))
                .map(|(d, _)| d)
                .collect();
            *members.entry(on).or_insert_with_key(|on| {
                let mut overhead = project(&crate::model::Resources::new());
                let mut ports = Vec::new();
                for &d in on {
                    add_into(&mut overhead, &project(&daemonsets[d].pod.requests));
                    ports.extend(daemonsets[d].pod.host_ports.iter().cloned());
                }
                groups.push(DaemonGroup { overhead, ports });
                groups.len() - 1
            })
        })
        .collect();
    if groups.is_empty() {
        groups.push(DaemonGroup {
            overhead: project(&crate::model::Resources::new()),
            ports: Vec::new(),
        });
    }
    (groups, group_of)
}

impl<'a> Solver<'a> {
    pub fn new(input: &'a SolveInput, opts: &SolveOptions) -> Result<Self, SolveError> {
        let input_index = crate::scheduling::pod_order(&input.pods);
        let pods: Vec<&'a PodSpec> = input_index.iter().map(|&i| &*input.pods[i]).collect();
        let mut existing: Vec<&'a ExistingNode> = input.nodes.iter().map(|n| &**n).collect();
        existing.sort_by(|a, b| a.name.cmp(&b.name));
        // Resource dimensions: cpu, memory, pods, then every other requested resource.
        let mut extra: BTreeSet<&str> = BTreeSet::new();
        for p in pods
            .iter()
            .copied()
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

        // Offering domains, borrowed until the few are known.
        let mut zones: BTreeSet<&str> = BTreeSet::new();
        let mut cts: BTreeSet<&str> = BTreeSet::new();
        for np in &input.nodepools {
            for it in &np.instance_types {
                for o in &it.offerings {
                    zones.insert(&o.zone);
                    cts.insert(&o.capacity_type);
                }
            }
        }
        for n in &existing {
            let keys = n.keys();
            if let Some(z) = &keys.zone {
                zones.insert(z);
            }
            if let Some(c) = &keys.capacity_type {
                cts.insert(c);
            }
        }
        let zones: Vec<String> = zones.into_iter().map(String::from).collect();
        let cts: Vec<String> = cts.into_iter().map(String::from).collect();
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
                        daemon_group: 0,
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
            // DaemonSet pods per instance type, as Karpenter groups them: a
            // DaemonSet counts on a type when its pod would schedule on a
            // node of this pool of that type.
            let (daemon_groups, group_of) = daemon_groups(
                &input.daemonsets,
                &reqs,
                &taints,
                &np.instance_types,
                &tidx,
                &project,
            );
            let mut types = types;
            for (t, g) in types.iter_mut().zip(&group_of) {
                t.daemon_group = *g;
                for (a, o) in t.alloc.iter_mut().zip(&daemon_groups[*g].overhead) {
                    *a = a.saturating_sub(*o);
                }
            }
            let daemon_min: Vec<i64> = (0..dims.len())
                .map(|d| {
                    group_of
                        .iter()
                        .map(|&g| daemon_groups[g].overhead[d])
                        .min()
                        .unwrap_or(0)
                })
                .collect();
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
                daemon_groups,
                daemon_min,
                zero: vec![0; dims.len()],
                lim_used: vec![0; lim.len()],
                lim_existing: vec![0; lim.len()],
                nodes_existing: 0,
                lim_names,
                lim,
                node_limit,
                nodes_used: 0,
                min_values,
            });
        }

        // Topology keys used by any term.
        // Borrowed from the input: a cluster's bound pods name the same few
        // keys many times over.
        let mut key_names: BTreeSet<&str> = BTreeSet::new();
        let all_terms = |p: &'a PodSpec| {
            p.affinity
                .iter()
                .chain(p.anti_affinity.iter())
                .chain(p.preferred_affinity.iter().map(|x| &x.1))
                .chain(p.preferred_anti_affinity.iter().map(|x| &x.1))
                .map(|t| t.topology_key.as_str())
                .chain(p.spread.iter().map(|s| s.topology_key.as_str()))
        };
        for p in &pods {
            key_names.extend(all_terms(p).filter(|k| *k != HOSTNAME));
        }
        for n in existing.iter().filter(|n| n.pods.any_anti_affinity()) {
            for bp in n.pods.iter() {
                key_names.extend(
                    bp.anti_affinity
                        .iter()
                        .map(|t| t.topology_key.as_str())
                        .filter(|k| *k != HOSTNAME),
                );
            }
        }
        let mut keys = Vec::new();
        for &k in &key_names {
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
                v.extend(existing.iter().filter_map(|n| n.labels.get(k).cloned()));
                v
            };
            keys.push(Domains::new(k, values));
        }
        let zone_key = keys.iter().position(|d| d.key == ZONE);
        let ct_key = keys.iter().position(|d| d.key == CAPACITY_TYPE);

        let mut nodes = Vec::new();
        for n in &existing {
            let read = n.keys();
            // `dims` starts with cpu, memory and pods.
            let mut free: Vec<i64> = read.cpu_memory_pods.to_vec();
            free.extend(dims[3..].iter().map(|d| n.allocatable.get(d)));
            // What `project` of each pod would take, without reading the
            // pods: their cpu, memory and pods were summed when the list
            // was made; only a pod requesting another resource is read.
            let takes = n.pods.takes();
            for (f, x) in free.iter_mut().zip(takes.cpu_memory_pods) {
                *f = f.saturating_sub(x);
            }
            if takes.others {
                for bp in n.pods.iter().filter(|bp| bp.takes.others) {
                    for (k, x) in &bp.requests.0 {
                        if let Some(i) = dims[3..].iter().position(|d| d == k) {
                            free[i + 3] = free[i + 3].saturating_sub(*x);
                        }
                    }
                }
            }
            let ports = n.pods.host_ports().to_vec();
            let taints = n
                .taints
                .iter()
                .filter(|t| n.initialized || !t.is_ephemeral())
                .cloned()
                .collect();
            let values = keys
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    let value = if Some(i) == zone_key {
                        read.zone.as_ref()
                    } else if Some(i) == ct_key {
                        read.capacity_type.as_ref()
                    } else {
                        n.labels.get(&d.key)
                    };
                    value.and_then(|v| d.id(v))
                })
                .collect();
            nodes.push(NodeInfo {
                name: &n.name,
                labels: &n.labels,
                taints,
                free,
                ports,
                values,
            });
        }
        // Existing capacity counts against limits.
        for n in &existing {
            if let Some(pool) = n
                .nodepool
                .as_ref()
                .and_then(|name| pools.iter_mut().find(|p| &p.name == name))
            {
                for (u, k) in pool.lim_existing.iter_mut().zip(&pool.lim_names) {
                    *u += n.capacity.get(k);
                }
                pool.nodes_existing += 1;
                pool.lim_used.clone_from(&pool.lim_existing);
                pool.nodes_used = pool.nodes_existing;
            }
        }
        let node_index = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.free[0], i))
            .collect();

        let pod_req: Vec<Vec<i64>> = pods.iter().map(|p| project(&p.requests)).collect();
        let any_soft_taint = pools
            .iter()
            .flat_map(|p| p.taints.iter())
            .chain(nodes.iter().flat_map(|n| n.taints.iter()))
            .any(|t| t.effect == Effect::PreferNoSchedule);
        let nt = pools.iter().map(|p| p.types.len()).max().unwrap_or(0);
        let n_pods = pods.len();
        let daemon_ports = pools
            .iter()
            .any(|p| p.daemon_groups.iter().any(|g| !g.ports.is_empty()));
        let mut s = Solver {
            input,
            pods,
            input_index,
            existing,
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
            pod_class: vec![0; n_pods],
            pod_req,
            variants: Vec::new(),
            variant_index: HashMap::new(),
            variant_by_reqs: HashMap::new(),
            daemon_ports,
            preferences: opts.preferences,
            any_soft_taint,
            placed_node: vec![None; n_pods],
            placed_claim: vec![None; n_pods],
            scratch: Bits::new(nt),
            scratch2: Bits::new(nt),
            min_req: Vec::new(),
            cands: Vec::new(),
            pod_relax: vec![None; n_pods],
            zone_key,
            ct_key,
            run_left: 1,
            bulk: None,
            class_free: Vec::new(),
            touched: Vec::new(),
            mean_alloc: Vec::new(),
            claim_cap: None,
            capped: false,
            check_capped: false,
            reservations: HashMap::new(),
        };
        s.reservations = s.collect_reservations();
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

    pub(super) fn topo_key(&self, k: &str) -> TopoKey {
        if k == HOSTNAME {
            TopoKey::Hostname
        } else {
            // Every non-hostname key of a term was interned in `new`.
            TopoKey::Key(self.keys.iter().position(|d| d.key == k).unwrap_or(0))
        }
    }

    pub(super) fn counter(
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

    pub(super) fn build_classes(&mut self) {
        let mut index: HashMap<ClassKey<'a>, usize> = HashMap::new();
        for pi in 0..self.pods.len() {
            let p: &'a PodSpec = self.pods[pi];
            if let Some(&c) = index.get(&class_key(p)) {
                self.pod_class[pi] = c;
                continue;
            }
            let ci = self.classes.len();
            index.insert(class_key(p), ci);
            self.pod_class[pi] = ci;
            let mut terms = Vec::new();
            for t in &p.affinity {
                terms.push(self.affinity_term(p, TermKind::Affinity, t, None));
            }
            for (rank, t) in by_weight(&p.preferred_affinity).enumerate() {
                terms.push(self.affinity_term(p, TermKind::Affinity, t, Some(rank)));
            }
            let mut owns = Vec::new();
            for t in &p.anti_affinity {
                let term = self.affinity_term(p, TermKind::Anti, t, None);
                owns.push(self.counter(term.key, &t.namespaces, &t.selector, true));
                terms.push(term);
            }
            for (rank, t) in by_weight(&p.preferred_anti_affinity).enumerate() {
                terms.push(self.affinity_term(p, TermKind::Anti, t, Some(rank)));
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
        for ni in 0..self.existing.len() {
            let n: &'a ExistingNode = self.existing[ni];
            if !n.pods.any_anti_affinity() {
                continue;
            }
            for bp in n.pods.iter() {
                for t in &bp.anti_affinity {
                    let key = self.topo_key(&t.topology_key);
                    self.counter(key, &t.namespaces, &t.selector, true);
                }
            }
        }
        for c in &mut self.classes {
            let p = self.pods[c.rep];
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

    /// A pod's (anti-)affinity term with the counter of the pods it selects;
    /// `rank` orders preferred terms, heaviest first.
    fn affinity_term(
        &mut self,
        pod: &PodSpec,
        kind: TermKind,
        t: &PodAffinityTerm,
        rank: Option<usize>,
    ) -> Term {
        let key = self.topo_key(&t.topology_key);
        Term {
            kind,
            counter: self.counter(key, &t.namespaces, &t.selector, false),
            key,
            self_match: t.namespaces.contains(&pod.namespace) && t.selector.matches(&pod.labels),
            rank,
        }
    }

    pub(super) fn record_bound_pods(&mut self) {
        if self.counters.is_empty() {
            return;
        }
        for t in 0..self.existing.len() {
            let n: &'a ExistingNode = self.existing[t];
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
                        self.counters[ci].record(t, v);
                    }
                }
            }
        }
    }

    /// The variant of a class's node requirements at a relaxation level.
    pub(super) fn variant(&mut self, class: usize, r: &Relax) -> usize {
        let key = (class, r.term, r.node_pref_dropped);
        if let Some(&v) = self.variant_index.get(&key) {
            return v;
        }
        let p = self.pods[self.classes[class].rep];
        let mut reqs = p.node_selector.clone();
        if let Some(t) = p.required_terms.get(r.term) {
            reqs.intersect_with(t);
        }
        if let Some(&pi) = self.classes[class].pref_terms.get(r.node_pref_dropped) {
            reqs.intersect_with(&p.preferred_terms[pi].1);
        }
        let ports = self.variant_ports(&p.host_ports);
        let v = self.variant_for(reqs, ports);
        self.variant_index.insert(key, v);
        v
    }

    /// The host ports that are part of a variant: a pod's own when some
    /// DaemonSet holds a host port (they then rule out the instance types
    /// whose DaemonSets hold the same port), else none.
    pub(super) fn variant_ports(&self, ports: &[HostPort]) -> Vec<HostPort> {
        if self.daemon_ports {
            ports.to_vec()
        } else {
            Vec::new()
        }
    }

    /// The variant of these requirements and host ports, made on first use.
    pub(super) fn variant_for(&mut self, reqs: Requirements, ports: Vec<HostPort>) -> usize {
        let key = (reqs, ports);
        if let Some(&v) = self.variant_by_reqs.get(&key) {
            return v;
        }
        let (reqs, ports) = key;
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
                // Only a node launched into a reservation has its labels:
                // requiring one requires reserved capacity.
                let reserved_only = RESERVATION_KEYS
                    .iter()
                    .any(|k| merged.get(k).is_some_and(|r| !r.allows_absent()));
                // Then only the zones of the reservations whose labels
                // they allow.
                let reserved_zones: BTreeSet<&str> = if reserved_only {
                    np.instance_types
                        .iter()
                        .flat_map(|it| &it.offerings)
                        .filter(|o| {
                            o.reservations.iter().any(|r| {
                                r.labels
                                    .iter()
                                    .all(|(k, v)| merged.get(k).is_none_or(|q| q.has(v)))
                            })
                        })
                        .map(|o| o.zone.as_str())
                        .collect()
                } else {
                    BTreeSet::new()
                };
                let mut combos = 0u128;
                for (zi, z) in self.zones.iter().enumerate() {
                    if merged.get(ZONE).is_some_and(|r| !r.has(z))
                        || (reserved_only && !reserved_zones.contains(z.as_str()))
                    {
                        continue;
                    }
                    for (ci, c) in self.cts.iter().enumerate() {
                        if merged.get(CAPACITY_TYPE).is_some_and(|r| !r.has(c))
                            || (reserved_only && c != crate::api::CAPACITY_TYPE_RESERVED)
                        {
                            continue;
                        }
                        combos |= 1u128 << (zi * ncts + ci);
                    }
                }
                let mut blocked_port = None;
                for (i, t) in pool.types.iter().enumerate() {
                    if t.offer_mask & combos != 0
                        && type_compatible(&np.instance_types[t.source], &merged)
                    {
                        let held = &pool.daemon_groups[t.daemon_group].ports;
                        match ports.iter().find(|p| held.iter().any(|h| h.conflicts(p))) {
                            Some(p) => blocked_port = Some(p),
                            None => types.set(i),
                        }
                    }
                }
                let err = match blocked_port {
                    Some(p) if types.is_empty() => Some(format!(
                        "NodePool {}: host port {}/{} is held by a DaemonSet pod on every instance type the pod may use",
                        pool.name, p.port, p.protocol
                    )),
                    _ => None,
                };
                PoolVariant { err, types, combos }
            })
            .collect();
        self.variant_by_reqs
            .insert((reqs.clone(), ports), self.variants.len());
        self.variants.push(Variant { reqs, per_pool });
        self.variants.len() - 1
    }

    pub(super) fn scratch_len(&self) -> usize {
        self.pools.iter().map(|p| p.types.len()).max().unwrap_or(0)
    }
}
