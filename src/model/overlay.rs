//! NodeOverlays: a pure transformation of the instance types each NodePool
//! may launch, as Karpenter v1.14.1 applies them under its `NodeOverlay`
//! feature gate (`pkg/controllers/nodeoverlay`, `pkg/cloudprovider/overlay`).
//!
//! An overlay selects instance types, per NodePool, by its requirements,
//! matched against the type's labels (zones and capacity types included),
//! the NodePool's name (`karpenter.sh/nodepool`) and its template labels;
//! within a selected type it selects the offerings (zone, capacity type)
//! its requirements allow. It then changes their price (`price`, a fixed
//! price, or `priceAdjustment`, a signed amount or percentage, never below
//! zero) or sets extended resources of the type's capacity (`capacity`).
//!
//! Overlays are taken by weight, highest first, and among equal weights by
//! name in reverse alphabetical order (the reference's `OrderByWeight`). The
//! first to change an offering's price, or a resource of a type's capacity,
//! wins. An overlay that would change what an earlier overlay **of the same
//! weight** changed is in conflict: it is not applied at all (not to any
//! NodePool, never in part) and its `ValidationSucceeded` condition says
//! `Conflict`. For capacity, as in the reference, "what an earlier overlay
//! changed" is the resources of the last overlay applied to the type.
//!
//! Everything here is pure: the controller and `plan` call [`apply`] on the
//! NodePools they built (`convert::apply_overlays`), before the solver,
//! consolidation's prices and the lower bound read them.

use std::collections::{BTreeMap, BTreeSet};

use super::instance_type::InstanceType;
use super::labels::{CAPACITY_TYPE, NODEPOOL, ZONE};
use super::requirements::{Requirement, Requirements};
use super::resources::Resources;

/// What an overlay does to a price.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PriceChange {
    /// `price`, or an unsigned `priceAdjustment`: the price becomes this.
    Set(f64),
    /// A signed amount in USD/h.
    Add(f64),
    /// A signed percentage.
    Percent(f64),
}

impl PriceChange {
    /// Parses `price` (`"0.5"`) or `priceAdjustment` (`"+0.1"`, `"-0.05"`,
    /// `"-50%"`), as the reference's `AdjustedPrice` reads them: without a
    /// sign the value is the price itself.
    pub fn parse(s: &str) -> Result<PriceChange, String> {
        let number = |t: &str| {
            t.parse::<f64>()
                .ok()
                .filter(|f| f.is_finite())
                .ok_or_else(|| format!("{s:?} is not a price or a price adjustment"))
        };
        if !s.starts_with(['+', '-']) {
            return number(s).map(PriceChange::Set);
        }
        match s.strip_suffix('%') {
            Some(p) => number(p).map(PriceChange::Percent),
            None => number(s).map(PriceChange::Add),
        }
    }

    /// The price after the change, never below zero.
    pub fn apply(self, price: f64) -> f64 {
        let p = match self {
            PriceChange::Set(p) => return p,
            PriceChange::Add(d) => price + d,
            PriceChange::Percent(pc) => price * (1.0 + pc / 100.0),
        };
        p.max(0.0)
    }
}

/// A NodeOverlay as the core reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Overlay {
    pub name: String,
    /// `spec.weight`; 0 when unset.
    pub weight: i32,
    pub requirements: Requirements,
    pub price: Option<PriceChange>,
    /// Extended resources set on the selected types' capacity.
    pub capacity: Resources,
    /// Why the overlay cannot be applied (the reference's runtime
    /// validation), if it cannot.
    pub invalid: Option<String>,
}

/// The `ValidationSucceeded` verdict on an overlay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Applied wherever it selects something (possibly nowhere).
    Applied,
    /// It changes what an overlay of the same weight taken before it
    /// changed: not applied.
    Conflict,
    /// Invalid (reason `RuntimeValidation`): not applied.
    Invalid(String),
}

impl Verdict {
    /// The condition's reason: `Conflict` or `RuntimeValidation`, `None`
    /// when it succeeded.
    pub fn reason(&self) -> Option<&'static str> {
        match self {
            Verdict::Applied => None,
            Verdict::Conflict => Some("Conflict"),
            Verdict::Invalid(_) => Some("RuntimeValidation"),
        }
    }

    /// The condition's message.
    pub fn message(&self) -> String {
        match self {
            Verdict::Applied => String::new(),
            Verdict::Conflict => "conflict with another overlay".into(),
            Verdict::Invalid(e) => e.clone(),
        }
    }
}

/// A NodePool's instance types, for [`apply`] to change in place.
pub struct PoolTypes<'a> {
    pub name: &'a str,
    /// The NodePool's template labels.
    pub labels: &'a BTreeMap<String, String>,
    pub types: &'a mut Vec<InstanceType>,
}

/// What [`apply`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// Each overlay's verdict, by name, in the order they were taken.
    pub verdicts: Vec<(String, Verdict)>,
    /// (NodePool, instance type) whose offerings' prices an overlay changed.
    pub price_overlaid: BTreeSet<(String, String)>,
    /// (NodePool, instance type) whose capacity an overlay changed.
    pub capacity_overlaid: BTreeSet<(String, String)>,
}

impl Outcome {
    pub fn verdict(&self, name: &str) -> Option<&Verdict> {
        self.verdicts
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
    }
}

