//! What a sync pass writes: the desired objects of a revision compared with
//! the live ones. Pure: no cluster, no I/O, so every rule is unit-tested.
//!
//! - A desired object is written when it does not exist, when its spec
//!   differs after defaulting (the comparison of `dovetail diff`), when a
//!   label or annotation it sets differs, when it lacks dovetail's labels, or
//!   when a label or annotation dovetail applied earlier is no longer in the
//!   repository. Unchanged objects are not written, so
//!   `dovetail.dev/revision` names the revision that last changed an object.
//! - A live object that carries `app.kubernetes.io/managed-by=dovetail` and
//!   is not in the revision is a prune candidate, unless it is annotated
//!   `dovetail.dev/prune: disabled` or already terminating.
//! - Transition rules (`oldSelf`) are checked from each live object to its
//!   desired state, as the API server will on the update.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::{
    FIELD_MANAGER, MANAGED_BY_LABEL, MANAGED_BY_VALUE, PRUNE_ANNOTATION, PRUNE_DISABLED,
    REVISION_ANNOTATION, SOURCE_ANNOTATION,
};
use crate::api::ApiKind;
use crate::config::diff::normalise::{self, SERVER_MANAGED_METADATA};
use crate::config::validate::transition;
use crate::diag::JsonPath;

/// An object of the revision being applied.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredObject {
    pub kind: ApiKind,
    pub name: String,
    /// Repository-relative file.
    pub file: String,
    /// What is applied: the object as written in the file, with dovetail's
    /// label and annotations and without status or server-managed metadata.
    pub value: Value,
}

impl DesiredObject {
    /// The object of `file` as it is applied at `revision`
    /// (`<branch>@sha1:<sha>`).
    pub fn new(kind: ApiKind, name: &str, file: &str, raw: &Value, revision: &str) -> Self {
        let mut value = raw.clone();
        if let Some(object) = value.as_object_mut() {
            object.remove("status");
            // A version the CRD no longer serves, with the same schema, is
            // applied as the served one (`validate` warns about it).
            object.insert("apiVersion".into(), kind.api_version().into());
            if kind.namespaced()
                && let Some((namespace, _)) = name.split_once('/')
                && let Some(metadata) = object
                    .entry("metadata")
                    .or_insert_with(|| Value::Object(Map::new()))
                    .as_object_mut()
            {
                metadata.insert("namespace".into(), namespace.into());
            }
            let metadata = object
                .entry("metadata")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(metadata) = metadata.as_object_mut() {
                for field in SERVER_MANAGED_METADATA {
                    metadata.remove(field);
                }
                set(metadata, "labels", MANAGED_BY_LABEL, MANAGED_BY_VALUE);
                set(metadata, "annotations", REVISION_ANNOTATION, revision);
                set(metadata, "annotations", SOURCE_ANNOTATION, file);
            }
        }
        DesiredObject {
            kind,
            name: name.to_string(),
            file: file.to_string(),
            value,
        }
    }

    /// `Kind/name`.
    pub fn display(&self) -> String {
        format!("{}/{}", self.kind.kind(), self.name)
    }
}

fn set(metadata: &mut Map<String, Value>, field: &str, key: &str, value: &str) {
    let map = metadata
        .entry(field)
        .or_insert_with(|| Value::Object(Map::new()));
    if !map.is_object() {
        *map = Value::Object(Map::new());
    }
    if let Some(map) = map.as_object_mut() {
        map.insert(key.to_string(), Value::String(value.to_string()));
    }
}

/// An object of one of the synced kinds as the cluster has it.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveObject {
    pub kind: ApiKind,
    pub name: String,
    pub value: Value,
}

/// Whether a write creates or updates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum WriteKind {
    Create,
    Update,
}

/// One object to apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Write {
    pub object: DesiredObject,
    pub kind: WriteKind,
}

/// A transition rule the update of a live object would break.
#[derive(Debug, Clone, PartialEq)]
pub struct TransitionViolation {
    pub kind: ApiKind,
    pub name: String,
    pub file: String,
    pub path: JsonPath,
    pub message: String,
    pub hint: Option<&'static str>,
}

