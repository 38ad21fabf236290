//! Capacity reservations in a solve: a `reserved` offering is priced at
//! almost nothing, so the packing plans every claim it can on one; only
//! the instances left in its reservations may be. Once the packing is
//! done, claims take reservations in the order they were opened (as
//! Karpenter's NodeClaims reserve offerings as they are created): a claim
//! whose types and offering domains include a reserved offering with an
//! instance left, and whose requirements its reservation's labels meet,
//! takes one instance of it and launches exactly there (that type, that
//! zone, `reserved`, that reservation's id). A claim that finds none left
//! keeps its other offerings; with none (its pods require reserved
//! capacity), it is dropped and its pods wait for the next pass, as
//! Karpenter's strict reserved-offering mode leaves them, and do not fall
//! back to a NodePool of lower weight.

use super::*;
use crate::api::CAPACITY_TYPE_RESERVED;

/// Karpenter's order of reservation kinds on a price tie: ordinary ones,
/// capacity blocks, interruptible ones.
fn kind(r: &crate::model::Reservation) -> u8 {
    let label = |k: &str| r.labels.get(k).map(String::as_str);
    match (
        label(crate::model::labels::RESERVATION_TYPE),
        label(crate::model::labels::RESERVATION_INTERRUPTIBLE),
    ) {
        (Some("capacity-block"), _) => 1,
        (_, Some("true")) => 2,
        _ => 0,
    }
}

/// Rounds of placing again the pods of claims that found no reservation
/// left (each withdraws at least the reservations used up in the one
/// before).
const ROUNDS: usize = 4;

/// Why a pod whose claim found no reservation left is not placed.
pub(super) const RESERVATIONS_TAKEN: &str = "every instance left in the capacity reservations it may use is taken by NodeClaims planned in this pass; it is tried again once they launch";

