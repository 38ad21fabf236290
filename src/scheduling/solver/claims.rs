//! Open instance-type sets: a planned claim keeps every type that still
//! holds its pods (requirements, resources with daemonset overhead, an
//! available offering in its zones and capacity types, NodePool limits),
//! narrowed incrementally as pods join; prices come from the cheapest
//! remaining type.

use super::*;
use crate::model::labels::{INSTANCE_TYPE, RESERVATION_ID};
use crate::scheduling::{MAX_INSTANCE_TYPES, NewNodeClaim};

/// The offering domains within `combos` of a set of types.
pub(super) fn offered_domains(p: &Pool, types: &Bits, combos: u128) -> u128 {
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
pub(super) fn cheapest_holding(
    p: &Pool,
    types: &Bits,
    used: &[i64],
    req: &[i64],
    combos: u128,
) -> Option<f64> {
    let limited = !p.lim.is_empty();
    let zero = [0i64; 0];
    cheapest_type(p, types, combos, |t| {
        fits_sum(used, req, &p.types[t].alloc) && (!limited || p.lim_ok(t, &zero))
    })
    .map(|b| b.0)
}

/// The cheapest of `types` that `accept`s, priced in `combos`: (price, type).
/// Types are in order of their cheapest offering, so the scan stops at the
/// first type whose cheapest offering is not below the best price found.
pub(super) fn cheapest_type(
    p: &Pool,
    types: &Bits,
    combos: u128,
    accept: impl Fn(usize) -> bool,
) -> Option<(f64, usize)> {
    let mut best: Option<(f64, usize)> = None;
    for t in types.iter() {
        let ty = &p.types[t];
        let Some(first) = ty.offers.first() else {
            break;
        };
        if best.is_some_and(|b| first.1 >= b.0) {
            break;
        }
        if accept(t)
            && let Some(pr) = ty.price(combos)
            && best.is_none_or(|b| pr < b.0)
        {
            best = Some((pr, t));
        }
    }
    best
}

/// Filters `base` into `out`: the types that hold `used + req`, have an
/// available offering in `combos`, fit the pool's remaining limits (plus the
/// claim's own `reserve`) and keep minValues. Returns the cheapest price.
pub(super) fn filter_types(
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

impl Solver<'_> {
    /// The price of the claim with the pod added: the cheapest of its types
    /// that holds it, found in price order without a full scan.
    pub(super) fn cheapest_fit(
        &mut self,
        pod: usize,
        variant: usize,
        ci: usize,
        combos: u128,
    ) -> Option<f64> {
        if !self.pools[self.claims[ci].pool].min_values.is_empty() {
            return self.claim_price(pod, variant, ci, combos);
        }
        self.cheapest_fit_type(pod, variant, ci, combos)
            .map(|x| x.0)
    }

    /// [`Self::cheapest_fit`] with the type (without minValues, which need
    /// the whole set: the cheapest type is then only a candidate).
    pub(super) fn cheapest_fit_type(
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
        cheapest_type(p, &claim.types, combos, |t| {
            pv.types.get(t)
                && fits_sum(&claim.used, req, &p.types[t].alloc)
                && p.lim_ok(t, &claim.reserve)
        })
    }

    /// Prices the claim with the pod added, leaving the remaining types in
    /// `self.scratch`.
    pub(super) fn claim_price(
        &mut self,
        pod: usize,
        variant: usize,
        ci: usize,
        combos: u128,
    ) -> Option<f64> {
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

    /// Adds a pod to a claim's requests and narrows the claim's types to
    /// those that still hold it under `combos`. The pod was checked to fit.
    pub(super) fn narrow(&mut self, pod: usize, variant: usize, ci: usize, combos: u128) {
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
        let req = &self.pod_req[pod];
        add_into(&mut claim.used, req);
        claim.pods.push(pod);
        claim.members.push(Member {
            class: self.pod_class[pod] as u32,
            cpu: req[0],
            mem: req[1],
        });
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
    pub(super) fn prune(&mut self, ci: usize) -> bool {
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

    /// Recomputes a claim's price, cheapest type, index entry and limit
    /// reservation. Under limits a claim reserves, per limited resource, the
    /// largest capacity among the types it launches from for certain: its
    /// cheapest type (what the launch takes) and, with minValues, the
    /// cheapest types that meet them ([`Solver::reserved_types`]). Larger
    /// types join its launch list only as far as the pool's remaining
    /// headroom allows ([`Solver::launch_list`]), so a limit binds only
    /// when the capacity is really near it.
    pub(super) fn refresh_claim(&mut self, ci: usize) {
        let claim = &self.claims[ci];
        let p = &self.pools[claim.pool];
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
        let mut reserve = vec![0i64; p.lim.len()];
        if !reserve.is_empty() {
            for t in self.reserved_types(ci, best.map(|b| b.1)) {
                for (r, cap) in reserve.iter_mut().zip(&p.types[t].cap_lim) {
                    *r = (*r).max(*cap);
                }
            }
        }
        let claim = &self.claims[ci];
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

    /// The types a claim may launch: every remaining type. Which of them
    /// are sent with the NodeClaim is [`Solver::launch_list`]'s choice.
    pub fn launch_types(&self, ci: usize) -> impl Iterator<Item = usize> + '_ {
        self.claims[ci].types.iter()
    }

    /// The types a claim launches from whatever the headroom: its cheapest
    /// type `best` and, when the pool has minValues, the types in price
    /// order up to the first set that meets every minValues. The claim's
    /// limit reservation is their largest capacity.
    pub(super) fn reserved_types(&self, ci: usize, best: Option<usize>) -> Vec<usize> {
        let claim = &self.claims[ci];
        let p = &self.pools[claim.pool];
        let mut out: Vec<usize> = best.into_iter().collect();
        if p.min_values.is_empty() {
            return out;
        }
        let mut seen: Vec<Vec<u32>> = vec![Vec::new(); p.min_values.len()];
        let met = |seen: &[Vec<u32>]| {
            p.min_values
                .iter()
                .zip(seen)
                .all(|((_, min, _), s)| s.len() >= *min)
        };
        let note = |t: usize, seen: &mut [Vec<u32>]| {
            for ((_, _, ids), s) in p.min_values.iter().zip(seen.iter_mut()) {
                if !s.contains(&ids[t]) {
                    s.push(ids[t]);
                }
            }
        };
        for &t in &out {
            note(t, &mut seen);
        }
        for t in claim.types.iter() {
            if met(&seen) {
                break;
            }
            if Some(t) != best && p.types[t].price(claim.combos).is_some() {
                note(t, &mut seen);
                out.push(t);
            }
        }
        out
    }

    /// The instance types a claim is launched with, cheapest first, at most
    /// [`MAX_INSTANCE_TYPES`] (as the reference sends at most 60): the
    /// reserved types always, and other types in price order whose capacity
    /// stays within the claim's reservation plus `headroom`, the part of the
    /// pool's limits no claim or node has reserved. `headroom` is reduced by
    /// what the longer list adds to the claim's reservation.
    pub(crate) fn launch_list(&self, ci: usize, headroom: &mut [i64]) -> Vec<(f64, usize)> {
        let claim = &self.claims[ci];
        let pool = &self.pools[claim.pool];
        let reserved = self.reserved_types(ci, claim.cheapest);
        let bound: Vec<i64> = claim
            .reserve
            .iter()
            .zip(headroom.iter())
            .map(|(r, h)| r.saturating_add((*h).max(0)))
            .collect();
        // Types are in order of their cheapest offering, which is never
        // above their price in the claim's domains: once MAX_INSTANCE_TYPES
        // are collected, types whose cheapest offering exceeds the dearest
        // collected price cannot be among the cheapest.
        let mut types: Vec<(f64, usize)> = Vec::new();
        let mut cutoff = f64::INFINITY;
        for t in self.launch_types(ci) {
            let ty = &pool.types[t];
            if ty.offers.first().is_none_or(|o| o.1 > cutoff) {
                break;
            }
            let within = ty.cap_lim.iter().zip(&bound).all(|(c, b)| c <= b);
            if !within && !reserved.contains(&t) {
                continue;
            }
            if let Some(p) = ty.price(claim.combos) {
                types.push((p, t));
                if types.len() == MAX_INSTANCE_TYPES {
                    cutoff = types.iter().map(|t| t.0).fold(0.0, f64::max);
                }
            }
        }
        let by_price = |a: &(f64, usize), b: &(f64, usize)| {
            a.0.total_cmp(&b.0)
                .then_with(|| pool.types[a.1].name.cmp(&pool.types[b.1].name))
        };
        types.sort_by(by_price);
        // Keep the reserved types; drop the dearest others beyond the cap.
        while types.len() > MAX_INSTANCE_TYPES {
            match types.iter().rposition(|(_, t)| !reserved.contains(t)) {
                Some(i) => {
                    types.remove(i);
                }
                None => break,
            }
        }
        for (i, h) in headroom.iter_mut().enumerate() {
            let largest = types
                .iter()
                .map(|(_, t)| pool.types[*t].cap_lim[i])
                .max()
                .unwrap_or(0);
            *h -= (largest - claim.reserve[i]).max(0);
        }
        types
    }

    /// Per pool, the part of its limits that neither nodes nor claims have
    /// reserved: claims may list larger types only within it.
    pub(crate) fn headroom(&self) -> Vec<Vec<i64>> {
        self.pools
            .iter()
            .map(|p| {
                p.lim
                    .iter()
                    .zip(&p.lim_used)
                    .map(|(l, u)| l.saturating_sub(*u))
                    .collect()
            })
            .collect()
    }

    /// The NodeClaim to launch for claim `ci`: its launch list (taking from
    /// `headroom`, indexed by pool), zones, capacity types, requirements,
    /// pods and summed requests.
    pub(crate) fn new_nodeclaim(&self, ci: usize, headroom: &mut [Vec<i64>]) -> NewNodeClaim {
        let claim = &self.claims[ci];
        let pool = &self.pools[claim.pool];
        let ncts = self.cts.len().max(1);
        let types = self.launch_list(ci, &mut headroom[claim.pool]);
        let offered = claim.offered;
        let zones: Vec<String> = (0..self.zones.len())
            .filter(|zi| (offered >> (zi * ncts)) & ((1u128 << ncts) - 1) != 0)
            .map(|zi| self.zones[zi].clone())
            .collect();
        let capacity_types: Vec<String> = (0..self.cts.len())
            .filter(|c| (0..self.zones.len()).any(|zi| offered & (1u128 << (zi * ncts + c)) != 0))
            .map(|c| self.cts[c].clone())
            .collect();
        let names: Vec<String> = types.iter().map(|t| pool.types[t.1].name.clone()).collect();
        let mut requirements = claim.reqs.clone();
        requirements.add(INSTANCE_TYPE, Requirement::in_values(names.iter().cloned()));
        requirements.add(ZONE, Requirement::in_values(zones.iter().cloned()));
        requirements.add(
            CAPACITY_TYPE,
            Requirement::in_values(capacity_types.iter().cloned()),
        );
        if let Some(id) = &claim.reservation {
            requirements.add(RESERVATION_ID, Requirement::in_values([id.clone()]));
        }
        // The pods' requests plus the smallest daemon overhead among the
        // types the claim lists (as Karpenter adds the minimum over its
        // daemon groups).
        let daemon: Vec<i64> = (0..self.dims.len())
            .map(|d| {
                types
                    .iter()
                    .map(|t| pool.daemon_groups[pool.types[t.1].daemon_group].overhead[d])
                    .min()
                    .unwrap_or(0)
            })
            .collect();
        let mut requests = crate::model::Resources::new();
        for (d, name) in self.dims.iter().enumerate() {
            requests.set(name, claim.used[d].saturating_add(daemon[d]));
        }
        let mut pods: Vec<String> = claim.pods.iter().map(|&p| self.pods[p].key()).collect();
        pods.sort();
        NewNodeClaim {
            nodepool: pool.name.clone(),
            requirements,
            instance_types: names,
            zones,
            capacity_types,
            pods,
            requests,
            price: types.first().map_or(0.0, |t| t.0),
        }
    }

    /// Types a claim's pods and offering domains allow, before resources.
    pub(super) fn base_types(&self, ci: usize) -> Bits {
        let claim = &self.claims[ci];
        let pool = &self.pools[claim.pool];
        let mut base = Bits::new(pool.types.len());
        pool.offered_types(claim.combos, &mut base);
        for &v in &claim.variants {
            base.and_with(&self.variants[v].per_pool[claim.pool].types);
        }
        base
    }

    /// Recomputes the types a claim can use after pods left it; an empty
    /// claim is dropped.
    pub(super) fn recompute_types(&mut self, ci: usize) {
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
        self.retype(ci);
    }

    /// Resets a claim's types to every type its pods and offering domains
    /// allow that holds its requests, and refreshes its price.
    pub(super) fn retype(&mut self, ci: usize) {
        let base = self.base_types(ci);
        let claim = &mut self.claims[ci];
        let saved = std::mem::replace(&mut claim.types, base);
        claim.cursor.iter_mut().for_each(|c| *c = 0);
        claim.cap_cursor.iter_mut().for_each(|c| *c = 0);
        if !self.prune(ci) {
            // Pods only left the claim, so its former types still hold them;
            // the cursors start over so that later pruning sees every type.
            let claim = &mut self.claims[ci];
            claim.types = saved;
            claim.cursor.iter_mut().for_each(|c| *c = 0);
            claim.cap_cursor.iter_mut().for_each(|c| *c = 0);
        }
        self.refresh_claim(ci);
    }
}

impl Pool {
    /// Do the types keep at least minValues distinct values per key?
    pub(super) fn min_values_ok(&self, types: &Bits) -> bool {
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
