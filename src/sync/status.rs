//! The sync status, kept where `kubectl` reads it: a ConfigMap (default
//! `dovetail-sync-status` in the controller's namespace) whose data keys
//! are plain strings, and Kubernetes Events on that ConfigMap.
//!
//! A ConfigMap rather than a status CRD: it needs no extra CRD installed or
//! kept in step with dovetail's version, every user can read it
//! (`kubectl get configmap dovetail-sync-status -o yaml`), and dovetail
//! writes it with server-side apply, so it never has to read it first.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};

use super::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use crate::clock::{Timestamp, format_rfc3339, truncate_to_second};

/// The longest `lastError` kept, so a repository full of errors cannot push
/// the ConfigMap past the API server's object size limit.
const MAX_ERROR_BYTES: usize = 32 * 1024;

/// The `reason` of the `Ready` condition and of Events.
pub mod reasons {
    /// The revision is applied completely.
    pub const APPLIED: &str = "Applied";
    /// The revision does not validate; nothing of it was applied.
    pub const INVALID: &str = "InvalidRevision";
    /// Some objects of the revision were applied, then a write failed.
    pub const PARTIAL: &str = "PartiallyApplied";
    /// The revision was applied, but it would prune more than allowed.
    pub const PRUNE_BLOCKED: &str = "PruneBlocked";
    /// The repository or the ref cannot be read.
    pub const SOURCE: &str = "SourceError";
    /// The cluster could not be read or written (before any write).
    pub const CLUSTER: &str = "ClusterError";
}

/// What the status ConfigMap records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncStatus {
    /// The revision last applied completely (`<branch>@sha1:<sha>`).
    pub last_applied_revision: Option<String>,
    /// The revision of the last attempt, whatever its outcome.
    pub last_attempted_revision: Option<String>,
    /// `True` when the last attempted revision is applied completely.
    pub ready: bool,
    /// One of [`reasons`].
    pub reason: String,
    /// A one-line summary, e.g. `partially applied at revision X: ...`.
    pub message: String,
    /// The last error with its diagnostics, one per line; empty when ready.
    pub last_error: String,
    /// When the status last changed.
    pub last_transition_time: Option<Timestamp>,
    /// `Kind/name` of every object dovetail manages after the last attempt.
    pub inventory: Vec<String>,
}

impl SyncStatus {
    /// The status as ConfigMap data.
    pub fn to_data(&self) -> BTreeMap<String, String> {
        let mut error = self.last_error.clone();
        if error.len() > MAX_ERROR_BYTES {
            let mut cut = MAX_ERROR_BYTES;
            while !error.is_char_boundary(cut) {
                cut -= 1;
            }
            error.truncate(cut);
            error.push_str("\n... (truncated)");
        }
        let mut data = BTreeMap::new();
        let mut put = |k: &str, v: String| {
            data.insert(k.to_string(), v);
        };
        put(
            "lastAppliedRevision",
            self.last_applied_revision.clone().unwrap_or_default(),
        );
        put(
            "lastAttemptedRevision",
            self.last_attempted_revision.clone().unwrap_or_default(),
        );
        put(
            "ready",
            if self.ready { "True" } else { "False" }.to_string(),
        );
        put("reason", self.reason.clone());
        put("message", self.message.clone());
        put("lastError", error);
        put(
            "lastTransitionTime",
            self.last_transition_time
                .map(|t| format_rfc3339(truncate_to_second(t)))
                .unwrap_or_default(),
        );
        let mut inventory = self.inventory.join("\n");
        if !inventory.is_empty() {
            inventory.push('\n');
        }
        put("inventory", inventory);
        data
    }

