//! Tests of [`MemoryCluster`]'s API-server semantics, with core kinds.

use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, ReplicaSet};
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::Resource;
use serde_json::json;

use super::*;
use crate::clock::{ManualClock, Timestamp, parse_rfc3339};
use crate::cluster::*;
use crate::testing::{self, from_json};

const START: &str = "2026-11-21T12:00:00Z";

fn start() -> Timestamp {
    parse_rfc3339(START).expect("valid start time")
}

fn cluster() -> (MemoryCluster, ManualClock) {
    let clock = ManualClock::new(start());
    (MemoryCluster::new(Arc::new(clock.clone())), clock)
}

/// A pod of the app `app`.
fn pod(ns: &str, name: &str, app: &str) -> Pod {
    testing::pod(ns, name).label("app", app).build()
}

/// A pod of the app `app` in phase `phase` whose Ready condition is
/// `ready`.
fn pod_in(ns: &str, name: &str, app: &str, phase: &str, ready: bool) -> Pod {
    let p = testing::pod(ns, name).label("app", app);
    p.phase(phase, ready).build()
}

fn node(name: &str) -> Node {
    testing::node(name).build()
}

fn pdb(ns: &str, name: &str, app: &str, budget: serde_json::Value) -> PodDisruptionBudget {
    let mut spec = json!({"selector": {"matchLabels": {"app": app}}});
    if let (Some(spec), Some(budget)) = (spec.as_object_mut(), budget.as_object()) {
        spec.extend(budget.clone());
    }
    from_json(json!({"metadata": {"namespace": ns, "name": name}, "spec": spec}))
}

fn rv<K: Resource>(obj: &K) -> u64 {
    obj.meta()
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .expect("stored objects carry a numeric resourceVersion")
}

fn key(ns: &str, name: &str) -> ObjectKey {
    ObjectKey::new(ns, name)
}

fn owner_ref<K: Resource<DynamicType = ()>>(owner: &K) -> serde_json::Value {
    json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "name": owner.meta().name,
        "uid": owner.meta().uid,
    })
}

fn names<K: Resource>(items: &[Arc<K>]) -> Vec<String> {
    items
        .iter()
        .map(|o| ObjectKey::of(o.as_ref()).to_string())
        .collect()
}

/// The resource versions of `events`, checked as [`event_summary`] checks
/// them.
fn event_versions<K: Resource>(events: &[WatchEvent<K>]) -> Vec<u64> {
    event_summary(events).into_iter().map(|e| e.2).collect()
}

fn event_summary<K: Resource>(events: &[WatchEvent<K>]) -> Vec<(EventType, String, u64)> {
    events
        .iter()
        .map(|e| {
            assert_eq!(rv(e.object.as_ref()), e.resource_version);
            (
                e.event_type,
                ObjectKey::of(e.object.as_ref()).to_string(),
                e.resource_version,
            )
        })
        .collect()
}

// --- create, get, errors -------------------------------------------------

#[test]
fn create_sets_server_fields_from_the_clock() {
    let (c, clock) = cluster();
    clock
        .set(parse_rfc3339("2026-11-21T12:00:05.750Z").expect("valid"))
        .expect("forward");
    let p = c.create(pod("ns", "a", "web")).expect("created");
    let meta = &p.metadata;
    assert_eq!(meta.uid.as_deref().map(str::len), Some(36));
    assert_eq!(meta.generation, Some(1));
    assert_eq!(meta.resource_version.as_deref(), Some("1"));
    let created = meta.creation_timestamp.as_ref().expect("stamped").0;
    assert_eq!(
        created,
        parse_rfc3339("2026-11-21T12:00:05Z").expect("valid")
    );
    assert_eq!(*c.get::<Pod>(&key("ns", "a")).expect("stored"), *p);
}

#[test]
fn resource_versions_are_global_and_increasing_across_kinds() {
    let (c, _) = cluster();
    let a = c.create(pod("ns", "a", "web")).expect("created");
    let n = c.create(node("n1")).expect("created");
    let b = c.create(pod("ns", "b", "web")).expect("created");
    assert_eq!((rv(&*a), rv(&*n), rv(&*b)), (1, 2, 3));
    assert_eq!(c.resource_version(), 3);
}

#[test]
fn uids_are_unique_and_reproducible() {
    let run = || {
        let (c, _) = cluster();
        (0..3)
            .map(|i| {
                c.create(pod("ns", &format!("p{i}"), "web"))
                    .expect("created")
                    .metadata
                    .uid
                    .clone()
                    .expect("uid")
            })
            .collect::<Vec<_>>()
    };
    let first = run();
    assert_eq!(first, run());
    assert_ne!(first[0], first[1]);
    assert_ne!(first[1], first[2]);
}

#[test]
fn creating_an_existing_name_is_already_exists() {
    let (c, _) = cluster();
    c.create(pod("ns", "a", "web")).expect("created");
    let err = c.create(pod("ns", "a", "db")).unwrap_err();
    assert!(matches!(err, ApiError::AlreadyExists { .. }), "{err}");
    assert_eq!(err.code(), 409);
    assert_eq!(err.to_string(), "pods \"a\" already exists");
    // The same name in another namespace is a different object.
    c.create(pod("other", "a", "web")).expect("created");
}

#[test]
fn missing_objects_are_not_found() {
    let (c, _) = cluster();
    let err = c.get::<Pod>(&key("ns", "a")).unwrap_err();
    assert_eq!((err.code(), err.reason()), (404, "NotFound"));
    c.create(pod("ns", "b", "web")).expect("created");
    assert!(c.get::<Pod>(&key("ns", "a")).unwrap_err().is_not_found());
    assert!(c.get_opt::<Pod>(&key("ns", "a")).is_none());
    assert!(c.replace(pod("ns", "a", "web")).unwrap_err().is_not_found());
    assert!(
        c.update_status(pod("ns", "a", "web"))
            .unwrap_err()
            .is_not_found()
    );
    assert!(c.delete::<Pod>(&key("ns", "a")).unwrap_err().is_not_found());
    assert!(c.evict("ns", "a").unwrap_err().is_not_found());
}

#[test]
fn create_with_a_resource_version_is_a_bad_request() {
    let (c, _) = cluster();
    let mut p = pod("ns", "a", "web");
    p.metadata.resource_version = Some("7".into());
    let err = c.create(p).unwrap_err();
    assert_eq!((err.code(), err.reason()), (400, "BadRequest"));
}

#[test]
fn create_needs_a_name_or_generate_name() {
    let (c, _) = cluster();
    let mut p = pod("ns", "", "web");
    p.metadata.name = None;
    assert_eq!(c.create(p.clone()).unwrap_err().code(), 422);
    p.metadata.generate_name = Some("web-".into());
    let a = c.create(p.clone()).expect("created");
    let b = c.create(p).expect("created");
    let (a, b) = (a.metadata.name.clone(), b.metadata.name.clone());
    let a = a.expect("named");
    assert!(a.starts_with("web-") && a.len() == "web-".len() + 5, "{a}");
    assert_ne!(Some(a), b);
}

#[test]
fn namespaces_default_for_namespaced_kinds_and_are_dropped_for_cluster_kinds() {
    let (c, _) = cluster();
    let mut p = pod("x", "a", "web");
    p.metadata.namespace = None;
    let p = c.create(p).expect("created");
    assert_eq!(p.metadata.namespace.as_deref(), Some("default"));
    let mut n = node("n1");
    n.metadata.namespace = Some("ns".into());
    let n = c.create(n).expect("created");
    assert_eq!(n.metadata.namespace, None);
    assert!(c.get::<Node>(&ObjectKey::cluster("n1")).is_ok());
}

// --- updates ---------------------------------------------------------------

#[test]
fn replace_with_a_stale_resource_version_conflicts() {
    let (c, _) = cluster();
    let v1 = c.create(pod("ns", "a", "web")).expect("created");
    let mut first = Pod::clone(&v1);
    first.metadata.labels = Some([("app".to_string(), "api".to_string())].into());
    let v2 = c.replace(first).expect("current version applies");
    assert!(rv(&*v2) > rv(&*v1));

    let mut stale = Pod::clone(&v1);
    stale.metadata.annotations = Some([("a".to_string(), "b".to_string())].into());
    let err = c.replace(stale.clone()).unwrap_err();
    assert!(err.is_conflict(), "{err}");
    assert_eq!((err.code(), err.reason()), (409, "Conflict"));
    assert_eq!(*c.get::<Pod>(&key("ns", "a")).expect("stored"), *v2);

    // Without a resourceVersion the update is unconditional.
    stale.metadata.resource_version = None;
    let v3 = c.replace(stale).expect("unconditional update");
    assert!(v3.metadata.annotations.is_some());
}

#[test]
fn replace_with_another_uid_conflicts() {
    let (c, _) = cluster();
    let v1 = c.create(pod("ns", "a", "web")).expect("created");
    let mut p = Pod::clone(&v1);
    p.metadata.uid = Some("00000000-0000-4000-8000-000000000000".into());
    p.metadata.labels = None;
    assert!(c.replace(p).unwrap_err().is_conflict());
}

