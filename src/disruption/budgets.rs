//! Disruption budgets at a point in time: how many of a NodePool's nodes
//! each voluntary reason may disrupt now.
//!
//! As in the reference: a budget applies to the reasons it lists (all when
//! it lists none); one with a `schedule` is active for `duration` after
//! each time its cron schedule (UTC) fires; `nodes` is a count or a
//! percentage of the NodePool's nodes, rounded up. The number allowed is
//! the minimum over the active budgets that apply, minus the pool's nodes
//! already being disrupted or not ready, never below zero. No active
//! budget that applies leaves the reason unbounded.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::jiff::tz::TimeZone;

use crate::api::NodePool;
use crate::api::nodepool::{Budget, DisruptionReason};
use crate::clock::Timestamp;
use crate::drift::budget::allowed;
use crate::timing::{DurationSyntax, NillableDuration, Schedule, parse_duration};

use super::Reason;

/// What one NodePool's budgets allow now, per voluntary reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowed {
    /// Nodes of the pool.
    pub total: usize,
    /// Nodes being disrupted, deleted or not ready.
    pub disrupting: usize,
    /// Per reason: the most restrictive active budget's allowance (before
    /// subtracting `disrupting`), `None` when no active budget applies.
    pub limit: BTreeMap<Reason, Option<usize>>,
    /// Reasons whose most restrictive active budget has a schedule: a
    /// window, not the pool's standing budget, holds them.
    pub scheduled: std::collections::BTreeSet<Reason>,
}

impl Allowed {
    /// How many more nodes `reason` may disrupt now.
    pub fn remaining(&self, reason: Reason) -> usize {
        match self.limit.get(&reason).copied().flatten() {
            Some(l) => l.saturating_sub(self.disrupting),
            None => usize::MAX,
        }
    }
}

/// Whether a budget is active at `now`: always without a schedule; with
/// one, from each time it fires until `duration` later. A budget whose
/// schedule or duration does not parse (validation rejects both) is never
/// active, so it cannot block disruption by accident.
pub fn is_active(budget: &Budget, now: Timestamp) -> bool {
    let Some(schedule) = &budget.schedule else {
        return true;
    };
    let (Ok(schedule), Some(duration)) = (Schedule::parse(schedule), window(budget)) else {
        return false;
    };
    let zoned = now.to_zoned(TimeZone::UTC);
    schedule
        .cron()
        .find_previous_occurrence(&zoned, true)
        .is_ok_and(|fired| {
            Duration::try_from(now.duration_since(fired.timestamp()))
                .is_ok_and(|elapsed| elapsed < duration)
        })
}

fn window(budget: &Budget) -> Option<Duration> {
    match parse_duration(budget.duration.as_deref()?, DurationSyntax::HoursMinutes) {
        Ok(NillableDuration::After(d)) => Some(d),
        _ => None,
    }
}

/// When the set of active budgets of a pool may next change after `now`
/// (a schedule firing or a window closing), for waking up.
pub fn next_change(pool: &NodePool, now: Timestamp) -> Option<Timestamp> {
    let zoned = now.to_zoned(TimeZone::UTC);
    let mut next: Option<Timestamp> = None;
    let mut consider = |t: Timestamp| {
        if t > now && next.is_none_or(|n| t < n) {
            next = Some(t);
        }
    };
    for b in budgets(pool) {
        let (Some(s), Some(d)) = (b.schedule.as_deref(), window(&b)) else {
            continue;
        };
        let Ok(schedule) = Schedule::parse(s) else {
            continue;
        };
        if let Ok(f) = schedule.cron().find_next_occurrence(&zoned, false) {
            consider(f.timestamp());
        }
        if let Ok(f) = schedule.cron().find_previous_occurrence(&zoned, true)
            && let Ok(end) = f.timestamp().checked_add(d)
        {
            consider(end);
        }
    }
    next
}

/// The pool's budgets, defaults applied (10% when none are written).
fn budgets(pool: &NodePool) -> Vec<Budget> {
    let mut pool = pool.clone();
    pool.apply_defaults();
    pool.spec
        .disruption
        .and_then(|d| d.budgets)
        .unwrap_or_default()
}

