//! What the controller's loops read off a NodeClaim: when it was created,
//! its `expireAfter`, and the share of its lifetime still ahead of it.
//! Disruption and static capacity both weigh candidates with these.

use std::time::Duration;

use crate::api::NodeClaim;
use crate::clock::Timestamp;
use crate::disruption;
use crate::timing::{DurationSyntax, NillableDuration, parse_duration};

/// The share of a NodeClaim's lifetime still ahead of it (1 without
/// `expireAfter`), which weighs its disruption cost as the reference's
/// `LifetimeRemaining` does.
pub(super) fn lifetime_remaining(claim: &NodeClaim, now: Timestamp) -> f64 {
    let expire_after = claim_expire_after(claim);
    let expires_at = disruption::expires_at(expire_after, claim_created(claim, now));
    match (expire_after, expires_at) {
        (Some(d), Some(t)) if !d.is_zero() => (Duration::try_from(t.duration_since(now))
            .unwrap_or_default()
            .as_secs_f64()
            / d.as_secs_f64())
        .clamp(0.0, 1.0),
        _ => 1.0,
    }
}

/// A duration in Karpenter's `Never`-or-duration syntax; `default` when it
/// is unset or does not parse (the schema rejects that at admission).
pub(super) fn duration_or_never(s: Option<&str>, default: Option<Duration>) -> Option<Duration> {
    match s.map(|s| parse_duration(s, DurationSyntax::HmsOrNever)) {
        None => default,
        Some(Ok(NillableDuration::After(d))) => Some(d),
        Some(Ok(NillableDuration::Never)) => None,
        Some(Err(_)) => default,
    }
}

/// A NodeClaim's `expireAfter` (the reference's default of 720h when
/// unset); `None` for `Never`.
pub(super) fn claim_expire_after(claim: &NodeClaim) -> Option<Duration> {
    duration_or_never(
        claim.spec.expire_after.as_deref(),
        Some(Duration::from_secs(720 * 3600)),
    )
}

/// When a NodeClaim was created (`now` for one not stored yet).
pub(super) fn claim_created(claim: &NodeClaim, now: Timestamp) -> Timestamp {
    claim
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .unwrap_or(now)
}
