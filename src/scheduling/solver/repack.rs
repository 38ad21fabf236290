//! Improvement moves after the first pass: re-inserting movable pods best
//! fit now that every claim is known (`refill`), and moving pods into room
//! other claims already pay for so a claim gets cheaper or goes away
//! (`improve`). `improve` also trades pods between claims: a claim full in
//! memory but not in cpu gives a memory-heavy pod for a cpu-heavy one, and
//! pods pinned by hostname constraints trade places with pods of their own
//! class where both claims hold the same hostname counts. Neither ever
//! raises the price.

use super::*;

/// At most this many rounds of repacking.
pub(super) const REPACK_ROUNDS: usize = 3;

/// At most this many steps down for one claim in a round.
const SHRINK_STEPS: usize = 64;
/// Claims with candidate partners examined per pod traded.
const SWAP_SCAN: usize = 8;
/// Candidate swap partners whose constraints are checked per pod moved.
const SWAP_CHECKS: usize = 16;

/// A pod's planned move to another claim.
pub(super) struct Move {
    pod: usize,
    to: usize,
    mask: u128,
}

/// A partner found for a pod leaving a claim being shrunk.
struct Swap {
    /// The claim the partner leaves and the pod goes to.
    to: usize,
    partner: usize,
    /// Offering domains of `to` with the pod.
    mask: u128,
    /// Offering domains of the shrunk claim with every partner so far.
    mask_in: u128,
    /// The one requirement variant new to the shrunk claim, if any.
    variant_in: Option<usize>,
}

/// The moves planned to shrink one claim.
struct ShrinkPlan {
    /// The claim's load over its target type, per resource.
    remaining: Vec<i64>,
    moves: Vec<Move>,
    /// Partners joining the claim, with the claim each leaves.
    swaps: Vec<(usize, usize)>,
    /// Per receiving claim: its load change and the variant it receives.
    extra: HashMap<usize, (Vec<i64>, usize)>,
    mask_in: u128,
    variant_in: Option<usize>,
    /// Hostname counters of pods that trade places within their class: no
    /// other pod they count may move.
    frozen: Vec<usize>,
    /// Claims a pod trades places with: no other move may touch them.
    closed: Vec<usize>,
    /// The type the claim is to fit (None: the claim is to be emptied,
    /// which trades cannot do), and its price before.
    target: Option<usize>,
    before: f64,
}

impl ShrinkPlan {
    fn counted_by_frozen(&self, s: &Solver<'_>, pod: usize) -> bool {
        self.class_frozen(s, s.pod_class[pod])
    }

    fn class_frozen(&self, s: &Solver<'_>, class: usize) -> bool {
        !self.frozen.is_empty()
            && s.classes[class]
                .counted_by
                .iter()
                .any(|k| self.frozen.contains(k))
    }

    /// Plans `pod` off the shrunk claim in exchange for `swap`'s partner.
    fn add_swap(&mut self, pod: usize, variant: usize, swap: Swap, reqs: &[Vec<i64>]) {
        self.variant_in = swap.variant_in;
        self.mask_in = swap.mask_in;
        let b = (swap.partner, reqs[swap.partner].as_slice());
        self.add_move(pod, swap.to, swap.mask, variant, &reqs[pod], Some(b));
    }

    fn taken(&self, pod: usize) -> bool {
        self.swaps.iter().any(|&(b, _)| b == pod)
    }

