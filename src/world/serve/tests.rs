//! The served API through HTTP on 127.0.0.1, checked against the API
//! server's documented behaviour
//! (<https://kubernetes.io/docs/reference/using-api/api-concepts/>, cited
//! per test where a page says more).

use std::net::SocketAddr;
use std::time::Duration;

use http::HeaderMap;
use serde_json::{Value, json};

use super::*;
use crate::clock::{ManualClock, Timestamp};
use crate::world::faults::FaultRule;

#[test]
fn routes_split_group_version_namespace_and_subresource() {
    let kinds = Kinds::standard();
    assert_eq!(route(&kinds, "/version"), Route::Version);
    assert_eq!(
        route(&kinds, "/apis/karpenter.sh/v1"),
        Route::Resources("karpenter.sh".into(), "v1".into())
    );
    assert_eq!(
        route(&kinds, "/api/v1/namespaces/ns/pods/web/eviction"),
        Route::Object {
            group: String::new(),
            version: "v1".into(),
            namespace: Some("ns".into()),
            plural: "pods".into(),
            name: Some("web".into()),
            sub: Some("eviction".into()),
        }
    );
    assert_eq!(
        route(&kinds, "/api/v1/namespaces/ns/status"),
        Route::Object {
            group: String::new(),
            version: "v1".into(),
            namespace: None,
            plural: "namespaces".into(),
            name: Some("ns".into()),
            sub: Some("status".into()),
        }
    );
    assert_eq!(
        route(&kinds, "/apis/karpenter.sh/v1beta1/nodepools"),
        Route::NotFound
    );
}

/// A served in-memory cluster on 127.0.0.1 and a runtime to call it from.
struct Harness {
    addr: SocketAddr,
    cluster: Arc<MemoryCluster>,
    rt: tokio::runtime::Runtime,
}

fn serve_with(faults: Vec<FaultRule>, log_capacity: usize) -> Harness {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let start: Timestamp = "2026-01-01T00:00:00Z".parse().expect("time");
    let cluster = Arc::new(
        MemoryCluster::new(Arc::new(ManualClock::new(start))).with_watch_log_capacity(log_capacity),
    );
    crate::world::apiserver::admission::register(&cluster).expect("admission");
    cluster.ensure_namespaces();
    let server = ApiServer::new(
        cluster.clone(),
        ServeOptions {
            bookmark_every: Duration::from_millis(100),
            ..ServeOptions::default()
        },
        Faults::new(faults),
    );
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    rt.spawn(server.run(listener, std::future::pending()));
    Harness { addr, cluster, rt }
}

fn serve() -> Harness {
    serve_with(Vec::new(), 4096)
}

/// One response: status, headers and the body as JSON (or a string).
struct Answer {
    code: u16,
    headers: HeaderMap,
    body: Value,
}

impl Harness {
    fn call(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
        self.rt.block_on(async {
            let stream = tokio::net::TcpStream::connect(self.addr)
                .await
                .expect("connect");
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                    .await
                    .expect("handshake");
            tokio::spawn(conn);
            let mut req = Request::builder()
                .method(method)
                .uri(path)
                .header(header::HOST, "127.0.0.1");
            for (k, v) in headers {
                req = req.header(*k, *v);
            }
            let req = req
                .body(Full::new(Bytes::from(body.to_string())))
                .expect("request");
            let resp = sender.send_request(req).await.expect("response");
            let code = resp.status().as_u16();
            let headers = resp.headers().clone();
            let bytes = resp.into_body().collect().await.expect("body").to_bytes();
            let body = serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
            Answer {
                code,
                headers,
                body,
            }
        })
    }

    fn get(&self, path: &str) -> Answer {
        self.call("GET", path, &[], "")
    }

    fn post(&self, path: &str, body: &Value) -> Answer {
        self.call(
            "POST",
            path,
            &[("content-type", "application/json")],
            &body.to_string(),
        )
    }

