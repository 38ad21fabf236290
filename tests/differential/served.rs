//! `dovetail simulate --serve --controller none` against the API server:
//! one script of requests, run against both, whose answers are compared
//! field by field once the values each server assigns (uids, times,
//! resource versions, continue tokens, generated names) are masked.
//!
//! The script covers discovery; list and watch with label and field
//! selectors, paging and bookmarks; server-side apply conflicts; merge,
//! JSON and strategic merge patches; eviction under a budget (of a pending
//! pod, and the 429 of a running and ready one); delete propagation and
//! preconditions; `dryRun=All`; `fieldValidation=Strict`; the status
//! subresource; a watch from a resource version the server no longer holds
//! (its 410 `ERROR` event); and the 404, 409, 415, 422 and 429 bodies.
//! Differences left are listed in [`ALLOWED`] with their reason.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::http::{Api, Reply};
use super::{SERVED_WATCH_LOG, ServedApi, testbed_with_crds};

/// A difference left, with its reason: the step and the JSON pointer (a
/// prefix) of the observation where the servers differ.
/// `*` as the step: any step, the pointer ending so.
const ALLOWED: &[(&str, &str, &str)] = &[
    (
        "*",
        "/metadata/generation",
        "the in-memory store keeps metadata.generation for every kind; the API server sets it only for kinds whose registry counts spec changes (not ConfigMaps or Namespaces)",
    ),
    (
        "409 apply conflict as manager b",
        "/body",
        "server-side apply in memory tracks ownership of labels, annotations and the rest of the object as one field, so a conflict names `.spec` rather than `.data.k`, and its Status has no FieldManagerConflict causes",
    ),
    (
        "422 json patch test failure",
        "/body",
        "the served API says which JSON patch operation failed; the API server says only that the request was rejected",
    ),
    (
        "415 unsupported content type",
        "/body",
        "a body type no patch takes: the API server answers with its generic 415 text (`415: Unsupported Media Type`, empty details), the served API with the list of the patch types it takes",
    ),
    (
        "dry-run create, then get",
        "/0/body/metadata",
        "a served dry-run create assigns no uid or creation time (nothing is stored either way)",
    ),
    (
        "delete with Orphan propagation",
        "/delete",
        "the served API orphans the dependents at once; the API server's garbage collector does it behind the `orphan` finalizer, so its DELETE answers with the owner still terminating (the outcome is the same)",
    ),
    (
        "422 invalid NodePool",
        "/body/details/causes/0/message",
        "dovetail's schema messages are its own words; the field and reason are the API server's",
    ),
    (
        "422 invalid NodePool",
        "/body/details/causes/1/message",
        "a CEL rule's refusal: the API server prefixes the rule's message with `Invalid value: <value>: `",
    ),
    (
        "422 invalid NodePool",
        "/body/message",
        "the same messages, joined",
    ),
];

const NS: &str = "differential";

/// What a step observed: the status and the masked body.
fn observe(r: &Reply) -> Value {
    json!({"code": r.status, "body": mask(&r.json())})
}

/// Masks what each server assigns: uids, resource versions, times,
/// generations, managed fields, continue tokens; digits in messages (they
/// are resource versions).
fn mask(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = serde_json::Map::new();
            for (k, x) in m {
                let masked = match k.as_str() {
                    "uid" | "resourceVersion" | "creationTimestamp" | "deletionTimestamp"
                    | "lastTransitionTime" | "time" | "generation" | "continue" => {
                        json!("<assigned>")
                    }
                    "managedFields" | "storageVersionHash" | "selfLink" => continue,
                    "message" => match x.as_str() {
                        Some(s) => Value::String(digits_masked(s)),
                        None => mask(x),
                    },
                    _ => mask(x),
                };
                out.insert(k.clone(), masked);
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(mask).collect()),
        other => other.clone(),
    }
}

/// `s` with uids as `<uid>` and each run of digits as one `N`.
fn digits_masked(s: &str) -> String {
    static UID: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let uid = UID.get_or_init(|| {
        regex::Regex::new("[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
            .expect("a regex")
    });
    let s = uid.replace_all(s, "<uid>");
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if !c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('N') {
            out.push('N');
        }
    }
    out
}