#[test]
fn generation_moves_only_when_the_spec_changes() {
    let (c, _) = cluster();
    let v1 = c.create(pod("ns", "a", "web")).expect("created");
    let mut p = Pod::clone(&v1);
    p.metadata.labels = Some([("app".to_string(), "db".to_string())].into());
    let v2 = c.replace(p).expect("label change");
    assert_eq!(v2.metadata.generation, Some(1));

    let mut p = Pod::clone(&v2);
    p.status = Some(from_json(json!({"phase": "Running"})));
    let v3 = c.update_status(p).expect("status change");
    assert_eq!(v3.metadata.generation, Some(1));

    let mut p = Pod::clone(&v3);
    if let Some(spec) = p.spec.as_mut() {
        spec.node_name = Some("n1".into());
    }
    let v4 = c.replace(p).expect("spec change");
    assert_eq!(v4.metadata.generation, Some(2));
    assert!(rv(&*v4) > rv(&*v3) && rv(&*v3) > rv(&*v2));
}

#[test]
fn replace_ignores_status_and_update_status_ignores_the_rest() {
    let (c, _) = cluster();
    let v1 = c.create(pod("ns", "a", "web")).expect("created");
    let mut p = Pod::clone(&v1);
    p.status = Some(from_json(json!({"phase": "Running"})));
    p.metadata.labels = None;
    let v2 = c.replace(p).expect("replaced");
    assert_eq!(v2.status, v1.status, "status is not written by replace");
    assert_eq!(v2.metadata.labels, None);

    let mut p = Pod::clone(&v2);
    p.status = Some(from_json(json!({"phase": "Running"})));
    p.metadata.labels = Some([("x".to_string(), "y".to_string())].into());
    if let Some(spec) = p.spec.as_mut() {
        spec.node_name = Some("n1".into());
    }
    let v3 = c.update_status(p).expect("status updated");
    assert_eq!(
        v3.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running")
    );
    assert_eq!(
        v3.metadata.labels, None,
        "labels are not written by update_status"
    );
    assert_eq!(v3.spec, v2.spec, "spec is not written by update_status");
    assert_eq!(v3.metadata.generation, v2.metadata.generation);
}

#[test]
fn writes_that_change_nothing_are_not_stored() {
    let (c, _) = cluster();
    let v1 = c.create(pod("ns", "a", "web")).expect("created");
    let v2 = c.replace(Pod::clone(&v1)).expect("no-op replace");
    let v3 = c
        .update_status(Pod::clone(&v1))
        .expect("no-op status update");
    assert_eq!((rv(&*v2), rv(&*v3)), (rv(&*v1), rv(&*v1)));
    assert_eq!(c.watch_from::<Pod>(rv(&*v1)).expect("watch").len(), 0);
}

#[test]
fn update_with_reapplies_the_change_after_a_conflict() {
    let (c, _) = cluster();
    c.create(pod("ns", "a", "web")).expect("created");
    let calls = Cell::new(0);
    let updated = c
        .update_with::<Pod>(&key("ns", "a"), |p| {
            calls.set(calls.get() + 1);
            if calls.get() == 1 {
                // Another writer gets in between our read and our write.
                c.update_with::<Pod>(&key("ns", "a"), |q| {
                    q.metadata.annotations = Some([("other".to_string(), "1".to_string())].into());
                })
                .expect("concurrent update");
            }
            p.metadata
                .labels
                .get_or_insert_default()
                .insert("mine".into(), "1".into());
        })
        .expect("updated");
    assert_eq!(calls.get(), 2);
    assert!(
        updated
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key("mine"))
    );
    assert!(
        updated
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("other"))
    );
}

#[test]
fn update_status_with_writes_the_status() {
    let (c, _) = cluster();
    c.create(node("n1")).expect("created");
    let n = c
        .update_status_with::<Node>(&ObjectKey::cluster("n1"), |n| {
            n.status = Some(from_json(json!({"allocatable": {"cpu": "4"}})));
        })
        .expect("updated");
    assert!(
        n.status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .is_some()
    );
}

// --- finalizers and deletion -----------------------------------------------

#[test]
fn deleting_without_finalizers_removes_the_object() {
    let (c, _) = cluster();
    c.create(pod("ns", "a", "web")).expect("created");
    let out = c.delete::<Pod>(&key("ns", "a")).expect("deleted");
    assert!(out.is_deleted());
    assert!(c.get::<Pod>(&key("ns", "a")).unwrap_err().is_not_found());
    // The name can be reused, by a new object with a new uid.
    let again = c.create(pod("ns", "a", "web")).expect("recreated");
    assert_ne!(again.metadata.uid, out.object().metadata.uid);
}

#[test]
fn finalizers_hold_a_deleted_object_until_the_last_is_removed() {
    let (c, clock) = cluster();
    let mut p = pod("ns", "a", "web");
    p.metadata.finalizers = Some(vec!["x/one".into(), "x/two".into()]);
    c.create(p).expect("created");

    let out = c.delete::<Pod>(&key("ns", "a")).expect("marked");
    let DeleteOutcome::Terminating(marked) = out else {
        panic!("an object with finalizers must stay");
    };
    let stamp = marked.metadata.deletion_timestamp.clone().expect("stamped");
    assert_eq!(stamp.0, start());

    // Deleting again later keeps the first timestamp and changes nothing.
    clock.advance(Duration::from_secs(60)).expect("forward");
    let again = c.delete::<Pod>(&key("ns", "a")).expect("still terminating");
    assert_eq!(
        again.object().metadata.deletion_timestamp,
        Some(stamp.clone())
    );
    assert_eq!(rv(again.object().as_ref()), rv(&*marked));

    // No new finalizers on an object being deleted.
    let err = c
        .update_with::<Pod>(&key("ns", "a"), |p| {
            p.metadata
                .finalizers
                .get_or_insert_default()
                .push("x/three".into());
        })
        .unwrap_err();
    assert_eq!(err.code(), 422, "{err}");

    // An update cannot clear the deletion timestamp.
    let p = c
        .update_with::<Pod>(&key("ns", "a"), |p| {
            p.metadata.deletion_timestamp = None;
            p.metadata.finalizers = Some(vec!["x/two".into()]);
        })
        .expect("one finalizer removed");
    assert_eq!(p.metadata.deletion_timestamp, Some(stamp));

    let last = c
        .update_with::<Pod>(&key("ns", "a"), |p| p.metadata.finalizers = None)
        .expect("last finalizer removed");
    assert!(c.get::<Pod>(&key("ns", "a")).unwrap_err().is_not_found());
    let events = c.watch_from::<Pod>(rv(&*p)).expect("watch");
    assert_eq!(
        event_summary(&events),
        vec![(EventType::Deleted, "ns/a".to_string(), rv(&*last))]
    );
}

fn with(preconditions: Preconditions) -> DeleteParams {
    DeleteParams {
        preconditions,
        ..DeleteParams::default()
    }
}

#[test]
fn delete_preconditions_must_match() {
    let (c, _) = cluster();
    let p = c.create(pod("ns", "a", "web")).expect("created");
    let wrong_uid = Preconditions {
        uid: Some("nope".into()),
        resource_version: None,
    };
    assert!(
        c.delete_with::<Pod>(&key("ns", "a"), &with(wrong_uid))
            .unwrap_err()
            .is_conflict()
    );
    let stale = Preconditions {
        uid: None,
        resource_version: Some("0".into()),
    };
    assert!(
        c.delete_with::<Pod>(&key("ns", "a"), &with(stale))
            .unwrap_err()
            .is_conflict()
    );
    let exact = Preconditions {
        uid: p.metadata.uid.clone(),
        resource_version: p.metadata.resource_version.clone(),
    };
    assert!(
        c.delete_with::<Pod>(&key("ns", "a"), &with(exact))
            .expect("deleted")
            .is_deleted()
    );
}

// --- garbage collection -------------------------------------------------

fn owned_pod(name: &str, owners: &[serde_json::Value]) -> Pod {
    let mut p = pod("ns", name, "web");
    p.metadata.owner_references = Some(owners.iter().cloned().map(from_json).collect());
    p
}

fn daemonset(name: &str) -> DaemonSet {
    from_json(json!({
        "metadata": {"namespace": "ns", "name": name},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": []}},
        },
    }))
}

#[test]
fn deleting_an_owner_collects_its_dependents_across_kinds() {
    let (c, _) = cluster();
    let ds = c.create(daemonset("ds")).expect("created");
    let p = c
        .create(owned_pod("p", &[owner_ref(&*ds)]))
        .expect("created");
    let mut claim: PersistentVolumeClaim = from_json(json!({
        "metadata": {"namespace": "ns", "name": "data"}, "spec": {}
    }));
    claim.metadata.owner_references = Some(vec![from_json(owner_ref(&*p))]);
    c.create(claim).expect("created");
    c.create(owned_pod("unrelated", &[])).expect("created");
    let before = c.resource_version();

    c.delete::<DaemonSet>(&key("ns", "ds")).expect("deleted");
    assert!(c.get_opt::<Pod>(&key("ns", "p")).is_none());
    assert!(
        c.get_opt::<PersistentVolumeClaim>(&key("ns", "data"))
            .is_none(),
        "transitive"
    );
    assert!(c.get_opt::<Pod>(&key("ns", "unrelated")).is_some());
    let pods = c.watch_from::<Pod>(before).expect("watch");
    assert_eq!(event_summary(&pods)[0].0, EventType::Deleted);
}

