//! The first pass: each pod, in order, goes to an existing node, a claim
//! planned earlier, or a new claim (sized for a run of identical pods by
//! price per packed pod); topology counts follow each placement.

use super::*;

/// The type that holds up to `run` copies of a pod at the lowest price per
/// pod it holds: (price per pod, pods it holds).
pub(super) fn cheapest_per_pod(
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
        // `alloc` is net of the type's daemon overhead.
        for (a, r) in ty.alloc.iter().zip(req) {
            if *r > 0 {
                n = n.min(usize::try_from((*a).max(0) / r).unwrap_or(0));
            } else if *a < 0 {
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

impl Solver<'_> {
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

    pub(super) fn place(&mut self, pod: usize) -> Result<(), String> {
        let class = self.pod_class[pod];
        let mut last = String::from("no NodePool can launch capacity");
        let levels = self.levels(class);
        let loosest = levels.len().saturating_sub(1);
        for (i, r) in levels.into_iter().enumerate() {
            let a = match self.attempt(class, &r) {
                Ok(a) => a,
                Err(e) => {
                    last = e;
                    continue;
                }
            };
            self.capped = false;
            // Only a level with another after it needs to know.
            self.check_capped = i < loosest;
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
                Err(e) => {
                    last = e;
                    // As in the reference, whose scheduler opens as many
                    // NodeClaims as pods need (consolidation then refuses
                    // more than one): preferences are relaxed only for a pod
                    // nothing can hold, never to squeeze it onto the one
                    // replacement a removal trial allows.
                    if std::mem::take(&mut self.capped) {
                        break;
                    }
                }
            }
        }
        Err(last)
    }

    pub(super) fn choose(&mut self, pod: usize, a: &Attempt) -> Result<Choice, String> {
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
            // Through the index of the pod's dominant resource.
            let mem_heavy = self.mem_heavy(pod);
            let (index, need) = if mem_heavy {
                (&self.mem_index, self.pod_req[pod][1])
            } else {
                (&self.claim_index, req_cpu)
            };
            let mut cands = std::mem::take(&mut self.cands);
            cands.clear();
            cands.extend(index.range((need, 0)..).take(SCAN_LIMIT).map(|&(_, c)| c));
            let hit = cands.iter().copied().find(|&ci| {
                self.admits(pod, a, ci)
                    .is_some_and(|combos| self.zero_cost(pod, a.variant, ci, combos))
            });
            if let Some(ci) = hit {
                self.cands = cands;
                return Ok(Choice::Claim(ci));
            }
            cands.clear();
            let index = if mem_heavy {
                &self.mem_index
            } else {
                &self.claim_index
            };
            cands.extend(index.iter().rev().take(SCAN_LIMIT).map(|&(_, c)| c));
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
        // 3. A new claim from the first NodePool, in weight order, that can
        // hold it, unless the claims are capped (a removal trial that may
        // open at most so many).
        let mut errors = Vec::new();
        if self.claim_cap.is_some_and(|cap| self.claims.len() >= cap) {
            if let Some((_, ci)) = best {
                return Ok(Choice::Claim(ci));
            }
            self.capped = self.check_capped
                && (0..self.pools.len()).any(|pool| self.check_new(pod, a, pool).is_ok());
            return Err("no room on the remaining nodes or the replacement".into());
        }
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

    pub(super) fn commit(&mut self, pod: usize, a: &Attempt, choice: Choice) {
        let class = self.pod_class[pod];
        let req = self.pod_req[pod].clone();
        let target = match choice {
            Choice::Node(n) => {
                let node = &mut self.nodes[n];
                self.node_index.remove(&(node.free[0], n));
                for (f, r) in node.free.iter_mut().zip(&req) {
                    *f -= r;
                }
                node.ports.extend(self.pods[pod].host_ports.iter().cloned());
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
                    used: p.zero.clone(),
                    pods: Vec::new(),
                    members: Vec::new(),
                    ports: Vec::new(),
                    reserve: vec![0; p.lim.len()],
                    price: 0.0,
                    cheapest: None,
                    offered: 0,
                    slack_key: 0,
                    mem_key: 0,
                    watch: Vec::new(),
                    reservation: None,
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

    pub(super) fn join_claim(&mut self, pod: usize, a: &Attempt, ci: usize) {
        let combos = self.claim_combos(&self.claims[ci], a);
        // The pod was checked to fit.
        self.narrow(pod, a.variant, ci, combos);
        self.pod_relax[pod] = Some((a.variant, a.tolerate_soft));
        self.claims[ci]
            .ports
            .extend(self.pods[pod].host_ports.iter().cloned());
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

    pub(super) fn pin_price(&self, ci: usize, key: usize, v: usize) -> Option<f64> {
        let claim = &self.claims[ci];
        let combos = claim.combos & self.value_mask(key, v);
        cheapest_type(&self.pools[claim.pool], &claim.types, combos, |_| true).map(|b| b.0)
    }

    pub(super) fn pin(&mut self, ci: usize, key: usize, v: usize) {
        let mask = self.value_mask(key, v);
        let value = self.keys[key].values[v].clone();
        let kname = self.keys[key].key.clone();
        let mut offered = std::mem::take(&mut self.scratch2);
        let claim = &mut self.claims[ci];
        let pool = &self.pools[claim.pool];
        claim.combos &= mask;
        pool.offered_types(claim.combos, &mut offered);
        claim.types.and_with(&offered);
        // A key the types define (a partition): only those with the value.
        // Zone and capacity type are the offering domains' (`combos`).
        if Some(key) != self.zone_key && Some(key) != self.ct_key {
            let np = &self.input.nodepools[pool.spec];
            for t in offered.iter() {
                if np.instance_types[pool.types[t].source]
                    .requirements
                    .get(&kname)
                    .is_some_and(|r| !r.has(&value))
                {
                    claim.types.clear(t);
                }
            }
        }
        claim.reqs.add(&kname, Requirement::in_values([value]));
        claim.offered = offered_domains(pool, &claim.types, claim.combos);
        self.scratch2 = offered;
    }

    /// Does the pod fit the claim's cheapest type at the same price? A
    /// quick test that needs no scan of the claim's types.
    pub(super) fn zero_cost(&self, pod: usize, variant: usize, ci: usize, combos: u128) -> bool {
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

    /// Prices a new claim in `pool` per pod it will hold, and how many
    /// identical pods it is sized for; Err explains why not.
    pub(super) fn check_new(
        &mut self,
        pod: usize,
        a: &Attempt,
        pool: usize,
    ) -> Result<(f64, usize), String> {
        let p = &self.pools[pool];
        let (strict, soft) = self.classes[self.pod_class[pod]].pool_taints[pool];
        if !(strict || (a.tolerate_soft && soft)) {
            let t = first_untolerated(&p.taints, &self.pods[pod].tolerations, a.tolerate_soft);
            return Err(format!(
                "NodePool {} has taint {} that the pod does not tolerate",
                p.name,
                t.map(ToString::to_string).unwrap_or_default()
            ));
        }
        let pv = &self.variants[a.variant].per_pool[pool];
        // Requirements the topology terms added that the pool cannot meet.
        let base = &self.variants[a.base_variant].per_pool[pool];
        if (pv.err.is_some() || pv.types.is_empty()) && base.err.is_none() && !base.types.is_empty()
        {
            return Err(self.topology_reason(a, pool));
        }
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
            let reserved_only = crate::model::labels::RESERVATION_KEYS
                .iter()
                .any(|k| merged.get(k).is_some_and(|r| !r.allows_absent()));
            if reserved_only {
                return Err(format!(
                    "NodePool {}: no capacity reservation the pod selects has an instance left",
                    p.name
                ));
            }
            return Err(format!(
                "no instance type in NodePool {} matches the pod's requirements",
                p.name
            ));
        }
        if combos == 0 {
            if pv.combos != 0 && a.zone_mask != u128::MAX {
                return Err(self.topology_reason(a, pool));
            }
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
                &p.zero,
                &self.pod_req[pod],
                combos,
                &zero,
            );
            self.scratch = out;
            price
        } else {
            cheapest_holding(p, &pv.types, &p.zero, &self.pod_req[pod], combos)
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
    pub(super) fn bulk_eligible(&self, pod: usize) -> bool {
        let c = &self.classes[self.pod_class[pod]];
        c.terms.is_empty()
            && c.owns.is_empty()
            && c.blocked_by.is_empty()
            && self.pods[pod].host_ports.is_empty()
    }
}
