//! Server-side apply: how [`super::MemoryCluster`] approximates the API
//! server's merge.
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
//! - the status is kept;
//! - fields are owned by the managers that applied them (the labels and
//!   annotations each applied, and the body as one field): applying a
//!   different value to a field another manager owns is a conflict (409)
//!   naming the fields and their managers, unless the apply is forced, which
//!   takes them over. Writes that are not applies (create, update) own
//!   nothing here, as they would own fields under the `Update` operation
//!   that forced and unforced applies alike may take.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, Time};
use serde_json::{Map, Value, json};

use crate::clock::{Timestamp, truncate_to_second};
use crate::cluster::{ApiError, Object};

/// The object the in-memory server stores when `applied` is applied by
/// `manager` over `existing` (see the module documentation). The result has
/// the existing object's resourceVersion, so writing it fails with a
/// conflict if the object changed meanwhile. Without `force`, a field
/// another manager owns with another value is a conflict.
pub(super) fn merge<K: Object>(
    existing: Option<&K>,
    applied: &K,
    manager: &str,
    force: bool,
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
    let taken = owned_by_others(existing, applied, manager).map_err(internal)?;
    if !force && !taken.is_empty() {
        return Err(conflict::<K>(existing, &taken));
    }

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
    // A forced apply takes the fields it set from their other owners.
    for e in &mut managed {
        if let Some(fields) = e.fields_v1.as_mut() {
            for (owner, field) in &taken {
                if e.manager.as_deref() == Some(owner.as_str()) {
                    disown(&mut fields.0, field);
                }
            }
        }
    }
    managed.push(entry);
    meta.managed_fields = Some(managed);
    *obj.meta_mut() = meta;
    Ok(obj)
}

/// A field of the in-memory ownership model.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Field {
    Label(String),
    Annotation(String),
    /// Everything but metadata and status.
    Body,
}

impl Field {
    /// As the API server names it in a conflict.
    fn path(&self) -> String {
        match self {
            Field::Label(k) => format!(".metadata.labels.{k}"),
            Field::Annotation(k) => format!(".metadata.annotations.{k}"),
            Field::Body => ".spec".to_string(),
        }
    }
}

/// The fields `applied` sets to another value than `existing` has, each
/// with the other applier that owns it.
fn owned_by_others<K: Object>(
    existing: &K,
    applied: &K,
    manager: &str,
) -> Result<Vec<(String, Field)>, serde_json::Error> {
    let (old, new) = (existing.meta(), applied.meta());
    let body = |obj: &K| -> Result<Value, serde_json::Error> {
        let mut v = serde_json::to_value(obj)?;
        if let Some(m) = v.as_object_mut() {
            for k in ["metadata", "status", "apiVersion", "kind"] {
                m.remove(k);
            }
        }
        Ok(v)
    };
    let body_differs = body(existing)? != body(applied)?;
    let differs = |field: &Field| match field {
        Field::Label(k) => {
            let get = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
                m.labels.as_ref().and_then(|l| l.get(k)).cloned()
            };
            get(new).is_some() && get(new) != get(old)
        }
        Field::Annotation(k) => {
            let get = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
                m.annotations.as_ref().and_then(|a| a.get(k)).cloned()
            };
            get(new).is_some() && get(new) != get(old)
        }
        Field::Body => body_differs,
    };
    let mut out = Vec::new();
    for e in old.managed_fields.iter().flatten() {
        let Some(owner) = e.manager.as_deref() else {
            continue;
        };
        if owner == manager || e.operation.as_deref() != Some("Apply") {
            continue;
        }
        let fields = e.fields_v1.as_ref();
        let mut owned: Vec<Field> = owned_keys(fields, "f:labels")
            .into_iter()
            .map(Field::Label)
            .collect();
        owned.extend(
            owned_keys(fields, "f:annotations")
                .into_iter()
                .map(Field::Annotation),
        );
        if fields.is_some_and(|f| f.0.get("f:spec").is_some()) {
            owned.push(Field::Body);
        }
        out.extend(
            owned
                .into_iter()
                .filter(|f| differs(f))
                .map(|f| (owner.to_string(), f)),
        );
    }
    Ok(out)
}