/// What a pass does.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// In dependency order: EC2NodeClasses, NodePools, NodeOverlays, then
    /// CapacityBuffers, each by name (`namespace/name` for buffers).
    pub writes: Vec<Write>,
    /// Managed objects no longer in the repository, in deletion order
    /// (NodePools, then EC2NodeClasses), as `(kind, name)`.
    pub prune_candidates: Vec<(ApiKind, String)>,
    /// Managed objects no longer in the repository that are annotated
    /// `dovetail.dev/prune: disabled`.
    pub prune_protected: Vec<(ApiKind, String)>,
    /// Live objects carrying dovetail's managed-by label.
    pub managed: usize,
    pub transitions: Vec<TransitionViolation>,
}

/// The order kinds are applied in; deletions go the other way.
fn apply_rank(kind: ApiKind) -> u8 {
    match kind {
        ApiKind::EC2NodeClass => 0,
        ApiKind::NodePool => 1,
        ApiKind::NodeOverlay => 2,
        ApiKind::CapacityBuffer => 3,
        ApiKind::NodeClaim => 4,
    }
}

/// Compares the desired objects with the live ones.
pub fn plan(desired: &[DesiredObject], live: &[LiveObject]) -> Plan {
    let live_by: BTreeMap<(ApiKind, &str), &LiveObject> = live
        .iter()
        .map(|o| ((o.kind, o.name.as_str()), o))
        .collect();
    let mut out = Plan {
        managed: live.iter().filter(|o| is_managed(&o.value)).count(),
        ..Plan::default()
    };
    let mut wanted = BTreeSet::new();
    for d in desired {
        wanted.insert((d.kind, d.name.as_str()));
        match live_by.get(&(d.kind, d.name.as_str())) {
            None => out.writes.push(Write {
                object: d.clone(),
                kind: WriteKind::Create,
            }),
            Some(l) => {
                let (old, new) = (
                    normalise::normalise(l.kind, &l.value),
                    normalise::normalise(d.kind, &d.value),
                );
                for f in transition::check(d.kind, &old, &new) {
                    out.transitions.push(TransitionViolation {
                        kind: d.kind,
                        name: d.name.clone(),
                        file: d.file.clone(),
                        hint: transition::hint(&f),
                        path: f.path,
                        message: f.message,
                    });
                }
                if differs(&old, &new) || metadata_differs(&l.value, &d.value) {
                    out.writes.push(Write {
                        object: d.clone(),
                        kind: WriteKind::Update,
                    });
                }
            }
        }
    }
    out.writes.sort_by(|a, b| {
        (apply_rank(a.object.kind), &a.object.name)
            .cmp(&(apply_rank(b.object.kind), &b.object.name))
    });
    let mut gone: Vec<&LiveObject> = live
        .iter()
        .filter(|l| is_managed(&l.value) && !wanted.contains(&(l.kind, l.name.as_str())))
        .filter(|l| {
            l.value
                .pointer("/metadata/deletionTimestamp")
                .is_none_or(Value::is_null)
        })
        .collect();
    gone.sort_by(|a, b| {
        (std::cmp::Reverse(apply_rank(a.kind)), &a.name)
            .cmp(&(std::cmp::Reverse(apply_rank(b.kind)), &b.name))
    });
    for l in gone {
        let entry = (l.kind, l.name.clone());
        if annotation(&l.value, PRUNE_ANNOTATION) == Some(PRUNE_DISABLED) {
            out.prune_protected.push(entry);
        } else {
            out.prune_candidates.push(entry);
        }
    }
    out
}

/// The most objects pruned per revision without `--force-prune`: `max_prune`
/// if given, else the larger of 1 and 10% of the managed objects, rounded up.
pub fn prune_limit(max_prune: Option<usize>, managed: usize) -> usize {
    max_prune.unwrap_or_else(|| managed.div_ceil(10).max(1))
}

/// Whether an object carries dovetail's managed-by label.
pub fn is_managed(value: &Value) -> bool {
    value
        .pointer("/metadata/labels")
        .and_then(|l| l.get(MANAGED_BY_LABEL))
        .and_then(Value::as_str)
        == Some(MANAGED_BY_VALUE)
}

fn annotation<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