    /// The first `n` events of a watch (or fewer when the stream ends or
    /// `within` passes), each as its JSON line.
    fn watch(&self, path: &str, n: usize, within: Duration, during: impl FnOnce()) -> Vec<Value> {
        let addr = self.addr;
        let path = path.to_string();
        let task = self.rt.spawn(async move {
            let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                    .await
                    .expect("handshake");
            tokio::spawn(conn);
            let req = Request::builder()
                .uri(path)
                .header(header::HOST, "127.0.0.1")
                .body(Full::new(Bytes::new()))
                .expect("request");
            let mut body = sender
                .send_request(req)
                .await
                .expect("response")
                .into_body();
            let mut buf = Vec::new();
            let mut events = Vec::new();
            let deadline = tokio::time::Instant::now() + within;
            while events.len() < n {
                let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
                    Ok(Some(Ok(f))) => f,
                    _ => break,
                };
                if let Ok(data) = frame.into_data() {
                    buf.extend_from_slice(&data);
                }
                while let Some(i) = buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=i).collect();
                    events.push(serde_json::from_slice(&line).expect("an event per line"));
                }
            }
            events
        });
        std::thread::sleep(Duration::from_millis(100));
        during();
        self.rt.block_on(task).expect("watch task")
    }
}

fn configmap(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "default", "labels": labels},
           "data": {"k": "v"}})
}

fn pod(name: &str, node: Option<&str>, labels: Value) -> Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "i"}]}});
    if let Some(n) = node {
        p["spec"]["nodeName"] = json!(n);
    }
    p
}

const CMS: &str = "/api/v1/namespaces/default/configmaps";

#[test]
fn discovery_names_every_served_resource_with_its_verbs_and_subresources() {
    let h = serve();
    let core = h.get("/api/v1");
    assert_eq!(core.code, 200);
    assert_eq!(core.body["kind"], "APIResourceList");
    let names: Vec<&str> = core.body["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    for n in [
        "pods",
        "pods/status",
        "pods/eviction",
        "pods/binding",
        "nodes",
        "namespaces",
        "events",
    ] {
        assert!(names.contains(&n), "{n} in {names:?}");
    }
    let groups = h.get("/apis");
    let group_names: Vec<&str> = groups.body["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| g["name"].as_str())
        .collect();
    for g in [
        "apps",
        "policy",
        "coordination.k8s.io",
        "storage.k8s.io",
        "karpenter.sh",
        "karpenter.k8s.aws",
    ] {
        assert!(group_names.contains(&g), "{g}");
    }
    let karpenter = h.get("/apis/karpenter.sh/v1");
    assert_eq!(karpenter.body["groupVersion"], "karpenter.sh/v1");
    assert_eq!(h.get("/apis/karpenter.sh/v1beta1").code, 404);
    assert_eq!(h.get("/version").body["gitVersion"], "v1.33.0");
    // The OpenAPI v3 index kubectl reads to learn that fields are
    // validated by the server.
    let index = h.get("/openapi/v3");
    let url = index.body["paths"]["apis/karpenter.sh/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    let doc = h.get(&url);
    let patch = &doc.body["paths"]["/apis/karpenter.sh/v1/nodepools/{name}"]["patch"];
    assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "NodePool");
}

/// "If the resourceVersion ... does not match, the update fails with a 409
/// Conflict" (API concepts, resource versions).
#[test]
fn a_stale_update_is_a_409_conflict_and_a_duplicate_create_too() {
    let h = serve();
    let created = h.post(CMS, &configmap("a", json!({})));
    assert_eq!(created.code, 201);
    assert_eq!(h.post(CMS, &configmap("a", json!({}))).code, 409);
    let mut stale = created.body.clone();
    stale["data"]["k"] = json!("w");
    assert_eq!(
        h.call("PUT", &format!("{CMS}/a"), &[], &stale.to_string())
            .code,
        200
    );
    let again = h.call("PUT", &format!("{CMS}/a"), &[], &stale.to_string());
    assert_eq!(again.code, 409);
    assert_eq!(again.body["kind"], "Status");
    assert_eq!(again.body["reason"], "Conflict");
    let mismatched = h.call(
        "PUT",
        &format!("{CMS}/b"),
        &[],
        &configmap("a", json!({})).to_string(),
    );
    assert_eq!(mismatched.code, 400);
}

/// "If the requested resourceVersion is too old ... the watch fails with
/// 410 Gone" (API concepts, efficient detection of changes): the stream
/// answers 200 and its one event is an ERROR with an Expired Status.
#[test]
fn a_watch_from_a_compacted_resource_version_gets_410_expired() {
    let h = serve_with(Vec::new(), 2);
    for i in 0..5 {
        assert_eq!(
            h.post(CMS, &configmap(&format!("c{i}"), json!({}))).code,
            201
        );
    }
    let events = h.watch(
        &format!("{CMS}?watch=true&resourceVersion=1"),
        1,
        Duration::from_secs(5),
        || {},
    );
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["type"], "ERROR");
    assert_eq!(events[0]["object"]["code"], 410);
    assert_eq!(events[0]["object"]["reason"], "Expired");
}