/// The updates stored for one (NodePool, instance type).
#[derive(Default)]
struct TypeUpdate {
    /// Offering index → (change, lowest weight that touched it).
    price: BTreeMap<usize, (PriceChange, i32)>,
    /// The capacity set, the resources of the last overlay applied, and
    /// its weight.
    capacity: Option<(Resources, BTreeSet<String>, i32)>,
}

/// Applies `overlays` to every NodePool's instance types in place.
pub fn apply(overlays: &[Overlay], pools: &mut [PoolTypes]) -> Outcome {
    let mut out = Outcome::default();
    let mut order: Vec<&Overlay> = overlays.iter().collect();
    order.sort_by(|a, b| b.weight.cmp(&a.weight).then(b.name.cmp(&a.name)));
    if order.is_empty() {
        return out;
    }
    let mut store: BTreeMap<(usize, usize), TypeUpdate> = BTreeMap::new();
    for ov in order {
        if let Some(e) = &ov.invalid {
            out.verdicts
                .push((ov.name.clone(), Verdict::Invalid(e.clone())));
            continue;
        }
        // (pool, type) → the offerings it selects.
        let mut selected: Vec<((usize, usize), Vec<usize>)> = Vec::new();
        for (p, pool) in pools.iter().enumerate() {
            for (t, it) in pool.types.iter().enumerate() {
                let offerings = selects(ov, pool.name, pool.labels, it);
                if !offerings.is_empty() {
                    selected.push(((p, t), offerings));
                }
            }
        }
        let conflict = selected.iter().any(|(key, offerings)| {
            let Some(u) = store.get(key) else {
                return false;
            };
            let price = ov.price.is_some()
                && offerings
                    .iter()
                    .any(|o| u.price.get(o).is_some_and(|(_, w)| *w == ov.weight));
            let capacity = !ov.capacity.0.is_empty()
                && u.capacity.as_ref().is_some_and(|(_, last, w)| {
                    *w == ov.weight && ov.capacity.0.keys().any(|k| last.contains(k))
                });
            price || capacity
        });
        if conflict {
            out.verdicts.push((ov.name.clone(), Verdict::Conflict));
            continue;
        }
        for (key, offerings) in selected {
            let u = store.entry(key).or_default();
            if let Some(change) = ov.price {
                for o in offerings {
                    u.price
                        .entry(o)
                        .and_modify(|(_, w)| *w = ov.weight)
                        .or_insert((change, ov.weight));
                }
            }
            if !ov.capacity.0.is_empty() {
                let keys: BTreeSet<String> = ov.capacity.0.keys().cloned().collect();
                match &mut u.capacity {
                    None => u.capacity = Some((ov.capacity.clone(), keys, ov.weight)),
                    Some((set, last, w)) => {
                        for (k, v) in &ov.capacity.0 {
                            set.0.entry(k.clone()).or_insert(*v);
                        }
                        *last = keys;
                        *w = ov.weight;
                    }
                }
            }
        }
        out.verdicts.push((ov.name.clone(), Verdict::Applied));
    }
    for ((p, t), u) in store {
        let pool = &mut pools[p];
        let it = &mut pool.types[t];
        if !u.price.is_empty() {
            for (o, (change, _)) in &u.price {
                let offering = &mut it.offerings[*o];
                offering.price = change.apply(offering.price);
            }
            out.price_overlaid
                .insert((pool.name.to_string(), it.name.clone()));
        }
        if let Some((set, _, _)) = u.capacity {
            let overhead = it.overhead.total();
            for (k, v) in set.0 {
                it.capacity.set(&k, v);
                it.allocatable
                    .set(&k, v.saturating_sub(overhead.get(&k)).max(0));
            }
            out.capacity_overlaid
                .insert((pool.name.to_string(), it.name.clone()));
        }
    }
    out
}

/// The offerings of `it` an overlay selects in NodePool `pool` (with
/// template `labels`): none unless the type, as the reference describes it
/// there (its requirements, `karpenter.sh/nodepool In [pool]` and the
/// labels, intersected), is compatible with the overlay's requirements,
/// where a key it does not define fails unless the overlay allows its
/// absence; then those whose zone and capacity type the requirements
/// allow (keys they do not name allow any). Only the overlay's keys are
/// looked at: nothing is built per type.
fn selects(
    ov: &Overlay,
    pool: &str,
    labels: &BTreeMap<String, String>,
    it: &InstanceType,
) -> Vec<usize> {
    for (key, incoming) in &ov.requirements.0 {
        let mut existing: Option<Requirement> = None;
        let mut meet = |r: &Requirement| {
            existing = Some(match existing.take() {
                Some(e) => e.intersection(r),
                None => r.clone(),
            });
        };
        if key == NODEPOOL {
            meet(&Requirement::in_values([pool]));
        }
        if let Some(v) = labels.get(key) {
            meet(&Requirement::in_values([v.clone()]));
        }
        if let Some(r) = it.requirements.get(key) {
            meet(r);
        }
        let ok = match existing {
            None => incoming.allows_absent(),
            Some(e) => {
                !e.intersection(incoming).is_empty()
                    || (incoming.allows_absent() && e.allows_absent())
            }
        };
        if !ok {
            return Vec::new();
        }
    }
    let allows = |key: &str, value: &str| ov.requirements.get(key).is_none_or(|r| r.has(value));
    it.offerings
        .iter()
        .enumerate()
        .filter(|(_, o)| allows(ZONE, &o.zone) && allows(CAPACITY_TYPE, &o.capacity_type))
        .map(|(i, _)| i)
        .collect()
}

#[cfg(test)]
mod tests;
