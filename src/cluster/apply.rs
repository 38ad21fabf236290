//! Server-side apply: the parameters of an apply and how
//! [`super::MemoryCluster`] approximates the API server's merge.
//!
//! A real API server tracks which manager owns each field
//! (`metadata.managedFields`) and merges an applied configuration field by
//! field. The in-memory server keeps a simpler model that is enough for a
//! tool that owns whole objects, such as git-driven sync:
//! - everything but `metadata` and `status` (the spec, a ConfigMap's data) is
//!   replaced by the applied configuration;
//! - labels and annotations are merged: the applied ones are set, others'
//!   are kept, and those the same manager applied before and no longer
//!   applies are removed (the keys it owns are recorded in its
//!   `managedFields` entry, as `f:metadata.f:labels.f:<key>`);
//! - the status is kept.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, Time};
use serde_json::{Map, Value, json};

use super::{ApiError, Object};
use crate::clock::{Timestamp, truncate_to_second};

/// How to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyParams {
    /// Who owns the applied fields (`fieldManager`).
    pub field_manager: String,
    /// Run admission without storing anything (`dryRun=All`).
    pub dry_run: bool,
    /// Take over fields another manager owns instead of failing with a
    /// conflict (`force=true`).
    pub force: bool,
}

impl ApplyParams {
    /// A forced apply by `field_manager`.
    pub fn new(field_manager: impl Into<String>) -> Self {
        ApplyParams {
            field_manager: field_manager.into(),
            dry_run: false,
            force: true,
        }
    }

    /// The same apply as a dry run.
    pub fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }
}

/// The object the in-memory server stores when `applied` is applied by
/// `manager` over `existing` (see the module documentation). The result has
/// the existing object's resourceVersion, so writing it fails with a
/// conflict if the object changed meanwhile.
pub(super) fn merge<K: Object>(
    existing: Option<&K>,
    applied: &K,
    manager: &str,
    now: Timestamp,
) -> Result<K, ApiError> {
    let internal = |e: serde_json::Error| ApiError::Internal {
        message: format!("applying {}: {e}", K::kind(&())),
    };
    let applied_meta = applied.meta();
    let owned = |field: &str| -> Vec<String> {
        let map = match field {
            "labels" => applied_meta.labels.as_ref(),
            _ => applied_meta.annotations.as_ref(),
        };
        map.map(|m| m.keys().cloned().collect()).unwrap_or_default()
    };
    let entry = ManagedFieldsEntry {
        api_version: Some(K::api_version(&()).into_owned()),
        fields_type: Some("FieldsV1".into()),
        fields_v1: Some(FieldsV1(fields_v1(&owned("labels"), &owned("annotations")))),
        manager: Some(manager.to_string()),
        operation: Some("Apply".into()),
        subresource: None,
        time: Some(Time(truncate_to_second(now))),
    };
    let Some(existing) = existing else {
        let mut obj = applied.clone();
        let meta = obj.meta_mut();
        meta.resource_version = None;
        meta.managed_fields = Some(vec![entry]);
        return Ok(obj);
    };

    // The body of the applied object with the existing status.
    let mut body = match serde_json::to_value(applied).map_err(internal)? {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    body.remove("status");
    if let Ok(Value::Object(old)) = serde_json::to_value(existing)
        && let Some(status) = old.get("status")
    {
        body.insert("status".into(), status.clone());
    }
    body.insert("metadata".into(), Value::Object(Map::new()));
    let mut obj: K = serde_json::from_value(Value::Object(body)).map_err(internal)?;

    let old_meta = existing.meta();
    let previous = old_meta
        .managed_fields
        .iter()
        .flatten()
        .find(|e| e.manager.as_deref() == Some(manager) && e.operation.as_deref() == Some("Apply"))
        .and_then(|e| e.fields_v1.as_ref());
    let mut meta = old_meta.clone();
    meta.labels = merge_map(
        old_meta.labels.as_ref(),
        applied_meta.labels.as_ref(),
        &owned_keys(previous, "f:labels"),
    );
    meta.annotations = merge_map(
        old_meta.annotations.as_ref(),
        applied_meta.annotations.as_ref(),
        &owned_keys(previous, "f:annotations"),
    );
    let mut managed: Vec<ManagedFieldsEntry> = old_meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|e| e.manager.as_deref() != Some(manager))
        .cloned()
        .collect();
    managed.push(entry);
    meta.managed_fields = Some(managed);
    *obj.meta_mut() = meta;
    Ok(obj)
}

