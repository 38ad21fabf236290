//! The simulated EC2's offerings, made once from the catalog when the
//! provider is built, and its spot price model.
//!
//! # Offerings
//!
//! The catalog (the shared catalog format, see [`super::SimEc2::builtin_catalog`]
//! and [`super::SimEc2::load_catalog`]) is prepared once, when the provider is
//! built:
//! - offerings are restricted to the configured zones: an offering in
//!   another zone is dropped, and no offering is invented in a configured
//!   zone the catalog does not list for a type;
//! - with spot enabled, every on-demand offering gets a spot offering in the
//!   same zone, priced as described below, unless the catalog already lists
//!   a spot offering there (the catalog's price wins); with spot disabled,
//!   spot offerings are dropped;
//! - reserved offerings are dropped (capacity reservations are not
//!   simulated);
//! - a type left without offerings is dropped;
//! - each type's zone, capacity-type and region requirements are rewritten
//!   to match its remaining offerings and the configured region.
//!
//! # Spot prices
//!
//! The catalogs list on-demand prices only, so spot prices follow a fixed
//! model: `spot = on-demand × factor`, where the factor depends only on the
//! instance type's name, the zone and whether the type is accelerated:
//!
//! - `h` is the 64-bit FNV-1a hash of the UTF-8 bytes of
//!   `<instance type>/<zone>` (e.g. `m7i.large/us-east-1a`), passed through
//!   MurmurHash3's 64-bit finalizer (`fmix64`) so that zone names differing
//!   only in their last letter still get unrelated factors;
//! - `factor = low + (high − low) × (h mod 1001) / 1000`;
//! - `[low, high]` is `[0.40, 0.55]` for accelerated types (a positive
//!   `karpenter.k8s.aws/instance-gpu-count` or
//!   `karpenter.k8s.aws/instance-accelerator-count` label) and
//!   `[0.30, 0.45]` for every other type (general purpose, compute and
//!   memory optimised, burstable, storage).
//!
//! Prices are therefore reproducible across runs and machines, differ
//! between zones of the same type (so zone choice matters, as in EC2), and
//! never change during a run.

use crate::api;
use crate::model::labels::{CAPACITY_TYPE, REGION, ZONE};
use crate::model::{InstanceType, Offering, Requirement};

/// The spot discount range of accelerated (GPU, Neuron) types: their spot
/// market is tighter, so discounts are smaller.
pub(super) const ACCELERATED_SPOT_FACTOR: (f64, f64) = (0.40, 0.55);
/// The spot discount range of every other type.
pub(super) const STANDARD_SPOT_FACTOR: (f64, f64) = (0.30, 0.45);
/// Steps of the spot factor within its range (1001 values, 0.00015 apart).
pub(super) const SPOT_FACTOR_STEPS: u64 = 1000;

/// Labels whose positive value marks an accelerated type.
pub(super) const ACCELERATOR_COUNT_LABELS: [&str; 2] = [
    "karpenter.k8s.aws/instance-gpu-count",
    "karpenter.k8s.aws/instance-accelerator-count",
];

/// The catalog entry as the simulated EC2 offers it (see the module
/// documentation), or `None` if it has no offering left.
pub(super) fn prepare(
    mut it: InstanceType,
    region: &str,
    zones: &[String],
    spot: bool,
) -> Option<InstanceType> {
    let in_zone = |o: &&Offering| zones.contains(&o.zone);
    let on_demand: Vec<Offering> = it
        .offerings
        .iter()
        .filter(in_zone)
        .filter(|o| o.capacity_type == api::CAPACITY_TYPE_ON_DEMAND)
        .cloned()
        .collect();
    let mut offerings = on_demand.clone();
    if spot {
        let listed: Vec<Offering> = it
            .offerings
            .iter()
            .filter(in_zone)
            .filter(|o| o.capacity_type == api::CAPACITY_TYPE_SPOT)
            .cloned()
            .collect();
        let accelerated = is_accelerated(&it);
        for od in &on_demand {
            if !listed.iter().any(|s| s.zone == od.zone) {
                offerings.push(Offering {
                    zone: od.zone.clone(),
                    capacity_type: api::CAPACITY_TYPE_SPOT.to_string(),
                    price: od.price * spot_factor(&it.name, &od.zone, accelerated),
                    available: od.available,
                    reservations: Vec::new(),
                });
            }
        }
        offerings.extend(listed);
    }
    if offerings.is_empty() {
        return None;
    }
    offerings.sort_by(|a, b| {
        a.zone
            .cmp(&b.zone)
            .then_with(|| a.capacity_type.cmp(&b.capacity_type))
    });
    offerings.dedup_by(|a, b| a.zone == b.zone && a.capacity_type == b.capacity_type);
    let values = |f: fn(&Offering) -> &String| {
        Requirement::in_values(offerings.iter().map(|o| f(o).clone()))
    };
    let zone_req = values(|o| &o.zone);
    let capacity_req = values(|o| &o.capacity_type);
    it.requirements.0.insert(ZONE.to_string(), zone_req);
    it.requirements
        .0
        .insert(CAPACITY_TYPE.to_string(), capacity_req);
    it.requirements
        .0
        .insert(REGION.to_string(), Requirement::in_values([region]));
    it.offerings = offerings;
    Some(it)
}

/// Is the type accelerated (GPUs, Neuron devices)?
pub(super) fn is_accelerated(it: &InstanceType) -> bool {
    ACCELERATOR_COUNT_LABELS.iter().any(|key| {
        it.requirements
            .single_value(key)
            .and_then(|v| v.parse::<i64>().ok())
            .is_some_and(|n| n > 0)
    })
}

/// The spot price factor of an instance type in a zone (see the module
/// documentation): within `[0.40, 0.55]` for accelerated types and
/// `[0.30, 0.45]` for others.
pub fn spot_factor(instance_type: &str, zone: &str, accelerated: bool) -> f64 {
    let (low, high) = if accelerated {
        ACCELERATED_SPOT_FACTOR
    } else {
        STANDARD_SPOT_FACTOR
    };
    let h = fmix64(fnv1a64(
        instance_type
            .bytes()
            .chain(std::iter::once(b'/'))
            .chain(zone.bytes()),
    ));
    // Both operands are at most 1000, so the conversions are exact.
    let step = (h % (SPOT_FACTOR_STEPS + 1)) as f64;
    low + (high - low) * step / SPOT_FACTOR_STEPS as f64
}

/// The 64-bit FNV-1a hash.
pub(super) fn fnv1a64(bytes: impl IntoIterator<Item = u8>) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .into_iter()
        .fold(OFFSET_BASIS, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

/// MurmurHash3's 64-bit finalizer: every input bit affects every output bit.
pub(super) fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}
