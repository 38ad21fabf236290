//! Improvement moves after the first pass: re-inserting movable pods best
//! fit now that every claim is known (`refill`), and moving pods into room
//! other claims already pay for so a claim gets cheaper or goes away
//! (`improve`). Neither ever raises the price.

use super::*;

/// At most this many rounds of repacking.
pub(super) const REPACK_ROUNDS: usize = 3;

/// A pod's planned move to another claim.
pub(super) struct Move {
    pod: usize,
    to: usize,
    mask: u128,
}

/// The mutable state of a solve, saved to undo a repacking attempt.
pub(super) struct Saved {
    claims: Vec<Claim>,
    index: BTreeSet<(i64, usize)>,
    mem_index: BTreeSet<(i64, usize)>,
    counters: Vec<Counter>,
    lim_used: Vec<Vec<i64>>,
    nodes_used: Vec<i64>,
    placed_claim: Vec<Option<usize>>,
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
    pub(super) fn movable(&self, pod: usize) -> bool {
        let c = &self.classes[self.pod_class[pod]];
        self.pod_relax[pod].is_some()
            && self.pods[pod].host_ports.is_empty()
            && c.owns.is_empty()
            && c.terms.iter().all(|t| t.key != TopoKey::Hostname)
    }

    /// The values of the non-hostname topology keys a movable pod is
    /// constrained or counted on at its claim; None if the pod may not leave
    /// it (a value is not settled, or neighbours watch its hostname count).
    pub(super) fn keys_of(&self, pod: usize, from: usize) -> Option<Vec<(usize, u32)>> {
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
    pub(super) fn can_host(&self, pod: usize, to: usize, keys: &[(usize, u32)]) -> Option<u128> {
        self.host_mask(pod, to, keys)
    }

    pub(super) fn host_mask(&self, pod: usize, to: usize, keys: &[(usize, u32)]) -> Option<u128> {
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
    pub(super) fn leftover(&self, pod: usize, to: usize) -> f64 {
        match self.claims[to].cheapest {
            Some(t) => self.leftover_on(pod, to, t),
            None => f64::INFINITY,
        }
    }

    /// [`Self::leftover`] on type `t` of claim `to`'s pool.
    pub(super) fn leftover_on(&self, pod: usize, to: usize, t: usize) -> f64 {
        let dst = &self.claims[to];
        let alloc = &self.pools[dst.pool].types[t].alloc;
        (0..2)
            .filter(|&d| alloc[d] > 0)
            .map(|d| (alloc[d] - dst.used[d] - self.pod_req[pod][d]) as f64 / alloc[d] as f64)
            .fold(0.0, f64::max)
    }

    /// Do the pod's requests fit the spare room of claim `to`'s cheapest type?
    pub(super) fn fits_cheapest(&self, pod: usize, to: usize) -> bool {
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
    pub(super) fn fits_free(&self, pod: usize, to: usize, extra: &[i64], mask: u128) -> bool {
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

    /// Tries to make one claim cheaper (or empty) by moving pods out.
    pub(super) fn shrink(&mut self, ci: usize) -> bool {
        if !self.claims[ci].pods.iter().any(|&q| self.movable(q)) {
            return false;
        }
        let before = self.claims[ci].price;
        let base = self.base_types(ci);
        let pool = self.claims[ci].pool;
        let p = &self.pools[pool];
        let combos = self.claims[ci].combos;
        // The next cheaper type, or no type at all (empty the claim).
        // Types are in order of their cheapest offering: those from the
        // current price on cannot be cheaper.
        let target = base
            .iter()
            .take_while(|&t| {
                p.types[t]
                    .offers
                    .first()
                    .is_some_and(|o| o.1 < before - EPS)
            })
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
    pub(super) fn move_pod(&mut self, pod: usize, from: usize, to: usize, mask: u128) {
        self.take_out(pod, from);
        if !self.put(pod, to, mask) {
            // Checked before; should it fail, the pod goes back.
            let back = self.claims[from].combos;
            self.put(pod, from, back);
        }
    }

    /// Removes a movable pod from a claim (types are recomputed by the caller).
    pub(super) fn take_out(&mut self, pod: usize, from: usize) {
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
    pub(super) fn put(&mut self, pod: usize, to: usize, mask: u128) -> bool {
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

    pub(super) fn save(&self) -> Saved {
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

    pub(super) fn restore(&mut self, s: Saved) {
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
    pub(super) fn reinsert(&mut self, pod: usize, keys: &[(usize, u32)]) -> bool {
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
