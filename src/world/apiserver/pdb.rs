//! PodDisruptionBudget arithmetic for the eviction subresource: which pods
//! count as healthy and how many healthy pods a budget needs, as the
//! disruption controller computes them.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// The `unhealthyPodEvictionPolicy` that lets unready pods go regardless of
/// the budget.
pub(super) const ALWAYS_ALLOW: &str = "AlwaysAllow";

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.phase.as_deref()
}

pub(super) fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// Whether the pod is terminal (`Succeeded` or `Failed`).
pub(super) fn is_terminal(pod: &Pod) -> bool {
    crate::api::pod::is_finished(pod)
}

/// Whether a pod counts towards a budget's current health: `Running`,
/// `Ready=True`, and not terminating.
pub fn is_pod_healthy(pod: &Pod) -> bool {
    phase(pod) == Some("Running") && crate::api::pod::is_ready(pod) && !is_terminating(pod)
}

/// Pods the eviction subresource deletes without consulting budgets: those
/// not yet running (`Pending`), terminal ones, and those already terminating.
pub(super) fn can_ignore_pdb(pod: &Pod) -> bool {
    matches!(phase(pod), Some("Pending" | "Succeeded" | "Failed")) || is_terminating(pod)
}

/// `intstr.GetScaledValueFromIntOrPercent` with rounding up.
fn scaled_round_up(value: &IntOrString, total: i32) -> Result<i32, String> {
    match value {
        IntOrString::Int(n) => Ok(*n),
        IntOrString::String(s) => {
            let percent: i64 = s
                .strip_suffix('%')
                .ok_or_else(|| format!("invalid value {s:?}: a string must be a percentage"))?
                .parse()
                .map_err(|_| format!("invalid value {s:?}: not an integer percentage"))?;
            let scaled = (percent * i64::from(total) + 99).div_euclid(100);
            i32::try_from(scaled).map_err(|_| format!("invalid value {s:?}: out of range"))
        }
    }
}

/// How many healthy pods a budget requires when `expected` pods are
/// expected: `minAvailable` (a percentage rounds up), or `expected` minus
/// `maxUnavailable` (a percentage rounds up), never below zero; zero when
/// neither is set.
pub fn healthy_pods_needed(spec: &PodDisruptionBudgetSpec, expected: i32) -> Result<i32, String> {
    if let Some(max_unavailable) = &spec.max_unavailable {
        let max_unavailable = scaled_round_up(max_unavailable, expected)?;
        Ok(expected.saturating_sub(max_unavailable).max(0))
    } else if let Some(min_available) = &spec.min_available {
        scaled_round_up(min_available, expected)
    } else {
        Ok(0)
    }
}

/// What a budget's status would say, computed as the disruption controller
/// does from the pods its selector matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetStatus {
    pub expected_pods: i32,
    pub desired_healthy: i32,
    pub current_healthy: i32,
    pub disruptions_allowed: i32,
}

/// Counts of the pods a budget's selector matches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BudgetPods {
    /// All matching pods.
    pub matched: i32,
    /// The pods the workloads are meant to have: their controllers'
    /// `spec.replicas` summed, plus one for each non-terminal pod whose
    /// controller is unknown.
    pub scale: i32,
    /// Matching pods that are healthy ([`is_pod_healthy`]).
    pub healthy: i32,
}

/// The status of a budget over `pods`. An integer `minAvailable` expects
/// every matching pod; percentages and `maxUnavailable` expect the
/// workloads' scale. No disruption is allowed when no pod is expected.
pub fn budget_status(
    spec: &PodDisruptionBudgetSpec,
    pods: BudgetPods,
) -> Result<BudgetStatus, String> {
    let min_available_count =
        spec.max_unavailable.is_none() && matches!(spec.min_available, Some(IntOrString::Int(_)));
    let expected_pods = if min_available_count {
        pods.matched
    } else {
        pods.scale
    };
    let desired_healthy = healthy_pods_needed(spec, expected_pods)?;
    let disruptions_allowed = if expected_pods <= 0 {
        0
    } else {
        pods.healthy.saturating_sub(desired_healthy).max(0)
    };
    Ok(BudgetStatus {
        expected_pods,
        desired_healthy,
        current_healthy: pods.healthy,
        disruptions_allowed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(min: Option<IntOrString>, max: Option<IntOrString>) -> PodDisruptionBudgetSpec {
        PodDisruptionBudgetSpec {
            min_available: min,
            max_unavailable: max,
            ..Default::default()
        }
    }

    fn pct(s: &str) -> Option<IntOrString> {
        Some(IntOrString::String(s.to_string()))
    }

    #[test]
    fn min_available_percentage_rounds_up() {
        assert_eq!(healthy_pods_needed(&spec(pct("50%"), None), 3), Ok(2));
        assert_eq!(healthy_pods_needed(&spec(pct("50%"), None), 4), Ok(2));
        assert_eq!(healthy_pods_needed(&spec(pct("1%"), None), 1), Ok(1));
        assert_eq!(healthy_pods_needed(&spec(pct("0%"), None), 7), Ok(0));
    }

    #[test]
    fn max_unavailable_percentage_rounds_up_the_unavailable_count() {
        // 25% of 5 is 1.25, rounded up to 2 unavailable, so 3 must stay.
        assert_eq!(healthy_pods_needed(&spec(None, pct("25%")), 5), Ok(3));
        assert_eq!(healthy_pods_needed(&spec(None, pct("100%")), 5), Ok(0));
    }

    #[test]
    fn integers_are_taken_as_counts_and_clamped() {
        let two = Some(IntOrString::Int(2));
        assert_eq!(healthy_pods_needed(&spec(two.clone(), None), 5), Ok(2));
        assert_eq!(healthy_pods_needed(&spec(None, two.clone()), 5), Ok(3));
        assert_eq!(healthy_pods_needed(&spec(None, two), 1), Ok(0));
        assert_eq!(healthy_pods_needed(&spec(None, None), 5), Ok(0));
    }

    #[test]
    fn status_expects_matching_pods_for_counts_and_the_scale_otherwise() {
        let pods = BudgetPods {
            matched: 5,
            scale: 3,
            healthy: 4,
        };
        let count = budget_status(&spec(Some(IntOrString::Int(2)), None), pods).expect("valid");
        assert_eq!((count.expected_pods, count.disruptions_allowed), (5, 2));
        let pct = budget_status(&spec(pct("100%"), None), pods).expect("valid");
        assert_eq!((pct.expected_pods, pct.desired_healthy), (3, 3));
        assert_eq!(pct.disruptions_allowed, 1);
        let max = budget_status(&spec(None, Some(IntOrString::Int(1))), pods).expect("valid");
        assert_eq!((max.desired_healthy, max.disruptions_allowed), (2, 2));
        let none_expected = BudgetPods { scale: 0, ..pods };
        let max = budget_status(&spec(None, Some(IntOrString::Int(1))), none_expected);
        assert_eq!(max.expect("valid").disruptions_allowed, 0);
    }

    #[test]
    fn non_percentage_strings_are_errors() {
        assert!(healthy_pods_needed(&spec(pct("3"), None), 5).is_err());
        assert!(healthy_pods_needed(&spec(None, pct("x%")), 5).is_err());
    }
}
