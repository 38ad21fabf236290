//! How disruption budgets pace the replacement of drifted nodes.
//!
//! A NodePool's budgets (`spec.disruption.budgets`, 10% by default) limit
//! how many of its nodes may be disrupted at once; the most restrictive
//! active budget wins. Only budgets that apply to drift count: those without
//! `reasons`, or whose reasons include `Drifted`. A budget's `nodes` is a
//! count or a percentage of the NodePool's nodes, rounded up as Karpenter
//! does. A budget with a `schedule` is active only for `duration` after each
//! time the schedule fires.
//!
//! The estimate assumes drifted nodes are replaced in waves of the budget
//! outside scheduled windows, each wave taking the given per-node
//! replacement time (launching a replacement and draining the old node run
//! in parallel across a wave). Scheduled budgets are listed with their
//! window, since when they fire depends on when the change lands.

use std::time::Duration;

use crate::api::NodePool;
use crate::api::nodepool::{Budget, DisruptionReason};

/// One budget as it applies to a NodePool of some size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetLimit {
    /// `nodes` as written (`10%`, `2`).
    pub nodes: String,
    /// The number of nodes that may be disrupted at once, for the
    /// NodePool's current size.
    pub allowed: usize,
    /// The reasons it is restricted to (empty: all).
    pub reasons: Vec<String>,
    pub schedule: Option<String>,
    pub duration: Option<String>,
    /// Whether it limits drift.
    pub applies_to_drift: bool,
}

/// The pace of replacing a NodePool's drifted nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pacing {
    /// Drifted nodes to replace.
    pub drifted: usize,
    /// Nodes replaced at once outside scheduled windows.
    pub parallel: usize,
    /// Waves of replacement; 0 when nothing drifts or replacement is blocked.
    pub waves: usize,
    /// Roughly how long replacement takes outside scheduled windows;
    /// `None` when a budget of 0 blocks it.
    pub estimated: Option<Duration>,
    /// Every budget of the NodePool, in order.
    pub budgets: Vec<BudgetLimit>,
}

impl Pacing {
    /// Whether an always-active budget of 0 stops drift replacement.
    pub fn is_blocked(&self) -> bool {
        self.drifted > 0 && self.parallel == 0
    }
}

/// The budgets of a NodePool (defaults applied) for `total` nodes.
pub fn budgets(pool: &NodePool, total: usize) -> Vec<BudgetLimit> {
    let mut pool = pool.clone();
    pool.apply_defaults();
    pool.spec
        .disruption
        .and_then(|d| d.budgets)
        .unwrap_or_default()
        .iter()
        .map(|b| limit(b, total))
        .collect()
}

fn limit(b: &Budget, total: usize) -> BudgetLimit {
    let reasons = b.reasons.clone().unwrap_or_default();
    BudgetLimit {
        allowed: allowed(&b.nodes, total),
        nodes: b.nodes.clone(),
        reasons: reasons.iter().map(|r| format!("{r:?}")).collect(),
        schedule: b.schedule.clone(),
        duration: b.duration.clone(),
        applies_to_drift: reasons.is_empty() || reasons.contains(&DisruptionReason::Drifted),
    }
}

/// `nodes` (a count or a percentage) of `total` nodes, rounded up. A value
/// the schema would reject allows nothing.
pub fn allowed(nodes: &str, total: usize) -> usize {
    match nodes.strip_suffix('%') {
        Some(percent) => percent
            .trim()
            .parse::<usize>()
            .map_or(0, |p| (p.min(100) * total).div_ceil(100)),
        None => nodes.trim().parse().unwrap_or(0),
    }
}

/// The pace of replacing `drifted` of a NodePool's `total` nodes, each wave
/// taking `per_wave`.
pub fn pacing(pool: &NodePool, total: usize, drifted: usize, per_wave: Duration) -> Pacing {
    let budgets = budgets(pool, total);
    let parallel = budgets
        .iter()
        .filter(|b| b.applies_to_drift && b.schedule.is_none())
        .map(|b| b.allowed)
        .min()
        // No always-active budget: everything at once.
        .unwrap_or(drifted);
    let waves = if parallel == 0 {
        0
    } else {
        drifted.div_ceil(parallel)
    };
    let estimated = (parallel > 0 || drifted == 0)
        .then(|| per_wave.saturating_mul(u32::try_from(waves).unwrap_or(u32::MAX)));
    Pacing {
        drifted,
        parallel,
        waves,
        estimated,
        budgets,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pool_with_budgets as pool;
    use serde_json::json;

    const FIVE_MIN: Duration = Duration::from_secs(300);

    #[test]
    fn percentages_round_up() {
        assert_eq!(allowed("10%", 10), 1);
        assert_eq!(allowed("10%", 11), 2);
        assert_eq!(allowed("10%", 0), 0);
        assert_eq!(allowed("100%", 7), 7);
        assert_eq!(allowed("3", 100), 3);
        assert_eq!(allowed("x", 100), 0);
    }

    #[test]
    fn the_default_budget_is_ten_percent() {
        let p = pacing(&NodePool::test("general"), 25, 25, FIVE_MIN);
        assert_eq!((p.parallel, p.waves), (3, 9));
        assert_eq!(p.estimated, Some(FIVE_MIN * 9));
        assert_eq!(p.budgets.len(), 1);
        assert_eq!(p.budgets[0].nodes, "10%");
    }

    #[test]
    fn the_most_restrictive_drift_budget_wins_and_scheduled_ones_are_listed() {
        let p = pacing(
            &pool(json!([
                {"nodes": "50%"},
                {"nodes": "2", "reasons": ["Drifted"]},
                {"nodes": "0", "reasons": ["Underutilized", "Empty"]},
                {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}
            ])),
            10,
            5,
            FIVE_MIN,
        );
        assert_eq!((p.parallel, p.waves), (2, 3));
        assert_eq!(p.estimated, Some(FIVE_MIN * 3));
        assert!(!p.budgets[2].applies_to_drift);
        assert_eq!(p.budgets[3].schedule.as_deref(), Some("0 9 * * mon-fri"));
        assert_eq!(p.budgets[3].allowed, 0);
    }

    #[test]
    fn a_zero_budget_blocks_replacement() {
        let p = pacing(&pool(json!([{"nodes": "0"}])), 4, 2, FIVE_MIN);
        assert!(p.is_blocked());
        assert_eq!((p.waves, p.estimated), (0, None));
        let nothing = pacing(&pool(json!([{"nodes": "0"}])), 4, 0, FIVE_MIN);
        assert!(!nothing.is_blocked());
        assert_eq!(nothing.estimated, Some(Duration::ZERO));
    }

    #[test]
    fn only_scheduled_budgets_replace_everything_at_once_outside_them() {
        let p = pacing(
            &pool(json!([{"nodes": "0", "schedule": "@daily", "duration": "1h"}])),
            6,
            6,
            FIVE_MIN,
        );
        assert_eq!((p.parallel, p.waves), (6, 1));
    }
}