/// `{"f:metadata": {"f:labels": {"f:k": {}}, ...}, "f:spec": {}}`: the
/// fields an apply owns, in the API server's FieldsV1 notation (the body as
/// one field).
fn fields_v1(labels: &[String], annotations: &[String]) -> Value {
    let set = |keys: &[String]| {
        Value::Object(keys.iter().map(|k| (format!("f:{k}"), json!({}))).collect())
    };
    let mut metadata = Map::new();
    if !labels.is_empty() {
        metadata.insert("f:labels".into(), set(labels));
    }
    if !annotations.is_empty() {
        metadata.insert("f:annotations".into(), set(annotations));
    }
    json!({ "f:metadata": metadata, "f:spec": {} })
}

/// The keys under `f:metadata.<field>` of a FieldsV1 set.
fn owned_keys(fields: Option<&FieldsV1>, field: &str) -> Vec<String> {
    fields
        .and_then(|f| f.0.get("f:metadata"))
        .and_then(|m| m.get(field))
        .and_then(Value::as_object)
        .map(|m| {
            m.keys()
                .filter_map(|k| k.strip_prefix("f:"))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// `old` without the keys `previously` owned, with `applied` set over it.
fn merge_map(
    old: Option<&BTreeMap<String, String>>,
    applied: Option<&BTreeMap<String, String>>,
    previously: &[String],
) -> Option<BTreeMap<String, String>> {
    let mut out: BTreeMap<String, String> = old
        .into_iter()
        .flatten()
        .filter(|(k, _)| !previously.contains(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    out.extend(
        applied
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::clock::{Clock, ManualClock};
    use crate::cluster::{MemoryCluster, ObjectKey};

    fn cm(labels: &[(&str, &str)], data: &[(&str, &str)]) -> ConfigMap {
        let map = |kv: &[(&str, &str)]| {
            Some(
                kv.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        };
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("status".into()),
                namespace: Some("ns".into()),
                labels: map(labels),
                ..Default::default()
            },
            data: map(data),
            ..Default::default()
        }
    }

    fn cluster() -> MemoryCluster {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(Timestamp::UNIX_EPOCH));
        MemoryCluster::new(clock)
    }

    #[test]
    fn apply_creates_then_replaces_the_body_and_merges_labels() {
        let c = cluster();
        let params = ApplyParams::new("dovetail");
        c.apply(cm(&[("a", "1"), ("b", "1")], &[("x", "1")]), &params)
            .unwrap();
        // Someone else adds a label.
        c.update_with::<ConfigMap>(&ObjectKey::new("ns", "status"), |o| {
            o.metadata
                .labels
                .get_or_insert_default()
                .insert("theirs".into(), "1".into());
        })
        .unwrap();
        // The next apply drops `b` and `x`, keeps `theirs`.
        let out = c.apply(cm(&[("a", "2")], &[("y", "1")]), &params).unwrap();
        let labels: Vec<_> = out.metadata.labels.as_ref().unwrap().keys().collect();
        assert_eq!(labels, ["a", "theirs"]);
        assert_eq!(out.data.as_ref().unwrap().keys().collect::<Vec<_>>(), ["y"]);
        let stored = c
            .get_opt::<ConfigMap>(&ObjectKey::new("ns", "status"))
            .unwrap();
        assert_eq!(stored.metadata.labels, out.metadata.labels);
    }

    #[test]
    fn dry_run_stores_nothing_but_runs_admission() {
        let c = cluster();
        c.add_validator::<ConfigMap>(|_: Option<&ConfigMap>, new: &ConfigMap| {
            match new.data.as_ref().and_then(|d| d.get("bad")) {
                Some(_) => Err(vec!["data.bad: not allowed".to_string()]),
                None => Ok(()),
            }
        })
        .unwrap();
        let params = ApplyParams::new("dovetail").dry_run();
        c.apply(cm(&[], &[("ok", "1")]), &params).unwrap();
        assert!(
            c.get_opt::<ConfigMap>(&ObjectKey::new("ns", "status"))
                .is_none()
        );
        let err = c.apply(cm(&[], &[("bad", "1")]), &params).unwrap_err();
        assert!(err.to_string().contains("data.bad: not allowed"), "{err}");
        assert_eq!(c.resource_version(), 0);
    }
}