#[test]
fn dependents_with_finalizers_or_other_owners_survive_collection() {
    let (c, _) = cluster();
    let ds = c.create(daemonset("ds")).expect("created");
    let other = c.create(daemonset("other")).expect("created");
    let mut held = owned_pod("held", &[owner_ref(&*ds)]);
    held.metadata.finalizers = Some(vec!["x/hold".into()]);
    c.create(held).expect("created");
    c.create(owned_pod("shared", &[owner_ref(&*ds), owner_ref(&*other)]))
        .expect("created");

    c.delete::<DaemonSet>(&key("ns", "ds")).expect("deleted");
    let held = c
        .get::<Pod>(&key("ns", "held"))
        .expect("held by its finalizer");
    assert!(held.metadata.deletion_timestamp.is_some());
    let shared = c.get::<Pod>(&key("ns", "shared")).expect("still owned");
    assert_eq!(shared.metadata.deletion_timestamp, None);
    assert_eq!(
        shared.metadata.owner_references.as_deref().map(|r| r.len()),
        Some(1),
        "the reference to the deleted owner is dropped"
    );
    c.delete::<DaemonSet>(&key("ns", "other")).expect("deleted");
    assert!(c.get_opt::<Pod>(&key("ns", "shared")).is_none());
}

#[test]
fn an_owner_removed_by_its_last_finalizer_collects_dependents() {
    let (c, _) = cluster();
    let mut ds = daemonset("ds");
    ds.metadata.finalizers = Some(vec!["x/hold".into()]);
    let ds = c.create(ds).expect("created");
    c.create(owned_pod("p", &[owner_ref(&*ds)]))
        .expect("created");
    c.delete::<DaemonSet>(&key("ns", "ds")).expect("marked");
    assert!(
        c.get_opt::<Pod>(&key("ns", "p")).is_some(),
        "owner still present"
    );
    c.update_with::<DaemonSet>(&key("ns", "ds"), |d| d.metadata.finalizers = None)
        .expect("finalized");
    assert!(c.get_opt::<Pod>(&key("ns", "p")).is_none());
}

// --- list and selectors -----------------------------------------------------

fn labelled_pod(ns: &str, name: &str, labels: &[(&str, &str)]) -> Pod {
    let mut p = pod(ns, name, "x");
    p.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    p
}

fn select(
    c: &MemoryCluster,
    ns: Option<&str>,
    op: &str,
    key: &str,
    values: &[&str],
) -> Vec<String> {
    let selector = Selector::new(&LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }]),
        match_labels: None,
    })
    .expect("valid selector");
    names(&c.list::<Pod>(ns, &selector).items)
}

#[test]
fn list_filters_by_namespace_and_every_selector_operator() {
    let (c, _) = cluster();
    c.create(labelled_pod("b", "p3", &[("tier", "fe"), ("gpu", "yes")]))
        .expect("created");
    c.create(labelled_pod("a", "p2", &[("tier", "be")]))
        .expect("created");
    c.create(labelled_pod("a", "p1", &[("tier", "fe")]))
        .expect("created");
    c.create(labelled_pod("ab", "p4", &[])).expect("created");

    let all = c.list::<Pod>(None, &Selector::everything());
    assert_eq!(
        names(&all.items),
        ["a/p1", "a/p2", "ab/p4", "b/p3"],
        "sorted by key"
    );
    assert_eq!(all.resource_version, c.resource_version());
    assert_eq!(
        names(&c.list::<Pod>(Some("a"), &Selector::everything()).items),
        ["a/p1", "a/p2"]
    );
    assert_eq!(
        names(
            &c.list::<Pod>(None, &Selector::from_labels([("tier", "fe")]))
                .items
        ),
        ["a/p1", "b/p3"]
    );
    assert_eq!(
        select(&c, None, "In", "tier", &["be", "fe"]),
        ["a/p1", "a/p2", "b/p3"]
    );
    assert_eq!(
        select(&c, None, "NotIn", "tier", &["fe"]),
        ["a/p2", "ab/p4"]
    );
    assert_eq!(select(&c, None, "Exists", "gpu", &[]), ["b/p3"]);
    assert_eq!(
        select(&c, Some("a"), "DoesNotExist", "gpu", &[]),
        ["a/p1", "a/p2"]
    );
    assert!(c.list::<Pod>(None, &Selector::nothing()).items.is_empty());
    assert!(
        c.list::<Node>(None, &Selector::everything())
            .items
            .is_empty()
    );
}

#[test]
fn cluster_scoped_lists_ignore_the_namespace() {
    let (c, _) = cluster();
    c.create(node("n2")).expect("created");
    c.create(node("n1")).expect("created");
    assert_eq!(
        names(&c.list::<Node>(Some("ns"), &Selector::everything()).items),
        ["n1", "n2"]
    );
}

// --- watch --------------------------------------------------------------------

#[test]
fn watch_reports_changes_in_order_after_a_list() {
    let (c, _) = cluster();
    c.create(node("n0")).expect("created");
    let listed = c.list::<Pod>(None, &Selector::everything());
    let mut rx = c.subscribe::<Pod>().expect("subscribed");
    assert!(!rx.has_changed().expect("open"));

    let a = c.create(pod("ns", "a", "web")).expect("created");
    c.create(node("n1")).expect("created");
    let a2 = c
        .update_with::<Pod>(&key("ns", "a"), |p| p.metadata.labels = None)
        .expect("updated");
    let gone = c.delete::<Pod>(&key("ns", "a")).expect("deleted");

    assert!(rx.has_changed().expect("open"));
    assert_eq!(*rx.borrow_and_update(), rv(gone.object().as_ref()));
    let events = c.watch_from::<Pod>(listed.resource_version).expect("watch");
    assert_eq!(
        event_summary(&events),
        vec![
            (EventType::Added, "ns/a".to_string(), rv(&*a)),
            (EventType::Modified, "ns/a".to_string(), rv(&*a2)),
            (
                EventType::Deleted,
                "ns/a".to_string(),
                rv(gone.object().as_ref())
            ),
        ]
    );
    assert_eq!(c.watch_from::<Pod>(rv(&*a2)).expect("watch").len(), 1);
    assert!(
        c.watch_from::<Pod>(c.resource_version())
            .expect("watch")
            .is_empty()
    );
}

#[test]
fn watching_from_a_compacted_version_is_gone() {
    let (c, _) = cluster();
    let c = c.with_watch_log_capacity(2);
    let a = c.create(pod("ns", "a", "web")).expect("created");
    let b = c.create(pod("ns", "b", "web")).expect("created");
    let d = c.create(pod("ns", "d", "web")).expect("created");

    let err = c.watch_from::<Pod>(0).unwrap_err();
    assert_eq!(
        (err.code(), err.reason(), err.metric_label()),
        (410, "Expired", "gone")
    );
    // The newest events are still there for watchers that kept up.
    let events = c.watch_from::<Pod>(rv(&*a)).expect("not compacted");
    assert_eq!(event_versions(&events), [rv(&*b), rv(&*d)]);
    // A relist gives a version to watch from again.
    let relisted = c.list::<Pod>(None, &Selector::everything());
    assert!(
        c.watch_from::<Pod>(relisted.resource_version)
            .expect("fresh")
            .is_empty()
    );
}

/// Shortening the log of a cluster in use compacts every kind's log at
/// once, not only as each kind next changes.
#[test]
fn a_shorter_watch_log_compacts_at_once() {
    let (c, _) = cluster();
    let a = c.create(pod("ns", "a", "web")).expect("created");
    let b = c.create(pod("ns", "b", "web")).expect("created");
    let d = c.create(pod("ns", "d", "web")).expect("created");
    assert_eq!(c.watch_from::<Pod>(0).expect("all kept").len(), 3);
    c.set_watch_log_capacity(1);
    assert_eq!(c.watch_from::<Pod>(rv(&*a)).unwrap_err().code(), 410);
    let kept = c
        .watch_from::<Pod>(rv(&*b))
        .expect("the last event is kept");
    assert_eq!(event_versions(&kept), [rv(&*d)]);
}

/// Compacting through a resource version drops every kind's events up to
/// it, and no later one: a watcher past it reads on, one before it is
/// gone, and a kind whose last event is older still watches from there.
#[test]
fn compacting_through_a_version_keeps_what_came_after() {
    let (c, _) = cluster();
    let a = c.create(pod("ns", "a", "web")).expect("created");
    let b = c.create(pod("ns", "b", "web")).expect("created");
    let n = c.create(node("n1")).expect("created");
    let d = c.create(pod("ns", "d", "web")).expect("created");
    c.compact_watch_logs_through(rv(&*b));
    assert_eq!(c.watch_from::<Pod>(rv(&*a)).unwrap_err().code(), 410);
    let after = c.watch_from::<Pod>(rv(&*b)).expect("not compacted");
    assert_eq!(event_versions(&after), [rv(&*d)]);
    assert_eq!(c.watch_from::<Node>(rv(&*a)).expect("kept").len(), 1);
    c.compact_watch_logs_through(c.resource_version());
    assert!(c.watch_from::<Pod>(rv(&*d)).expect("read all").is_empty());
    assert!(c.watch_from::<Node>(rv(&*n)).expect("read all").is_empty());
    assert_eq!(c.watch_from::<Node>(rv(&*b)).unwrap_err().code(), 410);
}

// --- admission --------------------------------------------------------------