/// Whether the normalised objects differ outside `metadata`.
fn differs(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| match v {
        Value::Object(m) => m
            .iter()
            .filter(|(k, _)| k.as_str() != "metadata")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<BTreeMap<_, _>>(),
        _ => BTreeMap::new(),
    };
    strip(old) != strip(new)
}

/// Whether applying `desired` would change the live object's labels or
/// annotations: a key it sets has another value (the revision annotation
/// aside), or a key dovetail applied before (recorded in its
/// `managedFields` entry) is no longer set.
fn metadata_differs(live: &Value, desired: &Value) -> bool {
    for field in ["labels", "annotations"] {
        let get = |v: &Value| {
            v.pointer(&format!("/metadata/{field}"))
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default()
        };
        let (have, want) = (get(live), get(desired));
        let changed = want
            .iter()
            .filter(|(k, _)| k.as_str() != REVISION_ANNOTATION)
            .any(|(k, v)| have.get(k) != Some(v));
        let dropped = owned_keys(live, field)
            .iter()
            .any(|k| !want.contains_key(k) && have.contains_key(k));
        if changed || dropped {
            return true;
        }
    }
    false
}

/// The label or annotation keys dovetail's last apply set, from its
/// `managedFields` entry (`f:metadata.f:labels.f:<key>`).
fn owned_keys(live: &Value, field: &str) -> Vec<String> {
    live.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|e| {
            e.get("manager").and_then(Value::as_str) == Some(FIELD_MANAGER)
                && e.get("operation").and_then(Value::as_str) == Some("Apply")
        })
        .filter_map(|e| {
            e.pointer("/fieldsV1/f:metadata")
                .and_then(|m| m.get(format!("f:{field}")))
                .and_then(Value::as_object)
        })
        .flat_map(|m| {
            m.keys()
                .filter_map(|k| k.strip_prefix("f:"))
                .map(str::to_string)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const REV: &str = "main@sha1:aaaa";

    fn pool(name: &str, cpu: &str) -> Value {
        json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": name},
            "spec": {
                "limits": {"cpu": cpu},
                "template": {"spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": []
                }}
            }
        })
    }

    fn class(name: &str) -> Value {
        json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": name},
            "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "r"}
        })
    }

    fn desired(kind: ApiKind, v: &Value) -> DesiredObject {
        let name = v["metadata"]["name"].as_str().unwrap();
        DesiredObject::new(kind, name, &format!("{name}.yaml"), v, REV)
    }

    /// What the cluster holds after dovetail applied `d` (with its
    /// managedFields entry) at another revision.
    fn applied(d: &DesiredObject) -> LiveObject {
        let mut value = d.value.clone();
        value["metadata"]["annotations"][REVISION_ANNOTATION] = json!("main@sha1:old");
        let labels: Map<String, Value> = value["metadata"]["labels"]
            .as_object()
            .unwrap()
            .keys()
            .map(|k| (format!("f:{k}"), json!({})))
            .collect();
        value["metadata"]["managedFields"] = json!([{
            "manager": FIELD_MANAGER, "operation": "Apply",
            "fieldsV1": {"f:metadata": {"f:labels": labels}}
        }]);
        value["metadata"]["resourceVersion"] = json!("5");
        value["status"] = json!({"conditions": []});
        LiveObject {
            kind: d.kind,
            name: d.name.clone(),
            value,
        }
    }

    fn names(p: &Plan) -> Vec<String> {
        p.writes
            .iter()
            .map(|w| format!("{:?} {}", w.kind, w.object.display()))
            .collect()
    }

    #[test]
    fn desired_objects_carry_the_conventions_keys_and_no_server_fields() {
        let mut raw = pool("a", "10");
        raw["metadata"]["resourceVersion"] = json!("3");
        raw["status"] = json!({});
        let d = desired(ApiKind::NodePool, &raw);
        assert_eq!(
            d.value["metadata"]["labels"][MANAGED_BY_LABEL],
            MANAGED_BY_VALUE
        );
        assert_eq!(d.value["metadata"]["annotations"][REVISION_ANNOTATION], REV);
        assert_eq!(
            d.value["metadata"]["annotations"][SOURCE_ANNOTATION],
            "a.yaml"
        );
        assert!(d.value["metadata"].get("resourceVersion").is_none());
        assert!(d.value.get("status").is_none());
    }

    #[test]
    fn creates_in_dependency_order_and_skips_unchanged_objects() {
        let want = vec![
            desired(ApiKind::NodePool, &pool("b", "10")),
            desired(ApiKind::NodePool, &pool("a", "10")),
            desired(ApiKind::EC2NodeClass, &class("z")),
        ];
        let p = plan(&want, &[]);
        assert_eq!(
            names(&p),
            [
                "Create EC2NodeClass/z",
                "Create NodePool/a",
                "Create NodePool/b"
            ]
        );
        let live: Vec<LiveObject> = want.iter().map(applied).collect();
        let p = plan(&want, &live);
        assert!(p.writes.is_empty(), "{:?}", names(&p));
        assert_eq!(p.managed, 3);
    }

    #[test]
    fn spec_label_and_source_changes_are_updates_but_spelled_out_defaults_are_not() {
        let live = vec![applied(&desired(ApiKind::NodePool, &pool("a", "10")))];
        let changed = desired(ApiKind::NodePool, &pool("a", "20"));
        assert_eq!(names(&plan(&[changed], &live)), ["Update NodePool/a"]);

        let mut labelled = pool("a", "10");
        labelled["metadata"]["labels"] = json!({"team": "x"});
        assert_eq!(
            names(&plan(&[desired(ApiKind::NodePool, &labelled)], &live)),
            ["Update NodePool/a"]
        );

        let moved = DesiredObject::new(ApiKind::NodePool, "a", "moved.yaml", &pool("a", "10"), REV);
        assert_eq!(names(&plan(&[moved], &live)), ["Update NodePool/a"]);

        let mut spelled = pool("a", "10");
        spelled["spec"]["template"]["spec"]["expireAfter"] = json!("720h");
        assert!(
            plan(&[desired(ApiKind::NodePool, &spelled)], &live)
                .writes
                .is_empty()
        );
    }

    #[test]
    fn a_label_removed_from_the_repository_is_an_update_but_others_labels_are_not() {
        let mut labelled = pool("a", "10");
        labelled["metadata"]["labels"] = json!({"team": "x"});
        let mut live = applied(&desired(ApiKind::NodePool, &labelled));
        live.value["metadata"]["labels"]["theirs"] = json!("y");
        let p = plan(
            &[desired(ApiKind::NodePool, &pool("a", "10"))],
            &[live.clone()],
        );
        assert_eq!(names(&p), ["Update NodePool/a"]);
        live.value["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("team");
        let p = plan(&[desired(ApiKind::NodePool, &pool("a", "10"))], &[live]);
        assert!(p.writes.is_empty(), "{:?}", names(&p));
    }

    #[test]
    fn an_unmanaged_object_is_adopted_and_never_pruned() {
        let unmanaged = LiveObject {
            kind: ApiKind::NodePool,
            name: "a".into(),
            value: pool("a", "10"),
        };
        let other = LiveObject {
            kind: ApiKind::NodePool,
            name: "other".into(),
            value: pool("other", "10"),
        };
        let p = plan(
            &[desired(ApiKind::NodePool, &pool("a", "10"))],
            &[unmanaged, other],
        );
        assert_eq!(names(&p), ["Update NodePool/a"]);
        assert!(p.prune_candidates.is_empty());
        assert_eq!(p.managed, 0);
    }

    #[test]
    fn prune_candidates_go_in_reverse_dependency_order_and_honour_the_annotation() {
        let mut live: Vec<LiveObject> = [
            desired(ApiKind::EC2NodeClass, &class("c")),
            desired(ApiKind::NodePool, &pool("b", "1")),
            desired(ApiKind::NodePool, &pool("a", "1")),
            desired(ApiKind::NodePool, &pool("keep", "1")),
            desired(ApiKind::NodePool, &pool("going", "1")),
        ]
        .iter()
        .map(applied)
        .collect();
        live[3].value["metadata"]["annotations"][PRUNE_ANNOTATION] = json!(PRUNE_DISABLED);
        live[4].value["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let p = plan(&[], &live);
        assert_eq!(
            p.prune_candidates,
            [
                (ApiKind::NodePool, "a".to_string()),
                (ApiKind::NodePool, "b".to_string()),
                (ApiKind::EC2NodeClass, "c".to_string()),
            ]
        );
        assert_eq!(p.prune_protected, [(ApiKind::NodePool, "keep".to_string())]);
    }

    #[test]
    fn transition_rules_are_checked_from_the_live_object() {
        let live = vec![applied(&desired(ApiKind::NodePool, &pool("a", "10")))];
        let mut static_pool = pool("a", "10");
        static_pool["spec"]["replicas"] = json!(3);
        static_pool["spec"]
            .as_object_mut()
            .unwrap()
            .remove("limits");
        let p = plan(&[desired(ApiKind::NodePool, &static_pool)], &live);
        assert_eq!(p.transitions.len(), 1, "{:?}", p.transitions);
        assert_eq!(
            p.transitions[0].message,
            transition::NODEPOOL_MODE_TRANSITION
        );
        assert_eq!(p.transitions[0].file, "a.yaml");
    }

    #[test]
    fn the_prune_limit_is_ten_percent_rounded_up_and_at_least_one() {
        assert_eq!(prune_limit(None, 0), 1);
        assert_eq!(prune_limit(None, 5), 1);
        assert_eq!(prune_limit(None, 10), 1);
        assert_eq!(prune_limit(None, 11), 2);
        assert_eq!(prune_limit(None, 100), 10);
        assert_eq!(prune_limit(Some(0), 100), 0);
        assert_eq!(prune_limit(Some(7), 1), 7);
    }

    /// NodeOverlays and CapacityBuffers are synced after the NodePools; a
    /// buffer is known by `namespace/name` (`default` when the file sets
    /// none), so two of one name in two namespaces are two objects, and a
    /// buffer in the version v1.14.1 no longer serves is applied as the
    /// served one.
    #[test]
    fn overlays_and_namespaced_buffers_are_planned_by_kind_and_namespace() {
        let overlay = json!({"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
            "metadata": {"name": "half"}, "spec": {"requirements": [], "priceAdjustment": "-50%"}});
        let buffer = |ns: Option<&str>, version: &str| {
            let mut b = json!({"apiVersion": format!("autoscaling.x-k8s.io/{version}"),
                "kind": "CapacityBuffer", "metadata": {"name": "warm"},
                "spec": {"podTemplateRef": {"name": "t"}, "replicas": 1}});
            if let Some(ns) = ns {
                b["metadata"]["namespace"] = json!(ns);
            }
            b
        };
        let key = |v: &Value| ApiKind::CapacityBuffer.object_name(v);
        let web = buffer(Some("web"), "v1beta1");
        let default = buffer(None, "v1alpha1");
        assert_eq!(key(&web), "web/warm");
        assert_eq!(key(&default), "default/warm");
        let objects = [
            DesiredObject::new(ApiKind::CapacityBuffer, &key(&web), "b.yaml", &web, REV),
            DesiredObject::new(
                ApiKind::CapacityBuffer,
                &key(&default),
                "b.yaml",
                &default,
                REV,
            ),
            desired(ApiKind::NodeOverlay, &overlay),
            desired(ApiKind::NodePool, &pool("a", "10")),
        ];
        let p = plan(&objects, &[]);
        assert_eq!(
            names(&p),
            [
                "Create NodePool/a",
                "Create NodeOverlay/half",
                "Create CapacityBuffer/default/warm",
                "Create CapacityBuffer/web/warm",
            ]
        );
        let applied_default = &p.writes[2].object.value;
        assert_eq!(applied_default["metadata"]["namespace"], "default");
        assert_eq!(
            applied_default["apiVersion"],
            "autoscaling.x-k8s.io/v1beta1"
        );
        // Live as applied: nothing to do; gone from the repository: pruned
        // by namespace and name.
        let live: Vec<LiveObject> = p.writes.iter().map(|w| applied(&w.object)).collect();
        assert!(plan(&objects, &live).writes.is_empty());
        let p = plan(&objects[1..], &live);
        assert_eq!(
            p.prune_candidates,
            [(ApiKind::CapacityBuffer, "web/warm".to_string())]
        );
    }
}