/// Chunked lists: "the server ... returns a continue token ... the
/// remaining results are served from the same consistent snapshot"
/// (API concepts, retrieving large results sets in chunks).
#[test]
fn lists_page_with_limit_and_continue_from_one_snapshot() {
    let h = serve();
    for i in 0..5 {
        h.post(CMS, &configmap(&format!("c{i}"), json!({})));
    }
    let first = h.get(&format!("{CMS}?limit=2"));
    assert_eq!(first.body["items"].as_array().unwrap().len(), 2);
    assert_eq!(first.body["metadata"]["remainingItemCount"], 3);
    let token = first.body["metadata"]["continue"]
        .as_str()
        .unwrap()
        .to_string();
    let rv = first.body["metadata"]["resourceVersion"].clone();
    h.post(CMS, &configmap("c9", json!({})));
    let second = h.get(&format!("{CMS}?limit=2&continue={token}"));
    let names: Vec<&str> = second.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["c2", "c3"]);
    assert_eq!(second.body["metadata"]["resourceVersion"], rv);
    let last_token = second.body["metadata"]["continue"]
        .as_str()
        .unwrap()
        .to_string();
    let last = h.get(&format!("{CMS}?limit=2&continue={last_token}"));
    assert_eq!(
        last.body["items"].as_array().unwrap().len(),
        1,
        "c9 came after the snapshot"
    );
    assert!(last.body["metadata"].get("continue").is_none());
    let expired = h.get(&format!("{CMS}?limit=2&continue={last_token}"));
    assert_eq!(
        (expired.code, expired.body["reason"].as_str()),
        (410, Some("Expired"))
    );
}

#[test]
fn label_and_field_selectors_filter_lists_and_unindexed_fields_are_refused() {
    let h = serve();
    h.post(
        CMS,
        &configmap("web", json!({"app": "web", "tier": "front"})),
    );
    h.post(CMS, &configmap("db", json!({"app": "db"})));
    let names = |a: &Answer| -> Vec<String> {
        a.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|i| i["metadata"]["name"].as_str().map(String::from))
            .collect()
    };
    assert_eq!(
        names(&h.get(&format!("{CMS}?labelSelector=app%20in%20(web,api)"))),
        ["web"]
    );
    assert_eq!(names(&h.get(&format!("{CMS}?labelSelector=!tier"))), ["db"]);
    assert_eq!(
        names(&h.get(&format!("{CMS}?fieldSelector=metadata.name%3Ddb"))),
        ["db"]
    );
    let pods = "/api/v1/namespaces/default/pods";
    h.post(pods, &pod("p1", Some("n1"), json!({})));
    h.post(pods, &pod("p2", None, json!({})));
    assert_eq!(
        names(&h.get(&format!("{pods}?fieldSelector=spec.nodeName%3Dn1"))),
        ["p1"]
    );
    assert_eq!(
        names(&h.get(&format!("{pods}?fieldSelector=spec.nodeName%3D"))),
        ["p2"]
    );
    let refused = h.get(&format!("{CMS}?fieldSelector=spec.nodeName%3Dn1"));
    assert_eq!(refused.code, 400);
    // Created through the API, a pod starts Pending with its defaults.
    let p = h.get(&format!("{pods}/p2"));
    assert_eq!(p.body["status"]["phase"], "Pending");
    assert_eq!(p.body["spec"]["terminationGracePeriodSeconds"], 30);
}

/// Watches filter by selector: an object that stops matching is sent as
/// DELETED, one that starts matching as ADDED; bookmarks carry a
/// resourceVersion only (API concepts, watch bookmarks).
#[test]
fn watches_follow_selectors_and_send_bookmarks() {
    let h = serve();
    let cluster = h.cluster.clone();
    let events = h.watch(
        &format!("{CMS}?watch=1&labelSelector=app%3Dweb&allowWatchBookmarks=true"),
        4,
        Duration::from_secs(5),
        || {
            let cm: k8s_openapi::api::core::v1::ConfigMap =
                serde_json::from_value(configmap("a", json!({"app": "web"}))).unwrap();
            cluster.create(cm).unwrap();
            cluster
                .update_with::<k8s_openapi::api::core::v1::ConfigMap>(
                    &ObjectKey::new("default", "a"),
                    |c| {
                        c.metadata.labels = Some([("app".to_string(), "db".to_string())].into());
                    },
                )
                .unwrap();
        },
    );
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    let changes: Vec<&str> = kinds.iter().copied().filter(|k| *k != "BOOKMARK").collect();
    assert_eq!(changes, ["ADDED", "DELETED"], "{events:?}");
    let bookmark = events
        .iter()
        .find(|e| e["type"] == "BOOKMARK")
        .expect("a bookmark");
    assert!(bookmark["object"]["metadata"]["resourceVersion"].is_string());
    assert_eq!(bookmark["object"]["kind"], "ConfigMap");
}