#[test]
fn rejected_admission_leaves_the_store_unchanged() {
    let (c, _) = cluster();
    c.add_validator::<Node>(|_old: Option<&Node>, new: &Node| {
        if new
            .metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with("bad"))
        {
            Err(vec!["metadata.name: must not start with bad".to_string()])
        } else {
            Ok(())
        }
    })
    .expect("registered");
    // A transition rule: once unschedulable, a node stays so (oldSelf).
    c.add_validator::<Node>(|old: Option<&Node>, new: &Node| {
        let unschedulable = |n: &Node| n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
        match old {
            Some(old) if unschedulable(old) && !unschedulable(new) => {
                Err(vec!["spec.unschedulable: cannot be cleared".to_string()])
            }
            _ => Ok(()),
        }
    })
    .expect("registered");

    let err = c.create(node("bad-1")).unwrap_err();
    assert_eq!((err.code(), err.reason()), (422, "Invalid"));
    assert!(
        matches!(&err, ApiError::Invalid { messages, .. } if messages == &["metadata.name: must not start with bad"])
    );
    assert_eq!(c.resource_version(), 0);
    assert!(c.get_opt::<Node>(&ObjectKey::cluster("bad-1")).is_none());
    assert!(c.watch_from::<Node>(0).expect("watch").is_empty());

    c.create(node("n1")).expect("valid node");
    let cordoned = c
        .update_with::<Node>(&ObjectKey::cluster("n1"), |n| {
            n.spec.get_or_insert_default().unschedulable = Some(true);
        })
        .expect("cordoned");
    let err = c
        .update_with::<Node>(&ObjectKey::cluster("n1"), |n| {
            n.spec.get_or_insert_default().unschedulable = Some(false);
        })
        .unwrap_err();
    assert!(err.to_string().contains("cannot be cleared"), "{err}");
    assert_eq!(
        *c.get::<Node>(&ObjectKey::cluster("n1")).expect("stored"),
        *cordoned
    );
    assert_eq!(c.resource_version(), rv(&*cordoned));
}

// --- restore ---------------------------------------------------------------

#[test]
fn restore_keeps_identity_and_age_from_the_snapshot() {
    let (c, _) = cluster();
    let mut n = node("n1");
    n.metadata.uid = Some("11111111-1111-4111-8111-111111111111".into());
    n.metadata.resource_version = Some("98765".into());
    n.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        parse_rfc3339("2026-01-01T00:00:00Z").expect("valid"),
    ));
    let stored = c.restore(n.clone()).expect("restored");
    assert_eq!(stored.metadata.uid, n.metadata.uid);
    assert_eq!(
        stored.metadata.creation_timestamp,
        n.metadata.creation_timestamp
    );
    assert_eq!(stored.metadata.resource_version.as_deref(), Some("1"));
    n.metadata.name = Some("n2".into());
    assert_eq!(c.restore(n).unwrap_err().code(), 422, "uids are unique");
}

// --- eviction -------------------------------------------------------------

fn running_pods(c: &MemoryCluster, app: &str, ready: &[bool]) {
    for (i, ready) in ready.iter().enumerate() {
        c.create(pod_in("ns", &format!("{app}-{i}"), app, "Running", *ready))
            .expect("created");
    }
}

fn assert_refused(err: ApiError, budget: &str) {
    assert_eq!(
        (err.code(), err.reason()),
        (429, "TooManyRequests"),
        "{err}"
    );
    assert!(err.to_string().contains(budget), "{err}");
}

#[test]
fn eviction_without_a_budget_deletes_the_pod() {
    let (c, _) = cluster();
    running_pods(&c, "web", &[true]);
    c.create(pdb("ns", "other", "db", json!({"minAvailable": 1})))
        .expect("created");
    let out = c.evict("ns", "web-0").expect("evicted");
    assert!(out.is_deleted());
    let conditions = out
        .object()
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone());
    assert!(
        conditions
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "DisruptionTarget" && c.status == "True")
    );
}

#[test]
fn eviction_honours_min_available_as_a_count() {
    let (c, _) = cluster();
    running_pods(&c, "web", &[true, true, true]);
    c.create(pdb("ns", "web-pdb", "web", json!({"minAvailable": 2})))
        .expect("created");
    c.evict("ns", "web-0").expect("3 healthy, 2 needed");
    assert_refused(c.evict("ns", "web-1").unwrap_err(), "web-pdb");
    assert!(c.get_opt::<Pod>(&key("ns", "web-1")).is_some());
}

/// A ReplicaSet of `replicas` and that many running, ready pods it controls.
fn replica_set(c: &MemoryCluster, app: &str, replicas: i32) {
    let rs: ReplicaSet = from_json(json!({
        "metadata": {"namespace": "ns", "name": app},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": app}}},
    }));
    let rs = c.create(rs).expect("created");
    let mut controller = owner_ref(&*rs);
    controller["controller"] = json!(true);
    for i in 0..replicas {
        let mut p = pod_in("ns", &format!("{app}-{i}"), app, "Running", true);
        p.metadata.owner_references = Some(vec![from_json(controller.clone())]);
        c.create(p).expect("created");
    }
}

#[test]
fn eviction_honours_min_available_as_a_percentage_rounded_up() {
    let (c, _) = cluster();
    replica_set(&c, "web", 3);
    // 50% of 3 rounds up to 2 needed.
    c.create(pdb("ns", "half", "web", json!({"minAvailable": "50%"})))
        .expect("created");
    c.evict("ns", "web-0").expect("3 healthy, 2 needed");
    assert_refused(c.evict("ns", "web-1").unwrap_err(), "half");
}

#[test]
fn eviction_honours_max_unavailable_against_the_controller_scale() {
    let (c, _) = cluster();
    replica_set(&c, "web", 4);
    c.create(pdb("ns", "web-pdb", "web", json!({"maxUnavailable": 1})))
        .expect("created");
    c.evict("ns", "web-0")
        .expect("4 healthy of 4 expected, 3 needed");
    // The scale stays 4 although only 3 pods are left.
    assert_refused(c.evict("ns", "web-1").unwrap_err(), "web-pdb");

    // 25% of 5 rounds up to 2 unavailable: 3 needed.
    replica_set(&c, "api", 5);
    c.create(pdb(
        "ns",
        "api-pdb",
        "api",
        json!({"maxUnavailable": "25%"}),
    ))
    .expect("created");
    c.evict("ns", "api-0").expect("5 healthy, 3 needed");
    c.evict("ns", "api-1").expect("4 healthy, 3 needed");
    assert_refused(c.evict("ns", "api-2").unwrap_err(), "api-pdb");
}

#[test]
fn pods_without_a_known_controller_are_each_expected() {
    let (c, _) = cluster();
    running_pods(&c, "web", &[true, true]);
    // A replacement that is still pending counts as expected, not healthy.
    c.create(pod_in("ns", "web-new", "web", "Pending", false))
        .expect("created");
    c.create(pdb("ns", "web-pdb", "web", json!({"maxUnavailable": 1})))
        .expect("created");
    assert_refused(c.evict("ns", "web-0").unwrap_err(), "web-pdb");
    c.update_status_with::<Pod>(&key("ns", "web-new"), |p| {
        p.status = Some(from_json(
            json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}),
        ));
    })
    .expect("replacement ready");
    c.evict("ns", "web-0")
        .expect("3 healthy of 3 expected, 2 needed");
}

#[test]
fn unhealthy_pods_are_evictable_only_while_the_budget_is_met() {
    let (c, _) = cluster();
    running_pods(&c, "web", &[true, true, false, false]);
    c.create(pdb("ns", "web-pdb", "web", json!({"minAvailable": 2})))
        .expect("created");
    // Budget met (2 healthy, 2 needed): an unready pod may go, a ready one not.
    c.evict("ns", "web-2").expect("unready pod, budget met");
    assert_refused(c.evict("ns", "web-0").unwrap_err(), "web-pdb");

    c.update_status_with::<Pod>(&key("ns", "web-0"), |p| {
        p.status = Some(from_json(
            json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}),
        ));
    })
    .expect("made unready");
    // Budget broken (1 healthy, 2 needed): unready pods are protected too...
    assert_refused(c.evict("ns", "web-3").unwrap_err(), "web-pdb");
    // ...unless the budget always allows evicting unhealthy pods.
    c.update_with::<PodDisruptionBudget>(&key("ns", "web-pdb"), |b| {
        if let Some(spec) = b.spec.as_mut() {
            spec.unhealthy_pod_eviction_policy = Some("AlwaysAllow".into());
        }
    })
    .expect("updated");
    c.evict("ns", "web-3").expect("AlwaysAllow");
}

#[test]
fn pods_that_are_not_running_or_are_terminating_ignore_budgets() {
    let (c, _) = cluster();
    running_pods(&c, "web", &[true]);
    c.create(pdb("ns", "web-pdb", "web", json!({"minAvailable": 5})))
        .expect("created");
    for (name, phase) in [
        ("pending", "Pending"),
        ("done", "Succeeded"),
        ("failed", "Failed"),
    ] {
        c.create(pod_in("ns", name, "web", phase, false))
            .expect("created");
        c.evict("ns", name).expect("not running");
    }
    let mut held = pod_in("ns", "held", "web", "Running", true);
    held.metadata.finalizers = Some(vec!["x/hold".into()]);
    c.create(held).expect("created");
    assert_refused(c.evict("ns", "held").unwrap_err(), "web-pdb");
    c.delete::<Pod>(&key("ns", "held")).expect("marked");
    let out = c.evict("ns", "held").expect("terminating");
    assert!(matches!(out, DeleteOutcome::Terminating(_)));
}

