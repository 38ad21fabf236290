//! What a pod asks of disruption through `karpenter.sh/do-not-disrupt`,
//! read as the reference reads it (`IsDoNotDisruptActive`): `"true"`
//! protects the pod for as long as it runs; a Go duration (`"1h"`,
//! `"90m"`) protects it until its start time plus that duration; any other
//! value protects nothing (the reference records an Event and ignores it).
//! A pod with a duration but no start time yet is protected: the reference
//! fails safe.

use std::time::Duration;

use crate::api::{ANNOTATION_DO_NOT_DISRUPT, SlimPod, TAINT_DISRUPTED};
use crate::clock::Timestamp;
use crate::timing::parse_go_duration;

/// The protection a pod's `karpenter.sh/do-not-disrupt` annotation gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Protection {
    /// No annotation.
    None,
    /// `"true"`, or a duration on a pod that has not started.
    Always,
    /// A duration from the pod's start: protected before this time.
    Until(Timestamp),
    /// A value that is neither `"true"` nor a positive duration: ignored.
    Invalid(String),
}

impl Protection {
    /// Whether the pod may not be disrupted at `now`.
    pub fn active(&self, now: Timestamp) -> bool {
        match self {
            Protection::Always => true,
            Protection::Until(t) => now < *t,
            Protection::None | Protection::Invalid(_) => false,
        }
    }

    /// When an active protection ends, if it ends by itself.
    pub fn ends(&self) -> Option<Timestamp> {
        match self {
            Protection::Until(t) => Some(*t),
            _ => None,
        }
    }
}

/// The protection of a pod at any time.
pub fn do_not_disrupt(pod: &SlimPod) -> Protection {
    let Some(value) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_DO_NOT_DISRUPT))
    else {
        return Protection::None;
    };
    if value == "true" {
        return Protection::Always;
    }
    let nanos = match parse_go_duration(value) {
        Ok(n) if n > 0 => n,
        Ok(_) => {
            return Protection::Invalid(format!(
                "{ANNOTATION_DO_NOT_DISRUPT}: {value:?} must be \"true\" or a positive duration"
            ));
        }
        Err(e) => return Protection::Invalid(format!("{ANNOTATION_DO_NOT_DISRUPT}: {e}")),
    };
    let Some(start) = pod.status.as_ref().and_then(|s| s.start_time.as_ref()) else {
        return Protection::Always;
    };
    let d = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
    match start.0.checked_add(d) {
        Ok(t) => Protection::Until(t),
        Err(_) => Protection::Always,
    }
}

/// Whether a pod is protected at `now`.
pub fn is_protected(pod: &SlimPod, now: Timestamp) -> bool {
    do_not_disrupt(pod).active(now)
}

/// Whether a pod tolerates `karpenter.sh/disrupted:NoSchedule` (it would be
/// scheduled straight back, so drains and consolidation ignore it).
pub fn tolerates_disrupted(pod: &SlimPod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .into_iter()
        .flatten()
        .any(|t| {
            let key_ok = match t.key.as_deref() {
                None | Some("") => t.operator.as_deref() == Some("Exists"),
                Some(k) => k == TAINT_DISRUPTED,
            };
            let effect_ok = t
                .effect
                .as_deref()
                .is_none_or(|e| e.is_empty() || e == "NoSchedule");
            key_ok && effect_ok
        })
}

/// Pods that would have to move if their node went away, as the
/// reference's `IsReschedulable` has it: not finished, not going (but a
/// StatefulSet's terminating pod, which its controller recreates under the
/// same name once it is gone, so it needs room elsewhere), not DaemonSet
/// or mirror pods, not pods that tolerate the disrupted taint.
pub fn is_movable(pod: &SlimPod) -> bool {
    !pod.is_finished()
        && (pod.metadata.deletion_timestamp.is_none() || is_stateful(pod))
        && !is_mirror(pod)
        && !pod.is_daemon()
        && !tolerates_disrupted(pod)
}

/// Names of nodes, looked up once per pod of the cluster.
pub type NodeNames = std::collections::HashSet<String, foldhash::fast::RandomState>;

/// Whether a pod leaves with its node: it is bound to one of `deleting`
/// and would have to move ([`is_movable`]). The provisioner plans room for
/// these pods while they drain, and consolidation waits for them; both ask
/// here, so they agree.
pub fn is_leaving(pod: &SlimPod, deleting: &NodeNames) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| deleting.contains(n))
        && is_movable(pod)
}

/// The cost of evicting one pod, as the reference weighs it: 1, plus its
/// `controller.kubernetes.io/pod-deletion-cost` over 2^27, plus its
/// priority over 2^25, within [-10, 10].
pub fn eviction_cost(pod: &SlimPod) -> f64 {
    let mut cost = 1.0;
    if let Some(c) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("controller.kubernetes.io/pod-deletion-cost"))
        .and_then(|v| v.parse::<i32>().ok())
    {
        cost += f64::from(c) / 2f64.powi(27);
    }
    if let Some(p) = pod.spec.as_ref().and_then(|s| s.priority) {
        cost += f64::from(p) / 2f64.powi(25);
    }
    cost.clamp(-10.0, 10.0)
}