/// `dryRun=All` runs every check and stores nothing; delete preconditions
/// must match (API concepts, dry-run; DeleteOptions).
#[test]
fn dry_runs_store_nothing_and_delete_preconditions_hold() {
    let h = serve();
    let dry = h.post(&format!("{CMS}?dryRun=All"), &configmap("a", json!({})));
    assert_eq!(dry.code, 201);
    assert_eq!(h.get(&format!("{CMS}/a")).code, 404);
    assert_eq!(
        h.post(&format!("{CMS}?dryRun=Some"), &configmap("a", json!({})))
            .code,
        400
    );
    let created = h.post(CMS, &configmap("a", json!({})));
    let wrong = json!({"preconditions": {"uid": "not-the-uid"}});
    assert_eq!(
        h.call("DELETE", &format!("{CMS}/a"), &[], &wrong.to_string())
            .code,
        409
    );
    let right = json!({"preconditions": {"uid": created.body["metadata"]["uid"]}});
    assert_eq!(
        h.call("DELETE", &format!("{CMS}/a"), &[], &right.to_string())
            .code,
        200
    );
    assert_eq!(h.get(&format!("{CMS}/a")).code, 404);
    let mut elsewhere = configmap("a", json!({}));
    elsewhere["metadata"]["namespace"] = json!("nowhere");
    let missing = h.post("/api/v1/namespaces/nowhere/configmaps", &elsewhere);
    assert_eq!(
        (missing.code, missing.body["details"]["kind"].as_str()),
        (404, Some("namespaces"))
    );
}

/// The eviction subresource answers 429 while the PodDisruptionBudget
/// allows no disruption, with the budget as a DisruptionBudget cause, and
/// 201 once it does (pkg/registry/core/pod/storage/eviction.go; the
/// Retry-After header is sent only while the budget is being processed).
/// The body is the API server's, field by field (tests/differential.rs).
#[test]
fn an_eviction_a_budget_refuses_is_a_429_with_its_cause() {
    let h = serve();
    let pods = "/api/v1/namespaces/default/pods";
    let mut running = pod("web-1", Some("n1"), json!({"app": "web"}));
    running["status"] =
        json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]});
    let p: k8s_openapi::api::core::v1::Pod = serde_json::from_value(running).unwrap();
    h.cluster.create(p).unwrap();
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}});
    assert_eq!(
        h.post(
            "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
            &pdb
        )
        .code,
        201
    );
    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": "web-1", "namespace": "default"}});
    let refused = h.post(&format!("{pods}/web-1/eviction"), &eviction);
    assert_eq!(refused.code, 429);
    assert_eq!(refused.body["reason"], "TooManyRequests");
    assert_eq!(
        refused.body["message"],
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    // A cause without a field has no `field` key, as the API server's
    // `omitempty` leaves it out.
    assert_eq!(
        refused.body["details"],
        json!({"causes": [{"reason": "DisruptionBudget",
            "message": "The disruption budget web needs 1 healthy pods and has 1 currently"}]})
    );
    assert!(refused.headers.get(header::RETRY_AFTER).is_none());
    assert_eq!(
        h.call(
            "DELETE",
            "/apis/policy/v1/namespaces/default/poddisruptionbudgets/web",
            &[],
            ""
        )
        .code,
        200
    );
    let evicted = h.post(&format!("{pods}/web-1/eviction"), &eviction);
    assert_eq!(
        (evicted.code, evicted.body["status"].as_str()),
        (201, Some("Success"))
    );
}