#[test]
fn eviction_of_a_pod_with_finalizers_leaves_it_terminating() {
    let (c, _) = cluster();
    let mut p = pod_in("ns", "a", "web", "Running", true);
    p.metadata.finalizers = Some(vec!["x/hold".into()]);
    c.create(p).expect("created");
    let out = c.evict("ns", "a").expect("evicted");
    let DeleteOutcome::Terminating(p) = out else {
        panic!("finalizers keep the pod");
    };
    assert!(p.metadata.deletion_timestamp.is_some());
    assert!(
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "DisruptionTarget"))
    );
}

#[test]
fn a_pod_under_two_budgets_cannot_be_evicted() {
    let (c, _) = cluster();
    running_pods(&c, "web", &[true, true]);
    c.create(pdb("ns", "one", "web", json!({"maxUnavailable": 1})))
        .expect("created");
    c.create(pdb("ns", "two", "web", json!({"maxUnavailable": 1})))
        .expect("created");
    let err = c.evict("ns", "web-0").unwrap_err();
    assert_eq!((err.code(), err.reason()), (500, "InternalError"));
    assert!(c.get_opt::<Pod>(&key("ns", "web-0")).is_some());
}

#[test]
fn the_cluster_can_be_shared_across_threads() {
    fn assert_send_sync<T: Send + Sync + Clone + 'static>() {}
    assert_send_sync::<MemoryCluster>();
    let (c, _) = cluster();
    let writer = c.clone();
    std::thread::spawn(move || writer.create(node("n1")).map(|_| ()))
        .join()
        .expect("thread finished")
        .expect("created");
    assert!(c.get_opt::<Node>(&ObjectKey::cluster("n1")).is_some());
}

// --- custom resources ---------------------------------------------------

/// A cluster-scoped custom resource with a status, shaped like NodePool.
#[derive(
    kube::CustomResource,
    Clone,
    Debug,
    Default,
    PartialEq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[kube(
    group = "test.dovetail.dev",
    version = "v1",
    kind = "Widget",
    status = "WidgetStatus"
)]
struct WidgetSpec {
    size: i32,
}

#[derive(
    Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
struct WidgetStatus {
    ready: bool,
}

#[test]
fn custom_resources_plug_in_without_changes() {
    let (c, _) = cluster();
    let w = c
        .create(Widget::new("w", WidgetSpec { size: 1 }))
        .expect("created");
    assert_eq!(w.metadata.namespace, None, "cluster-scoped");
    let err = c
        .create(Widget::new("w", WidgetSpec { size: 2 }))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "widgets.test.dovetail.dev \"w\" already exists"
    );

    let resized = c
        .update_with::<Widget>(&ObjectKey::cluster("w"), |w| w.spec.size = 3)
        .expect("resized");
    assert_eq!(
        (resized.spec.size, resized.metadata.generation),
        (3, Some(2))
    );
    let ready = c
        .update_status_with::<Widget>(&ObjectKey::cluster("w"), |w| {
            w.status = Some(WidgetStatus { ready: true });
            w.spec.size = 100;
        })
        .expect("status written");
    assert_eq!(ready.status, Some(WidgetStatus { ready: true }));
    assert_eq!((ready.spec.size, ready.metadata.generation), (3, Some(2)));
}

// --- binding ----------------------------------------------------------------

#[test]
fn binding_assigns_a_node_once() {
    let (c, _) = cluster();
    let created = c.create(pod("ns", "a", "web")).expect("created");
    let bound = c.bind("ns", "a", "n1").expect("bound");
    assert_eq!(
        bound.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some("n1")
    );
    assert_eq!(bound.metadata.generation, created.metadata.generation);
    let scheduled = bound.status.as_ref().and_then(|s| s.conditions.as_ref());
    assert!(scheduled.is_some_and(|cs| {
        cs.iter()
            .any(|c| c.type_ == "PodScheduled" && c.status == "True")
    }));

    let err = c.bind("ns", "a", "n2").unwrap_err();
    assert!(
        err.is_conflict() && err.to_string().contains("already assigned"),
        "{err}"
    );
    assert!(c.bind("ns", "missing", "n1").unwrap_err().is_not_found());

    let mut held = pod("ns", "held", "web");
    held.metadata.finalizers = Some(vec!["x/hold".into()]);
    c.create(held).expect("created");
    c.delete::<Pod>(&key("ns", "held")).expect("marked");
    assert!(c.bind("ns", "held", "n1").unwrap_err().is_conflict());
}

#[tokio::test]
async fn the_cluster_interface_logs_each_write_as_rbac_names_it() {
    let (c, _) = cluster();
    let c = &c;
    let created = Cluster::create(c, node("n1")).await.unwrap();
    Cluster::replace(c, (*created).clone()).await.unwrap();
    Cluster::replace_status(c, (*created).clone())
        .await
        .unwrap();
    Cluster::create(c, pod("ns", "a", "web")).await.unwrap();
    Cluster::evict(c, "ns", "a").await.unwrap();
    Cluster::delete::<Node>(c, &ObjectKey::cluster("n1"))
        .await
        .unwrap();
    let params = ApplyParams::new("dovetail");
    Cluster::apply(c, node("n2"), &params).await.unwrap();
    Cluster::apply(c, node("n2"), &params).await.unwrap();
    // The in-memory server's own methods are not the controller's.
    c.create(node("n3")).unwrap();
    let log: Vec<(String, u64)> = c
        .accesses()
        .into_iter()
        .map(|(a, n)| (a.to_string(), n))
        .collect();
    let expected = [
        ("create nodes", 2),
        ("create pods", 1),
        ("create pods/eviction", 1),
        ("delete nodes", 1),
        ("patch nodes", 2),
        ("update nodes", 1),
        ("update nodes/status", 1),
    ];
    let expected: Vec<(String, u64)> = expected.iter().map(|(a, n)| (a.to_string(), *n)).collect();
    assert_eq!(log, expected);
}

#[tokio::test]
async fn an_injected_fault_fails_the_write_and_changes_nothing() {
    let (c, _) = cluster();
    let injected = ApiError::Internal {
        message: "injected".into(),
    };
    c.create(node("n1")).unwrap();
    c.inject(
        Fault::new(Write::ReplaceStatus, "Node", injected.clone())
            .when(|o| o.pointer("/status/phase").is_some()),
    );
    c.inject(Fault::new(Write::Evict, "Pod", injected.clone()).times(2));
    let before = c.resource_version();
    let mut n = (*c.get::<Node>(&ObjectKey::cluster("n1")).unwrap()).clone();
    // No phase: the fault's condition does not hold.
    Cluster::replace_status(&c, n.clone()).await.unwrap();
    n.status.get_or_insert_default().phase = Some("Running".into());
    let err = Cluster::replace_status(&c, n.clone()).await.unwrap_err();
    assert_eq!(err, injected);
    assert_eq!(c.resource_version(), before);
    // Used up: the same write now goes through.
    Cluster::replace_status(&c, n).await.unwrap();
    c.create(pod("ns", "a", "web")).unwrap();
    for _ in 0..2 {
        assert_eq!(Cluster::evict(&c, "ns", "a").await.unwrap_err(), injected);
    }
    Cluster::evict(&c, "ns", "a").await.unwrap();
    assert!(c.get_opt::<Pod>(&key("ns", "a")).is_none());
}

/// The controller reads pods as [`crate::api::SlimPod`]s through the
/// `Cluster` interface: the projections follow every change, one
/// projection per pod and version is reused, and the view cannot be
/// written except by deleting the pod.
#[test]
fn pods_read_through_the_slim_view_follow_their_changes() {
    use crate::api::SlimPod;
    use futures::FutureExt;
    let (c, _) = cluster();
    let mut a = pod("web", "a", "web");
    a.metadata.annotations = Some(
        [
            (
                "karpenter.sh/do-not-disrupt".to_string(),
                "true".to_string(),
            ),
            ("prometheus.io/scrape".to_string(), "true".to_string()),
        ]
        .into(),
    );
    c.create(a).unwrap();
    c.create(pod("web", "b", "web")).unwrap();
    let views = Cluster::list::<SlimPod>(&c);
    assert_eq!(names(&views), ["web/a", "web/b"]);
    assert_eq!(Cluster::revision::<SlimPod>(&c), c.kind_revision::<Pod>());
    let annotations: Vec<&String> = views[0]
        .metadata
        .annotations
        .iter()
        .flatten()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(
        annotations,
        ["karpenter.sh/do-not-disrupt"],
        "slimmed as the watch slims"
    );

    // Unchanged pods keep their projection; a changed one is projected again.
    c.bind("web", "b", "n1").unwrap();
    let again = Cluster::list::<SlimPod>(&c);
    assert!(Arc::ptr_eq(&views[0], &again[0]), "a is unchanged");
    assert!(!Arc::ptr_eq(&views[1], &again[1]));
    let b = Cluster::get::<SlimPod>(&c, &key("web", "b")).unwrap();
    assert_eq!(
        b.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some("n1")
    );
    assert!(Arc::ptr_eq(&b, &again[1]), "get reuses the projection");

    // Deleting through the view deletes the pod.
    let gone = Cluster::delete::<SlimPod>(&c, &key("web", "a"))
        .now_or_never()
        .expect("ready")
        .unwrap();
    assert!(gone.is_deleted());
    assert_eq!(gone.object().metadata.name.as_deref(), Some("a"));
    assert!(c.get_opt::<Pod>(&key("web", "a")).is_none());
    assert_eq!(names(&Cluster::list::<SlimPod>(&c)), ["web/b"]);
    assert!(Cluster::get::<SlimPod>(&c, &key("web", "a")).is_none());

    // Any other write of the view is refused and changes nothing.
    let view = (*Cluster::get::<SlimPod>(&c, &key("web", "b")).unwrap()).clone();
    let refused = Cluster::replace(&c, view).now_or_never().expect("ready");
    assert!(
        matches!(refused, Err(ApiError::Internal { .. })),
        "{refused:?}"
    );
    assert!(c.get_opt::<Pod>(&key("web", "b")).is_some());
}

