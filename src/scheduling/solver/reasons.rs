//! Why a pod cannot get a new NodeClaim: precise, user-facing reasons.

use super::*;
use crate::model::quantity::format_quantity;

pub(super) fn short_key(key: &str) -> &str {
    match key {
        ZONE => "zone",
        HOSTNAME => "hostname",
        CAPACITY_TYPE => "capacity type",
        other => other,
    }
}

pub(super) fn describe_need(name: &str, req: i64, daemon: i64) -> String {
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

impl Solver<'_> {
    /// Why a pod's topology terms leave a NodePool no domain: the first
    /// term whose allowed values the NodePool cannot launch a node in for
    /// the pod, with the values it allows.
    pub(super) fn topology_reason(&self, a: &Attempt, pool: usize) -> String {
        let p = &self.pools[pool];
        let base = &self.variants[a.base_variant].per_pool[pool];
        let launchable = base.combos & p.all_offered;
        let narrowed = &self.variants[a.variant].per_pool[pool];
        let custom_blocked = narrowed.err.is_some() || narrowed.types.is_empty();
        let blocks = |k: usize| {
            let Some((_, allowed, _)) = a.keyed.iter().find(|e| e.0 == k) else {
                return false;
            };
            if Some(k) == self.zone_key || Some(k) == self.ct_key {
                allowed
                    .iter()
                    .all(|v| self.value_mask(k, v) & launchable == 0)
            } else {
                custom_blocked
            }
        };
        let Some((kind, k)) = a
            .narrowing
            .iter()
            .copied()
            .find(|&(_, k)| blocks(k))
            .or_else(|| a.narrowing.first().copied())
        else {
            return format!(
                "NodePool {}: no offering in an allowed zone and capacity type",
                p.name
            );
        };
        let d = &self.keys[k];
        let allowed: Vec<&str> = a
            .keyed
            .iter()
            .find(|e| e.0 == k)
            .map(|(_, allowed, _)| allowed.iter().map(|v| d.values[v].as_str()).collect())
            .unwrap_or_default();
        let what = match kind {
            TermKind::Spread { skew, .. } => {
                format!("topology spread on {} (maxSkew {skew})", short_key(&d.key))
            }
            TermKind::Affinity => format!("pod affinity on {}", short_key(&d.key)),
            TermKind::Anti => format!("pod anti-affinity on {}", short_key(&d.key)),
        };
        format!(
            "{what} allows only {}, where NodePool {} cannot launch a node for the pod",
            if allowed.is_empty() {
                "no domain".to_string()
            } else {
                allowed.join(", ")
            },
            p.name
        )
    }

    /// Why limit `i` of pool `p` leaves no room for any of `fitting`: what
    /// is counted against it, by existing capacity and by the claims planned
    /// in this solve, and what the smallest fitting type would add.
    fn limit_reason(&self, p: &Pool, i: usize, name: &str, fitting: &[&&TypeInfo]) -> String {
        let existing = p.lim_existing[i];
        let planned = p.lim_used[i] - existing;
        let claims = p.nodes_used - p.nodes_existing;
        let smallest = fitting.iter().map(|t| t.cap_lim[i]).min().unwrap_or(0);
        format!(
            "NodePool {} would exceed limit {}: {} is counted ({} on {} node(s) and in-flight NodeClaim(s), {} reserved by {} NodeClaim(s) planned in this solve, each at the largest capacity among the instance types it may launch), and the smallest instance type that fits adds {}",
            p.name,
            describe(name, p.lim[i]),
            format_quantity(name, p.lim_used[i]),
            format_quantity(name, existing),
            p.nodes_existing,
            format_quantity(name, planned),
            claims,
            format_quantity(name, smallest),
        )
    }

    pub(super) fn explain_new(&self, pod: usize, a: &Attempt, pool: usize, combos: u128) -> String {
        let p = &self.pools[pool];
        let pv = &self.variants[a.variant].per_pool[pool];
        let req = &self.pod_req[pod];
        let types: Vec<&TypeInfo> = pv.types.iter().map(|i| &p.types[i]).collect();
        for (d, name) in self.dims.iter().enumerate() {
            // Types' `alloc` is net of their daemon overhead.
            let need = req[d];
            if (need > 0 || p.daemon_min[d] > 0) && types.iter().all(|t| t.alloc[d] < need) {
                return format!(
                    "no instance type in NodePool {} has {}",
                    p.name,
                    describe_need(name, req[d], p.daemon_min[d])
                );
            }
        }
        let fitting: Vec<&&TypeInfo> = types
            .iter()
            .filter(|t| fits_sum(&p.zero, req, &t.alloc))
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
                return self.limit_reason(p, i, name, &fitting);
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
}