/// The JSON pointers where `a` and `b` differ, with both values.
fn diff(a: &Value, b: &Value, at: String, out: &mut Vec<(String, Value, Value)>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let p = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                match (x.get(k), y.get(k)) {
                    (Some(l), Some(r)) => diff(l, r, p, out),
                    (l, r) => out.push((
                        p,
                        l.cloned().unwrap_or(Value::Null),
                        r.cloned().unwrap_or(Value::Null),
                    )),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (l, r)) in x.iter().zip(y).enumerate() {
                diff(l, r, format!("{at}/{i}"), out);
            }
        }
        _ if a == b => {}
        _ => out.push((at, a.clone(), b.clone())),
    }
}

/// The two servers, and what the script found.
struct Run<'a> {
    real: &'a Api,
    served: &'a Api,
    steps: usize,
    agree: usize,
    explained: Vec<String>,
    used: BTreeSet<usize>,
    failures: Vec<String>,
}

impl Run<'_> {
    /// Runs `step` against both servers and compares what it observed;
    /// what the API server's observation was, for a step that must check
    /// it reached its case.
    fn step(&mut self, name: &str, step: impl Fn(&Api) -> Value) -> Value {
        let real = step(self.real);
        let served = step(self.served);
        self.steps += 1;
        let mut differences = Vec::new();
        diff(&real, &served, String::new(), &mut differences);
        let mut unexplained = Vec::new();
        let mut explained = false;
        for (pointer, r, s) in differences {
            match ALLOWED.iter().position(|(step, prefix, _)| {
                (*step == name && pointer.starts_with(prefix))
                    || (*step == "*" && pointer.ends_with(prefix))
            }) {
                Some(i) => {
                    self.used.insert(i);
                    explained = true;
                }
                None => unexplained.push(format!("    {pointer}: API server {r}, served {s}")),
            }
        }
        if !unexplained.is_empty() {
            self.failures.push(format!(
                "{name}:\n{}\n    API server: {real}\n    served: {served}",
                unexplained.join("\n")
            ));
        } else if explained {
            self.explained.push(name.to_string());
        } else {
            self.agree += 1;
        }
        real
    }
}

fn path(rest: &str) -> String {
    format!("/api/v1/namespaces/{NS}/{rest}")
}

/// A ConfigMap of the script: labelled `set=differential`, which every
/// list selects, so the `kube-root-ca.crt` that the real control plane
/// publishes in each namespace stays out.
fn configmap(name: &str, mut labels: Value) -> Value {
    labels["set"] = json!("differential");
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": NS, "labels": labels},
           "data": {"k": "v"}})
}

fn names(list: &Value) -> Value {
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| o["metadata"]["name"].clone())
        .collect()
}

fn pdbs() -> String {
    format!("/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets")
}

/// A budget that keeps one pod labelled `app=APP`.
fn budget(app: &str) -> Value {
    json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
           "metadata": {"name": app, "namespace": NS},
           "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}}})
}

/// A pod labelled `app=APP`; pending, as no node runs it.
fn pod(name: &str, app: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": NS, "labels": {"app": app}},
           "spec": {"containers": [{"name": app, "image": "example/web:1"}]}})
}

fn eviction(name: &str) -> Value {
    json!({"apiVersion": "policy/v1", "kind": "Eviction",
           "metadata": {"name": name, "namespace": NS}})
}