/// The pod views follow the watch log: through creates, binds, status
/// writes, graceful and immediate deletes, each call's views are the
/// projections of the pods as they are, and a pod no event touched keeps its
/// projection. When the log has been compacted past the last call, the
/// views are compared again with every pod.
#[test]
fn pod_views_follow_the_watch_log_and_its_compaction() {
    let (c, _) = cluster();
    let fresh = |c: &MemoryCluster| -> Vec<crate::api::SlimPod> {
        c.list::<Pod>(None, &Selector::everything())
            .items
            .iter()
            .map(|p| crate::api::SlimPod::from(&**p))
            .collect()
    };
    let same = |c: &MemoryCluster| {
        let views: Vec<crate::api::SlimPod> = c.pod_views().iter().map(|v| (**v).clone()).collect();
        assert_eq!(views, fresh(c));
    };
    for name in ["a", "b", "c", "d"] {
        c.create(pod("web", name, "web")).unwrap();
    }
    same(&c);
    let before = c.pod_views();
    c.bind("web", "b", "n1").unwrap();
    c.update_status_with::<Pod>(&key("web", "b"), |p| {
        p.status = Some(from_json(json!({"phase": "Running"})));
    })
    .unwrap();
    c.delete_with::<Pod>(&key("web", "c"), &DeleteParams::with_grace_period(30))
        .unwrap();
    c.delete_with::<Pod>(&key("web", "d"), &DeleteParams::with_grace_period(0))
        .unwrap();
    c.create(pod("app", "z", "app")).unwrap();
    same(&c);
    let after = c.pod_views();
    assert!(Arc::ptr_eq(&before[0], &after[1]), "web/a is untouched");

    // Compacted past the last call: every pod is compared.
    c.set_watch_log_capacity(1);
    c.bind("web", "a", "n2").unwrap();
    c.delete_with::<Pod>(&key("app", "z"), &DeleteParams::with_grace_period(0))
        .unwrap();
    c.create(pod("web", "e", "web")).unwrap();
    same(&c);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// Whatever pods are created, bound and deleted between two calls, in
    /// whichever namespaces, the views the list is patched with are the
    /// pods' projections in key order.
    #[test]
    fn pod_views_patched_from_the_log_are_the_pods_projections(
        steps in proptest::collection::vec((0u8..3, 0usize..2, 0usize..6, proptest::bool::ANY), 1..40),
    ) {
        let (c, _) = cluster();
        for (op, ns, name, look) in steps {
            let (ns, name) = (["app", "web"][ns], format!("p{name}"));
            // Refused writes (a pod that exists, or is gone) change nothing.
            let _ = match op {
                0 => c.create(pod(ns, &name, "x")).map(|_| ()),
                1 => c.bind(ns, &name, "n1").map(|_| ()),
                _ => c
                    .delete_with::<Pod>(&key(ns, &name), &DeleteParams::with_grace_period(0))
                    .map(|_| ()),
            };
            if look {
                let views: Vec<crate::api::SlimPod> =
                    c.pod_views().iter().map(|v| (**v).clone()).collect();
                let pods: Vec<crate::api::SlimPod> = c
                    .list::<Pod>(None, &Selector::everything())
                    .items
                    .iter()
                    .map(|p| crate::api::SlimPod::from(&**p))
                    .collect();
                proptest::prop_assert_eq!(views, pods);
            }
        }
    }
}

/// The controller's lists (`Cluster::list`) are one list per revision of
/// the kind: shared while only other kinds change, new (and current) once
/// the kind changes; the pod view's likewise.
#[test]
fn the_controllers_lists_are_shared_until_their_kind_changes() {
    let (c, _) = cluster();
    let node = |name: &str| -> Node { from_json(json!({"metadata": {"name": name}})) };
    c.create(node("n1")).unwrap();
    let names = |l: &[Arc<Node>]| -> Vec<String> {
        l.iter().filter_map(|n| n.metadata.name.clone()).collect()
    };
    let first = Cluster::list::<Node>(&c);
    assert_eq!(names(&first), ["n1"]);
    assert!(Listed::ptr_eq(&first, &Cluster::list::<Node>(&c)));
    c.create(pod("web", "a", "web")).unwrap();
    assert!(Listed::ptr_eq(&first, &Cluster::list::<Node>(&c)));
    let pods = Cluster::list::<crate::api::SlimPod>(&c);
    assert!(Listed::ptr_eq(
        &pods,
        &Cluster::list::<crate::api::SlimPod>(&c)
    ));

    c.create(node("n0")).unwrap();
    let second = Cluster::list::<Node>(&c);
    assert!(!Listed::ptr_eq(&first, &second));
    assert_eq!(names(&second), ["n0", "n1"]);
    assert_eq!(
        names(&first),
        ["n1"],
        "a reader's list stays as it was read"
    );
    c.delete_with::<Node>(&ObjectKey::cluster("n1"), &DeleteParams::default())
        .unwrap();
    assert_eq!(names(&Cluster::list::<Node>(&c)), ["n0"]);
    c.bind("web", "a", "n0").unwrap();
    let bound = Cluster::list::<crate::api::SlimPod>(&c);
    assert!(!Listed::ptr_eq(&pods, &bound));
    assert_eq!(
        bound[0].spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some("n0")
    );
}

// --- graceful deletion, propagation, dry runs ------------------------------

/// A running, ready pod bound to `node`, with its own grace period if
/// given.
fn bound_pod(name: &str, app: &str, node: &str, grace: Option<i64>) -> Pod {
    let p = testing::pod("ns", name)
        .label("app", app)
        .on(node)
        .running();
    match grace {
        Some(seconds) => p.grace(seconds).build(),
        None => p.build(),
    }
}

fn at(seconds: i64) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        start()
            .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(seconds))
            .expect("in range"),
    ))
}

fn force() -> DeleteParams {
    DeleteParams::with_grace_period(0)
}

#[test]
fn a_bound_pod_is_deleted_gracefully_and_removed_when_its_kubelet_deletes_it() {
    let (c, clock) = cluster();
    let created = c.create(bound_pod("a", "web", "n1", Some(45))).unwrap();
    let before = c.resource_version();

    let out = c.delete::<Pod>(&key("ns", "a")).unwrap();
    let DeleteOutcome::Terminating(marked) = out else {
        panic!("a bound pod stays while it stops: {out:?}");
    };
    assert_eq!(marked.metadata.deletion_timestamp, at(45));
    assert_eq!(marked.metadata.deletion_grace_period_seconds, Some(45));
    assert_eq!(
        marked.metadata.generation,
        created.metadata.generation.map(|g| g + 1),
        "a graceful deletion moves the generation"
    );
    assert_eq!(
        c.get::<Pod>(&key("ns", "a"))
            .unwrap()
            .metadata
            .deletion_timestamp,
        at(45)
    );

    // Deleting it again without a shorter grace period changes nothing.
    clock.advance(Duration::from_secs(10)).unwrap();
    let again = c.delete::<Pod>(&key("ns", "a")).unwrap();
    assert_eq!(rv(again.object().as_ref()), rv(&*marked));

    // Its kubelet deletes it with a grace period of 0 once it stopped.
    clock.advance(Duration::from_secs(35)).unwrap();
    let gone = c.delete_with::<Pod>(&key("ns", "a"), &force()).unwrap();
    assert!(gone.is_deleted());
    assert!(c.get_opt::<Pod>(&key("ns", "a")).is_none());
    let events = c.watch_from::<Pod>(before).unwrap();
    assert_eq!(
        event_summary(&events)
            .into_iter()
            .map(|(t, k, _)| (t, k))
            .collect::<Vec<_>>(),
        [
            (EventType::Modified, "ns/a".to_string()),
            (EventType::Deleted, "ns/a".to_string()),
        ]
    );
}

#[test]
fn pods_get_thirty_seconds_or_the_cluster_default_when_they_set_no_grace_period() {
    let (c, _) = cluster();
    let p = c.create(bound_pod("a", "web", "n1", None)).unwrap();
    assert_eq!(
        p.spec.as_ref().unwrap().termination_grace_period_seconds,
        Some(30),
        "defaulted on create, as the API server does"
    );
    let out = c.delete::<Pod>(&key("ns", "a")).unwrap();
    assert_eq!(out.object().metadata.deletion_timestamp, at(30));

    let clock = ManualClock::new(start());
    let c = MemoryCluster::new(Arc::new(clock))
        .with_default_termination_grace_period(Duration::from_secs(120));
    assert_eq!(c.default_termination_grace_period_seconds(), 120);
    c.create(bound_pod("a", "web", "n1", None)).unwrap();
    c.create(bound_pod("own", "web", "n1", Some(5))).unwrap();
    let out = c.delete::<Pod>(&key("ns", "a")).unwrap();
    assert_eq!(
        out.object().metadata.deletion_grace_period_seconds,
        Some(120)
    );
    let out = c.delete::<Pod>(&key("ns", "own")).unwrap();
    assert_eq!(out.object().metadata.deletion_grace_period_seconds, Some(5));
}