/// Server-side apply: a field manager is required, another manager's
/// field is a 409 conflict unless forced
/// (<https://kubernetes.io/docs/reference/using-api/server-side-apply/>).
#[test]
fn server_side_apply_needs_a_manager_and_conflicts_unless_forced() {
    let h = serve();
    let apply = |query: &str, data: &str| {
        let body = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: default\ndata:\n  k: {data}\n"
        );
        h.call(
            "PATCH",
            &format!("{CMS}/a?{query}"),
            &[("content-type", "application/apply-patch+yaml")],
            &body,
        )
    };
    assert_eq!(apply("", "v").code, 422);
    assert_eq!(apply("fieldManager=alice", "v").code, 201);
    assert_eq!(apply("fieldManager=alice", "w").code, 200);
    let conflict = apply("fieldManager=bob", "x");
    assert_eq!(conflict.code, 409);
    assert!(
        conflict.body["message"]
            .as_str()
            .unwrap()
            .contains("Apply failed with 1 conflict")
    );
    assert_eq!(apply("fieldManager=bob&force=true", "x").code, 200);
    assert_eq!(h.get(&format!("{CMS}/a")).body["data"]["k"], "x");
}

/// Merge, JSON and strategic merge patches; a strategic merge patch of a
/// custom resource is 415 (API concepts, patch operations).
#[test]
fn patches_of_each_type_apply_as_the_api_server_applies_them() {
    let h = serve();
    h.post(CMS, &configmap("a", json!({"x": "1"})));
    let merge = h.call(
        "PATCH",
        &format!("{CMS}/a"),
        &[("content-type", "application/merge-patch+json")],
        r#"{"metadata": {"labels": {"x": null, "y": "2"}}}"#,
    );
    assert_eq!(merge.code, 200);
    assert_eq!(merge.body["metadata"]["labels"], json!({"y": "2"}));
    let failed_test = h.call(
        "PATCH",
        &format!("{CMS}/a"),
        &[("content-type", "application/json-patch+json")],
        r#"[{"op": "test", "path": "/data/k", "value": "nope"}]"#,
    );
    assert_eq!(failed_test.code, 422);
    let pods = "/api/v1/namespaces/default/pods";
    let mut p = pod("p", None, json!({}));
    p["spec"]["containers"] = json!([{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]);
    h.post(pods, &p);
    let smp = h.call(
        "PATCH",
        &format!("{pods}/p"),
        &[("content-type", "application/strategic-merge-patch+json")],
        r#"{"spec": {"containers": [{"name": "b", "image": "2"}]}}"#,
    );
    assert_eq!(
        smp.body["spec"]["containers"],
        json!([{"name": "a", "image": "1"}, {"name": "b", "image": "2"}])
    );
    let np = serde_json::to_value(crate::api::NodePool::test("general")).unwrap();
    assert_eq!(h.post("/apis/karpenter.sh/v1/nodepools", &np).code, 201);
    let refused = h.call(
        "PATCH",
        "/apis/karpenter.sh/v1/nodepools/general",
        &[("content-type", "application/strategic-merge-patch+json")],
        r#"{"spec": {"weight": 5}}"#,
    );
    assert_eq!(
        (refused.code, refused.body["reason"].as_str()),
        (415, Some("UnsupportedMediaType"))
    );
}

/// The status subresource: a PUT of the object ignores status, a PUT of
/// `/status` ignores everything else.
#[test]
fn the_status_subresource_and_the_object_change_apart() {
    let h = serve();
    let nodes = "/api/v1/nodes";
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
                      "spec": {}, "status": {"phase": "Running"}});
    assert_eq!(h.post(nodes, &node).code, 201);
    let mut both = h.get(&format!("{nodes}/n1")).body;
    both["spec"]["unschedulable"] = json!(true);
    both["status"]["phase"] = json!("Terminated");
    let main = h.call("PUT", &format!("{nodes}/n1"), &[], &both.to_string());
    assert_eq!(main.body["spec"]["unschedulable"], true);
    assert_eq!(main.body["status"]["phase"], "Running");
    both["metadata"]["resourceVersion"] = main.body["metadata"]["resourceVersion"].clone();
    both["spec"]["unschedulable"] = json!(false);
    let status = h.call("PUT", &format!("{nodes}/n1/status"), &[], &both.to_string());
    assert_eq!(status.body["status"]["phase"], "Terminated");
    assert_eq!(status.body["spec"]["unschedulable"], true);
    // kubectl's Table.
    let table = h.call(
        "GET",
        nodes,
        &[(
            "accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )],
        "",
    );
    assert_eq!(table.body["kind"], "Table");
    assert_eq!(table.body["columnDefinitions"][1]["name"], "Status");
    assert_eq!(
        table.body["rows"][0]["cells"][1],
        "Unknown,SchedulingDisabled"
    );
}

/// fieldValidation: Strict refuses undeclared fields, Warn (the default)
/// answers with a Warning header.
#[test]
fn undeclared_fields_are_refused_when_strict_and_warned_otherwise() {
    let h = serve();
    let mut cm = configmap("a", json!({}));
    cm["colour"] = json!("blue");
    let strict = h.post(&format!("{CMS}?fieldValidation=Strict"), &cm);
    assert_eq!(strict.code, 400);
    assert!(
        strict.body["message"]
            .as_str()
            .unwrap()
            .contains("unknown field \"colour\"")
    );
    let warned = h.post(CMS, &cm);
    assert_eq!(warned.code, 201);
    let warning = warned
        .headers
        .get(header::WARNING)
        .unwrap()
        .to_str()
        .unwrap();
    assert_eq!(warning, "299 - \"unknown field \\\"colour\\\"\"");
}

/// Faults on demand: a 429 with Retry-After, a watch dropped after a
/// while, and a write that times out after it was stored.
#[test]
fn faults_answer_as_an_overloaded_or_failing_server_does() {
    let h = serve_with(
        vec![
            FaultRule::parse("verb=create,resource=configmaps,status=429,retryAfter=3,times=1")
                .unwrap(),
            FaultRule::parse("verb=watch,resource=configmaps,dropWatchAfter=200ms").unwrap(),
            FaultRule::parse("verb=update,resource=configmaps,writeTimeout=50ms").unwrap(),
        ],
        4096,
    );
    let throttled = h.post(CMS, &configmap("a", json!({})));
    assert_eq!(throttled.code, 429);
    assert_eq!(throttled.headers.get(header::RETRY_AFTER).unwrap(), "3");
    assert_eq!(throttled.body["details"]["retryAfterSeconds"], 3);
    let created = h.post(CMS, &configmap("a", json!({})));
    assert_eq!(created.code, 201);
    let started = std::time::Instant::now();
    let events = h.watch(
        &format!("{CMS}?watch=true"),
        10,
        Duration::from_secs(5),
        || {},
    );
    assert_eq!(events.len(), 1, "the initial ADDED, then the stream ends");
    assert!(started.elapsed() < Duration::from_secs(3));
    let mut changed = created.body.clone();
    changed["data"]["k"] = json!("w");
    let timed_out = h.call("PUT", &format!("{CMS}/a"), &[], &changed.to_string());
    assert_eq!(
        (timed_out.code, timed_out.body["reason"].as_str()),
        (504, Some("Timeout"))
    );
    assert_eq!(
        h.get(&format!("{CMS}/a")).body["data"]["k"],
        "w",
        "the write was applied"
    );
}

#[test]
fn the_scale_subresource_reads_and_sets_replicas() {
    let h = serve();
    let deploys = "/apis/apps/v1/namespaces/default/deployments";
    let d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
    assert_eq!(h.post(deploys, &d).code, 201);
    let scale = h.get(&format!("{deploys}/web/scale"));
    assert_eq!(
        (
            scale.body["kind"].as_str(),
            scale.body["spec"]["replicas"].as_i64()
        ),
        (Some("Scale"), Some(2))
    );
    assert_eq!(scale.body["status"]["selector"], "app=web");
    let patched = h.call(
        "PATCH",
        &format!("{deploys}/web/scale"),
        &[("content-type", "application/merge-patch+json")],
        r#"{"spec": {"replicas": 5}}"#,
    );
    assert_eq!(patched.body["spec"]["replicas"], 5);
    assert_eq!(h.get(&format!("{deploys}/web")).body["spec"]["replicas"], 5);
}

/// Graceful deletion: a pod bound to a node stays, terminating, for its
/// grace period (202 Accepted with `deletionTimestamp` and
/// `deletionGracePeriodSeconds`); `gracePeriodSeconds=0` deletes it at once;
/// a pod never bound goes at once
/// (<https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination>).
#[test]
fn pods_on_nodes_terminate_for_their_grace_period() {
    let h = serve();
    let pods = "/api/v1/namespaces/default/pods";
    let mut bound = pod("bound", Some("n1"), json!({}));
    bound["status"] = json!({"phase": "Running"});
    let p: k8s_openapi::api::core::v1::Pod = serde_json::from_value(bound).unwrap();
    h.cluster.create(p).unwrap();
    let deleted = h.call("DELETE", &format!("{pods}/bound"), &[], "");
    assert_eq!(deleted.code, 200, "202 is only for orphanDependents=false");
    assert_eq!(deleted.body["metadata"]["deletionGracePeriodSeconds"], 30);
    assert_eq!(
        deleted.body["metadata"]["deletionTimestamp"],
        "2026-01-01T00:00:30Z"
    );
    assert_eq!(
        h.get(&format!("{pods}/bound")).code,
        200,
        "still terminating"
    );
    let forced = h.call(
        "DELETE",
        &format!("{pods}/bound?gracePeriodSeconds=0"),
        &[],
        "",
    );
    assert_eq!(forced.code, 200);
    assert_eq!(h.get(&format!("{pods}/bound")).code, 404);
    h.post(pods, &pod("pending", None, json!({})));
    assert_eq!(
        h.call("DELETE", &format!("{pods}/pending"), &[], "").code,
        200
    );
    assert_eq!(h.get(&format!("{pods}/pending")).code, 404);
    // Binding, as the scheduler does: once.
    h.post(pods, &pod("unbound", None, json!({})));
    let binding = json!({"apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": "unbound", "namespace": "default"}, "target": {"kind": "Node", "name": "n2"}});
    assert_eq!(
        h.post(&format!("{pods}/unbound/binding"), &binding).code,
        201
    );
    assert_eq!(
        h.get(&format!("{pods}/unbound")).body["spec"]["nodeName"],
        "n2"
    );
    assert_eq!(
        h.post(&format!("{pods}/unbound/binding"), &binding).code,
        409
    );
}