impl Solver<'_> {
    /// The offering domains of the `reserved` capacity type.
    pub(super) fn reserved_mask(&self) -> u128 {
        let Ok(ci) = self
            .cts
            .binary_search_by(|c| c.as_str().cmp(CAPACITY_TYPE_RESERVED))
        else {
            return 0;
        };
        let ncts = self.cts.len().max(1);
        (0..self.zones.len()).fold(0u128, |m, zi| m | (1u128 << (zi * ncts + ci)))
    }

    /// Whether any offering is of the `reserved` capacity type: only then
    /// do claims take reservations after the packing.
    pub(crate) fn has_reserved_offerings(&self) -> bool {
        self.reserved_mask() != 0
    }

    fn combo_of(&self, zone: &str, capacity_type: &str) -> Option<usize> {
        let zi = self.zones.binary_search_by(|z| z.as_str().cmp(zone)).ok()?;
        let ci = self
            .cts
            .binary_search_by(|c| c.as_str().cmp(capacity_type))
            .ok()?;
        Some(zi * self.cts.len().max(1) + ci)
    }

    /// The instances left in each reservation behind the solve's reserved
    /// offerings (the offerings' counts), with the allocatable of a node of
    /// its type (the largest over the pools, net of daemon overhead). Built
    /// once with the solver ([`Solver::reservations`]).
    pub(super) fn collect_reservations(&self) -> HashMap<String, (u32, Vec<i64>)> {
        let mut out: HashMap<String, (u32, Vec<i64>)> = HashMap::new();
        if self.reserved_mask() == 0 {
            return out;
        }
        for pool in &self.pools {
            let np = &self.input.nodepools[pool.spec];
            for ty in &pool.types {
                let it = &np.instance_types[ty.source];
                for o in it.offerings.iter().filter(|o| o.available) {
                    for r in &o.reservations {
                        let e = out
                            .entry(r.id.clone())
                            .or_insert_with(|| (r.left, ty.alloc.clone()));
                        for (a, b) in e.1.iter_mut().zip(&ty.alloc) {
                            *a = (*a).max(*b);
                        }
                    }
                }
            }
        }
        out
    }

    /// The allocatable of every instance left in the solve's reservations,
    /// summed per resource, and how many instances that is: the lower
    /// bound counts them as free capacity (a plan may use each at most
    /// once, at almost no price).
    pub(crate) fn reserved_capacity(&self) -> (Vec<i64>, usize) {
        let mut total = vec![0i64; self.dims.len()];
        let mut count = 0usize;
        for (n, alloc) in self.reservations.values() {
            count += *n as usize;
            for (t, a) in total.iter_mut().zip(alloc) {
                *t = t.saturating_add(a.saturating_mul(i64::from(*n)));
            }
        }
        (total, count)
    }

    /// Gives the solve's claims their reservations. A claim that finds
    /// none left is taken apart and its pods placed again once the used-up
    /// reservations are no longer offered, so they join claims that hold
    /// one, take what is left, or go to other offerings, as the packing
    /// decides; after [`ROUNDS`] the claims left keep their other
    /// offerings or are dropped. Returns the pods left unplaced.
    pub(crate) fn settle_reservations(&mut self) -> Vec<(usize, String)> {
        let mut out = Vec::new();
        let mut start = 0;
        let mut withdrawn = Vec::new();
        for round in 0..=ROUNDS {
            let strict = round < ROUNDS;
            let dropped = self.assign_reservations(start, strict);
            if !strict {
                out.extend(dropped);
                break;
            }
            if dropped.is_empty() {
                break;
            }
            withdrawn.extend(self.withdraw_used_up());
            start = self.claims.len();
            let mut pods: Vec<usize> = dropped.into_iter().map(|(p, _)| p).collect();
            pods.sort_unstable();
            // They had a place while the reservations lasted.
            out.extend(
                self.run(&pods)
                    .into_iter()
                    .map(|(p, _)| (p, RESERVATIONS_TAKEN.to_string())),
            );
        }
        // The claims that hold a used-up reservation are priced with it
        // again (they took no pod meanwhile: none could join them); the
        // others launch no reserved capacity.
        if !withdrawn.is_empty() {
            for (pi, t, combo) in withdrawn {
                let pool = &mut self.pools[pi];
                pool.types[t].offer_mask |= 1u128 << combo;
                pool.offer_bits[combo].set(t);
                pool.all_offered |= 1u128 << combo;
            }
            let reserved = self.reserved_mask();
            for ci in 0..self.claims.len() {
                let claim = &mut self.claims[ci];
                if claim.pods.is_empty() {
                    continue;
                }
                if claim.reservation.is_none() {
                    claim.combos &= !reserved;
                }
                self.refresh_claim(ci);
            }
        }
        out
    }

    /// The instances left in each reservation once claims before `from`
    /// took theirs.
    fn left_before(&self, from: usize) -> HashMap<String, u32> {
        let mut left: HashMap<String, u32> = self
            .reservations
            .iter()
            .map(|(id, (n, _))| (id.clone(), *n))
            .collect();
        for c in &self.claims[..from] {
            if let Some(n) = c.reservation.as_ref().and_then(|id| left.get_mut(id)) {
                *n = n.saturating_sub(1);
            }
        }
        left
    }

    /// No longer offers the reserved offerings whose every reservation the
    /// claims have used up. Returns them: (pool, type, combo).
    fn withdraw_used_up(&mut self) -> Vec<(usize, usize, usize)> {
        let left = self.left_before(self.claims.len());
        let mut gone: Vec<(usize, usize, usize)> = Vec::new();
        for (pi, pool) in self.pools.iter().enumerate() {
            let np = &self.input.nodepools[pool.spec];
            for (t, ty) in pool.types.iter().enumerate() {
                for o in &np.instance_types[ty.source].offerings {
                    let used_up = o
                        .reservations
                        .iter()
                        .all(|r| left.get(&r.id).is_none_or(|n| *n == 0));
                    if o.capacity_type == CAPACITY_TYPE_RESERVED
                        && used_up
                        && let Some(combo) = self.combo_of(&o.zone, &o.capacity_type)
                    {
                        gone.push((pi, t, combo));
                    }
                }
            }
        }
        gone.retain(|&(pi, t, combo)| self.pools[pi].types[t].offer_mask & (1u128 << combo) != 0);
        for &(pi, t, combo) in &gone {
            let pool = &mut self.pools[pi];
            pool.types[t].offer_mask &= !(1u128 << combo);
            pool.offer_bits[combo].clear(t);
        }
        for pool in &mut self.pools {
            pool.all_offered = pool.types.iter().fold(0u128, |m, t| m | t.offer_mask);
        }
        gone
    }

    /// Gives claims `from..` their reservations from what claims before
    /// `from` left (see the module documentation). A claim that finds none
    /// left is dropped when `strict`; otherwise it keeps its other
    /// offerings, and is dropped only without any. Returns the pods of the
    /// claims dropped.
    pub(crate) fn assign_reservations(
        &mut self,
        from: usize,
        strict: bool,
    ) -> Vec<(usize, String)> {
        let reserved = self.reserved_mask();
        let mut dropped = Vec::new();
        if reserved == 0 {
            return dropped;
        }
        let mut left = self.left_before(from);
        for ci in from..self.claims.len() {
            let claim = &self.claims[ci];
            if claim.pods.is_empty() || claim.offered & reserved == 0 {
                continue;
            }
            match self.reservation_for(ci, &left) {
                Some((t, combo, id)) => {
                    if let Some(n) = left.get_mut(&id) {
                        *n -= 1;
                    }
                    // Its node has the reservation's labels: pods that
                    // join it later must allow them.
                    let labels = self.reservation_labels(ci, t, &id);
                    let claim = &mut self.claims[ci];
                    for (k, v) in labels {
                        claim.reqs.add(&k, Requirement::in_values([v]));
                    }
                    claim.reservation = Some(id);
                    claim.combos = 1u128 << combo;
                    claim.types.clear_all();
                    claim.types.set(t);
                    self.refresh_claim(ci);
                }
                None if strict => dropped.extend(self.drop_claim(ci)),
                None => {
                    let mut offered = std::mem::take(&mut self.scratch2);
                    let claim = &mut self.claims[ci];
                    claim.combos &= !reserved;
                    self.pools[claim.pool].offered_types(claim.combos, &mut offered);
                    claim.types.and_with(&offered);
                    self.scratch2 = offered;
                    if self.claims[ci].types.is_empty() {
                        dropped.extend(self.drop_claim(ci));
                    } else {
                        self.refresh_claim(ci);
                    }
                }
            }
        }
        dropped
    }

    /// The labels of reservation `id` behind type `t` of claim `ci`'s pool.
    fn reservation_labels(&self, ci: usize, t: usize, id: &str) -> Vec<(String, String)> {
        let pool = &self.pools[self.claims[ci].pool];
        self.input.nodepools[pool.spec].instance_types[pool.types[t].source]
            .offerings
            .iter()
            .flat_map(|o| &o.reservations)
            .find(|r| r.id == id)
            .map(|r| r.labels.clone().into_iter().collect())
            .unwrap_or_default()
    }

    /// The reservation claim `ci` launches into: of its types' reserved
    /// offerings in its domains, the cheapest reservation with an instance
    /// `left` whose labels its requirements allow; on a price tie ordinary
    /// reservations before capacity blocks before interruptible ones (the
    /// launch's order), then the most left, then the lowest id. (type,
    /// combo, id).
    fn reservation_for(
        &self,
        ci: usize,
        left: &HashMap<String, u32>,
    ) -> Option<(usize, usize, String)> {
        let claim = &self.claims[ci];
        let pool = &self.pools[claim.pool];
        let np = &self.input.nodepools[pool.spec];
        let mut best: Option<(f64, u8, u32, &str, usize, usize)> = None;
        for t in claim.types.iter() {
            let it = &np.instance_types[pool.types[t].source];
            for o in &it.offerings {
                if o.capacity_type != CAPACITY_TYPE_RESERVED || !o.available {
                    continue;
                }
                let Some(combo) = self.combo_of(&o.zone, &o.capacity_type) else {
                    continue;
                };
                if claim.combos & (1u128 << combo) == 0 {
                    continue;
                }
                for r in &o.reservations {
                    let n = left.get(&r.id).copied().unwrap_or(0);
                    let allowed = r
                        .labels
                        .iter()
                        .all(|(k, v)| claim.reqs.get(k).is_none_or(|q| q.has(v)));
                    if n == 0 || !allowed {
                        continue;
                    }
                    let kind = kind(r);
                    let better = best.is_none_or(|(p, bk, bn, bid, _, _)| {
                        o.price
                            .total_cmp(&p)
                            .then(kind.cmp(&bk))
                            .then(bn.cmp(&n))
                            .then(r.id.as_str().cmp(bid))
                            .is_lt()
                    });
                    if better {
                        best = Some((o.price, kind, n, &r.id, t, combo));
                    }
                }
            }
        }
        best.map(|(_, _, _, id, t, combo)| (t, combo, id.to_string()))
    }

    /// Empties claim `ci`: its pods are no longer placed. Returns them with
    /// why.
    fn drop_claim(&mut self, ci: usize) -> Vec<(usize, String)> {
        let pods = std::mem::take(&mut self.claims[ci].pods);
        let claim = &mut self.claims[ci];
        claim.members.clear();
        claim.ports.clear();
        claim.used = self.pools[claim.pool].zero.clone();
        for &p in &pods {
            self.placed_claim[p] = None;
            self.pod_relax[p] = None;
        }
        self.recompute_types(ci);
        pods.into_iter()
            .map(|p| (p, RESERVATIONS_TAKEN.to_string()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use crate::model::labels::{CAPACITY_TYPE, RESERVATION_ID, RESERVATION_TYPE, ZONE};
    use crate::model::{InstanceType, Offering, Requirement, Requirements, Reservation, Resources};
    use crate::scheduling::tests::{catalog, shared};
    use crate::scheduling::{NodePoolSpec, PodSpec, SolveInput, SolveOptions, solve};

    fn reservation(id: &str, kind: &str, left: u32) -> Reservation {
        Reservation {
            id: id.into(),
            labels: [
                (RESERVATION_ID.to_string(), id.to_string()),
                (RESERVATION_TYPE.to_string(), kind.to_string()),
            ]
            .into_iter()
            .collect(),
            left,
        }
    }

    /// The test catalog with `medium` reserved in z1 (cr-a: `left_a`
    /// instances left) and `large` in z2 (cr-b, a capacity block, one
    /// left), with the requirements the AWS provider gives such types.
    fn reserved_catalog(left_a: u32) -> Vec<InstanceType> {
        let mut types = catalog();
        for it in &mut types {
            let (zone, r) = match it.name.as_str() {
                "medium" => ("z1", reservation("cr-a", "default", left_a)),
                "large" => ("z2", reservation("cr-b", "capacity-block", 1)),
                _ => continue,
            };
            let on_demand = it.offerings[0].price;
            for (k, v) in &r.labels {
                it.requirements.add(k, Requirement::in_values([v.clone()]));
            }
            it.offerings.push(Offering {
                zone: zone.into(),
                capacity_type: "reserved".into(),
                price: on_demand / 1e7,
                available: left_a > 0 || r.id == "cr-b",
                reservations: vec![r],
            });
            it.requirements.0.insert(
                CAPACITY_TYPE.to_string(),
                Requirement::in_values(["on-demand", "spot", "reserved"]),
            );
        }
        types
    }

    pub(super) fn pool_with(requirements: Requirements, left_a: u32) -> NodePoolSpec {
        NodePoolSpec {
            name: "default".into(),
            weight: 0,
            requirements,
            labels: BTreeMap::new(),
            taints: Vec::new(),
            startup_taints: Vec::new(),
            limits: Resources::new(),
            instance_types: reserved_catalog(left_a),
        }
    }

    /// Pods of 3 cpu: one per medium node.
    fn pods(n: usize) -> Vec<PodSpec> {
        sized_pods(&vec![3000; n])
    }

    /// One pod per entry, of that many millicores and 1 GiB.
    pub(super) fn sized_pods(cpus: &[i64]) -> Vec<PodSpec> {
        cpus.iter()
            .enumerate()
            .map(|(i, cpu)| {
                PodSpec::new(
                    "default",
                    &format!("p{i}"),
                    Resources::new().with("cpu", *cpu).with("memory", 1 << 30),
                )
            })
            .collect()
    }

    fn reserved_claims(r: &crate::scheduling::SolveResult) -> Vec<(&str, &str)> {
        r.nodeclaims
            .iter()
            .filter(|c| c.capacity_types == ["reserved"])
            .map(|c| {
                let id = c
                    .requirements
                    .single_value(RESERVATION_ID)
                    .expect("a reserved claim names its reservation");
                (c.instance_types[0].as_str(), id)
            })
            .collect()
    }

    #[test]
    fn a_reservation_takes_only_as_many_claims_as_it_has_instances_left() {
        let input = SolveInput {
            pods: shared(pods(5)),
            nodepools: vec![pool_with(Requirements::new(), 2)],
            ..SolveInput::default()
        };
        let r = solve(&input, &SolveOptions::default()).unwrap();
        assert!(r.unschedulable.is_empty(), "{:?}", r.unschedulable);
        let mut reserved = reserved_claims(&r);
        reserved.sort();
        assert_eq!(
            reserved,
            [("large", "cr-b"), ("medium", "cr-a"), ("medium", "cr-a")]
        );
        for c in r
            .nodeclaims
            .iter()
            .filter(|c| c.capacity_types != ["reserved"])
        {
            assert!(!c.capacity_types.iter().any(|t| t == "reserved"), "{c:?}");
            assert!(c.requirements.get(RESERVATION_ID).is_none(), "{c:?}");
        }
        assert_eq!(r.nodeclaims.iter().map(|c| c.pods.len()).sum::<usize>(), 5);
        // The instances left serve demand at no price in the lower bound
        // (fractionally, so here all of it), which stays below the plan.
        assert!(r.lower_bound <= r.price + 1e-9, "{r:?}");
        assert!((0.13..0.15).contains(&r.price), "one spot medium: {r:?}");
    }

    #[test]
    fn pods_that_require_reserved_capacity_wait_once_the_reservations_are_taken() {
        let mut reqs = Requirements::new();
        reqs.add(CAPACITY_TYPE, Requirement::in_values(["reserved"]));
        let input = SolveInput {
            pods: shared(pods(5)),
            nodepools: vec![pool_with(reqs, 2)],
            ..SolveInput::default()
        };
        let r = solve(&input, &SolveOptions::default()).unwrap();
        // cr-b's large holds two pods, cr-a's two mediums one each.
        assert_eq!(reserved_claims(&r).len(), 3);
        assert_eq!(r.nodeclaims.len(), 3);
        assert_eq!(r.unschedulable.len(), 1, "{:?}", r.unschedulable);
        assert!(
            r.unschedulable
                .iter()
                .all(|u| u.reason == super::RESERVATIONS_TAKEN),
            "{:?}",
            r.unschedulable
        );
    }

    #[test]
    fn pods_select_reservations_by_id_and_type() {
        let select = |key: &str, value: &str, n: usize| {
            let mut pods = pods(n);
            for p in &mut pods {
                p.node_selector
                    .add(key, Requirement::in_values([value.to_string()]));
            }
            let input = SolveInput {
                pods: shared(pods),
                nodepools: vec![pool_with(Requirements::new(), 5)],
                ..SolveInput::default()
            };
            solve(&input, &SolveOptions::default()).unwrap()
        };
        let r = select(RESERVATION_ID, "cr-b", 2);
        assert_eq!(reserved_claims(&r), [("large", "cr-b")]);
        assert_eq!(r.nodeclaims[0].zones, ["z2"], "cr-b is a reservation in z2");
        assert!(r.nodeclaims[0].requirements.get(ZONE).is_some());
        assert_eq!(r.nodeclaims[0].pods.len(), 2, "a large node holds both");
        let r = select(RESERVATION_TYPE, "default", 3);
        assert_eq!(
            reserved_claims(&r),
            [("medium", "cr-a"), ("medium", "cr-a"), ("medium", "cr-a")]
        );
        let r = select(RESERVATION_ID, "cr-unknown", 1);
        assert!(r.nodeclaims.is_empty(), "{r:?}");
        assert_eq!(r.unschedulable.len(), 1);
    }

    #[test]
    fn a_used_up_reservation_is_not_planned() {
        let input = SolveInput {
            pods: shared(pods(2)),
            nodepools: vec![pool_with(Requirements::new(), 0)],
            ..SolveInput::default()
        };
        let r = solve(&input, &SolveOptions::default()).unwrap();
        assert!(
            reserved_claims(&r).iter().all(|(_, id)| *id == "cr-b"),
            "{r:?}"
        );
    }
}

#[cfg(test)]
mod properties {
    use std::collections::BTreeMap;

    use crate::scheduling::tests::shared;

    use proptest::prelude::*;

    use super::tests::{pool_with, sized_pods};
    use crate::model::labels::{CAPACITY_TYPE, RESERVATION_ID};
    use crate::model::{Requirement, Requirements};
    use crate::scheduling::{SolveInput, SolveOptions, solve};

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Whatever the pods: no reservation is planned for more claims
        /// than it has instances left, a claim that names one launches
        /// only there, the others launch no reserved capacity, and the
        /// solve's invariants hold.
        #[test]
        fn reservations_are_never_planned_past_their_instances(
            cpus in prop::collection::vec(200i64..7500, 1..24),
            left_a in 0u32..4,
            reserved_only in any::<bool>(),
        ) {
            let mut reqs = Requirements::new();
            if reserved_only {
                reqs.add(CAPACITY_TYPE, Requirement::in_values(["reserved"]));
            }
            let input = SolveInput {
                pods: shared(sized_pods(&cpus)),
                nodepools: vec![pool_with(reqs, left_a)],
                ..SolveInput::default()
            };
            let r = solve(&input, &SolveOptions::default()).unwrap();
            crate::scheduling::tests::check(&input, &r)?;
            let left: BTreeMap<&str, (u32, &str, &str)> =
                [("cr-a", (left_a, "medium", "z1")), ("cr-b", (1, "large", "z2"))].into();
            let mut taken: BTreeMap<&str, u32> = BTreeMap::new();
            for c in &r.nodeclaims {
                match c.requirements.single_value(RESERVATION_ID) {
                    Some(id) => {
                        *taken.entry(id).or_default() += 1;
                        let (_, ty, zone) = left[id];
                        prop_assert_eq!(&c.capacity_types, &["reserved"]);
                        prop_assert_eq!(&c.instance_types, &[ty]);
                        prop_assert_eq!(&c.zones, &[zone]);
                    }
                    None => prop_assert!(
                        !c.capacity_types.iter().any(|t| t == "reserved"),
                        "{:?}", c
                    ),
                }
            }
            for (id, n) in taken {
                prop_assert!(n <= left[id].0, "{} planned {} times", id, n);
            }
            prop_assert!(r.lower_bound <= r.price + 1e-9);
            let alone = crate::scheduling::lower_bound_only(&input, &SolveOptions::default());
            prop_assert_eq!(alone.unwrap().to_bits(), r.lower_bound.to_bits());
        }
    }
}