#[test]
fn unbound_finished_or_zero_grace_pods_are_removed_at_once() {
    let (c, _) = cluster();
    c.create(pod_in("ns", "pending", "web", "Pending", false))
        .unwrap();
    let mut done = bound_pod("done", "web", "n1", Some(60));
    done.status.as_mut().unwrap().phase = Some("Succeeded".into());
    c.create(done).unwrap();
    c.create(bound_pod("zero", "web", "n1", Some(0))).unwrap();
    c.create(bound_pod("asked", "web", "n1", Some(60))).unwrap();
    for name in ["pending", "done", "zero"] {
        let out = c.delete::<Pod>(&key("ns", name)).unwrap();
        assert!(out.is_deleted(), "{name}: {out:?}");
        // The last state says when and how it was deleted.
        assert_eq!(out.object().metadata.deletion_grace_period_seconds, Some(0));
        assert!(c.get_opt::<Pod>(&key("ns", name)).is_none());
    }
    assert!(
        c.delete_with::<Pod>(&key("ns", "asked"), &force())
            .unwrap()
            .is_deleted()
    );
}

#[test]
fn a_second_delete_only_shortens_the_grace_period() {
    let (c, clock) = cluster();
    c.create(bound_pod("a", "web", "n1", Some(60))).unwrap();
    c.delete::<Pod>(&key("ns", "a")).unwrap();
    clock.advance(Duration::from_secs(5)).unwrap();

    // Longer: nothing changes.
    let longer = c
        .delete_with::<Pod>(&key("ns", "a"), &DeleteParams::with_grace_period(600))
        .unwrap();
    assert_eq!(longer.object().metadata.deletion_timestamp, at(60));
    // Shorter: the deletion moves earlier, counted from the first delete.
    let shorter = c
        .delete_with::<Pod>(&key("ns", "a"), &DeleteParams::with_grace_period(20))
        .unwrap();
    assert!(matches!(shorter, DeleteOutcome::Terminating(_)));
    assert_eq!(shorter.object().metadata.deletion_timestamp, at(20));
    assert_eq!(
        shorter.object().metadata.deletion_grace_period_seconds,
        Some(20)
    );
    // A grace period that would have ended already ends now, as 1 s.
    clock.advance(Duration::from_secs(10)).unwrap();
    let past = c
        .delete_with::<Pod>(&key("ns", "a"), &DeleteParams::with_grace_period(3))
        .unwrap();
    assert_eq!(past.object().metadata.deletion_timestamp, at(15));
    assert_eq!(
        past.object().metadata.deletion_grace_period_seconds,
        Some(1)
    );
}

#[test]
fn a_negative_grace_period_counts_as_one_second() {
    let (c, _) = cluster();
    c.create(bound_pod("a", "web", "n1", Some(60))).unwrap();
    let out = c
        .delete_with::<Pod>(&key("ns", "a"), &DeleteParams::with_grace_period(-5))
        .unwrap();
    assert_eq!(out.object().metadata.deletion_grace_period_seconds, Some(1));
    assert_eq!(out.object().metadata.deletion_timestamp, at(1));
}

#[test]
fn a_force_delete_removes_a_terminating_pod_unless_finalizers_hold_it() {
    let (c, _) = cluster();
    c.create(bound_pod("a", "web", "n1", Some(60))).unwrap();
    let mut held = bound_pod("held", "web", "n1", Some(60));
    held.metadata.finalizers = Some(vec!["x/hold".into()]);
    c.create(held).unwrap();
    c.delete::<Pod>(&key("ns", "a")).unwrap();
    c.delete::<Pod>(&key("ns", "held")).unwrap();

    // kubectl delete --force --grace-period=0
    assert!(
        c.delete_with::<Pod>(&key("ns", "a"), &force())
            .unwrap()
            .is_deleted()
    );
    let out = c.delete_with::<Pod>(&key("ns", "held"), &force()).unwrap();
    let DeleteOutcome::Terminating(p) = out else {
        panic!("the finalizer holds it: {out:?}");
    };
    assert_eq!(p.metadata.deletion_timestamp, at(0));
    assert_eq!(p.metadata.deletion_grace_period_seconds, Some(0));
    c.update_with::<Pod>(&key("ns", "held"), |p| p.metadata.finalizers = None)
        .unwrap();
    assert!(c.get_opt::<Pod>(&key("ns", "held")).is_none());
}

#[test]
fn removing_the_last_finalizer_of_a_pod_still_stopping_keeps_it_until_its_kubelet_deletes_it() {
    let (c, _) = cluster();
    let mut p = bound_pod("a", "web", "n1", Some(60));
    p.metadata.finalizers = Some(vec!["x/hold".into()]);
    c.create(p).unwrap();
    c.delete::<Pod>(&key("ns", "a")).unwrap();
    c.update_with::<Pod>(&key("ns", "a"), |p| p.metadata.finalizers = None)
        .unwrap();
    let p = c.get::<Pod>(&key("ns", "a")).expect("still stopping");
    assert_eq!(p.metadata.deletion_grace_period_seconds, Some(60));
    assert!(
        c.delete_with::<Pod>(&key("ns", "a"), &force())
            .unwrap()
            .is_deleted()
    );
}

#[test]
fn preconditions_are_checked_before_a_graceful_delete() {
    let (c, _) = cluster();
    let p = c.create(bound_pod("a", "web", "n1", Some(60))).unwrap();
    let stale = DeleteParams {
        preconditions: Preconditions {
            uid: p.metadata.uid.clone(),
            resource_version: Some("0".into()),
        },
        ..DeleteParams::default()
    };
    assert!(
        c.delete_with::<Pod>(&key("ns", "a"), &stale)
            .unwrap_err()
            .is_conflict()
    );
    assert_eq!(
        c.get::<Pod>(&key("ns", "a"))
            .unwrap()
            .metadata
            .deletion_timestamp,
        None
    );
}

#[test]
fn a_dry_run_checks_and_answers_but_stores_nothing() {
    let (c, _) = cluster();
    let rs: ReplicaSet = from_json(json!({
        "metadata": {"namespace": "ns", "name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}},
    }));
    let rs = c.create(rs).unwrap();
    let mut owned = bound_pod("a", "web", "n1", Some(60));
    owned.metadata.owner_references = Some(vec![from_json(owner_ref(&*rs))]);
    c.create(owned).unwrap();
    c.create(bound_pod("b", "web", "n1", Some(60))).unwrap();
    c.create(pdb("ns", "web-pdb", "web", json!({"minAvailable": 2})))
        .unwrap();
    let before = c.resource_version();
    let dry = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };

    let out = c.delete_with::<Pod>(&key("ns", "a"), &dry).unwrap();
    assert_eq!(out.object().metadata.deletion_timestamp, at(60));
    let out = c
        .delete_with::<Pod>(
            &key("ns", "a"),
            &DeleteParams {
                dry_run: true,
                ..force()
            },
        )
        .unwrap();
    assert!(out.is_deleted());
    for propagation in [Propagation::Foreground, Propagation::Orphan] {
        let params = DeleteParams {
            propagation,
            dry_run: true,
            ..DeleteParams::default()
        };
        assert!(
            c.delete_with::<ReplicaSet>(&key("ns", "web"), &params)
                .unwrap()
                .is_deleted()
                != (params.propagation == Propagation::Foreground)
        );
    }
    // A dry run still checks preconditions and budgets.
    let stale = DeleteParams {
        preconditions: Preconditions {
            uid: Some("nope".into()),
            resource_version: None,
        },
        ..dry.clone()
    };
    assert!(
        c.delete_with::<Pod>(&key("ns", "a"), &stale)
            .unwrap_err()
            .is_conflict()
    );
    assert_refused(c.evict_with("ns", "a", &dry).unwrap_err(), "web-pdb");
    c.delete::<PodDisruptionBudget>(&key("ns", "web-pdb"))
        .unwrap();
    let before_evict = c.resource_version();
    let evicted = c.evict_with("ns", "a", &dry).unwrap();
    assert_eq!(evicted.object().metadata.deletion_timestamp, at(60));

    assert_eq!(c.resource_version(), before_evict, "nothing stored");
    let changes = c.watch_from::<Pod>(before).unwrap();
    assert!(changes.is_empty(), "no pod event: {changes:?}");
    let a = c.get::<Pod>(&key("ns", "a")).unwrap();
    assert_eq!(a.metadata.deletion_timestamp, None);
    assert!(a.metadata.owner_references.is_some());
    assert!(c.get_opt::<ReplicaSet>(&key("ns", "web")).is_some());
}