/// The 409 of an apply that would change fields others own.
fn conflict<K: Object>(existing: &K, taken: &[(String, Field)]) -> ApiError {
    let list: Vec<String> = taken
        .iter()
        .map(|(owner, f)| format!("conflict with {owner:?}: {}", f.path()))
        .collect();
    let n = taken.len();
    ApiError::Conflict {
        resource: crate::cluster::resource_name::<K>(),
        key: crate::cluster::ObjectKey::of(existing),
        message: format!(
            "Apply failed with {n} conflict{}: {}",
            if n == 1 { "" } else { "s" },
            list.join("; ")
        ),
    }
}

/// Removes `field` from a FieldsV1 set.
fn disown(fields: &mut Value, field: &Field) {
    let (section, key) = match field {
        Field::Label(k) => ("f:labels", k),
        Field::Annotation(k) => ("f:annotations", k),
        Field::Body => {
            if let Some(m) = fields.as_object_mut() {
                m.remove("f:spec");
            }
            return;
        }
    };
    if let Some(m) = fields
        .get_mut("f:metadata")
        .and_then(|m| m.get_mut(section))
        .and_then(Value::as_object_mut)
    {
        m.remove(&format!("f:{key}"));
    }
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
    use crate::cluster::ApplyParams;
    use crate::cluster::ObjectKey;
    use crate::world::MemoryCluster;

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

    fn forced(manager: &str, force: bool) -> ApplyParams {
        ApplyParams {
            force,
            ..ApplyParams::new(manager)
        }
    }

    #[test]
    fn an_unforced_apply_of_fields_another_manager_owns_conflicts() {
        let c = cluster();
        c.apply(cm(&[("team", "a")], &[("x", "1")]), &forced("git", false))
            .unwrap();
        // Another manager applies the same values: no conflict, shared.
        c.apply(cm(&[("team", "a")], &[("x", "1")]), &forced("ops", false))
            .unwrap();
        // ... and another value: a conflict naming the owner and fields.
        let err = c
            .apply(cm(&[("team", "b")], &[("x", "2")]), &forced("ops", false))
            .unwrap_err();
        assert_eq!(err.code(), 409);
        assert_eq!(
            err.to_string(),
            "Operation cannot be fulfilled on configmaps \"status\": Apply failed with 2 conflicts: conflict with \"git\": .metadata.labels.team; conflict with \"git\": .spec"
        );
        let stored = c
            .get_opt::<ConfigMap>(&ObjectKey::new("ns", "status"))
            .unwrap();
        assert_eq!(stored.metadata.labels.as_ref().unwrap()["team"], "a");
        // A label nobody else owns does not conflict.
        c.apply(
            cm(&[("team", "a"), ("ops", "1")], &[("x", "1")]),
            &forced("ops", false),
        )
        .unwrap();
    }

    #[test]
    fn a_forced_apply_takes_the_fields_over() {
        let c = cluster();
        c.apply(cm(&[("team", "a")], &[("x", "1")]), &forced("git", false))
            .unwrap();
        let out = c
            .apply(cm(&[("team", "b")], &[("x", "2")]), &forced("ops", true))
            .unwrap();
        assert_eq!(out.metadata.labels.as_ref().unwrap()["team"], "b");
        let owners: Vec<(String, Value)> = out
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .map(|e| {
                (
                    e.manager.clone().unwrap(),
                    e.fields_v1.as_ref().unwrap().0.clone(),
                )
            })
            .collect();
        assert_eq!(
            owners,
            [
                ("git".to_string(), json!({"f:metadata": {"f:labels": {}}})),
                (
                    "ops".to_string(),
                    json!({"f:metadata": {"f:labels": {"f:team": {}}}, "f:spec": {}})
                ),
            ]
        );
        // git no longer owns them: its unforced apply of the old values
        // conflicts with ops now.
        let err = c
            .apply(cm(&[("team", "a")], &[("x", "1")]), &forced("git", false))
            .unwrap_err();
        assert!(err.to_string().contains("conflict with \"ops\""), "{err}");
    }
}