/// Polls `get` on `api` until `ready` holds for the reply, for at most
/// 30 s; the last reply.
fn poll(api: &Api, path: &str, ready: impl Fn(&Reply) -> bool) -> Reply {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = api.get(path);
        if ready(&r) || Instant::now() > deadline {
            return r;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A watch's events as names and types (bookmarks and errors with their
/// masked objects).
fn events(status: u16, events: &[Value]) -> Value {
    let events: Vec<Value> = events
        .iter()
        .map(|e| match e["type"].as_str() {
            Some("BOOKMARK") | Some("ERROR") => {
                json!({"type": e["type"], "object": mask(&e["object"])})
            }
            _ => json!({"type": e["type"], "name": e["object"]["metadata"]["name"],
                        "labels": e["object"]["metadata"]["labels"]}),
        })
        .collect();
    json!({"code": status, "events": events})
}

/// The resources of a group version that the served API serves, as
/// discovery describes them (verbs sorted; the real server lists many
/// more kinds).
fn discovery(api: &Api, gv_path: &str, served: &BTreeSet<String>) -> Value {
    let r = api.get(gv_path);
    let mut out: Vec<Value> = r.json()["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|x| served.contains(x["name"].as_str().unwrap_or_default()))
        .map(|x| {
            let mut x = mask(x);
            if let Some(v) = x.get_mut("verbs").and_then(Value::as_array_mut) {
                v.sort_by_key(|s| s.as_str().unwrap_or_default().to_string());
            }
            x
        })
        .collect();
    out.sort_by_key(|x| x["name"].as_str().unwrap_or_default().to_string());
    json!({"code": r.status, "resources": out})
}

/// Issue 37, item 6, part 3: the script, against both servers.
#[test]
fn the_served_api_answers_as_the_api_server() {
    let (tb, real) = testbed_with_crds();
    let served_api = ServedApi::start();
    let served = &served_api.api;
    let mut run = Run {
        real: &real,
        served,
        steps: 0,
        agree: 0,
        explained: Vec::new(),
        used: BTreeSet::new(),
        failures: Vec::new(),
    };

    // Discovery, of the resources the served API serves.
    for gv in [
        "/api/v1",
        "/apis/karpenter.sh/v1",
        "/apis/karpenter.k8s.aws/v1",
        "/apis/policy/v1",
        "/apis/apps/v1",
    ] {
        let mine: BTreeSet<String> = served.get(gv).json()["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["name"].as_str().map(String::from))
            .collect();
        run.step(&format!("discovery {gv}"), |api| discovery(api, gv, &mine));
    }

    run.step("create namespace", |api| {
        observe(&api.json(
            "POST",
            "/api/v1/namespaces",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
        ))
    });
    run.step("create configmaps", |api| {
        let mut out = Vec::new();
        for (name, labels) in [
            ("cm-0", json!({"app": "a", "tier": "x"})),
            ("cm-1", json!({"app": "a"})),
            ("cm-2", json!({"app": "a"})),
            ("cm-3", json!({"app": "b"})),
            ("cm-4", json!({"app": "b", "tier": "y"})),
        ] {
            out.push(observe(&api.json(
                "POST",
                &path("configmaps"),
                &configmap(name, labels),
            )));
        }
        Value::Array(out)
    });
    run.step("409 already exists", |api| {
        observe(&api.json("POST", &path("configmaps"), &configmap("cm-0", json!({}))))
    });
    run.step("404 not found", |api| {
        observe(&api.get(&path("configmaps/none")))
    });

    // Lists: selectors and paging.
    for query in [
        "labelSelector=set%3Ddifferential%2Capp%3Da",
        "labelSelector=set%3Ddifferential%2Capp%20in%20(a%2Cb)%2Ctier",
        "labelSelector=set%3Ddifferential%2Capp!%3Da",
        "labelSelector=set%3Ddifferential%2C!tier",
        "fieldSelector=metadata.name%3Dcm-1",
        "fieldSelector=metadata.name!%3Dcm-1&labelSelector=app%3Da",
    ] {
        run.step(&format!("list {query}"), |api| {
            let r = api.get(&format!("{}?{query}", path("configmaps")));
            json!({"code": r.status, "kind": r.json()["kind"], "names": names(&r.json())})
        });
    }
    run.step("list with an unknown field selector", |api| {
        observe(&api.get(&format!("{}?fieldSelector=data.k%3Dv", path("configmaps"))))
    });
    run.step("list pages", |api| {
        let mut pages = Vec::new();
        let mut cont = String::new();
        loop {
            let mut q = format!(
                "{}?limit=2&labelSelector=set%3Ddifferential",
                path("configmaps")
            );
            if !cont.is_empty() {
                q.push_str(&format!("&continue={cont}"));
            }
            let r = api.get(&q);
            let body = r.json();
            pages.push(json!({"code": r.status, "names": names(&body),
                "continue": body["metadata"].get("continue").is_some(),
                "remainingItemCount": body["metadata"]["remainingItemCount"]}));
            match body["metadata"]["continue"].as_str() {
                Some(c) if !c.is_empty() && pages.len() < 5 => cont = c.to_string(),
                _ => break,
            }
        }
        Value::Array(pages)
    });

    // Watches: from a resource version before three changes, with a label
    // selector (cm-0 leaves the selection, cm-1 changes, cm-5 joins).
    run.step("watch from a resource version, selected", |api| {
        let rv = api.get(&path("configmaps")).json()["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let mut cm0 = api.get(&path("configmaps/cm-0")).json();
        cm0["metadata"]["labels"]["app"] = json!("b");
        api.json("PUT", &path("configmaps/cm-0"), &cm0);
        let mut cm1 = api.get(&path("configmaps/cm-1")).json();
        cm1["data"]["k"] = json!("changed");
        api.json("PUT", &path("configmaps/cm-1"), &cm1);
        api.json(
            "POST",
            &path("configmaps"),
            &configmap("cm-5", json!({"app": "a"})),
        );
        let (status, evs) = api.watch(
            &format!(
                "{}?watch=1&labelSelector=app%3Da&resourceVersion={rv}&timeoutSeconds=10",
                path("configmaps")
            ),
            Duration::from_secs(10),
            |e| e.len() >= 3,
        );
        events(status, &evs)
    });
    run.step("watch with initial events and bookmarks", |api| {
        let (status, evs) = api.watch(
            &format!(
                "{}?watch=1&labelSelector=app%3Da&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=10",
                path("configmaps")
            ),
            Duration::from_secs(10),
            |e| e.iter().any(|e| e["type"] == "BOOKMARK"),
        );
        events(status, &evs)
    });
    run.step(
        "watch without resourceVersionMatch for initial events",
        |api| {
            observe(&api.get(&format!(
                "{}?watch=1&sendInitialEvents=true&allowWatchBookmarks=true",
                path("configmaps")
            )))
        },
    );
    // Server-side apply: two managers, a conflict, then force.
    let apply = |manager: &'static str, value: &str, force: bool| {
        let body = format!(
            "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"applied\",\"namespace\":\"{NS}\"}},\"data\":{{\"k\":\"{value}\"}}}}"
        );
        move |api: &Api| {
            observe(&api.send(
                "PATCH",
                &format!(
                    "{}?fieldManager={manager}{}",
                    path("configmaps/applied"),
                    if force { "&force=true" } else { "" }
                ),
                "application/apply-patch+yaml",
                Some(body.as_bytes()),
            ))
        }
    };
    run.step("apply as manager a", apply("a", "1", false));
    run.step("409 apply conflict as manager b", apply("b", "2", false));
    run.step("apply as manager b with force", apply("b", "2", true));
    run.step("422 apply without a field manager", |api| {
        observe(&api.send(
            "PATCH",
            &path("configmaps/applied"),
            "application/apply-patch+yaml",
            Some(b"{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"applied\"}}"),
        ))
    });

    // Patches.
    run.step("merge patch", |api| {
        observe(&api.send(
            "PATCH",
            &path("configmaps/cm-2"),
            "application/merge-patch+json",
            Some(br#"{"metadata":{"labels":{"app":null,"merged":"yes"}},"data":{"m":"1"}}"#),
        ))
    });
    run.step("json patch", |api| {
        observe(&api.send(
            "PATCH",
            &path("configmaps/cm-2"),
            "application/json-patch+json",
            Some(
                br#"[{"op":"add","path":"/data/j","value":"2"},{"op":"remove","path":"/data/m"}]"#,
            ),
        ))
    });
    run.step("422 json patch test failure", |api| {
        observe(&api.send(
            "PATCH",
            &path("configmaps/cm-2"),
            "application/json-patch+json",
            Some(br#"[{"op":"test","path":"/data/j","value":"other"}]"#),
        ))
    });
    run.step("strategic merge patch", |api| {
        observe(&api.send(
            "PATCH",
            &path("configmaps/cm-2"),
            "application/strategic-merge-patch+json",
            Some(br#"{"metadata":{"labels":{"smp":"yes"}},"data":{"j":null}}"#),
        ))
    });
    run.step("415 unsupported content type", |api| {
        observe(&api.send(
            "PATCH",
            &path("configmaps/cm-2"),
            "text/plain",
            Some(b"k: v"),
        ))
    });

    // dryRun=All and fieldValidation=Strict.
    run.step("dry-run create, then get", |api| {
        let created = api.json(
            "POST",
            &format!("{}?dryRun=All", path("configmaps")),
            &configmap("dry", json!({})),
        );
        json!([
            observe(&created),
            observe(&api.get(&path("configmaps/dry")))
        ])
    });
    run.step("400 strict field validation", |api| {
        let mut cm = configmap("strict", json!({}));
        cm["spec"] = json!({"x": 1});
        cm["metadata"]["colour"] = json!("blue");
        observe(&api.json(
            "POST",
            &format!("{}?fieldValidation=Strict", path("configmaps")),
            &cm,
        ))
    });

    // Delete preconditions and propagation.
    run.step("409 delete with a uid precondition", |api| {
        observe(&api.json(
            "DELETE",
            &path("configmaps/cm-3"),
            &json!({"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "not-the-uid"}}),
        ))
    });
    run.step("409 delete with a resourceVersion precondition", |api| {
        observe(&api.json(
            "DELETE",
            &path("configmaps/cm-3"),
            &json!({"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"resourceVersion": "1"}}),
        ))
    });
    for policy in ["Orphan", "Background", "Foreground"] {
        run.step(&format!("delete with {policy} propagation"), |api| {
            let owner = format!("owner-{}", policy.to_lowercase());
            let created = api.json(
                "POST",
                &path("configmaps"),
                &configmap(&owner, json!({})),
            );
            let uid = created.json()["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let mut dependent = configmap(&format!("{owner}-dependent"), json!({}));
            dependent["metadata"]["ownerReferences"] = json!([{
                "apiVersion": "v1", "kind": "ConfigMap", "name": owner, "uid": uid,
                "blockOwnerDeletion": true,
            }]);
            api.json("POST", &path("configmaps"), &dependent);
            let deleted = api.json(
                "DELETE",
                &path(&format!("configmaps/{owner}")),
                &json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": policy}),
            );
            let owner_gone = poll(api, &path(&format!("configmaps/{owner}")), |r| {
                r.status == 404
            });
            let dependent_path = path(&format!("configmaps/{owner}-dependent"));
            let dependent_after = if policy == "Orphan" {
                poll(api, &dependent_path, |r| {
                    r.json()["metadata"].get("ownerReferences").is_none()
                })
            } else {
                poll(api, &dependent_path, |r| r.status == 404)
            };
            json!({
                "delete": {"code": deleted.status,
                           "finalizers": deleted.json()["metadata"]["finalizers"],
                           "deleting": deleted.json()["metadata"].get("deletionTimestamp").is_some()},
                "owner": owner_gone.status,
                "dependent": {"code": dependent_after.status,
                              "ownerReferences": dependent_after.json()["metadata"]["ownerReferences"]},
            })
        });
    }

    // The status subresource of a custom resource, and a 422.
    let pool = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "differential"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "x"},
            "requirements": []}},
            "disruption": {"consolidateAfter": "0s"}},
        "status": {"nodes": 7},
    });
    run.step("create a NodePool with a status", |api| {
        observe(&api.json("POST", "/apis/karpenter.sh/v1/nodepools", &pool))
    });
    run.step("status subresource: merge patch", |api| {
        observe(&api.send(
            "PATCH",
            "/apis/karpenter.sh/v1/nodepools/differential/status",
            "application/merge-patch+json",
            Some(br#"{"status":{"nodes":3}}"#),
        ))
    });
    run.step("main resource: status is not written", |api| {
        observe(&api.send(
            "PATCH",
            "/apis/karpenter.sh/v1/nodepools/differential",
            "application/merge-patch+json",
            Some(br#"{"spec":{"weight":5},"status":{"nodes":9}}"#),
        ))
    });
    run.step("415 strategic merge patch of a custom resource", |api| {
        observe(&api.send(
            "PATCH",
            "/apis/karpenter.sh/v1/nodepools/differential",
            "application/strategic-merge-patch+json",
            Some(br#"{"spec":{"weight":6}}"#),
        ))
    });
    run.step("422 invalid NodePool", |api| {
        let mut bad = pool.clone();
        bad["metadata"]["name"] = json!("invalid");
        bad["spec"]["weight"] = json!(1000);
        bad["spec"]["template"]["spec"]["requirements"] =
            json!([{"key": "karpenter.sh/custom", "operator": "In", "values": ["a"]}]);
        observe(&api.json("POST", "/apis/karpenter.sh/v1/nodepools", &bad))
    });

    // Eviction under a budget: a pending pod may always go; a running and
    // ready one only as the budget allows, once the disruption controller
    // has counted it (the budget's status is what the eviction reads).
    run.step(
        "eviction of a pending pod under a PodDisruptionBudget",
        |api| {
            api.json("POST", &pdbs(), &budget("web"));
            api.json("POST", &path("pods"), &pod("web-0", "web"));
            let pdb = poll(api, &format!("{}/web", pdbs()), |r| {
                r.json()["status"]["observedGeneration"].as_i64() >= Some(1)
                    && r.json()["status"]["expectedPods"] == 1
            });
            let evicted = api.json("POST", &path("pods/web-0/eviction"), &eviction("web-0"));
            json!({"budget": mask(&pdb.json()["status"]), "eviction": observe(&evicted)})
        },
    );
    let refused = run.step("429 eviction refused by a PodDisruptionBudget", |api| {
        api.json("POST", &pdbs(), &budget("api"));
        api.json("POST", &path("pods"), &pod("api-0", "api"));
        let running = api.send(
            "PATCH",
            &path("pods/api-0/status"),
            "application/merge-patch+json",
            Some(br#"{"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}"#),
        );
        let pdb = poll(api, &format!("{}/api", pdbs()), |r| {
            r.json()["status"]["observedGeneration"].as_i64() >= Some(1)
                && r.json()["status"]["currentHealthy"] == 1
        });
        let evicted = api.json("POST", &path("pods/api-0/eviction"), &eviction("api-0"));
        json!({"running": running.status, "budget": mask(&pdb.json()["status"]),
               "eviction": observe(&evicted)})
    });
    assert_eq!(
        refused["eviction"]["code"], 429,
        "the API server refuses the eviction: {refused}"
    );

    // A watch from a resource version the server no longer holds, the
    // last step, as it restarts the API server: its watch cache starts
    // afresh at the current revision, so a resource version from before
    // is too old for it (etcd has not compacted it yet). The served API
    // keeps the last SERVED_WATCH_LOG changes of each kind; both servers
    // get as many and one more.
    let expired = run.step("410 watch from a compacted resource version", |api| {
        let rv = api.get(&path("configmaps")).json()["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        api.json("POST", &path("configmaps"), &configmap("churn", json!({})));
        for i in 0..SERVED_WATCH_LOG {
            api.send(
                "PATCH",
                &path("configmaps/churn"),
                "application/merge-patch+json",
                Some(format!(r#"{{"data":{{"k":"{i}"}}}}"#).as_bytes()),
            );
        }
        if std::ptr::eq(api, &real) {
            tb.control("kill", "kube-apiserver");
            tb.control("start", "kube-apiserver");
            tb.wait_for("the restarted API server", Duration::from_secs(60), || {
                tb.kubectl(&["get", "--raw", "/readyz"]).status.success()
            });
        }
        let watch = format!(
            "{}?watch=1&resourceVersion={rv}&timeoutSeconds=10",
            path("configmaps")
        );
        // A cache still initialising asks the client to come back (429).
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (status, evs) = api.watch(&watch, Duration::from_secs(10), |e| !e.is_empty());
            if status != 429 || Instant::now() > deadline {
                return events(status, &evs);
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    });
    assert_eq!(
        expired["events"][0]["object"]["code"], 410,
        "the restarted API server no longer has the resource version: {expired}"
    );

    let mut problems = run.failures.clone();
    for (i, (step, pointer, _)) in ALLOWED.iter().enumerate() {
        if !run.used.contains(&i) {
            problems.push(format!(
                "allow-list entry no longer needed: {step} {pointer}"
            ));
        }
    }
    eprintln!(
        "served API vs the API server: {} steps, {} agree, {} differ with a reason ({:?})",
        run.steps,
        run.agree,
        run.explained.len(),
        run.explained
    );
    assert!(
        problems.is_empty(),
        "{} unexplained differences:\n{}\n\nserved API log:\n{}",
        problems.len(),
        problems.join("\n"),
        served_api.log()
    );
}