/// A ReplicaSet `web` and bound pods it controls, whose references block
/// its foreground deletion as `blocking` says.
fn owned_bound_pods(c: &MemoryCluster, blocking: &[bool]) -> Arc<ReplicaSet> {
    let rs: ReplicaSet = from_json(json!({
        "metadata": {"namespace": "ns", "name": "web"},
        "spec": {"replicas": blocking.len(), "selector": {"matchLabels": {"app": "web"}}},
    }));
    let rs = c.create(rs).unwrap();
    for (i, blocks) in blocking.iter().enumerate() {
        let mut reference = owner_ref(&*rs);
        reference["controller"] = json!(true);
        reference["blockOwnerDeletion"] = json!(blocks);
        let mut p = bound_pod(&format!("web-{i}"), "web", "n1", Some(30));
        p.metadata.owner_references = Some(vec![from_json(reference)]);
        c.create(p).unwrap();
    }
    rs
}

#[test]
fn an_orphaning_delete_keeps_the_dependents_without_their_owner() {
    let (c, _) = cluster();
    owned_bound_pods(&c, &[true, false]);
    let params = DeleteParams {
        propagation: Propagation::Orphan,
        ..DeleteParams::default()
    };
    let out = c
        .delete_with::<ReplicaSet>(&key("ns", "web"), &params)
        .unwrap();
    assert!(out.is_deleted());
    for name in ["web-0", "web-1"] {
        let p = c
            .get::<Pod>(&key("ns", name))
            .expect("orphaned, not deleted");
        assert_eq!(p.metadata.owner_references, None, "{name}");
        assert_eq!(p.metadata.deletion_timestamp, None, "{name}");
    }
}

#[test]
fn a_background_delete_deletes_the_dependents_gracefully_once_the_owner_is_gone() {
    let (c, _) = cluster();
    owned_bound_pods(&c, &[true]);
    assert!(
        c.delete::<ReplicaSet>(&key("ns", "web"))
            .unwrap()
            .is_deleted()
    );
    let p = c.get::<Pod>(&key("ns", "web-0")).expect("stopping");
    assert_eq!(p.metadata.deletion_timestamp, at(30));
}

#[test]
fn a_foreground_delete_holds_the_owner_until_its_blocking_dependents_are_gone() {
    let (c, _) = cluster();
    owned_bound_pods(&c, &[true, true, false]);
    let params = DeleteParams {
        propagation: Propagation::Foreground,
        ..DeleteParams::default()
    };
    let out = c
        .delete_with::<ReplicaSet>(&key("ns", "web"), &params)
        .unwrap();
    let DeleteOutcome::Terminating(rs) = out else {
        panic!("the owner waits for its dependents: {out:?}");
    };
    assert_eq!(rs.metadata.deletion_timestamp, at(0));
    assert_eq!(
        rs.metadata.finalizers.as_deref(),
        Some(&["foregroundDeletion".to_string()][..])
    );
    for i in 0..3 {
        let p = c.get::<Pod>(&key("ns", &format!("web-{i}"))).unwrap();
        assert_eq!(p.metadata.deletion_timestamp, at(30), "web-{i} is deleted");
    }
    // The dependent that does not block goes first: the owner stays.
    c.delete_with::<Pod>(&key("ns", "web-2"), &force()).unwrap();
    c.delete_with::<Pod>(&key("ns", "web-0"), &force()).unwrap();
    assert!(c.get_opt::<ReplicaSet>(&key("ns", "web")).is_some());
    // The last blocking dependent goes: so does the owner.
    c.delete_with::<Pod>(&key("ns", "web-1"), &force()).unwrap();
    assert!(c.get_opt::<ReplicaSet>(&key("ns", "web")).is_none());

    // Without dependents, the owner goes at once (the answer still shows
    // it marked, as the API server's does).
    owned_bound_pods(&c, &[]);
    let out = c
        .delete_with::<ReplicaSet>(&key("ns", "web"), &params)
        .unwrap();
    assert!(matches!(out, DeleteOutcome::Terminating(_)));
    assert!(c.get_opt::<ReplicaSet>(&key("ns", "web")).is_none());
}

#[test]
fn a_dependent_held_by_its_finalizer_holds_its_foreground_owner() {
    let (c, _) = cluster();
    let ds = c.create(daemonset("ds")).unwrap();
    let mut reference = owner_ref(&*ds);
    reference["blockOwnerDeletion"] = json!(true);
    let mut held = owned_pod("held", &[reference]);
    held.metadata.finalizers = Some(vec!["x/hold".into()]);
    c.create(held).unwrap();
    let params = DeleteParams {
        propagation: Propagation::Foreground,
        ..DeleteParams::default()
    };
    c.delete_with::<DaemonSet>(&key("ns", "ds"), &params)
        .unwrap();
    let p = c.get::<Pod>(&key("ns", "held")).unwrap();
    assert!(p.metadata.deletion_timestamp.is_some());
    assert!(c.get_opt::<DaemonSet>(&key("ns", "ds")).is_some());
    c.update_with::<Pod>(&key("ns", "held"), |p| p.metadata.finalizers = None)
        .unwrap();
    assert!(c.get_opt::<Pod>(&key("ns", "held")).is_none());
    assert!(c.get_opt::<DaemonSet>(&key("ns", "ds")).is_none());
}

#[test]
fn an_evicted_pod_under_a_budget_stays_terminating_and_no_longer_counts_healthy() {
    let (c, clock) = cluster();
    let rs: ReplicaSet = from_json(json!({
        "metadata": {"namespace": "ns", "name": "web"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}},
    }));
    let rs = c.create(rs).unwrap();
    let mut controller = owner_ref(&*rs);
    controller["controller"] = json!(true);
    for i in 0..3 {
        let mut p = bound_pod(&format!("web-{i}"), "web", "n1", Some(60));
        p.metadata.owner_references = Some(vec![from_json(controller.clone())]);
        c.create(p).unwrap();
    }
    let budget = c
        .create(pdb("ns", "web-pdb", "web", json!({"minAvailable": 2})))
        .unwrap();

    let out = c.evict("ns", "web-0").unwrap();
    let DeleteOutcome::Terminating(p) = out else {
        panic!("an evicted pod stops gracefully: {out:?}");
    };
    assert_eq!(p.metadata.deletion_timestamp, at(60));
    let status = c.disruption_budget_status(&budget).unwrap();
    assert_eq!((status.current_healthy, status.disruptions_allowed), (2, 0));
    assert!(!is_pod_healthy(&p));
    // The budget now refuses the next eviction, while web-0 still stops.
    assert_refused(c.evict("ns", "web-1").unwrap_err(), "web-pdb");
    // Evicting the terminating pod again is allowed and changes nothing.
    let again = c.evict("ns", "web-0").unwrap();
    assert_eq!(again.object().metadata.deletion_timestamp, at(60));
    // An eviction may ask for a shorter grace period.
    let shorter = c
        .evict_with("ns", "web-0", &DeleteParams::with_grace_period(10))
        .unwrap();
    assert_eq!(shorter.object().metadata.deletion_timestamp, at(10));
    // Once it is gone and its replacement is ready, the next may go.
    clock.advance(Duration::from_secs(10)).unwrap();
    c.delete_with::<Pod>(&key("ns", "web-0"), &force()).unwrap();
    let mut replacement = bound_pod("web-3", "web", "n2", Some(60));
    replacement.metadata.owner_references = Some(vec![from_json(controller)]);
    c.create(replacement).unwrap();
    c.evict("ns", "web-1").expect("3 healthy, 2 needed");
}

#[test]
fn eviction_preconditions_must_match() {
    let (c, _) = cluster();
    let p = c.create(bound_pod("a", "web", "n1", Some(60))).unwrap();
    let wrong = DeleteParams {
        preconditions: Preconditions {
            uid: Some("nope".into()),
            resource_version: None,
        },
        ..DeleteParams::default()
    };
    assert!(c.evict_with("ns", "a", &wrong).unwrap_err().is_conflict());
    let right = DeleteParams {
        preconditions: Preconditions {
            uid: p.metadata.uid.clone(),
            resource_version: None,
        },
        ..DeleteParams::default()
    };
    assert!(matches!(
        c.evict_with("ns", "a", &right).unwrap(),
        DeleteOutcome::Terminating(_)
    ));
}

#[test]
fn a_terminating_pod_cannot_be_bound() {
    let (c, _) = cluster();
    let mut p = pod("ns", "a", "web");
    p.metadata.finalizers = Some(vec!["x/hold".into()]);
    c.create(p).unwrap();
    c.delete::<Pod>(&key("ns", "a")).unwrap();
    assert!(c.bind("ns", "a", "n1").unwrap_err().is_conflict());
}

#[test]
fn the_cluster_interface_deletes_with_a_grace_period_through_the_pod_view() {
    use crate::api::SlimPod;
    use futures::FutureExt;
    let (c, _) = cluster();
    c.create(bound_pod("a", "web", "n1", Some(60))).unwrap();
    let out =
        Cluster::delete_with::<SlimPod>(&c, &key("ns", "a"), &DeleteParams::with_grace_period(7))
            .now_or_never()
            .expect("ready")
            .unwrap();
    let DeleteOutcome::Terminating(view) = out else {
        panic!("{out:?}");
    };
    assert_eq!(view.metadata.deletion_timestamp, at(7));
    let out = Cluster::delete::<SlimPod>(&c, &key("ns", "a"))
        .now_or_never()
        .expect("ready")
        .unwrap();
    assert!(
        !out.is_deleted(),
        "a plain delete leaves the shorter period"
    );
}