    /// Reads a status back from ConfigMap data (what [`Self::to_data`] wrote).
    pub fn from_data(data: &BTreeMap<String, String>) -> Self {
        let get = |k: &str| data.get(k).cloned().unwrap_or_default();
        let opt = |k: &str| Some(get(k)).filter(|s| !s.is_empty());
        SyncStatus {
            last_applied_revision: opt("lastAppliedRevision"),
            last_attempted_revision: opt("lastAttemptedRevision"),
            ready: get("ready") == "True",
            reason: get("reason"),
            message: get("message"),
            last_error: get("lastError"),
            last_transition_time: opt("lastTransitionTime")
                .and_then(|t| crate::clock::parse_rfc3339(&t).ok()),
            inventory: get("inventory").lines().map(str::to_string).collect(),
        }
    }

    /// The status ConfigMap `namespace/name`.
    pub fn to_configmap(&self, namespace: &str, name: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(namespace.to_string()),
                labels: Some(BTreeMap::from([(
                    MANAGED_BY_LABEL.to_string(),
                    MANAGED_BY_VALUE.to_string(),
                )])),
                ..ObjectMeta::default()
            },
            data: Some(self.to_data()),
            ..ConfigMap::default()
        }
    }
}

/// A Kubernetes Event about the sync, attached to the status ConfigMap.
pub fn event(
    namespace: &str,
    configmap: &str,
    warning: bool,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> Event {
    let time = truncate_to_second(now);
    // The API server limits an Event's message to 1 KiB.
    const MAX_MESSAGE_BYTES: usize = 1024;
    const MORE: &str = " ... (see the status ConfigMap)";
    let mut message = message.to_string();
    if message.len() > MAX_MESSAGE_BYTES {
        let mut cut = MAX_MESSAGE_BYTES - MORE.len();
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push_str(MORE);
    }
    Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{configmap}.")),
            namespace: Some(namespace.to_string()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("ConfigMap".into()),
            name: Some(configmap.to_string()),
            namespace: Some(namespace.to_string()),
            ..ObjectReference::default()
        },
        reason: Some(reason.to_string()),
        message: Some(message),
        type_: Some(if warning { "Warning" } else { "Normal" }.into()),
        source: Some(EventSource {
            component: Some("dovetail-sync".into()),
            host: None,
        }),
        reporting_component: Some("dovetail.dev/sync".into()),
        reporting_instance: Some("dovetail".into()),
        action: Some("Sync".into()),
        count: Some(1),
        first_timestamp: Some(Time(time)),
        last_timestamp: Some(Time(time)),
        event_time: Some(MicroTime(time)),
        ..Event::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_round_trips_through_configmap_data_and_long_errors_are_cut() {
        let status = SyncStatus {
            last_applied_revision: Some("main@sha1:a".into()),
            last_attempted_revision: Some("main@sha1:b".into()),
            ready: false,
            reason: reasons::INVALID.into(),
            message: "revision main@sha1:b is invalid".into(),
            last_error: "x".repeat(MAX_ERROR_BYTES + 10),
            last_transition_time: Some(Timestamp::UNIX_EPOCH),
            inventory: vec!["NodePool/a".into(), "EC2NodeClass/b".into()],
        };
        let data = status.to_data();
        assert_eq!(data["ready"], "False");
        assert_eq!(data["inventory"], "NodePool/a\nEC2NodeClass/b\n");
        assert!(data["lastError"].ends_with("(truncated)"));
        let back = SyncStatus::from_data(&data);
        assert_eq!(back.inventory, status.inventory);
        assert_eq!(back.last_applied_revision, status.last_applied_revision);
        assert_eq!(back.last_transition_time, status.last_transition_time);
        let cm = status.to_configmap("ns", "dovetail-sync-status");
        assert_eq!(cm.metadata.namespace.as_deref(), Some("ns"));
    }

    #[test]
    fn event_messages_fit_the_api_servers_limit() {
        let e = event(
            "ns",
            "cm",
            true,
            reasons::INVALID,
            &"é".repeat(2000),
            Timestamp::UNIX_EPOCH,
        );
        assert!(e.message.as_ref().unwrap().len() <= 1024);
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.involved_object.name.as_deref(), Some("cm"));
    }
}
