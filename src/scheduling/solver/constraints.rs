//! What a pod's constraints allow at one relaxation level: the levels
//! themselves, the topology domains a term permits ([`Attempt`]), and
//! whether an existing node or a planned claim admits the pod.

use super::*;

pub(super) fn merge_keyed(
    keyed: &mut Vec<(usize, Bits, bool)>,
    k: usize,
    allowed: Bits,
    absent_ok: bool,
) {
    if let Some(e) = keyed.iter_mut().find(|e| e.0 == k) {
        let prev = e.1.clone();
        e.1.assign_and(&prev, &allowed);
        e.2 &= absent_ok;
    } else {
        keyed.push((k, allowed, absent_ok));
    }
}

pub(super) fn add_pin(pins: &mut Vec<(usize, Vec<usize>)>, k: usize, counter: Option<usize>) {
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
    /// The relaxation levels of a class, strictest first.
    pub(super) fn levels(&self, class: usize) -> Vec<Relax> {
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

    pub(super) fn term_active(t: &Term, r: &Relax) -> bool {
        match (t.kind, t.rank) {
            (TermKind::Spread { anyway, .. }, _) => !(anyway && r.anyway_dropped),
            (_, None) => true,
            (TermKind::Affinity, Some(rank)) => rank >= r.aff_dropped,
            (TermKind::Anti, Some(rank)) => rank >= r.anti_dropped,
        }
    }

    /// Domains of `key` the pod could land in (for spread minimums).
    pub(super) fn eligible_values(
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
                // A key the NodePool leaves to its instance types (a
                // placement group's partition): the values of the types
                // the pod may use, as Karpenter's domains include them.
                let pool_req = pool.reqs.get(&d.key);
                let np = &self.input.nodepools[pool.spec];
                let mut typed = Bits::new(if pool_req.is_none() { d.len() } else { 0 });
                if pool_req.is_none() {
                    let of = |ti: usize| {
                        np.instance_types[pool.types[ti].source]
                            .requirements
                            .get(&d.key)
                    };
                    let mut mark = |r: &Requirement| {
                        for (vi, val) in d.values.iter().enumerate() {
                            if r.has(val) {
                                typed.set(vi);
                            }
                        }
                    };
                    if honor_affinity {
                        pv.types.iter().filter_map(of).for_each(&mut mark);
                    } else {
                        (0..pool.types.len()).filter_map(of).for_each(&mut mark);
                    }
                }
                for (vi, val) in d.values.iter().enumerate() {
                    let pool_ok = pool_req.map_or(typed.get(vi), |r| r.has(val));
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
                    &self.pods[self.classes[class].rep].tolerations,
                    true,
                )
                .is_some()
            {
                continue;
            }
            if let Some(val) = n.values[key] {
                // Honor: a node counts only if the pod's nodeSelector and
                // required node affinity (this variant's) select it.
                if honor_affinity && v.reqs.matches_labels(n.labels).is_err() {
                    continue;
                }
                out.set(val as usize);
            }
        }
        out
    }

    /// Builds the constraints of one attempt, or why the pod's topology
    /// cannot be met at this level.
    pub(super) fn attempt(&mut self, class: usize, r: &Relax) -> Result<Attempt, String> {
        let variant = self.variant(class, r);
        let this = &*self;
        let c = &this.classes[class];
        let mut keyed: Vec<(usize, Bits, bool)> = Vec::new();
        let mut host = Vec::new();
        let mut pins: Vec<(usize, Vec<usize>)> = Vec::new();
        let mut narrowing: Vec<(TermKind, usize)> = Vec::new();
        let (counted_by, blocked_by, owns) = (&c.counted_by, &c.blocked_by, &c.owns);
        for t in c.terms.iter().filter(|t| Self::term_active(t, r)) {
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
                    narrowing.push((t.kind, k));
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
        for &b in blocked_by {
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
                    narrowing.push((TermKind::Anti, k));
                    add_pin(&mut pins, k, None);
                }
            }
        }
        // A pod only counted on a key (selected by someone else's spread or
        // affinity) does not narrow the claim: as in the reference, it is
        // counted only where the claim's domain is already single.
        for &ci in owns {
            if let TopoKey::Key(k) = self.counters[ci].key {
                add_pin(&mut pins, k, Some(ci));
            }
        }
        for &ci in counted_by {
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
        // Other keys narrow the pod's requirements (and so the instance
        // types and NodePools it may use) to the allowed values: `In` them,
        // or, where a node without the label is acceptable (anti-affinity),
        // `NotIn` the values that are not.
        let base_variant = variant;
        let mut variant = variant;
        if keyed
            .iter()
            .any(|(k, _, _)| Some(*k) != self.zone_key && Some(*k) != self.ct_key)
        {
            let mut reqs = self.variants[variant].reqs.clone();
            for (k, allowed, absent_ok) in &keyed {
                if Some(*k) == self.zone_key || Some(*k) == self.ct_key {
                    continue;
                }
                let d = &self.keys[*k];
                if *absent_ok {
                    let banned: Vec<&String> = (0..d.len())
                        .filter(|v| !allowed.get(*v))
                        .map(|v| &d.values[v])
                        .collect();
                    if !banned.is_empty() {
                        reqs.add(&d.key, Requirement::not_in(banned.into_iter().cloned()));
                    }
                } else {
                    reqs.add(
                        &d.key,
                        Requirement::in_values(allowed.iter().map(|v| d.values[v].clone())),
                    );
                }
            }
            let ports = self.variant_ports(&self.pods[self.classes[class].rep].host_ports);
            variant = self.variant_for(reqs, ports);
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
            base_variant,
            tolerate_soft: r.tolerate_soft,
            keyed,
            host,
            pins,
            zone_mask,
            narrowing,
        })
    }

    pub(super) fn host_ok(&self, a: &Attempt, target: Option<usize>) -> bool {
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
    pub(super) fn host_excludes_all(&self, a: &Attempt) -> bool {
        let n = self.n_targets() as u32;
        a.host
            .iter()
            .any(|h| matches!(*h, HostCheck::Zero(c) if self.counters[c].nonzero_targets >= n))
    }

    pub(super) fn ports_ok(ports: &[HostPort], want: &[HostPort]) -> bool {
        want.iter().all(|w| ports.iter().all(|p| !p.conflicts(w)))
    }

    pub(super) fn check_node(&self, pod: usize, a: &Attempt, n: usize) -> bool {
        let node = &self.nodes[n];
        let p = &self.pods[pod];
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
            .matches_labels(node.labels)
            .is_ok()
    }

    /// Allowed offering domains of a claim after the attempt's zone and
    /// capacity-type constraints.
    pub(super) fn claim_combos(&self, claim: &Claim, a: &Attempt) -> u128 {
        claim.combos & self.variants[a.variant].per_pool[claim.pool].combos & a.zone_mask
    }

    /// Do `reqs` admit an allowed value of every constrained key other than
    /// zone and capacity type? Without a requirement on the key, a
    /// well-known key is the instance types' to decide (the attempt's
    /// variant narrows them), and a key that may be absent is fine.
    pub(super) fn custom_keys_ok(&self, reqs: &Requirements, a: &Attempt) -> bool {
        a.keyed.iter().all(|(k, allowed, absent_ok)| {
            if Some(*k) == self.zone_key || Some(*k) == self.ct_key {
                return true;
            }
            let d = &self.keys[*k];
            match reqs.get(&d.key) {
                Some(r) => allowed.iter().any(|v| r.has(&d.values[v])),
                None => *absent_ok || is_well_known(&d.key),
            }
        })
    }

    /// The offering domains a claim would keep with the pod, if the pod's
    /// taints, hostname topology, ports, zones and requirements allow it.
    pub(super) fn admits(&self, pod: usize, a: &Attempt, ci: usize) -> Option<u128> {
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
            || !Self::ports_ok(&claim.ports, &self.pods[pod].host_ports)
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

    /// The single value of `key` at a target, if it has one.
    pub(super) fn target_value(&self, target: usize, key: usize) -> Option<u32> {
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

    pub(super) fn claim_values(&self, claim: &Claim, key: usize) -> Bits {
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

    pub(super) fn value_mask(&self, key: usize, v: usize) -> u128 {
        let ncts = self.cts.len().max(1);
        if Some(key) == self.zone_key {
            ((1u128 << ncts) - 1) << (v * ncts)
        } else if Some(key) == self.ct_key {
            (0..self.zones.len()).fold(0u128, |m, zi| m | 1u128 << (zi * ncts + v))
        } else {
            u128::MAX
        }
    }
}