/// What `pool`'s budgets allow at `now` with `total` nodes of which
/// `disrupting` are being disrupted, deleted or not ready.
pub fn allowed_now(pool: &NodePool, total: usize, disrupting: usize, now: Timestamp) -> Allowed {
    let active: Vec<Budget> = budgets(pool)
        .into_iter()
        .filter(|b| is_active(b, now))
        .collect();
    let mut limit = BTreeMap::new();
    let mut scheduled = std::collections::BTreeSet::new();
    for reason in Reason::VOLUNTARY {
        let api = reason.budget_reason();
        let l = active
            .iter()
            .filter(|b| {
                b.reasons
                    .as_ref()
                    .is_none_or(|rs| rs.is_empty() || api.is_some_and(|r| rs.contains(&r)))
            })
            .map(|b| (allowed(&b.nodes, total), b.schedule.is_some()))
            .min_by_key(|(n, windowed)| (*n, !*windowed));
        if l.is_some_and(|(_, windowed)| windowed) {
            scheduled.insert(reason);
        }
        limit.insert(reason, l.map(|(n, _)| n));
    }
    Allowed {
        total,
        disrupting,
        limit,
        scheduled,
    }
}

impl Reason {
    /// The budget reason that governs this disruption reason, if any.
    pub fn budget_reason(self) -> Option<DisruptionReason> {
        match self {
            Reason::Empty => Some(DisruptionReason::Empty),
            Reason::Underutilized => Some(DisruptionReason::Underutilized),
            Reason::Drifted => Some(DisruptionReason::Drifted),
            Reason::Expired | Reason::Interrupted => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::parse_rfc3339;
    use crate::testing::pool_with_budgets as pool;
    use serde_json::json;

    fn at(s: &str) -> Timestamp {
        parse_rfc3339(s).unwrap()
    }

    #[test]
    fn a_business_hours_window_blocks_only_its_reasons_and_only_inside_it() {
        // Monday 2026-01-05.
        let p = pool(json!([
            {"nodes": "10%"},
            {"nodes": "0", "reasons": ["Underutilized"], "schedule": "0 9 * * mon-fri", "duration": "8h"}
        ]));
        let inside = allowed_now(&p, 20, 0, at("2026-01-05T10:00:00Z"));
        assert_eq!(inside.remaining(Reason::Underutilized), 0);
        assert_eq!(inside.remaining(Reason::Empty), 2);
        assert_eq!(inside.remaining(Reason::Drifted), 2);
        let edge = allowed_now(&p, 20, 0, at("2026-01-05T09:00:00Z"));
        assert_eq!(edge.remaining(Reason::Underutilized), 0);
        let after = allowed_now(&p, 20, 0, at("2026-01-05T17:00:00Z"));
        assert_eq!(after.remaining(Reason::Underutilized), 2);
        let weekend = allowed_now(&p, 20, 0, at("2026-01-10T10:00:00Z"));
        assert_eq!(weekend.remaining(Reason::Underutilized), 2);
        assert_eq!(
            next_change(&p, at("2026-01-05T10:00:00Z")),
            Some(at("2026-01-05T17:00:00Z"))
        );
        assert_eq!(
            next_change(&p, at("2026-01-05T17:00:00Z")),
            Some(at("2026-01-06T09:00:00Z"))
        );
    }

    #[test]
    fn nodes_being_disrupted_count_against_the_budget_and_expiry_is_unbudgeted() {
        let p = pool(json!([{"nodes": "10%"}]));
        let a = allowed_now(&p, 25, 2, at("2026-01-05T10:00:00Z"));
        // 10% of 25 rounds up to 3; 2 are already being disrupted.
        assert_eq!(a.remaining(Reason::Drifted), 1);
        assert_eq!(
            allowed_now(&p, 25, 5, at("2026-01-05T10:00:00Z")).remaining(Reason::Empty),
            0
        );
        assert_eq!(a.remaining(Reason::Expired), usize::MAX);
        // No budget written: the default 10%.
        let d = allowed_now(
            &NodePool::test("general"),
            10,
            0,
            at("2026-01-05T10:00:00Z"),
        );
        assert_eq!(d.remaining(Reason::Underutilized), 1);
    }

    #[test]
    fn a_scheduled_budget_outside_its_window_leaves_the_reason_unbounded() {
        let p = pool(json!([{"nodes": "0", "schedule": "@daily", "duration": "1h"}]));
        let a = allowed_now(&p, 6, 0, at("2026-01-05T12:00:00Z"));
        assert_eq!(a.remaining(Reason::Drifted), usize::MAX);
        let b = allowed_now(&p, 6, 0, at("2026-01-05T00:30:00Z"));
        assert_eq!(b.remaining(Reason::Drifted), 0);
    }
}