/// Whether the pod is a static pod's mirror (`kubernetes.io/config.mirror`).
pub fn is_mirror(pod: &SlimPod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"))
}

/// Whether a StatefulSet (`apps/v1`) owns the pod.
fn is_stateful(pod: &SlimPod) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "StatefulSet" && o.api_version == "apps/v1")
}

/// How long past its deletionTimestamp a terminating pod still holds a
/// drain (the reference's `IsStuckTerminating`).
const STUCK_TERMINATING: Duration = Duration::from_secs(60);

/// When a terminating pod stops holding a drain: a minute past its
/// deletionTimestamp.
pub fn stuck_at(pod: &SlimPod) -> Option<Timestamp> {
    let deleted = pod.metadata.deletion_timestamp.as_ref()?;
    deleted.0.checked_add(STUCK_TERMINATING).ok()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::api::pod::SlimPodStatus;

    fn pod(value: Option<&str>, started: Option<Timestamp>) -> SlimPod {
        let mut p = SlimPod::default();
        if let Some(v) = value {
            p.metadata.annotations = Some(BTreeMap::from([(
                ANNOTATION_DO_NOT_DISRUPT.to_string(),
                v.to_string(),
            )]));
        }
        p.status = Some(SlimPodStatus {
            start_time: started.map(Time),
            ..Default::default()
        });
        p
    }

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    #[test]
    fn true_protects_for_as_long_as_the_pod_runs() {
        let p = pod(Some("true"), Some(t(0)));
        assert_eq!(do_not_disrupt(&p), Protection::Always);
        assert!(is_protected(&p, t(1_000_000)));
    }

    #[test]
    fn a_duration_protects_until_start_plus_duration() {
        let p = pod(Some("1h"), Some(t(1000)));
        assert_eq!(do_not_disrupt(&p), Protection::Until(t(4600)));
        assert!(is_protected(&p, t(1000 + 20 * 60)));
        assert!(is_protected(&p, t(4599)));
        assert!(!is_protected(&p, t(4600)));
        let p = pod(Some("1h30m"), Some(t(0)));
        assert_eq!(do_not_disrupt(&p), Protection::Until(t(5400)));
    }

    #[test]
    fn a_duration_without_a_start_time_fails_safe() {
        let p = pod(Some("5m"), None);
        assert!(is_protected(&p, t(1_000_000)));
    }

    #[test]
    fn invalid_or_non_positive_values_protect_nothing() {
        for v in ["false", "yes", "0s", "-1h", "1d", ""] {
            let p = pod(Some(v), Some(t(0)));
            assert!(
                matches!(do_not_disrupt(&p), Protection::Invalid(_)),
                "{v}: {:?}",
                do_not_disrupt(&p)
            );
            assert!(!is_protected(&p, t(1)), "{v}");
        }
        assert_eq!(do_not_disrupt(&pod(None, Some(t(0)))), Protection::None);
    }

    /// pkg/utils/pod IsReschedulable: a terminating pod has left, but a
    /// StatefulSet's, which comes back under its name once it is gone,
    /// still needs room; DaemonSet pods never move.
    #[test]
    fn terminating_pods_do_not_move_but_a_stateful_set_s_do() {
        let pod = |owner: &str, terminating: bool| -> SlimPod {
            let mut v = serde_json::json!({
                "metadata": {"name": "p", "namespace": "default", "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": owner, "name": "o", "uid": "u", "controller": true}
                ]},
                "spec": {"nodeName": "n", "containers": []},
                "status": {"phase": "Running"},
            });
            if terminating {
                v["metadata"]["deletionTimestamp"] = "2026-01-05T00:00:30Z".into();
            }
            serde_json::from_value(v).unwrap()
        };
        assert!(is_movable(&pod("ReplicaSet", false)));
        assert!(!is_movable(&pod("ReplicaSet", true)));
        assert!(is_movable(&pod("StatefulSet", true)));
        assert!(!is_movable(&pod("DaemonSet", false)));
        let deleting = NodeNames::from_iter(["n".to_string()]);
        assert!(is_leaving(&pod("ReplicaSet", false), &deleting));
        assert!(!is_leaving(&pod("DaemonSet", false), &deleting));
        assert!(!is_leaving(&pod("ReplicaSet", false), &Default::default()));
        let mut finished = pod("ReplicaSet", false);
        finished.status.as_mut().unwrap().phase = Some("Succeeded".into());
        assert!(
            !is_leaving(&finished, &deleting),
            "a finished pod needs no room"
        );
    }
}