/// Propagation: background deletes the dependents, orphan keeps them
/// without the owner reference
/// (<https://kubernetes.io/docs/concepts/architecture/garbage-collection/#cascading-deletion>).
#[test]
fn deletes_propagate_to_dependents_as_asked() {
    let h = serve();
    for policy in ["Background", "Orphan"] {
        let owner = h.post(CMS, &configmap("owner", json!({})));
        let mut dependent = configmap("dependent", json!({}));
        dependent["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
            "uid": owner.body["metadata"]["uid"]
        }]);
        assert_eq!(h.post(CMS, &dependent).code, 201);
        let body = json!({"propagationPolicy": policy}).to_string();
        assert_eq!(
            h.call("DELETE", &format!("{CMS}/owner"), &[], &body).code,
            200
        );
        let left = h.get(&format!("{CMS}/dependent"));
        match policy {
            "Background" => assert_eq!(left.code, 404, "collected"),
            _ => {
                assert_eq!(left.code, 200, "orphaned");
                assert!(
                    left.body["metadata"]
                        .get("ownerReferences")
                        .is_none_or(|r| r.as_array().is_none_or(Vec::is_empty))
                );
                h.call("DELETE", &format!("{CMS}/dependent"), &[], "");
            }
        }
    }
    let refused = h.call(
        "DELETE",
        &format!("{CMS}/x?propagationPolicy=Sideways"),
        &[],
        "",
    );
    assert_eq!(refused.code, 422);
}