    /// Plans `pod` off the shrunk claim onto `to`, in exchange for
    /// `partner` (pod, requests) if any.
    fn add_move(
        &mut self,
        pod: usize,
        to: usize,
        mask: u128,
        variant: usize,
        req: &[i64],
        partner: Option<(usize, &[i64])>,
    ) {
        let dims = req.len();
        let e = self
            .extra
            .entry(to)
            .or_insert_with(|| (vec![0; dims], variant));
        add_into(&mut e.0, req);
        for (r, x) in self.remaining.iter_mut().zip(req) {
            *r -= x;
        }
        if let Some((b, req_b)) = partner {
            for ((x, r), y) in e.0.iter_mut().zip(self.remaining.iter_mut()).zip(req_b) {
                *x -= y;
                *r += y;
            }
            self.swaps.push((b, to));
        }
        self.moves.push(Move { pod, to, mask });
    }
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
        self.settle();
        // After the first round, only claims that changed are tried again:
        // one that failed and did not change rarely succeeds later.
        self.touched = vec![true; self.claims.len()];
        for _ in 0..REPACK_ROUNDS {
            let touched = std::mem::replace(&mut self.touched, vec![false; self.claims.len()]);
            let mut order: Vec<usize> = (0..self.claims.len())
                .filter(|&c| touched[c] && !self.claims[c].pods.is_empty())
                .collect();
            order.sort_by(|&a, &b| {
                self.claims[b]
                    .price
                    .total_cmp(&self.claims[a].price)
                    .then(a.cmp(&b))
            });
            let mut gained = false;
            for ci in order {
                // A claim may step down several types in a round.
                for _ in 0..SHRINK_STEPS {
                    if !self.shrink(ci) {
                        break;
                    }
                    gained = true;
                }
            }
            if !gained {
                break;
            }
        }
    }

    /// May this pod move between claims without changing any topology
    /// count a constraint depends on? (Known once the first pass is done:
    /// see [`Self::settle`].)
    pub(super) fn movable(&self, pod: usize) -> bool {
        self.pod_relax[pod].is_some() && self.class_free[self.pod_class[pod]]
    }

    /// Records which classes of pods may move on their own.
    fn settle(&mut self) {
        if self.class_free.len() != self.classes.len() {
            self.class_free = self
                .classes
                .iter()
                .map(|c| {
                    self.pods[c.rep].host_ports.is_empty()
                        && c.owns.is_empty()
                        && c.terms.iter().all(|t| t.key != TopoKey::Hostname)
                })
                .collect();
        }
    }

    /// The values of the non-hostname topology keys a pod is constrained
    /// or counted on at its claim; None if a value is not settled.
    pub(super) fn key_values(&self, pod: usize, from: usize) -> Option<Vec<(usize, u32)>> {
        let c = &self.classes[self.pod_class[pod]];
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
        Some(out)
    }

    /// [`Self::key_values`] of a movable pod; None if neighbours on its
    /// claim also watch its hostname count.
    pub(super) fn keys_of(&self, pod: usize, from: usize) -> Option<Vec<(usize, u32)>> {
        let c = &self.classes[self.pod_class[pod]];
        let src = &self.claims[from];
        let watched = c
            .counted_by
            .iter()
            .chain(&c.blocked_by)
            .any(|&k| self.counters[k].key == TopoKey::Hostname && src.watch.contains(&k));
        if watched {
            return None;
        }
        self.key_values(pod, from)
    }

    /// [`Self::keys_of`] for a pod moving on its own, [`Self::key_values`]
    /// for one trading places within its class.
    fn leaving_keys(&self, pod: usize, from: usize, trade: bool) -> Option<Vec<(usize, u32)>> {
        if trade {
            self.key_values(pod, from)
        } else {
            self.keys_of(pod, from)
        }
    }

    /// May claim `to` take the movable pod whose topology values are `keys`,
    /// resources aside? Returns the offering domains the claim keeps: a
    /// claim not yet settled on a zone or capacity type the pod needs is
    /// narrowed to it.
    pub(super) fn can_host(&self, pod: usize, to: usize, keys: &[(usize, u32)]) -> Option<u128> {
        self.host_mask(pod, to, keys, true)
    }

    /// [`Self::can_host`]; `watch` false skips the hostname counts, for a
    /// pod that trades places with one of its own class (see
    /// [`Self::same_counts`]).
    pub(super) fn host_mask(
        &self,
        pod: usize,
        to: usize,
        keys: &[(usize, u32)],
        watch: bool,
    ) -> Option<u128> {
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
        if watch
            && c.counted_by
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

    /// The larger of the cpu and memory left free on type `t` of claim `to`
    /// once the pod is added, in units of the mean allocatable of all
    /// types. Unlike [`Self::leftover_on`] it does not shrink with the
    /// claim's size, so growth does not keep going to one large claim.
    pub(super) fn spare_after(&self, pod: usize, to: usize, t: usize) -> f64 {
        let dst = &self.claims[to];
        let alloc = &self.pools[dst.pool].types[t].alloc;
        (0..2)
            .filter(|&d| self.mean_alloc[d] > 0.0)
            .map(|d| (alloc[d] - dst.used[d] - self.pod_req[pod][d]) as f64 / self.mean_alloc[d])
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

    /// Tries to make one claim cheaper (or empty) by moving pods out, or by
    /// trading them for smaller pods of other claims (see
    /// [`Self::swap_partner`]).
    pub(super) fn shrink(&mut self, ci: usize) -> bool {
        if self.claims[ci].pods.is_empty() {
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
        let (excess, target): (Vec<i64>, Option<usize>) = match target {
            Some((_, t)) if !all_movable || self.claims[ci].pods.len() > 1 => (
                (0..dims).map(|d| used[d] - p.types[t].alloc[d]).collect(),
                Some(t),
            ),
            _ if all_movable => (used.clone(), None),
            _ => return false,
        };
        if excess.iter().all(|e| *e <= 0) {
            return false;
        }
        let mut cands: Vec<usize> = self.claims[ci]
            .pods
            .iter()
            .copied()
            .filter(|&q| self.pod_relax[q].is_some())
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
        let mut plan = ShrinkPlan {
            remaining: excess,
            moves: Vec::new(),
            swaps: Vec::new(),
            extra: HashMap::new(),
            mask_in: combos,
            variant_in: None,
            frozen: Vec::new(),
            closed: Vec::new(),
            target,
            before,
        };
        let zero = vec![0i64; dims];
        for q in cands {
            if plan.remaining.iter().all(|e| *e <= 0) {
                break;
            }
            if !(0..dims).any(|d| plan.remaining[d] > 0 && self.pod_req[q][d] > 0) {
                continue;
            }
            let variant = self.pod_relax[q].map_or(usize::MAX, |r| r.0);
            // A pod that may not move on its own may still trade places with
            // one of its own class.
            let fixed = !self.movable(q);
            if !fixed && plan.counted_by_frozen(self, q) {
                continue;
            }
            let Some(keys) = self.leaving_keys(q, ci, fixed) else {
                continue;
            };
            if fixed {
                if let Some(swap) = self.swap_partner(q, ci, &keys, &plan, true) {
                    plan.closed.push(swap.to);
                    plan.frozen.extend(self.host_counters(q));
                    plan.add_swap(q, variant, swap, &self.pod_req);
                }
                continue;
            }
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
                    let (load, v) = plan
                        .extra
                        .get(&to)
                        .map_or((&zero, variant), |(l, v)| (l, *v));
                    to != ci
                        && v == variant
                        && !plan.closed.contains(&to)
                        && self
                            .can_host(q, to, &keys)
                            .is_some_and(|m| self.fits_free(q, to, load, m))
                });
            if let Some(to) = dest
                && let Some(mask) = self.can_host(q, to, &keys)
            {
                plan.add_move(q, to, mask, variant, &self.pod_req[q], None);
                continue;
            }
            if let Some(swap) = self.swap_partner(q, ci, &keys, &plan, false) {
                plan.add_swap(q, variant, swap, &self.pod_req);
            }
        }
        if plan.remaining.iter().any(|e| *e > 0) {
            return false;
        }
        self.apply(ci, plan);
        self.claims[ci].price < before - EPS || self.claims[ci].pods.is_empty()
    }

    /// A pod on another claim to trade for `q`, which leaves claim `ci` so
    /// that `ci` fits type `target`: the other claim takes `q` at no cost
    /// once the partner is gone, and `ci` takes the partner and still comes
    /// closer to `target` (its excess over `target` shrinks, and grows in
    /// no resource). So a claim that is full in memory but not in cpu gives
    /// a memory-heavy pod for a cpu-heavy one.
    fn swap_partner(
        &self,
        q: usize,
        ci: usize,
        keys: &[(usize, u32)],
        plan: &ShrinkPlan,
        fixed: bool,
    ) -> Option<Swap> {
        let (target, before) = (plan.target?, plan.before);
        let dims = self.dims.len();
        let src = &self.claims[ci];
        let p = &self.pools[src.pool];
        let alloc_t = &p.types[target].alloc;
        let rem = &plan.remaining;
        // How far a load over `target` is, as shares of its allocatable.
        let share = |d: usize, r: i64| {
            if r > 0 && alloc_t[d] > 0 {
                r as f64 / alloc_t[d] as f64
            } else {
                0.0
            }
        };
        let now: f64 = (0..dims).map(|d| share(d, rem[d])).sum();
        let req_q = &self.pod_req[q];
        let variant_q = self.pod_relax[q]?.0;
        // Partners come from the claims with the most room in the resource
        // `ci` is most over in: they can take `q` for a small partner.
        let worst = (0..dims.min(2))
            .filter(|&d| alloc_t[d] > 0)
            .max_by(|&a, &b| {
                (rem[a] as f64 / alloc_t[a] as f64).total_cmp(&(rem[b] as f64 / alloc_t[b] as f64))
            })?;
        let index = if worst == 1 {
            &self.mem_index
        } else {
            &self.claim_index
        };
        let mut found: Vec<(f64, usize, usize)> = Vec::with_capacity(SWAP_CHECKS + 1);
        let class_q = self.pod_class[q];
        let mut examined = 0;
        for &(_, to) in index.iter().rev().take(SHRINK_SCAN) {
            if examined >= SWAP_SCAN {
                break;
            }
            if to == ci || plan.closed.contains(&to) || fixed && plan.extra.contains_key(&to) {
                continue;
            }
            let (load, v) = match plan.extra.get(&to) {
                Some((l, v)) => (Some(l), *v),
                None => (None, variant_q),
            };
            let load = |d: usize| load.map_or(0, |l| l[d]);
            let dst = &self.claims[to];
            let Some(t_to) = dst.cheapest else {
                continue;
            };
            // Partners come from the same NodePool: another pool's claims
            // rarely admit the pod and would have to be checked in full.
            if v != variant_q || dst.pool != src.pool {
                continue;
            }
            let alloc_to = &self.pools[dst.pool].types[t_to].alloc;
            let mut any = false;
            for (&b, m) in dst.pods.iter().zip(&dst.members) {
                let class = m.class as usize;
                let partner = if fixed {
                    class == class_q
                } else {
                    self.class_free[class] && !plan.class_frozen(self, class)
                };
                if !partner || plan.taken(b) {
                    continue;
                }
                any = true;
                // cpu and memory from the claim's own copy first; the other
                // resources only for pods that pass.
                let (a0, a1) = (rem[0] - req_q[0] + m.cpu, rem[1] - req_q[1] + m.mem);
                if dst.used[0] + load(0) + req_q[0] - m.cpu > alloc_to[0]
                    || dst.used[1] + load(1) + req_q[1] - m.mem > alloc_to[1]
                    || a0 > rem[0].max(0)
                    || a1 > rem[1].max(0)
                {
                    continue;
                }
                let req_b = &self.pod_req[b];
                let after = |d: usize| rem[d] - req_q[d] + req_b[d];
                if (2..dims).any(|d| {
                    dst.used[d] + load(d) + req_q[d] - req_b[d] > alloc_to[d]
                        || after(d) > rem[d].max(0)
                }) {
                    continue;
                }
                let score: f64 = (0..dims).map(|d| share(d, after(d))).sum();
                let better = |f: &(f64, usize, usize)| {
                    score.total_cmp(&f.0).then((to, b).cmp(&(f.1, f.2))).is_lt()
                };
                if score < now - EPS
                    && (found.len() < SWAP_CHECKS || found.last().is_some_and(better))
                {
                    // Keep the SWAP_CHECKS best, in order.
                    let at = found.iter().position(better).unwrap_or(found.len());
                    found.insert(at, (score, to, b));
                    found.truncate(SWAP_CHECKS);
                }
            }
            examined += usize::from(any);
        }
        for (_, to, b) in found {
            if fixed && !self.same_counts(q, ci, to, plan) {
                continue;
            }
            let Some((variant_b, _)) = self.pod_relax[b] else {
                continue;
            };
            let variant_in = if src.variants.contains(&variant_b) {
                plan.variant_in
            } else if plan.variant_in.is_none_or(|v| v == variant_b) {
                Some(variant_b)
            } else {
                continue;
            };
            if !self.variants[variant_b].per_pool[src.pool]
                .types
                .get(target)
            {
                continue;
            }
            let Some(keys_b) = self.leaving_keys(b, to, fixed) else {
                continue;
            };
            let Some(mask_b) = self.host_mask(b, ci, &keys_b, !fixed) else {
                continue;
            };
            let mask_in = plan.mask_in & mask_b;
            if p.types[target]
                .price(mask_in)
                .is_none_or(|pr| pr >= before - EPS)
            {
                continue;
            }
            let Some(mask) = self.host_mask(q, to, keys, !fixed) else {
                continue;
            };
            let mut load = plan
                .extra
                .get(&to)
                .map_or_else(|| vec![0; dims], |e| e.0.clone());
            for (l, r) in load.iter_mut().zip(&self.pod_req[b]) {
                *l -= r;
            }
            if !self.fits_free(q, to, &load, mask) {
                continue;
            }
            return Some(Swap {
                to,
                partner: b,
                mask,
                mask_in,
                variant_in,
            });
        }
        None
    }

    /// The hostname counters a pod is counted by, constrained by or owns.
    fn host_counters(&self, pod: usize) -> Vec<usize> {
        let c = &self.classes[self.pod_class[pod]];
        let mut out: Vec<usize> = c
            .counted_by
            .iter()
            .chain(&c.blocked_by)
            .chain(&c.owns)
            .copied()
            .chain(c.terms.iter().map(|t| t.counter))
            .filter(|&k| self.counters[k].key == TopoKey::Hostname)
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// May pod `q` on claim `a` trade places with a pod of its own class on
    /// claim `b`? Yes if the two claims hold the same count on every
    /// hostname counter of the class, and no pod the plan moves is counted
    /// by one: the two pods then see what the other saw, and every count
    /// stays as it was.
    fn same_counts(&self, q: usize, a: usize, b: usize, plan: &ShrinkPlan) -> bool {
        let n = self.nodes.len();
        self.host_counters(q).into_iter().all(|k| {
            self.counters[k].at_target(n + a) == self.counters[k].at_target(n + b)
                && !plan
                    .moves
                    .iter()
                    .map(|m| m.pod)
                    .chain(plan.swaps.iter().map(|s| s.0))
                    .any(|p| self.classes[self.pod_class[p]].counted_by.contains(&k))
        })
    }

    /// Carries out a shrink: partners leave their claims, the moved pods go
    /// to theirs, then the partners join the shrunk claim.
    fn apply(&mut self, ci: usize, plan: ShrinkPlan) {
        self.touched[ci] = true;
        for m in &plan.moves {
            self.touched[m.to] = true;
        }
        for &(b, from) in &plan.swaps {
            self.take_out(b, from);
        }
        for m in &plan.moves {
            self.take_out(m.pod, ci);
            if !self.put(m.pod, m.to, m.mask) {
                // Checked before; should it fail, the pod goes back (the
                // claim's types still hold everything it had).
                let back = self.claims[ci].combos;
                self.put(m.pod, ci, back);
            }
        }
        if plan.swaps.is_empty() {
            self.recompute_types(ci);
        } else {
            // Even if every pod left, the claim stays: partners join it.
            self.retype(ci);
        }
        for &(b, from) in &plan.swaps {
            if !self.put(b, ci, plan.mask_in) {
                // Checked before (the target type holds the new load).
                debug_assert!(false, "swap partner {b} no longer fits");
                let back = self.claims[from].combos;
                self.put(b, from, back);
            }
        }
        for &(_, from) in &plan.swaps {
            self.recompute_types(from);
        }
    }

    /// Removes a movable pod from a claim (types are recomputed by the caller).
    pub(super) fn take_out(&mut self, pod: usize, from: usize) {
        let req = self.pod_req[pod].clone();
        let src = &mut self.claims[from];
        if let Some(i) = src.pods.iter().position(|&q| q == pod) {
            src.pods.remove(i);
            src.members.remove(i);
        }
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
        self.settle();
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
        // equal costs go to the claim left with the least room (measured
        // in absolute terms, so a large claim is not favoured).
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
                let left = self.spare_after(pod, to, t);
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