/// A streaming list: `sendInitialEvents=true` sends the current objects
/// as ADDED, then a bookmark annotated `k8s.io/initial-events-end`
/// (API concepts, streaming lists).
#[test]
fn a_watch_with_initial_events_ends_them_with_a_bookmark() {
    let h = serve();
    h.post(CMS, &configmap("a", json!({})));
    h.post(CMS, &configmap("b", json!({})));
    let events = h.watch(
        &format!("{CMS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"),
        3,
        Duration::from_secs(5),
        || {},
    );
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(kinds, ["ADDED", "ADDED", "BOOKMARK"]);
    assert_eq!(
        events[2]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    let refused = h.get(&format!("{CMS}?watch=1&sendInitialEvents=true"));
    assert_eq!(refused.code, 422);
}

/// NodeOverlays (`karpenter.sh/v1alpha1`, beside v1 in one group) and
/// CapacityBuffers (namespaced, `autoscaling.x-k8s.io/v1beta1`) are served:
/// `kubectl get nodeoverlays,capacitybuffers -A` lists them, admission
/// rejects what their CRDs reject, and their Tables have the CRDs' columns.
#[test]
fn nodeoverlays_and_capacitybuffers_are_served() {
    let h = serve();
    let group = h.get("/apis/karpenter.sh");
    let versions: Vec<&str> = group.body["versions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["version"].as_str())
        .collect();
    assert_eq!(versions, ["v1", "v1alpha1"]);
    assert_eq!(group.body["preferredVersion"]["version"], "v1");
    let overlay = json!({"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
        "metadata": {"name": "half"},
        "spec": {"weight": 10, "priceAdjustment": "-50%", "requirements": [
            {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m6i"]}]}});
    assert_eq!(
        h.post("/apis/karpenter.sh/v1alpha1/nodeoverlays", &overlay)
            .code,
        201
    );
    let mut both = overlay.clone();
    both["metadata"]["name"] = json!("both");
    both["spec"]["price"] = json!("1");
    let refused = h.post("/apis/karpenter.sh/v1alpha1/nodeoverlays", &both);
    assert_eq!(refused.code, 422, "{}", refused.body);
    let list = h.get("/apis/karpenter.sh/v1alpha1/nodeoverlays");
    assert_eq!(list.body["items"].as_array().unwrap().len(), 1);
    let buffer = json!({"apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
        "metadata": {"name": "warm", "namespace": "default"},
        "spec": {"podTemplateRef": {"name": "t"}, "replicas": 2}});
    let created = h.post(
        "/apis/autoscaling.x-k8s.io/v1beta1/namespaces/default/capacitybuffers",
        &buffer,
    );
    assert_eq!(created.code, 201, "{}", created.body);
    let all = h.get("/apis/autoscaling.x-k8s.io/v1beta1/capacitybuffers");
    assert_eq!(all.body["items"][0]["metadata"]["namespace"], "default");
    let table = h.call(
        "GET",
        "/apis/autoscaling.x-k8s.io/v1beta1/namespaces/default/capacitybuffers",
        &[("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")],
        "",
    );
    let columns: Vec<&str> = table.body["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert!(
        columns.contains(&"Strategy") && columns.contains(&"Replicas"),
        "{columns:?}"
    );
}

/// storage.k8s.io/v1 VolumeAttachments (what termination waits for, and
/// what the simulated attach-detach controller writes): discovery with the
/// status subresource, create, get, list by node, watch, the API server's
/// printer columns, and delete.
#[test]
fn volumeattachments_are_served() {
    let h = serve();
    let storage = h.get("/apis/storage.k8s.io/v1");
    let resources = storage.body["resources"].as_array().unwrap();
    let va = resources
        .iter()
        .find(|r| r["name"] == "volumeattachments")
        .expect("volumeattachments in discovery");
    assert_eq!(va["kind"], "VolumeAttachment");
    assert_eq!(va["namespaced"], false);
    let verbs: Vec<&str> = va["verbs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for v in ["create", "delete", "get", "list", "watch"] {
        assert!(verbs.contains(&v), "{v} in {verbs:?}");
    }
    assert!(
        resources
            .iter()
            .any(|r| r["name"] == "volumeattachments/status")
    );
    const VAS: &str = "/apis/storage.k8s.io/v1/volumeattachments";
    let attachment = |name: &str, node: &str| {
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
            "metadata": {"name": name},
            "spec": {"attacher": "ebs.csi.aws.com", "nodeName": node,
                "source": {"persistentVolumeName": format!("pv-{name}")}},
            "status": {"attached": true}})
    };
    let events = h.watch(
        &format!("{VAS}?watch=true"),
        2,
        Duration::from_secs(5),
        || {
            let created = h.post(VAS, &attachment("csi-a", "n1"));
            assert_eq!(created.code, 201, "{}", created.body);
            assert_eq!(
                created.body["status"],
                Value::Null,
                "status is reset on create"
            );
            assert_eq!(h.post(VAS, &attachment("csi-b", "n2")).code, 201);
        },
    );
    let watched: Vec<(&str, &str)> = events
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap(),
                e["object"]["metadata"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(watched, [("ADDED", "csi-a"), ("ADDED", "csi-b")]);
    let one = h.get(&format!("{VAS}/csi-a"));
    assert_eq!(one.body["spec"]["nodeName"], "n1");
    let table = h.call(
        "GET",
        VAS,
        &[("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")],
        "",
    );
    let columns: Vec<&str> = table.body["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(
        columns,
        ["Name", "Attacher", "PV", "Node", "Attached", "Age"]
    );
    assert_eq!(table.body["rows"][0]["cells"][2], "pv-csi-a");
    assert_eq!(h.call("DELETE", &format!("{VAS}/csi-a"), &[], "").code, 200);
    assert_eq!(h.get(&format!("{VAS}/csi-a")).code, 404);
    let left = h.get(VAS);
    assert_eq!(left.body["items"].as_array().unwrap().len(), 1);
}
